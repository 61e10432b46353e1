/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The worker: one lcore, batch-oriented end to end.
 *
 *   RX burst from every port -> first hop (ingress port -> chain) -> stage
 *   descriptors per NF -> drain the TX rings of NFs holding packets (the active
 *   set, below) -> act on each returned
 *   descriptor (NEXT / TO_NF / OUT / DROP) -> flush NF staging into RX rings
 *   (kicking sleepers) and port staging into TX bursts.
 *
 * Nothing here allocates, locks or logs per packet. Control changes arrive as
 * commands executed at the top of the loop, between bursts.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_tcp.h>
#include <rte_udp.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pause.h>

#include "sluice/capture.h"
#include "sluice/ring.h"
#include "pktkey.h"
#include "sluiced.h"
#include "trace.h"

/* Worker-private lists (ids into M.nfs).
 *
 * Active set: the worker never walks every attached NF. An NF that holds no buffers cannot return
 * anything (NF_SET_NONE, on no list); one that holds some is BUSY and drained every loop, until it
 * returned everything or is seen asleep with nothing to return: then it is PARKED and rejoins BUSY
 * when kicked, or when it rings its doorbell (the TX ring's need_kick, set while parked, makes the
 * SDK kick the TX eventfd after it publishes: an NF woken by a signal, or one that found more work
 * just as it was parked). So the loop's cost grows with the NFs that have packets in flight,
 * not with the NFs attached. Sleepers with packets waiting for a kick are on `waiting`, scanned
 * only when the earliest deadline is due. */
/* The worker running on this thread (struct worker, sluiced.h: its lists and counters). The control
 * thread sets it too while it runs a command inline (no worker running). */
static __thread struct worker *W;
/* The flow table (docs/steering.md "Flows"): key position in flow_h -> flows[] */
static struct rte_hash *flow_h;
static struct flow *flows;
static int fault_fd = -1;         /* eventfd: an NF broke the ring protocol (control disconnects it) */

/* The worker a trace step is logged for (the control thread, running a command inline: none). */
#define TRACE_W (W ? W->index : 0xffu)
/* A traced packet's end, with why (trace.h). Before the drop: the buffer may be reused after it. */
#define TRACE_END(m, kind, a)                                   \
	do {                                                    \
		if (unlikely(trace_on))                         \
			trace_end(TRACE_W, (m), (kind), (a));   \
	} while (0)
#define TRACE_STEP(m, kind, a, b)                               \
	do {                                                    \
		if (unlikely(trace_on))                         \
			trace_step(TRACE_W, (m), (kind), (a), (b)); \
	} while (0)

static inline void drop(struct rte_mbuf *m)
{
	TRACE_END(m, TR_DROP, TD_OTHER); /* a drop with a named reason ended it already */
	rte_pktmbuf_free(m);
}

/* Counters more than one worker may write (a port's no_path drops, a service's, a domain's holdings,
 * rule hits): atomic when there are several workers, plain stores when there is one. */
static inline void shared_add(uint64_t *p, uint64_t n)
{
	if (M.nworkers > 1)
		__atomic_fetch_add(p, n, __ATOMIC_RELAXED);
	else
		*p += n;
}

static inline void shared_add32(uint32_t *p, uint32_t n)
{
	if (M.nworkers > 1)
		__atomic_fetch_add(p, n, __ATOMIC_RELAXED);
	else
		*p += n;
}

enum { HAND_NF = 1, HAND_PORT = 2 }; /* mbuf_priv.h_kind: "Workers" below */
static void handoff(unsigned to, struct rte_mbuf *m, uint8_t kind, uint16_t target, uint16_t chain, uint8_t hop,
		    uint16_t in_port);

static inline uint32_t mix32(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352d;
	x ^= x >> 15;
	x *= 0x846ca68b;
	x ^= x >> 16;
	return x;
}

/* Flow hash over the IPv4 or IPv6 5-tuple (bounds-checked), so a flow sticks to a replica. Symmetric:
 * both directions of a connection hash alike, so a stateful NF with replicas sees the whole
 * connection on one of them. IPv6: the fixed header's next header only (ports when it is TCP/UDP). */
static uint32_t flow_hash(const struct rte_mbuf *m)
{
	const uint8_t *p = rte_pktmbuf_mtod(m, const uint8_t *);
	uint32_t len = m->data_len, l4 = 0, h;
	uint8_t proto;
	if (len < sizeof(struct rte_ether_hdr))
		return 0;
	const struct rte_ether_hdr *eth = (const void *)p;
	const uint8_t *ip = p + sizeof(*eth);
	if (eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) && len >= sizeof(*eth) + 20) {
		uint32_t a, b;
		memcpy(&a, ip + 12, 4);
		memcpy(&b, ip + 16, 4);
		proto = ip[9];
		h = mix32(a) ^ mix32(b);
		l4 = sizeof(*eth) + (ip[0] & 0xfu) * 4u;
	} else if (eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6) && len >= sizeof(*eth) + 40) {
		uint32_t w[8];
		memcpy(w, ip + 8, 32);
		proto = ip[6];
		h = mix32(w[0] ^ w[1] ^ mix32(w[2] ^ w[3])) ^ mix32(w[4] ^ w[5] ^ mix32(w[6] ^ w[7]));
		l4 = sizeof(*eth) + 40;
	} else {
		return mix32(eth->ether_type);
	}
	h ^= mix32(proto + 0x100u);
	if ((proto == IPPROTO_TCP || proto == IPPROTO_UDP) && l4 + 4 <= len) {
		uint16_t sp, dp;
		memcpy(&sp, p + l4, 2);
		memcpy(&dp, p + l4 + 2, 2);
		h ^= mix32(sp + 0x10000u) ^ mix32(dp + 0x10000u);
	}
	return h;
}

/* The replica with the fewest packets in its hands (NetVM's policy): lent counts what waits in its RX
 * ring and what it has taken but not returned, so a replica busy with a big batch looks loaded. */
static inline uint16_t least_loaded(struct service *s)
{
	/* the scan starts one replica further each time, so ties (often all idle) rotate instead of
	 * always going to the first replica */
	uint16_t start = (uint16_t)(s->rr++ % s->ninst), pick = s->inst[start];
	uint32_t best = UINT32_MAX;
	for (uint16_t k = 0, i = start; k < s->ninst; k++, i = (uint16_t)(i + 1 == s->ninst ? 0 : i + 1)) {
		const struct nf *nf = &M.nfs[s->inst[i]];
		uint32_t q = nf->lent + nf->nstage;
		if (q < best) {
			best = q;
			pick = s->inst[i];
		}
	}
	return pick;
}

/* Flow affinity (docs/architecture.md "Workers"): a service with replicas on this worker and on
 * others picks among this worker's own, by its policy, so the packet stays on the worker that holds
 * it (no handoff). Only services whose replicas span workers come here (pick_instance). */
static uint16_t pick_local(struct service *s, const struct rte_mbuf *m)
{
	const uint8_t me = (uint8_t)W->index;
	uint16_t n = s->ninst, pick = s->inst[0];
	if (s->policy == SVC_ROUND_ROBIN) {
		uint16_t start = (uint16_t)(s->rr++ % n);
		for (uint16_t k = 0, i = start; k < n; k++, i = (uint16_t)(i + 1 == n ? 0 : i + 1))
			if (M.nfs[s->inst[i]].worker == me)
				return s->inst[i];
		return s->inst[start];
	}
	if (s->policy == SVC_LEAST_LOADED) {
		uint32_t best = UINT32_MAX;
		uint16_t start = (uint16_t)(s->rr++ % n);
		for (uint16_t k = 0, i = start; k < n; k++, i = (uint16_t)(i + 1 == n ? 0 : i + 1)) {
			const struct nf *nf = &M.nfs[s->inst[i]];
			uint32_t q = nf->lent + nf->nstage;
			if (nf->worker == me && q < best) {
				best = q;
				pick = s->inst[i];
			}
		}
		return pick;
	}
	uint32_t h = flow_hash(m), best = 0;
	bool any = false;
	for (uint16_t i = 0; i < n; i++) {
		if (M.nfs[s->inst[i]].worker != me)
			continue;
		uint32_t score = mix32(h ^ (s->inst[i] * 0x9e3779b9u));
		if (!any || score >= best) {
			best = score;
			pick = s->inst[i];
			any = true;
		}
	}
	return pick;
}

/* Pick a replica by the service's policy. Flow: rendezvous hashing, so adding or removing a
 * replica moves only its share of flows. */
static inline uint16_t pick_instance(struct service *s, const struct rte_mbuf *m)
{
	if (s->ninst == 1)
		return s->inst[0];
	uint16_t nl = s->nlocal[W->index];
	if (unlikely(nl != 0 && nl != s->ninst)) /* replicas here and on other workers: one of ours */
		return pick_local(s, m);
	if (s->policy == SVC_ROUND_ROBIN)
		return s->inst[s->rr++ % s->ninst];
	if (s->policy == SVC_LEAST_LOADED)
		return least_loaded(s);
	uint32_t h = flow_hash(m), best = 0;
	uint16_t pick = s->inst[0];
	for (uint16_t i = 0; i < s->ninst; i++) {
		uint32_t score = mix32(h ^ (s->inst[i] * 0x9e3779b9u));
		if (score >= best) {
			best = score;
			pick = s->inst[i];
		}
	}
	return pick;
}

static void service_remove_instance(struct service *s, uint16_t id);
static bool nf_leave_service(struct nf *nf);

/* The NF broke the ring protocol (nfring.h): it gets no more packets, the worker stops reading its
 * rings (drain_busy lets go of it, flush_nf drops what was staged for it), and the control thread,
 * woken through fault_fd, disconnects it with SL_ERR_RING; its WCMD_NF_REMOVE reclaims its buffers.
 * Once per NF: no logging here (the control thread logs the detach). */
static void nf_fault(struct nf *nf, enum nf_ring_err why)
{
	if (nf->fault)
		return;
	__atomic_store_n(&nf->fault, (uint8_t)why, __ATOMIC_RELEASE);
	W->st.ring_faults[why]++;
	nf_leave_service(nf);
	uint64_t one = 1;
	if (write(fault_fd, &one, sizeof(one)) < 0) { /* EAGAIN: the counter is full, it is being read */
	}
}

/* Read the NF's RX consumer / TX producer index (nfring.h); false if it broke the protocol. */
static inline bool rx_sync(struct nf *nf)
{
	enum nf_ring_err e = nf_ring_rx_sync(&nf->rxk);
	if (likely(e == NF_RING_OK))
		return true;
	nf_fault(nf, e);
	return false;
}

static inline bool tx_sync(struct nf *nf)
{
	enum nf_ring_err e = nf_ring_tx_sync(&nf->txk);
	if (likely(e == NF_RING_OK))
		return true;
	nf_fault(nf, e);
	return false;
}

/* Read the NF's pipe ring producer index (its pipe ring is a second TX ring: nfring.h rules). */
static inline bool pipe_sync(struct nf *nf)
{
	enum nf_ring_err e = nf_ring_tx_sync(&nf->pok);
	if (likely(e == NF_RING_OK))
		return true;
	nf_fault(nf, e);
	return false;
}

/* The worker reads this NF's pipe ring (it has one and no pipe joins it to the next NF). */
static inline bool worker_reads_pipe(const struct nf *nf)
{
	return nf->po != NULL && nf->pipe_to < 0;
}

static void set_leave(struct nf *nf)
{
	uint16_t *list = nf->set == NF_SET_BUSY ? W->busy : W->parked;
	uint32_t *n = nf->set == NF_SET_BUSY ? &W->nbusy : &W->nparked;
	if (nf->set == NF_SET_NONE)
		return;
	uint16_t last = list[--*n];
	list[nf->set_pos] = last;
	M.nfs[last].set_pos = nf->set_pos;
	nf->set = NF_SET_NONE;
}

