/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The NAT's per-packet work, DPDK-free and unit-tested (tests/unit/test_nat.c): parse an Ethernet
 * frame (one optional VLAN tag) carrying IPv4, find or create the mapping, rewrite addresses, ports
 * or ICMP identifiers in place and update the IPv4, TCP, UDP and ICMP checksums incrementally
 * (csum.h, RFC 1624). ICMP errors (destination unreachable, time exceeded, parameter problem)
 * that quote a packet of a mapping are translated too: the outer address and the quoted header.
 * Never reads past the frame's length or the IPv4 total length.
 */
#ifndef SLUICE_NFS_NAT_PKT_H
#define SLUICE_NFS_NAT_PKT_H

#include <stdint.h>
#include <string.h>

#include "common/csum.h"
#include "common/pktparse.h"
#include "conf.h"
#include "table.h"

struct nat_stats {
	uint64_t snat_new, dnat_new, translated_out, translated_in, icmp_errors, no_mapping, no_rule,
		port_exhausted, table_full, malformed, non_ip, fragments, unsupported;
};

struct nat {
	struct nat_table t;
	struct nat_conf c;
	struct nat_stats st;
	uint32_t max_tries; /* ports tried per new mapping */
};

enum nat_verdict { NAT_FWD = 0, NAT_DROP = 1 };

static inline uint32_t nat_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void nat_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* Does ICMP type carry an echo identifier, and on which side of the key? */
#define NAT_ICMP_ECHO_REPLY   0
#define NAT_ICMP_UNREACH      3
#define NAT_ICMP_ECHO         8
#define NAT_ICMP_TIME_EXCEED  11
#define NAT_ICMP_PARAM_PROB   12

static inline int nat_icmp_is_error(uint8_t type)
{
	return type == NAT_ICMP_UNREACH || type == NAT_ICMP_TIME_EXCEED || type == NAT_ICMP_PARAM_PROB;
}

/* The L4 part of a packet's key from its L4 header (l4len bytes available): 0, or -1 when the
 * header is too short or the protocol/type is not translated (-2). */
static inline int nat_l4_ports(uint8_t proto, const uint8_t *l4, uint32_t l4len, uint16_t *sport, uint16_t *dport)
{
	if (proto == NAT_P_TCP || proto == NAT_P_UDP) {
		if (l4len < 4)
			return -1;
		*sport = pp_be16(l4);
		*dport = pp_be16(l4 + 2);
		return 0;
	}
	if (proto == NAT_P_ICMP) {
		if (l4len < 8)
			return -1;
		if (l4[0] == NAT_ICMP_ECHO) {
			*sport = pp_be16(l4 + 4);
			*dport = 0;
			return 0;
		}
		if (l4[0] == NAT_ICMP_ECHO_REPLY) {
			*sport = 0;
			*dport = pp_be16(l4 + 4);
			return 0;
		}
	}
	return -2;
}

/* Rewrite the source (dst = 0) or destination (dst = 1) address and port of an IPv4 packet whose L4
 * header has l4len bytes available. The IPv4 header checksum, the TCP/UDP checksum (if present in
 * the l4len bytes; a UDP checksum of 0 stays 0) and the ICMP echo checksum are updated. `port` is
 * the ICMP identifier for echo request/reply (which has a single identifier, whichever side). */
static inline void nat_rewrite(uint8_t *ip, uint8_t *l4, uint32_t l4len, int dst, uint32_t addr, uint16_t port)
{
	uint8_t proto = ip[9];
	uint32_t old = nat_be32(ip + 12 + 4 * dst);
	if (old != addr) {
		nat_put32(ip + 12 + 4 * dst, addr);
		cs_put16(ip + 10, cs_update32(pp_be16(ip + 10), old, addr));
	}
	if (proto == NAT_P_TCP || proto == NAT_P_UDP) {
		uint16_t oldp = pp_be16(l4 + 2 * dst);
		cs_put16(l4 + 2 * dst, port);
		uint32_t ckoff = proto == NAT_P_TCP ? 16 : 6;
		if (l4len < ckoff + 2)
			return;
		uint16_t ck = pp_be16(l4 + ckoff);
		if (proto == NAT_P_UDP && ck == 0)
			return;
		ck = cs_update16(cs_update32(ck, old, addr), oldp, port);
		if (proto == NAT_P_UDP && ck == 0)
			ck = 0xffff;
		cs_put16(l4 + ckoff, ck);
	} else if (proto == NAT_P_ICMP && l4len >= 8 && (l4[0] == NAT_ICMP_ECHO || l4[0] == NAT_ICMP_ECHO_REPLY)) {
		uint16_t oldp = pp_be16(l4 + 4);
		cs_put16(l4 + 4, port);
		cs_put16(l4 + 2, cs_update16(pp_be16(l4 + 2), oldp, port));
	}
}

