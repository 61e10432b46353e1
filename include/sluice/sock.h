/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Sluice socket service (docs/sockets.md): the wire protocol between libsluice-sock.so (the
 * LD_PRELOAD shim in an unmodified program) and sluice-stackd (the engine and its stack modules).
 * No DPDK here; both sides include only this header.
 *
 * Three things connect a program to sluice-stackd:
 *
 *   channel      one SOCK_SEQPACKET connection per thread of the program (its "queue set") to
 *                <socket dir>/stack.sock. A socket call is one message: a struct sl_nqe (32 bytes)
 *                plus up to SL_NQE_PAYLOAD_MAX bytes (a sockaddr, an option value); its completion
 *                is one message back, the same NQE with `result` set, maybe a payload and maybe one
 *                fd (SCM_RIGHTS). The engine never blocks on a call: a call that would block
 *                completes with -EAGAIN/-EINPROGRESS and the shim waits on the placeholder.
 *   region       one memfd per program (shared with its forked children), mapped by both sides:
 *                a struct sl_sk_region, then `nslots` struct sl_sk_slot, one per socket, each with
 *                a receive ring and a send ring of bytes. Data never goes through the channel.
 *   placeholder  every shim socket is one end of a UNIX stream socketpair; the app holds that end
 *                as its socket fd (numbering, dup, fork, CLOEXEC, close and exit behave as the
 *                kernel's), sluice-stackd the other. Its readiness mirrors the shim socket's, so the
 *                kernel's own epoll/poll/select cover shim and kernel fds in one call:
 *                  readable  while the engine has a token byte in it (rd_token protocol below);
 *                  writable  unless the app filled it with filler bytes the engine has not drained
 *                            (it drains them only when the send ring has room again);
 *                  app -> engine bytes are kicks: "look at this socket again" (send ring has new
 *                            data, receive ring has room, a token is wanted back);
 *                  the engine sees EPOLLHUP once every copy of the app's end is closed: that is
 *                            close(), reference-counted by the kernel across dup and fork.
 *
 * Everything in the region is written by the program too: sluice-stackd copies indices once,
 * checks them (0 <= tail - head <= ring size) and treats a violation as that socket's reset,
 * never another program's problem.
 */
#ifndef SLUICE_SOCK_H
#define SLUICE_SOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_SK_VERSION       2 /* 2: datagram records carry a control area (struct sl_sk_dctl) */
#define SL_SK_MAGIC         0x4b534c53u /* "SLSK" little-endian: the region header */
#define SL_SK_SOCKET_NAME   "stack.sock" /* in the socket dir (SLUICE_SOCKET_DIR, /run/sluice) */
#define SL_NQE_PAYLOAD_MAX  512u
#define SL_SK_ADDR_MAX      28u          /* sizeof(struct sockaddr_in6) */

/* stack modules (docs/sockets.md "Stack modules"), chosen per program by `sluice run --stack` */
enum sl_sk_stack {
	SL_SK_STACK_KERNEL = 1, /* the host kernel's TCP/IP, called by sluice-stackd on the app's behalf */
	SL_SK_STACK_SHM = 2,    /* both ends are shim sockets on this host: bytes move ring to ring */
	SL_SK_STACK_AUTO = 3,   /* shm when the peer is a local shim socket, else kernel */
	SL_SK_STACK_USER = 4,   /* sluice-stackd's userspace TCP/IP stack, whose frames cross Sluice's NF
	                         * chains (docs/sockets.md "The user module") */
};

/* NQE operations. Requests carry the arguments listed; every completion carries `result`
 * (>= 0, or -errno) and echoes op, sock and seq. */
enum sl_nqe_op {
	SL_NQE_HELLO = 1,      /* first message of a channel. arg0 = enum sl_sk_stack, arg1 = rate
	                        * limit in bytes/s (0: none); payload = struct sl_nqe_hello.
	                        * completion: arg0 = region bytes, arg1 = app id; the region memfd
	                        * rides along when the program is new (a child after fork already has
	                        * it mapped and sends the region's token instead) */
	SL_NQE_SOCKET = 2,     /* arg0 = domain, arg1 = type (SOCK_STREAM|SOCK_DGRAM, no flags).
	                        * completion: result = slot, one fd = the app's end of the placeholder */
	SL_NQE_BIND = 3,       /* payload = sockaddr */
	SL_NQE_LISTEN = 4,     /* arg0 = backlog */
	SL_NQE_ACCEPT = 5,     /* completion: result = new slot, fd = its placeholder, payload = peer
	                        * address; -EAGAIN when none is queued */
	SL_NQE_CONNECT = 6,    /* payload = sockaddr. completion: 0 (connected), -EINPROGRESS (wait for
	                        * the placeholder to be writable, then GETSOCKOPT SO_ERROR), or -errno */
	SL_NQE_SHUTDOWN = 7,   /* arg0 = SHUT_RD/WR/RDWR; SHUT_WR is queued behind the send ring */
	SL_NQE_GETSOCKNAME = 8,/* completion payload = sockaddr */
	SL_NQE_GETPEERNAME = 9,/* completion payload = sockaddr, or -ENOTCONN */
	SL_NQE_SETSOCKOPT = 10,/* arg0 = level, arg1 = optname, payload = value */
	SL_NQE_GETSOCKOPT = 11,/* arg0 = level, arg1 = optname | (optlen << 32); completion payload */
	SL_NQE_STATS = 12,     /* completion payload = JSON (may be cut at SL_NQE_PAYLOAD_MAX; the
	                        * control command `stats` of stack.sock has no such limit) */
	SL_NQE_CONNECT_DGRAM_CLEAR = 13, /* connect(AF_UNSPEC) on a datagram socket */
	SL_NQE_KICK = 14,      /* no arguments, completion 0: serve this socket. A kick that found the
	                        * placeholder full of filler (send() -> EAGAIN) goes this way instead */
	SL_NQE_ATTACH = 15,    /* a socket whose slot says SL_SK_S_DIRECT ("Direct connections").
	                        * arg0 = 0: result = this end's half (0 or 1), fd = the connection's memfd;
	                        * arg0 = 1: result 0, fd = the peer's placeholder (engine end), or
	                        * -ENOTCONN once the peer is gone */
};

/* NQE flags */
#define SL_NQE_F_CLOEXEC  0x01u /* SOCKET/ACCEPT: the shim receives the fd with MSG_CMSG_CLOEXEC */
#define SL_NQE_F_PAYLOAD_CUT 0x02u /* completion: the payload was longer and was cut */

struct sl_nqe {
	uint8_t op;       /* enum sl_nqe_op */
	uint8_t flags;    /* SL_NQE_F_* */
	uint16_t len;     /* payload bytes after this NQE in the same message */
	uint32_t sock;    /* slot of the socket the call is about */
	int32_t result;   /* completion: >= 0, or -errno */
	uint32_t seq;     /* chosen by the shim, echoed */
	uint64_t arg0;
	uint64_t arg1;
};
_Static_assert(sizeof(struct sl_nqe) == 32, "an NQE is 32 bytes");

struct sl_nqe_hello {
	uint32_t version;       /* SL_SK_VERSION */
	uint32_t pid;
	uint8_t token[16];      /* zero: a new program; else the region token of the parent (fork) */
	char name[32];          /* the program's name (comm) for `sluice stats` */
};

/* A byte ring: free-running 64-bit positions, size a power of two. One producer, one consumer. */
struct sl_sk_ring {
	volatile uint64_t head;  /* consumer: bytes taken (own cache line) */
	uint64_t pad0[7];
	volatile uint64_t tail;  /* producer: bytes put */
	uint64_t pad1[7];
};
_Static_assert(sizeof(struct sl_sk_ring) == 128, "ring indices are two cache lines");

/* Datagram sockets put records in their rings: this header, then `len` bytes, then padding to 8.
 * Positions of records are multiples of 8 and a record never wraps: a producer whose record would
 * wrap puts a header with len = SL_SK_DGRAM_SKIP meaning "the rest up to the wrap is empty"; when
 * fewer than SL_SK_DGRAM_HDR bytes are left before the wrap, it writes nothing there and the
 * consumer skips them the same way without reading. A record takes
 * SL_SK_DGRAM_HDR + len rounded up to 8.
 *
 * Control messages (docs/sockets.md "Control messages") ride in each record's control area, a
 * fixed set of values with a bit each, never raw cmsg bytes:
 *   send ring     what the app's sendmsg asked for this datagram (IP_PKTINFO / IPV6_PKTINFO: the
 *                 source address and interface, IP_TTL, IP_TOS, IPV6_HOPLIMIT, IPV6_TCLASS), checked
 *                 by the shim as the kernel checks them; the engine applies them (kernel module:
 *                 as cmsgs of its sendmsg; shm: to the record it delivers);
 *   receive ring  what the engine knows of the datagram: the kernel's cmsgs of its recvmsg (kernel
 *                 module), or what the shm module synthesizes (the destination address, ifindex 1,
 *                 the sender's TTL/TOS, the time it was delivered). The shim turns into cmsgs only
 *                 the values whose option is on in the slot's rx_opts when the app receives.
 * Both sides can write the other's records: a reader ignores a control area whose `ver` is not
 * SL_SK_DCTL_V1 and bits it does not know, and writes no more than the app's msg_controllen. */
#define SL_SK_DCTL_V1      1
#define SL_SK_C_PKTINFO    0x01u /* IP_PKTINFO: ifindex4, spec_dst, addr4 */
#define SL_SK_C_TTL        0x02u /* IP_TTL: ttl */
#define SL_SK_C_TOS        0x04u /* IP_TOS: tos */
#define SL_SK_C_PKTINFO6   0x08u /* IPV6_PKTINFO: addr6, ifindex6 */
#define SL_SK_C_HOPLIMIT   0x10u /* IPV6_HOPLIMIT: hoplimit */
#define SL_SK_C_TCLASS     0x20u /* IPV6_TCLASS: tclass */
#define SL_SK_C_TSTAMP     0x40u /* receive ring: ts_ns */
#define SL_SK_C_TCLASS_M1  0x80u /* send ring, with TCLASS (tclass 0xff): the app's IPV6_TCLASS was -1, which
                                  * the kernel module passes on as -1 (Linux 6.x sends 0xff then) */
#define SL_SK_C_ALL        0x7fu /* the bits of a receive record */
#define SL_SK_C_SEND       0xbfu /* the bits of a send record */
struct sl_sk_dctl {
	uint16_t ver;              /* SL_SK_DCTL_V1; anything else: no control data */
	uint16_t has;              /* SL_SK_C_*: which fields hold a value */
	uint8_t ttl, tos;          /* IPv4 TTL and TOS */
	uint8_t hoplimit, tclass;  /* IPv6 hop limit and traffic class */
	uint32_t ifindex4;         /* IP_PKTINFO ipi_ifindex */
	uint32_t ifindex6;         /* IPV6_PKTINFO ipi6_ifindex */
	uint8_t spec_dst[4];       /* IP_PKTINFO ipi_spec_dst: receive: the local address; send: the source */
	uint8_t addr4[4];          /* IP_PKTINFO ipi_addr: receive: the destination (send: unused) */
	uint8_t addr6[16];         /* IPV6_PKTINFO ipi6_addr: receive: the destination; send: the source */
	int64_t ts_ns;             /* receive: CLOCK_REALTIME when it was received (kernel) or delivered (shm) */
};
_Static_assert(sizeof(struct sl_sk_dctl) == 48, "datagram control area is 48 bytes");

struct sl_sk_dgram {
	uint32_t len;
	uint16_t addr_len;         /* 0: no address (connected socket) */
	uint16_t pad;
	uint8_t addr[SL_SK_ADDR_MAX]; /* destination (send ring) or source (receive ring) */
	uint32_t pad1;
	struct sl_sk_dctl ctl;
};
_Static_assert(sizeof(struct sl_sk_dgram) == 88, "datagram record header is 88 bytes");
#define SL_SK_DGRAM_SKIP 0xffffffffu
#define SL_SK_DGRAM_ALIGN 8u
#define SL_SK_DGRAM_HDR 88u /* sizeof(struct sl_sk_dgram), a multiple of 8 */
_Static_assert(SL_SK_DGRAM_HDR % SL_SK_DGRAM_ALIGN == 0 && SL_SK_DGRAM_HDR == sizeof(struct sl_sk_dgram),
	       "a record's data starts 8-aligned right after its header");

/* sl_sk_slot.rx_opts: the receive options on (set by setsockopt through the engine), which decide
 * the cmsgs the shim makes from a record's control area. The first six are SL_SK_C_* bits. */
#define SL_SK_O_PKTINFO    SL_SK_C_PKTINFO  /* IP_PKTINFO */
#define SL_SK_O_RECVTTL    SL_SK_C_TTL      /* IP_RECVTTL */
#define SL_SK_O_RECVTOS    SL_SK_C_TOS      /* IP_RECVTOS */
#define SL_SK_O_RECVPKTINFO6 SL_SK_C_PKTINFO6 /* IPV6_RECVPKTINFO */
#define SL_SK_O_RECVHOPLIMIT SL_SK_C_HOPLIMIT /* IPV6_RECVHOPLIMIT */
#define SL_SK_O_RECVTCLASS SL_SK_C_TCLASS   /* IPV6_RECVTCLASS */
#define SL_SK_O_TSTAMP     SL_SK_C_TSTAMP   /* SO_TIMESTAMP or SO_TIMESTAMPNS (the kernel's SOCK_RCVTSTAMP) */
#define SL_SK_O_TSTAMPNS   0x80u            /* with TSTAMP: nanoseconds (SCM_TIMESTAMPNS) */
#define SL_SK_O_TSTAMP_NEW 0x100u           /* with TSTAMP: SO_TIMESTAMP*_NEW (the 64-bit time cmsgs) */

/* sl_sk_slot.state bits: written by the engine, read by the shim */
#define SL_SK_S_CONNECTED  0x01u /* a stream socket with a peer */
#define SL_SK_S_CONNECTING 0x02u
#define SL_SK_S_LISTENING  0x04u
#define SL_SK_S_RX_EOF     0x08u /* no more bytes will be put in the receive ring */
#define SL_SK_S_TX_CLOSED  0x10u /* the peer is gone (reset/EPIPE): sends fail with `error` */
#define SL_SK_S_SHUT_WR    0x20u /* shutdown(SHUT_WR) asked: the shim refuses further sends */
#define SL_SK_S_SHM        0x40u /* this connection runs on the shm module */
#define SL_SK_S_DIRECT     0x80u /* region slot only: the socket lives in a connection memfd now
                                  * (ATTACH it; "Direct connections" below) */
#define SL_SK_S_PEER_FIN   0x100u /* with TX_CLOSED (shm): the peer closed cleanly -- as over TCP, where its
                                   * reset answers the next segment, the shim takes one more send (lost)
                                   * and fails the ones after it with EPIPE */

/* sl_sk_slot.rd_token (the readable token, below) */
#define SL_SK_TOKEN_WRITING 2u
#define SL_SK_TOKEN_PRESENT 1u

/* One socket's shared state. The engine's and the shim's fields are on separate cache lines. */
struct sl_sk_slot {
	/* engine-written */
	volatile uint32_t gen;       /* bumped each time the slot is given out */
	volatile uint32_t state;     /* SL_SK_S_* */
	volatile int32_t error;      /* pending SO_ERROR (positive errno), 0: none */
	volatile uint32_t acceptq;   /* connections waiting for accept() (listening socket) */
	volatile uint32_t domain;
	volatile uint32_t type;
	volatile uint32_t rx_opts;   /* SL_SK_O_*: the receive options on (datagram control messages) */
	uint32_t pad0[9];
	/* both sides, with atomic exchange */
	volatile uint32_t rd_token;  /* SL_SK_TOKEN_*: the readable token (below) */
	volatile uint32_t tx_kick;   /* 1 while a kick for new send-ring data is on its way */
	volatile uint32_t rx_wanted; /* 1 when the engine stopped filling a full receive ring */
	volatile uint32_t rx_spin;   /* app: 1 while a thread polls the receive ring (no token wanted) */
	volatile uint32_t peer_tokens; /* direct: tokens the peer put (its count: statistics only) */
	volatile uint32_t peer_polled; /* direct: tokens the peer left out as rx_spin was 1 (the same) */
	volatile uint32_t rx_waiters; /* app: threads waiting for the token other than by looking at the ring */
	volatile uint32_t rx_loop;    /* app: 1 once an event loop held rx_spin (sticky; "Awake event loops") */
	uint32_t pad1[8];
	struct sl_sk_ring rx;        /* engine produces, app consumes */
	struct sl_sk_ring tx;        /* app produces, engine consumes */
	/* then: rx data (ring_bytes), tx data (ring_bytes), at the offsets sl_sk_rx_data/_tx_data give */
};
_Static_assert(sizeof(struct sl_sk_slot) == 384, "slot header is 384 bytes");

struct sl_sk_region {
	uint32_t magic;        /* SL_SK_MAGIC */
	uint32_t version;      /* SL_SK_VERSION */
	uint64_t size;         /* bytes of the memfd */
	uint32_t nslots;
	uint32_t ring_bytes;   /* each ring's data bytes, a power of two */
	uint64_t slot_bytes;   /* distance between slots */
	uint64_t app_id;
	uint8_t token[16];     /* a child after fork shows this in HELLO to join its parent's program */
	volatile uint32_t engine_awake; /* engine: 1 while it is between two sleeps ("Kicks" below) */
	volatile uint32_t tx_dirty;     /* app: 1 when a send ring got data that no kick announced */
	uint32_t app_poll_us;           /* engine: how long a blocking receive polls before it sleeps */
	uint8_t pad[4096 - 68];
};
_Static_assert(sizeof(struct sl_sk_region) == 4096, "region header is one page");

static inline struct sl_sk_slot *sl_sk_slot_at(void *region, uint32_t slot)
{
	struct sl_sk_region *r = (struct sl_sk_region *)region;
	return (struct sl_sk_slot *)((char *)region + sizeof(*r) + (uint64_t)slot * r->slot_bytes);
}
static inline uint8_t *sl_sk_rx_data(struct sl_sk_slot *s) { return (uint8_t *)s + 4096; }
static inline uint8_t *sl_sk_tx_data(struct sl_sk_slot *s, uint32_t ring_bytes)
{
	return (uint8_t *)s + 4096 + ring_bytes;
}

/* Byte-ring helpers for both sides. `size` is the ring's data bytes (a power of two). The caller
 * has taken its snapshot of the other side's index with an acquire load and checked it. */
static inline uint64_t sl_sk_load_acquire(const volatile uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void sl_sk_store_release(volatile uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline uint32_t sl_sk_xchg(volatile uint32_t *p, uint32_t v)
{
	return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
static inline int sl_sk_cas(volatile uint32_t *p, uint32_t expect, uint32_t v)
{
	return __atomic_compare_exchange_n(p, &expect, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
/* copy n bytes into the ring's data at position pos (wrapping) */
static inline void sl_sk_ring_write(uint8_t *data, uint32_t size, uint64_t pos, const void *src, uint64_t n)
{
	uint64_t off = pos & (size - 1), first = size - off < n ? size - off : n;
	__builtin_memcpy(data + off, src, first);
	if (n > first)
		__builtin_memcpy(data, (const uint8_t *)src + first, n - first);
}
/* copy n bytes out of the ring's data from position pos (wrapping) */
static inline void sl_sk_ring_read(const uint8_t *data, uint32_t size, uint64_t pos, void *dst, uint64_t n)
{
	uint64_t off = pos & (size - 1), first = size - off < n ? size - off : n;
	__builtin_memcpy(dst, data + off, first);
	if (n > first)
		__builtin_memcpy((uint8_t *)dst + first, data, n - first);
}

/* The readable token. rd_token is 0 (no byte), SL_SK_TOKEN_WRITING (the engine is putting one) or
 * SL_SK_TOKEN_PRESENT (a byte is in the placeholder). A placeholder must never be readable with
 * nothing to read (the kernel never wakes a TCP socket without data, and programs such as wrk count
 * an EAGAIN after a wakeup as an error), so both sides follow this exactly:
 *   engine, when the socket is readable (ring not empty, EOF, error, acceptq > 0):
 *       if CAS(&rd_token, 0, WRITING): look again (seq_cst load of the ring's head); if still
 *       readable, write one byte to its end and store PRESENT, else store 0;
 *   shim, whenever it finds the socket not readable (after a read that emptied it, before EAGAIN or
 *   a wait): store the ring's head, then a seq_cst fence, then load rd_token: while it is WRITING,
 *   sched_yield (the engine is one send() away; give up if the placeholder shows the service gone);
 *   if it is PRESENT and CAS(PRESENT, 0) succeeds, read every byte of the placeholder
 *   (MSG_DONTWAIT); then look again: if readable now, kick (the engine puts the token back).
 * The store/fence/load on one side and the CAS/load on the other make sure that when the engine saw
 * data the shim has since taken, the shim sees the engine's token and takes it too.
 * Kicks: after putting send-ring data, if (xchg(&tx_kick, 1) == 0): xchg(&region.tx_dirty, 1), then
 * (seq_cst) if region.engine_awake is 0, write one byte. An awake engine looks at every region's
 * tx_dirty each turn (xchg it to 0, then serve the sockets whose tx_kick is 1), and before it sleeps
 * it stores engine_awake 0 in every region, then (seq_cst) looks at tx_dirty once more: either the app
 * sees it asleep and kicks, or it sees the flag. Under load the engine is awake most of the time and
 * new data costs neither side a system call.
 * Polling receivers (NetKernel's interrupt-driven polling, app side): a thread about to block in a
 * receive on an empty ring polls it for up to region.app_poll_us first, with xchg(&rx_spin, 1) before
 * and xchg(&rx_spin, 0) after, then looks at the ring once more before it sleeps. The engine, having
 * published receive-ring data (or EOF, an error, a connection to accept), issues a seq_cst fence and
 * puts no token while rx_spin is 1: the poller sees the data itself, and neither side makes a system
 * call. Either the engine sees rx_spin 0 and puts the token, or the app's last look sees the data.
 * After taking receive-ring data, if
 * (xchg(&rx_wanted, 0) == 1) write one byte. The engine clears tx_kick before it reads the send ring. A full send ring: the shim writes filler bytes (MSG_DONTWAIT) until the
 * placeholder is not writable; the engine leaves bytes in its end while the send ring is more than
 * 3/4 full and reads them all once it is not.
 *
 * Awake event loops (the shim's epoll table, docs/sockets.md "epoll"): an epoll instance holds rx_spin
 * (sets it to 1, and rx_loop) for its connected streams registered level-triggered or EPOLLET alone
 * while a thread of it is awake, and looks at their rings in epoll_wait (an edge-triggered one is
 * reported when its rx tail moved); with app_poll_us > 0 an epoll_wait that found nothing goes on
 * looking for that long; before a thread of it sleeps in the kernel it lets
 * go of them (rx_spin 0, a seq_cst fence, one more look at each ring). A thread that waits for a
 * socket's token by other means -- a blocking receive's sleep, poll/select -- first increments
 * rx_waiters (seq_cst), then clears rx_spin and does the token step of the readable token (data put
 * while it was held has no token yet); the event loop, after it set rx_spin, reads rx_waiters and
 * lets go (with the token step) when it is not 0. Either the loop sees the waiter or the waiter sees
 * the hold.
 *
 * Direct connections (shm module, both ends of the same uid and without a rate limit): the engine
 * leaves the data path. At connect it makes one memfd for the connection holding two slots laid out
 * as in a region (slot_bytes apart), half 0 the connecting end's, half 1 the accepted end's; from
 * then on it writes each end's state, error and tokens there, and sets SL_SK_S_DIRECT in the
 * region slots, which it no longer touches. The shim ATTACHes: maps the memfd and takes a copy of
 * the peer's placeholder engine end (kept at a high fd the program cannot close). A sender puts its
 * bytes straight into the PEER's receive ring (rx of the other half) and then plays the engine's
 * part of the readable token for the peer: seq_cst fence; if the peer's rx_spin is 1, nothing;
 * else if CAS(&peer.rd_token, 0, WRITING): look again, write one byte into the peer's engine end if
 * still readable, store PRESENT (else 0). So a message costs the engine nothing, and one to a peer
 * that polls (rx_spin 1) costs neither side a system call. (The engine still puts the peer's token
 * when a kick asks it to serve an end, as a fallback.) A full peer ring:
 * the sender fills its own placeholder as before; the engine, reading that filler, leaves it while
 * the peer's ring is more than 3/4 full and sets the peer's rx_wanted, so the peer's next receive
 * kicks it. End of stream, resets and close stay the engine's (it sees the calls and the
 * placeholders), and it still checks every index it reads there. Either end can write the whole
 * connection memfd and its peer's engine end: a hostile peer can end or stall that connection (as
 * it could by never reading), nothing else; every reader checks indices (0 <= tail - head <= ring
 * size) and a reader waits at most ~50 ms for a WRITING token that never settles. */

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_SOCK_H */
