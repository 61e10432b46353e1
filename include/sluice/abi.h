/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Sluice NF attach ABI: the wire format between sluiced and an NF process.
 *
 * Everything an NF ever sees of the manager is defined here: the attach
 * messages on the UNIX stream socket, the shared ring layout and the 16-byte
 * packet descriptor. No pointers and no DPDK types cross this boundary; all
 * references are (region, offset) pairs so memory maps at any address.
 *
 * Versioning: SL_ABI_VERSION is bumped on any incompatible change. Every
 * message carries the magic and the version; a mismatch is rejected with
 * SL_ERR_VERSION and the connection is closed.
 */
#ifndef SLUICE_ABI_H
#define SLUICE_ABI_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_ABI_MAGIC   0x534c4345u /* "SLCE" */
#define SL_ABI_VERSION 1u

#define SL_NAME_MAX    32  /* NF and service names, NUL included */
#define SL_REASON_MAX  96  /* DISCONNECT reason text, NUL included */
#define SL_TOKEN_MAX   32  /* attach token bytes in INIT (a token of 32 characters fills it, no NUL) */
#define SL_CACHE_LINE  64

/* ------------------------------------------------------------------------ */
/* Error codes: one enum for the whole ABI (DISCONNECT codes, SDK returns).  */
/* SDK functions return them negated, like -errno.                            */
enum sl_err {
	SL_OK = 0,
	SL_ERR_MAGIC = 1,       /* bad magic cookie */
	SL_ERR_VERSION = 2,     /* ABI version mismatch */
	SL_ERR_TRUNCATED = 3,   /* message shorter than its fixed size */
	SL_ERR_TYPE = 4,        /* unknown message type */
	SL_ERR_ORDER = 5,       /* message not valid in this protocol state */
	SL_ERR_FIELD = 6,       /* a field is out of range (names unterminated, bad mode...) */
	SL_ERR_FDS = 7,         /* wrong number of fds passed with a message */
	SL_ERR_PERM = 8,        /* peer credentials refused */
	SL_ERR_NOMEM = 9,       /* manager or NF could not allocate */
	SL_ERR_LIMIT = 10,      /* too many NFs */
	SL_ERR_SHUTDOWN = 11,   /* orderly shutdown by either side */
	SL_ERR_IO = 12,         /* socket error or peer vanished */
	SL_ERR_NAME = 13,       /* NF name already attached */
	SL_ERR_TIMEOUT = 14,    /* attach did not complete in time */
	SL_ERR_MAP = 15,        /* mmap of a region or ring failed */
	SL_ERR_RING = 16,       /* ring protocol violation: an index moved backwards or past the ring */
	SL_ERR_RESTART = 17,    /* the manager restarts: attach again to the new one (docs/abi.md "Restarts") */
	SL_ERR__COUNT
};

/* ------------------------------------------------------------------------ */
/* Packet descriptor: 16 bytes, the only thing that moves per packet.        */

enum sl_action {
	SL_ACT_NEXT = 0,   /* continue along the chain (default) */
	SL_ACT_TO_NF = 1,  /* dest = service id: hand to that service */
	SL_ACT_OUT = 2,    /* dest = port id: transmit on that port */
	SL_ACT_DROP = 3,   /* give the buffer back to the pool */
	SL_ACT_OUT_SET = 4, /* transmit on several ports: the struct sl_out_set in the headroom, just
	                     * before the data, says which (dest ignored; flooding, multicast) */
	SL_ACT__COUNT
};

/* The port set of an SL_ACT_OUT_SET packet, written by the NF in the buffer's headroom at
 * (data - sizeof(struct sl_out_set)); the descriptor's headroom must hold it. Bit i of a mask is
 * port id i. Every port in `as_is` transmits the buffer as the NF returned it (shared by reference
 * count: no copy); every port in `untag` gets the frame without its outer 802.1Q/802.1ad tag, and
 * every port in `tag` gets it with an 802.1Q tag of TCI `tci` pushed after the MAC addresses: these
 * two need a copy of the frame each (the only copies the manager makes; counted). A port in
 * several masks gets one frame per mask. A bit naming no port, or a wrong magic, makes the whole
 * descriptor invalid (the packet is dropped and counted as an invalid descriptor). */
#define SL_OUT_SET_MAGIC 0x5e75
struct sl_out_set {
	uint64_t as_is;
	uint64_t untag;
	uint64_t tag;
	uint16_t tci;
	uint16_t magic;   /* SL_OUT_SET_MAGIC */
	uint32_t reserved; /* 0 */
};
_Static_assert(sizeof(struct sl_out_set) == 32, "sl_out_set is 32 bytes");

/* Flags an NF may or into `action` with an action (docs/steering.md "NF-directed steering"): the
 * manager enters this packet's flow (ingress port + 5-tuple of the headers as returned) in its
 * flow table with this action (PIN), or forgets the flow's entry (UNPIN), then acts on the packet. */
