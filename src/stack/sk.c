/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Socket objects and what both stack modules share: the slot in the app's region, the placeholder's
 * engine end (tokens, kicks, filler), the work list that serves sockets round-robin, token buckets.
 * The app writes its slot too: every index read from it is checked before it is used.
 */
#include <errno.h>
#include <poll.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#ifndef SO_TIMESTAMP_NEW
#define SO_TIMESTAMP_NEW 63
#define SO_TIMESTAMPNS_NEW 64
#endif

#include "stackd.h"

struct app *g_apps;
uint64_t g_nsocks;
int g_epfd = -1;
bool g_direct = true;

static struct sk *work_head, *work_tail;

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sk_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sluice-stackd: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

int sk_epoll_add(int fd, struct ev *ev, uint32_t events)
{
	struct epoll_event e = { .events = events, .data.ptr = ev };
	return epoll_ctl(g_epfd, EPOLL_CTL_ADD, fd, &e);
}

struct sk *sk_new(struct app *a, int domain, int type)
{
	uint32_t slot;
	for (slot = 0; slot < a->nslots; slot++)
		if (!a->socks[slot])
			break;
	if (slot == a->nslots)
		return NULL;
	struct sk *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->app = a;
	s->slot = slot;
	s->sh = sl_sk_slot_at(a->base, slot);
	s->rb = a->ring_bytes;
	s->rxd = sl_sk_rx_data(s->sh);
	s->txd = sl_sk_tx_data(s->sh, s->rb);
	s->domain = domain;
	s->type = type;
	s->mode = a->stack;
	s->efd = s->app_fd = s->kfd = -1;
	s->ev_e = (struct ev){ EV_ENGINE_END, s };
	s->ev_k = (struct ev){ EV_KERNEL, s };
	struct sl_sk_slot *sh = s->sh;
	uint32_t gen = sh->gen + 1;
	memset(sh, 0, sizeof(*sh));
	sh->gen = gen;
	sh->domain = (uint32_t)domain;
	sh->type = (uint32_t)type;
	a->socks[slot] = s;
	a->nsocks++;
	a->refs++;
	g_nsocks++;
	return s;
}

