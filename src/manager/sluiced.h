/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluiced internals shared by its modules.
 *
 * Threads: the main lcore runs the control loop (attach socket, control
 * socket, signals); one worker lcore runs the data path. The worker owns the
 * per-buffer state, service instance lists and every packet counter; the
 * control side changes what the worker sees only through commands the worker
 * executes between bursts (worker_call), so there are no locks on the path.
 */
#ifndef SLUICED_H
#define SLUICED_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_acl.h>
#include <rte_spinlock.h>
#include <jansson.h>

#include "sluice/abi.h"
#include "sluice/guest.h"
#include "lend.h"
#include "nfring.h"
#include "pktkey.h"
#include "nfinfo.h"

#define SLUICED_VERSION "0.1.0"
#define SL_MAX_PORTS 32
_Static_assert(SL_MAX_PORTS <= SL_INFO_PORTS_MAX, "every port has a name in the NF info page");
/* Packets the worker takes from a port or an NF's TX ring per look, and stages for an NF or a port
 * before it flushes. Each look costs loads of ring indices the other core wrote and stores it must
 * take back; at 32 these fixed costs bounded one NF at 64 B, at 128 it moved 13-33 % more
 * (bench/notes.md "Bursts"). NFs still take at most SL_BURST_MAX per handler call. */
#define SL_BURST 128
#define SL_MAX_WORKERS 8  /* sluiced.workers at most */
#define SL_MAX_QUEUES 8   /* ports[].queues at most: RX queues of a port (docs/ports.md "Multi-queue ports") */
#define SL_MAX_DOMAINS 64 /* trust domains = regions (ids 0..63; 0 = default, holds the ports) */
#define SL_MAX_INSTANCES 1024 /* replicas per service (the flow and least_loaded picks are O(replicas)) */
#define SL_MAX_NFS_LIMIT 16384 /* sluiced.max_nfs at most (NF ids are 16-bit; buffer owner = id + 1) */
#define SL_NAME_LEN SL_NAME_MAX

/* ---- configuration (config.c) ---- */

/* A port's device options (ports[].rx_desc, tx_desc, mtu, offloads; docs/ports.md "PCI NICs"). Zero /
 * offloads_set false: sluiced's defaults (1024 descriptors, the MTU buffer_size implies, VLAN_STRIP
 * where offered with the tag put back by the worker). */
enum { PORT_OFF_RX_CSUM = 1u << 0, PORT_OFF_VLAN_STRIP = 1u << 1, PORT_OFF_VLAN_INSERT = 1u << 2, PORT_OFF__COUNT = 3 };
extern const char *const port_offload_names[PORT_OFF__COUNT];
struct port_opts {
	uint16_t rx_desc, tx_desc; /* 64..16384, powers of two */
	uint16_t mtu;              /* 68..9600, frames of mtu + 18 fit buffer_size */
	bool offloads_set;         /* `offloads:` given: exactly these (an empty list: none) */
	uint8_t offloads;          /* PORT_OFF_* */
};
/* Parse a port entry's options (config or port_add request) into o; `where` prefixes error fields
 * ("ports[0]"); room: the buffers' data room (sluiced.buffer_size). 0 or -1 with err. */
int port_opts_parse(json_t *v, const char *where, uint32_t room, struct port_opts *o, char *err, size_t errlen);

struct cfg_port {
	char name[SL_NAME_LEN];
	char vdev[256];
	char chain[SL_NAME_LEN]; /* ingress chain, "" = none */
	struct port_opts opts;
	uint8_t queues;          /* RX queues (ports[].queues, 1..SL_MAX_QUEUES; default 1) */
};

struct cfg_chain {
	char name[SL_NAME_LEN];
	unsigned nsvc;
	char (*svc)[SL_NAME_LEN];
	char exit[SL_NAME_LEN]; /* "" = none */
};

struct config {
	uint32_t pool_mbufs;
	uint32_t buffer_size;       /* sluiced.buffer_size: data room of a buffer of the default domain (and
	                             * of every domain that names none) */
	uint32_t ring_size;
	uint32_t max_nfs;
	bool pipes;                 /* sluiced.pipes: NF-to-NF pipes on static chain edges (pipe.c) */
	bool nf_fifo;               /* sluiced.nf_sched: fifo (sched.c) */
	uint32_t workers;           /* sluiced.workers: worker lcores (lcores names main + one per worker) */
	int huge; /* -1 auto, 0 off, 1 on */
	char lcores[64];
	unsigned nports;
	struct cfg_port ports[SL_MAX_PORTS];
	unsigned nchains;
	struct cfg_chain *chains;
	unsigned nservices;         /* service names declared under nfs: */
	char (*services)[SL_NAME_LEN];
	uint8_t *service_policy;    /* enum svc_policy per declared service */
	uint8_t *service_domain;    /* domain id per declared service */
	uint8_t *service_ro;        /* access ro (1) or rw (0) per declared service */
	unsigned ndomains;          /* domains[0] is "default" (pool_mbufs); then the config's, in order */
	struct cfg_domain {
		char name[SL_NAME_LEN];
		uint32_t pool_mbufs;
		uint32_t buffer_size; /* data room per buffer (domains[].buffer_size, default sluiced.buffer_size) */
	} domains[SL_MAX_DOMAINS];
	json_t *rules;              /* steering rules (docs/steering.md), resolved once ports and chains exist */
	json_t *malformed;          /* steering.malformed action, NULL = drop */
	uint32_t flows;             /* steering.flows: flow table entries, 0 = no flow table */
	uint32_t flow_idle_ms;      /* steering.flow_idle_ms: idle flows expire after this */
	/* authorisation (docs/abi.md "Service tokens" and "Next hops"; docs/api.md "Violations") */
	bool attach_token;          /* sluiced.attach "token": an INIT must name a declared service and
	                             * carry its token; "open" (default): any service, no token */
	struct cfg_auth *auth;      /* per declared service (nfs[i]) */
};

/* What one declared service may do (nfs[i].token, .quota, .may_send). */
struct cfg_auth {
	bool has_token;
	uint8_t token[SL_TOKEN_MAX];   /* NUL-padded */
	uint32_t quota;                /* buffers one instance may hold, 0 = ring_size */
	bool may_any;                  /* no may_send: any destination (as before) */
	uint64_t ports;                /* may_send.ports (port indices), besides its chains' */
	unsigned nsvc;                 /* may_send.services, besides those after it in its chains */
	char (*svc)[SL_NAME_LEN];
};

/* Parse a JSON config file. Returns 0, or -1 with a message naming the field in err. */
int config_load(const char *path, struct config *c, char *err, size_t errlen);
/* enum svc_policy of its name, or -1. */
int svc_policy_parse(const char *s);
/* Is s a valid port/chain/service/NF name (1-31 of A-Z a-z 0-9 _ - .)? */
bool config_valid_name(const char *s);
/* Free what config_load allocated. */
void config_free(struct config *c);
/* Index of a service declared under nfs: (into services, service_domain, service_ro, auth), or -1. */
int config_service_index(const struct config *c, const char *service);

