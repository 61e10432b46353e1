/* udpgen: flood one interface with UDP/IPv4 frames as fast as one core can, from userspace.
 *
 * The stand-in for the kernel's pktgen (not built into this kernel: CONFIG_NET_PKTGEN is not set)
 * in bench/peer_linux.py, which compiles this file with the system cc at bench time.
 *
 *   udpgen IFNAME DST_MAC SRC_MAC SRC_IP DST_IP FRAME_BYTES [SECONDS]
 *
 * AF_PACKET raw socket with PACKET_QDISC_BYPASS (straight to the driver's xmit, no qdisc),
 * sendmmsg() of 64 frames per call. FRAME_BYTES is the L2 frame without FCS (64 .. 1514); the
 * frames cycle through 1024 (source port, destination port) pairs so flow hashing sees many flows.
 * IPv4 header checksum is valid (the forwarding kernel checks it), UDP checksum 0 (none).
 * Runs SECONDS (0 or absent: until SIGINT/SIGTERM), then prints "sent N errors E" to stdout.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NFRAMES 1024
#define BATCH 64

static volatile sig_atomic_t stop;
static void on_sig(int s) { (void)s; stop = 1; }

static int parse_mac(const char *s, uint8_t m[6])
{
    unsigned v[6];
    if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
        return -1;
    for (int i = 0; i < 6; i++)
        m[i] = (uint8_t)v[i];
    return 0;
}

static uint16_t csum(const void *p, size_t n)
{
    const uint16_t *w = p;
    uint32_t s = 0;
    for (; n > 1; n -= 2)
        s += *w++;
    if (n)
        s += *(const uint8_t *)w;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s IFNAME DST_MAC SRC_MAC SRC_IP DST_IP FRAME_BYTES [SECONDS]\n", argv[0]);
        return 2;
    }
    uint8_t dmac[6], smac[6];
    struct in_addr sip, dip;
    int len = atoi(argv[6]);
    double secs = argc > 7 ? atof(argv[7]) : 0;
    if (parse_mac(argv[2], dmac) || parse_mac(argv[3], smac) || !inet_aton(argv[4], &sip) ||
        !inet_aton(argv[5], &dip) || len < 60 || len > 1514) {
        fprintf(stderr, "udpgen: bad arguments\n");
        return 2;
    }
    unsigned ifindex = if_nametoindex(argv[1]);
    if (!ifindex) {
        perror("udpgen: if_nametoindex");
        return 1;
    }
    int fd = socket(AF_PACKET, SOCK_RAW, 0); /* protocol 0: receives nothing */
    if (fd < 0) {
        perror("udpgen: socket(AF_PACKET)");
        return 1;
    }
    int one = 1;
    if (setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)) < 0)
        perror("udpgen: PACKET_QDISC_BYPASS (continuing through the qdisc)");
    int sndbuf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_ifindex = (int)ifindex, .sll_halen = 6};
    memcpy(sll.sll_addr, dmac, 6);
    if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
        perror("udpgen: bind");
        return 1;
    }

    static uint8_t frames[NFRAMES][1514];
    for (int i = 0; i < NFRAMES; i++) {
        uint8_t *f = frames[i];
        memset(f, 0, (size_t)len);
        memcpy(f, dmac, 6);
        memcpy(f + 6, smac, 6);
        f[12] = 0x08; /* IPv4 */
        f[13] = 0x00;
        uint8_t *ip = f + 14;
        uint16_t iplen = (uint16_t)(len - 14);
        ip[0] = 0x45;
        *(uint16_t *)(ip + 2) = htons(iplen);
        *(uint16_t *)(ip + 4) = htons((uint16_t)i);
        ip[8] = 64;  /* TTL */
        ip[9] = 17;  /* UDP */
        memcpy(ip + 12, &sip, 4);
        memcpy(ip + 16, &dip, 4);
        *(uint16_t *)(ip + 10) = csum(ip, 20);
        uint8_t *udp = ip + 20;
        *(uint16_t *)(udp + 0) = htons((uint16_t)(10000 + (i & 31)));
        *(uint16_t *)(udp + 2) = htons((uint16_t)(20000 + (i >> 5)));
        *(uint16_t *)(udp + 4) = htons((uint16_t)(iplen - 20));
        /* udp checksum 0: none */
    }
    static struct mmsghdr msgs[NFRAMES];
    static struct iovec iov[NFRAMES];
    for (int i = 0; i < NFRAMES; i++) {
        iov[i].iov_base = frames[i];
        iov[i].iov_len = (size_t)len;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }

    signal(SIGINT, on_sig);
    signal(SIGTERM, on_sig);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long long sent = 0, errors = 0;
    unsigned pos = 0, iter = 0;
    while (!stop) {
        int r = sendmmsg(fd, &msgs[pos], BATCH, 0);
        if (r > 0) {
            sent += (unsigned)r;
        } else if (r < 0) {
            errors++;
            if (errno != ENOBUFS && errno != EAGAIN && errno != EINTR) {
                perror("udpgen: sendmmsg");
                break;
            }
        }
        pos = (pos + BATCH) % NFRAMES;
        if (secs > 0 && (++iter & 255) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 >= secs)
                break;
        }
    }
    printf("sent %llu errors %llu\n", sent, errors);
    return 0;
}
