/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-ids: a signature IDS/IPS. Every IPv4/IPv6 packet's payload (after the TCP/UDP/ICMP
 * header; per packet, no stream reassembly) is scanned with one Hyperscan database holding every
 * content and pcre of the --rules file (a subset of Snort/Suricata syntax). Matching rules decide:
 * pass (forward, nothing logged) > drop (DROP, logged "[Drop]") > alert (forward, logged). Alerts go
 * to --alert-log in Suricata's fast.log format (and --eve-log as JSON lines), flushed once per batch.
 * SIGHUP reloads the rules at the next batch. --pcap FILE judges a capture offline (no sluiced).
 * Docs: docs/nfs/ids.md. Parsing: rules.h; matching: engine.h; log lines: log.h.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/nf_common.h"
#include "engine.h"
#include "log.h"

#define PROG "sluice-nf-ids"

enum { OPT_RULES = NF_OPT_APP, OPT_ALERT_LOG, OPT_EVE_LOG, OPT_CHECK, OPT_MALFORMED, OPT_RULE_COUNTERS,
       OPT_PCAP };

enum { C_PACKETS, C_SCANNED_BYTES, C_ALERTS, C_DROPS, C_PASSES, C_MALFORMED, C_NON_IP, C_FRAGMENTS,
       C_ALERTS_OVER, C_SCAN_ERRORS, C_RELOADS, C_RELOAD_ERRORS, C_RULES, C_PATTERNS, C_N };
static const char *const counter_names[C_N] = {
	"packets", "scanned_bytes", "alerts", "drops", "passes", "malformed", "non_ip", "fragments",
	"alerts_over", "scan_errors", "reloads", "reload_errors", "rules", "patterns",
};

struct ids_set { /* what a (re)load builds and the handler swaps whole */
	struct ids_ruleset rs;
	struct ids_engine eng;
	uint64_t *hitv; /* per-rule hits of the rules without a sluiced counter */
};

struct ids_ctx {
	const char *rules, *alert_log, *eve_log, *pcap;
	int check, malformed_drop;
	uint64_t rule_counters;
	struct ids_set *set;
	FILE *fast, *eve;
	struct sl_nf *nf;
	sig_atomic_t hup_seen;
	uint64_t local[C_N]; /* counters before attach / in --pcap mode */
	uint64_t *c[C_N];
};


static void set_free(struct ids_set *s)
{
	if (s == NULL)
		return;
	ids_engine_free(&s->eng);
	ids_rules_free(&s->rs);
	free(s->hitv);
	free(s);
}

static struct ids_set *set_load(const char *path, char *err, size_t errlen)
{
	struct ids_set *s = calloc(1, sizeof(*s));
	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (ids_rules_load(path, &s->rs, err, errlen) < 0) {
		free(s);
		return NULL;
	}
	if (ids_engine_build(&s->eng, &s->rs, path, err, errlen) < 0) {
		ids_rules_free(&s->rs);
		free(s);
		return NULL;
	}
	s->hitv = calloc(s->rs.n ? s->rs.n : 1, sizeof(*s->hitv));
	if (s->hitv == NULL) {
		snprintf(err, errlen, "out of memory");
		set_free(s);
		return NULL;
	}
	for (unsigned i = 0; i < s->rs.n; i++)
		s->rs.r[i].hits = &s->hitv[i];
	return s;
}

/* The first --rule-counters rules count their hits in sluiced counters "sid.<sid>". */
static void set_bind(struct ids_ctx *c, struct ids_set *s)
{
	if (c->nf == NULL)
		return;
	for (unsigned i = 0; i < s->rs.n && i < c->rule_counters; i++) {
		char name[SL_COUNTER_NAME_MAX];
		snprintf(name, sizeof(name), "sid.%u", s->rs.r[i].sid);
		uint64_t *p = sl_nf_counter(c->nf, name);
		if (p != NULL)
			s->rs.r[i].hits = p;
	}
	*c->c[C_RULES] = s->rs.n;
	*c->c[C_PATTERNS] = s->rs.np;
}