/* ---- packet memory (mem.c): one region per trust domain ---- */

/* A region's buffers are headroom + data room bytes; the data room is the domain's buffer_size
 * (sluiced.buffer_size, domains[].buffer_size): one contiguous buffer per packet, so a jumbo frame
 * needs a jumbo buffer (docs/abi.md "Buffer size and jumbo frames"). */
#define SL_DATA_ROOM 2048        /* default data room (sluiced.buffer_size) */
#define SL_DATA_ROOM_MIN 2048
#define SL_DATA_ROOM_MAX 16384   /* 9,000-byte MTU + Ethernet and VLAN headers fit with room to spare */
#define SL_DATA_ROOM_ALIGN 64    /* data rooms are whole cache lines: every buffer starts aligned */
#define SL_REGION_MAX_BYTES (1ull << 32) /* descriptor offsets (sl_desc.off) are 32-bit */
#define SL_BUF_SIZE (SL_DATA_ROOM + RTE_PKTMBUF_HEADROOM) /* bytes of a default-sized buffer */
#define SL_REGION_NONE 0xff   /* mbuf_priv.region of an mbuf of no region (a port's own pool) */

/* The mbuf's private area (sluiced's memory, like the whole header): which buffer it is. */
struct mbuf_priv {
	uint32_t id;      /* buffer id in its region */
	uint8_t region;   /* region (= domain) index, SL_REGION_NONE: a port's private pool */
	/* a packet handed to another worker (datapath.c "Workers"): where it goes there */
	uint8_t h_kind;   /* HAND_NF or HAND_PORT */
	uint16_t h_chain;
	uint16_t h_target; /* NF id or port id */
	uint16_t h_in_port;
	uint8_t h_hop;
	uint8_t pad[3];
};
_Static_assert(sizeof(struct mbuf_priv) % 8 == 0, "mbuf private area: RTE_MBUF_PRIV_ALIGN");

struct rte_device; /* rte_dev.h: a PCI device a region is mapped for */
#define REGION_STASH 32
struct region {
	int fd;               /* memfd (mode 0600), sent to the domain's rw NFs */
	int ro_fd;            /* the same memfd opened O_RDONLY, sent to its access: ro NFs */
	uint8_t index;        /* domain id = descriptor region index */
	char name[SL_NAME_LEN]; /* domain name */
	uint8_t *base;
	size_t size;
	size_t page;
	bool huge;
	struct rte_mempool *pool; /* pinned external buffers: headers in sluiced's memory, data in the region */
	uint32_t nbufs;
	uint32_t buf_size;
	uint32_t headroom;
	struct rte_mbuf **bufs;  /* buffer id -> mbuf */
	uint32_t *buf_off;       /* buffer id -> region offset of buffer start */
	struct sl_bufstate *st;  /* buffer id -> lending state */
	struct sl_lend lend;
	/* Buffers the worker took from the pool in one bulk get for cross-domain copies, handed out
	 * in order with their headers and data prefetched a few copies ahead (a copy's cost was the
	 * cache misses on a cold mbuf header and buffer). Free buffers: counted as free, put back
	 * before a pool audit and at region_destroy. Worker context only. */
	struct region_stash {
		struct rte_mbuf *m[REGION_STASH];
		uint16_t n, i;
	} stash[SL_MAX_WORKERS]; /* one per worker: each takes from its own */
	/* The domain's pipe area (sluiced.pipes, pipe.c): one pipe ring per NF id, mapped read-write by
	 * the domain's rw NFs whose SDK takes pipes. */
	int pipe_fd;
	uint8_t *pipe_base;
	size_t pipe_bytes;   /* the pipe rings (the memfd is pipe_file_size: guest export) */
	size_t pipe_file_size;
	uint64_t pipe_nonce;
	/* guest export (docs/guests.md): the memfd is file_size bytes, a power of two, with a
	 * struct sl_guest_tag carrying `nonce` in its last 4 KiB */
	size_t file_size;
	uint64_t nonce;
	size_t pipe_slot;    /* bytes per NF id */
	/* PCI NICs (docs/ports.md "PCI NICs"): the region registered with DPDK as external memory and
	 * mapped for DMA on each PCI device, at IOVA = VA (EAL's IOVA mode VA: VFIO with an IOMMU) */
	bool iova_va;        /* the pool's buffers carry their VA as IOVA */
	bool extmem;         /* rte_extmem_register done */
	uint16_t dma_maps;   /* devices it is mapped on */
};

/* Size memfd `fd` to the power of two a guest's ivshmem BAR needs for `data_size` bytes, and write a
 * struct sl_guest_tag (kind, index, a fresh random nonce) in its last 4 KiB. 0, or -1 with errno. */
int memfd_export(int fd, size_t data_size, bool huge, uint32_t kind, uint32_t index, size_t *file_size,
		 uint64_t *nonce);
/* Bytes of a region of `mbufs` buffers of `data_room` bytes each plus headroom (whole pages). */
size_t region_bytes(uint32_t mbufs, uint32_t data_room, bool huge);
/* Create region `index` of domain `name`: memfd + mbuf pool of `mbufs` buffers with `data_room`
 * bytes of packet data each. Returns 0 or -1 (logged). */
int region_create(struct region *r, uint8_t index, const char *name, uint32_t mbufs, uint32_t data_room,
		  bool huge);
/* Undo region_create; safe on a partly created region. */
void region_destroy(struct region *r);
/* Map region r for DMA by PCI device dev (rte_extmem_register once, then rte_dev_dma_map at IOVA =
 * VA). Returns 0, or -1 with err saying why (IOVA as PA, no IOMMU, the device refused). */
int region_dma_map(struct region *r, struct rte_device *dev, char *err, size_t errlen);
/* Undo region_dma_map for dev (before the device is closed); quiet when it was not mapped. */
void region_dma_unmap(struct region *r, struct rte_device *dev);
/* A copy of m's data in a fresh buffer of region r (same headroom, length, port); NULL when r's
 * pool is empty. m is untouched (the caller frees it). Worker context. */
struct rte_mbuf *region_copy_in(struct region *r, const struct rte_mbuf *m, unsigned worker);
/* Put every worker's copy stash back into the pool (before an audit, workers paused; at teardown). */
void region_stash_release(struct region *r);
/* Free buffers waiting in the stashes. */
static inline uint32_t region_stash_count(const struct region *r)
{
	uint32_t n = 0;
	for (unsigned w = 0; w < SL_MAX_WORKERS; w++)
		n += (uint32_t)(r->stash[w].n - r->stash[w].i);
	return n;
}
static inline struct mbuf_priv *mbuf_priv(const struct rte_mbuf *m)
{
	return (struct mbuf_priv *)((uint8_t *)(uintptr_t)m + sizeof(struct rte_mbuf));
}
/* Buffer id of an mbuf in its region (stored in its private area). */
static inline uint32_t mbuf_id(const struct rte_mbuf *m)
{
	return mbuf_priv(m)->id;
}
/* Region (domain) of an mbuf, SL_REGION_NONE for a port's private pool. */
static inline uint8_t mbuf_region(const struct rte_mbuf *m)
{
	return mbuf_priv(m)->region;
}

