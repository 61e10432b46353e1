/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libsluice-sock.so, epoll (docs/sockets.md "epoll"): the program's epoll instances stay the kernel's,
 * but the shim keeps its own table of what each one holds, so that two things cost no system call:
 *
 *   EPOLLOUT of a shim stream socket, level-triggered: "writable" is a look at its send ring (a
 *            connected stream, open for sending, no pending error, a quarter of the ring free), done
 *            in epoll_wait before the kernel is asked. The kernel is not told about EPOLLOUT at all
 *            while the socket is writable; a socket found not writable (ring full, connecting,
 *            error, reset) gets EPOLLOUT in the kernel again, whose placeholder then answers as it
 *            does without this (sock.h: filler bytes keep it not writable until the ring has room).
 *   the churn of level-triggered registrations: event loops such as redis's and wrk's change a
 *            socket's mask on every request (DEL + ADD, or MOD: read, then write, then read). For a
 *            level-triggered, non-oneshot shim socket the kernel keeps a superset of what the program
 *            asked: a DEL leaves the registration in place, an ADD or MOD asking for no more than the
 *            kernel has needs no call. An event the program did not ask for (its data, readiness of
 *            a socket it deleted) is never shown to it: the shim then brings the kernel's mask down to
 *            exactly what is asked (or deletes the registration) and waits on.
 *
 *   EPOLLIN of a connected shim stream, level-triggered or EPOLLET alone, while the process is awake:
 *            its ring is looked at and its token held back (sock.h "Awake event loops"); an
 *            edge-triggered one is reported when the ring's mark moved. With a polling engine an
 *            epoll_wait that found nothing polls these rings a while before it sleeps.
 *
 * Every registration goes to the kernel with the shim's own data (an index and a generation) and the
 * program's data is given back from the table, so kernel and user-space readiness of one fd merge into
 * one event, as the kernel would report it. Kernel fds and edge-triggered (but for the EPOLLIN above),
 * oneshot or exclusive registrations pass through exactly (only their data is translated).
 *
 * Limits: the table is this process's. A forked child that uses an epoll instance its parent also uses
 * sees the parent's registrations as they were at fork; an epoll fd given to another process, or polled
 * with poll()/select() instead of epoll_wait, does not see the user-space EPOLLOUT. An epoll fd added
 * to another epoll turns the emulation off for it (its EPOLLOUT goes back to the kernel).
 */
#include "shim_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { OUTQ, INQ };
#define EP_FLAGS (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE | EPOLLWAKEUP)
#define EP_ALWAYS (EPOLLERR | EPOLLHUP) /* reported whatever the mask */
/* at most this many sockets of one instance have their rings looked at in each epoll_wait (the
 * kernel's wait costs the same for 10 or 10,000 idle sockets; a scan does not): the rest use tokens */
#define EP_UIN_MAX 256

struct ep_reg {
	int fd;
	uint32_t gen;        /* changes each time the entry is reused: stale kernel data is dropped */
	uint32_t events;     /* what the program asked (valid while live) */
	epoll_data_t data;   /* the program's data */
	uint32_t kmask;      /* what the kernel has (valid while kreg) */
	uint32_t fdt;        /* the fd's table entry at registration: slot + 1 of a shim socket, 0 kernel */
	bool live;           /* the program has it registered */
	bool kreg;           /* the kernel has it registered (live, or deleted by the program: "kept") */
	bool uout;           /* its EPOLLOUT is looked at here (on the state's OUTQ list) */
	bool uin;            /* its EPOLLIN is looked at here too (INQ: sock.h "Awake event loops") */
	bool held;           /* ... and its rx_spin is held: senders leave the token out */
	bool edge;           /* edge-triggered: EPOLLIN is reported when the ring's mark moves */
	bool fresh;          /* edge: report once if readable (the kernel looks at an ADD or MOD) */
	uint64_t mark;       /* edge: the ring's mark (rx_mark) when last reported or looked at */
	uint32_t pos[2];     /* its index in each list it is on */
	uint64_t call;       /* the epoll_wait call that last reported it ... */
	int outi;            /* ... at this index of that call's output */
};

struct ep_state {
	pthread_mutex_t mu;
	int refs;            /* fds naming this instance (dup) */
	int epfd;            /* one of them (for the kernel calls of shim_ep_forget) */
	pid_t pid;           /* the process that made it: a forked child shares the kernel instance */
	bool nested;         /* added to another epoll: no user-space EPOLLOUT */
	int blocked;         /* threads waiting in the kernel with a timeout: a new EPOLLOUT must go there */
	struct ep_reg *regs;
	uint32_t nregs, capregs, freehead; /* free entries chain through .fd */
	int32_t *byfd;       /* fd -> entry index + 1 */
	uint32_t nbyfd;
	struct elist {       /* entry indices; each member knows its place (pos), so removal is O(1) */
		uint32_t *q, n, cap;
	} list[2];           /* OUTQ: entries with uout; INQ: entries with uin */
	uint32_t rot;        /* where the scans start (fairness for a small maxevents) */
	uint32_t poll_us;    /* how long an epoll_wait polls before it sleeps, 0: app_poll_us (ep_spin) */
	struct ep_state *next; /* all instances, for close() of a registered shim socket */
};

/* epfd -> state, two levels as the fd table; written under g_ep_lock */
static struct ep_state **ep_tab[FDT_TOP];
static pthread_mutex_t g_ep_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ep_state *g_states;
static uint64_t g_ep_calls; /* epoll_wait call ids (merging) */
int shim_ep_count;          /* emulated instances alive: 0 keeps close() on its fast path */

