/* SPDX-License-Identifier: BSD-3-Clause
 * Plugins for tests/unit/test_nf_plugin.c, one source built several times (-DVARIANT=...): a good
 * one, and ones a host must refuse before calling any of their code. Each callback records that it
 * ran in `plugin_calls`, which the test reads through dlsym. */
#include "sluice/nf_plugin.h"

__attribute__((visibility("default"))) int plugin_calls;

struct tctx {
	int value;
	const char *word;
};

static const struct tctx defaults __attribute__((unused)) = { .value = 7 };

__attribute__((unused)) static int opt(void *ctx, int o, const char *arg)
{
	plugin_calls++;
	struct tctx *c = ctx;
	if (o == SL_NF_OPT_APP) {
		c->word = arg;
		return 0;
	}
	return -1;
}

__attribute__((unused)) static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	(void)nf;
	struct tctx *c = arg;
	plugin_calls++;
	for (unsigned i = 0; i < n; i++)
		sl_pkt_set_action(&pkts[i], SL_ACT_DROP, (uint16_t)c->value);
}

static const struct option opts[] __attribute__((unused)) = {
	{ "word", required_argument, NULL, SL_NF_OPT_APP },
	{ NULL, 0, NULL, 0 },
};

#if VARIANT == 0 /* good */
SL_NF_PLUGIN_REGISTER(.name = "tgood", .about = "test plugin", .opts = opts, .ctx_size = sizeof(struct tctx),
		      .ctx_defaults = &defaults, .opt = opt, .handler = handler)
#elif VARIANT == 1 /* another ABI version */
__attribute__((visibility("default"))) const struct sl_nf_plugin sl_nf_plugin_v1 = {
	.abi = 99, .size = sizeof(struct sl_nf_plugin), .name = "tbadabi", .opts = opts,
	.ctx_size = sizeof(struct tctx), .opt = opt, .handler = handler };
#elif VARIANT == 2 /* built against an older, shorter description */
__attribute__((visibility("default"))) const struct sl_nf_plugin sl_nf_plugin_v1 = {
	.abi = SL_NF_PLUGIN_ABI, .size = 16, .name = "tshort", .handler = handler };
#elif VARIANT == 3 /* no description at all */
__attribute__((visibility("default"))) void *not_a_plugin = (void *)handler;
#elif VARIANT == 4 /* no handler */
__attribute__((visibility("default"))) const struct sl_nf_plugin sl_nf_plugin_v1 = {
	.abi = SL_NF_PLUGIN_ABI, .size = sizeof(struct sl_nf_plugin), .name = "tnohandler", .opt = opt };
#endif
