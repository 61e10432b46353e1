/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The router NF's configuration (nfs/router/router.c, docs/nfs/router.md): parsing of the --config
 * file, the next-hop table and the LPM tables built from it, and the neighbour table. DPDK-free and
 * SDK-free, so the unit test (tests/unit/test_router.c) and the --lookup mode use the same code as
 * the packet path.
 *
 *   addr PORT IP/LEN MAC                     the router's address on PORT (and PORT's MAC);
 *                                            implies the connected route IP/LEN dev PORT
 *   route PREFIX via GATEWAY dev PORT        a route through a gateway on a connected subnet
 *   route PREFIX dev PORT                    a directly connected route
 *   neigh IP lladdr MAC dev PORT             a static neighbour
 *
 * IPv4 and IPv6 everywhere; `#` starts a comment. Errors name the line and the field:
 *   router.conf:7: via: '10.9.9.9' is not on a connected subnet of port 'b'
 */
#ifndef SLUICE_NFS_ROUTER_CONF_H
#define SLUICE_NFS_ROUTER_CONF_H

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpm.h"

#define RT_PORTS_MAX 32
#define RT_ADDRS_MAX 8
#define RT_NAME_MAX 32

enum rt_nh_type { RT_NH_FWD = 0, RT_NH_LOCAL, RT_NH_BCAST };

struct rt_port {
	char name[RT_NAME_MAX];
	uint8_t mac[6];
	int mac_line;
	unsigned n4, n6;
	uint32_t a4[RT_ADDRS_MAX];       /* host order */
	uint8_t l4[RT_ADDRS_MAX];
	uint8_t a6[RT_ADDRS_MAX][16];
	uint8_t l6[RT_ADDRS_MAX];
	int sl_id;                       /* sluiced port id, -1 until resolved */
};

struct rt_nh {
	uint8_t type;      /* enum rt_nh_type */
	uint8_t port;      /* index into conf.ports */
	uint8_t family;    /* 4 or 6 */
	uint8_t has_gw;    /* 0: connected (the destination is the neighbour) */
	uint32_t gw4;      /* host order */
	uint8_t gw6[16];
};

struct rt_route {
	uint8_t family, len, connected_from_addr;
	uint8_t prefix[16];  /* IPv4: the first 4 bytes, network order */
	uint32_t nh;         /* next-hop id */
	int line;
};

struct rt_sneigh {
	uint8_t family, port;
	uint8_t addr[16];
	uint8_t mac[6];
	int line;
};

struct rt_conf {
	struct rt_port ports[RT_PORTS_MAX];
	unsigned n_ports;
	struct rt_route *routes;
	unsigned n_routes, cap_routes;
	struct rt_nh *nh;    /* nh[0] unused: id 0 means "no route" */
	unsigned n_nh, cap_nh;
	struct rt_sneigh *neighs;
	unsigned n_neighs, cap_neighs;
	struct lpm4 l4;
	struct lpm6 l6;
	unsigned n4_routes, n6_routes;
};

/* ---------------------------------------------------------------- small parsers */

static inline int rt_parse_mac(const char *s, uint8_t mac[6])
{
	unsigned v[6];
	char tail;
	if (strlen(s) != 17 || sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4],
				      &v[5], &tail) != 6)
		return -1;
	for (int i = 0; i < 6; i++) {
		if (!isxdigit((unsigned char)s[i * 3]) || !isxdigit((unsigned char)s[i * 3 + 1]))
			return -1;
		mac[i] = (uint8_t)v[i];
	}
	if (mac[0] & 1) /* multicast / broadcast: not a station address */
		return -1;
	return 0;
}

/* "IP" (host route) or "IP/LEN". Returns family 4 or 6, or 0. addr gets 16 bytes (v4 in the first 4). */
static inline int rt_parse_ip(const char *s, uint8_t addr[16])
{
	memset(addr, 0, 16);
	if (strchr(s, ':') != NULL)
		return inet_pton(AF_INET6, s, addr) == 1 ? 6 : 0;
	return inet_pton(AF_INET, s, addr) == 1 ? 4 : 0;
}

