/* udpgen: UDP/IPv4 frames from userspace into one interface, either as a flood (as fast as one
 * core can) or paced and stamped like Sluice's sluice-nf-gen, for the zero-loss and latency trials.
 *
 * The stand-in for the kernel's pktgen (not built into this kernel: CONFIG_NET_PKTGEN is not set)
 * in bench/peer_linux.py, which compiles this file with the system cc at bench time:
 *   cc -O2 -I nfs -o udpgen bench/udpgen.c       (nfs/common/: stamp.h, tsc.h, pktparse.h; no DPDK)
 *
 * Flood (run.py's scenario 1):
 *   udpgen IFNAME DST_MAC SRC_MAC SRC_IP DST_IP FRAME_BYTES [SECONDS]
 * Runs SECONDS (0 or absent: until SIGINT/SIGTERM), then prints "sent N errors E" to stdout.
 *
 * Paced (scenarios 2 and 3):
 *   udpgen --rate PPS --count N [--warmup SECS] [--gen-id ID] [--burst B] [--tsc-hz HZ]
 *          IFNAME DST_MAC SRC_MAC SRC_IP DST_IP FRAME_BYTES [SECONDS]
 * Sends at PPS (token bucket on the TSC, nfs/common/tsc.h; 0 = as fast as possible) for SECS
 * seconds of warm-up under generator id ID + 1 (sequence from 0), then exactly N counted packets
 * under ID (sequence 0 .. N-1), then prints one JSON line and exits (SECONDS, if not 0, caps the
 * whole run: a safety net). Every packet carries the 24-byte stamp of nfs/common/stamp.h {"SLST",
 * gen id, seq, TSC at send}: the same bytes as sluice-nf-gen's (gen_write_pkt), except that the
 * Ethernet addresses, the IPv4 addresses and the UDP ports are the ones of the flood mode (the
 * Linux chain routes by IP: the frame must be addressed to the first NF's veth). FRAME_BYTES must
 * be >= 66 (the stamp).
 * JSON: {"sent": counted packets handed to the interface, "warmup_sent", "first_hop_drops":
 * counted packets the first hop refused (veth: the receiving CPU's backlog was full; they count
 * as sent, i.e. offered and lost), "counted_ns": TSC time from the first to the last counted
 * packet's stamp, "sent_pps": (sent - 1) / counted_ns, "tsc_hz", "rate_pps", "burst", "gen_id",
 * "stopped": true if a signal or SECONDS ended the run before N}.
 *
 * Pacing: the token bucket starts with one packet's credit (no initial burst) and is refilled once
 * per send call; whatever it grants (at most --burst, default 32, and at most 64 per sendmmsg)
 * goes out in one sendmmsg, each frame stamped just before; so after the generator lost its core
 * for a while it catches up with at most --burst frames at once. With no token, the generator spins on the TSC when the next token is less than 100 us
 * away and sleeps (clock_nanosleep, 1 ns timer slack) up to 50 us before it otherwise, so at low
 * rates it leaves core 0 to the sink and others; above ~10 kpps it spins, and uses its core fully.
 *
 * Both modes: AF_PACKET raw socket with PACKET_QDISC_BYPASS (straight to the driver's xmit, no
 * qdisc), sendmmsg(). FRAME_BYTES is the L2 frame without FCS (60 .. 1514); the frames cycle
 * through 1024 (source port, destination port) pairs so flow hashing sees many flows. IPv4 header
 * checksum is valid (the forwarding kernel checks it), UDP checksum 0 (none).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/stamp.h"
#include "common/tsc.h"

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

static uint16_t sport(int i) { return (uint16_t)(10000 + (i & 31)); }
static uint16_t dport(int i) { return (uint16_t)(20000 + (i >> 5)); }

static uint8_t frames[NFRAMES][1514];
static struct mmsghdr msgs[NFRAMES];
static struct iovec iov[NFRAMES];

/* The flood mode's frames, as before. */
static void build_flood(int len, const uint8_t dmac[6], const uint8_t smac[6], struct in_addr sip,
                        struct in_addr dip)
{
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
        *(uint16_t *)(udp + 0) = htons(sport(i));
        *(uint16_t *)(udp + 2) = htons(dport(i));
        *(uint16_t *)(udp + 4) = htons((uint16_t)(iplen - 20));
        /* udp checksum 0: none */
    }
}

/* The paced mode's templates: sluice-nf-gen's packet (gen_write_pkt), re-addressed for the Linux
 * chain. Only the stamp changes per packet (stamp_write at GEN_HDR_LEN), so the header checksum
 * computed here stays valid. */
