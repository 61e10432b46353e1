/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Capture ring producer (capring.h). */
#include <string.h>

#include "capring.h"

void capring_init(struct capring *r, struct sl_cap_ring_ctl *ctl, uint8_t *data, uint32_t size)
{
	*r = (struct capring){ .ctl = ctl, .data = data, .size = size };
	__atomic_store_n(&ctl->head, 0, __ATOMIC_RELAXED);
}

static inline uint32_t rec_bytes(uint32_t cap_len)
{
	return (uint32_t)((sizeof(struct sl_cap_rec) + cap_len + SL_CAP_REC_ALIGN - 1) & ~(SL_CAP_REC_ALIGN - 1));
}

bool capring_put(struct capring *r, const void *pkt, uint32_t cap_len, uint32_t wire_len, uint64_t ts_ns,
		 uint8_t point, uint8_t action)
{
	uint32_t need = rec_bytes(cap_len);
	uint64_t tail = __atomic_load_n(&r->ctl->tail, __ATOMIC_ACQUIRE);
	/* untrusted: a tail ahead of head, or behind it by more than the ring, reads as a full ring */
	uint64_t used = r->head - tail;
	if (used > r->size)
		used = r->size;
	uint32_t off = (uint32_t)(r->head % r->size);
	uint32_t pad = off + need > r->size ? r->size - off : 0;
	if (need > r->size || used + pad + need > r->size) {
		r->lost++;
		r->lost_bytes += wire_len;
		return false;
	}
	if (pad) { /* the rest of the ring is padding: the record starts at 0 */
		struct sl_cap_rec *w = (struct sl_cap_rec *)(r->data + off);
		w->len = SL_CAP_WRAP;
		r->head += pad;
		off = 0;
	}
	struct sl_cap_rec *h = (struct sl_cap_rec *)(r->data + off);
	*h = (struct sl_cap_rec){ .len = need, .wire_len = wire_len, .ts_ns = ts_ns, .cap_len = cap_len,
				  .point = point, .action = action };
	memcpy(h + 1, pkt, cap_len);
	r->head += need;
	r->packets++;
	r->bytes += wire_len;
	return true;
}

void capring_publish(struct capring *r)
{
	struct sl_cap_ring_ctl *c = r->ctl;
	__atomic_store_n(&c->packets, r->packets, __ATOMIC_RELAXED);
	__atomic_store_n(&c->bytes, r->bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&c->lost, r->lost, __ATOMIC_RELAXED);
	__atomic_store_n(&c->lost_bytes, r->lost_bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&c->head, r->head, __ATOMIC_RELEASE); /* the records before the index */
}
