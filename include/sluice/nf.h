/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libsluice: the NF SDK. No DPDK dependency.
 *
 * An NF attaches to sluiced, receives packets in batches through a handler,
 * reads and writes them in place in shared memory, sets a per-packet action
 * and returns them. Functions returning int give 0 (or a count) on success
 * and a negative enum sl_err (see abi.h, sl_strerror) on failure.
 *
 *   static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
 *   {
 *       for (unsigned i = 0; i < n; i++)
 *           sl_pkt_set_action(&pkts[i], SL_ACT_NEXT, 0);
 *   }
 *   int main(int argc, char **argv) {
 *       struct sl_nf_config cfg; sl_nf_config_default(&cfg);
 *       sl_nf_config_from_env(&cfg);                    // SLUICE_* variables
 *       struct sl_nf *nf; int rc = sl_nf_attach(&cfg, &nf);
 *       if (rc < 0) { fprintf(stderr, "%s\n", sl_strerror(-rc)); return 1; }
 *       rc = sl_nf_run(nf, handler, NULL);              // until SIGINT/SIGTERM
 *       sl_nf_detach(nf);
 *   }
 */
#ifndef SLUICE_NF_H
#define SLUICE_NF_H

#include <stdint.h>
#include <string.h>
#include "sluice/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_BURST_MAX 32 /* packets per handler call at most */

struct sl_nf; /* opaque */

/* sandbox modes (SLUICE_NF_SANDBOX; docs/abi.md "Sandbox") */
enum sl_sandbox {
	SL_SANDBOX_NONE = 0,   /* no system call filter */
	SL_SANDBOX_STRICT = 1, /* sl_nf_run installs the seccomp filter before its loop */
};

/* Exit status of an NF that made a system call the strict sandbox refuses (128 + SIGSYS): the SDK's
 * SIGSYS handler writes "sluice-nf: sandbox: system call NAME (NR) is not allowed ..." and exits. */
#define SL_SANDBOX_EXIT 159

struct sl_nf_config {
	char socket_path[108];      /* sluiced NF socket (SLUICE_NF_SOCKET) */
	char name[SL_NAME_MAX];     /* unique instance name (SLUICE_NF_NAME) */
	char service[SL_NAME_MAX];  /* service (SLUICE_NF_SERVICE) */
	enum sl_wakeup wakeup;      /* SLUICE_NF_WAKEUP: poll | block | adaptive */
	uint32_t batch;             /* block: kick threshold (SLUICE_NF_BATCH), default 32 */
	uint32_t timeout_us;        /* block: aging deadline (SLUICE_NF_TIMEOUT_US), default 100 */
	uint32_t spin_us;           /* adaptive: spin this long before blocking (SLUICE_NF_SPIN_US), default 200 */
	uint32_t attach_timeout_ms; /* give up attaching after this long, default 5000 */
	int sock_fd;                /* >= 0: attach over this already connected socket instead of
	                             * connecting to socket_path (SLUICE_NF_FD; the supervisor's hand-off
	                             * to a sandboxed NF); sl_nf_attach owns it from then on, failing or
	                             * not. Default -1 */
	enum sl_sandbox sandbox;    /* SLUICE_NF_SANDBOX: none | strict, default none */
	char token[SL_TOKEN_MAX + 1]; /* the service's attach token (SLUICE_NF_TOKEN), "" = none; sent in
	                               * INIT (docs/abi.md "Service tokens") */
	uint32_t reattach_ms;       /* > 0: when sluiced goes away (killed, or restarting), sl_nf_run keeps
	                             * the NF and attaches again to the next sluiced on the same socket,
	                             * trying this long (SLUICE_NF_REATTACH_MS; docs/abi.md "Restarts").
	                             * 0 (default): sl_nf_run returns -SL_ERR_IO / -SL_ERR_RESTART */
	uint32_t supply;            /* > 0: an endpoint that makes frames of its own (a TCP/IP stack):
	                             * sluiced keeps up to this many empty buffers in its hands for
	                             * sl_nf_alloc (docs/abi.md "Supply"; SLUICE_NF_SUPPLY, 0..4096,
	                             * capped by sluiced to half its ring). Such an NF gets no pipes */
};

/* A packet as the handler sees it. Only the accessors below should touch it. */
struct sl_pkt {
	struct sl_desc d;  /* the descriptor (action and dest are set on return) */
	uint8_t *base;     /* mapped start of the packet's region (private to the SDK) */
	uint32_t buf_size; /* size of the packet's buffer */
};

