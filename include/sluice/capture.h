/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The capture ring (docs/observability.md "Capture"): how sluiced hands packet copies to a reader.
 *
 * `capture_start` on the control socket makes a file in sluiced's socket directory and answers with
 * its path. The file is a header page, then one byte ring per worker (a worker writes only its own:
 * single producer, single consumer, no locks). Each ring holds records, 8-byte aligned:
 *
 *     struct sl_cap_rec, then cap_len bytes of the packet, then padding to 8
 *
 * A record never wraps: when one does not fit before the end of the ring, the producer writes a
 * record whose len is SL_CAP_WRAP there and goes on at offset 0. head and tail are free-running byte
 * counts (offset = count % ring_size): the producer publishes head with a release store after the
 * records are written; the reader publishes tail once it has read them. A record that does not fit in
 * the free space is not written and counts as lost: a slow reader loses copies, never traffic.
 *
 * The reader's tail is the only thing it writes, and sluiced treats it as untrusted: a tail behind
 * head by more than the ring (or ahead of it) reads as "full".
 */
#ifndef SLUICE_CAPTURE_H
#define SLUICE_CAPTURE_H

#include <stdint.h>

#define SL_CAP_MAGIC 0x50414353u /* "SCAP" */
#define SL_CAP_VERSION 1u
#define SL_CAP_HDR_SIZE 4096u   /* header page: the rings start here */
#define SL_CAP_WRAP 0xffffffffu /* a record's len: the rest of the ring is padding */
#define SL_CAP_RINGS_MAX 8u     /* one per worker */

/* Where a record was taken (struct sl_cap_rec.point indexes the capture's points, in the order of
 * the capture_start answer; kind is in the answer). */
enum sl_cap_kind { SL_CAP_PORT_RX = 0, SL_CAP_PORT_TX = 1, SL_CAP_NF_IN = 2, SL_CAP_NF_OUT = 3 };

/* One ring's indices and counters, each writer's on its own cache line. */
struct sl_cap_ring_ctl {
	uint64_t head;      /* producer: bytes written (free-running) */
	uint64_t packets;   /* producer: records written */
	uint64_t bytes;     /* producer: packet bytes of those (wire lengths) */
	uint64_t lost;      /* producer: matching packets with no room (the reader was behind) */
	uint64_t lost_bytes;
	uint64_t pad0[3];
	uint64_t tail;      /* reader: bytes consumed */
	uint64_t pad1[7];
};

struct sl_cap_hdr {
	uint32_t magic, version;
	uint32_t nrings;    /* rings in the file (sluiced's workers) */
	uint32_t ring_size; /* bytes of each ring, a multiple of 8 */
	uint32_t snaplen;
	uint32_t npoints;
	uint64_t tsc_hz;    /* for reference; records carry nanoseconds */
	uint64_t pad[4];
	struct sl_cap_ring_ctl ring[SL_CAP_RINGS_MAX]; /* at byte 64, 128 bytes each */
};

struct sl_cap_rec {
	uint32_t len;       /* of the whole record, header and padding included; SL_CAP_WRAP: see above */
	uint32_t wire_len;  /* the packet's length */
	uint64_t ts_ns;     /* CLOCK_REALTIME, nanoseconds */
	uint32_t cap_len;   /* bytes that follow: min(wire_len, snaplen) */
	uint8_t point;      /* index into the capture's points */
	uint8_t action;     /* SL_CAP_NF_OUT: the NF's action (SL_ACT_*); otherwise 0 */
	uint16_t pad;
};

#define SL_CAP_REC_ALIGN 8u

/* The layout readers in other languages rely on (python/sluice/capture/ring.py). */
#ifndef __cplusplus
_Static_assert(sizeof(struct sl_cap_ring_ctl) == 128, "sl_cap_ring_ctl is 128 bytes");
_Static_assert(__builtin_offsetof(struct sl_cap_ring_ctl, tail) == 64, "tail at 64");
_Static_assert(__builtin_offsetof(struct sl_cap_hdr, ring) == 64, "rings' control at 64");
_Static_assert(sizeof(struct sl_cap_hdr) <= SL_CAP_HDR_SIZE, "the header fits its page");
_Static_assert(sizeof(struct sl_cap_rec) == 24, "a record's header is 24 bytes");
#endif

#endif
