/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libsluice: NF side of the attach protocol and the receive loop.
 *
 * Attach sequence expected from the manager (abi.h):
 *   <- HELLO, -> INIT, <- ADD_REGION + 1 fd (any number, before the rings),
 *   <- ADD_RING + 2 fds (one RX, one TX, either order), <- CONNECTED.
 * A DISCONNECT may arrive at any point and ends the attach with -code.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "sluice/nf.h"
#include "sluice/ring.h"
#include "sl_internal.h"

#define SL_REGIONS      256
#define SL_MSG_MAX_FDS  2
#define SL_LIVENESS_NS  1000000ull /* poll mode: check the socket every ~1 ms */
#define SL_SPIN_CHECK   4096       /* empty polls between clock reads */
/* Empty polls between sched_yield() calls: an idle NF hands the core over at
 * every empty poll, so NFs sharing a core (the next hop, a tester) run within
 * microseconds instead of after its spin; alone on a core the call returns at
 * once. 64 made a packet wait out other spinners' turns (bench/notes.md). */
#define SL_YIELD_EVERY  1
#define SL_YIELD_BUSY   8          /* busy bursts between sched_yield() calls */
/* A guest NF without a doorbell (docs/guests.md "Wakeups") naps this long when block/adaptive would
 * sleep: the manager cannot kick it, so it never announces sleep (need_kick) and looks again. */
#define SL_GUEST_NAP_NS 50000ull

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/* The handler-time histogram's buckets (ns, powers of 4): 256 ns .. 4 ms, and more. */
#define SL_HANDLER_BUCKETS 9
static const char *const handler_le_name[SL_HANDLER_BUCKETS] = {
	"sdk.handler_le_256", "sdk.handler_le_1024", "sdk.handler_le_4096", "sdk.handler_le_16384",
	"sdk.handler_le_65536", "sdk.handler_le_262144", "sdk.handler_le_1048576", "sdk.handler_le_4194304",
	"sdk.handler_le_inf",
};

struct sl_region {
	uint8_t *base;     /* NULL: index not mapped */
	size_t size;
	uint32_t buf_size;
};

struct sl_nf {
	int sock;
	int rx_efd, tx_efd;          /* rx: we sleep on it; tx: we kick the manager */
	struct sl_ring *rx, *tx;
	void *ring_map[2];           /* indexed by enum sl_ring_dir */
	size_t ring_map_size[2];
	int stop;                    /* sl_nf_stop (atomic access) */
	int sandboxed;               /* the strict sandbox's filter is installed */
	int realtime;                /* SCHED_FIFO/RR (sluiced.nf_sched), seen before the sandbox */
	int rseq_checked;            /* sl_nf_run looked at rseq once (a second run must not retry) */
	int yield_asked;             /* sl_nf_yield() during this batch */
	uint32_t nf_id, service_id, port_count;
	struct sl_nf_info *info;     /* the info page (abi.h), NULL if the manager gave none */
	/* pipes (docs/abi.md "Pipes"): the domain's pipe map, our pipe ring (plain NEXT descriptors go
	 * there) and the upstream's pipe ring we read, if the manager joined us to one */
	void *pipe_map;
	size_t pipe_map_size;
	uint32_t pipe_size;          /* slots of every pipe ring */
	struct sl_ring *pipe_out;
	struct sl_ring *pipe_in;     /* NULL: no pipe input */
	uint32_t pipe_epoch;         /* the pipe_in epoch we follow */
	uint32_t pipe_cons;          /* our index in pipe_in */
	uint32_t pipe_fence;         /* read pipe_in only once our RX consumer index reached this */
	int pipe_fence_ok;           /* ... which it has (older packets came through the RX ring) */
	uint64_t pipe_dev, pipe_ino; /* which pipe area is mapped (one per trust domain) */
	/* fused pipes (docs/groups.md "Run to completion"): a host's NFs (sl_nf_host) that one pipe
	 * joins hand NEXT packets to each other by a call, not through the pipe ring */
	sl_handler_fn host_handler;  /* NULL: not hosted */
	void *host_arg;
	struct sl_nf *host_next;     /* the host's list of its NFs */
	struct sl_nf *fuse_down;     /* the hosted NF that reads our pipe ring, if any */
	struct sl_nf *fuse_up;       /* the hosted NF whose pipe ring we read, if any */
	char port_name[SL_INFO_PORTS_MAX][SL_NAME_MAX]; /* copied from it at attach */
	int guest;                   /* attached through the guest transport (guest.c) */
	int bell_efd;                /* guest with a doorbell: the eventfd its interrupt signals, else -1 */
	struct sl_guest_devs gdev;
	struct sl_nf_config cfg;
	struct sl_nf_stats stats;
	/* the SDK's own counters in the info page (sdk.*, sluice stats and the exporter read them):
	 * batches, sleeps and wakeups as in stats, and the handler's time per batch as a histogram
	 * (SLUICE_NF_HANDLER_HIST=0 turns its two clock reads per batch off) */
	struct {
		uint64_t *batches, *sleeps, *wakeups, *handler_ns_sum;
		uint64_t *handler_le[SL_HANDLER_BUCKETS];
	} pub;
	int handler_hist;
	/* re-attach (docs/abi.md "Restarts"): the last connection's TX ring map stays mapped until the
	 * next one is mapped over it (MAP_FIXED), so the info page, and the counter pointers the NF holds,
	 * keep their address; its counters wait in saved[] meanwhile */
	void *old_tx_map;
	size_t old_tx_map_size;
	struct sl_counter *saved;
	uint32_t nsaved;
	struct sl_region region[SL_REGIONS];
	/* supply (docs/abi.md "Supply"): empty buffers sluiced handed us for frames of our own */
	struct sl_desc *supply;      /* NULL: cfg.supply == 0 */
	uint32_t nsupply, supply_cap;
};

/* ------------------------------------------------------------------------ */
/* the SDK's counters in the info page                                         */

static inline void pub_inc(uint64_t *own, uint64_t *pub)
{
	++*own;
	if (pub != NULL)
		__atomic_store_n(pub, *own, __ATOMIC_RELAXED);
}

uint64_t *sl_nf_counter(struct sl_nf *nf, const char *name);

/* Register (again, after a re-attach: the same names find their entries) the sdk.* counters. */
static void pub_init(struct sl_nf *nf)
{
	nf->pub.batches = sl_nf_counter(nf, "sdk.batches");
	nf->pub.sleeps = sl_nf_counter(nf, "sdk.sleeps");
	nf->pub.wakeups = sl_nf_counter(nf, "sdk.wakeups");
	if (nf->pub.batches)
		*nf->pub.batches = nf->stats.batches;
	if (nf->pub.sleeps)
		*nf->pub.sleeps = nf->stats.sleeps;
	if (nf->pub.wakeups)
		*nf->pub.wakeups = nf->stats.wakeups;
	const char *h = getenv("SLUICE_NF_HANDLER_HIST");
	nf->handler_hist = !(h != NULL && strcmp(h, "0") == 0);
	if (!nf->handler_hist)
		return;
	nf->pub.handler_ns_sum = sl_nf_counter(nf, "sdk.handler_ns_sum");
	for (int b = 0; b < SL_HANDLER_BUCKETS; b++)
		if ((nf->pub.handler_le[b] = sl_nf_counter(nf, handler_le_name[b])) == NULL)
			nf->handler_hist = 0; /* no room for all of them: none */
	if (nf->pub.handler_ns_sum == NULL)
		nf->handler_hist = 0;
}

static inline unsigned handler_bucket(uint64_t ns)
{
	if (ns <= 256)
		return 0;
	unsigned lg = 63u - (unsigned)__builtin_clzll(ns - 1); /* ns in (2^lg, 2^(lg+1)] */
	unsigned b = (lg - 8u) / 2u + 1u;                        /* (256*4^(b-1), 256*4^b] */
	return b < SL_HANDLER_BUCKETS - 1 ? b : SL_HANDLER_BUCKETS - 1;
}