static void set_enter(struct nf *nf, enum nf_set to)
{
	if (nf->set == to)
		return;
	if (to == NF_SET_PARKED) {
		/* Ask for a doorbell (the SDK kicks the TX eventfd after publishing when need_kick is
		 * set), then look again: whatever the NF publishes from now on rings it. */
		bool po = worker_reads_pipe(nf);
		__atomic_store_n(&nf->tx->need_kick, 1, __ATOMIC_RELAXED);
		if (po)
			__atomic_store_n(&nf->po->need_kick, 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (!tx_sync(nf) || nf_ring_tx_avail(&nf->txk) != 0 ||
		    (po && (!pipe_sync(nf) || nf_ring_tx_avail(&nf->pok) != 0))) {
			__atomic_store_n(&nf->tx->need_kick, 0, __ATOMIC_RELAXED);
			if (nf->po)
				__atomic_store_n(&nf->po->need_kick, 0, __ATOMIC_RELAXED);
			to = NF_SET_BUSY;
			if (nf->set == to)
				return;
		}
	} else if (nf->set == NF_SET_PARKED) {
		__atomic_store_n(&nf->tx->need_kick, 0, __ATOMIC_RELAXED);
		if (nf->po)
			__atomic_store_n(&nf->po->need_kick, 0, __ATOMIC_RELAXED);
	}
	set_leave(nf);
	uint16_t id = (uint16_t)(nf - M.nfs);
	if (to == NF_SET_BUSY) {
		nf->set_pos = W->nbusy;
		W->busy[W->nbusy++] = id;
	} else if (to == NF_SET_PARKED) {
		nf->set_pos = W->nparked;
		W->parked[W->nparked++] = id;
	}
	nf->set = (uint8_t)to;
}

static void waiting_leave(struct nf *nf)
{
	if (!nf->waiting)
		return;
	for (uint32_t i = 0; i < W->nwaiting; i++)
		if (&M.nfs[W->waiting[i]] == nf) {
			W->waiting[i] = W->waiting[--W->nwaiting];
			break;
		}
	nf->waiting = false;
}

/* Kicked and not yet run: its RX consumer index has not moved since the kick (the ring held
 * packets then, and a woken NF cannot sleep again before it consumes: sl_ring_prepare_sleep
 * re-checks the ring). It will see everything in its
 * ring when it runs, so kicking it again -- or parking it -- would only cost system calls: with
 * thousands of sleeping NFs, repeated kicks to NFs still waiting for the CPU outnumbered the NFs'
 * runs ten to one. */
static inline bool kick_pending(struct nf *nf)
{
	if (!nf->kick_pending)
		return false;
	if (rx_sync(nf) && nf->rxk.peer == nf->kick_cons)
		return true;
	nf->kick_pending = false;
	return false;
}

/* The eventfd write that wakes an NF, counted. A fifo NF's wake-up queues it out of chain order:
 * the order helper repairs that (sched.c). */
static void kick_write(struct nf *nf)
{
	uint64_t one = 1;
	if (write(nf->rx_kick_fd, &one, sizeof(one)) == sizeof(one))
		nf->st.kicks++;
	if (nf->sched_fifo)
		sched_fifo_kicked();
}

static void kick(struct nf *nf)
{
	/* Read before the write: once kicked, the NF may run (on another core) before write() returns.
	 * Pending only if the ring still holds packets: an NF that already took them all may sleep
	 * again without consuming anything more. */
	if (!rx_sync(nf))
		return;
	nf->kick_cons = nf->rxk.peer;
	nf->kick_pending = nf->rxk.own != nf->kick_cons;
	kick_write(nf);
	nf->first_wait = 0;
	if (nf->set == NF_SET_PARKED) /* it will run and return packets: collect them again */
		set_enter(nf, NF_SET_BUSY);
}

static void cohost_busy(const struct nf *nf);

/* Copies of what an NF with a capture at its way in is about to be given, taken before it can touch
 * them: as many as its RX ring has room for now, which is then all it is given (the rest drops as
 * ring_full, as it would have). */
static __attribute__((noinline)) uint32_t capture_nf_in(struct nf *nf, uint16_t id)
{
	if (nf_ring_rx_sync(&nf->rxk) != NF_RING_OK)
		return nf->nstage; /* the enqueue finds the same fault */
	uint32_t room = nf->rxk.size - nf_ring_rx_pending(&nf->rxk), give = nf->nstage < room ? nf->nstage : room;
	struct rte_mbuf *m[SL_BURST];
	const struct region *r = M.regions[nf->domain];
	for (uint32_t i = 0; i < give; i++)
		m[i] = r->bufs[nf->stage[i].buf];
	capture_pkts(W->index, nf->tap_in, SL_CAP_NF_IN, id, m, (uint16_t)give, 0);
	return give;
}

/* ---- Supply (docs/abi.md "Supply") ----
 * An endpoint NF (INIT SL_INIT_F_SUPPLY: the socket service's userspace TCP/IP stack) makes frames of
 * its own. Its worker keeps up to supply_want empty buffers of the NF's domain in its hands: each is
 * lent like a packet, staged with len 0 and dest SL_DEST_SUPPLY, and marked in its bufstate (supply),
 * which also says where SL_ACT_NEXT takes it: along the NF's supply chain (the first chain that starts
 * with its service and has an exit port), as if it had come in at that exit port. The mark goes when the buffer
 * comes back, whatever the NF did with it, so supply_held counts exactly the empty buffers it holds. */
static inline void supply_back(struct nf *nf, struct sl_bufstate *st)
{
	st->supply = 0;
	nf->supply_held--;
}

static int32_t supply_chain(const struct route *rt, uint16_t svc)
{
	for (uint32_t c = 0; c < rt->nchains; c++)
		if (rt->chains[c].len > 0 && rt->chains[c].svc[0] == svc && rt->chains[c].exit >= 0)
			return (int32_t)c;
	return -1;
}

static void mark_dirty(uint16_t id, struct nf *nf);

static void supply_topup(const struct route *rt)
{
	for (uint32_t k = 0; k < W->nsuppliers; k++) {
		uint16_t id = W->suppliers[k];
		struct nf *nf = &M.nfs[id];
		if (likely(nf->supply_held >= nf->supply_want) || nf->fault || nf->draining || !nf->active)
			continue;
		uint32_t want = nf->supply_want - nf->supply_held;
		uint32_t busy = nf->lent + nf->nstage;
		uint32_t room = busy < nf->lend_max ? nf->lend_max - busy : 0;
		want = RTE_MIN(want, RTE_MIN(room, (uint32_t)SL_BURST - nf->nstage));
		if (want == 0 || M.dom_held[nf->domain] + want > M.dom_max[nf->domain])
			continue;
		struct region *r = M.regions[nf->domain];
		struct rte_mbuf *m[SL_BURST];
		if (rte_pktmbuf_alloc_bulk(r->pool, m, want) != 0) {
			W->st.supply_short++;
			continue;
		}
		int32_t c = supply_chain(rt, nf->service);
		uint16_t in_port = c >= 0 && rt->chains[c].exit >= 0 ? (uint16_t)rt->chains[c].exit : 0;
		for (uint32_t i = 0; i < want; i++) {
			uint32_t b = mbuf_id(m[i]);
			struct sl_bufstate *st = &r->st[b];
			st->chain = c >= 0 ? (uint16_t)c : UINT16_MAX; /* none: NEXT finds no path (counted) */
			st->hop = 0;
			st->in_port = in_port;
			st->supply = 1;
			sl_lend_stage(&r->lend, b, m[i]->data_off, 0, SL_DEST_SUPPLY, &nf->stage[nf->nstage++]);
		}
		shared_add32(&M.dom_held[nf->domain], want);
		nf->supply_held += want;
		nf->st.supplied += want;
		mark_dirty(id, nf);
	}
}

/* Of the nstage descriptors flush_nf staged for a supplied NF, the first n were delivered: how many
 * of those were supply buffers (not packets, for its rx counters). The rest were not delivered and
 * are freed by the caller: no longer held (datapath.c "Supply"). */
static __attribute__((noinline)) uint32_t supply_staged(struct nf *nf, struct region *r, uint32_t n)
{
	uint32_t sup = 0;
	for (uint32_t i = 0; i < nf->nstage; i++) {
		struct sl_bufstate *st = &r->st[nf->stage[i].buf];
		if (!st->supply)
			continue;
		if (i < n) {
			sup++;
		} else {
			st->supply = 0;
			nf->supply_held--;
		}
	}
	return sup;
}

static void flush_nf(struct nf *nf)
{
	uint32_t n = 0;
	uint16_t id = (uint16_t)(nf - M.nfs);
	if (likely(!nf->fault)) {
		uint32_t give = nf->nstage;
		if (unlikely(nf->tap_in))
			give = capture_nf_in(nf, id);
		enum nf_ring_err e = nf_ring_enqueue(&nf->rxk, nf->stage, give, &n);
		if (unlikely(e != NF_RING_OK))
			nf_fault(nf, e);
	}
	/* Delivered: from now on (and not before) the NF may return these buffers, once each. */
	uint64_t bytes = 0;
	struct region *r = M.regions[nf->domain];
	for (uint32_t i = 0; i < n; i++) {
		sl_lend_deliver(&r->lend, nf->stage[i].buf, id);
		bytes += nf->stage[i].len;
	}
	nf->lent += n;
	if (n && nf->set == NF_SET_NONE)
		set_enter(nf, NF_SET_BUSY);
	/* its host may run them on through its members by calls (fused pipes) at once, before this NF is
	 * drained or even kicked: the members that may return them are collected from now on */
	if (unlikely(nf->pipe_to >= 0) && n)
		cohost_busy(nf);
	uint32_t sup = unlikely(nf->supply_want) ? supply_staged(nf, r, n) : 0;
	nf->st.rx_pkts += n - sup;
	nf->st.rx_bytes += bytes;
	for (uint32_t i = n; i < nf->nstage; i++) { /* staged, never the NF's: the manager's to free */
		TRACE_END(r->bufs[nf->stage[i].buf], TR_DROP, nf->fault ? TD_NF_GONE : TD_RING_FULL);
		drop(r->bufs[nf->stage[i].buf]);
	}
	shared_add32(&M.dom_held[nf->domain], -(nf->nstage - n));
	if (unlikely(nf->fault)) { /* disconnected for a ring violation: its packets have no NF */
		shared_add(&M.services[nf->service].drop_nf_gone, nf->nstage - n);
		W->st.drops.nf_gone += nf->nstage - n;
		nf->nstage = 0;
		return;
	}
	if (n < nf->nstage) {
		shared_add(&nf->st.drop_ring_full, nf->nstage - n);
		W->st.drops.ring_full += nf->nstage - n;
	}
	nf->nstage = 0;
	if (nf->wakeup != SL_WAKE_POLL && n > 0) {
		/* Adaptive coalescing, as NICs moderate interrupts: a sleeper that was given nothing for
		 * timeout_us is kicked at once -- its packets could only wait out the deadline alone.
		 * Only while packets keep coming (under load) do they wait for `batch` or the deadline. */
		uint64_t now = rte_rdtsc(), prev = nf->last_fill;
		nf->last_fill = now;
		if (sl_ring_needs_kick(nf->rx) && !kick_pending(nf)) {
			bool idle = !nf->first_wait && now - prev >= nf->timeout_cyc;
			if (!nf->first_wait)
				nf->first_wait = now;
			if (idle || nf_ring_rx_pending(&nf->rxk) >= nf->batch || now - nf->first_wait >= nf->timeout_cyc) {
				kick(nf);
			} else if (!nf->waiting) {
				nf->waiting = true;
				W->waiting[W->nwaiting++] = (uint16_t)(nf - M.nfs);
				if (nf->first_wait + nf->timeout_cyc < W->next_deadline)
					W->next_deadline = nf->first_wait + nf->timeout_cyc;
			}
		} else {
			nf->first_wait = 0;
		}
	}
}

/* Age sleeping NFs' waiting packets: kick at the deadline. */
static void check_waiting(void)
{
	if (W->nwaiting == 0)
		return;
	uint64_t now = rte_rdtsc();
	if (now < W->next_deadline)
		return; /* nobody's deadline is due: the list is not even looked at */
	W->next_deadline = UINT64_MAX;
	for (uint32_t i = 0; i < W->nwaiting;) {
		struct nf *nf = &M.nfs[W->waiting[i]];
		bool keep = false;
		if (nf->active && !nf->fault && nf->first_wait && rx_sync(nf) && nf_ring_rx_pending(&nf->rxk) > 0) {
			if (!__atomic_load_n(&nf->rx->need_kick, __ATOMIC_RELAXED))
				nf->first_wait = 0; /* it woke by itself */
			else if (now - nf->first_wait >= nf->timeout_cyc)
				kick(nf);
			else
				keep = true;
		} else {
			nf->first_wait = 0;
		}
		if (keep) {
			if (nf->first_wait + nf->timeout_cyc < W->next_deadline)
				W->next_deadline = nf->first_wait + nf->timeout_cyc;
			i++;
		} else {
			nf->waiting = false;
			W->waiting[i] = W->waiting[--W->nwaiting];
		}
	}
}

static uint32_t drain_nf(uint16_t id, const struct route *rt);

/* A member of a fused segment (docs/groups.md "Run to completion"; "Cohosted NFs" below) returns
 * buffers its segment's first member holds, not its own: while an NF of its process upstream on its
 * pipes holds any, it stays in the busy set however few it holds itself. */
static bool cohost_upstream_holds(const struct nf *nf)
{
	unsigned guard = 0;
	for (int32_t u = nf->pipe_from; u >= 0 && guard < 64; u = M.nfs[u].pipe_from, guard++) {
		const struct nf *up = &M.nfs[u];
		if (up->pid != nf->pid || nf->guest || up->guest)
			return false;
		if (up->lent != 0)
			return true;
	}
	return false;
}

/* ... and enters it as soon as that one is given some (flush_nf, pipe_account), whatever state the
 * holder is in: a parked holder is not drained, and a member outside the set is never rung for. */
static void cohost_busy(const struct nf *nf)
{
	unsigned guard = 0;
	for (int32_t d = nf->pipe_to; d >= 0 && guard < 64; d = M.nfs[d].pipe_to, guard++) {
		struct nf *down = &M.nfs[d];
		if (down->pid != nf->pid || nf->guest || down->guest)
			return;
		if (down->set == NF_SET_NONE && down->active && !down->fault)
			set_enter(down, NF_SET_BUSY);
	}
}

/* Collect what busy NFs returned. An NF seen asleep (its RX need_kick set: the SDK publishes its TX
 * before announcing sleep) with nothing left to return is parked until kicked; one that returned
 * everything leaves the set. */
static uint32_t drain_busy(const struct route *rt)
{
	uint32_t got = 0;
	for (uint32_t i = 0; i < W->nbusy;) {
		uint16_t id = W->busy[i];
		struct nf *nf = &M.nfs[id];
		bool asleep = __atomic_load_n(&nf->rx->need_kick, __ATOMIC_ACQUIRE) != 0;
		got += drain_nf(id, rt);
		if (unlikely(nf->pipe_to >= 0) && nf->lent != 0)
			cohost_busy(nf);
		if (unlikely(nf->fault) ||
		    (nf->lent == 0 && nf->nstage == 0 && (likely(nf->pipe_from < 0) || !cohost_upstream_holds(nf))))
			set_leave(nf); /* a faulted NF's rings are not read again; its detach reclaims */
		else if (asleep && nf->bell && nf_ring_tx_avail(&nf->txk) == 0 &&
			 (!worker_reads_pipe(nf) || nf_ring_tx_avail(&nf->pok) == 0) && !kick_pending(nf))
			set_enter(nf, NF_SET_PARKED);
		else
			i++;
	}
	return got;
}

/* Parked NFs that rang their doorbell (published returns without being kicked: a signal woke them,
 * or they were parked just as they found more work) rejoin the busy set. One epoll_wait(0) every
 * 20 us while anyone is parked; nothing at all otherwise. */
static void doorbells(uint64_t now)
{
	if (W->nparked == 0 || now < W->next_bell_check)
		return;
	W->next_bell_check = now + M.tsc_hz / 50000;
	struct epoll_event ev[64];
	int n = epoll_wait(W->bell_ep, ev, 64, 0);
	W->st.bell_polls++;
	W->st.bell_events += n > 0 ? (uint64_t)n : 0;
	/* Edge-triggered (EPOLLET, every write is an edge) and never read: a doorbell costs one event in
	 * this call and no system call of its own, and an NF ringing in a loop costs no more than one
	 * ringing once -- at most one event per 20 us, acted on only while the NF is parked. */
	for (int i = 0; i < n; i++) {
		struct nf *nf = &M.nfs[ev[i].data.u32];
		if (nf->active && nf->set == NF_SET_PARKED) {
			W->st.doorbells++;
			set_enter(nf, NF_SET_BUSY);
		}
	}
}

/* A PCI port that cannot DMA into the regions (port.c pci_dma_map failed) sends copies in buffers of
 * its own pool; the region buffers go back at once. */
static void tx_copy_out(struct port *p, struct port_stage *ps)
{
	uint16_t k = 0;
	for (uint16_t i = 0; i < ps->n; i++) {
		struct rte_mbuf *m = ps->m[i], *c = rte_pktmbuf_alloc(p->own_pool);
		if (c && rte_pktmbuf_append(c, (uint16_t)m->data_len)) {
			rte_memcpy(rte_pktmbuf_mtod(c, uint8_t *), rte_pktmbuf_mtod(m, const uint8_t *), m->data_len);
			/* only what asks the device for TX work: m's other flags describe its own buffer
			 * (EXTERNAL: a pinned region buffer) and would make freeing the copy free that */
			c->ol_flags |= m->ol_flags & RTE_MBUF_F_TX_OFFLOAD_MASK;
			c->vlan_tci = m->vlan_tci;
			ps->m[k++] = c;
			shared_add(&p->tx_copied, 1);
		} else {
			if (c)
				rte_pktmbuf_free(c);
			W->st.drops.no_buffer++;
		}
		drop(m);
	}
	ps->n = k;
}

/* Send worker w's staging for port p: on TX queue w when the port has one per worker, else on its
 * only queue (then only the port's worker stages). */
static void flush_port(struct port *p, unsigned w)
{
	struct port_stage *ps = &p->stage[w];
	if (unlikely(p->vlan_insert)) /* ports[].offloads vlan_insert: the tag an explicit vlan_strip kept aside */
		for (uint16_t i = 0; i < ps->n; i++)
			if (ps->m[i]->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED)
				ps->m[i]->ol_flags |= RTE_MBUF_F_TX_VLAN;
	if (unlikely(p->tx_copy))
		tx_copy_out(p, ps);
	if (unlikely(p->tap_tx))
		capture_pkts(W->index, p->tap_tx, SL_CAP_PORT_TX, (uint16_t)(p - M.ports), ps->m, ps->n, 0);
	uint64_t bytes = 0;
	for (uint16_t i = 0; i < ps->n; i++)
		bytes += ps->m[i]->pkt_len;
	if (unlikely(trace_on)) /* before the burst: a sent buffer may be reused at once */
		for (uint16_t i = 0; i < ps->n; i++)
			trace_step(W->index, ps->m[i], TR_TX, (uint32_t)(p - M.ports), 0);
	uint16_t sent = rte_eth_tx_burst(p->port_id, p->txq_per_worker ? (uint16_t)w : 0, ps->m, ps->n);
	if (unlikely(trace_on))
		trace_tx_done(W->index, ps->m, sent);
	for (uint16_t i = sent; i < ps->n; i++) {
		bytes -= ps->m[i]->pkt_len;
		TRACE_END(ps->m[i], TR_DROP, TD_TX_FULL);
		drop(ps->m[i]);
	}
	ps->pkts += sent;
	ps->bytes += bytes;
	if (sent < ps->n) {
		shared_add(&p->st.drop_tx_full, ps->n - sent);
		W->st.drops.tx_full += ps->n - sent;
	}
	ps->n = 0;
}

static inline void to_port(uint16_t pi, struct rte_mbuf *m)
{
	struct port *p = &M.ports[pi];
	if (unlikely(!__atomic_load_n(&p->live, __ATOMIC_ACQUIRE))) {
		/* deleted (port_del): an NF's OUT to its old id, or a packet handed over before it died.
		 * Chain exits and rules never name a dead port: port_del refuses while they do. */
		W->st.drops.no_path++;
		drop(m);
		return;
	}
	/* a port with a TX queue per worker is sent on from whichever worker holds the packet */
	if (unlikely(p->worker != W->index) && !p->txq_per_worker) {
		handoff(p->worker, m, HAND_PORT, pi, 0, 0, 0);
		return;
	}
	struct port_stage *ps = &p->stage[W->index];
	if (!ps->listed) {
		ps->listed = true;
		W->dirty_ports[W->ndirty_ports++] = pi;
	}
	ps->m[ps->n++] = m;
	if (ps->n == SL_BURST)
		flush_port(p, W->index);
}

static inline void no_path(struct rte_mbuf *m, uint16_t in_port)
{
	TRACE_END(m, TR_DROP, TD_NO_PATH);
	shared_add(&M.ports[in_port].st.drop_no_path, 1);
	W->st.drops.no_path++;
	drop(m);
}

/* Backpressure (NFVnice): an NF holding >= 3/4 of its lending budget is overloaded until it is back
 * to <= 1/4; a service whose every instance is overloaded is saturated, and packets entering a chain
 * with a saturated service after its first hop are dropped at the entry, before any NF spends work
 * on a packet that would die deeper in the chain. nsaturated == 0 keeps the check off the path. */
static uint32_t nsaturated;

static void svc_saturation(struct service *s)
{
	bool sat = s->ninst > 0 && s->noverloaded >= s->ninst;
	if (sat != s->saturated) {
		s->saturated = sat;
		shared_add32(&nsaturated, sat ? 1 : (uint32_t)-1);
	}
}

static inline void nf_load_check(struct nf *nf)
{
	uint32_t q = nf->lent + nf->nstage + nf->pipe_backlog;
	if (unlikely(!nf->overloaded && q >= nf->lend_max - nf->lend_max / 4)) {
		nf->overloaded = true;
		if (!nf->draining) {
			shared_add32(&M.services[nf->service].noverloaded, 1);
			svc_saturation(&M.services[nf->service]);
		}
	} else if (unlikely(nf->overloaded && q <= nf->lend_max / 4)) {
		nf->overloaded = false;
		if (!nf->draining) {
			shared_add32(&M.services[nf->service].noverloaded, (uint32_t)-1);
			svc_saturation(&M.services[nf->service]);
		}
	}
}

/* Drop at a chain's entry when a later service of it is saturated. */
static inline bool backpressure(const struct chain *ch, struct rte_mbuf *m)
{
	if (likely(nsaturated == 0))
		return false;
	for (unsigned i = 1; i < ch->len; i++) {
		struct service *s = &M.services[ch->svc[i]];
		if (s->saturated) {
			shared_add(&s->drop_backpressure, 1);
			W->st.drops.backpressure++;
			TRACE_END(m, TR_DROP, TD_BACKPRESSURE);
			drop(m);
			return true;
		}
	}
	return false;
}

/* The next hop is an NF of another trust domain (netmap VALE's rule): the packet is copied into a
 * buffer of that domain's region and the source buffer freed; counted per (from, to) pair. An empty
 * target pool drops the packet (drops.no_buffer and the pair's no_buffer): a domain that hoards
 * buffers starves only itself. Returns the copy, or NULL (m freed either way). */
static struct rte_mbuf *cross_domain(struct rte_mbuf *m, struct region *to)
{
	struct domain_pair_stats *ps = &W->st.copies[mbuf_region(m) & (SL_MAX_DOMAINS - 1)][to->index];
	bool timed = (ps->packets & 15) == 0;
	uint64_t t0 = timed ? rte_rdtsc() : 0;
	struct rte_mbuf *c = region_copy_in(to, m, W->index);
	if (timed && likely(c != NULL)) {
		ps->cycles += rte_rdtsc() - t0;
		ps->timed++;
	}
	if (unlikely(!c)) {
		if (RTE_MIN(m->data_off, RTE_PKTMBUF_HEADROOM) + (uint32_t)m->data_len > to->buf_size) {
			ps->too_long++; /* fits no buffer of `to` (smaller buffer_size) */
			W->st.drops.too_long++;
		} else {
			ps->no_buffer++;
			W->st.drops.no_buffer++;
		}
		drop(m);
		return NULL;
	}
	ps->packets++;
	ps->bytes += c->data_len;
	if (unlikely(trace_on))
		trace_move(W->index, m, c, mbuf_region(m), to->index);
	drop(m);
	return c;
}

/* ---- Workers (docs/architecture.md "Workers") ----
 * Each NF is served by one worker (nf->worker, placed at attach) and each port is polled and
 * transmitted on by one (port->worker): only that worker touches the NF's rings, staging and lending
 * state, or the port's queues. A packet whose next NF or port belongs to another worker is handed to
 * it through that worker's inbox (an MP/SC rte_ring of mbufs; where it goes rides in the mbuf's
 * private area), staged in bursts: no lock on the data path. The ledger entry of a buffer is written
 * only by the worker holding the packet; the ring's release/acquire hands it over. */
/* Put what this worker staged for worker `to` into its inbox; what does not fit is dropped and
 * counted (ring_full for an NF, tx_full for a port: its queue toward it was full). */
static void hout_flush(unsigned to)
{
	uint16_t n = W->nhout[to];
	if (n == 0)
		return;
	W->nhout[to] = 0;
	unsigned done = rte_ring_enqueue_burst(M.workers[to].inbox, (void **)W->hout[to], n, NULL);
	for (unsigned i = done; i < n; i++) {
		struct rte_mbuf *m = W->hout[to][i];
		const struct mbuf_priv *p = mbuf_priv(m);
		if (p->h_kind == HAND_NF) {
			__atomic_fetch_sub(&M.nfs[p->h_target].inflight, 1, __ATOMIC_RELAXED);
			W->st.drops.ring_full++;
		} else {
			__atomic_fetch_sub(&M.ports[p->h_target].inflight, 1, __ATOMIC_RELAXED);
			W->st.drops.tx_full++;
		}
		drop(m);
	}
}

/* Packets one port may have in flight toward its worker (its TX queue is the real bound). */
#define HANDOFF_PORT_MAX 1024

/* A packet for an NF that holds its whole lending budget: counted as its quota (nfs[].quota) when
 * that is what bounds it, else as its full ring. */
static void drop_over_budget(struct nf *nf, struct rte_mbuf *m)
{
	if (nf->lend_max < M.cfg.ring_size) {
		W->st.quota_drops.nf++;
		W->st.drops.quota++;
	} else {
		shared_add(&nf->st.drop_ring_full, 1);
		W->st.drops.ring_full++;
	}
	TRACE_END(m, TR_DROP, nf->lend_max < M.cfg.ring_size ? TD_QUOTA : TD_RING_FULL);
	drop(m);
}

static void handoff(unsigned to, struct rte_mbuf *m, uint8_t kind, uint16_t target, uint16_t chain, uint8_t hop,
		    uint16_t in_port)
{
	/* Each target's share of the inbox is bounded by what it could take anyway -- an NF's lending
	 * budget, a port's queue -- so one flooded NF or port cannot crowd out the others' packets:
	 * the excess drops here, counted as it would have been there. */
	if (kind == HAND_NF) {
		struct nf *nf = &M.nfs[target];
		int32_t fl = __atomic_load_n(&nf->inflight, __ATOMIC_RELAXED);
		if ((uint64_t)nf->lent + (uint64_t)(fl > 0 ? fl : 0) >= nf->lend_max) {
			drop_over_budget(nf, m);
			return;
		}
		__atomic_fetch_add(&nf->inflight, 1, __ATOMIC_RELAXED);
	} else {
		struct port *pt = &M.ports[target];
		if (__atomic_load_n(&pt->inflight, __ATOMIC_RELAXED) >= HANDOFF_PORT_MAX) {
			shared_add(&pt->st.drop_tx_full, 1);
			W->st.drops.tx_full++;
			drop(m);
			return;
		}
		__atomic_fetch_add(&pt->inflight, 1, __ATOMIC_RELAXED);
	}
	TRACE_STEP(m, TR_HANDOFF, to, kind);
	struct mbuf_priv *p = mbuf_priv(m);
	p->h_kind = kind;
	p->h_target = target;
	p->h_chain = chain;
	p->h_hop = hop;
	p->h_in_port = in_port;
	W->hout[to][W->nhout[to]++] = m;
	if (W->nhout[to] == SL_BURST)
		hout_flush(to);
}

static inline void to_nf(uint16_t id, struct rte_mbuf *m, uint16_t chain, uint8_t hop, uint16_t in_port);
static inline void to_port(uint16_t pi, struct rte_mbuf *m);

/* What other workers handed this one. An NF that left (or moved) meanwhile: nf_gone. */
static unsigned inbox_drain(void)
{
	struct rte_mbuf *m[SL_BURST];
	unsigned n = rte_ring_dequeue_burst(W->inbox, (void **)m, SL_BURST, NULL);
	for (unsigned i = 0; i < n; i++) {
		const struct mbuf_priv *p = mbuf_priv(m[i]);
		if (p->h_kind == HAND_PORT) {
			__atomic_fetch_sub(&M.ports[p->h_target].inflight, 1, __ATOMIC_RELAXED);
			to_port(p->h_target, m[i]);
			continue;
		}
		__atomic_fetch_sub(&M.nfs[p->h_target].inflight, 1, __ATOMIC_RELAXED);
		if (M.nfs[p->h_target].active && !M.nfs[p->h_target].draining && M.nfs[p->h_target].worker == W->index) {
			to_nf(p->h_target, m[i], p->h_chain, p->h_hop, p->h_in_port);
		} else {
			W->st.drops.nf_gone++;
			drop(m[i]);
		}
	}
	return n;
}

/* Stage a packet's descriptor for NF `id` (handed to its worker when that is another). */
static inline void to_nf(uint16_t id, struct rte_mbuf *m, uint16_t chain, uint8_t hop, uint16_t in_port)
{
	struct nf *nf = &M.nfs[id];
	if (unlikely(nf->worker != W->index)) {
		handoff(nf->worker, m, HAND_NF, id, chain, hop, in_port);
		return;
	}
	if (unlikely(nf->lent + nf->nstage >= nf->lend_max)) {
		drop_over_budget(nf, m);
		return;
	}
	if (unlikely(M.dom_held[nf->domain] >= M.dom_max[nf->domain])) { /* the domain's NFs hold its bound */
		W->st.quota_drops.domain++;
		W->st.drops.quota++;
		TRACE_END(m, TR_DROP, TD_QUOTA);
		drop(m);
		return;
	}
	struct region *r = M.regions[nf->domain];
	if (unlikely(mbuf_region(m) != nf->domain) && !(m = cross_domain(m, r)))
		return;
	if (nf->nstage == SL_BURST)
		flush_nf(nf);
	uint32_t b = mbuf_id(m);
	struct sl_bufstate *st = &r->st[b];
	st->chain = chain;
	st->hop = hop;
	st->in_port = in_port;
	st->supply = 0;
	TRACE_STEP(m, TR_TO_NF, id, hop);
	sl_lend_stage(&r->lend, b, m->data_off, (uint16_t)m->data_len, in_port, &nf->stage[nf->nstage++]);
	shared_add32(&M.dom_held[nf->domain], 1);
	nf_load_check(nf);
	mark_dirty(id, nf);
}

/* nf has descriptors staged: flush_all hands them over */
static inline void mark_dirty(uint16_t id, struct nf *nf)
{
	if (!nf->dirty) {
		nf->dirty = true;
		W->dirty[W->ndirty++] = id;
	}
}

/* Why pick_instance chose as it did (trace.h enum trace_why), for a trace. */
static inline uint32_t why_picked(const struct service *s)
{
	if (s->ninst == 1)
		return TW_ONLY;
	uint16_t nl = s->nlocal[W->index];
	if (nl != 0 && nl != s->ninst)
		return TW_LOCAL;
	return s->policy == SVC_ROUND_ROBIN ? TW_ROUND_ROBIN : s->policy == SVC_LEAST_LOADED ? TW_LEAST_LOADED : TW_FLOW_HASH;
}

static inline bool service_empty(uint16_t svc)
{
	struct service *s = &M.services[svc];
	if (likely(s->ninst > 0))
		return false;
	shared_add(&s->drop_nf_gone, 1);
	W->st.drops.nf_gone++;
	return true;
}

/* Hand a packet to a service: pick a replica, stage its descriptor. */
static inline void to_service(uint16_t svc, struct rte_mbuf *m, uint16_t chain, uint8_t hop, uint16_t in_port)
{
	if (unlikely(service_empty(svc))) {
		TRACE_END(m, TR_DROP, TD_NF_GONE);
		drop(m);
		return;
	}
	uint16_t id = pick_instance(&M.services[svc], m);
	TRACE_STEP(m, TR_REPLICA, svc, id | why_picked(&M.services[svc]) << 16);
	to_nf(id, m, chain, hop, in_port);
}

/* As to_service, but the flow keeps the replica it was given while that NF still serves svc. */
static inline void to_service_sticky(uint16_t svc, struct rte_mbuf *m, uint16_t chain, uint8_t hop,
				     uint16_t in_port, uint16_t *replica)
{
	if (unlikely(service_empty(svc))) {
		TRACE_END(m, TR_DROP, TD_NF_GONE);
		drop(m);
		return;
	}
	uint16_t id = *replica;
	uint32_t why = TW_STICKY;
	if (M.services[svc].policy == SVC_ROUND_ROBIN) {
		id = pick_instance(&M.services[svc], m); /* stateless: no affinity */
		why = TW_ROUND_ROBIN;
	} else if (id == FLOW_REPLICA_NONE || !M.nfs[id].active || M.nfs[id].draining || M.nfs[id].service != svc) {
		id = pick_instance(&M.services[svc], m);
		*replica = id;
		why = why_picked(&M.services[svc]);
	}
	TRACE_STEP(m, TR_REPLICA, svc, id | why << 16);
	to_nf(id, m, chain, hop, in_port);
}

/* NEXT: the service after the packet's current hop, or the chain's exit. */
static inline void next_hop(struct rte_mbuf *m, const struct sl_bufstate *st, const struct route *rt)
{
	if (unlikely(st->chain >= rt->nchains)) {
		no_path(m, st->in_port);
		return;
	}
	const struct chain *ch = &rt->chains[st->chain];
	unsigned hop = st->hop == SL_HOP_DETACHED ? ch->len : st->hop + 1u;
	if (hop < ch->len)
		to_service(ch->svc[hop], m, st->chain, (uint8_t)hop, st->in_port);
	else if (ch->exit >= 0)
		to_port((uint16_t)ch->exit, m);
	else
		no_path(m, st->in_port);
}

static void flow_from_nf(struct rte_mbuf *m, const struct sl_bufstate *st, const struct sl_desc *d,
			 const struct route *rt);

/* Position of service svc in chain c, or SL_HOP_DETACHED when the chain does not contain it. */
static inline uint8_t hop_of(const struct route *rt, uint16_t c, uint16_t svc)
{
	if (c >= rt->nchains)
		return SL_HOP_DETACHED;
	const struct chain *ch = &rt->chains[c];
	for (unsigned i = 0; i < ch->len; i++)
		if (ch->svc[i] == svc)
			return (uint8_t)i;
	return SL_HOP_DETACHED;
}

/* A copy of the frame in m for one SL_ACT_OUT_SET port, without its outer VLAN tag (tci < 0) or with
 * an 802.1Q tag pushed. NULL if the pool is empty (counted) or the frame would not fit. */
static struct rte_mbuf *out_set_copy(const struct rte_mbuf *m, int tci)
{
	const uint8_t *src = rte_pktmbuf_mtod(m, const uint8_t *);
	uint32_t len = m->data_len;
	struct rte_mbuf *c = rte_pktmbuf_alloc(M.regions[mbuf_region(m)]->pool); /* m: a returned buffer */
	if (unlikely(!c)) {
		W->st.drops.no_buffer++;
		return NULL;
	}
	uint32_t out_len = tci < 0 ? len - 4 : len + 4;
	char *dst = rte_pktmbuf_append(c, (uint16_t)out_len);
	if (unlikely(!dst)) {
		W->st.drops.no_buffer++;
		rte_pktmbuf_free(c);
		return NULL;
	}
	memcpy(dst, src, 12);
	if (tci < 0) {
		memcpy(dst + 12, src + 16, len - 16);
	} else {
		dst[12] = 0x81;
		dst[13] = 0x00;
		dst[14] = (char)(tci >> 8);
		dst[15] = (char)tci;
		memcpy(dst + 16, src + 12, len - 12);
	}
	W->st.out_set.copies++;
	return c;
}

static inline bool has_outer_vlan(const struct rte_mbuf *m)
{
	const uint8_t *p = rte_pktmbuf_mtod(m, const uint8_t *);
	if (m->data_len < 18)
		return false;
	uint16_t et = (uint16_t)(p[12] << 8 | p[13]);
	return et == RTE_ETHER_TYPE_VLAN || et == RTE_ETHER_TYPE_QINQ;
}

/* SL_ACT_OUT_SET (abi.h): the NF's port set sits just before the data. as_is ports share m (one
 * reference each), untag/tag ports get copies. Returns why the set is refused (caller drops): invalid,
 * or naming a port the NF's service may not send to (au; read once with the rest of the set). */
static enum sl_desc_verdict out_set(struct rte_mbuf *m, const struct sl_dest_auth *au, uint16_t in_port)
{
	struct sl_out_set s;
	memcpy(&s, rte_pktmbuf_mtod(m, const uint8_t *) - sizeof(s), sizeof(s));
	uint64_t valid = M.nports >= 64 ? ~0ull : (1ull << M.nports) - 1;
	if (unlikely(s.magic != SL_OUT_SET_MAGIC || s.reserved || ((s.as_is | s.untag | s.tag) & ~valid) ||
		     m->data_len < 14))
		return SL_DESC_BAD_OUT_SET;
	if (unlikely(au != NULL) && !sl_lend_ports_ok(au, s.as_is | s.untag | s.tag, in_port))
		return SL_DESC_FORBIDDEN; /* a port its service may not send to (docs/abi.md "Next hops") */
	W->st.out_set.packets++;
	uint64_t share = s.as_is, untag = s.untag;
	if (!has_outer_vlan(m)) { /* nothing to strip: those ports take the frame as it is */
		share |= untag;
		untag = 0;
	}
	for (uint64_t b = untag; b; b &= b - 1) {
		struct rte_mbuf *c = out_set_copy(m, -1);
		if (c) {
			W->st.out_set.frames++;
			to_port((uint16_t)__builtin_ctzll(b), c);
		}
	}
	for (uint64_t b = s.tag; b; b &= b - 1) {
		struct rte_mbuf *c = NULL;
		if (m->data_len + 4u <= M.regions[mbuf_region(m)]->buf_size - RTE_PKTMBUF_HEADROOM)
			c = out_set_copy(m, s.tci);
		else
			W->st.drops.too_long++; /* the tagged frame would not fit a buffer */
		if (c) {
			W->st.out_set.frames++;
			to_port((uint16_t)__builtin_ctzll(b), c);
		}
	}
	unsigned n = (unsigned)__builtin_popcountll(share);
	if (n == 0) {
		drop(m);
		return SL_DESC_OK;
	}
	if (n > 1)
		rte_mbuf_refcnt_update(m, (int16_t)(n - 1));
	W->st.out_set.frames += n;
	for (uint64_t b = share; b; b &= b - 1)
		to_port((uint16_t)__builtin_ctzll(b), m);
	return SL_DESC_OK;
}

/* rx_checksum on a device that hands over TCP/UDP packets with a partial checksum (virtio-net with
 * GUEST_CSUM: RX_L4_CKSUM_NONE, "the data is good, the checksum field holds the pseudo-header sum"):
 * NFs and the wire need the real one, so it is completed here (IPv4 or IPv6 without extension headers,
 * behind at most one VLAN tag; anything else is left as it came). docs/ports.md "PCI NICs". */
static void l4_cksum_complete(struct rte_mbuf *m)
{
	uint8_t *d = rte_pktmbuf_mtod(m, uint8_t *);
	uint32_t len = m->data_len, off = 14;
	if (len < 14)
		return;
	uint16_t et = (uint16_t)(d[12] << 8 | d[13]);
	if (et == RTE_ETHER_TYPE_VLAN && len >= 18) {
		et = (uint16_t)(d[16] << 8 | d[17]);
		off = 18;
	}
	uint8_t proto;
	uint32_t l4;
	if (et == RTE_ETHER_TYPE_IPV4 && len >= off + 20) {
		const struct rte_ipv4_hdr *ip = (const struct rte_ipv4_hdr *)(d + off);
		l4 = off + (uint32_t)(ip->version_ihl & 0xf) * 4;
		proto = ip->next_proto_id;
		if ((ip->fragment_offset & rte_cpu_to_be_16(RTE_IPV4_HDR_OFFSET_MASK | RTE_IPV4_HDR_MF_FLAG)) ||
		    l4 > len || off + rte_be_to_cpu_16(ip->total_length) > len)
			return;
		if (proto == IPPROTO_TCP && l4 + 20 <= len) {
			struct rte_tcp_hdr *t = (struct rte_tcp_hdr *)(d + l4);
			t->cksum = 0;
			t->cksum = rte_ipv4_udptcp_cksum(ip, t);
		} else if (proto == IPPROTO_UDP && l4 + 8 <= len) {
			struct rte_udp_hdr *u = (struct rte_udp_hdr *)(d + l4);
			u->dgram_cksum = 0;
			u->dgram_cksum = rte_ipv4_udptcp_cksum(ip, u);
		}
	} else if (et == RTE_ETHER_TYPE_IPV6 && len >= off + 40) {
		const struct rte_ipv6_hdr *ip = (const struct rte_ipv6_hdr *)(d + off);
		l4 = off + 40;
		proto = ip->proto;
		if (off + 40 + rte_be_to_cpu_16(ip->payload_len) > len)
			return;
		if (proto == IPPROTO_TCP && l4 + 20 <= len) {
			struct rte_tcp_hdr *t = (struct rte_tcp_hdr *)(d + l4);
			t->cksum = 0;
			t->cksum = rte_ipv6_udptcp_cksum(ip, t);
		} else if (proto == IPPROTO_UDP && l4 + 8 <= len) {
			struct rte_udp_hdr *u = (struct rte_udp_hdr *)(d + l4);
			u->dgram_cksum = 0;
			u->dgram_cksum = rte_ipv6_udptcp_cksum(ip, u);
		}
	}
}

/* A frame whose outer 802.1Q tag the port left in the mbuf (VLAN_STRIP, port.c) gets it back in its
 * data, as it was on the wire; the headroom always has the 4 bytes. */
static inline void rx_vlan_restore(struct rte_mbuf *m)
{
	if (likely(!(m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED)) || m->data_off < 4 || m->data_len < 12)
		return;
	uint8_t *p = rte_pktmbuf_mtod(m, uint8_t *) - 4;
	memmove(p, p + 4, 12);
	p[12] = 0x81;
	p[13] = 0x00;
	p[14] = (uint8_t)(m->vlan_tci >> 8);
	p[15] = (uint8_t)m->vlan_tci;
	m->data_off -= 4;
	m->data_len += 4;
	m->pkt_len += 4;
	m->ol_flags &= ~(RTE_MBUF_F_RX_VLAN_STRIPPED | RTE_MBUF_F_RX_VLAN);
}

/* A descriptor (or its port set) refused for reason v: counted for the NF, in total and by reason. */
static inline void count_invalid(struct nf *nf, enum sl_desc_verdict v)
{
	nf->st.drop_invalid++;
	W->st.drops.invalid_desc++;
	W->st.invalid[v]++;
}

/* ---- Cohosted NFs (docs/groups.md "Run to completion") ----
 * NFs attached from one process -- a sluice-group's members -- share its address space and its fate.
 * When two of them are joined by a pipe, the group hands the upstream's NEXT packets into the
 * downstream's handler by a call (libsluice's fused pipes), so nothing passes through the pipe ring
 * for pipe_account to see: a member returns packets the ledger still lends to the first member of
 * its segment. The worker moves such a buffer to the member returning it -- once per segment, where
 * unfused pipes move it once per hop -- and counts it through every member on the way (tx of the
 * first, rx and tx of those between, rx of the last), so per-member packet counts stay exact; bytes
 * are counted at the length the packet leaves the segment with. Only a buffer of an NF of the same
 * process and domain moves so: across processes a return of another NF's buffer is refused as ever. */
/* NF x (the owner of a buffer nf returned) is of nf's process and domain, and attached. */
static inline bool cohost_of(const struct nf *nf, const struct nf *x)
{
	return x != nf && x->state == NF_ATTACHED && !x->guest && !nf->guest && nf->pid > 0 && x->pid == nf->pid &&
	       x->domain == nf->domain && !x->fault;
}

/* Count cnt packets (bytes) that went from x through the pipes to nf: tx of x, rx and tx of every NF
 * between them (none if no pipe path joins them any more: a pipe closed meanwhile), rx of nf; and
 * move their ledger count from x to nf. */
static void cohost_count(struct nf *x, struct nf *nf, uint32_t cnt, uint64_t bytes)
{
	x->lent -= cnt;
	nf->lent += cnt;
	x->st.tx_pkts += cnt;
	x->st.tx_bytes += bytes;
	nf->st.rx_pkts += cnt;
	nf->st.rx_bytes += bytes;
	unsigned guard = 0;
	int32_t m = nf->pipe_from;
	while (m >= 0 && &M.nfs[m] != x && guard++ < 64)
		m = M.nfs[m].pipe_from;
	if (m >= 0 && &M.nfs[m] == x) {
		for (m = nf->pipe_from; &M.nfs[m] != x; m = M.nfs[m].pipe_from) {
			struct nf *b = &M.nfs[m];
			b->st.rx_pkts += cnt;
			b->st.rx_bytes += bytes;
			b->st.tx_pkts += cnt;
			b->st.tx_bytes += bytes;
		}
	}
	if (unlikely(x->overloaded))
		nf_load_check(x);
	W->st.pipes.fused += cnt;
}

static void pipe_account(struct nf *up, struct nf *down, const struct route *rt);

/* What the members before nf took from their pipes is theirs before nf's returns are looked at: a
 * fused pass leaves nothing on the pipe rings between them, so pipe_account(up, nf) alone stops at
 * once and never reaches the segment's first member, which may have taken its input from another
 * process's pipe. Upstream first, as pipe_account's own recursion goes. */
static void cohost_settle(struct nf *nf, const struct route *rt)
{
	struct nf *path[16];
	unsigned n = 0;
	for (struct nf *m = nf; m->pipe_from >= 0 && n < 16; m = &M.nfs[m->pipe_from]) {
		path[n++] = m;
		if (M.nfs[m->pipe_from].pid != m->pid)
			break; /* m is the segment's first member; its input comes from another process */
	}
	while (n--)
		pipe_account(&M.nfs[path[n]->pipe_from], path[n], rt);
}

/* Before nf's returns are acted on: every buffer among them that an NF of its process holds becomes
 * nf's, at nf's place in its chain. Runs of one owner (a segment's first member, as a rule) are
 * counted once. A descriptor that names no such buffer is left for handle_returned to judge. */
static __attribute__((noinline)) void cohost_adopt(uint16_t id, struct nf *nf, const struct sl_desc *d, uint32_t n,
						   const struct route *rt)
{
	struct region *r = M.regions[nf->domain];
	uint16_t last = SL_OWNER_NONE, chain = UINT16_MAX;
	uint8_t hop = SL_HOP_DETACHED;
	struct nf *x = NULL;
	uint32_t cnt = 0;
	uint64_t bytes = 0;
	bool settled = false;
	for (uint32_t i = 0; i < n; i++) {
		if (d[i].region != r->lend.region || d[i].buf >= r->lend.nbufs)
			continue;
		struct sl_bufstate *st = &r->st[d[i].buf];
		uint16_t o = st->owner;
		if (o == (uint16_t)(id + 1))
			continue;
		if (!settled) {
			settled = true;
			cohost_settle(nf, rt);
			o = st->owner;
			if (o == (uint16_t)(id + 1))
				continue;
		}
		if (o == SL_OWNER_NONE)
			continue;
		if (o != last) {
			if (cnt)
				cohost_count(x, nf, cnt, bytes);
			cnt = 0;
			bytes = 0;
			last = SL_OWNER_NONE;
			if ((uint32_t)(o - 1) >= M.max_nfs || !cohost_of(nf, &M.nfs[o - 1]))
				continue; /* not a cohost's: handle_returned refuses it */
			last = o;
			x = &M.nfs[o - 1];
		}
		sl_lend_deliver(&r->lend, d[i].buf, id);
		TRACE_STEP(r->bufs[d[i].buf], TR_FUSED, o - 1u, id);
		if (st->chain != chain) {
			chain = st->chain;
			hop = hop_of(rt, chain, nf->service);
		}
		st->hop = hop;
		cnt++;
		bytes += d[i].len;
	}
	if (cnt)
		cohost_count(x, nf, cnt, bytes);
}

/* Act on one returned descriptor. Inlined into drain_returned's loop: a call per descriptor cost the
 * 1-NF worker 3-5 % of its rate (bench/notes.md "Shorter paths, measured in one session"). */
static inline __attribute__((always_inline)) void handle_returned(uint16_t id, struct nf *nf, const struct sl_desc *d,
								 const struct route *rt)
{
	struct region *r = M.regions[nf->domain]; /* it was lent buffers of its own domain only */
	enum sl_desc_verdict v = sl_lend_check(&r->lend, d, id, (uint16_t)M.nports, (uint16_t)M.nservices);
	/* Next hops (docs/abi.md): only where its service may send; rt->nauth == 0 without may_send */
	const struct sl_dest_auth *au = nf->service < rt->nauth ? &rt->auth[nf->service] : NULL;
	if (unlikely(au != NULL) && v == SL_DESC_OK && sl_lend_dest_check(au, d, r->st[d->buf].in_port) != SL_DESC_OK)
		v = SL_DESC_FORBIDDEN;
	/* access: ro -- it cannot have rewritten the packet: bounds as lent (the mbuf still has them),
	 * and no OUT_SET (its port set would be a write into the headroom) */
	if (unlikely(nf->ro) && v == SL_DESC_OK &&
	    (d->head != r->bufs[d->buf]->data_off || d->len != r->bufs[d->buf]->data_len ||
	     (d->action & SL_ACT_MASK) == SL_ACT_OUT_SET))
		v = SL_DESC_RO_CHANGED;
	if (unlikely(v != SL_DESC_OK)) {
		count_invalid(nf, v);
		if (v >= SL_DESC_BAD_RANGE) { /* it was this NF's buffer: take it back */
			TRACE_STEP(r->bufs[d->buf], TR_INVALID, id, v);
			TRACE_END(r->bufs[d->buf], TR_DROP, TD_INVALID);
			if (unlikely(r->st[d->buf].supply))
				supply_back(nf, &r->st[d->buf]);
			sl_lend_return(&r->lend, d->buf);
			nf->lent--;
			shared_add32(&M.dom_held[nf->domain], (uint32_t)-1);
			drop(r->bufs[d->buf]);
		}
		return;
	}
	struct rte_mbuf *m = r->bufs[d->buf];
	if (unlikely(r->st[d->buf].supply))
		supply_back(nf, &r->st[d->buf]);
	sl_lend_return(&r->lend, d->buf);
	nf->lent--;
	shared_add32(&M.dom_held[nf->domain], (uint32_t)-1);
	if (unlikely(nf->overloaded))
		nf_load_check(nf);
	nf->st.tx_pkts++;
	nf->st.tx_bytes += d->len;
	m->data_off = d->head;
	m->data_len = d->len;
	m->pkt_len = d->len;
	if (unlikely(nf->tap_out))
		capture_pkts(W->index, nf->tap_out, SL_CAP_NF_OUT, id, &m, 1, d->action & SL_ACT_MASK);
	TRACE_STEP(m, TR_NF, id, (d->action & SL_ACT_MASK) | (uint32_t)d->dest << 8);
	struct sl_bufstate *st = &r->st[d->buf];
	if (unlikely(d->action & (uint8_t)~SL_ACT_MASK))
		flow_from_nf(m, st, d, rt);
	switch (d->action & SL_ACT_MASK) {
	case SL_ACT_NEXT:
		next_hop(m, st, rt);
		break;
	case SL_ACT_OUT:
		to_port(d->dest, m);
		break;
	case SL_ACT_TO_NF:
		to_service(d->dest, m, st->chain, hop_of(rt, st->chain, d->dest), st->in_port);
		break;
	case SL_ACT_OUT_SET: {
		enum sl_desc_verdict ov = out_set(m, au, st->in_port);
		if (unlikely(ov != SL_DESC_OK)) {
			count_invalid(nf, ov);
			drop(m);
		}
		break;
	}
	default: /* SL_ACT_DROP */
		TRACE_END(m, TR_DROP, TD_NF);
		drop(m);
		break;
	}
}

/* Act on n descriptors NF `id` returned (copied out of its ring once, nfring.h). */
static void drain_returned(uint16_t id, struct nf *nf, const struct sl_desc *d, uint32_t n, const struct route *rt)
{
	if (M.nregions > 1) { /* some of these may cross into another domain: start loading their data */
		const struct region *r = M.regions[nf->domain];
		for (uint32_t i = 0; i < n; i++)
			if (d[i].off < r->size)
				rte_prefetch0(r->base + d[i].off);
	}
	/* a fused segment's member (a pipe reader of its own process) returns its head's buffers */
	if (unlikely(nf->cohost_in) && n != 0)
		cohost_adopt(id, nf, d, n, rt);
	for (uint32_t i = 0; i < n; i++)
		handle_returned(id, nf, &d[i], rt);
}

/* ---- Pipes (docs/architecture.md "Pipes") ----
 * An NF whose SDK takes pipes puts its plain NEXT descriptors on its pipe ring (pipe.c). Normally the
 * worker reads that ring like a second TX ring. When the NF's next hop is static -- every chain that
 * has its service goes on to one same service, which has a single instance `down` in the same trust
 * domain, rw, taking pipes -- the worker opens a pipe: `down` reads the ring itself (its info page's
 * pipe_in says where) and the descriptors go NF to NF without the worker. The worker still owns the
 * accounting: it reads the consumer index `down` publishes and moves each buffer it took from the
 * upstream's ledger entry to down's (pipe_account) before it looks at anything down returned, and
 * only then gives the ring slots back to the upstream (the ring's cons is the worker's), so every
 * buffer has exactly one owner at every moment and a killed NF on either side gives back exactly what
 * it held. A pipe closes (pipe_close) when its condition stops holding -- a chain edited, a replica
 * added, either NF leaving -- and the worker reads the ring again from where `down` stopped: nothing
 * is lost or read twice. */

/* Move the buffers `down` took from up's pipe ring since the last call to down's ledger entry.
 * Read in the order the NFs write: down's consumer index, then up's producer index (down cannot have
 * taken what up had not published), then -- when up itself reads a pipe -- what up took from its
 * own input (up took those before it published them), so every buffer down took is up's by then. */
static void pipe_account(struct nf *up, struct nf *down, const struct route *rt)
{
	struct sl_pipe_in *pi = &down->info->pipe_in;
	uint32_t ack = __atomic_load_n(&pi->ack, __ATOMIC_ACQUIRE);
	if (ack != down->pipe_open_epoch && ack != down->pipe_epoch)
		return; /* it has not started on this pipe: its cons is not about this ring */
	uint32_t c = __atomic_load_n(&pi->cons, __ATOMIC_ACQUIRE);
	if (unlikely(up->fault) || unlikely(!pipe_sync(up)))
		return;
	uint32_t took = c - up->pok.own;
	if (unlikely(took > up->pok.peer - up->pok.own)) { /* back, or past what up produced */
		nf_fault(down, NF_RING_PIPE_CONS);
		return;
	}
	/* what waits in the pipe for it is its load too (backpressure), as its RX ring's would be */
	uint32_t backlog = up->pok.peer - c;
	if (backlog != down->pipe_backlog) {
		down->pipe_backlog = backlog;
		nf_load_check(down);
	}
	if (took == 0)
		return;
	if (up->pipe_from >= 0)
		pipe_account(&M.nfs[up->pipe_from], up, rt);
	struct region *r = M.regions[up->domain];
	uint16_t uid = (uint16_t)(up - M.nfs), did = (uint16_t)(down - M.nfs);
	uint64_t bytes = 0;
	uint32_t moved = 0;
	struct sl_desc chunk[SL_BURST];
	for (uint32_t i = 0; i < took; i++) {
		if (i % SL_BURST == 0) { /* copied out once (nfring.h), a burst at a time */
			uint32_t k = took - i < SL_BURST ? took - i : SL_BURST;
			for (uint32_t j = 0; j < k; j++)
				nf_ring_read_desc(&chunk[j], &up->pok.sh->desc[(up->pok.own + i + j) & up->pok.mask]);
			/* a fused segment's last member pipes on buffers of the members before it: its own first */
			if (unlikely(up->cohost_in))
				cohost_adopt(uid, up, chunk, k, rt);
		}
		struct sl_desc d = chunk[i % SL_BURST];
		enum sl_desc_verdict v = sl_lend_check(&r->lend, &d, uid, (uint16_t)M.nports, (uint16_t)M.nservices);
		if (v != SL_DESC_OK && v < SL_DESC_BAD_RANGE) { /* not up's buffer: nothing to move (down's return of it fails) */
			count_invalid(up, v);
			continue;
		}
		if (unlikely(v != SL_DESC_OK || d.action != SL_ACT_NEXT))
			count_invalid(up, v != SL_DESC_OK ? v : SL_DESC_BAD_ACTION); /* down has it all the same */
		struct sl_bufstate *st = &r->st[d.buf];
		sl_lend_deliver(&r->lend, d.buf, did);
		TRACE_STEP(r->bufs[d.buf], TR_PIPE, uid, did);
		st->hop = hop_of(rt, st->chain, down->service);
		bytes += d.len;
		moved++;
	}
	up->lent -= moved;
	down->lent += moved;
	if (moved) { /* backpressure: both holdings changed here, not where to_nf/returns look */
		nf_load_check(up);
		nf_load_check(down);
	}
	up->st.tx_pkts += moved;
	up->st.tx_bytes += bytes;
	down->st.rx_pkts += moved;
	down->st.rx_bytes += bytes;
	W->st.pipes.packets += moved;
	up->pok.own = c;
	__atomic_store_n(&up->pok.sh->cons, c, __ATOMIC_RELEASE); /* up may refill those slots now */
	if (moved && down->set == NF_SET_NONE)
		set_enter(down, NF_SET_BUSY);
	if (moved && down->pipe_to >= 0) /* as flush_nf */
		cohost_busy(down);
}

/* Take up to a burst of what NF `id` returned, each descriptor copied out once (nfring.h), and act:
 * its TX ring, and its pipe ring when no pipe joins it to the next NF.
 * Its RX consumer index is checked here too, once a burst: an NF holding its whole lending budget
 * gets nothing flushed to it, and could otherwise keep a broken index unseen. */
static uint32_t drain_nf(uint16_t id, const struct route *rt)
{
	struct nf *nf = &M.nfs[id];
	struct sl_desc d[SL_BURST];
	bool po = worker_reads_pipe(nf);
	if (unlikely(nf->fault) || unlikely(!rx_sync(nf)) || unlikely(!tx_sync(nf)) || (po && unlikely(!pipe_sync(nf))))
		return 0;
	/* What it took from its pipe input is its own before any return is looked at: it published
	 * those returns after taking them, and both producer indices were read first. */
	if (nf->pipe_from >= 0)
		pipe_account(&M.nfs[nf->pipe_from], nf, rt);
	uint32_t n = nf_ring_take(&nf->txk, d, SL_BURST);
	drain_returned(id, nf, d, n, rt);
	if (po && likely(!nf->fault)) {
		uint32_t k = nf_ring_take(&nf->pok, d, SL_BURST);
		drain_returned(id, nf, d, k, rt);
		n += k;
	}
	return n;
}

static void flush_all(void)
{
	for (uint32_t i = 0; i < W->ndirty; i++) {
		struct nf *nf = &M.nfs[W->dirty[i]];
		if (nf->nstage)
			flush_nf(nf);
		nf->dirty = false;
	}
	W->ndirty = 0;
	for (uint32_t i = 0; i < W->ndirty_ports; i++) {
		struct port *p = &M.ports[W->dirty_ports[i]];
		if (p->stage[W->index].n)
			flush_port(p, W->index);
		p->stage[W->index].listed = false;
	}
	W->ndirty_ports = 0;
	for (unsigned w = 0; w < M.nworkers; w++)
		hout_flush(w);
}

uint32_t nf_reclaim(uint32_t id)
{
	struct region *r = M.regions[M.nfs[id].domain]; /* an NF holds buffers of its own domain only */
	uint16_t owner = (uint16_t)(id + 1);
	uint32_t n = 0, unused = 0;
	for (uint32_t b = 0; b < r->nbufs; b++) {
		if (r->st[b].owner == owner) {
			sl_lend_return(&r->lend, b);
			drop(r->bufs[b]);
			n++;
			if (r->st[b].supply) { /* an empty buffer: no packet lost */
				r->st[b].supply = 0;
				unused++;
			}
		}
	}
	M.nfs[id].lent = 0;
	M.nfs[id].supply_held = 0;
	shared_add32(&M.dom_held[M.nfs[id].domain], -n);
	W->st.drops.nf_detached += n - unused;
	return n - unused;
}

/* Instance lists: their writers (an NF's worker, adding or removing it) may be several workers when
 * a service's replicas are spread (multi-queue ports), so they take the service's lock; readers
 * (pick_instance) take none: ninst is published after the slot it counts, and a reader that sees an
 * NF being removed by another worker hands the packet to that worker, which re-checks it
 * (inbox_drain). A worker's own NFs change only in its own commands. */
static void service_remove_instance(struct service *s, uint16_t id)
{
	rte_spinlock_lock(&s->inst_lock);
	for (uint16_t i = 0; i < s->ninst; i++) {
		if (s->inst[i] == id) {
			s->inst[i] = s->inst[s->ninst - 1];
			__atomic_store_n(&s->ninst, (uint16_t)(s->ninst - 1), __ATOMIC_RELEASE);
			s->nlocal[M.nfs[id].worker]--; /* run by its worker (command or fault): its own slot */
			if (M.nfs[id].overloaded)
				shared_add32(&s->noverloaded, (uint32_t)-1);
			svc_saturation(s);
			break;
		}
	}
	rte_spinlock_unlock(&s->inst_lock);
}

/* Take the NF out of its service once (a drain, a ring fault, a removal): draining from then on, so
 * nf_load_check no longer counts its load in the service's noverloaded, which service_remove_instance
 * has already taken it out of (counted down twice, noverloaded wrapped and the service stayed
 * saturated for good). Returns true if it was in its service until now. */
static bool nf_leave_service(struct nf *nf)
{
	if (nf->draining)
		return false;
	service_remove_instance(&M.services[nf->service], (uint16_t)(nf - M.nfs));
	nf->draining = true;
	return true;
}

/* The NF `up` should pipe to, or -1 (the conditions in "Pipes" above). */
/* Each service's static next service in route rt, in W->pipe_next (one pass over the chains):
 * PIPE_NEXT_NONE in no chain, PIPE_NEXT_MANY when not one same next service everywhere (or last in
 * a chain, or followed by itself). */
#define PIPE_NEXT_NONE (-1)
#define PIPE_NEXT_MANY (-2)
static bool pipe_next_build(const struct route *rt)
{
	if (!W->pipe_next && !(W->pipe_next = malloc(M.max_services * sizeof(*W->pipe_next))))
		return false;
	for (uint32_t i = 0; i < M.max_services; i++)
		W->pipe_next[i] = PIPE_NEXT_NONE;
	for (unsigned c = 0; c < rt->nchains; c++) {
		const struct chain *ch = &rt->chains[c];
		for (unsigned h = 0; h < ch->len; h++) {
			uint16_t s1 = ch->svc[h];
			int32_t n = h + 1 < ch->len && ch->svc[h + 1] != s1 ? ch->svc[h + 1] : PIPE_NEXT_MANY;
			int32_t *cur = &W->pipe_next[s1];
			*cur = *cur == PIPE_NEXT_NONE || *cur == n ? n : PIPE_NEXT_MANY;
		}
	}
	return true;
}

static int32_t pipe_want(const struct nf *up)
{
	if (!M.cfg.pipes || !up->po || !up->active || up->draining || up->fault)
		return -1;
	int32_t s2 = W->pipe_next[up->service];
	if (s2 < 0 || M.services[s2].ninst != 1)
		return -1;
	uint16_t id = M.services[s2].inst[0];
	const struct nf *down = &M.nfs[id];
	if (!down->active || down->draining || down->fault || !down->po || down->ro || down->domain != up->domain ||
	    down->info == NULL || down->worker != up->worker)
		return -1;
	if (up->tap_out || down->tap_in) /* a capture at this hop: its packets pass the worker (capture.c) */
		return -1;
	return id;
}

/* Join up's pipe ring to `down`. First the worker forwards what up already put there (into down's RX
 * ring: older than anything down will read from the pipe, and down reads its RX ring up to the fence
 * before it touches the pipe). */
static void pipe_open(struct nf *up, struct nf *down, const struct route *rt)
{
	uint16_t uid = (uint16_t)(up - M.nfs);
	for (int i = 0; i < 64 && drain_nf(uid, rt) != 0; i++)
		;
	flush_all();
	if (up->fault || down->fault)
		return;
	struct sl_pipe_in *pi = &down->info->pipe_in;
	__atomic_store_n(&up->po->need_kick, 0, __ATOMIC_RELAXED); /* the worker no longer reads it */
	__atomic_store_n(&pi->offset, pipe_offset(M.regions[up->domain], uid), __ATOMIC_RELAXED);
	__atomic_store_n(&pi->start, up->pok.own, __ATOMIC_RELAXED);
	__atomic_store_n(&pi->fence, down->rxk.own, __ATOMIC_RELAXED);
	down->pipe_open_epoch = ++down->pipe_epoch;
	__atomic_store_n(&pi->epoch, down->pipe_epoch, __ATOMIC_RELEASE);
	up->pipe_to = (int32_t)(down - M.nfs);
	up->pipe_closing = false;
	down->pipe_from = uid;
	if (up->pid == down->pid && !up->guest && !down->guest)
		down->cohost_in = true; /* its host may fuse the pipe: returns of up's buffers, even after it closes */
	down->pipe_kicked = false;
	W->piped[W->npiped++] = uid;
	W->st.pipes.opened++;
	W->st.pipes.open = W->npiped;
}

/* Start ending up's pipe: its reader is told to stop reading it (and kicked: it may be asleep). Until
 * it acknowledges, the pipe stays as it was -- the reader may still take from it and the worker
 * accounts what it takes -- while the worker goes on with everything else (pipes_poll finishes it). */
static void pipe_close_start(struct nf *up)
{
	struct nf *down = &M.nfs[up->pipe_to];
	struct sl_pipe_in *pi = &down->info->pipe_in;
	__atomic_store_n(&pi->offset, SL_PIPE_NONE, __ATOMIC_RELAXED);
	__atomic_store_n(&pi->epoch, ++down->pipe_epoch, __ATOMIC_RELEASE);
	up->pipe_closing = true;
	up->pipe_close_by = rte_rdtsc() + M.tsc_hz; /* 1 s: a reader descheduled on a busy machine is not a hostile one */
	if (!down->fault)
		kick_write(down);
}

/* Has up's reader let go of the pipe (or can it no longer read: gone or disconnected)? A reader that
 * has not acknowledged by the deadline is disconnected (NF_RING_PIPE_ACK). */
static bool pipe_released(struct nf *up, uint64_t now)
{
	struct nf *down = &M.nfs[up->pipe_to];
	if (!down->active || down->fault ||
	    __atomic_load_n(&down->info->pipe_in.ack, __ATOMIC_ACQUIRE) == down->pipe_epoch)
		return true;
	if (now < up->pipe_close_by)
		return false;
	W->st.pipes.close_timeouts++;
	nf_fault(down, NF_RING_PIPE_ACK);
	return true;
}

/* End up's pipe once released: what the reader took is accounted (its cons now ends this pipe, or
 * is its last word), and the worker reads up's pipe ring from exactly there. */
static void pipe_close_finish(struct nf *up, const struct route *rt)
{
	struct nf *down = &M.nfs[up->pipe_to];
	pipe_account(up, down, rt);
	/* A fused segment through this pipe (datapath.c "Cohosted NFs"): down and the members after it
	 * may have returned buffers of members before it, passed on by calls before down let go of the
	 * pipe. Act on them while the pipe path still says which members they went through. */
	if (down->cohost_in) {
		unsigned guard = 0;
		for (struct nf *d = down; guard++ < 64; d = &M.nfs[d->pipe_to]) {
			while (!d->fault && drain_nf((uint16_t)(d - M.nfs), rt) >= SL_BURST)
				;
			if (d->pipe_to < 0 || M.nfs[d->pipe_to].pid != d->pid) {
				/* what it piped on to another process and that one has not taken yet */
				if (d->pipe_to >= 0 && !d->fault && pipe_sync(d)) {
					struct sl_desc chunk[SL_BURST];
					for (uint32_t i = d->pok.own; i != d->pok.peer;) {
						uint32_t k = 0;
						for (; k < SL_BURST && i != d->pok.peer; k++, i++)
							nf_ring_read_desc(&chunk[k], &d->pok.sh->desc[i & d->pok.mask]);
						cohost_adopt((uint16_t)(d - M.nfs), d, chunk, k, rt);
					}
				}
				break;
			}
		}
	}
	up->pipe_to = -1;
	up->pipe_closing = false;
	down->pipe_from = -1;
	down->pipe_backlog = 0;
	nf_load_check(down);
	for (uint32_t i = 0; i < W->npiped; i++)
		if (W->piped[i] == (uint16_t)(up - M.nfs)) {
			W->piped[i] = W->piped[--W->npiped];
			break;
		}
	W->st.pipes.closed++;
	W->st.pipes.open = W->npiped;
	/* the worker reads its pipe ring again: from the busy set, where a park that follows asks for
	 * that ring's doorbell too (a park from before, with the pipe open, did not) */
	if (up->set != NF_SET_BUSY && up->active)
		set_enter(up, NF_SET_BUSY);
}

/* End up's pipe now (an NF leaving). A reader that is the one going is not waited for. A live reader
 * whose upstream is going gets a short wait (20 ms, both NFs' returns kept moving) to acknowledge --
 * an NF that is itself being stopped never will, and hundreds stopping at once must not cost a
 * second each; one that has not acknowledged by then is treated as gone: what it took is accounted
 * and the rest of the ring goes on through the worker (it stops reading at its next burst, when it
 * sees the new epoch). */
static void pipe_close_now(struct nf *up, const struct route *rt, bool down_gone)
{
	uint16_t did = (uint16_t)up->pipe_to;
	struct nf *down = &M.nfs[did];
	if (!up->pipe_closing)
		pipe_close_start(up);
	uint64_t end = rte_rdtsc() + M.tsc_hz / 50;
	/* A reader in the same process as the NF leaving (members of one group, docs/groups.md) never
	 * acknowledges: that process is exiting or dead, or busy detaching its members one by one, and
	 * a group of thousands must not cost the worker 20 ms each. */
	if (down->pid != 0 && down->pid == up->pid)
		down_gone = true;
	while (!down_gone && down->active && !down->fault && rte_rdtsc() < end &&
	       __atomic_load_n(&down->info->pipe_in.ack, __ATOMIC_ACQUIRE) != down->pipe_epoch) {
		drain_nf(did, rt); /* it may be waiting for room in its rings */
		flush_all();
		rte_pause();
	}
	pipe_close_finish(up, rt);
}

/* Open and close pipes after anything that changes their conditions (NFs, services, chains). */
static void pipes_update(const struct route *rt)
{
	if (!M.cfg.pipes || !pipe_next_build(rt))
		return;
	for (uint32_t i = 0; i < W->npiped;) {
		struct nf *up = &M.nfs[W->piped[i]];
		if (!up->pipe_closing && pipe_want(up) != up->pipe_to)
			pipe_close_start(up);
		i++;
	}
	for (uint32_t id = 0; id < M.max_nfs; id++) {
		struct nf *up = &M.nfs[id];
		if (!up->active || up->pipe_to >= 0 || up->worker != W->index)
			continue;
		int32_t w = pipe_want(up);
		if (w >= 0 && M.nfs[w].pipe_from < 0)
			pipe_open(up, &M.nfs[w], rt);
	}
}

/* Every loop: pipes being closed are finished once released (then others may open); a reader with
 * pipe input waiting is collected from (and kicked if asleep). */
static void pipes_poll(const struct route *rt)
{
	bool closed = false;
	for (uint32_t i = 0; i < W->npiped;) {
		struct nf *up = &M.nfs[W->piped[i]];
		if (unlikely(up->pipe_closing) && pipe_released(up, rte_rdtsc())) {
			pipe_close_finish(up, rt); /* removes piped[i] */
			closed = true;
		} else {
			i++;
		}
	}
	if (unlikely(closed))
		pipes_update(rt);
	for (uint32_t i = 0; i < W->npiped; i++) {
		struct nf *up = &M.nfs[W->piped[i]], *down = &M.nfs[up->pipe_to];
		if (unlikely(up->fault || down->fault))
			continue;
		/* the reader's index before the producer's (the order they are written in): read the other
		 * way round, a reader that took more meanwhile looked "pending", got a spurious kick, and
		 * the kick's dedup then swallowed the real one -- a lost wakeup */
		uint32_t c = __atomic_load_n(&down->info->pipe_in.cons, __ATOMIC_ACQUIRE);
		if (unlikely(!pipe_sync(up)))
			continue;
		if (c == up->pok.peer && c == up->pok.own)
			continue; /* nothing waiting, nothing to account */
		if (down->set != NF_SET_BUSY)
			set_enter(down, NF_SET_BUSY);
		if (c != up->pok.peer && down->wakeup != SL_WAKE_POLL &&
		    __atomic_load_n(&down->rx->need_kick, __ATOMIC_ACQUIRE) &&
		    (!down->pipe_kicked || down->pipe_kick_cons != c)) {
			kick_write(down);
			down->pipe_kicked = true;
			down->pipe_kick_cons = c;
		}
	}
}

/* port_del (the other workers paused): how many NF-pinned flows send to port pi -- they would keep
 * sending there, so the port stays (docs/api.md port_del). With none, the flows of packets that came
 * in on pi are removed (a port added later under its id starts without them) and *removed counts
 * them. One walk of the flow table, only when it holds anything. */
static uint32_t flows_port_del(uint16_t pi, uint32_t *removed)
{
	*removed = 0;
	uint64_t entries = 0, pinned = 0; /* each worker counts what it entered and removed: the sum is the table */
	for (unsigned w = 0; w < M.nworkers; w++) {
		entries += M.workers[w].st.flow_st.entries;
		pinned += M.workers[w].st.flow_st.pinned;
	}
	if (!flow_h || entries == 0)
		return 0;
	const void *key;
	void *data;
	uint32_t it = 0, to = 0;
	int32_t pos;
	while (pinned && (pos = rte_hash_iterate(flow_h, &key, &data, &it)) >= 0)
		to += flows[pos].pinned && flows[pos].act.kind == STEER_PORT && flows[pos].act.target == pi;
	if (to)
		return to;
	it = 0;
	while ((pos = rte_hash_iterate(flow_h, &key, &data, &it)) >= 0) {
		if (((const struct flow_key *)key)->in_port != pi || rte_hash_del_key(flow_h, key) < 0)
			continue;
		W->st.flow_st.entries--;
		W->st.flow_st.pinned -= flows[pos].pinned;
		(*removed)++;
	}
	return 0;
}

static void exec_cmd(struct wcmd *c)
{
	switch (c->type) {
	case WCMD_NF_ADD: {
		struct nf *nf = &M.nfs[c->nf];
		struct service *s = &M.services[nf->service];
		nf->nstage = 0;
		nf->dirty = false;
		nf->first_wait = 0;
		nf->last_fill = 0;
		nf->kick_pending = false;
		nf->lent = 0;
		nf->fault = NF_RING_OK;
		nf_ring_init(&nf->rxk, nf->rx, M.cfg.ring_size);
		nf_ring_init(&nf->txk, nf->tx, M.cfg.ring_size);
		if (nf->po)
			nf_ring_init(&nf->pok, nf->po, M.cfg.ring_size);
		nf->pipe_to = nf->pipe_from = -1;
		nf->cohost_in = false;
		nf->tap_in = nf->tap_out = 0; /* a capture of the slot's last NF does not follow it to this one */
		nf->pipe_kicked = false;
		nf->pipe_closing = false;
		nf->pipe_backlog = 0;
		__atomic_store_n(&nf->inflight, 0, __ATOMIC_RELAXED); /* late decrements for its slot's last NF: read as >= 0 */
		c->result = 0;
		nf->set = NF_SET_NONE;
		nf->waiting = false;
		rte_spinlock_lock(&s->inst_lock);
		if (s->ninst >= SL_MAX_INSTANCES) {
			rte_spinlock_unlock(&s->inst_lock);
			c->result = 1;
			break;
		}
		s->inst[s->ninst] = (uint16_t)c->nf;
		__atomic_store_n(&s->ninst, (uint16_t)(s->ninst + 1), __ATOMIC_RELEASE); /* after its slot */
		s->nlocal[W->index]++;
		rte_spinlock_unlock(&s->inst_lock);
		nf->overloaded = false;
		svc_saturation(s);
		struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u32 = c->nf }; /* doorbells() */
		/* A guest NF without a doorbell cannot ring (docs/guests.md "Wakeups"): never parked */
		nf->bell = !nf->guest || nf->doorbell;
		if (nf->bell && epoll_ctl(W->bell_ep, EPOLL_CTL_ADD, nf->tx_kick_fd, &ev) < 0) {
			LOG("worker: NF %s: cannot watch its doorbell: %s (it is never parked)", nf->name,
			    strerror(errno));
			nf->bell = false;
		}
		nf->active = true;
		nf->draining = false;
		if (nf->supply_want) /* supply_topup gives it its first empty buffers */
			W->suppliers[W->nsuppliers++] = (uint16_t)c->nf;
		pipes_update(M.route);
		break;
	}
	case WCMD_NF_DRAIN: /* out of its service: new packets (and flows) go to the other replicas */
		if (M.nfs[c->nf].active && nf_leave_service(&M.nfs[c->nf]))
			pipes_update(M.route);
		break;
	case WCMD_NF_REMOVE: {
		struct nf *nf = &M.nfs[c->nf];
		if (!nf->active) {
			c->result = 0;
			break;
		}
		nf_leave_service(nf);
		/* Its pipes end first: its reader stops reading its pipe ring (which the worker then drains
		 * with the rest), or what it took from its input is accounted as its own. */
		if (nf->pipe_from >= 0)
			pipe_close_now(&M.nfs[nf->pipe_from], M.route, true);
		if (nf->pipe_to >= 0)
			pipe_close_now(nf, M.route, false);
		/* What the NF already returned is processed normally: nothing it finished is lost (unless
		 * it broke the ring protocol: then its rings are not read again). */
		c->drained = 0;
		for (int i = 0; i < 1024; i++) {
			uint32_t n = drain_nf((uint16_t)c->nf, M.route);
			c->drained += n;
			if (n == 0)
				break;
		}
		flush_all();
		c->result = nf_reclaim(c->nf);
		if (nf->set == NF_SET_PARKED)
			__atomic_store_n(&nf->tx->need_kick, 0, __ATOMIC_RELAXED);
		set_leave(nf);
		if (nf->bell)
			epoll_ctl(W->bell_ep, EPOLL_CTL_DEL, nf->tx_kick_fd, NULL);
		nf->bell = false;
		waiting_leave(nf);
		for (uint32_t k = 0; k < W->nsuppliers; k++)
			if (W->suppliers[k] == (uint16_t)c->nf) {
				W->suppliers[k] = W->suppliers[--W->nsuppliers];
				break;
			}
		nf->active = false;
		pipes_update(M.route); /* e.g. one replica left: its upstream can pipe to it */
		break;
	}
	case WCMD_ROUTE_SET: {
		struct route *old = M.route;
		M.route = c->route;
		c->route = old;
		pipes_update(M.route);
		break;
	}
	case WCMD_STEER_SET: {
		struct steer *old = M.steer;
		M.steer = c->steer;
		c->steer = old;
		break;
	}
	case WCMD_PORT_ADD: { /* its worker: between bursts, so it never sees half a port */
		struct port *p = &M.ports[c->nf];
		for (unsigned w = 0; w < SL_MAX_WORKERS; w++) { /* no worker stages for a port not live */
			p->stage[w].n = 0;
			p->stage[w].listed = false;
		}
		__atomic_store_n(&p->inflight, 0, __ATOMIC_RELAXED);
		p->tap_rx = p->tap_tx = 0; /* a capture of a deleted port under this id does not follow */
		__atomic_store_n(&p->live, true, __ATOMIC_RELEASE); /* the rest of the port before this */
		break;
	}
	case WCMD_PORT_DEL: { /* worker 0, the others paused with their staging flushed (worker_call) */
		struct port *p = &M.ports[c->nf];
		c->result = flows_port_del((uint16_t)c->nf, &c->drained);
		if (c->result && c->arg == NULL)
			break; /* NFs pinned flows to it: refused, nothing changed (arg: the device is gone, go on) */
		__atomic_store_n(&p->live, false, __ATOMIC_RELEASE);
		/* what is staged for it goes out now (every worker flushed before it paused, so this is
		 * normally nothing); what other workers handed it before it died, in their inboxes,
		 * drops in to_port, and the control thread waits for its inflight count to reach 0 */
		for (unsigned w = 0; w < M.nworkers; w++) /* the others are paused: their queues are idle */
			if (p->stage[w].n)
				flush_port(p, w);
		break;
	}
	case WCMD_STOP:
		W->running = false;
		break;
	case WCMD_SYNC:
		pipes_update(M.route);
		break;
	case WCMD_PAUSE: /* worker_main holds still after acknowledging it */
		flush_all();
		break;
	case WCMD_POOL_AUDIT:
		flush_all(); /* nothing of this worker's left half-staged for another */
		pool_audit_run(c->arg);
		break;
	case WCMD_TEST_HOOK:
		c->result = c->nf == TEST_HOOK_DOUBLE_FREE ? test_hook_double_free() : UINT32_MAX;
		break;
	}
}

