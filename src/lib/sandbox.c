/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libsluice: the strict sandbox's system call filter (docs/abi.md "Sandbox").
 *
 * sl_nf_run installs it before its loop when the NF runs with sandbox strict (SLUICE_NF_SANDBOX,
 * set by `sluice up` for `nfs[].sandbox: strict`). It allows what the run loop, stdio, malloc and
 * threads already running need, on every thread of the process (TSYNC), and nothing else: a refused
 * call raises SIGSYS (SECCOMP_RET_TRAP), whose handler writes one line naming the call to stderr and
 * exits with SL_SANDBOX_EXIT (159 = 128 + SIGSYS). The list and the reason for each entry are in
 * docs/abi.md; tests/unit/test_sandbox.c checks both sides of it.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <seccomp.h>

#include "sluice/nf.h"
#include "sl_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
/* LeakSanitizer's check at exit stops the threads with ptrace, which the filter refuses: check now,
 * before the filter (the check at exit is then skipped; leaks made later go unreported). */
#define LEAK_CHECK_NOW() __lsan_do_leak_check()
#else
#define LEAK_CHECK_NOW() ((void)0)
#endif

/* Names of the system calls the SIGSYS handler may have to report, resolved by libseccomp before
 * the filter is installed (the handler itself may only use async-signal-safe calls). */
#define NAMES_MAX 512
#define NAME_LEN  32
static char names[NAMES_MAX][NAME_LEN];

/* append s to buf (at most cap bytes in all); returns the new length */
static size_t put(char *buf, size_t len, size_t cap, const char *s)
{
	while (*s != '\0' && len < cap)
		buf[len++] = *s++;
	return len;
}

static size_t put_num(char *buf, size_t len, size_t cap, long v)
{
	char d[24];
	size_t n = 0;
	unsigned long u = v < 0 ? 0ul - (unsigned long)v : (unsigned long)v;
	do
		d[n++] = (char)('0' + u % 10);
	while ((u /= 10) != 0);
	if (v < 0 && len < cap)
		buf[len++] = '-';
	while (n > 0 && len < cap)
		buf[len++] = d[--n];
	return len;
}

static void on_sigsys(int signo, siginfo_t *si, void *uc)
{
	(void)signo;
	(void)uc;
	char line[160];
	size_t n = 0;
	int nr = si->si_syscall;
	n = put(line, n, sizeof(line), "sluice-nf: sandbox: system call ");
	if (nr >= 0 && nr < NAMES_MAX && names[nr][0] != '\0') {
		n = put(line, n, sizeof(line), names[nr]);
		n = put(line, n, sizeof(line), " (");
		n = put_num(line, n, sizeof(line), nr);
		n = put(line, n, sizeof(line), ")");
	} else {
		n = put_num(line, n, sizeof(line), nr);
	}
	n = put(line, n, sizeof(line), " is not allowed (sandbox: strict); exiting\n");
	ssize_t w = write(STDERR_FILENO, line, n);
	(void)w;
	_exit(SL_SANDBOX_EXIT);
}

static void resolve_names(void)
{
	for (int nr = 0; nr < NAMES_MAX; nr++) {
		if (names[nr][0] != '\0')
			continue;
		char *s = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
		if (s != NULL) {
			strncpy(names[nr], s, NAME_LEN - 1);
			free(s);
		}
	}
}

/* Allowed without looking at the arguments (docs/abi.md lists why each is needed). */
static const int plain[] = {
	/* the rings' eventfds, stdout/stderr and files the NF opened before attach */
	SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(writev), SCMP_SYS(close),
	/* stdio on those fds */
	SCMP_SYS(fstat), SCMP_SYS(newfstatat), SCMP_SYS(lseek), SCMP_SYS(fsync), SCMP_SYS(fdatasync),
	/* the wait on the RX eventfd and the socket */
	SCMP_SYS(poll), SCMP_SYS(ppoll),
	/* malloc and thread stacks (mmap and mprotect below, without PROT_EXEC) */
	SCMP_SYS(brk), SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(madvise),
	/* threads: locks, giving the core away, a thread that ends; one started just before the
	 * filter may still be registering itself with the kernel (rseq, robust futex list) */
	SCMP_SYS(futex), SCMP_SYS(sched_yield), SCMP_SYS(exit), SCMP_SYS(exit_group),
	SCMP_SYS(rseq), SCMP_SYS(set_robust_list),
	/* signals: handlers, masks, waits (monitor's helper thread) */
	SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigtimedwait),
	SCMP_SYS(restart_syscall), SCMP_SYS(getpid), SCMP_SYS(gettid),
	/* a thread's alternate signal stack and CPU set (the sanitizers' runtime, pthread_getattr_np) */
	SCMP_SYS(sigaltstack), SCMP_SYS(sched_getaffinity),
	/* time (normally the vDSO, without a system call) */
	SCMP_SYS(clock_gettime), SCMP_SYS(gettimeofday), SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep),
};

int sl__sandbox_strict(int sock)
{
	/* localtime() reads /etc/localtime once; afterwards it could not (ids' alert times) */
	tzset();
	resolve_names();
	LEAK_CHECK_NOW();

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigsys;
	sa.sa_flags = SA_SIGINFO;
	sigfillset(&sa.sa_mask);
	if (sigaction(SIGSYS, &sa, NULL) < 0)
		return -errno;

	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_TRAP);
	if (ctx == NULL)
		return -ENOMEM;
	const scmp_datum_t pid = (scmp_datum_t)getpid();
	int rc = 0;
	/* every thread (monitor's helper runs already), no new privileges, another ABI (i386) killed */
	if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1)) < 0 ||
	    (rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1)) < 0 ||
	    (rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0)
		goto out;
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, plain[i], 0)) < 0)
			goto out;
	/* the attach socket only: DISCONNECT both ways, the end of the connection */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(recvmsg), 1,
				   SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)sock))) < 0 ||
	    (rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(sendto), 1,
				   SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)sock))) < 0 ||
	    (rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(sendmsg), 1,
				   SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)sock))) < 0 ||
	    (rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(shutdown), 1,
				   SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)sock))) < 0)
		goto out;
	/* memory, never executable: no new code can be mapped */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
				   SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0))) < 0 ||
	    (rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
				   SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0))) < 0)
		goto out;
	/* handlers for every signal but SIGSYS (the sandbox's report stays in place) */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(rt_sigaction), 1,
				   SCMP_A0(SCMP_CMP_NE, SIGSYS))) < 0)
		goto out;
	/* signals to itself only: raise(), abort(), pthread_kill() */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1, SCMP_A0(SCMP_CMP_EQ, pid))) < 0 ||
	    (rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(kill), 1, SCMP_A0(SCMP_CMP_EQ, pid))) < 0)
		goto out;
	/* stdio asks whether stdout is a terminal (isatty) */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
				   SCMP_A1(SCMP_CMP_EQ, (scmp_datum_t)TCGETS))) < 0)
		goto out;
	rc = seccomp_load(ctx);
out:
	seccomp_release(ctx);
	return rc < 0 ? rc : 0;
}
