/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libsluice-sock.so, the data path (docs/sockets.md "How a call travels"): bytes go between the
 * app's buffers and the slot's rings with no NQE; the placeholder carries the readiness.
 *
 *   receive: take from the receive ring (engine produces); after taking, xchg(rx_wanted, 0) == 1
 *            -> kick. Found not readable (also right after a read that emptied it): the token step
 *            of sock.h (shim_token_step), then EAGAIN or poll(POLLIN).
 *   send:    put into the send ring (app produces); after putting, xchg(tx_kick, 1) == 0 -> the
 *            region's tx_dirty, and a kick unless the engine is awake (tx_doorbell).
 *            Ring full: one filler send into the placeholder (it is then not writable until the
 *            engine has room again), then EAGAIN or poll(POLLOUT).
 *   kick:    one byte on the placeholder, or a KICK call when the placeholder is full.
 *
 * A pending slot error is returned by the next recv/send that has nothing else to report, and is
 * cleared as the kernel clears sk_err: the shim asks GETSOCKOPT SO_ERROR (which takes it) and
 * returns what that answers.
 */
#include "shim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <time.h>
#include <unistd.h>

struct iovc {
	const struct iovec *iov;
	int cnt, i;
	size_t off;
};

static void iovc_norm(struct iovc *c)
{
	while (c->i < c->cnt && c->off >= c->iov[c->i].iov_len) {
		c->i++;
		c->off = 0;
	}
}

/* copy n bytes from the ring at pos into the iovecs */
static void ring_to_iov(const uint8_t *data, uint32_t rb, uint64_t pos, struct iovc *c, size_t n)
{
	while (n) {
		iovc_norm(c);
		if (c->i >= c->cnt)
			return;
		size_t k = c->iov[c->i].iov_len - c->off;
		if (k > n)
			k = n;
		sl_sk_ring_read(data, rb, pos, (uint8_t *)c->iov[c->i].iov_base + c->off, k);
		pos += k;
		n -= k;
		c->off += k;
	}
}

/* copy n bytes from the iovecs into the ring at pos */
static void iov_to_ring(uint8_t *data, uint32_t rb, uint64_t pos, struct iovc *c, size_t n)
{
	while (n) {
		iovc_norm(c);
		if (c->i >= c->cnt)
			return;
		size_t k = c->iov[c->i].iov_len - c->off;
		if (k > n)
			k = n;
		sl_sk_ring_write(data, rb, pos, (const uint8_t *)c->iov[c->i].iov_base + c->off, k);
		pos += k;
		n -= k;
		c->off += k;
	}
}

/* ---- the placeholder ---- */

bool sk_nonblocking(int fd)
{
	int fl = REAL(fcntl)(fd, F_GETFL);
	return fl >= 0 && (fl & O_NONBLOCK);
}

static bool catches_without_restart(const struct sigaction *sa)
{
	void (*h)(int) = sa->sa_handler; /* sa_sigaction shares its storage */
	return h != SIG_DFL && h != SIG_IGN && !(sa->sa_flags & SA_RESTART);
}

/* The signals (bit sig-1) whose handler, as the kernel has it now, lacks SA_RESTART. */
static uint64_t handlers_without_restart(void)
{
	uint64_t found = 0;
	for (int sig = 1; sig < NSIG && sig <= 64; sig++) {
		struct sigaction sa;
		if (sig != SIGKILL && sig != SIGSTOP && !REAL(sigaction)(sig, NULL, &sa) && catches_without_restart(&sa))
			found |= 1ull << (sig - 1);
	}
	return found;
}

/* A signal handler interrupted a wait without a timeout: would the kernel have restarted the
 * socket call? It does when the handler that ran has SA_RESTART (signal(7); never with SO_RCVTIMEO/
 * SO_SNDTIMEO set). poll() does not say which handler ran, so: when every caught signal's has it. */
static bool handlers_restart(void)
{
	return handlers_without_restart() == 0;
}

