/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-stackd internals (docs/sockets.md). One thread. Files call each other in one direction:
 *   main.c -> engine.c (channels, apps, NQE dispatch, control) -> kstack.c, shmstack.c (the stack
 *   modules) -> sk.c (socket objects, rings, readiness, the work list, token buckets).
 */
#ifndef SLUICE_STACKD_H
#define SLUICE_STACKD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "sluice/sock.h"

#define STACKD_VERSION "0.1.0"

enum ev_kind { EV_LISTEN = 1, EV_CHAN, EV_CTL_LISTEN, EV_CTL, EV_ENGINE_END, EV_KERNEL, EV_USTACK };

/* what an epoll registration points at */
struct ev {
	enum ev_kind kind;
	void *obj;
};

struct app;

/* a direct shm connection's memfd (sock.h "Direct connections"): two slots, one per end */
struct conn {
	int memfd;
	void *base;
	uint64_t size;
	uint32_t refs;               /* the two ends' struct sk */
};

/* IP-level options the engine keeps per socket (sk.c sk_dopt_set): the receive options of datagram
 * control messages (sock.h rx_opts, mirrored in the slot) and what the shm module puts in the
 * datagrams it delivers (TTL, TOS, hop limit, traffic class) */
struct sk_dopt {
	uint32_t rx;                 /* SL_SK_O_* */
	bool ttl_set, hops_set;      /* IP_TTL / IPV6_UNICAST_HOPS set (else the default) */
	uint8_t ttl, tos, hops, tclass;
};

/* sk->state */
enum sk_state { SK_NEW, SK_BOUND, SK_LISTEN, SK_CONNECTING, SK_CONNECTED };

struct sk {
	struct app *app;
	uint32_t slot;
	struct sl_sk_slot *sh;       /* in the app's region (the app writes it too) */
	uint8_t *rxd, *txd;
	uint32_t rb;                 /* ring bytes */
	uint64_t tx_head, rx_tail;   /* the engine's own ring indices (the shared copies are outputs) */
	int domain, type;
	int mode;                    /* SL_SK_STACK_KERNEL or _SHM once decided; the app's stack before */
	enum sk_state state;
	int efd;                     /* engine's end of the placeholder */
	int app_fd;                  /* the app's end until it is handed over (accept), else -1 */
	int kfd;                     /* kernel socket (kernel module), else -1 */
	struct ev ev_e, ev_k;
	bool k_in_epoll;
	bool k_readable, k_writable; /* kernel socket readiness seen (edge-triggered) */
	bool k_rdhup;                /* the kernel socket reported the peer's end (or an error) */
	bool app_closed;             /* every copy of the app's end is closed (set by sk_app_closed) */
	bool unread_at_close;        /* its receive ring held data when that was seen (shm: a reset for the peer) */
	bool broken;                 /* reset: nothing more moves */
	bool throttled;              /* on the token-bucket wait list */
	struct sk *throttle_next;
	bool efd_shut;               /* shutdown(efd, SHUT_WR) done: the placeholder shows EOF */
	bool bytes_waiting;          /* kicks/filler left in efd (send ring too full to drain) */
	bool shut_wr;                /* shutdown(SHUT_WR) asked: after the send ring drains */
	bool shut_wr_done;
	bool rx_eof_pending;         /* the peer finished: RX_EOF once the data before it is in */
	bool v6only;
	bool nodelay, reuseaddr, keepalive;
	struct sk_dopt dopt;
	/* addresses (shm module; the kernel module asks its socket) */
	struct sockaddr_storage local, remote;
	socklen_t local_len, remote_len;
	/* shm: the other end of a connection */
	struct sk *peer;
	/* direct (sock.h "Direct connections"): sh is this end's half of conn; the peer's half, which
	 * holds the ring this end sends into, stays mapped after the peer's struct sk is gone */
	struct conn *conn;
	struct sl_sk_slot *dpeer;
	uint32_t half;
	/* listening (shm): connections made but not accepted yet */
	struct sk *accq_head, *accq_tail, *accq_next;
	struct sk *listener;         /* on the accept queue of */
	uint32_t accq_len, backlog;
	bool kernel_accept_ready;    /* kernel listener said EPOLLIN */
	/* the engine's bookkeeping */
	bool in_work;
	struct sk *work_next;
	struct sk *bound_next;       /* shm table of bound sockets */
	bool in_table;
	uint64_t tx_bytes, rx_bytes, drops;
	uint64_t token_sent, token_fail;
	uint64_t token_polled; /* tokens not put: the app was polling the ring (sock.h) */
	/* user module (ustack.c): lwIP's pcb, and what it received that the ring had no room for yet */
	void *upcb;                  /* struct tcp_pcb / struct udp_pcb, NULL: none (or lwIP freed it) */
	void *u_rxq;                 /* struct pbuf chain */
	uint32_t u_rxq_off;          /* bytes of its first pbuf already in the ring */
	bool u_fin;                  /* the peer's FIN came after u_rxq */
};

