/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-group: runs several NFs -- members -- in one process and one thread (docs/groups.md).
 *
 *   sluice-group [--name G] [--plugin-dir DIR] [--socket PATH] [--wakeup MODE] [--spin-us N] [--no-fuse]
 *                -- NF [NF options] [-- NF [NF options]] ...
 *
 * Each member is a library (or out-of-tree) NF in its plugin form, sluice-nf-<NF>.so, with the
 * options its process form takes. Every member attaches to sluiced as an NF of its own, so sluiced
 * accounts, steers to and reports each one as it does a process. They share the address space:
 * groups are for NFs that trust each other (one trust domain); a crash of one ends them all, and the
 * supervisor restarts the group. Members that sluiced joins by a pipe run as one segment: the
 * upstream's NEXT packets go into the downstream's handler in the same turn (sl_nf_host).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group.h"
#include "loader.h"

#define PROG "sluice-group"

#ifndef SLUICE_PLUGIN_DIR_DEFAULT
#define SLUICE_PLUGIN_DIR_DEFAULT "/usr/local/lib/sluice/nfs"
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [options] -- NF [NF options] [-- NF [NF options]] ...\n"
		"Runs NFs as members of one process: one thread turns them all, each attached to sluiced as\n"
		"an NF of its own (docs/groups.md). NF is a plugin name (sluice-nf-NF.so); its options are\n"
		"those of sluice-nf-NF (--name and --service above all: every member needs a unique name).\n\n"
		"  --name G           the group's name in logs (default: group)\n"
		"  --plugin-dir DIR   where sluice-nf-*.so are (SLUICE_PLUGIN_DIR; default: the build tree's\n"
		"                     nfs/ next to this program, else " SLUICE_PLUGIN_DIR_DEFAULT ")\n"
		"  --socket PATH      every member's sluiced NF socket unless it names one (SLUICE_NF_SOCKET)\n"
		"  --wakeup MODE      poll | block | adaptive, for all members (SLUICE_NF_WAKEUP, default poll)\n"
		"  --spin-us N        adaptive: spin this long idle before sleeping (default 200)\n"
		"  --no-fuse          members sluiced joins by a pipe hand packets over through the pipe ring,\n"
		"                     in their next turn, not by a call in the same turn (for comparison)\n"
		"  --help             this text\n"
		"Member tokens: SLUICE_NF_TOKEN_<i> for member i (0, 1, ...), else SLUICE_NF_TOKEN.\n");
}

static void on_stop(int sig)
{
	(void)sig;
	group_stop = 1;
}

/* The build tree's nfs/ (this program is build/src/group/sluice-group), if its plugins are there. */
static const char *default_plugin_dir(char *buf, size_t size)
{
	const char *env = getenv("SLUICE_PLUGIN_DIR");
	if (env != NULL && env[0] != '\0')
		return env;
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash != NULL) {
			*slash = '\0';
			if ((size_t)snprintf(buf, size, "%.*s/../../nfs", (int)(size - 16), exe) >= size)
				return SLUICE_PLUGIN_DIR_DEFAULT;
			char probe[PATH_MAX + 32];
			snprintf(probe, sizeof(probe), "%s/sluice-nf-fwd.so", buf);
			if (access(probe, R_OK) == 0)
				return buf;
		}
	}
	return SLUICE_PLUGIN_DIR_DEFAULT;
}

/* Split argv after the group's options at every "--" into members. Returns the count, or -1. */
static int split_members(int argc, char **argv, int first, struct member **out)
{
	int n = 0;
	for (int i = first; i < argc; i++)
		if (strcmp(argv[i], "--") == 0)
			n++;
	if (n == 0 || (*out = calloc((size_t)n, sizeof(**out))) == NULL)
		return n == 0 ? 0 : -1;
	int k = -1;
	for (int i = first; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			k++;
			(*out)[k].argv = &argv[i + 1];
			continue;
		}
		(*out)[k].argc++;
	}
	return n;
}

