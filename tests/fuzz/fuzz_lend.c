/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libFuzzer target: descriptor validation and returns (src/manager/lend.h, lend.c) against a model of
 * what was lent, and the manager's ring index checks (src/manager/nfring.h) against an NF that writes
 * anything into its indices.
 *
 * Lending: the input is a program of operations -- lend a buffer to an NF (stage + deliver, as the
 * worker does), an NF returns a descriptor (its own, changed in chosen fields, or forged outright),
 * a destination check under a port/service authorisation. The model keeps each buffer's owner. What
 * must hold whatever the NF sends:
 *   - a descriptor is accepted (SL_DESC_OK, or a verdict >= SL_DESC_BAD_RANGE: the buffer is then
 *     reclaimed) exactly when its buffer is in this NF's hands: never twice, never from another NF,
 *     never a buffer that was not delivered;
 *   - a verdict below SL_DESC_BAD_RANGE leaves the buffer's state untouched;
 *   - SL_DESC_OK means the range lies inside the buffer and the region, the action is known, the
 *     destination is in range;
 *   - no check reads outside the tables: buf_off, the state table and the service bitmap are heap
 *     arrays of exactly their size (ASan).
 * Rings: a ring of 2..64 slots in an allocation of exactly sl_ring_bytes (ASan), the indices starting
 * anywhere (the 2^32 wrap); sluiced enqueues (RX) and dequeues (TX) while the NF stores arbitrary
 * consumer (RX) and producer (TX) indices. nf_ring_* must report an index outside its legal window and
 * keep its own view in [0, size] descriptors; after an error sluiced disconnects the NF (the ring is
 * not used again).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "lend.h"
#include "nfring.h"
#include "sluice/ring.h"

#define NNFS 4

