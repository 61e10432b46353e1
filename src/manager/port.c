/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Ports: DPDK ethdevs created from vdev strings ("net_pcap0,rx_pcap=a.pcap").
 * ports[].queues RX queues each (RSS where the PMD hashes itself, docs/ports.md "Multi-queue ports"),
 * and one TX queue, or one per worker for a multi-queue port whose PMD has that many; the workers
 * poll them (datapath.c "Workers").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <rte_bus_vdev.h>
#include <rte_errno.h>
#include <rte_dev.h>
#include <rte_ethdev.h>

#include "sluiced.h"
#include "pcisys.h"

#define PORT_IDX(p) ((unsigned)((p) - M.ports))

/* What an error names: the config's ports[i] (a config port), or the port_add request's field. */
static const char *port_where(const struct port *p, bool vdev)
{
	static char w[96]; /* control thread only */
	if (p->runtime)
		snprintf(w, sizeof(w), vdev ? "field 'vdev' (port %s)" : "port %s", p->name);
	else
		snprintf(w, sizeof(w), vdev ? "ports[%u].vdev (port %s)" : "ports[%u] (port %s)", PORT_IDX(p), p->name);
	return w;
}

#define RX_DESC 1024
#define TX_DESC 1024

/* A PCI port was probed by EAL from its allowlist (-a ADDR); find it, or say from sysfs why DPDK
 * did not probe it (pcisys.c: absent, bound to another driver, no IOMMU group). */
static int pci_port_find(struct port *p, char *err, size_t errlen)
{
	snprintf(p->devname, sizeof(p->devname), "%s", p->vdev + 4);
	for (char *c = p->devname; *c; c++) /* sysfs and DPDK name it in lower case */
		*c = (char)(*c >= 'A' && *c <= 'F' ? *c - 'A' + 'a' : *c);
	if (rte_eth_dev_get_port_by_name(p->devname, &p->port_id) != 0) {
		char why[1024];
		if (pcisys_diagnose(pcisys_root(), p->devname, why, sizeof(why)) < 0)
			snprintf(err, errlen, "%s: %s", port_where(p, true), why);
		else
			snprintf(err, errlen, "%s: %s, but DPDK did not probe it as a network device: "
				 "its log above says why", port_where(p, true), why);
		return -1;
	}
	p->probed = true;
	p->pci = true;
	return 0;
}

/* ---- device options: ports[].rx_desc, tx_desc, mtu, offloads (docs/ports.md "PCI NICs") ---- */

/* What an error about option `field` names: ports[i].FIELD (port P), or the request's field. */
static const char *port_field(const struct port *p, const char *field)
{
	static char w[96]; /* control thread only */
	if (p->runtime)
		snprintf(w, sizeof(w), "field '%s' (port %s)", field, p->name);
	else
		snprintf(w, sizeof(w), "ports[%u].%s (port %s)", PORT_IDX(p), field, p->name);
	return w;
}

/* Per PORT_OFF_* bit: RX or TX, and the flags it enables. rx_checksum takes whichever of the IPv4,
 * TCP and UDP checks the device offers (virtio-net: TCP and UDP only), at least one. */
static const struct {
	bool tx;
	uint64_t flags;
} port_offload_flags[PORT_OFF__COUNT] = {
	[0] = { false, RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM },
	[1] = { false, RTE_ETH_RX_OFFLOAD_VLAN_STRIP },
	[2] = { true, RTE_ETH_TX_OFFLOAD_VLAN_INSERT },
};

static bool offload_offered(const struct rte_eth_dev_info *info, unsigned b)
{
	uint64_t capa = port_offload_flags[b].tx ? info->tx_offload_capa : info->rx_offload_capa;
	return (capa & port_offload_flags[b].flags) != 0;
}

/* The offloads to configure. Without ports[].offloads, as always: VLAN_STRIP where offered (the worker
 * puts the tag back). With it, exactly those listed, each only if the device offers it: one it lacks
 * refuses the port, naming the field and what the device offers. */
