/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sock-calls: the socket calls of docs/sockets.md ("Calls"), each checked against a loopback peer
 * this program makes itself (threads, and fork where fork is the point). One line per check,
 * "name: ok" or "name: FAIL why"; exit status 1 if any check failed.
 *
 * It must pass with plain kernel sockets and under libsluice-sock.so (`sluice run --stack kernel|
 * shm|auto -- sock-calls`), and print the same lines both ways: tests/integration/test_sockets.py
 * compares the two outputs line by line. So an "ok" line never carries a number that may differ
 * (ports, fds, timings), and nothing here depends on timing to pass: waits have generous limits.
 *
 *   sock-calls            every check
 *   sock-calls NAME...    only those (a check's name is the text before the colon)
 *   sock-calls --list     the names
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 5000          /* how long any one wait may take before the check fails */
#define CHECK_TIMEOUT_S 30    /* a check that hangs (a blocking call never returns) fails this late */

static char why[256];
static const char *current;
static volatile sig_atomic_t sigpipes;

#define FAIL(...)                                            \
	do {                                                 \
		snprintf(why, sizeof(why), __VA_ARGS__);     \
		goto out;                                    \
	} while (0)
#define CHECK(cond, ...)                                     \
	do {                                                 \
		if (!(cond))                                 \
			FAIL(__VA_ARGS__);                   \
	} while (0)
/* a call that must succeed (>= 0); the failure names the call and errno */
#define SYS(expr)                                                                      \
	do {                                                                           \
		if ((expr) < 0)                                                        \
			FAIL("%s failed: %s", #expr, strerror(errno));                 \
	} while (0)

static void xclose(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

static void on_alarm(int sig)
{
	(void)sig;
	char line[200];
	int n = snprintf(line, sizeof(line), "%s: FAIL timed out after %d s (a call never returned)\n",
			 current ? current : "?", CHECK_TIMEOUT_S);
	if (write(1, line, (size_t)n) < 0) {
		/* nothing more to do */
	}
	_exit(1);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* poll one fd; returns its revents (0 on timeout) */
static int wait_fd(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	int n;
	do
		n = poll(&p, 1, ms);
	while (n < 0 && errno == EINTR);
	return n > 0 ? p.revents : 0;
}

/* receive exactly n bytes (waiting up to WAIT_MS for each piece); returns bytes got, -1 on error */
static ssize_t recv_exact(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		if (!(wait_fd(fd, POLLIN, WAIT_MS) & (POLLIN | POLLHUP | POLLERR)))
			return (ssize_t)got;
		ssize_t r = recv(fd, (char *)buf + got, n - got, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			return (ssize_t)got;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static int send_all(int fd, const void *buf, size_t n)
{
	size_t off = 0;
	while (off < n) {
		ssize_t w = send(fd, (const char *)buf + off, n - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			wait_fd(fd, POLLOUT, WAIT_MS);
			continue;
		}
		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return 0;
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* wait up to ms for the peer's EOF (recv 0); 1 when it came. Stray bytes are an error (0). */
static int wait_eof(int fd, int ms)
{
	char b[256];
	long end = now_ms() + ms;
	for (;;) {
		long left = end - now_ms();
		if (left < 0 || !(wait_fd(fd, POLLIN, (int)left) & (POLLIN | POLLHUP | POLLERR)))
			return 0;
		ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);
		if (r == 0)
			return 1;
		if (r > 0 || (errno != EAGAIN && errno != EINTR))
			return 0;
		sleep_ms(1); /* readable with nothing to read: look again */
	}
}

/* what the peer end shows within ms: "nothing" (the expected answer while another copy of the
 * socket is open), or "EOF", "data", "readable with nothing to read", "an error" */
static const char *peer_shows(int fd, int ms)
{
	static char err[64];
	char b;
	if (!(wait_fd(fd, POLLIN, ms) & (POLLIN | POLLHUP | POLLERR)))
		return "nothing";
	ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
	if (r == 0)
		return "EOF";
	if (r > 0)
		return "data";
	if (errno == EAGAIN)
		return "readable with nothing to read";
	snprintf(err, sizeof(err), "error %s", strerror(errno));
	return err;
}

/* wait up to WAIT_MS until at least n bytes are queued to read (TCP may deliver a send in pieces) */
static int wait_avail(int fd, int n)
{
	long end = now_ms() + WAIT_MS;
	int avail = 0;
	while (now_ms() < end) {
		wait_fd(fd, POLLIN, 50);
		if (ioctl(fd, FIONREAD, &avail) == 0 && avail >= n)
			return 1;
		sleep_ms(1);
	}
	return 0;
}

static socklen_t loopback(int family, struct sockaddr_storage *ss, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		a->sin6_port = htons(port);
		return sizeof(*a);
	}
	struct sockaddr_in *a = (struct sockaddr_in *)ss;
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a->sin_port = htons(port);
	return sizeof(*a);
}

static uint16_t port_of(const struct sockaddr_storage *ss)
{
	return ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
					       : ((const struct sockaddr_in *)ss)->sin_port);
}

static int same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family || port_of(a) != port_of(b))
		return 0;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
		       sizeof(struct in6_addr));
}

/* a socket bound to the loopback address on a free port (listening if a stream); its address in *ss */
static int bound(int family, int type, struct sockaddr_storage *ss)
{
	int fd = socket(family, type, 0);
	if (fd < 0)
		return -1;
	int one = 1;
	socklen_t len = loopback(family, ss, 0);
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)ss, len) < 0 || (type == SOCK_STREAM && listen(fd, 64) < 0)) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	len = sizeof(*ss);
	if (getsockname(fd, (struct sockaddr *)ss, &len) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* a connected TCP pair over loopback: *c the connecting end, *s the accepted one */
static int tcp_pair(int family, int *c, int *s)
{
	struct sockaddr_storage ss;
	*c = *s = -1;
	int l = bound(family, SOCK_STREAM, &ss);
	if (l < 0)
		return -1;
	*c = socket(family, SOCK_STREAM, 0);
	if (*c < 0 || connect(*c, (struct sockaddr *)&ss, family == AF_INET6 ? sizeof(struct sockaddr_in6)
									     : sizeof(struct sockaddr_in)) < 0)
		goto fail;
	*s = accept(l, NULL, NULL);
	if (*s < 0)
		goto fail;
	close(l);
	return 0;
fail:;
	int e = errno;
	close(l);
	xclose(c);
	errno = e;
	return -1;
}

/* a port where nothing listens (bound once, then released) */
static uint16_t closed_port(void)
{
	struct sockaddr_storage ss;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return 0;
	socklen_t len = loopback(AF_INET, &ss, 0);
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
		close(fd);
		return 0;
	}
	close(fd);
	return port_of(&ss);
}

/* the lowest fd number free right now */
static int lowest_free_fd(void)
{
	int fd = fcntl(0, F_DUPFD, 0);
	if (fd < 0) { /* fd 0 may be closed: then 0 is the lowest free */
		fd = open("/dev/null", O_RDONLY);
	}
	if (fd >= 0)
		close(fd);
	return fd;
}

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

#define FNV0 0xcbf29ce484222325ull

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

/* ------------------------------------------------------------------------------------ checks */

static int t_fd_numbering(void)
{
	int a = -1, b = -1, c = -1, s = -1, u = -1, l = -1, x = -1, r = -1;
	struct sockaddr_storage ss;
	SYS(a = open("/dev/null", O_RDONLY));
	SYS(b = open("/dev/null", O_RDONLY));
	SYS(c = open("/dev/null", O_RDONLY));
	int hole = b;
	xclose(&b);
	SYS(s = socket(AF_INET, SOCK_STREAM, 0));
	CHECK(s == hole, "stream socket got fd %d, the lowest free was %d", s, hole);
	int want = lowest_free_fd();
	SYS(u = socket(AF_INET, SOCK_DGRAM, 0));
	CHECK(u == want, "datagram socket got fd %d, the lowest free was %d", u, want);
	SYS(l = bound(AF_INET, SOCK_STREAM, &ss));
	SYS(x = socket(AF_INET, SOCK_STREAM, 0));
	SYS(connect(x, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)));
	want = lowest_free_fd();
	SYS(r = accept(l, NULL, NULL));
	CHECK(r == want, "accepted socket got fd %d, the lowest free was %d", r, want);
	/* a closed socket's number is free again at once */
	int old = s;
	xclose(&s);
	SYS(s = open("/dev/null", O_RDONLY));
	CHECK(s == old, "after close(socket %d) open() got %d", old, s);
	why[0] = 0;
out:
	xclose(&a), xclose(&b), xclose(&c), xclose(&s), xclose(&u), xclose(&l), xclose(&x), xclose(&r);
	return why[0] ? -1 : 0;
}

static int t_socket_flags(void)
{
	int s = -1, p = -1;
	SYS(s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	CHECK(fcntl(s, F_GETFL) & O_NONBLOCK, "SOCK_NONBLOCK: F_GETFL has no O_NONBLOCK");
	CHECK(fcntl(s, F_GETFD) & FD_CLOEXEC, "SOCK_CLOEXEC: F_GETFD has no FD_CLOEXEC");
	SYS(p = socket(AF_INET, SOCK_DGRAM, 0));
	CHECK(!(fcntl(p, F_GETFL) & O_NONBLOCK), "plain socket is non-blocking");
	CHECK(!(fcntl(p, F_GETFD) & FD_CLOEXEC), "plain socket has FD_CLOEXEC");
	why[0] = 0;
out:
	xclose(&s), xclose(&p);
	return why[0] ? -1 : 0;
}

static int t_names(void)
{
	int l = -1, c = -1, s = -1;
	struct sockaddr_storage la, ca, cp, sa, sp;
	socklen_t len;
	SYS(l = bound(AF_INET, SOCK_STREAM, &la));
	CHECK(la.ss_family == AF_INET && port_of(&la) != 0, "listener's getsockname: family %d port %u",
	      la.ss_family, port_of(&la));
	SYS(c = socket(AF_INET, SOCK_STREAM, 0));
	len = sizeof(cp);
	CHECK(getpeername(c, (struct sockaddr *)&cp, &len) < 0 && errno == ENOTCONN,
	      "getpeername on an unconnected socket: want ENOTCONN");
	SYS(connect(c, (struct sockaddr *)&la, sizeof(struct sockaddr_in)));
	len = sizeof(sp);
	SYS(s = accept(l, (struct sockaddr *)&sp, &len));
	len = sizeof(ca);
	SYS(getsockname(c, (struct sockaddr *)&ca, &len));
	CHECK(len == sizeof(struct sockaddr_in), "getsockname length %u", (unsigned)len);
	len = sizeof(cp);
	SYS(getpeername(c, (struct sockaddr *)&cp, &len));
	CHECK(same_addr(&cp, &la), "client's peer is not the listener's address");
	CHECK(same_addr(&sp, &ca), "accept's address is not the client's getsockname");
	len = sizeof(sa);
	SYS(getsockname(s, (struct sockaddr *)&sa, &len));
	CHECK(same_addr(&sa, &la), "accepted socket's getsockname is not the listener's address");
	len = sizeof(sp);
	SYS(getpeername(s, (struct sockaddr *)&sp, &len));
	CHECK(same_addr(&sp, &ca), "accepted socket's getpeername is not the client's address");
	/* a short buffer: the kernel truncates and reports the full length */
	len = 4;
	SYS(getsockname(c, (struct sockaddr *)&sa, &len));
	CHECK(len == sizeof(struct sockaddr_in), "getsockname with a 4-byte buffer reported length %u", (unsigned)len);
	why[0] = 0;
out:
	xclose(&l), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_read_write(void)
{
	int c = -1, s = -1;
	char buf[64];
	SYS(tcp_pair(AF_INET, &c, &s));
	CHECK(write(c, "ping", 4) == 4, "write: %s", strerror(errno));
	CHECK(wait_avail(s, 4), "peer never got the 4 bytes");
	ssize_t n = read(s, buf, sizeof(buf));
	CHECK(n == 4 && !memcmp(buf, "ping", 4), "read got %zd", n);
	CHECK(write(s, "pong!", 5) == 5, "write back: %s", strerror(errno));
	n = recv_exact(c, buf, 5);
	CHECK(n == 5 && !memcmp(buf, "pong!", 5), "reply: got %zd bytes", n);
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static void set2(fd_set *s, int a, int b)
{
	FD_ZERO(s);
	FD_SET(a, s);
	FD_SET(b, s);
}

static int t_select(void)
{
	int p[2] = { -1, -1 }, c = -1, s = -1;
	char b[16];
	fd_set r, w;
	struct timeval tv;
	SYS(pipe(p));
	SYS(tcp_pair(AF_INET, &c, &s));
	int maxfd = (p[0] > c ? p[0] : c) + 1;
	set2(&r, p[0], c);
	tv = (struct timeval){ 0, 0 };
	int n = select(maxfd, &r, NULL, NULL, &tv);
	CHECK(n == 0, "nothing sent yet, select says %d ready", n);
	SYS(write(p[1], "x", 1));
	set2(&r, p[0], c);
	tv = (struct timeval){ WAIT_MS / 1000, 0 };
	n = select(maxfd, &r, NULL, NULL, &tv);
	CHECK(n == 1 && FD_ISSET(p[0], &r) && !FD_ISSET(c, &r), "pipe written: select %d, pipe %d socket %d", n,
	      FD_ISSET(p[0], &r), FD_ISSET(c, &r));
	SYS(send(s, "y", 1, 0));
	/* the pipe stays readable, so each select returns at once: wait by the clock for the socket */
	for (long end = now_ms() + WAIT_MS; now_ms() < end; sleep_ms(1)) {
		set2(&r, p[0], c);
		tv = (struct timeval){ 0, 50000 };
		n = select(maxfd, &r, NULL, NULL, &tv);
		if (n == 2)
			break;
	}
	CHECK(n == 2 && FD_ISSET(p[0], &r) && FD_ISSET(c, &r), "both ready: select %d, pipe %d socket %d", n,
	      FD_ISSET(p[0], &r), FD_ISSET(c, &r));
	CHECK(read(p[0], b, sizeof(b)) == 1, "pipe read");
	CHECK(recv(c, b, sizeof(b), 0) == 1, "socket recv");
	set2(&r, p[0], c);
	tv = (struct timeval){ 0, 0 };
	n = select(maxfd, &r, NULL, NULL, &tv);
	CHECK(n == 0, "all read, select still says %d ready (pipe %d socket %d)", n, FD_ISSET(p[0], &r),
	      FD_ISSET(c, &r));
	set2(&w, p[1], c);
	tv = (struct timeval){ WAIT_MS / 1000, 0 };
	n = select((p[1] > c ? p[1] : c) + 1, NULL, &w, NULL, &tv);
	CHECK(n == 2 && FD_ISSET(c, &w), "writable: select %d, socket %d", n, FD_ISSET(c, &w));
	/* pselect too */
	set2(&r, p[0], c);
	SYS(send(s, "z", 1, 0));
	struct timespec ts = { WAIT_MS / 1000, 0 };
	n = pselect(maxfd, &r, NULL, NULL, &ts, NULL);
	CHECK(n == 1 && FD_ISSET(c, &r), "pselect: %d, socket %d", n, FD_ISSET(c, &r));
	why[0] = 0;
out:
	xclose(&p[0]), xclose(&p[1]), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_poll(void)
{
	int p[2] = { -1, -1 }, c = -1, s = -1;
	char b[16];
	SYS(pipe(p));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct pollfd f[2] = { { .fd = p[0], .events = POLLIN }, { .fd = c, .events = POLLIN } };
	int n = poll(f, 2, 0);
	CHECK(n == 0, "nothing sent yet, poll says %d ready", n);
	SYS(write(p[1], "x", 1));
	n = poll(f, 2, WAIT_MS);
	CHECK(n == 1 && f[0].revents == POLLIN && f[1].revents == 0, "pipe written: poll %d, revents %#x %#x", n,
	      f[0].revents, f[1].revents);
	SYS(send(s, "y", 1, 0));
	for (long end = now_ms() + WAIT_MS; now_ms() < end; sleep_ms(1)) { /* the pipe returns at once */
		n = poll(f, 2, 50);
		if (n == 2)
			break;
	}
	CHECK(n == 2 && f[0].revents == POLLIN && f[1].revents == POLLIN, "both ready: poll %d, revents %#x %#x", n,
	      f[0].revents, f[1].revents);
	CHECK(read(p[0], b, sizeof(b)) == 1, "pipe read");
	CHECK(recv(c, b, sizeof(b), 0) == 1, "socket recv");
	n = poll(f, 2, 0);
	CHECK(n == 0, "all read, poll still says %d ready (revents %#x %#x)", n, f[0].revents, f[1].revents);
	f[1].events = POLLIN | POLLOUT;
	n = poll(f, 2, WAIT_MS);
	CHECK(n == 1 && f[1].revents == POLLOUT, "writable: poll %d, socket revents %#x", n, f[1].revents);
	/* ppoll, and the peer's close: POLLIN (EOF) */
	xclose(&s);
	f[1].events = POLLIN;
	struct timespec ts = { WAIT_MS / 1000, 0 };
	n = ppoll(f, 2, &ts, NULL);
	CHECK(n == 1 && (f[1].revents & POLLIN), "ppoll after the peer's close: %d, revents %#x", n, f[1].revents);
	CHECK(recv(c, b, sizeof(b), 0) == 0, "recv after the peer's close: want EOF");
	why[0] = 0;
out:
	xclose(&p[0]), xclose(&p[1]), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int epoll_wait1(int ep, struct epoll_event *ev, int ms)
{
	int n;
	do
		n = epoll_wait(ep, ev, 4, ms);
	while (n < 0 && errno == EINTR);
	return n;
}

static int t_epoll_lt(void)
{
	int ep = -1, c = -1, s = -1, p[2] = { -1, -1 };
	char b[64];
	struct epoll_event ev[4];
	SYS(ep = epoll_create1(EPOLL_CLOEXEC));
	SYS(pipe(p));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct epoll_event e = { .events = EPOLLIN, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	e.data.fd = p[0];
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e));
	int n = epoll_wait1(ep, ev, 0);
	CHECK(n == 0, "nothing sent, %d events", n);
	SYS(send(s, "0123456789", 10, 0));
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.fd == c && (ev[0].events & EPOLLIN), "data sent: %d events", n);
	n = epoll_wait1(ep, ev, 0);
	CHECK(n == 1 && ev[0].data.fd == c, "level-triggered: not reported again (%d events)", n);
	SYS(write(p[1], "x", 1));
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 2, "pipe and socket ready: %d events", n);
	CHECK(recv_exact(c, b, 10) == 10, "recv");
	CHECK(read(p[0], b, 1) == 1, "pipe read");
	n = epoll_wait1(ep, ev, 0);
	CHECK(n == 0, "everything read, still %d events (fd %d events %#x)", n, n > 0 ? ev[0].data.fd : -1,
	      n > 0 ? ev[0].events : 0);
	e = (struct epoll_event){ .events = EPOLLOUT, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_MOD, c, &e));
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].events == EPOLLOUT, "EPOLLOUT: %d events (%#x)", n, n > 0 ? ev[0].events : 0);
	SYS(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	why[0] = 0;
out:
	xclose(&ep), xclose(&c), xclose(&s), xclose(&p[0]), xclose(&p[1]);
	return why[0] ? -1 : 0;
}