static struct {
	int (*create)(int);
	int (*create1)(int);
	int (*ctl)(int, int, int, struct epoll_event *);
	int (*pwait)(int, struct epoll_event *, int, int, const sigset_t *);
} ep_real;

static void ep_resolve(void)
{
	if (ep_real.pwait)
		return;
	ep_real.create = dlsym(RTLD_NEXT, "epoll_create");
	ep_real.create1 = dlsym(RTLD_NEXT, "epoll_create1");
	ep_real.ctl = dlsym(RTLD_NEXT, "epoll_ctl");
	__atomic_store_n(&ep_real.pwait, dlsym(RTLD_NEXT, "epoll_pwait"), __ATOMIC_RELEASE);
}

static struct ep_state *ep_get(int fd)
{
	if ((unsigned)fd >= FDT_TOP * FDT_CHUNK)
		return NULL;
	struct ep_state **c = __atomic_load_n(&ep_tab[(unsigned)fd >> FDT_SHIFT], __ATOMIC_ACQUIRE);
	return c ? __atomic_load_n(&c[(unsigned)fd & (FDT_CHUNK - 1)], __ATOMIC_ACQUIRE) : NULL;
}

/* under g_ep_lock: an fd other than s->epfd that names s (dup), -1 if none */
static int another_fd(const struct ep_state *s)
{
	for (unsigned ci = 0; ci < FDT_TOP; ci++) {
		struct ep_state **c = ep_tab[ci];
		for (unsigned i = 0; c && i < FDT_CHUNK; i++)
			if (c[i] == s && (int)(ci << FDT_SHIFT | i) != s->epfd)
				return (int)(ci << FDT_SHIFT | i);
	}
	return -1;
}

