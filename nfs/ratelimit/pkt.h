/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The rate limiter's view of a packet (bounds-checked): family, addresses, protocol, ports, DSCP,
 * where the IP header is and how long the IP packet is; and the DSCP rewrite (IPv4 with an RFC 1624
 * header checksum update, IPv6 traffic class). DPDK-free; unit-tested in tests/unit/test_ratelimit.c.
 */
#ifndef SLUICE_NFS_RATELIMIT_PKT_H
#define SLUICE_NFS_RATELIMIT_PKT_H

#include <stdint.h>
#include <string.h>

#include "common/csum.h"
#include "common/pktparse.h"

enum rl_pkind { RL_P_IP = 0, RL_P_NON_IP, RL_P_MALFORMED };

struct rl_pkt {
	uint8_t src[16], dst[16]; /* IPv4: first 4 bytes, rest zero */
	uint16_t sport, dport;    /* 0 unless has_ports */
	uint8_t family;           /* 4 or 6 */
	uint8_t proto;            /* IPv6: after the extension headers */
	uint8_t dscp;             /* 0..63 */
	uint8_t has_ports;        /* TCP/UDP ports present (not a non-first fragment) */
	uint16_t l3_off;          /* offset of the IP header */
	uint32_t l3_len;          /* IPv4 total length / IPv6 40 + payload length */
};

/* Parse a frame of `len` bytes. Returns enum rl_pkind; fills *k for RL_P_IP. Malformed: truncated or
 * inconsistent Ethernet/VLAN/IP headers (lengths beyond the frame, IHL < 5, IPv6 jumbograms, a cut
 * extension header), a TCP header shorter than 20 bytes or a UDP header shorter than 8. */
static inline int rl_parse(const uint8_t *p, uint32_t len, struct rl_pkt *k)
{
	uint32_t off = PP_ETH_LEN, l4, end;

	if (len < PP_ETH_LEN)
		return RL_P_MALFORMED;
	uint16_t et = pp_be16(p + 12);
	if (et == PP_ETH_P_8021Q || et == PP_ETH_P_8021AD) {
		if (len < PP_ETH_LEN + PP_VLAN_LEN)
			return RL_P_MALFORMED;
		et = pp_be16(p + 16);
		off += PP_VLAN_LEN;
	}
	if (et != PP_ETH_P_IPV4 && et != PP_ETH_P_IPV6)
		return RL_P_NON_IP;
	memset(k, 0, sizeof(*k));
	k->l3_off = (uint16_t)off;
	uint8_t frag = 0;
	if (et == PP_ETH_P_IPV4) {
		if (off + 20 > len || (p[off] >> 4) != 4 || (p[off] & 0x0f) < 5)
			return RL_P_MALFORMED;
		uint32_t ihl = (uint32_t)(p[off] & 0x0f) * 4, tot = pp_be16(p + off + 2);
		if (tot < ihl || off + tot > len)
			return RL_P_MALFORMED;
		end = off + tot; /* Ethernet padding is not part of the packet */
		k->family = 4;
		k->proto = p[off + 9];
		k->dscp = p[off + 1] >> 2;
		k->l3_len = tot;
		memcpy(k->src, p + off + 12, 4);
		memcpy(k->dst, p + off + 16, 4);
		frag = (pp_be16(p + off + 6) & 0x1fff) != 0;
		l4 = off + ihl;
	} else {
		if (off + 40 > len || (p[off] >> 4) != 6)
			return RL_P_MALFORMED;
		uint32_t plen = pp_be16(p + off + 4);
		if (plen == 0 || off + 40 + plen > len)
			return RL_P_MALFORMED;
		end = off + 40 + plen;
		k->family = 6;
		k->dscp = (uint8_t)(((p[off] & 0x0f) << 2) | (p[off + 1] >> 6));
		k->l3_len = 40 + plen;
		memcpy(k->src, p + off + 8, 16);
		memcpy(k->dst, p + off + 24, 16);
		l4 = 0;
		k->proto = pp_ipv6_skip_ext(p, end, off + 40, p[off + 6], &l4, &frag);
		if (l4 == 0)
			return RL_P_MALFORMED;
	}
	if (frag)
		return RL_P_IP;
	uint32_t avail = end - l4;
	if (k->proto == PP_IPPROTO_TCP) {
		if (avail < 20 || (p[l4 + 12] >> 4) < 5 || (uint32_t)(p[l4 + 12] >> 4) * 4 > avail)
			return RL_P_MALFORMED;
	} else if (k->proto == PP_IPPROTO_UDP) {
		if (avail < 8)
			return RL_P_MALFORMED;
	} else {
		return RL_P_IP;
	}
	k->sport = pp_be16(p + l4);
	k->dport = pp_be16(p + l4 + 2);
	k->has_ports = 1;
	return RL_P_IP;
}

/* Rewrite the DSCP of a packet rl_parse() accepted, keeping the ECN bits. IPv4: the header checksum
 * is updated incrementally (RFC 1624); IPv6 has none, and no L4 checksum covers the traffic class. */
static inline void rl_set_dscp(uint8_t *p, const struct rl_pkt *k, uint8_t dscp)
{
	uint8_t *ip = p + k->l3_off;
	if (k->family == 4) {
		uint16_t old = pp_be16(ip);
		ip[1] = (uint8_t)((dscp << 2) | (ip[1] & 0x03));
		cs_put16(ip + 10, cs_update16(pp_be16(ip + 10), old, pp_be16(ip)));
	} else {
		/* traffic class = low nibble of byte 0 + high nibble of byte 1; DSCP is its top 6 bits */
		ip[0] = (uint8_t)((ip[0] & 0xf0) | (dscp >> 2));
		ip[1] = (uint8_t)((ip[1] & 0x3f) | ((dscp & 0x03) << 6));
	}
}

#endif /* SLUICE_NFS_RATELIMIT_PKT_H */
