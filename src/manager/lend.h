/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Buffer lending: which buffer is held by which NF, where each packet is in
 * its chain, and validation of descriptors NFs hand back.
 *
 * DPDK-free on purpose, so the rules that stand between an NF and the
 * manager's memory are unit-tested on their own (tests/unit/test_lend.c).
 */
#ifndef SLUICED_LEND_H
#define SLUICED_LEND_H

#include <stdbool.h>
#include <stdint.h>
#include "sluice/abi.h"

#define SL_OWNER_NONE 0      /* buffer is with the manager (pool, port, staging) */
#define SL_HOP_DETACHED 0xff /* packet left its chain through TO_NF */

/* Per-buffer state, indexed by buffer id. Touched only by the worker. */
struct sl_bufstate {
	uint16_t owner;   /* NF id + 1, or SL_OWNER_NONE */
	uint16_t chain;   /* chain id the packet travels */
	uint8_t hop;      /* index of the service in the chain that has it */
	uint8_t supply;   /* 1: an empty buffer lent for the NF's own frame (datapath.c "Supply") */
	uint16_t in_port; /* ingress port id */
};
_Static_assert(sizeof(struct sl_bufstate) == 8, "bufstate packs to 8 bytes");

/* What the manager knows about one packet region. */
struct sl_lend {
	uint8_t region;          /* region index */
	uint32_t nbufs;          /* buffers in the region */
	uint32_t buf_size;       /* bytes per buffer */
	uint64_t region_size;    /* bytes in the region */
	const uint32_t *buf_off; /* region offset of each buffer's start */
	struct sl_bufstate *st;  /* per-buffer state */
};

enum sl_desc_verdict {
	SL_DESC_OK = 0,
	SL_DESC_BAD_REGION,  /* unknown region: buffer untouched */
	SL_DESC_BAD_BUF,     /* buffer id out of range: untouched */
	SL_DESC_NOT_LENT,    /* not in this NF's hands (forged, a second return, or not yet delivered): untouched */
	SL_DESC_BAD_RANGE,   /* offset/length/headroom outside the buffer: reclaimed */
	SL_DESC_BAD_ACTION,  /* unknown action: reclaimed */
	SL_DESC_BAD_DEST,    /* port or service id out of range: reclaimed */
	SL_DESC_BAD_OUT_SET, /* SL_ACT_OUT_SET's port set invalid (found by the data path, not sl_lend_check) */
	SL_DESC_FORBIDDEN,   /* a destination the NF's service may not name (sl_lend_dest_check): reclaimed */
	SL_DESC_RO_CHANGED,  /* an access: ro NF changed off/len or returned OUT_SET (data path): reclaimed */
	SL_DESC__COUNT
};

/* Check a descriptor returned by NF `nf_id`. Returns SL_DESC_OK, or a verdict;
 * for verdicts >= SL_DESC_BAD_RANGE the buffer was lent to this NF, so the
 * caller takes it back (drops the packet). Never reads outside `l`'s tables.
 * Inline: it runs once per returned descriptor (bench/notes.md "Shorter
 * paths, measured in one session"). */
static inline enum sl_desc_verdict sl_lend_check(const struct sl_lend *l, const struct sl_desc *d,
						 uint16_t nf_id, uint16_t nports, uint16_t nservices)
{
	if (d->region != l->region)
		return SL_DESC_BAD_REGION;
	if (d->buf >= l->nbufs)
		return SL_DESC_BAD_BUF;
	if (l->st[d->buf].owner != (uint16_t)(nf_id + 1))
		return SL_DESC_NOT_LENT;
	/* From here on the buffer is this NF's: a bad field costs it the packet. */
	uint64_t start = l->buf_off[d->buf];
	if ((uint64_t)d->off != start + d->head ||
	    (uint32_t)d->head + d->len > l->buf_size ||
	    start + l->buf_size > l->region_size)
		return SL_DESC_BAD_RANGE;
	uint8_t flags = d->action & (uint8_t)~SL_ACT_MASK;
	if (flags != 0 && flags != SL_ACT_F_PIN && flags != SL_ACT_F_UNPIN)
		return SL_DESC_BAD_ACTION;
	switch (d->action & SL_ACT_MASK) {
	case SL_ACT_NEXT:
	case SL_ACT_DROP:
		return SL_DESC_OK;
	case SL_ACT_OUT:
		return d->dest < nports ? SL_DESC_OK : SL_DESC_BAD_DEST;
	case SL_ACT_TO_NF:
		return d->dest < nservices ? SL_DESC_OK : SL_DESC_BAD_DEST;
	case SL_ACT_OUT_SET: /* the port set lives in the headroom; its masks are checked on use. No flow
			      * entry can hold a port set, so PIN/UNPIN are refused with it. */
		if (flags)
			return SL_DESC_BAD_ACTION;
		return d->head >= sizeof(struct sl_out_set) ? SL_DESC_OK : SL_DESC_BAD_RANGE;
	default:
		return SL_DESC_BAD_ACTION;
	}
}

/* Where a service's NFs may send (docs/abi.md "Next hops"): TO_NF to a service whose bit is set in
 * `svc` (ids < nsvc), OUT / OUT_SET to the ports in `ports` or to the packet's own ingress port.
 * NEXT and DROP are always allowed. `any`: everything (no may_send in the config). Built by the
 * control thread with each route and swapped with it. */
struct sl_dest_auth {
	bool any;
	uint32_t nsvc;       /* bits in svc */
	const uint64_t *svc; /* bitmap of service ids */
	uint64_t ports;      /* bitmap of port ids */
};

/* A descriptor sl_lend_check accepted: may its NF name its destination? SL_DESC_OK or
 * SL_DESC_FORBIDDEN. in_port: the packet's ingress port. (OUT_SET's ports: sl_lend_ports_ok.) */
static inline bool sl_lend_ports_ok(const struct sl_dest_auth *a, uint64_t ports, uint16_t in_port)
{
	uint64_t own = in_port < 64 ? 1ull << in_port : 0;
	return a->any || (ports & ~(a->ports | own)) == 0;
}
enum sl_desc_verdict sl_lend_dest_check(const struct sl_dest_auth *a, const struct sl_desc *d, uint16_t in_port);

/* Name of a verdict (never NULL). */
const char *sl_desc_verdict_str(int v);
/* Its key in the stats' violations.invalid_desc ("not_lent", ...; never NULL). */
const char *sl_desc_verdict_key(int v);

/* Fill the RX descriptor of buffer `buf` for an NF. The buffer stays the manager's (staged) until
 * sl_lend_deliver: an NF can return a buffer only once it is in its RX ring, and only once. */
static inline void sl_lend_stage(const struct sl_lend *l, uint32_t buf, uint16_t head, uint16_t len,
				 uint16_t in_port, struct sl_desc *d)
{
	d->buf = buf;
	d->off = l->buf_off[buf] + head;
	d->len = len;
	d->head = head;
	d->region = l->region;
	d->action = SL_ACT_NEXT;
	d->dest = in_port;
}

/* Buffer `buf` went into NF `nf_id`'s RX ring: it is that NF's until it comes back. */
static inline void sl_lend_deliver(struct sl_lend *l, uint32_t buf, uint16_t nf_id)
{
	l->st[buf].owner = (uint16_t)(nf_id + 1);
}

/* Mark a buffer as back with the manager. */
static inline void sl_lend_return(struct sl_lend *l, uint32_t buf)
{
	l->st[buf].owner = SL_OWNER_NONE;
}

#endif
