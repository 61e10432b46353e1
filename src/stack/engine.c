/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The engine: accepts programs' channels (one per thread), gives each program its region, performs
 * socket calls (NQEs) in the stack module of the program's choice, and serves ready sockets
 * round-robin from one epoll loop. Also the control socket (stack-ctl.sock, newline-delimited JSON).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "stackd.h"

#define TURN_BYTES (256u * 1024u) /* what one socket may move per turn before the next one's */
#define CTL_LINE_MAX 4096

static struct stackd_cfg cfg;
static int listen_fd = -1, ctl_listen_fd = -1;
static struct ev ev_listen = { EV_LISTEN, NULL }, ev_ctl_listen = { EV_CTL_LISTEN, NULL };
static char path_stack[108], path_ctl[108];
static uint64_t next_app_id = 1, start_ns, calls_total, protocol_errors;
static int unpriv_port_start = 1024;

struct ctl {
	int fd;
	struct ev ev;
	char buf[CTL_LINE_MAX];
	size_t len;
};

/* ---- setup ---- */

static int listen_unix(const char *path, int type, mode_t mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		sk_log("socket path %s is too long", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	unlink(path); /* a stale socket of a killed sluice-stackd */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, mode) < 0 || listen(fd, 128) < 0) {
		sk_log("cannot listen on %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

int engine_init(const struct stackd_cfg *c)
{
	cfg = *c;
	g_direct = !cfg.no_direct;
	start_ns = now_ns();
	FILE *f = fopen("/proc/sys/net/ipv4/ip_unprivileged_port_start", "r");
	if (f) {
		if (fscanf(f, "%d", &unpriv_port_start) != 1)
			unpriv_port_start = 1024;
		fclose(f);
	}
	g_epfd = epoll_create1(EPOLL_CLOEXEC);
	if (g_epfd < 0)
		return -1;
	snprintf(path_stack, sizeof(path_stack), "%s/%s", cfg.socket_dir, SL_SK_SOCKET_NAME);
	snprintf(path_ctl, sizeof(path_ctl), "%s/stack-ctl.sock", cfg.socket_dir);
	/* any user's program may use the service (privileged ports are checked per call) */
	listen_fd = listen_unix(path_stack, SOCK_SEQPACKET, 0666);
	ctl_listen_fd = listen_unix(path_ctl, SOCK_STREAM, 0660);
	if (listen_fd < 0 || ctl_listen_fd < 0)
		return -1;
	if (sk_epoll_add(listen_fd, &ev_listen, EPOLLIN) < 0 || sk_epoll_add(ctl_listen_fd, &ev_ctl_listen, EPOLLIN) < 0)
		return -1;
	if (cfg.user && ustack_init(cfg.user) < 0)
		return -1;
	return 0;
}

void engine_fini(void)
{
	ustack_fini();
	if (listen_fd >= 0) {
		close(listen_fd);
		unlink(path_stack);
	}
	if (ctl_listen_fd >= 0) {
		close(ctl_listen_fd);
		unlink(path_ctl);
	}
}

/* ---- programs ---- */

static struct app *app_new(const struct sl_nqe_hello *h, int stack, uint64_t rate, uid_t uid)
{
	struct app *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->nslots = cfg.slots;
	a->ring_bytes = cfg.ring_bytes;
	uint64_t slot_bytes = 4096 + 2ull * cfg.ring_bytes;
	a->size = sizeof(struct sl_sk_region) + (uint64_t)a->nslots * slot_bytes;
	a->socks = calloc(a->nslots, sizeof(*a->socks));
	a->memfd = memfd_create("sluice-sk-region", MFD_CLOEXEC);
	if (!a->socks || a->memfd < 0 || ftruncate(a->memfd, (off_t)a->size) < 0)
		goto fail;
	a->base = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_SHARED, a->memfd, 0);
	if (a->base == MAP_FAILED)
		goto fail;
	a->id = next_app_id++;
	if (getrandom(a->token, sizeof(a->token), 0) != sizeof(a->token))
		goto fail_map;
	a->token[0] |= 1; /* never all zero: zero means "new program" */
	memcpy(a->name, h->name, sizeof(a->name) - 1);
	for (char *p = a->name; *p; p++)
		if (*p < 0x20 || *p == '"' || *p == '\\' || (unsigned char)*p > 0x7e)
			*p = '?';
	a->stack = stack;
	a->rate_Bps = rate;
	a->uid = uid;
	a->bucket_ns = now_ns();
	struct sl_sk_region *r = a->base;
	r->magic = SL_SK_MAGIC;
	r->version = SL_SK_VERSION;
	r->size = a->size;
	r->nslots = a->nslots;
	r->ring_bytes = a->ring_bytes;
	r->slot_bytes = slot_bytes;
	r->app_id = a->id;
	memcpy(r->token, a->token, sizeof(r->token));
	r->engine_awake = 1; /* it is: this is a HELLO being answered */
	r->app_poll_us = cfg.poll_us; /* apps poll as long as the engine does (sock.h "Polling receivers") */
	a->next = g_apps;
	g_apps = a;
	return a;
fail_map:
	munmap(a->base, a->size);
fail:
	if (a->memfd >= 0)
		close(a->memfd);
	free(a->socks);
	free(a);
	return NULL;
}

static void app_add_pid(struct app *a, pid_t pid)
{
	for (uint32_t i = 0; i < a->npids; i++)
		if (a->pids[i] == pid)
			return;
	if (a->npids < sizeof(a->pids) / sizeof(a->pids[0]))
		a->pids[a->npids++] = pid;
}

/* ---- channels ---- */

static void chan_close(struct chan *ch)
{
	close(ch->fd);
	if (ch->app)
		app_put(ch->app);
	free(ch);
}

static void chan_accept(void)
{
	for (;;) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		struct chan *ch = calloc(1, sizeof(*ch));
		struct ucred cr;
		socklen_t cl = sizeof(cr);
		if (!ch || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
			free(ch);
			close(fd);
			continue;
		}
		ch->fd = fd;
		ch->pid = cr.pid;
		ch->uid = cr.uid;
		ch->ev = (struct ev){ EV_CHAN, ch };
		if (sk_epoll_add(fd, &ch->ev, EPOLLIN) < 0)
			chan_close(ch);
	}
}

