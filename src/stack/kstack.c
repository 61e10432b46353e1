/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The kernel stack module: each shim socket has a real, non-blocking kernel socket in
 * sluice-stackd's network namespace, and the engine performs the app's calls on it. Data moves
 * between the kernel socket and the slot's rings; edge-triggered epoll says when to look again.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "stackd.h"

#ifndef SO_TIMESTAMP_NEW
#define SO_TIMESTAMP_NEW 63
#define SO_TIMESTAMPNS_NEW 64
#endif

#define KEVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET)

static int kwatch(struct sk *s, uint32_t events)
{
	if (s->k_in_epoll)
		return 0;
	if (sk_epoll_add(s->kfd, &s->ev_k, events) < 0)
		return -errno;
	s->k_in_epoll = true;
	return 0;
}

int kstack_socket(struct sk *s)
{
	s->kfd = socket(s->domain, s->type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->kfd < 0)
		return -errno;
	if (s->type == SOCK_DGRAM) {
		s->k_writable = true;
		return kwatch(s, KEVENTS);
	}
	return 0;
}

int kstack_bind(struct sk *s, const struct sockaddr *sa, socklen_t len)
{
	return bind(s->kfd, sa, len) < 0 ? -errno : 0;
}

int kstack_listen(struct sk *s, int backlog)
{
	if (listen(s->kfd, backlog) < 0)
		return -errno;
	return kwatch(s, EPOLLIN | EPOLLET);
}

int kstack_connect(struct sk *s, const struct sockaddr *sa, socklen_t len)
{
	int r = connect(s->kfd, sa, len);
	if (r < 0 && errno != EINPROGRESS)
		return -errno;
	int rc = r < 0 ? -EINPROGRESS : 0;
	if (s->type == SOCK_DGRAM)
		return 0;
	s->mode = SL_SK_STACK_KERNEL;
	s->app->conns_kernel++;
	int w = kwatch(s, KEVENTS);
	if (w)
		return w;
	if (rc == -EINPROGRESS) {
		s->state = SK_CONNECTING;
		sk_set_state(s, SL_SK_S_CONNECTING, 0);
	} else {
		s->state = SK_CONNECTED;
		s->k_writable = s->k_readable = true;
		sk_set_state(s, SL_SK_S_CONNECTED, 0);
	}
	return rc;
}

/* a connection from the kernel listener: a new socket of the listener's app (no placeholder yet) */
int kstack_accept(struct sk *l, struct sk **out)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = accept4(l->kfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (e == EAGAIN || e == EWOULDBLOCK)
			l->kernel_accept_ready = false;
		return e == EWOULDBLOCK ? -EAGAIN : -e;
	}
	/* is another one waiting? (the listener's placeholder stays readable only then) */
	struct pollfd pf = { .fd = l->kfd, .events = POLLIN };
	l->kernel_accept_ready = poll(&pf, 1, 0) == 1;
	struct sk *s = sk_new(l->app, l->domain, SOCK_STREAM);
	if (!s) {
		close(fd);
		return -EMFILE;
	}
	s->kfd = fd;
	s->mode = SL_SK_STACK_KERNEL;
	s->state = SK_CONNECTED;
	s->k_readable = s->k_writable = true;
	s->remote = ss;
	s->remote_len = sl;
	sk_set_state(s, SL_SK_S_CONNECTED, 0);
	l->app->conns_kernel++;
	int w = kwatch(s, KEVENTS);
	if (w) {
		sk_free(s);
		return w;
	}
	*out = s;
	return 0;
}

void kstack_event(struct sk *s, uint32_t ev)
{
	if (s->state == SK_LISTEN) {
		if (ev & EPOLLIN)
			s->kernel_accept_ready = true;
		return;
	}
	if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		s->k_readable = true;
	if (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		s->k_rdhup = true;
	if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR))
		s->k_writable = true;
	if (s->state == SK_CONNECTING && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
		int err = 0;
		socklen_t el = sizeof(err);
		getsockopt(s->kfd, SOL_SOCKET, SO_ERROR, &err, &el);
		if (err) {
			s->state = SK_NEW;
			s->sh->error = err;
			sk_set_state(s, 0, SL_SK_S_CONNECTING);
		} else {
			s->state = SK_CONNECTED;
			sk_set_state(s, SL_SK_S_CONNECTED, SL_SK_S_CONNECTING);
		}
		s->bytes_waiting = true; /* the filler the shim put in while connecting */
	}
}

