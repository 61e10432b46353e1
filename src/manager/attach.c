/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The NF attach socket (docs/abi.md): HELLO -> INIT -> ADD_REGION ->
 * ADD_RING x2 -> CONNECTED, and DISCONNECT or EOF to end. Every setup step
 * here has its twin in nf_detach().
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <rte_cycles.h>

#include "sluice/ring.h"
#include "sluiced.h"

#define ATTACH_TIMEOUT_MS 5000

static int send_msg(int fd, const struct sl_msg *m, const int *fds, int nfds)
{
	struct iovec iov = { .iov_base = (void *)m, .iov_len = sizeof(*m) };
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds > 0) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	return n == (ssize_t)sizeof(*m) ? 0 : -1;
}

static void send_disconnect(int fd, uint32_t code, const char *reason)
{
	struct sl_msg m;
	sl_msg_init(&m, SL_MSG_DISCONNECT);
	m.u.disconnect.code = code;
	snprintf(m.u.disconnect.reason, sizeof(m.u.disconnect.reason), "%s", reason ? reason : "");
	(void)send_msg(fd, &m, NULL, 0);
}

int attach_listen(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", M.nf_sock_path);
	unlink(M.nf_sock_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(M.nf_sock_path, 0660) < 0 ||
	    listen(fd, 128) < 0) {
		LOG("nf socket %s: %s", M.nf_sock_path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	M.nf_listen = fd;
	return 0;
}

static int find_free_slot(void)
{
	for (uint32_t i = 0; i < M.max_nfs; i++)
		if (M.nfs[i].state == NF_FREE)
			return (int)i;
	return -1;
}

void attach_accept(void)
{
	for (;;) {
		int fd = accept4(M.nf_listen, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		struct ucred cr;
		socklen_t crl = sizeof(cr);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) < 0 ||
		    !(cr.uid == 0 || cr.uid == geteuid() || cr.gid == getegid())) {
			LOG("nf socket: refused peer uid %u", (unsigned)cr.uid);
			send_disconnect(fd, SL_ERR_PERM, "peer credentials refused");
			close(fd);
			continue;
		}
		attach_open(fd, 0);
	}
}

/* QEMU of guest slot idx connected its virtio-serial channel (guest.c): that connection is the
 * guest NF's attach socket. */
void attach_guest_accept(uint32_t idx)
{
	struct guest *g = guest_get((int)idx + 1);
	if (!g)
		return;
	for (;;) {
		int fd = accept4(g->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (guest_busy(g)) {
			LOG("guest %s: refused a second channel connection (one QEMU per guest)", g->name);
			close(fd);
			continue;
		}
		g->nf = attach_open(fd, (int)idx + 1);
	}
}

int attach_open(int fd, int guest)
{
	struct ucred cr = { 0 };
	socklen_t crl = sizeof(cr);
	getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl); /* a guest's: its QEMU */
	int slot = find_free_slot();
	if (slot < 0) {
		LOG("nf socket: refused pid %d: all %u NF slots in use", (int)cr.pid, M.max_nfs);
		send_disconnect(fd, SL_ERR_LIMIT, "too many NFs (sluiced.max_nfs)");
		close(fd);
		return -1;
	}
	struct nf *nf = &M.nfs[slot];
	memset(nf, 0, offsetof(struct nf, rx));
	nf->state = NF_HELLO;
	nf->sock = fd;
	nf->guest = guest;
	nf->ring_fd = nf->rx_kick_fd = nf->tx_kick_fd = -1;
	nf->pid = cr.pid;
	nf->uid = cr.uid;
	/* a guest's NF says INIT once the guest has booted: the deadline starts then (guest_accept is
	 * at QEMU's start), so a guest gets its boot time on top */
	nf->deadline_ms = now_ms() + (guest ? GUEST_BOOT_TIMEOUT_MS : 0) + ATTACH_TIMEOUT_MS;
	snprintf(nf->name, sizeof(nf->name), "(pid %d)", (int)cr.pid);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP,
				  .data.u64 = ((uint64_t)EP_NF << 32) | (uint32_t)slot };
	epoll_ctl(M.epfd, EPOLL_CTL_ADD, fd, &ev);
	struct sl_msg m;
	sl_msg_init(&m, SL_MSG_HELLO);
	m.u.hello.max_nfs = M.max_nfs;
	m.u.hello.ring_size = M.cfg.ring_size;
	snprintf(m.u.hello.manager, sizeof(m.u.hello.manager), "sluiced " SLUICED_VERSION);
	if (send_msg(fd, &m, NULL, 0) < 0) {
		nf_detach(nf, 0, "hello failed");
		return -1;
	}
	return slot;
}