typedef void (*sl_handler_fn)(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg);

/* Fill cfg with defaults (socket /run/sluice/nf.sock, no sock_fd, wakeup poll, no sandbox). Never fails. */
void sl_nf_config_default(struct sl_nf_config *cfg);

/* Override cfg from SLUICE_* environment variables (SLUICE_NF_SOCKET, _NAME, _SERVICE, _WAKEUP,
 * _BATCH, _TIMEOUT_US, _SPIN_US, _FD, _SANDBOX, _TOKEN, _REATTACH_MS). Returns 0 or -SL_ERR_FIELD (an unparsable value;
 * the variable is named on stderr). */
int sl_nf_config_from_env(struct sl_nf_config *cfg);

/* Connect (or take cfg.sock_fd) and complete the attach handshake. Returns 0 and sets *out, or a
 * negative enum sl_err (-SL_ERR_IO when sluiced is unreachable; the manager's
 * DISCONNECT code when it refuses the NF). */
int sl_nf_attach(const struct sl_nf_config *cfg, struct sl_nf **out);

/* Run the receive loop, calling handler per batch, until sl_nf_stop(),
 * SIGINT/SIGTERM, or manager disconnect. Returns 0 on a requested stop or
 * signal, -SL_ERR_IO / -code when the manager went away or disconnected us.
 * With cfg.reattach_ms > 0 a manager that vanished or restarts (-SL_ERR_IO, -SL_ERR_RESTART) is
 * not the end: the loop attaches again (same name, service and token; new regions and rings; the
 * handler, its arg and the pointers sl_nf_counter gave stay valid) and goes on; it returns the
 * code only if no sluiced took it back within reattach_ms, or if the NF cannot re-attach (a
 * strict-sandboxed or guest NF: docs/abi.md "Restarts").
 * With cfg.sandbox SL_SANDBOX_STRICT the first call installs the seccomp filter (every thread of
 * the process, for good) before the loop starts; -SL_ERR_PERM (reason on stderr) if it cannot.
 * In a thread sluiced made real-time (sluiced.nf_sched fifo) it unregisters the thread's rseq area
 * first, unless SLUICE_NF_RSEQ=keep (SLUICE_NF_RSEQ=off is the default; docs/architecture.md
 * "NFs sharing a core"). */
int sl_nf_run(struct sl_nf *nf, sl_handler_fn handler, void *arg);

/* Ask sl_nf_run to return after the current batch (async-signal-safe). */
void sl_nf_stop(struct sl_nf *nf);

/* From a handler: give the core up (sched_yield) once this batch is published, even if more input
 * waits. For an NF sharing a core whose output is due now and whose remaining input is not urgent:
 * a paced generator whose bucket ran dry hands what it stamped to the next hop at once instead of
 * recycling more supply first (docs/architecture.md "Sharing a core"). Alone on a core it costs a
 * system call that returns at once. */
void sl_nf_yield(struct sl_nf *nf);

/* Send DISCONNECT, close the socket and unmap everything; NULL-safe.
 * Every buffer the NF held is given back: those already returned on the TX
 * ring are forwarded, the rest are reclaimed by the manager. */
void sl_nf_detach(struct sl_nf *nf);

/* This NF's id, service id and name as assigned by the manager. */
uint32_t sl_nf_id(const struct sl_nf *nf);
uint32_t sl_nf_service_id(const struct sl_nf *nf);
const char *sl_nf_name(const struct sl_nf *nf);

/* The manager's ports: their count, the name of port `id` (NULL if out of range), and the id of the
 * port called `name` (-1 if none). Ids are what SL_ACT_PORT takes as dest. */
uint32_t sl_nf_port_count(const struct sl_nf *nf);
const char *sl_nf_port_name(const struct sl_nf *nf, uint32_t id);
int sl_nf_port_id(const struct sl_nf *nf, const char *name);

/* A named counter that sluiced reports in this NF's `counters` (control API `nfs`/`stats`,
 * `sluice stats`). Returns a pointer to its value, which the NF's one thread updates with plain
 * stores (`*c += n`); asking again for the same name returns the same counter. NULL when the name
 * is empty, longer than SL_COUNTER_NAME_MAX - 1, not made of [A-Za-z0-9_.:-], or SL_COUNTERS_MAX
 * counters exist. Call after sl_nf_attach; the pointer is valid until sl_nf_detach. Registering
 * is not for the hot path (a linear search); updating is. */