/* Has the engine's end gone (the service died)? Both directions shut: POLLHUP. */
static bool placeholder_hup(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
	return REAL(poll)(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* 1: ready, -EAGAIN: the timeout passed, -EINTR: a signal, -ECONNRESET: the engine's end is gone.
 * The caller waits only on a blocking socket, so the placeholder is in blocking mode. */
int sk_wait(int fd, short events, int64_t *dl, const struct timeval *tmo)
{
	if (tmo->tv_usec < 0)
		return -EAGAIN; /* a negative SO_*TIMEO: do not wait */
	bool timed = tmo->tv_sec || tmo->tv_usec;
	if (timed && !*dl)
		*dl = shim_now_ns() + (int64_t)tmo->tv_sec * 1000000000 + (int64_t)tmo->tv_usec * 1000;
	if (!timed && events == POLLIN) {
		/* Block in recv(MSG_PEEK): the kernel restarts it after exactly the handlers with
		 * SA_RESTART, as it would the app's own recv (poll would be interrupted by any). */
		char b;
		ssize_t n = REAL(recv)(fd, &b, 1, MSG_PEEK);
		if (n > 0)
			return 1;
		if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
			if (n == 0 && !placeholder_hup(fd))
				return 1; /* the stream's end: the caller finds RX_EOF */
			shim_placeholder_gone();
			return -ECONNRESET;
		}
		if (errno == EINTR)
			return -EINTR;
		/* EAGAIN: another thread made the placeholder non-blocking meanwhile: poll below */
	}
	for (;;) {
		int ms = -1;
		if (timed) {
			int64_t left = *dl - shim_now_ns();
			if (left <= 0)
				return -EAGAIN;
			int64_t m = (left + 999999) / 1000000;
			ms = m > INT_MAX ? INT_MAX : (int)m;
		}
		struct pollfd p = { .fd = fd, .events = events };
		int r = REAL(poll)(&p, 1, ms);
		if (r < 0 && errno == EINTR && !timed && handlers_restart())
			continue;
		if (r < 0)
			return errno == EINTR ? -EINTR : -errno;
		if (r == 0)
			continue; /* the deadline is checked above */
		if (p.revents & POLLNVAL)
			return -EBADF;
		if (p.revents & (POLLHUP | POLLERR)) {
			shim_placeholder_gone();
			return -ECONNRESET;
		}
		return 1;
	}
}

/* A kick: one byte on the placeholder. When the placeholder is full (filler of a full send ring)
 * the byte cannot go, and the engine, which leaves those bytes unread while the send ring is more
 * than 3/4 full, would get no new edge (a receive ring emptied meanwhile would never be refilled:
 * both ends of a shm connection can stall so): then the kick goes as a KICK call on the channel. */
void shim_kick(int fd, uint32_t slot)
{
	char k = 0;
	ssize_t r;
	do
		r = REAL(send)(fd, &k, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		int e = errno;
		shim_call(SL_NQE_KICK, slot, 0, 0, 0, NULL, 0, NULL, NULL, NULL, true);
		errno = e;
	}
}

/* New data in the send ring: the engine must look at the socket. An awake engine finds the region's
 * tx_dirty on its next turn, so the kick (a system call here and one in the engine) is only for a
 * sleeping one (sock.h "Kicks"). */
static void tx_doorbell(int fd, uint32_t slot, struct sl_sk_slot *sl)
{
	if (sl_sk_xchg(&sl->tx_kick, 1) != 0)
		return;
	struct sl_sk_region *r = shim_region;
	sl_sk_xchg(&r->tx_dirty, 1);
	if (!__atomic_load_n(&r->engine_awake, __ATOMIC_SEQ_CST))
		shim_kick(fd, slot);
}

static const char filler[2048];

/* Filler: one send of 2 KiB. With the minimal send buffer the engine gives the placeholder, one such
 * skb makes it not writable until the engine reads it (unix_writable: wmem <= sndbuf / 4); EAGAIN
 * means it is full already. Never a loop: an engine that drains concurrently (a connect that just
 * ended, a ring with room) would keep one going. 0 or -ECONNRESET. */
int sk_fill(int fd)
{
	ssize_t n;
	do
		n = REAL(send)(fd, filler, sizeof(filler), MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n >= 0 || errno == EAGAIN || errno == EWOULDBLOCK)
		return 0;
	shim_placeholder_gone();
	return -ECONNRESET;
}

/* Read every byte of the placeholder (tokens); 0 or -ECONNRESET. An end of file is the engine's
 * word that a stream is over for good (it shuts its end once RX_EOF is set) or, without RX_EOF, that
 * the engine is gone. */
static int drain(int fd, struct sl_sk_slot *sl)
{
	char buf[256];
	for (;;) {
		ssize_t n = REAL(recv)(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == (ssize_t)sizeof(buf))
			continue;
		if (n > 0)
			return 0;
		if (n == 0) {
			if (__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) & (SL_SK_S_RX_EOF | SL_SK_S_TX_CLOSED))
				return 0;
			shim_placeholder_gone();
			return -ECONNRESET;
		}
		if (errno == EINTR)
			continue;
		return 0;
	}
}

/* The send ring has less room than `need` (or a connect is under way): make the placeholder not
 * writable, then look at the ring again. 1: room appeared meanwhile (the engine may have read the
 * filler already: go on sending), 0: wait or EAGAIN, <0: gone. */
static int block_out(int fd, struct sl_sk_ring *ring, uint64_t need, bool connected)
{
	int r = sk_fill(fd);
	if (r < 0)
		return r;
	uint64_t used = sl_sk_load_acquire(&ring->tail) - sl_sk_load_acquire(&ring->head);
	return connected && used <= shim_rb && shim_rb - used >= need;
}

static bool stream_readable(struct sl_sk_slot *sl)
{
	uint32_t st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
	if (sl_sk_load_acquire(&sl->rx.tail) != sl->rx.head || sl->error)
		return true;
	if (st & (SL_SK_S_RX_EOF | SL_SK_S_TX_CLOSED | SL_SK_S_LISTENING))
		return true;
	return !(st & (SL_SK_S_CONNECTED | SL_SK_S_CONNECTING)); /* recv answers ENOTCONN at once */
}

static bool dgram_readable(struct sl_sk_slot *sl)
{
	return sl_sk_load_acquire(&sl->rx.tail) != sl->rx.head || sl->error;
}

static bool listen_readable(struct sl_sk_slot *sl)
{
	return __atomic_load_n(&sl->acceptq, __ATOMIC_ACQUIRE) ||
	       !(__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) & SL_SK_S_LISTENING);
}

static bool readable(struct sl_sk_slot *sl, int kind)
{
	return kind == TOK_STREAM ? stream_readable(sl) : kind == TOK_DGRAM ? dgram_readable(sl) : listen_readable(sl);
}

/* ---- polling receivers (sock.h "Polling receivers"; NetKernel's interrupt-driven polling) ----
 * A blocking receive on an empty ring polls it for up to the region's app_poll_us before it sleeps,
 * and meanwhile the engine puts no token: a reply that comes soon costs neither a wake-up nor a
 * system call. A signal caught while polling runs its handler and the poll goes on, which is what
 * the kernel does for a handler with SA_RESTART. For one without, the kernel would end the call with
 * EINTR, which a poll cannot see: so no thread polls while any caught signal's handler lacks
 * SA_RESTART (the wrappers of sigaction, signal, sysv_signal, bsd_signal and siginterrupt below keep
 * that set). Timed waits (SO_RCVTIMEO) never poll: the kernel ends them with EINTR always. */
static uint64_t g_norestart;  /* bit sig-1: a handler without SA_RESTART is installed */
static int g_norestart_known; /* g_norestart holds the handlers found at the first look */

static void note_handler(int sig, const struct sigaction *now)
{
	if (sig <= 0 || sig > 64)
		return;
	uint64_t bit = 1ull << (sig - 1);
	if (catches_without_restart(now))
		__atomic_fetch_or(&g_norestart, bit, __ATOMIC_SEQ_CST);
	else
		__atomic_fetch_and(&g_norestart, ~bit, __ATOMIC_SEQ_CST);
}

SHIM_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	int r = REAL(sigaction)(sig, act, old);
	if (r == 0 && act)
		note_handler(sig, act);
	return r;
}

/* The libc's other ways to change a handler call its internal sigaction, which the wrapper above
 * does not see: after each, look at what the signal's handler is now. */
static void refresh_handler(int sig)
{
	struct sigaction now;
	if (sig > 0 && sig <= 64 && REAL(sigaction)(sig, NULL, &now) == 0)
		note_handler(sig, &now);
}

SHIM_EXPORT sighandler_t signal(int sig, sighandler_t h)
{
	sighandler_t r = REAL(signal)(sig, h);
	refresh_handler(sig);
	return r;
}