static void build_stamped(int len, const uint8_t dmac[6], const uint8_t smac[6], struct in_addr sip,
                          struct in_addr dip)
{
    for (int i = 0; i < NFRAMES; i++) {
        uint8_t *f = frames[i], *ip = f + PP_ETH_LEN, *udp = ip + 20;
        gen_write_pkt(f, (uint32_t)len, (uint32_t)i, 0, 0, 0);
        memcpy(f, dmac, 6);
        memcpy(f + 6, smac, 6);
        memcpy(ip + 12, &sip, 4); /* network order already */
        memcpy(ip + 16, &dip, 4);
        st_put16(ip + 10, 0);
        st_put16(ip + 10, ip4_csum(ip, 20));
        st_put16(udp, sport(i));
        st_put16(udp + 2, dport(i));
    }
}

static double secs_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static int flood(int fd, int len, double secs)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long long sent = 0, errors = 0;
    unsigned pos = 0, iter = 0;
    for (int i = 0; i < NFRAMES; i++)
        iov[i].iov_len = (size_t)len;
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
        if (secs > 0 && (++iter & 255) == 0 && secs_since(&t0) >= secs)
            break;
    }
    printf("sent %llu errors %llu\n", sent, errors);
    return 0;
}

struct paced_cfg {
    uint64_t rate, count, burst, hz;
    double warmup, secs;
    uint32_t gen_id;
};

/* Wait (spin or sleep) until about `cycles` TSC cycles from now. */
static void wait_cycles(uint64_t cycles, uint64_t hz)
{
    uint64_t ns = tsc_to_ns(cycles, hz);
    if (ns > 100000) {
        struct timespec d = {.tv_sec = (time_t)((ns - 50000) / 1000000000u),
                             .tv_nsec = (long)((ns - 50000) % 1000000000u)};
        nanosleep(&d, NULL);
        return;
    }
    uint64_t end = tsc_now() + cycles;
    while (tsc_now() < end && !stop)
        __builtin_ia32_pause();
}