static int t_epoll_et(void)
{
	int ep = -1, c = -1, s = -1;
	char b[64];
	struct epoll_event ev[4];
	SYS(ep = epoll_create1(0));
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK));
	struct epoll_event e = { .events = EPOLLIN | EPOLLET, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	SYS(send(s, "0123456789", 10, 0));
	int n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && (ev[0].events & EPOLLIN), "data sent: %d events", n);
	n = epoll_wait1(ep, ev, 0);
	CHECK(n == 0, "edge-triggered: reported again without new data (%d events)", n);
	size_t got = 0;
	for (;;) {
		ssize_t r = recv(c, b, sizeof(b), 0);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		CHECK(r < 0 && errno == EAGAIN, "drain: recv %zd (%s), want EAGAIN", r, r < 0 ? strerror(errno) : "");
		if (got < 10) { /* the bytes may come in two pieces: wait for the next edge */
			n = epoll_wait1(ep, ev, WAIT_MS);
			CHECK(n == 1, "more data: no edge");
			continue;
		}
		break;
	}
	CHECK(got == 10, "drained %zu bytes, want 10", got);
	SYS(send(s, "abc", 3, 0));
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && (ev[0].events & EPOLLIN), "new data after draining: %d events", n);
	/* a read that takes less than it asked for, and no read until EAGAIN: new data is a new edge
	 * all the same (the kernel signals every arrival; nginx counts on it for kept-alive requests) */
	CHECK(wait_avail(c, 3), "the 3 bytes never all arrived");
	ssize_t r = recv(c, b, sizeof(b), 0);
	CHECK(r == 3, "recv returned %zd, want 3", r);
	SYS(send(s, "def", 3, 0));
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && (ev[0].events & EPOLLIN), "new data after a short read (no EAGAIN): %d events, want an edge", n);
	CHECK(recv_exact(c, b, 3) == 3 && !memcmp(b, "def", 3), "recv");
	why[0] = 0;
out:
	xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

/* Edge-triggered as nginx registers a connection (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET), the
 * program awake between waits: each arrival is one edge, reported with EPOLLOUT while writable, data
 * left unread is not reported again until more comes, the peer's shutdown is EPOLLIN | EPOLLRDHUP,
 * and a thread asleep in the wait is woken by the next arrival. */
static void *send_later(void *p)
{
	int *fd = p;
	sleep_ms(100);
	if (send(*fd, "zz", 2, 0) != 2) {
		/* the waiting side fails the check */
	}
	return NULL;
}

/* the events of one fd in one epoll_wait with maxevents 4 (0: none, -1: an error or another fd) */
static int et_wait(int ep, int fd, int ms)
{
	struct epoll_event ev[4];
	int n = epoll_wait1(ep, ev, ms), got = 0;
	for (int i = 0; i < n; i++)
		got = ev[i].data.fd == fd ? got | (int)ev[i].events : -1;
	return n < 0 ? -1 : got;
}

/* wait for an event with EPOLLIN: an edge may bring EPOLLOUT alone first (the kernel's too: any
 * wake-up of the socket reports what is ready) */
static int et_wait_in(int ep, int fd)
{
	for (int i = 0; i < 100; i++) {
		int got = et_wait(ep, fd, WAIT_MS);
		if (got <= 0 || (got & EPOLLIN))
			return got;
	}
	return -1;
}

/* the same, looking without waiting (an event loop that stays awake: the shim then holds the token
 * back and reports from the ring) */
static int et_poll_in(int ep, int fd)
{
	for (int i = 0; i < WAIT_MS * 10; i++) {
		int got = et_wait(ep, fd, 0);
		if (got < 0 || (got & EPOLLIN))
			return got;
		struct timespec ts = { 0, 100000 };
		nanosleep(&ts, NULL);
	}
	return 0;
}

static int t_epoll_et_conn(void)
{
	int ep = -1, c = -1, s = -1, started = 0, got;
	pthread_t th;
	char b[64];
	SYS(ep = epoll_create1(0));
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK));
	struct epoll_event e = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	got = et_wait(ep, c, WAIT_MS);
	CHECK(got == EPOLLOUT, "added, nothing sent: events %#x, want EPOLLOUT", got);
	SYS(send(s, "abc", 3, 0));
	got = et_poll_in(ep, c);
	CHECK(got == (EPOLLIN | EPOLLOUT), "data, found by an awake loop: events %#x, want EPOLLIN | EPOLLOUT", got);
	CHECK(wait_avail(c, 3), "the 3 bytes never all arrived");
	got = et_wait(ep, c, 0);
	CHECK(got >= 0 && !(got & EPOLLIN), "data left unread, no new arrival: reported again (%#x)", got);
	SYS(send(s, "de", 2, 0));
	CHECK(wait_avail(c, 5), "the 2 more bytes never arrived");
	got = et_wait_in(ep, c);
	CHECK(got > 0 && (got & EPOLLIN), "more data on unread data: events %#x, want an edge", got);
	CHECK(recv(c, b, sizeof(b), 0) == 5 && !memcmp(b, "abcde", 5), "recv of the 5 bytes");
	got = et_wait(ep, c, 0);
	CHECK(got >= 0 && !(got & EPOLLIN), "all read: reported again (%#x)", got);
	CHECK(pthread_create(&th, NULL, send_later, &s) == 0, "pthread_create");
	started = 1;
	got = et_wait_in(ep, c);
	CHECK(got > 0 && (got & EPOLLIN), "asleep in epoll_wait, data sent: events %#x", got);
	pthread_join(th, NULL);
	started = 0;
	CHECK(recv_exact(c, b, 2) == 2 && !memcmp(b, "zz", 2), "recv of the late bytes");
	SYS(shutdown(s, SHUT_WR));
	got = et_wait_in(ep, c);
	CHECK(got > 0 && (got & (EPOLLIN | EPOLLRDHUP)) == (EPOLLIN | EPOLLRDHUP),
	      "peer's shutdown: events %#x, want EPOLLIN | EPOLLRDHUP", got);
	CHECK(recv(c, b, sizeof(b), 0) == 0, "recv after the shutdown: want EOF");
	why[0] = 0;
out:
	if (started)
		pthread_join(th, NULL);
	xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_epoll_oneshot(void)
{
	int ep = -1, c = -1, s = -1;
	char b[64];
	struct epoll_event ev[4];
	SYS(ep = epoll_create1(0));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct epoll_event e = { .events = EPOLLIN | EPOLLONESHOT, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	SYS(send(s, "one", 3, 0));
	int n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1, "first data: %d events", n);
	CHECK(recv_exact(c, b, 3) == 3, "recv");
	SYS(send(s, "two", 3, 0));
	CHECK(wait_fd(c, POLLIN, WAIT_MS) & POLLIN, "second data never readable");
	n = epoll_wait1(ep, ev, 100);
	CHECK(n == 0, "one-shot: reported again before EPOLL_CTL_MOD (%d events)", n);
	SYS(epoll_ctl(ep, EPOLL_CTL_MOD, c, &e));
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1, "after EPOLL_CTL_MOD: %d events", n);
	CHECK(recv_exact(c, b, 3) == 3 && !memcmp(b, "two", 3), "recv");
	why[0] = 0;
out:
	xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_epoll_rdhup(void)
{
	int ep = -1, c = -1, s = -1;
	char b[64];
	struct epoll_event ev[4];
	SYS(ep = epoll_create1(0));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	SYS(send(s, "last", 4, 0));
	SYS(shutdown(s, SHUT_WR));
	unsigned seen = 0;
	/* level-triggered: the data makes every wait return at once, so wait by the clock for the FIN */
	for (long end = now_ms() + WAIT_MS; now_ms() < end && !(seen & EPOLLRDHUP);) {
		int n = epoll_wait1(ep, ev, 50);
		if (n == 1)
			seen |= ev[0].events;
		if (!(seen & EPOLLRDHUP))
			sleep_ms(1);
	}
	CHECK(seen & EPOLLRDHUP, "peer's shutdown(SHUT_WR): no EPOLLRDHUP (events seen %#x)", seen);
	CHECK(recv_exact(c, b, 4) == 4 && !memcmp(b, "last", 4), "the data before the shutdown");
	CHECK(recv(c, b, sizeof(b), MSG_DONTWAIT) == 0, "then EOF");
	/* the other way still works: half-close */
	SYS(send(c, "back", 4, MSG_NOSIGNAL));
	CHECK(recv_exact(s, b, 4) == 4, "half-closed peer did not get the reply");
	why[0] = 0;
out:
	xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

/* CPU time this process has used, ms */
static long cpu_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Wait until fd's event with `want` bits shows, gathering what the waits report for it; the events of
 * other fds are counted in *others. Returns the bits seen for fd (its data checked against `data`). */
static unsigned epoll_until(int ep, uint64_t data, unsigned want, int *others, int *bad_data)
{
	unsigned seen = 0;
	for (long end = now_ms() + WAIT_MS; now_ms() < end && (seen & want) != want;) {
		struct epoll_event ev[8];
		int n = epoll_wait(ep, ev, 8, 50);
		for (int i = 0; i < n; i++) {
			if (ev[i].data.u64 == data)
				seen |= ev[i].events;
			else if (others)
				++*others;
		}
		if (bad_data && n > 1 && ev[0].data.u64 == data && ev[1].data.u64 == data)
			++*bad_data; /* one fd twice in one wait: the kernel merges its readiness */
	}
	return seen;
}

/* The registration churn of a level-triggered event loop (redis's and wrk's ae: DEL + ADD or MOD on
 * every request) with the program's 64-bit data, EPOLLOUT on and off, a socket deleted while it is
 * readable, and the errors of EPOLL_CTL_* (the shim keeps these in a table of its own: shim_epoll.c). */
static int t_epoll_churn(void)
{
	int ep = -1, c = -1, s = -1, p[2] = { -1, -1 }, c2 = -1, s2 = -1;
	char b[64];
	struct epoll_event ev[8];
	const uint64_t D = 0x1122334455667788ull;
	int others = 0, twice = 0;
	SYS(ep = epoll_create1(EPOLL_CLOEXEC));
	SYS(pipe(p));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct epoll_event e = { .events = EPOLLIN | EPOLLOUT, .data.u64 = D };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	e = (struct epoll_event){ .events = EPOLLIN, .data.u64 = 7 };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e));
	int n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.u64 == D && ev[0].events == EPOLLOUT, "connected, nothing sent: %d events (%#x, data %#llx)",
	      n, n > 0 ? ev[0].events : 0, n > 0 ? (unsigned long long)ev[0].data.u64 : 0ull);
	SYS(send(s, "ping", 4, 0));
	unsigned seen = epoll_until(ep, D, EPOLLIN, &others, &twice);
	CHECK((seen & (EPOLLIN | EPOLLOUT)) == (EPOLLIN | EPOLLOUT) && !others && !twice,
	      "data sent: events %#x for the socket, %d for others, %d waits with it twice", seen, others, twice);
	n = epoll_wait1(ep, ev, 0);
	CHECK(n == 1 && ev[0].events == (EPOLLIN | EPOLLOUT), "readable and writable: one event of both, got %d (%#x)",
	      n, n > 0 ? ev[0].events : 0);
	/* deleted while readable: never reported, and the wait does not end early for it */
	SYS(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	long cpu0 = cpu_ms();
	n = epoll_wait1(ep, ev, 300);
	long spent = cpu_ms() - cpu0;
	CHECK(n == 0, "deleted socket (still readable): %d events (data %#llx)", n,
	      n > 0 ? (unsigned long long)ev[0].data.u64 : 0ull);
	/* and it slept: a wait that kept waking for the deleted socket would burn the CPU meanwhile */
	CHECK(spent < 150, "a 300 ms wait with nothing to report used %ld ms of CPU", spent);
	SYS(write(p[1], "x", 1));
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.u64 == 7, "the pipe only: %d events", n);
	CHECK(read(p[0], b, 1) == 1, "pipe read");
	/* back with less than before: only what is asked shows */
	e = (struct epoll_event){ .events = EPOLLOUT, .data.u64 = 42 };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.u64 == 42 && ev[0].events == EPOLLOUT, "EPOLLOUT only (readable too): %d events (%#x)",
	      n, n > 0 ? ev[0].events : 0);
	e = (struct epoll_event){ .events = EPOLLIN, .data.u64 = 43 };
	SYS(epoll_ctl(ep, EPOLL_CTL_MOD, c, &e));
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.u64 == 43 && ev[0].events == EPOLLIN, "EPOLLIN only: %d events (%#x, data %llu)", n,
	      n > 0 ? ev[0].events : 0, n > 0 ? (unsigned long long)ev[0].data.u64 : 0ull);
	CHECK(recv_exact(c, b, 4) == 4 && !memcmp(b, "ping", 4), "recv");
	n = epoll_wait1(ep, ev, 0);
	CHECK(n == 0, "read, EPOLLIN only: %d events", n);
	CHECK(epoll_pwait2(ep, ev, 8, &(struct timespec){ 0, 1000000 }, NULL) == 0, "epoll_pwait2: events, want none");
	e.events = EPOLLOUT;
	SYS(epoll_ctl(ep, EPOLL_CTL_MOD, c, &e));
	CHECK(epoll_pwait2(ep, ev, 8, NULL, NULL) == 1 && ev[0].events == EPOLLOUT, "epoll_pwait2: no EPOLLOUT");
	/* errors as the kernel's */
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e) < 0 && errno == EEXIST, "ADD twice: want EEXIST");
	SYS(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL) < 0 && errno == ENOENT, "DEL twice: want ENOENT");
	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, c, &e) < 0 && errno == ENOENT, "MOD after DEL: want ENOENT");
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, ep, &e) < 0 && errno == EINVAL, "ADD itself: want EINVAL");
	/* closed while registered; its number comes back as another socket, which ADD takes */
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	int num = c;
	xclose(&c);
	xclose(&s);
	/* its number closed (and not reused yet): EBADF, not ENOENT */
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, num, NULL) < 0 && errno == EBADF, "DEL of a closed socket: want EBADF");
	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, num, &e) < 0 && errno == EBADF, "MOD of a closed socket: want EBADF");
	SYS(tcp_pair(AF_INET, &c2, &s2));
	if (c2 != num && s2 != num) { /* make the number the same (numbering is checked elsewhere) */
		SYS(dup2(c2, num));
		xclose(&c2);
		c2 = num;
	}
	int again = c2 == num ? c2 : s2;
	e = (struct epoll_event){ .events = EPOLLIN | EPOLLOUT, .data.u64 = 99 };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, again, &e));
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.u64 == 99 && ev[0].events == EPOLLOUT, "the new socket on the old number: %d events", n);
	why[0] = 0;
out:
	xclose(&ep), xclose(&c), xclose(&s), xclose(&p[0]), xclose(&p[1]), xclose(&c2), xclose(&s2);
	return why[0] ? -1 : 0;
}

struct drainer {
	int fd, delay_ms;
	size_t bytes, got;
};

static void *drain_later(void *arg)
{
	struct drainer *d = arg;
	static uint8_t b[65536];
	sleep_ms(d->delay_ms);
	while (d->got < d->bytes) {
		ssize_t r = recv_exact(d->fd, b, d->bytes - d->got < sizeof(b) ? d->bytes - d->got : sizeof(b));
		if (r <= 0)
			break;
		d->got += (size_t)r;
	}
	return NULL;
}

/* Level-triggered EPOLLOUT follows the room to send: gone while the peer does not read, back when it has. */
static int t_epoll_out_full(void)
{
	int ep = -1, c = -1, s = -1;
	static uint8_t buf[65536];
	struct epoll_event ev[4];
	SYS(ep = epoll_create1(0));
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK));
	struct epoll_event e = { .events = EPOLLOUT, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	int n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].events == EPOLLOUT, "empty: %d events", n);
	size_t sent = 0;
	int full = 0;
	while (sent < (64u << 20)) {
		ssize_t w = send(c, buf, sizeof(buf), MSG_NOSIGNAL);
		if (w > 0) {
			sent += (size_t)w;
			continue;
		}
		CHECK(w < 0 && errno == EAGAIN, "send: %s, want EAGAIN once full", w < 0 ? strerror(errno) : "0");
		sleep_ms(20);
		if (epoll_wait1(ep, ev, 0) == 0) {
			full = 1;
			break;
		}
	}
	CHECK(full, "64 MiB sent and epoll never stopped reporting EPOLLOUT");
	n = epoll_wait1(ep, ev, 100);
	CHECK(n == 0, "full: %d events (%#x)", n, n > 0 ? ev[0].events : 0);
	/* the peer reads it all while this thread sleeps in epoll_wait: the room must wake it */
	struct drainer d = { .fd = s, .bytes = sent, .delay_ms = 100 };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, drain_later, &d) == 0, "pthread_create");
	n = epoll_wait1(ep, ev, -1); /* no timeout to end it: only the room can (else the check's alarm) */
	pthread_join(t, NULL);
	CHECK(d.got == sent, "the peer read %zu of %zu bytes", d.got, sent);
	CHECK(n == 1 && ev[0].events == EPOLLOUT && ev[0].data.fd == c, "the peer read all: %d events", n);
	n = epoll_wait1(ep, ev, 0);
	CHECK(n == 1, "level-triggered: EPOLLOUT again, %d events", n);
	why[0] = 0;
out:
	xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

/* A thread waiting in epoll_wait while another registers a writable socket for EPOLLOUT wakes. */
struct adder {
	int ep, fd;
};

