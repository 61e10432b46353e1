/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The l2switch's forwarding decision for one frame, on the SDK's packet view (struct sl_pkt):
 * classify into a VLAN, learn the source, then forward to the one port the FDB knows (tag pushed or
 * popped in place when the ingress and egress tagging differ), filter (destination behind the
 * ingress port), or flood to every other port of the VLAN with SL_ACT_OUT_SET. Sets the packet's
 * action; never reads past the frame. DPDK-free; unit-tested in tests/unit/test_l2switch.c.
 */
#ifndef SLUICE_NFS_L2SWITCH_PKT_H
#define SLUICE_NFS_L2SWITCH_PKT_H

#include <stdint.h>
#include <string.h>

#include "conf.h"
#include "fdb.h"
#include "sluice/nf.h"

#define L2_ETH_LEN 14
#define L2_TAG_LEN 4
#define L2_TPID 0x8100

struct l2_stats {
	struct l2_fdb_stats fdb; /* learned, moved, aged, full */
	uint64_t flooded, forwarded, filtered, vlan_drop, malformed, link_local, no_room;
};

struct l2sw {
	struct l2_vlan_map vm;
	struct l2_fdb fdb;
	struct l2_stats st;
};

/* What l2sw_pkt decided (for tests and the batch's totals). */
enum l2_verdict {
	L2_FORWARD = 0, L2_FLOOD, L2_FILTERED, L2_VLAN_DROP, L2_MALFORMED, L2_LINK_LOCAL, L2_NO_ROOM,
};

/* Insert an 802.1Q tag with TCI `tci` after the MAC addresses, in place. Returns 0 or -1 (no
 * headroom; the frame is unchanged). */
static inline int l2_push_tag(struct sl_pkt *p, uint16_t tci)
{
	uint8_t *d = sl_pkt_adj_head(p, L2_TAG_LEN);
	if (d == NULL)
		return -1;
	memmove(d, d + L2_TAG_LEN, 12);
	d[12] = L2_TPID >> 8;
	d[13] = L2_TPID & 0xff;
	d[14] = (uint8_t)(tci >> 8);
	d[15] = (uint8_t)tci;
	return 0;
}

/* Remove the tag after the MAC addresses, in place (the frame has one: len >= 18). */
static inline void l2_pop_tag(struct sl_pkt *p)
{
	uint8_t *d = sl_pkt_data(p);
	memmove(d + L2_TAG_LEN, d, 12);
	sl_pkt_adj_head(p, -L2_TAG_LEN);
}

static inline int l2_link_local(const uint8_t *dst)
{
	/* 01:80:c2:00:00:00..0f: STP, pause, LACP, 802.1X, LLDP ... never forwarded by a bridge */
	return dst[0] == 0x01 && dst[1] == 0x80 && dst[2] == 0xc2 && dst[3] == 0 && dst[4] == 0 &&
	       (dst[5] & 0xf0) == 0;
}

static inline enum l2_verdict l2sw_drop(struct sl_pkt *p, uint64_t *counter, enum l2_verdict v)
{
	(*counter)++;
	sl_pkt_set_action(p, SL_ACT_DROP, 0);
	return v;
}

