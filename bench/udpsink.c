/* udpsink: the receiving end of udpgen's paced mode in the Linux peer (bench/peer_linux.py):
 * loss, reordering, duplicates and one-way latency of the stamped frames reaching one interface.
 *
 *   udpsink [--clock kernel|user] [--frames N] [--nap-us U] IFNAME
 *   cc -O2 -I nfs -o udpsink bench/udpsink.c  (nfs/common/: stamp.h, tsc.h, latency_hist.h; no DPDK)
 *
 * Receives with an AF_PACKET socket (protocol ETH_P_IP, bound to IFNAME) and a PACKET_RX_RING of
 * TPACKET_V2 frames: N frames (default 65536) of 256 bytes, so the kernel copies only the first
 * 190 bytes of each frame (tp_snaplen; the stamp sits at byte 42) and never allocates per packet.
 * It sees every frame the interface receives, including those the namespace's stack then drops at
 * ip_rcv (PACKET_OTHERHOST: the peer addresses them to a MAC the sink does not own, so the stack
 * does no further work). Frames the ring had no room for are counted by the kernel
 * (PACKET_STATISTICS tp_drops) and reported as ring_drops: a sink that fell behind, not the chain.
 *
 * Stamps: nfs/common/stamp.h (stamp_find; "SLST", gen id, seq, TSC at send), sequence tracking per
 * generator as sluice-nf-sink does (seq_record), latency histogram nfs/common/latency_hist.h, here
 * in nanoseconds. Only frames of the generator id given by `start` count; other stamped frames (the
 * warm-up under id + 1, stragglers of earlier trials) are counted as other_gen and ignored.
 *
 * Latency clocks (--clock):
 *   kernel (default): the frame's arrival is the kernel's receive timestamp in the ring frame
 *     (tp_sec/tp_nsec, CLOCK_REALTIME, taken in softirq when the frame reaches the tap -- or, if
 *     some socket on the host enabled software rx timestamps, when the last NF's veth transmit
 *     queued it to the sink namespace: frames stamped that way are counted as ts_prequeue). It is
 *     put on the generator's TSC scale through a (TSC, CLOCK_REALTIME) pair read, with the
 *     smallest bracket of 8 tries, each time the sink drains the ring: latency = (rx - real_a) -
 *     (stamp - tsc_a) / hz, both terms at most a few ms long, so a ppm error of hz is a few ns. So
 *     the figure does not include how late the sink itself got to run (it shares core 0 with the
 *     generator).
 *   user: the TSC when the sink drained the ring (as sluice-nf-sink: one read per drain). Includes
 *     the sink's wake-up and nap delays; for comparison only.
 * A stamp later than its arrival (clock_skew) is counted, not recorded.
 *
 * Process model: long-lived, driven by one-line commands on stdin, answering one JSON line each
 * on stdout (first line at start: {"reply": "ready", ...}):
 *   start ID                       reset every counter; from now on count generator ID
 *   drain EXPECTED IDLE_MS MAX_MS  answer (with the stats) once EXPECTED distinct packets of ID
 *                                  arrived, or none arrived for IDLE_MS, or MAX_MS passed
 *   stats                          the stats now
 *   quit (or end of input)         exit
 * Stats: {"reply": "stats", "id", "received" (frames of ID, duplicates included), "unique",
 * "reordered", "duplicates", "max_seq", "seq_lost", "other_gen", "unstamped", "clock_skew",
 * "ring_drops", "ts_prequeue", "clock", "latency_ns": {"samples", "min", "mean", "p50", "p90",
 * "p99", "p999", "max"} or null, "histogram": [[inclusive upper bound ns, count], ...] (non-empty
 * buckets), "waited_ms"}.
 *
 * Scheduling: after a drain that found frames it naps --nap-us (default 500) before looking again,
 * so at any rate it wakes at most ~2000 times a second and takes little of its core (it is pinned
 * with the generator); with nothing arriving it blocks in poll(). The ring holds 65536 frames,
 * ~30 ms at 2 Mpps: the sink keeps up as long as it gets its core every few ms.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/latency_hist.h"
#include "common/stamp.h"
#include "common/tsc.h"

#define FRAME_SIZE 256u
#define BLOCK_SIZE (1u << 16)

struct sink {
    /* ring */
    int fd;
    uint8_t *ring;
    unsigned nframes, idx;
    /* clocks */
    uint64_t hz;
    int user_clock;
    uint64_t a_tsc;     /* anchor: TSC ... */
    int64_t a_real;     /* ... and CLOCK_REALTIME ns read at the same moment */
    /* the trial */
    uint32_t id;
    int active;
    struct seq_track t;
    struct lat_hist h;
    uint64_t other_gen, unstamped, clock_skew, ring_drops, ts_prequeue;
    uint64_t last_rx_tsc; /* sink's TSC when the last frame of id was drained */
};

