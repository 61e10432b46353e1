/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The rate limiter's per-flow meter table: key (class, 5-tuple) -> meter. Open addressing with linear
 * probing and backward-shift deletion, preallocated (no allocation per packet), bounded: at most `cap`
 * flows in 2 x cap (rounded up to a power of two) slots. A meter idle longer than its class's
 * idle_cycles is expired: re-initialised when its flow comes back, removed by a sweep of a few slots
 * per batch, or by a longer sweep when the table is full. DPDK-free; tested in test_ratelimit.c.
 */
#ifndef SLUICE_NFS_RATELIMIT_FLOW_H
#define SLUICE_NFS_RATELIMIT_FLOW_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "meter.h"
#include "pkt.h"

/* Fully zeroed before being filled, so it compares with memcmp. */
struct rl_fkey {
	uint8_t src[16], dst[16];
	uint16_t sport, dport;
	uint16_t cls;
	uint8_t family, proto;
};
_Static_assert(sizeof(struct rl_fkey) == 40, "flow key is 5 words");

struct rl_fentry {
	struct rl_fkey key;
	struct rl_meter m;  /* m.last: last packet of the flow */
	uint32_t hash;
	uint32_t used;
};

struct rl_ftab {
	struct rl_fentry *slot;
	uint32_t mask, cap, count;
	uint32_t sweep_at;  /* next slot the per-batch sweep looks at */
};

static inline int rl_ftab_init(struct rl_ftab *t, uint32_t cap)
{
	uint64_t slots = 2;
	memset(t, 0, sizeof(*t));
	if (cap == 0 || cap > (1u << 24))
		return -1;
	while (slots < 2ull * cap)
		slots <<= 1;
	t->slot = calloc(slots, sizeof(*t->slot));
	if (t->slot == NULL)
		return -1;
	t->mask = (uint32_t)(slots - 1);
	t->cap = cap;
	return 0;
}

static inline void rl_ftab_free(struct rl_ftab *t)
{
	free(t->slot);
	t->slot = NULL;
	t->count = 0;
}

/* Forget every flow (a reload renumbers the classes). */
static inline void rl_ftab_clear(struct rl_ftab *t)
{
	if (t->slot != NULL)
		memset(t->slot, 0, ((size_t)t->mask + 1) * sizeof(*t->slot));
	t->count = 0;
	t->sweep_at = 0;
}

static inline void rl_fkey_make(struct rl_fkey *fk, const struct rl_pkt *k, uint16_t cls)
{
	memset(fk, 0, sizeof(*fk));
	memcpy(fk->src, k->src, 16);
	memcpy(fk->dst, k->dst, 16);
	fk->sport = k->sport;
	fk->dport = k->dport;
	fk->cls = cls;
	fk->family = k->family;
	fk->proto = k->proto;
}

static inline uint32_t rl_fkey_hash(const struct rl_fkey *k)
{
	uint64_t w[5], h = 0x243f6a8885a308d3ull;
	memcpy(w, k, sizeof(w));
	for (int i = 0; i < 5; i++)
		h = (h ^ w[i]) * 0x9e3779b97f4a7c15ull;
	return (uint32_t)(h ^ (h >> 29) ^ (h >> 47));
}

/* Remove slot i, moving later entries of its probe run back so that every entry stays reachable. */
static inline void rl_ftab_del(struct rl_ftab *t, uint32_t i)
{
	uint32_t j = i;
	for (;;) {
		j = (j + 1) & t->mask;
		struct rl_fentry *e = &t->slot[j];
		if (!e->used)
			break;
		uint32_t home = e->hash & t->mask;
		/* e may fill the hole at i unless its home lies cyclically in (i, j] */
		int in_between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!in_between) {
			t->slot[i] = *e;
			i = j;
		}
	}
	t->slot[i].used = 0;
	t->count--;
}

/* Look at `n` slots from the sweep cursor and delete the expired entries among them (per_class_idle:
 * the idle limit by class index). Returns the number deleted. */
static inline uint32_t rl_ftab_sweep(struct rl_ftab *t, uint32_t n, uint64_t now, const uint64_t *idle)
{
	uint32_t deleted = 0;
	for (uint32_t k = 0; k < n && t->count > 0; k++) {
		uint32_t i = t->sweep_at & t->mask;
		struct rl_fentry *e = &t->slot[i];
		if (e->used && now > e->m.last && now - e->m.last > idle[e->key.cls]) {
			rl_ftab_del(t, i);
			deleted++;
			continue; /* slot i holds a moved entry now: look at it again */
		}
		t->sweep_at = i + 1;
	}
	return deleted;
}

/* The entry of flow `fk` (hash h), created if absent. *created is set when the meter is new (the
 * caller initialises it) or expired (ditto). NULL when the table is full. */
static inline struct rl_fentry *rl_ftab_get(struct rl_ftab *t, const struct rl_fkey *fk, uint32_t h,
					    uint64_t now, const uint64_t *idle, int *created)
{
	*created = 0;
	for (uint32_t i = h;; i++) {
		struct rl_fentry *e = &t->slot[i & t->mask];
		if (!e->used) {
			if (t->count >= t->cap)
				return NULL;
			e->key = *fk;
			e->hash = h;
			e->used = 1;
			t->count++;
			*created = 1;
			return e;
		}
		if (e->hash == h && memcmp(&e->key, fk, sizeof(*fk)) == 0) {
			if (now > e->m.last && now - e->m.last > idle[fk->cls])
				*created = 2; /* idle long enough to be full again: start afresh */
			return e;
		}
	}
}

#endif /* SLUICE_NFS_RATELIMIT_FLOW_H */