/* under g_ep_lock */
static bool ep_set(int fd, struct ep_state *s)
{
	if ((unsigned)fd >= FDT_TOP * FDT_CHUNK)
		return false;
	struct ep_state **c = ep_tab[(unsigned)fd >> FDT_SHIFT];
	if (!c) {
		if (!s)
			return true;
		c = calloc(FDT_CHUNK, sizeof(*c));
		if (!c)
			return false;
		__atomic_store_n(&ep_tab[(unsigned)fd >> FDT_SHIFT], c, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&c[(unsigned)fd & (FDT_CHUNK - 1)], s, __ATOMIC_RELEASE);
	return true;
}

static void state_free(struct ep_state *s)
{
	struct ep_state **p = &g_states;
	while (*p && *p != s)
		p = &(*p)->next;
	if (*p)
		*p = s->next;
	free(s->regs);
	free(s->byfd);
	free(s->list[OUTQ].q);
	free(s->list[INQ].q);
	pthread_mutex_destroy(&s->mu);
	free(s);
	__atomic_fetch_sub(&shim_ep_count, 1, __ATOMIC_RELAXED);
}

/* a new epoll fd: give it a table (without one it simply passes through) */
static int ep_adopt(int fd)
{
	if (fd < 0 || !shim_active)
		return fd;
	struct ep_state *s = calloc(1, sizeof(*s));
	if (!s)
		return fd;
	pthread_mutex_init(&s->mu, NULL);
	s->refs = 1;
	s->epfd = fd;
	s->pid = getpid();
	pthread_mutex_lock(&g_ep_lock);
	struct ep_state *old = ep_get(fd); /* an fd number reused behind our back (a raw close) */
	if (old && --old->refs == 0)
		state_free(old);
	if (ep_set(fd, s)) {
		s->next = g_states;
		g_states = s;
		__atomic_fetch_add(&shim_ep_count, 1, __ATOMIC_RELAXED);
	} else {
		pthread_mutex_destroy(&s->mu);
		free(s);
	}
	pthread_mutex_unlock(&g_ep_lock);
	return fd;
}

SHIM_EXPORT int epoll_create(int size)
{
	ep_resolve();
	return ep_adopt(ep_real.create(size));
}

SHIM_EXPORT int epoll_create1(int flags)
{
	ep_resolve();
	return ep_adopt(ep_real.create1(flags));
}

/* ---- entries (under s->mu) ---- */

static struct ep_reg *reg_of(struct ep_state *s, int fd)
{
	if ((uint32_t)fd >= s->nbyfd || s->byfd[fd] == 0)
		return NULL;
	return &s->regs[s->byfd[fd] - 1];
}

static struct ep_reg *reg_new(struct ep_state *s, int fd)
{
	if ((uint32_t)fd >= s->nbyfd) {
		uint32_t n = s->nbyfd ? s->nbyfd : 64;
		while (n <= (uint32_t)fd)
			n *= 2;
		int32_t *b = realloc(s->byfd, n * sizeof(*b));
		if (!b)
			return NULL;
		memset(b + s->nbyfd, 0, (n - s->nbyfd) * sizeof(*b));
		s->byfd = b;
		s->nbyfd = n;
	}
	uint32_t i;
	if (s->freehead) {
		i = s->freehead - 1;
		s->freehead = (uint32_t)s->regs[i].fd;
	} else {
		if (s->nregs == s->capregs) {
			uint32_t n = s->capregs ? 2 * s->capregs : 64;
			struct ep_reg *r = realloc(s->regs, n * sizeof(*r));
			if (!r)
				return NULL;
			s->regs = r;
			s->capregs = n;
		}
		i = s->nregs++;
		s->regs[i].gen = 0;
	}
	struct ep_reg *r = &s->regs[i];
	uint32_t gen = r->gen + 1;
	memset(r, 0, sizeof(*r));
	r->gen = gen;
	r->fd = fd;
	s->byfd[fd] = (int32_t)i + 1;
	return r;
}

/* lists of entries: *on is the entry's membership flag of list l */
static void list_del(struct ep_state *s, int l, struct ep_reg *r, bool *on)
{
	if (!*on)
		return;
	struct elist *e = &s->list[l];
	uint32_t last = e->q[--e->n];
	e->q[r->pos[l]] = last;
	s->regs[last].pos[l] = r->pos[l];
	*on = false;
}

static bool list_add(struct ep_state *s, int l, struct ep_reg *r, bool *on)
{
	if (*on)
		return true;
	struct elist *e = &s->list[l];
	if (e->n == e->cap) {
		uint32_t n = e->cap ? 2 * e->cap : 64;
		uint32_t *q = realloc(e->q, n * sizeof(*q));
		if (!q)
			return false;
		e->q = q;
		e->cap = n;
	}
	r->pos[l] = e->n;
	e->q[e->n++] = (uint32_t)(r - s->regs);
	*on = true;
	return true;
}

static void out_del(struct ep_state *s, struct ep_reg *r)
{
	list_del(s, OUTQ, r, &r->uout);
}

static bool out_add(struct ep_state *s, struct ep_reg *r)
{
	return list_add(s, OUTQ, r, &r->uout);
}

/* Hold a uin entry's rx_spin (sock.h "Awake event loops"): senders leave its token out while this
 * process is awake, and epoll_wait looks at its ring. Not while a waiter needs the token. */
static void in_hold(struct ep_reg *r)
{
	if (r->held)
		return;
	uint32_t slot = r->fdt - 1;
	struct sl_sk_slot *sl = slot_of(slot);
	if (!__atomic_load_n(&sl->rx_loop, __ATOMIC_RELAXED))
		__atomic_store_n(&sl->rx_loop, 1, __ATOMIC_SEQ_CST);
	sl_sk_xchg(&sl->rx_spin, 1);
	if (__atomic_load_n(&sl->rx_waiters, __ATOMIC_SEQ_CST)) {
		sl_sk_xchg(&sl->rx_spin, 0);
		shim_token_step(r->fd, slot, TOK_STREAM, false);
		return;
	}
	r->held = true;
}

/* Let go of it. `token`: and make the placeholder show what the hold left out (anyone may wait on
 * it now); without, the caller looks at the ring itself before it sleeps. */
static void in_release(struct ep_reg *r, bool token)
{
	if (!r->held)
		return;
	r->held = false;
	uint32_t slot = r->fdt - 1;
	sl_sk_xchg(&slot_of(slot)->rx_spin, 0);
	if (token)
		shim_token_step(r->fd, slot, TOK_STREAM, false);
}

static void in_del(struct ep_state *s, struct ep_reg *r)
{
	if (r->uin)
		in_release(r, true);
	list_del(s, INQ, r, &r->uin);
}

static bool in_add(struct ep_state *s, struct ep_reg *r)
{
	if (r->uin)
		return true;
	if (!list_add(s, INQ, r, &r->uin))
		return false;
	r->held = false;
	if (s->blocked == 0)
		in_hold(r);
	return true;
}

static void reg_free(struct ep_state *s, struct ep_reg *r)
{
	in_del(s, r);
	out_del(s, r);
	if ((uint32_t)r->fd < s->nbyfd && s->byfd[r->fd] == (int32_t)(r - s->regs) + 1)
		s->byfd[r->fd] = 0;
	r->live = r->kreg = false;
	r->gen++;
	r->fd = (int)s->freehead;
	s->freehead = (uint32_t)(r - s->regs) + 1;
}

static inline uint64_t kdata(const struct ep_state *s, const struct ep_reg *r)
{
	return (uint64_t)r->gen << 32 | (uint32_t)(r - s->regs);
}

static int kernel_ctl(int epfd, struct ep_state *s, int op, struct ep_reg *r, uint32_t mask)
{
	struct epoll_event ev = { .events = mask, .data.u64 = kdata(s, r) };
	return ep_real.ctl(epfd, op, r->fd, op == EPOLL_CTL_DEL ? NULL : &ev);
}

/* A shim socket's registration whose churn and EPOLLOUT the table can take: level-triggered, not
 * oneshot or exclusive, on an instance not inside another. */
static bool lazy_ok(const struct ep_state *s, const struct ep_reg *r, uint32_t events)
{
	return fdt_is_sock(r->fdt) && !(events & EP_FLAGS) && !s->nested;
}

/* Should its EPOLLOUT be looked at here: asked for, the socket writable now (else the kernel's
 * placeholder answers), and no thread already asleep in the kernel that would not see it. */
static bool want_uout(const struct ep_state *s, const struct ep_reg *r, uint32_t events)
{
	return (events & EPOLLOUT) && lazy_ok(s, r, events) && s->blocked == 0 &&
	       shim_stream_writable(r->fdt - 1);
}

/* Should its EPOLLIN be looked at here too: asked for, a connected stream (what its ring says is
 * what recv would find; end of stream and errors too), level-triggered or edge-triggered alone (not
 * oneshot or exclusive). An edge-triggered one stays in the kernel as asked, EPOLLOUT included: only
 * its EPOLLIN is also looked at here, reported when the ring's mark moved (new bytes, end of stream,
 * an error), as the kernel reports an edge for every arrival. */
static bool want_uin(const struct ep_state *s, const struct ep_reg *r, uint32_t events)
{
	uint32_t flags = events & EP_FLAGS;
	return (events & EPOLLIN) && fdt_is_sock(r->fdt) && !s->nested && (flags == 0 || flags == EPOLLET) &&
	       (r->uin || s->list[INQ].n < EP_UIN_MAX) && shim_stream_connected(r->fdt - 1);
}

/* What an edge-triggered entry compares: its receive ring's tail, with end of stream, reset and a
 * pending error folded into the top bits (a byte count never reaches them). */
static uint64_t rx_mark(uint32_t slot)
{
	struct sl_sk_slot *sl = slot_of(slot);
	uint32_t st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
	uint64_t m = sl_sk_load_acquire(&sl->rx.tail);
	if (st & SL_SK_S_RX_EOF)
		m ^= 1ull << 61;
	if (st & SL_SK_S_TX_CLOSED)
		m ^= 1ull << 62;
	if (__atomic_load_n(&sl->error, __ATOMIC_ACQUIRE))
		m ^= 1ull << 63;
	return m;
}

/* What the kernel must have for `events`: all of it, but EPOLLOUT when that is looked at here. */
static inline uint32_t kernel_needs(uint32_t events, bool uout)
{
	return uout ? events & ~(uint32_t)EPOLLOUT : events;
}

/* Its EPOLLOUT goes back to the kernel, whose placeholder answers (not writable here, no memory for
 * the list, or an instance inside another) */
static void out_to_kernel(int epfd, struct ep_state *s, struct ep_reg *r)
{
	out_del(s, r);
	if ((r->events & EPOLLOUT) && !(r->kmask & EPOLLOUT) && kernel_ctl(epfd, s, EPOLL_CTL_MOD, r, r->events) == 0)
		r->kmask = r->events;
}

/* fd is no open file (the kernel's EBADF for MOD and DEL, where the table alone would say ENOENT).
 * The raw call: fcntl is the shim's own. */
static bool fd_closed(int fd)
{
	int e = errno;
	bool closed = syscall(SYS_fcntl, fd, F_GETFD) < 0 && errno == EBADF;
	errno = e;
	return closed;
}

static int ep_ctl(int epfd, struct ep_state *s, int op, int fd, struct epoll_event *ev)
{
	if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL)
		return -EINVAL;
	if (op != EPOLL_CTL_DEL && !ev)
		return -EFAULT;
	struct ep_state *inner = ep_get(fd);
	if (inner && op != EPOLL_CTL_DEL && inner != s) { /* nested: the outer one sees only the kernel */
		pthread_mutex_lock(&inner->mu);
		if (!inner->nested) {
			inner->nested = true;
			while (inner->list[INQ].n) /* the outer one waits on tokens: no hold may keep them back */
				in_del(inner, &inner->regs[inner->list[INQ].q[0]]);
			while (inner->list[OUTQ].n) /* (entries on it are live, so in the kernel) */
				out_to_kernel(fd, inner, &inner->regs[inner->list[OUTQ].q[0]]);
		}
		pthread_mutex_unlock(&inner->mu);
	}
	pthread_mutex_lock(&s->mu);
	struct ep_reg *r = reg_of(s, fd);
	int rc = 0;
	if (r && r->fdt != fdt_get(fd)) { /* the fd was closed and reopened without our close() seeing it */
		if (r->kreg && !r->live && s->pid == getpid())
			kernel_ctl(epfd, s, EPOLL_CTL_DEL, r, 0);
		r->held = false; /* its socket is gone: no token step on what the fd is now */
		reg_free(s, r);
		r = NULL;
	}
	switch (op) {
	case EPOLL_CTL_ADD:
	case EPOLL_CTL_MOD: {
		if (op == EPOLL_CTL_ADD ? (r && r->live) : (!r || !r->live)) {
			rc = op == EPOLL_CTL_ADD ? -EEXIST : fd_closed(fd) ? -EBADF : -ENOENT;
			break;
		}
		if (op == EPOLL_CTL_MOD && (ev->events & EPOLLEXCLUSIVE)) {
			rc = -EINVAL;
			break;
		}
		bool fresh = !r;
		if (fresh && !(r = reg_new(s, fd))) {
			rc = -ENOMEM;
			break;
		}
		if (fresh)
			r->fdt = fdt_get(fd);
		uint32_t events = ev->events;
		bool uout = want_uout(s, r, events);
		uint32_t need = kernel_needs(events, uout);
		if (r->kreg && lazy_ok(s, r, events) && !(r->kmask & EP_FLAGS) && (need & ~r->kmask) == 0) {
			/* the kernel watches for all of it already (maybe more: brought down when it shows) */
		} else {
			int kop = r->kreg ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
			if (kernel_ctl(epfd, s, kop, r, need) < 0) {
				rc = -errno;
				if (fresh)
					reg_free(s, r);
				break;
			}
			r->kmask = need;
			r->kreg = true;
		}
		r->events = events;
		r->data = ev->data;
		r->live = true;
		if (!uout || !out_add(s, r))
			out_to_kernel(epfd, s, r); /* (a no-op unless EPOLLOUT is asked and the kernel lacks it) */
		r->edge = (events & EPOLLET) != 0;
		r->fresh = true; /* (edge) the kernel would look at it now */
		if (want_uin(s, r, events))
			in_add(s, r); /* no memory: tokens, as without the table (the kernel has EPOLLIN) */
		else
			in_del(s, r);
		break;
	}
	case EPOLL_CTL_DEL:
		if (!r || !r->live) {
			rc = fdt_get(fd) == FDT_INTERNAL || fd_closed(fd) ? -EBADF : -ENOENT;
			break;
		}
		if (lazy_ok(s, r, r->events) && !(r->kmask & EP_FLAGS)) {
			r->live = false; /* kept in the kernel: a later ADD may need no call */
			out_del(s, r);
			in_del(s, r);
			break;
		}
		if (kernel_ctl(epfd, s, EPOLL_CTL_DEL, r, 0) < 0 && errno != ENOENT && errno != EBADF) {
			rc = -errno;
			break;
		}
		reg_free(s, r);
		break;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

SHIM_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	ep_resolve();
	struct ep_state *s = ep_get(epfd);
	if (SHIM_LIKELY(s == NULL)) {
		if (fdt_get(fd) == FDT_INTERNAL) {
			errno = EBADF; /* the shim's channels are not the program's */
			return -1;
		}
		return ep_real.ctl(epfd, op, fd, ev);
	}
	if (fdt_get(fd) == FDT_INTERNAL || fd == epfd) {
		errno = fd == epfd ? EINVAL : EBADF;
		return -1;
	}
	return shim_errno_ret(ep_ctl(epfd, s, op, fd, ev));
}

/* ---- waiting ---- */

/* What kind of readable a shim socket's token stands for (shim_token_step) */
static int tok_kind(uint32_t slot)
{
	if ((shim_slocal[slot].type & 0xf) == SOCK_DGRAM)
		return TOK_DGRAM;
	return (__atomic_load_n(&slot_of(slot)->state, __ATOMIC_ACQUIRE) & SL_SK_S_LISTENING) ? TOK_LISTEN : TOK_STREAM;
}

/* Put an event for entry r in the output, merged with one already there for it this call. */
static int emit(struct epoll_event *out, int n, struct ep_reg *r, uint32_t bits, uint64_t call)
{
	if (r->call == call) {
		out[r->outi].events |= bits;
		return n;
	}
	r->call = call;
	r->outi = n;
	out[n].events = bits;
	out[n].data = r->data;
	return n + 1;
}

/* The kernel says a shim socket's placeholder holds a token: is there something to read? Almost
 * always. But a token can outlive its data: a writer held up in the middle of putting it (a peer's
 * shim descheduled for more than the 50 ms a reader waits for a token being written: sock.h) stores
 * it after the reader gave up and took the data. The program must not hear of it -- wrk counts the
 * EAGAIN of such a wake-up as a read error -- so the token step takes such a byte out, and the event
 * stays only if data came meanwhile. */
static bool readable_now(struct ep_reg *r)
{
	uint32_t slot = r->fdt - 1;
	if (slot >= shim_nslots)
		return true;
	int kind = tok_kind(slot);
	if (shim_readable(slot, kind))
		return true;
	return shim_token_step(r->fd, slot, kind, true) != 0;
}

static void hold_all(struct ep_state *s)
{
	for (uint32_t k = 0; k < s->list[INQ].n; k++)
		in_hold(&s->regs[s->list[INQ].q[k]]);
}

/* An edge-triggered entry: has its mark moved since it was last reported or looked at (or was it
 * just added or modified)? Either way the mark is taken now: the next look starts from here. */
static bool edge_moved(struct ep_reg *r)
{
	uint64_t m = rx_mark(r->fdt - 1);
	bool moved = m != r->mark || r->fresh;
	r->mark = m;
	r->fresh = false;
	return moved;
}

/* A uin entry found readable here: EPOLLIN, and EPOLLRDHUP after the peer's end of stream when asked
 * (the placeholder says it too, a moment later); an edge-triggered one with EPOLLOUT as well when
 * asked and writable, as the kernel reports every ready event of an entry it wakes. */
static uint32_t in_bits(const struct ep_reg *r)
{
	uint32_t bits = EPOLLIN;
	if ((r->events & EPOLLRDHUP) && (__atomic_load_n(&slot_of(r->fdt - 1)->state, __ATOMIC_ACQUIRE) & SL_SK_S_RX_EOF))
		bits |= EPOLLRDHUP;
	if (r->edge && (r->events & EPOLLOUT) && shim_stream_writable(r->fdt - 1))
		bits |= EPOLLOUT;
	return bits;
}

/* The uin entries whose rings have something for recv: EPOLLIN; an edge-triggered one only when its
 * mark moved since it was last reported or looked at (the scan starts one further each call, so a
 * small maxevents is shared out). */
static int scan_in(struct ep_state *s, struct epoll_event *out, int n, int ucap, uint64_t call)
{
	const struct elist *in = &s->list[INQ];
	uint32_t start = in->n ? s->rot % in->n : 0;
	for (uint32_t k = 0; k < in->n && n < ucap; k++) {
		struct ep_reg *r = &s->regs[in->q[(start + k) % in->n]];
		uint32_t slot = r->fdt - 1;
		if (!r->edge) {
			if (shim_readable(slot, TOK_STREAM))
				n = emit(out, n, r, in_bits(r), call);
			continue;
		}
		if (edge_moved(r) && shim_readable(slot, TOK_STREAM))
			n = emit(out, n, r, in_bits(r), call);
	}
	return n;
}

/* Polling event loops (sock.h "Awake event loops"): with a polling engine (app_poll_us > 0), an
 * epoll_wait that found nothing looks at its rings (and asks the kernel without waiting) for that long
 * before it sleeps, holding its sockets' tokens back all the while: a reply that comes soon costs
 * neither side a system call or a wake-up. The kernel ends an epoll_wait with EINTR when a signal
 * handler runs, whatever SA_RESTART says, and a look cannot see a handler run: so signals stay
 * blocked while it polls (the synchronous ones excepted), and the sleep after it waits with the
 * program's own mask -- a signal that came meanwhile ends that wait with EINTR, as it would have. */
struct ep_spin {
	int64_t end_ns;    /* 0: not started */
	uint32_t us;       /* this poll's length */
	bool masked;       /* signals blocked; `saved` is the program's mask */
	sigset_t saved;
};
/* The poll's length adapts between app_poll_us and EP_POLL_GROW times that (as NICs moderate
 * interrupts): a sleep after a poll that an event ended sooner than the poll was long says the poll
 * was just too short -- the program paid a sleep and the peer a token for it -- so the next one is
 * twice as long; a sleep that lasted more than four polls' worth, or to its timeout, halves it. */
#define EP_POLL_GROW 4

/* true while this wait should poll instead of sleeping */
static bool ep_spinning(const struct ep_state *s, struct ep_spin *sp)
{
	if (sp->end_ns < 0 || !shim_region || s->list[INQ].n == 0 || s->blocked)
		return false; /* (another thread asleep in the kernel: the holds are let go, tokens flow) */
	int64_t t = shim_now_ns();
	if (sp->end_ns == 0) {
		uint32_t base = shim_app_poll_us();
		if (base == 0) {
			sp->end_ns = -1;
			return false;
		}
		uint32_t us = s->poll_us < base ? base : s->poll_us > EP_POLL_GROW * base ? EP_POLL_GROW * base : s->poll_us;
		sp->us = us;
		sp->end_ns = t + (int64_t)us * 1000;
		sigset_t all;
		sigfillset(&all);
		static const int sync_sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT };
		for (unsigned i = 0; i < sizeof(sync_sigs) / sizeof(sync_sigs[0]); i++)
			sigdelset(&all, sync_sigs[i]);
		sp->masked = pthread_sigmask(SIG_BLOCK, &all, &sp->saved) == 0;
		if (!sp->masked) {
			sp->end_ns = -1;
			return false;
		}
	}
	if (t < sp->end_ns)
		return true;
	sp->end_ns = -1;
	return false;
}

