/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Packet regions, one per trust domain (docs/architecture.md "Memory").
 *
 * A region is a memfd holding packet data buffers and nothing else: its mbuf pool is a DPDK
 * pinned-external-buffer pool (rte_pktmbuf_pool_create_extbuf), so every mbuf header, the pool's
 * ring and its per-lcore caches live in sluiced's private DPDK memory, which no NF maps. NFs map the
 * memfd and see buffer `id` at offset id * buf_size; whatever an NF writes there (even zeroing all
 * of it) changes packet bytes only, never the pool.
 */
#define ALLOW_EXPERIMENTAL_API /* rte_pktmbuf_pool_create_extbuf (stable since DPDK 20.05 in practice) */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/memfd.h>

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_memory.h>
#include <rte_prefetch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_memcpy.h>
#include <rte_mempool.h>

#include "sluiced.h"

#define HUGE_2M (2u << 20)

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
	if (c->n >= r->nbufs || buf < r->base || buf + m->buf_len > r->base + r->size ||
	    !(m->ol_flags & RTE_MBUF_F_EXTERNAL)) {
		c->bad++;
		return;
	}
	struct mbuf_priv *p = mbuf_priv(m);
	p->id = c->n;
	p->region = r->index;
	r->bufs[c->n] = m;
	r->buf_off[c->n] = (uint32_t)(buf - r->base);
	c->n++;
}

int memfd_export(int fd, size_t data_size, bool huge, uint32_t kind, uint32_t index, size_t *file_size,
		 uint64_t *nonce)
{
	size_t page = huge ? HUGE_2M : 4096u;
	uint64_t bar = sl_guest_bar_bytes(data_size);
	if (bar < page)
		bar = page;
	uint64_t n = 0;
	while (n == 0 && getrandom(&n, sizeof(n), 0) != sizeof(n))
		n = 0;
	if (ftruncate(fd, (off_t)bar) < 0)
		return -1;
	/* the tag in the last 4 KiB: map the last page (a huge page on hugetlbfs, which has no write()) */
	uint8_t *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)(bar - page));
	if (p == MAP_FAILED)
		return -1;
	struct sl_guest_tag t = { .magic = SL_GUEST_TAG_MAGIC, .kind = kind, .nonce = n, .data_size = data_size,
				  .index = index };
	memcpy(p + page - SL_GUEST_TAG_PAGE, &t, sizeof(t));
	munmap(p, page);
	*file_size = (size_t)bar;
	*nonce = n;
	return 0;
}

size_t region_bytes(uint32_t mbufs, uint32_t data_room, bool huge)
{
	size_t page = huge ? HUGE_2M : 4096u;
	return RTE_ALIGN_CEIL((size_t)mbufs * (data_room + RTE_PKTMBUF_HEADROOM), page);
}