static int port_offloads(struct port *p, const struct rte_eth_dev_info *info, struct rte_eth_conf *conf,
			 char *err, size_t errlen)
{
	p->vlan_keep = p->vlan_insert = false;
	if (!p->opts.offloads_set) {
		if (info->rx_offload_capa & RTE_ETH_RX_OFFLOAD_VLAN_STRIP)
			conf->rxmode.offloads |= RTE_ETH_RX_OFFLOAD_VLAN_STRIP;
		return 0;
	}
	char offers[96] = "";
	size_t n = 0;
	for (unsigned b = 0; b < PORT_OFF__COUNT; b++)
		if (offload_offered(info, b))
			n += (size_t)snprintf(offers + n, sizeof(offers) - n, "%s%s", n ? ", " : "", port_offload_names[b]);
	for (unsigned b = 0; b < PORT_OFF__COUNT; b++) {
		if (!(p->opts.offloads & (1u << b)))
			continue;
		if (!offload_offered(info, b)) {
			snprintf(err, errlen, "%s: the device (%s, driver %s) does not offer %s; it offers: %s",
				 port_field(p, "offloads"), p->devname, info->driver_name, port_offload_names[b],
				 n ? offers : "none of rx_checksum, vlan_strip, vlan_insert");
			return -1;
		}
		uint64_t f = port_offload_flags[b].flags &
			     (port_offload_flags[b].tx ? info->tx_offload_capa : info->rx_offload_capa);
		if (port_offload_flags[b].tx)
			conf->txmode.offloads |= f;
		else
			conf->rxmode.offloads |= f;
	}
	p->vlan_keep = p->opts.offloads & PORT_OFF_VLAN_STRIP;
	p->vlan_insert = p->opts.offloads & PORT_OFF_VLAN_INSERT;
	return 0;
}

/* ports[].mtu within what the device takes (its min_mtu..max_mtu). */
static int port_mtu_check(const struct port *p, const struct rte_eth_dev_info *info, char *err, size_t errlen)
{
	if (!p->opts.mtu || (p->opts.mtu >= info->min_mtu && p->opts.mtu <= info->max_mtu))
		return 0;
	snprintf(err, errlen, "%s: %u: the device (%s, driver %s) takes an MTU of %u..%u", port_field(p, "mtu"),
		 p->opts.mtu, p->devname, info->driver_name, info->min_mtu, info->max_mtu);
	return -1;
}

/* The descriptor counts asked for (ports[].rx_desc, tx_desc; else RX_DESC, TX_DESC) as the device
 * takes them (rte_eth_dev_adjust_nb_rx_tx_desc: its limits and alignment); a change is logged. */
static void port_desc(struct port *p, uint16_t *nrx, uint16_t *ntx)
{
	uint16_t want_rx = p->opts.rx_desc ? p->opts.rx_desc : RX_DESC, want_tx = p->opts.tx_desc ? p->opts.tx_desc : TX_DESC;
	*nrx = want_rx;
	*ntx = want_tx;
	rte_eth_dev_adjust_nb_rx_tx_desc(p->port_id, nrx, ntx);
	if ((p->opts.rx_desc || p->opts.tx_desc) && (*nrx != want_rx || *ntx != want_tx))
		LOG("port %s: the device adjusted its descriptors: rx_desc %u -> %u, tx_desc %u -> %u (its limits)",
		    p->name, want_rx, *nrx, want_tx, *ntx);
	p->nb_rx_desc = *nrx;
	p->nb_tx_desc = *ntx;
}

/* Map every trust domain's region for the PCI device's DMA (a packet of any domain may leave on any
 * port; RX fills region 0). Returns 0, or -1 after undoing what it mapped and logging why: the port
 * then receives into a private pool and the worker copies (port.rx_copied, tx_copied). */
static int pci_dma_map(struct port *p, struct rte_device *dev)
{
	char why[256];
	unsigned d;
	for (d = 0; d < M.nregions; d++)
		if (region_dma_map(M.regions[d], dev, why, sizeof(why)) < 0)
			break;
	if (d == M.nregions) {
		p->dma_dev = dev;
		LOG("port %s: %u packet region%s mapped for DMA by %s (IOVA = VA)", p->name, M.nregions,
		    M.nregions == 1 ? "" : "s", p->devname);
		return 0;
	}
	while (d-- > 0)
		region_dma_unmap(M.regions[d], dev);
	LOG("port %s: %s cannot DMA into the packet regions (%s): it receives into a private pool and every "
	    "packet it sends or receives is copied (rx_copied, tx_copied)", p->name, p->devname, why);
	return -1;
}

