/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-reflect: sends every packet back out of the port it came in on,
 * with Ethernet, IP and TCP/UDP source and destination swapped.
 */
#include "common/nf_common.h"
#include "common/pktparse.h"

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	(void)nf;
	(void)arg;
	for (unsigned i = 0; i < n; i++) {
		pp_reflect(sl_pkt_data(&pkts[i]), sl_pkt_len(&pkts[i]));
		sl_pkt_set_action(&pkts[i], SL_ACT_OUT, sl_pkt_in_port(&pkts[i]));
	}
}

SL_NF_PLUGIN_REGISTER(
	.name = "reflect",
	.about = "Sluice NF: swap MAC, IP and port addresses and send packets back out their ingress port.",
	.handler = handler,
)
