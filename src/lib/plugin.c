/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The process form of a plugin NF (nf_plugin.h): the SDK's main(). The option parsing is shared
 * with hosts that run many NFs in one process (sluice-group), which call sl_nf_plugin_args once
 * per member.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/nf_plugin.h"
#include "sl_internal.h"

static enum sl_sandbox process_sandbox = SL_SANDBOX_NONE;

enum sl_sandbox sl_nf_process_sandbox(void) { return process_sandbox; }
void sl_nf_set_process_sandbox(enum sl_sandbox mode) { process_sandbox = mode; }

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
#define N_APP_MAX 32

static void usage(const struct sl_nf_plugin *p, const char *prog, FILE *f)
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
		prog, p->about ? p->about : "", p->name, p->name, p->opts_help ? p->opts_help : "");
}

static int bad(const char *prog, const char *flag, const char *val, const char *why)
{
	fprintf(stderr, "%s: --%s '%s': %s\n", prog, flag, val, why);
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

static int common_opt(const char *prog, struct sl_nf_config *cfg, int opt, const char *arg)
{
	switch (opt) {
	case OPT_NAME:
	case OPT_SERVICE: {
		const char *flag = opt == OPT_NAME ? "name" : "service";
		if (!sl__name_ok(arg, SL_NAME_MAX)) /* the manager's rule (sl_msg_check of INIT) */
			return bad(prog, flag, arg, "expected 1-31 characters of [A-Za-z0-9_.-]");
		snprintf(opt == OPT_NAME ? cfg->name : cfg->service, SL_NAME_MAX, "%s", arg);
		return 0;
	}
	case OPT_SOCKET:
		if (arg[0] == '\0' || strlen(arg) >= sizeof(cfg->socket_path))
			return bad(prog, "socket", arg, "empty or too long");
		snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s", arg);
		return 0;
	case OPT_WAKEUP:
		if (sl_wakeup_parse(arg, &cfg->wakeup) < 0)
			return bad(prog, "wakeup", arg, "expected poll, block or adaptive");
		return 0;
	case OPT_BATCH:
		if (parse_u32(arg, 1, 65536, &cfg->batch) < 0)
			return bad(prog, "batch", arg, "expected 1..65536");
		return 0;
	case OPT_TIMEOUT_US:
		if (parse_u32(arg, 0, 10000000, &cfg->timeout_us) < 0)
			return bad(prog, "timeout-us", arg, "expected 0..10000000");
		return 0;
	case OPT_SPIN_US:
		if (parse_u32(arg, 0, 10000000, &cfg->spin_us) < 0)
			return bad(prog, "spin-us", arg, "expected 0..10000000");
		return 0;
	case OPT_SANDBOX:
		if (strcmp(arg, "none") == 0)
			cfg->sandbox = SL_SANDBOX_NONE;
		else if (strcmp(arg, "strict") == 0)
			cfg->sandbox = SL_SANDBOX_STRICT;
		else
			return bad(prog, "sandbox", arg, "expected strict or none");
		return 0;
	default:
		return -1;
	}
}

int sl_nf_plugin_args(const struct sl_nf_plugin *p, const char *prog, int argc, char **argv,
		      struct sl_nf_config *cfg, void *ctx)
{
	struct option opts[N_COMMON + N_APP_MAX + 1];
	size_t n = 0;

	memcpy(opts, common_opts, sizeof(common_opts));
	for (const struct option *o = p->opts; o != NULL && o->name != NULL; o++) {
		if (n == N_APP_MAX) {
			fprintf(stderr, "%s: the NF declares more than %d options\n", prog, N_APP_MAX);
			return -1;
		}
		opts[N_COMMON + n++] = *o;
	}
	memset(&opts[N_COMMON + n], 0, sizeof(opts[0]));

	optind = 0; /* GNU getopt: a full reset, so every instance's arguments parse from the start */
	opterr = 1;
	int opt;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == OPT_HELP) {
			usage(p, prog, stdout);
			return 1;
		}
		if (opt == '?' || opt == ':') {
			usage(p, prog, stderr);
			return -1;
		}
		int rc;
		if (opt >= SL_NF_OPT_APP) {
			if (p->opt == NULL) {
				fprintf(stderr, "%s: option %d has no handler\n", prog, opt);
				return -1;
			}
			rc = p->opt(ctx, opt, optarg);
		} else {
			rc = common_opt(prog, cfg, opt, optarg);
		}
		if (rc < 0)
			return -1;
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
		return -1;
	}
	return 0;
}