/* The member's plugin, state and options. Returns 0, or -1 after a message. */
static int member_setup(struct group *g, unsigned i, const char *dir, const struct sl_nf_config *base)
{
	struct member *m = &g->m[i];
	char err[4200];
	if (m->argc == 0 || m->argv[0][0] == '-') {
		fprintf(stderr, PROG ": %s: member %u: expected an NF name after '--'%s%s\n", g->name, i,
			m->argc ? ", got " : "", m->argc ? m->argv[0] : "");
		return -1;
	}
	m->p = group_plugin_load(dir, m->argv[0], err, sizeof(err));
	if (m->p == NULL) {
		fprintf(stderr, PROG ": %s: member %u (%s): %s\n", g->name, i, m->argv[0], err);
		return -1;
	}
	if (m->p->flags & SL_NF_PLUGIN_F_SINGLE)
		for (unsigned j = 0; j < i; j++)
			if (g->m[j].p == m->p) {
				fprintf(stderr, PROG ": %s: member %u: %s runs once per process (members %u and %u)\n",
					g->name, i, m->p->name, j, i);
				return -1;
			}
	snprintf(m->prog, sizeof(m->prog), "sluice-nf-%s", m->p->name);
	if (m->p->ctx_size != 0) {
		if ((m->ctx = calloc(1, m->p->ctx_size)) == NULL) {
			fprintf(stderr, PROG ": %s: member %u: out of memory\n", g->name, i);
			return -1;
		}
		if (m->p->ctx_defaults != NULL)
			memcpy(m->ctx, m->p->ctx_defaults, m->p->ctx_size);
	}
	m->cfg = *base;
	snprintf(m->cfg.name, sizeof(m->cfg.name), "%s", m->p->name);
	snprintf(m->cfg.service, sizeof(m->cfg.service), "%s", m->p->name);
	char var[40];
	snprintf(var, sizeof(var), "SLUICE_NF_TOKEN_%u", i);
	const char *tok = getenv(var);
	if (tok != NULL)
		snprintf(m->cfg.token, sizeof(m->cfg.token), "%s", tok);
	int rc = sl_nf_plugin_args(m->p, m->prog, m->argc, m->argv, &m->cfg, m->ctx);
	if (rc != 0)
		return rc > 0 ? 1 : -1;
	if (m->cfg.wakeup != g->wakeup) {
		fprintf(stderr, PROG ": %s: member %u (%s): --wakeup differs from the group's: one thread "
			"turns every member, so they share one mode (set the group's --wakeup)\n", g->name, i,
			m->cfg.name);
		return -1;
	}
	if (m->cfg.sandbox != SL_SANDBOX_NONE) {
		fprintf(stderr, PROG ": %s: member %u (%s): --sandbox strict is per process: run it as a "
			"process, not in a group\n", g->name, i, m->cfg.name);
		return -1;
	}
	for (unsigned j = 0; j < i; j++)
		if (strcmp(g->m[j].cfg.name, m->cfg.name) == 0) {
			fprintf(stderr, PROG ": %s: members %u and %u are both named '%s': give each --name\n",
				g->name, j, i, m->cfg.name);
			return -1;
		}
	return 0;
}