/* No rule matched (or no rules): the port's ingress chain, else no path. */
static inline void first_hop(const struct route *rt, uint16_t pi, struct rte_mbuf *m)
{
	int32_t c = rt->port_chain[pi];
	if (c < 0)
		no_path(m, pi);
	else if (!backpressure(&rt->chains[c], m))
		to_service(rt->chains[c].svc[0], m, (uint16_t)c, 0, pi);
}

/* Act on a steering decision; replica: the flow's sticky replica, or NULL without a flow. */
static inline void steer_act(const struct route *rt, struct steer_action a, uint16_t pi, struct rte_mbuf *m,
			     uint64_t *drop_counter, uint16_t *replica)
{
	switch (a.kind) {
	case STEER_CHAIN:
		if (unlikely(a.target >= rt->nchains))
			no_path(m, pi);
		else if (backpressure(&rt->chains[a.target], m))
			;
		else if (replica)
			to_service_sticky(rt->chains[a.target].svc[0], m, a.target, 0, pi, replica);
		else
			to_service(rt->chains[a.target].svc[0], m, a.target, 0, pi);
		break;
	case STEER_SERVICE:
		if (replica)
			to_service_sticky(a.target, m, STEER_CHAIN_NONE, SL_HOP_DETACHED, pi, replica);
		else
			to_service(a.target, m, STEER_CHAIN_NONE, SL_HOP_DETACHED, pi);
		break;
	case STEER_CHAIN_HOP:
		if (unlikely(a.target >= rt->nchains || a.hop >= rt->chains[a.target].len))
			no_path(m, pi);
		else if (replica)
			to_service_sticky(rt->chains[a.target].svc[a.hop], m, a.target, a.hop, pi, replica);
		else
			to_service(rt->chains[a.target].svc[a.hop], m, a.target, a.hop, pi);
		break;
	case STEER_PORT:
		to_port(a.target, m);
		break;
	case STEER_DROP:
		(*drop_counter)++;
		TRACE_END(m, TR_DROP, TD_RULE);
		drop(m);
		break;
	default: {
		int32_t c = rt->port_chain[pi];
		if (c < 0)
			no_path(m, pi);
		else if (replica)
			to_service_sticky(rt->chains[c].svc[0], m, (uint16_t)c, 0, pi, replica);
		else
			to_service(rt->chains[c].svc[0], m, (uint16_t)c, 0, pi);
		break;
	}
	}
}

