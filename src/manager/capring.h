/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The producer side of a capture ring (include/sluice/capture.h): one worker writes records, a reader
 * outside sluiced drains them. DPDK-free, unit-tested (tests/unit/test_capring.c).
 */
#ifndef SLUICED_CAPRING_H
#define SLUICED_CAPRING_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/capture.h"

/* The producer's private view: head and counters live here and are only published to ctl, never read
 * back from it (the reader can write the whole file). */
struct capring {
	struct sl_cap_ring_ctl *ctl;
	uint8_t *data;
	uint32_t size;
	uint64_t head, packets, bytes, lost, lost_bytes;
};

/* size: a multiple of SL_CAP_REC_ALIGN, at least one record of the largest snaplen. */
void capring_init(struct capring *r, struct sl_cap_ring_ctl *ctl, uint8_t *data, uint32_t size);

/* Append one record (not yet visible to the reader). false: no room, counted as lost. */
bool capring_put(struct capring *r, const void *pkt, uint32_t cap_len, uint32_t wire_len, uint64_t ts_ns,
		 uint8_t point, uint8_t action);

/* Make what was put so far visible, with the counters. Once per burst. */
void capring_publish(struct capring *r);

#endif