static void summary(const struct member *m)
{
	struct sl_nf_stats st;
	sl_nf_get_stats(m->nf, &st);
	fprintf(stderr, "%s: name=%s nf_id=%u rx=%llu tx=%llu batches=%llu sleeps=%llu wakeups=%llu", m->prog,
		sl_nf_name(m->nf), sl_nf_id(m->nf), (unsigned long long)st.rx_pkts, (unsigned long long)st.tx_pkts,
		(unsigned long long)st.batches, (unsigned long long)st.sleeps, (unsigned long long)st.wakeups);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "name", required_argument, NULL, 'n' },
		{ "plugin-dir", required_argument, NULL, 'd' },
		{ "socket", required_argument, NULL, 's' },
		{ "wakeup", required_argument, NULL, 'w' },
		{ "spin-us", required_argument, NULL, 'S' },
		{ "no-fuse", no_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct group g = { .name = "group" };
	struct sl_nf_config base;
	char dirbuf[PATH_MAX];
	const char *dir = NULL;
	int first = argc, fuse = 1;

	sl_nf_config_default(&base);
	if (sl_nf_config_from_env(&base) < 0)
		return 2;
	if (base.sock_fd >= 0) {
		fprintf(stderr, PROG ": SLUICE_NF_FD is for one NF; members connect to the socket\n");
		return 2;
	}
	g.wakeup = base.wakeup;
	g.spin_us = base.spin_us;
	/* the group's own options end at the first "--" (getopt would take it as the end anyway) */
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			first = i;
			break;
		}
	int opt;
	while ((opt = getopt_long(first, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'n':
			g.name = optarg;
			break;
		case 'd':
			dir = optarg;
			break;
		case 's':
			if (optarg[0] == '\0' || strlen(optarg) >= sizeof(base.socket_path)) {
				fprintf(stderr, PROG ": --socket '%s': empty or too long\n", optarg);
				return 2;
			}
			snprintf(base.socket_path, sizeof(base.socket_path), "%s", optarg);
			break;
		case 'w':
			if (sl_wakeup_parse(optarg, &g.wakeup) < 0) {
				fprintf(stderr, PROG ": --wakeup '%s': expected poll, block or adaptive\n", optarg);
				return 2;
			}
			break;
		case 'S': {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);
			if (optarg[0] < '0' || optarg[0] > '9' || *end != '\0' || v > 10000000) {
				fprintf(stderr, PROG ": --spin-us '%s': expected 0..10000000\n", optarg);
				return 2;
			}
			g.spin_us = (uint32_t)v;
			break;
		}
		case 'F':
			fuse = 0;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < first) {
		fprintf(stderr, PROG ": unexpected argument '%s' (members follow '--')\n", argv[optind]);
		return 2;
	}
	base.wakeup = g.wakeup;
	base.spin_us = g.spin_us;
	int n = split_members(argc, argv, first, &g.m);
	if (n <= 0) {
		fprintf(stderr, n < 0 ? PROG ": out of memory\n" : PROG ": no members: -- NF [options] ...\n");
		return 2;
	}
	g.n = (unsigned)n;
	if (dir == NULL)
		dir = default_plugin_dir(dirbuf, sizeof(dirbuf));

	/* a stray reload or dump signal must not kill the group; members that use them catch them */
	signal(SIGHUP, SIG_IGN);
	signal(SIGUSR1, SIG_IGN);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: a sleeping poll() must return */
	sigaction(SIGTERM, &sa, NULL);
	sl_nf_set_process_sandbox(SL_SANDBOX_NONE);

	int status = 1, rc = 0, code = 0;
	unsigned i, who = 0;
	for (i = 0; i < g.n; i++) {
		rc = member_setup(&g, i, dir, &base);
		if (rc != 0)
			break;
	}
	if (rc != 0) {
		status = rc > 0 ? 0 : 2; /* --help of a member */
		goto free_members;
	}
	for (i = 0; i < g.n; i++) {
		struct member *m = &g.m[i];
		if (m->p->start != NULL && m->p->start(m->ctx) < 0)
			goto finish;
		m->started = 1;
	}
	for (i = 0; i < g.n && !group_stop; i++) {
		struct member *m = &g.m[i];
		rc = sl_nf_attach(&m->cfg, &m->nf);
		if (rc < 0) {
			int e = errno;
			fprintf(stderr, "%s: cannot attach to sluiced at %s as '%s': %s", m->prog, m->cfg.socket_path,
				m->cfg.name, sl_strerror(-rc));
			if (rc == -SL_ERR_IO && e != 0)
				fprintf(stderr, " (%s)", strerror(e));
			fprintf(stderr, " (member %u of group %s)\n", i, g.name);
			m->nf = NULL;
			goto finish;
		}
		if (m->p->attached != NULL && m->p->attached(m->nf, m->ctx) < 0)
			goto finish;
		if (fuse && (rc = sl_nf_host(m->nf, m->p->handler, m->ctx)) < 0) {
			fprintf(stderr, PROG ": %s: member %u (%s): %s\n", g.name, i, m->cfg.name, sl_strerror(-rc));
			goto finish;
		}
	}
	if (group_stop) {
		status = 0;
		goto finish;
	}
	fprintf(stderr, PROG ": %s: %u members attached (%s%s), running\n", g.name, g.n,
		sl_wakeup_name(g.wakeup), fuse ? "" : ", not fused");
	code = group_run(&g, &who);
	if (code == SL_ERR_SHUTDOWN)
		fprintf(stderr, PROG ": %s: sluiced shut down (%s)\n", g.name, sl_strerror(code));
	else if (code != 0)
		fprintf(stderr, PROG ": %s: member %u (%s) ended: %s; the group ends with it\n", g.name, who,
			g.m[who].cfg.name, sl_strerror(code));
	status = code == 0 || code == SL_ERR_SHUTDOWN ? 0 : 1; /* an orderly shutdown is a normal end */

finish:
	/* last member first: members come in chain order, so each one's pipe reader (the next hop) has
	 * gone before it, and sluiced need not wait for a reader that will not turn again */
	for (i = g.n; i-- > 0;) {
		struct member *m = &g.m[i];
		if (m->nf != NULL)
			summary(m);
		if (m->started && m->p->finish != NULL)
			m->p->finish(m->ctx, m->nf != NULL ? stderr : NULL);
		if (m->nf != NULL) /* as the process form ends its line: why the member stopped */
			fprintf(stderr, " exit=%s\n", code == 0 ? "stopped" : sl_strerror(code));
		sl_nf_detach(m->nf);
		m->nf = NULL;
	}
free_members:
	for (i = 0; i < g.n; i++)
		free(g.m[i].ctx);
	free(g.m);
	group_plugins_unload();
	return status;
}
