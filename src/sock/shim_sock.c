/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libsluice-sock.so, the control calls (docs/sockets.md "Calls"): socket, bind, listen, accept,
 * connect, names, shutdown, options (one NQE each, but SO_RCVTIMEO/SO_SNDTIMEO/SO_TYPE/SO_DOMAIN/
 * SO_PROTOCOL, which the shim answers itself), and the fd calls that keep the fd table right (close,
 * close_range, closefrom, dup, dup2, dup3, fcntl F_DUPFD*).
 */
#include "shim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#ifndef SO_RCVTIMEO_NEW
#define SO_RCVTIMEO_NEW 66
#define SO_SNDTIMEO_NEW 67
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* ---- sockets ---- */

static void slocal_init(uint32_t slot, int domain, int type, const struct slocal *from)
{
	struct slocal *lo = &shim_slocal[slot];
	lo->rxlock = 0;
	lo->txlock = 0;
	lo->domain = domain;
	lo->type = type;
	lo->dgram_connected = 0;
	lo->fin_send_taken = 0;
	if (from) {
		lo->rcvtimeo = from->rcvtimeo;
		lo->sndtimeo = from->sndtimeo;
	} else {
		memset(&lo->rcvtimeo, 0, sizeof(lo->rcvtimeo));
		memset(&lo->sndtimeo, 0, sizeof(lo->sndtimeo));
	}
}

/* a new placeholder from SOCKET/ACCEPT becomes the app's socket */
static int adopt(int fd, int slot, int flags, int domain, int type, const struct slocal *from)
{
	if (fd < 0) {
		if (slot >= 0)
			return -EMFILE; /* the fd did not arrive (fd table full): the engine sees it closed */
		return -EPROTO;
	}
	if ((uint32_t)slot >= shim_nslots) {
		REAL(close)(fd);
		return -EPROTO;
	}
	if ((flags & SOCK_NONBLOCK) && REAL(fcntl)(fd, F_SETFL, O_NONBLOCK) < 0) {
		int e = errno;
		REAL(close)(fd);
		return -e;
	}
	slocal_init((uint32_t)slot, domain, type, from);
	fdt_set(fd, (uint32_t)slot + 1);
	return fd;
}

SHIM_EXPORT int socket(int domain, int type, int protocol)
{
	if (!shim_active || (domain != AF_INET && domain != AF_INET6))
		return REAL(socket)(domain, type, protocol);
	int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	bool ok = (base == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP)) ||
		  (base == SOCK_DGRAM && (protocol == 0 || protocol == IPPROTO_UDP));
	if (!ok)
		return REAL(socket)(domain, type, protocol);
	int r = shim_init_region();
	if (r < 0)
		return shim_errno_ret(r);
	int fd;
	r = shim_call(SL_NQE_SOCKET, 0, (type & SOCK_CLOEXEC) ? SL_NQE_F_CLOEXEC : 0, (uint64_t)domain, (uint64_t)base,
		      NULL, 0, NULL, NULL, &fd, false);
	if (r < 0)
		return shim_errno_ret(r);
	return shim_errno_ret(adopt(fd, r, type, domain, base, NULL));
}

static int addr_len_ok(const void *sa, socklen_t len)
{
	if (len > sizeof(struct sockaddr_storage))
		return -EINVAL;
	if (!sa && len)
		return -EFAULT;
	return 0;
}

SHIM_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(bind)(fd, addr.__sockaddr__, len);
	int r = addr_len_ok(addr.__sockaddr__, len);
	if (!r)
		r = shim_call(SL_NQE_BIND, e - 1, 0, 0, 0, addr.__sockaddr__, len, NULL, NULL, NULL, true);
	return shim_errno_ret(r < 0 ? r : 0);
}

SHIM_EXPORT int listen(int fd, int backlog)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(listen)(fd, backlog);
	int r = shim_call(SL_NQE_LISTEN, e - 1, 0, (uint64_t)(int64_t)backlog, 0, NULL, 0, NULL, NULL, NULL, true);
	return shim_errno_ret(r < 0 ? r : 0);
}