static int64_t real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A (TSC, CLOCK_REALTIME) pair with the smallest TSC bracket of 8 tries (as tsc_pair). */
static void anchor(struct sink *s)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 8; i++) {
        uint64_t a = tsc_now();
        int64_t r = real_ns();
        uint64_t b = tsc_now();
        if (b - a < best) {
            best = b - a;
            s->a_tsc = a + (b - a) / 2;
            s->a_real = r;
        }
    }
}

static void reset(struct sink *s, uint32_t id)
{
    struct tpacket_stats st;
    socklen_t sl = sizeof(st);
    getsockopt(s->fd, SOL_PACKET, PACKET_STATISTICS, &st, &sl); /* reading resets the kernel's */
    s->id = id;
    s->active = 1;
    seq_init(&s->t);
    lh_init(&s->h);
    s->other_gen = s->unstamped = s->clock_skew = s->ring_drops = s->ts_prequeue = 0;
    s->last_rx_tsc = tsc_now();
}

static void record(struct sink *s, const struct tpacket2_hdr *hd, const uint8_t *pkt, uint64_t now)
{
    struct stamp st;
    if (!stamp_find(pkt, hd->tp_snaplen, &st)) {
        s->unstamped++;
        return;
    }
    if (!s->active || st.gen_id != s->id) {
        s->other_gen++;
        return;
    }
    seq_record(&s->t, st.seq);
    s->last_rx_tsc = now;
    int64_t lat;
    if (s->user_clock) {
        lat = now >= st.tsc ? (int64_t)tsc_to_ns(now - st.tsc, s->hz) : -1;
    } else {
        if (hd->tp_status & TP_STATUS_TS_SOFTWARE)
            s->ts_prequeue++;
        int64_t rx = (int64_t)hd->tp_sec * 1000000000 + hd->tp_nsec;
        double dstamp = (double)(int64_t)(st.tsc - s->a_tsc) * 1e9 / (double)s->hz;
        lat = (rx - s->a_real) - (int64_t)(dstamp < 0 ? dstamp - 0.5 : dstamp + 0.5);
    }
    if (lat < 0)
        s->clock_skew++;
    else
        lh_record(&s->h, (uint64_t)lat);
}