uint64_t *sl_nf_counter(struct sl_nf *nf, const char *name);

/* Counters kept by the SDK for this NF. */
struct sl_nf_stats {
	uint64_t rx_pkts, tx_pkts, batches, sleeps, wakeups;
	uint64_t reattaches;       /* times the NF attached again to a restarted sluiced */
	uint64_t restart_lost;     /* descriptors in its rings when sluiced went away (lost with it) */
};
void sl_nf_get_stats(const struct sl_nf *nf, struct sl_nf_stats *st);

/* ---- Hosts: several NFs in one thread (sluice-group, docs/groups.md) ----
 * A host attaches each NF with sl_nf_attach and, instead of sl_nf_run, turns them itself. The
 * strict sandbox, real-time turn-taking and the stop signals are then the host's business. */

/* One turn of sl_nf_run's loop that never sleeps: one burst from the RX ring (and the pipe) through
 * handler onto the TX ring. Returns the packets handled (>= 0), or a negative code: the NF is
 * finished, as sl_nf_run would have returned (with cfg.reattach_ms a vanished or restarting sluiced
 * is re-attached to first, inside this call). */
int sl_nf_poll(struct sl_nf *nf, sl_handler_fn handler, void *arg);

/* A look at the control socket without waiting (a DISCONNECT, a vanished sluiced): 0, or a negative
 * code as sl_nf_poll. A polling host calls it now and then; a sleeping one when fds[1] of
 * sl_nf_sleep_prepare became readable. */
int sl_nf_check(struct sl_nf *nf);

/* Before the host sleeps: 1 if this NF may (sluiced will kick fds[0], its RX eventfd; fds[1] is its
 * control socket), 0 if input is waiting already (do not sleep; nothing to undo). After the sleep,
 * sl_nf_sleep_done for every NF that returned 1. */
int sl_nf_sleep_prepare(struct sl_nf *nf, int fds[2]);
void sl_nf_sleep_done(struct sl_nf *nf);

/* Tell the SDK that this process turns nf with handler(arg) (as it passes to sl_nf_poll). Two NFs
 * hosted so that sluiced joins them by a pipe then run as one segment: the upstream's NEXT packets go
 * into the downstream's handler within the same sl_nf_poll call (docs/groups.md "Run to
 * completion"). 0, or -SL_ERR_FIELD (no handler, a guest NF). sl_nf_detach ends it. */
int sl_nf_host(struct sl_nf *nf, sl_handler_fn handler, void *arg);

/* ---- Frames of its own (docs/abi.md "Supply"), with cfg.supply > 0 ----
 * Call these from the thread that turns the NF (sl_nf_run's handler, or the host's loop). */

/* Take an empty buffer: p gets a packet of length 0 with the default headroom (grow it with
 * sl_pkt_adj_tail, write at sl_pkt_data) and action NEXT. 0, or -SL_ERR_NOMEM when none is in hand
 * now (sluiced tops the supply up as the NF returns buffers). */
int sl_nf_alloc(struct sl_nf *nf, struct sl_pkt *p);

/* Hand n packets from sl_nf_alloc (or kept with sl_pkt_keep) back with their actions (SL_ACT_NEXT: along the supply chain, the
 * first chain that starts with this NF's service and has an exit port; SL_ACT_DROP: an unused buffer back). 0, or a
 * negative code (the NF is finished, as sl_nf_poll). */
int sl_nf_emit(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n);

/* Empty buffers in hand. */
unsigned sl_nf_supply(const struct sl_nf *nf);

/* Slots of its rings: at most the buffers it can hold at once (nfs[].quota may make that fewer). */
uint32_t sl_nf_ring_size(const struct sl_nf *nf);

/* In the handler: keep this packet past the handler -- the SDK does not hand it back when the handler
 * returns -- and return it later with sl_nf_emit (with an action: SL_ACT_DROP when done with it). A
 * kept packet counts against the NF's lending budget (its ring) until then: keep a bounded number.
 * For an NF that consumes frames without copying them (the user stack: docs/abi.md "Supply"). */
#define SL_ACT_KEEP 0x0f /* the SDK's own: never reaches sluiced */
static inline void sl_pkt_keep(struct sl_pkt *p) { p->d.action = SL_ACT_KEEP; }

