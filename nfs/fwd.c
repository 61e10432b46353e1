/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-fwd: passes every packet on along its chain (SL_ACT_NEXT).
 */
#include "nf_common.h"

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	(void)nf;
	(void)arg;
	for (unsigned i = 0; i < n; i++)
		sl_pkt_set_action(&pkts[i], SL_ACT_NEXT, 0);
}

int main(int argc, char **argv)
{
	const struct nf_app app = {
		.prog = "sluice-nf-fwd",
		.role = "fwd",
		.about = "Sluice NF: forward every packet to the next hop of its chain.",
		.handler = handler,
	};
	return nf_app_main(argc, argv, &app);
}
