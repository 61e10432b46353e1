/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for the capture ring's producer (src/manager/capring.c) against a reader written here
 * from include/sluice/capture.h alone: records come out whole and in order across wraps, a full ring
 * loses (and counts) instead of overwriting, and a reader's forged tail cannot make the producer
 * write over records not yet read.
 */
#include <stdlib.h>
#include <string.h>

#include "capring.h"
#include "check.h"

#define RING 1024u

static struct sl_cap_ring_ctl ctl;
static uint8_t data[RING] __attribute__((aligned(8)));

/* Read every published record; check each carries seq (its first byte) in order. */
static uint32_t reader(uint8_t *seq)
{
	uint32_t n = 0;
	uint64_t head = __atomic_load_n(&ctl.head, __ATOMIC_ACQUIRE), tail = ctl.tail;
	while (tail < head) {
		uint32_t off = (uint32_t)(tail % RING);
		const struct sl_cap_rec *r = (const void *)(data + off);
		if (r->len == SL_CAP_WRAP) {
			tail += RING - off;
			continue;
		}
		CHECK(r->len % 8 == 0 && r->len >= sizeof(*r) + r->cap_len && off + r->len <= RING);
		const uint8_t *p = (const uint8_t *)(r + 1);
		CHECK_EQ(p[0], *seq);
		CHECK_EQ(p[r->cap_len - 1], *seq);
		CHECK_EQ(r->wire_len, r->cap_len + 7);
		CHECK_EQ(r->ts_ns, 1000u + *seq);
		(*seq)++;
		tail += r->len;
		n++;
	}
	ctl.tail = tail;
	return n;
}

static bool put(struct capring *r, uint8_t seq, uint32_t len)
{
	uint8_t pkt[512];
	memset(pkt, seq, len);
	return capring_put(r, pkt, len, len + 7, 1000u + seq, 0, 0);
}

static void test_order_across_wraps(void)
{
	struct capring r;
	memset(&ctl, 0, sizeof(ctl));
	capring_init(&r, &ctl, data, RING);
	uint8_t wseq = 0, rseq = 0; /* a record's mark: its number mod 256 */
	uint32_t got = 0, written = 0;
	for (int round = 0; round < 200; round++) {
		for (int k = 0; k < 3; k++) {
			uint32_t len = 1 + (uint32_t)(round * 37 + k * 101) % 200;
			if (put(&r, wseq, len)) {
				wseq++;
				written++;
			}
		}
		capring_publish(&r);
		got += reader(&rseq);
	}
	CHECK_EQ(got, written);
	CHECK(written > 500); /* the reader kept up: nearly all fit, through many wraps */
	CHECK_EQ(ctl.packets, written);
	CHECK(ctl.lost == r.lost);
}

static void test_full_ring_loses_and_counts(void)
{
	struct capring r;
	memset(&ctl, 0, sizeof(ctl));
	capring_init(&r, &ctl, data, RING);
	uint32_t ok = 0, lost = 0;
	for (uint8_t i = 0; i < 40; i++) /* 40 x (24 + 100 -> 128) bytes > 1024: the reader sleeps */
		put(&r, i, 100) ? ok++ : lost++;
	capring_publish(&r);
	CHECK_EQ(ok, RING / 128);
	CHECK_EQ(ctl.lost, lost);
	CHECK_EQ(ctl.lost_bytes, lost * 107u);
	uint8_t seq = 0;
	CHECK_EQ(reader(&seq), ok); /* the first ones, whole: none overwritten */
	CHECK(put(&r, seq, 100));   /* room again once read */
	/* a record larger than the ring never fits */
	uint8_t big[RING];
	CHECK(!capring_put(&r, big, RING, RING, 0, 0, 0));
}

static void test_forged_tails_read_as_full(void)
{
	struct capring r;
	memset(&ctl, 0, sizeof(ctl));
	capring_init(&r, &ctl, data, RING);
	CHECK(put(&r, 0, 100));
	capring_publish(&r);
	uint64_t lost = r.lost;
	ctl.tail = ctl.head + 4096; /* ahead of head */
	CHECK(!put(&r, 1, 8));
	ctl.tail = ctl.head - RING - 8; /* behind by more than the ring */
	CHECK(!put(&r, 1, 8));
	CHECK_EQ(r.lost, lost + 2);
	/* the record before is intact */
	ctl.tail = 0;
	uint8_t seq = 0;
	CHECK_EQ(reader(&seq), 1);
}

int main(void)
{
	test_order_across_wraps();
	test_full_ring_loses_and_counts();
	test_forged_tails_read_as_full();
	return 0;
}
