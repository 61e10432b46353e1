/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The user stack module (docs/sockets.md "The user module"): a userspace TCP/IP stack, lwIP 2.1.3
 * from Debian's liblwip, runs in sluice-stackd's one thread, and its frames are Sluice packets.
 * sluice-stackd attaches to sluiced as an NF of the configured service with a supply of empty
 * buffers (docs/abi.md "Supply"): every frame lwIP sends is written into one of them and goes along
 * the service's supply chain (the operator's NFs, then a port); frames that rules or a port's chain
 * bring to the service are lwIP's input. Each shim socket of a program on `--stack user` is an lwIP
 * pcb: bytes move between the socket's rings and lwIP here, as kstack.c moves them to the kernel.
 *
 * Copies (docs/sockets.md): send ring -> lwIP's segment (tcp_write copies: the ring is the app's to
 * reuse), lwIP's frame -> a Sluice buffer (Debian's lwIP builds each frame in a buffer of its own
 * allocator: LWIP_NETIF_TX_SINGLE_PBUF), a Sluice buffer -> an lwIP pbuf (the SDK returns every
 * packet when its handler returns, and lwIP may keep a segment for long: out of order, or while the
 * receive ring is full), lwIP's pbuf -> the receive ring. The NF chain in between copies nothing.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <lwip/init.h>
#include <lwip/ip_addr.h>
#include <lwip/netif.h>
#include <lwip/pbuf.h>
#include <lwip/tcp.h>
#include <lwip/tcpip.h>
#include <lwip/timeouts.h>
#include <lwip/udp.h>
#include <lwip/etharp.h>
#include <lwip/ethip6.h>
#include <netif/ethernet.h>

#include "sluice/nf.h"
#include "stackd.h"

/* Frames lwIP may hold in place at once (see on_frames), at most a quarter of the lending budget
 * sluiced gives the stack (its ring: 1024 by default; the supply takes at most half) */
#define RX_REFS 256

static struct {
	bool on;
	struct ustack_cfg cfg;
	struct sl_nf *nf;
	struct netif netif;
	struct netif lo;                 /* 127.0.0.1/8 and ::1: loopback inside the stack */
	struct ev ev_rx, ev_sock;
	bool rx_in_epoll;
	struct sl_pkt out[SL_BURST_MAX]; /* frames written, not yet handed to sluiced */
	unsigned nout;
	bool down;                       /* sluiced went away: the module stopped */
	/* counters (status) */
	uint64_t rx_frames, rx_bytes, tx_frames, tx_bytes, tx_no_buffer, tx_too_long, rx_no_mem, rx_martian;
	uint64_t rx_zero_copy, rx_copied;
	/* frames lwIP takes in place (see on_frames): a custom pbuf over the Sluice buffer, kept from the
	 * SDK (sl_pkt_keep) until lwIP frees the pbuf */
	struct rx_ref { struct pbuf_custom pc; struct sl_pkt pkt; struct rx_ref *next; } *refs, *free_refs;
	unsigned refs_out;
	uint64_t accept_overflow, udp_rx_drops;
	/* what lwIP asked its tcpip thread to run (tcpip_try_callback below) */
	struct lwip_call { tcpip_callback_fn fn; void *ctx; } calls[64];
	unsigned ncalls;
} U;

/* Debian's lwIP is built for a tcpip thread (NO_SYS 0). We run none: every lwIP call is made in the
 * engine's one thread, and timers are checked there (ustack_poll). lwIP still asks the tcpip thread to
 * run some work -- netif_poll for a frame sent to one of the stack's own addresses (loopback) -- through
 * tcpip_try_callback, which would assert on the thread's missing mailbox. This definition takes the
 * library's place (it calls it through the PLT) and queues the work for the engine's thread. */
err_t tcpip_try_callback(tcpip_callback_fn fn, void *ctx)
{
	if (U.ncalls == sizeof(U.calls) / sizeof(U.calls[0]))
		return ERR_MEM; /* lwIP retries (netif_poll: reschedule_poll) */
	U.calls[U.ncalls].fn = fn;
	U.calls[U.ncalls].ctx = ctx;
	U.ncalls++;
	return ERR_OK;
}

static void run_calls(void)
{
	for (unsigned round = 0; U.ncalls && round < 16; round++) { /* a loopback reply may queue another */
		unsigned n = U.ncalls;
		struct lwip_call c[sizeof(U.calls) / sizeof(U.calls[0])];
		memcpy(c, U.calls, n * sizeof(c[0]));
		U.ncalls = 0;
		for (unsigned i = 0; i < n; i++)
			c[i].fn(c[i].ctx);
	}
}

bool ustack_enabled(void)
{
	return U.on && !U.down;
}

/* ---- addresses ---- */

/* sockaddr -> lwIP address and port. A v6 socket's ::ffff:a.b.c.d is IPv4 (dual stack); its :: is any
 * address of both families unless v6only. */
static int to_ip(const struct sk *s, const struct sockaddr *sa, socklen_t len, ip_addr_t *ip, uint16_t *port)
{
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const void *)sa;
		ip_addr_set_ip4_u32(ip, in->sin_addr.s_addr);
		IP_SET_TYPE(ip, IPADDR_TYPE_V4);
		*port = ntohs(in->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		*port = ntohs(in6->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			uint32_t v4;
			memcpy(&v4, &in6->sin6_addr.s6_addr[12], 4);
			ip_addr_set_ip4_u32(ip, v4);
			IP_SET_TYPE(ip, IPADDR_TYPE_V4);
			return 0;
		}
		if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) && !s->v6only) {
			ip_addr_set_any(1, ip);
			IP_SET_TYPE(ip, IPADDR_TYPE_ANY);
			return 0;
		}
		uint32_t w[4];
		memcpy(w, &in6->sin6_addr, 16);
		IP_ADDR6(ip, w[0], w[1], w[2], w[3]);
		ip6_addr_clear_zone(ip_2_ip6(ip));
		if (ip6_addr_islinklocal(ip_2_ip6(ip)))
			ip6_addr_assign_zone(ip_2_ip6(ip), IP6_UNKNOWN, &U.netif);
		return 0;
	}
	return -EAFNOSUPPORT;
}