/* the app's stack memory goes once nothing of it is left: no channel, no socket */
void app_put(struct app *a)
{
	if (--a->refs)
		return;
	for (struct app **pp = &g_apps; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	munmap(a->base, a->size);
	close(a->memfd);
	free(a->socks);
	free(a);
}

static void work_unlink(struct sk *s)
{
	struct sk **pp = &work_head, *prev = NULL;
	for (; *pp; prev = *pp, pp = &(*pp)->work_next)
		if (*pp == s) {
			*pp = s->work_next;
			if (work_tail == s)
				work_tail = prev;
			break;
		}
	s->in_work = false;
}

/* What a direct end has sent and taken: ring positions, which start at 0 with the connection. The
 * apps write them: statistics only. */
void sk_direct_bytes(const struct sk *s, uint64_t *tx, uint64_t *rx)
{
	*tx = s->conn ? __atomic_load_n(&s->dpeer->rx.tail, __ATOMIC_RELAXED) : 0;
	*rx = s->conn ? __atomic_load_n(&s->sh->rx.head, __ATOMIC_RELAXED) : 0;
}

static void conn_put(struct conn *k)
{
	if (--k->refs)
		return;
	munmap(k->base, k->size);
	close(k->memfd);
	free(k);
}

void sk_free(struct sk *s)
{
	if (s->in_work)
		work_unlink(s);
	if (s->conn) {
		uint64_t tx, rx;
		sk_direct_bytes(s, &tx, &rx);
		s->app->tx_bytes += tx;
		s->app->rx_bytes += rx;
		conn_put(s->conn);
	}
	sk_unthrottle_one(s);
	if (s->efd >= 0) {
		/* the peer of a direct connection holds a copy of this end: its epoll registration would
		 * outlive close() (it belongs to the open file, not to the fd) and name a freed sk */
		epoll_ctl(g_epfd, EPOLL_CTL_DEL, s->efd, NULL);
		close(s->efd);
	}
	if (s->app_fd >= 0)
		close(s->app_fd);
	if (s->kfd >= 0)
		close(s->kfd);
	struct app *a = s->app;
	a->socks[s->slot] = NULL;
	a->nsocks--;
	g_nsocks--;
	free(s);
	app_put(a);
}

void sk_work(struct sk *s)
{
	if (s->in_work)
		return;
	s->in_work = true;
	s->work_next = NULL;
	if (work_tail)
		work_tail->work_next = s;
	else
		work_head = s;
	work_tail = s;
}

struct sk *sk_work_pop(void)
{
	struct sk *s = work_head;
	if (!s)
		return NULL;
	work_head = s->work_next;
	if (!work_head)
		work_tail = NULL;
	s->in_work = false;
	s->work_next = NULL;
	return s;
}

bool sk_work_pending(void)
{
	return work_head != NULL;
}

void sk_set_state(struct sk *s, uint32_t set, uint32_t clear)
{
	uint32_t st = s->sh->state;
	__atomic_store_n(&s->sh->state, (st & ~clear) | set, __ATOMIC_RELEASE);
}

/* engine-owned indices are kept privately (tx head, rx tail live in struct sk's ring mirrors): the
 * shared copies are only ever written by the engine, and what the app owns is read and checked */
bool sk_ring_sane(struct sk *s)
{
	/* Direct: both indices of each ring are the apps', moving while we look, so no pair read here is
	 * a snapshot to judge by; each shim checks what it reads, and the engine only ever uses them
	 * clamped (ring_used), so a forged one breaks that connection and nothing else. */
	if (s->conn)
		return true;
	uint64_t tx_tail = sl_sk_load_acquire(&s->sh->tx.tail);
	uint64_t rx_head = sl_sk_load_acquire(&s->sh->rx.head);
	return tx_tail - s->tx_head <= s->rb && s->rx_tail - rx_head <= s->rb;
}

/* direct: the bytes in a ring both apps index */
static uint64_t ring_used(struct sl_sk_ring *r, uint32_t rb)
{
	/* the head first: the answer can only be too high, and only if the reader took data after
	 * that load (sk_drain_bytes relies on it) */
	uint64_t head = sl_sk_load_acquire(&r->head);
	uint64_t used = sl_sk_load_acquire(&r->tail) - head;
	return used <= rb ? used : rb;
}

uint64_t sk_tx_used(struct sk *s)
{
	if (s->conn) /* what the peer has not taken yet of what this end sent */
		return ring_used(&s->dpeer->rx, s->rb);
	uint64_t used = sl_sk_load_acquire(&s->sh->tx.tail) - s->tx_head;
	return used <= s->rb ? used : 0;
}

uint64_t sk_rx_free(struct sk *s)
{
	if (s->conn)
		return s->rb - ring_used(&s->sh->rx, s->rb);
	uint64_t used = s->rx_tail - sl_sk_load_acquire(&s->sh->rx.head);
	return used <= s->rb ? s->rb - used : 0;
}

/* As TCP: a stream closed with data unread resets its peer; one closed with nothing unread ends it
 * (FIN), and what the peer sends after that end gets EPIPE, not a reset (tcp_reset in CLOSE_WAIT).
 * So whether data was unread is taken when the close is seen, not when the socket is freed. */
void sk_app_closed(struct sk *s)
{
	if (s->app_closed)
		return;
	s->app_closed = true;
	s->unread_at_close = sk_rx_unread(s);
}

/* its receive ring holds data its program has not read */
bool sk_rx_unread(struct sk *s)
{
	return s->conn ? sk_rx_free(s) != s->rb : s->rx_tail != sl_sk_load_acquire(&s->sh->rx.head);
}

bool sk_readable(struct sk *s)
{
	uint32_t st = s->sh->state;
	/* direct: the peer's shim is the producer, so the tail is the shared one */
	uint64_t tail = s->conn ? __atomic_load_n(&s->sh->rx.tail, __ATOMIC_SEQ_CST) : s->rx_tail;
	return tail != __atomic_load_n(&s->sh->rx.head, __ATOMIC_SEQ_CST) || (st & SL_SK_S_RX_EOF) ||
	       s->sh->error || s->sh->acceptq;
}

/* a listener's acceptq: the shm connections waiting, and one for a kernel listener that said EPOLLIN */
/* a connection made for listener l, on its accept queue (shm_accept takes it off) */
void sk_accq_push(struct sk *l, struct sk *a)
{
	a->listener = l;
	if (l->accq_tail)
		l->accq_tail->accq_next = a;
	else
		l->accq_head = a;
	l->accq_tail = a;
	l->accq_len++;
	sk_listener_update(l);
}

void sk_listener_update(struct sk *l)
{
	l->sh->acceptq = l->accq_len + (l->kernel_accept_ready ? 1 : 0);
}

/* the readable token (sock.h): one byte in the placeholder while the socket is readable */
void sk_token(struct sk *s)
{
	if (s->app_closed || s->efd < 0 || s->efd_shut || !sk_readable(s))
		return;
	/* A stream's end is for good: the placeholder's own EOF says it from now on (EPOLLIN and
	 * EPOLLRDHUP, as a kernel socket after the peer's FIN), and no token is needed any more. */
	if (s->type == SOCK_STREAM && (s->sh->state & SL_SK_S_RX_EOF)) {
		shutdown(s->efd, SHUT_WR);
		s->efd_shut = true;
		return;
	}
	/* a thread of the app is polling the ring: it sees this itself (sock.h "Polling receivers") */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&s->sh->rx_spin, __ATOMIC_RELAXED)) {
		s->token_polled++;
		return;
	}
	if (!sl_sk_cas(&s->sh->rd_token, 0, SL_SK_TOKEN_WRITING))
		return;
	/* look again after claiming the token: the app may have taken the data meanwhile (sock.h) */
	if (!sk_readable(s)) {
		__atomic_store_n(&s->sh->rd_token, 0, __ATOMIC_SEQ_CST);
		return;
	}
	char t = 't';
	ssize_t w = send(s->efd, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (w < 0) {
		s->token_fail++; /* counted, not logged: a program that never reads its tokens could flood the log */
		if (errno == EPIPE || errno == ECONNRESET)
			sk_app_closed(s);
	}
	s->token_sent++;
	__atomic_store_n(&s->sh->rd_token, SL_SK_TOKEN_PRESENT, __ATOMIC_SEQ_CST);
}

