/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for NF plugins (include/sluice/nf_plugin.h) and sluice-group's loader
 * (src/group/loader.c): a good plugin loads once and runs with per-instance state and options; a
 * plugin of another ABI version, with a shorter description, without the symbol or without a
 * handler is refused with a message that says why -- and none of its code has run.
 * argv[1..5]: the test plugins (tests/unit/plugins/test_plugin.c, variants 0..4).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loader.h"
#include "sluice/nf_plugin.h"

struct tctx { /* the test plugin's state (plugins/test_plugin.c) */
	int value;
	const char *word;
};

static int calls_of(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	if (h == NULL)
		return -1; /* not loaded (refused and closed) */
	int *c = dlsym(h, "plugin_calls");
	int v = c ? *c : -2;
	dlclose(h);
	return v;
}

static void refused(const char *path, const char *why)
{
	char err[4200] = "";
	CHECK(group_plugin_load_path(path, err, sizeof(err)) == NULL);
	if (strstr(err, why) == NULL || strstr(err, path) == NULL) {
		fprintf(stderr, "refusal of %s: '%s' lacks '%s'\n", path, err, why);
		exit(1);
	}
	CHECK(calls_of(path) == -1); /* unloaded again: nothing of it ran, nothing of it stays */
	printf("refused as expected: %s\n", err);
}

int main(int argc, char **argv)
{
	char err[4200];
	CHECK(argc == 6);

	/* the good one: loads, its description is checked, nothing ran yet */
	const struct sl_nf_plugin *p = group_plugin_load_path(argv[1], err, sizeof(err));
	if (p == NULL) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	CHECK(strcmp(p->name, "tgood") == 0);
	CHECK(calls_of(argv[1]) == 0);
	CHECK(group_plugin_load_path(argv[1], err, sizeof(err)) == p); /* loaded once */

	/* two instances: own state from the defaults, own options (getopt reset between them) */
	struct sl_nf_config c1, c2;
	void *x1 = calloc(1, p->ctx_size), *x2 = calloc(1, p->ctx_size);
	memcpy(x1, p->ctx_defaults, p->ctx_size);
	memcpy(x2, p->ctx_defaults, p->ctx_size);
	sl_nf_config_default(&c1);
	sl_nf_config_default(&c2);
	char *a1[] = { "tgood", "--name", "one", "--word", "alpha", NULL };
	char *a2[] = { "tgood", "--word", "beta", "--service", "svc2", "--wakeup", "block", NULL };
	CHECK_EQ(sl_nf_plugin_args(p, "t", 5, a1, &c1, x1), 0);
	CHECK_EQ(sl_nf_plugin_args(p, "t", 7, a2, &c2, x2), 0);
	CHECK(strcmp(c1.name, "one") == 0 && strcmp(c2.service, "svc2") == 0 && c2.wakeup == SL_WAKE_BLOCK);
	CHECK(strcmp(((struct tctx *)x1)->word, "alpha") == 0 && strcmp(((struct tctx *)x2)->word, "beta") == 0);
	CHECK_EQ(((struct tctx *)x1)->value, 7);
	char *bad[] = { "tgood", "--nope", NULL };
	CHECK_EQ(sl_nf_plugin_args(p, "t", 2, bad, &c1, x1), -1);
	char *stray[] = { "tgood", "extra", NULL };
	CHECK_EQ(sl_nf_plugin_args(p, "t", 2, stray, &c1, x1), -1);

	/* its handler, with its instance's state */
	struct sl_pkt pk[2];
	memset(pk, 0, sizeof(pk));
	((struct tctx *)x2)->value = 42;
	p->handler(NULL, pk, 2, x2);
	CHECK(pk[0].d.action == SL_ACT_DROP && pk[1].d.dest == 42);
	CHECK(calls_of(argv[1]) > 0);

	refused(argv[2], "ABI version differs from this host's (plugin 99, host 1)");
	refused(argv[3], "description is shorter");
	refused(argv[4], "no " SL_NF_PLUGIN_SYMBOL " symbol");
	refused(argv[5], "no name or no handler");

	/* by name from a directory: a missing file names the path */
	CHECK(group_plugin_load("/nonexistent-dir", "fwd", err, sizeof(err)) == NULL);
	CHECK(strstr(err, "/nonexistent-dir/sluice-nf-fwd.so") != NULL);
	CHECK(group_plugin_load("/tmp", "../etc", err, sizeof(err)) == NULL);
	CHECK(strstr(err, "not an NF name") != NULL);

	free(x1);
	free(x2);
	group_plugins_unload();
	printf("test_nf_plugin: ok\n");
	return 0;
}