int sl_nf_plugin_main(int argc, char **argv, const struct sl_nf_plugin *p)
{
	const char *why = sl_nf_plugin_refusal(p);
	char prog[64];
	struct sl_nf_config cfg;

	if (why != NULL) {
		fprintf(stderr, "sluice-nf: %s\n", why);
		return 1;
	}
	snprintf(prog, sizeof(prog), "sluice-nf-%s", p->name);
	void *ctx = NULL;
	if (p->ctx_size != 0) {
		if ((ctx = calloc(1, p->ctx_size)) == NULL) {
			fprintf(stderr, "%s: cannot allocate its state (%zu bytes)\n", prog, p->ctx_size);
			return 1;
		}
		if (p->ctx_defaults != NULL)
			memcpy(ctx, p->ctx_defaults, p->ctx_size);
	}
	sl_nf_config_default(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "%s", p->name);
	snprintf(cfg.service, sizeof(cfg.service), "%s", p->name);
	if (sl_nf_config_from_env(&cfg) < 0) {
		free(ctx);
		return 1;
	}
	int rc = sl_nf_plugin_args(p, prog, argc, argv, &cfg, ctx);
	if (rc != 0) {
		free(ctx);
		return rc > 0 ? 0 : 2;
	}
	sl_nf_set_process_sandbox(cfg.sandbox);
	/* A stray reload or dump signal must not kill an NF that has no use for it (SIGHUP sent to
	 * every NF of a chain, say); NFs that do use them install handlers in start(). */
	signal(SIGHUP, SIG_IGN);
	signal(SIGUSR1, SIG_IGN);
	if (p->start != NULL && p->start(ctx) < 0) {
		free(ctx);
		return 1;
	}

	struct sl_nf *nf;
	rc = sl_nf_attach(&cfg, &nf);
	if (rc < 0) {
		int e = errno;
		if (cfg.sock_fd >= 0)
			fprintf(stderr, "%s: cannot attach to sluiced over fd %d (SLUICE_NF_FD) as '%s': %s", prog,
				cfg.sock_fd, cfg.name, sl_strerror(-rc));
		else
			fprintf(stderr, "%s: cannot attach to sluiced at %s as '%s': %s", prog, cfg.socket_path,
				cfg.name, sl_strerror(-rc));
		if (rc == -SL_ERR_IO && e != 0)
			fprintf(stderr, " (%s)", strerror(e));
		fputc('\n', stderr);
		if (p->finish != NULL)
			p->finish(ctx, NULL);
		free(ctx);
		return 1;
	}
	if (p->attached != NULL && p->attached(nf, ctx) < 0) {
		if (p->finish != NULL)
			p->finish(ctx, NULL);
		sl_nf_detach(nf);
		free(ctx);
		return 1;
	}
	rc = sl_nf_run(nf, p->handler, ctx);

	struct sl_nf_stats st;
	sl_nf_get_stats(nf, &st);
	fprintf(stderr, "%s: name=%s nf_id=%u rx=%llu tx=%llu batches=%llu sleeps=%llu wakeups=%llu", prog,
		sl_nf_name(nf), sl_nf_id(nf), (unsigned long long)st.rx_pkts, (unsigned long long)st.tx_pkts,
		(unsigned long long)st.batches, (unsigned long long)st.sleeps, (unsigned long long)st.wakeups);
	if (p->finish != NULL)
		p->finish(ctx, stderr);
	fprintf(stderr, " exit=%s\n", rc == 0 ? "stopped" : sl_strerror(-rc));
	sl_nf_detach(nf);
	free(ctx);
	/* an orderly manager shutdown is a normal end too */
	return rc == 0 || rc == -SL_ERR_SHUTDOWN ? 0 : 1;
}