/* ---- frame sizes (docs/ports.md "Frame sizes, MTU and jumbo frames") ----
 *
 * A port receives into region 0, whose buffers hold `data room` bytes (sluiced.buffer_size) of one
 * frame: a frame a PMD hands over in several chained segments is dropped as too_long, never
 * truncated. Where a PMD limits frames by other means, port_open sizes it from the data room. */

/* The value of `key=` in a vdev argument string ("iface=x,framesz=4096"), copied into out; 0 if absent. */
static int vdev_arg(const char *args, const char *key, char *out, size_t outlen)
{
	size_t kl = strlen(key);
	for (const char *a = args; a && *a; a = strchr(a, ',') ? strchr(a, ',') + 1 : NULL) {
		if (strncmp(a, key, kl) || a[kl] != '=')
			continue;
		const char *v = a + kl + 1, *e = strchr(v, ',');
		size_t n = e ? (size_t)(e - v) : strlen(v);
		if (n >= outlen)
			n = outlen - 1;
		memcpy(out, v, n);
		out[n] = 0;
		return 1;
	}
	return 0;
}

/* A kernel interface's MTU (sysfs), 0 if unknown. */
static unsigned iface_mtu(const char *iface)
{
	char path[128], buf[32];
	if (!iface[0] || strchr(iface, '/'))
		return 0;
	snprintf(path, sizeof(path), "/sys/class/net/%s/mtu", iface);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	unsigned mtu = fgets(buf, sizeof(buf), f) ? (unsigned)strtoul(buf, NULL, 10) : 0;
	fclose(f);
	return mtu;
}

/* net_af_packet copies each frame into a slot of an mmap'd ring, `framesz` bytes (default 2048), and
 * the kernel truncates, silently, what does not fit: 32 bytes of slot header, and the frame starts at
 * offset 34 (46 with an 802.1Q tag in the data). The PMD refuses an RX pool whose buffers are shorter
 * than framesz - 32, and addresses slot i at i * framesz: the kernel's slots are laid out per block
 * of `blocksz` bytes, so a block must hold a whole number of slots exactly (blocksz = k * framesz, a
 * multiple of the page size; framecnt a multiple of k).
 *
 * Without framesz= in the vdev string and with buffers larger than the default, sluiced adds a
 * framesz as close to data room + 32 as such a block of at most AFP_BLOCK_MAX bytes allows (9216 ->
 * 9216 in blocks of 36 KiB), and that blocksz. With or without it, it refuses a port whose slots are
 * inconsistent, or whose interface MTU allows frames a slot would truncate. *args_out: the arguments
 * to create the device with; p->max_frame: the longest frame the port carries whole. */
