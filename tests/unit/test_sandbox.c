/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for the strict sandbox's system call filter (src/lib/sandbox.c, docs/abi.md "Sandbox"):
 * each case runs in a forked child that installs the filter and then does one thing. What the run
 * loop, stdio, malloc and threads need keeps working; anything else ends the child with status
 * SL_SANDBOX_EXIT (159) and one line on stderr naming the call. Also the configuration (the
 * SLUICE_NF_SANDBOX and SLUICE_NF_FD variables). The run loop under the filter, attached over an
 * inherited socket, is in test_nf_attach.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "check.h"
#include "sluice/nf.h"
#include "../../src/lib/sl_internal.h"

static int sock_pair[2]; /* [0] stands for the attach socket, [1] is the manager's end */
static int other_pair[2];
static pid_t parent;     /* the test process: another process the child must not reach */

/* ---- what a child does after installing the filter ---- */

static void *spin_thread(void *arg)
{
	volatile int *go = arg;
	while (!__atomic_load_n(go, __ATOMIC_ACQUIRE))
		sched_yield();
	/* a thread that existed before the filter is under it too (TSYNC) */
	int fd = open("/dev/null", O_RDONLY);
	(void)fd;
	return NULL;
}

static void *quiet_thread(void *arg)
{
	(void)arg;
	char *p = malloc(1 << 20); /* a new thread's first malloc maps its own arena */
	CHECK(p != NULL);
	memset(p, 1, 1 << 20);
	free(p);
	return NULL;
}

/* Everything the SDK's loop, stdio and malloc do (the strace of every library NF, docs/abi.md). */
static int allowed(const int *efd)
{
	uint64_t v = 1;
	CHECK(write(efd[1], &v, sizeof(v)) == sizeof(v));
	CHECK(read(efd[0], &v, sizeof(v)) == sizeof(v));
	struct pollfd p[2] = { { .fd = efd[0], .events = POLLIN }, { .fd = sock_pair[0], .events = POLLIN } };
	CHECK(poll(p, 2, 0) == 1 && p[1].revents == POLLIN); /* the manager's message waits */
	struct timespec ts = { 0, 0 };
	CHECK(ppoll(p, 1, &ts, NULL) == 0);
	/* the attach socket: DISCONNECT out, a message in, shutdown */
	char m[128] = "disconnect";
	CHECK(send(sock_pair[0], m, sizeof(m), MSG_NOSIGNAL) == sizeof(m));
	struct iovec iov = { .iov_base = m, .iov_len = sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	CHECK(recvmsg(sock_pair[0], &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) == sizeof(m));
	/* malloc: small (brk), large (mmap), realloc (mremap), free (munmap) */
	void *small = malloc(100), *big = malloc(8 << 20);
	CHECK(small != NULL && big != NULL);
	memset(big, 0, 8 << 20);
	big = realloc(big, 32 << 20);
	CHECK(big != NULL);
	free(big);
	free(small);
	void *rw = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(rw != MAP_FAILED);
	CHECK(mprotect(rw, 4096, PROT_READ) == 0);
	CHECK(madvise(rw, 4096, MADV_DONTNEED) == 0);
	CHECK(munmap(rw, 4096) == 0);
	/* stdio on stderr and on a file opened before */
	fprintf(stderr, "allowed: stdio works\n");
	struct stat st;
	CHECK(fstat(STDERR_FILENO, &st) == 0);
	/* time, yielding, sleeping */
	CHECK(clock_gettime(CLOCK_MONOTONIC, &ts) == 0);
	CHECK(syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts) == 0); /* without the vDSO */
	CHECK(sched_yield() == 0);
	/* local time (ids' alert lines): the time zone was read before the filter */
	time_t now = time(NULL);
	struct tm tm;
	CHECK(localtime_r(&now, &tm) != NULL && localtime(&now) != NULL);
	ts.tv_sec = 0;
	ts.tv_nsec = 1000;
	CHECK(nanosleep(&ts, NULL) == 0);
	/* signals: handlers (not SIGSYS's), masks, to itself */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
	CHECK(raise(SIGUSR2) == 0);
	CHECK(kill(getpid(), SIGUSR2) == 0);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	CHECK(sigprocmask(SIG_BLOCK, &set, NULL) == 0);
	CHECK(kill(getpid(), SIGUSR1) == 0);
	ts.tv_nsec = 0;
	CHECK(sigtimedwait(&set, NULL, &ts) == SIGUSR1);
	CHECK(getpid() > 0 && syscall(SYS_gettid) > 0);
	CHECK(close(efd[0]) == 0);
	return 0;
}

