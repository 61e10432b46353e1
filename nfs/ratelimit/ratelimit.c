/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-ratelimit: token-bucket policing per class or per flow. Each IPv4/IPv6 packet is matched
 * against the classes of the --config file (first match wins; unmatched traffic passes). The class's
 * meter -- an exact RFC 2697 srTCM or RFC 2698 trTCM on the TSC, colour-blind or colour-aware --
 * colours it green, yellow or red, and the class's action for that colour passes, re-marks (DSCP) or
 * drops it. A `per-flow` class gives every 5-tuple its own meter in a bounded table with expiry.
 * SIGHUP reloads the file at the next batch (meters restart full).
 * Docs: docs/nfs/ratelimit.md. Logic: meter.h, pkt.h, conf.h, flow.h.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/nf_common.h"
#include "common/tsc.h"
#include "conf.h"
#include "flow.h"

#define PROG "sluice-nf-ratelimit"

enum { OPT_CONFIG = NF_OPT_APP, OPT_CHECK, OPT_FLOWS, OPT_FLOW_TIMEOUT, OPT_NON_IP };

struct rl_ctx {
	const char *config;
	int check;
	uint8_t non_ip_drop;
	uint64_t flows, flow_timeout_s;
	uint64_t hz;
	struct rl_conf cf;
	struct rl_ftab ft;
	uint64_t idle[RL_CLASSES_MAX]; /* per class: idle limit of a per-flow meter (for the table) */
	struct sl_nf *nf;
	sig_atomic_t hup_seen;
	uint64_t sink[11]; /* where the counters below point if sluiced gave no info page or no room */
	uint64_t *c_passed, *c_dropped, *c_marked, *c_unmatched, *c_non_ip, *c_malformed, *c_flows,
		*c_flow_full, *c_flow_expired, *c_reloads, *c_reload_errors;
};

static uint64_t no_counter[RL_CTR_N]; /* where updates go if sluiced gave no room */


/* Give every class its six counters NAME.green, NAME.green_b, NAME.yellow, ... */
static void classes_bind(struct sl_nf *nf, struct rl_conf *cf)
{
	static const char *const sfx[RL_CTR_N] = { "green", "green_b", "yellow", "yellow_b", "red", "red_b" };
	for (unsigned i = 0; i < cf->n; i++)
		for (int k = 0; k < RL_CTR_N; k++) {
			char name[SL_COUNTER_NAME_MAX + 16];
			snprintf(name, sizeof(name), "%s.%s", cf->c[i].name, sfx[k]);
			cf->c[i].ctr[k] = nf_counter(nf, name, &no_counter[k]);
		}
}

static void conf_start(struct rl_ctx *c)
{
	rl_conf_start(&c->cf, c->hz, tsc_now(), c->flow_timeout_s * c->hz);
	for (unsigned i = 0; i < c->cf.n; i++)
		c->idle[i] = c->cf.c[i].idle_cycles;
}

