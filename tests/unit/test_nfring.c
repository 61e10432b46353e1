/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The manager's private view of an NF's rings (src/manager/nfring.h): it works with the SDK's side
 * of the same ring (include/sluice/ring.h), never reads or writes outside the ring whatever the NF
 * writes into the shared header, and catches an NF index that moves backwards or past the ring.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nfring.h"
#include "sluice/ring.h"

#define GUARD 4096

/* A ring with a guard area after it, filled with a pattern: nothing may touch it. */
static struct sl_ring *ring_new(uint32_t slots, uint8_t **guard)
{
	uint8_t *p = aligned_alloc(SL_CACHE_LINE, sl_ring_bytes(slots) + GUARD);
	CHECK(p != NULL);
	struct sl_ring *r = (struct sl_ring *)p;
	CHECK_EQ(sl_ring_init(r, slots), 0);
	*guard = p + sl_ring_bytes(slots);
	memset(*guard, 0xa5, GUARD);
	return r;
}

static int guard_intact(const uint8_t *g)
{
	for (int i = 0; i < GUARD; i++)
		if (g[i] != 0xa5)
			return 0;
	return 1;
}

static struct sl_desc mk(uint32_t seq)
{
	struct sl_desc d = { .buf = seq, .off = ~seq, .len = (uint16_t)seq, .region = (uint8_t)seq };
	return d;
}

/* Both indices of both views at `start` (to cross 2^32). */
static void start_at(struct nf_ring *k, struct sl_ring *r, uint32_t start)
{
	k->own = k->peer = start;
	r->prod = r->cons = start;
}

/* sluiced -> NF: nf_ring_enqueue against the SDK's sl_ring_dequeue_burst, across the index wrap. */
static void test_rx_with_sdk(void)
{
	uint8_t *g;
	struct sl_ring *r = ring_new(8, &g);
	struct nf_ring k;
	nf_ring_init(&k, r, 8);
	start_at(&k, r, UINT32_MAX - 5);
	struct sl_desc in[12], out[12];
	for (uint32_t i = 0; i < 12; i++)
		in[i] = mk(i);
	uint32_t n;
	CHECK_EQ(nf_ring_enqueue(&k, in, 12, &n), NF_RING_OK);
	CHECK_EQ(n, 8); /* full */
	CHECK_EQ(nf_ring_rx_pending(&k), 8);
	CHECK_EQ(r->prod, k.own);
	CHECK_EQ(sl_ring_dequeue_burst(r, out, 3), 3);
	for (uint32_t i = 0; i < 3; i++)
		CHECK_EQ(out[i].buf, i);
	CHECK_EQ(nf_ring_enqueue(&k, in + 8, 4, &n), NF_RING_OK);
	CHECK_EQ(n, 3); /* the 3 slots the NF gave back */
	CHECK_EQ(nf_ring_rx_pending(&k), 8);
	CHECK_EQ(sl_ring_dequeue_burst(r, out, 12), 8);
	for (uint32_t i = 0; i < 8; i++)
		CHECK_EQ(out[i].buf, i + 3);
	CHECK_EQ(nf_ring_rx_sync(&k), NF_RING_OK);
	CHECK_EQ(nf_ring_rx_pending(&k), 0);
	CHECK(k.own < 10); /* wrapped */
	CHECK(guard_intact(g));
	free(r);
}

/* NF -> sluiced: the SDK's sl_ring_enqueue_burst against nf_ring_dequeue, across the wrap. */
static void test_tx_with_sdk(void)
{
	uint8_t *g;
	struct sl_ring *r = ring_new(8, &g);
	struct nf_ring k;
	nf_ring_init(&k, r, 8);
	start_at(&k, r, UINT32_MAX - 2);
	struct sl_desc in[12], out[32];
	for (uint32_t i = 0; i < 12; i++)
		in[i] = mk(100 + i);
	uint32_t n;
	CHECK_EQ(nf_ring_dequeue(&k, out, 32, &n), NF_RING_OK);
	CHECK_EQ(n, 0);
	CHECK_EQ(sl_ring_enqueue_burst(r, in, 12), 8);
	CHECK_EQ(nf_ring_dequeue(&k, out, 5, &n), NF_RING_OK);
	CHECK_EQ(n, 5);
	CHECK_EQ(nf_ring_tx_avail(&k), 3);
	CHECK_EQ(r->cons, k.own);
	CHECK_EQ(sl_ring_enqueue_burst(r, in + 8, 4), 4); /* the NF now sees 5 free slots */
	CHECK_EQ(nf_ring_dequeue(&k, out + 5, 32, &n), NF_RING_OK);
	CHECK_EQ(n, 7);
	for (uint32_t i = 0; i < 12; i++) {
		CHECK_EQ(out[i].buf, 100 + i);
		CHECK_EQ(out[i].off, ~(100 + i));
	}
	CHECK(guard_intact(g));
	free(r);
}