/* A process NF's rings: a sealed memfd of its own holding RX ring, TX ring and info page. 0 or an
 * enum sl_err. */
static int process_rings_map(struct nf *nf, uint32_t slots)
{
	size_t one = RTE_ALIGN_CEIL(sl_ring_bytes(slots), 4096);
	nf->ring_map_size = 2 * one + NFINFO_BYTES;
	/* Sealed at its size: an NF that could shrink the memfd would kill sluiced with SIGBUS on its
	 * next access (and F_SEAL_SEAL: it cannot add seals of its own either). */
	nf->ring_fd = memfd_create("sluice-nf-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (nf->ring_fd < 0 || ftruncate(nf->ring_fd, (off_t)nf->ring_map_size) < 0 ||
	    fcntl(nf->ring_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		return SL_ERR_NOMEM;
	nf->ring_map = mmap(NULL, nf->ring_map_size, PROT_READ | PROT_WRITE, MAP_SHARED, nf->ring_fd, 0);
	if (nf->ring_map == MAP_FAILED) {
		nf->ring_map = NULL;
		return SL_ERR_NOMEM;
	}
	nf->rx = nf->ring_map;
	nf->tx = (struct sl_ring *)((uint8_t *)nf->ring_map + one);
	sl_ring_init(nf->rx, slots);
	sl_ring_init(nf->tx, slots);
	nf->info = (struct sl_nf_info *)((uint8_t *)nf->ring_map + 2 * one);
	return SL_OK;
}

/* Create the NF's shared rings and eventfds. Returns 0 or an enum sl_err. */
static int nf_rings_create(struct nf *nf)
{
	uint32_t slots = M.cfg.ring_size;
	struct guest *g = guest_get(nf->guest);
	if (g) /* its rings are in the memory its QEMU maps (guest.c) */
		guest_adopt_rings(nf, g);
	else if (nf->guest)
		return SL_ERR_SHUTDOWN; /* released meanwhile */
	else {
		int rc = process_rings_map(nf, slots);
		if (rc != SL_OK)
			return rc;
	}
	char names[SL_MAX_PORTS][SL_NAME_MAX];
	for (uint32_t i = 0; i < M.nports && i < SL_MAX_PORTS; i++)
		snprintf(names[i], SL_NAME_MAX, "%s", M.ports[i].name);
	nfinfo_init(nf->info, (const char(*)[SL_NAME_MAX])names, M.nports);
	nf->lend_max = slots;
	if (g) { /* the ones its QEMU holds (guest.c: the ivshmem server's vectors) */
		nf->rx_kick_fd = fcntl(g->rx_kick_fd, F_DUPFD_CLOEXEC, 0);
		nf->tx_kick_fd = fcntl(g->tx_kick_fd, F_DUPFD_CLOEXEC, 0);
	} else {
		nf->rx_kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		nf->tx_kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	}
	if (nf->rx_kick_fd < 0 || nf->tx_kick_fd < 0)
		return SL_ERR_NOMEM;
	return SL_OK;
}

static void nf_rings_destroy(struct nf *nf)
{
	if (nf->ring_map && nf->ring_fd >= 0) /* a guest's rings stay with its slot */
		munmap(nf->ring_map, nf->ring_map_size);
	nf->ring_map = NULL;
	nf->rx = nf->tx = NULL;
	nf->info = NULL;
	nf->po = NULL;
	if (nf->ring_fd >= 0)
		close(nf->ring_fd);
	if (nf->rx_kick_fd >= 0)
		close(nf->rx_kick_fd);
	if (nf->tx_kick_fd >= 0)
		close(nf->tx_kick_fd);
	nf->ring_fd = nf->rx_kick_fd = nf->tx_kick_fd = -1;
}

static void handle_init(struct nf *nf, const struct sl_msg *m)
{
	const struct sl_msg_init *in = &m->u.init;
	for (uint32_t i = 0; i < M.max_nfs; i++) {
		struct nf *o = &M.nfs[i];
		if (o != nf && o->state == NF_ATTACHED && !strcmp(o->name, in->name)) {
			LOG("nf %s: refused: name already attached (pid %d)", in->name, (int)o->pid);
			nf_detach(nf, SL_ERR_NAME, "an NF with this name is attached");
			return;
		}
	}
	struct guest *gs = guest_get(nf->guest);
	if (nf->guest && (!gs || strcmp(gs->name, in->name) || strcmp(gs->service, in->service))) {
		char why[SL_REASON_MAX + 2 * SL_NAME_MAX];
		snprintf(why, sizeof(why), "this guest channel is for NF %s of service %s", gs ? gs->name : "(released)",
			 gs ? gs->service : "-");
		snprintf(nf->name, sizeof(nf->name), "%s", in->name);
		nf_detach(nf, SL_ERR_PERM, why);
		return;
	}
	int ci = config_service_index(&M.cfg, in->service); /* -1: a service the config does not name */
	if (M.cfg.attach_token) { /* docs/abi.md "Service tokens" */
		const struct cfg_auth *a = ci >= 0 ? &M.cfg.auth[ci] : NULL;
		uint8_t diff = a && a->has_token ? 0 : 1; /* constant time: every byte is compared */
		for (unsigned i = 0; i < SL_TOKEN_MAX; i++)
			diff |= (uint8_t)(in->token[i] ^ (a ? a->token[i] : 0));
		if (ci < 0 || diff) {
			char why[SL_REASON_MAX];
			snprintf(why, sizeof(why), ci < 0 ? "service '%s' is not in sluiced's config"
						 : "wrong attach token for service '%s' (SLUICE_NF_TOKEN)", in->service);
			if (ci < 0)
				M.attach_refused.unknown_service++;
			else
				M.attach_refused.bad_token++;
			snprintf(nf->name, sizeof(nf->name), "%s", in->name);
			nf_detach(nf, SL_ERR_PERM, why);
			return;
		}
	}
	int svc = service_get_or_create(in->service);
	if (svc < 0) {
		nf_detach(nf, SL_ERR_LIMIT, "too many services");
		return;
	}
	snprintf(nf->name, sizeof(nf->name), "%s", in->name);
	nf->service = (uint16_t)svc;
	/* its trust domain and access (docs/abi.md "Trust domains"); a service not in the config: default, rw */
	nf->domain = ci >= 0 ? M.cfg.service_domain[ci] : 0;
	nf->ro = ci >= 0 && M.cfg.service_ro[ci];
	nf->wakeup = in->wakeup;
	nf->doorbell = nf->guest && (in->flags & SL_INIT_F_DOORBELL); /* a process has its eventfds */
	nf->batch = in->batch ? in->batch : 1;
	nf->timeout_us = in->timeout_us;
	nf->timeout_cyc = (uint64_t)in->timeout_us * M.tsc_hz / 1000000u;
	memset(&nf->st, 0, sizeof(nf->st));
	int rc = nf_rings_create(nf);
	if (rc != SL_OK) {
		nf_detach(nf, (uint32_t)rc, "could not allocate rings");
		return;
	}
	if (ci >= 0 && M.cfg.auth && M.cfg.auth[ci].quota) /* nfs[].quota: its lending budget, <= its ring */
		nf->lend_max = M.cfg.auth[ci].quota;
	/* supply (docs/abi.md "Supply"): up to half its lending budget, so that it can always take
	 * packets as well; never for an access: ro NF, which cannot write a frame */
	nf->supply_want = (in->flags & SL_INIT_F_SUPPLY) && !nf->ro ? RTE_MIN((uint32_t)in->supply, nf->lend_max / 2) : 0;
	nf->supply_held = 0;
	struct sl_msg out;
	sl_msg_init(&out, SL_MSG_ADD_REGION);
	/* only its own domain's region: its descriptors carry that index */
	const struct region *reg = M.regions[nf->domain];
	out.u.add_region = (struct sl_msg_add_region){ .size = reg->size, .index = reg->index,
						       .buf_count = reg->nbufs, .buf_size = reg->buf_size,
						       .headroom = reg->headroom,
						       .flags = nf->ro ? SL_REGION_F_RO : 0 };
	/* a guest gets no fds: the same memory is its ivshmem BARs (guest.c) */
	int ok = send_msg(nf->sock, &out, nf->ro ? &reg->ro_fd : &reg->fd, gs ? 0 : 1) == 0;
	size_t one = RTE_ALIGN_CEIL(sl_ring_bytes(M.cfg.ring_size), 4096);
	for (uint32_t dir = 0; ok && dir < 2; dir++) {
		sl_msg_init(&out, SL_MSG_ADD_RING);
		out.u.add_ring = (struct sl_msg_add_ring){ .offset = gs ? (dir ? gs->tx_off : gs->rx_off) : dir * one,
							   .map_size = nf->ring_map_size,
							   .index = 0, .dir = dir, .size = M.cfg.ring_size };
		int fds[2] = { nf->ring_fd, dir == SL_RING_RX ? nf->rx_kick_fd : nf->tx_kick_fd };
		ok = send_msg(nf->sock, &out, fds, gs ? 0 : 2) == 0;
	}
	/* Pipes (docs/abi.md "Pipes"): an rw NF whose SDK takes them gets its domain's pipe area */
	nf->po = NULL;
	nf->pipe_to = nf->pipe_from = -1;
	nf->pipe_epoch = nf->pipe_open_epoch = 0;
	if (ok && reg->pipe_base && !nf->ro && !nf->supply_want && (in->flags & SL_INIT_F_PIPES)) {
		uint64_t off;
		struct region *wr = M.regions[nf->domain];
		nf->po = pipe_ring_reset(wr, (uint32_t)(nf - M.nfs), M.cfg.ring_size, &off);
		sl_msg_init(&out, SL_MSG_ADD_PIPE);
		out.u.add_pipe = (struct sl_msg_add_pipe){ .map_size = wr->pipe_bytes, .out_offset = off,
							   .size = M.cfg.ring_size };
		ok = send_msg(nf->sock, &out, &wr->pipe_fd, gs ? 0 : 1) == 0;
	}
	struct wcmd c = { .type = WCMD_NF_ADD, .nf = (uint32_t)(nf - M.nfs) };
	nf->worker = worker_for_service(nf->service); /* for good: its rings have one reader */
	if (ok) {
		worker_call(&c);
		if (c.result != 0) {
			nf_detach(nf, SL_ERR_LIMIT, "service has too many instances");
			return;
		}
		nf->state = NF_ATTACHED;
		sched_nf_attached(nf);
		sl_msg_init(&out, SL_MSG_CONNECTED);
		out.u.connected = (struct sl_msg_connected){ .nf_id = c.nf, .service_id = nf->service,
							     .port_count = M.nports,
							     .info_offset = gs ? gs->info_off : 2 * one,
							     .info_size = NFINFO_BYTES };
		ok = send_msg(nf->sock, &out, NULL, 0) == 0;
	}
	if (!ok) {
		nf_detach(nf, 0, "attach messages could not be sent");
		return;
	}
	LOG("nf %s attached: id %u, service %s, %s %d, wakeup %s", nf->name, c.nf,
	    M.services[nf->service].name, gs ? "in a guest, QEMU pid" : "pid", (int)nf->pid, sl_wakeup_name(nf->wakeup));
}

void attach_event(struct nf *nf, uint32_t events)
{
	for (;;) {
		union {
			char buf[CMSG_SPACE(sizeof(int) * 8)];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = { .iov_base = nf->inbuf + nf->inlen, .iov_len = SL_MSG_SIZE - nf->inlen };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				     .msg_controllen = sizeof(ctl.buf) };
		ssize_t n = recvmsg(nf->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		int nfds = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); n > 0 && c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
				int fds[8];
				memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)k);
				for (int i = 0; i < k; i++)
					close(fds[i]); /* NFs never send fds */
				nfds += k;
			}
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (events & (EPOLLHUP | EPOLLERR))
				nf_detach(nf, 0, "socket error");
			return;
		}
		if (n == 0 && nf->inlen > 0) {
			LOG("nf %s: connection closed in the middle of a message (%zu of %d bytes)", nf->name,
			    nf->inlen, SL_MSG_SIZE);
			nf_detach(nf, SL_ERR_TRUNCATED, "connection closed in the middle of a message");
			return;
		}
		if (n <= 0) {
			nf_detach(nf, 0, n == 0 ? "connection closed" : strerror(errno));
			return;
		}
		if (nfds || (mh.msg_flags & MSG_CTRUNC)) {
			nf_detach(nf, SL_ERR_FDS, "NFs must not send file descriptors");
			return;
		}
		nf->inlen += (size_t)n;
		if (nf->inlen < SL_MSG_SIZE)
			continue;
		nf->inlen = 0;
		const struct sl_msg *m = (const struct sl_msg *)nf->inbuf;
		uint16_t expect = nf->state == NF_HELLO ? SL_MSG_INIT : SL_MSG_DISCONNECT;
		int rc = sl_msg_check(m, SL_MSG_SIZE, 0, expect);
		if (rc != SL_OK) {
			LOG("nf %s: bad message (type %u): %s", nf->name, m->type, sl_strerror(rc));
			nf_detach(nf, (uint32_t)rc, sl_strerror(rc));
			return;
		}
		if (m->type == SL_MSG_DISCONNECT) {
			char why[SL_REASON_MAX + 32];
			snprintf(why, sizeof(why), "disconnected: %s", m->u.disconnect.reason);
			nf_detach(nf, 0, why);
			return;
		}
		handle_init(nf, m);
		if (nf->state != NF_ATTACHED)
			return;
	}
}