/* lwIP address and port -> sockaddr of the socket's family (v4 in a v6 socket: ::ffff:a.b.c.d) */
static socklen_t from_ip(const struct sk *s, const ip_addr_t *ip, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (s->domain == AF_INET) {
		struct sockaddr_in *in = (void *)ss;
		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		if (ip && IP_IS_V4(ip))
			in->sin_addr.s_addr = ip4_addr_get_u32(ip_2_ip4(ip));
		return sizeof(*in);
	}
	struct sockaddr_in6 *in6 = (void *)ss;
	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons(port);
	if (ip && IP_IS_V4(ip) && !ip_addr_isany(ip)) {
		in6->sin6_addr.s6_addr[10] = in6->sin6_addr.s6_addr[11] = 0xff;
		uint32_t v4 = ip4_addr_get_u32(ip_2_ip4(ip));
		memcpy(&in6->sin6_addr.s6_addr[12], &v4, 4);
	} else if (ip && IP_IS_V6(ip)) {
		memcpy(&in6->sin6_addr, ip_2_ip6(ip)->addr, 16);
		if (ip6_addr_islinklocal(ip_2_ip6(ip)))
			in6->sin6_scope_id = 1;
	}
	return sizeof(*in6);
}

static int lwip_errno(err_t e)
{
	switch (e) {
	case ERR_OK: return 0;
	case ERR_MEM: return ENOMEM;
	case ERR_BUF: return ENOBUFS;
	case ERR_TIMEOUT: return ETIMEDOUT;
	case ERR_RTE: return ENETUNREACH;
	case ERR_INPROGRESS: return EINPROGRESS;
	case ERR_VAL: return EINVAL;
	case ERR_WOULDBLOCK: return EAGAIN;
	case ERR_USE: return EADDRINUSE;
	case ERR_ALREADY: return EALREADY;
	case ERR_ISCONN: return EISCONN;
	case ERR_CONN: return ENOTCONN;
	case ERR_IF: return ENETDOWN;
	case ERR_ABRT: return ECONNABORTED;
	case ERR_RST: return ECONNRESET;
	case ERR_CLSD: return ENOTCONN;
	case ERR_ARG: return EINVAL;
	default: return EIO;
	}
}

/* ---- the link: frames to and from sluiced ---- */

void ustack_flush(void)
{
	run_calls(); /* loopback frames the sockets' turns made */
	if (U.down)
		U.nout = 0; /* sluiced is gone, and its buffers with it */
	if (U.nout == 0)
		return;
	int rc = sl_nf_emit(U.nf, U.out, U.nout);
	U.nout = 0;
	if (rc < 0) {
		sk_log("user stack: sluiced went away (%d): the user module stops", rc);
		U.down = true;
	}
}

/* The next free place in the batch for sluiced (handed over first when full) */
static struct sl_pkt *out_slot(void)
{
	if (U.nout == SL_BURST_MAX)
		ustack_flush();
	return &U.out[U.nout];
}

static err_t link_output(struct netif *nif, struct pbuf *p)
{
	(void)nif;
	if (U.down)
		return ERR_IF;
	struct sl_pkt *o = out_slot();
	if (sl_nf_alloc(U.nf, o) < 0) {
		U.tx_no_buffer++; /* as a full TX ring: TCP sends it again */
		return ERR_OK;
	}
	U.nout++;
	if (sl_pkt_adj_tail(o, (int)p->tot_len) < 0) {
		U.tx_too_long++;
		sl_pkt_set_action(o, SL_ACT_DROP, 0); /* the buffer back, unused */
	} else {
		pbuf_copy_partial(p, sl_pkt_data(o), p->tot_len, 0);
		U.tx_frames++;
		U.tx_bytes += p->tot_len;
	}
	return ERR_OK;
}

/* A frame from the wire for a loopback address (127.0.0.0/8 or ::1, as source or destination): the
 * kernel drops these on any interface but lo; so does the stack (its lo is an interface of lwIP's too,
 * which would otherwise take them). */
static bool martian(const uint8_t *f, uint16_t len)
{
	if (len >= 34 && f[12] == 0x08 && f[13] == 0x00)
		return f[26] == 127 || f[30] == 127;
	if (len >= 54 && f[12] == 0x86 && f[13] == 0xdd) {
		static const uint8_t one[16] = { [15] = 1 };
		return !memcmp(f + 22, one, 16) || !memcmp(f + 38, one, 16);
	}
	return false;
}

/* lwIP is done with a frame it took in place: its buffer goes back to sluiced with the next batch */
static void rx_ref_free(struct pbuf *p)
{
	struct rx_ref *r = (struct rx_ref *)(void *)p;
	struct sl_pkt *o = out_slot();
	*o = r->pkt;
	sl_pkt_set_action(o, SL_ACT_DROP, 0);
	U.nout++;
	r->next = U.free_refs;
	U.free_refs = r;
	U.refs_out--;
}

static void on_frames(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	(void)nf;
	(void)arg;
	for (unsigned i = 0; i < n; i++) {
		uint16_t len = sl_pkt_len(&pkts[i]);
		sl_pkt_set_action(&pkts[i], SL_ACT_DROP, 0); /* consumed: the stack is the end of the chain */
		if (martian(sl_pkt_data(&pkts[i]), len)) {
			U.rx_martian++;
			continue;
		}
		struct pbuf *p;
		struct rx_ref *r = U.free_refs;
		if (r) { /* in place: no copy; the buffer stays ours until lwIP frees the pbuf */
			U.free_refs = r->next;
			U.refs_out++;
			r->pkt = pkts[i];
			r->pc.custom_free_function = rx_ref_free;
			p = pbuf_alloced_custom(PBUF_RAW, len, PBUF_REF, &r->pc, sl_pkt_data(&pkts[i]), len);
			sl_pkt_keep(&pkts[i]);
			U.rx_zero_copy++;
		} else { /* lwIP holds RX_REFS frames already (out of order, unread): copy, so that the
			  * lending budget stays for what comes next */
			p = pbuf_alloc(PBUF_RAW, len, PBUF_RAM);
			if (!p) {
				U.rx_no_mem++;
				continue;
			}
			pbuf_take(p, sl_pkt_data(&pkts[i]), len);
			U.rx_copied++;
		}
		U.rx_frames++;
		U.rx_bytes += len;
		if (U.netif.input(p, &U.netif) != ERR_OK)
			pbuf_free(p);
	}
}

