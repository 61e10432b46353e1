/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The router NF's packet path (nfs/router/router.c, docs/nfs/router.md): one call per packet, no
 * allocation, no system call, never a read past sl_pkt_len(). Header-only so the unit test drives it
 * with packets in ordinary memory.
 *
 *   IPv4/IPv6 to the port's MAC -> validate -> LPM -> local (echo, ND) | martian (drop)
 *        | no route (ICMP unreachable) | TTL/hop limit <= 1 (ICMP time exceeded)
 *        | neighbour known: TTL-1 (+ incremental checksum), Ethernet rewrite, OUT
 *        | neighbour unknown: the packet becomes an ARP request / neighbour solicitation
 *   ARP to us: requests for our address answered in place, replies learned
 *   ICMPv6 ND: solicitations for our address answered in place, advertisements learned
 *
 * ICMP errors and replies are made by rewriting the received buffer (an NF cannot allocate one).
 */
#ifndef SLUICE_NFS_ROUTER_PKT_H
#define SLUICE_NFS_ROUTER_PKT_H

#include <stdint.h>
#include <string.h>

#include "common/csum.h"
#include "common/pktparse.h"
#include "conf.h"
#include "sluice/nf.h"

#define RT_ICMP4_QUOTE 548   /* 576 - 20 - 8, as Linux */
#define RT_ICMP6_QUOTE 1232  /* 1280 - 40 - 8 (RFC 4443 2.4 c) */
#define RT_ARP_RETRY_NS 1000000000ull /* one ARP request / NS per unresolved neighbour per second */

#define RT_STATS(X)                                                                               \
	X(forwarded) X(forwarded_v6) X(no_route) X(ttl_exceeded) X(bad_header) X(malformed)       \
	X(martian) X(not_for_us) X(local) X(echo_replies) X(icmp_errors) X(icmp_ratelimited)      \
	X(arp_miss) X(arp_requests) X(arp_replies) X(neigh_learned) X(neigh_full) X(other)        \
	X(no_room) X(unknown_port)

struct rt_stats {
#define RT_F(n) uint64_t n;
	RT_STATS(RT_F)
#undef RT_F
	uint64_t out[RT_PORTS_MAX]; /* forwarded per output port */
};

struct router {
	struct rt_conf *c;
	struct rt_neigh nb;
	struct rt_stats st;
	uint8_t in_map[256];   /* sluiced port id -> c->ports index, 0xff: not a router port */
	uint64_t now;          /* ns, set per batch */
	uint64_t icmp_rate;    /* ICMP errors per second, 0 = unlimited */
	uint64_t icmp_burst;
	uint64_t icmp_credit;  /* in 1e-9 of an error */
	uint64_t icmp_last;
	uint16_t ip_id;
};

/* Map sluiced port ids to the conf's ports (after their sl_id were set) and enter the static
 * neighbours. Returns 0, or -1 when the neighbour table is too small. */
static inline int rt_bind(struct router *r)
{
	memset(r->in_map, 0xff, sizeof(r->in_map));
	for (unsigned p = 0; p < r->c->n_ports; p++)
		if (r->c->ports[p].sl_id >= 0 && r->c->ports[p].sl_id < 256)
			r->in_map[r->c->ports[p].sl_id] = (uint8_t)p;
	for (unsigned i = 0; i < r->c->n_neighs; i++) {
		const struct rt_sneigh *s = &r->c->neighs[i];
		struct rt_neigh_e *e = rt_neigh_get(&r->nb, s->port, s->family, s->addr, 1);
		if (e == NULL)
			return -1;
		e->state = RT_NB_STATIC;
		memcpy(e->mac, s->mac, 6);
	}
	return 0;
}