/* ------------------------------------------------------------------------ */
/* time                                                                        */

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Milliseconds left until deadline (CLOCK_MONOTONIC ns), at least 0. */
static int ms_left(uint64_t deadline)
{
	uint64_t now = now_ns(CLOCK_MONOTONIC);
	if (now >= deadline)
		return 0;
	uint64_t ms = (deadline - now + 999999) / 1000000;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* ------------------------------------------------------------------------ */
/* messages                                                                    */

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* Receive exactly one SL_MSG_SIZE message and up to SL_MSG_MAX_FDS fds before
 * `deadline`. Returns SL_OK (with *nfds set) or an enum sl_err; on error no
 * fd is left open. The message itself is not validated here. */
static int recv_msg(int sock, struct sl_msg *m, int *fds, int *nfds, uint64_t deadline)
{
	size_t got = 0;
	int nf = 0, err = SL_OK;

	while (got < SL_MSG_SIZE) {
		struct pollfd pfd = { .fd = sock, .events = POLLIN };
		int rc = poll(&pfd, 1, ms_left(deadline));
		if (rc < 0) {
			if (errno == EINTR)
				continue;
			err = SL_ERR_IO;
			break;
		}
		if (rc == 0) {
			err = SL_ERR_TIMEOUT;
			break;
		}
		union {
			char buf[CMSG_SPACE(sizeof(int) * 8)];
			struct cmsghdr align;
		} cbuf;
		struct iovec iov = { .iov_base = (char *)m + got, .iov_len = SL_MSG_SIZE - got };
		struct msghdr mh = {
			.msg_iov = &iov, .msg_iovlen = 1,
			.msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf.buf),
		};
		ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (n < 0 && errno == ENOTSOCK) { /* the guest's virtio-serial port: bytes only */
			mh.msg_controllen = 0;
			mh.msg_flags = 0;
			n = read(sock, (char *)m + got, SL_MSG_SIZE - got);
		}
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
				continue;
			err = SL_ERR_IO;
			break;
		}
		/* collect every fd that came, even if there are too many, so none leaks */
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (nf < SL_MSG_MAX_FDS)
					fds[nf++] = fd;
				else {
					close(fd);
					err = SL_ERR_FDS;
				}
			}
		}
		if (mh.msg_flags & MSG_CTRUNC)
			err = SL_ERR_FDS;
		if (n == 0) {
			if (err == SL_OK)
				err = got == 0 ? SL_ERR_IO : SL_ERR_TRUNCATED;
			break;
		}
		got += (size_t)n;
		if (err != SL_OK)
			break;
	}
	if (err != SL_OK) {
		close_fds(fds, nf);
		nf = 0;
	}
	*nfds = nf;
	return err;
}

/* Send one message (no fds). Returns SL_OK or SL_ERR_IO. */
static int send_msg(int sock, const struct sl_msg *m)
{
	size_t off = 0;
	while (off < SL_MSG_SIZE) {
		ssize_t n = send(sock, (const char *)m + off, SL_MSG_SIZE - off, MSG_NOSIGNAL);
		if (n < 0 && errno == ENOTSOCK) /* the guest's virtio-serial port */
			n = write(sock, (const char *)m + off, SL_MSG_SIZE - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return SL_ERR_IO;
		}
		off += (size_t)n;
	}
	return SL_OK;
}

static void send_disconnect(int sock, int code, const char *reason)
{
	struct sl_msg m;
	sl_msg_init(&m, SL_MSG_DISCONNECT);
	m.u.disconnect.code = (uint32_t)code;
	snprintf(m.u.disconnect.reason, sizeof(m.u.disconnect.reason), "%s", reason);
	(void)send_msg(sock, &m);
}

/* Code carried by a DISCONNECT, never 0 (0 would read as success). */
static int disconnect_code(const struct sl_msg *m)
{
	return m->u.disconnect.code != SL_OK ? (int)m->u.disconnect.code : SL_ERR_SHUTDOWN;
}

/* ------------------------------------------------------------------------ */
/* attach                                                                      */

static int fd_size_at_least(int fd, uint64_t size)
{
	struct stat st;
	return fstat(fd, &st) == 0 && st.st_size >= 0 && (uint64_t)st.st_size >= size;
}

