/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The load balancer's connection table: preallocated, no allocation after lb_ct_init(), DPDK-free,
 * unit-tested (tests/unit/test_lb.c).
 *
 * An entry joins the two directions of one balanced connection:
 *
 *   fwd = client:port -> VIP:port           (as the client's packets arrive)
 *   rev = backend:port -> client:port       (as the backend's replies arrive)
 *
 * and names the backend (its slot). Both views are hashed into their own bucket array with index
 * chains (index + 1, 0 ends a chain); one key hash serves both lookups. Free entries sit on a free
 * list. Expiry is lazy (a lookup that meets an expired entry removes it) plus lb_ct_sweep(), a few
 * entries per call. Timeouts follow IPVS: a TCP connection not yet answered, established, or
 * closing (FIN or RST seen), and UDP.
 */
#ifndef SLUICE_NFS_LB_CONN_H
#define SLUICE_NFS_LB_CONN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "maglev.h"

#define LB_NONE      UINT32_MAX
#define LB_SLOTS_MAX 2048 /* backends known at once: the config's plus removed ones still in use */

struct lb_key {
	uint8_t src[16], dst[16]; /* IPv4: the 4 address bytes first, the rest 0 */
	uint16_t sport, dport;    /* host order */
	uint8_t proto, family;
	uint8_t pad[2];           /* always 0: keys are compared and hashed as bytes */
};

_Static_assert(sizeof(struct lb_key) == 40, "lb_key is hashed as five 64-bit words");

/* entry flags */
#define LB_F_USED  0x01
#define LB_F_REPLY 0x02 /* the backend answered */
#define LB_F_FIN   0x04 /* TCP FIN either way */
#define LB_F_RST   0x08 /* TCP RST either way */

struct lb_conn {
	struct lb_key fwd, rev;
	uint64_t expires_ns;
	uint32_t next_fwd, next_rev; /* chain links (index + 1); the free list uses next_fwd */
	uint16_t slot;               /* the backend */
	uint8_t flags;
	uint8_t pad[5];
};

enum { LB_TO_TCP, LB_TO_TCP_SYN, LB_TO_TCP_FIN, LB_TO_UDP, LB_TO_N };

struct lb_ct {
	struct lb_conn *c;
	uint32_t *b_fwd, *b_rev; /* bucket heads */
	uint32_t cap, mask, free_head, count, sweep_pos;
	uint64_t seed;
	uint64_t expired;                 /* entries removed because they timed out */
	uint64_t timeout_ns[LB_TO_N];
	uint32_t live[LB_SLOTS_MAX];      /* entries per backend slot */
};

static inline uint64_t lb_key_hash(const struct lb_key *k, uint64_t seed)
{
	uint64_t w[5];
	memcpy(w, k, sizeof(w));
	uint64_t h = seed ^ 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 5; i++)
		h = lb_mix64(h ^ w[i]) + 0x632be59bd9b4e019ull;
	return h;
}

/* Capacity cap entries (1..2^24). Returns 0 or -1 (no memory). */
static inline int lb_ct_init(struct lb_ct *t, uint32_t cap, uint64_t seed)
{
	memset(t, 0, sizeof(*t));
	if (cap == 0 || cap > (1u << 24))
		return -1;
	uint32_t nb = 16;
	while (nb < 2 * cap)
		nb <<= 1;
	t->c = calloc(cap, sizeof(*t->c));
	t->b_fwd = calloc(nb, sizeof(uint32_t));
	t->b_rev = calloc(nb, sizeof(uint32_t));
	if (t->c == NULL || t->b_fwd == NULL || t->b_rev == NULL) {
		free(t->c);
		free(t->b_fwd);
		free(t->b_rev);
		memset(t, 0, sizeof(*t));
		return -1;
	}
	t->cap = cap;
	t->mask = nb - 1;
	t->seed = seed;
	for (uint32_t i = 0; i < cap; i++)
		t->c[i].next_fwd = i + 2 <= cap ? i + 2 : 0;
	t->free_head = 1;
	t->timeout_ns[LB_TO_TCP] = 900 * 1000000000ull;
	t->timeout_ns[LB_TO_TCP_SYN] = 60 * 1000000000ull;
	t->timeout_ns[LB_TO_TCP_FIN] = 120 * 1000000000ull;
	t->timeout_ns[LB_TO_UDP] = 300 * 1000000000ull;
	return 0;
}

static inline void lb_ct_free(struct lb_ct *t)
{
	free(t->c);
	free(t->b_fwd);
	free(t->b_rev);
	memset(t, 0, sizeof(*t));
}

static inline uint64_t lb_ct_timeout(const struct lb_ct *t, const struct lb_conn *e)
{
	if (e->fwd.proto != 6)
		return t->timeout_ns[LB_TO_UDP];
	if (e->flags & (LB_F_FIN | LB_F_RST))
		return t->timeout_ns[LB_TO_TCP_FIN];
	return t->timeout_ns[e->flags & LB_F_REPLY ? LB_TO_TCP : LB_TO_TCP_SYN];
}

static inline void lb_ct_unlink(uint32_t *heads, struct lb_conn *cs, uint32_t bucket, uint32_t idx, int rev)
{
	uint32_t *pp = &heads[bucket];
	while (*pp != 0) {
		if (*pp - 1 == idx) {
			*pp = rev ? cs[idx].next_rev : cs[idx].next_fwd;
			return;
		}
		pp = rev ? &cs[*pp - 1].next_rev : &cs[*pp - 1].next_fwd;
	}
}

static inline void lb_ct_remove(struct lb_ct *t, uint32_t idx)
{
	struct lb_conn *e = &t->c[idx];
	if (!(e->flags & LB_F_USED))
		return;
	lb_ct_unlink(t->b_fwd, t->c, (uint32_t)lb_key_hash(&e->fwd, t->seed) & t->mask, idx, 0);
	lb_ct_unlink(t->b_rev, t->c, (uint32_t)lb_key_hash(&e->rev, t->seed) & t->mask, idx, 1);
	t->live[e->slot]--;
	memset(e, 0, sizeof(*e));
	e->next_fwd = t->free_head;
	t->free_head = idx + 1;
	t->count--;
}

/* Look key k (hash h = lb_key_hash(k)) up in the forward (rev = 0) or reverse view. An expired entry
 * met on the way is removed (counted in t->expired) and not returned. Returns the index or LB_NONE. */
static inline uint32_t lb_ct_find(struct lb_ct *t, const struct lb_key *k, uint64_t h, int rev, uint64_t now)
{
	uint32_t i = rev ? t->b_rev[h & t->mask] : t->b_fwd[h & t->mask];
	while (i != 0) {
		struct lb_conn *e = &t->c[i - 1];
		if (memcmp(rev ? &e->rev : &e->fwd, k, sizeof(*k)) == 0) {
			if (e->expires_ns <= now) {
				lb_ct_remove(t, i - 1);
				t->expired++;
				return LB_NONE;
			}
			return i - 1;
		}
		i = rev ? e->next_rev : e->next_fwd;
	}
	return LB_NONE;
}

/* Enter a connection to backend `slot`. The caller checked that neither view is in use. Returns the
 * index, or LB_NONE when the table is full. */
static inline uint32_t lb_ct_insert(struct lb_ct *t, const struct lb_key *fwd, const struct lb_key *rev,
				    uint16_t slot, uint64_t now)
{
	if (t->free_head == 0 || slot >= LB_SLOTS_MAX)
		return LB_NONE;
	uint32_t idx = t->free_head - 1;
	struct lb_conn *e = &t->c[idx];
	t->free_head = e->next_fwd;
	memset(e, 0, sizeof(*e));
	e->fwd = *fwd;
	e->rev = *rev;
	e->slot = slot;
	e->flags = LB_F_USED;
	uint32_t hf = (uint32_t)lb_key_hash(fwd, t->seed) & t->mask;
	uint32_t hr = (uint32_t)lb_key_hash(rev, t->seed) & t->mask;
	e->next_fwd = t->b_fwd[hf];
	t->b_fwd[hf] = idx + 1;
	e->next_rev = t->b_rev[hr];
	t->b_rev[hr] = idx + 1;
	e->expires_ns = now + lb_ct_timeout(t, e);
	t->live[slot]++;
	t->count++;
	return idx;
}

/* A packet of entry idx passed (from the backend if reply); tcp_flags: the TCP flags byte (0 for
 * UDP). Updates the state and the expiry. */
static inline void lb_ct_touch(struct lb_ct *t, uint32_t idx, int reply, uint8_t tcp_flags, uint64_t now)
{
	struct lb_conn *e = &t->c[idx];
	if (reply)
		e->flags |= LB_F_REPLY;
	if (tcp_flags & 0x01)
		e->flags |= LB_F_FIN;
	if (tcp_flags & 0x04)
		e->flags |= LB_F_RST;
	e->expires_ns = now + lb_ct_timeout(t, e);
}

/* Check up to n entries for expiry (round robin). Returns how many were removed (also added to
 * t->expired). */
static inline uint32_t lb_ct_sweep(struct lb_ct *t, uint32_t n, uint64_t now)
{
	uint32_t removed = 0;
	for (uint32_t k = 0; k < n && k < t->cap; k++) {
		uint32_t i = t->sweep_pos++;
		if (t->sweep_pos >= t->cap)
			t->sweep_pos = 0;
		if ((t->c[i].flags & LB_F_USED) && t->c[i].expires_ns <= now) {
			lb_ct_remove(t, i);
			removed++;
		}
	}
	t->expired += removed;
	return removed;
}

#endif /* SLUICE_NFS_LB_CONN_H */
