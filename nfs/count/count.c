/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-count: per-flow packet and byte counters; passes every packet on
 * (SL_ACT_NEXT). The table is written as JSON to --dump FILE (or
 * SLUICE_NF_DUMP) on exit and, at the next batch, after SIGUSR1.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/nf_common.h"
#include "flowtab.h"

enum { OPT_FLOWS = NF_OPT_APP, OPT_DUMP };

struct count_ctx {
	struct flowtab ft;
	uint32_t flows;
	const char *dump;
	int dump_set; /* --dump given (else SLUICE_NF_DUMP, read in start) */
	sig_atomic_t usr1_seen;
	/* reported by sluiced as this NF's counters */
	uint64_t *c_pkts, *c_bytes, *c_flows, *c_full;
};

static uint64_t no_counter; /* where updates go if sluiced gave no info page */

static uint64_t *counter(struct sl_nf *nf, const char *name)
{
	return nf_counter(nf, name, &no_counter);
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct count_ctx *c = ctx;
	c->c_pkts = counter(nf, "packets");
	c->c_bytes = counter(nf, "bytes");
	c->c_flows = counter(nf, "flows");
	c->c_full = counter(nf, "table_full");
	return 0;
}

static int fill_json(FILE *f, void *ctx)
{
	return ft_dump_json(&((const struct count_ctx *)ctx)->ft, f);
}

static void dump(struct count_ctx *c)
{
	if (c->dump != NULL)
		nf_write_file("sluice-nf-count", c->dump, fill_json, c);
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct count_ctx *c = arg;
	(void)nf;
	for (unsigned i = 0; i < n; i++) {
		struct ft_key k;
		ft_key_from_pkt(sl_pkt_data(&pkts[i]), sl_pkt_len(&pkts[i]), &k);
		ft_account(&c->ft, &k, sl_pkt_len(&pkts[i]));
		sl_pkt_set_action(&pkts[i], SL_ACT_NEXT, 0);
	}
	*c->c_pkts = c->ft.total_pkts;
	*c->c_bytes = c->ft.total_bytes;
	*c->c_flows = c->ft.count;
	*c->c_full = c->ft.table_full;
	if (nf_signal_taken(&nf_usr1_gen, &c->usr1_seen))
		dump(c);
}

static int opt(void *ctx, int o, const char *arg)
{
	struct count_ctx *c = ctx;
	if (o == OPT_DUMP) {
		c->dump = arg;
		c->dump_set = 1;
		return 0;
	}
	char *end;
	errno = 0;
	unsigned long long v = strtoull(arg, &end, 10);
	if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || errno != 0 || v < 1 || v > (1u << 28)) {
		fprintf(stderr, "sluice-nf-count: --flows '%s': expected 1..%u\n", arg, 1u << 28);
		return -1;
	}
	c->flows = (uint32_t)v;
	return 0;
}

static int start(void *ctx)
{
	struct count_ctx *c = ctx;
	if (!c->dump_set) { /* no --dump: SLUICE_NF_DUMP, if set and not empty */
		const char *e = getenv("SLUICE_NF_DUMP");
		c->dump = e != NULL && e[0] != '\0' ? e : NULL;
	}
	if (ft_init(&c->ft, c->flows) < 0) {
		fprintf(stderr, "sluice-nf-count: cannot allocate a table of %u flows\n", c->flows);
		return -1;
	}
	nf_catch_usr1();
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct count_ctx *c = ctx;
	if (out != NULL) {
		fprintf(out, " flows=%u pkts=%llu bytes=%llu table_full=%llu", c->ft.count,
			(unsigned long long)c->ft.total_pkts, (unsigned long long)c->ft.total_bytes,
			(unsigned long long)c->ft.table_full);
		dump(c);
	}
	ft_free(&c->ft);
}

static const struct count_ctx defaults = { .flows = 65536 };

static const struct option opts[] = {
	{ "flows", required_argument, NULL, OPT_FLOWS },
	{ "dump", required_argument, NULL, OPT_DUMP },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "count",
	.about = "Sluice NF: count packets and bytes per flow, pass every packet on.",
	.opts = opts,
	.opts_help = "  --flows N          flow table capacity (default 65536)\n"
		     "  --dump FILE        write the flow table as JSON here on exit and on SIGUSR1\n"
		     "                     (SLUICE_NF_DUMP)\n",
	.ctx_size = sizeof(struct count_ctx),
	.ctx_defaults = &defaults,
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
	.finish = finish,
)