/* Kicks and filler from the app: read them once the send ring is at most 3/4 full (that is what
 * makes a placeholder writable again), never while a connect is under way. */
void sk_drain_bytes(struct sk *s)
{
	if (s->efd < 0)
		return;
	if (s->state == SK_CONNECTING || sk_tx_used(s) > (uint64_t)s->rb / 4 * 3) {
		s->bytes_waiting = true;
		if (!s->conn) /* (a direct end is connected from the start) */
			return;
		/* direct: the peer takes from that ring without us; its next receive must kick, and a
		 * receive between our look and the flag is caught by the look after it (sock.h) */
		sl_sk_xchg(&s->dpeer->rx_wanted, 1);
		if (sk_tx_used(s) > (uint64_t)s->rb / 4 * 3)
			return;
	}
	/* bounded: a program that keeps writing into its placeholder must not keep the engine here */
	char buf[4096];
	for (int i = 0; i < 4; i++) {
		ssize_t n = recv(s->efd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < (ssize_t)sizeof(buf)) {
			s->bytes_waiting = false;
			return;
		}
	}
	s->bytes_waiting = true; /* more: the next turn goes on */
	sk_work(s);
}

/* Closed by its program already, though the engine has not served the hang-up yet: a kernel socket's
 * close frees its port at once, and a program that closes and binds again (iperf3 -s between
 * tests) must not find it taken. */
bool sk_closed_now(struct sk *e)
{
	if (e->app_closed)
		return true;
	if (e->efd < 0 || e->app_fd >= 0) /* app_fd: the program does not have it yet */
		return false;
	struct pollfd p = { .fd = e->efd, .events = POLLRDHUP };
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
		sk_app_closed(e);
		sk_work(e);
		return true;
	}
	return false;
}