/* Everything the kernel has handed to the ring so far; returns the number of frames. */
static unsigned drain_ring(struct sink *s)
{
    unsigned n = 0;
    anchor(s);
    uint64_t now = s->a_tsc;
    for (;;) {
        struct tpacket2_hdr *hd = (struct tpacket2_hdr *)(s->ring + (size_t)s->idx * FRAME_SIZE);
        if (!(__atomic_load_n(&hd->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
            break;
        const struct sockaddr_ll *ll =
            (const struct sockaddr_ll *)((uint8_t *)hd + TPACKET_ALIGN(sizeof(struct tpacket2_hdr)));
        if (ll->sll_pkttype != PACKET_OUTGOING)
            record(s, hd, (uint8_t *)hd + hd->tp_mac, now);
        __atomic_store_n(&hd->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        if (++s->idx == s->nframes)
            s->idx = 0;
        n++;
    }
    return n;
}

static void print_stats(struct sink *s, double waited_ms)
{
    struct tpacket_stats st;
    socklen_t sl = sizeof(st);
    if (getsockopt(s->fd, SOL_PACKET, PACKET_STATISTICS, &st, &sl) == 0)
        s->ring_drops += st.tp_drops;
    const struct lat_hist *h = &s->h;
    uint64_t unique = s->t.received - s->t.duplicates;
    printf("{\"reply\": \"stats\", \"id\": %u, \"received\": %" PRIu64 ", \"unique\": %" PRIu64
           ", \"reordered\": %" PRIu64 ", \"duplicates\": %" PRIu64 ", \"max_seq\": %" PRIu64
           ", \"seq_lost\": %" PRIu64 ", \"other_gen\": %" PRIu64 ", \"unstamped\": %" PRIu64
           ", \"clock_skew\": %" PRIu64 ", \"ring_drops\": %" PRIu64 ", \"ts_prequeue\": %" PRIu64
           ", \"clock\": \"%s\", \"waited_ms\": %.1f, ",
           s->id, s->t.received, unique, s->t.reordered, s->t.duplicates, s->t.max_seq, seq_lost(&s->t),
           s->other_gen, s->unstamped, s->clock_skew, s->ring_drops, s->ts_prequeue,
           s->user_clock ? "user" : "kernel", waited_ms);
    if (h->count == 0)
        fputs("\"latency_ns\": null, ", stdout);
    else
        printf("\"latency_ns\": {\"samples\": %" PRIu64 ", \"min\": %" PRIu64 ", \"mean\": %.1f, \"p50\": %" PRIu64
               ", \"p90\": %" PRIu64 ", \"p99\": %" PRIu64 ", \"p999\": %" PRIu64 ", \"max\": %" PRIu64 "}, ",
               h->count, h->min, lh_mean(h), lh_quantile(h, 0.5), lh_quantile(h, 0.9), lh_quantile(h, 0.99),
               lh_quantile(h, 0.999), h->max);
    fputs("\"histogram\": [", stdout);
    int first = 1;
    for (unsigned i = 0; i < LH_BUCKETS; i++) {
        if (h->b[i] == 0)
            continue;
        printf("%s[%" PRIu64 ", %" PRIu64 "]", first ? "" : ", ", lh_upper(i), h->b[i]);
        first = 0;
    }
    fputs("]}\n", stdout);
    fflush(stdout);
}

static int setup(struct sink *s, const char *ifname, unsigned nframes)
{
    unsigned ifindex = if_nametoindex(ifname);
    if (!ifindex) {
        perror("udpsink: if_nametoindex");
        return -1;
    }
    /* protocol 0 until the ring is in place: nothing is queued to a socket without one */
    s->fd = socket(AF_PACKET, SOCK_RAW, 0);
    if (s->fd < 0) {
        perror("udpsink: socket(AF_PACKET)");
        return -1;
    }
    int v = TPACKET_V2;
    if (setsockopt(s->fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)) < 0) {
        perror("udpsink: PACKET_VERSION");
        return -1;
    }
    unsigned per_block = BLOCK_SIZE / FRAME_SIZE;
    struct tpacket_req req = {.tp_block_size = BLOCK_SIZE, .tp_frame_size = FRAME_SIZE,
                              .tp_block_nr = (nframes + per_block - 1) / per_block};
    req.tp_frame_nr = req.tp_block_nr * per_block;
    if (setsockopt(s->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) {
        perror("udpsink: PACKET_RX_RING");
        return -1;
    }
    s->nframes = req.tp_frame_nr;
    size_t sz = (size_t)req.tp_block_size * req.tp_block_nr;
    s->ring = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, s->fd, 0);
    if (s->ring == MAP_FAILED) {
        perror("udpsink: mmap");
        return -1;
    }
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP),
                              .sll_ifindex = (int)ifindex};
    if (bind(s->fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
        perror("udpsink: bind");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"clock", required_argument, NULL, 'c'}, {"frames", required_argument, NULL, 'f'},
        {"nap-us", required_argument, NULL, 'n'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    static struct sink s; /* the histogram and the window: ~8.5 KiB */
    unsigned nframes = 65536, nap_us = 500;
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'c':
            if (strcmp(optarg, "kernel") == 0)
                s.user_clock = 0;
            else if (strcmp(optarg, "user") == 0)
                s.user_clock = 1;
            else {
                fprintf(stderr, "udpsink: --clock kernel|user\n");
                return 2;
            }
            break;
        case 'f':
            nframes = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'n':
            nap_us = (unsigned)strtoul(optarg, NULL, 10);
            break;
        default:
            fprintf(stderr, "usage: %s [--clock kernel|user] [--frames N] [--nap-us U] IFNAME\n", argv[0]);
            return o == 'h' ? 0 : 2;
        }
    }
    if (optind + 1 != argc || nframes < 256 || nap_us > 100000) {
        fprintf(stderr, "usage: %s [--clock kernel|user] [--frames N>=256] [--nap-us U<=100000] IFNAME\n", argv[0]);
        return 2;
    }
    if (setup(&s, argv[optind], nframes) < 0)
        return 1;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    s.hz = tsc_calibrate(50);
    seq_init(&s.t);
    lh_init(&s.h);
    printf("{\"reply\": \"ready\", \"tsc_hz\": %" PRIu64 ", \"frames\": %u, \"frame_size\": %u, \"clock\": \"%s\"}\n",
           s.hz, s.nframes, FRAME_SIZE, s.user_clock ? "user" : "kernel");
    fflush(stdout);

    char line[256];
    size_t ll = 0;
    int draining = 0, eof = 0;
    uint64_t expect = 0, idle_cyc = 0, max_cyc = 0, drain_t0 = 0;
    while (!eof) {
        unsigned got = drain_ring(&s);
        /* commands */
        struct pollfd pin = {.fd = 0, .events = POLLIN};
        while (poll(&pin, 1, 0) > 0) {
            ssize_t r = read(0, line + ll, sizeof(line) - 1 - ll);
            if (r == 0) {
                eof = 1;
                break;
            }
            if (r < 0) {
                if (errno != EAGAIN && errno != EINTR)
                    eof = 1;
                break;
            }
            ll += (size_t)r;
            char *nl;
            while ((nl = memchr(line, '\n', ll)) != NULL) {
                *nl = '\0';
                unsigned long a;
                unsigned long long e, idle, mx;
                if (sscanf(line, "start %lu", &a) == 1) {
                    reset(&s, (uint32_t)a);
                    draining = 0;
                    printf("{\"reply\": \"start\", \"id\": %lu}\n", a);
                    fflush(stdout);
                } else if (sscanf(line, "drain %llu %llu %llu", &e, &idle, &mx) == 3) {
                    draining = 1;
                    expect = e;
                    idle_cyc = idle * s.hz / 1000;
                    max_cyc = mx * s.hz / 1000;
                    drain_t0 = tsc_now();
                } else if (strcmp(line, "stats") == 0) {
                    print_stats(&s, 0);
                } else if (strcmp(line, "quit") == 0) {
                    eof = 1;
                } else if (line[0] != '\0') {
                    printf("{\"reply\": \"error\", \"line\": \"%.64s\"}\n", line);
                    fflush(stdout);
                }
                size_t used = (size_t)(nl - line) + 1;
                memmove(line, nl + 1, ll - used);
                ll -= used;
            }
            if (ll == sizeof(line) - 1)
                ll = 0; /* an absurdly long line: drop it */
        }
        if (eof)
            break;
        if (draining) {
            uint64_t now = tsc_now();
            if (s.t.received - s.t.duplicates >= expect || now - s.last_rx_tsc >= idle_cyc ||
                now - drain_t0 >= max_cyc) {
                print_stats(&s, (double)tsc_to_ns(now - drain_t0, s.hz) / 1e6);
                draining = 0;
            }
        }
        if (got != 0) {
            struct timespec d = {.tv_sec = 0, .tv_nsec = (long)nap_us * 1000};
            nanosleep(&d, NULL);
        } else {
            struct pollfd pf[2] = {{.fd = 0, .events = POLLIN}, {.fd = s.fd, .events = POLLIN}};
            poll(pf, 2, draining ? 5 : 1000);
        }
    }
    return 0;
}
