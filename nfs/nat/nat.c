/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-nat: IPv4 SNAT/masquerade with port allocation and DNAT (port forwarding) between an
 * inside and an outside port; TCP, UDP, ICMP echo and the ICMP errors that quote them. See
 * docs/nfs/nat.md. The per-packet work is in pkt.h, the table in table.h, the config file
 * in conf.h.
 *
 * Packets arriving from the inside port are translated and sent OUT of the outside port and vice
 * versa (--next: NEXT along the chain instead). Packets from any other port are dropped
 * (wrong_port). Everything is preallocated at start; no allocation, logging or syscall per packet
 * (one clock read per batch, through the vDSO).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/nf_common.h"
#include "pkt.h"

enum { OPT_CONFIG = NF_OPT_APP, OPT_INSIDE, OPT_OUTSIDE, OPT_MAX, OPT_NEXT, OPT_TRIES, OPT_SWEEP };

#define PROG "sluice-nf-nat"

struct nat_nf {
	struct nat n;
	const char *config, *inside, *outside;
	uint64_t max_mappings, sweep;
	int next;
	int in_id, out_id;
	/* sluiced-reported counters */
	uint64_t *c_snat_new, *c_dnat_new, *c_tout, *c_tin, *c_icmp_err, *c_nomap, *c_norule, *c_exh,
		*c_full, *c_expired, *c_maps, *c_malformed, *c_nonip, *c_frag, *c_unsup, *c_wrong;
	uint64_t wrong_port;
};

static uint64_t no_counter;