static int ep_wait_loop(int epfd, struct ep_state *s, struct epoll_event *out, int max, int timeout,
			const sigset_t *mask, struct ep_spin *sp)
{
	int64_t deadline = timeout > 0 ? shim_now_ns() / 1000000 + timeout : 0;
	struct epoll_event kev[256];
	for (;;) {
		uint64_t call = __atomic_add_fetch(&g_ep_calls, 1, __ATOMIC_RELAXED);
		int n = 0;
		pthread_mutex_lock(&s->mu);
		/* user-space EPOLLOUT first, leaving room for at least one kernel event; the scan starts
		 * one further each call so a long list shares out a small maxevents */
		int ucap = max > 1 ? max - 1 : 1;
		const struct elist *o = &s->list[OUTQ];
		uint32_t nout = o->n, start = nout ? s->rot++ % nout : 0, fall[64], nfall = 0;
		for (uint32_t k = 0; k < nout && n < ucap; k++) {
			uint32_t i = o->q[(start + k) % nout];
			if (shim_stream_writable(s->regs[i].fdt - 1))
				n = emit(out, n, &s->regs[i], EPOLLOUT, call);
			else if (nfall < 64)
				fall[nfall++] = i;
		}
		/* not writable: the kernel's placeholder answers (it turns writable when the ring has room) */
		for (uint32_t k = 0; k < nfall; k++)
			out_to_kernel(epfd, s, &s->regs[fall[k]]);
		n = scan_in(s, out, n, ucap, call);
		int kto = n ? 0 : timeout < 0 ? -1 : timeout == 0 ? 0 : (int)(deadline - shim_now_ns() / 1000000);
		if (kto < -1 || (timeout > 0 && kto < 0))
			kto = 0;
		bool spin = kto != 0 && ep_spinning(s, sp);
		if (spin)
			kto = 0;
		if (kto != 0 && s->list[INQ].n) {
			/* going to sleep: let go of every hold, so senders put tokens again, then one more look at
			 * the rings (data put before a sender saw the hold gone is there: sock.h) */
			for (uint32_t k = 0; k < s->list[INQ].n; k++)
				in_release(&s->regs[s->list[INQ].q[k]], false);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			n = scan_in(s, out, n, ucap, call);
			if (n)
				kto = 0;
		}
		if (kto != 0)
			s->blocked++;
		pthread_mutex_unlock(&s->mu);
		int kmax = max - n < (int)(sizeof(kev) / sizeof(kev[0])) ? max - n : (int)(sizeof(kev) / sizeof(kev[0]));
		/* a sleep after a poll: the program's mask (a signal blocked meanwhile ends it with EINTR) */
		const sigset_t *kmask = mask || !sp->masked || kto == 0 ? mask : &sp->saved;
		int64_t slept = kto != 0 && sp->us ? shim_now_ns() : 0;
		int k = kmax > 0 ? ep_real.pwait(epfd, kev, kmax, kto, kmask) : 0;
		int e = errno;
		if (slept)
			slept = shim_now_ns() - slept;
		pthread_mutex_lock(&s->mu);
		if (slept) { /* the sleep after a poll: was the poll too short, or longer than needed? */
			if (k > 0 && slept < (int64_t)sp->us * 1000)
				s->poll_us = sp->us * 2;
			else if (k <= 0 || slept > (int64_t)sp->us * 4000)
				s->poll_us = sp->us / 2;
		}
		if (kto != 0)
			s->blocked--;
		if (s->blocked == 0) /* awake again: hold the tokens back while the program works */
			hold_all(s);
		for (int j = 0; j < k; j++) {
			uint32_t idx = (uint32_t)kev[j].data.u64, gen = (uint32_t)(kev[j].data.u64 >> 32);
			if (idx >= s->nregs || s->regs[idx].gen != gen || !s->regs[idx].kreg)
				continue; /* an entry gone since (its kernel registration went with it) */
			struct ep_reg *r = &s->regs[idx];
			uint32_t want = r->live ? (r->events & ~(uint32_t)EP_FLAGS) | EP_ALWAYS : 0;
			uint32_t got = kev[j].events & want;
			if (kev[j].events & ~want) { /* the kernel's superset showed: bring it down to what is asked */
				if (!r->live) {
					kernel_ctl(epfd, s, EPOLL_CTL_DEL, r, 0);
					reg_free(s, r);
					continue;
				}
				uint32_t need = kernel_needs(r->events, r->uout);
				if (need != r->kmask && kernel_ctl(epfd, s, EPOLL_CTL_MOD, r, need) == 0)
					r->kmask = need;
			}
			if ((got & EPOLLIN) && fdt_is_sock(r->fdt) && !readable_now(r))
				got &= ~(uint32_t)(EPOLLIN | EPOLLRDNORM); /* a token byte with nothing behind it: gone now */
			if ((got & EPOLLIN) && r->uin && r->edge && !edge_moved(r))
				got &= ~(uint32_t)(EPOLLIN | EPOLLRDNORM); /* a token with nothing new (a poll() of this
				                                            * socket put it): no edge */
			if (got)
				n = emit(out, n, r, got, call);
		}
		pthread_mutex_unlock(&s->mu);
		if (n > 0)
			return n;
		if (k < 0)
			return -e;
		if (kto == 0 && (timeout == 0 || (timeout > 0 && shim_now_ns() / 1000000 >= deadline)))
			return 0;
		if (spin)
			sched_yield(); /* the peer may be waiting for this core */
		/* only events the program did not ask for, or polling: wait on */
	}
}

