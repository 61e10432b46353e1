/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The packet tracer, the workers' side (trace.h): mark, log, release. Only called while trace_on.
 */
#include <string.h>

#include <rte_bpf.h>
#include <rte_cycles.h>
#include <rte_mbuf.h>

#include "trace.h"

bool trace_on;
struct trace tr;

static struct trace_pkt *find(const struct rte_mbuf *m)
{
	uint32_t n = trace_marked();
	for (uint32_t i = 0; i < n; i++)
		if (tr.pkt[i].m == m && !tr.pkt[i].done)
			return &tr.pkt[i];
	return NULL;
}

static void put(struct trace_pkt *p, unsigned w, uint8_t kind, uint32_t a, uint32_t b)
{
	/* a packet going round in circles: the last slot, overwritten, says where it ended */
	uint32_t k = p->nsteps < TRACE_STEPS_MAX ? p->nsteps++ : TRACE_STEPS_MAX - 1;
	p->step[k] = (struct trace_step){ .tsc = rte_rdtsc(), .kind = kind, .worker = (uint8_t)w, .a = a, .b = b };
}

void trace_rx(unsigned w, uint16_t port, uint16_t queue, struct rte_mbuf **m, uint16_t n)
{
	if (tr.port >= 0 && tr.port != port)
		return;
	for (uint16_t i = 0; i < n; i++) {
		if (__atomic_load_n(&tr.marked, __ATOMIC_RELAXED) >= tr.want)
			return;
		if (tr.bpf && (tr.jit ? tr.jit(m[i]) : rte_bpf_exec(tr.bpf, m[i])) == 0)
			continue;
		uint32_t k = __atomic_load_n(&tr.marked, __ATOMIC_RELAXED);
		/* several workers poll ports: each slot is claimed once */
		do {
			if (k >= tr.want)
				return;
		} while (!__atomic_compare_exchange_n(&tr.marked, &k, k + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
		struct trace_pkt *p = &tr.pkt[k];
		p->m = m[i];
		p->len = rte_pktmbuf_data_len(m[i]);
		memcpy(p->head, rte_pktmbuf_mtod(m[i], const void *), p->len < sizeof(p->head) ? p->len : sizeof(p->head));
		put(p, w, TR_RX, port, queue);
	}
}

void trace_step(unsigned w, const struct rte_mbuf *m, uint8_t kind, uint32_t a, uint32_t b)
{
	struct trace_pkt *p = find(m);
	if (p)
		put(p, w, kind, a, b);
}

void trace_move(unsigned w, const struct rte_mbuf *from, struct rte_mbuf *to, uint32_t a, uint32_t b)
{
	struct trace_pkt *p = find(from);
	if (p) {
		put(p, w, TR_COPY, a, b);
		p->m = to;
	}
}

void trace_end(unsigned w, const struct rte_mbuf *m, uint8_t kind, uint32_t a)
{
	struct trace_pkt *p = find(m);
	if (!p)
		return;
	put(p, w, kind, a, 0);
	p->m = NULL;
	__atomic_store_n(&p->done, true, __ATOMIC_RELEASE); /* the steps before the flag */
}

void trace_tx_done(unsigned w, struct rte_mbuf *const *m, uint16_t sent)
{
	/* the sent ones' TX steps are logged; they end here (the failed ones end in drop(): tx_full) */
	uint32_t n = trace_marked();
	for (uint32_t i = 0; i < n; i++) {
		struct trace_pkt *p = &tr.pkt[i];
		if (p->done || p->m == NULL || p->nsteps == 0 || p->step[p->nsteps - 1].kind != TR_TX ||
		    p->step[p->nsteps - 1].worker != (uint8_t)w)
			continue;
		for (uint16_t k = 0; k < sent; k++)
			if (m[k] == p->m) {
				p->m = NULL;
				__atomic_store_n(&p->done, true, __ATOMIC_RELEASE);
				break;
			}
	}
}
