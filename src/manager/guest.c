/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Guest NFs (docs/guests.md): an NF inside a KVM guest. Before its QEMU starts, `guest_prepare`
 * makes the guest's slot: the NF's rings (with a struct sl_guest_header in the first page) in a
 * memfd of a power-of-two size QEMU maps as an ivshmem BAR, and a UNIX socket that QEMU's
 * virtio-serial chardev connects to. Whatever connects there runs the attach protocol of abi.h as
 * that guest, for that name and service only, and gets its rings, its domain's region and pipe area
 * as offsets in BARs instead of fds. Teardown twin: guest_release.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <rte_common.h>

#include "sluice/guest.h"
#include "sluice/ring.h"
#include "nfinfo.h"
#include "sluiced.h"

static struct guest guests[SL_MAX_GUESTS];

struct guest *guest_get(int slot)
{
	return slot >= 1 && slot <= SL_MAX_GUESTS && guests[slot - 1].used ? &guests[slot - 1] : NULL;
}

static struct guest *guest_find(const char *name)
{
	for (unsigned i = 0; i < SL_MAX_GUESTS; i++)
		if (guests[i].used && !strcmp(guests[i].name, name))
			return &guests[i];
	return NULL;
}

/* Its NF slot still belongs to it (the slot of an NF that left may serve another NF by now). */
bool guest_busy(const struct guest *g)
{
	return g->nf >= 0 && M.nfs[g->nf].state != NF_FREE && M.nfs[g->nf].guest == (int)(g - guests) + 1;
}

static void close_listener(int *fd, const char *path)
{
	if (*fd >= 0) {
		epoll_ctl(M.epfd, EPOLL_CTL_DEL, *fd, NULL);
		close(*fd);
		unlink(path);
	}
	*fd = -1;
}

/* A listening UNIX socket at path (mode 0600) in sluiced's epoll as (kind, idx). */
static int listen_at(const char *path, uint32_t kind, uint32_t idx)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(a.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = ((uint64_t)kind << 32) | idx };
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(path, 0600) < 0 || listen(fd, 4) < 0 ||
	    epoll_ctl(M.epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Undo guest_create, step by step; safe on a partly made guest. */
static void guest_destroy(struct guest *g)
{
	close_listener(&g->listen_fd, g->sock_path);
	close_listener(&g->ivsh_listen, g->ivsh_path);
	if (g->ivsh_conn >= 0)
		close(g->ivsh_conn);
	if (g->rx_kick_fd >= 0)
		close(g->rx_kick_fd);
	if (g->tx_kick_fd >= 0)
		close(g->tx_kick_fd);
	if (g->ring_map)
		munmap(g->ring_map, g->ring_map_size);
	if (g->ring_fd >= 0)
		close(g->ring_fd);
	memset(g, 0, sizeof(*g));
	g->ring_fd = g->listen_fd = g->ivsh_listen = g->ivsh_conn = g->rx_kick_fd = g->tx_kick_fd = -1;
}

/* Write the rings device's header over zeroed ring memory (again on every prepare: a new QEMU). The
 * rings themselves are made when the NF attaches (guest_adopt_rings), before it is told of them. */
static void guest_reset(struct guest *g)
{
	const struct region *reg = M.regions[g->domain];
	memset(g->ring_map, 0, g->info_off + NFINFO_BYTES);
	struct sl_guest_header h = { .magic = SL_GUEST_MAGIC, .version = SL_ABI_VERSION,
				     .bar_size = g->ring_map_size, .region_nonce = reg->nonce,
				     .pipes_nonce = reg->pipe_base ? reg->pipe_nonce : 0,
				     .region_index = reg->index, .ring_slots = M.cfg.ring_size,
				     .flags = SL_GUEST_F_DOORBELL };
	snprintf(h.name, sizeof(h.name), "%s", g->name);
	snprintf(h.service, sizeof(h.service), "%s", g->service);
	memcpy(g->ring_map, &h, sizeof(h));
	uint64_t v;
	if (g->rx_kick_fd >= 0 && read(g->rx_kick_fd, &v, sizeof(v)) < 0) /* a new QEMU: no stale kicks */
		v = 0;
	if (g->tx_kick_fd >= 0 && read(g->tx_kick_fd, &v, sizeof(v)) < 0)
		v = 0;
}

static int guest_create(struct guest *g, const char *name, const char *service, uint8_t domain, char *err,
			size_t errlen)
{
	memset(g, 0, sizeof(*g));
	g->ring_fd = g->listen_fd = g->ivsh_listen = g->ivsh_conn = g->rx_kick_fd = g->tx_kick_fd = -1;
	g->used = true;
	g->nf = -1;
	g->domain = domain;
	snprintf(g->name, sizeof(g->name), "%s", name);
	snprintf(g->service, sizeof(g->service), "%s", service);
	size_t one = RTE_ALIGN_CEIL(sl_ring_bytes(M.cfg.ring_size), 4096);
	g->rx_off = 4096; /* the header page first */
	g->tx_off = g->rx_off + one;
	g->info_off = g->tx_off + one;
	uint64_t bar = 4096;
	while (bar < g->info_off + NFINFO_BYTES)
		bar <<= 1;
	g->ring_map_size = (size_t)bar;
	g->ring_fd = memfd_create("sluice-guest-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (g->ring_fd < 0 || ftruncate(g->ring_fd, (off_t)bar) < 0 ||
	    fcntl(g->ring_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 || fchmod(g->ring_fd, 0600) < 0) {
		snprintf(err, errlen, "guest %s: ring memory: %s", name, strerror(errno));
		goto fail;
	}
	g->ring_map = mmap(NULL, bar, PROT_READ | PROT_WRITE, MAP_SHARED, g->ring_fd, 0);
	if (g->ring_map == MAP_FAILED) {
		g->ring_map = NULL;
		snprintf(err, errlen, "guest %s: ring memory map: %s", name, strerror(errno));
		goto fail;
	}
	guest_reset(g);
	/* the NF's eventfds live with the guest: QEMU gets them once, as the ivshmem server's vectors */
	g->rx_kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	g->tx_kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (g->rx_kick_fd < 0 || g->tx_kick_fd < 0) {
		snprintf(err, errlen, "guest %s: eventfds: %s", name, strerror(errno));
		goto fail;
	}
	snprintf(g->sock_path, sizeof(g->sock_path), "%s/guest-%s.sock", M.sock_dir, name);
	snprintf(g->ivsh_path, sizeof(g->ivsh_path), "%s/guest-%s.ivshmem", M.sock_dir, name);
	uint32_t idx = (uint32_t)(g - guests);
	if ((g->listen_fd = listen_at(g->sock_path, EP_GUEST_LISTEN, idx)) < 0 ||
	    (g->ivsh_listen = listen_at(g->ivsh_path, EP_GUEST_IVSHMEM, idx)) < 0) {
		snprintf(err, errlen, "guest %s: sockets in %s: %s", name, M.sock_dir, strerror(errno));
		goto fail;
	}
	return 0;
fail:
	guest_destroy(g);
	return -1;
}

static json_t *mem_entry(const char *id, int fd, size_t size)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)getpid(), fd);
	return json_pack("{s:s,s:s,s:I}", "id", id, "path", path, "size", (json_int_t)size);
}