static inline void flow_key_of(const struct sl_pkt_key *k, struct flow_key *f)
{
	memcpy(f->src, k->src, sizeof(f->src));
	memcpy(f->dst, k->dst, sizeof(f->dst));
	f->sport = k->sport;
	f->dport = k->dport;
	f->proto = k->proto;
	f->in_port = k->in_port;
	f->ipver = k->flags & (SL_KEY_IP4 | SL_KEY_IP6);
	f->pad = 0;
}

/* An NF asked (SL_ACT_F_PIN / _UNPIN) to enter or forget the flow of a packet it returns. */
static void flow_from_nf(struct rte_mbuf *m, const struct sl_bufstate *st, const struct sl_desc *d,
			 const struct route *rt)
{
	struct sl_pkt_key k;
	struct flow_key fk;
	if (!flow_h || sl_pkt_key_parse(rte_pktmbuf_mtod(m, const uint8_t *), m->data_len, (uint8_t)st->in_port,
					&k) < 0 || !(k.flags & SL_KEY_IP)) {
		W->st.flow_st.pin_ignored++;
		return;
	}
	flow_key_of(&k, &fk);
	int32_t old = rte_hash_lookup(flow_h, &fk);
	if (d->action & SL_ACT_F_UNPIN) {
		W->st.flow_st.unpins++;
		if (old >= 0 && rte_hash_del_key(flow_h, &fk) >= 0) {
			W->st.flow_st.entries--;
			W->st.flow_st.pinned -= flows[old].pinned;
		}
		return;
	}
	/* the path the packet takes now, as a flow action from the flow's first hop */
	struct steer_action a = { .kind = STEER_DROP };
	switch (d->action & SL_ACT_MASK) {
	case SL_ACT_NEXT: { /* as next_hop(): the following service, else the chain's exit, else no path */
		const struct chain *ch = st->chain < rt->nchains ? &rt->chains[st->chain] : NULL;
		unsigned hop = st->hop == SL_HOP_DETACHED ? (ch ? ch->len : 0u) : st->hop + 1u;
		if (ch && hop < ch->len)
			a = (struct steer_action){ .kind = STEER_CHAIN_HOP, .target = st->chain, .hop = (uint8_t)hop };
		else if (ch && ch->exit >= 0)
			a = (struct steer_action){ .kind = STEER_PORT, .target = (uint16_t)ch->exit };
		break;
	}
	case SL_ACT_OUT:
		a = (struct steer_action){ .kind = STEER_PORT, .target = d->dest };
		break;
	case SL_ACT_TO_NF: {
		uint8_t hop = hop_of(rt, st->chain, d->dest);
		a = hop == SL_HOP_DETACHED ? (struct steer_action){ .kind = STEER_SERVICE, .target = d->dest }
					   : (struct steer_action){ .kind = STEER_CHAIN_HOP, .target = st->chain, .hop = hop };
		break;
	}
	default:
		break;
	}
	int32_t p = old >= 0 ? old : rte_hash_add_key(flow_h, &fk);
	if (p < 0) {
		W->st.flow_st.full++;
		W->st.flow_st.pin_ignored++;
		return;
	}
	if (old < 0)
		W->st.flow_st.entries++;
	if (old < 0 || !flows[p].pinned)
		W->st.flow_st.pinned++;
	flows[p] = (struct flow){ .last_tsc = rte_rdtsc(), .act = a, .replica = FLOW_REPLICA_NONE, .pinned = true };
	W->st.flow_st.pins++;
}