static inline int rt_icmp_allowed(struct router *r)
{
	if (r->icmp_rate == 0)
		return 1;
	uint64_t e = r->now > r->icmp_last ? r->now - r->icmp_last : 0;
	r->icmp_last = r->now;
	uint64_t cap = r->icmp_burst * 1000000000ull;
	if (e > 100000000000ull)
		e = 100000000000ull;
	r->icmp_credit += e * r->icmp_rate;
	if (r->icmp_credit > cap)
		r->icmp_credit = cap;
	if (r->icmp_credit < 1000000000ull)
		return 0;
	r->icmp_credit -= 1000000000ull;
	return 1;
}

static inline int rt_martian4(uint32_t a)
{
	uint8_t b = (uint8_t)(a >> 24);
	return b == 0 || b == 127 || b >= 224;
}

static inline int rt_martian6(const uint8_t *a)
{
	static const uint8_t zero[15];
	if (a[0] == 0xff || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80))
		return 1; /* multicast, link-local */
	return memcmp(a, zero, 15) == 0 && (a[15] == 0 || a[15] == 1); /* ::, ::1 */
}

/* The router's IPv4 address on port pt to use towards `peer`: one on peer's subnet, else the first;
 * 0 if the port has none. */
static inline uint32_t rt_src4(const struct rt_port *pt, uint32_t peer)
{
	for (unsigned i = 0; i < pt->n4; i++) {
		uint32_t m = ~0u << (32 - pt->l4[i]);
		if ((peer & m) == (pt->a4[i] & m))
			return pt->a4[i];
	}
	return pt->n4 ? pt->a4[0] : 0;
}

static inline const uint8_t *rt_src6(const struct rt_port *pt, const uint8_t *peer)
{
	for (unsigned i = 0; i < pt->n6; i++)
		if (rt_prefix_match(peer, pt->a6[i], pt->l6[i]))
			return pt->a6[i];
	return pt->n6 ? pt->a6[0] : NULL;
}

static inline void rt_out(struct router *r, struct sl_pkt *p, unsigned port)
{
	sl_pkt_set_action(p, SL_ACT_OUT, (uint16_t)r->c->ports[port].sl_id);
}

/* ---------------------------------------------------------------- ICMP errors (in place) */

/* Turn an IPv4 packet (frame = 14 + IP total length, validated) into ICMP type/code back to its
 * sender out of the ingress port lp. Leaves the action DROP when no error may or can be sent. */
static inline void rt_icmp4_error(struct router *r, struct sl_pkt *p, unsigned lp, uint8_t type, uint8_t code)
{
	uint8_t *d = sl_pkt_data(p);
	const uint8_t *ip = d + 14;
	uint32_t tot = pp_be16(ip + 2), hl = (ip[0] & 15u) * 4;
	if ((pp_be16(ip + 6) & 0x1fff) != 0)
		return; /* not about a non-first fragment */
	if (ip[9] == 1 && tot > hl) {
		uint8_t t = ip[hl];
		if (t == 3 || t == 4 || t == 5 || t == 11 || t == 12)
			return; /* never about an ICMP error */
	}
	const struct rt_port *pt = &r->c->ports[lp];
	uint32_t osrc = rt_rd32(ip + 12);
	uint32_t src = rt_src4(pt, osrc);
	if (src == 0)
		return;
	if (!rt_icmp_allowed(r)) {
		r->st.icmp_ratelimited++;
		return;
	}
	uint8_t smac[6];
	memcpy(smac, d + 6, 6);
	uint32_t q = tot < RT_ICMP4_QUOTE ? tot : RT_ICMP4_QUOTE;
	uint8_t *n = sl_pkt_adj_head(p, 28);
	if (n == NULL) {
		r->st.no_room++;
		return;
	}
	sl_pkt_adj_tail(p, (int)(42 + q) - (int)sl_pkt_len(p)); /* a shrink: cannot fail */
	memcpy(n, smac, 6);
	memcpy(n + 6, pt->mac, 6);
	n[12] = 0x08;
	n[13] = 0x00;
	uint8_t *h = n + 14;
	h[0] = 0x45;
	h[1] = 0xc0; /* precedence "internetwork control", as Linux */
	cs_put16(h + 2, (uint16_t)(28 + q));
	cs_put16(h + 4, r->ip_id++);
	h[6] = h[7] = 0;
	h[8] = 64;
	h[9] = 1;
	h[10] = h[11] = 0;
	rt_wr32(h + 12, src);
	rt_wr32(h + 16, osrc);
	cs_put16(h + 10, cs_compute(h, 20, 0));
	uint8_t *ic = h + 20;
	ic[0] = type;
	ic[1] = code;
	memset(ic + 2, 0, 6);
	cs_put16(ic + 2, cs_compute(ic, 8 + q, 0));
	r->st.icmp_errors++;
	rt_out(r, p, lp);
}

