/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libsluice-sock.so internals (docs/sockets.md, include/sluice/sock.h).
 *   shim.c       set-up (environment, real functions), the fd table, channels and NQE calls, fork,
 *                direct connections (ATTACH, the watcher thread)
 *   shim_sock.c  the control calls (socket, bind, listen, accept, connect, names, options) and the
 *                fd calls (close, close_range, closefrom, dup, dup2, dup3, fcntl)
 *   shim_io.c    the data path: rings, the token protocol, waiting on the placeholder, and the data
 *                calls (read/write/send/recv families, sendfile, ioctl)
 *   shim_epoll.c epoll instances: the shim's table of their registrations, user-space EPOLLOUT of shim
 *                streams and the registration churn of level-triggered event loops
 */
#ifndef SLUICE_SHIM_INTERNAL_H
#define SLUICE_SHIM_INTERNAL_H

/* the interposed names must be the plain ones: no fortify wrappers, no 64-bit-offset renames */
#undef _FORTIFY_SOURCE
#undef _FILE_OFFSET_BITS
#undef _TIME_BITS

#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "sluice/sock.h"

#define SHIM_EXPORT __attribute__((visibility("default")))
#define SHIM_LIKELY(x) __builtin_expect(!!(x), 1)
#define SHIM_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- the real functions (dlsym(RTLD_NEXT), resolved in a constructor or on first use) ---- */
struct shim_real {
	int (*socket)(int, int, int);
	int (*bind)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	int (*shutdown)(int, int);
	int (*close)(int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned int, int);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned int, int, struct timespec *);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	ssize_t (*sendfile64)(int, int, off_t *, size_t);
	int (*fcntl)(int, int, ...);
	int (*fcntl64)(int, int, ...);
	int (*ioctl)(int, unsigned long, ...);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*close_range)(unsigned int, unsigned int, int);
	void (*closefrom)(int);
	int (*sigaction)(int, const struct sigaction *, struct sigaction *);
	sighandler_t (*signal)(int, sighandler_t);
	sighandler_t (*sysv_signal)(int, sighandler_t);
	sighandler_t (*bsd_signal)(int, sighandler_t);
	int (*siginterrupt)(int, int);
	int (*poll)(struct pollfd *, nfds_t, int); /* the shim's own waits: never the interposed one */
};
extern struct shim_real shim_real;
void shim_resolve(void);
#define REAL(f) (SHIM_LIKELY(shim_real.f != NULL) ? shim_real.f : (shim_resolve(), shim_real.f))

/* ---- the fd table: two levels, chunks made on demand, entries read and written atomically ----
 * An entry is 0 (a kernel fd: not ours), FDT_INTERNAL (one of the shim's channels) or slot + 1. */
#define FDT_SHIFT 10
#define FDT_CHUNK (1u << FDT_SHIFT)
#define FDT_TOP 1024u /* 1M fds: the kernel's nr_open default ceiling */
#define FDT_INTERNAL 0xffffffffu
extern uint32_t *shim_fdt[FDT_TOP];

static inline uint32_t fdt_get(int fd)
{
	if (SHIM_UNLIKELY((unsigned)fd >= FDT_TOP * FDT_CHUNK))
		return 0;
	uint32_t *c = __atomic_load_n(&shim_fdt[(unsigned)fd >> FDT_SHIFT], __ATOMIC_ACQUIRE);
	if (SHIM_LIKELY(c == NULL))
		return 0;
	return __atomic_load_n(&c[(unsigned)fd & (FDT_CHUNK - 1)], __ATOMIC_ACQUIRE);
}
/* a shim socket: slot + 1 (not 0, not internal) */
static inline bool fdt_is_sock(uint32_t e)
{
	return e != 0 && e != FDT_INTERNAL;
}
void fdt_set(int fd, uint32_t v);

/* ---- the region and the shim's own per-slot state ---- */
struct slocal {
	volatile uint32_t rxlock;  /* consuming from the receive ring (and the token step) */
	volatile uint32_t txlock;  /* producing into the send ring */
	int domain, type;          /* as the app asked at socket() */
	volatile uint32_t dgram_connected; /* a datagram socket with a default peer */
	uint32_t fin_send_taken;   /* the one send after the peer's clean close was taken (SL_SK_S_PEER_FIN) */
	struct timeval rcvtimeo, sndtimeo; /* SO_RCVTIMEO/SO_SNDTIMEO, kept here: 0 = forever,
	                                    * tv_usec -1 = do not wait (a negative time) */
	/* a direct connection (sock.h "Direct connections"), attached for the region slot's gen */
	struct sl_sk_slot *volatile dsl; /* this end's half of the connection memfd, NULL: none */
	struct sl_sk_slot *dpeer;          /* the peer's half: its receive ring is where we send */
	void *dbase;
	uint32_t dgen;
	int dpfd;                          /* the peer's placeholder engine end (a hidden fd), or -1 */
	volatile uint32_t dlock;
};

extern void *shim_region;        /* NULL until the first socket() */
extern uint32_t shim_nslots, shim_rb;
extern struct slocal *shim_slocal;

/* A socket's shared state: its region slot, or once the engine has made the connection direct
 * (SL_SK_S_DIRECT there), its half of the connection memfd, attached on first sight (shim.c). */
struct sl_sk_slot *shim_direct_slot(uint32_t slot, struct sl_sk_slot *region_slot);
static inline struct sl_sk_slot *slot_of(uint32_t slot)
{
	struct sl_sk_slot *r = sl_sk_slot_at(shim_region, slot);
	if (SHIM_LIKELY(!(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) & SL_SK_S_DIRECT)))
		return r;
	return shim_direct_slot(slot, r);
}

