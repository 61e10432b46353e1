/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The l2switch's forwarding database: (VLAN, MAC) -> port, with the time each entry was last
 * refreshed. An open-addressing table (linear probing, backward-shift deletion, so no tombstones
 * pile up), allocated once, at most `max` entries in at least 2*max slots: a probe always ends at an
 * empty slot and stays short. Aging is by timestamps passed in by the caller (`now`, nanoseconds),
 * so tests drive it with a fake clock: an entry older than aging_ns is dead; lookups remove a dead
 * entry they meet, and a sweep visits a few slots per batch to reclaim the rest.
 * DPDK-free; unit-tested in tests/unit/test_l2switch.c.
 */
#ifndef SLUICE_NFS_L2SWITCH_FDB_H
#define SLUICE_NFS_L2SWITCH_FDB_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Key: VLAN in bits 48..59, MAC (network byte order, first byte highest) in bits 0..47. VLAN 0 is
 * never used, so key 0 marks an empty slot. */
static inline uint64_t l2_key(uint16_t vlan, const uint8_t *mac)
{
	return (uint64_t)vlan << 48 | (uint64_t)mac[0] << 40 | (uint64_t)mac[1] << 32 |
	       (uint64_t)mac[2] << 24 | (uint64_t)mac[3] << 16 | (uint64_t)mac[4] << 8 | mac[5];
}

static inline uint16_t l2_key_vlan(uint64_t key) { return (uint16_t)(key >> 48); }

struct l2_fdb_entry {
	uint64_t key;  /* 0: empty */
	uint64_t seen; /* last time the station sent a frame (ns) */
	uint16_t port;
	uint8_t pad_[6];
};

struct l2_fdb {
	struct l2_fdb_entry *t;
	uint32_t mask;     /* slots - 1 */
	uint32_t count;    /* entries in use */
	uint32_t max;      /* capacity in entries (max-macs) */
	uint32_t sweep;    /* next slot the incremental sweep looks at */
	uint64_t aging_ns; /* an entry not refreshed for this long is dead */
};

/* What the table did, for the NF's counters. */
struct l2_fdb_stats {
	uint64_t learned, moved, aged, full;
};

static inline uint32_t l2_fdb_home(const struct l2_fdb *f, uint64_t key)
{
	/* Fibonacci hashing: the high bits of key * 2^64/phi are well mixed even for MACs that differ
	 * only in their last byte */
	return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & f->mask;
}

/* Allocate a table for `max` entries (1..2^24). Returns 0, or -1 when out of memory. */
static inline int l2_fdb_init(struct l2_fdb *f, uint32_t max, uint64_t aging_ns)
{
	uint32_t slots = 16;
	while (slots < 2 * (uint64_t)max)
		slots <<= 1;
	memset(f, 0, sizeof(*f));
	f->t = calloc(slots, sizeof(*f->t));
	if (f->t == NULL)
		return -1;
	f->mask = slots - 1;
	f->max = max;
	f->aging_ns = aging_ns;
	return 0;
}

static inline void l2_fdb_free(struct l2_fdb *f)
{
	free(f->t);
	f->t = NULL;
	f->count = 0;
}

static inline int l2_fdb_dead(const struct l2_fdb *f, const struct l2_fdb_entry *e, uint64_t now)
{
	return now >= e->seen && now - e->seen >= f->aging_ns;
}

/* Remove slot i, moving later entries of the same probe run back so every entry stays reachable
 * from its home slot. */
static inline void l2_fdb_del_at(struct l2_fdb *f, uint32_t i)
{
	uint32_t j = i;
	f->t[i].key = 0;
	f->count--;
	for (;;) {
		j = (j + 1) & f->mask;
		if (f->t[j].key == 0)
			return;
		uint32_t k = l2_fdb_home(f, f->t[j].key);
		/* the entry at j may fill the hole at i unless its home lies cyclically in (i, j] */
		int stays = i <= j ? (k > i && k <= j) : (k > i || k <= j);
		if (!stays) {
			f->t[i] = f->t[j];
			f->t[j].key = 0;
			i = j;
		}
	}
}

/* The slot holding key, or the empty slot where it would go. */
static inline uint32_t l2_fdb_slot(const struct l2_fdb *f, uint64_t key)
{
	uint32_t i = l2_fdb_home(f, key);
	while (f->t[i].key != 0 && f->t[i].key != key)
		i = (i + 1) & f->mask;
	return i;
}

/* The live entry for key, or NULL. A dead entry met here is removed (st->aged). */
static inline const struct l2_fdb_entry *l2_fdb_find(struct l2_fdb *f, uint64_t key, uint64_t now,
						     struct l2_fdb_stats *st)
{
	uint32_t i = l2_fdb_slot(f, key);
	if (f->t[i].key == 0)
		return NULL;
	if (l2_fdb_dead(f, &f->t[i], now)) {
		l2_fdb_del_at(f, i);
		st->aged++;
		return NULL;
	}
	return &f->t[i];
}

/* A frame from `key`'s station arrived on `port`: refresh its entry (counting a station that moved
 * to another port), or add one (st->learned), or count st->full when the table holds max entries.
 * Returns 0, or -1 when full. */
static inline int l2_fdb_learn(struct l2_fdb *f, uint64_t key, uint16_t port, uint64_t now,
			       struct l2_fdb_stats *st)
{
	uint32_t i = l2_fdb_slot(f, key);
	struct l2_fdb_entry *e = &f->t[i];
	if (e->key == key) {
		if (l2_fdb_dead(f, e, now)) { /* aged out just now and learned again */
			st->aged++;
			st->learned++;
		} else if (e->port != port) {
			st->moved++;
		}
		e->port = port;
		e->seen = now;
		return 0;
	}
	if (f->count >= f->max) {
		st->full++;
		return -1;
	}
	e->key = key;
	e->port = port;
	e->seen = now;
	f->count++;
	st->learned++;
	return 0;
}

/* Look at up to n slots from the sweep cursor and remove the dead entries there. */
static inline void l2_fdb_sweep(struct l2_fdb *f, uint64_t now, uint32_t n, struct l2_fdb_stats *st)
{
	uint32_t i = f->sweep;
	while (n--) {
		if (f->t[i].key != 0 && l2_fdb_dead(f, &f->t[i], now)) {
			l2_fdb_del_at(f, i); /* a later entry may have moved into i: look again */
			st->aged++;
			continue;
		}
		i = (i + 1) & f->mask;
	}
	f->sweep = i;
}

/* Remove every dead entry (before a dump). */
static inline void l2_fdb_expire_all(struct l2_fdb *f, uint64_t now, struct l2_fdb_stats *st)
{
	/* a deletion fills slot i from later slots (or, wrapping, from slots already judged alive):
	 * re-checking i until it holds a live entry or nothing visits every entry once */
	for (uint32_t i = 0; i <= f->mask; i++)
		while (f->t[i].key != 0 && l2_fdb_dead(f, &f->t[i], now)) {
			l2_fdb_del_at(f, i);
			st->aged++;
		}
}

#endif /* SLUICE_NFS_L2SWITCH_FDB_H */