static inline int rt_parse_prefix(const char *s, uint8_t addr[16], unsigned *len, int *host_bits)
{
	char buf[64];
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);
	if (n == 0 || n >= sizeof(buf))
		return 0;
	memcpy(buf, s, n);
	buf[n] = '\0';
	int fam = rt_parse_ip(buf, addr);
	if (fam == 0)
		return 0;
	unsigned max = fam == 4 ? 32 : 128;
	if (slash) {
		const char *l = slash + 1;
		char *end;
		if (!isdigit((unsigned char)l[0]) || strlen(l) > 3)
			return 0;
		unsigned long v = strtoul(l, &end, 10);
		if (*end != '\0' || v > max)
			return 0;
		*len = (unsigned)v;
	} else {
		*len = max;
	}
	*host_bits = 0;
	for (unsigned b = *len; b < max; b++)
		if (addr[b / 8] & (0x80 >> (b % 8)))
			*host_bits = 1;
	return fam;
}

static inline int rt_prefix_match(const uint8_t *a, const uint8_t *p, unsigned len)
{
	unsigned full = len / 8, rem = len % 8;
	if (memcmp(a, p, full) != 0)
		return 0;
	if (rem == 0)
		return 1;
	uint8_t m = (uint8_t)(0xff << (8 - rem));
	return (a[full] & m) == (p[full] & m);
}

static inline uint32_t rt_rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void rt_wr32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline void rt_fmt(int family, const uint8_t *addr, char *out, size_t n)
{
	inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, out, (socklen_t)n);
}

/* ---------------------------------------------------------------- conf building */

static inline void rt_conf_free(struct rt_conf *c)
{
	free(c->routes);
	free(c->nh);
	free(c->neighs);
	lpm4_free(&c->l4);
	lpm6_free(&c->l6);
	memset(c, 0, sizeof(*c));
}

#define RT_GROW(arr, n, cap)                                                                  \
	((n) < (cap) ? 0                                                                      \
		     : ((cap) = (cap) ? (cap) * 2 : 16,                                       \
			((arr) = realloc_or_free((arr), (size_t)(cap) * sizeof(*(arr)))) ? 0 : -1))

static inline void *realloc_or_free(void *p, size_t n)
{
	void *q = realloc(p, n);
	if (q == NULL)
		free(p);
	return q;
}

static inline int rt_port_find(const struct rt_conf *c, const char *name)
{
	for (unsigned i = 0; i < c->n_ports; i++)
		if (strcmp(c->ports[i].name, name) == 0)
			return (int)i;
	return -1;
}

struct rt_err {
	char *buf;
	size_t len;
	const char *file;
};

static inline int rt_fail(struct rt_err *e, int line, const char *field, const char *val, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (line > 0)
		snprintf(e->buf, e->len, "%s:%d: %s: '%s' %s", e->file, line, field, val, why);
	else
		snprintf(e->buf, e->len, "%s: %s: '%s' %s", e->file, field, val, why);
	return -1;
}

/* The port index for `name` on a route/neigh line (it must have an addr line). */
static inline int rt_need_port(struct rt_conf *c, struct rt_err *e, int line, const char *name)
{
	int p = rt_port_find(c, name);
	if (p < 0)
		return rt_fail(e, line, "dev", name, "is not a port of this router (no 'addr %s ...' line)", name);
	return p;
}

/* A statement's keyword arguments ("via X dev Y"): value of `key`, NULL if absent. */
static inline const char *rt_kw(char **tok, int ntok, int from, const char *key)
{
	for (int i = from; i + 1 < ntok; i += 2)
		if (strcmp(tok[i], key) == 0)
			return tok[i + 1];
	return NULL;
}

static inline int rt_check_kws(struct rt_err *e, int line, char **tok, int ntok, int from,
			       const char *const *allowed)
{
	for (int i = from; i < ntok; i += 2) {
		int ok = 0;
		for (const char *const *a = allowed; *a; a++)
			if (strcmp(tok[i], *a) == 0)
				ok = 1;
		if (!ok)
			return rt_fail(e, line, "keyword", tok[i], "is not expected here");
		if (i + 1 >= ntok)
			return rt_fail(e, line, tok[i], "", "needs a value");
		for (int j = from; j < i; j += 2)
			if (strcmp(tok[j], tok[i]) == 0)
				return rt_fail(e, line, tok[i], tok[i + 1], "is given twice");
	}
	return 0;
}