static inline void rt_icmp6_error(struct router *r, struct sl_pkt *p, unsigned lp, uint8_t type, uint8_t code)
{
	uint8_t *d = sl_pkt_data(p);
	const uint8_t *ip = d + 14;
	uint32_t tot = 40u + pp_be16(ip + 4);
	if (ip[6] == 58 && tot > 40 && ip[40] < 128)
		return; /* never about an ICMPv6 error */
	const struct rt_port *pt = &r->c->ports[lp];
	uint8_t osrc[16];
	memcpy(osrc, ip + 8, 16);
	const uint8_t *src = rt_src6(pt, osrc);
	if (src == NULL)
		return;
	if (!rt_icmp_allowed(r)) {
		r->st.icmp_ratelimited++;
		return;
	}
	uint8_t smac[6];
	memcpy(smac, d + 6, 6);
	uint32_t q = tot < RT_ICMP6_QUOTE ? tot : RT_ICMP6_QUOTE;
	uint8_t *n = sl_pkt_adj_head(p, 48);
	if (n == NULL) {
		r->st.no_room++;
		return;
	}
	sl_pkt_adj_tail(p, (int)(62 + q) - (int)sl_pkt_len(p));
	memcpy(n, smac, 6);
	memcpy(n + 6, pt->mac, 6);
	n[12] = 0x86;
	n[13] = 0xdd;
	uint8_t *h = n + 14;
	h[0] = 0x60;
	h[1] = h[2] = h[3] = 0;
	cs_put16(h + 4, (uint16_t)(8 + q));
	h[6] = 58;
	h[7] = 64;
	memcpy(h + 8, src, 16);
	memcpy(h + 24, osrc, 16);
	uint8_t *ic = h + 40;
	ic[0] = type;
	ic[1] = code;
	memset(ic + 2, 0, 6);
	cs_put16(ic + 2, cs_compute(ic, 8 + q, cs_pseudo6(h, 58, 8 + q)));
	r->st.icmp_errors++;
	rt_out(r, p, lp);
}

/* ---------------------------------------------------------------- neighbour resolution */

/* Next hop `key` on port `port` is not resolved: the packet becomes an ARP request for it (at most
 * one per neighbour per RT_ARP_RETRY_NS; otherwise it is dropped). */
static inline void rt_resolve4(struct router *r, struct sl_pkt *p, unsigned port, const uint8_t *key)
{
	r->st.arp_miss++;
	struct rt_neigh_e *e = rt_neigh_get(&r->nb, port, 4, key, 1);
	if (e == NULL) {
		r->st.neigh_full++;
		return;
	}
	if (e->pad && r->now - e->t_req < RT_ARP_RETRY_NS)
		return;
	const struct rt_port *pt = &r->c->ports[port];
	uint32_t src = rt_src4(pt, rt_rd32(key));
	if (src == 0 || sl_pkt_adj_tail(p, 60 - (int)sl_pkt_len(p)) < 0) {
		r->st.no_room++;
		return;
	}
	e->pad = 1;
	e->t_req = r->now;
	uint8_t *d = sl_pkt_data(p);
	memset(d, 0xff, 6);
	memcpy(d + 6, pt->mac, 6);
	d[12] = 0x08;
	d[13] = 0x06;
	static const uint8_t hdr[8] = { 0, 1, 8, 0, 6, 4, 0, 1 };
	memcpy(d + 14, hdr, 8);
	memcpy(d + 22, pt->mac, 6);
	rt_wr32(d + 28, src);
	memset(d + 32, 0, 6);
	memcpy(d + 38, key, 4);
	memset(d + 42, 0, 18);
	r->st.arp_requests++;
	rt_out(r, p, port);
}