static int ep_wait(int epfd, struct ep_state *s, struct epoll_event *out, int max, int timeout,
		   const sigset_t *mask)
{
	if (max <= 0 || !out)
		return -EINVAL;
	struct ep_spin sp = { 0 };
	int r = ep_wait_loop(epfd, s, out, max, timeout, mask, &sp);
	if (sp.masked)
		pthread_sigmask(SIG_SETMASK, &sp.saved, NULL); /* a signal that came while polling runs now */
	return r;
}

SHIM_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout, const sigset_t *mask)
{
	ep_resolve();
	struct ep_state *s = ep_get(epfd);
	if (SHIM_LIKELY(s == NULL))
		return ep_real.pwait(epfd, events, maxevents, timeout, mask);
	return shim_errno_ret(ep_wait(epfd, s, events, maxevents, timeout, mask));
}

SHIM_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents, const struct timespec *timeout,
			     const sigset_t *mask)
{
	ep_resolve();
	struct ep_state *s = ep_get(epfd);
	if (SHIM_LIKELY(s == NULL)) {
		int (*real)(int, struct epoll_event *, int, const struct timespec *, const sigset_t *) =
			dlsym(RTLD_NEXT, "epoll_pwait2");
		if (!real)
			return shim_errno_ret(-ENOSYS);
		return real(epfd, events, maxevents, timeout, mask);
	}
	int ms = -1; /* to milliseconds, rounded up as the kernel rounds a wait up */
	if (timeout) {
		if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000L)
			return shim_errno_ret(-EINVAL);
		int64_t v = (int64_t)timeout->tv_sec * 1000 + (timeout->tv_nsec + 999999) / 1000000;
		ms = v > INT32_MAX ? INT32_MAX : (int)v;
	}
	return shim_errno_ret(ep_wait(epfd, s, events, maxevents, ms, mask));
}

