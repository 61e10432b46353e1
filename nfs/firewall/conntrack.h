/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The firewall's connection tracking table: a preallocated open-addressing hash table (linear
 * probing, backward-shift deletion) keyed by the direction-independent (normalized) tuple. Bounded:
 * at most `max` entries, no allocation after fw_ct_init. Expired entries are removed lazily when a
 * lookup meets them and by an incremental sweep (fw_ct_sweep, a few slots per batch).
 * DPDK-free; unit-tested in tests/unit/test_firewall.c.
 */
#ifndef SLUICE_NFS_FIREWALL_CONNTRACK_H
#define SLUICE_NFS_FIREWALL_CONNTRACK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pkt.h"

/* timeout classes */
enum { FW_TO_TCP = 0, FW_TO_TCP_SYN, FW_TO_TCP_CLOSE, FW_TO_UDP, FW_TO_ICMP, FW_TO_OTHER, FW_TO_N };

/* Normalized key: (a, pa) is the lexicographically smaller endpoint. 40 bytes. */
struct fw_ct_key {
	uint8_t a[16], b[16];
	uint16_t pa, pb;
	uint8_t family, proto;
	uint8_t pad_[2];
};

struct fw_ct_entry {
	struct fw_ct_key k;
	uint64_t expire;    /* ns, CLOCK_MONOTONIC */
	uint32_t hash;
	uint8_t used;
	uint8_t orig_dir;   /* direction (0: a->b, 1: b->a) of the packet that created the entry */
	uint8_t closing;    /* TCP: FIN or RST seen */
	uint8_t replied;    /* a packet in the reply direction was seen */
	uint8_t pad_[8];    /* 64 bytes: one cache line per entry */
} __attribute__((aligned(64)));

struct fw_ct {
	struct fw_ct_entry *slot;
	uint32_t mask;       /* slots - 1 (slots: a power of two >= 2 * max) */
	uint32_t count, max;
	uint32_t cursor;     /* sweep position */
	uint64_t timeout_ns[FW_TO_N];
};

static inline int fw_ct_init(struct fw_ct *ct, uint32_t max)
{
	uint32_t slots = 16;
	memset(ct, 0, sizeof(*ct));
	if (max == 0 || max > (1u << 26))
		return -1;
	while (slots < 2 * (uint64_t)max)
		slots <<= 1;
	ct->slot = aligned_alloc(64, (size_t)slots * sizeof(*ct->slot));
	if (ct->slot == NULL)
		return -1;
	memset(ct->slot, 0, (size_t)slots * sizeof(*ct->slot));
	ct->mask = slots - 1;
	ct->max = max;
	static const uint64_t def_s[FW_TO_N] = { 3600, 60, 10, 60, 30, 600 };
	for (int i = 0; i < FW_TO_N; i++)
		ct->timeout_ns[i] = def_s[i] * 1000000000ull;
	return 0;
}

static inline void fw_ct_free(struct fw_ct *ct)
{
	free(ct->slot);
	ct->slot = NULL;
}

/* Build the normalized key of tuple t; returns the packet's direction (0: src is `a`). */
static inline int fw_ct_key(const struct fw_tuple *t, struct fw_ct_key *k)
{
	int c = memcmp(t->src, t->dst, 16);
	int dir = c > 0 || (c == 0 && t->sport > t->dport);
	memcpy(k->a, dir ? t->dst : t->src, 16);
	memcpy(k->b, dir ? t->src : t->dst, 16);
	k->pa = dir ? t->dport : t->sport;
	k->pb = dir ? t->sport : t->dport;
	k->family = t->family;
	k->proto = t->proto;
	k->pad_[0] = k->pad_[1] = 0;
	return dir;
}