/* ---- ports (port.c) ---- */

/* Shared by the workers that poll a port's queues: atomic adds when there are several (rare events) */
struct port_stats {
	uint64_t drop_tx_full, drop_no_path, drop_rx_invalid;
	uint64_t drop_too_long; /* frames longer than one buffer (the PMD chained segments): drops.too_long */
	uint64_t malformed; /* packets the steering parser refused (docs/steering.md) */
	uint64_t rx_csum_bad; /* rx_checksum: frames the device found a bad IPv4/TCP/UDP checksum in (delivered) */
};

struct port {
	char name[SL_NAME_LEN];
	char vdev[256];
	char devname[64];
	uint16_t port_id; /* DPDK port id */
	bool probed, started, pci;
	bool runtime;     /* added by port_add (its errors name the request's field, not ports[i]) */
	/* In use: polled and transmitted on. A config port is live from start-up; port_add makes a port
	 * live, port_del dead, each through a worker command, so a worker never polls or sends on a
	 * device being opened or closed. A packet for a dead port (an NF's OUT to a deleted port's id,
	 * or one handed over before the port died) drops as no_path. Worker reads: acquire. */
	bool live;
	/* captures taking copies here (capture.c): bit k = capture k; 0 = none, the only cost */
	uint8_t tap_rx, tap_tx;
	struct port_stats st;
	/* RX queues (ports[].queues; docs/ports.md "Multi-queue ports"): queue q is polled by worker
	 * rxq_worker[q] alone, which alone writes rxq[q]'s counters */
	uint8_t nrxq;
	uint8_t rxq_worker[SL_MAX_QUEUES];
	/* TX queues: one per worker (txq_per_worker: each worker sends on queue W->index from its own
	 * staging, no handoff), else one, sent on by `worker` alone (handoff from the others) */
	uint8_t ntxq;
	bool txq_per_worker;
	struct port_rxq {
		uint64_t pkts, bytes;
		uint64_t copied; /* net_af_xdp: copied from its own pool into region 0 (rx_copied) */
	} __rte_cache_aligned rxq[SL_MAX_QUEUES];
	/* TX staging and counters per worker: only stage[w] is touched by worker w (with one TX queue,
	 * only stage[worker]) */
	struct port_stage {
		uint16_t n;
		bool listed;
		uint64_t pkts, bytes; /* sent from this staging (its TX queue: w, or 0) */
		struct rte_mbuf *m[SL_BURST];
	} __rte_cache_aligned stage[SL_MAX_WORKERS];
	/* a PMD that needs the mbuf header next to the data (net_af_xdp: its umem is the mempool's memory)
	 * receives into a private pool of its own; the worker copies each packet into region 0 */
	struct rte_mempool *own_pool;
	/* a PCI device: every region mapped for its DMA (dma_dev), or, where that failed, own_pool for RX
	 * and a copy of what it sends (tx_copy, counted in tx_copied) -- docs/ports.md "PCI NICs" */
	struct rte_device *dma_dev;
	/* hot-unplug (docs/ports.md "PCI NICs"): EAL said the device is going (unplug, set in EAL's
	 * interrupt thread); the control thread took the port out of use and released the device (gone:
	 * still listed, by name, until port_del; packets for it drop as no_path) */
	bool unplug, gone;
	uint32_t dev_bufs;  /* a PCI port's RX and TX descriptors: buffers its device rings may hold */
	bool tx_copy;
	uint64_t tx_copied;
	uint8_t worker;     /* the worker that polls queue 0 (of a one-queue port: the port) and, with one TX
	                     * queue, transmits on it (datapath.c "Workers") */
	int32_t inflight;   /* packets other workers handed it, not yet sent on (atomic) */
	uint32_t max_frame; /* longest frame (bytes, no FCS) it receives whole: the buffer or the PMD's limit */
	uint16_t mtu;       /* the ethdev's MTU after start (af_packet: the kernel interface decides) */
	struct port_opts opts;    /* as configured (port_open reads it) */
	uint16_t nb_rx_desc, nb_tx_desc; /* descriptors after rte_eth_dev_adjust_nb_rx_tx_desc */
	uint64_t rx_offloads, tx_offloads; /* what port_open enabled (RTE_ETH_*_OFFLOAD_*) */
	bool vlan_keep;     /* explicit vlan_strip: the worker does not put the tag back (rx_vlan_restore) */
	bool vlan_insert;   /* explicit vlan_insert: a stripped tag goes back on at TX (the device's) */
};

/* Probe, configure and start a port from its vdev string with `queues` RX queues (RSS where the PMD
 * hashes, else the PMD's own spreading) and one TX queue per worker where it has that many (a
 * multi-queue port). Returns 0 or -1 with err. */
int port_open(struct port *p, struct rte_mempool *pool, unsigned queues, char *err, size_t errlen);
/* Totals of a port's per-queue counters (control thread: racy reads, for reports). */
void port_totals(const struct port *p, uint64_t *rx_pkts, uint64_t *rx_bytes, uint64_t *tx_pkts, uint64_t *tx_bytes,
		 uint64_t *rx_copied);
/* Undo port_open. */
void port_close(struct port *p);
/* Receive and free what waits in a port's RX queue (at most `max` packets), so that buffers a PMD
 * keeps there (net_ring: what was sent and never received) go back to the pool before port_close.
 * Control thread, on a port no worker polls any more. Returns the count. */
uint32_t port_rx_discard(struct port *p, uint32_t max);
/* Make a closed port's slot free (no name, no counters) for a later port_add. Control thread. */
void port_forget(struct port *p);
/* Ports in use (live), and the lowest free port id (SL_MAX_PORTS: none). Control thread. */
unsigned ports_live(void);
unsigned port_free_id(void);

/* ---- NFs and services ---- */

enum nf_state { NF_FREE = 0, NF_HELLO, NF_ATTACHED, NF_CLOSING };

struct nf_stats {
	uint64_t rx_pkts, rx_bytes, tx_pkts, tx_bytes, kicks;
	uint64_t drop_ring_full, drop_invalid;
	uint64_t supplied;   /* empty buffers handed to it (docs/abi.md "Supply") */
};