static void reload(struct rl_ctx *c)
{
	struct rl_conf ncf;
	char err[512];
	if (rl_conf_load(c->config, &ncf, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": reload failed, keeping the previous classes: %s\n", err);
		(*c->c_reload_errors)++;
		return;
	}
	rl_conf_free(&c->cf);
	c->cf = ncf;
	classes_bind(c->nf, &c->cf);
	conf_start(c);
	rl_ftab_clear(&c->ft); /* flow entries carry class indices of the old file */
	*c->c_flows = 0;
	(*c->c_reloads)++;
	fprintf(stderr, PROG ": reloaded %s: %u classes\n", c->config, c->cf.n);
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct rl_ctx *c = arg;
	uint64_t passed = 0, marked = 0;
	(void)nf;

	if (nf_signal_taken(&nf_hup_gen, &c->hup_seen))
		reload(c);
	/* one clock read per batch: the batch arrived as a whole */
	const uint64_t now = tsc_now();
	if (c->ft.count > 0)
		*c->c_flow_expired += rl_ftab_sweep(&c->ft, 8, now, c->idle);
	for (unsigned i = 0; i < n; i++)
		__builtin_prefetch(sl_pkt_data(&pkts[i]));

	for (unsigned i = 0; i < n; i++) {
		struct sl_pkt *p = &pkts[i];
		uint8_t *d = sl_pkt_data(p);
		struct rl_pkt k;
		int act = RL_ACT_PASS;

		switch (rl_parse(d, sl_pkt_len(p), &k)) {
		case RL_P_MALFORMED:
			(*c->c_malformed)++;
			act = RL_ACT_DROP;
			goto done;
		case RL_P_NON_IP:
			(*c->c_non_ip)++;
			act = c->non_ip_drop ? RL_ACT_DROP : RL_ACT_PASS;
			goto done;
		default:
			break;
		}
		int ci = rl_classify(&c->cf, &k);
		if (ci < 0) {
			(*c->c_unmatched)++;
			goto done;
		}
		struct rl_class *cl = &c->cf.c[ci];
		struct rl_meter *m = &cl->shared;
		if (cl->per_flow) {
			struct rl_fkey fk;
			int created;
			rl_fkey_make(&fk, &k, (uint16_t)ci);
			uint32_t h = rl_fkey_hash(&fk);
			struct rl_fentry *e = rl_ftab_get(&c->ft, &fk, h, now, c->idle, &created);
			if (e == NULL) {
				/* full: make room from expired flows, once per packet at most */
				*c->c_flow_expired += rl_ftab_sweep(&c->ft, 256, now, c->idle);
				e = rl_ftab_get(&c->ft, &fk, h, now, c->idle, &created);
			}
			if (e != NULL) {
				if (created) {
					*c->c_flow_expired += created == 2;
					rl_meter_init(&cl->mp, &e->m, now);
				}
				m = &e->m;
			} else {
				(*c->c_flow_full)++; /* policed by the class's shared meter */
			}
		}
		uint32_t len = c->cf.len_frame ? sl_pkt_len(p) : k.l3_len;
		enum rl_color col = rl_meter_color(&cl->mp, m, now, len,
						   cl->color_aware ? rl_precolor(k.dscp) : RL_GREEN);
		(*cl->ctr[col * 2])++;
		*cl->ctr[col * 2 + 1] += len;
		const struct rl_action *a = &cl->act[col];
		act = a->kind;
		if (act == RL_ACT_MARK) {
			if (k.dscp != a->dscp)
				rl_set_dscp(d, &k, a->dscp);
			marked++;
		}
	done:
		passed += act != RL_ACT_DROP;
		sl_pkt_set_action(p, act == RL_ACT_DROP ? SL_ACT_DROP : SL_ACT_NEXT, 0);
	}
	*c->c_passed += passed;
	*c->c_dropped += n - passed;
	*c->c_marked += marked;
	*c->c_flows = c->ft.count;
}

static int opt(void *ctx, int o, const char *arg)
{
	struct rl_ctx *c = ctx;
	switch (o) {
	case OPT_CONFIG:
		c->config = arg;
		return 0;
	case OPT_CHECK:
		c->check = 1;
		return 0;
	case OPT_FLOWS:
		return nf_parse_u64(PROG, "flows", arg, 1, 1u << 24, &c->flows);
	case OPT_FLOW_TIMEOUT:
		return nf_parse_u64(PROG, "flow-timeout", arg, 1, 86400, &c->flow_timeout_s);
	case OPT_NON_IP:
		if (strcmp(arg, "pass") == 0)
			c->non_ip_drop = 0;
		else if (strcmp(arg, "drop") == 0)
			c->non_ip_drop = 1;
		else {
			fprintf(stderr, PROG ": --non-ip '%s': expected pass or drop\n", arg);
			return -1;
		}
		return 0;
	default:
		return -1;
	}
}