SHIM_EXPORT sighandler_t sysv_signal(int sig, sighandler_t h)
{
	sighandler_t r = REAL(sysv_signal)(sig, h);
	refresh_handler(sig);
	return r;
}

SHIM_EXPORT sighandler_t bsd_signal(int sig, sighandler_t h)
{
	sighandler_t r = REAL(bsd_signal)(sig, h);
	refresh_handler(sig);
	return r;
}

SHIM_EXPORT int siginterrupt(int sig, int flag)
{
	int r = REAL(siginterrupt)(sig, flag);
	refresh_handler(sig);
	return r;
}

static bool may_poll(void)
{
	if (!__atomic_load_n(&g_norestart_known, __ATOMIC_ACQUIRE)) {
		/* handlers installed before the shim's wrapper saw any (none after exec, but a program
		 * may call the libc's internal sigaction): one look, then the wrappers keep the set */
		__atomic_fetch_or(&g_norestart, handlers_without_restart(), __ATOMIC_SEQ_CST);
		__atomic_store_n(&g_norestart_known, 1, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(&g_norestart, __ATOMIC_ACQUIRE) == 0;
}

/* Poll an empty receive ring before sleeping; true when it is readable now. */
static bool poll_ring(uint32_t slot, int kind, const struct timeval *tmo)
{
	uint32_t us = shim_app_poll_us();
	if (!us || tmo->tv_sec || tmo->tv_usec || !may_poll())
		return false;
	struct sl_sk_slot *sl = slot_of(slot);
	sl_sk_xchg(&sl->rx_spin, 1);
	int64_t end = shim_now_ns() + (int64_t)us * 1000;
	bool got;
	while (!(got = readable(sl, kind)) && shim_now_ns() < end)
		sched_yield(); /* the peer, or the engine, may be waiting for this core */
	sl_sk_xchg(&sl->rx_spin, 0);
	return got || readable(sl, kind); /* the last look: data published before the engine saw 0 */
}

/* rd_token, once its writer is not in the middle of writing a byte (WRITING lasts one send()). On a
 * direct connection the writer may be the peer program, which can die or lie there: after 50 ms
 * the token is taken back from WRITING, which at worst leaves a byte in the placeholder for nothing
 * (a writer that goes on stores PRESENT or 0 over it, both right). */
static int token_settled(int fd, struct sl_sk_slot *sl, uint32_t *t)
{
	int64_t give_up = 0;
	for (unsigned spins = 0; (*t = __atomic_load_n(&sl->rd_token, __ATOMIC_SEQ_CST)) == SL_SK_TOKEN_WRITING; spins++) {
		if ((spins & 63) == 63) {
			if (placeholder_hup(fd)) {
				shim_placeholder_gone();
				return -ECONNRESET;
			}
			int64_t now = shim_now_ns();
			if (!give_up)
				give_up = now + 50 * 1000000ll;
			else if (now > give_up)
				sl_sk_cas(&sl->rd_token, SL_SK_TOKEN_WRITING, 0);
		}
		sched_yield();
	}
	return 0;
}

/* A direct sender's share of the readable token (sock.h "Direct connections"): nothing while the
 * peer holds rx_spin (it polls its ring: a blocking receive, an awake or polling event loop); else
 * the sender does what sk_token does itself, for the peer's half, writing into the peer's
 * placeholder through its engine end. (A polling engine once put it on a doorbell instead: with the
 * peers polling for themselves that only took a core from them -- bench/notes.md.) Without that fd
 * (the peer went away meanwhile, or the program closed every fd) the engine is asked with a kick. */
static void direct_token(int fd, uint32_t slot, struct sl_sk_slot *peer, int pfd)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&peer->rx_spin, __ATOMIC_RELAXED)) {
		__atomic_fetch_add(&peer->peer_polled, 1, __ATOMIC_RELAXED);
		return;
	}
	if (!sl_sk_cas(&peer->rd_token, 0, SL_SK_TOKEN_WRITING))
		return;
	if (!stream_readable(peer)) { /* taken meanwhile */
		__atomic_store_n(&peer->rd_token, 0, __ATOMIC_SEQ_CST);
		return;
	}
	int e = errno;
	ssize_t w = -1;
	if (pfd > 0) {
		char t = 't';
		do
			w = REAL(send)(pfd, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		while (w < 0 && errno == EINTR);
	}
	if (w < 0 && (pfd <= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))) {
		__atomic_store_n(&peer->rd_token, 0, __ATOMIC_SEQ_CST);
		shim_kick(fd, slot);
		errno = e;
		return;
	}
	errno = e;
	__atomic_fetch_add(&peer->peer_tokens, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&peer->rd_token, SL_SK_TOKEN_PRESENT, __ATOMIC_SEQ_CST);
}

/* The socket was found not readable: take the token back (sock.h "The readable token"). The caller
 * has stored the ring's head (if it took data); then a seq_cst fence and a look at rd_token: while
 * the engine is writing a byte (WRITING), wait for it; a PRESENT token that this thread takes
 * (CAS PRESENT -> 0) means every byte in the placeholder is read. Then, if the socket is readable
 * after all, it must end with a byte in the placeholder: the drain may have taken the byte of a
 * token the engine claimed after our CAS (engine: CAS 0 -> WRITING, send, our recv, store PRESENT),
 * which leaves PRESENT without a byte, and the engine writes a byte on a kick only from 0. So:
 * PRESENT with bytes in the placeholder is right as it is; PRESENT without is cleared; from 0, a
 * kick makes the engine put the token. 1: readable, 0: not, <0: gone.
 *
 * The shim does this as soon as it finds the socket not readable: when it waits or says EAGAIN,
 * and also right after a recv or accept that emptied it, so that select/poll/epoll never report a
 * socket readable with nothing to read (the kernel never does; a program that selects and then
 * reads a blocking socket would block, wrk counts an EAGAIN after a wakeup as an error). `force`
 * (a wait woke many times with nothing to read: a byte outside the protocol) drains regardless. */
int shim_token_step(int fd, uint32_t slot, int kind, bool force)
{
	struct sl_sk_slot *sl = slot_of(slot);
	uint32_t t;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	int r = token_settled(fd, sl, &t);
	if (r < 0)
		return r;
	if ((t == SL_SK_TOKEN_PRESENT && sl_sk_cas(&sl->rd_token, SL_SK_TOKEN_PRESENT, 0)) || force) {
		if ((r = drain(fd, sl)) < 0)
			return r;
	}
	for (;;) {
		if (!readable(sl, kind))
			return 0;
		if ((r = token_settled(fd, sl, &t)) < 0)
			return r;
		if (t == SL_SK_TOKEN_PRESENT) {
			int q = 0;
			if (REAL(ioctl)(fd, FIONREAD, &q) == 0 && q > 0)
				return 1;
			if (!sl_sk_cas(&sl->rd_token, SL_SK_TOKEN_PRESENT, 0))
				continue;
		}
		shim_kick(fd, slot);
		return 1;
	}
}

