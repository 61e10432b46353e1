/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for the SPSC descriptor ring (include/sluice/ring.h).
 */
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "sluice/ring.h"

static struct sl_ring *ring_new(uint32_t slots)
{
	struct sl_ring *r = aligned_alloc(SL_CACHE_LINE, sl_ring_bytes(slots));
	CHECK(r != NULL);
	CHECK_EQ(sl_ring_init(r, slots), 0);
	return r;
}

static struct sl_desc mk(uint32_t seq)
{
	struct sl_desc d = { .buf = seq, .off = ~seq, .len = (uint16_t)seq, .region = (uint8_t)seq };
	return d;
}

static void test_init(void)
{
	struct sl_ring *r = aligned_alloc(SL_CACHE_LINE, sl_ring_bytes(64));
	CHECK(r != NULL);
	CHECK_EQ(sl_ring_init(r, 0), -1);
	CHECK_EQ(sl_ring_init(r, 3), -1);
	CHECK_EQ(sl_ring_init(r, 48), -1);
	CHECK_EQ(sl_ring_init(r, 64), 0);
	CHECK_EQ(r->size, 64);
	CHECK_EQ(r->mask, 63);
	CHECK_EQ(r->magic, SL_ABI_MAGIC);
	CHECK_EQ(r->prod, 0);
	CHECK_EQ(r->cons, 0);
	CHECK_EQ(r->need_kick, 0);
	CHECK_EQ(sl_ring_init(r, 1), 0); /* 1 is a power of two */
	free(r);
	CHECK_EQ(sizeof(struct sl_ring) % SL_CACHE_LINE, 0);
	CHECK_EQ(offsetof(struct sl_ring, desc), sizeof(struct sl_ring));
	CHECK(offsetof(struct sl_ring, cons) - offsetof(struct sl_ring, prod) >= SL_CACHE_LINE);
	CHECK_EQ(sl_ring_bytes(0), sizeof(struct sl_ring));
	CHECK_EQ(sl_ring_bytes(64), sizeof(struct sl_ring) + 64 * 16);
}

static void test_empty_full_partial(void)
{
	struct sl_ring *r = ring_new(8);
	struct sl_desc in[16], out[16];
	for (uint32_t i = 0; i < 16; i++)
		in[i] = mk(i);

	CHECK_EQ(sl_ring_count(r), 0);
	CHECK_EQ(sl_ring_free(r), 8);
	CHECK_EQ(sl_ring_dequeue_burst(r, out, 4), 0);

	CHECK_EQ(sl_ring_enqueue_burst(r, in, 5), 5);
	CHECK_EQ(sl_ring_count(r), 5);
	CHECK_EQ(sl_ring_free(r), 3);
	CHECK_EQ(sl_ring_enqueue_burst(r, in + 5, 5), 3); /* partial: only 3 fit */
	CHECK_EQ(sl_ring_free(r), 0);
	CHECK_EQ(sl_ring_enqueue_burst(r, in + 8, 1), 0); /* full */
	CHECK_EQ(sl_ring_enqueue_burst(r, in, 0), 0);

	CHECK_EQ(sl_ring_dequeue_burst(r, out, 3), 3);
	CHECK_EQ(sl_ring_dequeue_burst(r, out + 3, 16), 5); /* partial: only 5 left */
	for (uint32_t i = 0; i < 8; i++)
		CHECK_EQ(out[i].buf, i);
	CHECK_EQ(out[7].off, ~7u);
	CHECK_EQ(sl_ring_count(r), 0);
	CHECK_EQ(sl_ring_free(r), 8);
	free(r);
}