#define SL_ACT_MASK     0x0f
#define SL_ACT_F_UNPIN  0x40
#define SL_ACT_F_PIN    0x80

struct sl_desc {
	uint32_t buf;    /* buffer id inside the region (lent by the manager) */
	uint32_t off;    /* region offset of the first data byte */
	uint16_t len;    /* data length in bytes */
	uint16_t head;   /* headroom: bytes from buffer start to data (off - head = buffer start) */
	uint8_t region;  /* region index (one region per trust domain) */
	uint8_t action;  /* NF -> manager: enum sl_action | SL_ACT_F_*; manager -> NF: 0 */
	uint16_t dest;   /* NF -> manager: service or port id; manager -> NF: ingress port id */
};
_Static_assert(sizeof(struct sl_desc) == 16, "sl_desc must be 16 bytes");

/* ------------------------------------------------------------------------ */
/* Ring: single producer, single consumer, power-of-two slots, free-running   */
/* 32-bit indices. The producer owns `prod`, the consumer owns `cons` and      */
/* `need_kick`; each on its own cache line. The consumer of an RX ring is the  */
/* NF; of a TX ring, the manager.                                             */

struct sl_ring {
	/* producer line */
	_Alignas(SL_CACHE_LINE) uint32_t prod;   /* next slot to fill (release-stored) */
	uint32_t prod_kicks;                    /* producer-side count of eventfd kicks sent */
	/* consumer line */
	_Alignas(SL_CACHE_LINE) uint32_t cons;   /* next slot to read (release-stored) */
	uint32_t need_kick;                     /* consumer is (about to be) asleep: kick its eventfd */
	/* constant line, written once by the manager before the NF sees it */
	_Alignas(SL_CACHE_LINE) uint32_t size;   /* slots, power of two */
	uint32_t mask;                          /* size - 1 */
	uint32_t magic;                         /* SL_ABI_MAGIC */
	uint32_t reserved;
	_Alignas(SL_CACHE_LINE) struct sl_desc desc[];
};
_Static_assert(sizeof(struct sl_ring) == 3 * SL_CACHE_LINE, "ring header is 3 cache lines");

/* Bytes a ring of `slots` descriptors occupies in shared memory. */
static inline size_t sl_ring_bytes(uint32_t slots)
{
	return sizeof(struct sl_ring) + (size_t)slots * sizeof(struct sl_desc);
}

/* NF info page: after the two rings in the ring memfd (CONNECTED gives its offset). The manager  */
/* writes the port names once, before CONNECTED; the NF writes its named counters, which the      */
/* manager reports as the NF's `counters`. The manager never trusts what it reads back: it bounds */
/* `count`, cuts names at SL_COUNTER_NAME_MAX and drops characters outside [A-Za-z0-9_.:-].       */

#define SL_INFO_PORTS_MAX   32  /* port names the page holds (the manager's port limit) */
#define SL_COUNTER_NAME_MAX 24  /* counter names, NUL included */
#define SL_COUNTERS_MAX     1024

struct sl_counter {
	char name[SL_COUNTER_NAME_MAX];
	uint64_t value;                 /* written by the NF only (one writer, aligned 64-bit stores) */
};
_Static_assert(sizeof(struct sl_counter) == 32, "counter is 32 bytes");

/* Pipe input (docs/abi.md "Pipes"): where the NF reads the pipe ring of its upstream NF, if it has
 * one. The manager writes offset/start/fence and then bumps epoch (release); the NF, on seeing a new
 * epoch, stops reading the old pipe, starts on the new one (offset SL_PIPE_NONE: none) at `start`,
 * and stores `cons` then `ack` = epoch. `cons` is the NF's consumer index in that pipe ring, stored
 * (release) after every read: the manager accounts the buffers it took from it. */
#define SL_PIPE_NONE UINT64_MAX
struct sl_pipe_in {
	uint32_t epoch;   /* manager */
	uint32_t start;   /* manager: first index to read in the new pipe ring */
	uint64_t offset;  /* manager: byte offset of the upstream's pipe ring in the pipe map (ADD_PIPE) */
	uint32_t fence;   /* manager: read the pipe only once the RX ring's consumer index reached this */
	uint32_t ack;     /* NF: the epoch it follows */
	uint32_t cons;    /* NF: next index it will read in the pipe ring */
	uint32_t pad;
};
_Static_assert(sizeof(struct sl_pipe_in) == 32, "pipe_in is 32 bytes");