void sk_reset(struct sk *s, int err)
{
	s->sh->error = err;
	sk_set_state(s, SL_SK_S_RX_EOF | SL_SK_S_TX_CLOSED, SL_SK_S_CONNECTING);
	s->broken = true;
	s->app->resets++;
	sk_token(s);
}

static struct sk *throttled_head;

uint64_t sk_budget(struct sk *s, uint64_t want)
{
	struct app *a = s->app;
	if (!a->rate_Bps)
		return want;
	uint64_t now = now_ns();
	double burst = a->rate_Bps / 50.0 > 65536 ? a->rate_Bps / 50.0 : 65536;
	a->tokens += (double)(now - a->bucket_ns) * (double)a->rate_Bps / 1e9;
	if (a->tokens > burst)
		a->tokens = burst;
	a->bucket_ns = now;
	if (a->tokens < (double)want)
		a->throttled++; /* held to its rate this turn (sluice stats: THROTTLED) */
	/* Grant at least a useful amount (16 KiB, or what is asked if less) or nothing: a socket fed a
	 * few bytes per turn keeps the engine spinning, and every other socket waits for the CPU. */
	double least = want < 16384 ? (double)want : 16384;
	if (a->tokens < (least > 1 ? least : 1)) {
		if (!s->throttled) {
			s->throttled = true;
			s->throttle_next = throttled_head;
			throttled_head = s;
		}
		return 0;
	}
	return a->tokens < (double)want ? (uint64_t)a->tokens : want;
}

void sk_spend(struct sk *s, uint64_t n)
{
	if (s->app->rate_Bps)
		s->app->tokens -= (double)n;
	s->app->tx_bytes += n;
	s->tx_bytes += n;
}

bool sk_throttled_any(void)
{
	return throttled_head != NULL;
}

/* every throttled socket back on the work list (the engine calls this each millisecond) */
void sk_unthrottle(void)
{
	struct sk *s = throttled_head;
	throttled_head = NULL;
	while (s) {
		struct sk *next = s->throttle_next;
		s->throttled = false;
		s->throttle_next = NULL;
		sk_work(s);
		s = next;
	}
}

void sk_unthrottle_one(struct sk *s)
{
	if (!s->throttled)
		return;
	for (struct sk **pp = &throttled_head; *pp; pp = &(*pp)->throttle_next)
		if (*pp == s) {
			*pp = s->throttle_next;
			break;
		}
	s->throttled = false;
}

/* The placeholder: the app's end is its socket fd, blocking, with the smallest send buffer so that
 * a few filler bytes make it not writable; the engine's end is non-blocking in the epoll set. */
int sk_make_placeholder(struct sk *s)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	int one = 1;
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	if (sk_epoll_add(sv[1], &s->ev_e, EPOLLIN | EPOLLRDHUP | EPOLLET) < 0) {
		int e = errno;
		close(sv[0]);
		close(sv[1]);
		return -e;
	}
	s->app_fd = sv[0];
	s->efd = sv[1];
	return 0;
}

/* loopback or an address of this host */
bool addr_is_local(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		uint32_t a = ntohl(in->sin_addr.s_addr);
		if ((a >> 24) == 127)
			return true;
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
			return true;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127)
			return true;
	} else {
		return false;
	}
	struct ifaddrs *ifs, *i;
	bool local = false;
	if (getifaddrs(&ifs) < 0)
		return false;
	for (i = ifs; i && !local; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != sa->sa_family)
			continue;
		if (sa->sa_family == AF_INET)
			local = ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr ==
				((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr;
		else
			local = !memcmp(&((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr,
					&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
	}
	freeifaddrs(ifs);
	return local;
}

uint16_t addr_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)ss)->sin_port);
	if (ss->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)(const void *)ss)->sin6_port);
	return 0;
}

void addr_set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)(void *)ss)->sin_port = htons(port);
	else if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)(void *)ss)->sin6_port = htons(port);
}