/* Indices are free running: start just below UINT32_MAX and cross the wrap. */
static void test_index_wrap(void)
{
	struct sl_ring *r = ring_new(16);
	struct sl_desc in[16], out[16];
	uint32_t seq_in = 0, seq_out = 0;

	r->prod = r->cons = UINT32_MAX - 20;
	CHECK_EQ(sl_ring_count(r), 0);
	CHECK_EQ(sl_ring_free(r), 16);
	for (int round = 0; round < 10; round++) {
		uint32_t n = 3 + (uint32_t)round % 11;
		for (uint32_t i = 0; i < n; i++)
			in[i] = mk(seq_in + i);
		CHECK_EQ(sl_ring_enqueue_burst(r, in, n), n);
		seq_in += n;
		CHECK_EQ(sl_ring_count(r), n);
		CHECK_EQ(sl_ring_free(r), 16 - n);
		CHECK_EQ(sl_ring_dequeue_burst(r, out, 16), n);
		for (uint32_t i = 0; i < n; i++)
			CHECK_EQ(out[i].buf, seq_out + i);
		seq_out += n;
	}
	CHECK(r->prod < 100); /* really wrapped */
	CHECK_EQ(r->prod, r->cons);

	/* full ring straddling the wrap */
	r->prod = r->cons = UINT32_MAX - 3;
	for (uint32_t i = 0; i < 16; i++)
		in[i] = mk(100 + i);
	CHECK_EQ(sl_ring_enqueue_burst(r, in, 16), 16);
	CHECK_EQ(sl_ring_count(r), 16);
	CHECK_EQ(sl_ring_free(r), 0);
	CHECK_EQ(sl_ring_enqueue_burst(r, in, 1), 0);
	CHECK_EQ(sl_ring_dequeue_burst(r, out, 16), 16);
	for (uint32_t i = 0; i < 16; i++)
		CHECK_EQ(out[i].buf, 100 + i);
	free(r);
}

/* need_kick protocol, single-threaded semantics. */
static void test_need_kick(void)
{
	struct sl_ring *r = ring_new(8);
	struct sl_desc d = mk(1), out;

	CHECK_EQ(sl_ring_needs_kick(r), 0); /* consumer awake: no kick */
	CHECK_EQ(sl_ring_prepare_sleep(r), 1); /* empty: safe to sleep */
	CHECK_EQ(r->need_kick, 1);
	CHECK_EQ(sl_ring_enqueue_burst(r, &d, 1), 1);
	CHECK_EQ(sl_ring_needs_kick(r), 1); /* producer sees the sleeper */
	sl_ring_awake(r);
	CHECK_EQ(r->need_kick, 0);
	CHECK_EQ(sl_ring_needs_kick(r), 0);

	/* a descriptor is already there: the re-check refuses to sleep */
	CHECK_EQ(sl_ring_prepare_sleep(r), 0);
	CHECK_EQ(r->need_kick, 0);
	CHECK_EQ(sl_ring_dequeue_burst(r, &out, 1), 1);
	CHECK_EQ(out.buf, 1);
	CHECK_EQ(sl_ring_prepare_sleep(r), 1);
	sl_ring_awake(r);
	free(r);
}

/* Two threads: a producer pushes sequence-numbered descriptors in bursts of
 * varying size through a 64-slot ring; the consumer checks order and count. */
#define STRESS_N 5000000u

/* Spin briefly, then yield: the test must not crawl when the two threads
 * share a CPU (CI machines, parallel tests). */
static void relax(uint32_t *idle)
{
	if (++*idle % 64 == 0)
		sched_yield();
	else
		__builtin_ia32_pause();
}

static void *producer(void *arg)
{
	struct sl_ring *r = arg;
	struct sl_desc b[32];
	uint32_t seq = 0, k = 0, idle = 0;
	while (seq < STRESS_N) {
		uint32_t n = 1 + (k++ % 32);
		if (n > STRESS_N - seq)
			n = STRESS_N - seq;
		for (uint32_t i = 0; i < n; i++)
			b[i] = mk(seq + i);
		uint32_t done = 0;
		while (done < n) {
			uint32_t m = sl_ring_enqueue_burst(r, b + done, n - done);
			if (m == 0)
				relax(&idle);
			done += m;
		}
		seq += n;
	}
	return NULL;
}

static void test_stress(void)
{
	struct sl_ring *r = ring_new(64);
	pthread_t th;
	struct sl_desc b[48];
	uint32_t expect = 0, k = 0, idle = 0;

	r->prod = r->cons = UINT32_MAX - 1000; /* cross the index wrap too */
	CHECK_EQ(pthread_create(&th, NULL, producer, r), 0);
	while (expect < STRESS_N) {
		uint32_t n = sl_ring_dequeue_burst(r, b, 1 + (k++ % 48));
		if (n == 0) {
			relax(&idle);
			continue;
		}
		for (uint32_t i = 0; i < n; i++) {
			if (b[i].buf != expect || b[i].off != ~expect || b[i].len != (uint16_t)expect) {
				fprintf(stderr, "stress: got %u expected %u\n", b[i].buf, expect);
				CHECK(0);
			}
			expect++;
		}
	}
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(sl_ring_count(r), 0);
	free(r);
}

int main(void)
{
	test_init();
	test_empty_full_partial();
	test_index_wrap();
	test_need_kick();
	test_stress();
	printf("test_ring: ok\n");
	return 0;
}