static void stream_tx(struct sk *s, uint64_t *budget)
{
	while (s->k_writable && *budget) {
		uint64_t used = sk_tx_used(s);
		if (!used)
			break;
		uint32_t off = (uint32_t)(s->tx_head & (s->rb - 1));
		uint64_t chunk = s->rb - off < used ? s->rb - off : used;
		chunk = sk_budget(s, chunk < *budget ? chunk : *budget);
		if (!chunk)
			return;
		ssize_t n = send(s->kfd, s->txd + off, chunk, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				s->k_writable = false;
			} else if (errno != EINTR) {
				sk_reset(s, errno);
				return;
			}
			continue;
		}
		s->tx_head += (uint64_t)n;
		sl_sk_store_release(&s->sh->tx.head, s->tx_head);
		sk_spend(s, (uint64_t)n);
		*budget -= (uint64_t)n;
	}
	if (s->shut_wr && !s->shut_wr_done && !sk_tx_used(s)) {
		shutdown(s->kfd, SHUT_WR);
		s->shut_wr_done = true;
	}
}

static void stream_rx(struct sk *s, uint64_t *budget)
{
	while (s->k_readable && *budget && !(s->sh->state & SL_SK_S_RX_EOF)) {
		uint64_t room = sk_rx_free(s);
		if (!room) {
			sl_sk_xchg(&s->sh->rx_wanted, 1);
			if (!(room = sk_rx_free(s)))
				return;
		}
		uint32_t off = (uint32_t)(s->rx_tail & (s->rb - 1));
		uint64_t chunk = s->rb - off < room ? s->rb - off : room;
		if (chunk > *budget)
			chunk = *budget;
		ssize_t n = recv(s->kfd, s->rxd + off, chunk, MSG_DONTWAIT);
		if (n > 0) {
			s->rx_tail += (uint64_t)n;
			sl_sk_store_release(&s->sh->rx.tail, s->rx_tail);
			s->rx_bytes += (uint64_t)n;
			s->app->rx_bytes += (uint64_t)n;
			*budget -= (uint64_t)n;
			/* Less than asked: the queue was empty when TCP copied; data that comes later is a new
			 * edge. So no recv() just to hear EAGAIN (one system call per message), unless the
			 * end was reported: then read on to the 0 that says so. */
			if ((uint64_t)n < chunk && !s->k_rdhup)
				s->k_readable = false;
		} else if (n == 0) {
			sk_set_state(s, SL_SK_S_RX_EOF, 0);
			s->k_readable = false;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			s->k_readable = false;
		} else if (errno != EINTR) {
			sk_reset(s, errno);
			return;
		}
	}
}

/* ---- datagram control messages (sock.h "Control messages") ---- */

/* the cmsgs of one small value and its byte in the control area (an int in a cmsg, IP_TOS received
 * as one byte) */
static const struct {
	uint16_t bit;
	int level, type;
	size_t off;
} ctl_bytes[] = {
	{ SL_SK_C_TTL, IPPROTO_IP, IP_TTL, offsetof(struct sl_sk_dctl, ttl) },
	{ SL_SK_C_TOS, IPPROTO_IP, IP_TOS, offsetof(struct sl_sk_dctl, tos) },
	{ SL_SK_C_HOPLIMIT, IPPROTO_IPV6, IPV6_HOPLIMIT, offsetof(struct sl_sk_dctl, hoplimit) },
	{ SL_SK_C_TCLASS, IPPROTO_IPV6, IPV6_TCLASS, offsetof(struct sl_sk_dctl, tclass) },
};
#define N_CTL_BYTES (sizeof(ctl_bytes) / sizeof(ctl_bytes[0]))

static size_t put_cmsg(uint8_t *buf, size_t n, size_t cap, int level, int type, const void *data, size_t len)
{
	if (n + CMSG_SPACE(len) > cap)
		return n;
	struct cmsghdr h = { .cmsg_len = CMSG_LEN(len), .cmsg_level = level, .cmsg_type = type };
	memset(buf + n, 0, CMSG_SPACE(len));
	memcpy(buf + n, &h, sizeof(h));
	memcpy(buf + n + CMSG_LEN(0), data, len);
	return n + CMSG_SPACE(len);
}