#define AFP_SLOT_HDR 32u   /* TPACKET2_HDRLEN - sizeof(struct sockaddr_ll): the PMD's mbuf check */
#define AFP_MAC_OFF 46u    /* where the kernel puts a frame whose VLAN tag is in the data (34 without) */
#define AFP_BLOCK_MAX (256u << 10)
static unsigned gcd_u(unsigned a, unsigned b)
{
	while (b) {
		unsigned t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* The slot for buffers of `room` bytes: the largest framesz <= room + 32 (a multiple of 16) whose
 * block, the least common multiple of framesz and the page size, is at most AFP_BLOCK_MAX. */
static void afp_pick(unsigned room, unsigned page, unsigned *framesz, unsigned *blocksz)
{
	for (*framesz = room + AFP_SLOT_HDR; *framesz > SL_DATA_ROOM; *framesz -= 16) { /* TPACKET_ALIGNMENT */
		*blocksz = *framesz / gcd_u(*framesz, page) * page;
		if (*blocksz <= AFP_BLOCK_MAX)
			return;
	}
	*framesz = SL_DATA_ROOM;
	*blocksz = SL_DATA_ROOM / gcd_u(SL_DATA_ROOM, page) * page;
}

static int af_packet_args(struct port *p, const char *args, uint32_t room, char *args_out, size_t outlen,
			  char *err, size_t errlen)
{
	char v[64], iface[64] = "";
	unsigned page = (unsigned)sysconf(_SC_PAGESIZE);
	unsigned framesz = 2048, blocksz = page, framecnt = 512; /* the PMD's defaults */
	bool have_frame = vdev_arg(args, "framesz", v, sizeof(v)), have_block = false;
	if (have_frame)
		framesz = (unsigned)strtoul(v, NULL, 10);
	if ((have_block = vdev_arg(args, "blocksz", v, sizeof(v))))
		blocksz = (unsigned)strtoul(v, NULL, 10);
	if (vdev_arg(args, "framecnt", v, sizeof(v)))
		framecnt = (unsigned)strtoul(v, NULL, 10);
	vdev_arg(args, "iface", iface, sizeof(iface));
	snprintf(args_out, outlen, "%s", args);
	if (!have_frame && room > SL_DATA_ROOM) {
		if (have_block) {
			snprintf(err, errlen, "%s: blocksz= without framesz=: give both, or neither "
				 "(sluiced sizes them for buffer_size %u)", port_where(p, true), room);
			return -1;
		}
		afp_pick(room, page, &framesz, &blocksz);
		size_t n = strlen(args_out);
		snprintf(args_out + n, outlen - n, "%sframesz=%u,blocksz=%u", n ? "," : "", framesz, blocksz);
		LOG("port %s: net_af_packet frames of %u bytes in blocks of %u for buffers of %u (framesz, blocksz added)",
		    p->name, framesz, blocksz, room);
	}
	if (framesz < AFP_MAC_OFF + 64 || framesz % 16) {
		snprintf(err, errlen, "%s: framesz=%u: must be a multiple of 16, at least %u",
			 port_where(p, true), framesz, AFP_MAC_OFF + 64);
		return -1;
	}
	if (framesz - AFP_SLOT_HDR > room) {
		snprintf(err, errlen, "%s: framesz=%u needs buffers of at least %u bytes of data, "
			 "sluiced.buffer_size is %u: raise buffer_size or lower framesz (or drop it: sluiced picks one)",
			 port_where(p, true), framesz, framesz - AFP_SLOT_HDR, room);
		return -1;
	}
	if (!blocksz || blocksz % page || blocksz % framesz || !framecnt || framecnt % (blocksz / framesz)) {
		snprintf(err, errlen, "%s: blocksz=%u must be a multiple of the page size (%u) and "
			 "of framesz=%u, and framecnt=%u a multiple of blocksz / framesz (the PMD reads slot i at i * framesz)",
			 port_where(p, true), blocksz, page, framesz, framecnt);
		return -1;
	}
	p->max_frame = framesz - AFP_MAC_OFF;
	unsigned mtu = iface_mtu(iface);
	if (mtu && mtu + 18u > p->max_frame) { /* Ethernet header + one VLAN tag */
		unsigned need = RTE_ALIGN_CEIL(mtu + 18u + AFP_MAC_OFF - AFP_SLOT_HDR, SL_DATA_ROOM_ALIGN), f, bl;
		for (; need < SL_DATA_ROOM_MAX; need += SL_DATA_ROOM_ALIGN) { /* the buffer whose slot holds it */
			afp_pick(need, page, &f, &bl);
			if (f - AFP_MAC_OFF >= mtu + 18u)
				break;
		}
		snprintf(err, errlen, "%s: interface %s has MTU %u (frames up to %u bytes) but "
			 "AF_PACKET frames of %u bytes (framesz) hold frames up to %u: the kernel would truncate longer ones. "
			 "Set sluiced.buffer_size to at least %u%s, or lower the interface's MTU",
			 port_where(p, true), iface, mtu, mtu + 18u, framesz, p->max_frame,
			 need < SL_DATA_ROOM_MIN ? SL_DATA_ROOM_MIN : need,
			 have_frame ? " and framesz to match" : " (sluiced then sizes framesz)");
		return -1;
	}
	return 0;
}

/* net_vhost as vhost-user server (client=0, the default) binds iface=PATH and refuses to start while
 * a file is there. The PMD unlinks its socket when the port closes; one left by a killed sluiced is
 * removed here if no one accepts connections on it (docs/guests.md "vhost-user ports"). */
static void vhost_stale_socket(const char *args)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)], v[16];
	struct stat sb;
	if (!vdev_arg(args, "iface", path, sizeof(path)) || (vdev_arg(args, "client", v, sizeof(v)) && atoi(v)) ||
	    stat(path, &sb) != 0 || !S_ISSOCK(sb.st_mode))
		return;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, path, sizeof(sa.sun_path));
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno == ECONNREFUSED) {
		LOG("net_vhost: removing stale vhost-user socket %s", path);
		unlink(path);
	}
	if (fd >= 0)
		close(fd);
}