struct nf {
	/* control side */
	enum nf_state state;
	int sock;
	int ring_fd;
	int rx_kick_fd;   /* manager -> NF eventfd */
	int tx_kick_fd;   /* NF -> manager eventfd (reserved; the worker polls) */
	void *ring_map;
	size_t ring_map_size;
	struct sl_nf_info *info; /* in ring_map after the two rings (nfinfo.h) */
	uint8_t inbuf[SL_MSG_SIZE];
	size_t inlen;
	uint64_t deadline_ms; /* attach must complete by then */
	char name[SL_NAME_LEN];
	pid_t pid;
	uid_t uid;
	int guest;            /* 0: a process; g + 1: the NF of guest slot g (guest.c) */
	bool sched_fifo;      /* sluiced.nf_sched fifo applies to it (sched.c) */
	bool fifo_on_main;    /* ... and it may run on the main lcore's CPU (sched.c: threads step aside) */
	bool doorbell;        /* a guest NF that rings and sleeps (INIT SL_INIT_F_DOORBELL) */
	uint8_t wakeup;
	uint32_t batch, timeout_us;
	uint16_t service;
	uint8_t domain;       /* trust domain = the region whose buffers it gets (config; default 0) */
	uint8_t worker;       /* the worker that serves it (set at attach, datapath.c "Workers") */
	int32_t inflight;     /* packets other workers handed it, not yet in its worker's hands (atomic) */
	bool ro;              /* access: ro -- its region is mapped read-only; returns may not change off/len */
	/* shared with the worker */
	struct sl_ring *rx, *tx; /* in NF-writable memory: the worker goes through rxk/txk */
	uint8_t fault;        /* enum nf_ring_err: the worker caught a ring violation (control disconnects it) */
	bool active;          /* worker sees it (set/cleared by the worker) */
	bool draining;        /* left its service: gets no new packets, returns what it holds */
	uint8_t tap_in, tap_out; /* captures at its hops (capture.c): bit k = capture k; no pipe while set */
	uint32_t lent;        /* buffers held by the NF: worker writes */
	uint32_t lend_max;    /* TX ring size: the NF can always return what it holds */
	uint32_t supply_want; /* empty buffers it asked to hold (INIT SL_INIT_F_SUPPLY; 0: none), capped */
	uint32_t supply_held; /* supply buffers it holds now: worker writes (datapath.c "Supply") */
	uint64_t timeout_cyc;
	uint64_t first_wait;  /* TSC when unkicked packets started waiting, 0 none */
	uint64_t last_fill;   /* TSC when packets were last put in its RX ring (kick coalescing), 0 never */
	/* the worker's active set (datapath.c "Active set"): worker only */
	uint8_t set;          /* enum nf_set: which list the NF is on */
	bool waiting;         /* on the list of sleepers with packets waiting for a kick */
	bool bell;            /* its TX eventfd is in the worker's doorbell epoll */
	bool overloaded;      /* holds >= 3/4 of its lending budget; clears at <= 1/4 (backpressure) */
	bool kick_pending;    /* kicked, and had consumed nothing since when last looked (kick_cons) */
	uint32_t kick_cons;   /* its RX ring's consumer index when it was kicked */
	uint32_t set_pos;     /* index in that list */
	struct nf_ring rxk, txk; /* the worker's private view of the rings (nfring.h): worker only */
	/* pipes (pipe.c, datapath.c "Pipes"): po is its pipe ring in its domain's pipe area (NULL: no
	 * pipes for it), where its SDK puts plain NEXT descriptors; the worker reads it through pok
	 * unless the next NF does (pipe_to). */
	struct sl_ring *po;
	struct nf_ring pok;
	int32_t pipe_to, pipe_from; /* NF ids joined by a pipe, -1 none (worker only) */
	uint32_t pipe_epoch;        /* last info->pipe_in.epoch it was given (worker only) */
	uint32_t pipe_open_epoch;   /* the epoch that opened its current pipe input */
	bool cohost_in;             /* a pipe from an NF of its own process was opened to it (datapath.c "Cohosted NFs") */
	uint32_t pipe_kick_cons;    /* its pipe consumer index when last kicked for pipe input */
	bool pipe_kicked;
	bool pipe_closing;          /* its reader was told to stop; finished once it acknowledges */
	uint32_t pipe_backlog;      /* descriptors waiting for it in its pipe input (counts as load) */
	uint64_t pipe_close_by;     /* TSC deadline for that acknowledgement (then the reader is disconnected) */
	struct nf_stats st;
	/* RX staging, worker only */
	uint16_t nstage;
	bool dirty;
	struct sl_desc stage[SL_BURST];
};

/* Where the worker keeps an NF (datapath.c "Active set"): only BUSY NFs are visited every loop. */
enum nf_set {
	NF_SET_NONE = 0, /* holds no buffers: nothing to collect */
	NF_SET_BUSY,     /* holds buffers and may return them any moment: drained every loop */
	NF_SET_PARKED,   /* holds buffers but sleeps (block/adaptive) waiting for a kick: drained when
	                  * kicked, and swept once a millisecond in case it woke by itself */
};

/* How a service picks one of its replicas (docs/steering.md "Services and replicas"). */
enum svc_policy {
	SVC_FLOW = 0,       /* rendezvous hash of the flow: few flows move when replicas come and go */
	SVC_LEAST_LOADED,   /* the replica with the fewest packets queued (NetVM), per new flow */
	SVC_ROUND_ROBIN,    /* per packet, for stateless NFs */
	SVC__COUNT
};
extern const char *const svc_policy_names[SVC__COUNT];

struct service {
	char name[SL_NAME_LEN];
	uint8_t policy;                   /* enum svc_policy; control writes, worker reads */
	uint16_t rr;                      /* round-robin cursor, worker only */
	uint16_t ninst;                   /* worker writes */
	uint16_t nlocal[SL_MAX_WORKERS];  /* instances worker w serves (worker w writes its own): flow
	                                   * affinity, datapath.c pick_instance */
	rte_spinlock_t inst_lock;         /* instance list writers: the replicas of a chain fed by a
	                                   * multi-queue port are on several workers (readers take none) */
	uint16_t inst[SL_MAX_INSTANCES];  /* NF ids, worker writes */
	uint32_t noverloaded;             /* instances overloaded (workers: shared_add32) */
	bool saturated;                   /* every instance overloaded: chains through it back off */
	uint64_t drop_nf_gone;
	uint64_t drop_backpressure;       /* packets dropped at a chain's entry because of this service */
};

struct chain {
	char name[SL_NAME_LEN];
	uint16_t len;
	uint16_t *svc;   /* service ids */
	int32_t exit;    /* port index or -1 */
};

/* Routing table: immutable once published; replaced whole (epoch swap). */
struct route {
	uint16_t nchains;
	struct chain *chains;
	int32_t port_chain[SL_MAX_PORTS]; /* chain index per port or -1 */
	/* Next hops (docs/abi.md): where each service's NFs may send, from the config's may_send and
	 * these chains (built with them, so a chain change changes both at once). NULL: anywhere. */
	uint32_t nauth;                   /* services with an entry; a later one may send anywhere */
	struct sl_dest_auth *auth;        /* per service id */
	uint64_t *auth_bits;              /* the bitmaps auth[].svc point into */
};

