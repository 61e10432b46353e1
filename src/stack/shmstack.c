/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The shm stack module: when both ends of a connection are shim sockets on this host, the engine
 * pairs them in its connection table and copies bytes from one's send ring to the other's receive
 * ring. No TCP/IP: no segments, no checksums, no ACKs. Addresses and ports are still kept (bind,
 * getsockname, getpeername behave) in a table of bound sockets.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "stackd.h"

#define EPHEMERAL_LO 61000 /* above Linux's default ephemeral range, so auto mode never collides */
#define EPHEMERAL_HI 65535

static struct sk *bound_head;
static uint16_t next_ephemeral = EPHEMERAL_LO;

/* an address as 16 bytes (IPv4 mapped into IPv6) and a port */
struct naddr {
	uint8_t a[16];
	uint16_t port;
};

static const uint8_t v4mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

static bool norm(const struct sockaddr_storage *ss, struct naddr *n)
{
	memset(n, 0, sizeof(*n));
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)ss;
		memcpy(n->a, v4mapped_prefix, 12);
		memcpy(n->a + 12, &in->sin_addr, 4);
		n->port = ntohs(in->sin_port);
		return true;
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)ss;
		memcpy(n->a, &in6->sin6_addr, 16);
		n->port = ntohs(in6->sin6_port);
		return true;
	}
	return false;
}

static bool is_v4(const struct naddr *n)
{
	return !memcmp(n->a, v4mapped_prefix, 12);
}

static bool is_any(const struct naddr *n)
{
	static const uint8_t zero[16];
	return !memcmp(n->a, zero, 16) || (is_v4(n) && !memcmp(n->a + 12, zero, 4));
}

/* the address as a sockaddr of the given family (IPv4 in an AF_INET6 socket is mapped) */
static socklen_t denorm(const struct naddr *n, int domain, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (domain == AF_INET) {
		struct sockaddr_in *in = (void *)ss;
		in->sin_family = AF_INET;
		in->sin_port = htons(n->port);
		memcpy(&in->sin_addr, n->a + 12, 4);
		return sizeof(*in);
	}
	struct sockaddr_in6 *in6 = (void *)ss;
	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons(n->port);
	memcpy(&in6->sin6_addr, n->a, 16);
	return sizeof(*in6);
}

/* would a socket bound at e (of family dom, v6only) receive what is sent to d? */
static bool covers(const struct sk *e, const struct naddr *d)
{
	struct naddr en;
	if (!norm(&e->local, &en) || en.port != d->port)
		return false;
	if (e->domain == AF_INET && !is_v4(d))
		return false;
	if (e->domain == AF_INET6 && is_v4(d) && (e->v6only || (!is_any(&en) && !is_v4(&en))))
		return false;
	if (is_any(&en))
		return is_v4(d) || !is_v4(&en);
	return !memcmp(en.a, d->a, 16);
}

/* Which addresses a socket bound at n takes, as the kernel counts them for bind conflicts: an IPv4
 * part and an IPv6 part, each none, one address or all. [::] takes all of IPv4 too unless v6only. */
enum { SPAN_NONE, SPAN_ONE, SPAN_ALL };
struct span {
	int v4, v6;
};

static struct span span_of(bool v6only, const struct naddr *n)
{
	if (is_v4(n)) /* an AF_INET socket, or an IPv4-mapped address */
		return (struct span){ is_any(n) ? SPAN_ALL : SPAN_ONE, SPAN_NONE };
	if (is_any(n))
		return (struct span){ v6only ? SPAN_NONE : SPAN_ALL, SPAN_ALL };
	return (struct span){ SPAN_NONE, SPAN_ONE };
}

static bool spans_meet(int x, int y, bool same_addr)
{
	return x && y && (x == SPAN_ALL || y == SPAN_ALL || same_addr);
}

/* would binds at a and b (same port) take a common address? */
static bool binds_overlap(bool a_v6only, const struct naddr *a, bool b_v6only, const struct naddr *b)
{
	struct span p = span_of(a_v6only, a), q = span_of(b_v6only, b);
	bool same = !memcmp(a->a, b->a, 16);
	return spans_meet(p.v4, q.v4, same) || spans_meet(p.v6, q.v6, same);
}

static bool port_taken(int type, uint16_t port)
{
	for (struct sk *e = bound_head; e; e = e->bound_next)
		if (e->type == type && addr_port(&e->local) == port)
			return true;
	return false;
}