static inline const struct nat_snat *nat_snat_rule(const struct nat *n, uint32_t src)
{
	for (unsigned i = 0; i < n->c.n_snat; i++)
		if ((src & n->c.snat[i].mask) == n->c.snat[i].net)
			return &n->c.snat[i];
	return NULL;
}

static inline const struct nat_dnat *nat_dnat_rule(const struct nat *n, uint8_t proto, uint32_t dst, uint16_t dport)
{
	for (unsigned i = 0; i < n->c.n_dnat; i++)
		if (n->c.dnat[i].proto == proto && n->c.dnat[i].pub == dst && n->c.dnat[i].pub_port == dport)
			return &n->c.dnat[i];
	return NULL;
}

/* An ICMP error at icmp (icmplen bytes) in the packet with IPv4 header ip, arriving from the
 * outside (from_out) or the inside. The quoted packet is one this NAT passed the other way: find
 * its mapping and translate the outer destination (inbound) / source (outbound) and the quoted
 * header, keeping the ICMP checksum valid. */
static inline int nat_icmp_error(struct nat *n, uint8_t *ip, uint8_t *icmp, uint32_t icmplen, int from_out,
				 uint64_t now_ms)
{
	if (icmplen < 8 + 20)
		goto malformed;
	uint8_t *e = icmp + 8;
	uint32_t elen = icmplen - 8;
	uint32_t ehl = (uint32_t)(e[0] & 0x0f) * 4;
	if ((e[0] >> 4) != 4 || ehl < 20 || elen < ehl + 8)
		goto malformed;
	if ((pp_be16(e + 6) & 0x1fff) != 0) { /* quotes a non-first fragment: no ports */
		n->st.fragments++;
		return NAT_DROP;
	}
	uint8_t *el4 = e + ehl;
	uint32_t el4len = elen - ehl;
	uint16_t sp, dp;
	int r = nat_l4_ports(e[9], el4, el4len, &sp, &dp);
	if (r < 0) {
		n->st.unsupported++;
		return NAT_DROP;
	}
	/* the quoted packet went the other way: its reversed key is this direction's view */
	struct nat_key qk = nat_key_make(e[9], nat_be32(e + 12), sp, nat_be32(e + 16), dp);
	struct nat_key k = nat_key_rev(&qk);
	uint32_t idx = nat_lookup(&n->t, &k, from_out, now_ms);
	if (idx == NAT_NONE) {
		n->st.no_mapping++;
		return NAT_DROP;
	}
	const struct nat_map *m = &n->t.m[idx];
	/* the bytes whose changes the ICMP checksum must follow: quoted IP header + up to 20 L4 bytes */
	uint32_t span = ehl + (el4len < 20 ? el4len : 20);
	uint8_t before[80];
	memcpy(before, e, span);
	uint32_t el4cov = el4len; /* how much of the quoted L4 header is here (checksum only if whole) */
	if (from_out) {
		/* quoted: inside view after translation (pub:pport -> remote); back to the inside host */
		nat_rewrite(e, el4, el4cov, 0, m->in.sip, m->in.sport);
		uint32_t old = nat_be32(ip + 16);
		nat_put32(ip + 16, m->in.sip);
		cs_put16(ip + 10, cs_update32(pp_be16(ip + 10), old, m->in.sip));
	} else {
		/* quoted: remote -> inside host:port as delivered; make it remote -> pub:pport */
		nat_rewrite(e, el4, el4cov, 1, m->out.dip, m->out.dport);
		uint32_t old = nat_be32(ip + 12);
		nat_put32(ip + 12, m->out.dip);
		cs_put16(ip + 10, cs_update32(pp_be16(ip + 10), old, m->out.dip));
	}
	uint16_t ck = pp_be16(icmp + 2);
	for (uint32_t i = 0; i + 1 < span; i += 2) {
		uint16_t o = (uint16_t)(before[i] << 8 | before[i + 1]), w = pp_be16(e + i);
		if (o != w)
			ck = cs_update16(ck, o, w);
	}
	if (span & 1) {
		uint16_t o = (uint16_t)(before[span - 1] << 8), w = (uint16_t)(e[span - 1] << 8);
		if (o != w)
			ck = cs_update16(ck, o, w);
	}
	cs_put16(icmp + 2, ck);
	n->st.icmp_errors++;
	if (from_out)
		n->st.translated_in++;
	else
		n->st.translated_out++;
	return NAT_FWD;
malformed:
	n->st.malformed++;
	return NAT_DROP;
}

