/* SPDX-License-Identifier: BSD-3-Clause
 * sluice-group: NFs of one trust domain as members of one process (docs/groups.md). */
#ifndef SLUICE_GROUP_H
#define SLUICE_GROUP_H

#include <signal.h>
#include <stdint.h>

#include "sluice/nf_plugin.h"

struct member {
	const struct sl_nf_plugin *p;
	char prog[64];          /* "sluice-nf-<name>", as the process form names itself */
	struct sl_nf_config cfg;
	void *ctx;              /* its own state: ctx_size bytes, from ctx_defaults */
	struct sl_nf *nf;       /* NULL until attached */
	int argc;
	char **argv;            /* argv[0] is the plugin's name; points into the host's argv */
	int started;            /* start() succeeded: finish() is owed */
};

struct group {
	const char *name;       /* --name: the group's name in logs */
	enum sl_wakeup wakeup;  /* every member's (poll | block | adaptive) */
	uint32_t spin_us;       /* adaptive: spin this long with nothing to do before sleeping */
	unsigned n;
	struct member *m;
};

extern volatile sig_atomic_t group_stop;

/* Turn every member until a stop signal or until one member ends. Returns 0 on a stop, else the
 * (positive) enum sl_err that ended a member (SL_ERR_SHUTDOWN: sluiced's orderly shutdown); *who is
 * then its index. */
int group_run(struct group *g, unsigned *who);

#endif
