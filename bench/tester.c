/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-bench-tester: the paced, timestamping generator + sink of the DPDK
 * peers in benchmark scenarios 2 (RFC 2544 zero-loss rate) and 3 (latency).
 *
 * A DPDK primary process with exactly one ethdev (given with --vdev: a
 * net_memif client of the testpmd switch, or a virtio_user port of OVS-DPDK)
 * and one lcore that does everything: it sends stamped UDP test packets,
 * paced by a TSC token bucket, and receives whatever comes back, tracking
 * sequence numbers and one-way latency. Packets and stamps are those of
 * sluice-nf-gen (nfs/common/stamp.h), pacing is gen's token bucket (nfs/common/tsc.h), the
 * histogram is sluice-nf-sink's (nfs/common/latency_hist.h), so Sluice's and the
 * peers' trials measure the same thing in the same units.
 *
 * Control: one command per line on stdin, one JSON line answer on stdout.
 *   trial RATE_PPS DURATION_S WARMUP_S
 *       WARMUP_S seconds at RATE_PPS under generator id 2k+1 (trial k, from 1;
 *       not counted), then exactly round(RATE_PPS x DURATION_S) packets under
 *       id 2k, sequence from 0, still at RATE_PPS (the bucket is not reset
 *       in between), then RX only until every counted packet is back, or
 *       nothing arrived for 200 ms, or 2 s passed. Only id 2k counts, so
 *       warm-up packets and stragglers of earlier trials never do.
 *   stats    the port's counters (rte_eth_stats_get)
 *   quit     answer, stop the port, exit 0 (EOF on stdin does the same)
 * Errors are answered as {"error": "..."} and the tester stays up.
 * "tester: ready" is printed on stdout once the port is started and its link
 * is up; everything else outside the answers (EAL, PMD and the tester's own
 * messages) goes to stderr.
 *
 * TX: a batch is at most --burst packets, as many as the bucket holds tokens
 * for. Packets the port refuses (ring full) are retried until it takes them,
 * never dropped: `tx_full` counts the packets refused (once each, however
 * often they were retried), `tx_retries` the tx_burst calls that retried. While packets are pending
 * no new ones are made, so a port that pushes back lowers the achieved rate
 * (`sent_pps`) instead of losing packets in the tester. The stamp is written
 * when a packet is made, so a delay in the tester's TX counts as latency.
 * RX: bursts of 32, one TSC read per burst (as sluice-nf-sink).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "common/latency_hist.h"
#include "common/stamp.h"
#include "common/tsc.h"

#define PROG "sluice-bench-tester"
#define RX_BURST 32
#define MAX_BURST 256
#define RING_DESC 1024
#define LINK_WAIT_S 10
#define STRAGGLER_IDLE_MS 200
#define STRAGGLER_MAX_MS 2000
#define TX_STUCK_S 5 /* a port that accepts nothing for this long fails the trial */

struct cfg {
	uint32_t size, flows, burst, mbufs;
	uint32_t idle_us; /* 0: always poll; else sleep up to this long when there is nothing to do */
};

struct result {
	uint64_t count;                  /* counted packets to send */
	uint64_t sent, warm_sent;
	uint64_t tx_full, tx_retries, nombuf;
	uint64_t first_batch;            /* size of the first counted batch */
	uint64_t tsc_first, tsc_last;    /* stamps of the first and last counted batches */
	uint64_t other, warm_rx, unstamped, clock_skew, stale;
	uint64_t tsc_send_end, tsc_end;
	const char *error;
};

static volatile sig_atomic_t stop_req;
static uint16_t port;
static struct rte_mempool *pool;
static struct cfg cfg = { .size = STAMP_MIN_SIZE, .flows = 1024, .burst = 32, .mbufs = 16384, .idle_us = 0 };
static uint64_t hz;
static uint32_t trial_no;
static uint32_t flow; /* next flow: keeps cycling across trials */
static struct seq_track track;
static struct lat_hist hist;

