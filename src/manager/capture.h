/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Live capture's shared state: the control thread (capture.c) fills a slot and sets the taps, the
 * workers (captap.c) read it and copy packets into its rings. docs/observability.md "Capture".
 */
#ifndef SLUICED_CAPTURE_H
#define SLUICED_CAPTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "capring.h"
#include "sluiced.h"

struct rte_bpf;

#define CAP_POINTS_MAX 32
#define CAP_SNAPLEN_MAX 65535u
#define CAP_BUFFER_KIB_DEFAULT 4096u
#define CAP_BUFFER_KIB_MIN 64u
#define CAP_BUFFER_KIB_MAX (1024u * 1024u)

struct cap_point {
	uint8_t kind; /* enum sl_cap_kind */
	uint16_t obj; /* port or NF id */
};

struct capture {
	bool live;       /* workers read it (acquire) before they touch the rest */
	int conn;        /* the control connection that owns it */
	uint32_t id;     /* what the user sees (never reused while sluiced runs) */
	char path[128];
	char filter[256];
	void *map;
	size_t map_size;
	struct sl_cap_hdr *hdr;
	struct rte_bpf *bpf; /* NULL: every packet */
	uint64_t (*jit)(void *);
	uint32_t snaplen;
	uint64_t base_ns, base_tsc; /* CLOCK_REALTIME at base_tsc */
	double ns_per_tsc;
	unsigned npoints;
	struct cap_point pt[CAP_POINTS_MAX];
	struct capring ring[SL_MAX_WORKERS]; /* worker w writes ring[w] alone */
};

extern struct capture caps[CAPTURES_MAX]; /* captap.c */

#endif
