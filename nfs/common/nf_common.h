/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The main() shared by the sample NFs: configuration (defaults, SLUICE_NF_*
 * environment, command-line flags, in that order of precedence), attach,
 * run, a one-line summary on stderr, detach.
 */
#ifndef SLUICE_NFS_COMMON_H
#define SLUICE_NFS_COMMON_H

#include <getopt.h>
#include <signal.h>
#include <stdint.h>
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
	int (*attached)(struct sl_nf *nf, void *ctx); /* after attach, before run (sl_nf_counter, port
	                                   * names): 0 or -1 (message printed; the NF detaches, exits 1) */
	sl_handler_fn handler;
	void (*finish)(void *ctx, FILE *out); /* after run: extra summary fields, then cleanup */
	void *ctx;
};

/* Everything main() has to do. Returns the process exit status. */
int nf_app_main(int argc, char **argv, const struct nf_app *app);

/* ---- helpers for NFs that report statistics ---- */

/* Parse a decimal unsigned integer in lo..hi. Returns 0, or -1 after printing
 * "<prog>: --<flag> '<s>': expected lo..hi" on stderr. */
int nf_parse_u64(const char *prog, const char *flag, const char *s, uint64_t lo, uint64_t hi,
		 uint64_t *out);

/* Set to 1 by SIGUSR1 once nf_catch_usr1() ran; an NF polls and clears it in
 * its handler (dumping there, not in the signal handler, keeps stdio out of
 * signal context). */
extern volatile sig_atomic_t nf_usr1_pending;
void nf_catch_usr1(void);

/* The same for SIGHUP (configuration reload): nf_hup_pending is set to 1. Under sandbox strict a
 * reload could not open its file: SIGHUP then only logs that reload is not available. */
extern volatile sig_atomic_t nf_hup_pending;
void nf_catch_hup(void);

/* The counter `name` that sluiced reports for this NF (sl_nf_counter), or `fallback` when there
 * is no NF, no info page or no room left, so a hot path can always write through the pointer. */
uint64_t *nf_counter(struct sl_nf *nf, const char *name, uint64_t *fallback);

/* Write `path` through `path`.tmp and rename(), so a reader (a test polling
 * for the file) never sees half a dump. fill() returns 0 or -1. Returns 0,
 * or -1 after a message on stderr (also, at once, under sandbox strict). */
int nf_write_file(const char *prog, const char *path, int (*fill)(FILE *f, void *ctx), void *ctx);

#endif /* SLUICE_NFS_COMMON_H */