/* one completion: the NQE, its payload and maybe one fd */
static int reply(struct chan *ch, struct sl_nqe *q, const void *payload, size_t plen, int fd)
{
	if (plen > SL_NQE_PAYLOAD_MAX) {
		plen = SL_NQE_PAYLOAD_MAX;
		q->flags |= SL_NQE_F_PAYLOAD_CUT;
	}
	q->len = (uint16_t)plen;
	struct iovec iov[2] = { { q, sizeof(*q) }, { (void *)payload, plen } };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = plen ? 2 : 1 };
	if (fd >= 0) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	/* the shim waits for this answer: a channel too full to take it belongs to a program that
	 * does not follow the protocol */
	return sendmsg(ch->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 ? -errno : 0;
}

static struct sk *sk_of(struct chan *ch, uint32_t slot)
{
	if (!ch->app || slot >= ch->app->nslots)
		return NULL;
	return ch->app->socks[slot];
}

static int check_addr(struct sk *s, const uint8_t *p, uint16_t len, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (len < sizeof(sa_family_t) || len > sizeof(*ss))
		return -EINVAL;
	memcpy(ss, p, len);
	if (ss->ss_family == AF_INET && len >= sizeof(struct sockaddr_in) && s->domain == AF_INET)
		return sizeof(struct sockaddr_in);
	if (ss->ss_family == AF_INET6 && len >= sizeof(struct sockaddr_in6) && s->domain == AF_INET6)
		return sizeof(struct sockaddr_in6);
	if (ss->ss_family == AF_INET && s->domain == AF_INET6)
		return -EAFNOSUPPORT;
	if (ss->ss_family != AF_INET && ss->ss_family != AF_INET6)
		return -EAFNOSUPPORT;
	return -EINVAL;
}

static int auto_register(struct sk *s)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockname(s->kfd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	return shm_bind(s, (struct sockaddr *)&ss, sl);
}

static int op_socket(struct chan *ch, struct sl_nqe *q, int *fd_out)
{
	int domain = (int)q->arg0, type = (int)q->arg1;
	if (domain != AF_INET && domain != AF_INET6)
		return -EAFNOSUPPORT;
	if (type != SOCK_STREAM && type != SOCK_DGRAM)
		return -EPROTONOSUPPORT;
	struct sk *s = sk_new(ch->app, domain, type);
	if (!s)
		return -EMFILE;
	int rc = 0;
	if (ch->app->stack == SL_SK_STACK_USER)
		rc = ustack_socket(s);
	else if (ch->app->stack != SL_SK_STACK_SHM)
		rc = kstack_socket(s);
	if (!rc)
		rc = sk_make_placeholder(s);
	if (rc) {
		sk_free(s);
		return rc;
	}
	*fd_out = s->app_fd;
	return (int)s->slot;
}

static int op_bind(struct chan *ch, struct sk *s, const uint8_t *p, uint16_t len)
{
	struct sockaddr_storage ss;
	int sl = check_addr(s, p, len, &ss);
	if (sl < 0)
		return sl;
	if (s->local_len || s->state != SK_NEW)
		return -EINVAL;
	uint16_t port = addr_port(&ss);
	if (port && port < unpriv_port_start && ch->uid != 0)
		return -EACCES; /* sluice-stackd is root: it binds only what the caller could */
	int rc;
	switch (ch->app->stack) {
	case SL_SK_STACK_USER:
		return ustack_bind(s, (struct sockaddr *)&ss, (socklen_t)sl);
	case SL_SK_STACK_KERNEL:
		rc = kstack_bind(s, (struct sockaddr *)&ss, (socklen_t)sl);
		if (!rc)
			s->state = SK_BOUND;
		return rc;
	case SL_SK_STACK_SHM:
		return shm_bind(s, (struct sockaddr *)&ss, (socklen_t)sl);
	default:
		rc = kstack_bind(s, (struct sockaddr *)&ss, (socklen_t)sl);
		return rc ? rc : auto_register(s);
	}
}