static void reload(struct ids_ctx *c)
{
	char err[512];
	struct ids_set *s = set_load(c->rules, err, sizeof(err));
	if (s == NULL) {
		fprintf(stderr, PROG ": reload failed, keeping the previous rules: %s\n", err);
		(*c->c[C_RELOAD_ERRORS])++;
		return;
	}
	set_bind(c, s);
	set_free(c->set);
	c->set = s;
	(*c->c[C_RELOADS])++;
	fprintf(stderr, PROG ": reloaded %s: %u rules, %u patterns, compiled in %.0f ms\n", c->rules, s->rs.n,
		s->rs.np, s->eng.compile_ms);
}

struct tstamp {
	const struct timespec *ts;
	int done;
	char t[IDS_TIME_MAX], iso[IDS_TIME_MAX];
};

/* Judge one frame; returns the SDK action. Logs the alerts (time formatted at the first one). */
static enum sl_action inspect(struct ids_ctx *c, const uint8_t *p, uint32_t len, struct tstamp *tm)
{
	struct ids_pkt k;
	struct ids_result res;
	uint64_t **C = c->c;

	switch (ids_parse(p, len, &k)) {
	case IDS_K_MALFORMED:
		(*C[C_MALFORMED])++;
		return c->malformed_drop ? SL_ACT_DROP : SL_ACT_NEXT;
	case IDS_K_NON_IP:
		(*C[C_NON_IP])++;
		return SL_ACT_NEXT;
	default:
		break;
	}
	(*C[C_PACKETS])++;
	*C[C_FRAGMENTS] += k.frag;
	*C[C_SCANNED_BYTES] += k.pay_len;
	struct ids_set *s = c->set;
	if (ids_engine_match(&s->eng, &k, p + k.pay_off, k.pay_len, &res) < 0)
		(*C[C_SCAN_ERRORS])++;
	if (res.verdict == IDS_PASS) {
		(*C[C_PASSES])++;
		for (uint32_t i = 0; i < res.n; i++)
			(*s->rs.r[res.rule[i]].hits)++;
		return SL_ACT_NEXT;
	}
	if (res.n == 0)
		return SL_ACT_NEXT;
	int dropped = res.verdict == IDS_DROP;
	if (!tm->done && (c->fast || c->eve)) {
		ids_fmt_time(tm->ts, tm->t, tm->iso);
		tm->done = 1;
	}
	for (uint32_t i = 0; i < res.n; i++) {
		const struct ids_rule *r = &s->rs.r[res.rule[i]];
		(*r->hits)++;
		if (c->fast)
			ids_log_fast(c->fast, tm->t, r, dropped, &k);
		if (c->eve)
			ids_log_eve(c->eve, tm->iso, r, dropped, &k);
	}
	*C[C_ALERTS] += res.n;
	*C[C_ALERTS_OVER] += res.more;
	if (dropped) {
		(*C[C_DROPS])++;
		return SL_ACT_DROP;
	}
	return SL_ACT_NEXT;
}

static void flush_logs(struct ids_ctx *c)
{
	if (c->fast)
		fflush(c->fast);
	if (c->eve)
		fflush(c->eve);
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct ids_ctx *c = arg;
	(void)nf;
	if (nf_signal_taken(&nf_hup_gen, &c->hup_seen))
		reload(c);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME_COARSE, &ts); /* one clock read per batch; vDSO, no system call */
	struct tstamp tm = { .ts = &ts, .done = 0 };
	uint64_t alerts0 = *c->c[C_ALERTS];
	for (unsigned i = 0; i < n; i++)
		sl_pkt_set_action(&pkts[i], inspect(c, sl_pkt_data(&pkts[i]), sl_pkt_len(&pkts[i]), &tm), 0);
	if (*c->c[C_ALERTS] != alerts0) /* the batch's alert lines leave in one write per log */
		flush_logs(c);
}

/* ---------------------------------------------------------------- --pcap: offline */

static uint32_t rd32(const uint8_t *p, int swap)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return swap ? __builtin_bswap32(v) : v;
}

/* Judge every packet of a pcap file (Ethernet link type), with the capture's timestamps. The
 * whole file is read first so that the time printed is the inspection's alone. */
