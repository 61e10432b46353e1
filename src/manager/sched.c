/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluiced.nf_sched: fifo (docs/architecture.md "NFs sharing a core"). NFs pinned to one core take
 * turns there; under the kernel's fair scheduler a packet waits at every hop for however many
 * other NFs the scheduler picks first. As SCHED_FIFO tasks of one priority that sched_yield()
 * (libsluice yields on every empty poll and every SL_YIELD_BUSY bursts), they take turns
 * round-robin in the order they were queued; sluiced queues them in chain order, so a packet
 * published by one hop is taken by the next on the very next turn.
 *
 * Only NFs sluiced can trust not to keep the core: processes (not guests) of the default domain
 * (declared domains hold NFs one does not trust) whose CPUs exclude every worker lcore (a
 * real-time NF there would starve the data path). Others stay as they are, and the log says why.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_lcore.h>

#include "sluiced.h"

#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000
#endif

#define NF_FIFO_PRIORITY 1 /* the lowest real-time priority: above every fair-scheduled task */

/* why `nf` may not be made SCHED_FIFO ("" if it may) */
static void fifo_refusal(const struct nf *nf, char *why, size_t n)
{
	why[0] = 0;
	if (nf->guest) {
		snprintf(why, n, "it runs in a guest (its vCPUs are QEMU's threads)");
		return;
	}
	if (nf->domain != 0) {
		snprintf(why, n, "it is in domain %s (declared domains hold NFs that are not trusted with a core)",
			 M.regions[nf->domain]->name);
		return;
	}
	cpu_set_t cs;
	if (sched_getaffinity(nf->pid, sizeof(cs), &cs)) {
		snprintf(why, n, "its CPU affinity cannot be read: %s", strerror(errno));
		return;
	}
	for (unsigned w = 0; w < M.nworkers; w++) {
		rte_cpuset_t wc = rte_lcore_cpuset(M.workers[w].lcore);
		for (unsigned cpu = 0; cpu < CPU_SETSIZE; cpu++)
			if (CPU_ISSET(cpu, &wc) && CPU_ISSET(cpu, &cs)) {
				snprintf(why, n, "it may run on CPU %u, worker %u's: pin it to other CPUs (taskset)", cpu, w);
				return;
			}
	}
}

/* put nf's main thread at the tail of the SCHED_FIFO queue of its priority (leaving and re-entering
 * the class does that; setting the same policy again is a no-op for the kernel) */
static int fifo_requeue(const struct nf *nf)
{
	struct sched_param fair = { 0 }, rt = { .sched_priority = NF_FIFO_PRIORITY };
	int cur = sched_getscheduler(nf->pid);
	if (cur >= 0 && (cur & ~SCHED_RESET_ON_FORK) == SCHED_FIFO)
		sched_setscheduler(nf->pid, SCHED_OTHER, &fair);
	/* its children (an NF that forks helpers) start fair-scheduled */
	return sched_setscheduler(nf->pid, SCHED_FIFO | SCHED_RESET_ON_FORK, &rt);
}

const char *sched_nf_policy(const struct nf *nf)
{
	int p = sched_getscheduler(nf->pid);
	if (p < 0)
		return "unknown";
	switch (p & ~SCHED_RESET_ON_FORK) {
	case SCHED_FIFO: return "fifo";
	case SCHED_RR: return "rr";
	case SCHED_BATCH: return "batch";
	case SCHED_IDLE: return "idle";
	default: return "other";
	}
}

/* Queue every eligible NF in chain order: services by first appearance in the route's chains,
 * then the rest; instances of a service in id order. */
static void fifo_reorder(void)
{
	uint32_t ns = M.nservices;
	uint16_t *order = calloc(ns ? ns : 1, sizeof(*order));
	uint8_t *seen = calloc(ns ? ns : 1, 1);
	if (!order || !seen) {
		free(order);
		free(seen);
		return;
	}
	uint32_t k = 0;
	for (unsigned c = 0; c < M.route->nchains; c++)
		for (unsigned i = 0; i < M.route->chains[c].len; i++) {
			uint16_t s = M.route->chains[c].svc[i];
			if (s < ns && !seen[s]) {
				seen[s] = 1;
				order[k++] = s;
			}
		}
	for (uint32_t s = 0; s < ns; s++)
		if (!seen[s])
			order[k++] = (uint16_t)s;
	for (uint32_t j = 0; j < k; j++)
		for (uint32_t i = 0; i < M.max_nfs; i++) {
			struct nf *nf = &M.nfs[i];
			if (nf->state == NF_ATTACHED && nf->service == order[j] && nf->sched_fifo && fifo_requeue(nf))
				LOG("nf %s: SCHED_FIFO: %s", nf->name, strerror(errno));
		}
	free(order);
	free(seen);
}

void sched_nf_attached(struct nf *nf)
{
	nf->sched_fifo = false;
	if (!M.cfg.nf_fifo)
		return;
	char why[160];
	fifo_refusal(nf, why, sizeof(why));
	if (why[0]) {
		LOG("nf %s: stays %s, not SCHED_FIFO (sluiced.nf_sched): %s", nf->name, sched_nf_policy(nf), why);
		return;
	}
	nf->sched_fifo = true;
	fifo_reorder();
}

/* the twin of sched_nf_attached: an NF that lives on after detaching is fair-scheduled again
 * (one that died is gone: ESRCH, nothing to undo) */
void sched_nf_detached(struct nf *nf)
{
	if (!nf->sched_fifo)
		return;
	nf->sched_fifo = false;
	struct sched_param fair = { 0 };
	sched_setscheduler(nf->pid, SCHED_OTHER, &fair);
}

void sched_chains_changed(void)
{
	if (M.cfg.nf_fifo)
		fifo_reorder();
}

void sched_startup_note(void)
{
	if (!M.cfg.nf_fifo)
		return;
	FILE *f = fopen("/proc/sys/kernel/sched_rt_runtime_us", "r");
	long rt = -1;
	if (f) {
		if (fscanf(f, "%ld", &rt) != 1)
			rt = -1;
		fclose(f);
	}
	if (rt >= 0)
		LOG("nf_sched fifo: the kernel gives real-time tasks at most %ld us of each second per CPU "
		    "(kernel.sched_rt_runtime_us); a CPU that fifo NFs keep busy pauses them for the rest", rt);
}