int region_create(struct region *r, uint8_t index, const char *name, uint32_t mbufs, uint32_t data_room,
		  bool huge)
{
	const uint32_t buf_size = data_room + RTE_PKTMBUF_HEADROOM; /* headroom + data room, back to back */
	memset(r, 0, sizeof(*r));
	r->fd = r->ro_fd = r->pipe_fd = -1;
	r->index = index;
	r->huge = huge;
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->page = huge ? HUGE_2M : (size_t)sysconf(_SC_PAGESIZE);
	r->size = region_bytes(mbufs, data_room, huge);

	char fdname[32], pname[RTE_MEMPOOL_NAMESIZE];
	snprintf(fdname, sizeof(fdname), "sluice-region%u", index);
	snprintf(pname, sizeof(pname), "sluice_pool%u", index);
	r->fd = memfd_create(fdname, MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? (MFD_HUGETLB | MFD_HUGE_2MB) : 0));
	if (r->fd < 0) {
		LOG("region %u (%s): memfd_create(%s) failed: %s", index, name, huge ? "MFD_HUGETLB" : "plain",
		    strerror(errno));
		return -1;
	}
	/* The file is a power of two bytes with a tagged last page, so a KVM guest can map it as an
	 * ivshmem BAR (docs/guests.md); sluiced and process NFs map only the buffers. */
	if (memfd_export(r->fd, r->size, huge, SL_GUEST_TAG_REGION, index, &r->file_size, &r->nonce) < 0) {
		LOG("region %u (%s): sizing the memfd for %zu bytes failed: %s", index, name, r->size, strerror(errno));
		goto fail;
	}
	/* Every NF of the domain gets this fd: sealed at its size, since an NF that shrank it would kill
	 * sluiced with SIGBUS; F_SEAL_SEAL so no NF can add a seal (F_SEAL_FUTURE_WRITE would stop later
	 * NFs from mapping it writable). */
	if (fcntl(r->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		LOG("region %u (%s): sealing the memfd failed: %s", index, name, strerror(errno));
		goto fail;
	}
	/* access: ro NFs get the memfd opened read-only: the kernel refuses them a writable shared map
	 * (and mprotect to one). A memfd is created 0777, so anyone holding that fd could reopen it
	 * read-write through /proc/self/fd: mode 0600 limits that to sluiced's uid (root), i.e. an NF
	 * running as another uid (sandbox: strict) cannot (docs/abi.md "Trust domains"). */
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", r->fd);
	if (fchmod(r->fd, 0600) < 0 || (r->ro_fd = open(self, O_RDONLY | O_CLOEXEC)) < 0) {
		LOG("region %u (%s): read-only view: %s", index, name, strerror(errno));
		goto fail;
	}
	r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, 0);
	if (r->base == MAP_FAILED) {
		r->base = NULL;
		LOG("region %u (%s): mmap of %zu bytes failed: %s%s", index, name, r->size, strerror(errno),
		    huge ? " (not enough free huge pages?)" : "");
		goto fail;
	}

	/* Pinned external buffers: headers, ring and caches in sluiced's own memory; the data buffers
	 * (headroom + data room, buf_size each, back to back) in the region. Their IOVA is their VA when
	 * EAL runs IOVA as VA (a PCI NIC behind an IOMMU then DMAs there once region_dma_map mapped it);
	 * with IOVA as PA it is unknown (the virtual PMDs never use it; a PCI port copies: port.c). */
	r->iova_va = rte_eal_iova_mode() == RTE_IOVA_VA;
	struct rte_pktmbuf_extmem ext = { .buf_ptr = r->base,
					  .buf_iova = r->iova_va ? (rte_iova_t)(uintptr_t)r->base : RTE_BAD_IOVA,
					  .buf_len = r->size, .elt_size = buf_size };
	unsigned cache = mbufs / 8 < 256 ? mbufs / 8 : 256;
	r->pool = rte_pktmbuf_pool_create_extbuf(pname, mbufs, cache, sizeof(struct mbuf_priv), (uint16_t)buf_size,
						 (int)rte_socket_id(), &ext, 1);
	if (!r->pool) {
		LOG("region %u (%s): mbuf pool of %u: %s (sluiced's own DPDK memory holds the mbuf headers)",
		    index, name, mbufs, rte_strerror(rte_errno));
		goto fail;
	}
	r->nbufs = mbufs;
	r->bufs = calloc(mbufs, sizeof(*r->bufs));
	r->buf_off = calloc(mbufs, sizeof(*r->buf_off));
	r->st = calloc(mbufs, sizeof(*r->st));
	if (!r->bufs || !r->buf_off || !r->st) {
		LOG("region %u (%s): out of memory for buffer tables", index, name);
		goto fail;
	}
	struct collect_ctx c = { .r = r };
	rte_mempool_obj_iter(r->pool, collect_mbuf, &c);
	if (c.bad || c.n != mbufs) {
		LOG("region %u (%s): %d mbufs lie outside the region (%u collected)", index, name, c.bad, c.n);
		goto fail;
	}
	r->buf_size = r->bufs[0]->buf_len;
	r->headroom = RTE_PKTMBUF_HEADROOM;
	r->lend = (struct sl_lend){ .region = index, .nbufs = r->nbufs, .buf_size = r->buf_size,
				    .region_size = r->size, .buf_off = r->buf_off, .st = r->st };
	LOG("memory: region %u (domain %s) of %zu MiB on %s pages, %u buffers of %u bytes (data room %u; mbuf "
	    "headers in sluiced's memory)", index, name, r->size >> 20, huge ? "2 MiB huge" : "4 KiB ordinary", mbufs,
	    r->buf_size, data_room);
	return 0;
fail:
	region_destroy(r);
	return -1;
}

int region_dma_map(struct region *r, struct rte_device *dev, char *err, size_t errlen)
{
	if (!r->iova_va) {
		snprintf(err, errlen, "EAL runs with IOVA as physical addresses (no IOMMU, or a driver that needs "
			 "them): region %u has no device address", r->index);
		return -1;
	}
	if (!r->extmem) {
		if (rte_extmem_register(r->base, r->size, NULL, 0, r->page) != 0) {
			snprintf(err, errlen, "rte_extmem_register of region %u (%zu bytes): %s", r->index, r->size,
				 rte_strerror(rte_errno));
			return -1;
		}
		r->extmem = true;
	}
	if (rte_dev_dma_map(dev, r->base, (uint64_t)(uintptr_t)r->base, r->size) != 0) {
		snprintf(err, errlen, "rte_dev_dma_map of region %u on %s: %s", r->index, rte_dev_name(dev),
			 rte_strerror(rte_errno));
		return -1;
	}
	r->dma_maps++;
	return 0;
}