static void on_signal(int sig)
{
	(void)sig;
	stop_req = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " EAL-OPTIONS (one --vdev) -- [OPTIONS]\n"
		"  --size B     frame size without FCS, %u..%u (default %u: the smallest with a stamp)\n"
		"  --flows F    cycle through F UDP flows, 1..%u (default 1024)\n"
		"  --burst N    token-bucket depth and largest TX burst, 1..%u (default 32)\n"
		"  --mbufs N    mbufs in the pool, 1024..1048576 (default 16384)\n"
		"  --idle-us N  0..1000: when nothing arrived and no packet is due, sleep until the\n"
		"               next one is due, at most N us (default 0: always poll)\n"
		"Commands on stdin, one JSON line answer each on stdout:\n"
		"  trial RATE_PPS DURATION_S WARMUP_S | stats | quit\n",
		STAMP_MIN_SIZE, GEN_MAX_SIZE, STAMP_MIN_SIZE, GEN_MAX_FLOWS, MAX_BURST);
}

static int parse_u32(const char *name, const char *arg, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(arg, &end, 10);
	if (arg[0] == '\0' || arg[0] == '-' || *end != '\0' || errno != 0 || v < lo || v > hi) {
		fprintf(stderr, PROG ": --%s '%s': expected an integer %u..%u\n", name, arg, lo, hi);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "flows", required_argument, NULL, 'f' },
		{ "burst", required_argument, NULL, 'b' },
		{ "mbufs", required_argument, NULL, 'm' },
		{ "idle-us", required_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int o;
	opterr = 0;
	optind = 1;
	while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		int rc = 0;
		switch (o) {
		case 's':
			rc = parse_u32("size", optarg, STAMP_MIN_SIZE, GEN_MAX_SIZE, &cfg.size);
			break;
		case 'f':
			rc = parse_u32("flows", optarg, 1, GEN_MAX_FLOWS, &cfg.flows);
			break;
		case 'b':
			rc = parse_u32("burst", optarg, 1, MAX_BURST, &cfg.burst);
			break;
		case 'm':
			rc = parse_u32("mbufs", optarg, 1024, 1u << 20, &cfg.mbufs);
			break;
		case 'i':
			rc = parse_u32("idle-us", optarg, 0, 1000, &cfg.idle_us);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case ':':
			fprintf(stderr, PROG ": option '%s' needs a value\n", argv[optind - 1]);
			return -1;
		default:
			fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", argv[optind - 1]);
			return -1;
		}
		if (rc < 0)
			return -1;
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s' (see --help)\n", argv[optind]);
		return -1;
	}
	return 0;
}

static int port_init(void)
{
	uint16_t n = 0, p;
	RTE_ETH_FOREACH_DEV(p) {
		port = p;
		n++;
	}
	if (n != 1) {
		fprintf(stderr, PROG ": expected exactly one ethdev (give one --vdev), found %u\n", n);
		return -1;
	}
	int sock = rte_eth_dev_socket_id(port);
	if (sock < 0)
		sock = (int)rte_socket_id();
	pool = rte_pktmbuf_pool_create("tester_pool", cfg.mbufs, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, sock);
	if (pool == NULL) {
		fprintf(stderr, PROG ": cannot create a pool of %u mbufs: %s (--mbufs, huge pages?)\n", cfg.mbufs,
			rte_strerror(rte_errno));
		return -1;
	}
	if (cfg.size + RTE_PKTMBUF_HEADROOM > (uint32_t)rte_pktmbuf_data_room_size(pool)) {
		fprintf(stderr, PROG ": --size %u does not fit one mbuf\n", cfg.size);
		return -1;
	}
	struct rte_eth_dev_info info;
	int rc = rte_eth_dev_info_get(port, &info);
	if (rc != 0) {
		fprintf(stderr, PROG ": port %u: dev_info_get: %s\n", port, rte_strerror(-rc));
		return -1;
	}
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	rc = rte_eth_dev_configure(port, 1, 1, &conf);
	if (rc != 0) {
		fprintf(stderr, PROG ": port %u (%s): configure: %s\n", port, info.driver_name, rte_strerror(-rc));
		return -1;
	}
	uint16_t nrx = RING_DESC, ntx = RING_DESC;
	rte_eth_dev_adjust_nb_rx_tx_desc(port, &nrx, &ntx);
	rc = rte_eth_rx_queue_setup(port, 0, nrx, (unsigned)sock, NULL, pool);
	if (rc == 0)
		rc = rte_eth_tx_queue_setup(port, 0, ntx, (unsigned)sock, NULL);
	if (rc != 0) {
		fprintf(stderr, PROG ": port %u (%s): queue setup: %s\n", port, info.driver_name, rte_strerror(-rc));
		return -1;
	}
	rc = rte_eth_dev_start(port);
	if (rc != 0) {
		fprintf(stderr, PROG ": port %u (%s): start: %s\n", port, info.driver_name, rte_strerror(-rc));
		return -1;
	}
	rte_eth_promiscuous_enable(port); /* not every vdev has it; nothing depends on it */
	struct rte_eth_link link;
	for (int i = 0; i < LINK_WAIT_S * 100 && !stop_req; i++) {
		memset(&link, 0, sizeof(link));
		if (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP) {
			fprintf(stderr, PROG ": port %u (%s) link up after %.2f s; size %u, flows %u, burst %u, "
				"mbufs %u, idle-us %u, rx/tx descriptors %u/%u\n", port, info.driver_name,
				i / 100.0, cfg.size, cfg.flows, cfg.burst, cfg.mbufs, cfg.idle_us, nrx, ntx);
			return 0;
		}
		usleep(10000);
	}
	fprintf(stderr, PROG ": port %u (%s): link still down after %d s (is the peer up and its socket path "
		"right?)\n", port, info.driver_name, LINK_WAIT_S);
	return -1;
}