/* ADD_REGION: map the region memfd. Consumes fd. */
static int add_region(struct sl_nf *nf, const struct sl_msg_add_region *r, int fd)
{
	struct sl_region *reg = &nf->region[r->index]; /* index < 256 checked by sl_msg_check */
	int err = SL_OK;

	if (reg->base != NULL)
		err = SL_ERR_FIELD; /* duplicate index */
	else if (r->size > SIZE_MAX || !fd_size_at_least(fd, r->size))
		err = SL_ERR_MAP;
	else {
		/* access: ro -- the fd is read-only; a write through this map faults in this NF only */
		int prot = r->flags & SL_REGION_F_RO ? PROT_READ : PROT_READ | PROT_WRITE;
		void *p = mmap(NULL, (size_t)r->size, prot, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			err = SL_ERR_MAP;
		else {
			reg->base = p;
			reg->size = (size_t)r->size;
			reg->buf_size = r->buf_size;
		}
	}
	close(fd);
	return err;
}

/* Map a ring memfd. The TX ring of a re-attach goes where the last connection's was, if it is as
 * large (same ring size: the same config), so the info page inside it keeps its address. */
static void *map_ring(struct sl_nf *nf, unsigned dir, size_t size, int fd)
{
	if (dir == SL_RING_TX && nf->old_tx_map != NULL && nf->old_tx_map_size == size) {
		void *p = mmap(nf->old_tx_map, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
		if (p != MAP_FAILED)
			nf->old_tx_map = NULL; /* replaced in place: nothing left to unmap */
		return p;
	}
	return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}

/* ADD_RING: map the ring memfd (fds[0]) and keep the eventfd (fds[1]). */
static int add_ring(struct sl_nf *nf, const struct sl_msg_add_ring *r, int *fds)
{
	unsigned dir = r->dir; /* RX or TX, checked by sl_msg_check */
	int err = SL_OK;
	void *p = MAP_FAILED;

	if (nf->ring_map[dir] != NULL)
		err = SL_ERR_ORDER; /* second ring of the same direction */
	else if (r->map_size > SIZE_MAX || !fd_size_at_least(fds[0], r->map_size))
		err = SL_ERR_MAP;
	else if ((p = map_ring(nf, dir, (size_t)r->map_size, fds[0])) == MAP_FAILED)
		err = SL_ERR_MAP;
	else {
		struct sl_ring *ring = (struct sl_ring *)((uint8_t *)p + r->offset);
		if (ring->magic != SL_ABI_MAGIC || ring->size != r->size || ring->mask != r->size - 1) {
			munmap(p, (size_t)r->map_size);
			err = SL_ERR_FIELD;
		} else {
			nf->ring_map[dir] = p;
			nf->ring_map_size[dir] = (size_t)r->map_size;
			if (dir == SL_RING_RX) {
				nf->rx = ring;
				nf->rx_efd = fds[1];
			} else {
				nf->tx = ring;
				nf->tx_efd = fds[1];
			}
		}
	}
	close(fds[0]);
	if (err != SL_OK)
		close(fds[1]);
	return err;
}

/* ADD_PIPE: map the domain's pipe memfd; our own pipe ring must be there, initialised. */
static int add_pipe(struct sl_nf *nf, const struct sl_msg_add_pipe *pm, int fd)
{
	int err = SL_OK;
	void *p = MAP_FAILED;
	if (nf->pipe_map != NULL)
		err = SL_ERR_ORDER;
	else if (pm->map_size > SIZE_MAX || !fd_size_at_least(fd, pm->map_size))
		err = SL_ERR_MAP;
	else if ((p = mmap(NULL, (size_t)pm->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		err = SL_ERR_MAP;
	else {
		struct sl_ring *ring = (struct sl_ring *)((uint8_t *)p + pm->out_offset);
		if (ring->magic != SL_ABI_MAGIC || ring->size != pm->size || ring->mask != pm->size - 1) {
			munmap(p, (size_t)pm->map_size);
			err = SL_ERR_FIELD;
		} else {
			struct stat sb;
			nf->pipe_dev = nf->pipe_ino = 0;
			if (fstat(fd, &sb) == 0) {
				nf->pipe_dev = (uint64_t)sb.st_dev;
				nf->pipe_ino = (uint64_t)sb.st_ino;
			}
			nf->pipe_map = p;
			nf->pipe_map_size = (size_t)pm->map_size;
			nf->pipe_size = pm->size;
			nf->pipe_out = ring;
		}
	}
	close(fd);
	return err;
}

/* CONNECTED: find the info page in the TX ring's map of the ring memfd; copy the port names. An info
 * page that does not fit or lacks the magic is ignored (no counters, no port names). */
static void take_info(struct sl_nf *nf, const struct sl_msg_connected *c)
{
	size_t map = nf->ring_map_size[SL_RING_TX];
	if (c->info_size < sizeof(struct sl_nf_info) || c->info_offset % SL_CACHE_LINE || c->info_offset > map ||
	    c->info_size > map - c->info_offset)
		return;
	struct sl_nf_info *info = (struct sl_nf_info *)((uint8_t *)nf->ring_map[SL_RING_TX] + c->info_offset);
	if (__atomic_load_n(&info->magic, __ATOMIC_ACQUIRE) != SL_ABI_MAGIC)
		return;
	nf->info = info;
	uint32_t n = info->port_count < SL_INFO_PORTS_MAX ? info->port_count : SL_INFO_PORTS_MAX;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(nf->port_name[i], info->port_name[i], SL_NAME_MAX);
		nf->port_name[i][SL_NAME_MAX - 1] = '\0';
	}
}

static struct sl_nf *nf_alloc(const struct sl_nf_config *cfg)
{
	struct sl_nf *nf = calloc(1, sizeof(*nf));
	if (nf == NULL)
		return NULL;
	nf->sock = nf->rx_efd = nf->tx_efd = -1;
	nf->gdev.port_fd = nf->gdev.rings_fd = nf->gdev.region_fd = nf->gdev.pipes_fd = -1;
	nf->gdev.vfio_dev = nf->gdev.vfio_group = nf->gdev.vfio_container = -1;
	nf->bell_efd = -1;
	nf->cfg = *cfg;
	if (cfg->supply > 0) {
		nf->supply_cap = cfg->supply > SL_SUPPLY_MAX ? SL_SUPPLY_MAX : cfg->supply;
		nf->supply = calloc(nf->supply_cap, sizeof(*nf->supply));
		if (nf->supply == NULL) {
			free(nf);
			return NULL;
		}
	}
	return nf;
}

static void fuse_unlink(struct sl_nf *nf);

/* Teardown twin of the handshake: lets go of one connection (socket, eventfds, rings, pipes,
 * regions) and leaves nf ready for another. keep_tx: leave the TX ring mapped as old_tx_map, for
 * the next connection's TX ring to replace in place (re-attach). */
static void conn_undo(struct sl_nf *nf, int keep_tx)
{
	if (nf->sock >= 0)
		close(nf->sock);
	nf->sock = -1;
	if (nf->guest)
		nf->gdev.port_fd = -1; /* that was nf->sock */
	sl__guest_close(&nf->gdev);
	if (nf->bell_efd >= 0)
		close(nf->bell_efd);
	if (nf->rx_efd >= 0)
		close(nf->rx_efd);
	if (nf->tx_efd >= 0)
		close(nf->tx_efd);
	nf->bell_efd = nf->rx_efd = nf->tx_efd = -1;
	for (int d = 0; d < 2; d++) {
		if (nf->ring_map[d] == NULL)
			continue;
		if (d == SL_RING_TX && keep_tx && nf->old_tx_map == NULL) {
			nf->old_tx_map = nf->ring_map[d];
			nf->old_tx_map_size = nf->ring_map_size[d];
		} else
			munmap(nf->ring_map[d], nf->ring_map_size[d]);
		nf->ring_map[d] = NULL;
	}
	nf->rx = nf->tx = NULL;
	nf->nsupply = 0; /* they were buffers of that connection's regions */
	nf->info = NULL;
	memset(&nf->pub, 0, sizeof(nf->pub)); /* they pointed into the info page: pub_init finds them again */
	nf->handler_hist = 0;
	fuse_unlink(nf);
	if (nf->pipe_map != NULL)
		munmap(nf->pipe_map, nf->pipe_map_size);
	nf->pipe_map = NULL;
	nf->pipe_out = nf->pipe_in = NULL;
	nf->pipe_epoch = nf->pipe_cons = nf->pipe_fence = 0;
	nf->pipe_fence_ok = 0;
	nf->pipe_dev = nf->pipe_ino = 0;
	for (int i = 0; i < SL_REGIONS; i++)
		if (nf->region[i].base != NULL)
			munmap(nf->region[i].base, nf->region[i].size);
	memset(nf->region, 0, sizeof(nf->region));
}

/* Teardown twin of attach: releases whatever attach got so far. */
static void host_remove(struct sl_nf *nf);

static void nf_free(struct sl_nf *nf)
{
	conn_undo(nf, 0);
	host_remove(nf);
	if (nf->old_tx_map != NULL)
		munmap(nf->old_tx_map, nf->old_tx_map_size);
	free(nf->saved);
	free(nf->supply);
	free(nf);
}

static int build_init(const struct sl_nf_config *cfg, struct sl_msg *m)
{
	sl_msg_init(m, SL_MSG_INIT);
	if (strnlen(cfg->name, sizeof(cfg->name)) == sizeof(cfg->name) ||
	    strnlen(cfg->service, sizeof(cfg->service)) == sizeof(cfg->service) ||
	    (unsigned)cfg->wakeup >= SL_WAKE__COUNT)
		return SL_ERR_FIELD;
	memcpy(m->u.init.name, cfg->name, sizeof(m->u.init.name));
	memcpy(m->u.init.service, cfg->service, sizeof(m->u.init.service));
	m->u.init.wakeup = (uint8_t)cfg->wakeup;
	if (cfg->supply > SL_SUPPLY_MAX)
		return SL_ERR_FIELD;
	/* an NF with a supply gets no pipes: its frames must pass the worker, which counts the supply */
	m->u.init.flags = cfg->supply ? SL_INIT_F_SUPPLY : SL_INIT_F_PIPES;
	m->u.init.supply = (uint16_t)cfg->supply;
	m->u.init.batch = cfg->batch;
	m->u.init.timeout_us = cfg->timeout_us;
	m->u.init.pid = (uint32_t)getpid();
	size_t tl = strnlen(cfg->token, sizeof(cfg->token));
	if (tl > SL_TOKEN_MAX)
		return SL_ERR_FIELD;
	memcpy(m->u.init.token, cfg->token, tl); /* NUL-padded: the body is zero-filled */
	/* catch a bad config here, with the same rules the manager applies */
	return sl_msg_check(m, sizeof(*m), 0, SL_MSG_INIT);
}

/* In a guest the manager sends ADD_REGION, ADD_RING and ADD_PIPE without fds: what a process would
 * receive is an ivshmem BAR here (a dup of its sysfs resource fd), and the eventfds are local ones
 * (the manager cannot reach them: docs/guests.md "Wakeups"). Fills fds/nfds as recv_msg would. */
static int guest_fds(struct sl_nf *nf, const struct sl_msg *m, int *fds, int *nfds)
{
	if (*nfds != 0 || m->magic != SL_ABI_MAGIC)
		return SL_OK; /* sl_msg_check says what is wrong */
	int src = -1;
	switch (m->type) {
	case SL_MSG_ADD_REGION:
		if (m->u.add_region.index != nf->gdev.hdr.region_index)
			return SL_ERR_MAP;
		src = nf->gdev.region_fd;
		break;
	case SL_MSG_ADD_RING:
		src = nf->gdev.rings_fd;
		break;
	case SL_MSG_ADD_PIPE:
		if (nf->gdev.pipes_fd < 0)
			return SL_ERR_MAP;
		src = nf->gdev.pipes_fd;
		break;
	default:
		return SL_OK;
	}
	if ((fds[0] = fcntl(src, F_DUPFD_CLOEXEC, 0)) < 0)
		return SL_ERR_NOMEM;
	*nfds = 1;
	if (m->type == SL_MSG_ADD_RING) {
		/* RX: the doorbell interrupt's eventfd (sluiced's kick), if we have one; else local ones */
		if (nf->bell_efd >= 0 && m->u.add_ring.dir == SL_RING_RX)
			fds[1] = fcntl(nf->bell_efd, F_DUPFD_CLOEXEC, 0);
		else
			fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (fds[1] < 0) {
			close(fds[0]);
			*nfds = 0;
			return SL_ERR_NOMEM;
		}
		*nfds = 2;
	}
	return SL_OK;
}

/* The handshake after connect. Returns SL_OK or an enum sl_err; on a protocol
 * error detected locally it has already told the manager why. */
static int handshake(struct sl_nf *nf, uint64_t deadline)
{
	struct sl_msg m;
	int fds[SL_MSG_MAX_FDS], nfds, err;

	/* <- HELLO */
	if ((err = recv_msg(nf->sock, &m, fds, &nfds, deadline)) != SL_OK)
		return err;
	if ((err = sl_msg_check(&m, sizeof(m), nfds, SL_MSG_HELLO)) != SL_OK)
		goto reject;
	if (m.type == SL_MSG_DISCONNECT)
		return disconnect_code(&m);

	/* -> INIT (validated by sl_nf_attach before connecting) */
	build_init(&nf->cfg, &m);
	if (nf->bell_efd >= 0)
		m.u.init.flags |= SL_INIT_F_DOORBELL;
	if ((err = send_msg(nf->sock, &m)) != SL_OK)
		return err;

	/* <- ADD_REGION*, ADD_RING x2, CONNECTED */
	for (;;) {
		if ((err = recv_msg(nf->sock, &m, fds, &nfds, deadline)) != SL_OK)
			return err;
		if (nf->guest && (err = guest_fds(nf, &m, fds, &nfds)) != SL_OK)
			goto reject;
		if ((err = sl_msg_check(&m, sizeof(m), nfds, 0)) != SL_OK)
			goto reject;
		switch (m.type) {
		case SL_MSG_DISCONNECT:
			return disconnect_code(&m);
		case SL_MSG_ADD_REGION:
			if (nf->ring_map[0] != NULL || nf->ring_map[1] != NULL) {
				err = SL_ERR_ORDER; /* regions come before rings */
				goto reject;
			}
			if ((err = add_region(nf, &m.u.add_region, fds[0])) != SL_OK)
				goto rejected;
			break;
		case SL_MSG_ADD_RING:
			if ((err = add_ring(nf, &m.u.add_ring, fds)) != SL_OK)
				goto rejected;
			break;
		case SL_MSG_ADD_PIPE:
			if (nf->rx == NULL || nf->tx == NULL) {
				err = SL_ERR_ORDER; /* after the rings */
				goto reject;
			}
			if ((err = add_pipe(nf, &m.u.add_pipe, fds[0])) != SL_OK)
				goto rejected;
			break;
		case SL_MSG_CONNECTED:
			if (nf->rx == NULL || nf->tx == NULL) {
				err = SL_ERR_ORDER;
				goto reject;
			}
			nf->nf_id = m.u.connected.nf_id;
			nf->service_id = m.u.connected.service_id;
			nf->port_count = m.u.connected.port_count;
			take_info(nf, &m.u.connected);
			return SL_OK;
		default: /* HELLO or INIT again */
			err = SL_ERR_ORDER;
			goto reject;
		}
	}

reject:
	close_fds(fds, nfds);
rejected:
	send_disconnect(nf->sock, err, "nf: bad message from manager");
	return err;
}

/* Connect to cfg.socket_path and attach. Returns SL_OK or an enum sl_err (SL_ERR_IO with errno set
 * when the socket cannot be reached). */
static int conn_open(struct sl_nf *nf, uint64_t deadline)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, nf->cfg.socket_path, strlen(nf->cfg.socket_path) + 1); /* length checked at attach */
	if ((nf->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    connect(nf->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return SL_ERR_IO;
	return handshake(nf, deadline);
}

/* An inherited attach socket (cfg.sock_fd): close-on-exec from now on, and it must be a UNIX stream
 * socket. Returns 0, or -1 with errno set. */
static int take_sock_fd(int fd)
{
	int type = 0, domain = 0;
	socklen_t l1 = sizeof(type), l2 = sizeof(domain);
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l1) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l2) < 0)
		return -1;
	if (type != SOCK_STREAM || domain != AF_UNIX) {
		errno = EPROTOTYPE;
		return -1;
	}
	return 0;
}

int sl_nf_attach(const struct sl_nf_config *cfg, struct sl_nf **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int err, saved_errno = 0;

	if (out == NULL || cfg == NULL)
		return -SL_ERR_FIELD;
	*out = NULL;
	int fd = cfg->sock_fd; /* ours from here on, whatever happens */
	struct sl_msg init;
	if ((fd < 0 && (cfg->socket_path[0] == '\0' ||
			strnlen(cfg->socket_path, sizeof(cfg->socket_path)) >= sizeof(sa.sun_path))) ||
	    (unsigned)cfg->sandbox > SL_SANDBOX_STRICT || build_init(cfg, &init) != SL_OK) {
		if (fd >= 0)
			close(fd);
		return -SL_ERR_FIELD; /* bad socket path, sandbox, name, service, wakeup, batch or timeout */
	}

	uint64_t deadline = now_ns(CLOCK_MONOTONIC) + (uint64_t)cfg->attach_timeout_ms * 1000000ull;
	struct sl_nf *nf = nf_alloc(cfg);
	if (nf == NULL) {
		if (fd >= 0)
			close(fd);
		return -SL_ERR_NOMEM;
	}

	/* docs/guests.md: SLUICE_NF_SOCKET=guest, or no socket here but a "sluice" virtio-serial port */
	int guest = fd < 0 && (strcmp(cfg->socket_path, "guest") == 0 ||
			       (access(cfg->socket_path, F_OK) != 0 && sl__guest_present()));
	if (guest) {
		nf->guest = 1;
		if ((err = sl__guest_open(&nf->gdev)) == SL_OK) {
			nf->sock = nf->gdev.port_fd;
			nf->bell_efd = sl__guest_doorbell(&nf->gdev); /* -1: naps instead of sleeping */
			err = handshake(nf, deadline);
		}
		saved_errno = errno;
	} else if (fd >= 0) {
		nf->sock = fd;
		if (take_sock_fd(fd) < 0) {
			saved_errno = errno;
			err = SL_ERR_IO;
		} else {
			err = handshake(nf, deadline);
			saved_errno = errno;
		}
	} else {
		err = conn_open(nf, deadline);
		saved_errno = errno;
	}
	if (err != SL_OK) {
		nf_free(nf);
		errno = saved_errno; /* lets callers print the system reason for SL_ERR_IO */
		return -err;
	}
	pub_init(nf);
	*out = nf;
	return 0;
}

void sl_nf_detach(struct sl_nf *nf)
{
	if (nf == NULL)
		return;
	if (nf->sock >= 0) {
		send_disconnect(nf->sock, SL_ERR_SHUTDOWN, "nf detach");
		shutdown(nf->sock, SHUT_RDWR);
	}
	nf_free(nf);
}

/* ------------------------------------------------------------------------ */
/* run loop                                                                    */

static volatile sig_atomic_t sig_stop;
static struct sl_nf *volatile sig_nf; /* NF whose eventfd the signal handler pokes */

static void kick_fd(int fd)
{
	uint64_t one = 1;
	ssize_t rc = write(fd, &one, sizeof(one));
	(void)rc;
}

static void on_signal(int signo)
{
	(void)signo;
	int e = errno;
	sig_stop = 1;
	struct sl_nf *nf = sig_nf;
	if (nf != NULL && nf->rx_efd >= 0)
		kick_fd(nf->rx_efd); /* wakes a poll() in another thread too */
	errno = e;
}

int sl__rseq_unregister(void)
{
	if (__rseq_size == 0)
		return 1; /* glibc registered none (GLIBC_TUNABLES=glibc.pthread.rseq=0, or too old a kernel) */
	struct rseq *area = (struct rseq *)((char *)__builtin_thread_pointer() + __rseq_offset);
	if ((int32_t)__atomic_load_n(&area->cpu_id, __ATOMIC_RELAXED) < 0)
		return 1; /* not registered (the kernel marks an area it lets go RSEQ_CPU_ID_UNINITIALIZED) */
	/* the kernel wants the length glibc registered with: __rseq_size, or the 32-byte area of glibc
	 * versions whose __rseq_size counts only the fields in use */
	if (syscall(SYS_rseq, area, __rseq_size, RSEQ_FLAG_UNREGISTER, RSEQ_SIG) == 0)
		return 1;
	if (errno == EINVAL && __rseq_size != 32 && syscall(SYS_rseq, area, 32, RSEQ_FLAG_UNREGISTER, RSEQ_SIG) == 0)
		return 1;
	return 0;
}

void sl_nf_stop(struct sl_nf *nf)
{
	if (nf == NULL)
		return;
	__atomic_store_n(&nf->stop, 1, __ATOMIC_RELAXED);
	if (nf->rx_efd >= 0)
		kick_fd(nf->rx_efd);
}

void sl_nf_yield(struct sl_nf *nf)
{
	if (nf != NULL)
		nf->yield_asked = 1;
}

static int stopping(struct sl_nf *nf)
{
	return sig_stop || __atomic_load_n(&nf->stop, __ATOMIC_RELAXED);
}

/* The socket is readable or hung up while running: it can only be a
 * DISCONNECT or the end. Returns the code to return from sl_nf_run, or 0 if
 * nothing happened after all. */
static int socket_event(struct sl_nf *nf)
{
	struct sl_msg m;
	int fds[SL_MSG_MAX_FDS], nfds;
	int err = recv_msg(nf->sock, &m, fds, &nfds, now_ns(CLOCK_MONOTONIC) + 1000000000ull);
	if (err == SL_ERR_TIMEOUT)
		return 0;
	if (err != SL_OK)
		return err;
	err = sl_msg_check(&m, sizeof(m), nfds, SL_MSG_DISCONNECT);
	close_fds(fds, nfds);
	if (err == SL_OK)
		return disconnect_code(&m);
	send_disconnect(nf->sock, err, "nf: bad message from manager");
	return err;
}

/* Non-blocking look at the socket. Returns as socket_event, 0 if quiet. */
static int check_socket(struct sl_nf *nf)
{
	struct pollfd pfd = { .fd = nf->sock, .events = POLLIN };
	if (poll(&pfd, 1, 0) <= 0 || pfd.revents == 0)
		return 0;
	return socket_event(nf);
}

/* ------------------------------------------------------------------------ */
/* pipes (docs/abi.md "Pipes")                                                 */

/* ---- Fused pipes (docs/groups.md "Run to completion") ----
 * A host (sluice-group) turns several NFs in one thread and lists them with sl_nf_host. When the
 * manager joins two of them by a pipe -- `down` reads `up`'s pipe ring -- up's plain NEXT packets go
 * straight into down's handler, in the same call, instead of onto the ring for down's next turn: a
 * chain segment inside the group runs to completion. Each NF still puts what it decided (the
 * segment's last NEXT, an OUT, a DROP, a TO_NF) on its own TX ring, so the manager sees every
 * decision where it was made; it moves each buffer to the NF that returns it once, at the return,
 * counting it through the NFs between (datapath.c "Cohosted NFs"). The pipe ring stays the way in
 * and out of fusion: up fuses only once down has read everything up put there before. */

static struct sl_nf *hosted; /* the NFs this process hosts (a host has one thread: no lock) */

#define SL_FUSE_DEPTH_MAX 16 /* calls deep (a burst's arrays each): static next hops make no cycle */

static void fuse_unlink(struct sl_nf *nf)
{
	if (nf->fuse_up != NULL)
		nf->fuse_up->fuse_down = NULL;
	if (nf->fuse_down != NULL)
		nf->fuse_down->fuse_up = NULL;
	nf->fuse_up = nf->fuse_down = NULL;
}

/* nf (hosted) now reads the pipe ring its pipe_in names: whose, among the hosted NFs? */
static void fuse_link(struct sl_nf *nf)
{
	if (nf->fuse_up != NULL) {
		nf->fuse_up->fuse_down = NULL;
		nf->fuse_up = NULL;
	}
	if (nf->host_handler == NULL || nf->pipe_in == NULL || nf->pipe_ino == 0)
		return;
	uint64_t off = (uint64_t)((uint8_t *)nf->pipe_in - (uint8_t *)nf->pipe_map);
	for (struct sl_nf *u = hosted; u != NULL; u = u->host_next) {
		if (u == nf || u->pipe_out == NULL || u->pipe_ino != nf->pipe_ino || u->pipe_dev != nf->pipe_dev ||
		    (uint64_t)((uint8_t *)u->pipe_out - (uint8_t *)u->pipe_map) != off)
			continue;
		if (u->fuse_down != NULL)
			u->fuse_down->fuse_up = NULL;
		u->fuse_down = nf;
		nf->fuse_up = u;
		return;
	}
}

static void host_remove(struct sl_nf *nf)
{
	fuse_unlink(nf);
	for (struct sl_nf **pp = &hosted; *pp != NULL; pp = &(*pp)->host_next) {
		if (*pp == nf) {
			*pp = nf->host_next;
			break;
		}
	}
	nf->host_next = NULL;
	nf->host_handler = NULL;
}

int sl_nf_host(struct sl_nf *nf, sl_handler_fn handler, void *arg)
{
	if (nf == NULL || handler == NULL || nf->guest)
		return -SL_ERR_FIELD;
	if (nf->host_handler == NULL) {
		nf->host_next = hosted;
		hosted = nf;
	}
	nf->host_handler = handler;
	nf->host_arg = arg;
	/* a pipe the manager opened before: both ends may be known now */
	for (struct sl_nf *d = hosted; d != NULL; d = d->host_next)
		if (d->fuse_up == NULL)
			fuse_link(d);
	return 0;
}

/* The manager moved our pipe input: stop reading the old pipe ring, start on the new one (or none),
 * then say so: cons first, ack last, both release-stored. */
static void pipe_follow(struct sl_nf *nf)
{
	struct sl_pipe_in *pi = &nf->info->pipe_in;
	uint32_t e = __atomic_load_n(&pi->epoch, __ATOMIC_ACQUIRE);
	if (e == nf->pipe_epoch)
		return;
	uint64_t off = __atomic_load_n(&pi->offset, __ATOMIC_RELAXED);
	uint32_t start = __atomic_load_n(&pi->start, __ATOMIC_RELAXED);
	uint32_t fence = __atomic_load_n(&pi->fence, __ATOMIC_RELAXED);
	nf->pipe_in = NULL;
	if (off != SL_PIPE_NONE && off % SL_CACHE_LINE == 0 && off <= nf->pipe_map_size &&
	    sl_ring_bytes(nf->pipe_size) <= nf->pipe_map_size - off) {
		struct sl_ring *r = (struct sl_ring *)((uint8_t *)nf->pipe_map + off);
		if (r != nf->pipe_out) {
			nf->pipe_in = r;
			nf->pipe_cons = start;
			nf->pipe_fence = fence;
			nf->pipe_fence_ok = 0;
		}
	}
	fuse_link(nf);
	__atomic_store_n(&pi->cons, nf->pipe_cons, __ATOMIC_RELEASE);
	nf->pipe_epoch = e;
	__atomic_store_n(&pi->ack, e, __ATOMIC_RELEASE);
}

/* May we read the pipe yet? Not before the packets the manager put in our RX ring before it opened
 * the pipe (they are older): until our RX consumer index reaches the fence. */
static inline int pipe_open_now(struct sl_nf *nf)
{
	if (nf->pipe_in == NULL)
		return 0;
	if (!nf->pipe_fence_ok)
		nf->pipe_fence_ok = (int32_t)(nf->rx->cons - nf->pipe_fence) >= 0;
	return nf->pipe_fence_ok;
}

static inline int pipe_pending(struct sl_nf *nf)
{
	return pipe_open_now(nf) && __atomic_load_n(&nf->pipe_in->prod, __ATOMIC_ACQUIRE) != nf->pipe_cons;
}

/* Take up to max descriptors from the upstream's pipe ring. Its indices are the upstream's (same trust
 * domain); a producer index more than a ring ahead is read as nothing (the manager catches it). */
static uint32_t pipe_read(struct sl_nf *nf, struct sl_desc *d, uint32_t max)
{
	if (!pipe_open_now(nf))
		return 0;
	struct sl_ring *r = nf->pipe_in;
	uint32_t n = __atomic_load_n(&r->prod, __ATOMIC_ACQUIRE) - nf->pipe_cons;
	if (n > nf->pipe_size)
		return 0;
	if (n > max)
		n = max;
	uint32_t mask = nf->pipe_size - 1;
	for (uint32_t i = 0; i < n; i++)
		d[i] = r->desc[(nf->pipe_cons + i) & mask];
	nf->pipe_cons += n;
	__atomic_store_n(&nf->info->pipe_in.cons, nf->pipe_cons, __ATOMIC_RELEASE);
	return n;
}

/* Block until the RX eventfd is kicked or the socket/stop needs attention.
 * Returns 0 or the code sl_nf_run must return. */
static int block_rx(struct sl_nf *nf)
{
	int rc = 0;
	if (nf->guest && nf->bell_efd < 0) { /* no doorbell: nap, then look again (docs/guests.md "Wakeups") */
		struct pollfd pfd = { .fd = nf->sock, .events = POLLIN };
		struct timespec nap = { .tv_sec = 0, .tv_nsec = SL_GUEST_NAP_NS };
		pub_inc(&nf->stats.sleeps, nf->pub.sleeps);
		if (ppoll(&pfd, 1, &nap, NULL) > 0 && pfd.revents)
			rc = socket_event(nf);
		return rc;
	}
	if (!sl_ring_prepare_sleep(nf->rx))
		return 0; /* something arrived meanwhile */
	if (pipe_pending(nf)) { /* the manager kicks a sleeper for its pipe too; no need to sleep */
		sl_ring_awake(nf->rx);
		return 0;
	}
	if (!stopping(nf)) {
		struct pollfd pfd[2] = {
			{ .fd = nf->rx_efd, .events = POLLIN },
			{ .fd = nf->sock, .events = POLLIN },
		};
		pub_inc(&nf->stats.sleeps, nf->pub.sleeps);
		if (poll(pfd, 2, -1) > 0) {
			if (pfd[0].revents & POLLIN) {
				uint64_t v;
				ssize_t n = read(nf->rx_efd, &v, sizeof(v));
				(void)n;
				pub_inc(&nf->stats.wakeups, nf->pub.wakeups);
			}
			if (pfd[1].revents)
				rc = socket_event(nf);
		}
		/* EINTR: a signal; the caller re-checks the stop flags */
	}
	sl_ring_awake(nf->rx);
	return rc;
}

/* Publish n descriptors on ring r (the TX ring or our pipe ring), waiting for room if need be.
 * Returns 0, or a code if the manager went away while we waited. */
static int ring_put(struct sl_nf *nf, struct sl_ring *r, const struct sl_desc *d, uint32_t n)
{
	uint32_t done = 0, spins = 0;
	int rc = 0;
	if (n == 0)
		return 0;
	for (;;) {
		done += sl_ring_enqueue_burst(r, d + done, n - done);
		if (done == n || stopping(nf))
			break;
		/* Full: its reader must run. On a pipe that is often an NF on this same core, so give the
		 * core up rather than spin out the time slice. */
		if (++spins % 16 == 0)
			sched_yield();
		else
			cpu_relax();
		if (spins % SL_SPIN_CHECK == 0 && (rc = check_socket(nf)) != 0)
			break;
	}
	nf->stats.tx_pkts += done;
	if (done != 0 && sl_ring_needs_kick(r)) {
		r->prod_kicks++;
		if (nf->guest) { /* a guest rings sluiced through its doorbell register; without one it is never parked */
			if (nf->bell_efd >= 0)
				sl__guest_ring(&nf->gdev);
		} else
			kick_fd(nf->tx_efd);
	}
	return rc;
}

/* May up hand its NEXT packets to down by a call now? Only while down follows up's pipe ring, may
 * read it (its fence passed), and has read all up put there: nothing older waits on the ring. */
static inline int fuse_ready(const struct sl_nf *up, struct sl_nf *down)
{
	return down->pipe_in != NULL && down->pipe_map != NULL && down->info != NULL && down->rx != NULL &&
	       pipe_open_now(down) && down->pipe_cons == up->pipe_out->prod;
}

static int run_descs(struct sl_nf *nf, sl_handler_fn handler, void *arg, struct sl_desc *d, uint32_t n,
		     unsigned depth);

/* Hand back n descriptors: plain NEXT ones to the next NF of the chain when it is fused to us (see
 * "Fused pipes"), else on our pipe ring when we have one (the manager or the next NF reads it);
 * everything else on the TX ring. */
static int tx_all(struct sl_nf *nf, struct sl_desc *d, uint32_t n, unsigned depth)
{
	if (nf->pipe_out == NULL)
		return ring_put(nf, nf->tx, d, n);
	struct sl_desc next[SL_BURST_MAX];
	uint32_t nn = 0, k = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (d[i].action == SL_ACT_NEXT)
			next[nn++] = d[i];
		else
			d[k++] = d[i];
	}
	int rc = ring_put(nf, nf->tx, d, k);
	if (rc != 0 || nn == 0)
		return rc;
	struct sl_nf *down = nf->fuse_down;
	if (down != NULL && depth < SL_FUSE_DEPTH_MAX && fuse_ready(nf, down)) {
		nf->stats.tx_pkts += nn;
		int r = run_descs(down, down->host_handler, down->host_arg, next, nn, depth + 1);
		return r < 0 ? -r : 0;
	}
	return ring_put(nf, nf->pipe_out, next, nn);
}

/* One burst: RX ring -> handler -> TX ring. Returns packets handled (>= 0)
 * or a negated code to stop with. */
static int burst(struct sl_nf *nf, sl_handler_fn handler, void *arg)
{
	struct sl_desc d[SL_BURST_MAX];
	uint32_t n = sl_ring_dequeue_burst(nf->rx, d, SL_BURST_MAX);

	if (nf->pipe_map != NULL && nf->info != NULL) {
		pipe_follow(nf);
		if (n < SL_BURST_MAX)
			n += pipe_read(nf, d + n, SL_BURST_MAX - n);
	}
	return run_descs(nf, handler, arg, d, n, 0);
}

/* The n descriptors in d (taken from our rings, or handed over by a fused upstream) through handler
 * and back. Returns n, or a negated code. */
static int run_descs(struct sl_nf *nf, sl_handler_fn handler, void *arg, struct sl_desc *d, uint32_t n,
		     unsigned depth)
{
	struct sl_desc bad[SL_BURST_MAX];
	struct sl_pkt pkts[SL_BURST_MAX];
	uint16_t in_port[SL_BURST_MAX];
	unsigned np = 0, nbad = 0, nsup = 0;
	if (n == 0)
		return 0;
	pub_inc(&nf->stats.batches, nf->pub.batches);
	for (uint32_t i = 0; i < n; i++) {
		const struct sl_region *r = &nf->region[d[i].region];
		/* never hand the handler a descriptor that points outside its buffer */
		if (r->base == NULL || d[i].head > d[i].off ||
		    (uint64_t)d[i].off - d[i].head + r->buf_size > r->size ||
		    (uint32_t)d[i].head + d[i].len > r->buf_size) {
			bad[nbad] = d[i];
			bad[nbad].action = SL_ACT_DROP;
			bad[nbad].dest = 0;
			nbad++;
			continue;
		}
		if (d[i].dest == SL_DEST_SUPPLY && d[i].len == 0 && nf->supply != NULL) { /* for sl_nf_alloc */
			nsup++;
			if (nf->nsupply < nf->supply_cap) {
				nf->supply[nf->nsupply++] = d[i];
			} else { /* more than we asked for: back */
				bad[nbad] = d[i];
				bad[nbad].action = SL_ACT_DROP;
				bad[nbad].dest = 0;
				nbad++;
			}
			continue;
		}
		pkts[np].d = d[i];
		pkts[np].d.action = SL_ACT_NEXT;
		pkts[np].base = r->base;
		pkts[np].buf_size = r->buf_size;
		in_port[np] = d[i].dest;
		np++;
	}
	nf->stats.rx_pkts += n - nsup;
	if (np != 0) {
		if (nf->handler_hist) {
			uint64_t t0 = now_ns(CLOCK_MONOTONIC);
			handler(nf, pkts, np, arg);
			uint64_t t = now_ns(CLOCK_MONOTONIC) - t0;
			uint64_t *c = nf->pub.handler_le[handler_bucket(t)];
			__atomic_store_n(c, *c + 1, __ATOMIC_RELAXED);
			__atomic_store_n(nf->pub.handler_ns_sum, *nf->pub.handler_ns_sum + t, __ATOMIC_RELAXED);
		} else {
			handler(nf, pkts, np, arg);
		}
	}
	unsigned k = 0;
	for (unsigned i = 0; i < np; i++) {
		if (pkts[i].d.action == SL_ACT_KEEP)
			continue; /* the NF keeps it: sl_nf_emit hands it back later */
		d[k] = pkts[i].d;
		/* NEXT ignores dest; on a pipe the next NF reads this descriptor as its RX one, where dest
		 * is the packet's ingress port: keep it so (docs/abi.md "Pipes") */
		if (d[k].action == SL_ACT_NEXT)
			d[k].dest = in_port[i];
		k++;
	}
	for (unsigned i = 0; i < nbad; i++)
		d[k++] = bad[i];
	int rc = tx_all(nf, d, k, depth);
	return rc != 0 ? -rc : (int)n;
}

/* ------------------------------------------------------------------------ */
/* supply: frames of our own (docs/abi.md "Supply")                            */

int sl_nf_alloc(struct sl_nf *nf, struct sl_pkt *p)
{
	if (nf == NULL || p == NULL || nf->nsupply == 0)
		return -SL_ERR_NOMEM;
	const struct sl_desc *d = &nf->supply[--nf->nsupply];
	const struct sl_region *r = &nf->region[d->region]; /* checked when it came (run_descs) */
	p->d = *d;
	p->d.action = SL_ACT_NEXT;
	p->d.dest = 0;
	p->base = r->base;
	p->buf_size = r->buf_size;
	return 0;
}

int sl_nf_emit(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n)
{
	struct sl_desc d[SL_BURST_MAX];
	if (nf == NULL || (pkts == NULL && n != 0))
		return -SL_ERR_FIELD;
	while (n > 0) {
		unsigned k = n < SL_BURST_MAX ? n : SL_BURST_MAX;
		for (unsigned i = 0; i < k; i++)
			d[i] = pkts[i].d;
		int rc = ring_put(nf, nf->tx, d, k);
		if (rc != 0)
			return -rc;
		pkts += k;
		n -= k;
	}
	return 0;
}

unsigned sl_nf_supply(const struct sl_nf *nf)
{
	return nf != NULL ? nf->nsupply : 0;
}

uint32_t sl_nf_ring_size(const struct sl_nf *nf)
{
	return nf != NULL && nf->rx != NULL ? nf->rx->size : 0;
}

/* ------------------------------------------------------------------------ */
/* re-attach (docs/abi.md "Restarts")                                          */

#define SL_REATTACH_BACKOFF_MIN_NS 5000000ull   /* first retry after 5 ms ... */
#define SL_REATTACH_BACKOFF_MAX_NS 50000000ull  /* ... doubling up to 50 ms: a refused connect costs little */

/* Descriptors in a ring its consumer had not taken (0 for a corrupt one). */
static uint64_t ring_backlog(const struct sl_ring *r)
{
	if (r == NULL)
		return 0;
	uint32_t n = __atomic_load_n(&r->prod, __ATOMIC_ACQUIRE) - __atomic_load_n(&r->cons, __ATOMIC_ACQUIRE);
	return n <= r->size ? n : 0;
}

/* Keep the NF's counters (names and values, in registration order) across a re-attach. */
static void counters_save(struct sl_nf *nf)
{
	nf->nsaved = 0;
	if (nf->info == NULL)
		return;
	uint32_t used = __atomic_load_n(&nf->info->counters_used, __ATOMIC_ACQUIRE);
	if (used == 0 || used > SL_COUNTERS_MAX)
		return;
	if (nf->saved == NULL && (nf->saved = calloc(SL_COUNTERS_MAX, sizeof(*nf->saved))) == NULL)
		return;
	memcpy(nf->saved, nf->info->counter, used * sizeof(*nf->saved));
	nf->nsaved = used;
}

/* ... and write them into the new info page, at the same indices. Returns 0, or -1 if the page
 * moved (another ring size: the old page stays mapped so the NF's counter pointers stay valid,
 * but what it counts there from now on is not reported). */
static int counters_restore(struct sl_nf *nf, const void *old_info)
{
	if (nf->info == NULL || nf->nsaved == 0)
		return 0;
	memcpy(nf->info->counter, nf->saved, nf->nsaved * sizeof(*nf->saved));
	__atomic_store_n(&nf->info->counters_used, nf->nsaved, __ATOMIC_RELEASE);
	return (const void *)nf->info == old_info ? 0 : -1;
}

/* sluiced went away (code SL_ERR_IO) or is restarting (SL_ERR_RESTART): count what was in flight,
 * let go of the old connection, and attach to the next sluiced on the same socket with a bounded
 * back-off, until cfg.reattach_ms has passed. Returns 0 once attached again (or when asked to
 * stop meanwhile), else the code sl_nf_run returns. */
static int reattach(struct sl_nf *nf, int code)
{
	if (nf->cfg.reattach_ms == 0 || (code != SL_ERR_IO && code != SL_ERR_RESTART))
		return code;
	if (nf->guest || nf->cfg.sock_fd >= 0 || nf->sandboxed) {
		/* a guest's memory is QEMU's ivshmem devices of the old sluiced; a strict NF may neither
		 * connect nor map: both end here and are restarted by the supervisor */
		fprintf(stderr, "sluice-nf: %s: sluiced went away (%s); a %s NF cannot attach again by itself\n",
			nf->cfg.name, sl_strerror(code), nf->guest ? "guest" : "sandboxed");
		return code;
	}
	uint64_t lost = ring_backlog(nf->rx) + ring_backlog(nf->tx);
	const void *old_info = nf->info;
	counters_save(nf);
	fprintf(stderr, "sluice-nf: %s: sluiced %s; %llu packets in flight lost with it; attaching again "
		"(for up to %u ms)\n", nf->cfg.name, code == SL_ERR_RESTART ? "is restarting" : "went away (I/O error)",
		(unsigned long long)lost, nf->cfg.reattach_ms);
	conn_undo(nf, 1);
	uint64_t t0 = now_ns(CLOCK_MONOTONIC), end = t0 + (uint64_t)nf->cfg.reattach_ms * 1000000ull;
	uint64_t backoff = SL_REATTACH_BACKOFF_MIN_NS;
	unsigned attempts = 0;
	int err = code;
	while (!stopping(nf)) {
		uint64_t now = now_ns(CLOCK_MONOTONIC);
		uint64_t deadline = now + (uint64_t)nf->cfg.attach_timeout_ms * 1000000ull;
		attempts++;
		err = conn_open(nf, deadline < end ? deadline : end);
		if (err == SL_OK)
			break;
		conn_undo(nf, 1);
		/* not there yet (no socket, refused, closed, slow to answer) or still the old one going:
		 * wait; anything else is a refusal from the new sluiced and final */
		if (err != SL_ERR_IO && err != SL_ERR_TIMEOUT && err != SL_ERR_RESTART && err != SL_ERR_SHUTDOWN &&
		    err != SL_ERR_NAME) {
			fprintf(stderr, "sluice-nf: %s: the new sluiced refused the NF: %s\n", nf->cfg.name,
				sl_strerror(err));
			return err;
		}
		now = now_ns(CLOCK_MONOTONIC);
		if (now >= end) {
			fprintf(stderr, "sluice-nf: %s: no sluiced took the NF back within %u ms (%u attempts, last: %s)\n",
				nf->cfg.name, nf->cfg.reattach_ms, attempts, sl_strerror(err));
			return code;
		}
		uint64_t nap = backoff < end - now ? backoff : end - now;
		struct timespec ts = { .tv_sec = (time_t)(nap / 1000000000ull), .tv_nsec = (long)(nap % 1000000000ull) };
		nanosleep(&ts, NULL); /* a stop signal cuts it short */
		backoff = backoff * 2 < SL_REATTACH_BACKOFF_MAX_NS ? backoff * 2 : SL_REATTACH_BACKOFF_MAX_NS;
	}
	if (err != SL_OK)
		return 0; /* asked to stop while waiting */
	nf->stats.reattaches++;
	nf->stats.restart_lost += lost;
	int moved = counters_restore(nf, old_info);
	pub_init(nf);
	uint64_t *c;
	if ((c = sl_nf_counter(nf, "sdk.reattaches")) != NULL)
		*c = nf->stats.reattaches;
	if ((c = sl_nf_counter(nf, "sdk.restart_lost")) != NULL)
		*c = nf->stats.restart_lost;
	fprintf(stderr, "sluice-nf: %s: attached again to sluiced (nf id %u) after %.2f s, %u attempt%s%s\n",
		nf->cfg.name, nf->nf_id, (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9, attempts,
		attempts == 1 ? "" : "s",
		moved ? "; its ring size changed: counters registered before are no longer reported" : "");
	return 0;
}

int sl_nf_run(struct sl_nf *nf, sl_handler_fn handler, void *arg)
{
	struct sigaction sa, old_int, old_term;
	uint64_t idle_since = 0, next_check = 0;
	uint32_t empty = 0, busy = 0;
	int rc = 0;

	if (nf == NULL || handler == NULL)
		return -SL_ERR_FIELD;
	uint64_t spin_ns = (uint64_t)nf->cfg.spin_us * 1000ull;
	/* A busy block NF keeps the core under the fair scheduler (it sleeps when idle), but made
	 * real-time by sluiced (sluiced.nf_sched fifo, set before CONNECTED) it must hand it over too,
	 * or the NFs sharing its core would not run until it ran out of packets. */
	if (!nf->sandboxed) { /* the strict sandbox's filter traps sched_getscheduler */
		int pol = sched_getscheduler(0) & ~SCHED_RESET_ON_FORK;
		nf->realtime = pol == SCHED_FIFO || pol == SCHED_RR;
		/* A real-time NF takes turns with the NFs on its core: one sched_yield() and one switch per
		 * turn, and after each the kernel rewrites this thread's rseq area on the way back to user
		 * space -- 15-20 % of a turn here (bench/notes.md "What a turn is made of"). Nothing in the
		 * loop uses rseq; SLUICE_NF_RSEQ=keep leaves it for an NF whose code does (tcmalloc's
		 * per-CPU caches). */
		if (nf->realtime && !nf->rseq_checked) {
			const char *v = getenv("SLUICE_NF_RSEQ");
			int keep = v != NULL && strcmp(v, "keep") == 0;
			if (v != NULL && !keep && strcmp(v, "off") != 0)
				fprintf(stderr, "sluice-nf: SLUICE_NF_RSEQ=\"%s\": expected keep or off; using off\n", v);
			if (!keep && !sl__rseq_unregister())
				fprintf(stderr, "sluice-nf: real-time: cannot unregister rseq (%s); keeping it\n", strerror(errno));
		}
		nf->rseq_checked = 1;
	}
	int busy_yield = nf->cfg.wakeup != SL_WAKE_BLOCK || nf->realtime;

	/* The strict sandbox (docs/abi.md): from here on only what this loop, stdio and malloc need.
	 * Not in sl_nf_attach, so the NF's own set-up after attach (monitor's helper thread) runs. */
	if (nf->cfg.sandbox == SL_SANDBOX_STRICT && !nf->sandboxed) {
		int e = sl__sandbox_strict(nf->sock);
		if (e != 0) {
			fprintf(stderr, "sluice-nf: sandbox: cannot install the seccomp filter (sandbox: strict): %s\n",
				strerror(-e));
			return -SL_ERR_PERM;
		}
		nf->sandboxed = 1;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART: a blocked poll() must return EINTR */
	sig_stop = 0;
	sig_nf = nf;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);

	while (!stopping(nf)) {
		int n = burst(nf, handler, arg);
		if (n < 0) {
			rc = n;
			if (reattach(nf, -rc) == 0) {
				rc = 0;
				empty = busy = 0;
				continue;
			}
			break;
		}
		if (n > 0) {
			empty = 0;
			/* A busy NF never idles: hand the core over now and then so NFs
			 * sharing it (the next hops of its chain) get to drain their rings.
			 * Real-time NFs take turns in chain order (sluiced.nf_sched fifo):
			 * a burst that was not full drained the input, so the next hop
			 * takes what it published at once, not after an empty look; full
			 * bursts go on (up to SL_YIELD_BUSY), so a loaded NF still batches. */
			++busy;
			if (nf->yield_asked || (busy_yield && ((nf->realtime && n < SL_BURST_MAX) || busy % SL_YIELD_BUSY == 0))) {
				nf->yield_asked = 0;
				sched_yield();
			}
			continue;
		}
		/* idle */
		if (nf->cfg.wakeup == SL_WAKE_BLOCK) {
			rc = -block_rx(nf);
		} else if (nf->cfg.wakeup == SL_WAKE_ADAPTIVE) {
			if (empty++ == 0)
				idle_since = now_ns(CLOCK_MONOTONIC);
			if (empty % 64 == 0 && now_ns(CLOCK_MONOTONIC) - idle_since >= spin_ns) {
				rc = -block_rx(nf);
				empty = 0;
			} else if (empty % SL_YIELD_EVERY == 0)
				sched_yield();
			else
				cpu_relax();
		} else {
			cpu_relax();
			if (++empty % SL_YIELD_EVERY == 0)
				sched_yield();
			if (empty % SL_SPIN_CHECK == 0) {
				uint64_t t = now_ns(CLOCK_MONOTONIC_COARSE);
				if (t >= next_check) {
					next_check = t + SL_LIVENESS_NS;
					rc = -check_socket(nf);
				}
			}
		}
		if (rc != 0) {
			int r = reattach(nf, -rc);
			rc = -r;
			if (r != 0)
				break;
			empty = busy = 0;
		}
	}

	/* a requested stop is consumed, so the loop can be run again */
	__atomic_store_n(&nf->stop, 0, __ATOMIC_RELAXED);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sig_nf = NULL;
	return rc;
}

/* ------------------------------------------------------------------------ */
/* hosting several NFs in one thread (nf.h "Hosts"; sluice-group)               */

int sl_nf_poll(struct sl_nf *nf, sl_handler_fn handler, void *arg)
{
	if (nf == NULL || handler == NULL)
		return -SL_ERR_FIELD;
	int n = burst(nf, handler, arg);
	if (n >= 0)
		return n;
	int r = reattach(nf, -n);
	return r == 0 ? 0 : -r;
}

int sl_nf_check(struct sl_nf *nf)
{
	if (nf == NULL)
		return -SL_ERR_FIELD;
	int rc = check_socket(nf);
	if (rc == 0)
		return 0;
	int r = reattach(nf, rc);
	return r == 0 ? 0 : -r;
}

int sl_nf_sleep_prepare(struct sl_nf *nf, int fds[2])
{
	if (nf == NULL || nf->guest || nf->rx_efd < 0)
		return 0; /* a guest NF naps (docs/guests.md): never hosted */
	if (!sl_ring_prepare_sleep(nf->rx))
		return 0; /* something arrived meanwhile */
	if (pipe_pending(nf)) {
		sl_ring_awake(nf->rx);
		return 0;
	}
	fds[0] = nf->rx_efd;
	fds[1] = nf->sock;
	pub_inc(&nf->stats.sleeps, nf->pub.sleeps);
	return 1;
}

void sl_nf_sleep_done(struct sl_nf *nf)
{
	uint64_t v;
	if (nf == NULL || nf->rx_efd < 0)
		return;
	if (read(nf->rx_efd, &v, sizeof(v)) == (ssize_t)sizeof(v)) /* EFD_NONBLOCK: EAGAIN if not kicked */
		pub_inc(&nf->stats.wakeups, nf->pub.wakeups);
	sl_ring_awake(nf->rx);
}

/* ------------------------------------------------------------------------ */
/* accessors and configuration                                                 */

uint32_t sl_nf_id(const struct sl_nf *nf) { return nf->nf_id; }
uint32_t sl_nf_service_id(const struct sl_nf *nf) { return nf->service_id; }
const char *sl_nf_name(const struct sl_nf *nf) { return nf->cfg.name; }

uint32_t sl_nf_port_count(const struct sl_nf *nf) { return nf->port_count; }

const char *sl_nf_port_name(const struct sl_nf *nf, uint32_t id)
{
	if (nf->info == NULL || id >= nf->port_count || id >= SL_INFO_PORTS_MAX)
		return NULL;
	return nf->port_name[id];
}

int sl_nf_port_id(const struct sl_nf *nf, const char *name)
{
	for (uint32_t i = 0; name != NULL && i < nf->port_count && i < SL_INFO_PORTS_MAX; i++)
		if (nf->info != NULL && strcmp(nf->port_name[i], name) == 0)
			return (int)i;
	return -1;
}

static int counter_name_ok(const char *name)
{
	size_t n = name ? strnlen(name, SL_COUNTER_NAME_MAX) : 0;
	if (n == 0 || n >= SL_COUNTER_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
		      c == '.' || c == ':' || c == '-'))
			return 0;
	}
	return 1;
}