static inline int rt_add_route(struct rt_conf *c, int family, const uint8_t *prefix, unsigned len,
			       const struct rt_nh *nh, int line, int from_addr)
{
	if (RT_GROW(c->nh, c->n_nh, c->cap_nh) < 0 || RT_GROW(c->routes, c->n_routes, c->cap_routes) < 0)
		return -1;
	if (c->n_nh == 0) { /* id 0 stays unused */
		memset(&c->nh[0], 0, sizeof(c->nh[0]));
		c->n_nh = 1;
		if (RT_GROW(c->nh, c->n_nh, c->cap_nh) < 0)
			return -1;
	}
	c->nh[c->n_nh] = *nh;
	struct rt_route *r = &c->routes[c->n_routes++];
	memset(r, 0, sizeof(*r));
	r->family = (uint8_t)family;
	r->len = (uint8_t)len;
	memcpy(r->prefix, prefix, 16);
	r->nh = c->n_nh++;
	r->line = line;
	r->connected_from_addr = (uint8_t)from_addr;
	return 0;
}

static inline int rt_parse_line(struct rt_conf *c, struct rt_err *e, int line, char **tok, int ntok)
{
	uint8_t a[16], mac[6];
	unsigned len;
	int hb;
	const char *kw = tok[0];

	if (strcmp(kw, "addr") == 0) {
		if (ntok != 4)
			return rt_fail(e, line, "addr", ntok > 1 ? tok[1] : "", "expects 'addr PORT IP/LEN MAC'");
		if (strlen(tok[1]) >= RT_NAME_MAX)
			return rt_fail(e, line, "port", tok[1], "is too long");
		int fam = rt_parse_prefix(tok[2], a, &len, &hb);
		if (fam == 0)
			return rt_fail(e, line, "addr", tok[2], "is not IP/LEN");
		if (rt_parse_mac(tok[3], mac) < 0)
			return rt_fail(e, line, "mac", tok[3], "is not a unicast MAC address");
		int p = rt_port_find(c, tok[1]);
		if (p < 0) {
			if (c->n_ports >= RT_PORTS_MAX)
				return rt_fail(e, line, "port", tok[1], "is one port too many (at most %d)", RT_PORTS_MAX);
			p = (int)c->n_ports++;
			memset(&c->ports[p], 0, sizeof(c->ports[p]));
			snprintf(c->ports[p].name, RT_NAME_MAX, "%s", tok[1]);
			memcpy(c->ports[p].mac, mac, 6);
			c->ports[p].mac_line = line;
			c->ports[p].sl_id = -1;
		} else if (memcmp(c->ports[p].mac, mac, 6) != 0) {
			return rt_fail(e, line, "mac", tok[3], "differs from port '%s''s MAC on line %d", tok[1],
				       c->ports[p].mac_line);
		}
		struct rt_port *pt = &c->ports[p];
		if ((fam == 4 && len < 1) || (fam == 6 && len < 1))
			return rt_fail(e, line, "addr", tok[2], "needs a prefix length of at least 1");
		if (fam == 4 && (a[0] == 0 || a[0] == 127 || a[0] >= 224))
			return rt_fail(e, line, "addr", tok[2], "is not a unicast address");
		if (fam == 6 && (a[0] == 0xff || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)))
			return rt_fail(e, line, "addr", tok[2], "is multicast or link-local (not supported)");
		if (!hb && ((fam == 4 && len < 31) || (fam == 6 && len < 127)))
			return rt_fail(e, line, "addr", tok[2], "is the subnet's own prefix, not a host address");
		if ((fam == 4 ? pt->n4 : pt->n6) >= RT_ADDRS_MAX)
			return rt_fail(e, line, "addr", tok[2], "is one address too many for port '%s' (at most %d)",
				       tok[1], RT_ADDRS_MAX);
		if (fam == 4) {
			pt->a4[pt->n4] = rt_rd32(a);
			pt->l4[pt->n4++] = (uint8_t)len;
		} else {
			memcpy(pt->a6[pt->n6], a, 16);
			pt->l6[pt->n6++] = (uint8_t)len;
		}
		/* the connected route (once per prefix and port, like a secondary address in Linux) */
		uint8_t net[16];
		memcpy(net, a, 16);
		for (unsigned b = len; b < (fam == 4 ? 32u : 128u); b++)
			net[b / 8] &= (uint8_t)~(0x80 >> (b % 8));
		for (unsigned i = 0; i < c->n_routes; i++) {
			struct rt_route *r = &c->routes[i];
			if (r->family == fam && r->len == len && memcmp(r->prefix, net, 16) == 0) {
				if (r->connected_from_addr && c->nh[r->nh].port == p)
					return 0;
				char pfx[64];
				rt_fmt(fam, net, pfx, sizeof(pfx));
				return rt_fail(e, line, "addr", tok[2], "makes a connected route %s/%u that line %d already has",
					       pfx, len, r->line);
			}
		}
		struct rt_nh nh = { .type = RT_NH_FWD, .port = (uint8_t)p, .family = (uint8_t)fam };
		return rt_add_route(c, fam, net, len, &nh, line, 1);
	}

	if (strcmp(kw, "route") == 0) {
		static const char *const kws[] = { "via", "dev", NULL };
		if (ntok < 2)
			return rt_fail(e, line, "prefix", "", "is missing ('route PREFIX [via GATEWAY] dev PORT')");
		int fam = rt_parse_prefix(tok[1], a, &len, &hb);
		if (fam == 0)
			return rt_fail(e, line, "prefix", tok[1], "is not an IPv4 or IPv6 prefix");
		if (hb)
			return rt_fail(e, line, "prefix", tok[1], "has host bits set");
		if (rt_check_kws(e, line, tok, ntok, 2, kws) < 0)
			return -1;
		const char *dev = rt_kw(tok, ntok, 2, "dev"), *via = rt_kw(tok, ntok, 2, "via");
		if (dev == NULL)
			return rt_fail(e, line, "dev", "", "is missing ('route PREFIX [via GATEWAY] dev PORT')");
		int p = rt_need_port(c, e, line, dev);
		if (p < 0)
			return -1;
		struct rt_nh nh = { .type = RT_NH_FWD, .port = (uint8_t)p, .family = (uint8_t)fam };
		if (via) {
			uint8_t g[16];
			int gf = rt_parse_ip(via, g);
			if (gf == 0)
				return rt_fail(e, line, "via", via, "is not an IP address");
			if (gf != fam)
				return rt_fail(e, line, "via", via, "is not an IPv%d address like the prefix", fam);
			nh.has_gw = 1;
			if (fam == 4)
				nh.gw4 = rt_rd32(g);
			else
				memcpy(nh.gw6, g, 16);
		}
		for (unsigned i = 0; i < c->n_routes; i++) {
			struct rt_route *r = &c->routes[i];
			if (r->family == fam && r->len == len && memcmp(r->prefix, a, 16) == 0)
				return rt_fail(e, line, "prefix", tok[1], "duplicates the route of line %d", r->line);
		}
		return rt_add_route(c, fam, a, len, &nh, line, 0);
	}

	if (strcmp(kw, "neigh") == 0) {
		static const char *const kws[] = { "lladdr", "dev", NULL };
		if (ntok < 2)
			return rt_fail(e, line, "neigh", "", "expects 'neigh IP lladdr MAC dev PORT'");
		int fam = rt_parse_ip(tok[1], a);
		if (fam == 0)
			return rt_fail(e, line, "neigh", tok[1], "is not an IP address");
		if (rt_check_kws(e, line, tok, ntok, 2, kws) < 0)
			return -1;
		const char *ll = rt_kw(tok, ntok, 2, "lladdr"), *dev = rt_kw(tok, ntok, 2, "dev");
		if (ll == NULL)
			return rt_fail(e, line, "lladdr", "", "is missing ('neigh IP lladdr MAC dev PORT')");
		if (dev == NULL)
			return rt_fail(e, line, "dev", "", "is missing ('neigh IP lladdr MAC dev PORT')");
		if (rt_parse_mac(ll, mac) < 0)
			return rt_fail(e, line, "lladdr", ll, "is not a unicast MAC address");
		int p = rt_need_port(c, e, line, dev);
		if (p < 0)
			return -1;
		for (unsigned i = 0; i < c->n_neighs; i++)
			if (c->neighs[i].family == fam && c->neighs[i].port == p && memcmp(c->neighs[i].addr, a, 16) == 0)
				return rt_fail(e, line, "neigh", tok[1], "duplicates line %d", c->neighs[i].line);
		if (RT_GROW(c->neighs, c->n_neighs, c->cap_neighs) < 0)
			return rt_fail(e, line, "neigh", tok[1], "out of memory");
		struct rt_sneigh *n = &c->neighs[c->n_neighs++];
		n->family = (uint8_t)fam;
		n->port = (uint8_t)p;
		memcpy(n->addr, a, 16);
		memcpy(n->mac, mac, 6);
		n->line = line;
		return 0;
	}
	return rt_fail(e, line, "statement", kw, "is not addr, route or neigh");
}