/* Receive one burst; returns how many packets arrived. */
static unsigned rx_once(struct result *r, uint32_t gid)
{
	struct rte_mbuf *m[RX_BURST];
	uint16_t n = rte_eth_rx_burst(port, 0, m, RX_BURST);
	if (n == 0)
		return 0;
	uint64_t now = tsc_now(); /* one read per burst: it arrived as a whole */
	for (uint16_t i = 0; i < n; i++) {
		struct stamp s;
		if (!stamp_find(rte_pktmbuf_mtod(m[i], const uint8_t *), rte_pktmbuf_data_len(m[i]), &s)) {
			r->unstamped++;
			continue;
		}
		if (s.gen_id != gid) {
			if (s.gen_id == gid + 1)
				r->warm_rx++;
			else
				r->other++;
			continue;
		}
		seq_record(&track, s.seq);
		if (s.tsc > now)
			r->clock_skew++;
		else
			lh_record(&hist, now - s.tsc);
	}
	rte_pktmbuf_free_bulk(m, n);
	return n;
}

/* --idle-us: sleep `cycles` (capped at idle_us) instead of spinning, so the
 * processes sharing the core (the NFs) get it meanwhile; a sleeper that wakes
 * up preempts a spinning NF at once (CFS), so the tester stays punctual. */
static void idle_wait(uint64_t cycles)
{
	uint64_t ns = tsc_to_ns(cycles, hz), cap = (uint64_t)cfg.idle_us * 1000u;
	if (ns > cap)
		ns = cap;
	if (ns < 1000)
		return; /* not worth a system call */
	struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)ns };
	nanosleep(&ts, NULL);
}

static uint64_t unique_rx(void)
{
	return track.received - track.duplicates;
}