static err_t netif_setup(struct netif *nif)
{
	nif->name[0] = 's';
	nif->name[1] = 'l';
	nif->output = etharp_output;
	nif->output_ip6 = ethip6_output;
	nif->linkoutput = link_output;
	nif->mtu = (uint16_t)U.cfg.mtu;
	nif->mtu6 = (uint16_t)U.cfg.mtu;
	nif->hwaddr_len = 6;
	memcpy(nif->hwaddr, U.cfg.mac, 6);
	nif->flags = NETIF_FLAG_BROADCAST | NETIF_FLAG_ETHARP | NETIF_FLAG_ETHERNET | NETIF_FLAG_IGMP | NETIF_FLAG_MLD6;
	return ERR_OK;
}

static err_t lo_output4(struct netif *nif, struct pbuf *p, const ip4_addr_t *a)
{
	(void)a;
	return netif_loop_output(nif, p);
}

static err_t lo_output6(struct netif *nif, struct pbuf *p, const ip6_addr_t *a)
{
	(void)a;
	return netif_loop_output(nif, p);
}

static err_t lo_setup(struct netif *nif)
{
	nif->name[0] = 'l';
	nif->name[1] = 'o';
	nif->output = lo_output4;
	nif->output_ip6 = lo_output6;
	nif->mtu = nif->mtu6 = 16384;
	return ERR_OK;
}

int ustack_init(const struct ustack_cfg *c)
{
	U.cfg = *c;

	srand((unsigned)(time(NULL) ^ getpid())); /* lwIP's LWIP_RAND: initial sequence numbers, ports */
	lwip_init();
	ip4_addr_t a4 = { 0 }, m4 = { 0 }, g4 = { 0 };
	for (unsigned i = 0; i < c->naddrs; i++)
		if (c->addrs[i].family == AF_INET) {
			memcpy(&a4.addr, c->addrs[i].addr, 4);
			m4.addr = c->addrs[i].prefix ? htonl(~0u << (32 - c->addrs[i].prefix)) : 0;
		}
	memcpy(&g4.addr, c->gw4, 4);
	if (!netif_add(&U.netif, &a4, &m4, &g4, NULL, netif_setup, ethernet_input)) {
		sk_log("user stack: lwIP refused the interface");
		return -1;
	}
	netif_set_default(&U.netif);
	/* loopback, as a host's lo: Debian's lwIP has no loopif of its own (LWIP_HAVE_LOOPIF 0) */
	ip4_addr_t l4, lm;
	IP4_ADDR(&l4, 127, 0, 0, 1);
	IP4_ADDR(&lm, 255, 0, 0, 0);
	if (!netif_add(&U.lo, &l4, &lm, IP4_ADDR_ANY4, NULL, lo_setup, ip_input)) {
		sk_log("user stack: lwIP refused the loopback interface");
		return -1;
	}
	ip6_addr_t l6;
	IP6_ADDR(&l6, 0, 0, 0, PP_HTONL(1));
	s8_t li;
	if (netif_add_ip6_address(&U.lo, &l6, &li) == ERR_OK)
		netif_ip6_addr_set_state(&U.lo, li, IP6_ADDR_PREFERRED);
	netif_set_up(&U.lo);
	netif_set_link_up(&U.lo);

	struct sl_nf_config nc;
	sl_nf_config_default(&nc);
	sl_nf_config_from_env(&nc); /* SLUICE_NF_TOKEN: the service's attach token */
	snprintf(nc.socket_path, sizeof(nc.socket_path), "%s", c->nf_socket);
	snprintf(nc.service, sizeof(nc.service), "%s", c->service);
	snprintf(nc.name, sizeof(nc.name), "%s.0", c->service);
	nc.sock_fd = -1;
	nc.wakeup = SL_WAKE_BLOCK;
	nc.batch = 1;          /* a frame for a socket: wake at once */
	nc.timeout_us = 0;
	nc.supply = c->supply;
	nc.reattach_ms = 0;    /* a sluiced restart ends the module (the supervisor restarts sluice-stackd) */
	int rc = sl_nf_attach(&nc, &U.nf);
	if (rc < 0) {
		sk_log("user stack: cannot attach to sluiced at %s as service %s: %s (code %d)", c->nf_socket,
		       c->service, rc == -SL_ERR_IO ? strerror(errno) : "refused", -rc);
		return -1;
	}
	/* in-place frames: a quarter of what it may hold at once (the supply takes at most half) */
	unsigned nrefs = sl_nf_ring_size(U.nf) / 4 < RX_REFS ? sl_nf_ring_size(U.nf) / 4 : RX_REFS;
	U.refs = calloc(nrefs ? nrefs : 1, sizeof(*U.refs)); /* freed with the process: lwIP may hold them */
	if (!U.refs) {
		sl_nf_detach(U.nf);
		return -1;
	}
	for (unsigned i = 0; i < nrefs; i++) {
		U.refs[i].next = U.free_refs;
		U.free_refs = &U.refs[i];
	}
	U.ev_rx.kind = EV_USTACK;
	U.ev_sock.kind = EV_USTACK;
	U.on = true;
	/* the interface comes up (its first MLD reports and router solicitation) once sluiced's first
	 * empty buffers are in hand: a frame made before would be lost for want of one */
	for (int i = 0; i < 500 && sl_nf_supply(U.nf) == 0; i++) {
		if (sl_nf_poll(U.nf, on_frames, NULL) < 0)
			break;
		if (sl_nf_supply(U.nf) == 0)
			usleep(1000);
	}
	netif_create_ip6_linklocal_address(&U.netif, 1);
	netif_ip6_addr_set_state(&U.netif, 0, IP6_ADDR_PREFERRED);
	for (unsigned i = 0; i < c->naddrs; i++) {
		if (c->addrs[i].family != AF_INET6)
			continue;
		ip6_addr_t a6;
		memcpy(a6.addr, c->addrs[i].addr, 16);
		ip6_addr_clear_zone(&a6);
		s8_t idx;
		if (netif_add_ip6_address(&U.netif, &a6, &idx) != ERR_OK) {
			sk_log("user stack: lwIP takes at most %d IPv6 addresses", LWIP_IPV6_NUM_ADDRESSES - 1);
			goto fail;
		}
		netif_ip6_addr_set_state(&U.netif, idx, IP6_ADDR_PREFERRED); /* configured: no DAD wait */
	}
	netif_set_up(&U.netif);
	netif_set_link_up(&U.netif);
	return 0;
fail:
	ustack_fini();
	return -1;
}