/* Is addr (family) on a connected subnet of port p? */
static inline int rt_on_link(const struct rt_conf *c, unsigned p, int family, const uint8_t *addr)
{
	const struct rt_port *pt = &c->ports[p];
	if (family == 4) {
		uint32_t a = rt_rd32(addr);
		for (unsigned i = 0; i < pt->n4; i++) {
			uint32_t m = pt->l4[i] ? ~0u << (32 - pt->l4[i]) : 0;
			if ((a & m) == (pt->a4[i] & m))
				return 1;
		}
		return 0;
	}
	for (unsigned i = 0; i < pt->n6; i++)
		if (rt_prefix_match(addr, pt->a6[i], pt->l6[i]))
			return 1;
	return 0;
}

static int rt_route_cmp(const void *x, const void *y)
{
	const struct rt_route *a = x, *b = y;
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	return a->nh < b->nh ? -1 : a->nh > b->nh; /* stable: keep the order of creation */
}

/* After parsing: check gateways, add the local and broadcast entries, build the LPM tables. */
static inline int rt_conf_build(struct rt_conf *c, struct rt_err *e)
{
	char s[64];
	for (unsigned i = 0; i < c->n_routes; i++) {
		struct rt_route *r = &c->routes[i];
		struct rt_nh *nh = &c->nh[r->nh];
		if (!nh->has_gw)
			continue;
		uint8_t g[16] = { 0 };
		if (nh->family == 4)
			rt_wr32(g, nh->gw4);
		else
			memcpy(g, nh->gw6, 16);
		rt_fmt(nh->family, g, s, sizeof(s));
		if (!rt_on_link(c, nh->port, nh->family, g))
			return rt_fail(e, r->line, "via", s, "is not on a connected subnet of port '%s'",
				       c->ports[nh->port].name);
	}
	/* local addresses (/32, /128) and IPv4 subnet broadcasts, after every route of their length */
	for (unsigned p = 0; p < c->n_ports; p++) {
		struct rt_port *pt = &c->ports[p];
		for (unsigned i = 0; i < pt->n4; i++) {
			uint8_t a[16] = { 0 };
			struct rt_nh nh = { .type = RT_NH_LOCAL, .port = (uint8_t)p, .family = 4 };
			rt_wr32(a, pt->a4[i]);
			if (rt_add_route(c, 4, a, 32, &nh, 0, 0) < 0)
				goto nomem;
			if (pt->l4[i] <= 30) {
				nh.type = RT_NH_BCAST;
				rt_wr32(a, pt->a4[i] | ~(~0u << (32 - pt->l4[i])));
				if (rt_add_route(c, 4, a, 32, &nh, 0, 0) < 0)
					goto nomem;
			}
		}
		for (unsigned i = 0; i < pt->n6; i++) {
			struct rt_nh nh = { .type = RT_NH_LOCAL, .port = (uint8_t)p, .family = 6 };
			if (rt_add_route(c, 6, pt->a6[i], 128, &nh, 0, 0) < 0)
				goto nomem;
		}
	}
	struct rt_route *sorted = malloc((size_t)(c->n_routes ? c->n_routes : 1) * sizeof(*sorted));
	if (sorted == NULL)
		goto nomem;
	if (c->n_routes) /* a config without addr or route lines has no route table (routes is NULL) */
		memcpy(sorted, c->routes, (size_t)c->n_routes * sizeof(*sorted));
	qsort(sorted, c->n_routes, sizeof(*sorted), rt_route_cmp);
	if (lpm4_init(&c->l4) < 0 || lpm6_init(&c->l6) < 0) {
		free(sorted);
		goto nomem;
	}
	for (unsigned i = 0; i < c->n_routes; i++) {
		struct rt_route *r = &sorted[i];
		int rc;
		if (r->family == 4) {
			if (r->nh > LPM4_NH_MAX) {
				int line = r->line;
				free(sorted);
				return rt_fail(e, line, "route", "", "is over the limit of %u IPv4 routes", LPM4_NH_MAX - 1);
			}
			rc = lpm4_add(&c->l4, rt_rd32(r->prefix), r->len, (uint16_t)r->nh);
			c->n4_routes++;
		} else {
			rc = lpm6_add(&c->l6, r->prefix, r->len, r->nh);
			c->n6_routes++;
		}
		if (rc < 0) {
			int line = r->line;
			free(sorted);
			return rt_fail(e, line, "route", "", "does not fit in the LPM tables");
		}
	}
	free(sorted);
	return 0;
nomem:
	return rt_fail(e, 0, "config", "", "out of memory");
}