static void lending(struct in *in)
{
	uint32_t nbufs = 1 + u8(in) % 32;
	uint32_t buf_size = 64 + u16(in) % 4096;
	uint32_t gap = u8(in);
	uint8_t region = u8(in) % 4;
	uint32_t *buf_off = malloc(nbufs * sizeof(*buf_off));
	struct sl_bufstate *st = calloc(nbufs, sizeof(*st));
	uint16_t *model = calloc(nbufs, sizeof(*model)); /* owner: NF id + 1, or 0 */
	struct sl_desc *given = calloc(nbufs, sizeof(*given));
	for (uint32_t i = 0; i < nbufs; i++)
		buf_off[i] = 4096 + i * (buf_size + gap);
	/* the region may end before the last buffer does (a corrupt table): such a buffer is never OK */
	uint64_t region_size = 4096 + (uint64_t)nbufs * (buf_size + gap) - (u8(in) & 1 ? gap + 1 : 0);
	struct sl_lend L = { .region = region, .nbufs = nbufs, .buf_size = buf_size, .region_size = region_size,
			     .buf_off = buf_off, .st = st };
	uint16_t nports = u8(in) % 70, nsvc = u16(in) % 200;
	uint32_t nsvc_auth = u8(in);
	uint64_t *svc = malloc(((nsvc_auth + 63) / 64 + 1) * sizeof(uint64_t));
	for (uint32_t i = 0; i < (nsvc_auth + 63) / 64; i++)
		svc[i] = (uint64_t)u32(in) << 32 | u32(in);
	struct sl_dest_auth auth = { .any = u8(in) & 1, .nsvc = nsvc_auth, .svc = svc, .ports = (uint64_t)u32(in) << 32 | u32(in) };

	while (in->n > 0) {
		uint8_t op = u8(in);
		uint32_t b = u8(in) % (nbufs + 2); /* now and then one past the table */
		uint16_t nf = u8(in) % NNFS;
		switch (op % 4) {
		case 0: /* lend: the worker only stages a buffer it holds */
			if (b < nbufs && model[b] == 0) {
				uint16_t head = u16(in) % buf_size;
				uint16_t len = (uint16_t)(u16(in) % (buf_size - head + 1));
				sl_lend_stage(&L, b, head, len, u8(in) % 8, &given[b]);
				REQUIRE(st[b].owner == SL_OWNER_NONE); /* staged: still the manager's */
				sl_lend_deliver(&L, b, nf);
				model[b] = (uint16_t)(nf + 1);
			}
			break;
		case 1:
		case 2: { /* a return: the NF's own descriptor with fields changed, or forged */
			struct sl_desc d;
			if (op % 4 == 1 && b < nbufs) {
				d = given[b];
				uint8_t what = u8(in);
				if (what & 1)
					d.len = u16(in);
				if (what & 2)
					d.head = u16(in);
				if (what & 4)
					d.off = u32(in);
				if (what & 8)
					d.region = u8(in);
				if (what & 16)
					d.buf = u32(in);
				d.action = u8(in);
				d.dest = u16(in);
				if (what & 32) { /* head/off moved together, as sl_pkt_adj_head does */
					int16_t delta = (int16_t)u16(in);
					d.head = (uint16_t)(d.head + delta);
					d.off += (uint32_t)(int32_t)delta;
					d.len = (uint16_t)(d.len - delta);
				}
			} else {
				uint8_t raw[sizeof(d)];
				for (size_t i = 0; i < sizeof(raw); i++)
					raw[i] = u8(in);
				memcpy(&d, raw, sizeof(d));
				if (u8(in) & 1)
					d.buf %= nbufs + 1;
				if (u8(in) & 1)
					d.region = region;
			}
			struct sl_bufstate before = d.buf < nbufs ? st[d.buf] : (struct sl_bufstate){ 0 };
			enum sl_desc_verdict v = sl_lend_check(&L, &d, nf, nports, nsvc);
			REQUIRE(v >= SL_DESC_OK && v < SL_DESC__COUNT);
			int lent_here = d.region == region && d.buf < nbufs && model[d.buf] == nf + 1;
			int accepted = v == SL_DESC_OK || v >= SL_DESC_BAD_RANGE;
			REQUIRE(accepted == lent_here);
			REQUIRE(v != SL_DESC_BAD_OUT_SET && v != SL_DESC_FORBIDDEN && v != SL_DESC_RO_CHANGED);
			if (!accepted) {
				if (d.buf < nbufs)
					REQUIRE(memcmp(&before, &st[d.buf], sizeof(before)) == 0);
				break;
			}
			if (v == SL_DESC_OK) {
				uint64_t start = buf_off[d.buf];
				REQUIRE((uint64_t)d.off == start + d.head);
				REQUIRE((uint32_t)d.head + d.len <= buf_size);
				REQUIRE(start + buf_size <= region_size);
				uint8_t a = d.action & SL_ACT_MASK, fl = d.action & (uint8_t)~SL_ACT_MASK;
				REQUIRE(a < SL_ACT__COUNT);
				REQUIRE(fl == 0 || fl == SL_ACT_F_PIN || fl == SL_ACT_F_UNPIN);
				if (a == SL_ACT_OUT)
					REQUIRE(d.dest < nports);
				if (a == SL_ACT_TO_NF)
					REQUIRE(d.dest < nsvc);
				if (a == SL_ACT_OUT_SET)
					REQUIRE(d.head >= sizeof(struct sl_out_set) && fl == 0);
				uint16_t in_port = st[d.buf].in_port;
				enum sl_desc_verdict dv = sl_lend_dest_check(&auth, &d, in_port);
				REQUIRE(dv == SL_DESC_OK || dv == SL_DESC_FORBIDDEN);
				if (auth.any || a == SL_ACT_NEXT || a == SL_ACT_DROP || a == SL_ACT_OUT_SET)
					REQUIRE(dv == SL_DESC_OK);
				if (a == SL_ACT_TO_NF && dv == SL_DESC_OK && !auth.any)
					REQUIRE(d.dest < nsvc_auth && (svc[d.dest / 64] >> (d.dest % 64) & 1));
				if (a == SL_ACT_OUT && dv == SL_DESC_OK && !auth.any)
					REQUIRE(d.dest < 64 && ((auth.ports | (in_port < 64 ? 1ull << in_port : 0)) >> d.dest & 1));
			}
			/* the worker takes the buffer back (sent on, or dropped) */
			sl_lend_return(&L, d.buf);
			model[d.buf] = 0;
			break;
		}
		case 3: /* names of any verdict */
			REQUIRE(sl_desc_verdict_str((int8_t)u8(in)) != NULL);
			REQUIRE(sl_desc_verdict_key((int8_t)u8(in)) != NULL);
			REQUIRE(sl_lend_ports_ok(&auth, 0, u16(in)));
			break;
		}
		for (uint32_t i = 0; i < nbufs; i++)
			REQUIRE(st[i].owner == model[i]);
	}
	free(buf_off);
	free(st);
	free(model);
	free(given);
	free(svc);
}