/* Nothing to take from the socket: the token step, then -EAGAIN for a non-blocking call or a wait
 * for POLLIN. 1: readable after all, 0: the wait woke (look again), <0: -EAGAIN or an error. *nb is
 * the call's non-blocking mode (-1: not looked up yet), *woke counts the waits (many with nothing to
 * read: the token step drains a byte outside the protocol). polled: NULL, or a stream receive's flag,
 * set when the wait polled the ring and found it readable (the caller then restores the token). */
int shim_await_readable(int fd, uint32_t slot, int kind, int *nb, int64_t *dl, const struct timeval *tmo,
			unsigned *woke, bool *polled)
{
	int r = shim_token_step(fd, slot, kind, *woke > 64);
	if (r != 0)
		return r;
	if (*nb < 0)
		*nb = sk_nonblocking(fd);
	if (*nb)
		return -EAGAIN;
	if (polled && poll_ring(slot, kind, tmo)) {
		*polled = true;
		return 0;
	}
	struct sl_sk_slot *w;
	r = shim_rx_wait_begin(fd, slot, kind, &w); /* an event loop may hold the token back: not now */
	if (r == 0)
		r = sk_wait(fd, POLLIN, dl, tmo);
	shim_rx_wait_end(w);
	if (r != 0)
		return r;
	(*woke)++;
	return 0;
}

/* A thread is about to wait for the socket's token by other means than looking at its ring (a
 * blocking receive's sleep, poll/select): counted in rx_waiters, so no event loop holds the token back
 * meanwhile, and if one did (rx_loop), the token step restores what it left out (sock.h "Awake event
 * loops"). *w: what to give shim_rx_wait_end. 1: readable now, 0: wait, <0: gone. */
int shim_rx_wait_begin(int fd, uint32_t slot, int kind, struct sl_sk_slot **w)
{
	struct sl_sk_slot *sl = slot_of(slot);
	*w = sl;
	__atomic_fetch_add(&sl->rx_waiters, 1, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&sl->rx_loop, __ATOMIC_SEQ_CST))
		return 0;
	if (__atomic_load_n(&sl->rx_spin, __ATOMIC_SEQ_CST))
		sl_sk_xchg(&sl->rx_spin, 0);
	return shim_token_step(fd, slot, kind, false);
}

void shim_rx_wait_end(struct sl_sk_slot *w)
{
	__atomic_fetch_sub(&w->rx_waiters, 1, __ATOMIC_SEQ_CST);
}

/* a connected stream (epoll may look at its receive ring) */
bool shim_stream_connected(uint32_t slot)
{
	if (slot >= shim_nslots || (shim_slocal[slot].type & 0xf) != SOCK_STREAM)
		return false;
	return __atomic_load_n(&slot_of(slot)->state, __ATOMIC_ACQUIRE) & SL_SK_S_CONNECTED;
}

/* epoll's look at a socket (shim_epoll.c): readable as recv or accept would find it */
bool shim_readable(uint32_t slot, int kind)
{
	return readable(slot_of(slot), kind);
}

static ssize_t epipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		pthread_kill(pthread_self(), SIGPIPE);
	return -EPIPE;
}

/* ---- streams ---- */

static ssize_t stream_recv_loop(int fd, uint32_t slot, struct sl_sk_slot *sl, struct slocal *lo, struct iovc *c,
				size_t total, int flags, socklen_t *alen, bool *polled)
{
	if (flags & MSG_OOB)
		return -EINVAL;
	if (flags & MSG_ERRQUEUE)
		return -EAGAIN;
	if (alen)
		*alen = 0; /* as TCP: no address */
	const bool peek = flags & MSG_PEEK;
	const uint32_t rb = shim_rb;
	const uint8_t *data = sl_sk_rx_data(sl);
	size_t got = 0;
	int nb = (flags & MSG_DONTWAIT) ? 1 : -1;
	int64_t dl = 0;
	unsigned woke = 0; /* waits that woke: many with nothing to read = a byte outside the protocol */
	bool err_tried = false;
	if (total == 0)
		return (__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) & SL_SK_S_LISTENING) ? -ENOTCONN : 0;
	for (;;) {
		/* the state before the ring: an EOF seen here has all its data in the ring below */
		uint32_t st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
		size_t n = 0;
		spin_lock(&lo->rxlock);
		uint64_t head = sl->rx.head, tail = sl_sk_load_acquire(&sl->rx.tail);
		uint64_t avail = tail - head;
		if (avail > rb) {
			spin_unlock(&lo->rxlock);
			return got ? (ssize_t)got : -ECONNRESET; /* indices out of range: a reset */
		}
		if (avail) {
			n = avail < total - got ? (size_t)avail : total - got;
			if (!(flags & MSG_TRUNC))
				ring_to_iov(data, rb, head, c, n);
			if (!peek)
				sl_sk_store_release(&sl->rx.head, head + n);
			got += n;
		}
		spin_unlock(&lo->rxlock);
		if (n)
			woke = 0;
		if (n && !peek) {
			if (sl_sk_xchg(&sl->rx_wanted, 0) == 1)
				shim_kick(fd, slot);
			if (n == avail && !stream_readable(sl) && shim_token_step(fd, slot, TOK_STREAM, false) < 0)
				return (ssize_t)got;
		}
		if (got == total || (got && (peek || !(flags & MSG_WAITALL))))
			return (ssize_t)got;
		/* the ring is empty */
		if (sl->error && !err_tried) {
			if (got)
				return (ssize_t)got;
			err_tried = true;
			int e = shim_take_error(slot);
			if (e)
				return e > 0 ? -e : e;
			continue;
		}
		if (st & (SL_SK_S_RX_EOF | SL_SK_S_TX_CLOSED))
			return (ssize_t)got;
		if ((st & SL_SK_S_LISTENING) || !(st & (SL_SK_S_CONNECTED | SL_SK_S_CONNECTING)))
			return got ? (ssize_t)got : -ENOTCONN;
		int r = shim_await_readable(fd, slot, TOK_STREAM, &nb, &dl, &lo->rcvtimeo, &woke, polled);
		if (r < 0)
			return got ? (ssize_t)got : r;
	}
}

