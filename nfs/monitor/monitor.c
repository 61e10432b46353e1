/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-monitor: observes every packet and passes it on (SL_ACT_NEXT).
 *
 * - Per-flow records (ingress port + IPv4/IPv6 5-tuple, ICMP type/code, non-IP by ethertype):
 *   packets, bytes, first/last seen (wall clock, ns), TCP flags seen, malformed packets. Written as
 *   JSON lines to --records FILE: every flow on exit ("end"), idle flows when they expire ("idle",
 *   --idle S), and a snapshot of the live flows ("active") on SIGUSR1 and every --export-interval S.
 * - pcapng capture to --pcap FILE (pcapng.h): one interface per sluiced port, named after
 *   it, nanosecond timestamps, the ingress port as the interface. Buffered in one preallocated
 *   buffer, written in big chunks; flushed every second, on SIGUSR1 and on exit, so the file is a
 *   complete pcapng file after each flush.
 *
 * The hot path is the handler (one clock read and one uncontended mutex per batch, no allocation,
 * no system call except a write() of the whole capture buffer when it is full). A helper thread
 * does everything timed or signalled (SIGUSR1, idle expiry, periodic export, flushes) under the same
 * mutex, so it also works while no packet arrives and the NF sleeps in block mode. Every instance
 * has its own helper, which sees SIGUSR1 as a new count of nf_usr1_gen at its next tick (100 ms):
 * nothing process-wide (no signal mask, no sigwait), so monitors share a group with other NFs.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/nf_common.h"
#include "flow.h"
#include "pcapng.h"

#define PROG "sluice-nf-monitor"
#define MON_IF_MAX 256          /* interfaces (ports) the capture describes at most */
#define MON_PCAP_FLUSH_NS 1000000000ull
#define MON_TICK_NS 100000000ull /* the helper's period: timers and SIGUSR1 are seen this often */

enum {
	OPT_FLOWS = NF_OPT_APP, OPT_RECORDS, OPT_IDLE, OPT_EXPORT, OPT_PCAP, OPT_SNAPLEN,
	OPT_CAPMAX, OPT_CAPMAXB, OPT_PCAPBUF,
};

struct mon {
	/* configuration */
	uint32_t flows;
	const char *records, *pcap;
	uint64_t idle_s, export_s, snaplen, cap_max_pkts, cap_max_bytes, pcap_buf_mb;

	/* state */
	struct mon_table t;
	struct png_writer w;
	int pcap_fd;
	FILE *rec;
	int capturing;            /* 1 while packets are captured (0: no --pcap, or write error) */
	struct sl_nf *nf;
	uint32_t n_ports;
	pthread_mutex_t lock;
	pthread_cond_t wake;       /* finish() wakes the helper to stop (CLOCK_MONOTONIC waits) */
	pthread_t helper;
	int helper_started;
	int pcap_err_reported;     /* helper thread only */
	int helper_stop;           /* under the lock */
	sig_atomic_t usr1_seen;    /* helper thread only: the nf_usr1_gen it last acted on */
	uint64_t pcap_dirty_since; /* ns of the oldest unflushed block, 0 if none */

	/* totals (copied to sluiced's counters once per batch) */
	uint64_t pkts, bytes, malformed, captured, cap_dropped, expired, flows_total;
	uint64_t *c_pkts, *c_bytes, *c_flows, *c_flows_total, *c_expired, *c_full, *c_captured,
		*c_cap_dropped, *c_malformed;
};

static uint64_t no_counter[16]; /* where updates go if sluiced gave no info page */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void publish(struct mon *m)
{
	*m->c_pkts = m->pkts;
	*m->c_bytes = m->bytes;
	*m->c_flows = m->t.count;
	*m->c_flows_total = m->t.next_id - 1;
	*m->c_expired = m->expired;
	*m->c_full = m->t.full;
	*m->c_captured = m->captured;
	*m->c_cap_dropped = m->cap_dropped;
	*m->c_malformed = m->malformed;
}

/* ---- capture ---- */

