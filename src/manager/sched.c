/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluiced.nf_sched: fifo (docs/architecture.md "NFs sharing a core"). NFs pinned to one core take
 * turns there; under the kernel's fair scheduler a packet waits at every hop for however many
 * other NFs the scheduler picks first. As SCHED_FIFO tasks of one priority that sched_yield()
 * (a real-time libsluice NF yields after every burst that was not full and every empty poll), they take turns
 * round-robin in the order they were queued; sluiced queues them in chain order, so a packet
 * published by one hop is taken by the next on the very next turn.
 *
 * Only NFs sluiced can trust not to keep the core: processes (not guests) of the default domain
 * (declared domains hold NFs one does not trust) whose CPUs exclude every worker lcore (a
 * real-time NF there would starve the data path). Others stay as they are, and the log says why.
 *
 * Keeping the order. Yields only rotate the queue; a wake-up changes it: the kernel queues a woken
 * task at the tail, just before whatever runs on its core at that moment, not after its upstream.
 * One sleep of an NF (spin_us without packets, or the real-time limit pausing the core) and its
 * packets could wait a whole extra round at that hop from then on (3 fwd between gen and sink: p50
 * 17-21 us instead of 9.5). Requeueing from the control thread races with those yields (each moves
 * the yielder to the tail while the requeue is half done), so a helper thread (`order_main`),
 * SCHED_FIFO one priority above the NFs, moves onto each NF core in turn -- no NF runs there while it
 * does -- and requeues that core's awake NFs in chain order. The worker pokes it when it kicks a fifo
 * NF; it waits REPAIR_DELAY_US first, so the NF kicked has been queued (and has run) by then.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <rte_lcore.h>

#include "sluiced.h"

#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000
#endif

#define NF_FIFO_PRIORITY 1 /* the lowest real-time priority: above every fair-scheduled task */
#define ORDER_PRIORITY (NF_FIFO_PRIORITY + 1) /* the order helper preempts the NFs it requeues */
#define REPAIR_DELAY_US 200 /* after a kick: the woken NF is queued and has run (a round is ~10 us) */
#define REPAIR_GAP_US 1000  /* at least this between passes, and 20x the last pass's own time */

/* What the order helper needs of a fifo NF, in chain order: built by the control thread under
 * `lock`, read by the helper under it (an NF's rings stay mapped until sched_nf_detached returns). */
struct order_member {
	pid_t pid;
	const uint32_t *need_kick; /* its RX ring's (NF-writable: a forged value only misplaces itself) */
	int cpu;                   /* order_pass's scratch: its only CPU, or -1 */
};

static struct {
	pthread_mutex_t lock; /* priority-inheriting: the control thread may share the NFs' core */
	struct order_member *member;
	uint32_t n, cap;
	int efd;              /* the worker's poke */
	uint32_t poked;       /* atomic: a poke is pending (one eventfd write per pass) */
	bool started, stop, boosted;
	pthread_t thread;
	pid_t helper_tid; /* atomic: the order helper's thread id (it places itself: never moved below) */
	uint64_t passes, requeued; /* under lock */
} O = { .lock = PTHREAD_MUTEX_INITIALIZER, .efd = -1 };

/* the first CPU of lcore's that `cs` holds too, or -1 */
static int lcore_cpu_in(unsigned lcore, const cpu_set_t *cs)
{
	rte_cpuset_t lc = rte_lcore_cpuset(lcore);
	for (unsigned cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &lc) && CPU_ISSET(cpu, cs))
			return (int)cpu;
	return -1;
}

/* why `nf` (CPU affinity `cs`, NULL if unreadable, then `err`) may not be made SCHED_FIFO ("" if it may) */
static void fifo_refusal(const struct nf *nf, const cpu_set_t *cs, int err, char *why, size_t n)
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
	if (cs == NULL) {
		snprintf(why, n, "its CPU affinity cannot be read: %s", strerror(err));
		return;
	}
	for (unsigned w = 0; w < M.nworkers; w++) {
		int cpu = lcore_cpu_in(M.workers[w].lcore, cs);
		if (cpu >= 0) {
			snprintf(why, n, "it may run on CPU %d, worker %u's: pin it to other CPUs (taskset)", cpu, w);
			return;
		}
	}
}

/* put nf's main thread at the tail of the SCHED_FIFO queue of its priority (leaving and re-entering
 * the class does that; setting the same policy again is a no-op for the kernel) */