/* the cmsgs of a send record's control area, for this kernel socket's sendmsg (the kernel checks them
 * again and ignores those of the other IP version, as for the app's own sendmsg); the length */
static size_t ctl_to_cmsgs(const struct sl_sk_dctl *c, uint8_t *buf, size_t cap)
{
	size_t n = 0;
	if (c->has & SL_SK_C_PKTINFO) {
		struct in_pktinfo pi = { .ipi_ifindex = (int)c->ifindex4 };
		memcpy(&pi.ipi_spec_dst, c->spec_dst, 4);
		n = put_cmsg(buf, n, cap, IPPROTO_IP, IP_PKTINFO, &pi, sizeof(pi));
	}
	if (c->has & SL_SK_C_PKTINFO6) {
		struct in6_pktinfo pi = { .ipi6_ifindex = c->ifindex6 };
		memcpy(&pi.ipi6_addr, c->addr6, 16);
		n = put_cmsg(buf, n, cap, IPPROTO_IPV6, IPV6_PKTINFO, &pi, sizeof(pi));
	}
	for (size_t i = 0; i < N_CTL_BYTES; i++) {
		if (!(c->has & ctl_bytes[i].bit))
			continue;
		int v = ((const uint8_t *)c)[ctl_bytes[i].off];
		if (ctl_bytes[i].bit == SL_SK_C_TCLASS && (c->has & SL_SK_C_TCLASS_M1))
			v = -1;
		n = put_cmsg(buf, n, cap, ctl_bytes[i].level, ctl_bytes[i].type, &v, sizeof(v));
	}
	return n;
}

/* SCM_TIMESTAMP* (two 64-bit fields: seconds and micro- or nanoseconds) into the control area */
static void cmsg_time(int type, const uint8_t *d, size_t len, struct sl_sk_dctl *c)
{
	int64_t sec, frac, unit;
	if (type == SO_TIMESTAMP || type == SO_TIMESTAMP_NEW)
		unit = 1000;
	else if (type == SO_TIMESTAMPNS || type == SO_TIMESTAMPNS_NEW)
		unit = 1;
	else
		return;
	if (len < 16)
		return;
	memcpy(&sec, d, 8);
	memcpy(&frac, d + 8, 8);
	c->ts_ns = sec * 1000000000 + frac * unit;
	c->has |= SL_SK_C_TSTAMP;
}

/* the kernel's cmsgs of a received datagram into a record's control area (what the kernel gave:
 * only the options on, which the shim filters again when the app receives) */
static void cmsgs_to_ctl(struct msghdr *m, struct sl_sk_dctl *c)
{
	memset(c, 0, sizeof(*c));
	for (struct cmsghdr *h = CMSG_FIRSTHDR(m); h; h = CMSG_NXTHDR(m, h)) {
		const uint8_t *d = CMSG_DATA(h);
		size_t len = h->cmsg_len - CMSG_LEN(0);
		if (h->cmsg_level == SOL_SOCKET) {
			cmsg_time(h->cmsg_type, d, len, c);
		} else if (h->cmsg_level == IPPROTO_IP && h->cmsg_type == IP_PKTINFO && len >= sizeof(struct in_pktinfo)) {
			struct in_pktinfo pi;
			memcpy(&pi, d, sizeof(pi));
			c->ifindex4 = (uint32_t)pi.ipi_ifindex;
			memcpy(c->spec_dst, &pi.ipi_spec_dst, 4);
			memcpy(c->addr4, &pi.ipi_addr, 4);
			c->has |= SL_SK_C_PKTINFO;
		} else if (h->cmsg_level == IPPROTO_IPV6 && h->cmsg_type == IPV6_PKTINFO &&
			   len >= sizeof(struct in6_pktinfo)) {
			struct in6_pktinfo pi;
			memcpy(&pi, d, sizeof(pi));
			memcpy(c->addr6, &pi.ipi6_addr, 16);
			c->ifindex6 = pi.ipi6_ifindex;
			c->has |= SL_SK_C_PKTINFO6;
		} else {
			for (size_t i = 0; i < N_CTL_BYTES; i++) {
				if (h->cmsg_level != ctl_bytes[i].level || h->cmsg_type != ctl_bytes[i].type || !len)
					continue;
				int v = d[0]; /* IP_TOS is one byte; the others an int (little-endian here) */
				if (len >= sizeof(int))
					memcpy(&v, d, sizeof(int));
				((uint8_t *)c)[ctl_bytes[i].off] = (uint8_t)v;
				c->has |= ctl_bytes[i].bit;
			}
		}
	}
}