/* Expire idle flows: a slice of the table per millisecond, so the sweep never holds up a burst. */
static void flow_expire(uint64_t now)
{
	if (!flow_h || now < W->flow_next_sweep)
		return;
	W->flow_next_sweep = now + M.tsc_hz / 1000;
	/* rte_hash_iterate walks empty buckets until it finds an entry: over an empty table one call
	 * would scan all of it, every millisecond */
	if (W->st.flow_st.entries == 0) {
		W->flow_iter = 0;
		return;
	}
	uint64_t idle = (uint64_t)M.cfg.flow_idle_ms * (M.tsc_hz / 1000);
	for (int k = 0; k < 256; k++) {
		const void *key;
		void *data;
		int32_t p = rte_hash_iterate(flow_h, &key, &data, &W->flow_iter);
		if (p < 0) {
			W->flow_iter = 0;
			return;
		}
		if (now - flows[p].last_tsc > idle && rte_hash_del_key(flow_h, key) >= 0) {
			W->st.flow_st.expired++;
			W->st.flow_st.entries--;
			W->st.flow_st.pinned -= flows[p].pinned;
		}
	}
}

/* A trace's steering step: the rule (0: none), what it does, and what the flow table said. */
static void trace_steer(const struct rte_mbuf *m, uint32_t rule_id, struct steer_action a, uint8_t flow)
{
	trace_step(W->index, m, TR_STEER, rule_id, a.kind | (uint32_t)flow << 8 | (uint32_t)a.target << 16);
}

