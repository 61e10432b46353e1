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
 * --out-set SPEC sends every packet out of several ports at once (SL_ACT_OUT_SET):
 * SPEC is a comma list of PORT (the frame as is, shared), PORT:untag (without its
 * outer VLAN tag) or PORT:tag=VID (with an 802.1Q tag pushed). `#N` instead of a
 * name is raw port id N, unchecked: tests use it to probe sluiced's validation.
 */
#include <stdlib.h>
#include <string.h>

#include "common/nf_common.h"
#include "common/tsc.h"

enum { OPT_COST = NF_OPT_APP, OPT_PIN, OPT_OUT, OPT_OUT_SET };

struct fwd_ctx {
	uint64_t cost_ns;
	uint64_t cost_cyc;
	int pin;
	const char *out;      /* --out PORT: send every packet out of this port instead of NEXT */
	const char *out_set;  /* --out-set SPEC */
	uint64_t set_as_is, set_untag, set_tag;
	uint16_t set_tci;
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
	if (c->out_set) {
		for (unsigned i = 0; i < n; i++)
			if (sl_pkt_set_out_set(&pkts[i], c->set_as_is, c->set_untag, c->set_tag, c->set_tci) < 0)
				sl_pkt_set_action(&pkts[i], SL_ACT_DROP, 0); /* no headroom for the set */
		return;
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
	if (o == OPT_OUT_SET) {
		c->out_set = arg;
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

static void no_such_port(struct sl_nf *nf, const char *flag, const char *name)
{
	fprintf(stderr, "sluice-nf-fwd: --%s '%s': sluiced has no such port (ports:", flag, name);
	for (uint32_t i = 0; i < sl_nf_port_count(nf); i++)
		fprintf(stderr, " %s", sl_nf_port_name(nf, i) ? sl_nf_port_name(nf, i) : "?");
	fprintf(stderr, ")\n");
}

/* --out-set SPEC -> the three masks. Returns 0 or -1 (message printed). */
static int parse_out_set(struct sl_nf *nf, struct fwd_ctx *c)
{
	char spec[512];
	if (strlen(c->out_set) >= sizeof(spec)) {
		fprintf(stderr, "sluice-nf-fwd: --out-set: too long\n");
		return -1;
	}
	strcpy(spec, c->out_set);
	char *save = NULL;
	for (char *tok = strtok_r(spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *mode = strchr(tok, ':');
		if (mode)
			*mode++ = '\0';
		int id;
		if (tok[0] == '#') {
			char *end;
			long v = strtol(tok + 1, &end, 10);
			if (*end || end == tok + 1 || v < 0 || v > 63) {
				fprintf(stderr, "sluice-nf-fwd: --out-set '%s': #N needs N in 0..63\n", tok);
				return -1;
			}
			id = (int)v;
		} else if ((id = sl_nf_port_id(nf, tok)) < 0) {
			no_such_port(nf, "out-set", tok);
			return -1;
		}
		uint64_t bit = 1ull << id;
		if (!mode) {
			c->set_as_is |= bit;
		} else if (!strcmp(mode, "untag")) {
			c->set_untag |= bit;
		} else if (!strncmp(mode, "tag=", 4)) {
			char *end;
			long vid = strtol(mode + 4, &end, 10);
			if (*end || end == mode + 4 || vid < 0 || vid > 4095) {
				fprintf(stderr, "sluice-nf-fwd: --out-set '%s:%s': tag=VID needs VID in 0..4095\n", tok, mode);
				return -1;
			}
			c->set_tag |= bit;
			c->set_tci = (uint16_t)vid;
		} else {
			fprintf(stderr, "sluice-nf-fwd: --out-set '%s:%s': mode must be untag or tag=VID\n", tok, mode);
			return -1;
		}
	}
	return 0;
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct fwd_ctx *c = ctx;
	if (c->out_set)
		return parse_out_set(nf, c);
	if (c->out == NULL)
		return 0;
	int id = sl_nf_port_id(nf, c->out);
	if (id < 0) {
		no_such_port(nf, "out", c->out);
		return -1;
	}
	c->action = SL_ACT_OUT;
	c->dest = (uint16_t)id;
	return 0;
}

static const struct option opts[] = { { "cost-ns", required_argument, NULL, OPT_COST },
				      { "pin", no_argument, NULL, OPT_PIN },
				      { "out", required_argument, NULL, OPT_OUT },
				      { "out-set", required_argument, NULL, OPT_OUT_SET }, { 0 } };

SL_NF_PLUGIN_REGISTER(
	.name = "fwd",
	.about = "Sluice NF: forward every packet to the next hop of its chain.",
	.opts = opts,
	.opts_help = "  --cost-ns N        spend N ns of CPU per packet before forwarding (default 0)\n"
		     "  --pin              pin each packet's flow to the next hop: later packets skip this NF\n"
		     "  --out PORT         send every packet out of port PORT (by name) instead of the next hop\n"
		     "  --out-set SPEC     send every packet out of several ports: SPEC is a comma list of\n"
		     "                     PORT (as is), PORT:untag or PORT:tag=VID (e.g. a,b:untag,c:tag=10)\n",
	.ctx_size = sizeof(struct fwd_ctx),
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
)