/* ---- datagram records (sock.h): 8-aligned, never wrapping ---- */

static uint32_t rec_bytes(uint32_t len)
{
	return SL_SK_DGRAM_HDR + ((len + SL_SK_DGRAM_ALIGN - 1) & ~(SL_SK_DGRAM_ALIGN - 1));
}

/* The next record of the send ring: 1 and its header (copied) and data, 0 if none, -1 if the app
 * wrote nonsense. Skips padding at the wrap on the way. */
/* The next datagram of the send ring to send now: 1 (hdr, data set; the token bucket granted it), 0
 * (none, or the bucket says wait), -1 (a forged record: the socket was reset). Every module's loop. */
int sk_dgram_take(struct sk *s, struct sl_sk_dgram *hdr, const uint8_t **data)
{
	int r = sk_dgram_next(s, hdr, data);
	if (r < 0) {
		sk_reset(s, ECONNRESET);
		return -1;
	}
	return r > 0 && sk_budget(s, hdr->len ? hdr->len : 1) ? 1 : 0;
}

int sk_dgram_next(struct sk *s, struct sl_sk_dgram *hdr, const uint8_t **data)
{
	for (;;) {
		uint64_t used = sk_tx_used(s);
		if (!used)
			return 0;
		uint32_t off = (uint32_t)(s->tx_head & (s->rb - 1));
		uint32_t rest = s->rb - off;
		if (rest < SL_SK_DGRAM_HDR) {
			if (used < rest)
				return -1;
			s->tx_head += rest;
			continue;
		}
		memcpy(hdr, s->txd + off, sizeof(*hdr));
		if (hdr->len == SL_SK_DGRAM_SKIP) {
			if (used < rest)
				return -1;
			s->tx_head += rest;
			continue;
		}
		if (hdr->len > 65535 || hdr->addr_len > SL_SK_ADDR_MAX || rec_bytes(hdr->len) > rest ||
		    rec_bytes(hdr->len) > used || (s->tx_head & (SL_SK_DGRAM_ALIGN - 1)))
			return -1;
		/* the control area as the shim checks it (sock.h); anything else of it is ignored */
		struct sl_sk_dctl *c = &hdr->ctl;
		if (c->ver != SL_SK_DCTL_V1)
			c->has = 0;
		c->has &= SL_SK_C_SEND;
		if (!c->ttl)
			c->has &= ~SL_SK_C_TTL;
		if (!(c->has & SL_SK_C_TCLASS))
			c->has &= ~SL_SK_C_TCLASS_M1;
		*data = s->txd + off + SL_SK_DGRAM_HDR;
		return 1;
	}
}

void sk_dgram_done(struct sk *s, const struct sl_sk_dgram *hdr)
{
	s->tx_head += rec_bytes(hdr->len);
	sl_sk_store_release(&s->sh->tx.head, s->tx_head);
}

/* Room for a datagram of len bytes in the receive ring: where its data goes, or NULL (full: the
 * caller drops it or waits). sk_dgram_commit then publishes it. */
uint8_t *sk_dgram_reserve(struct sk *s, uint32_t len)
{
	uint32_t rec = rec_bytes(len);
	if (rec > s->rb / 2)
		return NULL;
	uint64_t free_b = sk_rx_free(s);
	uint32_t off = (uint32_t)(s->rx_tail & (s->rb - 1));
	uint32_t rest = s->rb - off;
	if (rec > rest) {
		if (free_b < (uint64_t)rest + rec)
			return NULL;
		if (rest >= SL_SK_DGRAM_HDR) {
			struct sl_sk_dgram skip = { .len = SL_SK_DGRAM_SKIP };
			memcpy(s->rxd + off, &skip, sizeof(skip));
		}
		s->rx_tail += rest; /* published with the record */
		off = 0;
	} else if (free_b < rec) {
		return NULL;
	}
	return s->rxd + off + SL_SK_DGRAM_HDR;
}