enum what {
	DO_ALLOWED, DO_OPEN, DO_SOCKET, DO_CONNECT, DO_EXECVE, DO_FORK, DO_THREAD, DO_PTRACE, DO_KILL_OTHER,
	DO_TGKILL_OTHER, DO_MMAP_EXEC, DO_MPROTECT_EXEC, DO_SIGSYS_HANDLER, DO_SEND_OTHER_FD,
	DO_RECV_OTHER_FD, DO_IOCTL, DO_OLD_THREAD, DO_UNSHARE,
};

static void child(enum what w)
{
	static volatile int go;
	pthread_t th;
	/* what must exist before the filter: a thread (TSYNC, and one that works on after it) */
	if (w == DO_OLD_THREAD)
		CHECK(pthread_create(&th, NULL, spin_thread, (void *)&go) == 0);
	if (w == DO_ALLOWED) {
		CHECK(pthread_create(&th, NULL, quiet_thread, NULL) == 0);
		char m[128] = "from the manager";
		CHECK(send(sock_pair[1], m, sizeof(m), MSG_NOSIGNAL) == sizeof(m));
	}
	int efd[2];
	CHECK(pipe(efd) == 0);

	int rc = sl__sandbox_strict(sock_pair[0]);
	if (rc != 0) {
		fprintf(stderr, "sl__sandbox_strict: %s\n", strerror(-rc));
		_exit(2);
	}
	switch (w) {
	case DO_ALLOWED:
		CHECK(pthread_join(th, NULL) == 0);
		_exit(allowed(efd));
	case DO_OPEN:
		open("/etc/hostname", O_RDONLY);
		break;
	case DO_SOCKET:
		socket(AF_INET, SOCK_DGRAM, 0);
		break;
	case DO_CONNECT:
		connect(other_pair[0], NULL, 0);
		break;
	case DO_EXECVE: {
		char *argv[] = { "/bin/true", NULL };
		execve(argv[0], argv, NULL);
		break;
	}
	case DO_FORK:
		fork();
		break;
	case DO_THREAD:
		pthread_create(&th, NULL, quiet_thread, NULL);
		break;
	case DO_PTRACE:
		ptrace(PTRACE_ATTACH, parent, NULL, NULL);
		break;
	case DO_KILL_OTHER:
		kill(parent, 0);
		break;
	case DO_TGKILL_OTHER:
		syscall(SYS_tgkill, parent, parent, 0);
		break;
	case DO_MMAP_EXEC:
		mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		break;
	case DO_MPROTECT_EXEC: {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(p != MAP_FAILED);
		mprotect(p, 4096, PROT_READ | PROT_EXEC);
		break;
	}
	case DO_SIGSYS_HANDLER: {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = SIG_IGN;
		sigaction(SIGSYS, &sa, NULL);
		break;
	}
	case DO_SEND_OTHER_FD:
		send(other_pair[0], "x", 1, MSG_NOSIGNAL);
		break;
	case DO_RECV_OTHER_FD: {
		char b[8];
		struct iovec iov = { .iov_base = b, .iov_len = sizeof(b) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		recvmsg(other_pair[0], &mh, MSG_DONTWAIT);
		break;
	}
	case DO_IOCTL: {
		int n;
		ioctl(efd[0], FIONREAD, &n);
		break;
	}
	case DO_OLD_THREAD:
		__atomic_store_n(&go, 1, __ATOMIC_RELEASE);
		pthread_join(th, NULL);
		break;
	case DO_UNSHARE:
		unshare(0);
		break;
	}
	_exit(3); /* the refused call came back: the filter let it through */
}

/* Run child(w) in a fork; returns its wait status, its stderr in err. */
static int run(enum what w, char *err, size_t errlen)
{
	int p[2];
	CHECK(pipe(p) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		dup2(p[1], STDERR_FILENO);
		close(p[1]);
		child(w);
		_exit(4);
	}
	close(p[1]);
	size_t got = 0;
	ssize_t n;
	while ((n = read(p[0], err + got, errlen - 1 - got)) > 0)
		got += (size_t)n;
	err[got] = '\0';
	close(p[0]);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	return status;
}

/* The child must die of the refused call: status 159 and the line naming it, or -- when the call is
 * made with every signal blocked, as glibc does around clone -- killed by SIGSYS by the kernel. */
static void expect_refused(enum what w, const char *call, int signals_blocked)
{
	char err[4096], want[128];
	int status = run(w, err, sizeof(err));
	snprintf(want, sizeof(want), "sluice-nf: sandbox: system call %s (", call);
	if (signals_blocked && WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS && err[0] == '\0')
		return;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != SL_SANDBOX_EXIT || strstr(err, want) == NULL ||
	    strstr(err, "is not allowed (sandbox: strict); exiting\n") == NULL) {
		fprintf(stderr, "case %d (%s): status 0x%x, stderr:\n%s\n", (int)w, call, status, err);
		CHECK(0);
	}
}