static const char *port_name(const struct mon *m, uint32_t id)
{
	return m->nf != NULL && id < m->n_ports ? sl_nf_port_name(m->nf, id) : NULL;
}

/* Describe interfaces up to `id` (ports sluiced did not name, or added later: "port<N>"). */
static int add_ifs(struct mon *m, uint32_t id)
{
	while (m->w.n_if <= id) {
		char fallback[16];
		const char *name = port_name(m, m->w.n_if);
		if (name == NULL) {
			snprintf(fallback, sizeof(fallback), "port%u", m->w.n_if);
			name = fallback;
		}
		if (png_idb(&m->w, PNG_LINKTYPE_ETHERNET, (uint32_t)m->snaplen, name) < 0)
			return -1;
	}
	return 0;
}

static inline void capture(struct mon *m, uint16_t port, const uint8_t *data, uint32_t len, uint64_t now)
{
	uint32_t cl = len < m->snaplen ? len : (uint32_t)m->snaplen;
	if (!m->capturing || (m->cap_max_pkts && m->captured >= m->cap_max_pkts) ||
	    (m->cap_max_bytes && png_total(&m->w) + PNG_EPB_OVERHEAD + png_pad4(cl) > m->cap_max_bytes) ||
	    port >= MON_IF_MAX) {
		m->cap_dropped++;
		return;
	}
	if ((port >= m->w.n_if && add_ifs(m, port) < 0) || png_epb(&m->w, port, now, data, cl, len) < 0) {
		m->capturing = 0; /* write error: the helper / finish reports it */
		m->cap_dropped++;
		return;
	}
	if (m->pcap_dirty_since == 0)
		m->pcap_dirty_since = now;
	m->captured++;
}

static void pcap_flush(struct mon *m)
{
	if (m->pcap == NULL || m->w.used == 0)
		return;
	if (png_flush(&m->w) < 0)
		m->capturing = 0;
	m->pcap_dirty_since = 0;
}

/* ---- the hot path ---- */

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct mon *m = arg;
	struct mon_key keys[SL_BURST_MAX];
	uint32_t hash[SL_BURST_MAX];
	uint8_t flags[SL_BURST_MAX], bad[SL_BURST_MAX];
	(void)nf;

	/* pass 1: parse, hash, prefetch the home slots */
	for (unsigned i = 0; i < n; i++) {
		bad[i] = (uint8_t)mon_classify(sl_pkt_data(&pkts[i]), sl_pkt_len(&pkts[i]),
					       sl_pkt_in_port(&pkts[i]), &keys[i], &flags[i]);
		hash[i] = mon_hash(&keys[i]);
		__builtin_prefetch(&m->t.slot[hash[i] & m->t.mask]);
	}

	pthread_mutex_lock(&m->lock);
	uint64_t now = now_ns();
	for (unsigned i = 0; i < n; i++) {
		struct sl_pkt *p = &pkts[i];
		uint32_t len = sl_pkt_len(p);
		struct mon_flow *e = mon_get(&m->t, &keys[i], hash[i], now);
		if (e != NULL)
			mon_account(e, len, flags[i], bad[i], now);
		m->bytes += len;
		m->malformed += bad[i];
		if (m->pcap != NULL)
			capture(m, keys[i].in_port, sl_pkt_data(p), len, now);
		sl_pkt_set_action(p, SL_ACT_NEXT, 0);
	}
	m->pkts += n;
	publish(m);
	pthread_mutex_unlock(&m->lock);
}

/* ---- records ---- */