void sk_dgram_commit(struct sk *s, uint32_t len, const void *addr, uint32_t addr_len, const struct sl_sk_dctl *ctl)
{
	uint32_t off = (uint32_t)(s->rx_tail & (s->rb - 1));
	struct sl_sk_dgram h = { .len = len, .addr_len = (uint16_t)(addr_len > SL_SK_ADDR_MAX ? 0 : addr_len) };
	if (h.addr_len)
		memcpy(h.addr, addr, h.addr_len);
	if (ctl && ctl->has) {
		h.ctl = *ctl;
		h.ctl.ver = SL_SK_DCTL_V1;
	}
	memcpy(s->rxd + off, &h, sizeof(h));
	s->rx_tail += rec_bytes(len);
	sl_sk_store_release(&s->sh->rx.tail, s->rx_tail);
	s->rx_bytes += len;
	s->app->rx_bytes += len;
}

/* ---- IP-level options and the receive options of datagram control messages (sock.h rx_opts) ----
 * The engine keeps them for every socket, whichever module serves it: the kernel module applies the
 * option to its kernel socket first and keeps it once the kernel took it (the kernel then gives the
 * cmsgs, the slot's rx_opts tells the shim which to show); the shm module checks the value as the
 * kernel does, keeps it, and answers getsockopt from it. */

static int sysctl_int(const char *path, int dflt)
{
	FILE *f = fopen(path, "re");
	int v;
	if (!f)
		return dflt;
	if (fscanf(f, "%d", &v) != 1 || v < 1 || v > 255)
		v = dflt;
	fclose(f);
	return v;
}

/* the kernel's defaults in sluice-stackd's network namespace: a socket without IP_TTL /
 * IPV6_UNICAST_HOPS of its own sends with these (64 unless the sysctls say otherwise) */
uint8_t sk_default_ttl(bool v6)
{
	static int ttl, hops;
	if (!ttl) {
		ttl = sysctl_int("/proc/sys/net/ipv4/ip_default_ttl", 64);
		hops = sysctl_int("/proc/sys/net/ipv6/conf/all/hop_limit", 64);
	}
	return (uint8_t)(v6 ? hops : ttl);
}

static void dopt_flag(struct sk *s, uint32_t bit, bool on)
{
	if (on)
		s->dopt.rx |= bit;
	else
		s->dopt.rx &= ~bit;
	__atomic_store_n(&s->sh->rx_opts, s->dopt.rx, __ATOMIC_RELEASE);
}

/* the options kept: a receive option's SL_SK_O_* bit, or a value of struct sk_dopt (bit 0) */
static const struct {
	int level, name;
	uint32_t bit;
} dopts[] = {
	{ IPPROTO_IP, IP_PKTINFO, SL_SK_O_PKTINFO },
	{ IPPROTO_IP, IP_RECVTTL, SL_SK_O_RECVTTL },
	{ IPPROTO_IP, IP_RECVTOS, SL_SK_O_RECVTOS },
	{ IPPROTO_IP, IP_TTL, 0 },
	{ IPPROTO_IP, IP_TOS, 0 },
	{ IPPROTO_IPV6, IPV6_RECVPKTINFO, SL_SK_O_RECVPKTINFO6 },
	{ IPPROTO_IPV6, IPV6_RECVHOPLIMIT, SL_SK_O_RECVHOPLIMIT },
	{ IPPROTO_IPV6, IPV6_RECVTCLASS, SL_SK_O_RECVTCLASS },
	{ IPPROTO_IPV6, IPV6_UNICAST_HOPS, 0 },
	{ IPPROTO_IPV6, IPV6_TCLASS, 0 },
};

/* one of dopts: 0 with its bit, or 1 */
static int dopt_find(int level, int name, uint32_t *bit)
{
	for (size_t i = 0; i < sizeof(dopts) / sizeof(dopts[0]); i++)
		if (dopts[i].level == level && dopts[i].name == name) {
			*bit = dopts[i].bit;
			return 0;
		}
	return 1;
}

