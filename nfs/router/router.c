/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-router: an IPv4/IPv6 router. Longest-prefix match (DIR-24-8 for IPv4, an 8-bit-stride
 * trie for IPv6: lpm.h), TTL / hop limit decrement with an incremental checksum update,
 * ICMP/ICMPv6 time exceeded and destination unreachable, next-hop MAC from static neighbours or
 * ARP / neighbour discovery, answers ARP and NS for its own addresses and pings to them. Every
 * reply, error and request is the received buffer rewritten in place. Routes, addresses and
 * neighbours come from --config (conf.h); SIGHUP reloads it at the next batch, keeping the
 * learned neighbours. --lookup prints the FIB decision for addresses read from stdin (same tables,
 * no sluiced needed). Docs: docs/nfs/router.md.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/nf_common.h"
#include "pkt.h"

#define PROG "sluice-nf-router"

enum { OPT_CONFIG = NF_OPT_APP, OPT_LOOKUP, OPT_NEIGH_MAX, OPT_ICMP_RATE, OPT_ICMP_BURST };

struct rt_ctx {
	const char *config;
	int lookup;
	uint64_t neigh_max, icmp_rate, icmp_burst;
	struct rt_conf conf;
	struct router r;
	struct sl_nf *nf;
	sig_atomic_t hup_seen;
#define RT_C(n) uint64_t *c_##n;
	RT_STATS(RT_C)
#undef RT_C
	uint64_t *c_out[RT_PORTS_MAX];
	uint64_t *c_reloads, *c_reload_errors, *c_neighbours;
};

static uint64_t no_counter;

static uint64_t *counter(struct sl_nf *nf, const char *name)
{
	return nf_counter(nf, name, &no_counter);
}

/* Give conf's ports their sluiced ids. Returns 0 or -1 with a message in err. */
static int resolve_ports(struct sl_nf *nf, struct rt_conf *c, const char *file, char *err, size_t errlen)
{
	for (unsigned p = 0; p < c->n_ports; p++) {
		int id = sl_nf_port_id(nf, c->ports[p].name);
		if (id < 0 || id >= 256) {
			int n = snprintf(err, errlen, "%s:%d: port: '%s' is not a sluiced port (ports:", file,
					 c->ports[p].mac_line, c->ports[p].name);
			for (uint32_t i = 0; i < sl_nf_port_count(nf) && n > 0 && (size_t)n < errlen; i++)
				n += snprintf(err + n, errlen - (size_t)n, " %s",
					      sl_nf_port_name(nf, i) ? sl_nf_port_name(nf, i) : "?");
			if (n > 0 && (size_t)n < errlen)
				snprintf(err + n, errlen - (size_t)n, ")");
			return -1;
		}
		c->ports[p].sl_id = id;
	}
	return 0;
}

static void port_counters(struct rt_ctx *x)
{
	for (unsigned p = 0; p < RT_PORTS_MAX; p++) {
		x->c_out[p] = &no_counter;
		if (p < x->conf.n_ports) {
			char name[64];
			snprintf(name, sizeof(name), "out.%s", x->conf.ports[p].name);
			x->c_out[p] = counter(x->nf, name);
		}
	}
}

/* Build the router state for conf (ports resolved): a fresh neighbour table with the static
 * neighbours, plus the learned ones of `old` whose port still exists (by name). */
