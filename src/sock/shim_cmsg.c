/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libsluice-sock.so, control messages of datagram sockets (docs/sockets.md "Control messages",
 * sock.h "Control messages"): the app's sendmsg cmsgs become a record's control area, checked here
 * as the kernel checks them (udp_cmsg_send, ip_cmsg_send, ip6_datagram_send_ctl, __sock_cmsg_send),
 * and a received record's control area becomes cmsgs in the app's msg_control, in the kernel's order
 * and with its truncation rules (put_cmsg: what fits is written, MSG_CTRUNC says something did not).
 *
 * The control area comes from shared memory the engine (or a hostile writer) fills: only its known
 * bits count, each value has a fixed size, and nothing is written past msg_controllen.
 */
#include "shim_internal.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <string.h>

#ifndef IP_PROTOCOL
#define IP_PROTOCOL 52
#endif
#ifndef IPV6_FLOWINFO
#define IPV6_FLOWINFO 11
#endif
#ifndef SO_TIMESTAMP_NEW
#define SO_TIMESTAMP_NEW 63
#define SO_TIMESTAMPNS_NEW 64
#endif

static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

/* the family the datagram goes out with: AF_INET for an IPv4 or IPv4-mapped destination, AF_INET6,
 * or 0 when sendmsg names none (a connected socket: the engine knows) */
static int dest_family(const struct msghdr *msg)
{
	const struct sockaddr *sa = msg->msg_name;
	if (!sa || msg->msg_namelen < sizeof(sa_family_t))
		return 0;
	if (sa->sa_family == AF_INET6 && msg->msg_namelen >= 24) {
		const struct sockaddr_in6 *in6 = msg->msg_name;
		return memcmp(&in6->sin6_addr, v4mapped, 12) ? AF_INET6 : AF_INET;
	}
	return sa->sa_family == AF_INET ? AF_INET : 0;
}