/* Parse `text` (the file's contents; modified) into c. Returns 0, or -1 with the message in err. */
static inline int rt_conf_parse(struct rt_conf *c, char *text, const char *file, char *err, size_t errlen)
{
	struct rt_err e = { err, errlen, file };
	memset(c, 0, sizeof(*c));
	int line = 0;
	char *save = NULL;
	for (char *ln = text; ln != NULL; ln = save) {
		char *nl = strchr(ln, '\n');
		save = nl ? nl + 1 : NULL;
		if (nl)
			*nl = '\0';
		line++;
		char *hash = strchr(ln, '#');
		if (hash)
			*hash = '\0';
		char *tok[16];
		int ntok = 0;
		for (char *t = strtok(ln, " \t\r"); t != NULL; t = strtok(NULL, " \t\r")) {
			if (ntok == 16)
				return rt_fail(&e, line, "statement", tok[0], "has too many words");
			tok[ntok++] = t;
		}
		if (ntok == 0)
			continue;
		if (rt_parse_line(c, &e, line, tok, ntok) < 0)
			return -1;
	}
	return rt_conf_build(c, &e);
}

/* Read and parse a file. Returns 0, or -1 with the message in err (c is freed). */
static inline int rt_conf_load(struct rt_conf *c, const char *path, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
		return -1;
	}
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (buf == NULL)
			break;
		if (n + 1 >= cap) {
			buf = realloc_or_free(buf, cap *= 2);
			continue;
		}
		size_t r = fread(buf + n, 1, cap - n - 1, f);
		if (r == 0)
			break;
		n += r;
	}
	fclose(f);
	if (buf == NULL) {
		snprintf(err, errlen, "%s: out of memory", path);
		return -1;
	}
	buf[n] = '\0';
	int rc = rt_conf_parse(c, buf, path, err, errlen);
	free(buf);
	if (rc < 0)
		rt_conf_free(c);
	return rc;
}

