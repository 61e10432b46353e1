/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libsluice-sock.so: an LD_PRELOAD shim that makes a program's INET/INET6 TCP/UDP sockets sockets
 * of sluice-stackd (docs/sockets.md; the wire protocol is include/sluice/sock.h).
 *
 * This file: set-up, the fd table, channels and NQE calls, fork. The control calls are shim_sock.c,
 * the data path shim_io.c.
 *
 * Set-up. Inert unless SLUICE_STACK is kernel, shm or auto. The first socket() of the program
 * connects to <SLUICE_SOCKET_DIR>/stack.sock, says HELLO and maps the region the service sends.
 * Every thread then has its own channel (connected on its first call, HELLO with the region's
 * token, closed by a pthread key destructor at thread exit); channels live at high fd numbers
 * (F_DUPFD_CLOEXEC from clamp(RLIMIT_NOFILE - 64, 64, 8192)) and the app cannot close them.
 *
 * Per-socket state that belongs to the socket rather than to one fd (the spin locks, the domain and
 * type, SO_RCVTIMEO/SO_SNDTIMEO, a datagram socket's default peer) is kept by slot in
 * shim_slocal, so dup'd fds share it as with a kernel socket; the fd table maps an fd to its slot.
 */
#include "shim_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/un.h>
#include <unistd.h>

struct shim_real shim_real;
uint32_t *shim_fdt[FDT_TOP];
void *shim_region;
uint32_t shim_nslots, shim_rb;
struct slocal *shim_slocal;

bool shim_active;              /* SLUICE_STACK is valid */
static int g_stack;             /* enum sl_sk_stack */
static uint64_t g_rate;         /* SLUICE_RATE, bytes/s */
static struct sockaddr_un g_addr;
static socklen_t g_addr_len;
static int g_fd_base = 64;      /* internal fds go at or above this */
static size_t g_region_size;
static uint8_t g_token[16];
static char g_name[32];
int shim_gone;                  /* sluice-stackd went away after we were connected */
static int g_said;              /* the "is gone" line was printed */

/* ---- channels ---- */
struct chan {
	int fd;
	uint32_t seq;
	bool busy;                  /* a call is under way (a signal handler's call takes a new channel) */
	struct chan *next;
};
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_chan_lock = PTHREAD_MUTEX_INITIALIZER;
static struct chan *g_chans;    /* every channel of this process, for the fork child */
static __thread struct chan *t_chan;
static pthread_key_t g_key;

int shim_errno_ret(int r)
{
	if (r < 0) {
		errno = -r;
		return -1;
	}
	return r;
}

/* ---- the real functions ---- */
#define RESOLVE(f) shim_real.f = (__typeof__(shim_real.f))dlsym(RTLD_NEXT, #f)
void shim_resolve(void)
{
	RESOLVE(socket);
	RESOLVE(bind);
	RESOLVE(listen);
	RESOLVE(accept);
	RESOLVE(accept4);
	RESOLVE(connect);
	RESOLVE(getsockname);
	RESOLVE(getpeername);
	RESOLVE(shutdown);
	RESOLVE(close);
	RESOLVE(read);
	RESOLVE(write);
	RESOLVE(readv);
	RESOLVE(writev);
	RESOLVE(send);
	RESOLVE(recv);
	RESOLVE(sendto);
	RESOLVE(recvfrom);
	RESOLVE(sendmsg);
	RESOLVE(recvmsg);
	RESOLVE(sendmmsg);
	RESOLVE(recvmmsg);
	RESOLVE(sendfile);
	RESOLVE(sendfile64);
	RESOLVE(fcntl);
	RESOLVE(fcntl64);
	RESOLVE(ioctl);
	RESOLVE(dup);
	RESOLVE(dup2);
	RESOLVE(dup3);
	RESOLVE(setsockopt);
	RESOLVE(getsockopt);
	RESOLVE(close_range);
	RESOLVE(closefrom);
	RESOLVE(sigaction);
	RESOLVE(signal);
	RESOLVE(sysv_signal);
	RESOLVE(bsd_signal);
	RESOLVE(siginterrupt);
	RESOLVE(poll);
}

/* ---- messages ---- */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	int e = errno;
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "libsluice-sock: ");
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof(buf) - 2)
		len = sizeof(buf) - 2;
	buf[len++] = '\n';
	ssize_t w = REAL(write)(2, buf, len);
	(void)w;
	errno = e;
}