/* A burst through the rules (docs/steering.md): parse every packet's key; IP packets look up their
 * flow, and those whose flow was decided under the current rules follow it; the rest are classified
 * in one classifier call, and new flows are entered; then each packet is acted on. */
static void steer_burst(const struct route *rt, const struct steer *sr, uint16_t pi, struct rte_mbuf **pkts,
			uint16_t n)
{
	struct sl_pkt_key keys[SL_BURST];
	struct flow_key fk[SL_BURST];
	const void *fkp[SL_BURST];
	const uint8_t *data[SL_BURST];
	struct rte_mbuf *good[SL_BURST];
	int32_t pos[SL_BURST], fpos[SL_BURST];
	uint16_t fidx[SL_BURST], aidx[SL_BURST];
	uint32_t hit[SL_BURST], own[SL_BURST];
	uint16_t ng = 0, nfk = 0, na = 0;
	for (uint16_t i = 0; i < n; i++) {
		struct rte_mbuf *m = pkts[i];
		if (unlikely(sl_pkt_key_parse(rte_pktmbuf_mtod(m, const uint8_t *), m->data_len, (uint8_t)pi,
					      &keys[ng]) < 0)) {
			shared_add(&M.ports[pi].st.malformed, 1); /* a port's queues may be polled by several workers */
			if (sr->acl.n)
				steer_act(rt, sr->malformed, pi, m, &W->st.drops.malformed, NULL);
			else /* no rules: as if not parsed */
				first_hop(rt, pi, m);
			continue;
		}
		fpos[ng] = -1; /* -1: no flow; >= 0: position; <= -2: miss, key index -2 - x */
		if (flow_h && (keys[ng].flags & SL_KEY_IP)) {
			flow_key_of(&keys[ng], &fk[nfk]);
			fkp[nfk] = &fk[nfk];
			fidx[nfk++] = ng;
		}
		good[ng++] = m;
	}
	if (ng == 0)
		return;
	if (nfk) {
		/* rte_hash looks up at most RTE_HASH_LOOKUP_BULK_MAX keys a call (more: -EINVAL, pos unset) */
		for (uint16_t s = 0; s < nfk; s += RTE_HASH_LOOKUP_BULK_MAX)
			rte_hash_lookup_bulk(flow_h, fkp + s, nfk - s < RTE_HASH_LOOKUP_BULK_MAX ? nfk - s : RTE_HASH_LOOKUP_BULK_MAX,
					     pos + s);
		for (uint16_t k = 0; k < nfk; k++)
			fpos[fidx[k]] = pos[k] >= 0 ? pos[k] : -2 - (int32_t)k;
	}
	uint8_t tflow[SL_BURST]; /* for a trace: what the flow table said (trace.h enum trace_flow) */
	if (unlikely(trace_on))
		memset(tflow, TF_NONE, sizeof(tflow));
	for (uint16_t g = 0; g < ng; g++) {
		if (fpos[g] >= 0 && (flows[fpos[g]].gen == sr->gen || flows[fpos[g]].pinned)) {
			W->st.flow_st.hits++;
			if (unlikely(trace_on))
				tflow[g] = TF_HIT;
			continue;
		}
		data[na] = (const uint8_t *)&keys[g];
		aidx[na++] = g;
	}
	if (!sr->acl.n || (na && unlikely(steer_acl_classify(&sr->acl, data, hit, na) != 0)))
		memset(hit, 0, sizeof(hit)); /* no rules (only NF-pinned flows): the default path */
	uint64_t now = rte_rdtsc();
	for (uint16_t k = 0; k < na; k++) {
		uint16_t g = aidx[k];
		if (unlikely(sr->scratch != NULL)) { /* payload rules: the winner must find its pattern */
			bool undecided;
			hit[k] = steer_payload_resolve(sr, hit[k], rte_pktmbuf_mtod(good[g], const uint8_t *), &keys[g],
						       sr->scratch, &undecided);
			if (undecided) { /* no payload yet: decide this packet only, the flow stays open */
				own[g] = hit[k];
				fpos[g] = -1;
				continue;
			}
		}
		uint32_t rid = hit[k] ? sr->rules[hit[k] - 1].id : 0;
		struct steer_action act = hit[k] ? sr->rules[hit[k] - 1].act : (struct steer_action){ 0 };
		if (fpos[g] >= 0) {
			/* decided under older rules: keep the replica if the same rule still picks the same path */
			struct flow *f = &flows[fpos[g]];
			W->st.flow_st.rechecked++;
			if (unlikely(trace_on))
				tflow[g] = TF_RECHECK;
			if (f->rule_id != rid || f->act.kind != act.kind || f->act.target != act.target) {
				f->replica = FLOW_REPLICA_NONE;
				W->st.flow_st.moved++;
			}
			f->gen = sr->gen;
			f->rule_id = rid;
			f->rule_idx = hit[k];
			f->act = act;
		} else if (fpos[g] <= -2) {
			int32_t p = rte_hash_add_key(flow_h, &fk[-2 - fpos[g]]);
			W->st.flow_st.misses++;
			if (unlikely(trace_on))
				tflow[g] = TF_MISS;
			if (p >= 0) {
				struct flow *f = &flows[p];
				if (f->gen != sr->gen || f->last_tsc != now) { /* not entered by this burst already */
					*f = (struct flow){ .gen = sr->gen, .rule_id = rid, .rule_idx = hit[k], .act = act,
							    .replica = FLOW_REPLICA_NONE };
					W->st.flow_st.entries++;
				}
				f->last_tsc = now;
				fpos[g] = p;
				continue;
			}
			W->st.flow_st.full++;
			fpos[g] = -1;
		}
		own[g] = hit[k]; /* no flow: this packet's own classification */
	}
	/* act in arrival order */
	for (uint16_t g = 0; g < ng; g++) {
		if (fpos[g] < 0) {
			uint32_t h = own[g];
			if (h)
				shared_add(sr->rules[h - 1].hits, 1);
			if (unlikely(trace_on))
				trace_steer(good[g], h ? sr->rules[h - 1].id : 0, h ? sr->rules[h - 1].act : (struct steer_action){ 0 },
					    TF_NONE);
			steer_act(rt, h ? sr->rules[h - 1].act : (struct steer_action){ 0 }, pi, good[g], &W->st.drops.rule,
				  NULL);
			continue;
		}
		struct flow *f = &flows[fpos[g]];
		f->last_tsc = now;
		if (f->rule_idx)
			shared_add(sr->rules[f->rule_idx - 1].hits, 1);
		if (unlikely(trace_on))
			trace_steer(good[g], f->rule_id, f->act, tflow[g]);
		steer_act(rt, f->act, pi, good[g], &W->st.drops.rule, &f->replica);
	}
}