struct sl_nf_info {
	uint32_t magic;                 /* SL_ABI_MAGIC */
	uint32_t port_count;            /* ports 0..port_count-1 are named below */
	uint32_t counters_max;          /* SL_COUNTERS_MAX */
	uint32_t counters_used;         /* NF: entries in use (release-stored after the entry's name) */
	struct sl_pipe_in pipe_in;      /* was reserved (zero): an SDK without pipes never reads it */
	uint8_t reserved[SL_CACHE_LINE - 16 - sizeof(struct sl_pipe_in)];
	char port_name[SL_INFO_PORTS_MAX][SL_NAME_MAX];
	struct sl_counter counter[SL_COUNTERS_MAX];
};
_Static_assert(offsetof(struct sl_nf_info, port_name) == SL_CACHE_LINE, "info header is one cache line");
_Static_assert(offsetof(struct sl_nf_info, counter) % 8 == 0, "counters are 8-byte aligned");

/* ------------------------------------------------------------------------ */
/* Attach messages: every message is exactly SL_MSG_SIZE bytes.               */
/*                                                                            */
/*   NF connects ->                                                           */
/*   <- HELLO          manager's version and limits                           */
/*   -> INIT           NF name, service, wakeup mode                          */
/*   <- ADD_REGION     + fd (memfd of a packet region), once per region       */
/*   <- ADD_RING       + 2 fds (ring memfd, eventfd), RX ring then TX ring    */
/*   <- ADD_PIPE       + fd (the domain's pipe memfd), only to an NF whose    */
/*                     INIT has SL_INIT_F_PIPES, when the manager runs pipes  */
/*   <- CONNECTED      NF id, port table size                                 */
/*   ... packets flow over the rings ...                                      */
/*   <-> DISCONNECT    code + reason, then close                              */

enum sl_msg_type {
	SL_MSG_HELLO = 1,
	SL_MSG_INIT = 2,
	SL_MSG_ADD_REGION = 3,
	SL_MSG_ADD_RING = 4,
	SL_MSG_CONNECTED = 5,
	SL_MSG_DISCONNECT = 6,
	SL_MSG_ADD_PIPE = 7,
	SL_MSG__COUNT
};

enum sl_wakeup {
	SL_WAKE_POLL = 0,      /* spin on the RX ring */
	SL_WAKE_BLOCK = 1,     /* sleep on the eventfd until kicked */
	SL_WAKE_ADAPTIVE = 2,  /* spin for spin_us, then block */
	SL_WAKE__COUNT
};

enum sl_ring_dir {
	SL_RING_RX = 0,  /* manager -> NF */
	SL_RING_TX = 1,  /* NF -> manager */
};

struct sl_msg_hello {
	uint32_t max_nfs;
	uint32_t ring_size;      /* slots the manager will give each ring */
	char manager[SL_NAME_MAX];
};

struct sl_msg_init {
	char name[SL_NAME_MAX];     /* instance name, unique: "fwd.0" */
	char service[SL_NAME_MAX];  /* service it serves: "fwd" */
	uint8_t wakeup;             /* enum sl_wakeup */
	uint8_t flags;              /* SL_INIT_F_*: what this SDK can do (was zero padding: an older
	                             * manager ignores it) */
	uint16_t supply;            /* with SL_INIT_F_SUPPLY: empty buffers the NF wants in hand (was
	                             * zero padding); the manager caps it (docs/abi.md "Supply") */
	uint32_t batch;             /* block mode: kick when this many wait (1..ring size) */
	uint32_t timeout_us;        /* block mode: kick when the oldest waits this long */
	uint32_t pid;               /* informative; the manager trusts SO_PEERCRED */
	uint8_t token[SL_TOKEN_MAX]; /* the service's attach token (SLUICE_NF_TOKEN), NUL-padded; all
	                              * zero: none. A manager configured with tokens refuses an INIT whose
	                              * token is not its service's (SL_ERR_PERM). Added in version 1: an
	                              * older SDK sends zeros here (the message body is zero-filled) */
};
_Static_assert(offsetof(struct sl_msg_init, token) == 80, "the token follows pid");
/* INIT flags. PIPES: the SDK takes ADD_PIPE, writes its plain NEXT descriptors on its pipe ring and
 * follows sl_nf_info.pipe_in (docs/abi.md "Pipes"). */
#define SL_INIT_F_PIPES 0x1u
/* INIT flag DOORBELL (a guest NF, docs/guests.md "Wakeups"): it can ring sluiced when its TX ring's
 * need_kick is set and sleep until kicked, as a process does with its eventfds; without it sluiced
 * never parks a guest NF and the NF naps instead of sleeping. Processes need not set it. */
#define SL_INIT_F_DOORBELL 0x2u
/* INIT flag SUPPLY (an endpoint that makes frames of its own: a TCP/IP stack, a generator; docs/abi.md
 * "Supply"): the manager keeps up to init.supply empty buffers in the NF's hands. Each comes on the RX
 * ring as a descriptor with len 0 and dest SL_DEST_SUPPLY; the NF writes a frame into it and returns it
 * like any packet, and SL_ACT_NEXT sends it along the first chain that starts with the NF's service
 * and has an exit port (the manager's "supply chain"). An NF with SUPPLY gets no pipes. */