/* The next-hop id for an address (the FIB decision), 0 = no route. */
static inline uint32_t rt_lookup(const struct rt_conf *c, int family, const uint8_t *addr)
{
	return family == 4 ? lpm4_lookup(&c->l4, rt_rd32(addr)) : lpm6_lookup(&c->l6, addr);
}

/* ---------------------------------------------------------------- neighbour table */

enum { RT_NB_FREE = 0, RT_NB_INCOMPLETE, RT_NB_DYNAMIC, RT_NB_STATIC };

struct rt_neigh_e {
	uint8_t state, port, family, pad;
	uint8_t mac[6];
	uint8_t pad2[2];
	uint8_t addr[16];
	uint64_t t_req; /* when the last ARP request / NS for it was sent (ns) */
};

struct rt_neigh {
	struct rt_neigh_e *e;
	uint32_t mask;     /* slots - 1 */
	uint32_t used, max;
};

static inline int rt_neigh_init(struct rt_neigh *t, uint32_t max)
{
	uint32_t slots = 16;
	while (slots < 2 * max)
		slots <<= 1;
	t->e = calloc(slots, sizeof(*t->e));
	t->mask = slots - 1;
	t->used = 0;
	t->max = max;
	return t->e ? 0 : -1;
}

static inline void rt_neigh_free(struct rt_neigh *t)
{
	free(t->e);
	memset(t, 0, sizeof(*t));
}

static inline uint32_t rt_neigh_hash(unsigned port, const uint8_t *addr)
{
	uint64_t a, b;
	memcpy(&a, addr, 8);
	memcpy(&b, addr + 8, 8);
	uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ull) ^ port) * 0xff51afd7ed558ccdull;
	return (uint32_t)(h >> 32);
}

/* Find (create = 0) or find-or-create (create = 1, as INCOMPLETE) the entry for (port, addr);
 * NULL when absent / the table is full. addr: 16 bytes, IPv4 in the first 4, the rest zero. */
static inline struct rt_neigh_e *rt_neigh_get(struct rt_neigh *t, unsigned port, int family,
					      const uint8_t *addr, int create)
{
	uint32_t i = rt_neigh_hash(port, addr) & t->mask;
	for (;;) {
		struct rt_neigh_e *x = &t->e[i];
		if (x->state == RT_NB_FREE) {
			if (!create || t->used >= t->max)
				return NULL;
			t->used++;
			x->state = RT_NB_INCOMPLETE;
			x->port = (uint8_t)port;
			x->family = (uint8_t)family;
			memcpy(x->addr, addr, 16);
			x->t_req = 0;
			return x;
		}
		if (x->port == port && x->family == family && memcmp(x->addr, addr, 16) == 0)
			return x;
		i = (i + 1) & t->mask;
	}
}

#endif /* SLUICE_NFS_ROUTER_CONF_H */