static int run_pcap(struct ids_ctx *c)
{
	FILE *f = fopen(c->pcap, "rb");
	if (f == NULL) {
		fprintf(stderr, PROG ": --pcap %s: cannot open: %s\n", c->pcap, strerror(errno));
		return 1;
	}
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *buf = sz > 0 ? malloc((size_t)sz) : NULL;
	if (buf == NULL || fread(buf, 1, (size_t)sz, f) != (size_t)sz || sz < 24) {
		fprintf(stderr, PROG ": --pcap %s: cannot read a pcap header\n", c->pcap);
		fclose(f);
		free(buf);
		return 1;
	}
	fclose(f);
	uint32_t magic = rd32(buf, 0);
	int swap = 0, nsec = 0;
	if (magic == 0xa1b2c3d4 || magic == 0xa1b23c4d)
		nsec = magic == 0xa1b23c4d;
	else if (magic == 0xd4c3b2a1 || magic == 0x4d3cb2a1) {
		swap = 1;
		nsec = magic == 0x4d3cb2a1;
	} else {
		fprintf(stderr, PROG ": --pcap %s: not a pcap file (pcapng is not read; convert with "
			"editcap -F pcap)\n", c->pcap);
		free(buf);
		return 1;
	}
	if (rd32(buf + 20, swap) != 1) {
		fprintf(stderr, PROG ": --pcap %s: link type %u, only Ethernet (1) is read\n", c->pcap,
			rd32(buf + 20, swap));
		free(buf);
		return 1;
	}
	uint64_t n = 0, dropped = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long off = 24; off + 16 <= sz;) {
		uint32_t incl = rd32(buf + off + 8, swap);
		if (incl > (uint32_t)(sz - off - 16)) {
			fprintf(stderr, PROG ": --pcap %s: truncated record at byte %ld\n", c->pcap, off);
			break;
		}
		struct timespec ts = { .tv_sec = rd32(buf + off, swap),
				       .tv_nsec = (long)rd32(buf + off + 4, swap) * (nsec ? 1 : 1000) };
		struct tstamp tm = { .ts = &ts, .done = 0 };
		dropped += inspect(c, buf + off + 16, incl, &tm) == SL_ACT_DROP;
		n++;
		off += 16 + (long)incl;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	flush_logs(c);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	uint64_t **C = c->c;
	printf("%s: %llu frames, %llu alerts, %llu dropped, %llu passes, %llu malformed, %llu non_ip, "
	       "%llu payload bytes in %.3f s (%.3f Mpps, %.3f Gbit/s of payload)\n", c->pcap,
	       (unsigned long long)n, (unsigned long long)*C[C_ALERTS], (unsigned long long)dropped,
	       (unsigned long long)*C[C_PASSES], (unsigned long long)*C[C_MALFORMED],
	       (unsigned long long)*C[C_NON_IP], (unsigned long long)*C[C_SCANNED_BYTES], s,
	       s > 0 ? (double)n / s / 1e6 : 0.0, s > 0 ? (double)*C[C_SCANNED_BYTES] * 8 / s / 1e9 : 0.0);
	free(buf);
	return 0;
}

/* ---------------------------------------------------------------- options, start, finish */

static int opt(void *ctx, int o, const char *arg)
{
	struct ids_ctx *c = ctx;
	switch (o) {
	case OPT_RULES:
		c->rules = arg;
		return 0;
	case OPT_ALERT_LOG:
		c->alert_log = arg;
		return 0;
	case OPT_EVE_LOG:
		c->eve_log = arg;
		return 0;
	case OPT_CHECK:
		c->check = 1;
		return 0;
	case OPT_PCAP:
		c->pcap = arg;
		return 0;
	case OPT_MALFORMED:
		if (strcmp(arg, "pass") == 0)
			c->malformed_drop = 0;
		else if (strcmp(arg, "drop") == 0)
			c->malformed_drop = 1;
		else {
			fprintf(stderr, PROG ": --malformed '%s': expected pass or drop\n", arg);
			return -1;
		}
		return 0;
	case OPT_RULE_COUNTERS:
		return nf_parse_u64(PROG, "rule-counters", arg, 0, 1000, &c->rule_counters);
	default:
		return -1;
	}
}

static FILE *open_log(const char *path)
{
	FILE *f = fopen(path, "a");
	if (f == NULL) {
		fprintf(stderr, PROG ": cannot open %s for appending: %s\n", path, strerror(errno));
		return NULL;
	}
	/* full buffering, flushed per batch: a burst of alerts is one write() */
	setvbuf(f, NULL, _IOFBF, 1 << 16);
	return f;
}

