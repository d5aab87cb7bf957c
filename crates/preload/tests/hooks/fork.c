/* fork() in a program running libtcptail_preload while another thread is inside the library,
 * for the preload crate's hooks tests. The child must make its own TCP socket, with the
 * profile, instead of waiting forever for a lock the other thread held at the fork.
 *
 * Usage:
 *   fork config FIFO PROFILE  (TCPTAIL_PROFILE=FIFO): a thread's first socket() reads the
 *       profile from FIFO, and blocks there until this program writes it; the fork happens
 *       while it is blocked, and the child (TCPTAIL_PROFILE=PROFILE) makes a socket.
 *   fork stderr  (TCPTAIL_PROFILE set, TCPTAIL_LOG=1): a thread's socket() blocks writing its
 *       log line to a full stderr pipe; the fork happens while it is blocked, and the child
 *       (stderr /dev/null) makes a socket, which logs.
 * Prints "thread CC" and "child CC" (each socket's congestion control), or "child killed N"
 * when the child did not finish within its alarm. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) { perror(what); exit(1); }

static const char *cc_of(int fd) {
    static __thread char cc[32];
    socklen_t len = sizeof cc - 1;
    memset(cc, 0, sizeof cc);
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &len) < 0) die("TCP_CONGESTION");
    return cc;
}

static volatile pid_t thread_tid;
static int thread_fd = -1;

static void *make_socket(void *arg) {
    (void)arg;
    thread_tid = gettid();
    thread_fd = socket(AF_INET, SOCK_STREAM, 0);
    return NULL;
}

/* The child: one TCP socket, within 10 s (SIGALRM kills it otherwise). */
static pid_t fork_child(const char *profile, int stderr_fd) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid > 0) return pid;
    alarm(10);
    if (stderr_fd >= 0 && dup2(stderr_fd, 2) < 0) _exit(3);
    if (profile) setenv("TCPTAIL_PROFILE", profile, 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    dprintf(1, "child %s\n", cc_of(fd));
    _exit(0);
}

static void reap(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) < 0) die("waitpid");
    if (WIFSIGNALED(status)) printf("child killed %d\n", WTERMSIG(status));
    else if (WEXITSTATUS(status) != 0) printf("child exit %d\n", WEXITSTATUS(status));
}

/* Waits (up to 10 s) until the thread is blocked in write(2, ...), per /proc. */
static void wait_for_blocked_write(void) {
    char path[64], line[256];
    for (int i = 0; i < 10000; i++) {
        if (thread_tid) {
            snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)thread_tid);
            FILE *f = fopen(path, "r");
            if (f) {
                int blocked = fgets(line, sizeof line, f) && strncmp(line, "1 0x2 ", 6) == 0;
                fclose(f);
                if (blocked) return;
            }
        }
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
    }
    fprintf(stderr, "the thread never blocked writing to stderr\n");
    exit(1);
}

int main(int argc, char **argv) {
    pthread_t thread;
    if (argc == 4 && strcmp(argv[1], "config") == 0) {
        char profile[4096];
        FILE *f = fopen(argv[3], "r");
        size_t n = f ? fread(profile, 1, sizeof profile, f) : 0;
        if (!f || n == 0) die("read PROFILE");
        fclose(f);
        if (pthread_create(&thread, NULL, make_socket, NULL)) die("pthread_create");
        /* Returns once the thread opened the FIFO: it is inside the library's first socket(),
         * deciding the configuration. */
        int fifo = open(argv[2], O_WRONLY);
        if (fifo < 0) die("open FIFO");
        pid_t child = fork_child(argv[3], -1);
        if (write(fifo, profile, n) != (ssize_t)n) die("write FIFO");
        close(fifo);
        pthread_join(thread, NULL);
        printf("thread %s\n", cc_of(thread_fd));
        reap(child);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "stderr") == 0) {
        int devnull = open("/dev/null", O_WRONLY), saved = dup(2), p[2];
        if (devnull < 0 || saved < 0 || pipe(p) < 0) die("setup");
        /* The configuration is decided (and its socket logged) with stderr at /dev/null. */
        if (dup2(devnull, 2) < 0) die("dup2");
        int first = socket(AF_INET, SOCK_STREAM, 0);
        cc_of(first);
        /* stderr becomes a pipe nobody reads, filled to the last byte. */
        if (dup2(p[1], 2) < 0) die("dup2");
        fcntl(p[1], F_SETFL, O_NONBLOCK);
        char fill[4096];
        memset(fill, 'x', sizeof fill);
        while (write(p[1], fill, sizeof fill) > 0) {}
        while (write(p[1], fill, 1) > 0) {}
        fcntl(p[1], F_SETFL, 0);
        if (pthread_create(&thread, NULL, make_socket, NULL)) die("pthread_create");
        wait_for_blocked_write();
        pid_t child = fork_child(NULL, devnull);
        /* Unblock the thread: drain what it waits to add to. */
        static char drain[1 << 16];
        if (read(p[0], drain, sizeof drain) <= 0) die("drain");
        pthread_join(thread, NULL);
        dup2(saved, 2);
        printf("thread %s\n", cc_of(thread_fd));
        reap(child);
        return 0;
    }
    fprintf(stderr, "usage: fork config FIFO PROFILE | fork stderr\n");
    return 2;
}