void worker_active_set(uint32_t *nbusy_out, uint32_t *nparked_out, uint32_t *nwaiting_out)
{
	/* racy reads of the workers' list lengths: good enough for a status report */
	*nbusy_out = *nparked_out = *nwaiting_out = 0;
	for (unsigned i = 0; i < M.nworkers; i++) {
		*nbusy_out += __atomic_load_n(&M.workers[i].nbusy, __ATOMIC_RELAXED);
		*nparked_out += __atomic_load_n(&M.workers[i].nparked, __ATOMIC_RELAXED);
		*nwaiting_out += __atomic_load_n(&M.workers[i].nwaiting, __ATOMIC_RELAXED);
	}
}

void worker_stats_sum(struct worker_stats *out)
{
	/* every field is a uint64_t (struct worker_stats): add them up as an array; racy reads of
	 * counters another thread writes, as every report here */
	_Static_assert(sizeof(struct worker_stats) % sizeof(uint64_t) == 0, "worker_stats is all uint64_t");
	const size_t n = sizeof(*out) / sizeof(uint64_t);
	uint64_t *o = (uint64_t *)out;
	memset(out, 0, sizeof(*out));
	for (unsigned w = 0; w < M.nworkers; w++) {
		const uint64_t *v = (const uint64_t *)&M.workers[w].st;
		for (size_t i = 0; i < n; i++)
			o[i] += __atomic_load_n(&v[i], __ATOMIC_RELAXED);
	}
}

/* The worker a command is for: an NF's or a port's own, else worker 0. */
static unsigned cmd_worker(const struct wcmd *c)
{
	switch (c->type) {
	case WCMD_NF_ADD:
	case WCMD_NF_REMOVE:
	case WCMD_NF_DRAIN:
		return M.nfs[c->nf].worker < M.nworkers ? M.nfs[c->nf].worker : 0;
	case WCMD_PORT_ADD:
		return M.ports[c->nf].worker < M.nworkers ? M.ports[c->nf].worker : 0;
	default:
		return 0;
	}
}

/* Run c on worker w and wait (inline, as that worker, when the workers are not running). */
static void call_on(unsigned w, struct wcmd *c)
{
	c->done = 0;
	if (!M.worker_running) {
		struct worker *saved = W;
		W = &M.workers[w];
		exec_cmd(c);
		W = saved;
		return;
	}
	while (rte_ring_enqueue(M.workers[w].cmdq, c) != 0)
		usleep(10);
	while (!__atomic_load_n(&c->done, __ATOMIC_ACQUIRE))
		usleep(5);
}

/* Workers from `first` on pass a barrier and update their pipes (WCMD_SYNC), one after another. */
static void sync_workers(unsigned first)
{
	for (unsigned w = first; w < M.nworkers; w++) {
		struct wcmd sync = { .type = WCMD_SYNC };
		call_on(w, &sync);
	}
}