SHIM_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	return epoll_pwait(epfd, events, maxevents, timeout, NULL);
}

/* ---- fds going away or being copied (shim_sock.c) ---- */

/* close(fd) of an epoll fd: its table goes with the last fd naming it */
void shim_ep_closing(int fd)
{
	if (!ep_get(fd))
		return;
	pthread_mutex_lock(&g_ep_lock);
	struct ep_state *s = ep_get(fd);
	if (s) {
		ep_set(fd, NULL);
		if (--s->refs == 0)
			state_free(s);
		else if (s->epfd == fd)
			s->epfd = another_fd(s);
	}
	pthread_mutex_unlock(&g_ep_lock);
}

/* close_range(): the epoll fds in [first, last] */
void shim_ep_closing_range(unsigned first, unsigned last)
{
	for (unsigned ci = first >> FDT_SHIFT; ci < FDT_TOP && ci <= (last >> FDT_SHIFT); ci++) {
		if (!__atomic_load_n(&ep_tab[ci], __ATOMIC_ACQUIRE))
			continue;
		for (unsigned i = 0; i < FDT_CHUNK; i++) {
			unsigned fd = ci << FDT_SHIFT | i;
			if (fd >= first && fd <= last)
				shim_ep_closing((int)fd);
		}
	}
}