static int fifo_requeue(pid_t pid)
{
	struct sched_param fair = { 0 }, rt = { .sched_priority = NF_FIFO_PRIORITY };
	int cur = sched_getscheduler(pid);
	if (cur >= 0 && (cur & ~SCHED_RESET_ON_FORK) == SCHED_FIFO)
		sched_setscheduler(pid, SCHED_OTHER, &fair);
	/* its children (an NF that forks helpers) start fair-scheduled */
	return sched_setscheduler(pid, SCHED_FIFO | SCHED_RESET_ON_FORK, &rt);
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
	pthread_mutex_lock(&O.lock);
	O.n = 0;
	for (uint32_t j = 0; j < k; j++)
		for (uint32_t i = 0; i < M.max_nfs; i++) {
			struct nf *nf = &M.nfs[i];
			if (nf->state != NF_ATTACHED || nf->service != order[j] || !nf->sched_fifo)
				continue;
			if (fifo_requeue(nf->pid))
				LOG("nf %s: SCHED_FIFO: %s", nf->name, strerror(errno));
			if (O.n == O.cap) {
				uint32_t cap = O.cap ? 2 * O.cap : 16;
				struct order_member *m = realloc(O.member, cap * sizeof(*m));
				if (m == NULL)
					continue; /* left out of the repairs, still fifo */
				O.member = m;
				O.cap = cap;
			}
			O.member[O.n++] = (struct order_member){ .pid = nf->pid, .need_kick = &nf->rx->need_kick };
		}
	pthread_mutex_unlock(&O.lock);
	free(order);
	free(seen);
	sched_fifo_kicked(); /* the requeue above raced with the NFs' yields: have the helper redo it */
}

/* ------------------------------------------------------------------------ */
/* sluiced's own threads beside busy fifo NFs                                 */

/* sluiced's control thread (the main lcore: control calls, NF attaches) and DPDK's control threads
 * (interrupts: memif and vhost-user connections) are fair-scheduled. On a CPU that fifo NFs keep
 * busy they would run only while the kernel's real-time limit pauses the NFs (50 ms of each second
 * by default), so a control call could wait most of a second. While a fifo NF may run on their CPU
 * they step aside to the worker lcores' CPUs, fair-scheduled beside the worker (a waking thread gets
 * its turn there within a time slice), and go back when no fifo NF is left there. Worker threads
 * never share a CPU with a fifo NF (fifo_refusal), and the order helper places itself. */
#define MAX_ASIDE 64

static struct {
	struct {
		pid_t tid;
		cpu_set_t home;
	} t[MAX_ASIDE];
	unsigned n;   /* threads moved */
	unsigned nfs; /* fifo NFs that may run on the main lcore's CPU: moved while > 0 */
} A;

static void cpus_str(const cpu_set_t *cs, char *buf, size_t n)
{
	size_t len = 0;
	buf[0] = 0;
	for (int c = 0; c < CPU_SETSIZE && len + 8 < n; c++)
		if (CPU_ISSET(c, cs))
			len += (size_t)snprintf(buf + len, n - len, "%s%d", len ? "," : "", c);
}

/* Move the threads of this process that may run on the main lcore's CPU to the workers' CPUs. */
static void threads_step_aside(void)
{
	rte_cpuset_t from = rte_lcore_cpuset(rte_get_main_lcore());
	cpu_set_t to;
	CPU_ZERO(&to);
	for (unsigned w = 0; w < M.nworkers; w++) {
		rte_cpuset_t lc = rte_lcore_cpuset(M.workers[w].lcore);
		CPU_OR(&to, &to, &lc); /* never a fifo NF's (fifo_refusal) */
	}
	DIR *d = opendir("/proc/self/task");
	if (d == NULL)
		return;
	pid_t helper = __atomic_load_n(&O.helper_tid, __ATOMIC_ACQUIRE);
	struct dirent *e;
	while ((e = readdir(d)) != NULL && A.n < MAX_ASIDE) {
		pid_t tid = (pid_t)atoi(e->d_name);
		cpu_set_t cs, both;
		if (tid <= 0 || tid == helper || sched_getaffinity(tid, sizeof(cs), &cs) != 0)
			continue;
		CPU_AND(&both, &cs, &from);
		if (CPU_COUNT(&both) == 0 || sched_setaffinity(tid, sizeof(to), &to) != 0)
			continue;
		A.t[A.n].tid = tid;
		A.t[A.n].home = cs;
		A.n++;
	}
	closedir(d);
	char b1[64], b2[64];
	cpus_str(&from, b1, sizeof(b1));
	cpus_str(&to, b2, sizeof(b2));
	LOG("nf_sched fifo: fifo NFs may keep CPU %s busy, where sluiced's control thread (main lcore) runs: "
	    "it and sluiced's other fair-scheduled threads there (%u in all) move to CPU %s, the workers', "
	    "until no fifo NF is left there (to choose, name another CPU first in sluiced.lcores)", b1, A.n, b2);
}