void ustack_fini(void)
{
	if (!U.on)
		return;
	ustack_flush();
	sl_nf_detach(U.nf);
	U.nf = NULL;
	netif_remove(&U.lo);
	netif_remove(&U.netif);
	U.on = false;
}

/* One look at sluiced's ring (frames in), lwIP's timers, and what they made. 1 if frames came. */
int ustack_poll(void)
{
	if (!U.on || U.down)
		return 0;
	int n = 0, got;
	while ((got = sl_nf_poll(U.nf, on_frames, NULL)) > 0 && n < 4096)
		n += got;
	if (got < 0) {
		sk_log("user stack: sluiced went away (%d): the user module stops", got);
		U.down = true;
		return 0;
	}
	sys_check_timeouts();
	run_calls();
	ustack_flush();
	return n > 0 || U.ncalls;
}

/* Before the engine sleeps: its fds in the engine's epoll set, the longest sleep lwIP's timers allow
 * (ms), or 0 when frames wait. */
int ustack_sleep_prepare(int timeout)
{
	if (!U.on || U.down)
		return timeout;
	ustack_flush();
	int fds[2];
	if (U.ncalls || !sl_nf_sleep_prepare(U.nf, fds))
		return 0;
	if (!U.rx_in_epoll) {
		if (sk_epoll_add(fds[0], &U.ev_rx, EPOLLIN) < 0 || sk_epoll_add(fds[1], &U.ev_sock, EPOLLIN | EPOLLRDHUP) < 0)
			sk_log("user stack: cannot watch sluiced's eventfd: %s", strerror(errno));
		U.rx_in_epoll = true;
	}
	u32_t t = sys_timeouts_sleeptime();
	if (t != SYS_TIMEOUTS_SLEEPTIME_INFINITE && (timeout < 0 || (u32_t)timeout > t))
		timeout = (int)t;
	return timeout;
}

void ustack_sleep_done(void)
{
	if (U.on && !U.down)
		sl_nf_sleep_done(U.nf);
}

/* The socket's IP_TTL / IP_TOS, or IPV6_UNICAST_HOPS / IPV6_TCLASS (the engine keeps them: sk.c
 * sk_dopt_set), on its pcb; Linux's default TTL and hop limit are 64, lwIP's 255. */
static void ip_ttl_tos(const struct sk *s, struct ip_pcb *pcb, bool v6)
{
	const struct sk_dopt *o = &s->dopt;
	pcb->ttl = v6 ? (o->hops_set ? o->hops : 64) : (o->ttl_set ? o->ttl : 64);
	pcb->tos = v6 ? o->tclass : o->tos;
}

/* ---- TCP ---- */

static void stream_fail(struct sk *s, err_t err)
{
	if (s->state == SK_CONNECTING) { /* refused (a reset) or timed out */
		s->state = SK_NEW;
		s->sh->error = err == ERR_RST ? ECONNREFUSED : err == ERR_ABRT ? ETIMEDOUT : lwip_errno(err);
		sk_set_state(s, 0, SL_SK_S_CONNECTING);
		s->bytes_waiting = true; /* the filler the shim put in while connecting */
	} else {
		/* as Linux's tcp_reset: a reset after the peer's FIN (CLOSE_WAIT) is EPIPE */
		sk_reset(s, err == ERR_RST && s->u_fin ? EPIPE : lwip_errno(err));
	}
	sk_work(s);
}

static void on_err(void *arg, err_t err)
{
	struct sk *s = arg;
	if (!s)
		return;
	s->upcb = NULL; /* lwIP freed it */
	stream_fail(s, err);
}

static err_t on_recv(void *arg, struct tcp_pcb *pcb, struct pbuf *p, err_t err)
{
	struct sk *s = arg;
	(void)err;
	if (!s) {
		if (p) {
			tcp_recved(pcb, p->tot_len);
			pbuf_free(p);
		}
		return ERR_OK;
	}
	if (!p)
		s->u_fin = true;
	else if (s->u_rxq)
		pbuf_cat(s->u_rxq, p);
	else
		s->u_rxq = p;
	sk_work(s);
	return ERR_OK;
}

static err_t on_sent(void *arg, struct tcp_pcb *pcb, u16_t len)
{
	(void)pcb;
	(void)len;
	if (arg)
		sk_work(arg);
	return ERR_OK;
}

static void stream_hook(struct sk *s, struct tcp_pcb *pcb)
{
	s->upcb = pcb;
	tcp_arg(pcb, s);
	tcp_recv(pcb, on_recv);
	tcp_sent(pcb, on_sent);
	tcp_err(pcb, on_err);
	pcb->ttl = 64; /* Linux's default, not lwIP's 255: SYNs and ACKs before any data (stream_tx sets it then) */
	if (s->nodelay)
		tcp_nagle_disable(pcb);
	if (s->keepalive)
		ip_set_option(pcb, SOF_KEEPALIVE);
}