/* Under the lock. `state` of every live flow ("active" or "end"). */
static void export_flows(struct mon *m, const char *state, const char *reason, uint64_t now)
{
	if (m->rec == NULL)
		return;
	for (uint32_t i = 0; i <= m->t.mask; i++) {
		const struct mon_flow *e = &m->t.slot[i];
		if (e->id == 0)
			continue;
		mon_flow_json(e, state, port_name(m, e->key.in_port), m->rec);
		fputc('\n', m->rec);
	}
	fprintf(m->rec,
		"{\"type\":\"export\",\"reason\":\"%s\",\"time_ns\":%llu,\"flows\":%u,\"flows_total\":%llu,"
		"\"flows_expired\":%llu,\"flows_full\":%llu,\"packets\":%llu,\"bytes\":%llu,\"malformed\":%llu,"
		"\"captured\":%llu,\"capture_dropped\":%llu}\n",
		reason, (unsigned long long)now, m->t.count, (unsigned long long)(m->t.next_id - 1),
		(unsigned long long)m->expired, (unsigned long long)m->t.full, (unsigned long long)m->pkts,
		(unsigned long long)m->bytes, (unsigned long long)m->malformed,
		(unsigned long long)m->captured, (unsigned long long)m->cap_dropped);
	fflush(m->rec);
}

/* Under the lock: write and remove every flow idle for idle_s or more. */
static void expire(struct mon *m, uint64_t now)
{
	uint64_t limit = m->idle_s * 1000000000ull;
	uint64_t n0 = m->expired;
	for (uint32_t i = 0; i <= m->t.mask; i++) {
		struct mon_flow *e = &m->t.slot[i];
		/* a backward shift may move a not yet visited entry into slot i: look again */
		while (e->id != 0 && now > e->last_ns && now - e->last_ns >= limit) {
			if (m->rec != NULL) {
				mon_flow_json(e, "idle", port_name(m, e->key.in_port), m->rec);
				fputc('\n', m->rec);
			}
			mon_remove(&m->t, i);
			m->expired++;
		}
	}
	if (m->expired != n0) {
		publish(m);
		if (m->rec != NULL)
			fflush(m->rec);
	}
}

/* ---- helper thread: SIGUSR1, timers ---- */

