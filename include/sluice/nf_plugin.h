/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The NF plugin interface: one NF source, two forms (docs/abi.md "Plugins", docs/groups.md).
 *
 * An NF describes itself once, with SL_NF_PLUGIN_REGISTER at the end of its source: options, the
 * size and defaults of its per-instance state, and the four steps of its life (options, start,
 * attached, the handler per batch, finish). From that one file the build makes
 *   - the process `sluice-nf-<name>`: the source linked with the SDK's main(), sl_nf_plugin_main,
 *     which parses the options, attaches, runs and detaches (libsluice);
 *   - the plugin `sluice-nf-<name>.so`: the same source as a shared module, which sluice-group loads
 *     to run the NF as a member of a group, beside other NFs, in one process.
 * The packet code is the same function in both. An NF that keeps per-instance state only in its
 * ctx (never in file-scope variables) may run as many members of one group; one that cannot says
 * so with SL_NF_PLUGIN_F_SINGLE.
 *
 *   struct my_ctx { uint64_t *seen; };
 *   static void handler(struct sl_nf *nf, struct sl_pkt *p, unsigned n, void *arg) { ... }
 *   static int attached(struct sl_nf *nf, void *ctx) { ((struct my_ctx *)ctx)->seen = ...; return 0; }
 *   SL_NF_PLUGIN_REGISTER(.name = "mine", .about = "...", .ctx_size = sizeof(struct my_ctx),
 *                         .attached = attached, .handler = handler)
 *
 * Versioning: a host reads the exported symbol SL_NF_PLUGIN_SYMBOL and refuses, before it calls
 * anything in the plugin, one whose `abi` is not its SL_NF_PLUGIN_ABI or whose `size` is smaller
 * than the struct it knows. Fields are only ever added at the end (with `size` telling a host how
 * many the plugin has); any other change bumps SL_NF_PLUGIN_ABI and the symbol's name with it.
 */
#ifndef SLUICE_NF_PLUGIN_H
#define SLUICE_NF_PLUGIN_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice/nf.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_NF_PLUGIN_ABI 1
#define SL_NF_PLUGIN_SYMBOL "sl_nf_plugin_v1"

/* First option value an NF may use for its own long options (the SDK's common ones are below it). */
#define SL_NF_OPT_APP 0x200

/* flags */
#define SL_NF_PLUGIN_F_SINGLE 0x1u /* keeps state outside its ctx: at most one instance per process */

struct sl_nf_plugin {
	uint32_t abi;                  /* SL_NF_PLUGIN_ABI */
	uint32_t size;                 /* sizeof(struct sl_nf_plugin) the plugin was built with */
	const char *name;              /* "firewall": the process is sluice-nf-<name>; the default
	                                * instance and service name */
	const char *about;             /* one line for --help */
	const struct option *opts;     /* its own long options ({0}-terminated, values >= SL_NF_OPT_APP), or NULL */
	const char *opts_help;         /* --help text for them, or NULL */
	size_t ctx_size;               /* bytes of per-instance state (0: none; ctx is then NULL) */
	const void *ctx_defaults;      /* ctx_size bytes each instance's state starts as, or NULL: zeros */
	uint32_t flags;                /* SL_NF_PLUGIN_F_* */
	uint32_t reserved;
	int (*opt)(void *ctx, int opt, const char *arg);  /* one of its options: 0, or -1 (message printed) */
	int (*start)(void *ctx);       /* after the options, before attach: 0, or -1 (message printed) */
	int (*attached)(struct sl_nf *nf, void *ctx); /* after attach, before packets (sl_nf_counter, port
	                                * names): 0, or -1 (message printed; the instance detaches) */
	sl_handler_fn handler;         /* per batch; `arg` is the ctx */
	void (*finish)(void *ctx, FILE *out); /* at the end: extra summary fields on `out` (NULL: none
	                                * wanted), then free what start/attached took */
};

/* Exports the NF's description as the one versioned symbol a host looks for. Put it last in the
 * NF's source, with the fields (designated initializers) after the two the macro fills in.
 * Compiled with -DSL_NF_MAIN it also defines the process form's main() (sl_nf_plugin_main), so an
 * out-of-tree NF builds both forms from its one file:
 *   cc -DSL_NF_MAIN mine.c $(pkg-config --cflags --libs sluice) -o sluice-nf-mine
 *   cc -shared -fPIC mine.c $(pkg-config --cflags sluice) -o sluice-nf-mine.so
 * (the library NFs get their main() from nfs/common/nf_main.c instead). */
#ifdef SL_NF_MAIN
#define SL_NF_PLUGIN_MAIN_                                                                     \
	int main(int argc, char **argv) { return sl_nf_plugin_main(argc, argv, &sl_nf_plugin_v1); }
#else
#define SL_NF_PLUGIN_MAIN_
#endif
#define SL_NF_PLUGIN_REGISTER(...)                                                              \
	__attribute__((visibility("default"), used)) const struct sl_nf_plugin sl_nf_plugin_v1 = { \
		.abi = SL_NF_PLUGIN_ABI, .size = sizeof(struct sl_nf_plugin), __VA_ARGS__ };            \
	SL_NF_PLUGIN_MAIN_

/* Checks a host makes before it calls into a plugin: NULL if `p` is usable, else why not. */
static inline const char *sl_nf_plugin_refusal(const struct sl_nf_plugin *p)
{
	if (p == NULL)
		return "no " SL_NF_PLUGIN_SYMBOL " symbol (not built with SL_NF_PLUGIN_REGISTER)";
	if (p->abi != SL_NF_PLUGIN_ABI)
		return "plugin ABI version differs from this host's";
	if (p->size < sizeof(struct sl_nf_plugin))
		return "plugin description is shorter than this host's";
	if (p->name == NULL || p->name[0] == '\0' || p->handler == NULL)
		return "plugin has no name or no handler";
	if (p->ctx_size > ((size_t)1 << 30))
		return "plugin asks for a per-instance state over 1 GiB";
	return NULL;
}

/* The process form's main(): options (the SDK's common ones -- --name, --service, --socket,
 * --wakeup, ... -- then the plugin's), SLUICE_NF_* environment, start, attach, attached, sl_nf_run,
 * a one-line summary on stderr, finish, detach. Returns the process exit status. */
int sl_nf_plugin_main(int argc, char **argv, const struct sl_nf_plugin *p);

/* Parse one instance's options into cfg (defaults and SLUICE_NF_* environment applied first by the
 * caller) and the plugin's ctx. `prog` names it in messages. Returns 0, 1 after --help (printed
 * to stdout), or -1 after a message on stderr. Resets getopt, so a host may call it for each of
 * several instances in turn. */
int sl_nf_plugin_args(const struct sl_nf_plugin *p, const char *prog, int argc, char **argv,
		      struct sl_nf_config *cfg, void *ctx);

/* The sandbox mode the process runs its NFs with (the last sl_nf_plugin_main / host decision):
 * helpers that open files (reload, dumps) ask it, since under strict they cannot. */
enum sl_sandbox sl_nf_process_sandbox(void);
void sl_nf_set_process_sandbox(enum sl_sandbox mode);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_NF_PLUGIN_H */
