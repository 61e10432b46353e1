/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nf_common.h"

static int sandbox_strict;      /* cfg.sandbox is strict: no file can be opened once the loop runs */
static char hup_refused[256];   /* what SIGHUP says then (written from the signal handler) */

enum {
	OPT_NAME = 0x100, OPT_SERVICE, OPT_SOCKET, OPT_WAKEUP, OPT_BATCH,
	OPT_TIMEOUT_US, OPT_SPIN_US, OPT_SANDBOX, OPT_HELP,
};

static const struct option common_opts[] = {
	{ "name", required_argument, NULL, OPT_NAME },
	{ "service", required_argument, NULL, OPT_SERVICE },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "wakeup", required_argument, NULL, OPT_WAKEUP },
	{ "batch", required_argument, NULL, OPT_BATCH },
	{ "timeout-us", required_argument, NULL, OPT_TIMEOUT_US },
	{ "spin-us", required_argument, NULL, OPT_SPIN_US },
	{ "sandbox", required_argument, NULL, OPT_SANDBOX },
	{ "help", no_argument, NULL, OPT_HELP },
};
#define N_COMMON (sizeof(common_opts) / sizeof(common_opts[0]))
#define N_APP_MAX 16

static void usage(const struct nf_app *app, FILE *f)
{
	fprintf(f,
		"usage: %s [options]\n"
		"%s\n\n"
		"  --name NAME        unique instance name (SLUICE_NF_NAME, default %s)\n"
		"  --service NAME     service it serves (SLUICE_NF_SERVICE, default %s)\n"
		"  --socket PATH      sluiced NF socket (SLUICE_NF_SOCKET, default /run/sluice/nf.sock)\n"
		"  --wakeup MODE      poll | block | adaptive (SLUICE_NF_WAKEUP, default poll)\n"
		"  --batch N          block mode: kick threshold (SLUICE_NF_BATCH, default 32)\n"
		"  --timeout-us N     block mode: aging deadline (SLUICE_NF_TIMEOUT_US, default 100)\n"
		"  --spin-us N        adaptive mode: spin before blocking (SLUICE_NF_SPIN_US, default 200)\n"
		"  --sandbox MODE     none | strict: a system call filter from the run loop on, docs/abi.md\n"
		"                     (SLUICE_NF_SANDBOX, default none)\n"
		"%s"
		"  --help             this text\n",
		app->prog, app->about, app->role, app->role, app->opts_help ? app->opts_help : "");
}

static int bad(const struct nf_app *app, const char *flag, const char *val, const char *why)
{
	fprintf(stderr, "%s: --%s '%s': %s\n", app->prog, flag, val, why);
	return -1;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v < lo || v > hi)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int set_str(const struct nf_app *app, const char *flag, const char *val, char *dst, size_t size)
{
	if (val[0] == '\0' || strlen(val) >= size)
		return bad(app, flag, val, "empty or too long");
	snprintf(dst, size, "%s", val);
	return 0;
}

/* The manager's rule for names (abi.h: sl_msg_check of INIT). */
static int name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n >= SL_NAME_MAX || strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
						     "0123456789_.-") != n)
		return 0;
	return 1;
}

static int common_opt(const struct nf_app *app, struct sl_nf_config *cfg, int opt, const char *arg)
{
	switch (opt) {
	case OPT_NAME:
		if (!name_ok(arg))
			return bad(app, "name", arg, "expected 1-31 characters of [A-Za-z0-9_.-]");
		return set_str(app, "name", arg, cfg->name, sizeof(cfg->name));
	case OPT_SERVICE:
		if (!name_ok(arg))
			return bad(app, "service", arg, "expected 1-31 characters of [A-Za-z0-9_.-]");
		return set_str(app, "service", arg, cfg->service, sizeof(cfg->service));
	case OPT_SOCKET:
		return set_str(app, "socket", arg, cfg->socket_path, sizeof(cfg->socket_path));
	case OPT_WAKEUP:
		if (strcmp(arg, "poll") == 0)
			cfg->wakeup = SL_WAKE_POLL;
		else if (strcmp(arg, "block") == 0)
			cfg->wakeup = SL_WAKE_BLOCK;
		else if (strcmp(arg, "adaptive") == 0)
			cfg->wakeup = SL_WAKE_ADAPTIVE;
		else
			return bad(app, "wakeup", arg, "expected poll, block or adaptive");
		return 0;
	case OPT_BATCH:
		if (parse_u32(arg, 1, 65536, &cfg->batch) < 0)
			return bad(app, "batch", arg, "expected 1..65536");
		return 0;
	case OPT_TIMEOUT_US:
		if (parse_u32(arg, 0, 10000000, &cfg->timeout_us) < 0)
			return bad(app, "timeout-us", arg, "expected 0..10000000");
		return 0;
	case OPT_SPIN_US:
		if (parse_u32(arg, 0, 10000000, &cfg->spin_us) < 0)
			return bad(app, "spin-us", arg, "expected 0..10000000");
		return 0;
	case OPT_SANDBOX:
		if (strcmp(arg, "none") == 0)
			cfg->sandbox = SL_SANDBOX_NONE;
		else if (strcmp(arg, "strict") == 0)
			cfg->sandbox = SL_SANDBOX_STRICT;
		else
			return bad(app, "sandbox", arg, "expected strict or none");
		return 0;
	default:
		return -1;
	}
}