/* SO_TIMESTAMP and its kin: 1 with whether it is the nanosecond / _NEW form, or 0 */
static bool ts_opt(int name, bool *ns, bool *nw)
{
	*ns = name == SO_TIMESTAMPNS || name == SO_TIMESTAMPNS_NEW;
	*nw = name == SO_TIMESTAMP_NEW || name == SO_TIMESTAMPNS_NEW;
	return *ns || *nw || name == SO_TIMESTAMP;
}

/* setsockopt of one of these options: 0 (kept), -errno (the kernel would refuse it: EINVAL,
 * ENOPROTOOPT), 1 (not one of them) */
int sk_dopt_set(struct sk *s, int level, int name, const uint8_t *p, uint32_t len)
{
	int v = 0;
	uint32_t bit;
	bool ns, nw;
	if (level == SOL_SOCKET && ts_opt(name, &ns, &nw)) {
		if (len < sizeof(int))
			return -EINVAL;
		memcpy(&v, p, sizeof(int));
		/* sock_set_timestamp: one of the two cmsgs at a time, the last one asked */
		dopt_flag(s, SL_SK_O_TSTAMP_NEW, nw);
		dopt_flag(s, SL_SK_O_TSTAMPNS, v && ns);
		dopt_flag(s, SL_SK_O_TSTAMP, v);
		return 0;
	}
	if (dopt_find(level, name, &bit))
		return 1;
	bool v6 = level == IPPROTO_IPV6;
	if (v6 && s->domain != AF_INET6)
		return -ENOPROTOOPT;
	if (len >= sizeof(int))
		memcpy(&v, p, sizeof(int));
	else if (v6)
		return -EINVAL;
	else if (len >= 1)
		v = p[0]; /* ip_setsockopt takes one byte too */
	if (bit) {
		dopt_flag(s, bit, v);
		return 0;
	}
	if (!v6 && name == IP_TOS) {
		s->dopt.tos = (uint8_t)v; /* any value: the kernel keeps the low byte */
		return 0;
	}
	if (v < -1 || v > 255 || (!v6 && !v)) /* IP_TTL 1..255, the IPv6 ones 0..255; -1: the default */
		return -EINVAL;
	if (!v6) {
		s->dopt.ttl_set = v != -1;
		s->dopt.ttl = (uint8_t)v;
	} else if (name == IPV6_UNICAST_HOPS) {
		s->dopt.hops_set = v != -1;
		s->dopt.hops = (uint8_t)v;
	} else {
		s->dopt.tclass = v < 0 ? 0 : (uint8_t)v; /* IPV6_TCLASS -1: 0 */
	}
	return 0;
}

/* getsockopt of one of them as the kernel answers it: 0 and *v, -errno, or 1 (not one of them) */
int sk_dopt_get(const struct sk *s, int level, int name, int *v)
{
	uint32_t rx = s->dopt.rx, bit;
	bool ns, nw;
	if (level == SOL_SOCKET && ts_opt(name, &ns, &nw)) {
		/* sk_getsockopt: each form reads 1 only while it is the one on */
		bool on_ns = rx & SL_SK_O_TSTAMPNS, on_nw = rx & SL_SK_O_TSTAMP_NEW;
		*v = nw == on_nw && (ns ? on_ns : (rx & SL_SK_O_TSTAMP) && (nw || !on_ns));
		return 0;
	}
	if (dopt_find(level, name, &bit))
		return 1;
	if (level == IPPROTO_IPV6 && s->domain != AF_INET6)
		return -EOPNOTSUPP; /* ip_getsockopt's answer (setsockopt's is ENOPROTOOPT) */
	if (bit)
		*v = !!(rx & bit);
	else if (name == IP_TTL && level == IPPROTO_IP)
		*v = s->dopt.ttl_set ? s->dopt.ttl : sk_default_ttl(false);
	else if (level == IPPROTO_IP) /* IP_TOS */
		*v = s->dopt.tos;
	else if (name == IPV6_UNICAST_HOPS)
		*v = s->dopt.hops_set ? s->dopt.hops : sk_default_ttl(true);
	else /* IPV6_TCLASS */
		*v = s->dopt.tclass;
	return 0;
}