static err_t on_connected(void *arg, struct tcp_pcb *pcb, err_t err)
{
	struct sk *s = arg;
	(void)pcb;
	if (!s)
		return ERR_OK;
	if (err != ERR_OK) {
		stream_fail(s, err);
		return ERR_OK;
	}
	s->state = SK_CONNECTED;
	sk_set_state(s, SL_SK_S_CONNECTED, SL_SK_S_CONNECTING);
	s->bytes_waiting = true;
	sk_work(s);
	return ERR_OK;
}

static err_t on_accept(void *arg, struct tcp_pcb *pcb, err_t err)
{
	struct sk *l = arg;
	if (!l || err != ERR_OK || !pcb)
		return ERR_VAL;
	if (l->accq_len >= l->backlog) {
		U.accept_overflow++;
		tcp_abort(pcb);
		return ERR_ABRT;
	}
	struct sk *a = sk_new(l->app, l->domain, SOCK_STREAM);
	if (!a) {
		tcp_abort(pcb);
		return ERR_ABRT;
	}
	a->mode = SL_SK_STACK_USER;
	a->nodelay = l->nodelay; /* as Linux, an accepted socket inherits these (lwIP: SOF_INHERITED) */
	a->keepalive = l->keepalive;
	a->reuseaddr = l->reuseaddr;
	if (sk_make_placeholder(a) != 0) {
		sk_free(a);
		tcp_abort(pcb);
		return ERR_ABRT;
	}
	stream_hook(a, pcb);
	a->state = SK_CONNECTED;
	a->remote_len = from_ip(a, &pcb->remote_ip, pcb->remote_port, &a->remote);
	sk_set_state(a, SL_SK_S_CONNECTED, 0);
	l->app->conns_user++;
	sk_accq_push(l, a);
	sk_work(l);
	return ERR_OK;
}

/* receive: lwIP's queued pbufs into the receive ring; the window opens by what went in */
static void stream_rx(struct sk *s, uint64_t *budget)
{
	struct tcp_pcb *pcb = s->upcb;
	uint32_t took = 0;
	while (s->u_rxq && *budget) {
		uint64_t room = sk_rx_free(s);
		if (!room) {
			sl_sk_xchg(&s->sh->rx_wanted, 1);
			if (!(room = sk_rx_free(s)))
				break;
		}
		struct pbuf *p = s->u_rxq;
		uint32_t left = p->len - s->u_rxq_off;
		uint32_t off = (uint32_t)(s->rx_tail & (s->rb - 1));
		uint64_t chunk = s->rb - off < room ? s->rb - off : room;
		if (chunk > left)
			chunk = left;
		if (chunk > *budget)
			chunk = *budget;
		memcpy(s->rxd + off, (const uint8_t *)p->payload + s->u_rxq_off, chunk);
		s->rx_tail += chunk;
		s->u_rxq_off += (uint32_t)chunk;
		took += (uint32_t)chunk;
		*budget -= chunk;
		if (s->u_rxq_off == p->len) { /* the first pbuf is done: let it go, keep the rest */
			s->u_rxq = p->next; /* the chain's reference to the rest becomes ours */
			p->next = NULL;
			pbuf_free(p);
			s->u_rxq_off = 0;
		}
	}
	if (took) {
		sl_sk_store_release(&s->sh->rx.tail, s->rx_tail);
		s->rx_bytes += took;
		s->app->rx_bytes += took;
		for (uint32_t left = took; pcb && left;) { /* the window opens by what the ring took */
			u16_t k = (u16_t)(left > 0xffff ? 0xffff : left);
			tcp_recved(pcb, k);
			left -= k;
		}
	}
	if (!s->u_rxq && s->u_fin && !(s->sh->state & SL_SK_S_RX_EOF))
		sk_set_state(s, SL_SK_S_RX_EOF, 0);
}

static void stream_tx(struct sk *s, uint64_t *budget)
{
	struct tcp_pcb *pcb = s->upcb;
	bool wrote = false;
	while (*budget) {
		uint64_t used = sk_tx_used(s);
		if (!used)
			break;
		uint32_t room = tcp_sndbuf(pcb);
		if (room == 0 || tcp_sndqueuelen(pcb) >= TCP_SND_QUEUELEN - 1)
			break; /* on_sent looks again */
		uint32_t off = (uint32_t)(s->tx_head & (s->rb - 1));
		uint64_t chunk = s->rb - off < used ? s->rb - off : used;
		if (chunk > room)
			chunk = room;
		chunk = sk_budget(s, chunk < *budget ? chunk : *budget);
		if (!chunk)
			return;
		u8_t flags = TCP_WRITE_FLAG_COPY | (chunk < used ? TCP_WRITE_FLAG_MORE : 0);
		err_t e = tcp_write(pcb, s->txd + off, (u16_t)chunk, flags);
		if (e == ERR_MEM)
			break;
		if (e != ERR_OK) {
			sk_reset(s, lwip_errno(e));
			return;
		}
		wrote = true;
		s->tx_head += chunk;
		sl_sk_store_release(&s->sh->tx.head, s->tx_head);
		sk_spend(s, chunk);
		s->tx_bytes += chunk;
		s->app->tx_bytes += chunk;
		*budget -= chunk;
	}
	if (wrote) {
		ip_ttl_tos(s, (struct ip_pcb *)pcb, IP_IS_V6(&pcb->remote_ip));
		tcp_output(pcb);
	}
	if (s->shut_wr && !s->shut_wr_done && !sk_tx_used(s)) {
		tcp_shutdown(pcb, 0, 1);
		s->shut_wr_done = true;
	}
}

/* ---- UDP ---- */