void shim_say_gone(const char *why)
{
	if (__atomic_exchange_n(&g_said, 1, __ATOMIC_RELAXED) == 0)
		say("sluice-stackd at %s is gone: %s", g_addr.sun_path, why);
}

static void mark_gone(const char *why)
{
	__atomic_store_n(&shim_gone, 1, __ATOMIC_RELAXED);
	shim_say_gone(why);
}

/* ---- the fd table ---- */
void fdt_set(int fd, uint32_t v)
{
	if ((unsigned)fd >= FDT_TOP * FDT_CHUNK)
		return;
	uint32_t **pc = &shim_fdt[(unsigned)fd >> FDT_SHIFT];
	uint32_t *c = __atomic_load_n(pc, __ATOMIC_ACQUIRE);
	if (!c) {
		if (!v)
			return;
		uint32_t *n = calloc(FDT_CHUNK, sizeof(uint32_t));
		if (!n)
			return; /* the fd then passes through as a kernel fd: nothing better to do */
		uint32_t *expect = NULL;
		if (__atomic_compare_exchange_n(pc, &expect, n, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			c = n;
		} else {
			free(n);
			c = expect;
		}
	}
	__atomic_store_n(&c[(unsigned)fd & (FDT_CHUNK - 1)], v, __ATOMIC_RELEASE);
}

/* ---- spin locks ---- */
void shim_spin_wait(volatile uint32_t *l)
{
	unsigned n = 0;
	do {
		while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
			if (++n < 256) {
#if defined(__x86_64__) || defined(__i386__)
				__builtin_ia32_pause();
#endif
			} else {
				sched_yield();
			}
		}
	} while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE));
}

/* ---- set-up ---- */
static void read_comm(void)
{
	int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = REAL(read)(fd, g_name, sizeof(g_name) - 1);
		REAL(close)(fd);
		if (n > 0) {
			g_name[n] = 0;
			char *nl = strchr(g_name, '\n');
			if (nl)
				*nl = 0;
			return;
		}
	}
	snprintf(g_name, sizeof(g_name), "%s", program_invocation_short_name);
}

static void chan_destroy(void *p);
static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);

__attribute__((constructor)) static void shim_ctor(void)
{
	shim_resolve();
	const char *st = getenv("SLUICE_STACK");
	if (!st || !*st)
		return;
	if (!strcmp(st, "kernel"))
		g_stack = SL_SK_STACK_KERNEL;
	else if (!strcmp(st, "shm"))
		g_stack = SL_SK_STACK_SHM;
	else if (!strcmp(st, "auto"))
		g_stack = SL_SK_STACK_AUTO;
	else if (!strcmp(st, "user"))
		g_stack = SL_SK_STACK_USER;
	else {
		say("SLUICE_STACK=%s is not kernel, shm, auto or user: sockets stay the kernel's", st);
		return;
	}
	const char *rate = getenv("SLUICE_RATE");
	if (rate && *rate) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(rate, &end, 10);
		if (errno || *end || rate[0] == '-') {
			say("SLUICE_RATE=%s is not a number of bytes per second: sockets stay the kernel's", rate);
			return;
		}
		g_rate = v;
	}
	const char *dir = getenv("SLUICE_SOCKET_DIR");
	if (!dir || !*dir)
		dir = "/run/sluice";
	g_addr.sun_family = AF_UNIX;
	int n = snprintf(g_addr.sun_path, sizeof(g_addr.sun_path), "%s/%s", dir, SL_SK_SOCKET_NAME);
	if (n < 0 || (size_t)n >= sizeof(g_addr.sun_path)) {
		say("SLUICE_SOCKET_DIR=%s is too long for a socket path: sockets stay the kernel's", dir);
		return;
	}
	g_addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		rlim_t b = rl.rlim_cur == RLIM_INFINITY ? 8192 : rl.rlim_cur > 64 ? rl.rlim_cur - 64 : 0;
		g_fd_base = b < 64 ? 64 : b > 8192 ? 8192 : (int)b;
	}
	if (pthread_key_create(&g_key, chan_destroy)) {
		say("no pthread key: sockets stay the kernel's");
		return;
	}
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	read_comm();
	shim_active = true;
}