/* Packets that crossed from one trust domain to another (copied into the target's region) and
 * those lost because the target's pool was empty (also in drops.no_buffer). Worker writes. */
struct domain_pair_stats {
	uint64_t packets, bytes, no_buffer;
	uint64_t too_long;      /* longer than the target domain's buffers (also in drops.too_long) */
	uint64_t timed, cycles; /* every 16th copy is timed (TSC around allocation + copy): the cost per copy */
};

struct drops {
	uint64_t ring_full, no_path, nf_gone, invalid_desc, tx_full, rx_invalid;
	uint64_t rule, malformed; /* a rule's drop action; the malformed action dropping */
	uint64_t nf_detached;     /* buffers an NF still held when it detached (reclaimed) */
	uint64_t no_buffer;       /* an SL_ACT_OUT_SET copy found the pool empty (that port's frame lost) */
	uint64_t backpressure;    /* dropped at a chain's entry: a later service of the chain is saturated */
	uint64_t quota;           /* the NF held its quota, or its domain's NFs their bound (violations.quota) */
	uint64_t too_long;        /* a frame longer than the buffer that was to hold it: received in several
	                           * segments, or copied toward a domain of smaller buffers (docs/abi.md) */
};

/* SL_ACT_OUT_SET traffic (abi.h struct sl_out_set): packets NFs sent to port sets, frames that left
 * for them, and how many of those frames needed a copy (VLAN untag/tag). Worker writes. */
struct out_set_stats {
	uint64_t packets, frames, copies;
};

/* ---- steering (steer.c, docs/steering.md) ---- */

#define STEER_FIELDS 21      /* rte_acl fields of struct sl_pkt_key */
#define STEER_CHAIN_NONE 0xffff /* bufstate.chain of a packet sent to a service outside any chain */

enum steer_kind { STEER_NONE = 0, STEER_CHAIN, STEER_SERVICE, STEER_PORT, STEER_DROP,
		  STEER_CHAIN_HOP /* NF-pinned flows: chain `target` from service `hop` on */ };

struct steer_action {
	uint8_t kind;    /* enum steer_kind; STEER_NONE: the port's ingress chain, else no_path */
	uint8_t hop;     /* STEER_CHAIN_HOP only */
	uint16_t target; /* chain index, service id or port index */
};

/* A rule as the control thread keeps it (M.rules). */
struct rule {
	uint32_t id;
	char name[SL_NAME_LEN];
	uint32_t priority;
	json_t *match;            /* as given (normalized JSON), for listing */
	json_t *payload_json;     /* as given, or NULL */
	struct steer_action action;
	struct rte_acl_field fields[STEER_FIELDS];
	uint64_t *hits;           /* worker increments; outlives rebuilds */
	struct hs_database *payload; /* compiled payload pattern, NULL: header-only rule */
	uint32_t depth;           /* payload bytes scanned */
};

struct steer_rule {
	struct steer_action act;
	uint64_t *hits;
	uint32_t id;
	const struct hs_database *payload; /* the rule's (read-only) pattern, or NULL */
	uint32_t depth;
};

/* Rules compiled into rte_acl contexts. One context holds at most 8 tries, which rules of many
 * different shapes (sets of matched fields) overflow; such a rule set is split over several
 * contexts, all searched, the best hit kept. n == 0: no rules. */
struct steer_acl {
	unsigned n;
	struct rte_acl_ctx **ctx;
};

/* The classifier the worker uses: immutable once published, replaced whole. */
struct steer {
	uint32_t gen;             /* build generation: flows decided under another one are re-checked */
	struct steer_acl acl;     /* acl.n == 0: no rules, packets are not parsed */
	uint32_t nrules;
	struct steer_rule *rules; /* evaluation order; ACL userdata = index + 1 */
	struct steer_action malformed;
	bool poll_port[SL_MAX_PORTS]; /* named by a rule's in_port: polled even without a chain */
	/* payload rules: when a winner's pattern is not in the payload, the best header-only rule */
	struct steer_acl acl_hdr;     /* header-only rules (same userdata), n == 0: none */
	struct hs_scratch *scratch;   /* the worker's Hyperscan scratch */
	struct hs_scratch *ctl_scratch; /* the control thread's (classify) */
};

/* Classify n keys over every context of a: hit[i] = the best match's userdata (ACL userdata is the
 * evaluation index + 1, so the lowest wins), 0: none. 0, or -1 when rte_acl fails. */
static inline int steer_acl_classify(const struct steer_acl *a, const uint8_t **data, uint32_t *hit, uint32_t n)
{
	if (a->n == 0) {
		memset(hit, 0, n * sizeof(*hit));
		return 0;
	}
	if (rte_acl_classify(a->ctx[0], data, hit, n, 1) != 0)
		return -1;
	for (unsigned c = 1; c < a->n; c++)
		for (uint32_t s = 0; s < n; s += SL_BURST) {
			uint32_t h[SL_BURST], k = n - s < SL_BURST ? n - s : SL_BURST;
			if (rte_acl_classify(a->ctx[c], data + s, h, k, 1) != 0)
				return -1;
			for (uint32_t i = 0; i < k; i++)
				if (h[i] && (hit[s + i] == 0 || h[i] < hit[s + i]))
					hit[s + i] = h[i];
		}
	return 0;
}

struct steer_result {
	bool malformed;
	bool undecided;                /* a payload rule won but the packet has no payload yet */
	const struct steer_rule *rule; /* NULL: no rule matched */
	struct steer_action action;
};

/* JSON rule (normalized form) -> rule; err names the field under `path`. Resolves names
 * against the current route, ports and services. Returns 0 or -1. */
int rule_parse(json_t *j, const char *path, struct rule *r, char *err, size_t errlen);
/* Free what rule_parse allocated. */
void rule_release(struct rule *r);
json_t *rule_json(const struct rule *r);
/* Pointers to rules[0..n) in evaluation order (free the array). */
const struct rule **rules_sorted(const struct rule *rules, unsigned n);
int steer_action_parse(json_t *v, const char *path, struct steer_action *a, char *err, size_t errlen);
json_t *steer_action_json(struct steer_action a);
/* Build a classifier from rules; NULL with err on failure. */
struct steer *steer_build(const struct rule *rules, unsigned n, struct steer_action malformed, char *err,
			  size_t errlen);
void steer_free(struct steer *s);
#define SL_MAX_RULES 65536

/* rules.c: the rule list (control thread). Each change rebuilds and publishes the classifier;
 * on error (err names the field) nothing changes. */