static void *add_later(void *arg)
{
	struct adder *a = arg;
	sleep_ms(100);
	struct epoll_event e = { .events = EPOLLOUT, .data.u64 = 77 };
	epoll_ctl(a->ep, EPOLL_CTL_ADD, a->fd, &e);
	return NULL;
}

static int t_epoll_add_while_waiting(void)
{
	int ep = -1, c = -1, s = -1;
	struct epoll_event ev[4];
	SYS(ep = epoll_create1(0));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct adder a = { ep, c };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, add_later, &a) == 0, "pthread_create");
	int n = epoll_wait1(ep, ev, -1); /* only the new socket can end it (else the check's alarm) */
	pthread_join(t, NULL);
	CHECK(n == 1 && ev[0].data.u64 == 77 && ev[0].events == EPOLLOUT, "added while waiting: %d events", n);
	why[0] = 0;
out:
	xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

/* An epoll fd copied with dup() names the same instance; one inside another epoll makes that one
 * readable when a socket in it is ready; closing the copy leaves the original working. */
static int t_epoll_dup_nested(void)
{
	int ep = -1, ep2 = -1, outer = -1, c = -1, s = -1;
	struct epoll_event ev[4];
	SYS(ep = epoll_create1(0));
	SYS(ep2 = dup(ep));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct epoll_event e = { .events = EPOLLOUT, .data.u64 = 5 };
	SYS(epoll_ctl(ep2, EPOLL_CTL_ADD, c, &e));
	int n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.u64 == 5 && ev[0].events == EPOLLOUT, "registered through the copy: %d events", n);
	SYS(outer = epoll_create1(0));
	e = (struct epoll_event){ .events = EPOLLIN, .data.u64 = 6 };
	SYS(epoll_ctl(outer, EPOLL_CTL_ADD, ep, &e));
	n = epoll_wait1(outer, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.u64 == 6 && (ev[0].events & EPOLLIN), "nested: the inner epoll not readable (%d)", n);
	xclose(&ep2);
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.u64 == 5, "after closing the copy: %d events", n);
	why[0] = 0;
out:
	xclose(&outer), xclose(&ep2), xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

/* A forked child closes its copies of registered sockets (redis's BGSAVE child closes the listeners):
 * the parent's registrations, in the epoll instance they share, stay. */
static int t_epoll_fork_close(void)
{
	int ep = -1, l = -1, c = -1, a = -1;
	struct epoll_event ev[4];
	struct sockaddr_storage ss;
	SYS(l = bound(AF_INET, SOCK_STREAM, &ss));
	SYS(listen(l, 8));
	SYS(ep = epoll_create1(0));
	struct epoll_event e = { .events = EPOLLIN, .data.u64 = 11 };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, l, &e));
	fflush(NULL);
	pid_t pid = fork();
	SYS(pid);
	if (pid == 0) {
		close(l);
		close(ep);
		_exit(0);
	}
	int st = 0;
	SYS(waitpid(pid, &st, 0));
	SYS(c = socket(AF_INET, SOCK_STREAM, 0));
	SYS(connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)));
	int n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.u64 == 11 && (ev[0].events & EPOLLIN), "listener after the child closed its copy: %d events", n);
	SYS(a = accept(l, NULL, NULL));
	why[0] = 0;
out:
	xclose(&ep), xclose(&l), xclose(&c), xclose(&a);
	return why[0] ? -1 : 0;
}

/* An event loop that is awake may have senders leave a socket's readable token out (the shim reads
 * its ring instead: docs/sockets.md "epoll"). Whoever waits for the socket by other means meanwhile --
 * poll, select, a blocking recv in another thread, a forked child -- must still see the data. */
static int t_epoll_awake_then_poll(void)
{
	int ep = -1, c = -1, s = -1;
	char b[8];
	struct epoll_event ev[4];
	SYS(ep = epoll_create1(0));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct epoll_event e = { .events = EPOLLIN, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	CHECK(epoll_wait1(ep, ev, 0) == 0, "nothing sent yet");
	SYS(send(s, "a", 1, 0));
	CHECK(wait_fd(c, POLLIN, WAIT_MS) & POLLIN, "poll after the event loop's wait: data never readable");
	CHECK(recv(c, b, sizeof(b), 0) == 1, "recv");
	CHECK(epoll_wait1(ep, ev, 0) == 0, "read: nothing more");
	SYS(send(s, "b", 1, 0));
	fd_set rd;
	FD_ZERO(&rd);
	FD_SET(c, &rd);
	struct timeval tv = { WAIT_MS / 1000, 0 };
	int n;
	do
		n = select(c + 1, &rd, NULL, NULL, &tv);
	while (n < 0 && errno == EINTR);
	CHECK(n == 1 && FD_ISSET(c, &rd), "select after the event loop's wait: %d", n);
	CHECK(recv(c, b, sizeof(b), 0) == 1, "recv");
	n = epoll_wait1(ep, ev, 0);
	CHECK(n == 0, "read: %d events", n);
	why[0] = 0;
out:
	xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

struct blocked_recv {
	int fd;
	ssize_t got;
	char b[8];
};

static void *recv_blocking(void *arg)
{
	struct blocked_recv *br = arg;
	do
		br->got = recv(br->fd, br->b, sizeof(br->b), 0);
	while (br->got < 0 && errno == EINTR);
	return NULL;
}

static int t_epoll_awake_blocked_recv(void)
{
	int ep = -1, c = -1, s = -1;
	struct epoll_event ev[4];
	SYS(ep = epoll_create1(0));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct epoll_event e = { .events = EPOLLIN, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	CHECK(epoll_wait1(ep, ev, 0) == 0, "nothing sent yet");
	struct blocked_recv br = { .fd = c };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, recv_blocking, &br) == 0, "pthread_create");
	sleep_ms(50);
	/* a wait that sleeps and wakes again: the loop takes its hold back on waking, but not from a waiter */
	CHECK(epoll_wait1(ep, ev, 50) == 0, "nothing sent yet (again, with the other thread in recv)");
	SYS(send(s, "c", 1, 0));
	pthread_join(t, NULL); /* a recv that never wakes ends the check by its alarm */
	CHECK(br.got == 1 && br.b[0] == 'c', "the blocked recv got %zd", br.got);
	why[0] = 0;
out:
	xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_epoll_awake_fork_child(void)
{
	int ep = -1, c = -1, s = -1;
	struct epoll_event ev[4];
	SYS(ep = epoll_create1(0));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct epoll_event e = { .events = EPOLLIN, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	CHECK(epoll_wait1(ep, ev, 0) == 0, "nothing sent yet");
	fflush(NULL);
	pid_t pid = fork();
	SYS(pid);
	if (pid == 0) {
		char b[8];
		alarm(10);
		ssize_t r;
		do
			r = recv(c, b, sizeof(b), 0);
		while (r < 0 && errno == EINTR);
		_exit(r == 1 && b[0] == 'd' ? 0 : 3);
	}
	sleep_ms(50);
	CHECK(epoll_wait1(ep, ev, 50) == 0, "nothing sent yet (the child in recv)");
	SYS(send(s, "d", 1, 0));
	int st = 0;
	SYS(waitpid(pid, &st, 0));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's blocking recv: %s %d", WIFEXITED(st) ? "exit" : "signal",
	      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	why[0] = 0;
out:
	xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_dup_fork_close(void)
{
	int c = -1, s = -1, d = -1, pp[2] = { -1, -1 };
	char b[64];
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(d = dup(c));
	/* a child sends through its copy, then closes it and exits */
	fflush(NULL);
	pid_t pid = fork();
	SYS(pid);
	if (pid == 0) {
		int ok = send(c, "child", 5, MSG_NOSIGNAL) == 5;
		close(c);
		close(d);
		_exit(ok ? 0 : 3);
	}
	int st;
	SYS(waitpid(pid, &st, 0));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child's send failed (status %#x)", st);
	CHECK(recv_exact(s, b, 5) == 5 && !memcmp(b, "child", 5), "peer did not get the child's bytes");
	CHECK(send(c, "parent", 6, MSG_NOSIGNAL) == 6, "parent's send after the child's close: %s", strerror(errno));
	CHECK(recv_exact(s, b, 6) == 6 && !memcmp(b, "parent", 6), "peer did not get the parent's bytes");
	/* close one of two copies: no EOF */
	xclose(&c);
	const char *seen = peer_shows(s, 200);
	CHECK(!strcmp(seen, "nothing"), "close() of one of two dups: the peer shows %s, want nothing", seen);
	CHECK(send(d, "dup", 3, MSG_NOSIGNAL) == 3, "send through the dup: %s", strerror(errno));
	CHECK(recv_exact(s, b, 3) == 3 && !memcmp(b, "dup", 3), "peer did not get the dup's bytes");
	/* a child holds the last other copy: the parent's close is no EOF, the child's exit is */
	SYS(pipe(pp));
	fflush(NULL);
	pid = fork();
	SYS(pid);
	if (pid == 0) {
		close(pp[1]);
		char x;
		ssize_t r = read(pp[0], &x, 1);
		(void)r;
		_exit(0);
	}
	xclose(&pp[0]);
	xclose(&d);
	seen = peer_shows(s, 200);
	CHECK(!strcmp(seen, "nothing"), "parent closed, a child still holds the socket: the peer shows %s, want nothing",
	      seen);
	xclose(&pp[1]); /* the child exits */
	SYS(waitpid(pid, &st, 0));
	CHECK(wait_eof(s, WAIT_MS), "no EOF after the last copy was closed");
	why[0] = 0;
out:
	xclose(&c), xclose(&s), xclose(&d), xclose(&pp[0]), xclose(&pp[1]);
	return why[0] ? -1 : 0;
}

static int t_nonblock_connect(void)
{
	int l = -1, c = -1, s = -1;
	struct sockaddr_storage ss;
	SYS(l = bound(AF_INET, SOCK_STREAM, &ss));
	SYS(c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	int r = connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in));
	/* Linux: EINPROGRESS even on loopback, where the handshake is done by the time it could answer */
	CHECK(r < 0 && errno == EINPROGRESS, "non-blocking connect to a local listener: %s, want EINPROGRESS",
	      r == 0 ? "0" : strerror(errno));
	CHECK(wait_fd(c, POLLOUT, WAIT_MS) & POLLOUT, "never writable");
	int err = -1;
	socklen_t len = sizeof(err);
	SYS(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len));
	CHECK(err == 0, "SO_ERROR %d (%s), want 0", err, strerror(err));
	SYS(s = accept(l, NULL, NULL));
	SYS(send_all(c, "hi", 2));
	char b[2];
	CHECK(recv_exact(s, b, 2) == 2, "data after the non-blocking connect");
	/* connect again: the kernel reports the finished connect once (0), then EISCONN */
	r = connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in));
	CHECK(r == 0 || errno == EISCONN, "connect after completion: %s, want 0 or EISCONN", strerror(errno));
	r = connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in));
	CHECK(r < 0 && errno == EISCONN, "connect on a connected socket: %s, want EISCONN", r < 0 ? strerror(errno) : "0");
	why[0] = 0;
out:
	xclose(&l), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_connect_refused(void)
{
	int c = -1;
	struct sockaddr_storage ss;
	uint16_t port = closed_port();
	CHECK(port, "no free port");
	loopback(AF_INET, &ss, port);
	SYS(c = socket(AF_INET, SOCK_STREAM, 0));
	int r = connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in));
	CHECK(r < 0 && errno == ECONNREFUSED, "blocking connect: %s, want ECONNREFUSED", r < 0 ? strerror(errno) : "0");
	xclose(&c);
	SYS(c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	r = connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in));
	if (r < 0 && errno == EINPROGRESS) {
		CHECK(wait_fd(c, POLLOUT, WAIT_MS), "non-blocking connect: never ready");
		int err = -1;
		socklen_t len = sizeof(err);
		SYS(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len));
		CHECK(err == ECONNREFUSED, "non-blocking connect: SO_ERROR %d (%s), want ECONNREFUSED", err, strerror(err));
		len = sizeof(err);
		SYS(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len));
		CHECK(err == 0, "SO_ERROR not cleared by reading it (%d)", err);
	} else {
		CHECK(r < 0 && errno == ECONNREFUSED, "non-blocking connect: %s, want EINPROGRESS or ECONNREFUSED",
		      r < 0 ? strerror(errno) : "0");
	}
	why[0] = 0;
out:
	xclose(&c);
	return why[0] ? -1 : 0;
}

static int t_accept4(void)
{
	int l = -1, c = -1, a = -1, c2 = -1, a2 = -1;
	struct sockaddr_storage ss, peer, cn;
	socklen_t len = sizeof(peer);
	SYS(l = bound(AF_INET, SOCK_STREAM, &ss));
	SYS(c = socket(AF_INET, SOCK_STREAM, 0));
	SYS(connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)));
	SYS(a = accept4(l, (struct sockaddr *)&peer, &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
	CHECK(fcntl(a, F_GETFL) & O_NONBLOCK, "accept4 SOCK_NONBLOCK: no O_NONBLOCK");
	CHECK(fcntl(a, F_GETFD) & FD_CLOEXEC, "accept4 SOCK_CLOEXEC: no FD_CLOEXEC");
	socklen_t cl = sizeof(cn);
	SYS(getsockname(c, (struct sockaddr *)&cn, &cl));
	CHECK(len == sizeof(struct sockaddr_in) && same_addr(&peer, &cn), "accept4's address is not the client's");
	char b[8];
	ssize_t r = recv(a, b, sizeof(b), 0);
	CHECK(r < 0 && errno == EAGAIN, "recv on the non-blocking accepted socket: want EAGAIN");
	SYS(c2 = socket(AF_INET, SOCK_STREAM, 0));
	SYS(connect(c2, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)));
	SYS(a2 = accept4(l, NULL, NULL, 0));
	CHECK(!(fcntl(a2, F_GETFL) & O_NONBLOCK), "accept4(0): O_NONBLOCK set");
	CHECK(!(fcntl(a2, F_GETFD) & FD_CLOEXEC), "accept4(0): FD_CLOEXEC set");
	why[0] = 0;
out:
	xclose(&l), xclose(&c), xclose(&a), xclose(&c2), xclose(&a2);
	return why[0] ? -1 : 0;
}

static int t_accept_nonblock(void)
{
	int l = -1, c = -1, a = -1;
	struct sockaddr_storage ss;
	SYS(l = bound(AF_INET, SOCK_STREAM, &ss));
	SYS(fcntl(l, F_SETFL, fcntl(l, F_GETFL) | O_NONBLOCK));
	int r = accept(l, NULL, NULL);
	CHECK(r < 0 && errno == EAGAIN, "accept with nothing queued: %s, want EAGAIN", r < 0 ? strerror(errno) : "a socket");
	CHECK(!(wait_fd(l, POLLIN, 0) & POLLIN), "listener readable with nothing queued");
	SYS(c = socket(AF_INET, SOCK_STREAM, 0));
	SYS(connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)));
	CHECK(wait_fd(l, POLLIN, WAIT_MS) & POLLIN, "listener not readable with a connection queued");
	SYS(a = accept(l, NULL, NULL));
	CHECK(!(wait_fd(l, POLLIN, 0) & POLLIN), "listener still readable after the accept");
	why[0] = 0;
out:
	xclose(&l), xclose(&c), xclose(&a);
	return why[0] ? -1 : 0;
}

struct conn_arg {
	struct sockaddr_storage ss;
	int delay_ms;
	int fd;
};

static void *connector(void *p)
{
	struct conn_arg *a = p;
	sleep_ms(a->delay_ms);
	a->fd = socket(a->ss.ss_family, SOCK_STREAM, 0);
	if (a->fd >= 0 && connect(a->fd, (struct sockaddr *)&a->ss, sizeof(struct sockaddr_in)) < 0)
		xclose(&a->fd);
	return NULL;
}

static int t_accept_blocking(void)
{
	int l = -1, a = -1;
	pthread_t th;
	int started = 0;
	struct conn_arg ca = { .delay_ms = 100, .fd = -1 };
	SYS(l = bound(AF_INET, SOCK_STREAM, &ca.ss));
	CHECK(pthread_create(&th, NULL, connector, &ca) == 0, "pthread_create");
	started = 1;
	SYS(a = accept(l, NULL, NULL));
	pthread_join(th, NULL);
	started = 0;
	CHECK(ca.fd >= 0, "the other thread's connect failed");
	why[0] = 0;
out:
	if (started)
		pthread_join(th, NULL);
	xclose(&l), xclose(&a), xclose(&ca.fd);
	return why[0] ? -1 : 0;
}

static int t_fcntl_dupfd(void)
{
	int c = -1, s = -1, d = -1, e = -1;
	char b[8];
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(d = fcntl(c, F_DUPFD_CLOEXEC, 100));
	CHECK(d >= 100, "F_DUPFD_CLOEXEC 100 gave %d", d);
	CHECK(fcntl(d, F_GETFD) & FD_CLOEXEC, "F_DUPFD_CLOEXEC: no FD_CLOEXEC");
	CHECK(!(fcntl(c, F_GETFD) & FD_CLOEXEC), "the original got FD_CLOEXEC");
	SYS(e = fcntl(c, F_DUPFD, 0));
	CHECK(!(fcntl(e, F_GETFD) & FD_CLOEXEC), "F_DUPFD: FD_CLOEXEC set");
	int type = 0;
	socklen_t len = sizeof(type);
	SYS(getsockopt(d, SOL_SOCKET, SO_TYPE, &type, &len));
	CHECK(type == SOCK_STREAM, "SO_TYPE on the dup: %d", type);
	CHECK(send(d, "dup", 3, MSG_NOSIGNAL) == 3, "send through the dup: %s", strerror(errno));
	CHECK(recv_exact(s, b, 3) == 3, "peer did not get the dup's bytes");
	/* O_NONBLOCK belongs to the open file: shared by every dup */
	SYS(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK));
	CHECK(fcntl(d, F_GETFL) & O_NONBLOCK, "O_NONBLOCK set on the original does not show on the dup");
	ssize_t r = recv(d, b, sizeof(b), 0);
	CHECK(r < 0 && errno == EAGAIN, "recv on the dup after F_SETFL O_NONBLOCK: want EAGAIN");
	SYS(fcntl(c, F_SETFL, fcntl(c, F_GETFL) & ~O_NONBLOCK));
	CHECK(!(fcntl(e, F_GETFL) & O_NONBLOCK), "O_NONBLOCK cleared but a dup still has it");
	SYS(fcntl(d, F_SETFD, 0));
	CHECK(!(fcntl(d, F_GETFD) & FD_CLOEXEC), "F_SETFD 0 left FD_CLOEXEC");
	xclose(&d);
	xclose(&e);
	CHECK(send(c, "orig", 4, MSG_NOSIGNAL) == 4, "the original after closing its dups: %s", strerror(errno));
	CHECK(recv_exact(s, b, 4) == 4, "peer did not get the original's bytes");
	/* dup2 onto a busy number, dup3 with O_CLOEXEC */
	SYS(d = open("/dev/null", O_RDONLY));
	CHECK(dup2(c, d) == d, "dup2: %s", strerror(errno));
	CHECK(send(d, "d2", 2, MSG_NOSIGNAL) == 2, "send through the dup2: %s", strerror(errno));
	CHECK(recv_exact(s, b, 2) == 2, "peer did not get the dup2's bytes");
	SYS(e = open("/dev/null", O_RDONLY));
	CHECK(dup3(c, e, O_CLOEXEC) == e, "dup3: %s", strerror(errno));
	CHECK(fcntl(e, F_GETFD) & FD_CLOEXEC, "dup3 O_CLOEXEC: no FD_CLOEXEC");
	xclose(&c);
	CHECK(send(e, "d3", 2, MSG_NOSIGNAL) == 2, "send through the dup3: %s", strerror(errno));
	CHECK(recv_exact(s, b, 2) == 2, "peer did not get the dup3's bytes");
	why[0] = 0;