/* the twin of threads_step_aside: each moved thread back on its own CPUs (one that ended: ESRCH) */
static void threads_go_back(void)
{
	rte_cpuset_t from = rte_lcore_cpuset(rte_get_main_lcore());
	char b[64];
	cpus_str(&from, b, sizeof(b));
	LOG("nf_sched fifo: no fifo NF left on CPU %s: sluiced's %u control thread(s) back there", b, A.n);
	for (unsigned i = 0; i < A.n; i++)
		sched_setaffinity(A.t[i].tid, sizeof(A.t[i].home), &A.t[i].home);
	A.n = 0;
}

void sched_nf_attached(struct nf *nf)
{
	nf->sched_fifo = false;
	nf->fifo_on_main = false;
	if (!M.cfg.nf_fifo)
		return;
	char why[160];
	cpu_set_t cs;
	int readable = sched_getaffinity(nf->pid, sizeof(cs), &cs) == 0;
	fifo_refusal(nf, readable ? &cs : NULL, errno, why, sizeof(why));
	if (why[0]) {
		LOG("nf %s: stays %s, not SCHED_FIFO (sluiced.nf_sched): %s", nf->name, sched_nf_policy(nf), why);
		return;
	}
	nf->sched_fifo = true;
	fifo_reorder();
	/* on the main lcore's CPU it would hold up sluiced's control thread: that steps aside */
	nf->fifo_on_main = lcore_cpu_in(rte_get_main_lcore(), &cs) >= 0;
	if (nf->fifo_on_main && A.nfs++ == 0)
		threads_step_aside();
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
	fifo_reorder(); /* out of the helper's list before its rings go */
	if (nf->fifo_on_main) {
		nf->fifo_on_main = false;
		if (--A.nfs == 0)
			threads_go_back();
	}
}

void sched_chains_changed(void)
{
	if (M.cfg.nf_fifo)
		fifo_reorder();
}

/* ------------------------------------------------------------------------ */
/* the order helper                                                           */

void sched_fifo_kicked(void)
{
	if (O.efd < 0 || __atomic_load_n(&O.poked, __ATOMIC_RELAXED) ||
	    __atomic_exchange_n(&O.poked, 1, __ATOMIC_ACQ_REL))
		return;
	uint64_t one = 1;
	if (write(O.efd, &one, sizeof(one)) < 0) { /* EAGAIN: a poke is pending anyway */
	}
}

static uint64_t clock_us(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static void sleep_us(uint64_t us)
{
	struct timespec t = { .tv_sec = (time_t)(us / 1000000u), .tv_nsec = (long)(us % 1000000u) * 1000 };
	while (nanosleep(&t, &t) && errno == EINTR) {
	}
}

/* the only CPU `pid` may run on, or -1 (none readable, or several: no order to keep there) */
static int single_cpu(pid_t pid)
{
	cpu_set_t cs;
	if (sched_getaffinity(pid, sizeof(cs), &cs) || CPU_COUNT(&cs) != 1)
		return -1;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &cs))
			return c;
	return -1;
}

/* One pass: for each CPU that holds awake fifo NFs, move there (above them) and requeue them in chain
 * order. Asleep ones are left: their wake-up will be a kick, and a kick brings a pass. */
static void order_pass(void)
{
	pthread_mutex_lock(&O.lock);
	uint32_t n = O.n;
	struct order_member *m = O.member;
	for (uint32_t i = 0; i < n; i++)
		m[i].cpu = __atomic_load_n(m[i].need_kick, __ATOMIC_RELAXED) == 0 ? single_cpu(m[i].pid) : -1;
	for (uint32_t i = 0; i < n; i++) {
		int c = m[i].cpu;
		if (c < 0)
			continue;
		cpu_set_t here;
		CPU_ZERO(&here);
		CPU_SET(c, &here);
		/* a real-time thread pinned to c runs there at once: until it blocks, no NF of c moves */
		if (sched_setaffinity(0, sizeof(here), &here))
			continue;
		for (uint32_t j = i; j < n; j++) {
			if (m[j].cpu != c)
				continue;
			m[j].cpu = -1;
			struct sched_param now;
			int cur = sched_getscheduler(m[j].pid);
			if (cur < 0 || (cur & ~SCHED_RESET_ON_FORK) != SCHED_FIFO || sched_getparam(m[j].pid, &now) ||
			    now.sched_priority != NF_FIFO_PRIORITY)
				continue; /* gone (its pid maybe reused before the detach), or changed: not ours */
			if (fifo_requeue(m[j].pid) == 0)
				O.requeued++;
		}
	}
	O.passes++;
	pthread_mutex_unlock(&O.lock);
}