static void rings(struct in *in)
{
	uint32_t slots = 2u << (u8(in) % 6);
	size_t bytes = sl_ring_bytes(slots);
	void *mrx = NULL, *mtx = NULL; /* exactly sl_ring_bytes: not always a multiple of the alignment */
	REQUIRE(posix_memalign(&mrx, SL_CACHE_LINE, bytes) == 0 && posix_memalign(&mtx, SL_CACHE_LINE, bytes) == 0);
	struct sl_ring *rx = mrx, *tx = mtx;
	REQUIRE(sl_ring_init(rx, slots) == 0 && sl_ring_init(tx, slots) == 0);
	struct nf_ring krx, ktx;
	nf_ring_init(&krx, rx, slots);
	nf_ring_init(&ktx, tx, slots);
	uint32_t s0 = u32(in), s1 = u32(in);
	krx.own = krx.peer = rx->prod = rx->cons = s0;
	ktx.own = ktx.peer = tx->prod = tx->cons = s1;
	int rx_dead = 0, tx_dead = 0;
	struct sl_desc d[80];
	memset(d, 0x5a, sizeof(d));
	while (in->n > 0 && !(rx_dead && tx_dead)) {
		uint8_t op = u8(in);
		uint32_t n = u8(in) % 80, done = 0;
		switch (op % 4) {
		case 0: /* RX: the NF stores a consumer index (near the legal window, or anything) */
			rx->cons = op & 4 ? u32(in) : krx.peer + (uint32_t)(int8_t)u8(in);
			break;
		case 1: /* RX: sluiced enqueues */
			if (rx_dead)
				break;
			{
				uint32_t own0 = krx.own, peer0 = krx.peer, cons = rx->cons;
				enum nf_ring_err e = nf_ring_enqueue(&krx, d, n, &done);
				if (e != NF_RING_OK) {
					REQUIRE(e == NF_RING_RX_BACK || e == NF_RING_RX_PAST);
					REQUIRE(cons - peer0 > own0 - peer0); /* really outside [peer, own] */
					REQUIRE(done == 0 && krx.own == own0 && krx.peer == peer0);
					rx_dead = 1;
				} else {
					REQUIRE(cons - peer0 <= own0 - peer0 && krx.peer == cons);
					REQUIRE(krx.own - own0 == done && done <= n);
					REQUIRE(nf_ring_rx_pending(&krx) <= slots);
					REQUIRE(rx->prod == krx.own);
				}
			}
			break;
		case 2: /* TX: the NF stores a producer index */
			tx->prod = op & 4 ? u32(in) : ktx.own + (uint32_t)(u8(in) % (2 * slots + 2)) - 1;
			break;
		case 3: /* TX: sluiced dequeues */
			if (tx_dead)
				break;
			{
				uint32_t own0 = ktx.own, peer0 = ktx.peer, prod = tx->prod;
				enum nf_ring_err e = nf_ring_dequeue(&ktx, d, n, &done);
				if (e != NF_RING_OK) {
					REQUIRE(e == NF_RING_TX_BACK || e == NF_RING_TX_PAST);
					REQUIRE(prod - peer0 > own0 + slots - peer0);
					REQUIRE(done == 0 && ktx.own == own0);
					tx_dead = 1;
				} else {
					REQUIRE(ktx.peer == prod && done <= n && ktx.own - own0 == done);
					REQUIRE(nf_ring_tx_avail(&ktx) <= slots);
					REQUIRE(tx->cons == ktx.own);
				}
			}
			break;
		}
		REQUIRE(nf_ring_err_key((int8_t)op) != NULL && nf_ring_err_text((int8_t)op) != NULL);
	}
	free(rx);
	free(tx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	if (u8(&in) & 1)
		rings(&in);
	else
		lending(&in);
	return 0;
}