static inline void rt_resolve6(struct router *r, struct sl_pkt *p, unsigned port, const uint8_t *key)
{
	r->st.arp_miss++;
	struct rt_neigh_e *e = rt_neigh_get(&r->nb, port, 6, key, 1);
	if (e == NULL) {
		r->st.neigh_full++;
		return;
	}
	if (e->pad && r->now - e->t_req < RT_ARP_RETRY_NS)
		return;
	const struct rt_port *pt = &r->c->ports[port];
	const uint8_t *src = rt_src6(pt, key);
	uint8_t target[16];
	memcpy(target, key, 16);
	if (src == NULL || sl_pkt_adj_tail(p, 86 - (int)sl_pkt_len(p)) < 0) {
		r->st.no_room++;
		return;
	}
	e->pad = 1;
	e->t_req = r->now;
	uint8_t *d = sl_pkt_data(p);
	d[0] = d[1] = 0x33;
	d[2] = 0xff;
	memcpy(d + 3, target + 13, 3);
	memcpy(d + 6, pt->mac, 6);
	d[12] = 0x86;
	d[13] = 0xdd;
	uint8_t *h = d + 14;
	memset(h, 0, 40);
	h[0] = 0x60;
	cs_put16(h + 4, 32);
	h[6] = 58;
	h[7] = 255;
	memcpy(h + 8, src, 16);
	h[24] = 0xff;
	h[25] = 0x02;
	h[35] = 0x01;
	h[36] = 0xff;
	memcpy(h + 37, target + 13, 3);
	uint8_t *ic = h + 40;
	memset(ic, 0, 32);
	ic[0] = 135;
	memcpy(ic + 8, target, 16);
	ic[24] = 1; /* source link-layer address option */
	ic[25] = 1;
	memcpy(ic + 26, pt->mac, 6);
	cs_put16(ic + 2, cs_compute(ic, 32, cs_pseudo6(h, 58, 32)));
	r->st.arp_requests++;
	rt_out(r, p, port);
}

/* Learn (port, addr) -> mac: create = 1 makes an entry, else only existing ones are updated.
 * Static entries are never changed. */
static inline void rt_learn(struct router *r, unsigned port, int family, const uint8_t *addr,
			    const uint8_t *mac, int create)
{
	if (mac[0] & 1)
		return;
	struct rt_neigh_e *e = rt_neigh_get(&r->nb, port, family, addr, create);
	if (e == NULL) {
		if (create)
			r->st.neigh_full++;
		return;
	}
	if (e->state == RT_NB_STATIC)
		return;
	if (e->state != RT_NB_DYNAMIC || memcmp(e->mac, mac, 6) != 0)
		r->st.neigh_learned++;
	memcpy(e->mac, mac, 6);
	e->state = RT_NB_DYNAMIC;
}

/* ---------------------------------------------------------------- ARP */

static inline int rt_port_has4(const struct rt_port *pt, uint32_t a)
{
	for (unsigned i = 0; i < pt->n4; i++)
		if (pt->a4[i] == a)
			return 1;
	return 0;
}