static void run_trial(double rate, double duration, double warmup, struct result *r)
{
	static struct rte_mbuf *txq[MAX_BURST];
	unsigned pend_off = 0, pend_n = 0;
	uint32_t gid = 2 * ++trial_no, wgid = gid + 1;
	uint64_t rate_i = (uint64_t)llround(rate);
	struct tbucket tb;

	memset(r, 0, sizeof(*r));
	r->count = (uint64_t)llround(rate * duration);
	if (r->count == 0)
		r->count = 1;
	seq_init(&track);
	lh_init(&hist);

	/* whatever is still queued from before (stragglers, warm-up) is not ours;
	 * at most 50 ms of it (a port that always has packets, like net_null) */
	uint64_t now = tsc_now(), stale_end = now + hz / 20;
	for (uint16_t n = 1; n != 0 && now < stale_end && !stop_req; now = tsc_now()) {
		struct rte_mbuf *m[RX_BURST];
		n = rte_eth_rx_burst(port, 0, m, RX_BURST);
		r->stale += n;
		if (n)
			rte_pktmbuf_free_bulk(m, n);
	}

	uint64_t warm_end = now + (uint64_t)(warmup * (double)hz);
	int counting = warmup <= 0.0;
	uint64_t seq = 0, wseq = 0, last_accept = now;
	tb_init(&tb, hz, rate_i, cfg.burst, now);

	for (;;) {
		if (stop_req) {
			r->error = "interrupted by a signal";
			break;
		}
		unsigned got = rx_once(r, gid);
		now = tsc_now();
		if (pend_n != 0) {
			uint16_t k = rte_eth_tx_burst(port, 0, txq + pend_off, (uint16_t)pend_n);
			if (k != 0)
				last_accept = now;
			pend_off += k;
			pend_n -= k;
			if (pend_n != 0) {
				r->tx_retries++;
				if (now - last_accept > TX_STUCK_S * hz) {
					rte_pktmbuf_free_bulk(txq + pend_off, pend_n);
					r->error = "the port accepted no packet for 5 s";
					break;
				}
				continue;
			}
		}
		if (!counting && now >= warm_end)
			counting = 1;
		if (counting && seq == r->count)
			break;
		tb_refill(&tb, now);
		uint64_t want = tb.credit / tb.hz;
		if (want > cfg.burst)
			want = cfg.burst;
		if (counting && want > r->count - seq)
			want = r->count - seq;
		if (want == 0) {
			/* nothing due: until the next token (or the end of the warm-up) */
			if (cfg.idle_us != 0 && got == 0 && !(counting && seq == r->count)) {
				uint64_t wait = (tb.hz - tb.credit % tb.hz) / (rate_i ? rate_i : 1) + 1;
				if (!counting && warm_end - now < wait)
					wait = warm_end - now;
				idle_wait(wait);
			}
			continue;
		}
		if (rte_pktmbuf_alloc_bulk(pool, txq, (unsigned)want) != 0) {
			r->nombuf++;
			continue;
		}
		tb.credit -= want * tb.hz;
		uint64_t t = tsc_now();
		for (unsigned i = 0; i < want; i++) {
			struct rte_mbuf *m = txq[i];
			if (counting)
				gen_write_pkt(rte_pktmbuf_mtod(m, uint8_t *), cfg.size, flow, gid, seq++, t);
			else
				gen_write_pkt(rte_pktmbuf_mtod(m, uint8_t *), cfg.size, flow, wgid, wseq++, t);
			m->data_len = (uint16_t)cfg.size;
			m->pkt_len = cfg.size;
			if (++flow == cfg.flows)
				flow = 0;
		}
		if (counting) {
			if (r->first_batch == 0) {
				r->first_batch = want;
				r->tsc_first = t;
			}
			r->tsc_last = t;
		}
		uint16_t k = rte_eth_tx_burst(port, 0, txq, (uint16_t)want);
		if (k != 0)
			last_accept = now;
		if (k < want) {
			r->tx_full += want - k;
			pend_off = k;
			pend_n = (unsigned)want - k;
		}
	}
	r->sent = seq;
	r->warm_sent = wseq;
	r->tsc_send_end = tsc_now();

	/* stragglers: until all counted packets are back, nothing arrived for
	 * 200 ms, or 2 s passed */
	uint64_t idle = STRAGGLER_IDLE_MS * hz / 1000, end = r->tsc_send_end + STRAGGLER_MAX_MS * hz / 1000;
	uint64_t last_rx = r->tsc_send_end;
	while (r->error == NULL && unique_rx() < r->sent) {
		now = tsc_now();
		if (rx_once(r, gid) != 0)
			last_rx = now;
		else if (now - last_rx >= idle)
			break;
		else if (cfg.idle_us != 0)
			idle_wait(cfg.idle_us * hz / 1000000u);
		if (now >= end || stop_req)
			break;
	}
	r->tsc_end = tsc_now();
}

static void put_ns(const char *key, uint64_t cycles, int last)
{
	printf("\"%s\": %" PRIu64 "%s", key, tsc_to_ns(cycles, hz), last ? "" : ", ");
}