static inline uint32_t fw_ct_hash(const struct fw_ct_key *k)
{
	uint64_t w[5], h = 0x9e3779b97f4a7c15ull;
	memcpy(w, k, sizeof(w));
	for (int i = 0; i < 5; i++) {
		h ^= w[i];
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	return (uint32_t)(h ^ (h >> 29));
}

static inline int fw_ct_key_eq(const struct fw_ct_key *x, const struct fw_ct_key *y)
{
	return memcmp(x, y, sizeof(*x)) == 0;
}

/* Remove the entry in slot i (backward-shift deletion keeps every probe chain intact). */
static inline void fw_ct_remove_slot(struct fw_ct *ct, uint32_t i)
{
	uint32_t j = i;
	ct->slot[i].used = 0;
	ct->count--;
	for (;;) {
		j = (j + 1) & ct->mask;
		if (!ct->slot[j].used)
			return;
		uint32_t h = ct->slot[j].hash & ct->mask;
		/* the entry at j may move to the hole at i unless its home h lies cyclically in (i, j] */
		int stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
		if (!stays) {
			ct->slot[i] = ct->slot[j];
			ct->slot[j].used = 0;
			i = j;
		}
	}
}

/* Live entry for key k (hash h), or NULL. An expired one met on the way is removed. */
static inline struct fw_ct_entry *fw_ct_find(struct fw_ct *ct, const struct fw_ct_key *k, uint32_t h,
					     uint64_t now)
{
	uint32_t i = h & ct->mask;
	for (;;) {
		struct fw_ct_entry *e = &ct->slot[i];
		if (!e->used)
			return NULL;
		if (e->hash == h && fw_ct_key_eq(&e->k, k)) {
			if (e->expire <= now) {
				fw_ct_remove_slot(ct, i);
				return NULL;
			}
			return e;
		}
		i = (i + 1) & ct->mask;
	}
}

/* Look at up to n slots from the sweep cursor and remove expired entries. */
static inline void fw_ct_sweep(struct fw_ct *ct, uint64_t now, uint32_t n)
{
	uint32_t i = ct->cursor;
	while (n--) {
		struct fw_ct_entry *e = &ct->slot[i];
		if (e->used && e->expire <= now)
			fw_ct_remove_slot(ct, i); /* a later entry may shift into i: look again */
		else
			i = (i + 1) & ct->mask;
	}
	ct->cursor = i;
}

/* Insert key k (hash h, not present). Returns the new entry, or NULL when the table holds `max`
 * live entries (after a short sweep). */
static inline struct fw_ct_entry *fw_ct_insert(struct fw_ct *ct, const struct fw_ct_key *k, uint32_t h,
					       uint64_t now)
{
	if (ct->count >= ct->max) {
		fw_ct_sweep(ct, now, 256);
		if (ct->count >= ct->max)
			return NULL;
	}
	uint32_t i = h & ct->mask;
	while (ct->slot[i].used)
		i = (i + 1) & ct->mask;
	struct fw_ct_entry *e = &ct->slot[i];
	memset(e, 0, sizeof(*e));
	e->k = *k;
	e->hash = h;
	e->used = 1;
	ct->count++;
	return e;
}

/* The timeout class of an entry after a packet. */
static inline int fw_ct_class(const struct fw_ct_entry *e)
{
	switch (e->k.proto) {
	case FW_IPPROTO_TCP:
		return e->closing ? FW_TO_TCP_CLOSE : e->replied ? FW_TO_TCP : FW_TO_TCP_SYN;
	case FW_IPPROTO_UDP:
		return FW_TO_UDP;
	case FW_IPPROTO_ICMP:
	case FW_IPPROTO_ICMPV6:
		return FW_TO_ICMP;
	default:
		return FW_TO_OTHER;
	}
}

/* Account a packet of direction dir (as returned by fw_ct_key) to entry e. */
static inline void fw_ct_touch(struct fw_ct *ct, struct fw_ct_entry *e, int dir, uint8_t tcp_flags,
			       uint64_t now)
{
	if (dir != e->orig_dir)
		e->replied = 1;
	if (e->k.proto == FW_IPPROTO_TCP) {
		if (tcp_flags & (FW_TCP_FIN | FW_TCP_RST))
			e->closing = 1;
		else if (e->closing && dir == e->orig_dir &&
			 (tcp_flags & (FW_TCP_SYN | FW_TCP_ACK)) == FW_TCP_SYN) {
			e->closing = 0; /* a new SYN reopens a closed connection (as Linux does) */
			e->replied = 0;
		}
	}
	e->expire = now + ct->timeout_ns[fw_ct_class(e)];
}

/* May a packet that a rule allowed start a tracked connection? Mirrors Linux conntrack: a TCP SYN
 * (no ACK) or a mid-stream ACK (loose pick-up), never RST/FIN/SYN-ACK; ICMP echo requests, not other
 * ICMP; any UDP or other protocol. */
static inline int fw_ct_can_create(const struct fw_pkt *k)
{
	switch (k->t.proto) {
	case FW_IPPROTO_TCP: {
		uint8_t f = k->tcp_flags & (FW_TCP_SYN | FW_TCP_ACK | FW_TCP_FIN | FW_TCP_RST);
		return f == FW_TCP_SYN || f == FW_TCP_ACK;
	}
	case FW_IPPROTO_ICMP:
	case FW_IPPROTO_ICMPV6:
		return k->icmp == FW_ICMP_ECHO_REQ;
	default:
		return 1;
	}
}

/* Does entry e (found for a packet of direction dir) let the packet pass? ICMP echo entries accept
 * requests in the original direction and replies in the other, like Linux's tuple (type + id). */
static inline int fw_ct_accepts(const struct fw_ct_entry *e, const struct fw_pkt *k, int dir)
{
	if (k->t.proto == FW_IPPROTO_ICMP || k->t.proto == FW_IPPROTO_ICMPV6) {
		if (k->icmp == FW_ICMP_ECHO_REQ)
			return dir == e->orig_dir;
		if (k->icmp == FW_ICMP_ECHO_REP)
			return dir != e->orig_dir;
		return 0;
	}
	return 1;
}

#endif /* SLUICE_NFS_FIREWALL_CONNTRACK_H */