/* ---- packet accessors (inline: hot path) ---- */

/* Pointer to the first data byte. */
static inline uint8_t *sl_pkt_data(const struct sl_pkt *p) { return p->base + p->d.off; }
/* Data length in bytes. */
static inline uint16_t sl_pkt_len(const struct sl_pkt *p) { return p->d.len; }
/* Ingress port id of the packet (valid until the action is set). */
static inline uint16_t sl_pkt_in_port(const struct sl_pkt *p) { return p->d.dest; }
/* Bytes free before the data. */
static inline uint32_t sl_pkt_headroom(const struct sl_pkt *p) { return p->d.head; }
/* Bytes free after the data. */
static inline uint32_t sl_pkt_tailroom(const struct sl_pkt *p)
{
	return p->buf_size - p->d.head - p->d.len;
}

/* Grow (delta > 0, prepend) or shrink (delta < 0, strip) the packet at its
 * head. Returns the new data pointer, or NULL if headroom or length would be
 * exceeded (the packet is unchanged). */
static inline uint8_t *sl_pkt_adj_head(struct sl_pkt *p, int delta)
{
	if (delta > 0 ? (uint32_t)delta > p->d.head : (uint32_t)-delta > p->d.len)
		return NULL;
	if ((uint32_t)p->d.len + delta > 0xffff)
		return NULL;
	p->d.head -= delta;
	p->d.off -= delta;
	p->d.len += delta;
	return sl_pkt_data(p);
}

/* Grow (delta > 0, append) or shrink (delta < 0, trim) the packet at its
 * tail. Returns 0, or -1 if tailroom or length would be exceeded. */
static inline int sl_pkt_adj_tail(struct sl_pkt *p, int delta)
{
	if (delta > 0 ? (uint32_t)delta > sl_pkt_tailroom(p) : (uint32_t)-delta > p->d.len)
		return -1;
	if ((uint32_t)p->d.len + delta > 0xffff)
		return -1;
	p->d.len += delta;
	return 0;
}

/* Set what the manager does with the packet when the handler returns:
 * SL_ACT_NEXT (dest ignored), SL_ACT_TO_NF (dest = service id),
 * SL_ACT_OUT (dest = port id), SL_ACT_DROP. Default is SL_ACT_NEXT. */
static inline void sl_pkt_set_action(struct sl_pkt *p, enum sl_action a, uint16_t dest)
{
	p->d.action = (uint8_t)a;
	p->d.dest = dest;
}

/* Transmit the packet on several ports (SL_ACT_OUT_SET; struct sl_out_set in abi.h says what each
 * mask means): writes the port set into the headroom just before the data. Returns 0, or -1 if the
 * headroom is shorter than a struct sl_out_set (the action is then left unchanged). */
static inline int sl_pkt_set_out_set(struct sl_pkt *p, uint64_t as_is, uint64_t untag, uint64_t tag,
				     uint16_t tci)
{
	if (p->d.head < sizeof(struct sl_out_set))
		return -1;
	struct sl_out_set s = { .as_is = as_is, .untag = untag, .tag = tag, .tci = tci,
				.magic = SL_OUT_SET_MAGIC, .reserved = 0 };
	memcpy(sl_pkt_data(p) - sizeof(s), &s, sizeof(s));
	p->d.action = (uint8_t)SL_ACT_OUT_SET;
	p->d.dest = 0;
	return 0;
}

/* As sl_pkt_set_action, and make it the path of the packet's whole flow: the manager enters the flow
 * (ingress port + IP 5-tuple of the headers as the packet leaves this NF) in its flow table, so the
 * flow's later packets take this action at once, without the rules or this NF (SL_ACT_NEXT: they go
 * to the hop after this NF). The entry expires when the flow is idle. A flow table is needed
 * (sluiced steering.flows > 0); non-IP packets are not entered. */
static inline void sl_pkt_set_flow_action(struct sl_pkt *p, enum sl_action a, uint16_t dest)
{
	p->d.action = (uint8_t)a | SL_ACT_F_PIN;
	p->d.dest = dest;
}

/* Forget the packet's flow entry (set after the action): its next packet meets the rules again. */
static inline void sl_pkt_forget_flow(struct sl_pkt *p)
{
	p->d.action = (uint8_t)((p->d.action & SL_ACT_MASK) | SL_ACT_F_UNPIN);
}

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_NF_H */