static int op_listen(struct sk *s, int backlog)
{
	if (s->type != SOCK_STREAM)
		return -EOPNOTSUPP;
	if (s->state == SK_CONNECTED || s->state == SK_CONNECTING)
		return -EINVAL;
	if (backlog < 0 || backlog > 65535)
		backlog = 4096;
	int rc = 0;
	if (s->app->stack == SL_SK_STACK_USER)
		rc = ustack_listen(s, backlog);
	else if (s->kfd >= 0)
		rc = kstack_listen(s, backlog);
	if (!rc && s->app->stack == SL_SK_STACK_AUTO && !s->in_table)
		rc = auto_register(s);
	if (!rc && s->app->stack != SL_SK_STACK_KERNEL && s->app->stack != SL_SK_STACK_USER)
		rc = shm_listen(s, backlog);
	if (rc)
		return rc;
	s->state = SK_LISTEN;
	sk_set_state(s, SL_SK_S_LISTENING, 0);
	return 0;
}

static int op_connect(struct sk *s, const uint8_t *p, uint16_t len)
{
	struct sockaddr_storage ss;
	if (s->type == SOCK_DGRAM && len >= sizeof(sa_family_t) && ((const struct sockaddr *)(const void *)p)->sa_family == AF_UNSPEC) {
		s->remote_len = 0;
		if (s->kfd >= 0) {
			struct sockaddr un = { .sa_family = AF_UNSPEC };
			connect(s->kfd, &un, sizeof(un));
		}
		return 0;
	}
	int sl = check_addr(s, p, len, &ss);
	if (sl < 0)
		return sl;
	const struct sockaddr *sa = (const struct sockaddr *)&ss;
	int stack = s->app->stack;
	if (stack == SL_SK_STACK_USER) {
		if (s->type == SOCK_STREAM && s->state == SK_CONNECTED)
			return -EISCONN;
		if (s->type == SOCK_STREAM && s->state == SK_CONNECTING)
			return -EALREADY;
		if (s->state == SK_LISTEN)
			return -EINVAL;
		return ustack_connect(s, sa, (socklen_t)sl);
	}
	if (s->type == SOCK_DGRAM) {
		if (stack == SL_SK_STACK_SHM)
			return shm_dgram_connect(s, sa, (socklen_t)sl);
		int rc = kstack_connect(s, sa, (socklen_t)sl);
		if (rc)
			return rc;
		memcpy(&s->remote, &ss, (size_t)sl);
		s->remote_len = (socklen_t)sl;
		return stack == SL_SK_STACK_AUTO && !s->in_table ? auto_register(s) : 0;
	}
	if (s->state == SK_CONNECTED)
		return -EISCONN;
	if (s->state == SK_CONNECTING)
		return -EALREADY;
	if (s->state == SK_LISTEN)
		return -EINVAL;
	if (stack != SL_SK_STACK_KERNEL) {
		struct sk *l = addr_is_local(sa) ? shm_find_listener(sa, SOCK_STREAM) : NULL;
		if (l) {
			int rc = shm_connect(s, l, sa, (socklen_t)sl);
			if (!rc && s->kfd >= 0)
				kstack_close(s); /* auto: the kernel socket made at socket() is not needed */
			return rc;
		}
		if (stack == SL_SK_STACK_SHM)
			return -ECONNREFUSED;
	}
	return kstack_connect(s, sa, (socklen_t)sl);
}

static int op_accept(struct sk *l, int *fd_out, struct sockaddr_storage *peer, socklen_t *plen)
{
	if (l->state != SK_LISTEN)
		return -EINVAL;
	struct sk *a = NULL;
	int rc = shm_accept(l, &a);
	if (rc == -EAGAIN && l->kfd >= 0) {
		rc = kstack_accept(l, &a);
		if (!rc && (rc = sk_make_placeholder(a)) != 0)
			sk_free(a);
	}
	sk_listener_update(l);
	if (rc)
		return rc;
	*fd_out = a->app_fd;
	*peer = a->remote;
	*plen = a->remote_len;
	sk_work(a); /* data may have come before accept */
	return (int)a->slot;
}

/* sock.h SL_NQE_ATTACH: what the shim of a direct end needs, one fd per call */
static int op_attach(struct sk *s, uint64_t what, int *fd_out)
{
	if (!s->conn)
		return -EINVAL;
	if (what == 0) {
		*fd_out = s->conn->memfd;
		return (int)s->half;
	}
	if (!s->peer || s->peer->efd < 0 || s->peer->app_closed || s->peer->efd_shut)
		return -ENOTCONN;
	*fd_out = s->peer->efd;
	return 0;
}

static int op_shutdown(struct sk *s, int how)
{
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	if (s->type == SOCK_STREAM && s->state != SK_CONNECTED)
		return -ENOTCONN;
	if (how != SHUT_WR) {
		if (s->kfd >= 0)
			kstack_shutdown(s, SHUT_RD);
		sk_set_state(s, SL_SK_S_RX_EOF, 0);
	}
	if (how != SHUT_RD) {
		s->shut_wr = true;
		sk_set_state(s, SL_SK_S_SHUT_WR, 0);
	}
	sk_work(s);
	return 0;
}