json_t *guest_prepare(const char *name, const char *service, char *err, size_t errlen)
{
	if (!config_valid_name(name)) {
		snprintf(err, errlen, "guest_prepare: field 'name': expected 1-31 characters of [A-Za-z0-9_.-]");
		return NULL;
	}
	if (!config_valid_name(service)) {
		snprintf(err, errlen, "guest_prepare: field 'service': expected 1-31 characters of [A-Za-z0-9_.-]");
		return NULL;
	}
	int ci = config_service_index(&M.cfg, service);
	if (ci < 0 && M.cfg.attach_token) {
		snprintf(err, errlen, "guest_prepare: service '%s' is not in sluiced's config", service);
		return NULL;
	}
	if (ci >= 0 && M.cfg.service_ro[ci]) {
		snprintf(err, errlen, "guest_prepare: service '%s' has access: ro, which guest NFs do not support "
			 "(QEMU maps the region read-write)", service);
		return NULL;
	}
	uint8_t domain = ci >= 0 ? M.cfg.service_domain[ci] : 0;
	struct guest *g = guest_find(name);
	if (g) {
		if (guest_busy(g)) {
			snprintf(err, errlen, "guest_prepare: guest %s is still attached (its QEMU still runs?)", name);
			return NULL;
		}
		if (strcmp(g->service, service) || g->domain != domain) {
			snprintf(err, errlen, "guest_prepare: guest %s was prepared for service %s; guest_release it first",
				 name, g->service);
			return NULL;
		}
		guest_reset(g);
	} else {
		for (unsigned i = 0; i < SL_MAX_GUESTS && !g; i++)
			if (!guests[i].used)
				g = &guests[i];
		if (!g) {
			snprintf(err, errlen, "guest_prepare: all %d guest slots in use", SL_MAX_GUESTS);
			return NULL;
		}
		if (guest_create(g, name, service, domain, err, errlen) < 0)
			return NULL;
		LOG("guest %s prepared: service %s, domain %s, rings %zu KiB, channel %s", name, service,
		    M.regions[domain]->name, g->ring_map_size >> 10, g->sock_path);
	}
	const struct region *reg = M.regions[domain];
	json_t *mem = json_array();
	/* the rings come from sluiced's ivshmem server (ivshmem-doorbell), with the eventfds */
	json_array_append_new(mem, json_pack("{s:s,s:s,s:I}", "id", "rings", "server", g->ivsh_path, "size",
					     (json_int_t)g->ring_map_size));
	json_array_append_new(mem, mem_entry("region", reg->fd, reg->file_size));
	if (reg->pipe_base)
		json_array_append_new(mem, mem_entry("pipes", reg->pipe_fd, reg->pipe_file_size));
	return json_pack("{s:b,s:s,s:s,s:s,s:s,s:b,s:o}", "ok", 1, "name", g->name, "service", g->service, "domain",
			 reg->name, "channel", g->sock_path, "huge", reg->huge, "memory", mem);
}