static int router_make(struct rt_ctx *x, struct rt_conf *conf, struct router *nr, const struct router *old,
		       const struct rt_conf *oldc, char *err, size_t errlen)
{
	memset(nr, 0, sizeof(*nr));
	nr->c = conf;
	if (rt_neigh_init(&nr->nb, (uint32_t)x->neigh_max) < 0) {
		snprintf(err, errlen, "out of memory for %llu neighbours", (unsigned long long)x->neigh_max);
		return -1;
	}
	if (rt_bind(nr) < 0) {
		snprintf(err, errlen, "%s: more static neighbours than --neigh-max %llu", x->config,
			 (unsigned long long)x->neigh_max);
		rt_neigh_free(&nr->nb);
		return -1;
	}
	if (old != NULL) {
		for (uint32_t i = 0; i <= old->nb.mask; i++) {
			const struct rt_neigh_e *e = &old->nb.e[i];
			if (e->state != RT_NB_DYNAMIC)
				continue;
			int p = rt_port_find(conf, oldc->ports[e->port].name);
			if (p < 0)
				continue;
			struct rt_neigh_e *n = rt_neigh_get(&nr->nb, (unsigned)p, e->family, e->addr, 1);
			if (n != NULL && n->state != RT_NB_STATIC) {
				n->state = RT_NB_DYNAMIC;
				memcpy(n->mac, e->mac, 6);
			}
		}
		nr->st = old->st;
		memset(nr->st.out, 0, sizeof(nr->st.out));
		nr->icmp_credit = old->icmp_credit;
		nr->icmp_last = old->icmp_last;
		nr->ip_id = old->ip_id;
	} else {
		nr->icmp_credit = x->icmp_burst * 1000000000ull;
	}
	nr->icmp_rate = x->icmp_rate;
	nr->icmp_burst = x->icmp_burst;
	return 0;
}

static void reload(struct rt_ctx *x)
{
	struct rt_conf nc;
	struct router nr;
	char err[1024];
	if (rt_conf_load(&nc, x->config, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": reload failed, keeping the previous configuration: %s\n", err);
		(*x->c_reload_errors)++;
		return;
	}
	if (resolve_ports(x->nf, &nc, x->config, err, sizeof(err)) < 0 ||
	    router_make(x, &nc, &nr, &x->r, &x->conf, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": reload failed, keeping the previous configuration: %s\n", err);
		rt_conf_free(&nc);
		(*x->c_reload_errors)++;
		return;
	}
	rt_neigh_free(&x->r.nb);
	rt_conf_free(&x->conf);
	x->conf = nc;
	x->r = nr;
	x->r.c = &x->conf;
	port_counters(x);
	(*x->c_reloads)++;
	fprintf(stderr, PROG ": reloaded %s: %u ports, %u IPv4 and %u IPv6 table entries, %u static neighbours\n",
		x->config, x->conf.n_ports, x->conf.n4_routes, x->conf.n6_routes, x->conf.n_neighs);
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct rt_ctx *x = arg;
	struct router *r = &x->r;
	struct timespec ts;
	(void)nf;
	if (nf_signal_taken(&nf_hup_gen, &x->hup_seen))
		reload(x);
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no system call */
	r->now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	for (unsigned i = 0; i < n; i++) {
		if (i + 1 < n)
			__builtin_prefetch(sl_pkt_data(&pkts[i + 1]));
		rt_packet(r, &pkts[i]);
	}
#define RT_P(f) *x->c_##f = r->st.f;
	RT_STATS(RT_P)
#undef RT_P
	for (unsigned p = 0; p < x->conf.n_ports; p++) {
		*x->c_out[p] += r->st.out[p];
		r->st.out[p] = 0;
	}
	*x->c_neighbours = r->nb.used;
}

static void print_lookup(const struct rt_conf *c, const char *s)
{
	uint8_t a[16];
	char g[64];
	int fam = rt_parse_ip(s, a);
	if (fam == 0) {
		printf("%s invalid\n", s);
		return;
	}
	uint32_t id = rt_lookup(c, fam, a);
	if (id == 0) {
		printf("%s unreachable\n", s);
		return;
	}
	const struct rt_nh *nh = &c->nh[id];
	if (nh->type == RT_NH_LOCAL) {
		printf("%s local\n", s);
	} else if (nh->type == RT_NH_BCAST) {
		printf("%s broadcast dev %s\n", s, c->ports[nh->port].name);
	} else if (nh->has_gw) {
		uint8_t gw[16] = { 0 };
		if (fam == 4)
			rt_wr32(gw, nh->gw4);
		else
			memcpy(gw, nh->gw6, 16);
		rt_fmt(fam, gw, g, sizeof(g));
		printf("%s via %s dev %s\n", s, g, c->ports[nh->port].name);
	} else {
		printf("%s dev %s\n", s, c->ports[nh->port].name);
	}
}

static int lookup_mode(struct rt_ctx *x)
{
	char line[256];
	while (fgets(line, sizeof(line), stdin) != NULL) {
		char *t = strtok(line, " \t\r\n");
		if (t != NULL)
			print_lookup(&x->conf, t);
	}
	fflush(stdout);
	return 0;
}