static int cm_int(const struct cmsghdr *h, const uint8_t *d, int *v)
{
	if (h->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EINVAL;
	memcpy(v, d, sizeof(int));
	return 0;
}

/* an IPPROTO_IP cmsg (ip_cmsg_send) */
static int ip_cmsg(const struct cmsghdr *h, const uint8_t *d, struct sl_sk_dctl *c)
{
	int v = 0;
	switch (h->cmsg_type) {
	case IP_PKTINFO: {
		struct in_pktinfo pi;
		if (h->cmsg_len != CMSG_LEN(sizeof(pi)))
			return -EINVAL;
		memcpy(&pi, d, sizeof(pi));
		c->ifindex4 = (uint32_t)pi.ipi_ifindex;
		memcpy(c->spec_dst, &pi.ipi_spec_dst, 4);
		c->has |= SL_SK_C_PKTINFO;
		return 0;
	}
	case IP_TTL:
		if (cm_int(h, d, &v) < 0 || v < 1 || v > 255)
			return -EINVAL;
		c->ttl = (uint8_t)v;
		c->has |= SL_SK_C_TTL;
		return 0;
	case IP_TOS:
		if (h->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&v, d, sizeof(int));
		else if (h->cmsg_len == CMSG_LEN(1))
			v = d[0];
		else
			return -EINVAL;
		if (v < 0 || v > 255)
			return -EINVAL;
		c->tos = (uint8_t)v;
		c->has |= SL_SK_C_TOS;
		return 0;
	case IP_RETOPTS:
	case IP_PROTOCOL:
		return -EOPNOTSUPP; /* the kernel's, not carried */
	default:
		return -EINVAL;
	}
}

/* an IPPROTO_IPV6 cmsg of an IPv6 socket (ip6_datagram_send_ctl); to an IPv4 destination only
 * IPV6_PKTINFO counts, with an IPv4-mapped address (ip_cmsg_send) */
static int ip6_cmsg(const struct cmsghdr *h, const uint8_t *d, int dfam, struct sl_sk_dctl *c)
{
	int v;
	if (h->cmsg_type == IPV6_PKTINFO) {
		struct in6_pktinfo pi;
		if (h->cmsg_len < CMSG_LEN(sizeof(pi)))
			return -EINVAL;
		memcpy(&pi, d, sizeof(pi));
		if (dfam == AF_INET && memcmp(&pi.ipi6_addr, v4mapped, 12))
			return -EINVAL;
		memcpy(c->addr6, &pi.ipi6_addr, 16);
		c->ifindex6 = pi.ipi6_ifindex;
		c->has |= SL_SK_C_PKTINFO6;
		return 0;
	}
	if (dfam == AF_INET)
		return 0;
	switch (h->cmsg_type) {
	case IPV6_HOPLIMIT:
	case IPV6_TCLASS:
		if (cm_int(h, d, &v) < 0 || v < -1 || v > 255)
			return -EINVAL;
		if (h->cmsg_type == IPV6_HOPLIMIT) {
			if (v >= 0) { /* -1: the socket's own */
				c->hoplimit = (uint8_t)v;
				c->has |= SL_SK_C_HOPLIMIT;
			}
		} else {
			/* -1 is not the socket's own class here: Linux 6.x sends 0xff (ipcm6_init_sk); the
			 * kernel module passes the -1 on, shm delivers 0xff */
			c->tclass = (uint8_t)v;
			c->has = (uint16_t)((c->has & ~SL_SK_C_TCLASS_M1) | SL_SK_C_TCLASS | (v < 0 ? SL_SK_C_TCLASS_M1 : 0));
		}
		return 0;
	case IPV6_2292PKTINFO:
	case IPV6_FLOWINFO:
	case IPV6_2292HOPOPTS:
	case IPV6_HOPOPTS:
	case IPV6_2292DSTOPTS:
	case IPV6_DSTOPTS:
	case IPV6_RTHDRDSTOPTS:
	case IPV6_2292RTHDR:
	case IPV6_RTHDR:
	case IPV6_2292HOPLIMIT:
	case IPV6_DONTFRAG:
		return -EOPNOTSUPP; /* the kernel's, not carried */
	default:
		return -EINVAL;
	}
}

/* sendmsg's control messages on a datagram socket of `domain` into *c: 0 or -errno */
int shim_cmsg_parse(const struct msghdr *msg, int domain, struct sl_sk_dctl *c)
{
	memset(c, 0, sizeof(*c));
	if (msg->msg_controllen > INT_MAX)
		return -ENOBUFS;
	size_t clen = msg->msg_controllen;
	if (clen < sizeof(struct cmsghdr))
		return 0;
	const uint8_t *base = msg->msg_control;
	if (!base)
		return -EFAULT;
	int dfam = dest_family(msg);
	bool ip = domain == AF_INET || dfam != AF_INET6; /* IPPROTO_IP counts (IPv6 socket: to IPv4) */
	for (size_t off = 0; off + sizeof(struct cmsghdr) <= clen;) {
		struct cmsghdr h;
		memcpy(&h, base + off, sizeof(h));
		if (h.cmsg_len < sizeof(h) || h.cmsg_len > clen - off)
			return -EINVAL;
		const uint8_t *d = base + off + CMSG_LEN(0);
		int r = 0;
		if (h.cmsg_level == SOL_SOCKET)
			r = h.cmsg_type == SCM_RIGHTS || h.cmsg_type == SCM_CREDENTIALS ? 0 : -EOPNOTSUPP;
		else if (h.cmsg_level == IPPROTO_UDP)
			r = h.cmsg_type == UDP_SEGMENT ? -EOPNOTSUPP : -EINVAL;
		else if (h.cmsg_level == IPPROTO_IP && ip)
			r = ip_cmsg(&h, d, c);
		else if (h.cmsg_level == IPPROTO_IPV6 && domain == AF_INET6)
			r = ip6_cmsg(&h, d, dfam, c);
		if (r < 0)
			return r;
		off += CMSG_ALIGN(h.cmsg_len);
	}
	if (c->has)
		c->ver = SL_SK_DCTL_V1;
	return 0;
}

/* the kernel's put_cmsg: a cmsg that does not fit whole is cut to what is left (MSG_CTRUNC), one
 * with no room for its header is left out (MSG_CTRUNC) */
struct cmw {
	uint8_t *p;
	size_t left, used;
	int *flags;
};

static void put_cmsg(struct cmw *w, int level, int type, const void *data, size_t len)
{
	if (!w->p || w->left < sizeof(struct cmsghdr)) {
		*w->flags |= MSG_CTRUNC;
		return;
	}
	size_t cmlen = CMSG_LEN(len);
	if (w->left < cmlen) {
		*w->flags |= MSG_CTRUNC;
		cmlen = w->left;
	}
	struct cmsghdr h = { .cmsg_len = cmlen, .cmsg_level = level, .cmsg_type = type };
	memcpy(w->p, &h, sizeof(h));
	memcpy(w->p + CMSG_LEN(0), data, cmlen - CMSG_LEN(0));
	size_t step = CMSG_SPACE(len) < w->left ? CMSG_SPACE(len) : w->left;
	w->p += step;
	w->left -= step;
	w->used += step;
}

/* A received datagram's control messages into the app's msg_control, for the options on (rx_opts, as
 * setsockopt left them), in the kernel's order: the timestamp (sock_recv_cmsgs), IPV6_PKTINFO
 * (ip6_datagram_recv_common_ctl), then IP_PKTINFO, IP_TTL, IP_TOS (ip_cmsg_recv_offset; an IPv6
 * socket's IPv4 datagram) or IPV6_HOPLIMIT, IPV6_TCLASS (ip6_datagram_recv_specific_ctl). Sets
 * msg_controllen to the bytes written. */
void shim_cmsg_put(struct msghdr *msg, const struct sl_sk_dctl *c, uint32_t opts, int *mflags)
{
	struct cmw w = { msg->msg_control, msg->msg_controllen, 0, mflags };
	uint32_t has = c->ver == SL_SK_DCTL_V1 ? c->has & SL_SK_C_ALL & opts : 0;
	if (opts & SL_SK_O_TSTAMP) {
		int64_t ns = c->ts_ns;
		if (!(c->ver == SL_SK_DCTL_V1 && (c->has & SL_SK_C_TSTAMP))) {
			struct timespec now; /* not stamped when it came: now, as the kernel stamps it late */
			clock_gettime(CLOCK_REALTIME, &now);
			ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
		}
		int64_t t[2] = { ns / 1000000000, ns % 1000000000 };
		if (t[1] < 0) {
			t[0]--;
			t[1] += 1000000000;
		}
		bool nsec = opts & SL_SK_O_TSTAMPNS, nw = opts & SL_SK_O_TSTAMP_NEW;
		if (!nsec)
			t[1] /= 1000;
		/* 64-bit: timeval, timespec and the _NEW structs are all two 64-bit fields */
		put_cmsg(&w, SOL_SOCKET,
			 nw ? (nsec ? SO_TIMESTAMPNS_NEW : SO_TIMESTAMP_NEW) : (nsec ? SO_TIMESTAMPNS : SO_TIMESTAMP), t,
			 sizeof(t));
	}
	if (has & SL_SK_C_PKTINFO6) {
		struct in6_pktinfo pi;
		memcpy(&pi.ipi6_addr, c->addr6, 16);
		pi.ipi6_ifindex = c->ifindex6;
		put_cmsg(&w, IPPROTO_IPV6, IPV6_PKTINFO, &pi, sizeof(pi));
	}
	if (has & SL_SK_C_PKTINFO) {
		struct in_pktinfo pi = { .ipi_ifindex = (int)c->ifindex4 };
		memcpy(&pi.ipi_spec_dst, c->spec_dst, 4);
		memcpy(&pi.ipi_addr, c->addr4, 4);
		put_cmsg(&w, IPPROTO_IP, IP_PKTINFO, &pi, sizeof(pi));
	}
	if (has & SL_SK_C_TTL) {
		int v = c->ttl;
		put_cmsg(&w, IPPROTO_IP, IP_TTL, &v, sizeof(v));
	}
	if (has & SL_SK_C_TOS)
		put_cmsg(&w, IPPROTO_IP, IP_TOS, &c->tos, 1);
	if (has & SL_SK_C_HOPLIMIT) {
		int v = c->hoplimit;
		put_cmsg(&w, IPPROTO_IPV6, IPV6_HOPLIMIT, &v, sizeof(v));
	}
	if (has & SL_SK_C_TCLASS) {
		int v = c->tclass;
		put_cmsg(&w, IPPROTO_IPV6, IPV6_TCLASS, &v, sizeof(v));
	}
	msg->msg_controllen = w.used;
}