/* dup of an epoll fd: the copy names the same table */
void shim_ep_dup(int old, int new)
{
	if (old == new)
		return;
	pthread_mutex_lock(&g_ep_lock);
	struct ep_state *s = ep_get(old), *prev = ep_get(new);
	if (prev != s) {
		if (prev && --prev->refs == 0)
			state_free(prev);
		if (s)
			s->refs++;
		ep_set(new, s);
	}
	pthread_mutex_unlock(&g_ep_lock);
}

/* A shim socket's fd is closing: its entries go, and so do their kernel registrations (the kernel
 * would keep one whose placeholder another fd still names, and report it under data we forgot) --
 * but only in the process that made the instance: a forked child (redis's BGSAVE closes its copies
 * of the listeners) shares the kernel instance with its parent, whose registrations must stay. */
void shim_ep_forget(int fd)
{
	pid_t me = getpid();
	pthread_mutex_lock(&g_ep_lock);
	for (struct ep_state *s = g_states; s; s = s->next) {
		pthread_mutex_lock(&s->mu);
		struct ep_reg *r = reg_of(s, fd);
		if (r) {
			if (r->kreg && s->pid == me)
				kernel_ctl(s->epfd, s, EPOLL_CTL_DEL, r, 0);
			reg_free(s, r);
		}
		pthread_mutex_unlock(&s->mu);
	}
	pthread_mutex_unlock(&g_ep_lock);
}