static uint64_t *counter(struct sl_nf *nf, const char *name)
{
	return nf_counter(nf, name, &no_counter);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void publish(struct nat_nf *c)
{
	const struct nat_stats *s = &c->n.st;
	*c->c_snat_new = s->snat_new;
	*c->c_dnat_new = s->dnat_new;
	*c->c_tout = s->translated_out;
	*c->c_tin = s->translated_in;
	*c->c_icmp_err = s->icmp_errors;
	*c->c_nomap = s->no_mapping;
	*c->c_norule = s->no_rule;
	*c->c_exh = s->port_exhausted;
	*c->c_full = s->table_full;
	*c->c_expired = c->n.t.expired;
	*c->c_maps = c->n.t.count;
	*c->c_malformed = s->malformed;
	*c->c_nonip = s->non_ip;
	*c->c_frag = s->fragments;
	*c->c_unsup = s->unsupported;
	*c->c_wrong = c->wrong_port;
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct nat_nf *c = arg;
	(void)nf;
	uint64_t now = now_ms();
	for (unsigned i = 0; i < n; i++) {
		struct sl_pkt *p = &pkts[i];
		uint16_t in_port = sl_pkt_in_port(p);
		int from_out;
		if (in_port == c->in_id)
			from_out = 0;
		else if (in_port == c->out_id)
			from_out = 1;
		else {
			c->wrong_port++;
			sl_pkt_set_action(p, SL_ACT_DROP, 0);
			continue;
		}
		if (nat_packet(&c->n, sl_pkt_data(p), sl_pkt_len(p), from_out, now) != NAT_FWD)
			sl_pkt_set_action(p, SL_ACT_DROP, 0);
		else if (c->next)
			sl_pkt_set_action(p, SL_ACT_NEXT, 0);
		else
			sl_pkt_set_action(p, SL_ACT_OUT, (uint16_t)(from_out ? c->in_id : c->out_id));
	}
	nat_sweep(&c->n.t, (uint32_t)c->sweep, now);
	publish(c);
}

static int opt(void *ctx, int o, const char *arg)
{
	struct nat_nf *c = ctx;
	switch (o) {
	case OPT_CONFIG:
		c->config = arg;
		return 0;
	case OPT_INSIDE:
		c->inside = arg;
		return 0;
	case OPT_OUTSIDE:
		c->outside = arg;
		return 0;
	case OPT_NEXT:
		c->next = 1;
		return 0;
	case OPT_MAX:
		return nf_parse_u64(PROG, "max-mappings", arg, 1, 1u << 24, &c->max_mappings);
	case OPT_SWEEP:
		return nf_parse_u64(PROG, "sweep", arg, 0, 1u << 20, &c->sweep);
	case OPT_TRIES: {
		uint64_t v;
		if (nf_parse_u64(PROG, "port-tries", arg, 1, 65536, &v) < 0)
			return -1;
		c->n.max_tries = (uint32_t)v;
		return 0;
	}
	}
	return -1;
}

static int start(void *ctx)
{
	struct nat_nf *c = ctx;
	if (c->inside == NULL || c->outside == NULL) {
		fprintf(stderr, PROG ": --inside PORT and --outside PORT are required\n");
		return -1;
	}
	nat_conf_default(&c->n.c);
	if (c->config != NULL) {
		char err[512];
		if (nat_conf_load(&c->n.c, c->config, err, sizeof(err)) < 0) {
			fprintf(stderr, PROG ": %s\n", err);
			return -1;
		}
	}
	if (c->n.c.n_snat == 0 && c->n.c.n_dnat == 0)
		fprintf(stderr, PROG ": warning: no snat or dnat rule: every packet will be dropped\n");
	uint32_t seed = 0;
	if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
		seed = (uint32_t)now_ms();
	if (nat_init(&c->n.t, (uint32_t)c->max_mappings, seed) < 0) {
		fprintf(stderr, PROG ": cannot allocate %llu mappings\n", (unsigned long long)c->max_mappings);
		return -1;
	}
	c->n.t.to = c->n.c.to;
	return 0;
}

static int port_id(struct sl_nf *nf, const char *flag, const char *name)
{
	int id = sl_nf_port_id(nf, name);
	if (id < 0) {
		fprintf(stderr, PROG ": --%s '%s': sluiced has no such port (ports:", flag, name);
		for (uint32_t i = 0; i < sl_nf_port_count(nf); i++)
			fprintf(stderr, " %s", sl_nf_port_name(nf, i) ? sl_nf_port_name(nf, i) : "?");
		fprintf(stderr, ")\n");
	}
	return id;
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct nat_nf *c = ctx;
	c->in_id = port_id(nf, "inside", c->inside);
	c->out_id = port_id(nf, "outside", c->outside);
	if (c->in_id < 0 || c->out_id < 0)
		return -1;
	if (c->in_id == c->out_id) {
		fprintf(stderr, PROG ": --inside and --outside name the same port '%s'\n", c->inside);
		return -1;
	}
	c->c_snat_new = counter(nf, "snat_new");
	c->c_dnat_new = counter(nf, "dnat_new");
	c->c_tout = counter(nf, "translated_out");
	c->c_tin = counter(nf, "translated_in");
	c->c_icmp_err = counter(nf, "icmp_errors");
	c->c_nomap = counter(nf, "no_mapping");
	c->c_norule = counter(nf, "no_rule");
	c->c_exh = counter(nf, "port_exhausted");
	c->c_full = counter(nf, "table_full");
	c->c_expired = counter(nf, "expired");
	c->c_maps = counter(nf, "mappings");
	c->c_malformed = counter(nf, "malformed");
	c->c_nonip = counter(nf, "non_ip");
	c->c_frag = counter(nf, "fragments");
	c->c_unsup = counter(nf, "unsupported");
	c->c_wrong = counter(nf, "wrong_port");
	publish(c);
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct nat_nf *c = ctx;
	if (out != NULL && c->n.t.m != NULL)
		fprintf(out, " mappings=%u snat_new=%llu dnat_new=%llu out=%llu in=%llu dropped_no_mapping=%llu",
			c->n.t.count, (unsigned long long)c->n.st.snat_new, (unsigned long long)c->n.st.dnat_new,
			(unsigned long long)c->n.st.translated_out, (unsigned long long)c->n.st.translated_in,
			(unsigned long long)c->n.st.no_mapping);
	nat_free(&c->n.t);
}

static const struct nat_nf defaults = { .max_mappings = 65536, .sweep = 64, .in_id = -1, .out_id = -1,
					.n = { .max_tries = 256 } };

static const struct option opts[] = {
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "inside", required_argument, NULL, OPT_INSIDE },
	{ "outside", required_argument, NULL, OPT_OUTSIDE },
	{ "max-mappings", required_argument, NULL, OPT_MAX },
	{ "port-tries", required_argument, NULL, OPT_TRIES },
	{ "sweep", required_argument, NULL, OPT_SWEEP },
	{ "next", no_argument, NULL, OPT_NEXT },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "nat",
	.about = "Sluice NF: IPv4 SNAT/masquerade and DNAT (port forwarding) between two ports.",
	.opts = opts,
	.opts_help =
		"  --inside PORT      the inside (private) port, by name (required)\n"
		"  --outside PORT     the outside (public) port, by name (required)\n"
		"  --config FILE      rules: snat / dnat / timeout lines (docs/nfs/nat.md)\n"
		"  --max-mappings N   mapping table capacity (default 65536)\n"
		"  --port-tries N     ports tried for a new mapping before port_exhausted (default 256)\n"
		"  --sweep N          mapping slots checked for expiry per batch (default 64)\n"
		"  --next             send translated packets NEXT along the chain instead of OUT of\n"
		"                     the other port\n",
	.ctx_size = sizeof(struct nat_nf),
	.ctx_defaults = &defaults,
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
	.finish = finish,
)