/* Decide what happens to frame p (arrived on its ingress port) at time `now` (ns). */
static inline enum l2_verdict l2sw_pkt(struct l2sw *sw, struct sl_pkt *p, uint64_t now)
{
	struct l2_stats *st = &sw->st;
	const struct l2_vlan_map *vm = &sw->vm;
	uint8_t *d = sl_pkt_data(p);
	uint32_t len = sl_pkt_len(p);
	unsigned in = sl_pkt_in_port(p);

	if (len < L2_ETH_LEN)
		return l2sw_drop(p, &st->malformed, L2_MALFORMED);
	if (in >= L2_PORTS_MAX || !(vm->ports >> in & 1))
		return l2sw_drop(p, &st->vlan_drop, L2_VLAN_DROP);
	uint64_t inbit = 1ull << in;

	/* 1. the frame's VLAN */
	int tagged = 0;
	uint16_t vlan;
	if (d[12] == (L2_TPID >> 8) && d[13] == (L2_TPID & 0xff)) {
		if (len < L2_ETH_LEN + L2_TAG_LEN)
			return l2sw_drop(p, &st->malformed, L2_MALFORMED);
		uint16_t tci = (uint16_t)(d[14] << 8 | d[15]);
		vlan = tci & 0x0fff;
		if (vlan == 0) { /* priority tag: the port's VLAN, written into the tag (PCP kept) */
			vlan = vm->pvid[in];
			if (vlan == 0)
				return l2sw_drop(p, &st->vlan_drop, L2_VLAN_DROP);
			d[14] = (uint8_t)((d[14] & 0xf0) | vlan >> 8);
			d[15] = (uint8_t)vlan;
		} else if (vlan > L2_VLAN_MAX) {
			return l2sw_drop(p, &st->vlan_drop, L2_VLAN_DROP);
		}
		tagged = 1;
	} else {
		vlan = vm->pvid[in];
		if (vlan == 0)
			return l2sw_drop(p, &st->vlan_drop, L2_VLAN_DROP);
	}
	uint64_t untag_ports = vm->untagged[vlan], tag_ports = vm->tagged[vlan];
	if (!((untag_ports | tag_ports) & inbit))
		return l2sw_drop(p, &st->vlan_drop, L2_VLAN_DROP);

	/* 2. learn the source (a multicast or all-zero source is not a station: such frames are
	 * invalid, as in Linux's bridge) */
	const uint8_t *src = d + 6;
	if ((src[0] & 1) || (src[0] | src[1] | src[2] | src[3] | src[4] | src[5]) == 0)
		return l2sw_drop(p, &st->malformed, L2_MALFORMED);
	l2_fdb_learn(&sw->fdb, l2_key(vlan, src), (uint16_t)in, now, &st->fdb);

	/* 3. known unicast: one port */
	if (!(d[0] & 1)) {
		const struct l2_fdb_entry *e = l2_fdb_find(&sw->fdb, l2_key(vlan, d), now, &st->fdb);
		if (e != NULL && ((untag_ports | tag_ports) >> e->port & 1)) {
			unsigned out = e->port;
			if (out == in)
				return l2sw_drop(p, &st->filtered, L2_FILTERED);
			int out_tagged = (int)(tag_ports >> out & 1);
			if (tagged && !out_tagged) {
				l2_pop_tag(p);
			} else if (!tagged && out_tagged) {
				if (l2_push_tag(p, vlan) < 0)
					return l2sw_drop(p, &st->no_room, L2_NO_ROOM);
			}
			sl_pkt_set_action(p, SL_ACT_OUT, (uint16_t)out);
			st->forwarded++;
			return L2_FORWARD;
		}
	} else if (l2_link_local(d)) {
		return l2sw_drop(p, &st->link_local, L2_LINK_LOCAL);
	}

	/* 4. unknown unicast, broadcast, multicast: every other port of the VLAN, each with its own
	 * tagging. When all of them want the frame the other way, convert it once in place so they
	 * share the buffer (no copies). */
	untag_ports &= ~inbit;
	tag_ports &= ~inbit;
	if ((untag_ports | tag_ports) == 0)
		return l2sw_drop(p, &st->filtered, L2_FILTERED);
	uint64_t as_is, untag = 0, tag = 0;
	if (tagged) {
		if (tag_ports == 0) {
			l2_pop_tag(p);
			as_is = untag_ports;
		} else {
			as_is = tag_ports;
			untag = untag_ports;
		}
	} else {
		if (untag_ports == 0) {
			if (l2_push_tag(p, vlan) < 0)
				return l2sw_drop(p, &st->no_room, L2_NO_ROOM);
			as_is = tag_ports;
		} else {
			as_is = untag_ports;
			tag = tag_ports;
		}
	}
	if (sl_pkt_set_out_set(p, as_is, untag, tag, vlan) < 0)
		return l2sw_drop(p, &st->no_room, L2_NO_ROOM);
	st->flooded++;
	return L2_FLOOD;
}

#endif /* SLUICE_NFS_L2SWITCH_PKT_H */