/* Issue 15: an NF wrote a mask of 0xffffffff into its ring and sluiced wrote and read outside it
 * (SIGSEGV). The manager uses its own size, mask and indices only. */
static void test_header_is_never_trusted(void)
{
	uint8_t *g1, *g2;
	struct sl_ring *rr = ring_new(8, &g1), *rt = ring_new(8, &g2);
	struct nf_ring rx, tx;
	nf_ring_init(&rx, rr, 8);
	nf_ring_init(&tx, rt, 8);
	struct sl_desc in[32], out[32];
	for (uint32_t i = 0; i < 32; i++)
		in[i] = mk(i);
	uint32_t n, total = 0;
	for (int round = 0; round < 200; round++) {
		/* the NF scribbles over everything in the headers it can write, sluiced's own indices too */
		rr->size = rt->size = 0xffffffffu;
		rr->mask = rt->mask = 0xffffffffu;
		rr->magic = rt->magic = 0;
		uint32_t own_rx = rx.own, own_tx = tx.own;
		rr->prod = own_rx + 1000000u;
		CHECK_EQ(nf_ring_enqueue(&rx, in, 32, &n), NF_RING_OK);
		CHECK_EQ(n, 8);
		CHECK_EQ(rx.own, own_rx + n);
		CHECK_EQ(rr->prod, rx.own); /* published again from the private copy */
		rr->cons = rx.own;          /* the NF took them all */
		for (uint32_t i = 0; i < n; i++) /* and returns as many (with the real mask) */
			rt->desc[(tx.peer + i) & 7] = in[(uint32_t)round % 8 + i];
		rt->prod = tx.peer + n;
		rt->cons = own_tx - 7; /* sluiced's own TX consumer index, rewound */
		CHECK_EQ(nf_ring_dequeue(&tx, out, 32, &n), NF_RING_OK);
		CHECK_EQ(n, 8);
		CHECK_EQ(out[0].buf, (uint32_t)round % 8);
		CHECK_EQ(tx.own, own_tx + n);
		CHECK_EQ(rt->cons, tx.own);
		total += n;
		CHECK(guard_intact(g1) && guard_intact(g2));
	}
	CHECK_EQ(total, 1600);
	free(rr);
	free(rt);
}

static void test_rx_violations(void)
{
	uint8_t *g;
	struct sl_ring *r = ring_new(8, &g);
	struct nf_ring k;
	nf_ring_init(&k, r, 8);
	start_at(&k, r, 0xfffffffcu);
	struct sl_desc in[8] = { 0 };
	uint32_t n;
	CHECK_EQ(nf_ring_enqueue(&k, in, 6, &n), NF_RING_OK); /* own = 2 (wrapped) */
	r->cons = k.peer + 6;                                /* took all: legal */
	CHECK_EQ(nf_ring_rx_sync(&k), NF_RING_OK);
	CHECK_EQ(k.peer, 2);
	r->cons = 1; /* backwards */
	CHECK_EQ(nf_ring_rx_sync(&k), NF_RING_RX_BACK);
	CHECK_EQ(k.peer, 2); /* nothing accepted */
	r->cons = 0xfffffff0u;
	CHECK_EQ(nf_ring_rx_sync(&k), NF_RING_RX_BACK);
	r->cons = 3; /* past what was produced */
	CHECK_EQ(nf_ring_rx_sync(&k), NF_RING_RX_PAST);
	r->cons = 2 + 100000;
	CHECK_EQ(nf_ring_enqueue(&k, in, 1, &n), NF_RING_RX_PAST);
	CHECK_EQ(n, 0);
	CHECK_EQ(k.own, 2); /* nothing published */
	r->cons = 2;
	CHECK_EQ(nf_ring_enqueue(&k, in, 1, &n), NF_RING_OK);
	CHECK_EQ(n, 1);
	CHECK(guard_intact(g));
	free(r);
}