void region_dma_unmap(struct region *r, struct rte_device *dev)
{
	if (r->dma_maps == 0)
		return;
	/* Under VFIO every PCI device of DPDK's default container shares one IOMMU mapping: the second
	 * device's map found it there, and unmapping for one device unmaps for all (a NIC unplugged next to
	 * another then made the other's DMA fault). The mapping goes with the last device. */
	if (r->dma_maps > 1) {
		r->dma_maps--;
		return;
	}
	if (rte_dev_dma_unmap(dev, r->base, (uint64_t)(uintptr_t)r->base, r->size) == 0)
		r->dma_maps--;
}

void region_destroy(struct region *r)
{
	region_stash_release(r);
	if (r->extmem && r->base) { /* after every port is closed: no device maps it any more */
		rte_extmem_unregister(r->base, r->size);
		r->extmem = false;
	}
	if (r->pool) {
		rte_mempool_free(r->pool);
		r->pool = NULL;
	}
	if (r->base) {
		munmap(r->base, r->size);
		r->base = NULL;
	}
	if (r->ro_fd >= 0) {
		close(r->ro_fd);
		r->ro_fd = -1;
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

/* Prefetch distance of the stash: headers this many copies ahead, data half as far (its address
 * is read from the header prefetched earlier). */
#define STASH_AHEAD 4

static inline void stash_prefetch(const struct region_stash *st, uint16_t i)
{
	if (i + STASH_AHEAD < st->n) {
		const struct rte_mbuf *h = st->m[i + STASH_AHEAD];
		rte_prefetch0_write(h);
		rte_prefetch0_write((const uint8_t *)h + RTE_CACHE_LINE_SIZE);
	}
	if (i + STASH_AHEAD / 2 < st->n) {
		const struct rte_mbuf *d = st->m[i + STASH_AHEAD / 2];
		rte_prefetch0_write((const uint8_t *)d->buf_addr + RTE_PKTMBUF_HEADROOM);
	}
}

static struct rte_mbuf *stash_take(struct region *r, unsigned worker)
{
	struct region_stash *st = &r->stash[worker];
	if (unlikely(st->i == st->n)) {
		st->i = st->n = 0;
		if (rte_mempool_get_bulk(r->pool, (void **)st->m, REGION_STASH) == 0)
			st->n = REGION_STASH;
		else if (rte_mempool_get(r->pool, (void **)&st->m[0]) == 0)
			st->n = 1; /* nearly empty pool: one at a time */
		else
			return NULL;
		for (uint16_t k = 0; k < STASH_AHEAD && k < st->n; k++)
			rte_prefetch0_write(st->m[k]);
	}
	stash_prefetch(st, st->i);
	struct rte_mbuf *c = st->m[st->i++];
	rte_pktmbuf_reset(c); /* what rte_pktmbuf_alloc does after its get */
	return c;
}

void region_stash_release(struct region *r)
{
	for (unsigned w = 0; w < SL_MAX_WORKERS; w++) {
		struct region_stash *st = &r->stash[w];
		if (r->pool && st->i < st->n)
			rte_mempool_put_bulk(r->pool, (void **)&st->m[st->i], st->n - st->i);
		st->i = st->n = 0;
	}
}

struct rte_mbuf *region_copy_in(struct region *r, const struct rte_mbuf *m, unsigned worker)
{
	struct rte_mbuf *c = stash_take(r, worker);
	if (unlikely(!c))
		return NULL;
	uint16_t off = m->data_off, len = (uint16_t)m->data_len;
	if (unlikely((uint32_t)off + len > c->buf_len)) { /* a foreign pool with a bigger buffer */
		off = RTE_PKTMBUF_HEADROOM;
		if ((uint32_t)off + len > c->buf_len) {
			rte_pktmbuf_free(c);
			return NULL;
		}
	}
	c->data_off = off;
	c->data_len = len;
	c->pkt_len = len;
	c->port = m->port;
	rte_memcpy(rte_pktmbuf_mtod(c, uint8_t *), rte_pktmbuf_mtod(m, const uint8_t *), len);
	return c;
}