static int start(void *ctx)
{
	struct ids_ctx *c = ctx;
	char err[512];
	for (int i = 0; i < C_N; i++)
		c->c[i] = &c->local[i];
	if (c->rules == NULL) {
		fprintf(stderr, PROG ": --rules FILE is required (the rule file; see --help)\n");
		return -1;
	}
	c->set = set_load(c->rules, err, sizeof(err));
	if (c->set == NULL) {
		fprintf(stderr, PROG ": %s\n", err);
		return -1;
	}
	if (c->check) {
		printf("%s: ok, %u rules, %u patterns, compiled in %.0f ms (%zu KiB database)\n", c->rules,
		       c->set->rs.n, c->set->rs.np, c->set->eng.compile_ms, c->set->eng.db_bytes / 1024);
		set_free(c->set);
		exit(0);
	}
	if ((c->alert_log && (c->fast = open_log(c->alert_log)) == NULL) ||
	    (c->eve_log && (c->eve = open_log(c->eve_log)) == NULL))
		return -1;
	if (c->pcap) {
		int rc = run_pcap(c);
		if (c->fast)
			fclose(c->fast);
		if (c->eve)
			fclose(c->eve);
		set_free(c->set);
		exit(rc);
	}
	nf_catch_hup();
	return 0;
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct ids_ctx *c = ctx;
	c->nf = nf;
	for (int i = 0; i < C_N; i++) {
		uint64_t *p = sl_nf_counter(nf, counter_names[i]);
		if (p != NULL)
			c->c[i] = p;
	}
	set_bind(c, c->set);
	fprintf(stderr, PROG ": %s: %u rules, %u patterns, compiled in %.0f ms; alerts to %s\n", c->rules,
		c->set->rs.n, c->set->rs.np, c->set->eng.compile_ms, c->alert_log ? c->alert_log : "(none)");
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct ids_ctx *c = ctx;
	if (out != NULL && c->c[0] != NULL)
		fprintf(out, " packets=%llu alerts=%llu drops=%llu malformed=%llu",
			(unsigned long long)*c->c[C_PACKETS], (unsigned long long)*c->c[C_ALERTS],
			(unsigned long long)*c->c[C_DROPS], (unsigned long long)*c->c[C_MALFORMED]);
	if (c->fast)
		fclose(c->fast);
	if (c->eve)
		fclose(c->eve);
	c->fast = c->eve = NULL;
	set_free(c->set);
	c->set = NULL;
}

static const struct ids_ctx defaults = { .rule_counters = 100 };

static const struct option opts[] = {
	{ "rules", required_argument, NULL, OPT_RULES },
	{ "alert-log", required_argument, NULL, OPT_ALERT_LOG },
	{ "eve-log", required_argument, NULL, OPT_EVE_LOG },
	{ "check", no_argument, NULL, OPT_CHECK },
	{ "malformed", required_argument, NULL, OPT_MALFORMED },
	{ "rule-counters", required_argument, NULL, OPT_RULE_COUNTERS },
	{ "pcap", required_argument, NULL, OPT_PCAP },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "ids",
	.about = "Sluice NF: signature IDS/IPS (Snort/Suricata rule subset on Hyperscan; SIGHUP reloads).",
	.opts = opts,
	.opts_help =
		"  --rules FILE         rule file (required; syntax in docs/nfs/ids.md); SIGHUP reloads it\n"
		"  --alert-log FILE     append alerts in Suricata fast.log format (flushed every batch)\n"
		"  --eve-log FILE       append alerts as eve-like JSON lines\n"
		"  --check              load and compile the rules, print a summary, exit (1 on an error)\n"
		"  --malformed pass|drop  truncated/inconsistent IP packets (default pass; always counted)\n"
		"  --rule-counters N    per-rule hit counters sid.<sid> for the first N rules (default 100)\n"
		"  --pcap FILE          judge a pcap offline (no sluiced), write the logs, print totals and\n"
		"                       the inspection rate, exit\n",
	.ctx_size = sizeof(struct ids_ctx),
	.ctx_defaults = &defaults,
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
	.finish = finish,
)