static void test_filter(void)
{
	char err[4096];
	int status = run(DO_ALLOWED, err, sizeof(err));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "allowed set: status 0x%x, stderr:\n%s\n", status, err);
		CHECK(0);
	}
	CHECK(strstr(err, "allowed: stdio works\n") != NULL);

	expect_refused(DO_OPEN, "openat", 0);
	expect_refused(DO_SOCKET, "socket", 0);
	expect_refused(DO_CONNECT, "connect", 0);
	expect_refused(DO_EXECVE, "execve", 0);
	expect_refused(DO_FORK, "clone", 0);
	expect_refused(DO_THREAD, "clone3", 1);
	expect_refused(DO_PTRACE, "ptrace", 0);
	expect_refused(DO_KILL_OTHER, "kill", 0);
	expect_refused(DO_TGKILL_OTHER, "tgkill", 0);
	expect_refused(DO_MMAP_EXEC, "mmap", 0);
	expect_refused(DO_MPROTECT_EXEC, "mprotect", 0);
	expect_refused(DO_SIGSYS_HANDLER, "rt_sigaction", 0);
	expect_refused(DO_SEND_OTHER_FD, "sendto", 0);
	expect_refused(DO_RECV_OTHER_FD, "recvmsg", 0);
	expect_refused(DO_IOCTL, "ioctl", 0);
	expect_refused(DO_OLD_THREAD, "openat", 0);
	expect_refused(DO_UNSHARE, "unshare", 0);
}

static void test_config(void)
{
	struct sl_nf_config c;
	sl_nf_config_default(&c);
	CHECK_EQ(c.sock_fd, -1);
	CHECK_EQ(c.sandbox, SL_SANDBOX_NONE);
	CHECK_EQ(sl_nf_config_from_env(&c), 0);
	CHECK_EQ(c.sock_fd, -1);
	setenv("SLUICE_NF_SANDBOX", "strict", 1);
	setenv("SLUICE_NF_FD", "7", 1);
	CHECK_EQ(sl_nf_config_from_env(&c), 0);
	CHECK_EQ(c.sandbox, SL_SANDBOX_STRICT);
	CHECK_EQ(c.sock_fd, 7);
	setenv("SLUICE_NF_SANDBOX", "none", 1);
	CHECK_EQ(sl_nf_config_from_env(&c), 0);
	CHECK_EQ(c.sandbox, SL_SANDBOX_NONE);
	const char *bad[][2] = {
		{ "SLUICE_NF_SANDBOX", "Strict" }, { "SLUICE_NF_SANDBOX", "" }, { "SLUICE_NF_FD", "-1" },
		{ "SLUICE_NF_FD", "3x" }, { "SLUICE_NF_FD", "" }, { "SLUICE_NF_FD", "99999999999" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char saved[64];
		snprintf(saved, sizeof(saved), "%s", getenv(bad[i][0]));
		setenv(bad[i][0], bad[i][1], 1);
		CHECK_EQ(sl_nf_config_from_env(&c), -SL_ERR_FIELD);
		setenv(bad[i][0], saved, 1);
	}
	unsetenv("SLUICE_NF_SANDBOX");
	unsetenv("SLUICE_NF_FD");

	/* an inherited fd that is no UNIX stream socket: refused, and closed */
	int p[2];
	CHECK(pipe(p) == 0);
	sl_nf_config_default(&c);
	c.sock_fd = p[0];
	struct sl_nf *nf = NULL;
	CHECK_EQ(sl_nf_attach(&c, &nf), -SL_ERR_IO);
	CHECK(nf == NULL);
	CHECK(fcntl(p[0], F_GETFD) < 0 && errno == EBADF);
	close(p[1]);
	/* an invalid config closes it too */
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, p) == 0);
	sl_nf_config_default(&c);
	c.sock_fd = p[0];
	snprintf(c.name, sizeof(c.name), "bad name");
	CHECK_EQ(sl_nf_attach(&c, &nf), -SL_ERR_FIELD);
	CHECK(fcntl(p[0], F_GETFD) < 0 && errno == EBADF);
	c.sock_fd = p[1];
	snprintf(c.name, sizeof(c.name), "ok");
	c.sandbox = (enum sl_sandbox)7;
	CHECK_EQ(sl_nf_attach(&c, &nf), -SL_ERR_FIELD);
	CHECK(fcntl(p[1], F_GETFD) < 0 && errno == EBADF);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	parent = getpid();
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sock_pair) == 0);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, other_pair) == 0);
	test_config();
	test_filter();
	printf("test_sandbox: ok\n");
	return 0;
}
