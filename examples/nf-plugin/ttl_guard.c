/* SPDX-License-Identifier: BSD-3-Clause
 *
 * An out-of-tree NF on the installed SDK (docs/abi.md "Plugins"): drops IPv4 packets whose TTL is
 * below --min-ttl and passes the rest on. One file, two forms -- see the Makefile beside it:
 *   sluice-nf-ttl_guard      a process of its own (sluice up runs it like any NF)
 *   sluice-nf-ttl_guard.so   a plugin, run as a member of a group by sluice-group
 * Its state lives in its ctx only, so one group may hold several of it.
 */
#include <stdlib.h>
#include <string.h>

#include <sluice/nf_plugin.h>

enum { OPT_MIN_TTL = SL_NF_OPT_APP };

struct guard {
	unsigned min_ttl;
	uint64_t *passed, *dropped; /* counters sluiced reports (sluice stats) */
};

static const struct guard defaults = { .min_ttl = 2 };
static uint64_t sink; /* where counts go if sluiced gave no counter */

static int opt(void *ctx, int o, const char *arg)
{
	struct guard *g = ctx;
	char *end;
	unsigned long v = strtoul(arg, &end, 10);
	if (o != OPT_MIN_TTL || *arg == '\0' || *end != '\0' || v > 255) {
		fprintf(stderr, "sluice-nf-ttl_guard: --min-ttl '%s': expected 0..255\n", arg);
		return -1;
	}
	g->min_ttl = (unsigned)v;
	return 0;
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct guard *g = ctx;
	g->passed = sl_nf_counter(nf, "passed");
	g->dropped = sl_nf_counter(nf, "dropped");
	if (g->passed == NULL)
		g->passed = &sink;
	if (g->dropped == NULL)
		g->dropped = &sink;
	return 0;
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct guard *g = arg;
	(void)nf;
	for (unsigned i = 0; i < n; i++) {
		const uint8_t *f = sl_pkt_data(&pkts[i]);
		/* Ethernet + IPv4: TTL at byte 14 + 8 */
		int low = sl_pkt_len(&pkts[i]) >= 34 && f[12] == 0x08 && f[13] == 0x00 && f[22] < g->min_ttl;
		sl_pkt_set_action(&pkts[i], low ? SL_ACT_DROP : SL_ACT_NEXT, 0);
		++*(low ? g->dropped : g->passed);
	}
}

static const struct option opts[] = {
	{ "min-ttl", required_argument, NULL, OPT_MIN_TTL },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "ttl_guard",
	.about = "Example NF: drops IPv4 packets whose TTL is below --min-ttl.",
	.opts = opts,
	.opts_help = "  --min-ttl N        drop IPv4 packets with a TTL below N (default 2)\n",
	.ctx_size = sizeof(struct guard),
	.ctx_defaults = &defaults,
	.opt = opt,
	.attached = attached,
	.handler = handler,
)
