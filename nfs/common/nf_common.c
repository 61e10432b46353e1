/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nf_common.h"

/* What SIGHUP says under sandbox strict (no file can be opened once the loop runs). */
static const char hup_refused[] = "sluice-nf: SIGHUP: reload is not available under sandbox: strict "
				  "(the NF cannot open files); restart it to load a changed file\n";

static int sandbox_strict(void)
{
	return sl_nf_process_sandbox() == SL_SANDBOX_STRICT;
}

/* ---- helpers for NFs that report statistics ---- */

int nf_parse_u64(const char *prog, const char *flag, const char *s, uint64_t lo, uint64_t hi,
		 uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v < lo || v > hi) {
		fprintf(stderr, "%s: --%s '%s': expected %llu..%llu\n", prog, flag, s,
			(unsigned long long)lo, (unsigned long long)hi);
		return -1;
	}
	*out = v;
	return 0;
}

volatile sig_atomic_t nf_usr1_gen;
volatile sig_atomic_t nf_hup_gen;

static void on_usr1(int signo)
{
	(void)signo;
	nf_usr1_gen++;
}

static void on_hup(int signo)
{
	(void)signo;
	nf_hup_gen++;
}

static void catch(int signo, void (*fn)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART; /* the SDK's waits must not fail with EINTR because of it */
	sigaction(signo, &sa, NULL);
}

void nf_catch_usr1(void)
{
	catch(SIGUSR1, on_usr1);
}

/* Under sandbox strict a reload cannot open its file: say so instead of dying in the filter. */
static void on_hup_refused(int signo)
{
	(void)signo;
	int e = errno;
	ssize_t n = write(STDERR_FILENO, hup_refused, sizeof(hup_refused) - 1);
	(void)n;
	errno = e;
}

void nf_catch_hup(void)
{
	catch(SIGHUP, sandbox_strict() ? on_hup_refused : on_hup);
}

uint64_t *nf_counter(struct sl_nf *nf, const char *name, uint64_t *fallback)
{
	uint64_t *c = nf ? sl_nf_counter(nf, name) : NULL;
	return c ? c : fallback;
}

int nf_write_file(const char *prog, const char *path, int (*fill)(FILE *f, void *ctx), void *ctx)
{
	char tmp[4096];
	if (sandbox_strict()) {
		fprintf(stderr, "%s: not writing %s: the NF cannot open files under sandbox: strict\n", prog, path);
		return -1;
	}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
		fprintf(stderr, "%s: path too long: %s\n", prog, path);
		return -1;
	}
	FILE *f = fopen(tmp, "w");
	if (f == NULL) {
		fprintf(stderr, "%s: cannot write %s: %s\n", prog, tmp, strerror(errno));
		return -1;
	}
	int bad = fill(f, ctx) < 0;
	if (fclose(f) != 0 || bad) {
		fprintf(stderr, "%s: error writing %s\n", prog, tmp);
		remove(tmp);
		return -1;
	}
	if (rename(tmp, path) != 0) {
		fprintf(stderr, "%s: cannot rename %s to %s: %s\n", prog, tmp, path, strerror(errno));
		remove(tmp);
		return -1;
	}
	return 0;
}