int nf_app_main(int argc, char **argv, const struct nf_app *app)
{
	struct option opts[N_COMMON + N_APP_MAX + 1];
	struct sl_nf_config cfg;
	size_t n = 0;

	memcpy(opts, common_opts, sizeof(common_opts));
	for (const struct option *o = app->opts; o != NULL && o->name != NULL && n < N_APP_MAX; o++)
		opts[N_COMMON + n++] = *o;
	memset(&opts[N_COMMON + n], 0, sizeof(opts[0]));

	sl_nf_config_default(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "%s", app->role);
	snprintf(cfg.service, sizeof(cfg.service), "%s", app->role);
	if (sl_nf_config_from_env(&cfg) < 0)
		return 1;

	int opt;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == OPT_HELP) {
			usage(app, stdout);
			return 0;
		}
		if (opt == '?' || opt == ':') {
			usage(app, stderr);
			return 2;
		}
		int rc = opt >= NF_OPT_APP ? app->opt(app->ctx, opt, optarg) : common_opt(app, &cfg, opt, optarg);
		if (rc < 0)
			return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", app->prog, argv[optind]);
		return 2;
	}
	/* under sandbox strict no file can be opened once the loop runs: reloads and dumps say so */
	sandbox_strict = cfg.sandbox == SL_SANDBOX_STRICT;
	snprintf(hup_refused, sizeof(hup_refused),
		 "%s: SIGHUP: reload is not available under sandbox: strict (the NF cannot open files); "
		 "restart it to load a changed file\n", app->prog);
	/* A stray reload or dump signal must not kill an NF that has no use for it (SIGHUP sent to
	 * every NF of a chain, say); NFs that do use them install handlers in start(). */
	signal(SIGHUP, SIG_IGN);
	signal(SIGUSR1, SIG_IGN);
	if (app->start != NULL && app->start(app->ctx) < 0)
		return 1;

	struct sl_nf *nf;
	int rc = sl_nf_attach(&cfg, &nf);
	if (rc < 0) {
		int e = errno;
		if (cfg.sock_fd >= 0)
			fprintf(stderr, "%s: cannot attach to sluiced over fd %d (SLUICE_NF_FD) as '%s': %s",
				app->prog, cfg.sock_fd, cfg.name, sl_strerror(-rc));
		else
			fprintf(stderr, "%s: cannot attach to sluiced at %s as '%s': %s", app->prog,
				cfg.socket_path, cfg.name, sl_strerror(-rc));
		if (rc == -SL_ERR_IO && e != 0)
			fprintf(stderr, " (%s)", strerror(e));
		fputc('\n', stderr);
		if (app->finish != NULL)
			app->finish(app->ctx, NULL);
		return 1;
	}

	if (app->attached != NULL && app->attached(nf, app->ctx) < 0) {
		if (app->finish != NULL)
			app->finish(app->ctx, NULL);
		sl_nf_detach(nf);
		return 1;
	}
	rc = sl_nf_run(nf, app->handler, app->ctx);

	struct sl_nf_stats st;
	sl_nf_get_stats(nf, &st);
	fprintf(stderr, "%s: name=%s nf_id=%u rx=%llu tx=%llu batches=%llu sleeps=%llu wakeups=%llu",
		app->prog, sl_nf_name(nf), sl_nf_id(nf), (unsigned long long)st.rx_pkts,
		(unsigned long long)st.tx_pkts, (unsigned long long)st.batches,
		(unsigned long long)st.sleeps, (unsigned long long)st.wakeups);
	if (app->finish != NULL)
		app->finish(app->ctx, stderr);
	fprintf(stderr, " exit=%s\n", rc == 0 ? "stopped" : sl_strerror(-rc));
	sl_nf_detach(nf);
	/* an orderly manager shutdown is a normal end too */
	return rc == 0 || rc == -SL_ERR_SHUTDOWN ? 0 : 1;
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

volatile sig_atomic_t nf_usr1_pending;
volatile sig_atomic_t nf_hup_pending;

static void on_usr1(int signo)
{
	(void)signo;
	nf_usr1_pending = 1;
}

static void on_hup(int signo)
{
	(void)signo;
	nf_hup_pending = 1;
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
	ssize_t n = write(STDERR_FILENO, hup_refused, strlen(hup_refused));
	(void)n;
	errno = e;
}

void nf_catch_hup(void)
{
	catch(SIGHUP, sandbox_strict ? on_hup_refused : on_hup);
}

uint64_t *nf_counter(struct sl_nf *nf, const char *name, uint64_t *fallback)
{
	uint64_t *c = nf ? sl_nf_counter(nf, name) : NULL;
	return c ? c : fallback;
}

int nf_write_file(const char *prog, const char *path, int (*fill)(FILE *f, void *ctx), void *ctx)
{
	char tmp[4096];
	if (sandbox_strict) {
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