int rules_load(json_t *list, json_t *malformed, char *err, size_t errlen);
void rules_unload(void);
int rules_set(json_t *list, char *err, size_t errlen);
/* Returns the new rule's index in M.rules, or -1. */
int rules_add(json_t *rule, char *err, size_t errlen);
int rules_del(uint32_t id, char *err, size_t errlen);

/* The rule (index + 1 in s->rules, 0 = none) for a packet whose ACL winner is `hit`: a payload rule
 * must also find its pattern in the first `depth` payload bytes, else the best header-only rule
 * wins; *undecided: the packet had no payload to look at (do not cache the flow's decision). */
uint32_t steer_payload_resolve(const struct steer *s, uint32_t hit, const uint8_t *frame,
			       const struct sl_pkt_key *k, struct hs_scratch *scratch, bool *undecided);

/* Classify one frame (control thread dry run). Returns 0 or -1. */
int steer_classify_one(const struct steer *s, const uint8_t *frame, uint32_t len, uint8_t in_port,
		       struct steer_result *res);

/* ---- flow table (datapath.c, docs/steering.md "Flows") ---- */

#define FLOW_REPLICA_NONE 0xffff

/* Exact-match key: ingress port + IP 5-tuple (IPv4 in src[0]/dst[0]). */
struct flow_key {
	uint32_t src[4], dst[4];
	uint16_t sport, dport;
	uint8_t proto, in_port, ipver, pad;
};
_Static_assert(sizeof(struct flow_key) == 40, "flow key has no hidden padding");

/* A flow's cached decision; indexed by the key's position in the hash. Worker only. */
struct flow {
	uint64_t last_tsc;        /* last packet */
	uint32_t gen;             /* steer generation the decision was made (or re-checked) under */
	uint32_t rule_id;         /* rule that chose the path, 0 = none (the port's default) */
	uint32_t rule_idx;        /* that rule's index + 1 in the steer of `gen` */
	struct steer_action act;
	uint16_t replica;         /* NF chosen for the first service, FLOW_REPLICA_NONE = not yet */
	bool pinned;              /* entered by an NF (SL_ACT_F_PIN): kept whatever the rules say */
};

struct flow_stats {
	uint64_t entries, hits, misses, rechecked, moved, expired, full; /* worker writes */
	uint64_t pinned;          /* entries NFs entered, now in the table */
	uint64_t pins, unpins, pin_ignored; /* NF requests; ignored: non-IP, malformed or no table */
};

/* ---- worker commands (datapath.c) ---- */

enum wcmd_type { WCMD_NF_ADD, WCMD_NF_REMOVE, WCMD_NF_DRAIN, WCMD_ROUTE_SET, WCMD_STEER_SET, WCMD_STOP,
		 WCMD_PORT_ADD /* nf = port index: its worker starts polling and sending on it */,
		 WCMD_PORT_DEL /* nf = port index, every other worker paused: result = NF-pinned flows
		                * sending to it (then nothing changed), else it is dead, its staging sent
		                * and its flows gone (drained = how many) */,
		 WCMD_SYNC /* the other workers after a route or classifier swap: re-read, update pipes */,
		 WCMD_PAUSE /* hold still until M.pause_epoch moves past c->nf (a pool audit runs on worker 0) */,
		 WCMD_POOL_AUDIT /* arg: struct pool_audit (audit.c) */,
		 WCMD_TEST_HOOK /* --test-hooks only: nf = enum test_hook; result: the buffer it touched */ };

struct wcmd {
	enum wcmd_type type;
	uint32_t nf;
	struct route *route;     /* in: new route; out: the old one to free */
	struct steer *steer;     /* STEER_SET in: new classifier; out: the old one to free */
	uint32_t result;         /* NF_ADD: 0 ok; NF_REMOVE: buffers reclaimed; PORT_DEL: pinned flows to it */
	uint32_t drained;        /* NF_REMOVE: descriptors the NF had returned, processed normally;
	                          * PORT_DEL: flow entries of packets from it, removed */
	void *arg;               /* POOL_AUDIT: the audit to fill */
	volatile int done;
};

/* ---- pool audit (audit.c; control API pool_audit, docs/api.md) ---- */

/* Where the audit found a buffer (pool_audit.loc bits). */
enum { AUDIT_FREE = 1, AUDIT_LENT = 2, AUDIT_STAGED = 4, AUDIT_PORT = 8 };
#define AUDIT_LIST_MAX 64

/* Every buffer in exactly one place: the control thread allocates the arrays, the worker fills them
 * between bursts (pool_audit_run), so what it sees is one consistent state. */
struct pool_audit {
	/* in: arrays the control thread allocated */
	void **objs;       /* cap entries: the pool's objects while it is drained */
	uint32_t cap;
	uint8_t *cnt;      /* per buffer: places it was found in (saturating) */
	uint8_t *loc;      /* per buffer: AUDIT_* bits */
	uint32_t *owned;   /* per NF slot: buffers the ledger says it holds */
	/* out */
	uint32_t free, lent, staged, port_staged, foreign, bad_owner;
	uint32_t nmismatch;                    /* NFs whose `lent` differs from the ledger */
	uint32_t mismatch_nf[AUDIT_LIST_MAX], mismatch_lent[AUDIT_LIST_MAX], mismatch_owned[AUDIT_LIST_MAX];
};
/* Worker context (or inline with the worker stopped). Drains the pool into a->objs, marks every
 * buffer's places, puts each distinct object back once (a duplicate in the pool is removed). */
void pool_audit_run(struct pool_audit *a);
/* --test-hooks: put a free buffer into the pool a second time (a deliberate double free). Returns
 * its id, or UINT32_MAX if the pool was empty. Worker context. */
uint32_t test_hook_double_free(void);
enum test_hook { TEST_HOOK_DOUBLE_FREE = 1 };

/* ---- the manager ---- */

/* What a worker counts (all uint64_t, so the control thread can add them up: worker_stats_sum). */
struct worker_stats {
	struct drops drops;
	uint64_t invalid[SL_DESC__COUNT];     /* drops.invalid_desc by reason */
	uint64_t ring_faults[NF_RING__COUNT]; /* NFs disconnected for a ring violation, by kind */
	struct { uint64_t nf, domain; } quota_drops; /* violations.quota: an NF at its quota, a domain at its bound */
	struct out_set_stats out_set;
	struct { uint64_t open, opened, closed, packets, close_timeouts, fused; } pipes; /* stats.pipes */
	uint64_t doorbells;                   /* parked NFs that rang their doorbell */
	uint64_t bell_polls, bell_events;     /* doorbell epoll_wait(0) calls and the events they returned */
	uint64_t supply_short;                /* supply top-ups the pool could not fill (datapath.c "Supply") */
	struct flow_stats flow_st;
	struct domain_pair_stats copies[SL_MAX_DOMAINS][SL_MAX_DOMAINS]; /* [from][to]: packets copied across */
};

