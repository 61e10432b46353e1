/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The group's loop: one thread turns every member -- a burst from its RX ring through its handler
 * onto its TX ring (sl_nf_poll) -- round after round. No process switch between members: on a core
 * shared with other NFs, the group is one runnable thread however many NFs it holds. With nothing
 * to do it spins (poll), or arms every member's RX ring and sleeps in one poll() on all their
 * eventfds and control sockets (block; adaptive after spin_us).
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "group.h"

/* As sl_nf_run does (nf.c SL_YIELD_*): a spinning group hands the core over after every empty round,
 * so processes sharing its core (a tester, NFs outside the group) run within microseconds, and
 * after every few busy rounds, so a loaded group does not hold it for a whole time slice. */
#define YIELD_BUSY 8              /* busy rounds between two sched_yield() */
#define CHECK_EVERY 64            /* empty rounds between two looks at the clock */
#define CHECK_NS 100000000ull     /* control sockets are looked at this often while polling */

volatile sig_atomic_t group_stop;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Every member's control socket: 0, or the first code (and *who). */
static int check_all(struct group *g, unsigned *who)
{
	for (unsigned i = 0; i < g->n; i++) {
		int rc = sl_nf_check(g->m[i].nf);
		if (rc < 0) {
			*who = i;
			return -rc;
		}
	}
	return 0;
}

/* Sleep until sluiced kicks a member or writes on a control socket. Returns 0, or a member's code. */
static int sleep_all(struct group *g, struct pollfd *pfd, unsigned *who)
{
	unsigned armed = 0;
	for (; armed < g->n; armed++) {
		int fds[2];
		if (!sl_nf_sleep_prepare(g->m[armed].nf, fds))
			break; /* input waits already: undo and go on turning */
		pfd[2 * armed] = (struct pollfd){ .fd = fds[0], .events = POLLIN };
		pfd[2 * armed + 1] = (struct pollfd){ .fd = fds[1], .events = POLLIN };
	}
	int slept = armed == g->n && !group_stop;
	if (slept && poll(pfd, 2 * (nfds_t)g->n, -1) < 0 && errno != EINTR) {
		perror("sluice-group: poll");
		slept = 0;
	}
	int sock_event = 0;
	for (unsigned i = 0; i < armed; i++) {
		sl_nf_sleep_done(g->m[i].nf);
		if (slept && pfd[2 * i + 1].revents)
			sock_event = 1;
	}
	return sock_event ? check_all(g, who) : 0;
}

int group_run(struct group *g, unsigned *who)
{
	struct pollfd *pfd = NULL;
	if (g->wakeup != SL_WAKE_POLL && (pfd = calloc(2 * (size_t)g->n, sizeof(*pfd))) == NULL) {
		fprintf(stderr, "sluice-group: %s: out of memory\n", g->name);
		return SL_ERR_NOMEM;
	}
	uint64_t next_check = now_ns() + CHECK_NS, idle_since = 0;
	uint32_t empty = 0, busy = 0;
	int code = 0;
	while (!group_stop && code == 0) {
		uint64_t done = 0;
		for (unsigned i = 0; i < g->n; i++) {
			struct member *m = &g->m[i];
			int n = sl_nf_poll(m->nf, m->p->handler, m->ctx);
			if (n < 0) {
				*who = i;
				code = -n;
				break;
			}
			done += (uint64_t)n;
		}
		if (code != 0)
			break;
		if (done != 0) {
			empty = 0;
			if (++busy % YIELD_BUSY == 0 && g->wakeup != SL_WAKE_BLOCK)
				sched_yield();
			continue;
		}
		if (empty++ == 0)
			idle_since = now_ns();
		if (g->wakeup == SL_WAKE_BLOCK ||
		    (g->wakeup == SL_WAKE_ADAPTIVE && empty % 64 == 0 && now_ns() - idle_since >= (uint64_t)g->spin_us * 1000)) {
			code = sleep_all(g, pfd, who);
			empty = 0;
			continue;
		}
		sched_yield();
		if (empty % CHECK_EVERY == 0) {
			uint64_t t = now_ns();
			if (t >= next_check) {
				next_check = t + CHECK_NS;
				code = check_all(g, who);
			}
		}
	}
	free(pfd);
	return code;
}
