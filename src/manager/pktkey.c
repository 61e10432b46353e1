/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Packet -> steering key (docs/steering.md "The packet key"). Every read is
 * checked against the frame length first; a header cut short, an IHL or a
 * length field pointing past the frame, or an endless IPv6 header chain
 * makes the packet malformed.
 */
#include <string.h>

#include "pktkey.h"

enum {
	ETH_HLEN = 14,
	ET_VLAN = 0x8100,
	ET_QINQ = 0x88a8,
	ET_IPV4 = 0x0800,
	ET_IPV6 = 0x86dd,
	P_HOPOPTS = 0,
	P_TCP = 6,
	P_UDP = 17,
	P_ROUTING = 43,
	P_FRAGMENT = 44,
	P_AH = 51,
	P_DSTOPTS = 60,
};

static inline uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* TCP/UDP ports and flags of the L4 header at p (l4len bytes up to the end of the datagram), and
 * where its payload is (a TCP data offset outside the datagram leaves no payload). */
static int parse_l4(const uint8_t *frame, const uint8_t *p, uint32_t l4len, struct sl_pkt_key *k)
{
	uint32_t hlen;
	if (k->proto == P_UDP) {
		if (l4len < 8)
			return -1;
		hlen = 8;
	} else if (k->proto == P_TCP) {
		if (l4len < 14)
			return -1;
		k->tcp_flags = p[13];
		k->flags |= SL_KEY_TCP;
		hlen = (p[12] >> 4) * 4u;
		if (hlen < 20)
			hlen = l4len + 1; /* bad data offset: no payload */
	} else {
		return 0;
	}
	if (hlen < l4len) {
		k->payload_off = (uint16_t)(p + hlen - frame);
		k->payload_len = (uint16_t)(l4len - hlen);
	}
	memcpy(&k->sport, p, 2);
	memcpy(&k->dport, p + 2, 2);
	k->flags |= SL_KEY_PORTS;
	return 0;
}

static int parse_ipv4(const uint8_t *frame, const uint8_t *p, uint32_t len, struct sl_pkt_key *k)
{
	if (len < 20 || (p[0] >> 4) != 4)
		return -1;
	uint32_t ihl = (p[0] & 0xfu) * 4u, total = rd16(p + 2);
	if (ihl < 20 || ihl > len || total < ihl || total > len)
		return -1;
	k->flags |= SL_KEY_IP | SL_KEY_IP4;
	k->dscp = p[1] >> 2;
	k->proto = p[9];
	memcpy(&k->src[0], p + 12, 4);
	memcpy(&k->dst[0], p + 16, 4);
	uint16_t frag = rd16(p + 6);
	if (frag & 0x3fffu) { /* MF or an offset */
		k->flags |= SL_KEY_FRAG;
		if (frag & 0x1fffu) {
			k->flags |= SL_KEY_NONFIRST;
			return 0;
		}
	}
	return parse_l4(frame, p + ihl, total - ihl, k);
}

static int parse_ipv6(const uint8_t *frame, const uint8_t *p, uint32_t len, struct sl_pkt_key *k)
{
	if (len < 40 || (p[0] >> 4) != 6)
		return -1;
	uint32_t end = 40u + rd16(p + 4); /* end of the datagram */
	if (end > len)
		return -1;
	k->flags |= SL_KEY_IP | SL_KEY_IP6;
	k->dscp = (uint8_t)((rd16(p) >> 4) & 0xffu) >> 2;
	memcpy(k->src, p + 8, 16);
	memcpy(k->dst, p + 24, 16);
	uint8_t nh = p[6];
	uint32_t off = 40;
	for (unsigned n = 0;; n++) {
		uint32_t hlen;
		if (nh != P_HOPOPTS && nh != P_ROUTING && nh != P_DSTOPTS && nh != P_AH && nh != P_FRAGMENT)
			break;
		if (n == SL_KEY_MAX_EXT_HDRS || end - off < 8) /* every extension header is >= 8 bytes */
			return -1;
		const uint8_t *h = p + off;
		if (nh == P_FRAGMENT)
			hlen = 8;
		else if (nh == P_AH)
			hlen = (h[1] + 2u) * 4u;
		else
			hlen = (h[1] + 1u) * 8u;
		if (hlen > end - off)
			return -1;
		if (nh == P_FRAGMENT) {
			uint16_t fo = rd16(h + 2);
			if (fo & 0xfff9u) /* an offset or M: a fragment */
				k->flags |= SL_KEY_FRAG;
			if (fo & 0xfff8u) {
				k->flags |= SL_KEY_NONFIRST;
				k->proto = h[0];
				return 0;
			}
		}
		nh = h[0];
		off += hlen;
	}
	k->proto = nh;
	return parse_l4(frame, p + off, end - off, k);
}

int sl_pkt_key_parse(const uint8_t *p, uint32_t len, uint8_t in_port, struct sl_pkt_key *k)
{
	memset(k, 0, sizeof(*k));
	k->in_port = in_port;
	if (len < ETH_HLEN)
		return -1;
	memcpy(k->dmac, p, 6);
	memcpy(k->smac, p + 6, 6);
	uint32_t off = 12;
	uint16_t et = rd16(p + off);
	for (int tags = 0; (et == ET_VLAN || et == ET_QINQ) && tags < 2; tags++) {
		if (len < off + 6) /* TCI + the next ethertype */
			return -1;
		if (tags == 0) {
			uint8_t vid[2] = { p[off + 2] & 0x0fu, p[off + 3] }; /* the TCI's low 12 bits */
			memcpy(&k->vlan, vid, 2);
			k->flags |= SL_KEY_VLAN;
		}
		off += 4;
		et = rd16(p + off);
	}
	memcpy(&k->ethertype, p + off, 2);
	off += 2;
	if (et == ET_IPV4) /* (after a third tag et is still a VLAN type: no IP) */
		return parse_ipv4(p, p + off, len - off, k);
	if (et == ET_IPV6)
		return parse_ipv6(p, p + off, len - off, k);
	return 0;
}
