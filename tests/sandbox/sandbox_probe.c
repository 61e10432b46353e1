/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-sandbox-probe: a test NF for the strict sandbox (tests/integration/test_sandbox.py). It
 * passes every packet on (SL_ACT_NEXT) and, on each SIGUSR1, makes the system calls --try names, in
 * a helper thread started before the run loop (so the filter's TSYNC is exercised too):
 *
 *   write    a line on stderr (allowed)
 *   open     open /etc/passwd for reading (refused under strict)
 *   socket   an AF_INET UDP socket (refused under strict)
 *
 * Each result is one stderr line "sandbox-probe: ACTION: ok" or "sandbox-probe: ACTION: failed:
 * <error>"; under strict a refused call ends the process before that (the SDK's line, status 159).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/nf_common.h"

#define PROG "sluice-sandbox-probe"
#define TRY_MAX 8

enum { OPT_TRY = NF_OPT_APP };

struct probe {
	const char *try[TRY_MAX];
	unsigned ntry;
	uint64_t *c_usr1; /* SIGUSR1s taken (a counter sluiced reports: the test waits on it) */
	pthread_t helper;
	int helper_started;
};

static uint64_t no_counter;

static void act(const char *what)
{
	int fd = -1;
	if (strcmp(what, "write") == 0) {
		fprintf(stderr, "sandbox-probe: write: ok\n");
		return;
	}
	if (strcmp(what, "open") == 0)
		fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
	else if (strcmp(what, "socket") == 0)
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fprintf(stderr, "sandbox-probe: %s: failed: %s\n", what, strerror(errno));
		return;
	}
	close(fd);
	fprintf(stderr, "sandbox-probe: %s: ok\n", what);
}

static void *helper(void *arg)
{
	struct probe *p = arg;
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	for (;;) {
		int sig = 0;
		if (sigwait(&usr1, &sig) != 0 || sig != SIGUSR1)
			continue;
		if (__atomic_load_n(&p->ntry, __ATOMIC_ACQUIRE) == 0)
			break; /* finish(): stop */
		for (unsigned i = 0; i < p->ntry; i++)
			act(p->try[i]);
		__atomic_fetch_add(p->c_usr1, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	(void)nf;
	(void)arg;
	for (unsigned i = 0; i < n; i++)
		sl_pkt_set_action(&pkts[i], SL_ACT_NEXT, 0);
}

static int opt(void *ctx, int o, const char *arg)
{
	struct probe *p = ctx;
	if (o != OPT_TRY || p->ntry == TRY_MAX)
		return -1;
	if (strcmp(arg, "write") != 0 && strcmp(arg, "open") != 0 && strcmp(arg, "socket") != 0) {
		fprintf(stderr, PROG ": --try '%s': expected write, open or socket\n", arg);
		return -1;
	}
	p->try[p->ntry++] = arg;
	return 0;
}

static int start(void *ctx)
{
	(void)ctx;
	/* SIGUSR1 goes to the helper only (sigwait): block it before any thread exists */
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, NULL);
	return 0;
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct probe *p = ctx;
	p->c_usr1 = nf_counter(nf, "usr1", &no_counter);
	/* the helper takes no process signal but SIGUSR1 (sigwait) -- and not SIGSYS either way: a
	 * thread that blocks SIGSYS is killed by the kernel on a refused call, without the SDK's line */
	sigset_t all, old;
	sigfillset(&all);
	sigdelset(&all, SIGSYS);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int rc = pthread_create(&p->helper, NULL, helper, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		fprintf(stderr, PROG ": cannot start the helper thread: %s\n", strerror(rc));
		return -1;
	}
	p->helper_started = 1;
	fprintf(stderr, "sandbox-probe: attached, uid %u\n", (unsigned)getuid());
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct probe *p = ctx;
	(void)out;
	if (p->helper_started) {
		__atomic_store_n(&p->ntry, 0, __ATOMIC_RELEASE);
		pthread_kill(p->helper, SIGUSR1);
		pthread_join(p->helper, NULL);
	}
}

static const struct option opts[] = {
	{ "try", required_argument, NULL, OPT_TRY },
	{ NULL, 0, NULL, 0 },
};

/* SINGLE: the helper takes SIGUSR1 with sigwait after start() blocked it in the calling thread --
 * process-wide signal handling, one probe per process (it is a process only anyway: no .so). */
SL_NF_PLUGIN_REGISTER(
	.name = "probe",
	.about = "Sluice test NF: passes packets on; on SIGUSR1 makes the system calls --try names.",
	.opts = opts,
	.opts_help = "  --try ACTION       on SIGUSR1: write (a line), open (/etc/passwd), socket (AF_INET);\n"
		     "                     repeatable\n",
	.ctx_size = sizeof(struct probe),
	.flags = SL_NF_PLUGIN_F_SINGLE,
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
	.finish = finish,
)

int main(int argc, char **argv)
{
	return sl_nf_plugin_main(argc, argv, &sl_nf_plugin_v1);
}
