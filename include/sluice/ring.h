/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Single-producer / single-consumer descriptor ring operations.
 *
 * Both sluiced and libsluice use these inline functions on a struct sl_ring
 * that lives in shared memory. Indices are free-running uint32_t; the slot is
 * index & mask. The producer publishes with a release store of `prod` and the
 * consumer reads it with an acquire load (and symmetrically for `cons`), so a
 * descriptor is always fully written before it becomes visible.
 *
 * Notification (netmap CSB style): a consumer about to sleep sets need_kick,
 * issues a full fence and re-checks the ring before sleeping; a producer that
 * published issues a full fence and kicks only when need_kick is set. One of
 * the two always sees the other, so no wakeup is lost, and a busy consumer
 * costs the producer no syscall.
 */
#ifndef SLUICE_RING_H
#define SLUICE_RING_H

#include <stdint.h>
#include <string.h>
#include "sluice/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Initialise a ring in place; `slots` must be a power of two. Returns 0 or -1. */
static inline int sl_ring_init(struct sl_ring *r, uint32_t slots)
{
	if (slots == 0 || (slots & (slots - 1)) != 0)
		return -1;
	memset(r, 0, sizeof(*r));
	r->size = slots;
	r->mask = slots - 1;
	r->magic = SL_ABI_MAGIC;
	return 0;
}

/* Descriptors waiting to be consumed (consumer's view). */
static inline uint32_t sl_ring_count(const struct sl_ring *r)
{
	uint32_t prod = __atomic_load_n(&r->prod, __ATOMIC_ACQUIRE);
	return prod - __atomic_load_n(&r->cons, __ATOMIC_RELAXED);
}

/* Free slots (producer's view). */
static inline uint32_t sl_ring_free(const struct sl_ring *r)
{
	uint32_t cons = __atomic_load_n(&r->cons, __ATOMIC_ACQUIRE);
	return r->size - (__atomic_load_n(&r->prod, __ATOMIC_RELAXED) - cons);
}

/* Producer: enqueue up to n descriptors; returns how many were enqueued. */
static inline uint32_t sl_ring_enqueue_burst(struct sl_ring *r, const struct sl_desc *d, uint32_t n)
{
	uint32_t prod = r->prod; /* only we write it */
	uint32_t cons = __atomic_load_n(&r->cons, __ATOMIC_ACQUIRE);
	uint32_t room = r->size - (prod - cons);
	if (n > room)
		n = room;
	for (uint32_t i = 0; i < n; i++)
		r->desc[(prod + i) & r->mask] = d[i];
	__atomic_store_n(&r->prod, prod + n, __ATOMIC_RELEASE);
	return n;
}

/* Consumer: dequeue up to n descriptors; returns how many were dequeued. */
static inline uint32_t sl_ring_dequeue_burst(struct sl_ring *r, struct sl_desc *d, uint32_t n)
{
	uint32_t cons = r->cons; /* only we write it */
	uint32_t prod = __atomic_load_n(&r->prod, __ATOMIC_ACQUIRE);
	uint32_t avail = prod - cons;
	if (avail == 0)
		return 0; /* no store: the producer reads this line, and a host polls thousands of empty rings */
	if (n > avail)
		n = avail;
	for (uint32_t i = 0; i < n; i++)
		d[i] = r->desc[(cons + i) & r->mask];
	__atomic_store_n(&r->cons, cons + n, __ATOMIC_RELEASE);
	return n;
}

/* Consumer, before sleeping: announce it and re-check. Returns 1 if the ring
 * is still empty (safe to sleep), 0 if descriptors arrived meanwhile (the
 * flag has been cleared again and the caller should keep consuming). */
static inline int sl_ring_prepare_sleep(struct sl_ring *r)
{
	__atomic_store_n(&r->need_kick, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (sl_ring_count(r) != 0) {
		__atomic_store_n(&r->need_kick, 0, __ATOMIC_RELAXED);
		return 0;
	}
	return 1;
}

/* Consumer, after waking: stop asking for kicks. */
static inline void sl_ring_awake(struct sl_ring *r)
{
	__atomic_store_n(&r->need_kick, 0, __ATOMIC_RELAXED);
}

/* Producer, after publishing: does the consumer want a kick? */
static inline int sl_ring_needs_kick(struct sl_ring *r)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return __atomic_load_n(&r->need_kick, __ATOMIC_RELAXED) != 0;
}

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_RING_H */