/* One worker lcore's state (datapath.c "Active set", "Pipes"): its lists of NFs and ports and its
 * counters. Only that worker touches it, except the control thread's reads of counters and list
 * lengths (racy by design: reports). */
struct worker {
	unsigned index, lcore;
	bool running;               /* cleared by WCMD_STOP */
	struct rte_ring *cmdq;      /* control -> this worker */
	struct rte_ring *inbox;     /* packets other workers hand it (for its NFs and ports): MP/SC */
	struct rte_mbuf *hout[SL_MAX_WORKERS][SL_BURST]; /* staged for other workers' inboxes */
	uint16_t nhout[SL_MAX_WORKERS];
	uint32_t nfs;               /* NFs it serves (control thread: placement) */
	int32_t *pipe_next;         /* service -> its static next service (pipes_update's scratch) */
	uint16_t *busy, *parked, *dirty, *waiting, *dirty_ports, *piped;
	uint32_t nbusy, nparked, ndirty, nwaiting, ndirty_ports, npiped;
	uint16_t *suppliers;        /* its NFs with a supply (datapath.c "Supply") */
	uint32_t nsuppliers;
	int bell_ep;                /* epoll over its NFs' TX eventfds (their doorbells) */
	uint64_t next_bell_check;
	uint64_t next_deadline;     /* earliest first_wait + timeout on `waiting` (UINT64_MAX: none) */
	uint32_t flow_iter;         /* flow table expiry sweep cursor */
	uint64_t flow_next_sweep;   /* TSC of the next sweep */
	struct worker_stats st;
};
/* The sum of every worker's counters. */
void worker_stats_sum(struct worker_stats *out);
/* The worker that should serve a new NF of service svc (control thread, at attach). */
uint8_t worker_for_service(uint16_t svc);
/* Place port pi's RX queues (and itself) on workers: its ingress chain's (`chain`, -1: none) or id
 * mod N for a one-queue port, queue q on worker q mod N for a multi-queue one (control thread,
 * before the port is live). */
void port_place(unsigned pi, int32_t chain);
/* Launch every worker on its lcore (after worker_init). Returns 0 or -1 (logged). */
int worker_launch(void);
/* Stop every worker and wait for it. */
void worker_stop(void);

struct manager {
	struct config cfg;
	struct region region;       /* domain 0, "default": the ports' pool (regions[0] points here) */
	struct region *regions[SL_MAX_DOMAINS]; /* by domain id; created in order, destroyed in reverse */
	unsigned nregions;
	unsigned nports;            /* port ids in use are below it: one past the highest id ever used
	                             * (slots of deleted ports stay, not live: port_del) */
	struct port ports[SL_MAX_PORTS];
	uint32_t max_nfs;
	struct nf *nfs;
	uint32_t nservices, max_services;
	struct service *services;
	struct route *route;        /* worker's current route */
	struct steer *steer;        /* worker's current classifier (never NULL once started) */
	struct rule *rules;         /* control thread: the rule list, in the order added */
	unsigned nrules;
	uint32_t next_rule_id;
	struct steer_action malformed;
	struct worker *workers;     /* worker_init */
	unsigned nworkers;
	unsigned worker_lcore;
	volatile bool worker_running;
	uint32_t pause_epoch;       /* WCMD_PAUSE (nf = this epoch): paused workers wait until it moves on */
	volatile bool stop;
	bool restart;               /* shutdown for a restart: NFs are told SL_ERR_RESTART (control API) */
	volatile bool rx_paused;    /* the workers leave the ports alone (a planned restart's quiesce) */
	bool replaying;             /* --resume: changes are being replayed, the runtime file stays as is */
	bool test_hooks;            /* --test-hooks: debug-only control commands (docs/api.md) */
	/* authorisation and quotas (docs/api.md "Violations") */
	struct { uint64_t unknown_service, bad_token; } attach_refused; /* violations.attach (control thread) */
	uint32_t dom_held[SL_MAX_DOMAINS]; /* buffers a domain's NFs hold or have staged (worker) */
	uint32_t dom_max[SL_MAX_DOMAINS];  /* what they may hold: the pool less its RX reserve */
	uint64_t tsc_hz;
	uint64_t started_ms;
	char sock_dir[100];
	char nf_sock_path[108];
	char ctl_sock_path[108];
	int nf_listen, ctl_listen, epfd, sigfd;
	int dev_efd;                /* PCI device events (hot-unplug): EAL's thread pokes it, the control loop acts */
};

extern struct manager M;

/* pipe.c: the per-domain pipe areas (docs/architecture.md "Pipes") */
/* Create region r's pipe area: `slots` pipe rings of `ring_size` descriptors. Returns 0 or -1 (logged). */
int pipe_area_create(struct region *r, uint32_t slots, uint32_t ring_size);
/* Undo pipe_area_create; safe when it was never created. */
void pipe_area_destroy(struct region *r);
/* NF id's pipe ring in region r's pipe area, initialised empty; its byte offset in *offset. */
struct sl_ring *pipe_ring_reset(struct region *r, uint32_t id, uint32_t ring_size, uint64_t *offset);
/* Byte offset of NF id's pipe ring in its domain's pipe area. */
static inline uint64_t pipe_offset(const struct region *r, uint32_t id)
{
	return (uint64_t)id * r->pipe_slot;
}

/* datapath.c */
/* Allocate the worker's lists (before the worker starts). Returns 0 or -1. */
int worker_init(void);
/* Undo worker_init (after the worker stopped). */
void worker_fini(void);
int worker_main(void *arg);
/* Run a command on the worker and wait for it (or do it inline when the worker is stopped). */
/* The worker's active set right now (datapath.c "Active set"): NFs drained every loop, parked
 * sleepers holding packets, sleepers waiting for a deadline kick. */
void worker_active_set(uint32_t *busy, uint32_t *parked, uint32_t *waiting);
void worker_call(struct wcmd *c);
/* Every worker passes a barrier (no one is inside a burst begun before) and updates its pipes. */
void worker_sync_all(void);
/* Return every buffer NF `id` holds to the pool (worker context). Returns the count. */
uint32_t nf_reclaim(uint32_t id);
/* The eventfd the worker writes when it caught an NF breaking the ring protocol (nf->fault set);
 * the control loop watches it. worker_fault_ack() empties it. */
int worker_fault_fd(void);
void worker_fault_ack(void);

/* sched.c: sluiced.nf_sched fifo */
void sched_nf_attached(struct nf *nf);
void sched_nf_detached(struct nf *nf);
void sched_chains_changed(void);
/* Start the order helper when nf_sched is fifo (before the workers: they poke it). 0 or -1. */
int sched_start(void);
void sched_stop(void);
/* The worker kicked a fifo NF: its wake-up queued it out of chain order; the helper repairs that. */
void sched_fifo_kicked(void);
json_t *sched_stats(void); /* stats.nf_sched */
const char *sched_nf_policy(const struct nf *nf);