static void on_udp(void *arg, struct udp_pcb *pcb, struct pbuf *p, const ip_addr_t *addr, u16_t port)
{
	struct sk *s = arg;
	(void)pcb;
	if (!s) {
		pbuf_free(p);
		return;
	}
	uint8_t *dst = sk_dgram_reserve(s, p->tot_len);
	if (!dst) { /* no room: dropped, as a full socket buffer drops */
		sl_sk_xchg(&s->sh->rx_wanted, 1);
		U.udp_rx_drops++;
		s->drops++;
		pbuf_free(p);
		return;
	}
	pbuf_copy_partial(p, dst, p->tot_len, 0);
	struct sockaddr_storage from;
	socklen_t fl = from_ip(s, addr, port, &from);
	/* what the shim may turn into cmsgs (sock.h "Datagram control"): this datagram's IP header, as the
	 * kernel's; it shows only those whose option the app turned on */
	struct sl_sk_dctl ctl = { .ver = SL_SK_DCTL_V1 };
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ctl.ts_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	ctl.has = SL_SK_C_TSTAMP;
	const struct netif *in = ip_current_input_netif();
	uint32_t ifindex = in == &U.lo ? 1 : 2; /* as a host's: lo is 1, its one Ethernet interface 2 */
	if (ip_current_is_v6()) {
		ctl.has |= SL_SK_C_PKTINFO6 | SL_SK_C_HOPLIMIT | SL_SK_C_TCLASS;
		ctl.hoplimit = IP6H_HOPLIM(ip6_current_header());
		ctl.tclass = (uint8_t)IP6H_TC(ip6_current_header());
		memcpy(ctl.addr6, ip6_current_dest_addr()->addr, 16);
		ctl.ifindex6 = ifindex;
	} else {
		ctl.has |= SL_SK_C_PKTINFO | SL_SK_C_TTL | SL_SK_C_TOS;
		ctl.ttl = IPH_TTL(ip4_current_header());
		ctl.tos = IPH_TOS(ip4_current_header());
		uint32_t d = ip4_addr_get_u32(ip4_current_dest_addr());
		memcpy(ctl.addr4, &d, 4);
		/* ipi_spec_dst: the local address a reply would come from (the interface's, for a broadcast) */
		uint32_t local = in && ip4_addr_isbroadcast_u32(d, in) ? ip4_addr_get_u32(netif_ip4_addr(in)) : d;
		memcpy(ctl.spec_dst, &local, 4);
		ctl.ifindex4 = ifindex;
		if (s->domain == AF_INET6) { /* a dual-stack socket: IPV6_PKTINFO too, IPv4-mapped (no hop limit) */
			ctl.has |= SL_SK_C_PKTINFO6;
			ctl.addr6[10] = ctl.addr6[11] = 0xff;
			memcpy(ctl.addr6 + 12, &d, 4);
			ctl.ifindex6 = ifindex;
		}
	}
	sk_dgram_commit(s, p->tot_len, &from, fl, &ctl);
	pbuf_free(p);
	sk_work(s);
}

/* One datagram out, with what the app's sendmsg asked for it (sock.h "Datagram control": TTL, TOS,
 * hop limit, traffic class for this datagram only; PKTINFO: its source address). */
static err_t udp_out(struct sk *s, const struct sl_sk_dgram *h, struct pbuf *p)
{
	struct udp_pcb *pcb = s->upcb;
	ip_addr_t ip;
	uint16_t port;
	if (h->addr_len) {
		if (to_ip(s, (const struct sockaddr *)(const void *)h->addr, h->addr_len, &ip, &port) != 0)
			return ERR_VAL;
	} else {
		if (!(pcb->flags & UDP_FLAGS_CONNECTED))
			return ERR_CONN;
		ip_addr_copy(ip, pcb->remote_ip);
		port = pcb->remote_port;
	}
	const struct sl_sk_dctl *c = h->ctl.ver == SL_SK_DCTL_V1 ? &h->ctl : NULL;
	bool v6 = IP_IS_V6(&ip);
	ip_ttl_tos(s, (struct ip_pcb *)pcb, v6);
	if (c && (c->has & (v6 ? SL_SK_C_HOPLIMIT : SL_SK_C_TTL)))
		pcb->ttl = v6 ? c->hoplimit : c->ttl;
	if (c && (c->has & (v6 ? SL_SK_C_TCLASS : SL_SK_C_TOS)))
		pcb->tos = v6 ? c->tclass : c->tos;
	ip_addr_t src;
	bool with_src = false;
	if (c && !v6 && (c->has & SL_SK_C_PKTINFO)) {
		uint32_t a;
		memcpy(&a, c->spec_dst, 4);
		if (a) {
			ip_2_ip4(&src)->addr = a;
			IP_SET_TYPE_VAL(src, IPADDR_TYPE_V4);
			with_src = true;
		}
	} else if (c && v6 && (c->has & SL_SK_C_PKTINFO6)) {
		static const uint8_t zero[16];
		if (memcmp(c->addr6, zero, 16)) {
			uint32_t w[4];
			memcpy(w, c->addr6, 16);
			IP_ADDR6(&src, w[0], w[1], w[2], w[3]);
			ip6_addr_clear_zone(ip_2_ip6(&src));
			with_src = true;
		}
	}
	err_t e;
	if (with_src) {
		struct netif *nif = v6 ? ip6_route(ip_2_ip6(&src), ip_2_ip6(&ip)) : ip4_route(ip_2_ip4(&ip));
		e = nif ? udp_sendto_if_src(pcb, p, &ip, port, nif, &src) : ERR_RTE;
	} else {
		e = udp_sendto(pcb, p, &ip, port);
	}
	return e;
}

