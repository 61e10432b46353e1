/* SPDX-License-Identifier: BSD-3-Clause
 *
 * What one process switch costs on a core: the floor under the latency of NFs that share it
 * (bench/notes.md "The floor of a 3-NF chain on one core", BENCHMARKS.md "Machine").
 *
 *   sluice-bench-switchcost [--cpu N] [--procs K] [--yields Y]
 *
 * K processes pinned to CPU N, SCHED_FIFO priority 1 as sluiced.nf_sched fifo makes NFs, each
 * calling sched_yield() Y times: real-time tasks of one priority that yield take turns
 * round-robin, so every yield is one switch to the next process, as an NF handing a packet to its
 * next hop on the same core. The same with K threads of one process (no address-space switch), and
 * one process alone (the bare system call), for comparison. Prints one JSON line, times in ns:
 *   {"cpu", "procs", "yields", "policy", "switch_ns", "thread_switch_ns", "yield_alone_ns"}
 * policy is "fifo", or "other" where SCHED_FIFO is refused (then the fair scheduler picks the
 * order and a yield need not switch: the figure is a rough one). Exit status 1 on a bad argument
 * or a failure, with the reason on stderr.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROCS_MAX 64

static long yields = 100000;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *yield_loop(void *arg)
{
	(void)arg;
	for (long i = 0; i < yields; i++)
		sched_yield();
	return NULL;
}

/* k processes (or threads) yielding in turn; ns per yield over all of them */
static double ring(int k, int threads)
{
	double t0 = now_ns();
	if (threads) {
		pthread_t th[PROCS_MAX];
		int n = 0;
		for (; n < k; n++)
			if (pthread_create(&th[n], NULL, yield_loop, NULL) != 0)
				break;
		for (int i = 0; i < n; i++)
			pthread_join(th[i], NULL);
		if (n < k)
			return -1;
	} else {
		int n = 0;
		for (; n < k; n++) {
			pid_t p = fork();
			if (p < 0)
				break;
			if (p == 0) {
				yield_loop(NULL);
				_exit(0);
			}
		}
		int st, bad = n < k;
		while (wait(&st) > 0)
			bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
		if (bad)
			return -1;
	}
	return (now_ns() - t0) / ((double)yields * k);
}

static int parse_long(const char *what, const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno != 0 || *s == '\0' || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "sluice-bench-switchcost: --%s %s: want an integer in %ld..%ld\n", what, s, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	long cpu = 0, procs = 5;
	static const struct option opts[] = { { "cpu", required_argument, 0, 'c' },
					      { "procs", required_argument, 0, 'k' },
					      { "yields", required_argument, 0, 'y' },
					      { "help", no_argument, 0, 'h' },
					      { 0, 0, 0, 0 } };
	int o;
	while ((o = getopt_long(argc, argv, "c:k:y:h", opts, NULL)) != -1) {
		int rc = 0;
		switch (o) {
		case 'c': rc = parse_long("cpu", optarg, 0, CPU_SETSIZE - 1, &cpu); break;
		case 'k': rc = parse_long("procs", optarg, 2, PROCS_MAX, &procs); break;
		case 'y': rc = parse_long("yields", optarg, 1, 100000000, &yields); break;
		case 'h':
			printf("usage: sluice-bench-switchcost [--cpu N (default 0)] [--procs K (2..%d, default 5)]\n"
			       "                               [--yields Y (default 100000)]\n", PROCS_MAX);
			return 0;
		default: rc = -1; break;
		}
		if (rc != 0)
			return 1;
	}
	if (optind != argc) {
		fprintf(stderr, "sluice-bench-switchcost: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 1;
	}
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET((int)cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0) {
		fprintf(stderr, "sluice-bench-switchcost: cannot pin to CPU %ld: %s\n", cpu, strerror(errno));
		return 1;
	}
	/* children and threads inherit both; SCHED_RESET_ON_FORK is not set, so they keep FIFO */
	struct sched_param sp = { .sched_priority = 1 };
	const char *policy = sched_setscheduler(0, SCHED_FIFO, &sp) == 0 ? "fifo" : "other";
	double alone = ring(1, 1), procs_ns = ring((int)procs, 0), threads_ns = ring((int)procs, 1);
	if (alone < 0 || procs_ns < 0 || threads_ns < 0) {
		fprintf(stderr, "sluice-bench-switchcost: could not start %ld processes or threads\n", procs);
		return 1;
	}
	printf("{\"cpu\": %ld, \"procs\": %ld, \"yields\": %ld, \"policy\": \"%s\", \"switch_ns\": %.0f, "
	       "\"thread_switch_ns\": %.0f, \"yield_alone_ns\": %.0f}\n",
	       cpu, procs, yields, policy, procs_ns, threads_ns, alone);
	return 0;
}