/* ---- channels ---- */

/* a SEQPACKET connection to stack.sock, at an internal fd number; -errno */
static int chan_socket(void)
{
	int fd = REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int r;
	do
		r = REAL(connect)(fd, (const struct sockaddr *)&g_addr, g_addr_len);
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		int e = errno;
		REAL(close)(fd);
		return -e;
	}
	int hi = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, g_fd_base);
	if (hi >= 0) {
		REAL(close)(fd);
		fd = hi;
	}
	return fd;
}

static bool err_is_gone(int e)
{
	return e == EPIPE || e == ECONNRESET || e == ECONNREFUSED || e == ENOTCONN || e == ENOENT;
}

/* One request and its completion. 0, -EPIPE when the service is gone (the errno of the failure
 * in *why_errno, 0 for an orderly EOF), -EPROTO for an answer that is not ours, else -errno. */
static int chan_xfer(int cfd, struct sl_nqe *q, const void *pl, size_t plen, struct sl_nqe *resp,
		     uint8_t *rbuf, size_t *rlen, int *rfd, bool cloexec, int *why_errno)
{
	struct iovec iov[2] = { { q, sizeof(*q) }, { (void *)pl, plen } };
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = plen ? 2 : 1 };
	ssize_t n;
	*rfd = -1;
	*why_errno = 0;
	do
		n = REAL(sendmsg)(cfd, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		*why_errno = errno;
		return err_is_gone(errno) ? -EPIPE : -errno;
	}
	struct iovec riov[2] = { { resp, sizeof(*resp) }, { rbuf, SL_NQE_PAYLOAD_MAX } };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr rm = { .msg_iov = riov, .msg_iovlen = 2, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	do
		n = REAL(recvmsg)(cfd, &rm, cloexec ? MSG_CMSG_CLOEXEC : 0);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		*why_errno = n < 0 ? errno : 0;
		return n == 0 || err_is_gone(errno) ? -EPIPE : -EPROTO;
	}
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&rm); c; c = CMSG_NXTHDR(&rm, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int f;
			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*rfd < 0)
				*rfd = f;
			else
				REAL(close)(f);
		}
	}
	if ((size_t)n < sizeof(*resp) || (rm.msg_flags & MSG_TRUNC) || resp->len != (size_t)n - sizeof(*resp) ||
	    resp->op != q->op || resp->seq != q->seq || resp->sock != q->sock) {
		if (*rfd >= 0)
			REAL(close)(*rfd);
		*rfd = -1;
		return -EPROTO;
	}
	*rlen = resp->len;
	return 0;
}

static void chan_register(struct chan *c)
{
	fdt_set(c->fd, FDT_INTERNAL);
	pthread_mutex_lock(&g_chan_lock);
	c->next = g_chans;
	g_chans = c;
	pthread_mutex_unlock(&g_chan_lock);
}