static int op_name(struct sk *s, bool peer, struct sockaddr_storage *ss, socklen_t *sl)
{
	*sl = sizeof(*ss);
	if (s->mode == SL_SK_STACK_USER)
		return ustack_name(s, peer, ss, sl);
	if (s->kfd >= 0 && s->mode != SL_SK_STACK_SHM) {
		int r = peer ? getpeername(s->kfd, (struct sockaddr *)ss, sl) : getsockname(s->kfd, (struct sockaddr *)ss, sl);
		return r < 0 ? -errno : 0;
	}
	if (peer) {
		if (!s->remote_len || (s->type == SOCK_STREAM && s->state != SK_CONNECTED))
			return -ENOTCONN;
		*ss = s->remote;
		*sl = s->remote_len;
		return 0;
	}
	if (s->local_len) {
		*ss = s->local;
		*sl = s->local_len;
	} else {
		memset(ss, 0, sizeof(*ss));
		ss->ss_family = (sa_family_t)s->domain;
		*sl = s->domain == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	}
	return 0;
}

static int op_setsockopt(struct sk *s, int level, int name, const uint8_t *p, uint16_t len)
{
	int v = 0;
	if (len >= sizeof(int))
		memcpy(&v, p, sizeof(int));
	bool known = true;
	if (level == SOL_SOCKET && name == SO_REUSEADDR)
		s->reuseaddr = v;
	else if (level == SOL_SOCKET && name == SO_KEEPALIVE)
		s->keepalive = v;
	else if (level == IPPROTO_TCP && name == TCP_NODELAY)
		s->nodelay = v;
	else if (level == IPPROTO_IPV6 && name == IPV6_V6ONLY)
		s->v6only = v;
	else
		known = false;
	if (s->kfd >= 0) {
		if (setsockopt(s->kfd, level, name, p, len) < 0)
			return -errno;
		sk_dopt_set(s, level, name, p, len); /* the kernel took it: the shim shows its cmsgs */
		return 0;
	}
	if (known && s->mode == SL_SK_STACK_USER)
		ustack_sockopt(s);
	int d = sk_dopt_set(s, level, name, p, len); /* IP_TTL, IP_PKTINFO, SO_TIMESTAMP...: kept, or refused */
	if (d <= 0)
		return d;
	if (!known)
		s->app->unknown_opts++; /* shm: accepted and counted (docs/sockets.md) */
	return 0;
}

static int op_getsockopt(struct sk *s, int level, int name, uint32_t optlen, uint8_t *out)
{
	if (optlen > SL_NQE_PAYLOAD_MAX)
		optlen = SL_NQE_PAYLOAD_MAX;
	int v;
	if (level == SOL_SOCKET) {
		switch (name) {
		case SO_ERROR:
			v = s->sh->error;
			s->sh->error = 0;
			if (!v && s->kfd >= 0) {
				socklen_t l = sizeof(v);
				getsockopt(s->kfd, SOL_SOCKET, SO_ERROR, &v, &l);
			}
			goto int_out;
		case SO_TYPE:
			v = s->type;
			goto int_out;
		case SO_DOMAIN:
			v = s->domain;
			goto int_out;
		case SO_PROTOCOL:
			v = s->type == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP;
			goto int_out;
		case SO_ACCEPTCONN:
			v = s->state == SK_LISTEN;
			goto int_out;
		}
	}
	if (s->kfd >= 0) {
		socklen_t l = optlen;
		if (getsockopt(s->kfd, level, name, out, &l) < 0)
			return -errno;
		return (int)l;
	}
	int d = sk_dopt_get(s, level, name, &v);
	if (d < 0)
		return d;
	if (d == 0)
		goto int_out;
	v = 0;
	if (level == SOL_SOCKET && (name == SO_RCVBUF || name == SO_SNDBUF))
		v = (int)s->rb;
	else if (level == SOL_SOCKET && name == SO_REUSEADDR)
		v = s->reuseaddr;
	else if (level == SOL_SOCKET && name == SO_KEEPALIVE)
		v = s->keepalive;
	else if (level == IPPROTO_TCP && name == TCP_NODELAY)
		v = s->nodelay;
	else if (level == IPPROTO_IPV6 && name == IPV6_V6ONLY)
		v = s->v6only;
	else if (level == IPPROTO_TCP && name == TCP_MAXSEG)
		v = 65483; /* loopback's MSS: what programs that size their writes by it expect */
	else if (level == IPPROTO_TCP && name == TCP_INFO) {
		/* no TCP here: an established connection with loopback's segment size, nothing lost */
		struct tcp_info ti = { .tcpi_state = s->state == SK_CONNECTED ? TCP_ESTABLISHED : TCP_CLOSE,
				       .tcpi_snd_mss = 65483, .tcpi_rcv_mss = 65483, .tcpi_snd_cwnd = 10,
				       .tcpi_pmtu = 65535, .tcpi_advmss = 65483 };
		uint32_t n = optlen < sizeof(ti) ? optlen : (uint32_t)sizeof(ti);
		memcpy(out, &ti, n);
		return (int)n;
	} else if (optlen > sizeof(int)) { /* another struct: zeros */
		memset(out, 0, optlen);
		return (int)optlen;
	}
int_out:
	if (optlen < sizeof(int)) {
		memcpy(out, &v, optlen);
		return (int)optlen;
	}
	memcpy(out, &v, sizeof(int));
	return sizeof(int);
}

