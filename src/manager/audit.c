/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The pool audit (control API `pool_audit`, docs/api.md): every buffer must be in exactly one
 * place -- free in the mempool, lent to one NF (the ledger's owner, and that NF's `lent` agrees),
 * staged for an NF's RX ring, or staged for a port's TX burst. A buffer in two places, or in the
 * mempool twice, is a double free; one in none is lost (or held by a port's driver).
 *
 * DPDK's mempool cannot list its objects, let alone duplicates, so the audit drains it: every
 * lcore cache is flushed, every object taken out with rte_mempool_get_bulk into a private array
 * and marked by its buffer id, then each distinct object goes back once. It runs on the worker
 * between bursts (WCMD_POOL_AUDIT; inline when the worker is stopped), so nothing moves meanwhile.
 * Bounded (the pool's size) and only on request.
 */
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "sluiced.h"

static void mark(struct pool_audit *a, uint32_t b, uint8_t where)
{
	if (a->cnt[b] < 255)
		a->cnt[b]++;
	a->loc[b] |= where;
}

/* Buffer b of region r as one index over every region (control.c sizes the arrays the same way). */
static uint32_t audit_base(unsigned r)
{
	uint32_t base = 0;
	for (unsigned k = 0; k < r && k < M.nregions; k++)
		base += M.regions[k] ? M.regions[k]->nbufs : 0;
	return base;
}

static void audit_pool(struct pool_audit *a, struct region *r, uint32_t base)
{
	struct rte_mempool *mp = r->pool;
	unsigned lc;
	region_stash_release(r); /* the copy stash is free buffers: back in the pool to be counted */
	RTE_LCORE_FOREACH(lc) { /* the other lcores wait (main: in worker_call), so their caches are still */
		struct rte_mempool_cache *c = rte_mempool_default_cache(mp, lc);
		if (c)
			rte_mempool_cache_flush(c, mp);
	}
	uint32_t n = 0;
	while (n + SL_BURST <= a->cap && rte_mempool_get_bulk(mp, &a->objs[n], SL_BURST) == 0)
		n += SL_BURST;
	while (n < a->cap && rte_mempool_get(mp, &a->objs[n]) == 0)
		n++;
	uint32_t keep = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct rte_mbuf *m = a->objs[i];
		uint32_t id = mbuf_id(m);
		if (id >= r->nbufs || r->bufs[id] != m) {
			a->foreign++;
			a->objs[keep++] = m;
			continue;
		}
		bool first = !(a->loc[base + id] & AUDIT_FREE);
		mark(a, base + id, AUDIT_FREE);
		if (first) { /* a second copy in the pool stays out: it could be handed out twice */
			a->free++;
			a->objs[keep++] = m;
		}
	}
	for (uint32_t i = 0; i < keep; i += SL_BURST)
		rte_mempool_put_bulk(mp, &a->objs[i], keep - i < SL_BURST ? keep - i : SL_BURST);
	for (uint32_t b = 0; b < r->nbufs; b++) {
		uint16_t o = r->st[b].owner;
		if (o == SL_OWNER_NONE)
			continue;
		a->lent++;
		mark(a, base + b, AUDIT_LENT);
		if (o - 1u >= M.max_nfs || !M.nfs[o - 1].active)
			a->bad_owner++;
		else
			a->owned[o - 1]++;
	}
}

void pool_audit_run(struct pool_audit *a)
{
	for (unsigned r = 0; r < M.nregions; r++)
		if (M.regions[r])
			audit_pool(a, M.regions[r], audit_base(r));
	for (uint32_t i = 0; i < M.max_nfs; i++) {
		struct nf *nf = &M.nfs[i];
		if (!nf->active)
			continue;
		uint32_t base = audit_base(nf->domain), nb = M.regions[nf->domain]->nbufs;
		for (uint16_t k = 0; k < nf->nstage; k++) {
			uint32_t b = nf->stage[k].buf;
			if (b < nb) {
				a->staged++;
				mark(a, base + b, AUDIT_STAGED);
			}
		}
		if (a->owned[i] != nf->lent && a->nmismatch < AUDIT_LIST_MAX) {
			a->mismatch_nf[a->nmismatch] = i;
			a->mismatch_lent[a->nmismatch] = nf->lent;
			a->mismatch_owned[a->nmismatch++] = a->owned[i];
		}
	}
	/* Packets in flight between workers (each inbox, emptied and refilled in order: the other
	 * workers hold still) are staged: once per buffer. */
	for (unsigned w = 0; w < M.nworkers && M.nworkers > 1; w++) {
		struct rte_ring *in = M.workers[w].inbox;
		unsigned n = rte_ring_count(in);
		for (unsigned k = 0; k < n; k++) {
			struct rte_mbuf *m;
			if (rte_ring_dequeue(in, (void **)&m) != 0)
				break;
			unsigned r = mbuf_region(m);
			if (r < M.nregions && M.regions[r] && mbuf_id(m) < M.regions[r]->nbufs) {
				uint32_t b = audit_base(r) + mbuf_id(m);
				if (!(a->loc[b] & AUDIT_STAGED))
					a->staged++;
				mark(a, b, AUDIT_STAGED);
			}
			rte_ring_enqueue(in, m);
		}
	}
	/* A port-set packet shares one mbuf between ports by reference count: once per buffer. */
	for (unsigned p = 0; p < M.nports; p++)
		for (unsigned w = 0; w < SL_MAX_WORKERS; w++) /* each worker's staging (a TX queue per worker) */
		for (uint16_t k = 0; k < M.ports[p].stage[w].n; k++) {
			const struct rte_mbuf *m = M.ports[p].stage[w].m[k];
			unsigned r = mbuf_region(m);
			if (r >= M.nregions || !M.regions[r] || mbuf_id(m) >= M.regions[r]->nbufs)
				continue; /* a port's private pool (not audited) */
			uint32_t b = audit_base(r) + mbuf_id(m);
			if (!(a->loc[b] & AUDIT_PORT)) {
				a->port_staged++;
				mark(a, b, AUDIT_PORT);
			}
		}
}

uint32_t test_hook_double_free(void)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(M.region.pool);
	if (!m)
		return UINT32_MAX;
	uint32_t id = mbuf_id(m);
	rte_pktmbuf_free(m);
	rte_mempool_put(M.region.pool, m); /* again: the pool now holds it twice */
	return id;
}