/* The ring a stream's bytes go into: its send ring, or on a direct connection the peer's receive
 * ring (the peer's shim takes them from there). */
static inline struct sl_sk_ring *send_ring(uint32_t slot, struct sl_sk_slot *sl, uint8_t **data)
{
	struct slocal *lo = &shim_slocal[slot];
	if (SHIM_UNLIKELY(sl == lo->dsl && sl)) {
		*data = sl_sk_rx_data(lo->dpeer);
		return &lo->dpeer->rx;
	}
	*data = sl_sk_tx_data(sl, shim_rb);
	return &sl->tx;
}

/* ---- spin locks (per socket, uncontended in practice) ---- */
void shim_spin_wait(volatile uint32_t *l);
static inline void spin_lock(volatile uint32_t *l)
{
	if (SHIM_UNLIKELY(__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)))
		shim_spin_wait(l);
}
static inline void spin_unlock(volatile uint32_t *l)
{
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

/* ---- shim.c services for the calls ---- */
extern bool shim_active;         /* SLUICE_STACK is valid */
extern int shim_gone;            /* sluice-stackd went away */
int shim_init_region(void);      /* the first socket(): 0 or -ENETDOWN */
void shim_channels_closed_from(int lowfd);
/* One NQE call on this thread's channel. Returns the completion's result (>= 0 or -errno), or
 * -ECONNRESET (existing socket) / -ENETDOWN (new socket) when sluice-stackd is gone. */
int shim_call(uint8_t op, uint32_t sock, uint8_t flags, uint64_t arg0, uint64_t arg1, const void *payload,
	      size_t plen, void *out, size_t *out_len, int *out_fd, bool existing);
/* GETSOCKOPT SO_ERROR: the pending error (positive, taken), 0, or -errno */
int shim_take_error(uint32_t slot);
/* a placeholder hung up: say once that sluice-stackd is gone if the channel confirms it */
void shim_placeholder_gone(void);
void shim_say_gone(const char *why);
int shim_errno_ret(int r); /* r < 0: errno = -r, return -1; else r */

static inline int64_t shim_now_ns(void) /* CLOCK_MONOTONIC */
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* How long programs poll before they sleep (sock.h "Polling receivers"): the engine's app_poll_us,
 * bounded here too (the region is the engine's to write), 0: never */
static inline uint32_t shim_app_poll_us(void)
{
	uint32_t us = shim_region ? ((struct sl_sk_region *)shim_region)->app_poll_us : 0;
	return us > 10000 ? 10000 : us;
}

/* ---- shim_io.c ---- */
void shim_kick(int fd, uint32_t slot);
enum { TOK_STREAM, TOK_DGRAM, TOK_LISTEN };
int shim_token_step(int fd, uint32_t slot, int kind, bool force);
int shim_await_readable(int fd, uint32_t slot, int kind, int *nb, int64_t *dl, const struct timeval *tmo,
			unsigned *woke, bool *polled);
/* ctl: a datagram's control area (sock.h), sent (NULL: none) or received (NULL: not wanted) */
ssize_t sk_send(int fd, uint32_t slot, const struct iovec *iov, int iovcnt, int flags, const struct sockaddr *addr,
		socklen_t alen, const struct sl_sk_dctl *ctl);
ssize_t sk_recv(int fd, uint32_t slot, const struct iovec *iov, int iovcnt, int flags, struct sockaddr *addr,
		socklen_t *alen, int *msg_flags, struct sl_sk_dctl *ctl);

/* ---- shim_cmsg.c: datagram control messages (sock.h "Control messages") ---- */
/* sendmsg's cmsgs of a datagram socket, checked as the kernel does: 0 or -errno */
int shim_cmsg_parse(const struct msghdr *msg, int domain, struct sl_sk_dctl *c);
/* a received datagram's cmsgs for the options on (rx_opts) into msg_control; sets msg_controllen,
 * MSG_CTRUNC in *mflags as the kernel's put_cmsg */
void shim_cmsg_put(struct msghdr *msg, const struct sl_sk_dctl *c, uint32_t opts, int *mflags);
/* the placeholder of a connecting socket is filled so that it turns writable when the engine ends
 * the connect; 0 or -ECONNRESET */
int sk_fill(int fd);
/* wait on the placeholder; dl_ns: the deadline (CLOCK_MONOTONIC ns, 0 = not started) */
int sk_wait(int fd, short events, int64_t *dl_ns, const struct timeval *tmo);
bool sk_nonblocking(int fd);
/* a connected stream open for sending, no pending error, a quarter of its ring free (shim_epoll.c) */
bool shim_stream_writable(uint32_t slot);
bool shim_readable(uint32_t slot, int kind);
bool shim_stream_connected(uint32_t slot);
/* waiting for a token other than by looking at the ring (sock.h "Awake event loops") */
int shim_rx_wait_begin(int fd, uint32_t slot, int kind, struct sl_sk_slot **w);
void shim_rx_wait_end(struct sl_sk_slot *w);

/* ---- shim_epoll.c: fds going away or copied ---- */
extern int shim_ep_count;               /* epoll instances with a table: 0 keeps these off the path */
void shim_ep_closing(int fd);           /* close() of any fd: an epoll fd's table goes with its last fd */
void shim_ep_closing_range(unsigned first, unsigned last);
void shim_ep_dup(int old, int new);     /* new names what old names (an epoll table, or none) */
void shim_ep_forget(int fd);            /* a shim socket's fd closes: its registrations go */
void shim_ep_atfork_child(void);

#endif