void nf_detach(struct nf *nf, uint32_t code, const char *reason)
{
	if (nf->state == NF_FREE)
		return;
	if (code)
		send_disconnect(nf->sock, code, reason);
	epoll_ctl(M.epfd, EPOLL_CTL_DEL, nf->sock, NULL);
	close(nf->sock);
	nf->sock = -1;
	uint32_t id = (uint32_t)(nf - M.nfs);
	if (nf->state == NF_ATTACHED) {
		struct wcmd c = { .type = WCMD_NF_REMOVE, .nf = id };
		worker_call(&c);
		sched_nf_detached(nf);
		LOG("nf %s detached (%s): %u returned packets processed, %u held buffers reclaimed", nf->name,
		    reason ? reason : "", c.drained, c.result);
	} else if (code) {
		LOG("nf %s refused: %s", nf->name, reason ? reason : sl_strerror((int)code));
	}
	nf_rings_destroy(nf);
	nf->state = NF_FREE;
}

void attach_faults(void)
{
	worker_fault_ack();
	for (uint32_t i = 0; i < M.max_nfs; i++) {
		struct nf *nf = &M.nfs[i];
		uint8_t f = __atomic_load_n(&nf->fault, __ATOMIC_ACQUIRE);
		if (nf->state == NF_ATTACHED && f != NF_RING_OK) {
			LOG("nf %s broke the ring protocol: %s", nf->name, nf_ring_err_text(f));
			nf_detach(nf, SL_ERR_RING, nf_ring_err_text(f));
		}
	}
}

void attach_check_timeouts(uint64_t now)
{
	for (uint32_t i = 0; i < M.max_nfs; i++) {
		struct nf *nf = &M.nfs[i];
		if (nf->state == NF_HELLO && now > nf->deadline_ms)
			nf_detach(nf, SL_ERR_TIMEOUT, "attach did not complete within 5 s");
	}
}