/* The MTU to give a port whose buffers hold `room` bytes: frames of MTU + Ethernet header + one VLAN
 * tag fit a buffer, within what the device accepts (its max_mtu and max_rx_pktlen, as ethdev checks
 * them). 0: leave the device's default (default-sized buffers, or a device that takes no more). */
static uint16_t port_mtu(const struct rte_eth_dev_info *info, uint32_t room)
{
	if (room <= SL_DATA_ROOM)
		return 0;
	uint32_t want = room - RTE_ETHER_HDR_LEN - RTE_VLAN_HLEN;
	uint32_t overhead = info->max_mtu != UINT16_MAX && info->max_rx_pktlen > info->max_mtu
				    ? info->max_rx_pktlen - info->max_mtu : RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
	uint32_t dev_max = info->max_rx_pktlen > overhead ? info->max_rx_pktlen - overhead : 0;
	if (dev_max > info->max_mtu)
		dev_max = info->max_mtu;
	if (want > dev_max)
		want = dev_max;
	return want > RTE_ETHER_MTU ? (uint16_t)want : 0;
}

static void mark_foreign(struct rte_mempool *mp, void *arg, void *obj, unsigned idx)
{
	(void)mp;
	(void)arg;
	mbuf_priv(obj)->id = idx;
	mbuf_priv(obj)->region = SL_REGION_NONE;
}

/* What an error about the queue count names: ports[i].queues, or port_add's field 'queues'. */
static const char *queues_where(const struct port *p)
{
	static char w[96]; /* control thread only */
	if (p->runtime)
		snprintf(w, sizeof(w), "field 'queues' (port %s)", p->name);
	else
		snprintf(w, sizeof(w), "ports[%u].queues (port %s)", PORT_IDX(p), p->name);
	return w;
}

/* The RSS hash functions for a multi-queue port: IP, TCP and UDP as far as the PMD hashes them. */
#define RSS_WANT (RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP)

/* Queue counts for a port of `queues` RX queues (docs/ports.md "Multi-queue ports"). Sets p->nrxq,
 * p->ntxq, p->txq_per_worker and conf's RX multi-queue mode. Returns 0, or -1 with err. */
static int port_queues(struct port *p, const struct rte_eth_dev_info *info, unsigned queues,
		       struct rte_eth_conf *conf, char *err, size_t errlen)
{
	unsigned nw = M.nworkers ? M.nworkers : 1;
	p->nrxq = 1;
	p->ntxq = 1;
	p->txq_per_worker = false;
	if (queues > info->max_rx_queues) {
		snprintf(err, errlen, "%s: %u RX queues, but %s offers at most %u%s", queues_where(p), queues,
			 info->driver_name, info->max_rx_queues,
			 !strcmp(info->driver_name, "net_af_packet") ? " (one per qpairs= in its vdev string)" : "");
		return -1;
	}
	if (!strcmp(info->driver_name, "net_af_packet") && info->max_rx_queues > queues) {
		/* its qpairs sockets form one PACKET_FANOUT group: the kernel spreads frames over all of
		 * them, and those of a queue nobody polls would be lost */
		snprintf(err, errlen, "%s: net_af_packet has qpairs=%u, which spreads frames over %u queues; "
			 "set queues: %u (or qpairs=%u)", queues_where(p), info->max_rx_queues, info->max_rx_queues,
			 info->max_rx_queues, queues);
		return -1;
	}
	p->nrxq = (uint8_t)queues;
	if (queues == 1)
		return 0; /* as before: one RX and one TX queue, one worker polls and sends */
	uint64_t hf = info->flow_type_rss_offloads & RSS_WANT;
	if (hf == 0)
		hf = info->flow_type_rss_offloads; /* whatever it hashes on */
	if (hf) {
		conf->rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
		conf->rx_adv_conf.rss_conf.rss_key = NULL; /* the PMD's default key */
		conf->rx_adv_conf.rss_conf.rss_hf = hf;
	}
	if (nw > 1 && info->max_tx_queues >= nw) {
		p->ntxq = (uint8_t)nw;
		p->txq_per_worker = true;
	} else if (nw > 1) {
		LOG("port %s: %s offers %u TX queues for %u workers: one TX queue, sent on by the port's worker "
		    "alone (the others hand it their packets)", p->name, info->driver_name, info->max_tx_queues, nw);
	}
	LOG("port %s: %u RX queues (%s), %u TX queue%s", p->name, queues,
	    hf ? "RSS" : "spread by the PMD itself, e.g. af_packet's fanout", p->ntxq,
	    p->txq_per_worker ? "s, one per worker" : "");
	return 0;
}