static void test_tx_violations(void)
{
	uint8_t *g;
	struct sl_ring *r = ring_new(8, &g);
	struct nf_ring k;
	nf_ring_init(&k, r, 8);
	start_at(&k, r, 0xfffffffeu);
	struct sl_desc out[32];
	uint32_t n;
	r->prod = 0xfffffffeu + 8; /* a full ring: legal */
	CHECK_EQ(nf_ring_tx_sync(&k), NF_RING_OK);
	CHECK_EQ(nf_ring_tx_avail(&k), 8);
	CHECK_EQ(nf_ring_dequeue(&k, out, 3, &n), NF_RING_OK);
	CHECK_EQ(n, 3);
	r->prod = k.own + 8; /* refilled the 3 slots: legal */
	CHECK_EQ(nf_ring_tx_sync(&k), NF_RING_OK);
	r->prod = k.own + 9; /* one more than the ring holds */
	CHECK_EQ(nf_ring_tx_sync(&k), NF_RING_TX_PAST);
	CHECK_EQ(nf_ring_dequeue(&k, out, 32, &n), NF_RING_TX_PAST);
	CHECK_EQ(n, 0);
	r->prod = k.peer - 1; /* backwards, still ahead of sluiced's consumer */
	CHECK_EQ(nf_ring_tx_sync(&k), NF_RING_TX_BACK);
	r->prod = k.own - 5; /* backwards behind it */
	CHECK_EQ(nf_ring_tx_sync(&k), NF_RING_TX_BACK);
	CHECK_EQ(nf_ring_tx_avail(&k), 8); /* the last accepted value stands */
	r->prod = k.peer;
	CHECK_EQ(nf_ring_dequeue(&k, out, 32, &n), NF_RING_OK);
	CHECK_EQ(n, 8);
	CHECK(guard_intact(g));
	free(r);
}

static void test_names(void)
{
	for (int e = -2; e < NF_RING__COUNT + 3; e++) {
		CHECK(nf_ring_err_key(e) != NULL);
		CHECK(nf_ring_err_text(e) != NULL);
	}
	CHECK(strcmp(nf_ring_err_key(NF_RING_TX_PAST), "tx_prod_past") == 0);
}

/* A real NF thread on the SDK's side echoing everything back while the manager's side streams:
 * no violation, nothing lost or reordered. */
#define STREAM 2000000u

static struct sl_ring *srx, *stx;

static void *nf_echo(void *arg)
{
	(void)arg;
	struct sl_desc d[32];
	uint32_t moved = 0;
	while (moved < STREAM) {
		uint32_t n = sl_ring_dequeue_burst(srx, d, 32), done = 0;
		while (done < n) {
			done += sl_ring_enqueue_burst(stx, d + done, n - done);
			if (done < n)
				sched_yield();
		}
		moved += n;
		if (n == 0)
			sched_yield();
	}
	return NULL;
}

static void test_stream_with_sdk_thread(void)
{
	uint8_t *g1, *g2;
	srx = ring_new(64, &g1);
	stx = ring_new(64, &g2);
	struct nf_ring rx, tx;
	nf_ring_init(&rx, srx, 64);
	nf_ring_init(&tx, stx, 64);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, nf_echo, NULL), 0);
	uint32_t sent = 0, got = 0;
	struct sl_desc in[32], out[32];
	while (got < STREAM) {
		uint32_t want = STREAM - sent < 32 ? STREAM - sent : 32, n;
		for (uint32_t i = 0; i < want; i++)
			in[i] = mk(sent + i);
		CHECK_EQ(nf_ring_enqueue(&rx, in, want, &n), NF_RING_OK);
		sent += n;
		CHECK_EQ(nf_ring_dequeue(&tx, out, 32, &n), NF_RING_OK);
		for (uint32_t i = 0; i < n; i++) {
			CHECK_EQ(out[i].buf, got + i);
			CHECK_EQ(out[i].off, ~(got + i));
		}
		got += n;
		if (n == 0)
			sched_yield();
	}
	pthread_join(t, NULL);
	CHECK(guard_intact(g1) && guard_intact(g2));
	free(srx);
	free(stx);
}

int main(void)
{
	test_rx_with_sdk();
	test_tx_with_sdk();
	test_header_is_never_trusted();
	test_rx_violations();
	test_tx_violations();
	test_names();
	test_stream_with_sdk_thread();
	printf("test_nfring: ok\n");
	return 0;
}