static uint16_t ephemeral(int type)
{
	for (int i = 0; i <= EPHEMERAL_HI - EPHEMERAL_LO; i++) {
		uint16_t p = next_ephemeral;
		next_ephemeral = p == EPHEMERAL_HI ? EPHEMERAL_LO : p + 1;
		if (!port_taken(type, p))
			return p;
	}
	return 0;
}

static void table_add(struct sk *s)
{
	if (s->in_table)
		return;
	s->bound_next = bound_head;
	bound_head = s;
	s->in_table = true;
}

void shm_unbind(struct sk *s)
{
	if (!s->in_table)
		return;
	for (struct sk **pp = &bound_head; *pp; pp = &(*pp)->bound_next)
		if (*pp == s) {
			*pp = s->bound_next;
			break;
		}
	s->in_table = false;
}

int shm_bind(struct sk *s, const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr_storage ss = { 0 };
	memcpy(&ss, sa, len < sizeof(ss) ? len : sizeof(ss));
	struct naddr n;
	if (!norm(&ss, &n))
		return -EAFNOSUPPORT;
	if (s->kfd < 0) { /* shm alone: conflicts and port 0 are ours to handle (auto: the kernel did) */
		if (!n.port && !(n.port = ephemeral(s->type)))
			return -EADDRINUSE;
		for (struct sk *e = bound_head; e; e = e->bound_next) {
			struct naddr en;
			norm(&e->local, &en);
			if (e->type == s->type && en.port == n.port && binds_overlap(e->v6only, &en, s->v6only, &n) &&
			    !(s->reuseaddr && e->reuseaddr && e->state != SK_LISTEN) && !sk_closed_now(e))
				return -EADDRINUSE;
		}
	}
	s->local_len = denorm(&n, s->domain, &s->local);
	s->state = SK_BOUND;
	table_add(s);
	return 0;
}

/* an unbound socket gets a loopback address of its family and an ephemeral port */
int shm_autobind(struct sk *s)
{
	if (s->in_table || s->local_len)
		return 0;
	struct naddr n = { .port = ephemeral(s->type) };
	if (!n.port)
		return -EADDRNOTAVAIL;
	if (s->domain == AF_INET) {
		memcpy(n.a, v4mapped_prefix, 12);
		n.a[12] = 127;
		n.a[15] = 1;
	} else {
		n.a[15] = 1;
	}
	s->local_len = denorm(&n, s->domain, &s->local);
	table_add(s);
	return 0;
}

int shm_listen(struct sk *s, int backlog)
{
	int rc = shm_autobind(s);
	if (rc)
		return rc;
	s->backlog = backlog < 1 ? 1 : (uint32_t)backlog;
	table_add(s);
	return 0;
}

