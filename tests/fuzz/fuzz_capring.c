/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libFuzzer target: the capture ring's producer (src/manager/capring.c) against its reader, which
 * `sluice capture` is and which can write anything into the ring file -- its tail above all.
 *
 * The ring's data is a heap array of exactly its size (ASan: no write outside it). Input: the ring size
 * and snaplen, then operations: put a packet (bytes from the input, any length up to the snaplen),
 * publish, a well-behaved reader drains (checking every record against a model of what was put: the
 * same packets in order, each record's length and padding right, SL_CAP_WRAP only where a record
 * would not fit), or the reader writes a forged tail. After a forged tail the model no longer holds
 * (the reader lost its place); only memory safety and the counters (every put is a packet or a loss)
 * are checked from then on.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capring.h"
#include "fuzz.h"

#define MAXQ 4096
struct model {
	uint32_t len[MAXQ], wire[MAXQ], first[MAXQ]; /* cap_len, wire_len, its first byte */
	unsigned head, tail;
};

static uint32_t rec_bytes(uint32_t cap_len)
{
	return (uint32_t)((sizeof(struct sl_cap_rec) + cap_len + SL_CAP_REC_ALIGN - 1) & ~(SL_CAP_REC_ALIGN - 1));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	uint32_t snaplen = 1 + u16(&in) % 1600;
	uint32_t min = rec_bytes(snaplen);
	uint32_t rsize = (min + (uint32_t)u16(&in) % 8192 + 7) & ~7u;
	uint8_t *ring = malloc(rsize);
	struct sl_cap_ring_ctl *ctl = calloc(1, sizeof(*ctl));
	static struct model M;
	M.head = M.tail = 0;
	struct capring r;
	capring_init(&r, ctl, ring, rsize);
	uint8_t pkt[1600];
	int forged = 0;
	uint64_t puts = 0, tail = 0;

	while (in.n > 0) {
		uint8_t op = u8(&in);
		switch (op % 4) {
		case 0:
		case 1: { /* a packet */
			uint32_t cap = u16(&in) % (snaplen + 1);
			uint32_t wire = cap + (op & 4 ? u16(&in) : 0);
			uint8_t fill = u8(&in);
			memset(pkt, fill, cap);
			for (uint32_t i = 0; i < cap && in.n > 0 && i < 8; i++)
				pkt[i] = u8(&in);
			uint64_t head0 = r.head, used = head0 - ctl->tail;
			uint32_t need = rec_bytes(cap), off = (uint32_t)(head0 % rsize);
			uint64_t pad = off + need > rsize ? rsize - off : 0;
			bool ok = capring_put(&r, pkt, cap, wire, 12345, op >> 4, op >> 2);
			puts++;
			if (!forged) { /* a loss exactly when the record does not fit in what the reader freed */
				REQUIRE(used <= rsize);
				REQUIRE(ok == (used + pad + need <= rsize));
			}
			if (ok)
				REQUIRE(r.head == head0 + pad + need);
			else
				REQUIRE(r.head == head0);
			if (ok && !forged) {
				REQUIRE(M.head - M.tail < MAXQ);
				unsigned k = M.head++ % MAXQ;
				M.len[k] = cap;
				M.wire[k] = wire;
				M.first[k] = cap ? pkt[0] : 0;
			}
			break;
		}
		case 2: /* publish, then the reader drains what it sees */
			capring_publish(&r);
			REQUIRE(ctl->head == r.head && ctl->packets + ctl->lost == puts);
			if (forged)
				break;
			while (tail < ctl->head) {
				uint32_t off = (uint32_t)(tail % rsize);
				REQUIRE(rsize - off >= 4);
				struct sl_cap_rec h;
				memcpy(&h.len, ring + off, 4);
				if (h.len == SL_CAP_WRAP) {
					tail += rsize - off;
					continue;
				}
				REQUIRE(rsize - off >= sizeof(h));
				memcpy(&h, ring + off, sizeof(h));
				REQUIRE(M.tail < M.head);
				unsigned k = M.tail++ % MAXQ;
				REQUIRE(h.cap_len == M.len[k] && h.wire_len == M.wire[k]);
				REQUIRE(h.len == rec_bytes(h.cap_len) && h.len <= rsize - off);
				if (h.cap_len)
					REQUIRE(ring[off + sizeof(h)] == M.first[k]);
				tail += h.len;
			}
			REQUIRE(tail == ctl->head && M.tail == M.head);
			ctl->tail = tail;
			break;
		case 3: /* a forged tail: ahead of head, far behind, or anything */
			if (op & 4) {
				uint64_t t = 0;
				for (int i = 0; i < 8; i++)
					t = t << 8 | u8(&in);
				ctl->tail = t;
			} else {
				ctl->tail = r.head + (uint64_t)(int64_t)(int16_t)u16(&in);
			}
			forged = 1;
			break;
		}
	}
	free(ring);
	free(ctl);
	return 0;
}