static const char *stack_name(int stack)
{
	return stack == SL_SK_STACK_KERNEL ? "kernel" : stack == SL_SK_STACK_SHM ? "shm" : stack == SL_SK_STACK_USER ? "user" : "auto";
}

static size_t app_json(struct app *a, char *buf, size_t cap)
{
	uint64_t tx = a->tx_bytes, rx = a->rx_bytes; /* and what its direct sockets moved so far */
	for (uint32_t i = 0, seen = 0; i < a->nslots && seen < a->nsocks; i++) {
		struct sk *s = a->socks[i];
		if (!s)
			continue;
		seen++;
		uint64_t t, r;
		sk_direct_bytes(s, &t, &r);
		tx += t;
		rx += r;
	}
	size_t n = (size_t)snprintf(buf, cap, "{\"id\":%llu,\"name\":\"%s\",\"pids\":[", (unsigned long long)a->id, a->name);
	for (uint32_t i = 0; i < a->npids && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%d", i ? "," : "", a->pids[i]);
	if (n < cap)
		n += (size_t)snprintf(buf + n, cap - n,
			"],\"stack\":\"%s\",\"rate_bps\":%llu,\"sockets\":%u,\"tx_bytes\":%llu,\"rx_bytes\":%llu,"
			"\"throttled\":%llu,\"conns_kernel\":%llu,\"conns_shm\":%llu,\"conns_user\":%llu,\"calls\":%llu,"
			"\"unknown_options\":%llu,\"resets\":%llu,\"region_bytes\":%llu}",
			stack_name(a->stack), (unsigned long long)a->rate_Bps * 8, a->nsocks,
			(unsigned long long)tx, (unsigned long long)rx,
			(unsigned long long)a->throttled, (unsigned long long)a->conns_kernel,
			(unsigned long long)a->conns_shm, (unsigned long long)a->conns_user, (unsigned long long)a->calls,
			(unsigned long long)a->unknown_opts, (unsigned long long)a->resets,
			(unsigned long long)a->size);
	return n < cap ? n : cap - 1;
}

static int op_hello(struct chan *ch, struct sl_nqe *q, const uint8_t *p, uint16_t len, int *fd_out)
{
	if (ch->app)
		return -EISCONN;
	if (len < sizeof(struct sl_nqe_hello))
		return -EINVAL;
	struct sl_nqe_hello h;
	memcpy(&h, p, sizeof(h));
	h.name[sizeof(h.name) - 1] = 0;
	if (h.version != SL_SK_VERSION)
		return -EPROTO;
	static const uint8_t zero[16];
	if (!memcmp(h.token, zero, sizeof(zero))) {
		int stack = (int)q->arg0;
		if (stack < SL_SK_STACK_KERNEL || stack > SL_SK_STACK_USER)
			return -EINVAL;
		if (stack == SL_SK_STACK_USER && !ustack_enabled())
			return -EPROTONOSUPPORT; /* the shim says: no user module here */
		struct app *a = app_new(&h, stack, q->arg1, ch->uid);
		if (!a)
			return -ENOMEM;
		ch->app = a;
		a->refs = 1;
		*fd_out = a->memfd;
	} else {
		struct app *a;
		for (a = g_apps; a; a = a->next)
			if (!memcmp(a->token, h.token, sizeof(h.token)))
				break;
		if (!a)
			return -ENOENT;
		ch->app = a;
		a->refs++;
	}
	app_add_pid(ch->app, ch->pid);
	q->arg0 = ch->app->size;
	q->arg1 = ch->app->id;
	return 0;
}

static void chan_call(struct chan *ch, struct sl_nqe *q, const uint8_t *p, uint16_t len)
{
	uint8_t out[SL_NQE_PAYLOAD_MAX];
	size_t olen = 0;
	int fd = -1, rc;
	struct sockaddr_storage ss;
	socklen_t sl;
	calls_total++;
	if (q->op == SL_NQE_HELLO) {
		rc = op_hello(ch, q, p, len, &fd);
		goto done;
	}
	if (!ch->app) {
		rc = -EPROTO;
		goto done;
	}
	ch->app->calls++;
	if (q->op == SL_NQE_SOCKET) {
		rc = op_socket(ch, q, &fd);
		goto done;
	}
	if (q->op == SL_NQE_STATS) {
		olen = app_json(ch->app, (char *)out, sizeof(out));
		rc = 0;
		goto done;
	}
	struct sk *s = sk_of(ch, q->sock);
	if (!s || s->app_closed) {
		rc = -EBADF;
		goto done;
	}
	switch (q->op) {
	case SL_NQE_BIND:
		rc = op_bind(ch, s, p, len);
		break;
	case SL_NQE_LISTEN:
		rc = op_listen(s, (int)(int64_t)q->arg0);
		break;
	case SL_NQE_ACCEPT:
		rc = op_accept(s, &fd, &ss, &sl);
		if (rc >= 0) {
			memcpy(out, &ss, sl);
			olen = sl;
		}
		break;
	case SL_NQE_CONNECT:
		rc = op_connect(s, p, len);
		break;
	case SL_NQE_SHUTDOWN:
		rc = op_shutdown(s, (int)q->arg0);
		break;
	case SL_NQE_GETSOCKNAME:
	case SL_NQE_GETPEERNAME:
		rc = op_name(s, q->op == SL_NQE_GETPEERNAME, &ss, &sl);
		if (!rc) {
			memcpy(out, &ss, sl);
			olen = sl;
		}
		break;
	case SL_NQE_SETSOCKOPT:
		rc = op_setsockopt(s, (int)q->arg0, (int)q->arg1, p, len);
		break;
	case SL_NQE_GETSOCKOPT:
		rc = op_getsockopt(s, (int)q->arg0, (int)(uint32_t)q->arg1, (uint32_t)(q->arg1 >> 32), out);
		if (rc >= 0)
			olen = (size_t)rc;
		break;
	case SL_NQE_CONNECT_DGRAM_CLEAR: {
		struct sockaddr un = { .sa_family = AF_UNSPEC };
		rc = op_connect(s, (const uint8_t *)&un, sizeof(un));
		break;
	}
	case SL_NQE_KICK:
		rc = 0;
		break;
	case SL_NQE_ATTACH:
		rc = op_attach(s, q->arg0, &fd);
		break;
	default:
		rc = -EOPNOTSUPP;
	}
	sk_work(s); /* every call on a socket gets it served: that is what a KICK is for */
done:
	q->result = rc;
	int sent = reply(ch, q, out, olen, fd);
	/* an fd the app now has a copy of (or never will): ours goes, except the region's */
	if (fd >= 0 && q->op != SL_NQE_HELLO) {
		struct sk *s2 = rc >= 0 ? sk_of(ch, (uint32_t)rc) : NULL;
		if (s2 && s2->app_fd == fd && q->op != SL_NQE_ATTACH) {
			close(fd);
			s2->app_fd = -1;
			if (sent < 0) /* the app never gets it: the socket is as good as closed */
				sk_app_closed(s2);
		}
	}
	if (sent < 0)
		protocol_errors++;
}

static void chan_read(struct chan *ch)
{
	uint8_t buf[sizeof(struct sl_nqe) + SL_NQE_PAYLOAD_MAX + 1];
	for (;;) {
		ssize_t n = recv(ch->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			chan_close(ch);
			return;
		}
		struct sl_nqe q;
		if ((size_t)n < sizeof(q)) {
			protocol_errors++;
			chan_close(ch);
			return;
		}
		memcpy(&q, buf, sizeof(q));
		if (q.len != (size_t)n - sizeof(q)) {
			protocol_errors++;
			chan_close(ch);
			return;
		}
		q.flags &= (uint8_t)~SL_NQE_F_PAYLOAD_CUT;
		chan_call(ch, &q, buf + sizeof(q), q.len);
	}
}

/* ---- serving sockets ---- */

static void close_now(struct sk *s)
{
	ustack_close(s);
	shm_close(s);
	kstack_close(s);
	sk_free(s);
}

static void service(struct sk *s)
{
	sl_sk_xchg(&s->sh->tx_kick, 0);
	if (!s->broken && !sk_ring_sane(s)) {
		sk_log("app %s (id %llu) socket %u: ring indices out of range; socket reset", s->app->name,
		       (unsigned long long)s->app->id, s->slot);
		sk_reset(s, ECONNRESET);
		if (s->peer) /* the connection is dead at both ends */
			sk_reset(s->peer, ECONNRESET);
		if (s->kfd >= 0) { /* the kernel peer gets a reset, not an orderly end */
			struct linger lg = { 1, 0 };
			setsockopt(s->kfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			kstack_close(s);
		}
	}
	if (s->state == SK_LISTEN) {
		sk_listener_update(s);
	} else if (s->mode == SL_SK_STACK_USER) {
		ustack_service(s, TURN_BYTES);
	} else if (s->mode == SL_SK_STACK_SHM || s->peer || (s->type == SOCK_DGRAM && s->kfd < 0)) {
		shm_service(s, TURN_BYTES);
		if (s->peer && s->peer->app_closed)
			sk_work(s->peer);
		if (s->conn && s->peer && s->peer->bytes_waiting) /* this end took data: the peer may write again */
			sk_drain_bytes(s->peer);
	} else if (s->kfd >= 0) {
		kstack_service(s, TURN_BYTES);
	}
	if (s->bytes_waiting)
		sk_drain_bytes(s);
	sk_token(s);
	if (!s->app_closed)
		return;
	/* closed by the app: what it sent still goes out first, as from a kernel socket's buffer */
	bool flushed = s->broken || s->type == SOCK_DGRAM || s->state != SK_CONNECTED || !sk_tx_used(s) ||
		       (s->mode == SL_SK_STACK_SHM && !s->peer);
	if (s->mode == SL_SK_STACK_SHM && s->peer && !s->shut_wr_done)
		flushed = false;
	if (s->conn) /* what it sent is in the peer's ring, which outlives it */
		flushed = s->broken || !s->peer || s->shut_wr_done;
	if (flushed)
		close_now(s);
}

static void serve_work(void)
{
	/* one turn for each socket on the list now; what they put back waits for the next round */
	size_t n = 0;
	for (struct sk *s = NULL; (s = sk_work_pop()) != NULL;) {
		service(s);
		if (++n >= 4096)
			break;
	}
}

/* ---- control socket ---- */

static void ctl_close(struct ctl *c)
{
	close(c->fd);
	free(c);
}

/* bytes the engine wrote into a placeholder that the app has not read yet (its tokens) */
static int outq(int fd)
{
	int n = -1;
	if (fd >= 0)
		ioctl(fd, SIOCOUTQ, &n);
	return n;
}

static void ctl_answer(struct ctl *c, const char *line)
{
	size_t cap = 65536 + (size_t)g_nsocks * 1024; /* a socket's line is under 1000 bytes */
	for (struct app *a = g_apps; a; a = a->next)
		cap += 1024;
	char *out = malloc(cap);
	if (!out)
		return;
	size_t n;
	uint64_t region = 0, napps = 0;
	for (struct app *a = g_apps; a; a = a->next) {
		region += a->size;
		napps++;
	}
	if (strstr(line, "\"status\"")) {
		n = (size_t)snprintf(out, cap,
			"{\"ok\":true,\"version\":\"%s\",\"pid\":%d,\"uptime_s\":%.1f,\"apps\":%llu,\"sockets\":%llu,"
			"\"region_bytes\":%llu,\"poll_us\":%u,\"direct\":%s,\"socket\":\"%s\",\"user\":",
			STACKD_VERSION, getpid(), (double)(now_ns() - start_ns) / 1e9, (unsigned long long)napps,
			(unsigned long long)g_nsocks, (unsigned long long)region, cfg.poll_us, g_direct ? "true" : "false",
			path_stack);
		n += ustack_status(out + n, cap - n - 4);
		n += (size_t)snprintf(out + n, cap - n, "}\n");
	} else if (strstr(line, "\"stats\"") || strstr(line, "\"apps\"")) {
		n = (size_t)snprintf(out, cap, "{\"ok\":true,\"apps_total\":%llu,\"sockets\":%llu,\"calls\":%llu,"
				     "\"protocol_errors\":%llu,\"apps\":[",
				     (unsigned long long)napps, (unsigned long long)g_nsocks,
				     (unsigned long long)calls_total, (unsigned long long)protocol_errors);
		for (struct app *a = g_apps; a && n < cap - 1100; a = a->next) {
			if (a != g_apps)
				out[n++] = ',';
			n += app_json(a, out + n, cap - n);
		}
		n += (size_t)snprintf(out + n, cap - n, "]}\n");
	} else if (strstr(line, "\"sockets\"")) {
		n = (size_t)snprintf(out, cap, "{\"ok\":true,\"sockets\":[");
		bool first = true;
		for (struct app *a = g_apps; a; a = a->next)
			for (uint32_t i = 0; i < a->nslots && n < cap - 1000; i++) {
				struct sk *s = a->socks[i];
				if (!s)
					continue;
				uint64_t dtx, drx;
				sk_direct_bytes(s, &dtx, &drx);
				n += (size_t)snprintf(out + n, cap - n,
					"%s{\"app\":%llu,\"slot\":%u,\"type\":\"%s\",\"module\":\"%s\",\"state\":%d,"
					"\"flags\":%u,\"error\":%d,\"tx_queued\":%llu,\"rx_queued\":%llu,\"tx_bytes\":%llu,"
					"\"rx_bytes\":%llu,\"rd_token\":%u,\"rx_wanted\":%u,\"bytes_waiting\":%d,"
					"\"kernel_readable\":%d,\"kernel_writable\":%d,\"app_closed\":%d,\"eof_shown\":%d,"
					"\"token_bytes_unread\":%d,\"tokens\":%llu,\"tokens_polled\":%llu,\"token_fail\":%llu,\"rx_spin\":%u,"
					"\"queued\":%d,\"throttled\":%d,\"peer\":%s,\"direct\":%s}",
					first ? "" : ",", (unsigned long long)a->id, i, s->type == SOCK_STREAM ? "stream" : "dgram",
					s->mode == SL_SK_STACK_USER ? "user" : s->kfd >= 0 ? "kernel" : "shm", (int)s->state, s->sh->state, s->sh->error,
					(unsigned long long)sk_tx_used(s), (unsigned long long)(s->rb - sk_rx_free(s)),
					(unsigned long long)(s->tx_bytes + dtx), (unsigned long long)(s->rx_bytes + drx), s->sh->rd_token,
					s->sh->rx_wanted, s->bytes_waiting, s->k_readable, s->k_writable, s->app_closed, s->efd_shut,
					outq(s->efd), (unsigned long long)(s->token_sent + (s->conn ? s->sh->peer_tokens : 0)),
					(unsigned long long)(s->token_polled + (s->conn ? s->sh->peer_polled : 0)),
					(unsigned long long)s->token_fail, s->sh->rx_spin, s->in_work, s->throttled,
					s->peer ? "true" : "false", s->conn ? "true" : "false");
				first = false;
			}
		n += (size_t)snprintf(out + n, cap - n, "]}\n");
	} else {
		n = (size_t)snprintf(out, cap, "{\"ok\":false,\"error\":\"unknown command (sluice-stackd knows "
				     "status, stats, sockets)\"}\n");
	}
	for (size_t off = 0; off < n;) {
		ssize_t w = write(c->fd, out + off, n - off);
		if (w <= 0) {
			if (w < 0 && errno == EAGAIN) {
				struct timespec ts = { 0, 1000000 };
				nanosleep(&ts, NULL);
				continue;
			}
			break;
		}
		off += (size_t)w;
	}
	free(out);
}

static void ctl_read(struct ctl *c)
{
	for (;;) {
		ssize_t n = read(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			ctl_close(c);
			return;
		}
		c->len += (size_t)n;
		c->buf[c->len] = 0;
		char *nl;
		while ((nl = memchr(c->buf, '\n', c->len))) {
			*nl = 0;
			ctl_answer(c, c->buf);
			size_t rest = c->len - (size_t)(nl + 1 - c->buf);
			memmove(c->buf, nl + 1, rest);
			c->len = rest;
		}
		if (c->len == sizeof(c->buf) - 1) { /* a line over the limit */
			ctl_close(c);
			return;
		}
	}
}

static void ctl_accept(void)
{
	for (;;) {
		int fd = accept4(ctl_listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		struct ctl *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->ev = (struct ev){ EV_CTL, c };
		if (sk_epoll_add(fd, &c->ev, EPOLLIN) < 0)
			ctl_close(c);
	}
}

/* ---- the loop ---- */

/* Kick-less doorbells (sock.h "Kicks"): an awake engine looks at each region's tx_dirty every turn;
 * before it sleeps it says so in every region and looks once more. */
static bool awake = true;

static void set_awake(bool on)
{
	if (awake == on)
		return;
	awake = on;
	for (struct app *a = g_apps; a; a = a->next)
		__atomic_store_n(&((struct sl_sk_region *)a->base)->engine_awake, on, __ATOMIC_SEQ_CST);
}

/* the sockets with unannounced send-ring data go on the work list; true if a region had any */
static bool collect_dirty(void)
{
	bool any = false;
	for (struct app *a = g_apps; a; a = a->next) {
		struct sl_sk_region *r = a->base;
		if (!__atomic_load_n(&r->tx_dirty, __ATOMIC_RELAXED) || !sl_sk_xchg(&r->tx_dirty, 0))
			continue;
		any = true;
		for (uint32_t i = 0, seen = 0; i < a->nslots && seen < a->nsocks; i++) {
			struct sk *s = a->socks[i];
			if (!s)
				continue;
			seen++;
			if (__atomic_load_n(&s->sh->tx_kick, __ATOMIC_RELAXED))
				sk_work(s);
		}
	}
	return any;
}

int engine_run(volatile int *stop)
{
	struct epoll_event evs[256];
	uint64_t last_refill = now_ns(), last_busy = 0, poll_ns = (uint64_t)cfg.poll_us * 1000;
	while (!*stop) {
		int timeout = sk_work_pending() ? 0 : sk_throttled_any() ? 1 : 1000;
		/* --poll-us: after activity, poll instead of sleeping for a while (NetKernel's
		 * interrupt-driven polling): a reply that comes soon finds the engine awake */
		if (poll_ns && now_ns() - last_busy < poll_ns)
			timeout = 0;
		if (timeout) { /* about to sleep: a doorbell from now on must be a kick */
			set_awake(false);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
		}
		if (collect_dirty()) /* after the store above when sleeping: sock.h "Kicks" */
			timeout = 0;
		if (cfg.user) /* frames waiting: no sleep; lwIP's next timer: no longer */
			timeout = ustack_sleep_prepare(timeout);
		int n = epoll_wait(g_epfd, evs, 256, timeout);
		set_awake(true);
		if (cfg.user) {
			ustack_sleep_done();
			if (ustack_poll())
				last_busy = now_ns();
		}
		if (n > 0 || sk_work_pending())
			last_busy = now_ns();
		else if (timeout == 0 && poll_ns)
			sched_yield(); /* polling with nothing to do: an app polling for our data may share this core */
		if (n < 0) {
			if (errno == EINTR)
				continue;
			sk_log("epoll_wait: %s", strerror(errno));
			return -1;
		}
		for (int i = 0; i < n; i++) {
			struct ev *e = evs[i].data.ptr;
			uint32_t ev = evs[i].events;
			switch (e->kind) {
			case EV_LISTEN:
				chan_accept();
				break;
			case EV_CHAN:
				chan_read(e->obj);
				break;
			case EV_CTL_LISTEN:
				ctl_accept();
				break;
			case EV_CTL:
				ctl_read(e->obj);
				break;
			case EV_ENGINE_END: {
				struct sk *s = e->obj;
				if (ev & (EPOLLHUP | EPOLLRDHUP | EPOLLERR))
					sk_app_closed(s);
				if (ev & EPOLLIN)
					sk_drain_bytes(s);
				sk_work(s);
				break;
			}
			case EV_KERNEL:
				kstack_event(e->obj, ev);
				sk_work(e->obj);
				break;
			case EV_USTACK: /* sluiced's kick or its control socket: ustack_poll looks */
				break;
			}
		}
		if (sk_throttled_any() && now_ns() - last_refill >= 1000000) {
			last_refill = now_ns();
			sk_unthrottle();
		}
		serve_work();
		if (cfg.user) {
			ustack_flush(); /* what the sockets' turns made */
			if (!ustack_enabled()) {
				sk_log("the user stack module is down (sluiced went away): exiting for the supervisor to restart sluice-stackd");
				return -1;
			}
		}
	}
	return 0;
}