/* room for every cmsg the options of sock.h give (a timestamp, both PKTINFOs, four ints) */
#define CTL_BUF 256

static void dgram_tx(struct sk *s, uint64_t *budget)
{
	struct sl_sk_dgram h;
	const uint8_t *data;
	while (s->k_writable && *budget && sk_dgram_take(s, &h, &data) > 0) {
		/* auto: a local shim datagram socket at the destination gets it ring to ring */
		if (s->app->stack == SL_SK_STACK_AUTO && shm_dgram_deliver(s, &h, data)) {
			sk_spend(s, h.len);
			sk_dgram_done(s, &h);
			continue;
		}
		ssize_t n;
		if (!h.ctl.has) {
			n = sendto(s->kfd, data, h.len, MSG_DONTWAIT | MSG_NOSIGNAL,
				   h.addr_len ? (const struct sockaddr *)(const void *)h.addr : NULL, h.addr_len);
		} else { /* the app's per-datagram cmsgs, rebuilt from the control area */
			union {
				struct cmsghdr align;
				uint8_t b[CTL_BUF];
			} cb;
			struct iovec iv = { (void *)data, h.len };
			struct msghdr m = { .msg_name = h.addr_len ? h.addr : NULL, .msg_namelen = h.addr_len,
					    .msg_iov = &iv, .msg_iovlen = 1, .msg_control = cb.b };
			m.msg_controllen = ctl_to_cmsgs(&h.ctl, cb.b, sizeof(cb.b));
			n = sendmsg(s->kfd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) {
			s->k_writable = false;
			return;
		}
		if (n < 0 && errno != EINTR)
			s->sh->error = errno; /* e.g. ECONNREFUSED on a connected socket: SO_ERROR, as the kernel */
		sk_spend(s, h.len);
		sk_dgram_done(s, &h);
		*budget -= h.len < *budget ? h.len : *budget;
	}
}

static void dgram_rx(struct sk *s, uint64_t *budget)
{
	while (s->k_readable && *budget) {
		ssize_t len = recv(s->kfd, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
		if (len < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				s->k_readable = false;
			else if (errno != EINTR)
				s->sh->error = errno;
			if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
				continue;
			return;
		}
		uint8_t *dst = sk_dgram_reserve(s, (uint32_t)len);
		if (!dst) {
			sl_sk_xchg(&s->sh->rx_wanted, 1);
			if (!(dst = sk_dgram_reserve(s, (uint32_t)len)))
				return;
		}
		struct sockaddr_storage from;
		union {
			struct cmsghdr align;
			uint8_t b[CTL_BUF];
		} cb;
		struct iovec iv = { dst, (size_t)len };
		struct msghdr m = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &iv, .msg_iovlen = 1,
				    .msg_control = s->dopt.rx ? cb.b : NULL, .msg_controllen = s->dopt.rx ? sizeof(cb.b) : 0 };
		ssize_t n = recvmsg(s->kfd, &m, MSG_DONTWAIT);
		if (n < 0)
			continue;
		struct sl_sk_dctl ctl;
		cmsgs_to_ctl(&m, &ctl);
		sk_dgram_commit(s, (uint32_t)n, &from, m.msg_namelen, &ctl);
		*budget -= (uint64_t)n < *budget ? (uint64_t)n : *budget;
	}
}

void kstack_service(struct sk *s, uint64_t budget)
{
	if (s->kfd < 0 || s->broken)
		return;
	uint64_t start = budget;
	if (s->type == SOCK_DGRAM) {
		dgram_tx(s, &budget);
		dgram_rx(s, &budget);
	} else if (s->state == SK_CONNECTED) {
		stream_tx(s, &budget);
		stream_rx(s, &budget);
	}
	if (!budget && start)
		sk_work(s); /* more to do: back of the line (round-robin) */
}

int kstack_shutdown(struct sk *s, int how)
{
	if (how == SHUT_RD || how == SHUT_RDWR)
		shutdown(s->kfd, SHUT_RD);
	return 0;
}

void kstack_close(struct sk *s)
{
	if (s->kfd >= 0) {
		close(s->kfd); /* leaves the epoll set with it */
		s->kfd = -1;
		s->k_in_epoll = false;
	}
}