static void *helper(void *arg)
{
	struct mon *m = arg;
	uint64_t t0 = now_ns();
	uint64_t next_export = m->export_s ? t0 + m->export_s * 1000000000ull : 0;
	uint64_t sweep_ns = m->idle_s ? (m->idle_s * 1000000000ull / 4 ? m->idle_s * 1000000000ull / 4 : 1) : 0;
	if (sweep_ns > 1000000000ull)
		sweep_ns = 1000000000ull;
	uint64_t next_sweep = sweep_ns ? t0 + sweep_ns : 0;

	pthread_mutex_lock(&m->lock);
	while (!m->helper_stop) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += (time_t)(MON_TICK_NS / 1000000000ull);
		until.tv_nsec += (long)(MON_TICK_NS % 1000000000ull);
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		/* a tick, or finish()'s wake-up; the lock is free meanwhile */
		pthread_cond_timedwait(&m->wake, &m->lock, &until);
		if (m->helper_stop)
			break;
		uint64_t now = now_ns();
		if (nf_signal_taken(&nf_usr1_gen, &m->usr1_seen)) {
			pcap_flush(m);
			export_flows(m, "active", "signal", now);
		}
		if (next_sweep && now >= next_sweep) {
			expire(m, now);
			next_sweep = now + sweep_ns;
		}
		if (next_export && now >= next_export) {
			pcap_flush(m);
			export_flows(m, "active", "interval", now);
			next_export = now + m->export_s * 1000000000ull;
		}
		if (m->pcap_dirty_since && now - m->pcap_dirty_since >= MON_PCAP_FLUSH_NS)
			pcap_flush(m);
		int werr = m->pcap != NULL ? m->w.err : 0;
		if (werr != 0 && !m->pcap_err_reported) {
			pthread_mutex_unlock(&m->lock); /* no stderr write under the packet path's lock */
			fprintf(stderr, PROG ": writing %s failed: %s; capture stopped\n", m->pcap, strerror(werr));
			m->pcap_err_reported = 1;
			pthread_mutex_lock(&m->lock);
		}
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* ---- options, start, finish ---- */

static int opt(void *ctx, int o, const char *arg)
{
	struct mon *m = ctx;
	uint64_t v;
	switch (o) {
	case OPT_FLOWS:
		if (nf_parse_u64(PROG, "flows", arg, 1, 1u << 24, &v) < 0)
			return -1;
		m->flows = (uint32_t)v;
		return 0;
	case OPT_RECORDS:
		m->records = arg;
		return 0;
	case OPT_PCAP:
		m->pcap = arg;
		return 0;
	case OPT_IDLE:
		return nf_parse_u64(PROG, "idle", arg, 0, 86400 * 365, &m->idle_s);
	case OPT_EXPORT:
		return nf_parse_u64(PROG, "export-interval", arg, 0, 86400 * 365, &m->export_s);
	case OPT_SNAPLEN:
		return nf_parse_u64(PROG, "snaplen", arg, 14, 65535, &m->snaplen);
	case OPT_CAPMAX:
		return nf_parse_u64(PROG, "capture-max", arg, 0, UINT64_MAX, &m->cap_max_pkts);
	case OPT_CAPMAXB:
		return nf_parse_u64(PROG, "capture-max-bytes", arg, 0, UINT64_MAX, &m->cap_max_bytes);
	case OPT_PCAPBUF:
		return nf_parse_u64(PROG, "pcap-buffer-mb", arg, 1, 1024, &m->pcap_buf_mb);
	default:
		return -1;
	}
}

static int start(void *ctx)
{
	struct mon *m = ctx;
	if (mon_init(&m->t, m->flows) < 0) {
		fprintf(stderr, PROG ": --flows '%u': cannot allocate a table of that many flows\n", m->flows);
		return -1;
	}
	if (m->records != NULL) {
		m->rec = fopen(m->records, "a");
		if (m->rec == NULL) {
			fprintf(stderr, PROG ": --records '%s': %s\n", m->records, strerror(errno));
			return -1;
		}
	}
	if (m->pcap != NULL) {
		m->pcap_fd = open(m->pcap, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (m->pcap_fd < 0) {
			fprintf(stderr, PROG ": --pcap '%s': %s\n", m->pcap, strerror(errno));
			return -1;
		}
		if (png_init(&m->w, m->pcap_fd, (size_t)m->pcap_buf_mb << 20) < 0 ||
		    png_shb(&m->w, "sluice-nf-monitor") < 0) {
			fprintf(stderr, PROG ": --pcap-buffer-mb '%llu': cannot allocate the buffer\n",
				(unsigned long long)m->pcap_buf_mb);
			return -1;
		}
		m->capturing = 1;
	}
	pthread_mutex_init(&m->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->wake, &ca);
	pthread_condattr_destroy(&ca);
	/* SIGUSR1 counts nf_usr1_gen (in whichever thread takes it); the helper polls the count */
	nf_catch_usr1();
	return 0;
}

static uint64_t *counter(struct sl_nf *nf, const char *name, int i)
{
	return nf_counter(nf, name, &no_counter[i]);
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct mon *m = ctx;
	m->nf = nf;
	m->n_ports = sl_nf_port_count(nf);
	m->c_pkts = counter(nf, "packets", 0);
	m->c_bytes = counter(nf, "bytes", 1);
	m->c_flows = counter(nf, "flows", 2);
	m->c_flows_total = counter(nf, "flows_total", 3);
	m->c_expired = counter(nf, "flows_expired", 4);
	m->c_full = counter(nf, "flows_full", 5);
	m->c_captured = counter(nf, "captured", 6);
	m->c_cap_dropped = counter(nf, "capture_dropped", 7);
	m->c_malformed = counter(nf, "malformed", 8);
	publish(m);
	if (m->pcap != NULL) {
		if ((m->n_ports > 0 && add_ifs(m, m->n_ports - 1) < 0) || png_flush(&m->w) < 0) {
			fprintf(stderr, PROG ": --pcap '%s': %s\n", m->pcap, strerror(m->w.err ? m->w.err : EIO));
			return -1;
		}
	}
	/* the helper takes no process signal (SIGUSR1 included: it polls nf_usr1_gen): SIGINT/SIGTERM
	 * must reach the packet thread. SIGSYS stays open: under sandbox strict the SDK's handler names a
	 * refused system call (a thread blocking it is killed by the kernel without a word) */
	sigset_t all, old;
	sigfillset(&all);
	sigdelset(&all, SIGSYS);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int rc = pthread_create(&m->helper, NULL, helper, m);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		fprintf(stderr, PROG ": cannot start the helper thread: %s\n", strerror(rc));
		return -1;
	}
	m->helper_started = 1;
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct mon *m = ctx;
	if (m->helper_started) {
		pthread_mutex_lock(&m->lock);
		m->helper_stop = 1;
		pthread_cond_signal(&m->wake);
		pthread_mutex_unlock(&m->lock);
		pthread_join(m->helper, NULL);
		m->helper_started = 0;
	}
	if (out != NULL) {
		uint64_t now = now_ns();
		pcap_flush(m);
		export_flows(m, "end", "exit", now);
		publish(m);
		fprintf(out, " flows=%u flows_total=%llu pkts=%llu bytes=%llu malformed=%llu captured=%llu"
			" capture_dropped=%llu",
			m->t.count, (unsigned long long)(m->t.next_id - 1), (unsigned long long)m->pkts,
			(unsigned long long)m->bytes, (unsigned long long)m->malformed,
			(unsigned long long)m->captured, (unsigned long long)m->cap_dropped);
		if (m->pcap != NULL && m->w.err != 0)
			fprintf(out, " pcap_error='%s'", strerror(m->w.err));
	}
	if (m->pcap != NULL && m->pcap_fd > 0) {
		if (fsync(m->pcap_fd) != 0 && errno != EINVAL) {
			/* tmpfs and pipes: nothing to sync */
		}
		close(m->pcap_fd);
		m->pcap_fd = -1;
		png_free(&m->w);
	}
	if (m->rec != NULL) {
		if (fclose(m->rec) != 0 && out != NULL)
			fprintf(out, " records_error='%s'", strerror(errno));
		m->rec = NULL;
	}
	mon_free(&m->t);
}

static const struct mon defaults = { .flows = 65536, .idle_s = 60, .snaplen = 65535, .pcap_buf_mb = 8,
				     .pcap_fd = -1 };

static const struct option opts[] = {
	{ "flows", required_argument, NULL, OPT_FLOWS },
	{ "records", required_argument, NULL, OPT_RECORDS },
	{ "idle", required_argument, NULL, OPT_IDLE },
	{ "export-interval", required_argument, NULL, OPT_EXPORT },
	{ "pcap", required_argument, NULL, OPT_PCAP },
	{ "snaplen", required_argument, NULL, OPT_SNAPLEN },
	{ "capture-max", required_argument, NULL, OPT_CAPMAX },
	{ "capture-max-bytes", required_argument, NULL, OPT_CAPMAXB },
	{ "pcap-buffer-mb", required_argument, NULL, OPT_PCAPBUF },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "monitor",
	.about = "Sluice NF: per-flow records and pcapng capture of every packet; passes every packet on.",
	.opts = opts,
	.opts_help =
		"  --flows N          flow table capacity (default 65536, 1..16777216)\n"
		"  --records FILE     append flow records as JSON lines: live flows on SIGUSR1, every\n"
		"                     --export-interval and on exit, idle flows when they expire\n"
		"  --idle S           a flow idle S seconds expires into the records (default 60, 0 = never)\n"
		"  --export-interval S  write the live flows every S seconds (default 0 = never)\n"
		"  --pcap FILE        capture every packet to FILE (pcapng; flushed every second, on\n"
		"                     SIGUSR1 and on exit)\n"
		"  --snaplen N        bytes captured per packet (default 65535, 14..65535)\n"
		"  --capture-max N    capture at most N packets (default 0 = no limit)\n"
		"  --capture-max-bytes N  stop capturing before the file exceeds N bytes (0 = no limit)\n"
		"  --pcap-buffer-mb N capture buffer size in MiB (default 8, 1..1024)\n",
	.ctx_size = sizeof(struct mon),
	.ctx_defaults = &defaults,
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
	.finish = finish,
)
