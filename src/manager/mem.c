/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The packet region: a memfd that sluiced maps, registers with DPDK as an
 * external malloc heap, and carves the mbuf pool from. NFs map the same fd,
 * so every packet buffer is visible to them at (region, offset).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/memfd.h>

#include <rte_errno.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_mempool.h>

#include "sluiced.h"

#define HUGE_2M (2u << 20)
#define DATA_ROOM (2048 + RTE_PKTMBUF_HEADROOM)
#define PRIV_SIZE 8 /* holds the buffer id */

struct collect_ctx {
	struct region *r;
	uint32_t n;
	int bad;
};

static void collect_mbuf(struct rte_mempool *mp, void *arg, void *obj, unsigned idx)
{
	(void)mp;
	(void)idx;
	struct collect_ctx *c = arg;
	struct rte_mbuf *m = obj;
	struct region *r = c->r;
	uint8_t *buf = m->buf_addr;
	if (c->n >= r->nbufs || buf < r->base || buf + m->buf_len > r->base + r->size) {
		c->bad++;
		return;
	}
	*(uint32_t *)((uint8_t *)m + sizeof(struct rte_mbuf)) = c->n;
	r->bufs[c->n] = m;
	r->buf_off[c->n] = (uint32_t)(buf - r->base);
	c->n++;
}

static size_t region_bytes(uint32_t mbufs, size_t page)
{
	/* object (mbuf header + priv + data room, cache aligned, plus mempool
	 * header) with slack, plus the pool's ring and per-lcore caches. */
	size_t obj = RTE_ALIGN_CEIL(sizeof(struct rte_mbuf) + PRIV_SIZE + DATA_ROOM + 64, 64);
	size_t bytes = (size_t)mbufs * obj;
	bytes += bytes / 8 + (size_t)mbufs * 16 + (8u << 20);
	return RTE_ALIGN_CEIL(bytes, page);
}

int region_create(struct region *r, uint32_t mbufs, bool huge)
{
	memset(r, 0, sizeof(*r));
	r->fd = -1;
	r->huge = huge;
	r->page = huge ? HUGE_2M : (size_t)sysconf(_SC_PAGESIZE);
	r->size = region_bytes(mbufs, r->page);
	snprintf(r->heap, sizeof(r->heap), "sluice_region0");

	r->fd = memfd_create("sluice-region0",
			     MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? (MFD_HUGETLB | MFD_HUGE_2MB) : 0));
	if (r->fd < 0) {
		LOG("region: memfd_create(%s) failed: %s", huge ? "MFD_HUGETLB" : "plain", strerror(errno));
		return -1;
	}
	if (ftruncate(r->fd, (off_t)r->size) < 0) {
		LOG("region: ftruncate(%zu) failed: %s", r->size, strerror(errno));
		goto fail;
	}
	/* Every NF gets this fd: sealed at its size, since an NF that shrank it would kill sluiced with
	 * SIGBUS; F_SEAL_SEAL so no NF can add a seal (F_SEAL_FUTURE_WRITE would stop later NFs from
	 * mapping it writable). */
	if (fcntl(r->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		LOG("region: sealing the memfd failed: %s", strerror(errno));
		goto fail;
	}
	r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, 0);
	if (r->base == MAP_FAILED) {
		r->base = NULL;
		LOG("region: mmap of %zu bytes failed: %s%s", r->size, strerror(errno),
		    huge ? " (not enough free huge pages?)" : "");
		goto fail;
	}
	if (rte_malloc_heap_create(r->heap) != 0) {
		LOG("region: rte_malloc_heap_create: %s", rte_strerror(rte_errno));
		goto fail;
	}
	if (rte_malloc_heap_memory_add(r->heap, r->base, r->size, NULL, r->size / r->page, r->page) != 0) {
		LOG("region: rte_malloc_heap_memory_add: %s", rte_strerror(rte_errno));
		goto fail;
	}
	r->heap_added = true;
	int socket = rte_malloc_heap_get_socket(r->heap);
	if (socket < 0) {
		LOG("region: heap has no socket id");
		goto fail;
	}

	/* Objects may straddle 4 KiB pages: virtual PMDs never use IOVAs. */
	unsigned elt = sizeof(struct rte_mbuf) + PRIV_SIZE + DATA_ROOM;
	r->pool = rte_mempool_create_empty("sluice_pool0", mbufs, elt, 256,
					   sizeof(struct rte_pktmbuf_pool_private), socket,
					   RTE_MEMPOOL_F_NO_IOVA_CONTIG);
	if (!r->pool) {
		LOG("region: mempool create: %s", rte_strerror(rte_errno));
		goto fail;
	}
	if (rte_mempool_set_ops_byname(r->pool, rte_mbuf_best_mempool_ops(), NULL) != 0) {
		LOG("region: mempool ops");
		goto fail;
	}
	struct rte_pktmbuf_pool_private priv = { .mbuf_data_room_size = DATA_ROOM, .mbuf_priv_size = PRIV_SIZE };
	rte_pktmbuf_pool_init(r->pool, &priv);
	if (rte_mempool_populate_default(r->pool) < 0) {
		LOG("region: populating %u mbufs in %zu MiB failed: %s", mbufs, r->size >> 20, rte_strerror(rte_errno));
		goto fail;
	}
	rte_mempool_obj_iter(r->pool, rte_pktmbuf_init, NULL);

	r->nbufs = mbufs;
	r->bufs = calloc(mbufs, sizeof(*r->bufs));
	r->buf_off = calloc(mbufs, sizeof(*r->buf_off));
	r->st = calloc(mbufs, sizeof(*r->st));
	if (!r->bufs || !r->buf_off || !r->st) {
		LOG("region: out of memory for buffer tables");
		goto fail;
	}
	struct collect_ctx c = { .r = r };
	rte_mempool_obj_iter(r->pool, collect_mbuf, &c);
	if (c.bad || c.n != mbufs) {
		LOG("region: %d mbufs lie outside the region (%u collected)", c.bad, c.n);
		goto fail;
	}
	r->buf_size = r->bufs[0]->buf_len;
	r->headroom = RTE_PKTMBUF_HEADROOM;
	r->lend = (struct sl_lend){ .region = 0, .nbufs = r->nbufs, .buf_size = r->buf_size,
				    .region_size = r->size, .buf_off = r->buf_off, .st = r->st };
	LOG("memory: region of %zu MiB on %s pages, %u mbufs of %u bytes", r->size >> 20,
	    huge ? "2 MiB huge" : "4 KiB ordinary", mbufs, r->buf_size);
	return 0;
fail:
	region_destroy(r);
	return -1;
}

void region_destroy(struct region *r)
{
	if (r->pool) {
		rte_mempool_free(r->pool);
		r->pool = NULL;
	}
	if (r->heap_added) {
		if (rte_malloc_heap_memory_remove(r->heap, r->base, r->size) != 0)
			LOG("region: heap memory remove: %s", rte_strerror(rte_errno));
		r->heap_added = false;
	}
	if (r->heap[0]) {
		rte_malloc_heap_destroy(r->heap); /* fails harmlessly if never created */
		r->heap[0] = 0;
	}
	if (r->base) {
		munmap(r->base, r->size);
		r->base = NULL;
	}
	if (r->fd >= 0) {
		close(r->fd);
		r->fd = -1;
	}
	free(r->bufs);
	free(r->buf_off);
	free(r->st);
	r->bufs = NULL;
	r->buf_off = NULL;
	r->st = NULL;
}