uint64_t *sl_nf_counter(struct sl_nf *nf, const char *name)
{
	if (nf->info == NULL || !counter_name_ok(name))
		return NULL;
	uint32_t used = nf->info->counters_used;
	if (used > SL_COUNTERS_MAX)
		return NULL;
	for (uint32_t i = 0; i < used; i++)
		if (strncmp(nf->info->counter[i].name, name, SL_COUNTER_NAME_MAX) == 0)
			return &nf->info->counter[i].value;
	if (used == SL_COUNTERS_MAX)
		return NULL;
	struct sl_counter *c = &nf->info->counter[used];
	memset(c->name, 0, sizeof(c->name));
	memcpy(c->name, name, strlen(name));
	c->value = 0;
	__atomic_store_n(&nf->info->counters_used, used + 1, __ATOMIC_RELEASE); /* the name first */
	return &c->value;
}

void sl_nf_get_stats(const struct sl_nf *nf, struct sl_nf_stats *st)
{
	*st = nf->stats;
}

void sl_nf_config_default(struct sl_nf_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s", "/run/sluice/nf.sock");
	snprintf(cfg->name, sizeof(cfg->name), "%s", "nf");
	snprintf(cfg->service, sizeof(cfg->service), "%s", "nf");
	cfg->wakeup = SL_WAKE_POLL;
	cfg->batch = 32;
	cfg->timeout_us = 100;
	cfg->spin_us = 200;
	cfg->attach_timeout_ms = 5000;
	cfg->sock_fd = -1;
	cfg->sandbox = SL_SANDBOX_NONE;
}

