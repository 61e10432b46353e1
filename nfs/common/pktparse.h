/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Bounds-checked Ethernet / 802.1Q / IPv4 / IPv6 / TCP-UDP header parsing
 * shared by the sample NFs. Never reads past `len`; a truncated packet is
 * parsed as far as its complete headers go and the flags say what is there.
 */
#ifndef SLUICE_NFS_PKTPARSE_H
#define SLUICE_NFS_PKTPARSE_H

#include <stdint.h>
#include <string.h>

#define PP_ETH_LEN      14
#define PP_VLAN_LEN     4
#define PP_ETH_P_IPV4   0x0800
#define PP_ETH_P_IPV6   0x86dd
#define PP_ETH_P_8021Q  0x8100
#define PP_ETH_P_8021AD 0x88a8
#define PP_IPPROTO_TCP  6
#define PP_IPPROTO_UDP  17

struct pp_info {
	uint16_t ethertype;  /* after at most one VLAN tag; 0 if no full Ethernet header */
	uint8_t has_eth;     /* Ethernet addresses and type present (>= 14 bytes) */
	uint8_t vlan;        /* one VLAN tag was skipped */
	uint8_t family;      /* 4 or 6 if the fixed IP header is complete, else 0 */
	uint8_t proto;       /* L4 protocol (IPv4 protocol / IPv6 final next header) */
	uint8_t has_ports;   /* TCP/UDP source and destination ports present */
	uint8_t frag;        /* a non-first fragment: no L4 header in this packet */
	uint16_t l3_off;     /* offset of the IP header */
	uint16_t l4_off;     /* offset of the L4 header (valid if has_ports) */
};

static inline uint16_t pp_be16(const uint8_t *p)
{
	return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

/* Walk IPv6 extension headers from `off` (first next-header `nh`). Returns
 * the final next header and sets *l4 and *frag; stops (returning 59, "no next
 * header") if an extension header is truncated. */
static inline uint8_t pp_ipv6_skip_ext(const uint8_t *p, uint32_t len, uint32_t off, uint8_t nh,
				       uint32_t *l4, uint8_t *frag)
{
	for (int i = 0; i < 8; i++) {
		uint32_t hl;
		switch (nh) {
		case 0:   /* hop-by-hop */
		case 43:  /* routing */
		case 60:  /* destination options */
			if (off + 2 > len)
				return 59;
			hl = ((uint32_t)p[off + 1] + 1) * 8;
			break;
		case 44:  /* fragment */
			if (off + 8 > len)
				return 59;
			if ((pp_be16(p + off + 2) & 0xfff8) != 0)
				*frag = 1;
			hl = 8;
			break;
		case 51:  /* authentication header */
			if (off + 2 > len)
				return 59;
			hl = ((uint32_t)p[off + 1] + 2) * 4;
			break;
		default:
			*l4 = off;
			return nh;
		}
		if (off + hl > len)
			return 59;
		nh = p[off];
		off += hl;
	}
	return 59; /* too many extension headers: treat as opaque */
}

/* Parse the headers of a packet of `len` bytes at `p`. Always fills *pi. */
static inline void pp_parse(const uint8_t *p, uint32_t len, struct pp_info *pi)
{
	uint32_t off = PP_ETH_LEN, l4 = 0;

	memset(pi, 0, sizeof(*pi));
	if (len < PP_ETH_LEN)
		return;
	pi->has_eth = 1;
	uint16_t et = pp_be16(p + 12);
	if (et == PP_ETH_P_8021Q || et == PP_ETH_P_8021AD) {
		if (len < PP_ETH_LEN + PP_VLAN_LEN) {
			pi->ethertype = et;
			return;
		}
		pi->vlan = 1;
		et = pp_be16(p + 16);
		off += PP_VLAN_LEN;
	}
	pi->ethertype = et;
	pi->l3_off = (uint16_t)off;

	if (et == PP_ETH_P_IPV4) {
		if (off + 20 > len || (p[off] >> 4) != 4 || (p[off] & 0x0f) < 5)
			return;
		pi->family = 4;
		pi->proto = p[off + 9];
		if ((pp_be16(p + off + 6) & 0x1fff) != 0) {
			pi->frag = 1;
			return;
		}
		l4 = off + (uint32_t)(p[off] & 0x0f) * 4;
	} else if (et == PP_ETH_P_IPV6) {
		if (off + 40 > len || (p[off] >> 4) != 6)
			return;
		pi->family = 6;
		pi->proto = pp_ipv6_skip_ext(p, len, off + 40, p[off + 6], &l4, &pi->frag);
		if (pi->frag || l4 == 0)
			return;
	} else {
		return;
	}
	if ((pi->proto == PP_IPPROTO_TCP || pi->proto == PP_IPPROTO_UDP) && l4 + 4 <= len) {
		pi->has_ports = 1;
		pi->l4_off = (uint16_t)l4;
	}
}

/* Swap n bytes at a and b (non-overlapping). */
static inline void pp_swap(uint8_t *a, uint8_t *b, unsigned n)
{
	uint8_t t[16];
	memcpy(t, a, n);
	memcpy(a, b, n);
	memcpy(b, t, n);
}

/* Reflect a packet in place: swap Ethernet, IP and TCP/UDP source and
 * destination. Only headers fully present are touched. IPv4, TCP and UDP
 * checksums stay valid (a one's-complement sum does not depend on order). */
static inline void pp_reflect(uint8_t *p, uint32_t len)
{
	struct pp_info pi;

	pp_parse(p, len, &pi);
	if (!pi.has_eth)
		return;
	pp_swap(p, p + 6, 6);
	if (pi.family == 4)
		pp_swap(p + pi.l3_off + 12, p + pi.l3_off + 16, 4);
	else if (pi.family == 6)
		pp_swap(p + pi.l3_off + 8, p + pi.l3_off + 24, 16);
	if (pi.has_ports)
		pp_swap(p + pi.l4_off, p + pi.l4_off + 2, 2);
}

#endif /* SLUICE_NFS_PKTPARSE_H */
