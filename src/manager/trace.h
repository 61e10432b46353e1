/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The packet tracer's shared state (docs/observability.md "Trace"): the control thread (trace.c)
 * arms it, the workers (tracetap.c) mark the next matching packets at a port and log every step
 * they take through the fabric; trace.c reads the log once each packet has left or been dropped.
 */
#ifndef SLUICED_TRACE_H
#define SLUICED_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "sluiced.h"

struct rte_bpf;
struct rte_mbuf;

#define TRACE_PKTS_MAX 64
#define TRACE_STEPS_MAX 40

enum trace_kind {
	TR_RX,       /* a = port, b = queue */
	TR_STEER,    /* a = rule id (0: no rule matched), b = action kind | flow << 8 | target << 16 */
	TR_REPLICA,  /* a = service, b = NF id | why << 16 */
	TR_TO_NF,    /* a = NF id, b = chain hop */
	TR_NF,       /* a = NF id, b = action | dest << 8 */
	TR_INVALID,  /* a = NF id, b = verdict */
	TR_COPY,     /* a = from domain, b = to domain */
	TR_HANDOFF,  /* a = to worker, b = 1 NF, 2 port */
	TR_TX,       /* a = port */
	TR_DROP,     /* a = reason (enum trace_drop) */
	TR_MULTI,    /* a = port: one copy of an OUT_SET packet sent there */
	TR_PIPE,     /* a = upstream NF, b = downstream NF: it went NF to NF over a pipe */
	TR_FUSED,    /* a = the group member it was given to, b = the member that returned it (by calls) */
};

enum trace_flow { TF_NONE, TF_HIT, TF_MISS, TF_RECHECK };
enum trace_why { TW_ONLY, TW_ROUND_ROBIN, TW_LEAST_LOADED, TW_FLOW_HASH, TW_LOCAL, TW_STICKY };
enum trace_drop { TD_OTHER, TD_NO_PATH, TD_RULE, TD_NF, TD_RING_FULL, TD_TX_FULL, TD_NF_GONE, TD_QUOTA,
		  TD_INVALID, TD_BACKPRESSURE };

struct trace_step {
	uint64_t tsc;
	uint8_t kind, worker;
	uint16_t pad;
	uint32_t a, b;
};

struct trace_pkt {
	struct rte_mbuf *m;     /* the buffer it is in now (a domain copy moves it); NULL once done */
	uint32_t nsteps;
	bool done;              /* released: trace.c may read the steps */
	uint32_t len;
	uint8_t head[64];       /* its first bytes at RX, for the summary line */
	struct trace_step step[TRACE_STEPS_MAX];
};

struct trace {
	int32_t port;           /* -1: any port */
	struct rte_bpf *bpf;
	uint64_t (*jit)(void *);
	uint32_t want;          /* packets to mark */
	uint32_t marked;        /* claimed by the workers (atomic) */
	struct trace_pkt pkt[TRACE_PKTS_MAX];
};

extern bool trace_on;         /* workers: test before each hook (one predictable branch) */
extern struct trace tr;       /* tracetap.c */

/* Slots claimed so far: at most want (trace_rx claims a slot only below it). */
static inline uint32_t trace_marked(void)
{
	return __atomic_load_n(&tr.marked, __ATOMIC_ACQUIRE);
}

/* The workers' hooks (tracetap.c); w = the calling worker. */
void trace_rx(unsigned w, uint16_t port, uint16_t queue, struct rte_mbuf **m, uint16_t n);
void trace_step(unsigned w, const struct rte_mbuf *m, uint8_t kind, uint32_t a, uint32_t b);
void trace_move(unsigned w, const struct rte_mbuf *from, struct rte_mbuf *to, uint32_t a, uint32_t b);
void trace_end(unsigned w, const struct rte_mbuf *m, uint8_t kind, uint32_t a);
/* After a TX burst: the first `sent` of m left (their TX step was logged before it). */
void trace_tx_done(unsigned w, struct rte_mbuf *const *m, uint16_t sent);

#endif