/* fork: the child's locks start free (a thread of the parent may have held one) */
void shim_ep_atfork_child(void)
{
	pthread_mutex_init(&g_ep_lock, NULL);
	for (struct ep_state *s = g_states; s; s = s->next)
		pthread_mutex_init(&s->mu, NULL);
}

/* ---- poll and select (sock.h "Awake event loops") ----
 * Not emulated: the kernel looks at the placeholders. But an event loop of this process (or of its
 * parent before a fork) may hold a socket's token back, so each shim socket polled for input counts
 * as a waiter for the call and gets its token step first. */

struct pwait {
	struct sl_sk_slot *small[16], **w;
	unsigned n;
};

static void pwait_add(struct pwait *p, int fd, unsigned cap)
{
	uint32_t e = fdt_get(fd);
	if (!fdt_is_sock(e) || e - 1 >= shim_nslots)
		return;
	if (p->n == 16 && p->w == p->small) {
		struct sl_sk_slot **w = malloc(cap * sizeof(*w));
		if (!w)
			return; /* no memory: this socket is polled as it was (the hold may delay it) */
		memcpy(w, p->small, sizeof(p->small));
		p->w = w;
	}
	if (p->n >= cap && p->w != p->small)
		return;
	shim_rx_wait_begin(fd, e - 1, tok_kind(e - 1), &p->w[p->n]);
	p->n++;
}

static void pwait_end(struct pwait *p)
{
	for (unsigned i = 0; i < p->n; i++)
		shim_rx_wait_end(p->w[i]);
	if (p->w != p->small)
		free(p->w);
}

static void pwait_poll(struct pwait *p, struct pollfd *fds, nfds_t n)
{
	p->w = p->small;
	p->n = 0;
	if (!shim_active || !shim_region)
		return;
	for (nfds_t i = 0; i < n; i++)
		if (fds[i].fd >= 0 && (fds[i].events & (POLLIN | POLLRDNORM | POLLPRI)))
			pwait_add(p, fds[i].fd, (unsigned)n);
}

static void pwait_select(struct pwait *p, int nfds, fd_set *rd)
{
	p->w = p->small;
	p->n = 0;
	if (!shim_active || !shim_region || !rd || nfds <= 0)
		return;
	if (nfds > FD_SETSIZE)
		nfds = FD_SETSIZE;
	for (int fd = 0; fd < nfds; fd++)
		if (FD_ISSET(fd, rd))
			pwait_add(p, fd, (unsigned)nfds);
}

SHIM_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	int (*real)(struct pollfd *, nfds_t, int) = REAL(poll);
	struct pwait p;
	pwait_poll(&p, fds, nfds);
	int r = real(fds, nfds, timeout); /* a token put by the step shows there (perhaps a moment later) */
	int e = errno;
	pwait_end(&p);
	errno = e;
	return r;
}

SHIM_EXPORT int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < nfds)
		abort(); /* what glibc's own check does */
	return poll(fds, nfds, timeout);
}

SHIM_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *tmo, const sigset_t *mask)
{
	static int (*real)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	if (!real)
		real = dlsym(RTLD_NEXT, "ppoll");
	struct pwait p;
	pwait_poll(&p, fds, nfds);
	int r = real(fds, nfds, tmo, mask);
	int e = errno;
	pwait_end(&p);
	errno = e;
	return r;
}

SHIM_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *tmo, const sigset_t *mask,
			    size_t fdslen)
{
	if (fdslen / sizeof(*fds) < nfds)
		abort();
	return ppoll(fds, nfds, tmo, mask);
}

SHIM_EXPORT int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tmo)
{
	static int (*real)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	if (!real)
		real = dlsym(RTLD_NEXT, "select");
	struct pwait p;
	pwait_select(&p, nfds, rd);
	int r = real(nfds, rd, wr, ex, tmo);
	int e = errno;
	pwait_end(&p);
	errno = e;
	return r;
}

SHIM_EXPORT int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *tmo, const sigset_t *mask)
{
	static int (*real)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
	if (!real)
		real = dlsym(RTLD_NEXT, "pselect");
	struct pwait p;
	pwait_select(&p, nfds, rd);
	int r = real(nfds, rd, wr, ex, tmo, mask);
	int e = errno;
	pwait_end(&p);
	errno = e;
	return r;
}
