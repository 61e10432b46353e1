/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The yardstick for scenario 1's 1-NF figure: how fast two cores of this machine move packets from
 * a port through a second core and back out when nothing is done to them but handing pointers over.
 *
 *   sluice-bench-handoff -l SWITCH,NF --main-lcore SWITCH --no-pci --in-memory \
 *       --vdev=net_null0,size=64,copy=0 --vdev=net_null1,size=64,copy=0 [-- WINDOWS [SECONDS]]
 *
 * The switch lcore polls port 0 and puts the mbuf pointers on an SPSC rte_ring to the NF lcore,
 * which puts them straight back on a second ring; the switch takes them and sends them to port 1.
 * That is Sluice's 1-NF path (bench/sluice_fabric.py) with everything that makes it safe taken out:
 * no descriptors, no lending ledger, no validation, no routing. What Sluice's worker costs beyond
 * this is what those cost (bench/notes.md "The 1-NF figure against a bare handoff").
 * Prints one JSON line per window: {"window": i, "mpps": rate of port 1's transmits}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#define BURST 32
#define RING_SLOTS 1024

static struct rte_ring *to_nf, *from_nf;
static volatile int running = 1;

static int nf_main(void *arg)
{
	(void)arg;
	void *b[BURST];
	while (running) {
		unsigned n = rte_ring_dequeue_burst(to_nf, b, BURST, NULL);
		for (unsigned s = 0; s < n;)
			s += rte_ring_enqueue_burst(from_nf, b + s, n - s, NULL);
	}
	return 0;
}

static void port_start(uint16_t port, struct rte_mempool *mp)
{
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	if (rte_eth_dev_configure(port, 1, 1, &conf) || rte_eth_rx_queue_setup(port, 0, 1024, 0, NULL, mp) ||
	    rte_eth_tx_queue_setup(port, 0, 1024, 0, NULL) || rte_eth_dev_start(port))
		rte_exit(EXIT_FAILURE, "port %u: set-up failed (give two net_null vdevs)\n", port);
}

int main(int argc, char **argv)
{
	int used = rte_eal_init(argc, argv);
	if (used < 0)
		rte_exit(EXIT_FAILURE, "EAL init failed\n");
	argc -= used;
	argv += used;
	int windows = argc > 1 ? atoi(argv[1]) : 4;
	double seconds = argc > 2 ? atof(argv[2]) : 2.0;
	if (windows < 1 || seconds <= 0)
		rte_exit(EXIT_FAILURE, "usage: ... -- [WINDOWS>=1 [SECONDS>0]]\n");
	if (rte_eth_dev_count_avail() < 2)
		rte_exit(EXIT_FAILURE, "two ports wanted: --vdev=net_null0,... --vdev=net_null1,...\n");
	unsigned nf_lcore = rte_get_next_lcore(-1, 1, 0);
	if (nf_lcore >= RTE_MAX_LCORE)
		rte_exit(EXIT_FAILURE, "two lcores wanted (-l SWITCH,NF)\n");
	struct rte_mempool *mp = rte_pktmbuf_pool_create("handoff", 16384, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
							 (int)rte_socket_id());
	if (!mp)
		rte_exit(EXIT_FAILURE, "no mbuf pool\n");
	port_start(0, mp);
	port_start(1, mp);
	to_nf = rte_ring_create("to_nf", RING_SLOTS, (int)rte_socket_id(), RING_F_SP_ENQ | RING_F_SC_DEQ);
	from_nf = rte_ring_create("from_nf", RING_SLOTS, (int)rte_socket_id(), RING_F_SP_ENQ | RING_F_SC_DEQ);
	if (!to_nf || !from_nf)
		rte_exit(EXIT_FAILURE, "no rings\n");
	rte_eal_remote_launch(nf_main, NULL, nf_lcore);

	struct rte_mbuf *rx[BURST];
	void *back[BURST];
	uint64_t hz = rte_get_tsc_hz(), window = (uint64_t)(seconds * (double)hz), sent = 0, last_sent = 0;
	uint64_t start = rte_rdtsc();
	for (int w = 0; w < windows;) {
		uint16_t n = rte_eth_rx_burst(0, 0, rx, BURST);
		if (n) {
			unsigned e = rte_ring_enqueue_burst(to_nf, (void **)rx, n, NULL);
			if (e < n)
				rte_pktmbuf_free_bulk(rx + e, n - e);
		}
		unsigned k = rte_ring_dequeue_burst(from_nf, back, BURST, NULL);
		if (k) {
			uint16_t s = rte_eth_tx_burst(1, 0, (struct rte_mbuf **)back, (uint16_t)k);
			sent += s;
			if (s < k)
				rte_pktmbuf_free_bulk((struct rte_mbuf **)back + s, k - s);
		}
		uint64_t now = rte_rdtsc();
		if (now - start >= window) {
			printf("{\"window\": %d, \"mpps\": %.2f}\n", w++,
			       (double)(sent - last_sent) / ((double)(now - start) / (double)hz) / 1e6);
			fflush(stdout);
			start = now;
			last_sent = sent;
		}
	}
	running = 0;
	rte_eal_mp_wait_lcore();
	return 0;
}
