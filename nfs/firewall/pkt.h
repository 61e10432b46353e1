/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The firewall's view of a packet: a bounds-checked parse of Ethernet (one VLAN tag), IPv4/IPv6
 * (extension headers), TCP/UDP ports and flags, ICMP/ICMPv6 type, echo id and, for ICMP errors, the
 * tuple of the packet quoted inside. Never reads past `len` (nor past the IP header's own length).
 * DPDK-free; unit-tested in tests/unit/test_firewall.c.
 */
#ifndef SLUICE_NFS_FIREWALL_PKT_H
#define SLUICE_NFS_FIREWALL_PKT_H

#include <stdint.h>
#include <string.h>

#include "common/pktparse.h"

#define FW_IPPROTO_ICMP   1
#define FW_IPPROTO_TCP    6
#define FW_IPPROTO_UDP    17
#define FW_IPPROTO_ICMPV6 58

#define FW_TCP_FIN 0x01
#define FW_TCP_SYN 0x02
#define FW_TCP_RST 0x04
#define FW_TCP_ACK 0x10

enum fw_kind {
	FW_K_IP = 0,        /* an IPv4/IPv6 packet the rules and conntrack judge */
	FW_K_NON_IP,        /* not IPv4/IPv6 (ARP, LLDP, ...) */
	FW_K_ND,            /* ICMPv6 router/neighbor discovery (types 133-137): link-local control */
	FW_K_MALFORMED,     /* truncated or inconsistent headers */
};

/* ICMP sub-kinds (fw_pkt.icmp) */
enum { FW_ICMP_OTHER = 0, FW_ICMP_ECHO_REQ, FW_ICMP_ECHO_REP, FW_ICMP_ERROR };

/* An IP tuple. Addresses are 16 bytes; IPv4 uses the first 4 and zeros. For ICMP echo both ports
 * hold the echo id; other protocols without ports have 0. */
struct fw_tuple {
	uint8_t src[16], dst[16];
	uint16_t sport, dport;
	uint8_t family, proto;
	uint8_t has_ports; /* TCP/UDP ports or ICMP echo id present */
	uint8_t pad_;
};

struct fw_pkt {
	struct fw_tuple t;
	uint8_t frag;        /* a non-first fragment: no L4 header */
	uint8_t tcp_flags;
	uint8_t icmp;        /* FW_ICMP_* for ICMP/ICMPv6 */
	uint8_t has_inner;   /* ICMP error quoting a parsable packet: `inner` is its tuple */
	struct fw_tuple inner;
};

static inline int fw_icmp_is_error(uint8_t family, uint8_t type)
{
	if (family == 4)
		return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
	return type >= 1 && type <= 4;
}

/* Parse an IP header at p[off..end) into *t (L3 + L4 ports). For the quoted packet of an ICMP
 * error (`quoted`), the IP lengths are not checked against `end` (the quote is truncated by design)
 * and an L4 header needs only its first 8 bytes. Returns 0, or -1 when malformed. Sets *l4off,
 * *l4end, *frag. */
static inline int fw_parse_ip(const uint8_t *p, uint32_t off, uint32_t end, int v6, int quoted,
			      struct fw_tuple *t, uint32_t *l4off, uint32_t *l4end, uint8_t *frag)
{
	memset(t, 0, sizeof(*t));
	*frag = 0;
	if (!v6) {
		if (off + 20 > end || (p[off] >> 4) != 4 || (p[off] & 0x0f) < 5)
			return -1;
		uint32_t ihl = (uint32_t)(p[off] & 0x0f) * 4;
		uint32_t tot = pp_be16(p + off + 2);
		if (off + ihl > end)
			return -1;
		if (!quoted) {
			if (tot < ihl || off + tot > end)
				return -1;
			end = off + tot; /* Ethernet padding is not payload */
		}
		t->family = 4;
		t->proto = p[off + 9];
		memcpy(t->src, p + off + 12, 4);
		memcpy(t->dst, p + off + 16, 4);
		if ((pp_be16(p + off + 6) & 0x1fff) != 0)
			*frag = 1;
		*l4off = off + ihl;
	} else {
		if (off + 40 > end || (p[off] >> 4) != 6)
			return -1;
		uint32_t plen = pp_be16(p + off + 4);
		if (!quoted) {
			if (plen == 0 || off + 40 + plen > end) /* jumbograms are not supported */
				return -1;
			end = off + 40 + plen;
		}
		t->family = 6;
		memcpy(t->src, p + off + 8, 16);
		memcpy(t->dst, p + off + 24, 16);
		uint32_t l4 = 0;
		t->proto = pp_ipv6_skip_ext(p, end, off + 40, p[off + 6], &l4, frag);
		if (l4 == 0) /* truncated extension header, or more than 8 */
			return -1;
		*l4off = l4;
	}
	*l4end = end;
	return 0;
}

/* Parse a frame. Returns its enum fw_kind and fills *k for FW_K_IP. */
static inline int fw_parse(const uint8_t *p, uint32_t len, struct fw_pkt *k)
{
	uint32_t off = PP_ETH_LEN, l4, end;

	k->frag = 0;
	k->tcp_flags = 0;
	k->icmp = 0;
	k->has_inner = 0;
	if (len < PP_ETH_LEN)
		return FW_K_MALFORMED;
	uint16_t et = pp_be16(p + 12);
	if (et == PP_ETH_P_8021Q || et == PP_ETH_P_8021AD) {
		if (len < PP_ETH_LEN + PP_VLAN_LEN)
			return FW_K_MALFORMED;
		et = pp_be16(p + 16);
		off += PP_VLAN_LEN;
	}
	if (et != PP_ETH_P_IPV4 && et != PP_ETH_P_IPV6)
		return FW_K_NON_IP;
	if (fw_parse_ip(p, off, len, et == PP_ETH_P_IPV6, 0, &k->t, &l4, &end, &k->frag) < 0)
		return FW_K_MALFORMED;
	if (k->frag)
		return FW_K_IP;
	struct fw_tuple *t = &k->t;
	uint32_t avail = end - l4;
	switch (t->proto) {
	case FW_IPPROTO_TCP:
		if (avail < 20 || (p[l4 + 12] >> 4) < 5 || (uint32_t)(p[l4 + 12] >> 4) * 4 > avail)
			return FW_K_MALFORMED;
		k->tcp_flags = p[l4 + 13];
		goto ports;
	case FW_IPPROTO_UDP:
		if (avail < 8)
			return FW_K_MALFORMED;
	ports:
		t->sport = pp_be16(p + l4);
		t->dport = pp_be16(p + l4 + 2);
		t->has_ports = 1;
		return FW_K_IP;
	case FW_IPPROTO_ICMP:
	case FW_IPPROTO_ICMPV6: {
		int v6 = t->family == 6;
		if ((t->proto == FW_IPPROTO_ICMPV6) != v6) /* ICMP over IPv6 / ICMPv6 over IPv4 */
			return FW_K_IP;
		if (avail < 8)
			return FW_K_MALFORMED;
		uint8_t type = p[l4];
		if (v6 && type >= 133 && type <= 137)
			return FW_K_ND;
		if (type == (v6 ? 128 : 8) || type == (v6 ? 129 : 0)) {
			k->icmp = type == (v6 ? 128 : 8) ? FW_ICMP_ECHO_REQ : FW_ICMP_ECHO_REP;
			t->sport = t->dport = pp_be16(p + l4 + 4);
			t->has_ports = 1;
		} else if (fw_icmp_is_error(t->family, type)) {
			uint32_t il4, iend;
			uint8_t ifrag;
			k->icmp = FW_ICMP_ERROR;
			struct fw_tuple *in = &k->inner;
			if (fw_parse_ip(p, l4 + 8, end, v6, 1, in, &il4, &iend, &ifrag) == 0 && !ifrag) {
				k->has_inner = 1;
				if (in->proto == FW_IPPROTO_TCP || in->proto == FW_IPPROTO_UDP) {
					if (il4 + 4 > iend) {
						k->has_inner = 0;
					} else {
						in->sport = pp_be16(p + il4);
						in->dport = pp_be16(p + il4 + 2);
						in->has_ports = 1;
					}
				} else if (in->proto == t->proto) { /* a quoted echo request/reply */
					if (il4 + 8 > iend) {
						k->has_inner = 0;
					} else {
						in->sport = in->dport = pp_be16(p + il4 + 4);
						in->has_ports = 1;
					}
				}
			}
		}
		return FW_K_IP;
	}
	default:
		return FW_K_IP;
	}
}

#endif /* SLUICE_NFS_FIREWALL_PKT_H */
