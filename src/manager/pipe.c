/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Pipe areas (docs/architecture.md "Pipes"): with sluiced.pipes on, each trust domain has one memfd
 * holding a pipe ring per NF id. An NF whose SDK takes pipes maps the whole area read-write
 * (ADD_PIPE) and puts its plain NEXT descriptors on its own ring there; the worker reads that ring
 * like a TX ring, unless it has joined the NF to the next NF of its chain, which then reads it
 * directly (datapath.c "Pipes"). The area holds descriptors and indices only, never packet data,
 * and only NFs of one domain map it: a domain's NFs already share its packet region.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/memfd.h>

#include <rte_common.h>

#include "sluice/ring.h"
#include "sluiced.h"

int pipe_area_create(struct region *r, uint32_t slots, uint32_t ring_size)
{
	r->pipe_fd = -1;
	r->pipe_slot = RTE_ALIGN_CEIL(sl_ring_bytes(ring_size), 4096);
	r->pipe_bytes = (size_t)slots * r->pipe_slot;
	char name[64];
	snprintf(name, sizeof(name), "sluice-pipes-%s", r->name);
	/* sealed at its size, like the rings: an NF that shrank it would kill sluiced with SIGBUS */
	r->pipe_fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (r->pipe_fd < 0 ||
	    memfd_export(r->pipe_fd, r->pipe_bytes, false, SL_GUEST_TAG_PIPES, r->index, &r->pipe_file_size,
			 &r->pipe_nonce) < 0 ||
	    fcntl(r->pipe_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		LOG("domain %s: pipe area of %zu bytes: %s", r->name, r->pipe_bytes, strerror(errno));
		pipe_area_destroy(r);
		return -1;
	}
	r->pipe_base = mmap(NULL, r->pipe_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->pipe_fd, 0);
	if (r->pipe_base == MAP_FAILED) {
		r->pipe_base = NULL;
		LOG("domain %s: pipe area mmap: %s", r->name, strerror(errno));
		pipe_area_destroy(r);
		return -1;
	}
	return 0;
}

void pipe_area_destroy(struct region *r)
{
	if (r->pipe_base)
		munmap(r->pipe_base, r->pipe_bytes);
	r->pipe_base = NULL;
	if (r->pipe_fd >= 0)
		close(r->pipe_fd);
	r->pipe_fd = -1;
}

struct sl_ring *pipe_ring_reset(struct region *r, uint32_t id, uint32_t ring_size, uint64_t *offset)
{
	*offset = pipe_offset(r, id);
	struct sl_ring *ring = (struct sl_ring *)(r->pipe_base + *offset);
	sl_ring_init(ring, ring_size);
	return ring;
}