static inline void rt_arp(struct router *r, struct sl_pkt *p, unsigned lp, uint8_t *d, uint32_t len)
{
	if (len < 42) {
		r->st.malformed++;
		return;
	}
	uint8_t *a = d + 14;
	if (pp_be16(a) != 1 || pp_be16(a + 2) != 0x0800 || a[4] != 6 || a[5] != 4) {
		r->st.other++;
		return;
	}
	const struct rt_port *pt = &r->c->ports[lp];
	uint16_t op = pp_be16(a + 6);
	uint8_t sha[6], spa[4], tpa[4];
	memcpy(sha, a + 8, 6);
	memcpy(spa, a + 14, 4);
	memcpy(tpa, a + 24, 4);
	uint8_t key[16] = { 0 };
	memcpy(key, spa, 4);
	if (!rt_port_has4(pt, rt_rd32(tpa)) || rt_martian4(rt_rd32(spa))) {
		r->st.not_for_us++;
		return;
	}
	if (op == 1) {
		rt_learn(r, lp, 4, key, sha, 1);
		memcpy(d, d + 6, 6);
		memcpy(d + 6, pt->mac, 6);
		a[7] = 2;
		memcpy(a + 8, pt->mac, 6);
		memcpy(a + 14, tpa, 4);
		memcpy(a + 18, sha, 6);
		memcpy(a + 24, spa, 4);
		r->st.arp_replies++;
		rt_out(r, p, lp);
	} else if (op == 2) {
		rt_learn(r, lp, 4, key, sha, 0);
	} else {
		r->st.other++;
	}
}

/* ---------------------------------------------------------------- IPv4 */

static inline void rt_local4(struct router *r, struct sl_pkt *p, unsigned lp, uint8_t *d)
{
	uint8_t *ip = d + 14;
	uint32_t tot = pp_be16(ip + 2), hl = (ip[0] & 15u) * 4;
	if (ip[9] != 1 || (pp_be16(ip + 6) & 0x3fff) != 0 || tot < hl + 8 || ip[hl] != 8 ||
	    cs_fold(cs_sum(ip + hl, tot - hl, 0)) != 0xffff) {
		r->st.local++;
		return;
	}
	uint8_t *ic = ip + hl;
	/* echo reply: swap addresses (the header checksum does not depend on their order) */
	uint8_t t[4];
	memcpy(t, ip + 12, 4);
	memcpy(ip + 12, ip + 16, 4);
	memcpy(ip + 16, t, 4);
	uint16_t ck = pp_be16(ip + 10);
	ck = cs_update16(ck, (uint16_t)(ip[8] << 8 | ip[9]), (uint16_t)(64 << 8 | ip[9]));
	ip[8] = 64;
	cs_put16(ip + 10, ck);
	cs_put16(ic + 2, cs_update16(pp_be16(ic + 2), (uint16_t)(ic[0] << 8 | ic[1]), (uint16_t)(0 << 8 | ic[1])));
	ic[0] = 0;
	memcpy(d, d + 6, 6);
	memcpy(d + 6, r->c->ports[lp].mac, 6);
	r->st.echo_replies++;
	rt_out(r, p, lp);
}