static void chan_unregister(struct chan *c)
{
	pthread_mutex_lock(&g_chan_lock);
	for (struct chan **pp = &g_chans; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	pthread_mutex_unlock(&g_chan_lock);
}

static void chan_close_fd(struct chan *c)
{
	if (c->fd >= 0) {
		fdt_set(c->fd, 0);
		REAL(close)(c->fd);
		c->fd = -1;
	}
}

/* the key destructor: the thread is ending */
static void chan_destroy(void *p)
{
	struct chan *c = p;
	if (t_chan == c)
		t_chan = NULL;
	chan_unregister(c);
	chan_close_fd(c);
	free(c);
}

/* HELLO on the new channel fd: this program's stack, rate and name, and with_token its region's
 * token (a channel of a program that has its region). *rfd: the fd that came back (-1: none); *we:
 * the errno of a channel that failed (chan_xfer). */
static int hello_xfer(int fd, bool with_token, struct sl_nqe *resp, int *rfd, int *we)
{
	struct sl_nqe_hello h;
	memset(&h, 0, sizeof(h));
	h.version = SL_SK_VERSION;
	h.pid = (uint32_t)getpid();
	if (with_token)
		memcpy(h.token, g_token, sizeof(h.token));
	memcpy(h.name, g_name, sizeof(h.name) - 1);
	struct sl_nqe q = { .op = SL_NQE_HELLO, .len = sizeof(h), .seq = 1, .arg0 = (uint64_t)g_stack, .arg1 = g_rate };
	uint8_t rbuf[SL_NQE_PAYLOAD_MAX];
	size_t rlen = 0;
	return chan_xfer(fd, &q, &h, sizeof(h), resp, rbuf, &rlen, rfd, true, we);
}

static void why_text(char *buf, size_t cap, const char *what, int e)
{
	if (e)
		snprintf(buf, cap, "%s: %s", what, strerror(e));
	else
		snprintf(buf, cap, "%s: connection closed", what);
}

/* A new channel of a program that has its region (a new thread, a child after fork, a signal
 * handler's call). NULL with *err set when it cannot be made. */
static struct chan *chan_new(bool registered, int *err)
{
	char why[160];
	int fd = chan_socket();
	if (fd < 0) {
		if (err_is_gone(-fd)) {
			why_text(why, sizeof(why), "connect", -fd);
			mark_gone(why);
			*err = -EPIPE;
		} else {
			*err = fd;
		}
		return NULL;
	}
	struct sl_nqe resp;
	int rfd, we;
	int r = hello_xfer(fd, true, &resp, &rfd, &we);
	if (rfd >= 0)
		REAL(close)(rfd); /* we have the region mapped already */
	if (r == -EPIPE) {
		why_text(why, sizeof(why), "HELLO", we);
		mark_gone(why);
	} else if (r == 0 && resp.result < 0) {
		/* the service no longer knows this program (restarted?) */
		snprintf(why, sizeof(why), "HELLO refused: %s", strerror(-resp.result));
		mark_gone(why);
		r = -EPIPE;
	} else if (r == 0 && resp.arg0 != g_region_size) {
		say("sluice-stackd answered HELLO with a region of %llu bytes, ours is %zu",
		    (unsigned long long)resp.arg0, g_region_size);
		r = -EPROTO;
	}
	if (r < 0) {
		REAL(close)(fd);
		*err = r;
		return NULL;
	}
	struct chan *c = calloc(1, sizeof(*c));
	if (!c) {
		REAL(close)(fd);
		*err = -ENOMEM;
		return NULL;
	}
	c->fd = fd;
	c->seq = 1;
	if (registered)
		chan_register(c);
	else
		fdt_set(fd, FDT_INTERNAL);
	return c;
}

static bool region_valid(const struct sl_sk_region *r, size_t size)
{
	if (r->magic != SL_SK_MAGIC || r->version != SL_SK_VERSION || r->size != size)
		return false;
	uint32_t rb = r->ring_bytes;
	if (r->nslots == 0 || rb < 64 || (rb & (rb - 1)) || r->slot_bytes < 4096 + 2 * (uint64_t)rb ||
	    r->slot_bytes > (1ull << 40))
		return false;
	return sizeof(*r) + (uint64_t)r->nslots * r->slot_bytes <= size;
}

/* the program's first socket: connect, HELLO, map the region. 0 or -ENETDOWN */
int shim_init_region(void)
{
	if (__atomic_load_n(&shim_region, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&g_init_lock);
	int ret = -ENETDOWN;
	char why[160];
	if (shim_region) {
		ret = 0;
		goto out;
	}
	int fd = chan_socket();
	if (fd < 0) {
		why_text(why, sizeof(why), "connect", -fd);
		shim_say_gone(why);
		goto out;
	}
	struct sl_nqe resp;
	int memfd, we;
	int r = hello_xfer(fd, false, &resp, &memfd, &we);
	if (r < 0) {
		why_text(why, sizeof(why), "HELLO", r == -EPIPE ? we : -r);
		shim_say_gone(why);
		REAL(close)(fd);
		goto out;
	}
	if (resp.result < 0 || memfd < 0) {
		if (resp.result < 0)
			say("sluice-stackd refused this program: %s%s", strerror(-resp.result),
			    g_stack == SL_SK_STACK_USER && resp.result == -EPROTONOSUPPORT
				    ? " (it runs no user stack module: stack.user in sluice's config)" : "");
		else
			say("sluice-stackd sent no region");
		if (memfd >= 0)
			REAL(close)(memfd);
		REAL(close)(fd);
		goto out;
	}
	size_t size = (size_t)resp.arg0;
	void *map = size >= sizeof(struct sl_sk_region) ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0) : MAP_FAILED;
	REAL(close)(memfd);
	if (map == MAP_FAILED || !region_valid(map, size)) {
		say("the region from sluice-stackd is %s", map == MAP_FAILED ? "not mappable" : "not valid");
		if (map != MAP_FAILED)
			munmap(map, size);
		REAL(close)(fd);
		goto out;
	}
	struct sl_sk_region *reg = map;
	struct slocal *lo = calloc(reg->nslots, sizeof(*lo));
	struct chan *c = calloc(1, sizeof(*c));
	if (!lo || !c) {
		free(lo);
		free(c);
		munmap(map, size);
		REAL(close)(fd);
		goto out;
	}
	memcpy(g_token, reg->token, sizeof(g_token));
	g_region_size = size;
	shim_nslots = reg->nslots;
	shim_rb = reg->ring_bytes;
	shim_slocal = lo;
	c->fd = fd;
	c->seq = 1;
	chan_register(c);
	t_chan = c;
	pthread_setspecific(g_key, c);
	__atomic_store_n(&shim_region, map, __ATOMIC_RELEASE);
	ret = 0;
out:
	pthread_mutex_unlock(&g_init_lock);
	return ret;
}

int shim_call(uint8_t op, uint32_t sock, uint8_t flags, uint64_t arg0, uint64_t arg1, const void *payload,
	      size_t plen, void *out, size_t *out_len, int *out_fd, bool existing)
{
	int gone = existing ? -ECONNRESET : -ENETDOWN;
	if (out_fd)
		*out_fd = -1;
	if (plen > SL_NQE_PAYLOAD_MAX)
		return -EINVAL;
	if (__atomic_load_n(&shim_gone, __ATOMIC_RELAXED))
		return gone;
	struct chan *c = t_chan;
	bool temp = false;
	int err = 0;
	if (c && c->busy) {
		/* a signal handler's call in the middle of this thread's call: a channel of its own */
		c = chan_new(false, &err);
		temp = true;
	} else if (!c || c->fd < 0) {
		if (c) { /* closed by close_range(): a new one */
			chan_destroy(c);
			pthread_setspecific(g_key, NULL);
		}
		c = chan_new(true, &err);
		if (c) {
			t_chan = c;
			pthread_setspecific(g_key, c);
		}
	}
	if (!c)
		return err == -EPIPE ? gone : err;
	struct sl_nqe q = { .op = op, .flags = flags, .len = (uint16_t)plen, .sock = sock, .seq = ++c->seq,
			    .arg0 = arg0, .arg1 = arg1 };
	struct sl_nqe resp;
	uint8_t rbuf[SL_NQE_PAYLOAD_MAX];
	size_t rlen = 0;
	int rfd, we;
	c->busy = true;
	int r = chan_xfer(c->fd, &q, payload, plen, &resp, rbuf, &rlen, &rfd, (flags & SL_NQE_F_CLOEXEC) != 0, &we);
	c->busy = false;
	if (r < 0) {
		if (r == -EPIPE) {
			char why[160];
			why_text(why, sizeof(why), "channel", we);
			mark_gone(why);
			r = gone;
		} else if (r == -EPROTO) {
			say("sluice-stackd's answer to call %u does not match it: channel closed", (unsigned)op);
		}
		/* the channel is out of step or dead: the next call makes a new one */
		if (temp) {
			chan_close_fd(c);
			free(c);
		} else {
			chan_close_fd(c);
		}
		return r;
	}
	if (temp) {
		chan_close_fd(c);
		free(c);
	}
	if (out && out_len) {
		size_t n = rlen < *out_len ? rlen : *out_len;
		memcpy(out, rbuf, n);
		*out_len = rlen;
	} else if (out_len) {
		*out_len = rlen;
	}
	if (out_fd)
		*out_fd = rfd;
	else if (rfd >= 0)
		REAL(close)(rfd);
	if (resp.result < 0 && out_fd && *out_fd >= 0) {
		REAL(close)(*out_fd);
		*out_fd = -1;
	}
	return resp.result;
}

/* ---- direct connections (sock.h "Direct connections") ---- */

/* what a socket whose connection cannot be attached (gone meanwhile) looks like: ended */
static struct sl_sk_slot g_dead_slot = { .state = SL_SK_S_CONNECTED | SL_SK_S_RX_EOF | SL_SK_S_TX_CLOSED };

static void direct_detach(struct slocal *lo, uint64_t bytes)
{
	__atomic_store_n(&lo->dsl, NULL, __ATOMIC_RELEASE);
	if (lo->dbase)
		munmap(lo->dbase, bytes);
	if (lo->dpfd > 0) {
		fdt_set(lo->dpfd, 0);
		REAL(close)(lo->dpfd);
	}
	lo->dbase = NULL;
	lo->dpfd = -1;
}

/* The peer of a direct connection holds a copy of each of our placeholders' engine ends (and we of
 * its), so the service's death alone does not hang them up, as it does every other placeholder. A
 * thread of the shim, started with the program's first direct connection, waits on a channel of
 * its own for that death and then shuts down every peer engine end this program holds: the peers'
 * placeholders hang up as if the service had closed them, and theirs do ours the same way. */
static pthread_mutex_t g_watch_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t g_watch_pid;
static volatile int g_watch_child; /* a fork child holding direct connections: start its own on use */

static void *direct_watch(void *arg)
{
	struct pollfd p = { .fd = (int)(intptr_t)arg, .events = POLLRDHUP };
	while (REAL(poll)(&p, 1, -1) < 0 && errno == EINTR)
		;
	if (!(p.revents & (POLLHUP | POLLRDHUP | POLLERR))) { /* closed under us (closefrom): not the service */
		__atomic_store_n(&g_watch_pid, 0, __ATOMIC_RELEASE); /* the next direct connection starts another */
		return NULL;
	}
	for (uint32_t i = 0; i < shim_nslots; i++) {
		int f = __atomic_load_n(&shim_slocal[i].dpfd, __ATOMIC_RELAXED);
		if (f > 0)
			REAL(shutdown)(f, SHUT_RDWR); /* not close: a sender may be using the fd number */
	}
	return NULL;
}

static void direct_watch_start(void)
{
	pthread_mutex_lock(&g_watch_lock);
	if (g_watch_pid != getpid()) {
		int err = 0;
		struct chan *c = chan_new(true, &err);
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old); /* the program's handlers never run on it */
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&at, 64 * 1024);
		pthread_t t;
		if (c && pthread_create(&t, &at, direct_watch, (void *)(intptr_t)c->fd) == 0)
			g_watch_pid = getpid();
		pthread_attr_destroy(&at);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	pthread_mutex_unlock(&g_watch_lock);
}

