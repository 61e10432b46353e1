/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Ports: DPDK ethdevs created from vdev strings ("net_pcap0,rx_pcap=a.pcap").
 * One RX and one TX queue each; the worker polls them.
 */
#include <stdio.h>
#include <string.h>

#include <rte_bus_vdev.h>
#include <rte_errno.h>
#include <rte_dev.h>
#include <rte_ethdev.h>

#include "sluiced.h"

#define PORT_IDX(p) ((unsigned)((p) - M.ports))

#define RX_DESC 1024
#define TX_DESC 1024

/* A PCI port was probed by EAL from its allowlist (-a ADDR); find it. */
static int pci_port_find(struct port *p, char *err, size_t errlen)
{
	snprintf(p->devname, sizeof(p->devname), "%s", p->vdev + 4);
	if (rte_eth_dev_get_port_by_name(p->devname, &p->port_id) != 0) {
		snprintf(err, errlen, "ports[%u].vdev (port %s): PCI device %s was not probed by DPDK (is it bound to vfio-pci?)",
			 PORT_IDX(p), p->name, p->devname);
		return -1;
	}
	p->probed = true;
	p->pci = true;
	return 0;
}

static void mark_foreign(struct rte_mempool *mp, void *arg, void *obj, unsigned idx)
{
	(void)mp;
	(void)arg;
	mbuf_priv(obj)->id = idx;
	mbuf_priv(obj)->region = SL_REGION_NONE;
}

int port_open(struct port *p, struct rte_mempool *pool, char *err, size_t errlen)
{
	int rc;
	const char *args = "";
	if (strncmp(p->vdev, "pci:", 4) == 0) {
		if (pci_port_find(p, err, errlen) < 0)
			return -1;
		goto configure;
	}
	char *comma = strchr(p->vdev, ',');
	size_t nlen = comma ? (size_t)(comma - p->vdev) : strlen(p->vdev);
	if (nlen == 0 || nlen >= sizeof(p->devname)) {
		snprintf(err, errlen, "ports[%u].vdev (port %s): bad device name in '%s'", PORT_IDX(p), p->name, p->vdev);
		return -1;
	}
	memcpy(p->devname, p->vdev, nlen);
	p->devname[nlen] = 0;
	if (comma)
		args = comma + 1;

	rc = rte_vdev_init(p->devname, args);
	if (rc != 0) {
		snprintf(err, errlen, "ports[%u].vdev (port %s): DPDK could not create '%s' (%s)", PORT_IDX(p), p->name, p->vdev,
			 rc == -EEXIST ? "device name already used"
			 : rc == -1    ? "the driver refused it: check the device arguments; DPDK's message above says why"
				       : rte_strerror(-rc));
		return -1;
	}
	p->probed = true;
	if (rte_eth_dev_get_port_by_name(p->devname, &p->port_id) != 0) {
		snprintf(err, errlen, "ports[%u].vdev (port %s): '%s' is not an ethdev", PORT_IDX(p), p->name, p->devname);
		goto fail;
	}
configure:;
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	struct rte_eth_dev_info info;
	if (rte_eth_dev_info_get(p->port_id, &info) != 0) {
		snprintf(err, errlen, "ports[%u] (port %s): cannot read device info", PORT_IDX(p), p->name);
		goto fail;
	}
	/* A PMD that hands over frames whose 802.1Q tag the kernel stripped (net_af_packet) puts the
	 * tag back with rte_vlan_insert, which refuses our mbufs (their data is a pinned external buffer,
	 * mem.c) and logs an error per frame. Where the PMD can, it leaves the tag in the mbuf instead
	 * (VLAN_STRIP) and the worker puts it back (datapath.c rx_vlan_restore): NFs see the wire frame. */
	if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_VLAN_STRIP)
		conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_VLAN_STRIP;
	if ((rc = rte_eth_dev_configure(p->port_id, 1, 1, &conf)) != 0) {
		snprintf(err, errlen, "ports[%u] (port %s): configure failed: %s", PORT_IDX(p), p->name, rte_strerror(-rc));
		goto fail;
	}
	uint16_t nrx = RX_DESC, ntx = TX_DESC;
	rte_eth_dev_adjust_nb_rx_tx_desc(p->port_id, &nrx, &ntx);
	int socket = rte_eth_dev_socket_id(p->port_id);
	if (!strcmp(info.driver_name, "net_af_xdp")) {
		/* net_af_xdp registers the RX pool's memory as its umem and has the kernel write each frame
		 * right after the mbuf header: it cannot receive into a region, whose pool keeps headers
		 * apart from the data (hole 5). It gets a private pool; the worker copies what it receives
		 * into region 0 (port.rx_copied). Its TX takes any mbuf (the PMD copies foreign ones). */
		char pname[RTE_MEMPOOL_NAMESIZE];
		snprintf(pname, sizeof(pname), "sluice_port%u", PORT_IDX(p));
		p->own_pool = rte_pktmbuf_pool_create(pname, 2u * nrx + 1024, 256, sizeof(struct mbuf_priv),
						      SL_BUF_SIZE, socket < 0 ? (int)rte_socket_id() : socket);
		if (!p->own_pool) {
			snprintf(err, errlen, "ports[%u] (port %s): its private mbuf pool: %s", PORT_IDX(p), p->name,
				 rte_strerror(rte_errno));
			goto fail;
		}
		rte_mempool_obj_iter(p->own_pool, mark_foreign, NULL);
		pool = p->own_pool;
	}
	if ((rc = rte_eth_rx_queue_setup(p->port_id, 0, nrx, socket < 0 ? 0 : socket, NULL, pool)) != 0) {
		snprintf(err, errlen, "ports[%u] (port %s): rx queue setup failed: %s", PORT_IDX(p), p->name, rte_strerror(-rc));
		goto fail;
	}
	if ((rc = rte_eth_tx_queue_setup(p->port_id, 0, ntx, socket < 0 ? 0 : socket, NULL)) != 0) {
		snprintf(err, errlen, "ports[%u] (port %s): tx queue setup failed: %s", PORT_IDX(p), p->name, rte_strerror(-rc));
		goto fail;
	}
	if ((rc = rte_eth_dev_start(p->port_id)) != 0) {
		snprintf(err, errlen, "ports[%u] (port %s): start failed: %s", PORT_IDX(p), p->name, rte_strerror(-rc));
		goto fail;
	}
	p->started = true;
	rte_eth_promiscuous_enable(p->port_id); /* not every PMD supports it */
	LOG("port %s: %s is DPDK port %u (%s)", p->name, p->vdev, p->port_id, info.driver_name);
	return 0;
fail:
	port_close(p);
	return -1;
}

void port_close(struct port *p)
{
	if (p->started) {
		rte_eth_dev_stop(p->port_id);
		p->started = false;
	}
	if (p->probed) {
		rte_eth_dev_close(p->port_id);
		if (!p->pci)
			rte_vdev_uninit(p->devname);
		p->probed = false;
	}
	if (p->own_pool) {
		rte_mempool_free(p->own_pool);
		p->own_pool = NULL;
	}
}
