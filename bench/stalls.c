/* SPDX-License-Identifier: BSD-3-Clause
 *
 * How long a CPU is taken away from a thread that never gives it up: the floor under any latency
 * tail on this host (bench/notes.md "The tail floor: stalls of the CPU itself").
 *
 *   sluice-bench-stalls [--cpu N] [--seconds S] [--policy other|fifo]
 *
 * One thread pinned to CPU N reads the clock in a loop for S seconds; a gap between two reads longer
 * than 5 µs is time the CPU ran something else -- an interrupt, another task, or (in a guest) the
 * hypervisor. With --policy fifo the thread is SCHED_FIFO priority 99, so no task of this machine
 * preempts it, and it sleeps 6 ms every 100 ms so the kernel's real-time throttling (95 % of each
 * second by default, a setting of the whole host, left as it is) never stops it; those sleeps are not counted. What is left is what
 * no scheduling choice inside this machine removes.
 *
 * Prints one JSON line, times in µs:
 *   {"cpu", "policy", "seconds", "stalls_over": {"5": n, "10": n, "100": n, "1000": n},
 *    "max_us", "lost_share", "late_share_100us", "late_share_1000us", "steal_share"}
 * late_share_X is the share of the run's time at which a packet arriving would wait more than X µs
 * for this CPU (the sum over stalls of max(0, gap - X), over the run): the share of evenly arriving
 * packets that any path through this CPU delivers later than X, at least. steal_share is the
 * machine's steal time over the run (/proc/stat), for every CPU. Exit 1 on a bad argument.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* steal and total jiffies of the machine, from /proc/stat's first line */
static int read_steal(unsigned long long *steal, unsigned long long *total)
{
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return -1;
	unsigned long long v[8] = {0};
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
		       &v[6], &v[7]);
	fclose(f);
	if (n != 8)
		return -1;
	*steal = v[7];
	*total = 0;
	for (int i = 0; i < 8; i++)
		*total += v[i];
	return 0;
}

static void usage(FILE *to)
{
	fprintf(to, "usage: sluice-bench-stalls [--cpu N] [--seconds S] [--policy other|fifo]\n"
		    "  measures how long CPU N is taken from a thread that spins on it (JSON on stdout)\n");
}

int main(int argc, char **argv)
{
	int cpu = 0, fifo = 0;
	double seconds = 10;
	static const struct option opts[] = {
		{"cpu", required_argument, NULL, 'c'},
		{"seconds", required_argument, NULL, 's'},
		{"policy", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int o;
	while ((o = getopt_long(argc, argv, "c:s:p:h", opts, NULL)) != -1) {
		char *end;
		switch (o) {
		case 'c':
			cpu = (int)strtol(optarg, &end, 10);
			if (*end || cpu < 0) {
				fprintf(stderr, "sluice-bench-stalls: --cpu %s: not a CPU number\n", optarg);
				return 1;
			}
			break;
		case 's':
			seconds = strtod(optarg, &end);
			if (*end || !(seconds > 0 && seconds <= 3600)) {
				fprintf(stderr, "sluice-bench-stalls: --seconds %s: not in (0, 3600]\n", optarg);
				return 1;
			}
			break;
		case 'p':
			if (!strcmp(optarg, "fifo"))
				fifo = 1;
			else if (strcmp(optarg, "other")) {
				fprintf(stderr, "sluice-bench-stalls: --policy %s: not other or fifo\n", optarg);
				return 1;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sluice-bench-stalls: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 1;
	}
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0) {
		fprintf(stderr, "sluice-bench-stalls: CPU %d: %s\n", cpu, strerror(errno));
		return 1;
	}
	if (fifo) {
		struct sched_param sp = {.sched_priority = 99};
		if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
			fprintf(stderr, "sluice-bench-stalls: SCHED_FIFO: %s\n", strerror(errno));
			return 1;
		}
	}
	static const double limits[] = {5, 10, 100, 1000};
	unsigned long over[4] = {0};
	double max = 0, lost = 0, late100 = 0, late1000 = 0, slept = 0;
	unsigned long long s0, t0, s1, t1;
	int have_steal = read_steal(&s0, &t0) == 0;
	double start = now_us(), end = start + seconds * 1e6, prev = start, next_sleep = start + 100000;
	for (;;) {
		double t = now_us();
		double gap = t - prev;
		if (gap > limits[0]) {
			for (int i = 0; i < 4; i++)
				over[i] += gap > limits[i];
			if (gap > max)
				max = gap;
			lost += gap;
			late100 += gap > 100 ? gap - 100 : 0;
			late1000 += gap > 1000 ? gap - 1000 : 0;
		}
		if (t >= end)
			break;
		if (fifo && t >= next_sleep) { /* stay under the real-time throttling's 95 % */
			struct timespec ms = {0, 6000000};
			nanosleep(&ms, NULL);
			double back = now_us();
			slept += back - t;
			t = back;
			next_sleep = t + 100000;
		}
		prev = t;
	}
	double span = now_us() - start - slept;
	double steal = -1;
	if (have_steal && read_steal(&s1, &t1) == 0 && t1 > t0)
		steal = (double)(s1 - s0) / (double)(t1 - t0);
	printf("{\"cpu\": %d, \"policy\": \"%s\", \"seconds\": %.1f, \"stalls_over\": {\"5\": %lu, \"10\": %lu, "
	       "\"100\": %lu, \"1000\": %lu}, \"max_us\": %.1f, \"lost_share\": %.6f, \"late_share_100us\": %.7f, "
	       "\"late_share_1000us\": %.7f, \"steal_share\": %.4f}\n",
	       cpu, fifo ? "fifo" : "other", seconds, over[0], over[1], over[2], over[3], max, lost / span,
	       late100 / span, late1000 / span, steal);
	return 0;
}