static int start(void *ctx)
{
	struct rl_ctx *c = ctx;
	char err[512];
	if (c->config == NULL) {
		fprintf(stderr, PROG ": --config FILE is required (the class file; see --help)\n");
		return -1;
	}
	if (rl_conf_load(c->config, &c->cf, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": %s\n", err);
		return -1;
	}
	if (c->check) {
		unsigned pf = 0;
		for (unsigned i = 0; i < c->cf.n; i++)
			pf += c->cf.c[i].per_flow;
		printf("%s: ok, %u classes (%u per-flow), length %s\n", c->config, c->cf.n, pf,
		       c->cf.len_frame ? "frame" : "ip");
		rl_conf_free(&c->cf);
		exit(0);
	}
	if (rl_ftab_init(&c->ft, (uint32_t)c->flows) < 0) {
		fprintf(stderr, PROG ": cannot allocate a flow table of %llu entries\n",
			(unsigned long long)c->flows);
		return -1;
	}
	c->hz = tsc_calibrate(50);
	nf_catch_hup();
	return 0;
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct rl_ctx *c = ctx;
	uint64_t *sink = c->sink;
	c->nf = nf;
	c->c_passed = nf_counter(nf, "passed", &sink[0]);
	c->c_dropped = nf_counter(nf, "dropped", &sink[1]);
	c->c_marked = nf_counter(nf, "marked", &sink[2]);
	c->c_unmatched = nf_counter(nf, "unmatched", &sink[3]);
	c->c_non_ip = nf_counter(nf, "non_ip", &sink[4]);
	c->c_malformed = nf_counter(nf, "malformed", &sink[5]);
	c->c_flows = nf_counter(nf, "flows", &sink[6]);
	c->c_flow_full = nf_counter(nf, "flow_full", &sink[7]);
	c->c_flow_expired = nf_counter(nf, "flow_expired", &sink[8]);
	c->c_reloads = nf_counter(nf, "reloads", &sink[9]);
	c->c_reload_errors = nf_counter(nf, "reload_errors", &sink[10]);
	classes_bind(nf, &c->cf);
	conf_start(c); /* buckets start full now, not at the calibration before attach */
	fprintf(stderr, PROG ": %s: %u classes, flow table %u, tsc %llu Hz\n", c->config, c->cf.n, c->ft.cap,
		(unsigned long long)c->hz);
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct rl_ctx *c = ctx;
	if (out != NULL && c->c_passed != NULL)
		fprintf(out, " passed=%llu dropped=%llu marked=%llu flows=%u",
			(unsigned long long)*c->c_passed, (unsigned long long)*c->c_dropped,
			(unsigned long long)*c->c_marked, c->ft.count);
	rl_conf_free(&c->cf);
	rl_ftab_free(&c->ft);
}

static const struct rl_ctx defaults = { .flows = 65536, .flow_timeout_s = 60 };

static const struct option opts[] = {
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "check", no_argument, NULL, OPT_CHECK },
	{ "flows", required_argument, NULL, OPT_FLOWS },
	{ "flow-timeout", required_argument, NULL, OPT_FLOW_TIMEOUT },
	{ "non-ip", required_argument, NULL, OPT_NON_IP },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "ratelimit",
	.about = "Sluice NF: token-bucket policing per class or per flow (RFC 2697 srTCM / RFC 2698 trTCM,\n"
		 "colour-blind or colour-aware; green/yellow/red -> pass, mark DSCP or drop; SIGHUP reloads).",
	.opts = opts,
	.opts_help =
		"  --config FILE      class file (required; docs/nfs/ratelimit.md); SIGHUP reloads it, e.g.\n"
		"                       class web match proto tcp dport 80 srtcm cir 10M cbs 64k ebs 128k yellow mark af12\n"
		"                       class per-host per-flow match src 10.0.0.0/8 trtcm cir 1M pir 2M cbs 8k pbs 16k\n"
		"  --check            check the class file's syntax and exit\n"
		"  --flows N          per-flow meter table capacity (default 65536; full: the class's shared meter)\n"
		"  --flow-timeout S   forget a flow idle this long, or until its buckets are full again (default 60)\n"
		"  --non-ip pass|drop what to do with non-IP frames such as ARP (default pass)\n",
	.ctx_size = sizeof(struct rl_ctx),
	.ctx_defaults = &defaults,
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
	.finish = finish,
)
