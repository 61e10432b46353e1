/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-stackd's side of a socket's rings (src/stack/sk.c, include/sluice/sock.h): datagram
 * records across the wrap, and indices or records a hostile program forged.
 */
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "stackd.h"

#define RB 4096u

static struct app *mkapp(void)
{
	static struct app a;
	memset(&a, 0, sizeof(a));
	a.nslots = 2;
	a.ring_bytes = RB;
	a.size = sizeof(struct sl_sk_region) + 2ull * (4096 + 2 * RB);
	a.base = mmap(NULL, a.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(a.base != MAP_FAILED);
	struct sl_sk_region *r = a.base;
	r->slot_bytes = 4096 + 2 * RB;
	r->ring_bytes = RB;
	static struct sk *socks[2];
	a.socks = socks;
	a.memfd = -1;
	a.refs = 100; /* the test owns it */
	a.stack = SL_SK_STACK_SHM;
	return &a;
}

/* what the shim does to put a datagram in its send ring */
static void app_put_dgram(struct sk *s, uint32_t len, uint8_t fill)
{
	uint64_t tail = s->sh->tx.tail;
	uint32_t rec = SL_SK_DGRAM_HDR + ((len + 7) & ~7u);
	uint32_t off = (uint32_t)(tail & (RB - 1)), rest = RB - off;
	if (rec > rest) {
		if (rest >= SL_SK_DGRAM_HDR) {
			struct sl_sk_dgram skip = { .len = SL_SK_DGRAM_SKIP };
			memcpy(s->txd + off, &skip, sizeof(skip));
		}
		tail += rest;
		off = 0;
	}
	struct sl_sk_dgram h = { .len = len, .addr_len = 0 };
	memcpy(s->txd + off, &h, sizeof(h));
	memset(s->txd + off + SL_SK_DGRAM_HDR, fill, len);
	s->sh->tx.tail = tail + rec;
}

int main(void)
{
	struct app *a = mkapp();
	struct sk *s = sk_new(a, AF_INET, SOCK_DGRAM);
	CHECK(s);
	CHECK_EQ(s->sh->gen, 1);
	CHECK(sk_ring_sane(s));

	/* records of every length around the wrap come out whole, in order */
	struct sl_sk_dgram h;
	const uint8_t *data;
	for (uint32_t i = 0; i < 300; i++) {
		uint32_t len = (i * 37) % 1500;
		app_put_dgram(s, len, (uint8_t)i);
		CHECK_EQ(sk_dgram_next(s, &h, &data), 1);
		CHECK_EQ(h.len, len);
		for (uint32_t k = 0; k < len; k++)
			CHECK_EQ(data[k], (uint8_t)i);
		sk_dgram_done(s, &h);
		CHECK_EQ(sk_dgram_next(s, &h, &data), 0);
	}

	/* the receive ring: reserve + commit wraps the same way; a full ring says so */
	uint64_t head = 0;
	for (uint32_t i = 0; i < 300; i++) {
		uint32_t len = (i * 53) % 1400 + 1;
		uint8_t *dst = sk_dgram_reserve(s, len);
		CHECK(dst);
		memset(dst, 0xa5, len);
		sk_dgram_commit(s, len, NULL, 0, NULL);
		/* consume as the shim does */
		uint32_t off = (uint32_t)(head & (RB - 1));
		if (RB - off < SL_SK_DGRAM_HDR) {
			head += RB - off;
			off = 0;
		}
		struct sl_sk_dgram rh;
		memcpy(&rh, s->rxd + off, sizeof(rh));
		if (rh.len == SL_SK_DGRAM_SKIP) {
			head += RB - off;
			off = 0;
			memcpy(&rh, s->rxd, sizeof(rh));
		}
		CHECK_EQ(rh.len, len);
		CHECK_EQ(s->rxd[off + SL_SK_DGRAM_HDR + len - 1], 0xa5);
		head += SL_SK_DGRAM_HDR + ((len + 7) & ~7u);
		CHECK_EQ(head, s->rx_tail);
		s->sh->rx.head = head;
	}
	CHECK(sk_dgram_reserve(s, RB) == NULL); /* larger than half a ring: never fits */
	uint32_t n = 0;
	while (sk_dgram_reserve(s, 1000)) {
		sk_dgram_commit(s, 1000, NULL, 0, NULL);
		n++;
	}
	CHECK(n >= 2 && n <= 4);
	CHECK(sk_readable(s));

	/* forged indices: the engine sees nothing to take, and sanity fails */
	struct sk *t = sk_new(a, AF_INET, SOCK_STREAM);
	CHECK(t && t->slot == 1);
	t->sh->tx.tail = RB + 1;
	CHECK(!sk_ring_sane(t));
	CHECK_EQ(sk_tx_used(t), 0);
	t->sh->tx.tail = 0;
	t->sh->rx.head = 5; /* consumed more than was ever put */
	CHECK(!sk_ring_sane(t));
	CHECK_EQ(sk_rx_free(t), 0);
	t->sh->rx.head = 0;
	CHECK(sk_ring_sane(t));

	/* forged records: too long, an address too long, past what was put, misaligned */
	struct sk *u = s;
	u->sh->tx.head = u->tx_head = u->sh->tx.tail = 0;
	struct sl_sk_dgram bad = { .len = 70000 };
	memcpy(u->txd, &bad, sizeof(bad));
	u->sh->tx.tail = 64;
	CHECK_EQ(sk_dgram_next(u, &h, &data), -1);
	bad = (struct sl_sk_dgram){ .len = 8, .addr_len = 29 };
	memcpy(u->txd, &bad, sizeof(bad));
	CHECK_EQ(sk_dgram_next(u, &h, &data), -1);
	bad = (struct sl_sk_dgram){ .len = 100 };
	memcpy(u->txd, &bad, sizeof(bad));
	CHECK_EQ(sk_dgram_next(u, &h, &data), -1); /* record longer than the 64 bytes put */
	u->tx_head = 4;
	u->sh->tx.tail = 4 + 64;
	CHECK_EQ(sk_dgram_next(u, &h, &data), -1);
	printf("sk_rings: ok\n");
	return 0;
}
