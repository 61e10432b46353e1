/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Live capture, the workers' side: copies of the packets at a tapped point into the capture's ring
 * (capture.h; the control side is capture.c, the ring's format include/sluice/capture.h).
 */
#include <rte_bpf.h>
#include <rte_cycles.h>
#include <rte_mbuf.h>

#include "capture.h"

struct capture caps[CAPTURES_MAX];

static inline bool matches(const struct capture *c, struct rte_mbuf *m)
{
	if (c->bpf == NULL)
		return true;
	return (c->jit ? c->jit(m) : rte_bpf_exec(c->bpf, m)) != 0;
}

static inline int point_of(const struct capture *c, uint8_t kind, uint16_t obj)
{
	for (unsigned i = 0; i < c->npoints; i++)
		if (c->pt[i].kind == kind && c->pt[i].obj == obj)
			return (int)i;
	return -1;
}

void capture_pkts(unsigned w, uint8_t mask, uint8_t kind, uint16_t obj, struct rte_mbuf *const *m, uint16_t n,
		  uint8_t action)
{
	uint64_t tsc = rte_rdtsc(); /* one time per burst: its packets arrived together */
	for (unsigned k = 0; k < CAPTURES_MAX; k++) {
		if (!(mask & (1u << k)))
			continue;
		struct capture *c = &caps[k];
		if (!__atomic_load_n(&c->live, __ATOMIC_ACQUIRE))
			continue;
		int p = point_of(c, kind, obj);
		if (p < 0)
			continue;
		uint64_t ts = c->base_ns + (uint64_t)((double)(tsc - c->base_tsc) * c->ns_per_tsc);
		struct capring *r = &c->ring[w];
		for (uint16_t i = 0; i < n; i++) {
			if (!matches(c, m[i]))
				continue;
			uint32_t len = rte_pktmbuf_data_len(m[i]); /* one segment: rx_queue refuses chains */
			capring_put(r, rte_pktmbuf_mtod(m[i], const void *), len < c->snaplen ? len : c->snaplen, len, ts,
				    (uint8_t)p, action);
		}
		capring_publish(r);
	}
}
