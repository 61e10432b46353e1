/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sl__rseq_unregister (src/lib/nf.c): a real-time NF lets go of the rseq area glibc registered for
 * its thread, since the kernel's rewrite of it after every switch is a fifth of a turn here.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "../../src/lib/sl_internal.h"

static struct rseq *area(void)
{
	return (struct rseq *)((char *)__builtin_thread_pointer() + __rseq_offset);
}

/* 0 when the kernel takes a registration of glibc's area for this thread: only possible if none is
 * registered now (a registered thread gets EBUSY) */
static int reregister(void)
{
	long rc = syscall(SYS_rseq, area(), __rseq_size, 0, RSEQ_SIG);
	if (rc != 0 && errno == EINVAL)
		rc = syscall(SYS_rseq, area(), 32, 0, RSEQ_SIG);
	return rc == 0 ? 0 : errno;
}

int main(void)
{
	if (__rseq_size == 0) {
		printf("test_rseq: glibc registered no rseq area here; only the no-op is checked\n");
		CHECK(sl__rseq_unregister() == 1);
		return 0;
	}
	/* glibc registered one at start-up: the kernel keeps cpu_id current */
	CHECK((int32_t)area()->cpu_id >= 0);
	CHECK_EQ(reregister(), EBUSY);

	CHECK(sl__rseq_unregister() == 1);
	CHECK((int32_t)area()->cpu_id < 0);  /* RSEQ_CPU_ID_UNINITIALIZED: the kernel let go */
	CHECK(sl__rseq_unregister() == 1);   /* again: already off, still a success */

	/* it was really gone: the kernel takes a new registration, and keeps cpu_id current again */
	CHECK_EQ(reregister(), 0);
	CHECK((int32_t)area()->cpu_id >= 0);
	CHECK(sl__rseq_unregister() == 1);
	CHECK((int32_t)area()->cpu_id < 0);

	printf("test_rseq: OK\n");
	return 0;
}