static void dgram_tx(struct sk *s, uint64_t *budget)
{
	struct sl_sk_dgram h;
	const uint8_t *data;
	while (*budget && sk_dgram_take(s, &h, &data) > 0) {
		struct pbuf *p = pbuf_alloc(PBUF_TRANSPORT, (u16_t)h.len, PBUF_RAM);
		if (!p)
			return; /* lwIP is out of memory: try again next turn */
		pbuf_take(p, data, (u16_t)h.len);
		err_t e = udp_out(s, &h, p);
		pbuf_free(p);
		if (e != ERR_OK)
			s->sh->error = lwip_errno(e); /* SO_ERROR, as the kernel's for a failed datagram */
		sk_spend(s, h.len);
		s->tx_bytes += h.len;
		s->app->tx_bytes += h.len;
		sk_dgram_done(s, &h);
		*budget -= h.len < *budget ? h.len : *budget;
	}
}

/* ---- the calls ---- */

int ustack_socket(struct sk *s)
{
	u8_t t = s->domain == AF_INET ? IPADDR_TYPE_V4 : IPADDR_TYPE_ANY;
	s->mode = SL_SK_STACK_USER;
	if (s->type == SOCK_STREAM) {
		struct tcp_pcb *pcb = tcp_new_ip_type(t);
		if (!pcb)
			return -ENOMEM;
		stream_hook(s, pcb);
		return 0;
	}
	struct udp_pcb *pcb = udp_new_ip_type(t);
	if (!pcb)
		return -ENOMEM;
	s->upcb = pcb;
	pcb->ttl = 64;
	udp_recv(pcb, on_udp, s);
	return 0;
}

/* Sockets on this port whose programs closed them, though the engine has not served the hang-up yet:
 * their pcbs go now, as a kernel socket's close frees its port at once (iperf3 -s closes its listener
 * and binds a new one between tests). A connected one still sends what it holds; it keeps its pcb. */
static bool free_closed_port(int type, uint16_t port)
{
	bool any = false;
	for (struct app *a = g_apps; a; a = a->next)
		for (uint32_t i = 0; i < a->nslots; i++) {
			struct sk *e = a->socks[i];
			if (!e || e->mode != SL_SK_STACK_USER || e->type != type || !e->upcb ||
			    (type == SOCK_STREAM && e->state != SK_LISTEN && e->state != SK_BOUND))
				continue;
			uint16_t lp = type == SOCK_STREAM ? ((struct tcp_pcb *)e->upcb)->local_port
							  : ((struct udp_pcb *)e->upcb)->local_port;
			if (lp == port && sk_closed_now(e)) {
				ustack_close(e);
				any = true;
			}
		}
	return any;
}

int ustack_bind(struct sk *s, const struct sockaddr *sa, socklen_t len)
{
	ip_addr_t ip;
	uint16_t port;
	int rc = to_ip(s, sa, len, &ip, &port);
	if (rc)
		return rc;
	if (!s->upcb)
		return -EINVAL;
	if (s->reuseaddr)
		ip_set_option((struct ip_pcb *)s->upcb, SOF_REUSEADDR);
	err_t e = s->type == SOCK_STREAM ? tcp_bind(s->upcb, &ip, port) : udp_bind(s->upcb, &ip, port);
	if (e == ERR_USE && port && free_closed_port(s->type, port))
		e = s->type == SOCK_STREAM ? tcp_bind(s->upcb, &ip, port) : udp_bind(s->upcb, &ip, port);
	if (e != ERR_OK)
		return -lwip_errno(e);
	s->state = SK_BOUND;
	return 0;
}

int ustack_listen(struct sk *s, int backlog)
{
	struct tcp_pcb *pcb = s->upcb;
	if (!pcb)
		return -EINVAL;
	if (s->state == SK_LISTEN) {
		s->backlog = (uint32_t)(backlog > 0 ? backlog : 1);
		return 0;
	}
	if (s->state != SK_BOUND) { /* Linux binds a listener to a port of its choosing */
		ip_addr_t any;
		ip_addr_set_any(s->domain == AF_INET6, &any);
		if (s->domain == AF_INET6 && !s->v6only)
			IP_SET_TYPE(&any, IPADDR_TYPE_ANY);
		err_t e = tcp_bind(pcb, &any, 0);
		if (e != ERR_OK)
			return -lwip_errno(e);
	}
	err_t err = ERR_OK;
	struct tcp_pcb *lp = tcp_listen_with_backlog_and_err(pcb, 255, &err);
	if (!lp && err == ERR_USE && free_closed_port(SOCK_STREAM, pcb->local_port))
		lp = tcp_listen_with_backlog_and_err(pcb, 255, &err);
	if (!lp)
		return -lwip_errno(err);
	s->upcb = lp; /* lwIP freed pcb */
	tcp_arg(lp, s);
	tcp_accept(lp, on_accept);
	s->backlog = (uint32_t)(backlog > 0 ? backlog : 1);
	return 0;
}

int ustack_connect(struct sk *s, const struct sockaddr *sa, socklen_t len)
{
	ip_addr_t ip;
	uint16_t port;
	int rc = to_ip(s, sa, len, &ip, &port);
	if (rc)
		return rc;
	if (!s->upcb)
		return s->type == SOCK_STREAM ? -(s->sh->error ? s->sh->error : ECONNABORTED) : -EINVAL;
	if (s->type == SOCK_DGRAM) {
		err_t e = udp_connect(s->upcb, &ip, port);
		if (e != ERR_OK)
			return -lwip_errno(e);
		memcpy(&s->remote, sa, len);
		s->remote_len = len;
		return 0;
	}
	err_t e = tcp_connect(s->upcb, &ip, port, on_connected);
	if (e != ERR_OK)
		return -lwip_errno(e);
	memcpy(&s->remote, sa, len);
	s->remote_len = len;
	s->app->conns_user++;
	s->state = SK_CONNECTING;
	sk_set_state(s, SL_SK_S_CONNECTING, 0);
	return -EINPROGRESS;
}