int port_open(struct port *p, struct rte_mempool *pool, unsigned queues, char *err, size_t errlen)
{
	int rc;
	const char *args = "";
	uint32_t room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM; /* sluiced.buffer_size */
	p->max_frame = room;
	if (strncmp(p->vdev, "pci:", 4) == 0) {
		if (pci_port_find(p, err, errlen) < 0)
			return -1;
		goto configure;
	}
	char *comma = strchr(p->vdev, ',');
	size_t nlen = comma ? (size_t)(comma - p->vdev) : strlen(p->vdev);
	if (nlen == 0 || nlen >= sizeof(p->devname)) {
		snprintf(err, errlen, "%s: bad device name in '%s'", port_where(p, true), p->vdev);
		return -1;
	}
	memcpy(p->devname, p->vdev, nlen);
	p->devname[nlen] = 0;
	if (comma)
		args = comma + 1;
	char afp_args[sizeof(p->vdev) + 64];
	if (!strncmp(p->devname, "net_af_packet", 13) || !strncmp(p->devname, "eth_af_packet", 13)) {
		if (af_packet_args(p, args, room, afp_args, sizeof(afp_args), err, errlen) < 0)
			return -1;
		args = afp_args;
	}
	if (!strncmp(p->devname, "net_vhost", 9) || !strncmp(p->devname, "eth_vhost", 9))
		vhost_stale_socket(args);

	rc = rte_vdev_init(p->devname, args);
	if (rc != 0) {
		snprintf(err, errlen, "%s: DPDK could not create '%s' (%s)", port_where(p, true), p->vdev,
			 rc == -EEXIST ? "device name already used"
			 : rc == -1    ? "the driver refused it: check the device arguments; DPDK's message above says why"
				       : rte_strerror(-rc));
		return -1;
	}
	p->probed = true;
	if (rte_eth_dev_get_port_by_name(p->devname, &p->port_id) != 0) {
		snprintf(err, errlen, "%s: '%s' is not an ethdev", port_where(p, true), p->devname);
		goto fail;
	}
configure:;
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	struct rte_eth_dev_info info;
	if (rte_eth_dev_info_get(p->port_id, &info) != 0) {
		snprintf(err, errlen, "%s: cannot read device info", port_where(p, false));
		goto fail;
	}
	/* A PMD that hands over frames whose 802.1Q tag the kernel stripped (net_af_packet) puts the
	 * tag back with rte_vlan_insert, which refuses our mbufs (their data is a pinned external buffer,
	 * mem.c) and logs an error per frame. Where the PMD can, it leaves the tag in the mbuf instead
	 * (VLAN_STRIP) and the worker puts it back (datapath.c rx_vlan_restore): NFs see the wire frame.
	 * ports[].offloads replaces that default (port_offloads). */
	if (port_offloads(p, &info, &conf, err, errlen) < 0 || port_mtu_check(p, &info, err, errlen) < 0)
		goto fail;
	/* Jumbo buffers: an MTU that lets full-sized frames in (net_tap sets its kernel interface's;
	 * net_pcap, net_ring, net_null take any length anyway; net_af_packet: framesz above) */
	uint16_t mtu = p->opts.mtu ? p->opts.mtu : port_mtu(&info, room);
	conf.rxmode.mtu = mtu;
	if (port_queues(p, &info, queues, &conf, err, errlen) < 0)
		goto fail;
	if ((rc = rte_eth_dev_configure(p->port_id, p->nrxq, p->ntxq, &conf)) != 0) {
		snprintf(err, errlen, "%s: configure failed: %s", port_where(p, false), rte_strerror(-rc));
		goto fail;
	}
	if (mtu && (rc = rte_eth_dev_set_mtu(p->port_id, mtu)) != 0 && rc != -ENOTSUP)
		LOG("port %s: setting MTU %u failed (%s); the device keeps its own", p->name, mtu, rte_strerror(-rc));
	uint16_t nrx, ntx;
	port_desc(p, &nrx, &ntx);
	int socket = rte_eth_dev_socket_id(p->port_id);
	if (p->pci && pci_dma_map(p, info.device) < 0)
		p->tx_copy = true; /* ... and receives into its own pool, below */
	if (!strcmp(info.driver_name, "net_af_xdp") || p->tx_copy) {
		/* net_af_xdp registers the RX pool's memory as its umem and has the kernel write each frame
		 * right after the mbuf header: it cannot receive into a region, whose pool keeps headers
		 * apart from the data (hole 5). It gets a private pool; the worker copies what it receives
		 * into region 0 (port.rx_copied). Its TX takes any mbuf (the PMD copies foreign ones). */
		char pname[RTE_MEMPOOL_NAMESIZE];
		snprintf(pname, sizeof(pname), "sluice_port%u", PORT_IDX(p));
		/* RX rings twice over and, for a copying PCI port, its TX rings too (what it sends are copies
		 * from this pool, held until the device reclaims them), plus every lcore's cache */
		unsigned own = 2u * nrx * p->nrxq + (p->tx_copy ? 2u * ntx * p->ntxq : 0) + 256u * (M.nworkers + 1) + 1024;
		p->own_pool = rte_pktmbuf_pool_create(pname, own, 256, sizeof(struct mbuf_priv),
						      SL_BUF_SIZE, socket < 0 ? (int)rte_socket_id() : socket);
		if (!p->own_pool) {
			snprintf(err, errlen, "%s: its private mbuf pool: %s", port_where(p, false),
				 rte_strerror(rte_errno));
			goto fail;
		}
		rte_mempool_obj_iter(p->own_pool, mark_foreign, NULL);
		pool = p->own_pool;
	}
	for (uint16_t q = 0; q < p->nrxq; q++)
		if ((rc = rte_eth_rx_queue_setup(p->port_id, q, nrx, socket < 0 ? 0 : socket, NULL, pool)) != 0) {
			snprintf(err, errlen, "%s: rx queue %u setup failed: %s", port_where(p, false), q,
				 rte_strerror(-rc));
			goto fail;
		}
	for (uint16_t q = 0; q < p->ntxq; q++)
		if ((rc = rte_eth_tx_queue_setup(p->port_id, q, ntx, socket < 0 ? 0 : socket, NULL)) != 0) {
			snprintf(err, errlen, "%s: tx queue %u setup failed: %s", port_where(p, false), q,
				 rte_strerror(-rc));
			goto fail;
		}
	if ((rc = rte_eth_dev_start(p->port_id)) != 0) {
		snprintf(err, errlen, "%s: start failed: %s", port_where(p, false), rte_strerror(-rc));
		goto fail;
	}
	p->started = true;
	/* a NIC keeps buffers in its rings: posted for RX, sent and not yet reclaimed on TX (the pool
	 * audit counts them as in the device, up to this many) */
	p->dev_bufs = p->pci ? (uint32_t)nrx * p->nrxq + (uint32_t)ntx * p->ntxq : 0;
	p->rx_offloads = conf.rxmode.offloads;
	p->tx_offloads = conf.txmode.offloads;
	rte_eth_promiscuous_enable(p->port_id); /* not every PMD supports it */
	if (rte_eth_dev_get_mtu(p->port_id, &p->mtu) != 0)
		p->mtu = 0;
	if (p->own_pool) /* af_xdp: its private pool's buffers */
		p->max_frame = rte_pktmbuf_data_room_size(p->own_pool) - RTE_PKTMBUF_HEADROOM;
	if (p->opts.rx_desc || p->opts.tx_desc || p->opts.mtu || p->opts.offloads_set) {
		char ol[64] = "";
		size_t n = 0;
		for (unsigned b = 0; b < PORT_OFF__COUNT; b++)
			if (p->opts.offloads & (1u << b))
				n += (size_t)snprintf(ol + n, sizeof(ol) - n, "%s%s", n ? " " : "", port_offload_names[b]);
		LOG("port %s: device options: %u RX and %u TX descriptors, MTU %u, offloads %s", p->name, p->nb_rx_desc,
		    p->nb_tx_desc, p->mtu, p->opts.offloads_set ? (n ? ol : "none") : "default (vlan_strip where offered)");
	}
	if (!p->runtime) /* port_add logs its one line itself */
		LOG("port %s: %s is DPDK port %u (%s), MTU %u, frames up to %u bytes", p->name, p->vdev, p->port_id,
		    info.driver_name, p->mtu, p->max_frame);
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
	if (p->dma_dev) { /* teardown twin of pci_dma_map, while the device is still open */
		for (unsigned d = 0; d < M.nregions; d++)
			region_dma_unmap(M.regions[d], p->dma_dev);
		p->dma_dev = NULL;
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

uint32_t port_rx_discard(struct port *p, uint32_t max)
{
	struct rte_mbuf *m[SL_BURST];
	uint32_t n = 0;
	for (uint16_t q = 0; p->started && q < p->nrxq; q++)
		while (n < max) {
			uint16_t k = rte_eth_rx_burst(p->port_id, q, m, SL_BURST);
			if (k == 0)
				break;
			rte_pktmbuf_free_bulk(m, k);
			n += k;
		}
	return n;
}

void port_totals(const struct port *p, uint64_t *rx_pkts, uint64_t *rx_bytes, uint64_t *tx_pkts, uint64_t *tx_bytes,
		 uint64_t *rx_copied)
{
	*rx_pkts = *rx_bytes = *tx_pkts = *tx_bytes = *rx_copied = 0;
	for (unsigned q = 0; q < SL_MAX_QUEUES; q++) {
		*rx_pkts += __atomic_load_n(&p->rxq[q].pkts, __ATOMIC_RELAXED);
		*rx_bytes += __atomic_load_n(&p->rxq[q].bytes, __ATOMIC_RELAXED);
		*rx_copied += __atomic_load_n(&p->rxq[q].copied, __ATOMIC_RELAXED);
	}
	for (unsigned w = 0; w < SL_MAX_WORKERS; w++) {
		*tx_pkts += __atomic_load_n(&p->stage[w].pkts, __ATOMIC_RELAXED);
		*tx_bytes += __atomic_load_n(&p->stage[w].bytes, __ATOMIC_RELAXED);
	}
}

unsigned ports_live(void)
{
	unsigned n = 0;
	for (unsigned i = 0; i < M.nports; i++)
		n += M.ports[i].live;
	return n;
}

unsigned port_free_id(void)
{
	for (unsigned i = 0; i < SL_MAX_PORTS; i++)
		if (!M.ports[i].live && !M.ports[i].probed)
			return i;
	return SL_MAX_PORTS;
}

void port_forget(struct port *p)
{
	/* field by field: live (false) and inflight (0) are what a worker may still read of a free slot
	 * (to_port), so they are not rewritten; a stale packet's no_path count may land in st */
	p->name[0] = p->vdev[0] = p->devname[0] = '\0';
	p->port_id = 0;
	p->probed = p->started = p->pci = p->runtime = false;
	memset(&p->st, 0, sizeof(p->st));
	memset(p->rxq, 0, sizeof(p->rxq));
	for (unsigned w = 0; w < SL_MAX_WORKERS; w++) {
		p->stage[w].n = 0;
		p->stage[w].listed = false;
		p->stage[w].pkts = p->stage[w].bytes = 0;
	}
	p->nrxq = p->ntxq = 1;
	p->txq_per_worker = false;
	memset(p->rxq_worker, 0, sizeof(p->rxq_worker));
	p->own_pool = NULL;
	p->dma_dev = NULL;
	p->unplug = p->gone = false;
	p->dev_bufs = 0;
	p->tx_copy = false;
	p->tx_copied = 0;
	p->worker = 0;
	p->max_frame = 0;
	p->mtu = 0;
	memset(&p->opts, 0, sizeof(p->opts));
	p->nb_rx_desc = p->nb_tx_desc = 0;
	p->rx_offloads = p->tx_offloads = 0;
	p->vlan_keep = p->vlan_insert = false;
}