static void copy_addr_out(struct sockaddr *addr, socklen_t *alen, const void *src, size_t len)
{
	if (!addr || !alen)
		return;
	size_t n = len < *alen ? len : *alen;
	memcpy(addr, src, n);
	*alen = (socklen_t)len;
}

static int do_accept(int fd, uint32_t e, struct sockaddr *addr, socklen_t *alen, int flags)
{
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
		return -EINVAL;
	uint32_t slot = e - 1;
	struct sl_sk_slot *sl = slot_of(slot);
	struct slocal *lo = &shim_slocal[slot];
	int64_t dl = 0;
	unsigned woke = 0; /* waits that woke: many with nothing to read = a byte outside the protocol */
	int nb = -1;
	for (;;) {
		uint32_t st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
		if ((st & SL_SK_S_LISTENING) && !__atomic_load_n(&sl->acceptq, __ATOMIC_ACQUIRE)) {
			int r = shim_await_readable(fd, slot, TOK_LISTEN, &nb, &dl, &lo->rcvtimeo, &woke, NULL);
			if (r < 0)
				return r;
			if (r == 0)
				continue;
		}
		uint8_t peer[SL_NQE_PAYLOAD_MAX];
		size_t plen = sizeof(peer);
		int nfd;
		int r = shim_call(SL_NQE_ACCEPT, slot, (flags & SOCK_CLOEXEC) ? SL_NQE_F_CLOEXEC : 0, 0, 0, NULL, 0, peer,
				  &plen, &nfd, true);
		if (r == -EAGAIN) {
			/* the engine has nothing after all (another process took it): wait for the token */
			r = shim_token_step(fd, slot, TOK_LISTEN, woke > 64);
			if (r < 0)
				return r;
			if (nb < 0)
				nb = sk_nonblocking(fd);
			if (nb)
				return -EAGAIN;
			r = sk_wait(fd, POLLIN, &dl, &lo->rcvtimeo);
			if (r < 0)
				return r;
			woke++;
			continue;
		}
		if (r < 0)
			return r;
		r = adopt(nfd, r, flags, lo->domain, lo->type, lo);
		if (!__atomic_load_n(&sl->acceptq, __ATOMIC_ACQUIRE))
			shim_token_step(fd, slot, TOK_LISTEN, false); /* emptied: not readable any more */
		if (r >= 0) {
			if (plen > sizeof(peer))
				plen = sizeof(peer);
			copy_addr_out(addr, alen, peer, plen);
		}
		return r;
	}
}

SHIM_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *__restrict alen)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(accept)(fd, addr.__sockaddr__, alen);
	return shim_errno_ret(do_accept(fd, e, addr.__sockaddr__, alen, 0));
}

SHIM_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *__restrict alen, int flags)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(accept4)(fd, addr.__sockaddr__, alen, flags);
	return shim_errno_ret(do_accept(fd, e, addr.__sockaddr__, alen, flags));
}

/* a blocking connect that the engine completed with -EINPROGRESS: wait until the placeholder is
 * writable (the engine drains the filler when the connect ends), then SO_ERROR */
static int connect_wait(int fd, uint32_t slot, struct sl_sk_slot *sl, struct slocal *lo)
{
	int64_t dl = 0;
	for (;;) {
		int r = sk_wait(fd, POLLOUT, &dl, &lo->sndtimeo);
		if (r == -EAGAIN)
			return -EINPROGRESS; /* as the kernel on SO_SNDTIMEO */
		if (r < 0)
			return r;
		uint32_t st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
		if (!(st & SL_SK_S_CONNECTING) || sl->error)
			break;
		/* writable but still connecting: fill again and go on waiting */
		if ((r = sk_fill(fd)) < 0)
			return r;
	}
	int err = shim_take_error(slot);
	if (err < 0)
		return err;
	if (err > 0)
		return -err;
	return 0;
}

