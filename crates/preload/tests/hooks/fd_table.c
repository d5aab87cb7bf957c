/* The fd table of libtcptail_preload after dup, dup2, dup3, close_range and closefrom, for
 * the preload crate's hooks tests. Run with the library preloaded and a profile of reno,
 * NODELAY and QUICKACK re-armed after every receive.
 *
 * Usage: fd_table ROUNDS
 * Prints, per case, "NAME COUNT" (how many of ROUNDS ping-pongs on the descriptor left
 * TCP_QUICKACK reading 1 right after the receive: ROUNDS only when the library re-arms it, so
 * only when its table knows the descriptor) or "NAME CC" (the congestion control a socket
 * got at connect: reno only when the library applied the profile, which it skips for a
 * descriptor its table says already has it). Sockets the library must not see are made and
 * moved with raw system calls. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static int rounds, listener;
static struct sockaddr_in addr;

static void die(const char *what) { perror(what); exit(1); }

/* A loopback connection made through the library's hooks; returns the client end and stores
 * the accepted end in *server. */
static int tracked_pair(int *server) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
    if ((*server = accept(listener, NULL, NULL)) < 0) die("accept");
    return c;
}

/* The same, with a client the library never sees (raw socket and connect system calls). */
static int untracked_pair(int *server) {
    int c = syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
    if (c < 0 || syscall(SYS_connect, c, &addr, sizeof addr) < 0) die("raw connect");
    if ((*server = accept(listener, NULL, NULL)) < 0) die("accept");
    return c;
}

/* Ping-pongs on (client, server); counts the rounds TCP_QUICKACK read 1 after the receive. */
static int quickack_rounds(int client, int server) {
    int on = 0;
    char b;
    for (int i = 0; i < rounds; i++) {
        if (send(client, "p", 1, 0) != 1 || recv(server, &b, 1, 0) != 1) die("ping");
        if (send(server, "p", 1, 0) != 1 || recv(client, &b, 1, 0) != 1) die("pong");
        int q = 0;
        socklen_t len = sizeof q;
        if (getsockopt(client, IPPROTO_TCP, TCP_QUICKACK, &q, &len) < 0) die("getsockopt");
        on += q != 0;
    }
    return on;
}

/* Connects `fd` (through the library's connect hook) and returns its congestion control. */
static const char *connect_cc(int fd) {
    static char cc[32];
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
    int s = accept(listener, NULL, NULL);
    if (s < 0) die("accept");
    close(s);
    socklen_t len = sizeof cc - 1;
    memset(cc, 0, sizeof cc);
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &len) < 0) die("TCP_CONGESTION");
    return cc;
}

/* A socket the library never saw, moved onto `fd` behind its back (raw dup3). */
static void raw_socket_onto(int fd) {
    int r = syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
    if (r < 0) die("raw socket");
    if (r == fd) return; /* the kernel reused the lowest free number: already there */
    if (syscall(SYS_dup3, r, fd, 0) < 0 || syscall(SYS_close, r) < 0) die("raw dup3");
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: fd_table ROUNDS\n"); return 2; }
    rounds = atoi(argv[1]);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof addr;
    listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) < 0 ||
        listen(listener, 16) < 0 || getsockname(listener, (struct sockaddr *)&addr, &alen) < 0)
        die("listen");
    int server, c;

    /* The measure itself: a tracked socket re-arms every round, an untracked one does not. */
    c = tracked_pair(&server);
    printf("direct %d\n", quickack_rounds(c, server));
    close(c); close(server);
    c = untracked_pair(&server);
    printf("untracked %d\n", quickack_rounds(c, server));
    close(c); close(server);

    /* Copies of a tracked socket, the original closed: the copy is the same socket. */
    c = tracked_pair(&server);
    int d = dup(c);
    close(c);
    printf("dup %d\n", quickack_rounds(d, server));
    close(d); close(server);

    c = tracked_pair(&server);
    if (dup2(c, 200) != 200) die("dup2");
    close(c);
    printf("dup2 %d\n", quickack_rounds(200, server));
    close(200); close(server);

    c = tracked_pair(&server);
    if (dup3(c, 201, O_CLOEXEC) != 201) die("dup3");
    close(c);
    printf("dup3 %d\n", quickack_rounds(201, server));
    close(201); close(server);

    /* close_range that only sets close-on-exec closes nothing: still tracked. */
    c = tracked_pair(&server);
    if (close_range(c, c, CLOSE_RANGE_CLOEXEC) < 0) die("close_range cloexec");
    printf("cloexec %d\n", quickack_rounds(c, server));
    close(c); close(server);

    /* A tracked number replaced by dup2 with a socket the library never saw: connect must
     * apply the profile to it. */
    int t = socket(AF_INET, SOCK_STREAM, 0);
    int r = syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
    if (t < 0 || r < 0 || dup2(r, t) != t) die("dup2 over tracked");
    syscall(SYS_close, r);
    printf("dup2-over-tracked %s\n", connect_cc(t));
    close(t);

    /* A tracked number closed by close_range, then reused behind the library's back. */
    t = socket(AF_INET, SOCK_STREAM, 0);
    if (t < 0 || close_range(t, t, 0) < 0) die("close_range");
    raw_socket_onto(t);
    printf("close_range %s\n", connect_cc(t));
    close(t);

    /* The same with closefrom, on a number above every other descriptor of the program. */
    t = socket(AF_INET, SOCK_STREAM, 0);
    if (t < 0 || dup2(t, 500) != 500) die("dup2 to 500");
    close(t);
    closefrom(500);
    raw_socket_onto(500);
    printf("closefrom %s\n", connect_cc(500));
    close(500);
    return 0;
}