/* A receive that polled the ring (poll_ring) may have had the engine leave out tokens: whatever it
 * left for the next call must show in the placeholder as usual (sock.h "Polling receivers"). */
static ssize_t stream_recv(int fd, uint32_t slot, struct sl_sk_slot *sl, struct slocal *lo, struct iovc *c,
			   size_t total, int flags, socklen_t *alen)
{
	bool polled = false;
	ssize_t r = stream_recv_loop(fd, slot, sl, lo, c, total, flags, alen, &polled);
	if (SHIM_UNLIKELY(polled) && stream_readable(sl))
		shim_token_step(fd, slot, TOK_STREAM, false);
	return r;
}

static ssize_t stream_send(int fd, uint32_t slot, struct sl_sk_slot *sl, struct slocal *lo, struct iovc *c,
			   size_t total, int flags)
{
	if (flags & MSG_OOB)
		return -EOPNOTSUPP;
	const uint32_t rb = shim_rb;
	uint8_t *data;
	struct sl_sk_ring *ring = send_ring(slot, sl, &data);
	struct sl_sk_slot *peer = ring == &sl->tx ? NULL : lo->dpeer; /* direct: we play the engine */
	size_t sent = 0;
	int nb = (flags & MSG_DONTWAIT) ? 1 : -1;
	int64_t dl = 0;
	bool err_tried = false;
	for (;;) {
		uint32_t st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
		if ((sl->error && !err_tried) || (st & (SL_SK_S_SHUT_WR | SL_SK_S_TX_CLOSED))) {
			if (sent)
				return (ssize_t)sent;
			if (sl->error && !err_tried) {
				/* as the kernel: a pending error first (taken; SIGPIPE only for EPIPE), then EPIPE */
				err_tried = true;
				int e = shim_take_error(slot);
				if (e == EPIPE)
					return epipe(flags);
				if (e)
					return e > 0 ? -e : e;
			}
			if ((st & (SL_SK_S_PEER_FIN | SL_SK_S_SHUT_WR)) == SL_SK_S_PEER_FIN && total &&
			    !__atomic_exchange_n(&lo->fin_send_taken, 1, __ATOMIC_ACQ_REL))
				return (ssize_t)total; /* as TCP: taken, and lost to the peer's reset */
			if (st & (SL_SK_S_SHUT_WR | SL_SK_S_TX_CLOSED))
				return epipe(flags);
			continue;
		}
		bool connected = st & SL_SK_S_CONNECTED;
		if (!connected && !(st & SL_SK_S_CONNECTING))
			return sent ? (ssize_t)sent : epipe(flags); /* never connected: EPIPE as the kernel */
		if (connected) {
			if (total == 0)
				return 0;
			size_t n = 0;
			spin_lock(&lo->txlock);
			/* direct: the peer can write its ring's tail too; what it breaks is only this connection */
			uint64_t tail = peer ? sl_sk_load_acquire(&ring->tail) : ring->tail, head = sl_sk_load_acquire(&ring->head);
			uint64_t used = tail - head;
			if (used > rb) {
				spin_unlock(&lo->txlock);
				return sent ? (ssize_t)sent : -ECONNRESET;
			}
			n = rb - used < total - sent ? (size_t)(rb - used) : total - sent;
			if (n) {
				iov_to_ring(data, rb, tail, c, n);
				sl_sk_store_release(&ring->tail, tail + n);
				sent += n;
			}
			spin_unlock(&lo->txlock);
			if (n && peer)
				direct_token(fd, slot, peer, lo->dpfd);
			else if (n)
				tx_doorbell(fd, slot, sl);
			if (sent == total)
				return (ssize_t)sent;
		}
		/* the ring is full (or the connect is under way): make the placeholder not writable */
		int r = block_out(fd, ring, 1, connected);
		if (r < 0)
			return sent ? (ssize_t)sent : r;
		if (r > 0)
			continue; /* the engine made room meanwhile */
		if (nb < 0)
			nb = sk_nonblocking(fd);
		if (nb)
			return sent ? (ssize_t)sent : -EAGAIN;
		r = sk_wait(fd, POLLOUT, &dl, &lo->sndtimeo);
		if (r < 0)
			return sent ? (ssize_t)sent : r;
	}
}

/* epoll's user-space EPOLLOUT (shim_epoll.c): would a send put bytes now? Only the plain case -- a
 * connected stream, open for sending, no pending error, a quarter of its ring free (as the engine
 * drains the filler at 3/4) -- says yes; anything else leaves the answer to the placeholder. */
bool shim_stream_writable(uint32_t slot)
{
	if (slot >= shim_nslots || (shim_slocal[slot].type & 0xf) != SOCK_STREAM)
		return false;
	struct sl_sk_slot *sl = slot_of(slot);
	uint32_t st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
	if ((st & (SL_SK_S_CONNECTED | SL_SK_S_CONNECTING | SL_SK_S_SHUT_WR | SL_SK_S_TX_CLOSED)) != SL_SK_S_CONNECTED ||
	    __atomic_load_n(&sl->error, __ATOMIC_ACQUIRE))
		return false;
	uint8_t *data;
	struct sl_sk_ring *ring = send_ring(slot, sl, &data);
	uint64_t used = sl_sk_load_acquire(&ring->tail) - sl_sk_load_acquire(&ring->head);
	return used <= shim_rb - shim_rb / 4;
}

/* ---- datagrams ---- */

static inline uint64_t rec_bytes(uint32_t len)
{
	return SL_SK_DGRAM_HDR + (((uint64_t)len + SL_SK_DGRAM_ALIGN - 1) & ~(uint64_t)(SL_SK_DGRAM_ALIGN - 1));
}

/* Find the next record of the receive ring, stepping over skips (the consumer may: they carry
 * nothing). Called under rxlock. 1 with *hdr and *pos, 0 when empty, -ECONNRESET when insane. */