SHIM_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(connect)(fd, addr.__sockaddr__, len);
	const struct sockaddr *sa = addr.__sockaddr__;
	uint32_t slot = e - 1;
	struct slocal *lo = &shim_slocal[slot];
	int r = addr_len_ok(sa, len);
	if (r)
		return shim_errno_ret(r);
	if (len < sizeof(sa_family_t))
		return shim_errno_ret(-EINVAL);
	if (lo->type == SOCK_DGRAM) {
		if (sa->sa_family == AF_UNSPEC) {
			r = shim_call(SL_NQE_CONNECT_DGRAM_CLEAR, slot, 0, 0, 0, NULL, 0, NULL, NULL, NULL, true);
			if (r >= 0)
				lo->dgram_connected = 0;
		} else {
			r = shim_call(SL_NQE_CONNECT, slot, 0, 0, 0, sa, len, NULL, NULL, NULL, true);
			if (r >= 0)
				lo->dgram_connected = 1;
		}
		return shim_errno_ret(r < 0 ? r : 0);
	}
	r = shim_call(SL_NQE_CONNECT, slot, 0, 0, 0, sa, len, NULL, NULL, NULL, true);
	if (r == -EINPROGRESS) {
		int f = sk_fill(fd);
		if (f < 0)
			return shim_errno_ret(f);
		if (!sk_nonblocking(fd))
			r = connect_wait(fd, slot, slot_of(slot), lo);
	} else if (r == 0 && sk_nonblocking(fd) && (lo->domain == AF_INET || lo->domain == AF_INET6)) {
		/* connected at once (a local peer through shm): Linux says EINPROGRESS for a non-blocking TCP
		 * connect even on loopback, and programs written for it wait for writability then -- which
		 * they find at once, with SO_ERROR 0 -- and some take 0 for an error (AF_UNIX connects at once: 0) */
		r = -EINPROGRESS;
	}
	return shim_errno_ret(r < 0 ? r : 0);
}

static int get_name(int fd, uint32_t e, uint8_t op, struct sockaddr *addr, socklen_t *alen)
{
	if (!alen)
		return -EFAULT;
	uint8_t buf[SL_NQE_PAYLOAD_MAX];
	size_t len = sizeof(buf);
	(void)fd;
	int r = shim_call(op, e - 1, 0, 0, 0, NULL, 0, buf, &len, NULL, true);
	if (r < 0)
		return r;
	if (len > sizeof(buf))
		len = sizeof(buf);
	copy_addr_out(addr, alen, buf, len);
	return 0;
}

SHIM_EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *__restrict alen)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(getsockname)(fd, addr.__sockaddr__, alen);
	return shim_errno_ret(get_name(fd, e, SL_NQE_GETSOCKNAME, addr.__sockaddr__, alen));
}

SHIM_EXPORT int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t *__restrict alen)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(getpeername)(fd, addr.__sockaddr__, alen);
	return shim_errno_ret(get_name(fd, e, SL_NQE_GETPEERNAME, addr.__sockaddr__, alen));
}

SHIM_EXPORT int shutdown(int fd, int how)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(shutdown)(fd, how);
	int r = shim_call(SL_NQE_SHUTDOWN, e - 1, 0, (uint64_t)(int64_t)how, 0, NULL, 0, NULL, NULL, NULL, true);
	return shim_errno_ret(r < 0 ? r : 0);
}

/* ---- options ---- */

static bool is_timeo(int level, int name, bool *rcv)
{
	if (level != SOL_SOCKET)
		return false;
	if (name == SO_RCVTIMEO || name == SO_RCVTIMEO_NEW) {
		*rcv = true;
		return true;
	}
	if (name == SO_SNDTIMEO || name == SO_SNDTIMEO_NEW) {
		*rcv = false;
		return true;
	}
	return false;
}