out:
	xclose(&c), xclose(&s), xclose(&d), xclose(&e);
	return why[0] ? -1 : 0;
}

static int t_ioctl(void)
{
	int c = -1, s = -1;
	char b[256];
	SYS(tcp_pair(AF_INET, &c, &s));
	int on = 1;
	SYS(ioctl(c, FIONBIO, &on));
	CHECK(fcntl(c, F_GETFL) & O_NONBLOCK, "FIONBIO 1: no O_NONBLOCK");
	ssize_t r = recv(c, b, sizeof(b), 0);
	CHECK(r < 0 && errno == EAGAIN, "recv after FIONBIO 1: want EAGAIN");
	on = 0;
	SYS(ioctl(c, FIONBIO, &on));
	CHECK(!(fcntl(c, F_GETFL) & O_NONBLOCK), "FIONBIO 0: O_NONBLOCK still set");
	int avail = -1;
	SYS(ioctl(c, FIONREAD, &avail));
	CHECK(avail == 0, "FIONREAD with nothing sent: %d", avail);
	memset(b, 'q', 123);
	SYS(send_all(s, b, 123));
	wait_avail(c, 123);
	SYS(ioctl(c, FIONREAD, &avail));
	CHECK(avail == 123, "FIONREAD %d, want 123", avail);
	CHECK(recv(c, b, 23, 0) == 23, "recv 23");
	SYS(ioctl(c, FIONREAD, &avail));
	CHECK(avail == 100, "FIONREAD after taking 23: %d, want 100", avail);
	CHECK(recv_exact(c, b, 100) == 100, "recv the rest");
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_msg_peek(void)
{
	int c = -1, s = -1;
	char b[32];
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(send_all(s, "hello world", 11));
	CHECK(wait_avail(c, 11), "the 11 bytes never all arrived");
	memset(b, 0, sizeof(b));
	ssize_t r = recv(c, b, 5, MSG_PEEK);
	CHECK(r == 5 && !memcmp(b, "hello", 5), "peek 5: %zd '%.5s'", r, b);
	r = recv(c, b, 5, MSG_PEEK);
	CHECK(r == 5 && !memcmp(b, "hello", 5), "peek again: %zd", r);
	CHECK(recv_exact(c, b, 11) == 11 && !memcmp(b, "hello world", 11), "recv after peeking: '%.11s'", b);
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_msg_dontwait(void)
{
	int c = -1, s = -1;
	char b[32];
	SYS(tcp_pair(AF_INET, &c, &s));
	ssize_t r = recv(c, b, sizeof(b), MSG_DONTWAIT);
	CHECK(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "recv MSG_DONTWAIT on nothing: %zd %s", r,
	      r < 0 ? strerror(errno) : "");
	CHECK(!(fcntl(c, F_GETFL) & O_NONBLOCK), "MSG_DONTWAIT made the socket non-blocking");
	SYS(send_all(s, "x", 1));
	CHECK(wait_fd(c, POLLIN, WAIT_MS) & POLLIN, "not readable");
	CHECK(recv(c, b, sizeof(b), MSG_DONTWAIT) == 1, "recv MSG_DONTWAIT with data");
	CHECK(send(c, "y", 1, MSG_DONTWAIT) == 1, "send MSG_DONTWAIT");
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

struct sender_arg {
	int fd;
	const uint8_t *buf;
	size_t len, chunk;
	int delay_ms, gap_ms; /* before the first chunk, between chunks */
	int rc;
};

static void *sender(void *p)
{
	struct sender_arg *a = p;
	a->rc = 0;
	sleep_ms(a->delay_ms);
	for (size_t off = 0; off < a->len; off += a->chunk) {
		if (a->gap_ms && off)
			sleep_ms(a->gap_ms);
		size_t n = a->len - off < a->chunk ? a->len - off : a->chunk;
		if (send_all(a->fd, a->buf + off, n) < 0) {
			a->rc = -1;
			break;
		}
	}
	return NULL;
}

static int t_msg_waitall(void)
{
	int c = -1, s = -1, started = 0;
	pthread_t th;
	static uint8_t data[3000], got[3000];
	fill(data, sizeof(data), 7);
	SYS(tcp_pair(AF_INET, &c, &s));
	struct sender_arg sa = { .fd = s, .buf = data, .len = sizeof(data), .chunk = 1000, .gap_ms = 30 };
	CHECK(pthread_create(&th, NULL, sender, &sa) == 0, "pthread_create");
	started = 1;
	ssize_t r = recv(c, got, sizeof(got), MSG_WAITALL);
	CHECK(r == (ssize_t)sizeof(got), "recv MSG_WAITALL returned %zd of 3000", r);
	CHECK(!memcmp(got, data, sizeof(data)), "wrong bytes");
	why[0] = 0;
out:
	if (started)
		pthread_join(th, NULL);
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_shutdown_wr(void)
{
	int c = -1, s = -1;
	char b[32];
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(send_all(c, "abc", 3));
	SYS(shutdown(c, SHUT_WR));
	CHECK(recv_exact(s, b, 3) == 3 && !memcmp(b, "abc", 3), "data before the shutdown");
	CHECK(wait_eof(s, WAIT_MS), "peer saw no EOF after shutdown(SHUT_WR)");
	SYS(send_all(s, "back", 4));
	CHECK(recv_exact(c, b, 4) == 4 && !memcmp(b, "back", 4), "half-closed: reply not received");
	ssize_t r = send(c, "x", 1, MSG_NOSIGNAL);
	CHECK(r < 0 && errno == EPIPE, "send after SHUT_WR: %s, want EPIPE", r < 0 ? strerror(errno) : "sent");
	SYS(shutdown(s, SHUT_RDWR));
	CHECK(wait_eof(c, WAIT_MS), "no EOF after the peer's SHUT_RDWR");
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

/* c's peer closed; send until the reset shows: returns the first errno (0: none within WAIT_MS) */
static int send_until_error(int c, int flags)
{
	for (int i = 0; i < WAIT_MS / 10; i++) {
		ssize_t r = send(c, "x", 1, flags);
		if (r < 0)
			return errno;
		sleep_ms(10);
	}
	return 0;
}

static int t_epipe_nosignal(void)
{
	int c = -1, s = -1;
	char b[4];
	SYS(tcp_pair(AF_INET, &c, &s));
	/* a call on c before the peer closes (its connection is set up by then: a direct one attached) */
	CHECK(recv(c, b, sizeof(b), MSG_DONTWAIT) < 0 && errno == EAGAIN, "nothing sent yet: want EAGAIN");
	xclose(&s);
	CHECK(wait_eof(c, WAIT_MS), "no EOF after the peer's close");
	int before = sigpipes;
	int e = send_until_error(c, MSG_NOSIGNAL);
	CHECK(e == EPIPE, "send to a closed peer: %s, want EPIPE", e ? strerror(e) : "never failed");
	CHECK(sigpipes == before, "SIGPIPE raised despite MSG_NOSIGNAL");
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int selfpipe_w = -1;

static void on_sigchld(int sig)
{
	(void)sig;
	int e = errno;
	(void)!write(selfpipe_w, "c", 1);
	errno = e;
}

/* What an event loop with children waits in (issue 39: asyncio's wait for a child hung under the shim):
 * an epoll with a socket of ours and the child's exit -- first as a self-pipe a SIGCHLD handler writes,
 * then as a signalfd. Each exit must end the wait, and the child be reaped with its status. */
static int t_children_wake_the_loop(void)
{
	int c = -1, s = -1, ep = -1, sfd = -1, pp[2] = { -1, -1 };
	struct sigaction sa = { .sa_handler = on_sigchld, .sa_flags = SA_RESTART }, osa;
	sigset_t chld, old;
	bool handler = false, masked = false;
	struct epoll_event ev[4], e = { .events = EPOLLIN, .data.u64 = 1 };
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(ep = epoll_create1(EPOLL_CLOEXEC));
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	SYS(pipe2(pp, O_NONBLOCK | O_CLOEXEC));
	selfpipe_w = pp[1];
	e = (struct epoll_event){ .events = EPOLLIN, .data.u64 = 2 };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &e));
	SYS(sigaction(SIGCHLD, &sa, &osa));
	handler = true;
	pid_t pid;
	SYS(pid = fork());
	if (pid == 0)
		_exit(5);
	int n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.u64 == 2, "a child's exit by the self-pipe: %d events (data %llu)", n,
	      n > 0 ? (unsigned long long)ev[0].data.u64 : 0ull);
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 5, "the child's status");
	SYS(sigaction(SIGCHLD, &osa, NULL));
	handler = false;
	char drain[8];
	CHECK(read(pp[0], drain, sizeof(drain)) == 1, "one byte from the handler");
	/* the same with a signalfd, SIGCHLD blocked */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	SYS(sigprocmask(SIG_BLOCK, &chld, &old));
	masked = true;
	SYS(sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC));
	e = (struct epoll_event){ .events = EPOLLIN, .data.u64 = 3 };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &e));
	SYS(pid = fork());
	if (pid == 0)
		_exit(6);
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n >= 1 && ev[0].data.u64 == 3, "a child's exit by the signalfd: %d events (data %llu)", n,
	      n > 0 ? (unsigned long long)ev[0].data.u64 : 0ull);
	struct signalfd_siginfo si;
	CHECK(read(sfd, &si, sizeof(si)) == sizeof(si) && si.ssi_signo == SIGCHLD && (pid_t)si.ssi_pid == pid,
	      "the signalfd's record names the child");
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 6, "the child's status");
	why[0] = 0;
out:
	if (handler)
		sigaction(SIGCHLD, &osa, NULL);
	if (masked)
		sigprocmask(SIG_SETMASK, &old, NULL);
	selfpipe_w = -1;
	xclose(&c), xclose(&s), xclose(&ep), xclose(&sfd), xclose(&pp[0]), xclose(&pp[1]);
	return why[0] ? -1 : 0;
}