void worker_call(struct wcmd *c)
{
	if (c->type == WCMD_ROUTE_SET || c->type == WCMD_STEER_SET) {
		/* worker 0 swaps; every other worker then passes a barrier (it re-reads the pointer at
		 * the top of its next loop, so after this no worker holds the old one) and updates the
		 * pipes of its NFs */
		call_on(0, c);
		sync_workers(1);
		return;
	}
	if ((c->type == WCMD_POOL_AUDIT || c->type == WCMD_PORT_DEL) && M.worker_running && M.nworkers > 1) {
		/* stop the world: the others flush and hold still while worker 0 audits (or, port_del,
		 * looks at the shared flow table and kills the port, whichever worker polls it) */
		uint32_t epoch = __atomic_load_n(&M.pause_epoch, __ATOMIC_RELAXED);
		for (unsigned w = 1; w < M.nworkers; w++) {
			struct wcmd pause = { .type = WCMD_PAUSE, .nf = epoch };
			call_on(w, &pause);
		}
		call_on(0, c);
		__atomic_store_n(&M.pause_epoch, epoch + 1, __ATOMIC_RELEASE);
		return;
	}
	call_on(cmd_worker(c), c);
}

void worker_sync_all(void)
{
	sync_workers(0);
}

static int worker_lists_init(void)
{
	fault_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	M.nworkers = M.cfg.workers ? M.cfg.workers : 1;
	M.workers = calloc(M.nworkers, sizeof(*M.workers));
	if (fault_fd < 0 || !M.workers)
		return -1;
	unsigned lc = rte_get_main_lcore();
	for (unsigned i = 0; i < M.nworkers; i++) {
		struct worker *w = &M.workers[i];
		w->index = i;
		lc = rte_get_next_lcore(lc, 1, 0);
		w->lcore = lc < RTE_MAX_LCORE ? lc : rte_get_main_lcore(); /* too few: worker_launch says so */
		/* its queues on its own NUMA node (one node here: the method is what carries over) */
		int node = (int)rte_lcore_to_socket_id(w->lcore);
		w->busy = calloc(M.max_nfs, sizeof(*w->busy));
		w->parked = calloc(M.max_nfs, sizeof(*w->parked));
		w->dirty = calloc(M.max_nfs, sizeof(*w->dirty));
		w->waiting = calloc(M.max_nfs, sizeof(*w->waiting));
		w->dirty_ports = calloc(SL_MAX_PORTS, sizeof(*w->dirty_ports));
		w->piped = calloc(M.max_nfs, sizeof(*w->piped));
		w->suppliers = calloc(M.max_nfs, sizeof(*w->suppliers));
		w->next_deadline = UINT64_MAX;
		w->bell_ep = epoll_create1(EPOLL_CLOEXEC); /* never fd 0: stdin is open */
		char name[RTE_RING_NAMESIZE];
		snprintf(name, sizeof(name), "sluice_cmdq%u", i);
		w->cmdq = rte_ring_create(name, 64, node, RING_F_SP_ENQ | RING_F_SC_DEQ);
		snprintf(name, sizeof(name), "sluice_inbox%u", i);
		w->inbox = rte_ring_create(name, 4096, node, RING_F_SC_DEQ);
		if (w->bell_ep < 0 || !w->busy || !w->parked || !w->dirty || !w->waiting || !w->dirty_ports || !w->piped ||
		    !w->suppliers || !w->cmdq || !w->inbox)
			return -1;
	}
	return 0;
}

int worker_fault_fd(void)
{
	return fault_fd;
}

void worker_fault_ack(void)
{
	uint64_t v;
	if (read(fault_fd, &v, sizeof(v)) < 0) { /* EAGAIN: nothing new */
	}
}

/* Receive a burst from queue q of port pi (this worker polls it alone) and take each packet its
 * first hop. Returns the packets received. */
static inline uint16_t rx_queue(const struct route *rt, const struct steer *sr, uint16_t pi, struct port *p,
				uint16_t q, struct rte_mbuf **pkts)
{
	uint16_t n = rte_eth_rx_burst(p->port_id, q, pkts, SL_BURST);
	if (n == 0)
		return 0;
	uint64_t bytes = 0;
	uint16_t ok = 0, copied = 0;
	for (uint16_t i = 0; i < n; i++) {
		struct rte_mbuf *m = pkts[i];
		if (likely(!p->vlan_keep)) /* ports[].offloads vlan_strip: the tag stays aside */
			rx_vlan_restore(m);
		if (unlikely((m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_BAD ||
			     (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_BAD))
			shared_add(&p->st.rx_csum_bad, 1); /* rx_checksum: counted, delivered (docs/ports.md) */
		else if (unlikely((m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_NONE))
			l4_cksum_complete(m); /* a partial checksum (virtio): NFs and the wire need the whole one */
		bytes += m->pkt_len;
		if (unlikely(m->nb_segs != 1)) { /* longer than a buffer: never truncated */
			shared_add(&p->st.drop_too_long, 1);
			W->st.drops.too_long++;
			drop(m);
		} else if (unlikely(p->own_pool != NULL)) { /* net_af_xdp: into region 0 (port.c) */
			struct rte_mbuf *c = region_copy_in(&M.region, m, W->index);
			drop(m);
			if (c) {
				copied++;
				pkts[ok++] = c;
			} else {
				W->st.drops.no_buffer++;
			}
		} else {
			pkts[ok++] = m;
		}
	}
	if (unlikely(p->tap_rx))
		capture_pkts(W->index, p->tap_rx, SL_CAP_PORT_RX, pi, pkts, ok, 0);
	if (unlikely(trace_on))
		trace_rx(W->index, pi, q, pkts, ok);
	struct port_rxq *rq = &p->rxq[q];
	rq->pkts += n;
	rq->bytes += bytes;
	rq->copied += copied;
	if (sr->acl.n || W->st.flow_st.pinned)
		steer_burst(rt, sr, pi, pkts, ok);
	else
		for (uint16_t i = 0; i < ok; i++)
			first_hop(rt, pi, pkts[i]);
	return n;
}

int worker_main(void *arg)
{
	W = arg;
	struct rte_mbuf *pkts[SL_BURST];
	LOG("worker %u: data path running on lcore %u", W->index, rte_lcore_id());
	uint32_t idle = 0;
	while (W->running) {
		uint32_t work = 0;
		void *obj;
		while (rte_ring_dequeue(W->cmdq, &obj) == 0) {
			struct wcmd *c = obj;
			/* c is the caller's: gone once done is set, so read it first. A pause lasts while the
			 * pause epoch it names is current: the next pause has another, so a worker that never
			 * ran between two audits cannot mistake the second for the first. */
			bool pause = c->type == WCMD_PAUSE;
			uint32_t epoch = c->nf;
			exec_cmd(c);
			__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
			if (pause) /* acknowledged: hold still while worker 0 audits */
				while (__atomic_load_n(&M.pause_epoch, __ATOMIC_ACQUIRE) == epoch)
					rte_pause();
		}
		const struct route *rt = M.route;

		const struct steer *sr = M.steer;
		if (M.nworkers > 1)
			work += inbox_drain();
		/* a planned restart pauses the ports (main.c quiesce): what waits there meets the next sluiced */
		const uint16_t nrx = likely(!M.rx_paused) ? M.nports : 0;
		for (uint16_t pi = 0; pi < nrx; pi++) {
			int32_t c = rt->port_chain[pi];
			struct port *p = &M.ports[pi];
			if ((c < 0 && !sr->poll_port[pi]) || !__atomic_load_n(&p->live, __ATOMIC_ACQUIRE))
				continue; /* TX-only port (not polled), or deleted */
			if (likely(p->nrxq == 1)) { /* the one branch a one-queue port pays for multi-queue */
				if (p->rxq_worker[0] == W->index)
					work += rx_queue(rt, sr, pi, p, 0, pkts);
				continue;
			}
			for (uint16_t q = 0; q < p->nrxq; q++) /* each queue has exactly one poller */
				if (p->rxq_worker[q] == W->index)
					work += rx_queue(rt, sr, pi, p, q, pkts);
		}
		work += drain_busy(rt);
		if (W->npiped)
			pipes_poll(rt);
		if (unlikely(W->nsuppliers))
			supply_topup(rt);
		flush_all();
		check_waiting();
		uint64_t now = rte_rdtsc();
		doorbells(now);
		if (W->index == 0) /* one sweeper for the shared flow table */
			flow_expire(now);
		/* Several workers may share a core (a small machine): one with nothing to do hands it over
		 * now and then. A lone worker polls flat out, as before. */
		if (M.nworkers > 1 && work == 0 && ++idle % 256 == 0)
			sched_yield();
	}
	flush_all();
	LOG("worker %u: stopped", W->index);
	return 0;
}

/* Workers that poll a queue of a multi-queue port whose ingress chain is c (bit w: worker w). */
static uint32_t chain_rx_workers(const struct route *rt, unsigned c)
{
	uint32_t mask = 0;
	for (unsigned pi = 0; pi < M.nports; pi++) {
		const struct port *p = &M.ports[pi];
		if (rt->port_chain[pi] != (int32_t)c || p->nrxq <= 1 || !__atomic_load_n(&p->live, __ATOMIC_ACQUIRE))
			continue;
		for (unsigned q = 0; q < p->nrxq; q++)
			mask |= 1u << p->rxq_worker[q];
	}
	return mask;
}

uint8_t worker_for_service(uint16_t svc)
{
	if (M.nworkers <= 1)
		return 0;
	const struct route *rt = M.route; /* the control thread publishes routes: its read is safe */
	for (unsigned c = 0; rt && c < rt->nchains; c++)
		for (unsigned h = 0; h < rt->chains[c].len; h++) {
			if (rt->chains[c].svc[h] != svc)
				continue;
			/* A chain fed by a multi-queue port receives on every worker polling one of its queues:
			 * its replicas spread over those workers, each to the one serving the fewest of them, so
			 * a packet finds a replica on the worker that received it (flow affinity) */
			uint32_t mask = chain_rx_workers(rt, c);
			if (mask & (mask - 1)) {
				uint32_t cnt[SL_MAX_WORKERS] = { 0 };
				for (uint32_t i = 0; i < M.max_nfs; i++)
					if (M.nfs[i].state == NF_ATTACHED && M.nfs[i].service == svc && M.nfs[i].worker < SL_MAX_WORKERS)
						cnt[M.nfs[i].worker]++;
				unsigned best = SL_MAX_WORKERS;
				for (unsigned w = 0; w < M.nworkers; w++)
					if ((mask >> w & 1) && (best == SL_MAX_WORKERS || cnt[w] < cnt[best]))
						best = w;
				return (uint8_t)best;
			}
			return (uint8_t)(c % M.nworkers); /* a chain's NFs together: pipes, no handoffs */
		}
	return (uint8_t)(svc % M.nworkers);
}

void port_place(unsigned pi, int32_t chain)
{
	struct port *p = &M.ports[pi];
	unsigned n = M.nworkers ? M.nworkers : 1;
	p->worker = (uint8_t)((chain >= 0 ? (unsigned)chain : pi) % n);
	if (p->nrxq <= 1) {
		p->rxq_worker[0] = p->worker;
		return;
	}
	/* queue q on worker q mod N, the same for every port: a symmetric hash (af_packet's fanout: the
	 * kernel's flow hash) with equal queue counts puts both directions of a connection on one worker */
	for (unsigned q = 0; q < p->nrxq; q++)
		p->rxq_worker[q] = (uint8_t)(q % n);
}

int worker_launch(void)
{
	/* a port goes with its ingress chain (as that chain's NFs), else with the first chain that exits
	 * on it, else round robin; fixed for good: two workers must never poll one queue */
	for (unsigned pi = 0; pi < M.nports; pi++) {
		int32_t c = M.route->port_chain[pi];
		for (unsigned k = 0; c < 0 && k < M.route->nchains; k++)
			if (M.route->chains[k].exit == (int32_t)pi)
				c = (int32_t)k;
		port_place(pi, c);
		M.ports[pi].inflight = 0;
	}
	unsigned lc = rte_get_main_lcore();
	for (unsigned i = 0; i < M.nworkers; i++) {
		lc = rte_get_next_lcore(lc, 1, 0);
		if (lc >= RTE_MAX_LCORE || lc != M.workers[i].lcore) {
			LOG("sluiced.lcores: '%s' names too few cores for %u workers (main + one per worker)",
			    M.cfg.lcores, M.nworkers);
			worker_stop();
			return -1;
		}
		M.workers[i].lcore = lc;
		M.workers[i].running = true;
		M.worker_running = true;
		if (rte_eal_remote_launch(worker_main, &M.workers[i], lc) != 0) {
			M.workers[i].running = false;
			LOG("could not launch worker %u on lcore %u", i, lc);
			worker_stop();
			return -1;
		}
	}
	M.worker_lcore = M.workers[0].lcore;
	return 0;
}

void worker_stop(void)
{
	if (!M.worker_running)
		return;
	for (unsigned i = 0; i < M.nworkers; i++) {
		if (!M.workers[i].running)
			continue;
		struct wcmd c = { .type = WCMD_STOP };
		call_on(i, &c);
		rte_eal_wait_lcore(M.workers[i].lcore);
	}
	M.worker_running = false;
}

static int flow_table_init(void)
{
	if (M.cfg.flows == 0)
		return 0;
	struct rte_hash_parameters hp = { .name = "sluice_flows", .entries = M.cfg.flows,
					  .key_len = sizeof(struct flow_key), .hash_func = rte_hash_crc,
					  .socket_id = (int)rte_socket_id(),
					  .extra_flag = RTE_HASH_EXTRA_FLAGS_EXT_TABLE };
	/* several workers classify (one port's queues, or ports on different workers): adds and lookups
	 * from several threads at once */
	if (M.nworkers > 1)
		hp.extra_flag |= RTE_HASH_EXTRA_FLAGS_MULTI_WRITER_ADD | RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY;
	flow_h = rte_hash_create(&hp);
	if (!flow_h) {
		LOG("steering.flows: cannot create a flow table of %u entries", M.cfg.flows);
		return -1;
	}
	flows = calloc((size_t)rte_hash_max_key_id(flow_h) + 1, sizeof(*flows));
	return flows ? 0 : -1;
}

/* Quotas (docs/architecture.md "Quotas"): the NFs of a domain may hold or have staged at most its
 * pool less a reserve for port RX and copies: 1/8 of the pool or 2 bursts per port, the larger. */
static void quota_init(void)
{
	unsigned nd = M.cfg.ndomains ? M.cfg.ndomains : 1;
	for (unsigned d = 0; d < SL_MAX_DOMAINS; d++) {
		uint32_t pool = d == 0 ? M.cfg.pool_mbufs : d < nd ? M.cfg.domains[d].pool_mbufs : 0;
		uint32_t reserve = pool / 8, rx = 2u * SL_BURST * M.nports;
		if (reserve < rx)
			reserve = rx;
		M.dom_max[d] = pool > reserve ? pool - reserve : 0;
		M.dom_held[d] = 0;
	}
}

int worker_init(void)
{
	quota_init();
	return worker_lists_init() < 0 || flow_table_init() < 0 ? -1 : 0;
}

void worker_fini(void)
{
	rte_hash_free(flow_h);
	flow_h = NULL;
	free(flows);
	flows = NULL;
	if (fault_fd >= 0)
		close(fault_fd);
	fault_fd = -1;
	for (unsigned i = 0; M.workers && i < M.nworkers; i++) {
		struct worker *w = &M.workers[i];
		if (w->bell_ep > 0)
			close(w->bell_ep);
		struct rte_mbuf *m;
		while (w->inbox && rte_ring_dequeue(w->inbox, (void **)&m) == 0) /* handed on after its worker stopped */
			drop(m);
		rte_ring_free(w->inbox);
		rte_ring_free(w->cmdq);
		free(w->busy);
		free(w->parked);
		free(w->dirty);
		free(w->waiting);
		free(w->dirty_ports);
		free(w->piped);
		free(w->suppliers);
		free(w->pipe_next);
	}
	free(M.workers);
	M.workers = NULL;
	M.nworkers = 0;
}
