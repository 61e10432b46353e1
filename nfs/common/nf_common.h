/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Helpers shared by the library NFs (their main() is the SDK's: nf_plugin.h, nfs/common/nf_main.c).
 */
#ifndef SLUICE_NFS_COMMON_H
#define SLUICE_NFS_COMMON_H

#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice/nf.h"
#include "sluice/nf_plugin.h"

/* First option value an NF may use for its own long options. */
#define NF_OPT_APP SL_NF_OPT_APP

/* ---- helpers for NFs that report statistics ---- */

/* Parse a decimal unsigned integer in lo..hi. Returns 0, or -1 after printing
 * "<prog>: --<flag> '<s>': expected lo..hi" on stderr. */
int nf_parse_u64(const char *prog, const char *flag, const char *s, uint64_t lo, uint64_t hi,
		 uint64_t *out);

/* Counted by SIGUSR1 once nf_catch_usr1() ran. An instance keeps the count it last acted on in its
 * ctx and polls with nf_signal_taken() in its handler (dumping there, not in the signal handler,
 * keeps stdio out of signal context); a count, not a flag, so every NF of a group (docs/groups.md)
 * sees the signal once. */
extern volatile sig_atomic_t nf_usr1_gen;
void nf_catch_usr1(void);

/* The same for SIGHUP (configuration reload): nf_hup_gen. Under sandbox strict a reload could not
 * open its file: SIGHUP then only logs that reload is not available. */
extern volatile sig_atomic_t nf_hup_gen;
void nf_catch_hup(void);

/* 1 once per new count of `gen` (nf_hup_gen, nf_usr1_gen) since *seen, which it updates. */
static inline int nf_signal_taken(volatile sig_atomic_t *gen, sig_atomic_t *seen)
{
	sig_atomic_t g = *gen;
	if (g == *seen)
		return 0;
	*seen = g;
	return 1;
}

/* The counter `name` that sluiced reports for this NF (sl_nf_counter), or `fallback` when there
 * is no NF, no info page or no room left, so a hot path can always write through the pointer. */
uint64_t *nf_counter(struct sl_nf *nf, const char *name, uint64_t *fallback);

/* Write `path` through `path`.tmp and rename(), so a reader (a test polling
 * for the file) never sees half a dump. fill() returns 0 or -1. Returns 0,
 * or -1 after a message on stderr (also, at once, under sandbox strict). */
int nf_write_file(const char *prog, const char *path, int (*fill)(FILE *f, void *ctx), void *ctx);

#endif /* SLUICE_NFS_COMMON_H */