static void *order_main(void *arg)
{
	(void)arg;
	__atomic_store_n(&O.helper_tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	uint64_t last = 0, gap = REPAIR_GAP_US;
	while (!__atomic_load_n(&O.stop, __ATOMIC_ACQUIRE)) {
		uint64_t v;
		if (read(O.efd, &v, sizeof(v)) < 0)
			continue; /* EINTR */
		if (__atomic_load_n(&O.stop, __ATOMIC_ACQUIRE))
			break;
		uint64_t now = clock_us(CLOCK_MONOTONIC), wait = REPAIR_DELAY_US;
		if (last + gap > now + wait)
			wait = last + gap - now;
		sleep_us(wait);
		__atomic_store_n(&O.poked, 0, __ATOMIC_RELEASE); /* kicks from here on bring another pass */
		uint64_t t0 = clock_us(CLOCK_THREAD_CPUTIME_ID);
		order_pass();
		last = clock_us(CLOCK_MONOTONIC);
		/* its own CPU time, not the wall clock: a pass the real-time limit paused cost nothing */
		uint64_t cost = clock_us(CLOCK_THREAD_CPUTIME_ID) - t0;
		gap = 20 * cost > REPAIR_GAP_US ? 20 * cost : REPAIR_GAP_US; /* <= 5 % of a core */
	}
	return NULL;
}

int sched_start(void)
{
	if (!M.cfg.nf_fifo)
		return 0;
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
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setprotocol(&ma, PTHREAD_PRIO_INHERIT);
	pthread_mutex_init(&O.lock, &ma);
	pthread_mutexattr_destroy(&ma);
	O.efd = eventfd(0, EFD_CLOEXEC);
	if (O.efd < 0) {
		LOG("nf_sched fifo: eventfd: %s", strerror(errno));
		return -1;
	}
	pthread_attr_t ta;
	struct sched_param sp = { .sched_priority = ORDER_PRIORITY };
	pthread_attr_init(&ta);
	pthread_attr_setinheritsched(&ta, PTHREAD_EXPLICIT_SCHED);
	pthread_attr_setschedpolicy(&ta, SCHED_FIFO);
	pthread_attr_setschedparam(&ta, &sp);
	int e = pthread_create(&O.thread, &ta, order_main, NULL);
	O.boosted = e == 0;
	if (e == EPERM) { /* no CAP_SYS_NICE: then the NFs cannot be made real-time either; run it plain */
		LOG("nf_sched fifo: the order helper cannot be real-time (%s): NFs are queued in chain order when "
		    "they attach, not kept in it", strerror(e));
		e = pthread_create(&O.thread, NULL, order_main, NULL);
	}
	pthread_attr_destroy(&ta);
	if (e != 0) {
		LOG("nf_sched fifo: cannot start the order helper: %s", strerror(e));
		close(O.efd);
		O.efd = -1;
		return -1;
	}
	pthread_setname_np(O.thread, "sluiced-order");
	O.started = true;
	return 0;
}

/* the twin of sched_start (after the workers stopped: nothing pokes any more) */
void sched_stop(void)
{
	if (O.started) {
		__atomic_store_n(&O.stop, true, __ATOMIC_RELEASE);
		uint64_t one = 1;
		if (write(O.efd, &one, sizeof(one)) < 0) {
		}
		pthread_join(O.thread, NULL);
		O.started = false;
	}
	if (O.efd >= 0)
		close(O.efd);
	O.efd = -1;
	free(O.member);
	O.member = NULL;
	O.n = O.cap = 0;
}

json_t *sched_stats(void)
{
	pthread_mutex_lock(&O.lock);
	char aside[64] = ""; /* A: the control thread's own (it serves stats) */
	if (A.n > 0) {
		rte_cpuset_t from = rte_lcore_cpuset(rte_get_main_lcore());
		cpus_str(&from, aside, sizeof(aside));
	}
	json_t *j = json_pack("{s:s,s:b,s:I,s:I,s:I,s:I,s:s}", "policy", M.cfg.nf_fifo ? "fifo" : "other",
			      "order_helper", O.started && O.boosted, "fifo_nfs", (json_int_t)O.n, "order_passes",
			      (json_int_t)O.passes, "requeued", (json_int_t)O.requeued, "threads_aside",
			      (json_int_t)A.n, "aside_from", aside);
	pthread_mutex_unlock(&O.lock);
	return j;
}