static void print_trial(double rate, double duration, double warmup, const struct result *r)
{
	uint64_t rx = unique_rx();
	double sent_pps;
	uint64_t span = r->tsc_last - r->tsc_first;
	if (r->sent > r->first_batch && span > 0)
		sent_pps = (double)(r->sent - r->first_batch) * (double)hz / (double)span;
	else
		sent_pps = r->sent == r->count ? rate : 0.0; /* all of it in one burst: not measurable */
	printf("{\"offered_pps\": %.3f, \"sent\": %" PRIu64 ", \"received\": %" PRIu64 ", \"lost\": %" PRIu64
	       ", \"sent_pps\": %.1f, \"rate_short\": %s, ",
	       rate, r->sent, rx, r->sent > rx ? r->sent - rx : 0, sent_pps,
	       sent_pps < 0.97 * rate ? "true" : "false");
	if (hist.count == 0) {
		printf("\"latency_ns\": null, ");
	} else {
		printf("\"latency_ns\": {\"samples\": %" PRIu64 ", ", hist.count);
		put_ns("min", hist.min, 0);
		printf("\"mean\": %.1f, ", lh_mean(&hist) * 1e9 / (double)hz);
		put_ns("p50", lh_quantile(&hist, 0.50), 0);
		put_ns("p90", lh_quantile(&hist, 0.90), 0);
		put_ns("p99", lh_quantile(&hist, 0.99), 0);
		put_ns("p999", lh_quantile(&hist, 0.999), 0);
		put_ns("max", hist.max, 1);
		printf("}, ");
	}
	printf("\"histogram\": [");
	int first = 1;
	for (unsigned i = 0; i < LH_BUCKETS; i++) {
		if (hist.b[i] == 0)
			continue;
		printf("%s[%" PRIu64 ", %" PRIu64 "]", first ? "" : ", ", tsc_to_ns(lh_upper(i), hz), hist.b[i]);
		first = 0;
	}
	printf("], \"tx_full\": %" PRIu64 ", \"tx_retries\": %" PRIu64 ", \"nombuf\": %" PRIu64
	       ", \"reordered\": %" PRIu64 ", \"duplicates\": %" PRIu64 ", \"count\": %" PRIu64
	       ", \"duration_s\": %g, \"warmup_s\": %g, \"warmup_sent\": %" PRIu64 ", \"warmup_received\": %" PRIu64
	       ", \"other\": %" PRIu64 ", \"stale\": %" PRIu64 ", \"unstamped\": %" PRIu64 ", \"clock_skew\": %" PRIu64
	       ", \"gen_id\": %u, \"size\": %u, \"burst\": %u, \"idle_us\": %u, \"tsc_hz\": %" PRIu64
	       ", \"drain_ms\": %.1f",
	       r->tx_full, r->tx_retries, r->nombuf, track.reordered, track.duplicates, r->count, duration, warmup,
	       r->warm_sent, r->warm_rx, r->other, r->stale, r->unstamped, r->clock_skew, 2 * trial_no, cfg.size,
	       cfg.burst, cfg.idle_us, hz, (double)(r->tsc_end - r->tsc_send_end) * 1e3 / (double)hz);
	if (r->error != NULL)
		printf(", \"error\": \"%s\"", r->error);
	printf("}\n");
}

static void reply_error(const char *fmt, const char *arg)
{
	/* arg comes from the command line: keep only printable characters that need no escaping */
	char clean[128];
	size_t j = 0;
	for (size_t i = 0; arg != NULL && arg[i] != '\0' && j + 1 < sizeof(clean); i++)
		if (arg[i] >= 0x20 && arg[i] < 0x7f && arg[i] != '"' && arg[i] != '\\')
			clean[j++] = arg[i];
	clean[j] = '\0';
	printf("{\"error\": \"");
	printf(fmt, clean);
	printf("\"}\n");
}

static int parse_num(const char *s, double *v)
{
	char *end;
	if (s == NULL)
		return -1;
	errno = 0;
	*v = strtod(s, &end);
	return *end != '\0' || errno != 0 || !isfinite(*v) ? -1 : 0;
}