static inline void rt_ip4(struct router *r, struct sl_pkt *p, unsigned lp, uint8_t *d, uint32_t len)
{
	const struct rt_conf *c = r->c;
	if (len < 34) {
		r->st.malformed++;
		return;
	}
	uint8_t *ip = d + 14;
	if ((ip[0] >> 4) != 4 || (ip[0] & 15) < 5) {
		r->st.bad_header++;
		return;
	}
	uint32_t hl = (ip[0] & 15u) * 4, tot = pp_be16(ip + 2);
	if (14 + hl > len) {
		r->st.malformed++;
		return;
	}
	if (tot < hl || cs_fold(cs_sum(ip, hl, 0)) != 0xffff) {
		r->st.bad_header++;
		return;
	}
	if (14 + tot > len) {
		r->st.malformed++;
		return;
	}
	if (14 + tot < len) /* Ethernet padding */
		sl_pkt_adj_tail(p, (int)(14 + tot) - (int)len);
	uint32_t dst = rt_rd32(ip + 16), src = rt_rd32(ip + 12);
	uint32_t id = lpm4_lookup(&c->l4, dst);
	const struct rt_nh *nh = &c->nh[id];
	if (id && nh->type == RT_NH_LOCAL) {
		rt_local4(r, p, lp, d);
		return;
	}
	if (rt_martian4(src) || rt_martian4(dst) || (id && nh->type == RT_NH_BCAST)) {
		r->st.martian++;
		return;
	}
	if (id == 0) {
		r->st.no_route++;
		rt_icmp4_error(r, p, lp, 3, 0); /* network unreachable */
		return;
	}
	if (ip[8] <= 1) {
		r->st.ttl_exceeded++;
		rt_icmp4_error(r, p, lp, 11, 0);
		return;
	}
	uint8_t key[16] = { 0 };
	if (nh->has_gw)
		rt_wr32(key, nh->gw4);
	else
		memcpy(key, ip + 16, 4);
	const struct rt_neigh_e *e = rt_neigh_get(&r->nb, nh->port, 4, key, 0);
	if (e == NULL || e->state < RT_NB_DYNAMIC) {
		rt_resolve4(r, p, nh->port, key);
		return;
	}
	uint16_t ck = pp_be16(ip + 10);
	uint16_t old = (uint16_t)(ip[8] << 8 | ip[9]);
	ip[8]--;
	cs_put16(ip + 10, cs_update16(ck, old, (uint16_t)(ip[8] << 8 | ip[9])));
	memcpy(d, e->mac, 6);
	memcpy(d + 6, c->ports[nh->port].mac, 6);
	r->st.forwarded++;
	r->st.out[nh->port]++;
	rt_out(r, p, nh->port);
}

/* ---------------------------------------------------------------- IPv6 */

/* A valid ND message: hop limit 255, code 0, at least `min` bytes, checksum right. */
static inline int rt_nd_ok(const uint8_t *ip, uint32_t plen, uint32_t min)
{
	const uint8_t *ic = ip + 40;
	return ip[7] == 255 && plen >= min && ic[1] == 0 &&
	       cs_fold(cs_sum(ic, plen, cs_pseudo6(ip, 58, plen))) == 0xffff;
}

/* The link-layer address option `type` (1 source, 2 target) of an ND message, or NULL; *bad when
 * an option is malformed (length 0 or past the end). */
static inline const uint8_t *rt_nd_opt(const uint8_t *ic, uint32_t plen, uint32_t off, uint8_t type, int *bad)
{
	const uint8_t *found = NULL;
	*bad = 0;
	while (off + 2 <= plen) {
		uint32_t ol = (uint32_t)ic[off + 1] * 8;
		if (ol == 0 || off + ol > plen) {
			*bad = 1;
			return NULL;
		}
		if (ic[off] == type && ol == 8)
			found = ic + off + 2;
		off += ol;
	}
	return found;
}

static inline int rt_port_has6(const struct rt_port *pt, const uint8_t *a)
{
	for (unsigned i = 0; i < pt->n6; i++)
		if (memcmp(pt->a6[i], a, 16) == 0)
			return 1;
	return 0;
}

/* A neighbour solicitation (validated by the caller) for one of our addresses on port lp: learn the
 * sender, answer with an advertisement in place. */