/* Translate one frame of len bytes at p, arrived from the outside (from_out = 1) or the inside.
 * Returns NAT_FWD (send it to the other side) or NAT_DROP (the reason is counted in n->st). */
static inline int nat_packet(struct nat *n, uint8_t *p, uint32_t len, int from_out, uint64_t now_ms)
{
	struct pp_info pi;
	pp_parse(p, len, &pi);
	if (pi.ethertype != PP_ETH_P_IPV4) {
		n->st.non_ip++;
		return NAT_DROP;
	}
	uint32_t l3 = pi.l3_off;
	if (pi.family != 4)
		goto malformed;
	uint8_t *ip = p + l3;
	uint32_t ihl = (uint32_t)(ip[0] & 0x0f) * 4;
	uint32_t tot = pp_be16(ip + 2);
	if (tot < ihl || l3 + tot > len || l3 + ihl > len)
		goto malformed;
	if ((pp_be16(ip + 6) & 0x3fff) != 0) { /* MF or an offset: fragments are not translated */
		n->st.fragments++;
		return NAT_DROP;
	}
	uint8_t proto = ip[9];
	uint8_t *l4 = ip + ihl;
	uint32_t l4len = tot - ihl;
	if (proto == NAT_P_TCP ? l4len < 20 : proto == NAT_P_UDP ? l4len < 8 : proto == NAT_P_ICMP ? l4len < 8 : 0)
		goto malformed;
	if (proto == NAT_P_ICMP && nat_icmp_is_error(l4[0]))
		return nat_icmp_error(n, ip, l4, l4len, from_out, now_ms);
	uint16_t sp, dp;
	if (nat_l4_ports(proto, l4, l4len, &sp, &dp) < 0) {
		n->st.unsupported++;
		return NAT_DROP;
	}
	struct nat_key k = nat_key_make(proto, nat_be32(ip + 12), sp, nat_be32(ip + 16), dp);
	uint8_t tcpf = proto == NAT_P_TCP ? l4[13] : 0;
	uint32_t idx = nat_lookup(&n->t, &k, from_out, now_ms);
	if (idx == NAT_NONE) {
		if (from_out) {
			const struct nat_dnat *d =
				proto == NAT_P_ICMP ? NULL : nat_dnat_rule(n, proto, k.dip, k.dport);
			if (d == NULL) {
				n->st.no_mapping++;
				return NAT_DROP;
			}
			struct nat_key in = nat_key_make(proto, d->priv, d->priv_port, k.sip, k.sport);
			if (nat_lookup(&n->t, &in, 0, now_ms) != NAT_NONE) {
				n->st.port_exhausted++; /* the inside endpoint pair is taken by an SNAT mapping */
				return NAT_DROP;
			}
			idx = nat_insert(&n->t, &in, &k, NAT_F_DNAT, now_ms);
			if (idx == NAT_NONE) {
				n->st.table_full++;
				return NAT_DROP;
			}
			n->st.dnat_new++;
		} else {
			const struct nat_snat *s = nat_snat_rule(n, k.sip);
			if (s == NULL) {
				n->st.no_rule++;
				return NAT_DROP;
			}
			struct nat_key out;
			uint16_t lo = s->lo, hi = s->hi;
			int keep_any = !s->ports_given;
			if (proto == NAT_P_ICMP) {
				lo = 0;
				hi = 65535;
			} else if (keep_any && k.sport < 512) { /* Linux's choice without a range */
				lo = 1;
				hi = 511;
			} else if (keep_any && k.sport < 1024) {
				lo = 600;
				hi = 1023;
			}
			if (n->t.free_head == 0) {
				n->st.table_full++;
				return NAT_DROP;
			}
			if (nat_alloc_port(&n->t, &k, s->pub, lo, hi, keep_any, n->max_tries, now_ms, &out) < 0) {
				n->st.port_exhausted++;
				return NAT_DROP;
			}
			idx = nat_insert(&n->t, &k, &out, 0, now_ms);
			if (idx == NAT_NONE) {
				n->st.table_full++;
				return NAT_DROP;
			}
			n->st.snat_new++;
		}
	}
	const struct nat_map *m = &n->t.m[idx];
	if (from_out) {
		nat_rewrite(ip, l4, l4len, 1, m->in.sip, m->in.sport);
		n->st.translated_in++;
	} else {
		nat_rewrite(ip, l4, l4len, 0, m->out.dip, m->out.dport);
		n->st.translated_out++;
	}
	nat_touch(&n->t, idx, from_out, tcpf, now_ms);
	return NAT_FWD;
malformed:
	n->st.malformed++;
	return NAT_DROP;
}

#endif /* SLUICE_NFS_NAT_PKT_H */