int ustack_name(struct sk *s, bool peer, struct sockaddr_storage *ss, socklen_t *sl)
{
	if (peer) {
		if (!s->remote_len || (s->type == SOCK_STREAM && s->state != SK_CONNECTED))
			return -ENOTCONN;
		if (s->type == SOCK_STREAM && s->upcb) {
			struct tcp_pcb *pcb = s->upcb;
			*sl = from_ip(s, &pcb->remote_ip, pcb->remote_port, ss);
		} else {
			*ss = s->remote;
			*sl = s->remote_len;
		}
		return 0;
	}
	if (!s->upcb) {
		*sl = from_ip(s, NULL, 0, ss);
		return 0;
	}
	if (s->type == SOCK_STREAM) {
		struct tcp_pcb *pcb = s->upcb;
		*sl = from_ip(s, &pcb->local_ip, pcb->local_port, ss);
	} else {
		struct udp_pcb *pcb = s->upcb;
		*sl = from_ip(s, &pcb->local_ip, pcb->local_port, ss);
	}
	return 0;
}

void ustack_sockopt(struct sk *s)
{
	if (!s->upcb)
		return;
	if (s->reuseaddr)
		ip_set_option((struct ip_pcb *)s->upcb, SOF_REUSEADDR);
	else
		ip_reset_option((struct ip_pcb *)s->upcb, SOF_REUSEADDR);
	if (s->type != SOCK_STREAM || s->state == SK_LISTEN)
		return;
	if (s->nodelay)
		tcp_nagle_disable((struct tcp_pcb *)s->upcb);
	else
		tcp_nagle_enable((struct tcp_pcb *)s->upcb);
	if (s->keepalive)
		ip_set_option((struct ip_pcb *)s->upcb, SOF_KEEPALIVE);
	else
		ip_reset_option((struct ip_pcb *)s->upcb, SOF_KEEPALIVE);
}

void ustack_service(struct sk *s, uint64_t budget)
{
	if (s->broken || !s->upcb)
		return;
	uint64_t start = budget;
	if (s->type == SOCK_DGRAM) {
		dgram_tx(s, &budget);
	} else if (s->state == SK_CONNECTED) {
		stream_rx(s, &budget);
		if (s->upcb) /* a reset may have come meanwhile */
			stream_tx(s, &budget);
	}
	if (!budget && start)
		sk_work(s); /* more to do: back of the line (round-robin) */
}

/* The socket is gone (the app closed it, or it is freed): its pcb goes, gracefully (FIN after what
 * lwIP holds) unless the app left data unread or it was reset (then RST, as Linux). */
void ustack_close(struct sk *s)
{
	struct sk *a;
	while ((a = s->accq_head)) { /* connections nobody accepted: reset */
		s->accq_head = a->accq_next;
		a->accq_next = NULL;
		a->listener = NULL;
		s->accq_len--;
		if (a->upcb) {
			tcp_arg(a->upcb, NULL);
			tcp_abort(a->upcb);
			a->upcb = NULL;
		}
		sk_free(a);
	}
	s->accq_tail = NULL;
	if (s->u_rxq) {
		pbuf_free(s->u_rxq);
		s->u_rxq = NULL;
	}
	if (!s->upcb)
		return;
	if (s->type == SOCK_DGRAM) {
		udp_remove(s->upcb);
	} else if (s->state == SK_LISTEN) {
		tcp_arg(s->upcb, NULL);
		tcp_accept(s->upcb, NULL);
		tcp_close(s->upcb);
	} else {
		struct tcp_pcb *pcb = s->upcb;
		tcp_arg(pcb, NULL);
		tcp_recv(pcb, NULL);
		tcp_sent(pcb, NULL);
		tcp_err(pcb, NULL);
		if (s->unread_at_close || s->broken || s->state != SK_CONNECTED || tcp_close(pcb) != ERR_OK)
			tcp_abort(pcb);
	}
	s->upcb = NULL;
}

size_t ustack_status(char *out, size_t cap)
{
	if (!U.on)
		return (size_t)snprintf(out, cap, "null");
	char addrs[512];
	size_t n = 0;
	addrs[0] = 0;
	for (unsigned i = 0; i < U.cfg.naddrs && n < sizeof(addrs) - 64; i++) {
		char a[64];
		inet_ntop(U.cfg.addrs[i].family, U.cfg.addrs[i].addr, a, sizeof(a));
		n += (size_t)snprintf(addrs + n, sizeof(addrs) - n, "%s\"%s/%d\"", i ? "," : "", a, U.cfg.addrs[i].prefix);
	}
	return (size_t)snprintf(out, cap,
		"{\"stack\":\"lwIP %s\",\"service\":\"%s\",\"up\":%s,\"mac\":\"%02x:%02x:%02x:%02x:%02x:%02x\","
		"\"addresses\":[%s],\"mtu\":%u,\"supply\":%u,\"supply_held\":%u,\"rx_frames\":%llu,\"rx_bytes\":%llu,"
		"\"tx_frames\":%llu,\"tx_bytes\":%llu,\"tx_no_buffer\":%llu,\"tx_too_long\":%llu,\"rx_no_mem\":%llu,"
		"\"accept_overflow\":%llu,\"udp_rx_drops\":%llu,\"rx_martian\":%llu,\"rx_zero_copy\":%llu,\"rx_copied\":%llu,"
		"\"rx_held\":%u}",
		LWIP_VERSION_STRING, U.cfg.service, U.down ? "false" : "true", U.cfg.mac[0], U.cfg.mac[1], U.cfg.mac[2],
		U.cfg.mac[3], U.cfg.mac[4], U.cfg.mac[5], addrs, U.cfg.mtu, U.cfg.supply, sl_nf_supply(U.nf),
		(unsigned long long)U.rx_frames, (unsigned long long)U.rx_bytes, (unsigned long long)U.tx_frames,
		(unsigned long long)U.tx_bytes, (unsigned long long)U.tx_no_buffer, (unsigned long long)U.tx_too_long,
		(unsigned long long)U.rx_no_mem, (unsigned long long)U.accept_overflow, (unsigned long long)U.udp_rx_drops,
		(unsigned long long)U.rx_martian, (unsigned long long)U.rx_zero_copy, (unsigned long long)U.rx_copied,
		U.refs_out);
}