SHIM_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(setsockopt)(fd, level, name, val, len);
	struct slocal *lo = &shim_slocal[e - 1];
	bool rcv;
	if (is_timeo(level, name, &rcv)) {
		/* kept here: the shim is the one that waits */
		struct timeval tv;
		if (len < sizeof(tv))
			return shim_errno_ret(-EINVAL);
		if (!val)
			return shim_errno_ret(-EFAULT);
		memcpy(&tv, val, sizeof(tv));
		if (tv.tv_usec < 0 || tv.tv_usec >= 1000000)
			return shim_errno_ret(-EDOM);
		if (tv.tv_sec < 0) { /* the kernel: a negative time is "do not wait" */
			tv.tv_sec = 0;
			tv.tv_usec = -1;
		}
		if (rcv)
			lo->rcvtimeo = tv;
		else
			lo->sndtimeo = tv;
		return 0;
	}
	if (len > SL_NQE_PAYLOAD_MAX)
		return shim_errno_ret(-EINVAL);
	if (!val && len)
		return shim_errno_ret(-EFAULT);
	int r = shim_call(SL_NQE_SETSOCKOPT, e - 1, 0, (uint64_t)(int64_t)level, (uint64_t)(int64_t)name, val, len, NULL,
			  NULL, NULL, true);
	return shim_errno_ret(r < 0 ? r : 0);
}

static int opt_int(void *val, socklen_t *len, int v)
{
	if (*len > sizeof(int))
		*len = sizeof(int);
	memcpy(val, &v, *len);
	return 0;
}

SHIM_EXPORT int getsockopt(int fd, int level, int name, void *__restrict val, socklen_t *__restrict len)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(!fdt_is_sock(e)))
		return REAL(getsockopt)(fd, level, name, val, len);
	struct slocal *lo = &shim_slocal[e - 1];
	if (!len || (!val && *len))
		return shim_errno_ret(-EFAULT);
	if ((int)*len < 0)
		return shim_errno_ret(-EINVAL);
	bool rcv;
	if (is_timeo(level, name, &rcv)) {
		struct timeval tv = rcv ? lo->rcvtimeo : lo->sndtimeo;
		if (tv.tv_usec < 0)
			tv.tv_usec = 0;
		size_t n = *len < sizeof(tv) ? *len : sizeof(tv);
		memcpy(val, &tv, n);
		*len = (socklen_t)n;
		return 0;
	}
	if (level == SOL_SOCKET && name == SO_TYPE)
		return opt_int(val, len, lo->type);
	if (level == SOL_SOCKET && name == SO_DOMAIN)
		return opt_int(val, len, lo->domain);
	if (level == SOL_SOCKET && name == SO_PROTOCOL)
		return opt_int(val, len, lo->type == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP);
	uint32_t want = *len > SL_NQE_PAYLOAD_MAX ? SL_NQE_PAYLOAD_MAX : *len;
	size_t got = want;
	int r = shim_call(SL_NQE_GETSOCKOPT, e - 1, 0, (uint64_t)(int64_t)level,
			  (uint64_t)(uint32_t)name | ((uint64_t)want << 32), NULL, 0, val, &got, NULL, true);
	if (r < 0)
		return shim_errno_ret(r);
	*len = (socklen_t)(got < want ? got : want);
	return 0;
}

/* ---- fds ---- */

SHIM_EXPORT int close(int fd)
{
	uint32_t e = fdt_get(fd);
	if (SHIM_LIKELY(e == 0)) {
		if (SHIM_UNLIKELY(shim_ep_count != 0))
			shim_ep_closing(fd);
		return REAL(close)(fd);
	}
	if (e == FDT_INTERNAL) {
		errno = EBADF; /* the shim's channel: not the app's to close */
		return -1;
	}
	if (shim_ep_count != 0)
		shim_ep_forget(fd);
	fdt_set(fd, 0);
	return REAL(close)(fd);
}

/* close_range()/closefrom() close the app's fds (forgetting shim sockets among them) and leave
 * the shim's channels open */