/* The first send after the peer's close is taken (the peer's reset answers it), the ones after fail */
static int t_send_after_peer_close(void)
{
	int c = -1, s = -1;
	SYS(tcp_pair(AF_INET, &c, &s));
	xclose(&s);
	CHECK(wait_eof(c, WAIT_MS), "no EOF after the peer's close");
	ssize_t r = send(c, "xyz", 3, MSG_NOSIGNAL);
	CHECK(r == 3, "the first send after the peer closed: %s, want 3 bytes taken", r < 0 ? strerror(errno) : "short");
	int e = send_until_error(c, MSG_NOSIGNAL);
	CHECK(e == EPIPE, "the sends after it: %s, want EPIPE", e ? strerror(e) : "never failed");
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_sigpipe(void)
{
	int c = -1, s = -1;
	SYS(tcp_pair(AF_INET, &c, &s));
	xclose(&s);
	CHECK(wait_eof(c, WAIT_MS), "no EOF after the peer's close");
	int before = sigpipes;
	int e = send_until_error(c, 0);
	CHECK(e == EPIPE, "send to a closed peer: %s, want EPIPE", e ? strerror(e) : "never failed");
	CHECK(sigpipes == before + 1, "%d SIGPIPE(s) for one EPIPE, want 1", sigpipes - before);
	/* write() raises it too */
	before = sigpipes;
	ssize_t r = write(c, "y", 1);
	CHECK(r < 0 && errno == EPIPE, "write to a closed peer: want EPIPE");
	CHECK(sigpipes == before + 1, "write: %d SIGPIPE(s), want 1", sigpipes - before);
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_readv_writev(void)
{
	int c = -1, s = -1;
	char a[5], b[7], x[64];
	SYS(tcp_pair(AF_INET, &c, &s));
	struct iovec wv[3] = { { "abc", 3 }, { "defgh", 5 }, { "ijkl", 4 } };
	CHECK(writev(c, wv, 3) == 12, "writev: %s", strerror(errno));
	CHECK(recv_exact(s, x, 12) == 12 && !memcmp(x, "abcdefghijkl", 12), "peer got the wrong bytes");
	SYS(send_all(s, "0123456789AB", 12));
	wait_avail(c, 12); /* all 12 there: one readv takes them */
	struct iovec rv[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	ssize_t r = readv(c, rv, 2);
	CHECK(r == 12, "readv returned %zd, want 12", r);
	CHECK(!memcmp(a, "01234", 5) && !memcmp(b, "56789AB", 7), "readv scattered wrongly");
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_sendmsg_recvmsg(void)
{
	int c = -1, s = -1;
	char a[4], b[16];
	SYS(tcp_pair(AF_INET, &c, &s));
	struct iovec wv[2] = { { "head", 4 }, { "-and-tail", 9 } };
	struct msghdr m = { .msg_iov = wv, .msg_iovlen = 2 };
	CHECK(sendmsg(c, &m, MSG_NOSIGNAL) == 13, "sendmsg: %s", strerror(errno));
	CHECK(wait_avail(s, 13), "the 13 bytes never all arrived");
	struct iovec rv[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	struct sockaddr_storage from;
	struct msghdr r = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = rv, .msg_iovlen = 2 };
	ssize_t n = recvmsg(s, &r, 0);
	CHECK(n == 13, "recvmsg returned %zd, want 13", n);
	CHECK(!memcmp(a, "head", 4) && !memcmp(b, "-and-tail", 9), "recvmsg scattered wrongly");
	CHECK(r.msg_flags == 0, "msg_flags %#x", r.msg_flags);
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

struct rx_arg {
	int fd;
	size_t want, got;
	uint64_t sum;
};

static void *receiver(void *p)
{
	struct rx_arg *a = p;
	uint8_t *buf = malloc(65536);
	a->sum = FNV0;
	a->got = 0;
	while (buf && a->got < a->want) {
		ssize_t r = recv(a->fd, buf, sizeof(buf), 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		a->sum = fnv(a->sum, buf, (size_t)r);
		a->got += (size_t)r;
	}
	free(buf);
	return NULL;
}

static int t_sendfile(void)
{
	int c = -1, s = -1, f = -1, started = 0;
	pthread_t th;
	char path[] = "/tmp/sock-calls-XXXXXX";
	static uint8_t data[300000];
	fill(data, sizeof(data), 11);
	SYS(f = mkstemp(path));
	unlink(path);
	CHECK(write(f, data, sizeof(data)) == (ssize_t)sizeof(data), "write the file");
	SYS(tcp_pair(AF_INET, &c, &s));
	struct rx_arg ra = { .fd = s, .want = sizeof(data) - 1000 };
	CHECK(pthread_create(&th, NULL, receiver, &ra) == 0, "pthread_create");
	started = 1;
	off_t off = 1000;
	size_t left = sizeof(data) - 1000;
	while (left) {
		ssize_t n = sendfile(c, f, &off, left);
		CHECK(n > 0, "sendfile: %zd %s", n, strerror(errno));
		left -= (size_t)n;
	}
	CHECK(off == (off_t)sizeof(data), "offset after sendfile: %lld", (long long)off);
	pthread_join(th, NULL);
	started = 0;
	CHECK(ra.got == sizeof(data) - 1000, "peer got %zu bytes", ra.got);
	CHECK(ra.sum == fnv(FNV0, data + 1000, sizeof(data) - 1000), "checksum differs");
	why[0] = 0;
out:
	if (started) {
		xclose(&c);
		pthread_join(th, NULL);
	}
	xclose(&c), xclose(&s), xclose(&f);
	return why[0] ? -1 : 0;
}

static int t_ipv6(void)
{
	int l = -1, c = -1, s = -1;
	char b[16];
	struct sockaddr_storage la, pa, ca;
	socklen_t len;
	SYS(l = bound(AF_INET6, SOCK_STREAM, &la));
	SYS(c = socket(AF_INET6, SOCK_STREAM, 0));
	SYS(connect(c, (struct sockaddr *)&la, sizeof(struct sockaddr_in6)));
	SYS(s = accept(l, NULL, NULL));
	len = sizeof(pa);
	SYS(getpeername(c, (struct sockaddr *)&pa, &len));
	CHECK(len == sizeof(struct sockaddr_in6) && same_addr(&pa, &la), "getpeername is not [::1]:port");
	len = sizeof(ca);
	SYS(getpeername(s, (struct sockaddr *)&ca, &len));
	CHECK(ca.ss_family == AF_INET6 &&
	      !memcmp(&((struct sockaddr_in6 *)&ca)->sin6_addr, &in6addr_loopback, sizeof(struct in6_addr)),
	      "accepted peer is not ::1");
	SYS(send_all(c, "six", 3));
	CHECK(recv_exact(s, b, 3) == 3 && !memcmp(b, "six", 3), "to the server");
	SYS(send_all(s, "v6!", 3));
	CHECK(recv_exact(c, b, 3) == 3 && !memcmp(b, "v6!", 3), "to the client");
	why[0] = 0;
out:
	xclose(&l), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static ssize_t recvfrom_wait(int fd, void *buf, size_t n, int flags, struct sockaddr_storage *from)
{
	if (!(wait_fd(fd, POLLIN, WAIT_MS) & POLLIN))
		return -2;
	socklen_t len = sizeof(*from);
	return recvfrom(fd, buf, n, flags, (struct sockaddr *)from, &len);
}

static int t_udp(void)
{
	int u1 = -1, u2 = -1;
	char b[256];
	struct sockaddr_storage a1, a2, from;
	SYS(u1 = bound(AF_INET, SOCK_DGRAM, &a1));
	SYS(u2 = bound(AF_INET, SOCK_DGRAM, &a2));
	ssize_t r = recv(u2, b, sizeof(b), MSG_DONTWAIT);
	CHECK(r < 0 && errno == EAGAIN, "recv on an empty datagram socket: want EAGAIN");
	CHECK(sendto(u1, "d1", 2, 0, (struct sockaddr *)&a2, sizeof(struct sockaddr_in)) == 2, "sendto: %s",
	      strerror(errno));
	CHECK(sendto(u1, "dgram-two", 9, 0, (struct sockaddr *)&a2, sizeof(struct sockaddr_in)) == 9, "sendto 2");
	CHECK(sendto(u1, "", 0, 0, (struct sockaddr *)&a2, sizeof(struct sockaddr_in)) == 0, "sendto empty");
	r = recvfrom_wait(u2, b, sizeof(b), 0, &from);
	CHECK(r == 2 && !memcmp(b, "d1", 2), "first datagram: %zd", r);
	CHECK(same_addr(&from, &a1), "recvfrom's source is not the sender's address");
	r = recvfrom_wait(u2, b, sizeof(b), 0, &from);
	CHECK(r == 9 && !memcmp(b, "dgram-two", 9), "second datagram (boundaries kept): %zd", r);
	r = recvfrom_wait(u2, b, sizeof(b), 0, &from);
	CHECK(r == 0, "empty datagram: %zd", r);
	/* connect: send/recv without addresses, getpeername */
	SYS(connect(u2, (struct sockaddr *)&a1, sizeof(struct sockaddr_in)));
	struct sockaddr_storage pa;
	socklen_t len = sizeof(pa);
	SYS(getpeername(u2, (struct sockaddr *)&pa, &len));
	CHECK(same_addr(&pa, &a1), "getpeername of the connected datagram socket");
	CHECK(send(u2, "conn", 4, 0) == 4, "send on a connected datagram socket: %s", strerror(errno));
	r = recvfrom_wait(u1, b, sizeof(b), 0, &from);
	CHECK(r == 4 && !memcmp(b, "conn", 4) && same_addr(&from, &a2), "datagram from the connected socket");
	CHECK(sendto(u1, "back", 4, 0, (struct sockaddr *)&a2, sizeof(struct sockaddr_in)) == 4, "sendto back");
	CHECK(wait_fd(u2, POLLIN, WAIT_MS) & POLLIN, "connected socket not readable");
	r = recv(u2, b, sizeof(b), 0);
	CHECK(r == 4 && !memcmp(b, "back", 4), "recv on the connected socket: %zd", r);
	/* dissolve the association: AF_UNSPEC */
	struct sockaddr unspec = { .sa_family = AF_UNSPEC };
	SYS(connect(u2, &unspec, sizeof(unspec)));
	r = send(u2, "x", 1, 0);
	CHECK(r < 0 && errno == EDESTADDRREQ, "send after connect(AF_UNSPEC): %s, want EDESTADDRREQ",
	      r < 0 ? strerror(errno) : "sent");
	why[0] = 0;
out:
	xclose(&u1), xclose(&u2);
	return why[0] ? -1 : 0;
}

static int t_udp_trunc(void)
{
	int u1 = -1, u2 = -1;
	char b[256], big[100];
	struct sockaddr_storage a1, a2, from;
	memset(big, 'T', sizeof(big));
	SYS(u1 = bound(AF_INET, SOCK_DGRAM, &a1));
	SYS(u2 = bound(AF_INET, SOCK_DGRAM, &a2));
	CHECK(sendto(u1, big, 100, 0, (struct sockaddr *)&a2, sizeof(struct sockaddr_in)) == 100, "sendto");
	ssize_t r = recvfrom_wait(u2, b, 10, MSG_PEEK, &from);
	CHECK(r == 10, "MSG_PEEK into 10 bytes: %zd", r);
	r = recvfrom_wait(u2, b, 10, MSG_TRUNC, &from);
	CHECK(r == 100, "recv MSG_TRUNC into 10 bytes: %zd, want the datagram's length 100", r);
	CHECK(sendto(u1, big, 100, 0, (struct sockaddr *)&a2, sizeof(struct sockaddr_in)) == 100, "sendto");
	CHECK(wait_fd(u2, POLLIN, WAIT_MS) & POLLIN, "not readable");
	struct iovec iv = { b, 10 };
	struct msghdr m = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &iv, .msg_iovlen = 1 };
	r = recvmsg(u2, &m, 0);
	CHECK(r == 10 && (m.msg_flags & MSG_TRUNC), "recvmsg into 10 bytes: %zd, msg_flags %#x (want MSG_TRUNC)", r,
	      m.msg_flags);
	CHECK(m.msg_namelen == sizeof(struct sockaddr_in) && same_addr(&from, &a1), "recvmsg's msg_name");
	r = recv(u2, b, sizeof(b), MSG_DONTWAIT);
	CHECK(r < 0 && errno == EAGAIN, "the truncated rest was not discarded (%zd)", r);
	why[0] = 0;
out:
	xclose(&u1), xclose(&u2);
	return why[0] ? -1 : 0;
}

static int getint(int fd, int level, int name, int *v)
{
	socklen_t len = sizeof(*v);
	*v = -12345;
	int r = getsockopt(fd, level, name, v, &len);
	if (r == 0 && len != sizeof(int)) {
		errno = EMSGSIZE;
		return -1;
	}
	return r;
}

static int t_sockopts(void)
{
	int c = -1, s = -1, u = -1, v, one = 1;
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(u = socket(AF_INET, SOCK_DGRAM, 0));
	SYS(setsockopt(c, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	SYS(getint(c, SOL_SOCKET, SO_REUSEADDR, &v));
	CHECK(v != 0, "SO_REUSEADDR reads back %d", v);
	SYS(getint(c, IPPROTO_TCP, TCP_NODELAY, &v));
	CHECK(v == 0, "TCP_NODELAY before setting: %d", v);
	SYS(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
	SYS(getint(c, IPPROTO_TCP, TCP_NODELAY, &v));
	CHECK(v != 0, "TCP_NODELAY reads back %d", v);
	SYS(getint(c, SOL_SOCKET, SO_RCVBUF, &v));
	CHECK(v > 0, "SO_RCVBUF %d", v);
	SYS(getint(c, SOL_SOCKET, SO_SNDBUF, &v));
	CHECK(v > 0, "SO_SNDBUF %d", v);
	SYS(getint(c, SOL_SOCKET, SO_TYPE, &v));
	CHECK(v == SOCK_STREAM, "SO_TYPE %d, want SOCK_STREAM", v);
	SYS(getint(u, SOL_SOCKET, SO_TYPE, &v));
	CHECK(v == SOCK_DGRAM, "SO_TYPE %d, want SOCK_DGRAM", v);
	SYS(getint(c, SOL_SOCKET, SO_ERROR, &v));
	CHECK(v == 0, "SO_ERROR %d", v);
	SYS(setsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)));
	SYS(getint(c, SOL_SOCKET, SO_KEEPALIVE, &v));
	CHECK(v != 0, "SO_KEEPALIVE reads back %d", v);
	/* options set, the socket still carries data */
	SYS(send_all(c, "opt", 3));
	char b[3];
	CHECK(recv_exact(s, b, 3) == 3, "data after setting options");
	why[0] = 0;
out:
	xclose(&c), xclose(&s), xclose(&u);
	return why[0] ? -1 : 0;
}

/* ------------------------------------------- control messages of datagram sockets (cmsgs) */
/* docs/sockets.md "Control messages". Each check states the cmsgs the kernel gives (levels, types,
 * lengths, order, msg_controllen, msg_flags) and their values, so the plain run proves the
 * expectation and the shim's run must meet it. */

#ifndef SO_TIMESTAMP_NEW
#define SO_TIMESTAMP_NEW 63
#define SO_TIMESTAMPNS_NEW 64
#endif

static const char *cm_name(int level, int type)
{
	static const struct {
		int level, type;
		const char *name;
	} names[] = {
		{ SOL_SOCKET, SCM_TIMESTAMP, "SCM_TIMESTAMP" },      { SOL_SOCKET, SCM_TIMESTAMPNS, "SCM_TIMESTAMPNS" },
		{ SOL_SOCKET, SO_TIMESTAMP_NEW, "SO_TIMESTAMP_NEW" }, { SOL_SOCKET, SO_TIMESTAMPNS_NEW, "SO_TIMESTAMPNS_NEW" },
		{ IPPROTO_IP, IP_PKTINFO, "IP_PKTINFO" },             { IPPROTO_IP, IP_TTL, "IP_TTL" },
		{ IPPROTO_IP, IP_TOS, "IP_TOS" },                     { IPPROTO_IPV6, IPV6_PKTINFO, "IPV6_PKTINFO" },
		{ IPPROTO_IPV6, IPV6_HOPLIMIT, "IPV6_HOPLIMIT" },     { IPPROTO_IPV6, IPV6_TCLASS, "IPV6_TCLASS" },
	};
	static char other[32];
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].level == level && names[i].type == type)
			return names[i].name;
	snprintf(other, sizeof(other), "%d/%d", level, type);
	return other;
}

/* the cmsgs a recvmsg left, walked as the kernel wrote them: "NAME:cmsg_len ... | controllen N
 * flags F" (F: TRUNC, CTRUNC or 0) */
static const char *cm_describe(const struct msghdr *m)
{
	static char d[512];
	size_t n = 0, off = 0, cl = m->msg_controllen;
	d[0] = 0;
	while (m->msg_control && off + sizeof(struct cmsghdr) <= cl && n < sizeof(d) - 64) {
		struct cmsghdr h;
		memcpy(&h, (const char *)m->msg_control + off, sizeof(h));
		n += (size_t)snprintf(d + n, sizeof(d) - n, "%s:%zu ", cm_name(h.cmsg_level, h.cmsg_type), (size_t)h.cmsg_len);
		if (h.cmsg_len < sizeof(h))
			break;
		off += CMSG_ALIGN(h.cmsg_len);
	}
	snprintf(d + n, sizeof(d) - n, "| controllen %zu flags %s%s%s", cl, m->msg_flags & MSG_TRUNC ? "TRUNC " : "",
		 m->msg_flags & MSG_CTRUNC ? "CTRUNC" : "", m->msg_flags & ~(MSG_TRUNC | MSG_CTRUNC) ? "other" :
		 (m->msg_flags ? "" : "0"));
	return d;
}

/* the data of the cmsg level/type in m, or NULL (and its length in *len) */
static const uint8_t *cm_find(const struct msghdr *m, int level, int type, size_t *len)
{
	size_t off = 0, cl = m->msg_controllen;
	while (m->msg_control && off + sizeof(struct cmsghdr) <= cl) {
		struct cmsghdr h;
		memcpy(&h, (const char *)m->msg_control + off, sizeof(h));
		if (h.cmsg_len < sizeof(h))
			return NULL;
		if (h.cmsg_level == level && h.cmsg_type == type) {
			*len = h.cmsg_len - CMSG_LEN(0);
			return (const uint8_t *)m->msg_control + off + CMSG_LEN(0);
		}
		off += CMSG_ALIGN(h.cmsg_len);
	}
	return NULL;
}

static int cm_int(const struct msghdr *m, int level, int type)
{
	size_t len;
	const uint8_t *d = cm_find(m, level, type, &len);
	int v = -1;
	if (d && len == sizeof(int))
		memcpy(&v, d, sizeof(v));
	return v;
}

static int64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* the timestamp cmsg's time (ns), -1 if none: SCM_TIMESTAMP (timeval) or SCM_TIMESTAMPNS (timespec) */
static int64_t cm_time(const struct msghdr *m)
{
	size_t len;
	const uint8_t *d = cm_find(m, SOL_SOCKET, SCM_TIMESTAMPNS, &len);
	if (d && len == sizeof(struct timespec)) {
		struct timespec ts;
		memcpy(&ts, d, sizeof(ts));
		return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	}
	d = cm_find(m, SOL_SOCKET, SCM_TIMESTAMP, &len);
	if (d && len == sizeof(struct timeval)) {
		struct timeval tv;
		memcpy(&tv, d, sizeof(tv));
		return (int64_t)tv.tv_sec * 1000000000 + tv.tv_usec * 1000;
	}
	return -1;
}

struct cmrx {
	struct msghdr m;
	struct iovec iv;
	struct sockaddr_storage from;
	char data[64];
	union {
		struct cmsghdr align;
		uint8_t b[256];
	} ctl;
};

/* recvmsg of the next datagram (waiting for it) with `ctllen` bytes of control room (-1: msg_control
 * NULL); the buffer beyond ctllen is 0xaa, which must stay so */
static ssize_t cm_recv(int fd, struct cmrx *r, int ctllen, int flags)
{
	memset(r, 0, sizeof(*r));
	memset(r->ctl.b, 0xaa, sizeof(r->ctl.b));
	r->iv = (struct iovec){ r->data, sizeof(r->data) };
	r->m = (struct msghdr){ .msg_name = &r->from, .msg_namelen = sizeof(r->from), .msg_iov = &r->iv,
				.msg_iovlen = 1, .msg_control = ctllen < 0 ? NULL : r->ctl.b,
				.msg_controllen = ctllen < 0 ? 0 : (size_t)ctllen };
	if (!(wait_fd(fd, POLLIN, WAIT_MS) & POLLIN)) {
		errno = ETIMEDOUT;
		return -1;
	}
	ssize_t n = recvmsg(fd, &r->m, flags);
	for (int i = ctllen < 0 ? 0 : ctllen; i < (int)sizeof(r->ctl.b); i++)
		if (r->ctl.b[i] != 0xaa) {
			errno = EOVERFLOW; /* written past msg_controllen */
			return -1;
		}
	return n;
}

static int set1(int fd, int level, int name, int v)
{
	return setsockopt(fd, level, name, &v, sizeof(v));
}

static const char *in4(const uint8_t *a)
{
	static char s[INET_ADDRSTRLEN];
	return inet_ntop(AF_INET, a, s, sizeof(s));
}

static const char *in6(const uint8_t *a)
{
	static char s[INET6_ADDRSTRLEN];
	return inet_ntop(AF_INET6, a, s, sizeof(s));
}

/* IP_PKTINFO is {ifindex 1 (lo), ipi_spec_dst and ipi_addr `dst`}: "" or what differs */
static const char *pktinfo4_wrong(const struct msghdr *m, const char *dst)
{
	static char w[128];
	size_t len;
	const uint8_t *d = cm_find(m, IPPROTO_IP, IP_PKTINFO, &len);
	struct in_pktinfo pi;
	if (!d || len != sizeof(pi))
		return "no IP_PKTINFO";
	memcpy(&pi, d, sizeof(pi));
	char spec[INET_ADDRSTRLEN];
	snprintf(spec, sizeof(spec), "%s", in4((const uint8_t *)&pi.ipi_spec_dst));
	if (pi.ipi_ifindex != 1 || strcmp(spec, dst) || strcmp(in4((const uint8_t *)&pi.ipi_addr), dst)) {
		snprintf(w, sizeof(w), "IP_PKTINFO ifindex %d spec_dst %s addr %s, want 1 %s %s", pi.ipi_ifindex, spec,
			 in4((const uint8_t *)&pi.ipi_addr), dst, dst);
		return w;
	}
	return "";
}

static const char *pktinfo6_wrong(const struct msghdr *m, const char *dst)
{
	static char w[160];
	size_t len;
	const uint8_t *d = cm_find(m, IPPROTO_IPV6, IPV6_PKTINFO, &len);
	struct in6_pktinfo pi;
	if (!d || len != sizeof(pi))
		return "no IPV6_PKTINFO";
	memcpy(&pi, d, sizeof(pi));
	if (pi.ipi6_ifindex != 1 || strcmp(in6((const uint8_t *)&pi.ipi6_addr), dst)) {
		snprintf(w, sizeof(w), "IPV6_PKTINFO ifindex %u addr %s, want 1 %s", pi.ipi6_ifindex,
			 in6((const uint8_t *)&pi.ipi6_addr), dst);
		return w;
	}
	return "";
}

static int read_sysctl(const char *path, int dflt)
{
	FILE *f = fopen(path, "r");
	int v = dflt;
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = dflt;
		fclose(f);
	}
	return v;
}

/* a datagram's time stamp lies between the send and the receive (a second of slack each way: a
 * clock step must not fail the check) */
#define TS_OK(t, before, after) ((t) >= (before) - 1000000000 && (t) <= (after) + 1000000000)

static int t_udp_cmsg_recv(void)
{
	int r = -1, s = -1, v;
	struct sockaddr_storage ra;
	struct cmrx x;
	const int tos = 0x10, ttl = read_sysctl("/proc/sys/net/ipv4/ip_default_ttl", 64);
	SYS(r = bound(AF_INET, SOCK_DGRAM, &ra));
	SYS(s = socket(AF_INET, SOCK_DGRAM, 0));
	SYS(set1(s, IPPROTO_IP, IP_TOS, tos));
	/* no option on: no cmsgs, msg_controllen 0 */
	CHECK(sendto(s, "0", 1, 0, (struct sockaddr *)&ra, sizeof(struct sockaddr_in)) == 1, "sendto: %s", strerror(errno));
	CHECK(cm_recv(r, &x, 128, 0) == 1, "recvmsg: %s", strerror(errno));
	CHECK(!strcmp(cm_describe(&x.m), "| controllen 0 flags 0"), "no options on: %s", cm_describe(&x.m));
	SYS(set1(r, IPPROTO_IP, IP_PKTINFO, 1));
	SYS(set1(r, IPPROTO_IP, IP_RECVTTL, 1));
	SYS(set1(r, IPPROTO_IP, IP_RECVTOS, 1));
	SYS(set1(r, SOL_SOCKET, SO_TIMESTAMPNS, 1));
	SYS(getint(r, SOL_SOCKET, SO_TIMESTAMPNS, &v));
	CHECK(v == 1, "SO_TIMESTAMPNS reads back %d", v);
	SYS(getint(r, IPPROTO_IP, IP_RECVTTL, &v));
	CHECK(v == 1, "IP_RECVTTL reads back %d", v);
	int64_t before = realtime_ns();
	CHECK(sendto(s, "a", 1, 0, (struct sockaddr *)&ra, sizeof(struct sockaddr_in)) == 1, "sendto: %s", strerror(errno));
	CHECK(cm_recv(r, &x, 256, 0) == 1, "recvmsg: %s", strerror(errno));
	int64_t after = realtime_ns(), t = cm_time(&x.m);
	CHECK(!strcmp(cm_describe(&x.m), "SCM_TIMESTAMPNS:32 IP_PKTINFO:28 IP_TTL:20 IP_TOS:17 | controllen 112 flags 0"),
	      "all four on: %s", cm_describe(&x.m));
	CHECK(TS_OK(t, before, after), "SCM_TIMESTAMPNS %lld is not between the send %lld and the receive %lld",
	      (long long)t, (long long)before, (long long)after);
	CHECK(!*pktinfo4_wrong(&x.m, "127.0.0.1"), "%s", pktinfo4_wrong(&x.m, "127.0.0.1"));
	CHECK(cm_int(&x.m, IPPROTO_IP, IP_TTL) == ttl, "IP_TTL %d, want the default %d", cm_int(&x.m, IPPROTO_IP, IP_TTL), ttl);
	size_t len;
	const uint8_t *d = cm_find(&x.m, IPPROTO_IP, IP_TOS, &len);
	CHECK(d && len == 1 && *d == tos, "IP_TOS %d, want the sender's %#x", d ? *d : -1, tos);
	/* SO_TIMESTAMP replaces SO_TIMESTAMPNS (one stamp at a time, microseconds); MSG_PEEK gives the cmsgs too */
	SYS(set1(r, SOL_SOCKET, SO_TIMESTAMP, 1));
	SYS(getint(r, SOL_SOCKET, SO_TIMESTAMPNS, &v));
	CHECK(v == 0, "SO_TIMESTAMPNS reads %d after SO_TIMESTAMP", v);
	before = realtime_ns();
	CHECK(sendto(s, "b", 1, 0, (struct sockaddr *)&ra, sizeof(struct sockaddr_in)) == 1, "sendto");
	CHECK(cm_recv(r, &x, 256, MSG_PEEK) == 1, "recvmsg MSG_PEEK: %s", strerror(errno));
	CHECK(!strcmp(cm_describe(&x.m), "SCM_TIMESTAMP:32 IP_PKTINFO:28 IP_TTL:20 IP_TOS:17 | controllen 112 flags 0"),
	      "MSG_PEEK with SO_TIMESTAMP: %s", cm_describe(&x.m));
	int64_t peeked = cm_time(&x.m);
	CHECK(cm_recv(r, &x, 256, 0) == 1, "recvmsg: %s", strerror(errno));
	after = realtime_ns();
	t = cm_time(&x.m);
	CHECK(!strcmp(cm_describe(&x.m), "SCM_TIMESTAMP:32 IP_PKTINFO:28 IP_TTL:20 IP_TOS:17 | controllen 112 flags 0"),
	      "SO_TIMESTAMP: %s", cm_describe(&x.m));
	CHECK(TS_OK(t, before, after) && t % 1000 == 0 && t == peeked,
	      "SCM_TIMESTAMP %lld (peeked %lld) is not a microsecond between %lld and %lld", (long long)t,
	      (long long)peeked, (long long)before, (long long)after);
	/* the 64-bit forms: their own cmsg types */
	SYS(set1(r, SOL_SOCKET, SO_TIMESTAMPNS_NEW, 1));
	CHECK(sendto(s, "n", 1, 0, (struct sockaddr *)&ra, sizeof(struct sockaddr_in)) == 1, "sendto");
	CHECK(cm_recv(r, &x, 256, 0) == 1, "recvmsg: %s", strerror(errno));
	CHECK(!strcmp(cm_describe(&x.m), "SO_TIMESTAMPNS_NEW:32 IP_PKTINFO:28 IP_TTL:20 IP_TOS:17 | controllen 112 flags 0"),
	      "SO_TIMESTAMPNS_NEW: %s", cm_describe(&x.m));
	SYS(set1(r, SOL_SOCKET, SO_TIMESTAMP, 1));
	/* an option turned off takes its cmsg with it, at once */
	SYS(set1(r, IPPROTO_IP, IP_RECVTTL, 0));
	CHECK(sendto(s, "c", 1, 0, (struct sockaddr *)&ra, sizeof(struct sockaddr_in)) == 1, "sendto");
	CHECK(cm_recv(r, &x, 256, 0) == 1, "recvmsg: %s", strerror(errno));
	CHECK(!strcmp(cm_describe(&x.m), "SCM_TIMESTAMP:32 IP_PKTINFO:28 IP_TOS:17 | controllen 88 flags 0"),
	      "IP_RECVTTL off: %s", cm_describe(&x.m));
	SYS(set1(r, IPPROTO_IP, IP_PKTINFO, 0));
	SYS(set1(r, IPPROTO_IP, IP_RECVTOS, 0));
	SYS(set1(r, SOL_SOCKET, SO_TIMESTAMP, 0));
	CHECK(sendto(s, "d", 1, 0, (struct sockaddr *)&ra, sizeof(struct sockaddr_in)) == 1, "sendto");
	CHECK(cm_recv(r, &x, 256, 0) == 1, "recvmsg: %s", strerror(errno));
	CHECK(!strcmp(cm_describe(&x.m), "| controllen 0 flags 0"), "all off again: %s", cm_describe(&x.m));
	why[0] = 0;
out:
	xclose(&r), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_udp_cmsg_recv6(void)
{
	int r = -1, s = -1, d = -1, s4 = -1;
	struct sockaddr_storage ra, da;
	struct cmrx x;
	const int tclass = 0x20, hops = 9;
	SYS(r = bound(AF_INET6, SOCK_DGRAM, &ra));
	SYS(s = socket(AF_INET6, SOCK_DGRAM, 0));
	SYS(set1(s, IPPROTO_IPV6, IPV6_TCLASS, tclass));
	SYS(set1(s, IPPROTO_IPV6, IPV6_UNICAST_HOPS, hops));
	SYS(set1(r, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1));
	SYS(set1(r, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1));
	SYS(set1(r, IPPROTO_IPV6, IPV6_RECVTCLASS, 1));
	SYS(set1(r, SOL_SOCKET, SO_TIMESTAMPNS, 1));
	int64_t before = realtime_ns();
	CHECK(sendto(s, "6", 1, 0, (struct sockaddr *)&ra, sizeof(struct sockaddr_in6)) == 1, "sendto: %s", strerror(errno));
	CHECK(cm_recv(r, &x, 256, 0) == 1, "recvmsg: %s", strerror(errno));
	int64_t after = realtime_ns(), t = cm_time(&x.m);
	CHECK(!strcmp(cm_describe(&x.m),
		      "SCM_TIMESTAMPNS:32 IPV6_PKTINFO:36 IPV6_HOPLIMIT:20 IPV6_TCLASS:20 | controllen 120 flags 0"),
	      "IPv6, all four on: %s", cm_describe(&x.m));
	CHECK(TS_OK(t, before, after), "SCM_TIMESTAMPNS %lld is not between %lld and %lld", (long long)t,
	      (long long)before, (long long)after);
	CHECK(!*pktinfo6_wrong(&x.m, "::1"), "%s", pktinfo6_wrong(&x.m, "::1"));
	CHECK(cm_int(&x.m, IPPROTO_IPV6, IPV6_HOPLIMIT) == hops && cm_int(&x.m, IPPROTO_IPV6, IPV6_TCLASS) == tclass,
	      "IPV6_HOPLIMIT %d IPV6_TCLASS %d, want the sender's %d %d", cm_int(&x.m, IPPROTO_IPV6, IPV6_HOPLIMIT),
	      cm_int(&x.m, IPPROTO_IPV6, IPV6_TCLASS), hops, tclass);
	/* an IPv6 socket on [::] gets an IPv4 datagram: IPV6_PKTINFO (IPv4-mapped), then the IPv4 cmsgs
	 * its IP_ options ask for; no IPV6_HOPLIMIT for an IPv4 datagram */
	SYS(d = socket(AF_INET6, SOCK_DGRAM, 0));
	memset(&da, 0, sizeof(da));
	((struct sockaddr_in6 *)&da)->sin6_family = AF_INET6;
	socklen_t dl = sizeof(struct sockaddr_in6);
	SYS(bind(d, (struct sockaddr *)&da, dl));
	SYS(getsockname(d, (struct sockaddr *)&da, &dl));
	SYS(set1(d, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1));
	SYS(set1(d, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1));
	SYS(set1(d, IPPROTO_IP, IP_PKTINFO, 1));
	SYS(set1(d, IPPROTO_IP, IP_RECVTTL, 1));
	SYS(s4 = socket(AF_INET, SOCK_DGRAM, 0));
	struct sockaddr_storage to4;
	loopback(AF_INET, &to4, port_of(&da));
	CHECK(sendto(s4, "4", 1, 0, (struct sockaddr *)&to4, sizeof(struct sockaddr_in)) == 1, "sendto: %s", strerror(errno));
	CHECK(cm_recv(d, &x, 256, 0) == 1, "recvmsg: %s", strerror(errno));
	CHECK(!strcmp(cm_describe(&x.m), "IPV6_PKTINFO:36 IP_PKTINFO:28 IP_TTL:20 | controllen 96 flags 0"),
	      "an IPv4 datagram to an IPv6 socket: %s", cm_describe(&x.m));
	CHECK(!*pktinfo6_wrong(&x.m, "::ffff:127.0.0.1"), "%s", pktinfo6_wrong(&x.m, "::ffff:127.0.0.1"));
	CHECK(!*pktinfo4_wrong(&x.m, "127.0.0.1"), "%s", pktinfo4_wrong(&x.m, "127.0.0.1"));
	why[0] = 0;
out:
	xclose(&r), xclose(&s), xclose(&d), xclose(&s4);
	return why[0] ? -1 : 0;
}

/* msg_controllen too small: what fits is written (a cmsg cut to the room left, its cmsg_len saying
 * so), MSG_CTRUNC says the rest is missing, nothing is written past msg_controllen */
static int t_udp_cmsg_ctrunc(void)
{
	int r = -1, s = -1;
	struct sockaddr_storage ra;
	struct cmrx x;
	static const struct {
		int room;
		const char *want;
	} cases[] = {
		{ -1, "| controllen 0 flags CTRUNC" },
		{ 0, "| controllen 0 flags CTRUNC" },
		{ 10, "| controllen 0 flags CTRUNC" },
		{ 40, "SCM_TIMESTAMPNS:32 | controllen 32 flags CTRUNC" },
		{ 48, "SCM_TIMESTAMPNS:32 IP_PKTINFO:16 | controllen 48 flags CTRUNC" },
		{ 60, "SCM_TIMESTAMPNS:32 IP_PKTINFO:28 | controllen 60 flags CTRUNC" },
		{ 70, "SCM_TIMESTAMPNS:32 IP_PKTINFO:28 | controllen 64 flags CTRUNC" },
		{ 100, "SCM_TIMESTAMPNS:32 IP_PKTINFO:28 IP_TTL:20 | controllen 88 flags CTRUNC" },
		{ 110, "SCM_TIMESTAMPNS:32 IP_PKTINFO:28 IP_TTL:20 IP_TOS:17 | controllen 110 flags 0" },
		{ 112, "SCM_TIMESTAMPNS:32 IP_PKTINFO:28 IP_TTL:20 IP_TOS:17 | controllen 112 flags 0" },
		{ 200, "SCM_TIMESTAMPNS:32 IP_PKTINFO:28 IP_TTL:20 IP_TOS:17 | controllen 112 flags 0" },
	};
	SYS(r = bound(AF_INET, SOCK_DGRAM, &ra));
	SYS(s = socket(AF_INET, SOCK_DGRAM, 0));
	SYS(set1(r, IPPROTO_IP, IP_PKTINFO, 1));
	SYS(set1(r, IPPROTO_IP, IP_RECVTTL, 1));
	SYS(set1(r, IPPROTO_IP, IP_RECVTOS, 1));
	SYS(set1(r, SOL_SOCKET, SO_TIMESTAMPNS, 1));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		CHECK(sendto(s, "t", 1, 0, (struct sockaddr *)&ra, sizeof(struct sockaddr_in)) == 1, "sendto");
		ssize_t n = cm_recv(r, &x, cases[i].room, 0);
		CHECK(n == 1, "recvmsg with %d bytes of control room: %zd %s", cases[i].room, n, strerror(errno));
		CHECK(!strcmp(cm_describe(&x.m), cases[i].want), "%d bytes of control room: %s, want %s", cases[i].room,
		      cm_describe(&x.m), cases[i].want);
	}
	/* both truncations at once */
	char big[40];
	memset(big, 'x', sizeof(big));
	CHECK(sendto(s, big, sizeof(big), 0, (struct sockaddr *)&ra, sizeof(struct sockaddr_in)) == (ssize_t)sizeof(big),
	      "sendto");
	CHECK(wait_fd(r, POLLIN, WAIT_MS) & POLLIN, "not readable");
	uint8_t cb[40];
	struct iovec iv = { big, 10 };
	struct msghdr m = { .msg_iov = &iv, .msg_iovlen = 1, .msg_control = cb, .msg_controllen = sizeof(cb) };
	CHECK(recvmsg(r, &m, 0) == 10, "recvmsg into 10 bytes: %s", strerror(errno));
	CHECK(!strcmp(cm_describe(&m), "SCM_TIMESTAMPNS:32 | controllen 32 flags TRUNC CTRUNC"),
	      "data and control cut: %s", cm_describe(&m));
	why[0] = 0;
out:
	xclose(&r), xclose(&s);
	return why[0] ? -1 : 0;
}

/* a sendmsg with the cmsgs given: the result, errno in *err */
static ssize_t cm_send(int fd, const struct sockaddr_storage *to, socklen_t tolen, const void *ctl, size_t ctllen,
		       const char *data, int *err)
{
	struct iovec iv = { (void *)data, strlen(data) };
	struct msghdr m = { .msg_name = (void *)to, .msg_namelen = to ? tolen : 0, .msg_iov = &iv, .msg_iovlen = 1,
			    .msg_control = (void *)ctl, .msg_controllen = ctllen };
	ssize_t n = sendmsg(fd, &m, 0);
	*err = n < 0 ? errno : 0;
	return n;
}

/* cmsgs into buf: (level, type, length of data, data)... ; the bytes used */
static size_t cm_build(uint8_t *buf, int level, int type, const void *data, size_t len)
{
	struct cmsghdr h = { .cmsg_len = CMSG_LEN(len), .cmsg_level = level, .cmsg_type = type };
	memset(buf, 0, CMSG_SPACE(len));
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + CMSG_LEN(0), data, len);
	return CMSG_SPACE(len);
}

static int t_udp_cmsg_send(void)
{
	int r = -1, s = -1, r6 = -1, s6 = -1, err;
	struct sockaddr_storage ra, sa, ra6, mapped;
	struct cmrx x;
	union {
		struct cmsghdr align;
		uint8_t b[256];
	} cb;
	size_t n;
	int v, ttl = read_sysctl("/proc/sys/net/ipv4/ip_default_ttl", 64);
	SYS(r = bound(AF_INET, SOCK_DGRAM, &ra));
	SYS(s = bound(AF_INET, SOCK_DGRAM, &sa));
	SYS(set1(r, IPPROTO_IP, IP_PKTINFO, 1));
	SYS(set1(r, IPPROTO_IP, IP_RECVTTL, 1));
	SYS(set1(r, IPPROTO_IP, IP_RECVTOS, 1));
	/* per datagram: IP_TTL 7, IP_TOS 0x28 (one byte), IP_PKTINFO with source 127.0.0.5 */
	v = 7;
	n = cm_build(cb.b, IPPROTO_IP, IP_TTL, &v, sizeof(v));
	uint8_t tos = 0x28;
	n += cm_build(cb.b + n, IPPROTO_IP, IP_TOS, &tos, 1);
	struct in_pktinfo pi = { 0 };
	inet_pton(AF_INET, "127.0.0.5", &pi.ipi_spec_dst);
	n += cm_build(cb.b + n, IPPROTO_IP, IP_PKTINFO, &pi, sizeof(pi));
	CHECK(cm_send(s, &ra, sizeof(struct sockaddr_in), cb.b, n, "p1", &err) == 2, "sendmsg: %s", strerror(err));
	CHECK(cm_recv(r, &x, 256, 0) == 2, "recvmsg: %s", strerror(errno));
	CHECK(!strcmp(cm_describe(&x.m), "IP_PKTINFO:28 IP_TTL:20 IP_TOS:17 | controllen 80 flags 0"), "%s",
	      cm_describe(&x.m));
	CHECK(cm_int(&x.m, IPPROTO_IP, IP_TTL) == 7, "IP_TTL %d, want the sendmsg's 7", cm_int(&x.m, IPPROTO_IP, IP_TTL));
	size_t len;
	const uint8_t *d = cm_find(&x.m, IPPROTO_IP, IP_TOS, &len);
	CHECK(d && *d == 0x28, "IP_TOS %d, want the sendmsg's 0x28", d ? *d : -1);
	CHECK(!strcmp(in4((const uint8_t *)&((struct sockaddr_in *)&x.from)->sin_addr), "127.0.0.5") &&
	      port_of(&x.from) == port_of(&sa), "the source is %s:%u, want IP_PKTINFO's 127.0.0.5 and the sender's port",
	      in4((const uint8_t *)&((struct sockaddr_in *)&x.from)->sin_addr), port_of(&x.from));
	CHECK(!*pktinfo4_wrong(&x.m, "127.0.0.1"), "%s", pktinfo4_wrong(&x.m, "127.0.0.1"));
	/* the next datagram without cmsgs has the socket's own again */
	CHECK(sendto(s, "p2", 2, 0, (struct sockaddr *)&ra, sizeof(struct sockaddr_in)) == 2, "sendto");
	CHECK(cm_recv(r, &x, 256, 0) == 2, "recvmsg: %s", strerror(errno));
	d = cm_find(&x.m, IPPROTO_IP, IP_TOS, &len);
	CHECK(cm_int(&x.m, IPPROTO_IP, IP_TTL) == ttl && d && *d == 0 && same_addr(&x.from, &sa),
	      "after a sendmsg with cmsgs a plain send has TTL %d TOS %d (want %d 0) and the bound source",
	      cm_int(&x.m, IPPROTO_IP, IP_TTL), d ? *d : -1, ttl);
	/* IP_TOS as an int; a connected socket's sendmsg without an address */
	SYS(connect(s, (struct sockaddr *)&ra, sizeof(struct sockaddr_in)));
	v = 0xb8;
	n = cm_build(cb.b, IPPROTO_IP, IP_TOS, &v, sizeof(v));
	v = 3;
	n += cm_build(cb.b + n, IPPROTO_IP, IP_TTL, &v, sizeof(v));
	CHECK(cm_send(s, NULL, 0, cb.b, n, "p3", &err) == 2, "connected sendmsg: %s", strerror(err));
	CHECK(cm_recv(r, &x, 256, 0) == 2, "recvmsg: %s", strerror(errno));
	d = cm_find(&x.m, IPPROTO_IP, IP_TOS, &len);
	CHECK(cm_int(&x.m, IPPROTO_IP, IP_TTL) == 3 && d && *d == 0xb8, "connected: TTL %d TOS %#x, want 3 0xb8",
	      cm_int(&x.m, IPPROTO_IP, IP_TTL), d ? *d : -1);
	/* what the kernel refuses: EINVAL, and nothing is sent */
	static const struct {
		int type, val;
		size_t len;
		const char *what;
	} bad[] = {
		{ IP_TTL, 0, sizeof(int), "IP_TTL 0" },
		{ IP_TTL, 256, sizeof(int), "IP_TTL 256" },
		{ IP_TTL, 5, 1, "IP_TTL of one byte" },
		{ IP_TOS, 256, sizeof(int), "IP_TOS 256" },
		{ IP_TOS, 1, 2, "IP_TOS of two bytes" },
		{ IP_PKTINFO, 0, 8, "IP_PKTINFO of 8 bytes" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint8_t val[16] = { 0 };
		memcpy(val, &bad[i].val, sizeof(int));
		n = cm_build(cb.b, IPPROTO_IP, bad[i].type, val, bad[i].len);
		ssize_t w = cm_send(s, NULL, 0, cb.b, n, "no", &err);
		CHECK(w < 0 && err == EINVAL, "sendmsg with %s: %zd %s, want EINVAL", bad[i].what, w, strerror(err));
	}
	v = 5;
	n = cm_build(cb.b, IPPROTO_IP, IP_TTL, &v, sizeof(v));
	struct cmsghdr h;
	memcpy(&h, cb.b, sizeof(h));
	h.cmsg_len = n + 8; /* longer than msg_controllen */
	memcpy(cb.b, &h, sizeof(h));
	ssize_t w = cm_send(s, NULL, 0, cb.b, n, "no", &err);
	CHECK(w < 0 && err == EINVAL, "sendmsg with a cmsg_len past msg_controllen: %zd %s, want EINVAL", w, strerror(err));
	CHECK(send(s, "p4", 2, 0) == 2, "send");
	CHECK(cm_recv(r, &x, 256, 0) == 2 && !memcmp(x.data, "p4", 2), "the datagram after the refused ones: %s",
	      strerror(errno));
	/* IPv6: IPV6_HOPLIMIT, IPV6_TCLASS, IPV6_PKTINFO per datagram; -1 is the socket's own */
	SYS(r6 = bound(AF_INET6, SOCK_DGRAM, &ra6));
	SYS(s6 = socket(AF_INET6, SOCK_DGRAM, 0));
	SYS(set1(s6, IPPROTO_IPV6, IPV6_UNICAST_HOPS, 9));
	SYS(set1(r6, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1));
	SYS(set1(r6, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1));
	SYS(set1(r6, IPPROTO_IPV6, IPV6_RECVTCLASS, 1));
	v = 7;
	n = cm_build(cb.b, IPPROTO_IPV6, IPV6_HOPLIMIT, &v, sizeof(v));
	v = 0x28;
	n += cm_build(cb.b + n, IPPROTO_IPV6, IPV6_TCLASS, &v, sizeof(v));
	struct in6_pktinfo pi6 = { .ipi6_addr = in6addr_loopback };
	n += cm_build(cb.b + n, IPPROTO_IPV6, IPV6_PKTINFO, &pi6, sizeof(pi6));
	CHECK(cm_send(s6, &ra6, sizeof(struct sockaddr_in6), cb.b, n, "q1", &err) == 2, "sendmsg IPv6: %s", strerror(err));
	CHECK(cm_recv(r6, &x, 256, 0) == 2, "recvmsg: %s", strerror(errno));
	CHECK(!strcmp(cm_describe(&x.m), "IPV6_PKTINFO:36 IPV6_HOPLIMIT:20 IPV6_TCLASS:20 | controllen 88 flags 0"), "%s",
	      cm_describe(&x.m));
	CHECK(cm_int(&x.m, IPPROTO_IPV6, IPV6_HOPLIMIT) == 7 && cm_int(&x.m, IPPROTO_IPV6, IPV6_TCLASS) == 0x28,
	      "IPV6_HOPLIMIT %d IPV6_TCLASS %d, want the sendmsg's 7 0x28", cm_int(&x.m, IPPROTO_IPV6, IPV6_HOPLIMIT),
	      cm_int(&x.m, IPPROTO_IPV6, IPV6_TCLASS));
	v = -1;
	n = cm_build(cb.b, IPPROTO_IPV6, IPV6_HOPLIMIT, &v, sizeof(v));
	n += cm_build(cb.b + n, IPPROTO_IPV6, IPV6_TCLASS, &v, sizeof(v));
	CHECK(cm_send(s6, &ra6, sizeof(struct sockaddr_in6), cb.b, n, "q2", &err) == 2, "sendmsg IPv6 -1: %s", strerror(err));
	CHECK(cm_recv(r6, &x, 256, 0) == 2, "recvmsg: %s", strerror(errno));
	/* -1: the socket's hop limit; a traffic class of -1 goes out as 0xff on Linux 6.x (ipcm6_init_sk),
	 * as the socket's 0 on kernels that resolve it */
	v = cm_int(&x.m, IPPROTO_IPV6, IPV6_TCLASS);
	CHECK(cm_int(&x.m, IPPROTO_IPV6, IPV6_HOPLIMIT) == 9 && (v == 0xff || v == 0),
	      "-1: IPV6_HOPLIMIT %d IPV6_TCLASS %d, want the socket's 9, and 255 or 0",
	      cm_int(&x.m, IPPROTO_IPV6, IPV6_HOPLIMIT), v);
	v = 256;
	n = cm_build(cb.b, IPPROTO_IPV6, IPV6_HOPLIMIT, &v, sizeof(v));
	w = cm_send(s6, &ra6, sizeof(struct sockaddr_in6), cb.b, n, "no", &err);
	CHECK(w < 0 && err == EINVAL, "IPV6_HOPLIMIT 256: %zd %s, want EINVAL", w, strerror(err));
	v = -2;
	n = cm_build(cb.b, IPPROTO_IPV6, IPV6_TCLASS, &v, sizeof(v));
	w = cm_send(s6, &ra6, sizeof(struct sockaddr_in6), cb.b, n, "no", &err);
	CHECK(w < 0 && err == EINVAL, "IPV6_TCLASS -2: %zd %s, want EINVAL", w, strerror(err));
	/* an IPv6 socket to an IPv4-mapped address: the IPv4 cmsgs count, IPV6_HOPLIMIT does not, an
	 * IPV6_PKTINFO must be IPv4-mapped */
	memset(&mapped, 0, sizeof(mapped));
	struct sockaddr_in6 *m6 = (struct sockaddr_in6 *)&mapped;
	m6->sin6_family = AF_INET6;
	m6->sin6_port = htons(port_of(&ra));
	inet_pton(AF_INET6, "::ffff:127.0.0.1", &m6->sin6_addr);
	v = 5;
	n = cm_build(cb.b, IPPROTO_IP, IP_TTL, &v, sizeof(v));
	v = 11;
	n += cm_build(cb.b + n, IPPROTO_IPV6, IPV6_HOPLIMIT, &v, sizeof(v));
	CHECK(cm_send(s6, &mapped, sizeof(*m6), cb.b, n, "q3", &err) == 2, "sendmsg to IPv4-mapped: %s", strerror(err));
	CHECK(cm_recv(r, &x, 256, 0) == 2 && !memcmp(x.data, "q3", 2), "recvmsg: %s", strerror(errno));
	CHECK(cm_int(&x.m, IPPROTO_IP, IP_TTL) == 5, "IPv6 socket to IPv4 with IP_TTL 5: TTL %d",
	      cm_int(&x.m, IPPROTO_IP, IP_TTL));
	n = cm_build(cb.b, IPPROTO_IPV6, IPV6_PKTINFO, &pi6, sizeof(pi6));
	w = cm_send(s6, &mapped, sizeof(*m6), cb.b, n, "no", &err);
	CHECK(w < 0 && err == EINVAL, "IPV6_PKTINFO ::1 to an IPv4 address: %zd %s, want EINVAL", w, strerror(err));
	why[0] = 0;
out:
	xclose(&r), xclose(&s), xclose(&r6), xclose(&s6);
	return why[0] ? -1 : 0;
}

/* the options behind them: the values getsockopt reads back, and what setsockopt refuses */
static int t_udp_cmsg_opts(void)
{
	int u = -1, u6 = -1, v;
	char one = 1;
	int ttl = read_sysctl("/proc/sys/net/ipv4/ip_default_ttl", 64);
	int hops = read_sysctl("/proc/sys/net/ipv6/conf/all/hop_limit", 64);
	SYS(u = socket(AF_INET, SOCK_DGRAM, 0));
	SYS(u6 = socket(AF_INET6, SOCK_DGRAM, 0));
	SYS(getint(u, IPPROTO_IP, IP_TTL, &v));
	CHECK(v == ttl, "IP_TTL %d, want the default %d", v, ttl);
	SYS(set1(u, IPPROTO_IP, IP_TTL, 33));
	SYS(getint(u, IPPROTO_IP, IP_TTL, &v));
	CHECK(v == 33, "IP_TTL reads %d after 33", v);
	SYS(set1(u, IPPROTO_IP, IP_TTL, -1));
	SYS(getint(u, IPPROTO_IP, IP_TTL, &v));
	CHECK(v == ttl, "IP_TTL reads %d after -1, want the default %d", v, ttl);
	CHECK(set1(u, IPPROTO_IP, IP_TTL, 0) < 0 && errno == EINVAL, "IP_TTL 0: want EINVAL");
	CHECK(set1(u, IPPROTO_IP, IP_TTL, 256) < 0 && errno == EINVAL, "IP_TTL 256: want EINVAL");
	SYS(set1(u, IPPROTO_IP, IP_TOS, 0x1ff));
	SYS(getint(u, IPPROTO_IP, IP_TOS, &v));
	CHECK(v == 0xff, "IP_TOS reads %#x after 0x1ff, want 0xff", v);
	SYS(set1(u, IPPROTO_IP, IP_PKTINFO, 2));
	SYS(getint(u, IPPROTO_IP, IP_PKTINFO, &v));
	CHECK(v == 1, "IP_PKTINFO reads %d after 2", v);
	SYS(setsockopt(u, IPPROTO_IP, IP_RECVTTL, &one, 1)); /* IPv4 options take one byte too */
	SYS(getint(u, IPPROTO_IP, IP_RECVTTL, &v));
	CHECK(v == 1, "IP_RECVTTL reads %d after a one-byte 1", v);
	CHECK(set1(u, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1) < 0 && errno == ENOPROTOOPT,
	      "IPV6_RECVPKTINFO on an IPv4 socket: %s, want ENOPROTOOPT", strerror(errno));
	CHECK(getint(u, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &v) < 0 && errno == EOPNOTSUPP,
	      "getsockopt IPV6_UNICAST_HOPS on an IPv4 socket: %s, want EOPNOTSUPP", strerror(errno));
	SYS(getint(u6, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &v));
	CHECK(v == hops, "IPV6_UNICAST_HOPS %d, want the default %d", v, hops);
	CHECK(set1(u6, IPPROTO_IPV6, IPV6_UNICAST_HOPS, -2) < 0 && errno == EINVAL, "IPV6_UNICAST_HOPS -2: want EINVAL");
	CHECK(set1(u6, IPPROTO_IPV6, IPV6_UNICAST_HOPS, 256) < 0 && errno == EINVAL, "IPV6_UNICAST_HOPS 256: want EINVAL");
	SYS(set1(u6, IPPROTO_IPV6, IPV6_TCLASS, 0x40));
	SYS(set1(u6, IPPROTO_IPV6, IPV6_TCLASS, -1));
	SYS(getint(u6, IPPROTO_IPV6, IPV6_TCLASS, &v));
	CHECK(v == 0, "IPV6_TCLASS reads %d after -1, want 0", v);
	CHECK(set1(u6, IPPROTO_IPV6, IPV6_TCLASS, 256) < 0 && errno == EINVAL, "IPV6_TCLASS 256: want EINVAL");
	CHECK(setsockopt(u6, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, 1) < 0 && errno == EINVAL,
	      "IPV6_RECVPKTINFO of one byte: want EINVAL");
	SYS(set1(u6, IPPROTO_IPV6, IPV6_RECVTCLASS, 1));
	SYS(getint(u6, IPPROTO_IPV6, IPV6_RECVTCLASS, &v));
	CHECK(v == 1, "IPV6_RECVTCLASS reads %d", v);
	SYS(set1(u6, IPPROTO_IP, IP_RECVTOS, 1)); /* the IPv4 options of an IPv6 socket (its IPv4 datagrams) */
	SYS(getint(u6, IPPROTO_IP, IP_RECVTOS, &v));
	CHECK(v == 1, "IP_RECVTOS of an IPv6 socket reads %d", v);
	/* one time stamp at a time: the last of SO_TIMESTAMP / SO_TIMESTAMPNS asked */
	CHECK(setsockopt(u, SOL_SOCKET, SO_TIMESTAMP, &one, 1) < 0 && errno == EINVAL, "SO_TIMESTAMP of one byte: want EINVAL");
	SYS(set1(u, SOL_SOCKET, SO_TIMESTAMPNS, 1));
	int ts, tsns;
	SYS(getint(u, SOL_SOCKET, SO_TIMESTAMP, &ts));
	SYS(getint(u, SOL_SOCKET, SO_TIMESTAMPNS, &tsns));
	CHECK(ts == 0 && tsns == 1, "after SO_TIMESTAMPNS: SO_TIMESTAMP %d SO_TIMESTAMPNS %d, want 0 1", ts, tsns);
	SYS(set1(u, SOL_SOCKET, SO_TIMESTAMP, 1));
	SYS(getint(u, SOL_SOCKET, SO_TIMESTAMP, &ts));
	SYS(getint(u, SOL_SOCKET, SO_TIMESTAMPNS, &tsns));
	CHECK(ts == 1 && tsns == 0, "after SO_TIMESTAMP: SO_TIMESTAMP %d SO_TIMESTAMPNS %d, want 1 0", ts, tsns);
	SYS(set1(u, SOL_SOCKET, SO_TIMESTAMPNS, 0));
	SYS(getint(u, SOL_SOCKET, SO_TIMESTAMP, &ts));
	CHECK(ts == 0, "SO_TIMESTAMPNS 0 leaves SO_TIMESTAMP %d, want 0", ts);
	/* with the 64-bit forms: what each of the four reads after each is set */
	static const int tsopt[4] = { SO_TIMESTAMP, SO_TIMESTAMPNS, SO_TIMESTAMP_NEW, SO_TIMESTAMPNS_NEW };
	static const char *const tsread[4] = { "1000", "0100", "0010", "0011" };
	for (int i = 0; i < 4; i++) {
		char got[5] = { 0 };
		SYS(set1(u, SOL_SOCKET, tsopt[i], 1));
		for (int k = 0; k < 4; k++) {
			SYS(getint(u, SOL_SOCKET, tsopt[k], &v));
			got[k] = (char)('0' + v);
		}
		CHECK(!strcmp(got, tsread[i]), "after time stamp option %d: SO_TIMESTAMP, NS, _NEW, NS_NEW read %s, want %s",
		      tsopt[i], got, tsread[i]);
	}
	why[0] = 0;
out:
	xclose(&u), xclose(&u6);
	return why[0] ? -1 : 0;
}

/* fill the peer until send says EAGAIN and the socket is not writable; the peer's reading makes
 * it writable again, and every byte arrives */
static int t_send_full(void)
{
	int c = -1, s = -1;
	static uint8_t buf[65536];
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK));
	size_t sent = 0;
	int full = 0;
	while (sent < (64u << 20)) {
		ssize_t w = send(c, buf, sizeof(buf), MSG_NOSIGNAL);
		if (w > 0) {
			sent += (size_t)w;
			continue;
		}
		CHECK(w < 0 && errno == EAGAIN, "send: %s, want EAGAIN once full", w < 0 ? strerror(errno) : "0");
		/* the peer's window may still open a little: full = EAGAIN and not writable after a pause */
		sleep_ms(20);
		if (!(wait_fd(c, POLLOUT, 0) & POLLOUT)) {
			full = 1;
			break;
		}
	}
	CHECK(full, "64 MiB sent and the socket never stayed unwritable");
	size_t got = 0;
	int writable = 0;
	while (got < sent) {
		ssize_t r = recv_exact(s, buf, sent - got < sizeof(buf) ? sent - got : sizeof(buf));
		CHECK(r > 0, "peer's recv after %zu of %zu bytes", got, sent);
		got += (size_t)r;
		if (!writable && (wait_fd(c, POLLOUT, 0) & POLLOUT))
			writable = 1;
	}
	CHECK(writable || (wait_fd(c, POLLOUT, WAIT_MS) & POLLOUT), "never writable again after the peer read all");
	CHECK(send(c, "more", 4, MSG_NOSIGNAL) == 4, "send after the peer drained: %s", strerror(errno));
	CHECK(recv_exact(s, buf, 4) == 4, "the last bytes");
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_transfer_4mib(void)
{
	enum { N = 4 << 20 };
	int c = -1, s = -1, started = 0;
	pthread_t tc, ts, rs;
	static uint8_t up[N], down[N];
	fill(up, N, 1);
	fill(down, N, 2);
	SYS(tcp_pair(AF_INET, &c, &s));
	struct sender_arg sc = { .fd = c, .buf = up, .len = N, .chunk = 100000 };
	struct sender_arg ss = { .fd = s, .buf = down, .len = N, .chunk = 65536 };
	struct rx_arg rserver = { .fd = s, .want = N }, rclient = { .fd = c, .want = N };
	CHECK(pthread_create(&tc, NULL, sender, &sc) == 0, "pthread_create");
	started |= 1;
	CHECK(pthread_create(&ts, NULL, sender, &ss) == 0, "pthread_create");
	started |= 2;
	CHECK(pthread_create(&rs, NULL, receiver, &rserver) == 0, "pthread_create");
	started |= 4;
	receiver(&rclient);
	pthread_join(tc, NULL), pthread_join(ts, NULL), pthread_join(rs, NULL);
	started = 0;
	CHECK(sc.rc == 0 && ss.rc == 0, "a sender failed (client %d, server %d)", sc.rc, ss.rc);
	CHECK(rserver.got == N && rclient.got == N, "received %zu up, %zu down of %d", rserver.got, rclient.got, N);
	CHECK(rserver.sum == fnv(FNV0, up, N), "client -> server checksum differs");
	CHECK(rclient.sum == fnv(FNV0, down, N), "server -> client checksum differs");
	/* and a clean close: EOF both ways */
	SYS(shutdown(c, SHUT_WR));
	CHECK(wait_eof(s, WAIT_MS), "no EOF at the server");
	xclose(&s);
	CHECK(wait_eof(c, WAIT_MS), "no EOF at the client");
	why[0] = 0;
out:
	if (started) {
		shutdown(c, SHUT_RDWR), shutdown(s, SHUT_RDWR);
		if (started & 1)
			pthread_join(tc, NULL);
		if (started & 2)
			pthread_join(ts, NULL);
		if (started & 4)
			pthread_join(rs, NULL);
	}
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static int t_blocking_recv_wakeup(void)
{
	int c = -1, s = -1, started = 0;
	pthread_t th;
	char b[16];
	SYS(tcp_pair(AF_INET, &c, &s));
	/* the other thread sends only after a pause, so this recv is asleep when the bytes come */
	struct sender_arg sa = { .fd = s, .buf = (const uint8_t *)"wake", .len = 4, .chunk = 4, .delay_ms = 200 };
	CHECK(pthread_create(&th, NULL, sender, &sa) == 0, "pthread_create");
	started = 1;
	ssize_t r = recv(c, b, sizeof(b), 0);
	CHECK(r > 0 && !memcmp(b, "wake", (size_t)r), "blocking recv returned %zd", r);
	pthread_join(th, NULL);
	started = 0;
	why[0] = 0;
out:
	if (started)
		pthread_join(th, NULL);
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static volatile sig_atomic_t usr1s;

static void on_usr1(int sig)
{
	(void)sig;
	usr1s++;
}

struct poke_arg {
	pthread_t target;
	pid_t tid;
	int fd;
};

/* is thread tid asleep (blocked in a call)? */
static int asleep(pid_t tid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *e = strrchr(buf, ')');
	return e && e[1] == ' ' && e[2] == 'S';
}

/* once the target thread is blocked (asleep twice 20 ms apart), signal it; 200 ms later send 4 bytes */
static void *poke_then_send(void *p)
{
	struct poke_arg *a = p;
	for (int i = 0; i < 10000 && !(asleep(a->tid) && (sleep_ms(20), asleep(a->tid))); i++)
		sleep_ms(1);
	pthread_kill(a->target, SIGUSR1);
	sleep_ms(200);
	if (send(a->fd, "late", 4, 0) != 4) {
		/* the recv side fails the check */
	}
	return NULL;
}

/* A handler interrupts an epoll_wait that sleeps: EINTR, with SA_RESTART too (signal(7): epoll is
 * never restarted) -- also when the shim polled its rings first with signals blocked (a polling
 * engine: the sleep after the poll must have the program's mask). And epoll_pwait's mask: a signal
 * the thread blocks, pending, ends a wait whose mask lets it in. */
static int t_epoll_eintr(void)
{
	int ep = -1, c = -1, s = -1, started = 0;
	pthread_t th;
	struct epoll_event ev[4];
	struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = SA_RESTART }, old;
	sigset_t usr1, prev;
	sigemptyset(&sa.sa_mask);
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, NULL, &prev);
	SYS(sigaction(SIGUSR1, &sa, &old));
	SYS(ep = epoll_create1(0));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct epoll_event e = { .events = EPOLLIN, .data.fd = c };
	SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	struct poke_arg pa = { .target = pthread_self(), .tid = (pid_t)syscall(SYS_gettid), .fd = s };
	usr1s = 0;
	CHECK(pthread_create(&th, NULL, poke_then_send, &pa) == 0, "pthread_create");
	started = 1;
	int n = epoll_wait(ep, ev, 4, 10000);
	CHECK(n < 0 && errno == EINTR && usr1s == 1, "a handler ran (SA_RESTART): epoll_wait returned %d (%s), want EINTR; "
	      "the handler ran %d times", n, n < 0 ? strerror(errno) : "-", (int)usr1s);
	pthread_join(th, NULL);
	started = 0;
	n = epoll_wait1(ep, ev, WAIT_MS);
	CHECK(n == 1 && ev[0].data.fd == c, "the bytes sent after the signal: %d events", n);
	char b[8];
	CHECK(recv_exact(c, b, 4) == 4 && !memcmp(b, "late", 4), "recv");
	SYS(pthread_sigmask(SIG_BLOCK, &usr1, &prev));
	SYS(pthread_kill(pthread_self(), SIGUSR1));
	usr1s = 0;
	n = epoll_wait(ep, ev, 4, 200);
	CHECK(n == 0 && usr1s == 0, "SIGUSR1 blocked and pending: epoll_wait returned %d (%s), the handler ran %d times; want "
	      "a timeout", n, n < 0 ? strerror(errno) : "-", (int)usr1s);
	n = epoll_pwait(ep, ev, 4, 5000, &prev);
	CHECK(n < 0 && errno == EINTR && usr1s == 1, "epoll_pwait with a mask that lets the pending SIGUSR1 in: %d (%s), "
	      "the handler ran %d times; want EINTR", n, n < 0 ? strerror(errno) : "-", (int)usr1s);
	why[0] = 0;
out:
	if (started)
		pthread_join(th, NULL);
	pthread_sigmask(SIG_SETMASK, &prev, NULL);
	sigaction(SIGUSR1, &old, NULL);
	xclose(&ep), xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

/* A handler interrupts a blocking recv: with SA_RESTART the call goes on and returns what comes
 * later, without it the call fails with EINTR (signal(7)). */
static int t_signal_restart(void)
{
	int c = -1, s = -1, started = 0;
	pthread_t th;
	char b[16];
	struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = SA_RESTART }, old;
	sigemptyset(&sa.sa_mask);
	SYS(sigaction(SIGUSR1, &sa, &old));
	SYS(tcp_pair(AF_INET, &c, &s));
	struct poke_arg pa = { .target = pthread_self(), .tid = (pid_t)syscall(SYS_gettid), .fd = s };
	usr1s = 0;
	CHECK(pthread_create(&th, NULL, poke_then_send, &pa) == 0, "pthread_create");
	started = 1;
	ssize_t r = recv(c, b, sizeof(b), 0);
	CHECK(r == 4 && !memcmp(b, "late", 4) && usr1s == 1, "SA_RESTART: recv returned %zd (%s), the handler ran %d times",
	      r, r < 0 ? strerror(errno) : "-", (int)usr1s);
	pthread_join(th, NULL);
	started = 0;
	sa.sa_flags = 0;
	SYS(sigaction(SIGUSR1, &sa, NULL));
	usr1s = 0;
	CHECK(pthread_create(&th, NULL, poke_then_send, &pa) == 0, "pthread_create");
	started = 1;
	r = recv(c, b, sizeof(b), 0);
	CHECK(r < 0 && errno == EINTR && usr1s == 1, "no SA_RESTART: recv returned %zd (%s), want EINTR; the handler ran "
	      "%d times", r, r < 0 ? strerror(errno) : "-", (int)usr1s);
	pthread_join(th, NULL);
	started = 0;
	r = recv_exact(c, b, 4);
	CHECK(r == 4 && !memcmp(b, "late", 4), "the bytes after EINTR: got %zd", r);
	why[0] = 0;
out:
	if (started)
		pthread_join(th, NULL);
	sigaction(SIGUSR1, &old, NULL);
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static void *closer(void *p)
{
	int *fd = p;
	sleep_ms(200);
	shutdown(*fd, SHUT_WR);
	return NULL;
}

static int t_blocking_read_eof(void)
{
	int c = -1, s = -1, started = 0;
	pthread_t th;
	char b[16];
	SYS(tcp_pair(AF_INET, &c, &s));
	CHECK(pthread_create(&th, NULL, closer, &s) == 0, "pthread_create");
	started = 1;
	ssize_t r = read(c, b, sizeof(b));
	CHECK(r == 0, "blocking read woken by the peer's shutdown returned %zd, want 0 (EOF)", r);
	why[0] = 0;
out:
	if (started)
		pthread_join(th, NULL);
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

struct echo_arg {
	int fd;
};

/* echoes what it gets, in two sends (a reply that arrives in pieces) */
static void *echo_thread(void *p)
{
	struct echo_arg *a = p;
	char b[4096];
	for (;;) {
		ssize_t r = recv(a->fd, b, sizeof(b), 0);
		if (r <= 0 || send_all(a->fd, b, (size_t)r / 2) < 0 || send_all(a->fd, b + r / 2, (size_t)(r - r / 2)) < 0)
			break;
	}
	return NULL;
}

/* request/response many times over, on several connections at once: whenever poll or epoll says a
 * socket is readable, its data is there (a non-blocking read never says EAGAIN after a readiness
 * report: the kernel's sockets never wake spuriously, and wrk counts such an EAGAIN as a read error) */
static int t_readable_means_data(void)
{
	enum { CONNS = 8, ROUNDS = 2000 };
	int c[CONNS], s[CONNS], ep = -1, started = 0, rounds[CONNS] = { 0 }, got[CONNS] = { 0 };
	pthread_t th[CONNS];
	struct echo_arg ea[CONNS];
	char req[100], rsp[100];
	memset(req, 'r', sizeof(req));
	for (int i = 0; i < CONNS; i++)
		c[i] = s[i] = -1;
	SYS(ep = epoll_create1(0));
	for (int i = 0; i < CONNS; i++) {
		SYS(tcp_pair(AF_INET, &c[i], &s[i]));
		SYS(fcntl(c[i], F_SETFL, fcntl(c[i], F_GETFL) | O_NONBLOCK));
		struct epoll_event e = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
		SYS(epoll_ctl(ep, EPOLL_CTL_ADD, c[i], &e));
		int one = 1; /* the reply's second half must not wait for an ACK (Nagle) */
		SYS(setsockopt(s[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
		ea[i].fd = s[i];
		CHECK(pthread_create(&th[i], NULL, echo_thread, &ea[i]) == 0, "pthread_create");
		started++;
		SYS(send_all(c[i], req, sizeof(req)));
	}
	int done = 0, spurious = 0, reports = 0;
	while (done < CONNS) {
		struct epoll_event ev[CONNS];
		int n = epoll_wait(ep, ev, CONNS, WAIT_MS);
		CHECK(n > 0 || (n < 0 && errno == EINTR), "epoll: no reply within %d ms (%d of %d connections done)", WAIT_MS,
		      done, CONNS);
		for (int k = 0; k < n; k++) {
			int i = (int)ev[k].data.u32;
			reports++;
			ssize_t r = recv(c[i], rsp, sizeof(rsp) - (size_t)got[i], 0);
			if (r < 0 && errno == EAGAIN) {
				spurious++;
				continue;
			}
			CHECK(r > 0, "recv after a readiness report: %zd (%s)", r, r < 0 ? strerror(errno) : "EOF");
			got[i] += (int)r;
			if (got[i] < (int)sizeof(rsp))
				continue;
			got[i] = 0;
			if (++rounds[i] == ROUNDS) {
				done++;
				SYS(epoll_ctl(ep, EPOLL_CTL_DEL, c[i], NULL));
			} else {
				SYS(send_all(c[i], req, sizeof(req)));
			}
		}
	}
	CHECK(!spurious, "%d of %d readiness reports found nothing to read (recv: EAGAIN)", spurious, reports);
	why[0] = 0;
out:
	for (int i = 0; i < CONNS; i++) {
		if (c[i] >= 0)
			shutdown(c[i], SHUT_WR);
		if (i < started)
			pthread_join(th[i], NULL);
		xclose(&c[i]), xclose(&s[i]);
	}
	xclose(&ep);
	return why[0] ? -1 : 0;
}

static int t_close_eof(void)
{
	int c = -1, s = -1;
	char b[16];
	SYS(tcp_pair(AF_INET, &c, &s));
	SYS(send_all(s, "bye", 3));
	xclose(&s);
	CHECK(recv_exact(c, b, 3) == 3 && !memcmp(b, "bye", 3), "bytes sent before the close were lost");
	CHECK(wait_eof(c, WAIT_MS), "no EOF after the peer's close");
	CHECK(recv(c, b, sizeof(b), 0) == 0, "EOF is not sticky");
	why[0] = 0;
out:
	xclose(&c), xclose(&s);
	return why[0] ? -1 : 0;
}

static const struct check {
	const char *name;
	int (*fn)(void);
} checks[] = {
	{ "fd_numbering", t_fd_numbering },
	{ "socket_flags", t_socket_flags },
	{ "names", t_names },
	{ "read_write", t_read_write },
	{ "select", t_select },
	{ "poll", t_poll },
	{ "epoll_lt", t_epoll_lt },
	{ "epoll_et", t_epoll_et },
	{ "epoll_et_conn", t_epoll_et_conn },
	{ "epoll_oneshot", t_epoll_oneshot },
	{ "epoll_rdhup", t_epoll_rdhup },
	{ "epoll_churn", t_epoll_churn },
	{ "epoll_out_full", t_epoll_out_full },
	{ "epoll_add_while_waiting", t_epoll_add_while_waiting },
	{ "epoll_dup_nested", t_epoll_dup_nested },
	{ "epoll_fork_close", t_epoll_fork_close },
	{ "epoll_awake_then_poll", t_epoll_awake_then_poll },
	{ "epoll_awake_blocked_recv", t_epoll_awake_blocked_recv },
	{ "epoll_awake_fork_child", t_epoll_awake_fork_child },
	{ "dup_fork_close", t_dup_fork_close },
	{ "nonblock_connect", t_nonblock_connect },
	{ "connect_refused", t_connect_refused },
	{ "accept4_flags", t_accept4 },
	{ "accept_nonblock", t_accept_nonblock },
	{ "accept_blocking", t_accept_blocking },
	{ "fcntl_dupfd", t_fcntl_dupfd },
	{ "ioctl_fionbio_fionread", t_ioctl },
	{ "msg_peek", t_msg_peek },
	{ "msg_dontwait", t_msg_dontwait },
	{ "msg_waitall", t_msg_waitall },
	{ "shutdown_wr", t_shutdown_wr },
	{ "epipe_nosignal", t_epipe_nosignal },
	{ "send_after_peer_close", t_send_after_peer_close },
	{ "children_wake_the_loop", t_children_wake_the_loop },
	{ "sigpipe", t_sigpipe },
	{ "readv_writev", t_readv_writev },
	{ "sendmsg_recvmsg", t_sendmsg_recvmsg },
	{ "sendfile", t_sendfile },
	{ "ipv6", t_ipv6 },
	{ "udp", t_udp },
	{ "udp_trunc", t_udp_trunc },
	{ "sockopts", t_sockopts },
	{ "udp_cmsg_recv", t_udp_cmsg_recv },
	{ "udp_cmsg_recv6", t_udp_cmsg_recv6 },
	{ "udp_cmsg_ctrunc", t_udp_cmsg_ctrunc },
	{ "udp_cmsg_send", t_udp_cmsg_send },
	{ "udp_cmsg_opts", t_udp_cmsg_opts },
	{ "send_full", t_send_full },
	{ "transfer_4mib", t_transfer_4mib },
	{ "blocking_recv_wakeup", t_blocking_recv_wakeup },
	{ "blocking_read_eof", t_blocking_read_eof },
	{ "signal_restart", t_signal_restart },
	{ "epoll_eintr", t_epoll_eintr },
	{ "readable_means_data", t_readable_means_data },
	{ "close_eof", t_close_eof },
};

int main(int argc, char **argv)
{
	size_t n = sizeof(checks) / sizeof(checks[0]);
	if (argc == 2 && !strcmp(argv[1], "--list")) {
		for (size_t i = 0; i < n; i++)
			printf("%s\n", checks[i].name);
		return 0;
	}
	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: sock-calls [--list] [CHECK...]\n"
		       "Exercises the socket calls of docs/sockets.md against a loopback peer it makes itself;\n"
		       "prints \"name: ok\" or \"name: FAIL why\" per check, exit 1 if any failed.\n");
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		size_t j = 0;
		while (j < n && strcmp(argv[i], checks[j].name))
			j++;
		if (j == n) {
			fprintf(stderr, "sock-calls: no check named '%s' (--list)\n", argv[i]);
			return 2;
		}
	}
	struct sigaction sa = { .sa_handler = on_sigpipe };
	sigaction(SIGPIPE, &sa, NULL);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	int failed = 0;
	for (size_t i = 0; i < n; i++) {
		if (argc > 1) {
			int want = 0;
			for (int k = 1; k < argc; k++)
				want |= !strcmp(argv[k], checks[i].name);
			if (!want)
				continue;
		}
		current = checks[i].name;
		why[0] = 0;
		alarm(CHECK_TIMEOUT_S);
		int r = checks[i].fn();
		alarm(0);
		if (r == 0) {
			printf("%s: ok\n", checks[i].name);
		} else {
			printf("%s: FAIL %s\n", checks[i].name, why[0] ? why : "(no reason given)");
			failed = 1;
		}
		fflush(stdout);
	}
	return failed;
}