static inline void rt_nd_ns(struct router *r, struct sl_pkt *p, unsigned lp, uint8_t *d, uint32_t plen)
{
	const struct rt_port *pt = &r->c->ports[lp];
	uint8_t *ip = d + 14, *ic = ip + 40;
	int bad;
	if (!rt_nd_ok(ip, plen, 24)) {
		r->st.bad_header++;
		return;
	}
	const uint8_t *sll = rt_nd_opt(ic, plen, 24, 1, &bad);
	uint8_t target[16], src[16], dmac[6];
	memcpy(target, ic + 8, 16);
	memcpy(src, ip + 8, 16);
	static const uint8_t zero[16];
	int unspec = memcmp(src, zero, 16) == 0;
	if (bad || (unspec && sll) || target[0] == 0xff) {
		r->st.bad_header++;
		return;
	}
	if (!rt_port_has6(pt, target)) {
		r->st.not_for_us++;
		return;
	}
	if (sll && !unspec)
		rt_learn(r, lp, 6, src, sll, 1);
	if (unspec) {
		static const uint8_t allnodes_mac[6] = { 0x33, 0x33, 0, 0, 0, 1 };
		static const uint8_t allnodes[16] = { 0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 };
		memcpy(dmac, allnodes_mac, 6);
		memcpy(src, allnodes, 16);
	} else {
		memcpy(dmac, sll ? sll : d + 6, 6);
	}
	if (sl_pkt_adj_tail(p, 86 - (int)sl_pkt_len(p)) < 0) {
		r->st.no_room++;
		return;
	}
	memcpy(d, dmac, 6);
	memcpy(d + 6, pt->mac, 6);
	ip[0] = 0x60;
	ip[1] = ip[2] = ip[3] = 0;
	cs_put16(ip + 4, 32);
	ip[6] = 58;
	ip[7] = 255;
	memcpy(ip + 8, target, 16);
	memcpy(ip + 24, src, 16);
	memset(ic, 0, 32);
	ic[0] = 136;
	ic[4] = (uint8_t)(0x80 | (unspec ? 0 : 0x40) | 0x20); /* Router, Solicited, Override */
	memcpy(ic + 8, target, 16);
	ic[24] = 2; /* target link-layer address option */
	ic[25] = 1;
	memcpy(ic + 26, pt->mac, 6);
	cs_put16(ic + 2, cs_compute(ic, 32, cs_pseudo6(ip, 58, 32)));
	r->st.arp_replies++;
	rt_out(r, p, lp);
}

static inline void rt_nd_na(struct router *r, unsigned lp, uint8_t *d, uint32_t plen)
{
	uint8_t *ip = d + 14, *ic = ip + 40;
	int bad;
	if (!rt_nd_ok(ip, plen, 24)) {
		r->st.bad_header++;
		return;
	}
	const uint8_t *tll = rt_nd_opt(ic, plen, 24, 2, &bad);
	if (bad || ic[8] == 0xff) {
		r->st.bad_header++;
		return;
	}
	rt_learn(r, lp, 6, ic + 8, tll ? tll : d + 6, 0);
}

static inline void rt_local6(struct router *r, struct sl_pkt *p, unsigned lp, uint8_t *d, uint32_t plen)
{
	uint8_t *ip = d + 14, *ic = ip + 40;
	if (ip[6] != 58 || plen < 8) {
		r->st.local++;
		return;
	}
	if (ic[0] == 135) {
		rt_nd_ns(r, p, lp, d, plen);
		return;
	}
	if (ic[0] == 136) {
		rt_nd_na(r, lp, d, plen);
		return;
	}
	if (ic[0] != 128 || ic[1] != 0 || cs_fold(cs_sum(ic, plen, cs_pseudo6(ip, 58, plen))) != 0xffff) {
		r->st.local++;
		return;
	}
	/* echo reply: swap addresses (the pseudo-header sum does not depend on their order) */
	uint8_t t[16];
	memcpy(t, ip + 8, 16);
	memcpy(ip + 8, ip + 24, 16);
	memcpy(ip + 24, t, 16);
	ip[7] = 64;
	cs_put16(ic + 2, cs_update16(pp_be16(ic + 2), (uint16_t)(128 << 8 | ic[1]), (uint16_t)(129 << 8 | ic[1])));
	ic[0] = 129;
	memcpy(d, d + 6, 6);
	memcpy(d + 6, r->c->ports[lp].mac, 6);
	r->st.echo_replies++;
	rt_out(r, p, lp);
}