/* attach.c */
int attach_listen(void);
void attach_accept(void);
/* Take connection fd as a new NF in HELLO state (guest: its guest slot + 1, else 0); sends HELLO.
 * Returns the NF slot, or -1 (fd closed). */
int attach_open(int fd, int guest);

/* guest.c: NFs in KVM guests (docs/guests.md) */
#define SL_MAX_GUESTS 64
#define GUEST_BOOT_TIMEOUT_MS 60000 /* QEMU connects at its start; the NF's INIT comes after the boot */
struct guest {
	bool used;
	char name[SL_NAME_MAX], service[SL_NAME_MAX];
	uint8_t domain;
	int ring_fd;          /* header page, RX ring, TX ring, info page; a power of two bytes */
	void *ring_map;
	size_t ring_map_size;
	size_t rx_off, tx_off, info_off;
	int listen_fd;        /* the channel socket QEMU's virtio-serial chardev connects to */
	char sock_path[160];
	/* doorbells (docs/guests.md "Wakeups"): sluiced is the ivshmem server of the guest's rings device
	 * (ivshmem-doorbell): QEMU gets the rings memfd and the two eventfds from it; the NF's attach
	 * reuses them, so they live as long as the guest slot */
	int ivsh_listen, ivsh_conn;
	char ivsh_path[160];
	int rx_kick_fd;       /* sluiced -> guest: the guest's vector 0 (an MSI-X interrupt) */
	int tx_kick_fd;       /* guest -> sluiced: peer 0's vector 0 (a write to the doorbell register) */
	int nf;               /* NF slot of its connection, -1: none yet */
};
/* Make (or reset, for a new QEMU) guest `name` of `service`. Returns the control reply (what QEMU
 * must map, the channel socket), or NULL with err set. */
json_t *guest_prepare(const char *name, const char *service, char *err, size_t errlen);
/* Teardown twin of guest_prepare: refused while its NF is attached. 0 or -1 with err set. */
int guest_release(const char *name, char *err, size_t errlen);
void guest_release_all(void);
bool guest_busy(const struct guest *g); /* its NF slot is in use by its NF */
/* attach.c: QEMU of guest slot idx connected to the guest's channel socket */
void attach_guest_accept(uint32_t idx);
/* QEMU of guest slot idx connected to its ivshmem server socket: send it the rings and eventfds */
void guest_ivshmem_accept(uint32_t idx);
struct guest *guest_get(int slot); /* nf->guest -> its guest, NULL: none */
void guest_adopt_rings(struct nf *nf, struct guest *g);
json_t *guest_list(void);
void attach_event(struct nf *nf, uint32_t events);
void attach_check_timeouts(uint64_t now_ms);
/* Disconnect the NFs the worker caught breaking the ring protocol (SL_ERR_RING). */
void attach_faults(void);
void nf_detach(struct nf *nf, uint32_t code, const char *reason);

/* control.c */
/* ---- capture (control: capture.c; the workers' taps: captap.c; the ring: include/sluice/capture.h) ---- */
#define CAPTURES_MAX 8 /* at once: a bit each in the ports' and NFs' tap masks */
/* A worker's copies of n packets at a point whose tap mask is `mask` (kind: enum sl_cap_kind; obj:
 * port or NF id; action: SL_CAP_NF_OUT's, else 0). Cold: called only while a capture is on there. */
void capture_pkts(unsigned w, uint8_t mask, uint8_t kind, uint16_t obj, struct rte_mbuf *const *m, uint16_t n,
		  uint8_t action);
json_t *capture_start(json_t *req, int conn, char *err, size_t errlen);
int capture_stop(uint32_t id, int conn, char *err, size_t errlen);
void capture_conn_closed(int conn); /* its captures end with the connection */
void capture_sweep(void); /* ring files a killed sluiced left in the socket directory */
json_t *capture_list(void);
/* A pcap-filter expression as a DPDK BPF program over an mbuf (libpcap compiles, rte_bpf_convert
 * converts); *jit: its JIT-compiled form, or NULL. */
struct rte_bpf;
int filter_compile(const char *expr, uint32_t snaplen, struct rte_bpf **bpf, uint64_t (**jit)(void *), char *err,
		   size_t errlen);

/* ---- trace (control: trace.c; the workers' hooks: tracetap.c; docs/observability.md "Trace") ---- */
json_t *trace_start(json_t *req, int conn, char *err, size_t errlen);
json_t *trace_get(void);
json_t *trace_stop(int conn, char *err, size_t errlen);
json_t *trace_last(void);
void trace_conn_closed(int conn);

int ctl_listen(void);
/* Take the ports whose PCI device EAL reported removed out of use and release their devices, so the
 * kernel can finish the unplug (control thread, on EP_DEV_EVENT). */
void ctl_ports_unplugged(void);
/* Write the runtime state (what the control API changed: services, chains, ports, rules) to
 * <socket dir>/runtime.json, atomically. Returns 0 or -1 (logged). */
int ctl_runtime_save(void);
/* Replay a runtime.json written by a previous sluiced (--resume): every step through the control
 * API's own commands. Returns the number of steps that failed (each logged), or -1 if the file is
 * unreadable or not a runtime state (err says why). */
int ctl_runtime_replay(const char *path, char *err, size_t errlen);
void ctl_accept(void);
void ctl_event(void *conn, uint32_t events);
void ctl_close_all(void);

/* registry.c: names of ports, services and chains; the route the worker reads (control thread) */
/* Allocate the service table, create the config's services and publish its route (ports open).
 * Returns 0 or -1 with err naming the config field. */
int registry_init(char *err, size_t errlen);
/* Undo registry_init (after the worker stopped). */
void registry_fini(void);
/* Index of service `name`, or -1. */
int service_lookup(const char *name);
/* Index of service `name`, created if new (ids are stable; never removed); -1 when the table is full. */
int service_get_or_create(const char *name);
/* Index of port `name`, or -1. */
int port_lookup(const char *name);
/* Build a route from chain specs (port_chain: ingress chain per port, NULL = none); err names the
 * field. NULL on error. */
struct route *route_build(const struct cfg_chain *chains, unsigned n, const int32_t *port_chain, char *err,
			  size_t errlen);
/* Free a route that is no longer published (NULL is fine). */
void route_free(struct route *r);

/* Monotonic milliseconds (control-side deadlines and uptime). */
static inline uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* epoll tags */
enum ep_kind { EP_NF_LISTEN = 1, EP_CTL_LISTEN, EP_SIGNAL, EP_NF, EP_CTL, EP_FAULT, EP_GUEST_LISTEN, EP_GUEST_IVSHMEM,
	       EP_DEV_EVENT };
struct ep_tag { enum ep_kind kind; void *ptr; };

#define LOG(fmt, ...) fprintf(stderr, "sluiced: " fmt "\n", ##__VA_ARGS__)

#endif
