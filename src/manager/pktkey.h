/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The steering key of a packet (docs/steering.md): the header fields rules
 * match, extracted without ever reading past the frame.
 *
 * DPDK-free, so the parser that sees every hostile packet first is
 * unit-tested on its own (tests/unit/test_pktkey.c). The layout is the
 * rte_acl input layout (src/manager/steer.c): a lone byte first, then groups
 * of four bytes; multi-byte fields are in network byte order.
 */
#ifndef SLUICED_PKTKEY_H
#define SLUICED_PKTKEY_H

#include <stddef.h>
#include <stdint.h>

/* key.flags: which parts of the key the packet has */
#define SL_KEY_IP        0x01  /* IPv4 or IPv6: proto, dscp, src, dst are set */
#define SL_KEY_IP4       0x02
#define SL_KEY_IP6       0x04
#define SL_KEY_PORTS     0x08  /* TCP or UDP with its header: src/dst port set */
#define SL_KEY_TCP       0x10  /* TCP with its flags byte: tcp_flags set */
#define SL_KEY_VLAN      0x20  /* at least one VLAN tag: vlan is the outer VID */
#define SL_KEY_FRAG      0x40  /* an IP fragment (first or not) */
#define SL_KEY_NONFIRST  0x80  /* a fragment other than the first: no L4 fields */

#define SL_KEY_MAX_EXT_HDRS 8  /* IPv6 extension headers walked before giving up (malformed) */

struct sl_pkt_key {
	uint8_t proto;      /* IP protocol / last IPv6 next header */
	uint8_t pad0[3];
	uint8_t in_port;
	uint8_t flags;      /* SL_KEY_* */
	uint8_t dscp;
	uint8_t tcp_flags;
	uint16_t vlan;      /* outer VID, network order */
	uint16_t ethertype; /* after the VLAN tags, network order */
	uint16_t sport;     /* network order */
	uint16_t dport;
	uint8_t dmac[6];
	uint8_t smac[6];
	uint32_t src[4];    /* IPv4 in src[0]; IPv6 all four; network order */
	uint32_t dst[4];
	/* not matched by rte_acl: where the TCP/UDP payload is (payload rules), host order */
	uint16_t payload_off; /* from the frame's start; 0 with payload_len 0: none */
	uint16_t payload_len;
};
_Static_assert(offsetof(struct sl_pkt_key, payload_off) == 60, "the ACL key is the first 60 bytes: 1 + 3 pad + 14 groups of 4");
_Static_assert(offsetof(struct sl_pkt_key, in_port) == 4, "first 4-byte group starts at 4");
_Static_assert(offsetof(struct sl_pkt_key, src) == 28, "addresses start at 28");

/* Fill `k` from the frame p[0..len). Returns 0, or -1 when the packet is
 * malformed (docs/steering.md says exactly when); k is then partly filled. */
int sl_pkt_key_parse(const uint8_t *p, uint32_t len, uint8_t in_port, struct sl_pkt_key *k);

#endif