struct app {
	uint64_t id;
	uint8_t token[16];
	char name[32];
	int stack;                   /* enum sl_sk_stack */
	uid_t uid;
	int memfd;
	void *base;
	uint64_t size;
	uint32_t nslots, ring_bytes;
	struct sk **socks;           /* by slot */
	uint32_t nsocks;
	uint32_t refs;               /* channels + sockets */
	int pids[16];
	uint32_t npids;
	/* token bucket on the bytes it sends (0: none) */
	uint64_t rate_Bps;
	double tokens;
	uint64_t bucket_ns;
	uint64_t throttled;          /* turns skipped for lack of tokens */
	/* counters */
	uint64_t tx_bytes, rx_bytes, calls, conns_kernel, conns_shm, conns_user, unknown_opts, resets;
	struct app *next;
};

struct chan {
	int fd;
	struct app *app;
	pid_t pid;
	uid_t uid;
	struct ev ev;
};

/* the user module (ustack.c, docs/sockets.md "The user module") */
#define USTACK_ADDRS_MAX 6
struct ustack_cfg {
	const char *nf_socket;        /* sluiced's NF socket */
	const char *service;          /* the service it attaches as (its instance: SERVICE.0) */
	uint8_t mac[6];
	struct { int family; uint8_t addr[16]; int prefix; } addrs[USTACK_ADDRS_MAX];
	unsigned naddrs;              /* at most one IPv4 */
	uint8_t gw4[4];               /* IPv4 gateway, 0.0.0.0: none */
	uint32_t mtu;
	uint32_t supply;              /* empty buffers to hold for frames (docs/abi.md "Supply") */
};

struct stackd_cfg {
	const char *socket_dir;
	uint32_t ring_bytes;
	uint32_t slots;
	uint32_t poll_us;             /* poll this long after activity before sleeping (0: never) */
	bool no_direct;               /* shm connections keep the engine on their data path */
	const struct ustack_cfg *user; /* NULL: no user module */
};

