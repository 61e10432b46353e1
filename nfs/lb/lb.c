/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-lb: an L4 load balancer. Services (VIP, protocol, port) from --config, each with
 * backends chosen by Maglev consistent hashing; IPVS-style NAT forwarding (the client's packets get
 * the backend as destination, the backend's replies get the VIP back as source); a connection
 * table keeps every connection on its backend. SIGHUP reloads the file at the next batch: backends
 * are added, removed, weighted, disabled or taken down while connections keep their backend.
 * Everything else passes unchanged (NEXT). Docs: docs/nfs/lb.md. Logic: pkt.h, conn.h, maglev.h,
 * conf.h.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/nf_common.h"
#include "pkt.h"

#define PROG "sluice-nf-lb"

enum {
	OPT_CONFIG = NF_OPT_APP, OPT_CHECK, OPT_MAX_CONNS, OPT_TABLE_SIZE, OPT_SWEEP, OPT_TO_TCP,
	OPT_TO_TCP_SYN, OPT_TO_TCP_FIN, OPT_TO_UDP,
};

struct lb_nf {
	struct lb lb;
	const char *config;
	int check;
	uint64_t max_conns, table_size, sweep;
	uint64_t timeout_s[LB_TO_N]; /* 0: default */
	struct sl_nf *nf;
	uint64_t reloads, reload_errors;
	sig_atomic_t hup_seen;
	uint64_t *c_new, *c_fwd, *c_rep, *c_pass, *c_nobe, *c_full, *c_confl, *c_malformed, *c_nonip,
		*c_frag, *c_resched, *c_conns, *c_expired, *c_reloads, *c_reload_errors;
	uint64_t *c_live[LB_SLOTS_MAX];
};

static uint64_t no_counter; /* where updates go if sluiced gave no info page or no room */

static uint64_t *counter(struct sl_nf *nf, const char *name)
{
	return nf_counter(nf, name, &no_counter);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no system call; ms precision is plenty */
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Give slots that lb_apply (re)assigned their sluiced counters: be.NAME.pkts/conns/live. Counts
 * made before the binding (none: this runs right after lb_apply) would be lost, so it runs first. */
static void bind_slots(struct lb_nf *c)
{
	for (unsigned s = 0; s < c->lb.n_slots; s++) {
		struct lb_slot *sl = &c->lb.slot[s];
		if (!sl->fresh || c->nf == NULL)
			continue;
		char n[SL_COUNTER_NAME_MAX + 16];
		uint64_t *p;
		snprintf(n, sizeof(n), "be.%s.pkts", sl->name);
		if ((p = sl_nf_counter(c->nf, n)) != NULL)
			sl->pkts = p;
		snprintf(n, sizeof(n), "be.%s.conns", sl->name);
		if ((p = sl_nf_counter(c->nf, n)) != NULL)
			sl->conns = p;
		snprintf(n, sizeof(n), "be.%s.live", sl->name);
		c->c_live[s] = counter(c->nf, n);
		sl->fresh = 0;
	}
}

static void publish(struct lb_nf *c)
{
	const struct lb_stats *s = &c->lb.st;
	*c->c_new = s->new_conns;
	*c->c_fwd = s->forwarded;
	*c->c_rep = s->replies;
	*c->c_pass = s->passed;
	*c->c_nobe = s->no_backend;
	*c->c_full = s->table_full;
	*c->c_confl = s->conflicts;
	*c->c_malformed = s->malformed;
	*c->c_nonip = s->non_ip;
	*c->c_frag = s->fragments;
	*c->c_resched = s->rescheduled;
	*c->c_conns = c->lb.t.count;
	*c->c_expired = c->lb.t.expired;
	*c->c_reloads = c->reloads;
	*c->c_reload_errors = c->reload_errors;
	for (unsigned i = 0; i < c->lb.n_slots; i++)
		if (c->c_live[i] != NULL)
			*c->c_live[i] = c->lb.t.live[i];
}

static const char *state_name(uint8_t st)
{
	static const char *const n[] = { "up", "disabled", "down", "removed" };
	return st < 4 ? n[st] : "?";
}

static void describe(const struct lb_nf *c, const char *what)
{
	unsigned up = 0, known = 0;
	for (unsigned s = 0; s < c->lb.n_slots; s++)
		if (c->lb.slot[s].used) {
			known++;
			up += c->lb.slot[s].state == LB_BE_UP;
		}
	fprintf(stderr, PROG ": %s %s: %u services, %u backends up of %u known (", what, c->config,
		c->lb.n_svc, up, known);
	int first = 1;
	for (unsigned s = 0; s < c->lb.n_slots; s++)
		if (c->lb.slot[s].used) {
			fprintf(stderr, "%s%s=%s", first ? "" : " ", c->lb.slot[s].name,
				state_name(c->lb.slot[s].state));
			first = 0;
		}
	fprintf(stderr, ")\n");
}

static void reload(struct lb_nf *c)
{
	/* ~60 KiB: not on the stack. Scratch, not state (lb_apply copies what it keeps), so the
	 * instances of a group, which run on one thread, may share it. */
	static struct lb_conf conf;
	char err[512];
	if (lb_conf_load(&conf, c->config, err, sizeof(err)) < 0 || lb_apply(&c->lb, &conf, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": reload failed, keeping the previous configuration: %s\n", err);
		c->reload_errors++;
		return;
	}
	bind_slots(c);
	c->reloads++;
	describe(c, "reloaded");
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct lb_nf *c = arg;
	(void)nf;
	if (nf_signal_taken(&nf_hup_gen, &c->hup_seen))
		reload(c);
	uint64_t now = now_ns();
	for (unsigned i = 0; i < n; i++)
		__builtin_prefetch(sl_pkt_data(&pkts[i]));
	for (unsigned i = 0; i < n; i++) {
		struct sl_pkt *p = &pkts[i];
		if (lb_packet(&c->lb, sl_pkt_data(p), sl_pkt_len(p), now) == LB_DROP)
			sl_pkt_set_action(p, SL_ACT_DROP, 0);
		else
			sl_pkt_set_action(p, SL_ACT_NEXT, 0);
	}
	lb_ct_sweep(&c->lb.t, (uint32_t)c->sweep, now);
	publish(c);
}

static int opt(void *ctx, int o, const char *arg)
{
	struct lb_nf *c = ctx;
	static const char *const to_flag[LB_TO_N] = { "timeout-tcp", "timeout-tcp-syn", "timeout-tcp-fin",
						      "timeout-udp" };
	switch (o) {
	case OPT_CONFIG:
		c->config = arg;
		return 0;
	case OPT_CHECK:
		c->check = 1;
		return 0;
	case OPT_MAX_CONNS:
		return nf_parse_u64(PROG, "max-conns", arg, 1, 1u << 24, &c->max_conns);
	case OPT_SWEEP:
		return nf_parse_u64(PROG, "sweep", arg, 0, 1u << 20, &c->sweep);
	case OPT_TABLE_SIZE:
		if (nf_parse_u64(PROG, "table-size", arg, 3, 1u << 20, &c->table_size) < 0)
			return -1;
		if (!lb_is_prime((uint32_t)c->table_size)) {
			fprintf(stderr, PROG ": --table-size '%s': not a prime (e.g. 251, 4093, 65537, 655373)\n", arg);
			return -1;
		}
		return 0;
	default:
		if (o >= OPT_TO_TCP && o <= OPT_TO_UDP)
			return nf_parse_u64(PROG, to_flag[o - OPT_TO_TCP], arg, 1, 30 * 86400,
					    &c->timeout_s[o - OPT_TO_TCP]);
		return -1;
	}
}

static int start(void *ctx)
{
	struct lb_nf *c = ctx;
	static struct lb_conf conf; /* scratch, as in reload() */
	char err[512];
	if (c->config == NULL) {
		fprintf(stderr, PROG ": --config FILE is required (services and backends; see --help)\n");
		return -1;
	}
	if (lb_conf_load(&conf, c->config, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": %s\n", err);
		return -1;
	}
	if (c->check) {
		printf("%s: ok, %u services, %u backends\n", c->config, conf.n_svc, conf.n_be);
		exit(0);
	}
	uint64_t seed = 0;
	if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
		seed = now_ns();
	if (lb_init(&c->lb, (uint32_t)c->max_conns, (uint32_t)c->table_size, seed) < 0) {
		fprintf(stderr, PROG ": cannot allocate a connection table of %llu entries\n",
			(unsigned long long)c->max_conns);
		return -1;
	}
	/* the IPVS order in lb_ct_timeout(): tcp, tcp-syn, tcp-fin, udp */
	for (int i = 0; i < LB_TO_N; i++)
		if (c->timeout_s[i])
			c->lb.t.timeout_ns[i] = c->timeout_s[i] * 1000000000ull;
	if (lb_apply(&c->lb, &conf, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": %s\n", err);
		lb_free(&c->lb);
		return -1;
	}
	nf_catch_hup();
	return 0;
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct lb_nf *c = ctx;
	c->nf = nf;
	c->c_new = counter(nf, "new_conns");
	c->c_conns = counter(nf, "conns");
	c->c_fwd = counter(nf, "forwarded");
	c->c_rep = counter(nf, "replies");
	c->c_pass = counter(nf, "passed");
	c->c_nobe = counter(nf, "no_backend");
	c->c_full = counter(nf, "table_full");
	c->c_confl = counter(nf, "conflicts");
	c->c_resched = counter(nf, "rescheduled");
	c->c_expired = counter(nf, "expired");
	c->c_malformed = counter(nf, "malformed");
	c->c_nonip = counter(nf, "non_ip");
	c->c_frag = counter(nf, "fragments");
	c->c_reloads = counter(nf, "reloads");
	c->c_reload_errors = counter(nf, "reload_errors");
	for (unsigned s = 0; s < c->lb.n_slots; s++)
		c->lb.slot[s].fresh = c->lb.slot[s].used;
	bind_slots(c);
	publish(c);
	describe(c, "balancing");
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct lb_nf *c = ctx;
	if (out != NULL && c->lb.t.c != NULL)
		fprintf(out, " conns=%u new_conns=%llu forwarded=%llu replies=%llu passed=%llu", c->lb.t.count,
			(unsigned long long)c->lb.st.new_conns, (unsigned long long)c->lb.st.forwarded,
			(unsigned long long)c->lb.st.replies, (unsigned long long)c->lb.st.passed);
	lb_free(&c->lb);
}

static const struct lb_nf defaults = { .max_conns = 65536, .table_size = LB_MAGLEV_M_DEFAULT, .sweep = 64 };

static const struct option opts[] = {
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "check", no_argument, NULL, OPT_CHECK },
	{ "max-conns", required_argument, NULL, OPT_MAX_CONNS },
	{ "table-size", required_argument, NULL, OPT_TABLE_SIZE },
	{ "sweep", required_argument, NULL, OPT_SWEEP },
	{ "timeout-tcp", required_argument, NULL, OPT_TO_TCP },
	{ "timeout-tcp-syn", required_argument, NULL, OPT_TO_TCP_SYN },
	{ "timeout-tcp-fin", required_argument, NULL, OPT_TO_TCP_FIN },
	{ "timeout-udp", required_argument, NULL, OPT_TO_UDP },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "lb",
	.about = "Sluice NF: L4 load balancer (VIPs from --config, Maglev hashing, NAT forwarding,\n"
		 "connection affinity; SIGHUP reloads backends without moving connections).",
	.opts = opts,
	.opts_help =
		"  --config FILE      services and backends (required; docs/nfs/lb.md):\n"
		"                       vip 10.0.0.100 tcp 80\n"
		"                       backend web1 10.0.1.1:8080 [weight W] [disabled|down]\n"
		"                     SIGHUP reloads it at the next packet\n"
		"  --check            check the file's syntax and exit\n"
		"  --max-conns N      connection table capacity (default 65536)\n"
		"  --table-size M     Maglev table entries per service, a prime (default 65537)\n"
		"  --sweep N          connection entries checked for expiry per batch (default 64)\n"
		"  --timeout-tcp S    idle timeout of an answered TCP connection (default 900 s)\n"
		"  --timeout-tcp-syn S  ... of an unanswered TCP connection (default 60 s)\n"
		"  --timeout-tcp-fin S  ... of a TCP connection after FIN or RST (default 120 s)\n"
		"  --timeout-udp S    ... of a UDP flow (default 300 s)\n",
	.ctx_size = sizeof(struct lb_nf),
	.ctx_defaults = &defaults,
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
	.finish = finish,
)