static void cmd_stats(void)
{
	struct rte_eth_stats st;
	if (rte_eth_stats_get(port, &st) != 0) {
		reply_error("stats: cannot read the port's counters%s", "");
		return;
	}
	printf("{\"ipackets\": %" PRIu64 ", \"opackets\": %" PRIu64 ", \"imissed\": %" PRIu64 ", \"ierrors\": %" PRIu64
	       ", \"oerrors\": %" PRIu64 ", \"rx_nombuf\": %" PRIu64 ", \"trials\": %u}\n",
	       st.ipackets, st.opackets, st.imissed, st.ierrors, st.oerrors, st.rx_nombuf, trial_no);
}

/* One command line; returns 1 on quit. */
static int command(char *line)
{
	char *save = NULL;
	char *cmd = strtok_r(line, " \t\r\n", &save);
	if (cmd == NULL)
		return 0; /* empty line: no answer */
	if (strcmp(cmd, "quit") == 0) {
		printf("{\"quit\": true, \"trials\": %u}\n", trial_no);
		return 1;
	}
	if (strcmp(cmd, "stats") == 0) {
		cmd_stats();
		return 0;
	}
	if (strcmp(cmd, "trial") != 0) {
		reply_error("unknown command '%s' (trial RATE_PPS DURATION_S WARMUP_S | stats | quit)", cmd);
		return 0;
	}
	const char *a[3];
	for (int i = 0; i < 3; i++)
		a[i] = strtok_r(NULL, " \t\r\n", &save);
	char *extra = strtok_r(NULL, " \t\r\n", &save);
	double rate, dur, warm;
	if (extra != NULL) {
		reply_error("trial: unexpected argument '%s' (trial RATE_PPS DURATION_S WARMUP_S)", extra);
	} else if (parse_num(a[0], &rate) < 0 || rate <= 0 || rate > 1e9) {
		reply_error("trial: RATE_PPS '%s' must be a number > 0 and <= 1e9 (trial RATE_PPS DURATION_S WARMUP_S)",
			    a[0] != NULL ? a[0] : "");
	} else if (parse_num(a[1], &dur) < 0 || dur <= 0 || dur > 3600) {
		reply_error("trial: DURATION_S '%s' must be a number > 0 and <= 3600", a[1] != NULL ? a[1] : "");
	} else if (parse_num(a[2], &warm) < 0 || warm < 0 || warm > 3600) {
		reply_error("trial: WARMUP_S '%s' must be a number >= 0 and <= 3600", a[2] != NULL ? a[2] : "");
	} else if (rate * dur > 1e12) {
		reply_error("trial: RATE_PPS x DURATION_S is too many packets%s", "");
	} else {
		struct result r;
		run_trial(rate, dur, warm, &r);
		print_trial(rate, dur, warm, &r);
	}
	return 0;
}

int main(int argc, char **argv)
{
	/* answers only on stdout, one line each, written at once */
	static char outbuf[1 << 20];
	setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));

	int ret = rte_eal_init(argc, argv);
	if (ret < 0) {
		fprintf(stderr, PROG ": EAL init failed: %s\n", rte_strerror(rte_errno));
		return 1;
	}
	rte_openlog_stream(stderr);
	argc -= ret;
	argv += ret;
	int rc = 1;
	if (parse_args(argc, argv) < 0)
		goto out;

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: a blocked read of stdin returns */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	if (cfg.idle_us != 0)
		prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* sleep as long as asked, not 50 us more */
	hz = tsc_calibrate(50);
	if (port_init() < 0)
		goto out_port;
	printf("tester: ready\n");
	fflush(stdout);

	char line[512];
	while (!stop_req && fgets(line, sizeof(line), stdin) != NULL) {
		int q = command(line);
		fflush(stdout);
		if (q)
			break;
	}
	rc = 0;
	if (stop_req)
		fprintf(stderr, PROG ": stopped by a signal after %u trials\n", trial_no);
out_port:
	if (rte_eth_dev_is_valid_port(port)) {
		rte_eth_dev_stop(port);
		rte_eth_dev_close(port);
	}
out:
	rte_eal_cleanup();
	return rc;
}