static int dgram_next(struct sl_sk_slot *sl, struct sl_sk_dgram *hdr, uint64_t *pos)
{
	const uint32_t rb = shim_rb;
	const uint8_t *data = sl_sk_rx_data(sl);
	uint64_t head = sl->rx.head, tail = sl_sk_load_acquire(&sl->rx.tail);
	for (;;) {
		uint64_t avail = tail - head;
		if (avail > rb || (head & (SL_SK_DGRAM_ALIGN - 1)))
			return -ECONNRESET;
		if (!avail)
			return 0;
		uint64_t off = head & (rb - 1), contig = rb - off;
		if (contig < SL_SK_DGRAM_HDR) { /* too short for a header: skipped without one */
			head += contig;
			sl_sk_store_release(&sl->rx.head, head);
			continue;
		}
		if (avail < SL_SK_DGRAM_HDR)
			return -ECONNRESET;
		memcpy(hdr, data + off, sizeof(*hdr));
		if (hdr->len == SL_SK_DGRAM_SKIP) {
			if (avail < contig)
				return -ECONNRESET;
			head += contig;
			sl_sk_store_release(&sl->rx.head, head);
			continue;
		}
		uint64_t rec = rec_bytes(hdr->len);
		if (hdr->len > rb || rec > contig || rec > avail || hdr->addr_len > SL_SK_ADDR_MAX)
			return -ECONNRESET;
		*pos = head;
		return 1;
	}
}

static ssize_t dgram_recv(int fd, uint32_t slot, struct sl_sk_slot *sl, struct slocal *lo, struct iovc *c,
			  size_t total, int flags, struct sockaddr *addr, socklen_t *alen, int *mflags,
			  struct sl_sk_dctl *ctl)
{
	if (flags & MSG_OOB)
		return -EOPNOTSUPP;
	if (flags & MSG_ERRQUEUE)
		return -EAGAIN;
	const uint32_t rb = shim_rb;
	const uint8_t *data = sl_sk_rx_data(sl);
	int nb = (flags & MSG_DONTWAIT) ? 1 : -1;
	int64_t dl = 0;
	unsigned woke = 0; /* waits that woke: many with nothing to read = a byte outside the protocol */
	bool err_tried = false;
	for (;;) {
		struct sl_sk_dgram h;
		uint64_t pos = 0;
		spin_lock(&lo->rxlock);
		int r = dgram_next(sl, &h, &pos);
		if (r > 0) {
			size_t n = h.len < total ? h.len : total;
			ring_to_iov(data, rb, pos + SL_SK_DGRAM_HDR, c, n);
			if (!(flags & MSG_PEEK))
				sl_sk_store_release(&sl->rx.head, pos + rec_bytes(h.len));
		}
		spin_unlock(&lo->rxlock);
		if (r < 0)
			return r;
		if (r > 0) {
			if (!(flags & MSG_PEEK)) {
				if (sl_sk_xchg(&sl->rx_wanted, 0) == 1)
					shim_kick(fd, slot);
				if (!dgram_readable(sl))
					shim_token_step(fd, slot, TOK_DGRAM, false);
			}
			if (addr && alen) {
				size_t k = h.addr_len < *alen ? h.addr_len : *alen;
				memcpy(addr, h.addr, k);
				*alen = h.addr_len;
			} else if (alen) {
				*alen = h.addr_len;
			}
			if (h.len > total && mflags)
				*mflags |= MSG_TRUNC;
			if (ctl)
				*ctl = h.ctl; /* checked as it is turned into cmsgs (shim_cmsg.c) */
			return (flags & MSG_TRUNC) ? (ssize_t)h.len : (ssize_t)(h.len < total ? h.len : total);
		}
		if (sl->error && !err_tried) {
			err_tried = true;
			int e = shim_take_error(slot);
			if (e)
				return e > 0 ? -e : e;
			continue;
		}
		r = shim_await_readable(fd, slot, TOK_DGRAM, &nb, &dl, &lo->rcvtimeo, &woke, NULL);
		if (r < 0)
			return r;
	}
}

static ssize_t dgram_send(int fd, uint32_t slot, struct sl_sk_slot *sl, struct slocal *lo, struct iovc *c,
			  size_t total, int flags, const struct sockaddr *addr, socklen_t alen, const struct sl_sk_dctl *ctl)
{
	if (flags & MSG_OOB)
		return -EOPNOTSUPP;
	struct sl_sk_dgram h;
	memset(&h, 0, sizeof(h));
	if (ctl)
		h.ctl = *ctl;
	if (addr && alen) {
		if (alen < sizeof(sa_family_t))
			return -EINVAL;
		if (addr->sa_family == AF_INET) {
			if (alen < sizeof(struct sockaddr_in))
				return -EINVAL;
			h.addr_len = sizeof(struct sockaddr_in);
		} else if (addr->sa_family == AF_INET6 && lo->domain == AF_INET6) {
			if (alen < 24) /* SIN6_LEN_RFC2133: no scope id */
				return -EINVAL;
			h.addr_len = alen < sizeof(struct sockaddr_in6) ? (uint16_t)alen : sizeof(struct sockaddr_in6);
		} else {
			return -EAFNOSUPPORT;
		}
		memcpy(h.addr, addr, h.addr_len);
	} else if (!lo->dgram_connected && !(__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) & SL_SK_S_CONNECTED)) {
		return -EDESTADDRREQ;
	}
	const uint32_t rb = shim_rb;
	size_t max = lo->domain == AF_INET ? 65507 : 65527;
	if (total > max || rec_bytes((uint32_t)total) > rb / 2)
		return -EMSGSIZE;
	h.len = (uint32_t)total;
	const uint64_t rec = rec_bytes(h.len);
	uint8_t *data = sl_sk_tx_data(sl, rb);
	int nb = (flags & MSG_DONTWAIT) ? 1 : -1;
	int64_t dl = 0;
	bool err_tried = false;
	for (;;) {
		if (sl->error && !err_tried) { /* as the kernel: a pending error (ICMP) is the answer */
			err_tried = true;
			int e = shim_take_error(slot);
			if (e)
				return e > 0 ? -e : e;
		}
		if (__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) & (SL_SK_S_SHUT_WR | SL_SK_S_TX_CLOSED))
			return epipe(flags);
		bool put = false;
		spin_lock(&lo->txlock);
		uint64_t tail = sl->tx.tail, head = sl_sk_load_acquire(&sl->tx.head);
		uint64_t used = tail - head;
		if (used > rb || (tail & (SL_SK_DGRAM_ALIGN - 1))) {
			spin_unlock(&lo->txlock);
			return -ECONNRESET;
		}
		uint64_t off = tail & (rb - 1), contig = rb - off;
		uint64_t need = contig < rec ? contig + rec : rec;
		if (rb - used >= need) {
			if (contig < rec) { /* the record would wrap: skip to the start */
				if (contig >= SL_SK_DGRAM_HDR) {
					struct sl_sk_dgram skip;
					memset(&skip, 0, sizeof(skip));
					skip.len = SL_SK_DGRAM_SKIP;
					memcpy(data + off, &skip, sizeof(skip));
				}
				tail += contig;
				off = 0;
			}
			memcpy(data + off, &h, sizeof(h));
			iov_to_ring(data, rb, tail + SL_SK_DGRAM_HDR, c, total);
			sl_sk_store_release(&sl->tx.tail, tail + rec);
			put = true;
		}
		spin_unlock(&lo->txlock);
		if (put) {
			tx_doorbell(fd, slot, sl);
			return (ssize_t)total;
		}
		int r = block_out(fd, &sl->tx, need, true);
		if (r < 0)
			return r;
		if (r > 0)
			continue;
		if (nb < 0)
			nb = sk_nonblocking(fd);
		if (nb)
			return -EAGAIN;
		r = sk_wait(fd, POLLOUT, &dl, &lo->sndtimeo);
		if (r < 0)
			return r;
	}
}