static struct sl_sk_slot *direct_attach(uint32_t slot, struct slocal *lo, uint32_t gen)
{
	uint64_t sb = ((struct sl_sk_region *)shim_region)->slot_bytes;
	direct_detach(lo, 2 * sb); /* the slot's last connection: its socket is closed (the slot is new) */
	int mfd = -1, pfd = -1;
	int half = shim_call(SL_NQE_ATTACH, slot, SL_NQE_F_CLOEXEC, 0, 0, NULL, 0, NULL, NULL, &mfd, true);
	if (half < 0 || half > 1 || mfd < 0) {
		if (mfd >= 0)
			REAL(close)(mfd);
		return &g_dead_slot;
	}
	void *base = mmap(NULL, 2 * sb, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	REAL(close)(mfd);
	if (base == MAP_FAILED) {
		say("cannot map a connection of socket %u: %s", slot, strerror(errno));
		return &g_dead_slot;
	}
	/* the peer's engine end, for its tokens; without it (the peer gone) kicks ask the engine */
	if (shim_call(SL_NQE_ATTACH, slot, SL_NQE_F_CLOEXEC, 1, 0, NULL, 0, NULL, NULL, &pfd, true) < 0)
		pfd = -1;
	if (pfd >= 0) {
		int hi = REAL(fcntl)(pfd, F_DUPFD_CLOEXEC, g_fd_base);
		if (hi >= 0) {
			REAL(close)(pfd);
			pfd = hi;
		}
		if (pfd > 0)
			fdt_set(pfd, FDT_INTERNAL); /* the program cannot close it or dup over it */
	}
	lo->dbase = base;
	lo->dpfd = pfd;
	lo->dpeer = (struct sl_sk_slot *)((uint8_t *)base + (uint64_t)(1 - half) * sb);
	lo->dgen = gen;
	if (pfd > 0)
		direct_watch_start();
	struct sl_sk_slot *sl = (struct sl_sk_slot *)((uint8_t *)base + (uint64_t)half * sb);
	__atomic_store_n(&lo->dsl, sl, __ATOMIC_RELEASE);
	return sl;
}

struct sl_sk_slot *shim_direct_slot(uint32_t slot, struct sl_sk_slot *r)
{
	struct slocal *lo = &shim_slocal[slot];
	uint32_t gen = __atomic_load_n(&r->gen, __ATOMIC_ACQUIRE);
	struct sl_sk_slot *sl = __atomic_load_n(&lo->dsl, __ATOMIC_ACQUIRE);
	if (SHIM_UNLIKELY(g_watch_child) && __atomic_exchange_n(&g_watch_child, 0, __ATOMIC_ACQ_REL))
		direct_watch_start(); /* the parent's thread does not outlive the parent */
	if (SHIM_LIKELY(sl && lo->dgen == gen))
		return sl;
	spin_lock(&lo->dlock);
	sl = lo->dsl;
	if (!sl || lo->dgen != gen)
		sl = direct_attach(slot, lo, gen);
	spin_unlock(&lo->dlock);
	return sl;
}

int shim_take_error(uint32_t slot)
{
	int v = 0;
	size_t len = sizeof(v);
	int r = shim_call(SL_NQE_GETSOCKOPT, slot, 0, SOL_SOCKET, (uint64_t)SO_ERROR | ((uint64_t)sizeof(int) << 32), NULL,
			  0, &v, &len, NULL, true);
	if (r < 0)
		return r;
	return len >= sizeof(int) ? v : 0;
}

/* A placeholder hung up: if a channel hangs up too, sluice-stackd is gone (a dying process closes
 * its fds one by one: the channel gets up to 100 ms to show it). */
void shim_placeholder_gone(void)
{
	if (__atomic_load_n(&shim_gone, __ATOMIC_RELAXED))
		return;
	int fd = -1;
	pthread_mutex_lock(&g_chan_lock);
	for (struct chan *c = g_chans; c && fd < 0; c = c->next)
		fd = c->fd;
	pthread_mutex_unlock(&g_chan_lock);
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
	if (fd >= 0 && REAL(poll)(&p, 1, 100) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
		mark_gone("it closed its end of the sockets and of the channel");
}

/* closefrom() without close_range(): the channels at or above lowfd are gone; each thread makes a
 * new one at its next call */
void shim_channels_closed_from(int lowfd)
{
	pthread_mutex_lock(&g_chan_lock);
	for (struct chan *c = g_chans; c; c = c->next)
		if (c->fd >= lowfd) {
			fdt_set(c->fd, 0);
			c->fd = -1;
		}
	pthread_mutex_unlock(&g_chan_lock);
}

/* ---- fork ---- */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&g_init_lock);
	pthread_mutex_lock(&g_chan_lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&g_chan_lock);
	pthread_mutex_unlock(&g_init_lock);
}

/* The child has its parent's channels (other threads' too): they are the parent's conversations,
 * so they go; the child's first call connects with the region's token. The region stays mapped,
 * and the spin locks of threads that do not exist here are released. */
static void atfork_child(void)
{
	shim_ep_atfork_child();
	struct chan *c = g_chans;
	g_chans = NULL;
	while (c) {
		struct chan *next = c->next;
		chan_close_fd(c);
		free(c);
		c = next;
	}
	t_chan = NULL;
	pthread_setspecific(g_key, NULL);
	if (shim_slocal)
		for (uint32_t i = 0; i < shim_nslots; i++) {
			shim_slocal[i].rxlock = 0;
			shim_slocal[i].txlock = 0;
			shim_slocal[i].dlock = 0;
			if (shim_slocal[i].dpfd > 0)
				g_watch_child = 1;
		}
	pthread_mutex_init(&g_watch_lock, NULL); /* a thread of the parent may have held it */
	pthread_mutex_unlock(&g_chan_lock);
	pthread_mutex_unlock(&g_init_lock);
}
