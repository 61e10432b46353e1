/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The main() shared by the sample NFs: configuration (defaults, SLUICE_NF_*
 * environment, command-line flags, in that order of precedence), attach,
 * run, a one-line summary on stderr, detach.
 */
#ifndef SLUICE_NFS_COMMON_H
#define SLUICE_NFS_COMMON_H

#include <getopt.h>
#include <stdio.h>

#include "sluice/nf.h"

/* First option value an NF may use for its own long options. */
#define NF_OPT_APP 0x200

struct nf_app {
	const char *prog;                 /* "sluice-nf-fwd" */
	const char *role;                 /* default name and service: "fwd" */
	const char *about;                /* one line for --help */
	const struct option *opts;        /* extra long options ({0}-terminated) or NULL */
	const char *opts_help;            /* --help text for them, or NULL */
	int (*opt)(void *ctx, int opt, const char *arg);   /* 0 or -1 (message printed) */
	int (*start)(void *ctx);          /* after options, before attach: 0 or -1 */
	sl_handler_fn handler;
	void (*finish)(void *ctx, FILE *out); /* after run: extra summary fields, then cleanup */
	void *ctx;
};

/* Everything main() has to do. Returns the process exit status. */
int nf_app_main(int argc, char **argv, const struct nf_app *app);

#endif /* SLUICE_NFS_COMMON_H */