static int env_bad(const char *var, const char *val, const char *why)
{
	fprintf(stderr, "sluice: %s=\"%s\": %s\n", var, val, why);
	return -SL_ERR_FIELD;
}

static int env_u32(const char *var, uint32_t lo, uint32_t hi, uint32_t *out)
{
	const char *v = getenv(var);
	if (v == NULL)
		return 0;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 || x < lo || x > hi) {
		char why[64];
		snprintf(why, sizeof(why), "expected an integer in %u..%u", lo, hi);
		return env_bad(var, v, why);
	}
	*out = (uint32_t)x;
	return 0;
}

static int env_name(const char *var, char *dst, size_t size)
{
	const char *v = getenv(var);
	if (v == NULL)
		return 0;
	if (!sl__name_ok(v, size))
		return env_bad(var, v, "expected 1-31 characters of [A-Za-z0-9_.-]");
	snprintf(dst, size, "%s", v);
	return 0;
}

int sl_nf_config_from_env(struct sl_nf_config *cfg)
{
	const char *v;
	int rc = 0;

	if ((v = getenv("SLUICE_NF_SOCKET")) != NULL) {
		if (v[0] == '\0' || strlen(v) >= sizeof(cfg->socket_path))
			rc = env_bad("SLUICE_NF_SOCKET", v, "expected a path of 1-107 bytes");
		else
			snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s", v);
	}
	if ((v = getenv("SLUICE_NF_WAKEUP")) != NULL && sl_wakeup_parse(v, &cfg->wakeup) < 0)
		rc = env_bad("SLUICE_NF_WAKEUP", v, "expected poll, block or adaptive");
	if ((v = getenv("SLUICE_NF_SANDBOX")) != NULL) {
		if (strcmp(v, "none") == 0)
			cfg->sandbox = SL_SANDBOX_NONE;
		else if (strcmp(v, "strict") == 0)
			cfg->sandbox = SL_SANDBOX_STRICT;
		else
			rc = env_bad("SLUICE_NF_SANDBOX", v, "expected strict or none");
	}
	if ((v = getenv("SLUICE_NF_TOKEN")) != NULL) { /* the service's attach token (docs/abi.md) */
		if (strlen(v) > SL_TOKEN_MAX)
			rc = env_bad("SLUICE_NF_TOKEN", "...", "expected at most 32 characters");
		else
			snprintf(cfg->token, sizeof(cfg->token), "%s", v);
	}
	uint32_t fd = 0;
	if (getenv("SLUICE_NF_FD") != NULL) {
		if (env_u32("SLUICE_NF_FD", 0, INT_MAX, &fd) < 0)
			rc = -SL_ERR_FIELD;
		else
			cfg->sock_fd = (int)fd;
	}
	if (env_name("SLUICE_NF_NAME", cfg->name, sizeof(cfg->name)) < 0 ||
	    env_name("SLUICE_NF_SERVICE", cfg->service, sizeof(cfg->service)) < 0 ||
	    env_u32("SLUICE_NF_BATCH", 1, 65536, &cfg->batch) < 0 ||
	    env_u32("SLUICE_NF_TIMEOUT_US", 0, 10000000, &cfg->timeout_us) < 0 ||
	    env_u32("SLUICE_NF_SPIN_US", 0, 10000000, &cfg->spin_us) < 0 ||
	    env_u32("SLUICE_NF_REATTACH_MS", 0, 86400000, &cfg->reattach_ms) < 0 ||
	    env_u32("SLUICE_NF_SUPPLY", 0, SL_SUPPLY_MAX, &cfg->supply) < 0)
		rc = -SL_ERR_FIELD;
	return rc;
}