/* sk.c: socket objects and the data-path helpers both modules use */
extern struct app *g_apps;
extern uint64_t g_nsocks;
extern int g_epfd;
extern bool g_direct;            /* shm stream connections go direct when they may */
uint64_t now_ns(void);
struct sk *sk_new(struct app *a, int domain, int type);
void sk_free(struct sk *s);
void sk_direct_bytes(const struct sk *s, uint64_t *tx, uint64_t *rx);
void app_put(struct app *a);
bool sk_throttled_any(void);
void sk_unthrottle(void);
void sk_unthrottle_one(struct sk *s);
void sk_work(struct sk *s);
struct sk *sk_work_pop(void);
bool sk_work_pending(void);
int sk_epoll_add(int fd, struct ev *ev, uint32_t events);
void sk_set_state(struct sk *s, uint32_t set, uint32_t clear);
bool sk_readable(struct sk *s);
void sk_listener_update(struct sk *l);
void sk_accq_push(struct sk *l, struct sk *a);
void sk_token(struct sk *s);
void sk_drain_bytes(struct sk *s);
bool sk_ring_sane(struct sk *s);
uint64_t sk_tx_used(struct sk *s);
uint64_t sk_rx_free(struct sk *s);
/* every copy of the app's end is closed: noted once, with whether it left data unread */
void sk_app_closed(struct sk *s);
bool sk_rx_unread(struct sk *s);
void sk_reset(struct sk *s, int err);
bool sk_closed_now(struct sk *e);
uint64_t sk_budget(struct sk *s, uint64_t want);
void sk_spend(struct sk *s, uint64_t n);
int sk_make_placeholder(struct sk *s);
int sk_dgram_next(struct sk *s, struct sl_sk_dgram *hdr, const uint8_t **data);
int sk_dgram_take(struct sk *s, struct sl_sk_dgram *hdr, const uint8_t **data);
void sk_dgram_done(struct sk *s, const struct sl_sk_dgram *hdr);
uint8_t *sk_dgram_reserve(struct sk *s, uint32_t len);
void sk_dgram_commit(struct sk *s, uint32_t len, const void *addr, uint32_t addr_len, const struct sl_sk_dctl *ctl);
int sk_dopt_set(struct sk *s, int level, int name, const uint8_t *p, uint32_t len);
int sk_dopt_get(const struct sk *s, int level, int name, int *v);
uint8_t sk_default_ttl(bool v6);
bool addr_is_local(const struct sockaddr *sa);
uint16_t addr_port(const struct sockaddr_storage *ss);
void addr_set_port(struct sockaddr_storage *ss, uint16_t port);
void sk_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* kstack.c: the kernel module */
int kstack_socket(struct sk *s);
int kstack_bind(struct sk *s, const struct sockaddr *sa, socklen_t len);
int kstack_listen(struct sk *s, int backlog);
int kstack_connect(struct sk *s, const struct sockaddr *sa, socklen_t len);
int kstack_accept(struct sk *l, struct sk **out);
void kstack_event(struct sk *s, uint32_t events);
void kstack_service(struct sk *s, uint64_t budget);
int kstack_shutdown(struct sk *s, int how);
void kstack_close(struct sk *s);

/* shmstack.c: the shm module */
int shm_bind(struct sk *s, const struct sockaddr *sa, socklen_t len);
int shm_listen(struct sk *s, int backlog);
struct sk *shm_find_listener(const struct sockaddr *sa, int type);
int shm_connect(struct sk *s, struct sk *l, const struct sockaddr *sa, socklen_t len);
int shm_accept(struct sk *l, struct sk **out);
void shm_direct(struct sk *c, struct sk *a);
void shm_service(struct sk *s, uint64_t budget);
int shm_dgram_connect(struct sk *s, const struct sockaddr *sa, socklen_t len);
bool shm_dgram_deliver(struct sk *from, const struct sl_sk_dgram *hdr, const uint8_t *data);
void shm_close(struct sk *s);
void shm_unbind(struct sk *s);
int shm_autobind(struct sk *s);

/* ustack.c: the user module (lwIP) */
int ustack_init(const struct ustack_cfg *c);
void ustack_fini(void);
bool ustack_enabled(void);
int ustack_poll(void);
int ustack_sleep_prepare(int timeout);
void ustack_sleep_done(void);
void ustack_flush(void);
int ustack_socket(struct sk *s);
int ustack_bind(struct sk *s, const struct sockaddr *sa, socklen_t len);
int ustack_listen(struct sk *s, int backlog);
int ustack_connect(struct sk *s, const struct sockaddr *sa, socklen_t len);
int ustack_name(struct sk *s, bool peer, struct sockaddr_storage *ss, socklen_t *sl);
void ustack_sockopt(struct sk *s);
void ustack_service(struct sk *s, uint64_t budget);
void ustack_close(struct sk *s);
size_t ustack_status(char *out, size_t cap);

/* engine.c */
int engine_init(const struct stackd_cfg *cfg);
int engine_run(volatile int *stop);
void engine_fini(void);

#endif
