/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-sink: the receiving end of sluice-nf-gen. For every packet it
 * finds the generator's stamp (stamp.h), records the one-way latency in a
 * log-linear histogram (latency_hist.h, TSC cycles) and tracks sequence
 * numbers per generator (received, highest seen, reordered, duplicates,
 * lost). It then drops the packet (--action drop, the default: the sink
 * consumes) or passes it on (--action next).
 *
 * Latency is measured from the generator's TSC read when it wrote the packet
 * to the start of the sink's handler call for the batch holding it (one TSC
 * read per batch: the batch arrived as a whole). Both ends read the same
 * host TSC, so the difference needs no clock synchronisation; a stamp that
 * is nevertheless in the future is counted as clock_skew and not recorded.
 *
 * Loss per generator is (highest sequence seen + 1) - distinct packets seen:
 * packets lost after the last one that arrived are invisible here, so a
 * harness must compare the sink's "received" with the generator's
 * "generated" for those.
 *
 * Results are written as JSON to --dump FILE (or SLUICE_NF_DUMP) on exit and,
 * at the next batch, after SIGUSR1.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/latency_hist.h"
#include "common/nf_common.h"
#include "common/stamp.h"
#include "common/tsc.h"

#define PROG "sluice-nf-sink"
#define MAX_GENS 16

enum { OPT_ACTION = NF_OPT_APP, OPT_DUMP, OPT_MEASURE_ID };

struct gen_state {
	uint32_t id;
	struct seq_track t;
};

struct sink_ctx {
	enum sl_action action;
	const char *dump;
	int dump_set;       /* --dump given (else SLUICE_NF_DUMP, read in start) */
	int64_t measure_id; /* -1: record latency of every stamped packet */
	uint64_t hz;
	uint64_t received, unstamped, clock_skew, gen_overflow;
	unsigned n_gens, last_gen; /* last_gen: where the previous stamp's generator was */
	struct gen_state gens[MAX_GENS];
	struct lat_hist hist;
	sig_atomic_t usr1_seen;
};

/* The tracking slot of generator `id`, or NULL when MAX_GENS others are
 * already tracked. Usually one generator feeds a sink: check the last hit
 * first so the common case is one comparison. */
static struct gen_state *gen_slot(struct sink_ctx *c, uint32_t id)
{
	if (c->last_gen < c->n_gens && c->gens[c->last_gen].id == id)
		return &c->gens[c->last_gen];
	for (unsigned i = 0; i < c->n_gens; i++)
		if (c->gens[i].id == id) {
			c->last_gen = i;
			return &c->gens[i];
		}
	if (c->n_gens == MAX_GENS)
		return NULL;
	struct gen_state *g = &c->gens[c->n_gens];
	g->id = id;
	seq_init(&g->t);
	c->last_gen = c->n_gens++;
	return g;
}

static void put_ns(FILE *f, const char *key, uint64_t cycles, uint64_t hz, int last)
{
	fprintf(f, "\"%s\": %" PRIu64 "%s", key, tsc_to_ns(cycles, hz), last ? "" : ", ");
}

static int fill_json(FILE *f, void *arg)
{
	const struct sink_ctx *c = arg;
	const struct lat_hist *h = &c->hist;

	fprintf(f,
		"{\"received\": %" PRIu64 ", \"unstamped\": %" PRIu64 ", \"clock_skew\": %" PRIu64
		", \"gen_overflow\": %" PRIu64 ", \"tsc_hz\": %" PRIu64 ", \"samples\": %" PRIu64 ",\n",
		c->received, c->unstamped, c->clock_skew, c->gen_overflow, c->hz, h->count);
	if (h->count == 0) {
		fputs(" \"latency_ns\": null,\n", f);
	} else {
		fputs(" \"latency_ns\": {", f);
		put_ns(f, "min", h->min, c->hz, 0);
		put_ns(f, "p50", lh_quantile(h, 0.50), c->hz, 0);
		put_ns(f, "p90", lh_quantile(h, 0.90), c->hz, 0);
		put_ns(f, "p99", lh_quantile(h, 0.99), c->hz, 0);
		put_ns(f, "p999", lh_quantile(h, 0.999), c->hz, 0);
		put_ns(f, "max", h->max, c->hz, 0);
		fprintf(f, "\"mean\": %.1f},\n", lh_mean(h) * 1e9 / (double)c->hz);
	}
	/* non-empty buckets only: [inclusive upper bound in ns, count] */
	fputs(" \"histogram\": [", f);
	int first = 1;
	for (unsigned i = 0; i < LH_BUCKETS; i++) {
		if (h->b[i] == 0)
			continue;
		fprintf(f, "%s[%" PRIu64 ", %" PRIu64 "]", first ? "" : ", ", tsc_to_ns(lh_upper(i), c->hz),
			h->b[i]);
		first = 0;
	}
	fputs("],\n \"generators\": [", f);
	for (unsigned i = 0; i < c->n_gens; i++) {
		const struct gen_state *g = &c->gens[i];
		fprintf(f,
			"%s{\"id\": %u, \"received\": %" PRIu64 ", \"max_seq\": %" PRIu64 ", \"lost\": %" PRIu64
			", \"reordered\": %" PRIu64 ", \"duplicates\": %" PRIu64 "}",
			i == 0 ? "" : ", ", g->id, g->t.received, g->t.max_seq, seq_lost(&g->t), g->t.reordered,
			g->t.duplicates);
	}
	fputs("]}\n", f);
	return ferror(f) ? -1 : 0;
}