/* ---- the two entry points ---- */

static int iov_total(const struct iovec *iov, int cnt, size_t *total)
{
	if (cnt < 0 || cnt > IOV_MAX)
		return -EINVAL;
	size_t t = 0;
	for (int i = 0; i < cnt; i++) {
		if (iov[i].iov_len > (size_t)SSIZE_MAX - t)
			return -EINVAL;
		t += iov[i].iov_len;
	}
	*total = t;
	return 0;
}

ssize_t sk_send(int fd, uint32_t slot, const struct iovec *iov, int iovcnt, int flags, const struct sockaddr *addr,
		socklen_t alen, const struct sl_sk_dctl *ctl)
{
	size_t total;
	int r = iov_total(iov, iovcnt, &total);
	if (r < 0)
		return r;
	if (SHIM_UNLIKELY(__atomic_load_n(&shim_gone, __ATOMIC_RELAXED)))
		return -ECONNRESET; /* nobody takes the bytes any more */
	struct iovc c = { iov, iovcnt, 0, 0 };
	struct slocal *lo = &shim_slocal[slot];
	if (lo->type == SOCK_DGRAM)
		return dgram_send(fd, slot, slot_of(slot), lo, &c, total, flags, addr, alen, ctl);
	return stream_send(fd, slot, slot_of(slot), lo, &c, total, flags);
}

ssize_t sk_recv(int fd, uint32_t slot, const struct iovec *iov, int iovcnt, int flags, struct sockaddr *addr,
		socklen_t *alen, int *msg_flags, struct sl_sk_dctl *ctl)
{
	size_t total;
	int r = iov_total(iov, iovcnt, &total);
	if (r < 0)
		return r;
	struct iovc c = { iov, iovcnt, 0, 0 };
	struct slocal *lo = &shim_slocal[slot];
	if (lo->type == SOCK_DGRAM)
		return dgram_recv(fd, slot, slot_of(slot), lo, &c, total, flags, addr, alen, msg_flags, ctl);
	return stream_recv(fd, slot, slot_of(slot), lo, &c, total, flags, alen);
}

static ssize_t ret_ss(ssize_t r)
{
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

/* ---- the data calls ---- */

SHIM_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(read)(fd, buf, len);
	struct iovec v = { buf, len };
	return ret_ss(sk_recv(fd, e - 1, &v, 1, 0, NULL, NULL, NULL, NULL));
}

SHIM_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(write)(fd, buf, len);
	struct iovec v = { (void *)buf, len };
	return ret_ss(sk_send(fd, e - 1, &v, 1, 0, NULL, 0, NULL));
}

SHIM_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(readv)(fd, iov, cnt);
	return ret_ss(sk_recv(fd, e - 1, iov, cnt, 0, NULL, NULL, NULL, NULL));
}

SHIM_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(writev)(fd, iov, cnt);
	return ret_ss(sk_send(fd, e - 1, iov, cnt, 0, NULL, 0, NULL));
}

SHIM_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(send)(fd, buf, len, flags);
	struct iovec v = { (void *)buf, len };
	return ret_ss(sk_send(fd, e - 1, &v, 1, flags, NULL, 0, NULL));
}

SHIM_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(recv)(fd, buf, len, flags);
	struct iovec v = { buf, len };
	return ret_ss(sk_recv(fd, e - 1, &v, 1, flags, NULL, NULL, NULL, NULL));
}

SHIM_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags, __CONST_SOCKADDR_ARG addr, socklen_t alen)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(sendto)(fd, buf, len, flags, addr.__sockaddr__, alen);
	struct iovec v = { (void *)buf, len };
	return ret_ss(sk_send(fd, e - 1, &v, 1, flags, addr.__sockaddr__, alen, NULL));
}

SHIM_EXPORT ssize_t recvfrom(int fd, void *__restrict buf, size_t len, int flags, __SOCKADDR_ARG addr,
			     socklen_t *__restrict alen)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(recvfrom)(fd, buf, len, flags, addr.__sockaddr__, alen);
	struct iovec v = { buf, len };
	struct sockaddr *sa = addr.__sockaddr__;
	return ret_ss(sk_recv(fd, e - 1, &v, 1, flags, sa, sa ? alen : NULL, NULL, NULL));
}

static ssize_t do_sendmsg(int fd, uint32_t e, const struct msghdr *msg, int flags)
{
	if (msg->msg_iovlen > (size_t)IOV_MAX)
		return -EMSGSIZE;
	struct slocal *lo = &shim_slocal[e - 1];
	struct sl_sk_dctl ctl, *cp = NULL;
	if (lo->type == SOCK_DGRAM && msg->msg_controllen) { /* per-datagram IP_PKTINFO, IP_TTL... */
		int r = shim_cmsg_parse(msg, lo->domain, &ctl);
		if (r < 0)
			return r;
		cp = &ctl;
	}
	return sk_send(fd, e - 1, msg->msg_iov, (int)msg->msg_iovlen, flags, (const struct sockaddr *)msg->msg_name,
		       msg->msg_name ? msg->msg_namelen : 0, cp);
}