#define SL_INIT_F_SUPPLY 0x4u
#define SL_DEST_SUPPLY 0xffffu
#define SL_SUPPLY_MAX  4096u  /* init.supply at most */

struct sl_msg_add_region {
	uint64_t size;         /* bytes to mmap from the fd */
	uint32_t index;        /* region index used in descriptors */
	uint32_t buf_count;    /* buffers in the region */
	uint32_t buf_size;     /* bytes of every buffer (headroom + data room) */
	uint32_t headroom;     /* default headroom of a fresh buffer */
	uint32_t flags;        /* SL_REGION_F_*; was zero padding (an older SDK ignores it: see docs/abi.md) */
	uint32_t pad;
};
/* ADD_REGION flags. RO: the fd is read-only (access: ro); map it PROT_READ (a writable shared
 * mapping is refused by the kernel), and return descriptors with off/len unchanged. */
#define SL_REGION_F_RO 0x1u
#define SL_REGION_F__ALL SL_REGION_F_RO
_Static_assert(sizeof(struct sl_msg_add_region) == 32, "add_region is 32 bytes");

struct sl_msg_add_ring {
	uint64_t offset;       /* byte offset of the ring inside the ring memfd */
	uint64_t map_size;     /* bytes to mmap from the ring memfd (whole memfd) */
	uint32_t index;
	uint32_t dir;          /* enum sl_ring_dir */
	uint32_t size;         /* slots */
	uint32_t pad;
};

/* ADD_PIPE: the domain's pipe memfd, mapped read-write whole (map_size). The NF's own pipe ring (its
 * output for plain NEXT descriptors) is at out_offset; the pipe rings it may be told to read
 * (sl_nf_info.pipe_in.offset) are in the same map. Every ring has `size` slots. */
struct sl_msg_add_pipe {
	uint64_t map_size;
	uint64_t out_offset;
	uint32_t size;
	uint32_t pad;
};

struct sl_msg_connected {
	uint32_t nf_id;
	uint32_t service_id;
	uint32_t port_count;   /* ports known to the manager at attach time */
	uint32_t pad;
	uint64_t info_offset;  /* struct sl_nf_info inside the ring memfd (both ring maps cover it) */
	uint64_t info_size;    /* bytes from info_offset: at least sizeof(struct sl_nf_info) */
};

struct sl_msg_disconnect {
	uint32_t code;              /* enum sl_err */
	char reason[SL_REASON_MAX];
};

#define SL_MSG_SIZE 128

struct sl_msg {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	union {
		struct sl_msg_hello hello;
		struct sl_msg_init init;
		struct sl_msg_add_region add_region;
		struct sl_msg_add_ring add_ring;
		struct sl_msg_connected connected;
		struct sl_msg_disconnect disconnect;
		struct sl_msg_add_pipe add_pipe;
		uint8_t raw[SL_MSG_SIZE - 8];
	} u;
};
_Static_assert(sizeof(struct sl_msg) == SL_MSG_SIZE, "attach messages are fixed-size");
_Static_assert(sizeof(struct sl_msg_init) <= SL_MSG_SIZE - 8, "init fits");
_Static_assert(sizeof(struct sl_msg_disconnect) <= SL_MSG_SIZE - 8, "disconnect fits");
_Static_assert(offsetof(struct sl_msg, u) == 8, "header is 8 bytes");

/* Number of fds that must accompany each message type. */
static inline int sl_msg_fd_count(uint16_t type)
{
	switch (type) {
	case SL_MSG_ADD_REGION: return 1;
	case SL_MSG_ADD_PIPE: return 1;
	case SL_MSG_ADD_RING: return 2;
	default: return 0;
	}
}

/* Validate a received message: returns SL_OK or an enum sl_err.
 * `len` is the number of bytes received, `nfds` the fds that came with it,
 * `expect` the message type the protocol state allows (0 = any known type). */
int sl_msg_check(const struct sl_msg *m, size_t len, int nfds, uint16_t expect);

/* Fill the header of a message and zero its body. */
void sl_msg_init(struct sl_msg *m, uint16_t type);

/* Text for an enum sl_err (never NULL). */
const char *sl_strerror(int err);

/* The name of an enum sl_wakeup: "poll", "block", "adaptive" ("unknown" out of range; never NULL). */
const char *sl_wakeup_name(int wakeup);

/* The enum sl_wakeup a name gives (SLUICE_NF_WAKEUP, --wakeup): 0 and *out set, or -1 if `s` is
 * none of "poll", "block", "adaptive". */
int sl_wakeup_parse(const char *s, enum sl_wakeup *out);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_ABI_H */
