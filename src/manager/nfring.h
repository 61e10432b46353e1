/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The manager's private half of an NF's ring (docs/abi.md "Rings").
 *
 * A struct sl_ring lives in memory the NF can write, so sluiced keeps its own
 * copy of everything it relies on -- size, mask and its own index -- beside the
 * shared ring, as netmap's kernel keeps a private kring beside each shared
 * netmap_ring. sluiced writes its own index to the shared ring for the NF to
 * see and never reads it back; it never reads the shared size or mask. The one
 * index the NF owns is input: read once per burst and accepted only between the
 * value last accepted and the furthest the NF can legally be (RX consumer: no
 * further than what sluiced produced; TX producer: at most one ring ahead of
 * what sluiced consumed). Anything else is a protocol violation; the caller
 * disconnects the NF. Descriptors are copied out of the ring exactly once, so
 * what is validated is what is used.
 *
 * DPDK-free, unit-tested (tests/unit/test_nfring.c).
 */
#ifndef SLUICED_NFRING_H
#define SLUICED_NFRING_H

#include <stdint.h>
#include "sluice/abi.h"

/* What an NF did to its index (0: nothing wrong). */
enum nf_ring_err {
	NF_RING_OK = 0,
	NF_RING_RX_BACK, /* RX ring: the NF's consumer index moved backwards */
	NF_RING_RX_PAST, /* RX ring: it passed what sluiced produced */
	NF_RING_TX_BACK, /* TX ring: the NF's producer index moved backwards */
	NF_RING_TX_PAST, /* TX ring: it claims more descriptors than the ring holds */
	NF_RING_PIPE_CONS, /* pipe: its consumer index in its upstream's pipe ring left [accounted, produced] */
	NF_RING_PIPE_ACK,  /* pipe: it did not acknowledge the end of its pipe input in time */
	NF_RING__COUNT
};

struct nf_ring {
	struct sl_ring *sh; /* the shared ring (NF-writable) */
	uint32_t size;      /* slots, power of two: private copies */
	uint32_t mask;
	uint32_t own;       /* sluiced's index: RX producer or TX consumer */
	uint32_t peer;      /* the NF's index as last read and accepted: RX consumer or TX producer */
};

/* Start using a ring sl_ring_init() set up (both indices 0). */
static inline void nf_ring_init(struct nf_ring *k, struct sl_ring *sh, uint32_t size)
{
	k->sh = sh;
	k->size = size;
	k->mask = size - 1;
	k->own = 0;
	k->peer = 0;
}

/* RX (sluiced produces): read the NF's consumer index; legal: peer <= cons <= own. */
static inline enum nf_ring_err nf_ring_rx_sync(struct nf_ring *k)
{
	uint32_t c = __atomic_load_n(&k->sh->cons, __ATOMIC_ACQUIRE);
	uint32_t moved = c - k->peer;
	if (__builtin_expect(moved > k->own - k->peer, 0))
		return (int32_t)moved < 0 ? NF_RING_RX_BACK : NF_RING_RX_PAST;
	k->peer = c;
	return NF_RING_OK;
}

/* RX: descriptors the NF had not taken when last synced. */
static inline uint32_t nf_ring_rx_pending(const struct nf_ring *k)
{
	return k->own - k->peer;
}

/* RX: sync, then publish up to n descriptors; *done = how many. */
static inline enum nf_ring_err nf_ring_enqueue(struct nf_ring *k, const struct sl_desc *d, uint32_t n,
					       uint32_t *done)
{
	enum nf_ring_err e = nf_ring_rx_sync(k);
	*done = 0;
	if (e != NF_RING_OK)
		return e;
	uint32_t room = k->size - (k->own - k->peer);
	if (n > room)
		n = room;
	for (uint32_t i = 0; i < n; i++)
		k->sh->desc[(k->own + i) & k->mask] = d[i];
	k->own += n;
	__atomic_store_n(&k->sh->prod, k->own, __ATOMIC_RELEASE);
	*done = n;
	return NF_RING_OK;
}

/* TX (the NF produces): read its producer index; legal: peer <= prod <= own + size. */
static inline enum nf_ring_err nf_ring_tx_sync(struct nf_ring *k)
{
	uint32_t p = __atomic_load_n(&k->sh->prod, __ATOMIC_ACQUIRE);
	uint32_t moved = p - k->peer;
	if (__builtin_expect(moved > k->own + k->size - k->peer, 0))
		return (int32_t)moved < 0 ? NF_RING_TX_BACK : NF_RING_TX_PAST;
	k->peer = p;
	return NF_RING_OK;
}

/* TX: descriptors published and not yet taken, as of the last sync. */
static inline uint32_t nf_ring_tx_avail(const struct nf_ring *k)
{
	return k->peer - k->own;
}

/* One descriptor out of NF-writable memory, each byte read exactly once (two 8-byte loads the
 * compiler may neither repeat nor split), so a descriptor cannot change between check and use. */
typedef uint64_t __attribute__((may_alias)) nf_ring_word;
_Static_assert(sizeof(struct sl_desc) == 2 * sizeof(nf_ring_word), "a descriptor is two words");

static inline void nf_ring_read_desc(struct sl_desc *dst, const struct sl_desc *src)
{
	const nf_ring_word *s = (const nf_ring_word *)src;
	nf_ring_word *o = (nf_ring_word *)dst;
	o[0] = __atomic_load_n(&s[0], __ATOMIC_RELAXED);
	o[1] = __atomic_load_n(&s[1], __ATOMIC_RELAXED);
}

/* TX: copy out up to n of the descriptors the last sync saw into private memory and give their
 * slots back; returns how many. */
static inline uint32_t nf_ring_take(struct nf_ring *k, struct sl_desc *d, uint32_t n)
{
	uint32_t avail = k->peer - k->own;
	if (n > avail)
		n = avail;
	for (uint32_t i = 0; i < n; i++)
		nf_ring_read_desc(&d[i], &k->sh->desc[(k->own + i) & k->mask]);
	k->own += n;
	__atomic_store_n(&k->sh->cons, k->own, __ATOMIC_RELEASE);
	return n;
}

/* TX: sync, then take up to n descriptors; *done = how many. */
static inline enum nf_ring_err nf_ring_dequeue(struct nf_ring *k, struct sl_desc *d, uint32_t n, uint32_t *done)
{
	enum nf_ring_err e = nf_ring_tx_sync(k);
	*done = 0;
	if (e != NF_RING_OK)
		return e;
	*done = nf_ring_take(k, d, n);
	return NF_RING_OK;
}

/* Stats key of an error ("rx_cons_back", ...); "ok" for NF_RING_OK, never NULL. */
static inline const char *nf_ring_err_key(int e)
{
	static const char *const k[NF_RING__COUNT] = { "ok", "rx_cons_back", "rx_cons_past", "tx_prod_back",
						       "tx_prod_past", "pipe_cons", "pipe_ack" };
	return e >= 0 && e < NF_RING__COUNT ? k[e] : "unknown";
}

/* Sentence for the NF's DISCONNECT reason and the log; never NULL. */
static inline const char *nf_ring_err_text(int e)
{
	static const char *const t[NF_RING__COUNT] = {
		"ok",
		"RX ring: consumer index moved backwards",
		"RX ring: consumer index passed what sluiced produced",
		"TX ring: producer index moved backwards",
		"TX ring: producer index more than a ring ahead",
		"pipe: consumer index outside what its upstream produced",
		"pipe: end of pipe input not acknowledged in time",
	};
	return e >= 0 && e < NF_RING__COUNT ? t[e] : "ring index out of range";
}

#endif