static void dump(struct sink_ctx *c)
{
	if (c->dump != NULL)
		nf_write_file(PROG, c->dump, fill_json, c);
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct sink_ctx *c = arg;
	(void)nf;
	uint64_t now = tsc_now();
	c->received += n;
	for (unsigned i = 0; i < n; i++) {
		struct sl_pkt *p = &pkts[i];
		struct stamp s;
		sl_pkt_set_action(p, c->action, 0);
		if (!stamp_find(sl_pkt_data(p), sl_pkt_len(p), &s)) {
			c->unstamped++;
			continue;
		}
		struct gen_state *g = gen_slot(c, s.gen_id);
		if (g != NULL)
			seq_record(&g->t, s.seq);
		else
			c->gen_overflow++;
		if (c->measure_id >= 0 && s.gen_id != (uint64_t)c->measure_id)
			continue;
		if (s.tsc > now)
			c->clock_skew++;
		else
			lh_record(&c->hist, now - s.tsc);
	}
	if (nf_signal_taken(&nf_usr1_gen, &c->usr1_seen))
		dump(c);
}

static int opt(void *ctx, int o, const char *arg)
{
	struct sink_ctx *c = ctx;
	switch (o) {
	case OPT_ACTION:
		if (strcmp(arg, "drop") == 0)
			c->action = SL_ACT_DROP;
		else if (strcmp(arg, "next") == 0)
			c->action = SL_ACT_NEXT;
		else {
			fprintf(stderr, PROG ": --action '%s': expected drop or next\n", arg);
			return -1;
		}
		return 0;
	case OPT_DUMP:
		c->dump = arg[0] != '\0' ? arg : NULL;
		c->dump_set = 1;
		return 0;
	case OPT_MEASURE_ID: {
		uint64_t v;
		if (nf_parse_u64(PROG, "measure-id", arg, 0, UINT32_MAX, &v) < 0)
			return -1;
		c->measure_id = (int64_t)v;
		return 0;
	}
	default:
		return -1;
	}
}

static int start(void *ctx)
{
	struct sink_ctx *c = ctx;
	if (!c->dump_set) { /* no --dump: SLUICE_NF_DUMP, if set and not empty */
		const char *e = getenv("SLUICE_NF_DUMP");
		c->dump = e != NULL && e[0] != '\0' ? e : NULL;
	}
	c->hz = tsc_calibrate(50);
	lh_init(&c->hist);
	nf_catch_usr1();
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct sink_ctx *c = ctx;
	if (out == NULL)
		return;
	fprintf(out, " received=%" PRIu64 " unstamped=%" PRIu64 " clock_skew=%" PRIu64, c->received,
		c->unstamped, c->clock_skew);
	if (c->hist.count != 0)
		fprintf(out, " p50_ns=%" PRIu64 " p99_ns=%" PRIu64,
			tsc_to_ns(lh_quantile(&c->hist, 0.5), c->hz), tsc_to_ns(lh_quantile(&c->hist, 0.99), c->hz));
	dump(c);
}

static const struct sink_ctx defaults = { .action = SL_ACT_DROP, .measure_id = -1 };

static const struct option opts[] = {
	{ "action", required_argument, NULL, OPT_ACTION },
	{ "dump", required_argument, NULL, OPT_DUMP },
	{ "measure-id", required_argument, NULL, OPT_MEASURE_ID },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "sink",
	.about = "Sluice NF: measure latency and loss of sluice-nf-gen's stamped packets.",
	.opts = opts,
	.opts_help = "  --action A         drop (default: consume the packets) or next\n"
		     "  --dump FILE        write results as JSON here on exit and on SIGUSR1\n"
		     "                     (SLUICE_NF_DUMP)\n"
		     "  --measure-id ID    record latency only for generator ID's packets (default:\n"
		     "                     all); sequence tracking still covers every generator\n",
	.ctx_size = sizeof(struct sink_ctx),
	.ctx_defaults = &defaults,
	.opt = opt,
	.start = start,
	.handler = handler,
	.finish = finish,
)