struct sk *shm_find_listener(const struct sockaddr *sa, int type)
{
	struct sockaddr_storage ss = { 0 };
	memcpy(&ss, sa, sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	struct naddr d;
	if (!norm(&ss, &d))
		return NULL;
	for (struct sk *e = bound_head; e; e = e->bound_next)
		if (e->type == type && (type == SOCK_DGRAM || e->state == SK_LISTEN) && !e->app_closed &&
		    (e->app->stack == SL_SK_STACK_SHM || e->app->stack == SL_SK_STACK_AUTO) && covers(e, &d))
			return e;
	return NULL;
}

/* c connects to listener l: the server's socket is made now, in l's app, and waits for accept */
int shm_connect(struct sk *c, struct sk *l, const struct sockaddr *sa, socklen_t len)
{
	(void)len;
	if (l->accq_len >= l->backlog)
		return -ECONNREFUSED;
	struct sk *a = sk_new(l->app, l->domain, SOCK_STREAM);
	if (!a)
		return -ECONNREFUSED;
	int rc = sk_make_placeholder(a);
	if (rc) {
		sk_free(a);
		return rc;
	}
	if (!c->local_len)
		shm_autobind(c);
	struct sockaddr_storage ss = { 0 };
	memcpy(&ss, sa, sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	struct naddr dst, src, lst;
	norm(&ss, &dst);
	norm(&c->local, &src);
	norm(&l->local, &lst);
	c->remote_len = denorm(&dst, c->domain, &c->remote);
	a->local_len = denorm(is_any(&lst) ? &dst : &lst, a->domain, &a->local);
	a->remote_len = denorm(&src, a->domain, &a->remote);
	c->peer = a;
	a->peer = c;
	c->mode = a->mode = SL_SK_STACK_SHM;
	c->state = a->state = SK_CONNECTED;
	sk_set_state(c, SL_SK_S_CONNECTED | SL_SK_S_SHM, SL_SK_S_CONNECTING);
	sk_set_state(a, SL_SK_S_CONNECTED | SL_SK_S_SHM, 0);
	sk_accq_push(l, a);
	c->app->conns_shm++;
	l->app->conns_shm++;
	shm_direct(c, a);
	sk_token(l);
	return 0;
}

/* The engine leaves the data path of c and a (sock.h "Direct connections") when it may: streams of
 * one owner, neither held to a rate (the engine meters only what it moves). Else, or when the memfd
 * cannot be made, the connection stays on the engine path: both work. */
void shm_direct(struct sk *c, struct sk *a)
{
	struct sl_sk_region *rc = c->app->base, *ra = a->app->base;
	if (!g_direct || c->type != SOCK_STREAM || c->app->rate_Bps || a->app->rate_Bps ||
	    c->app->uid != a->app->uid || rc->ring_bytes != ra->ring_bytes || rc->slot_bytes != ra->slot_bytes)
		return;
	uint64_t sb = rc->slot_bytes;
	struct conn *k = calloc(1, sizeof(*k));
	if (!k)
		return;
	k->size = 2 * sb;
	k->memfd = memfd_create("sluice-conn", MFD_CLOEXEC);
	if (k->memfd < 0 || ftruncate(k->memfd, (off_t)k->size) < 0 ||
	    (k->base = mmap(NULL, k->size, PROT_READ | PROT_WRITE, MAP_SHARED, k->memfd, 0)) == MAP_FAILED) {
		sk_log("direct connection memfd: %s (the connection stays on the engine path)", strerror(errno));
		if (k->memfd >= 0)
			close(k->memfd);
		free(k);
		return;
	}
	k->refs = 2;
	struct sk *end[2] = { c, a };
	struct sl_sk_slot *half[2] = { k->base, (struct sl_sk_slot *)((uint8_t *)k->base + sb) };
	for (int i = 0; i < 2; i++) {
		struct sl_sk_slot *old = end[i]->sh, *n = half[i];
		n->gen = old->gen;
		n->domain = old->domain;
		n->type = old->type;
		n->error = old->error;
		n->state = old->state;
		end[i]->conn = k;
		end[i]->half = (uint32_t)i;
		end[i]->dpeer = half[1 - i];
		end[i]->sh = n;
		end[i]->rxd = sl_sk_rx_data(n);
		end[i]->txd = NULL; /* a direct end sends into its peer's ring, which the peer's shim reads */
		/* the region slot is left as it is now, plus DIRECT: the shim ATTACHes on its next look */
		__atomic_store_n(&old->state, old->state | SL_SK_S_DIRECT, __ATOMIC_RELEASE);
	}
}

int shm_accept(struct sk *l, struct sk **out)
{
	struct sk *a = l->accq_head;
	if (!a)
		return -EAGAIN;
	l->accq_head = a->accq_next;
	if (!l->accq_head)
		l->accq_tail = NULL;
	l->accq_len--;
	a->accq_next = NULL;
	a->listener = NULL;
	*out = a;
	return 0;
}

/* bytes from src's send ring to dst's receive ring */
static void move(struct sk *src, struct sk *dst, uint64_t *budget)
{
	if (src->broken || dst->broken)
		return;
	bool moved = false;
	while (*budget) {
		uint64_t used = sk_tx_used(src);
		if (!used)
			break;
		uint64_t room = sk_rx_free(dst);
		if (!room) {
			sl_sk_xchg(&dst->sh->rx_wanted, 1);
			if (!(room = sk_rx_free(dst)))
				break;
		}
		uint32_t soff = (uint32_t)(src->tx_head & (src->rb - 1));
		uint32_t doff = (uint32_t)(dst->rx_tail & (dst->rb - 1));
		uint64_t n = used < room ? used : room;
		if (n > src->rb - soff)
			n = src->rb - soff;
		if (n > dst->rb - doff)
			n = dst->rb - doff;
		n = sk_budget(src, n < *budget ? n : *budget);
		if (!n)
			break;
		memcpy(dst->rxd + doff, src->txd + soff, n);
		src->tx_head += n;
		dst->rx_tail += n;
		sl_sk_store_release(&src->sh->tx.head, src->tx_head);
		sl_sk_store_release(&dst->sh->rx.tail, dst->rx_tail);
		sk_spend(src, n);
		dst->rx_bytes += n;
		dst->app->rx_bytes += n;
		*budget -= n;
		moved = true;
	}
	if (moved) {
		sk_token(dst);
		if (src->bytes_waiting)
			sk_drain_bytes(src);
	}
}

/* the end of src's stream reaches dst once everything before it has */
static void eof(struct sk *src, struct sk *dst)
{
	if (src->shut_wr_done || !(src->shut_wr || src->app_closed) || sk_tx_used(src))
		return;
	src->shut_wr_done = true;
	sk_set_state(dst, SL_SK_S_RX_EOF, 0);
	sk_token(dst);
}

static void dgram_service(struct sk *s, uint64_t *budget)
{
	struct sl_sk_dgram h;
	const uint8_t *data;
	while (*budget && sk_dgram_take(s, &h, &data) > 0) {
		if (!shm_dgram_deliver(s, &h, data))
			s->drops++;
		sk_spend(s, h.len);
		sk_dgram_done(s, &h);
		*budget -= h.len < *budget ? h.len : *budget;
	}
	if (s->bytes_waiting)
		sk_drain_bytes(s);
}

void shm_service(struct sk *s, uint64_t budget)
{
	uint64_t start = budget;
	if (s->type == SOCK_DGRAM) {
		if (s->kfd < 0)
			dgram_service(s, &budget);
	} else if (s->conn) {
		/* direct: the data is in the peer's ring already; an end reaches it at once */
		if (s->peer && !s->shut_wr_done && (s->shut_wr || s->app_closed)) {
			s->shut_wr_done = true;
			sk_set_state(s->peer, SL_SK_S_RX_EOF, 0);
		}
		if (s->peer) /* that end, or the doorbell or kick of a sender (sock.h): the peer's token */
			sk_token(s->peer);
	} else if (s->peer) {
		move(s, s->peer, &budget);
		move(s->peer, s, &budget);
		eof(s, s->peer);
		eof(s->peer, s);
	}
	if (!budget && start)
		sk_work(s);
}

int shm_dgram_connect(struct sk *s, const struct sockaddr *sa, socklen_t len)
{
	int rc = shm_autobind(s);
	if (rc)
		return rc;
	memset(&s->remote, 0, sizeof(s->remote));
	memcpy(&s->remote, sa, len < sizeof(s->remote) ? len : sizeof(s->remote));
	s->remote_len = len;
	return 0;
}

/* Control messages of a datagram between two shim sockets (sock.h "Control messages"), as the
 * kernel's loopback would give them: the sender's per-datagram values (its sendmsg cmsgs) or else its
 * socket's, the destination it was sent to with ifindex 1 (lo), the time of delivery. The sender's
 * IP_PKTINFO / IPV6_PKTINFO source address, if any, replaces *src (the port stays). 0, or the error
 * of the kernel's sendmsg when that address is not one of this host's: ENETUNREACH for IPv4 (the
 * route lookup's), EINVAL for IPv6 (ip6_datagram_send_ctl's) and for a v4/v6 mix-up. */
static int dgram_ctl(const struct sk *from, const struct sk *to, const struct sl_sk_dctl *in, struct naddr *dst,
		      struct naddr *src, struct sl_sk_dctl *c)
{
	static const uint8_t zero[16];
	bool v4 = is_v4(dst);
	uint16_t has = in->has; /* checked by sk_dgram_next */
	memset(c, 0, sizeof(*c));
	/* the source the sender asked for: IPv4 only from IP_PKTINFO's ipi_spec_dst or an IPv4-mapped
	 * IPV6_PKTINFO (an IPv6 socket sending to IPv4), IPv6 only from IPV6_PKTINFO; 0 / :: = none */
	uint8_t want[16];
	bool asked = false;
	if (v4 && (has & SL_SK_C_PKTINFO) && memcmp(in->spec_dst, zero, 4)) {
		memcpy(want, v4mapped_prefix, 12);
		memcpy(want + 12, in->spec_dst, 4);
		asked = true;
	} else if ((has & SL_SK_C_PKTINFO6) && memcmp(in->addr6, zero, 16)) {
		memcpy(want, in->addr6, 16);
		if (v4 != !memcmp(want, v4mapped_prefix, 12))
			return EINVAL;
		asked = true;
	}
	if (asked && v4 && !memcmp(want + 12, zero, 4))
		asked = false; /* ::ffff:0.0.0.0: none, as ipi_spec_dst 0 */
	if (asked) {
		struct naddr w = { .port = src->port };
		memcpy(w.a, want, 16);
		struct sockaddr_storage ws;
		denorm(&w, v4 ? AF_INET : AF_INET6, &ws);
		if (v4 && (w.a[12] >= 224 || w.a[12] == 0))
			return EINVAL; /* a multicast, broadcast or 0/8 source */
		if (!addr_is_local((const struct sockaddr *)&ws))
			return v4 ? ENETUNREACH : EINVAL;
		*src = w;
	}
	/* a datagram to 0.0.0.0 / :: goes to the loopback address, as the kernel routes it */
	struct naddr d = *dst;
	if (is_any(&d)) {
		memset(d.a, 0, 16);
		if (v4) {
			memcpy(d.a, v4mapped_prefix, 12);
			d.a[12] = 127;
		}
		d.a[15] = 1;
	}
	if (v4) {
		c->has = SL_SK_C_PKTINFO | SL_SK_C_TTL | SL_SK_C_TOS;
		c->ifindex4 = 1;
		memcpy(c->spec_dst, d.a + 12, 4);
		memcpy(c->addr4, d.a + 12, 4);
		c->ttl = (has & SL_SK_C_TTL) ? in->ttl : from->dopt.ttl_set ? from->dopt.ttl : sk_default_ttl(false);
		c->tos = (has & SL_SK_C_TOS) ? in->tos : from->dopt.tos;
	} else {
		c->has = SL_SK_C_HOPLIMIT | SL_SK_C_TCLASS;
		c->hoplimit = (has & SL_SK_C_HOPLIMIT) ? in->hoplimit : from->dopt.hops_set ? from->dopt.hops : sk_default_ttl(true);
		c->tclass = (has & SL_SK_C_TCLASS) ? in->tclass : from->dopt.tclass;
	}
	if (to->domain == AF_INET6) { /* IPV6_PKTINFO; an IPv4 datagram's address is IPv4-mapped */
		c->has |= SL_SK_C_PKTINFO6;
		c->ifindex6 = 1;
		memcpy(c->addr6, d.a, 16);
	}
	if (to->dopt.rx & SL_SK_O_TSTAMP) { /* else the shim stamps it when the app receives, as the kernel */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		c->ts_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
		c->has |= SL_SK_C_TSTAMP;
	}
	return 0;
}

/* a datagram from a shim socket to the local shim datagram socket bound at its destination */
bool shm_dgram_deliver(struct sk *from, const struct sl_sk_dgram *hdr, const uint8_t *data)
{
	struct sockaddr_storage ss = { 0 };
	if (hdr->addr_len) {
		memcpy(&ss, hdr->addr, hdr->addr_len);
	} else if (from->remote_len) {
		ss = from->remote;
	} else {
		return false;
	}
	if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)
		return false;
	struct sk *to = shm_find_listener((const struct sockaddr *)&ss, SOCK_DGRAM);
	if (!to || to->broken)
		return false;
	if (!from->local_len)
		shm_autobind(from);
	struct naddr src, dst_a;
	norm(&from->local, &src);
	norm(&ss, &dst_a);
	struct sl_sk_dctl ctl;
	int e = dgram_ctl(from, to, &hdr->ctl, &dst_a, &src, &ctl);
	if (e) {
		from->sh->error = e; /* as the kernel module: the kernel's sendmsg refused it */
		return true;
	}
	struct sockaddr_storage sa;
	socklen_t sl = denorm(&src, to->domain, &sa);
	uint8_t *dst = sk_dgram_reserve(to, hdr->len);
	if (!dst) {
		to->drops++;
		return true; /* delivered to a full socket: dropped there, as UDP does */
	}
	memcpy(dst, data, hdr->len);
	sk_dgram_commit(to, hdr->len, &sa, sl, &ctl);
	sk_token(to);
	return true;
}

/* s is going away: its peer sees the end (or a reset if s left data unread, as TCP does) */
void shm_close(struct sk *s)
{
	shm_unbind(s);
	if (s->peer) {
		struct sk *p = s->peer;
		p->peer = NULL;
		s->peer = NULL;
		bool unread = s->app_closed ? s->unread_at_close : sk_rx_unread(s);
		if (unread || s->broken)
			p->sh->error = ECONNRESET;
		sk_set_state(p, SL_SK_S_RX_EOF | SL_SK_S_TX_CLOSED | (unread || s->broken ? 0 : SL_SK_S_PEER_FIN), 0);
		sk_token(p);
		sk_work(p);
	}
	/* a listener's connections nobody accepted: their clients are reset */
	struct sk *a;
	while ((a = s->accq_head)) {
		s->accq_head = a->accq_next;
		a->accq_next = NULL;
		a->listener = NULL;
		if (a->peer) {
			struct sk *c = a->peer;
			c->peer = NULL;
			a->peer = NULL;
			c->sh->error = ECONNRESET;
			sk_set_state(c, SL_SK_S_RX_EOF | SL_SK_S_TX_CLOSED, 0);
			sk_token(c);
		}
		sk_free(a);
	}
	s->accq_tail = NULL;
	s->accq_len = 0;
}
