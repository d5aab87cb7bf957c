/* Makes COUNT TCP sockets and prints what the kernel says of each, for the preload crate's
 * hooks tests (setuid and panic cases): "at_secure N" (getauxval(AT_SECURE): 1 in a setuid
 * program run by someone else) then "cc NAME" per socket (reno only when the library applied
 * the test profile).
 *
 * Usage: sockets COUNT */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: sockets COUNT\n"); return 2; }
    printf("at_secure %lu\n", getauxval(AT_SECURE));
    for (int i = 0; i < atoi(argv[1]); i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        char cc[32] = { 0 };
        socklen_t len = sizeof cc - 1;
        if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &len) < 0) {
            perror("socket");
            return 1;
        }
        printf("cc %s\n", cc);
    }
    return 0;
}
