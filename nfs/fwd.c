/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-fwd: passes every packet on along its chain (SL_ACT_NEXT).
 *
 * --cost-ns N makes it spend N ns of CPU per packet first: a stand-in for an
 * expensive NF, used to slow one replica down in the load-balancing tests.
 * --pin makes it a (trivial) classifier: it pins the flow of every packet it
 * sees to the next hop (sl_pkt_set_flow_action), so sluiced sends the flow's
 * later packets past it.
 * --out PORT sends every packet straight out of the named port (the port's id
 * comes from the SDK's port table, sl_nf_port_id).
 */
#include <stdlib.h>

#include "nf_common.h"
#include "tsc.h"

enum { OPT_COST = NF_OPT_APP, OPT_PIN, OPT_OUT };

struct fwd_ctx {
	uint64_t cost_ns;
	uint64_t cost_cyc;
	int pin;
	const char *out;      /* --out PORT: send every packet out of this port instead of NEXT */
	uint8_t action;
	uint16_t dest;
};

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct fwd_ctx *c = arg;
	(void)nf;
	if (c->cost_cyc) {
		uint64_t until = tsc_now() + c->cost_cyc * n;
		while (tsc_now() < until)
			;
	}
	for (unsigned i = 0; i < n; i++) {
		if (c->pin)
			sl_pkt_set_flow_action(&pkts[i], (enum sl_action)c->action, c->dest);
		else
			sl_pkt_set_action(&pkts[i], (enum sl_action)c->action, c->dest);
	}
}

static int opt(void *ctx, int o, const char *arg)
{
	struct fwd_ctx *c = ctx;
	if (o == OPT_PIN) {
		c->pin = 1;
		return 0;
	}
	if (o == OPT_OUT) {
		c->out = arg;
		return 0;
	}
	return nf_parse_u64("sluice-nf-fwd", "cost-ns", arg, 0, 1000000000ull, &c->cost_ns);
}

static int start(void *ctx)
{
	struct fwd_ctx *c = ctx;
	if (c->cost_ns)
		c->cost_cyc = c->cost_ns * tsc_calibrate(20) / 1000000000ull;
	c->action = SL_ACT_NEXT;
	return 0;
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct fwd_ctx *c = ctx;
	if (c->out == NULL)
		return 0;
	int id = sl_nf_port_id(nf, c->out);
	if (id < 0) {
		fprintf(stderr, "sluice-nf-fwd: --out '%s': sluiced has no such port (ports:", c->out);
		for (uint32_t i = 0; i < sl_nf_port_count(nf); i++)
			fprintf(stderr, " %s", sl_nf_port_name(nf, i) ? sl_nf_port_name(nf, i) : "?");
		fprintf(stderr, ")\n");
		return -1;
	}
	c->action = SL_ACT_OUT;
	c->dest = (uint16_t)id;
	return 0;
}

int main(int argc, char **argv)
{
	static struct fwd_ctx ctx;
	static const struct option opts[] = { { "cost-ns", required_argument, NULL, OPT_COST },
					      { "pin", no_argument, NULL, OPT_PIN },
					      { "out", required_argument, NULL, OPT_OUT }, { 0 } };
	const struct nf_app app = {
		.prog = "sluice-nf-fwd",
		.role = "fwd",
		.about = "Sluice NF: forward every packet to the next hop of its chain.",
		.opts = opts,
		.opts_help = "  --cost-ns N        spend N ns of CPU per packet before forwarding (default 0)\n"
			     "  --pin              pin each packet's flow to the next hop: later packets skip this NF\n"
			     "  --out PORT         send every packet out of port PORT (by name) instead of the next hop\n",
		.opt = opt,
		.start = start,
		.attached = attached,
		.handler = handler,
		.ctx = &ctx,
	};
	return nf_app_main(argc, argv, &app);
}