static int paced(int fd, int len, const struct paced_cfg *c)
{
    struct tbucket tb;
    uint64_t hz = c->hz;
    uint64_t now = tsc_now(), t_start = now;
    uint64_t warm_end = now + (uint64_t)(c->warmup * (double)hz);
    uint64_t cap = c->secs > 0 ? (uint64_t)(c->secs * (double)hz) : 0;
    uint64_t warm_sent = 0, warm_seq = 0, sent = 0, drops = 0, errors = 0;
    uint64_t tsc_first = 0, tsc_last = 0;
    unsigned pos = 0, max_batch = c->burst < BATCH ? (unsigned)c->burst : BATCH;
    int warm = c->warmup > 0, stopped = 0;

    for (int i = 0; i < NFRAMES; i++)
        iov[i].iov_len = (size_t)len;
    tb_init(&tb, hz, c->rate, c->burst, now);
    tb.credit = hz; /* one packet now, then the rate: no initial burst of `burst` packets */
    while (sent < c->count) {
        if (stop || (cap && now - t_start >= cap)) {
            stopped = 1;
            break;
        }
        now = tsc_now();
        tb_refill(&tb, now);
        if (warm && now >= warm_end)
            warm = 0;
        unsigned n = 0, lim = max_batch;
        if (!warm && c->count - sent < lim)
            lim = (unsigned)(c->count - sent);
        if (pos + lim > NFRAMES)
            lim = NFRAMES - pos; /* one sendmmsg takes consecutive template frames */
        while (n < lim && tb_take(&tb))
            n++;
        if (n == 0) {
            /* credit missing for the next packet, in cycles: (hz - credit) / rate */
            uint64_t need = tb.credit < hz ? hz - tb.credit : 0;
            wait_cycles(need / (c->rate ? c->rate : 1) + 1, hz);
            continue;
        }
        for (unsigned k = 0; k < n; k++) {
            uint64_t t = tsc_now();
            if (warm) {
                stamp_write(frames[pos + k] + GEN_HDR_LEN, c->gen_id + 1, warm_seq + k, t);
            } else {
                if (sent + k == 0)
                    tsc_first = t;
                stamp_write(frames[pos + k] + GEN_HDR_LEN, c->gen_id, sent + k, t);
                tsc_last = t;
            }
        }
        /* A frame sendmmsg could not hand over is offered and lost (veth returns NET_XMIT_DROP
         * when the receiving backlog is full: -ENOBUFS); sendmmsg stops at it and reports
         * the ones before, so it is frame pos + r. It is not sent again. */
        unsigned done = 0;
        while (done < n) {
            int r = sendmmsg(fd, &msgs[pos + done], n - done, 0);
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                if (errno != ENOBUFS && errno != EAGAIN) {
                    perror("udpgen: sendmmsg");
                    stopped = 2;
                    break;
                }
                errors++;
                if (!warm)
                    drops++;
                r = 1; /* skip the refused frame */
            } else if ((unsigned)r < n - done) {
                r++; /* frame done + r was refused (its error is not reported) */
                if (!warm)
                    drops++;
                errors++;
            }
            done += (unsigned)r;
        }
        if (stopped == 2)
            break;
        if (warm) {
            warm_sent += n;
            warm_seq += n;
        } else {
            sent += n;
        }
        pos = (pos + n) % NFRAMES;
    }
    uint64_t counted_ns = sent > 1 ? tsc_to_ns(tsc_last - tsc_first, hz) : 0;
    printf("{\"sent\": %" PRIu64 ", \"warmup_sent\": %" PRIu64 ", \"first_hop_drops\": %" PRIu64
           ", \"errors\": %" PRIu64 ", \"counted_ns\": %" PRIu64 ", \"sent_pps\": %.1f, \"tsc_hz\": %" PRIu64
           ", \"rate_pps\": %" PRIu64 ", \"burst\": %" PRIu64 ", \"gen_id\": %u, \"count\": %" PRIu64
           ", \"stopped\": %s}\n",
           sent, warm_sent, drops, errors, counted_ns,
           counted_ns ? (double)(sent - 1) * 1e9 / (double)counted_ns : 0.0, hz, c->rate, c->burst, c->gen_id,
           c->count, stopped ? "true" : "false");
    fflush(stdout);
    return stopped == 2 ? 1 : 0;
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--rate PPS --count N [--warmup SECS] [--gen-id ID] [--burst B] [--tsc-hz HZ]]\n"
            "       IFNAME DST_MAC SRC_MAC SRC_IP DST_IP FRAME_BYTES [SECONDS]\n"
            "without --rate: flood; with it: paced, stamped (see the comment at the top of udpgen.c)\n",
            prog);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"rate", required_argument, NULL, 'r'},   {"count", required_argument, NULL, 'c'},
        {"warmup", required_argument, NULL, 'w'}, {"gen-id", required_argument, NULL, 'g'},
        {"burst", required_argument, NULL, 'b'},  {"tsc-hz", required_argument, NULL, 'z'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    struct paced_cfg pc = {.burst = 32};
    int is_paced = 0, o;
    char *end;
    while ((o = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (o) {
        case 'r':
            pc.rate = strtoull(optarg, &end, 10);
            is_paced = 1;
            break;
        case 'c':
            pc.count = strtoull(optarg, &end, 10);
            break;
        case 'w':
            pc.warmup = strtod(optarg, &end);
            break;
        case 'g':
            pc.gen_id = (uint32_t)strtoul(optarg, &end, 10);
            break;
        case 'b':
            pc.burst = strtoull(optarg, &end, 10);
            break;
        case 'z':
            pc.hz = strtoull(optarg, &end, 10);
            break;
        default:
            usage(argv[0]);
            return o == 'h' ? 0 : 2;
        }
        if (*end != '\0') {
            fprintf(stderr, "udpgen: bad number '%s'\n", optarg);
            return 2;
        }
    }
    argc -= optind - 1;
    argv += optind - 1;
    if (argc < 7) {
        usage(argv[0]);
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
    if (is_paced) {
        if (len < (int)STAMP_MIN_SIZE) {
            fprintf(stderr, "udpgen: FRAME_BYTES %d leaves no room for the %u-byte stamp (needs %u)\n", len,
                    STAMP_LEN, STAMP_MIN_SIZE);
            return 2;
        }
        if (pc.count == 0 || pc.burst < 1 || pc.burst > 65536 || pc.warmup < 0 || pc.gen_id == UINT32_MAX) {
            fprintf(stderr, "udpgen: paced mode needs --count >= 1, --burst 1..65536, --warmup >= 0, "
                            "--gen-id < 2^32 - 1\n");
            return 2;
        }
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

    for (int i = 0; i < NFRAMES; i++) {
        iov[i].iov_base = frames[i];
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    signal(SIGINT, on_sig);
    signal(SIGTERM, on_sig);
    if (!is_paced) {
        build_flood(len, dmac, smac, sip, dip);
        return flood(fd, len, secs);
    }
    build_stamped(len, dmac, smac, sip, dip);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    if (pc.hz == 0)
        pc.hz = tsc_calibrate(50);
    pc.secs = secs;
    return paced(fd, len, &pc);
}