/* IPv6 sent to a multicast MAC: only neighbour solicitations for our addresses interest us. */
static inline void rt_ip6_mcast(struct router *r, struct sl_pkt *p, unsigned lp, uint8_t *d, uint32_t len)
{
	uint8_t *ip = d + 14;
	if (len < 54 + 8 || (ip[0] >> 4) != 6 || ip[6] != 58 || ip[24] != 0xff || ip[40] != 135) {
		r->st.not_for_us++;
		return;
	}
	uint32_t plen = pp_be16(ip + 4);
	if (54 + plen > len) {
		r->st.malformed++;
		return;
	}
	rt_nd_ns(r, p, lp, d, plen);
}

static inline void rt_ip6(struct router *r, struct sl_pkt *p, unsigned lp, uint8_t *d, uint32_t len)
{
	const struct rt_conf *c = r->c;
	if (len < 54) {
		r->st.malformed++;
		return;
	}
	uint8_t *ip = d + 14;
	if ((ip[0] >> 4) != 6) {
		r->st.bad_header++;
		return;
	}
	uint32_t plen = pp_be16(ip + 4);
	if (54 + plen > len) {
		r->st.malformed++;
		return;
	}
	if (plen == 0 && ip[6] == 0) { /* a jumbogram (RFC 2675): not supported */
		r->st.bad_header++;
		return;
	}
	if (54 + plen < len)
		sl_pkt_adj_tail(p, (int)(54 + plen) - (int)len);
	uint32_t id = lpm6_lookup(&c->l6, ip + 24);
	const struct rt_nh *nh = &c->nh[id];
	if (id && nh->type == RT_NH_LOCAL) {
		rt_local6(r, p, lp, d, plen);
		return;
	}
	if (rt_martian6(ip + 8) || rt_martian6(ip + 24)) {
		r->st.martian++;
		return;
	}
	if (id == 0) {
		r->st.no_route++;
		rt_icmp6_error(r, p, lp, 1, 0); /* no route to destination */
		return;
	}
	if (ip[7] <= 1) {
		r->st.ttl_exceeded++;
		rt_icmp6_error(r, p, lp, 3, 0);
		return;
	}
	const uint8_t *key = nh->has_gw ? nh->gw6 : ip + 24;
	const struct rt_neigh_e *e = rt_neigh_get(&r->nb, nh->port, 6, key, 0);
	if (e == NULL || e->state < RT_NB_DYNAMIC) {
		rt_resolve6(r, p, nh->port, key);
		return;
	}
	ip[7]--;
	memcpy(d, e->mac, 6);
	memcpy(d + 6, c->ports[nh->port].mac, 6);
	r->st.forwarded++;
	r->st.forwarded_v6++;
	r->st.out[nh->port]++;
	rt_out(r, p, nh->port);
}

/* ---------------------------------------------------------------- one packet */

static inline void rt_packet(struct router *r, struct sl_pkt *p)
{
	uint16_t in = sl_pkt_in_port(p); /* read before the action overwrites it */
	sl_pkt_set_action(p, SL_ACT_DROP, 0);
	unsigned lp = in < 256 ? r->in_map[in] : 0xff;
	if (lp == 0xff) {
		r->st.unknown_port++;
		return;
	}
	uint8_t *d = sl_pkt_data(p);
	uint32_t len = sl_pkt_len(p);
	if (len < 14) {
		r->st.malformed++;
		return;
	}
	const uint8_t *mac = r->c->ports[lp].mac;
	switch (pp_be16(d + 12)) {
	case PP_ETH_P_IPV4:
		if (memcmp(d, mac, 6) != 0)
			r->st.not_for_us++;
		else
			rt_ip4(r, p, lp, d, len);
		break;
	case PP_ETH_P_IPV6:
		if (d[0] & 1)
			rt_ip6_mcast(r, p, lp, d, len);
		else if (memcmp(d, mac, 6) != 0)
			r->st.not_for_us++;
		else
			rt_ip6(r, p, lp, d, len);
		break;
	case 0x0806:
		rt_arp(r, p, lp, d, len);
		break;
	default:
		r->st.other++;
	}
}

#endif /* SLUICE_NFS_ROUTER_PKT_H */