static int close_range_keep(unsigned first, unsigned last, int flags)
{
	if (!REAL(close_range))
		return shim_errno_ret(-ENOSYS);
	if (!shim_active || (flags & CLOSE_RANGE_CLOEXEC) || first > last)
		return REAL(close_range)(first, last, flags);
	unsigned end = last < FDT_TOP * FDT_CHUNK ? last : FDT_TOP * FDT_CHUNK - 1;
	int keep[1024];
	int nkeep = 0;
	for (unsigned ci = first >> FDT_SHIFT; ci <= (end >> FDT_SHIFT); ci++) {
		uint32_t *c = __atomic_load_n(&shim_fdt[ci], __ATOMIC_ACQUIRE);
		if (!c)
			continue;
		unsigned lo = ci << FDT_SHIFT, hi = lo + FDT_CHUNK - 1;
		if (lo < first)
			lo = first;
		if (hi > end)
			hi = end;
		for (unsigned fd = lo; fd <= hi; fd++) {
			uint32_t v = __atomic_load_n(&c[fd & (FDT_CHUNK - 1)], __ATOMIC_ACQUIRE);
			if (v == FDT_INTERNAL) {
				if (nkeep < (int)(sizeof(keep) / sizeof(keep[0])))
					keep[nkeep++] = (int)fd;
			} else if (v) {
				if (shim_ep_count != 0)
					shim_ep_forget((int)fd);
				__atomic_store_n(&c[fd & (FDT_CHUNK - 1)], 0, __ATOMIC_RELEASE);
			}
		}
	}
	if (shim_ep_count != 0)
		shim_ep_closing_range(first, end);
	/* the channels found are in increasing order: close the gaps between them */
	unsigned from = first;
	int r = 0;
	for (int i = 0; i < nkeep && r == 0; i++) {
		if ((unsigned)keep[i] > from)
			r = REAL(close_range)(from, (unsigned)keep[i] - 1, flags);
		flags &= ~(int)CLOSE_RANGE_UNSHARE; /* unshared by the first call */
		from = (unsigned)keep[i] + 1;
	}
	if (r == 0 && from <= last)
		r = REAL(close_range)(from, last, flags);
	return r;
}

SHIM_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	return close_range_keep(first, last, flags);
}

SHIM_EXPORT void closefrom(int lowfd)
{
	if (lowfd < 0)
		lowfd = 0;
	if (close_range_keep((unsigned)lowfd, ~0u, 0) < 0 && REAL(closefrom)) {
		REAL(closefrom)(lowfd); /* no close_range in this kernel: the channels go too */
		shim_channels_closed_from(lowfd);
	}
}

SHIM_EXPORT int dup(int fd)
{
	uint32_t e = fdt_get(fd);
	int r = REAL(dup)(fd);
	if (SHIM_UNLIKELY(r >= 0 && (fdt_is_sock(e) || fdt_get(r))))
		fdt_set(r, fdt_is_sock(e) ? e : 0);
	if (SHIM_UNLIKELY(r >= 0 && shim_ep_count != 0))
		shim_ep_dup(fd, r);
	return r;
}

static int dup_to(int old, int new, int flags, bool three)
{
	uint32_t en = fdt_get(new), eo = fdt_get(old);
	if (SHIM_UNLIKELY(en == FDT_INTERNAL)) {
		errno = EBADF;
		return -1;
	}
	if (SHIM_UNLIKELY(fdt_is_sock(en) && old != new && shim_ep_count != 0))
		shim_ep_forget(new); /* before the kernel closes it: its registrations are deleted by fd */
	int r = three ? REAL(dup3)(old, new, flags) : REAL(dup2)(old, new);
	if (SHIM_UNLIKELY(r >= 0 && old != new && (eo || en)))
		fdt_set(new, fdt_is_sock(eo) ? eo : 0);
	if (SHIM_UNLIKELY(r >= 0 && shim_ep_count != 0))
		shim_ep_dup(old, new);
	return r;
}

SHIM_EXPORT int dup2(int old, int new)
{
	return dup_to(old, new, 0, false);
}

SHIM_EXPORT int dup3(int old, int new, int flags)
{
	return dup_to(old, new, flags, true);
}

static int fcntl_common(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
	if (SHIM_LIKELY(cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC))
		return real(fd, cmd, arg);
	uint32_t e = fdt_get(fd);
	int r = real(fd, cmd, arg);
	if (r >= 0 && (fdt_is_sock(e) || fdt_get(r)))
		fdt_set(r, fdt_is_sock(e) ? e : 0);
	if (r >= 0 && shim_ep_count != 0)
		shim_ep_dup(fd, r);
	return r;
}

SHIM_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return fcntl_common(REAL(fcntl), fd, cmd, arg);
}

SHIM_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	int (*real)(int, int, ...) = REAL(fcntl64);
	return fcntl_common(real ? real : REAL(fcntl), fd, cmd, arg);
}
