/* The receive paths a C program compiled with -O2 -D_FORTIFY_SOURCE=2 takes, for the
 * `tcptail run` tests: __recv_chk, __recvfrom_chk, __read_chk (what recv, recvfrom and read
 * become when the buffer's size is known but the length is not a compile-time constant),
 * readv and recvmmsg.
 *
 * Usage: receive_paths PORT ROUNDS
 * Prints "NAME COUNT" per path: how many of ROUNDS ping-pongs left TCP_QUICKACK reading 1
 * right after the receive (only a re-arm after each receive keeps it at ROUNDS), then
 * "errno NAME KEPT" per read-family path: 1 when a receive that returned bytes on a
 * descriptor the library tracks, but that is now a pipe (a raw dup3 system call over it,
 * which the library does not see, so its re-arm fails with ENOTSOCK), left errno as it was
 * before the call. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* From argv, so that the compiler cannot see the length and fortifies the calls. */
static size_t want;

static ssize_t via_recv_chk(int fd) { char b[16]; ssize_t n = recv(fd, b, want, 0); return n == 1 && b[0] == 'p' ? n : -2; }
static ssize_t via_recvfrom_chk(int fd) { char b[16]; ssize_t n = recvfrom(fd, b, want, 0, NULL, NULL); return n == 1 && b[0] == 'p' ? n : -2; }
static ssize_t via_read_chk(int fd) { char b[16]; ssize_t n = read(fd, b, want); return n == 1 && b[0] == 'p' ? n : -2; }
static ssize_t via_readv(int fd) {
    char b[16];
    struct iovec iov = { b, want };
    ssize_t n = readv(fd, &iov, 1);
    return n == 1 && b[0] == 'p' ? n : -2;
}
static ssize_t via_recvmmsg(int fd) {
    char b[16];
    struct iovec iov = { b, want };
    struct mmsghdr m;
    memset(&m, 0, sizeof m);
    m.msg_hdr.msg_iov = &iov;
    m.msg_hdr.msg_iovlen = 1;
    int n = recvmmsg(fd, &m, 1, 0, NULL);
    return n == 1 && m.msg_len == 1 && b[0] == 'p' ? 1 : -2;
}

struct path { const char *name; ssize_t (*receive)(int); };

static const struct path paths[] = {
    { "__recv_chk", via_recv_chk },
    { "__recvfrom_chk", via_recvfrom_chk },
    { "__read_chk", via_read_chk },
    { "readv", via_readv },
    { "recvmmsg", via_recvmmsg },
};

static int die(const char *what) { perror(what); exit(1); }

/* A descriptor the library tracks (a new TCP socket) turned into a pipe with one byte in it,
 * behind the library's back: its dup2/dup3 hooks would forget the socket. */
static int tracked_pipe(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0), p[2];
    if (s < 0 || pipe(p) < 0) die("socket/pipe");
    if (syscall(SYS_dup3, p[0], s, 0) < 0) die("dup3");
    close(p[0]);
    if (write(p[1], "p", 1) != 1) die("write pipe");
    close(p[1]);
    return s;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: receive_paths PORT ROUNDS\n"); return 2; }
    want = (size_t)argc - 2; /* 1, unknown to the compiler */
    int rounds = atoi(argv[2]);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        int on = 0;
        for (int i = 0; i < rounds; i++) {
            if (send(fd, "p", 1, 0) != 1) die("send");
            if (paths[p].receive(fd) != 1) { fprintf(stderr, "%s: bad receive\n", paths[p].name); return 1; }
            int q = 0;
            socklen_t len = sizeof q;
            if (getsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &q, &len) < 0) die("getsockopt");
            on += q != 0;
        }
        printf("%s %d\n", paths[p].name, on);
    }
    const char *errno_paths[] = { "__read_chk", "readv" };
    for (int p = 0; p < 2; p++) {
        int s = tracked_pipe();
        errno = EXDEV; /* a value no step of a successful read sets */
        ssize_t n = p == 0 ? via_read_chk(s) : via_readv(s);
        int kept = errno == EXDEV;
        if (n != 1) { fprintf(stderr, "%s on a pipe: %zd\n", errno_paths[p], n); return 1; }
        printf("errno %s %d\n", errno_paths[p], kept);
        close(s);
    }
    close(fd);
    return 0;
}