static ssize_t do_recvmsg(int fd, uint32_t e, struct msghdr *msg, int flags)
{
	if (msg->msg_iovlen > (size_t)IOV_MAX)
		return -EMSGSIZE;
	int mf = 0;
	socklen_t alen = msg->msg_name ? msg->msg_namelen : 0;
	struct sl_sk_dctl ctl;
	bool dgram = shim_slocal[e - 1].type == SOCK_DGRAM;
	ssize_t r = sk_recv(fd, e - 1, msg->msg_iov, (int)msg->msg_iovlen, flags, (struct sockaddr *)msg->msg_name,
			    &alen, &mf, dgram ? &ctl : NULL);
	if (r >= 0) {
		msg->msg_namelen = msg->msg_name ? alen : 0;
		uint32_t opts = dgram ? __atomic_load_n(&slot_of(e - 1)->rx_opts, __ATOMIC_ACQUIRE) : 0;
		if (opts)
			shim_cmsg_put(msg, &ctl, opts, &mf);
		else
			msg->msg_controllen = 0;
		msg->msg_flags = mf;
	}
	return r;
}

SHIM_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(sendmsg)(fd, msg, flags);
	return ret_ss(do_sendmsg(fd, e, msg, flags));
}

SHIM_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(recvmsg)(fd, msg, flags);
	return ret_ss(do_recvmsg(fd, e, msg, flags));
}

SHIM_EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(sendmmsg)(fd, v, n, flags);
	if (n > 1024)
		n = 1024; /* UIO_MAXIOV, as the kernel */
	unsigned i;
	for (i = 0; i < n; i++) {
		ssize_t r = do_sendmsg(fd, e, &v[i].msg_hdr, flags);
		if (r < 0) {
			if (i)
				break;
			return (int)ret_ss(r);
		}
		v[i].msg_len = (unsigned)r;
	}
	return (int)i;
}

SHIM_EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *tmo)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(recvmmsg)(fd, v, n, flags, tmo);
	if (n > 1024)
		n = 1024;
	unsigned i;
	for (i = 0; i < n; i++) {
		ssize_t r = do_recvmsg(fd, e, &v[i].msg_hdr, flags);
		if (r < 0) {
			if (i)
				break;
			return (int)ret_ss(r);
		}
		v[i].msg_len = (unsigned)r;
		if (flags & MSG_WAITFORONE)
			flags |= MSG_DONTWAIT;
	}
	return (int)i;
}

/* the _FORTIFY_SOURCE entry points */
ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *__restrict buf, size_t len, size_t buflen, int flags, __SOCKADDR_ARG addr,
		       socklen_t *__restrict alen);
extern void __chk_fail(void) __attribute__((noreturn));

SHIM_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
	if (len > buflen)
		__chk_fail();
	return read(fd, buf, len);
}

SHIM_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	if (len > buflen)
		__chk_fail();
	return recv(fd, buf, len, flags);
}

SHIM_EXPORT ssize_t __recvfrom_chk(int fd, void *__restrict buf, size_t len, size_t buflen, int flags,
				   __SOCKADDR_ARG addr, socklen_t *__restrict alen)
{
	if (len > buflen)
		__chk_fail();
	return recvfrom(fd, buf, len, flags, addr, alen);
}

/* sendfile to a shim socket: the file through a 64 KiB buffer into the send ring */
static ssize_t do_sendfile(int out, uint32_t e, int in, off_t *offset, size_t count)
{
	if (fdt_is_sock(fdt_get(in)))
		return -EINVAL; /* as the kernel: the source must be a file */
	if (!count)
		return 0;
	size_t cap = count < 65536 ? count : 65536;
	char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	size_t done = 0;
	ssize_t ret = 0;
	while (done < count) {
		size_t want = count - done < cap ? count - done : cap;
		ssize_t n = offset ? pread(in, buf, want, *offset) : REAL(read)(in, buf, want);
		if (n < 0) {
			ret = -errno;
			break;
		}
		if (n == 0)
			break;
		struct iovec v = { buf, (size_t)n };
		ssize_t s = sk_send(out, e - 1, &v, 1, 0, NULL, 0, NULL);
		ssize_t took = s < 0 ? 0 : s;
		if (offset)
			*offset += took;
		else if (took < n)
			lseek(in, (off_t)(took - n), SEEK_CUR); /* give back what was read and not sent */
		done += (size_t)took;
		if (s < 0) {
			ret = s;
			break;
		}
		if (s < n)
			break;
	}
	free(buf);
	return done ? (ssize_t)done : ret;
}

SHIM_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t count)
{
	uint32_t e = fdt_get(out);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(sendfile)(out, in, offset, count);
	return ret_ss(do_sendfile(out, e, in, offset, count));
}

SHIM_EXPORT ssize_t sendfile64(int out, int in, off64_t *offset, size_t count)
{
	uint32_t e = fdt_get(out);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(sendfile64)(out, in, (off_t *)offset, count);
	return ret_ss(do_sendfile(out, e, in, (off_t *)offset, count));
}

/* FIONREAD/SIOCINQ: bytes in the receive ring (datagrams: the next one's size); SIOCOUTQ: bytes in
 * the send ring; everything else (FIONBIO...) is the placeholder's */
SHIM_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)) || (req != FIONREAD && req != TIOCOUTQ))
		return REAL(ioctl)(fd, req, arg);
	uint32_t slot = e - 1;
	struct sl_sk_slot *sl = slot_of(slot);
	struct slocal *lo = &shim_slocal[slot];
	if (!arg) {
		errno = EFAULT;
		return -1;
	}
	int v;
	if (req == TIOCOUTQ) {
		uint8_t *data;
		struct sl_sk_ring *ring = send_ring(slot, sl, &data);
		uint64_t used = sl_sk_load_acquire(&ring->tail) - sl_sk_load_acquire(&ring->head);
		v = used > shim_rb ? 0 : (int)used;
	} else if (lo->type == SOCK_DGRAM) {
		struct sl_sk_dgram h;
		uint64_t pos;
		spin_lock(&lo->rxlock);
		int r = dgram_next(sl, &h, &pos);
		spin_unlock(&lo->rxlock);
		v = r > 0 ? (int)h.len : 0;
	} else {
		if (__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) & SL_SK_S_LISTENING) {
			errno = EINVAL;
			return -1;
		}
		uint64_t avail = sl_sk_load_acquire(&sl->rx.tail) - sl->rx.head;
		v = avail > shim_rb ? 0 : (int)avail;
	}
	memcpy(arg, &v, sizeof(v));
	return 0;
}