static int opt(void *ctx, int o, const char *arg)
{
	struct rt_ctx *x = ctx;
	switch (o) {
	case OPT_CONFIG:
		x->config = arg;
		return 0;
	case OPT_LOOKUP:
		x->lookup = 1;
		return 0;
	case OPT_NEIGH_MAX:
		return nf_parse_u64(PROG, "neigh-max", arg, 1, 1u << 22, &x->neigh_max);
	case OPT_ICMP_RATE:
		return nf_parse_u64(PROG, "icmp-rate", arg, 0, 100000000, &x->icmp_rate);
	case OPT_ICMP_BURST:
		return nf_parse_u64(PROG, "icmp-burst", arg, 1, 1000000, &x->icmp_burst);
	}
	return -1;
}

static int start(void *ctx)
{
	struct rt_ctx *x = ctx;
	char err[1024];
	if (x->config == NULL) {
		fprintf(stderr, PROG ": --config FILE is required\n");
		return -1;
	}
	if (rt_conf_load(&x->conf, x->config, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": %s\n", err);
		return -1;
	}
	if (x->lookup) {
		lookup_mode(x);
		rt_conf_free(&x->conf);
		exit(0);
	}
	nf_catch_hup();
	return 0;
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct rt_ctx *x = ctx;
	char err[1024];
	x->nf = nf;
	if (resolve_ports(nf, &x->conf, x->config, err, sizeof(err)) < 0 ||
	    router_make(x, &x->conf, &x->r, NULL, NULL, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": %s\n", err);
		return -1;
	}
#define RT_R(f) x->c_##f = counter(nf, #f);
	RT_STATS(RT_R)
#undef RT_R
	x->c_reloads = counter(nf, "reloads");
	x->c_reload_errors = counter(nf, "reload_errors");
	x->c_neighbours = counter(nf, "neighbours");
	port_counters(x);
	fprintf(stderr, PROG ": %s: %u ports, %u IPv4 and %u IPv6 table entries, %u static neighbours\n",
		x->config, x->conf.n_ports, x->conf.n4_routes, x->conf.n6_routes, x->conf.n_neighs);
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct rt_ctx *x = ctx;
	if (out != NULL)
		fprintf(out, " forwarded=%llu no_route=%llu ttl_exceeded=%llu arp_miss=%llu",
			(unsigned long long)x->r.st.forwarded, (unsigned long long)x->r.st.no_route,
			(unsigned long long)x->r.st.ttl_exceeded, (unsigned long long)x->r.st.arp_miss);
	rt_neigh_free(&x->r.nb);
	rt_conf_free(&x->conf);
}

static const struct rt_ctx defaults = { .neigh_max = 4096, .icmp_rate = 1000, .icmp_burst = 50 };

static const struct option opts[] = {
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "lookup", no_argument, NULL, OPT_LOOKUP },
	{ "neigh-max", required_argument, NULL, OPT_NEIGH_MAX },
	{ "icmp-rate", required_argument, NULL, OPT_ICMP_RATE },
	{ "icmp-burst", required_argument, NULL, OPT_ICMP_BURST },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "router",
	.about = "Sluice NF: IPv4/IPv6 router (LPM, TTL, ICMP errors, ARP/ND; SIGHUP reloads --config).",
	.opts = opts,
	.opts_help =
		"  --config FILE      addresses, routes, neighbours (required; docs/nfs/router.md)\n"
		"  --lookup           print the route for each address read from stdin, then exit\n"
		"                     (no sluiced needed): 'ADDR via GW dev PORT', 'ADDR dev PORT',\n"
		"                     'ADDR local', 'ADDR broadcast dev PORT', 'ADDR unreachable'\n"
		"  --neigh-max N      neighbour table capacity (default 4096)\n"
		"  --icmp-rate N      ICMP errors per second at most, 0 = no limit (default 1000)\n"
		"  --icmp-burst N     ICMP errors at once after a quiet time (default 50)\n",
	.ctx_size = sizeof(struct rt_ctx),
	.ctx_defaults = &defaults,
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
	.finish = finish,
)