int guest_release(const char *name, char *err, size_t errlen)
{
	struct guest *g = guest_find(name);
	if (!g) {
		snprintf(err, errlen, "guest_release: no guest named '%s'", name);
		return -1;
	}
	if (guest_busy(g)) {
		snprintf(err, errlen, "guest_release: guest %s is attached (stop its QEMU first)", name);
		return -1;
	}
	guest_destroy(g);
	LOG("guest %s released", name);
	return 0;
}

void guest_release_all(void)
{
	for (unsigned i = 0; i < SL_MAX_GUESTS; i++)
		if (guests[i].used)
			guest_destroy(&guests[i]);
}

/* One message of QEMU's ivshmem server protocol: a little-endian int64, with at most one fd. */
static int ivsh_send(int sock, int64_t v, int fd)
{
	struct iovec iov = { .iov_base = &v, .iov_len = sizeof(v) };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(v) ? 0 : -1;
}

/* QEMU's ivshmem-doorbell realizes by reading, in order: the protocol version (0), its own peer id
 * (1: the guest), the shared memory (-1 + the rings memfd), then every peer's vectors (id + eventfd,
 * once per vector), its own last. Peer 0 is sluiced: the guest's doorbell writes for it land in
 * tx_kick_fd; the guest's own vector 0 is rx_kick_fd, which QEMU turns into an MSI-X interrupt. */
void guest_ivshmem_accept(uint32_t idx)
{
	if (idx >= SL_MAX_GUESTS || !guests[idx].used)
		return;
	struct guest *g = &guests[idx];
	for (;;) {
		int fd = accept4(g->ivsh_listen, NULL, NULL, SOCK_CLOEXEC); /* blocking: 5 small messages */
		if (fd < 0)
			return;
		if (ivsh_send(fd, 0, -1) < 0 || ivsh_send(fd, 1, -1) < 0 || ivsh_send(fd, -1, g->ring_fd) < 0 ||
		    ivsh_send(fd, 0, g->tx_kick_fd) < 0 || ivsh_send(fd, 1, g->rx_kick_fd) < 0) {
			LOG("guest %s: ivshmem server: %s", g->name, strerror(errno));
			close(fd);
			continue;
		}
		if (g->ivsh_conn >= 0) /* the QEMU before (restarted): its end is gone or going */
			close(g->ivsh_conn);
		g->ivsh_conn = fd; /* kept open: QEMU reads a closed server as peers leaving */
	}
}

void guest_adopt_rings(struct nf *nf, struct guest *g)
{
	nf->ring_fd = -1; /* the guest's: stays across attaches */
	nf->ring_map = g->ring_map;
	nf->ring_map_size = g->ring_map_size;
	nf->rx = (struct sl_ring *)((uint8_t *)g->ring_map + g->rx_off);
	nf->tx = (struct sl_ring *)((uint8_t *)g->ring_map + g->tx_off);
	sl_ring_init(nf->rx, M.cfg.ring_size);
	sl_ring_init(nf->tx, M.cfg.ring_size);
	nf->info = (struct sl_nf_info *)((uint8_t *)g->ring_map + g->info_off);
}

json_t *guest_list(void)
{
	json_t *a = json_array();
	for (unsigned i = 0; i < SL_MAX_GUESTS; i++) {
		struct guest *g = &guests[i];
		if (!g->used)
			continue;
		bool att = guest_busy(g) && M.nfs[g->nf].state == NF_ATTACHED;
		json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:s,s:b,s:i}", "name", g->name, "service", g->service,
						   "domain", M.regions[g->domain]->name, "channel", g->sock_path,
						   "attached", att, "pid", att ? (int)M.nfs[g->nf].pid : 0));
	}
	return a;
}
