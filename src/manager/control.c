/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The JSON control socket (docs/api.md): newline-delimited requests, one
 * response line each. Served by the main lcore; reads counters the worker
 * writes (plain 64-bit loads, good enough for statistics) and changes the
 * data path only through worker commands.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <jansson.h>

#include <rte_dev.h>
#include <rte_ethdev.h>
#include <rte_mempool.h>

#include "sluiced.h"

#define CTL_MAX_CONNS 64
#define CTL_LINE_START 65536
#define CTL_LINE_MAX (16u << 20) /* a rules_set of 65536 rules fits */

struct ctl_conn {
	int fd;
	size_t len, cap;
	char *buf;
};

static struct ctl_conn conns[CTL_MAX_CONNS];

int ctl_listen(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", M.ctl_sock_path);
	unlink(M.ctl_sock_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(M.ctl_sock_path, 0660) < 0 ||
	    listen(fd, 32) < 0) {
		LOG("control socket %s: %s", M.ctl_sock_path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	for (int i = 0; i < CTL_MAX_CONNS; i++)
		conns[i].fd = -1;
	M.ctl_listen = fd;
	capture_sweep();
	return 0;
}

static void conn_close(struct ctl_conn *c)
{
	if (c->fd < 0)
		return;
	capture_conn_closed((int)(c - conns)); /* a capture ends with its reader's connection */
	trace_conn_closed((int)(c - conns));   /* and a trace with its */
	epoll_ctl(M.epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->buf);
	c->fd = -1;
	c->buf = NULL;
	c->len = 0;
}

void ctl_close_all(void)
{
	for (int i = 0; i < CTL_MAX_CONNS; i++)
		conn_close(&conns[i]);
}

void ctl_accept(void)
{
	for (;;) {
		int fd = accept4(M.ctl_listen, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		int slot = -1;
		for (int i = 0; i < CTL_MAX_CONNS && slot < 0; i++)
			if (conns[i].fd < 0)
				slot = i;
		if (slot < 0) {
			static const char msg[] = "{\"ok\":false,\"error\":\"too many control connections\"}\n";
			(void)!write(fd, msg, sizeof(msg) - 1);
			close(fd);
			continue;
		}
		conns[slot] = (struct ctl_conn){ .fd = fd, .cap = CTL_LINE_START, .buf = malloc(CTL_LINE_START) };
		if (!conns[slot].buf) {
			close(fd);
			conns[slot].fd = -1;
			continue;
		}
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP,
					  .data.u64 = ((uint64_t)EP_CTL << 32) | (uint32_t)slot };
		epoll_ctl(M.epfd, EPOLL_CTL_ADD, fd, &ev);
	}
}

/* Write all of s (bounded wait: a client that stops reading is dropped). */
static int send_all(int fd, const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			s += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			if (poll(&p, 1, 2000) <= 0)
				return -1;
			continue;
		}
		return -1;
	}
	return 0;
}

/* ---- JSON views ---- */

static json_t *j_chain(const struct route *rt, unsigned i)
{
	const struct chain *c = &rt->chains[i];
	json_t *svcs = json_array();
	for (unsigned k = 0; k < c->len; k++)
		json_array_append_new(svcs, json_string(M.services[c->svc[k]].name));
	return json_pack("{s:I,s:s,s:o,s:o}", "id", (json_int_t)i, "name", c->name, "nfs", svcs, "exit",
			 c->exit >= 0 ? json_string(M.ports[c->exit].name) : json_null());
}

static json_t *j_chains(void)
{
	json_t *a = json_array();
	for (unsigned i = 0; i < M.route->nchains; i++)
		json_array_append_new(a, j_chain(M.route, i));
	return a;
}

static json_t *j_port(unsigned i)
{
	const struct port *p = &M.ports[i];
	int32_t c = M.route->port_chain[i];
	/* The device's own counters: what the PMD (or the kernel behind it) lost before sluiced saw it. */
	struct rte_eth_stats es;
	if (rte_eth_stats_get(p->port_id, &es) != 0)
		memset(&es, 0, sizeof(es));
	uint64_t rx_pkts, rx_bytes, tx_pkts, tx_bytes, copied;
	port_totals(p, &rx_pkts, &rx_bytes, &tx_pkts, &tx_bytes, &copied);
	return json_pack("{s:I,s:s,s:s,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:{s:I,s:I,s:I,s:I},s:{s:I,s:I,s:I,s:I}}", "id",
			 (json_int_t)i, "name", p->name, "vdev", p->vdev, "chain",
			 c >= 0 ? json_string(M.route->chains[c].name) : json_null(), "rx_pkts",
			 (json_int_t)rx_pkts, "rx_bytes", (json_int_t)rx_bytes, "tx_pkts",
			 (json_int_t)tx_pkts, "tx_bytes", (json_int_t)tx_bytes, "max_frame",
			 (json_int_t)p->max_frame, "mtu", (json_int_t)p->mtu, "drops", "tx_full",
			 (json_int_t)p->st.drop_tx_full, "no_path", (json_int_t)p->st.drop_no_path, "rx_invalid",
			 (json_int_t)p->st.drop_rx_invalid, "too_long", (json_int_t)p->st.drop_too_long, "device",
			 "ipackets", (json_int_t)es.ipackets, "imissed", (json_int_t)es.imissed, "ierrors",
			 (json_int_t)es.ierrors, "oerrors", (json_int_t)es.oerrors);
}

/* Link state (rte_eth_link_get_nowait: never waits for the device). */
static json_t *j_link(const struct port *p)
{
	struct rte_eth_link l;
	memset(&l, 0, sizeof(l));
	if (rte_eth_link_get_nowait(p->port_id, &l) != 0)
		return json_null();
	return json_pack("{s:b,s:o,s:s,s:b}", "up", l.link_status == RTE_ETH_LINK_UP, "speed_mbps",
			 l.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN || l.link_speed == RTE_ETH_SPEED_NUM_NONE
				 ? json_null() : json_integer((json_int_t)l.link_speed),
			 "duplex", l.link_duplex == RTE_ETH_LINK_FULL_DUPLEX ? "full" : "half", "autoneg",
			 l.link_autoneg == RTE_ETH_LINK_AUTONEG);
}

/* The PMD's extended statistics {name: value}: the nonzero ones, or all with the request's
 * "xstats": true. Control thread only (docs/api.md "Ports"). */
static bool xstats_all;
static json_t *j_xstats(const struct port *p)
{
	json_t *o = json_object();
	int n = rte_eth_xstats_get_names(p->port_id, NULL, 0);
	if (n <= 0)
		return o;
	struct rte_eth_xstat_name *names = calloc((size_t)n, sizeof(*names));
	struct rte_eth_xstat *vals = calloc((size_t)n, sizeof(*vals));
	int nn = names ? rte_eth_xstats_get_names(p->port_id, names, (unsigned)n) : -1;
	int nv = vals ? rte_eth_xstats_get(p->port_id, vals, (unsigned)n) : -1;
	for (int k = 0; nn == n && nv == n && k < n; k++) /* a count that changed between the calls: none */
		if (vals[k].id < (uint64_t)n && (xstats_all || vals[k].value))
			json_object_set_new(o, names[vals[k].id].name, json_integer((json_int_t)vals[k].value));
	free(names);
	free(vals);
	return o;
}

/* The offloads port_open enabled, by the config's names (vlan_strip also as sluiced's default). */
static json_t *j_offloads(const struct port *p)
{
	json_t *a = json_array();
	if (p->rx_offloads & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM))
		json_array_append_new(a, json_string("rx_checksum"));
	if (p->rx_offloads & RTE_ETH_RX_OFFLOAD_VLAN_STRIP)
		json_array_append_new(a, json_string("vlan_strip"));
	if (p->tx_offloads & RTE_ETH_TX_OFFLOAD_VLAN_INSERT)
		json_array_append_new(a, json_string("vlan_insert"));
	return a;
}

/* ports[].rx_desc, tx_desc, mtu, offloads as configured (only those given; `sluice reload` compares them) */
static json_t *j_port_options(const struct port *p)
{
	json_t *o = json_object();
	if (p->opts.rx_desc)
		json_object_set_new(o, "rx_desc", json_integer(p->opts.rx_desc));
	if (p->opts.tx_desc)
		json_object_set_new(o, "tx_desc", json_integer(p->opts.tx_desc));
	if (p->opts.mtu)
		json_object_set_new(o, "mtu", json_integer(p->opts.mtu));
	if (p->opts.offloads_set) {
		json_t *a = json_array();
		for (unsigned b = 0; b < PORT_OFF__COUNT; b++)
			if (p->opts.offloads & (1u << b))
				json_array_append_new(a, json_string(port_offload_names[b]));
		json_object_set_new(o, "offloads", a);
	}
	return o;
}

/* Per-queue counters (docs/api.md "ports"): RX queues with their poller, TX queues with their sender. */
static void j_port_queues(json_t *j, const struct port *p)
{
	struct rte_eth_stats es;
	bool dev = rte_eth_stats_get(p->port_id, &es) == 0;
	json_t *rx = json_array(), *tx = json_array();
	for (unsigned q = 0; q < p->nrxq; q++) {
		json_t *e = json_pack("{s:I,s:I,s:I,s:I}", "queue", (json_int_t)q, "worker", (json_int_t)p->rxq_worker[q],
				      "rx_pkts", (json_int_t)__atomic_load_n(&p->rxq[q].pkts, __ATOMIC_RELAXED),
				      "rx_bytes", (json_int_t)__atomic_load_n(&p->rxq[q].bytes, __ATOMIC_RELAXED));
		if (dev && q < RTE_ETHDEV_QUEUE_STAT_CNTRS) /* the device's own count, where the PMD keeps one */
			json_object_set_new(e, "device_ipackets", json_integer((json_int_t)es.q_ipackets[q]));
		json_array_append_new(rx, e);
	}
	for (unsigned q = 0; q < p->ntxq; q++) {
		unsigned w = p->txq_per_worker ? q : p->worker;
		json_array_append_new(tx, json_pack("{s:I,s:I,s:I,s:I}", "queue", (json_int_t)q, "worker", (json_int_t)w,
						    "tx_pkts", (json_int_t)__atomic_load_n(&p->stage[w].pkts, __ATOMIC_RELAXED),
						    "tx_bytes",
						    (json_int_t)__atomic_load_n(&p->stage[w].bytes, __ATOMIC_RELAXED)));
	}
	json_object_set_new(j, "queues", rx);
	json_object_set_new(j, "tx_queues", tx);
}

static json_t *j_port_full(unsigned i)
{
	json_t *j = j_port(i);
	const struct port *p = &M.ports[i];
	json_object_set_new(j, "link", j_link(p));
	json_object_set_new(j, "rx_desc", json_integer(p->nb_rx_desc));
	json_object_set_new(j, "tx_desc", json_integer(p->nb_tx_desc));
	json_object_set_new(j, "offloads", j_offloads(p));
	json_object_set_new(j, "options", j_port_options(p));
	json_object_set_new(j, "rx_csum_bad", json_integer((json_int_t)p->st.rx_csum_bad));
	json_object_set_new(j, "xstats", j_xstats(p));
	json_object_set_new(j, "malformed", json_integer((json_int_t)p->st.malformed));
	json_object_set_new(j, "worker", json_integer(p->worker));
	json_object_set_new(j, "polled", json_boolean(M.route->port_chain[i] >= 0 ||
						     M.steer->poll_port[i]));
	j_port_queues(j, p);
	if (p->own_pool) { /* net_af_xdp: received into its own pool, copied into region 0 */
		uint64_t a, b, c, d, copied;
		port_totals(p, &a, &b, &c, &d, &copied);
		json_object_set_new(j, "rx_copied", json_integer((json_int_t)copied));
	}
	if (p->pci) { /* docs/ports.md "PCI NICs" */
		json_object_set_new(j, "dma_mapped", json_boolean(p->dma_dev != NULL));
		if (p->tx_copy)
			json_object_set_new(j, "tx_copied", json_integer((json_int_t)p->tx_copied));
	}
	return j;
}

static json_t *j_ports(void)
{
	json_t *a = json_array();
	for (unsigned i = 0; i < M.nports; i++)
		if (M.ports[i].live) /* a deleted port's id is a hole until port_add reuses it */
			json_array_append_new(a, j_port_full(i));
		else if (M.ports[i].gone) /* unplugged: listed until port_del, down */
			json_array_append_new(a, json_pack("{s:I,s:s,s:s,s:s,s:o,s:b}", "id", (json_int_t)i, "name",
							   M.ports[i].name, "vdev", M.ports[i].vdev, "state", "removed",
							   "link", json_pack("{s:b}", "up", 0), "polled", 0));
	return a;
}

/* The NF's own named counters (sl_nf_counter), validated by nfinfo_counters. */
static json_t *j_nf_counters(const struct nf *nf)
{
	static struct sl_counter c[SL_COUNTERS_MAX];
	json_t *o = json_object();
	uint32_t n = nf->info ? nfinfo_counters(nf->info, c, SL_COUNTERS_MAX) : 0;
	for (uint32_t i = 0; i < n; i++)
		json_object_set_new(o, c[i].name, json_integer((json_int_t)c[i].value));
	return o;
}

/* Descriptors waiting in the NF's RX ring: what the worker produced less what the NF says it took
 * (its index is NF-written: bounded by the ring size; a racy read, for reports only). */
static json_int_t nf_queued(const struct nf *nf)
{
	if (!nf->rx)
		return 0;
	uint32_t q = __atomic_load_n(&nf->rxk.own, __ATOMIC_RELAXED) - __atomic_load_n(&nf->rx->cons, __ATOMIC_RELAXED);
	return q <= M.cfg.ring_size ? q : M.cfg.ring_size;
}

static json_t *j_nfs(void)
{
	json_t *a = json_array();
	for (uint32_t i = 0; i < M.max_nfs; i++) {
		const struct nf *nf = &M.nfs[i];
		if (nf->state != NF_ATTACHED)
			continue;
		json_t *j = json_pack("{s:I,s:s,s:s,s:I,s:I,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:{s:I,s:I}}", "id",
				     (json_int_t)i, "name", nf->name, "service", M.services[nf->service].name,
				     "service_id", (json_int_t)nf->service, "pid", (json_int_t)nf->pid, "uid",
				     (json_int_t)nf->uid, "wakeup", sl_wakeup_name(nf->wakeup), "batch",
				     (json_int_t)nf->batch, "timeout_us", (json_int_t)nf->timeout_us, "rx_pkts",
				     (json_int_t)nf->st.rx_pkts, "rx_bytes", (json_int_t)nf->st.rx_bytes, "tx_pkts",
				     (json_int_t)nf->st.tx_pkts, "tx_bytes", (json_int_t)nf->st.tx_bytes, "lent",
				     (json_int_t)nf->lent, "kicks", (json_int_t)nf->st.kicks, "drops", "ring_full",
				     (json_int_t)nf->st.drop_ring_full, "invalid_desc", (json_int_t)nf->st.drop_invalid);
		json_object_set_new(j, "queued", json_integer(nf_queued(nf)));
		json_object_set_new(j, "draining", json_boolean(nf->draining));
		json_object_set_new(j, "domain", json_string(M.regions[nf->domain]->name));
		json_object_set_new(j, "access", json_string(nf->ro ? "ro" : "rw"));
		json_object_set_new(j, "worker", json_integer(nf->worker));
		json_object_set_new(j, "guest", json_boolean(nf->guest != 0)); /* pid: its QEMU's */
		json_object_set_new(j, "sched", json_string(sched_nf_policy(nf))); /* its main thread's, as is */
		if (nf->supply_want) /* an endpoint (docs/abi.md "Supply") */
			json_object_set_new(j, "supply", json_pack("{s:I,s:I,s:I}", "want", (json_int_t)nf->supply_want,
								   "held", (json_int_t)__atomic_load_n(&nf->supply_held, __ATOMIC_RELAXED),
								   "given", (json_int_t)nf->st.supplied));
		json_object_set_new(j, "counters", j_nf_counters(nf));
		json_array_append_new(a, j);
	}
	return a;
}

static json_t *j_services(void)
{
	json_t *a = json_array();
	for (uint32_t i = 0; i < M.nservices; i++) {
		const struct service *s = &M.services[i];
		json_t *inst = json_array();
		uint16_t n = s->ninst;
		for (uint16_t k = 0; k < n && k < SL_MAX_INSTANCES; k++)
			json_array_append_new(inst, json_string(M.nfs[s->inst[k]].name));
		json_array_append_new(a, json_pack("{s:I,s:s,s:s,s:o,s:b,s:{s:I,s:I}}", "id", (json_int_t)i, "name",
						   s->name, "policy", svc_policy_names[s->policy], "instances", inst,
						   "saturated", s->saturated, "drops", "nf_gone",
						   (json_int_t)s->drop_nf_gone, "backpressure",
						   (json_int_t)s->drop_backpressure));
	}
	return a;
}

static uint64_t lent_total(void)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < M.max_nfs; i++)
		if (M.nfs[i].state == NF_ATTACHED)
			n += M.nfs[i].lent;
	return n;
}

/* Every trust domain's region bytes, buffers and free buffers, added up. */
static void pool_totals(uint64_t *bytes, uint64_t *mbufs, uint64_t *avail)
{
	*bytes = *mbufs = *avail = 0;
	for (unsigned d = 0; d < M.nregions; d++) {
		*bytes += M.regions[d]->size;
		*mbufs += M.regions[d]->nbufs;
		*avail += rte_mempool_avail_count(M.regions[d]->pool) + region_stash_count(M.regions[d]);
	}
}

/* Every domain's pool together: whole when free == mbufs. */
static json_t *j_pool(void)
{
	uint64_t bytes, mbufs, avail;
	pool_totals(&bytes, &mbufs, &avail);
	return json_pack("{s:I,s:I,s:I}", "mbufs", (json_int_t)mbufs, "free", (json_int_t)avail, "lent",
			 (json_int_t)lent_total());
}

/* Trust domains (docs/api.md "domains"): each one's region and pool, and its NFs' loans. */
static json_t *j_domains(void)
{
	json_t *a = json_array();
	for (unsigned d = 0; d < M.nregions; d++) {
		const struct region *r = M.regions[d];
		uint64_t lent = 0, nfs = 0;
		for (uint32_t i = 0; i < M.max_nfs; i++)
			if (M.nfs[i].state == NF_ATTACHED && M.nfs[i].domain == d) {
				lent += M.nfs[i].lent;
				nfs++;
			}
		json_array_append_new(a, json_pack("{s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:b}", "id", (json_int_t)d, "name",
						   r->name, "region_bytes", (json_int_t)r->size, "buffer_size",
						   (json_int_t)(r->buf_size - r->headroom), "mbufs",
						   (json_int_t)r->nbufs, "free",
						   (json_int_t)(rte_mempool_avail_count(r->pool) + region_stash_count(r)), "lent", (json_int_t)lent,
						   "nfs", (json_int_t)nfs, "huge_pages", r->huge));
	}
	return a;
}

/* Every worker's counters added up (one snapshot per report). */
static const struct worker_stats *wstats(void)
{
	static struct worker_stats sum; /* ~200 KiB: not on the stack */
	worker_stats_sum(&sum);
	return &sum;
}

/* Packets copied across trust-domain boundaries, per (from, to) pair that saw any. */
static json_t *j_copies(const struct worker_stats *S)
{
	json_t *a = json_array();
	for (unsigned f = 0; f < M.nregions; f++)
		for (unsigned t = 0; t < M.nregions; t++) {
			const struct domain_pair_stats *ps = &S->copies[f][t];
			uint64_t n = __atomic_load_n(&ps->packets, __ATOMIC_RELAXED);
			uint64_t nb = __atomic_load_n(&ps->no_buffer, __ATOMIC_RELAXED);
			uint64_t tl = __atomic_load_n(&ps->too_long, __ATOMIC_RELAXED);
			if (n == 0 && nb == 0 && tl == 0)
				continue;
			uint64_t timed = __atomic_load_n(&ps->timed, __ATOMIC_RELAXED);
			double ns = (double)__atomic_load_n(&ps->cycles, __ATOMIC_RELAXED) * 1e9 / (double)M.tsc_hz;
			json_array_append_new(a, json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "from", M.regions[f]->name,
							   "to", M.regions[t]->name, "packets", (json_int_t)n, "bytes",
							   (json_int_t)ps->bytes, "no_buffer", (json_int_t)nb, "too_long",
							   (json_int_t)tl, "timed",
							   (json_int_t)timed, "timed_ns", (json_int_t)ns));
		}
	return a;
}

static json_t *j_status(void)
{
	uint32_t nnf = 0;
	for (uint32_t i = 0; i < M.max_nfs; i++)
		nnf += M.nfs[i].state == NF_ATTACHED;
	/* memory over every trust domain; "domains" has each one's region and pool */
	uint64_t bytes, mbufs, avail;
	pool_totals(&bytes, &mbufs, &avail);
	json_t *j = json_pack("{s:b,s:s,s:I,s:I,s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "ok", 1, "version",
			 SLUICED_VERSION, "pid", (json_int_t)getpid(), "uptime_s",
			 (json_int_t)((now_ms() - M.started_ms) / 1000), "huge_pages", M.region.huge,
			 "region_bytes", (json_int_t)bytes, "mbufs", (json_int_t)mbufs,
			 "mbufs_free", (json_int_t)avail, "mbufs_lent",
			 (json_int_t)lent_total(), "nf_count", (json_int_t)nnf, "port_count",
			 (json_int_t)ports_live(), "chain_count", (json_int_t)M.route->nchains, "worker_lcore",
			 (json_int_t)M.worker_lcore, "max_nfs", (json_int_t)M.max_nfs);
	json_object_set_new(j, "domains", j_domains());
	json_t *wl = json_array();
	for (unsigned w = 0; w < M.nworkers; w++)
		json_array_append_new(wl, json_integer((json_int_t)M.workers[w].lcore));
	json_object_set_new(j, "worker_lcores", wl);
	return j;
}

static json_t *j_active_set(const struct worker_stats *S)
{
	uint32_t b, p, w;
	worker_active_set(&b, &p, &w);
	return json_pack("{s:I,s:I,s:I,s:I}", "busy", (json_int_t)b, "parked", (json_int_t)p, "waiting",
			 (json_int_t)w, "doorbells", (json_int_t)S->doorbells);
}

/* What NFs did wrong: rejected descriptors by reason (they add up to drops.invalid_desc), and NFs
 * disconnected for breaking the ring protocol, by kind (docs/api.md). */
static json_t *j_violations(const struct worker_stats *S)
{
	json_t *inv = json_object(), *ring = json_object();
	for (int v = SL_DESC_OK + 1; v < SL_DESC__COUNT; v++)
		json_object_set_new(inv, sl_desc_verdict_key(v), json_integer((json_int_t)S->invalid[v]));
	for (int e = NF_RING_OK + 1; e < NF_RING__COUNT; e++)
		json_object_set_new(ring, nf_ring_err_key(e), json_integer((json_int_t)S->ring_faults[e]));
	json_t *att = json_pack("{s:I,s:I}", "unknown_service", (json_int_t)M.attach_refused.unknown_service,
				"bad_token", (json_int_t)M.attach_refused.bad_token);
	json_t *quota = json_pack("{s:I,s:I}", "nf", (json_int_t)S->quota_drops.nf, "domain",
				  (json_int_t)S->quota_drops.domain);
	return json_pack("{s:o,s:o,s:o,s:o}", "invalid_desc", inv, "ring", ring, "attach", att, "quota", quota);
}

static json_t *error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *error(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return json_pack("{s:b,s:s}", "ok", 0, "error", msg);
}

static json_t *ok_with(const char *key, json_t *v)
{
	return json_pack("{s:b,s:o}", "ok", 1, key, v);
}

/* Publish a new route to the worker and free the old one. */
static void route_publish(struct route *nr)
{
	struct wcmd c = { .type = WCMD_ROUTE_SET, .route = nr };
	worker_call(&c);
	route_free(c.route);
	sched_chains_changed(); /* fifo NFs take turns in the new chain order */
}

/* The current route's chains as specs (one spare slot at the end), to edit
 * and rebuild a route from. Free with specs_free(specs, n + 1). */
static struct cfg_chain *route_specs(const struct route *cur)
{
	struct cfg_chain *specs = calloc(cur->nchains + 1, sizeof(*specs));
	for (unsigned i = 0; specs && i < cur->nchains; i++) {
		const struct chain *c = &cur->chains[i];
		snprintf(specs[i].name, SL_NAME_LEN, "%s", c->name);
		specs[i].nsvc = c->len;
		specs[i].svc = calloc(c->len, SL_NAME_LEN);
		for (unsigned k = 0; k < c->len; k++)
			snprintf(specs[i].svc[k], SL_NAME_LEN, "%s", M.services[c->svc[k]].name);
		snprintf(specs[i].exit, SL_NAME_LEN, "%s", c->exit >= 0 ? M.ports[c->exit].name : "");
	}
	return specs;
}

static void specs_free(struct cfg_chain *specs, unsigned n)
{
	for (unsigned i = 0; specs && i < n; i++)
		free(specs[i].svc);
	free(specs);
}

static json_t *cmd_chain_set(json_t *req)
{
	json_t *name = json_object_get(req, "name"), *list = json_object_get(req, "nfs"),
	       *exit = json_object_get(req, "exit");
	if (!json_is_string(name) || !config_valid_name(json_string_value(name)))
		return error("chain_set: field 'name': must be a name of 1-31 characters from A-Z a-z 0-9 _ - .");
	if (!json_is_array(list) || json_array_size(list) == 0 || json_array_size(list) > 250)
		return error("chain_set: field 'nfs': must be a list of 1..250 service names");
	int32_t exit_port = -1;
	if (exit && !json_is_null(exit)) {
		if (!json_is_string(exit) || (exit_port = port_lookup(json_string_value(exit))) < 0)
			return error("chain_set: field 'exit': unknown port '%s'",
				     json_is_string(exit) ? json_string_value(exit) : "?");
	}
	/* Build the new chain spec list: the current chains with this one replaced or added. */
	const struct route *cur = M.route;
	unsigned n = cur->nchains;
	struct cfg_chain *specs = route_specs(cur);
	if (!specs)
		return error("chain_set: out of memory");
	int found = -1;
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(cur->chains[i].name, json_string_value(name)))
			found = (int)i;
	unsigned idx = found >= 0 ? (unsigned)found : n;
	struct cfg_chain *t = &specs[idx];
	free(t->svc);
	snprintf(t->name, SL_NAME_LEN, "%s", json_string_value(name));
	t->nsvc = (unsigned)json_array_size(list);
	t->svc = calloc(t->nsvc, SL_NAME_LEN);
	snprintf(t->exit, SL_NAME_LEN, "%s", exit_port >= 0 ? M.ports[exit_port].name : "");
	json_t *res = NULL;
	for (unsigned k = 0; k < t->nsvc && !res; k++) {
		json_t *s = json_array_get(list, k);
		if (!json_is_string(s) || !config_valid_name(json_string_value(s)))
			res = error("chain_set: field 'nfs[%u]': must be a service name of 1-31 characters from "
				    "A-Z a-z 0-9 _ - .", k);
		else
			snprintf(t->svc[k], SL_NAME_LEN, "%s", json_string_value(s));
	}
	unsigned total = found >= 0 ? n : n + 1, nsvc = t->nsvc;
	int32_t port_chain[SL_MAX_PORTS];
	memcpy(port_chain, cur->port_chain, sizeof(port_chain));
	char err[256];
	struct route *nr = res ? NULL : route_build(specs, total, port_chain, err, sizeof(err));
	if (!res && !nr)
		res = error("chain_set: %s", err);
	specs_free(specs, n + 1);
	if (res)
		return res;
	route_publish(nr);
	LOG("control: chain %s set (%u services)", json_string_value(name), nsvc);
	return ok_with("chain", j_chain(M.route, idx));
}

/* A request's ingress chain: its id in the current route, -1 for none (absent or null), -2 for a name
 * that is no chain (or not a string). */
static int32_t chain_id(json_t *chain)
{
	if (!chain || json_is_null(chain))
		return -1;
	for (unsigned i = 0; json_is_string(chain) && i < M.route->nchains; i++)
		if (!strcmp(M.route->chains[i].name, json_string_value(chain)))
			return (int32_t)i;
	return -2;
}

static json_t *cmd_port_chain_set(json_t *req)
{
	json_t *port = json_object_get(req, "port"), *chain = json_object_get(req, "chain");
	int pi = json_is_string(port) ? port_lookup(json_string_value(port)) : -1;
	if (pi < 0)
		return error("port_chain_set: field 'port': unknown port '%s'",
			     json_is_string(port) ? json_string_value(port) : "?");
	int32_t ci = chain_id(chain);
	if (ci == -2)
		return error("port_chain_set: field 'chain': unknown chain '%s'", json_is_string(chain) ? json_string_value(chain) : "?");
	/* Copy the current route (chains unchanged) with the new ingress mapping. */
	const struct route *cur = M.route;
	struct cfg_chain *specs = route_specs(cur);
	if (!specs)
		return error("port_chain_set: out of memory");
	int32_t port_chain[SL_MAX_PORTS];
	memcpy(port_chain, cur->port_chain, sizeof(port_chain));
	port_chain[pi] = ci;
	char err[256];
	struct route *nr = route_build(specs, cur->nchains, port_chain, err, sizeof(err));
	specs_free(specs, cur->nchains + 1);
	if (!nr)
		return error("port_chain_set: %s", err);
	route_publish(nr);
	return ok_with("port", j_port_full((unsigned)pi));
}

/* ---- ports at runtime (docs/ports.md "Ports at runtime") ---- */

/* Publish the current route with port pi's ingress chain set to `chain` (-1: none), its next-hop
 * permissions rebuilt. 0, or -1 with err. */
static int route_set_port(unsigned pi, int32_t chain, char *err, size_t errlen)
{
	const struct route *cur = M.route;
	struct cfg_chain *specs = route_specs(cur);
	if (!specs) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	int32_t port_chain[SL_MAX_PORTS];
	memcpy(port_chain, cur->port_chain, sizeof(port_chain));
	port_chain[pi] = chain;
	struct route *nr = route_build(specs, cur->nchains, port_chain, err, errlen);
	specs_free(specs, cur->nchains + 1);
	if (!nr)
		return -1;
	route_publish(nr);
	return 0;
}

/* Every attached NF's info page names port `id` (NULL: unnames it) and counts M.nports ids (one past
 * the highest id ever used: a deleted port's id stays in the table, unnamed). The
 * SDK copied the table at attach (nf.c take_info): those NFs keep what they saw; NFs attaching
 * later get the new table from attach.c. */
static void nf_pages_port(unsigned id, const char *name)
{
	for (uint32_t i = 0; i < M.max_nfs; i++)
		if (M.nfs[i].state == NF_ATTACHED && M.nfs[i].info)
			nfinfo_set_port(M.nfs[i].info, id, name, M.nports);
}

/* Port pi out of use: its worker stops polling and sending on it (WCMD_PORT_DEL, every worker paused,
 * the flows from it gone), it leaves the route and the next-hop permissions, and what other workers
 * handed it drains. Returns the NF-pinned flows that send to it (then nothing changed) or 0; with
 * `gone` (its device was unplugged) it goes whatever refers to it, and those flows' packets drop as
 * no_path. */
static uint32_t port_out_of_use(unsigned pi, bool gone, uint32_t *flows_gone)
{
	struct port *p = &M.ports[pi];
	struct wcmd c = { .type = WCMD_PORT_DEL, .nf = pi, .arg = gone ? (void *)1 : NULL };
	worker_call(&c);
	if (c.result && !gone)
		return c.result;
	*flows_gone = c.drained;
	for (unsigned i = 0; M.cfg.auth && i < M.cfg.nservices; i++) /* a later port under this id is new */
		M.cfg.auth[i].ports &= ~(1ull << pi);
	char err[256];
	if (route_set_port(pi, -1, err, sizeof(err)) < 0) /* out of memory: port_add rebuilds it anyway */
		LOG("control: port %s: the route keeps its ingress chain (%s); a dead port is not polled", p->name, err);
	/* packets other workers handed it before it died drop at its worker (to_port): at most an
	 * inbox's worth, gone within a few loops */
	for (unsigned k = 0; __atomic_load_n(&p->inflight, __ATOMIC_ACQUIRE) > 0 && k < 100000; k++)
		usleep(10);
	return 0;
}

/* Take port pi out of use, the teardown twin of port_add's steps in reverse: its worker stops
 * polling and sending on it (WCMD_PORT_DEL: every worker paused, so no half-staged burst, and the
 * flows from it go), it leaves the route (ingress chain, next-hop permissions, may_send), what other
 * workers handed it drains, what waits in its RX queue is freed, and the device is closed and
 * removed. Returns the NF-pinned flows that send to it (then nothing changed) or 0. */
static uint32_t port_retire(unsigned pi, uint32_t *flows_gone, uint32_t *discarded)
{
	struct port *p = &M.ports[pi];
	if (p->gone) { /* unplugged: already out of use, its device released (ctl_ports_unplugged) */
		*flows_gone = *discarded = 0;
		port_forget(p);
		return 0;
	}
	uint32_t pinned = port_out_of_use(pi, false, flows_gone);
	if (pinned)
		return pinned;
	*discarded = port_rx_discard(p, 32 * SL_BURST); /* e.g. net_ring: what it sent to itself */
	port_close(p);
	port_forget(p);
	/* M.nports stays: ids below it that name no port (deleted ones) are still ids, so an NF that
	 * keeps sending to a deleted port's id gets no_path, not a violation (invalid_desc dest) */
	return 0;
}

void ctl_ports_unplugged(void)
{
	uint64_t v;
	if (read(M.dev_efd, &v, sizeof(v)) < 0) { /* EAGAIN: a spurious wake-up */
	}
	for (unsigned pi = 0; pi < M.nports; pi++) {
		struct port *p = &M.ports[pi];
		if (!__atomic_load_n(&p->unplug, __ATOMIC_ACQUIRE) || !p->live)
			continue;
		uint32_t flows_gone; /* as port_del, whatever refers to it; then the device goes */
		port_out_of_use(pi, true, &flows_gone);
		struct rte_eth_dev_info info;
		struct rte_device *dev = rte_eth_dev_info_get(p->port_id, &info) == 0 ? info.device : NULL;
		uint64_t rx, tx, rxb, txb, copied;
		port_totals(p, &rx, &rxb, &tx, &txb, &copied);
		port_close(p);
		int rc = dev ? rte_dev_remove(dev) : -ENODEV; /* releases VFIO: the kernel finishes the unplug */
		p->gone = true;
		nf_pages_port(pi, NULL);
		LOG("port %s: device %s was removed (hot-unplug): the port is down (%llu packets received, %llu sent); "
		    "packets for it drop as no_path; %s", p->name, p->devname, (unsigned long long)rx,
		    (unsigned long long)tx, rc == 0 ? "device released" : "device not released");
	}
}

/* Add a port at runtime: the config's checks for a port, then port_open as for a config port, its
 * worker starts polling it (WCMD_PORT_ADD), then its ingress chain. */
static json_t *cmd_port_add(json_t *req)
{
	json_t *name = json_object_get(req, "name"), *vdev = json_object_get(req, "vdev"),
	       *chain = json_object_get(req, "chain"), *id = json_object_get(req, "id"),
	       *queues = json_object_get(req, "queues");
	if (!json_is_string(name) || !config_valid_name(json_string_value(name)))
		return error("port_add: field 'name': must be a name of 1-31 characters from A-Z a-z 0-9 _ - .");
	const char *n = json_string_value(name);
	if (port_lookup(n) >= 0)
		return error("port_add: field 'name': duplicate port name '%s'", n);
	if (!json_is_string(vdev) || json_string_length(vdev) == 0 ||
	    json_string_length(vdev) >= sizeof(M.ports[0].vdev))
		return error("port_add: field 'vdev': must be a DPDK vdev string like \"net_null0\" (at most %zu characters)",
			     sizeof(M.ports[0].vdev) - 1);
	const char *v = json_string_value(vdev);
	/* PCI devices: EAL probes only those the config names, at start (an allowlist, else --no-pci),
	 * so that the machine's own NICs are never touched; hot-plugging one would need the bus scanned */
	if (!strncmp(v, "pci:", 4))
		return error("port_add: field 'vdev': '%.64s': PCI ports are not added at runtime (sluiced probes only "
			     "the PCI devices its config names, at start-up); name it in the config's ports", v);
	if (strncmp(v, "net_", 4))
		return error("port_add: field 'vdev': '%.64s' is not a DPDK virtual device (net_*)", v);
	size_t dl = strcspn(v, ",");
	for (unsigned i = 0; i < M.nports; i++)
		if (M.ports[i].live && strlen(M.ports[i].devname) == dl && !strncmp(M.ports[i].devname, v, dl))
			return error("port_add: field 'vdev': device '%.*s' is port '%s' already", (int)dl, v,
				     M.ports[i].name);
	int32_t ci = chain_id(chain);
	if (ci == -2)
		return error("port_add: field 'chain': unknown chain '%s'", json_is_string(chain) ? json_string_value(chain) : "?");
	unsigned nq = 1;
	if (queues && !json_is_null(queues)) {
		if (!json_is_integer(queues) || json_integer_value(queues) < 1 || json_integer_value(queues) > SL_MAX_QUEUES)
			return error("port_add: field 'queues': must be 1..%d", SL_MAX_QUEUES);
		nq = (unsigned)json_integer_value(queues);
	}
	if (ports_live() >= SL_MAX_PORTS)
		return error("port_add: sluiced has %d ports, the most it takes; delete one first", SL_MAX_PORTS);
	unsigned pi = port_free_id();
	if (id && !json_is_null(id)) { /* a restart replays its ports with their ids (NFs' OUT ids stay) */
		if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= SL_MAX_PORTS)
			return error("port_add: field 'id': must be a port id 0..%d", SL_MAX_PORTS - 1);
		pi = (unsigned)json_integer_value(id);
		if (M.ports[pi].live)
			return error("port_add: field 'id': port id %u is port '%s'", pi, M.ports[pi].name);
	}
	struct port *p = &M.ports[pi];
	snprintf(p->name, sizeof(p->name), "%s", n);
	snprintf(p->vdev, sizeof(p->vdev), "%s", v);
	p->runtime = true;
	char err[512];
	if (port_open(p, M.region.pool, nq, err, sizeof(err)) < 0) {
		port_forget(p);
		return error("port_add: %s", err);
	}
	/* placement (architecture.md "Workers"), fixed for its life: its ingress chain's worker, else id
	 * mod N; a multi-queue port's queue q on worker q mod N */
	port_place(pi, ci);
	if (pi >= M.nports)
		__atomic_store_n(&M.nports, pi + 1, __ATOMIC_RELEASE);
	struct wcmd c = { .type = WCMD_PORT_ADD, .nf = pi };
	worker_call(&c);
	/* a free id's ingress chain is none unless a route rebuild failed at its port_del */
	if (M.route->port_chain[pi] != ci && route_set_port(pi, ci, err, sizeof(err)) < 0) {
		uint32_t fl, dis;
		port_retire(pi, &fl, &dis); /* just opened: no NF pinned a flow to it */
		return error("port_add: %s", err);
	}
	nf_pages_port(pi, p->name);
	struct rte_eth_dev_info info;
	if (rte_eth_dev_info_get(p->port_id, &info) != 0)
		info.driver_name = "?";
	LOG("control: port %s added: %s is port id %u (DPDK port %u, %s, MTU %u, frames up to %u bytes; worker %u, "
	    "%u RX queue%s, ingress chain %s)", p->name, p->vdev, pi, p->port_id, info.driver_name, p->mtu, p->max_frame,
	    p->worker, p->nrxq, p->nrxq > 1 ? "s" : "", ci >= 0 ? M.route->chains[ci].name : "none");
	return ok_with("port", j_port_full(pi));
}

/* Delete a port at runtime. Refused, changing nothing, while anything would still send to it or
 * match on it: a chain's exit, a rule (action or in_port), the malformed action, a pinned flow. */
static json_t *cmd_port_del(json_t *req)
{
	json_t *name = json_object_get(req, "name");
	int pi = json_is_string(name) ? port_lookup(json_string_value(name)) : -1;
	if (pi < 0)
		return error("port_del: field 'name': unknown port '%s'", json_is_string(name) ? json_string_value(name) : "?");
	char pname[SL_NAME_LEN];
	snprintf(pname, sizeof(pname), "%s", M.ports[pi].name);
	for (unsigned k = 0; k < M.route->nchains; k++)
		if (M.route->chains[k].exit == pi)
			return error("port_del: port '%s' is the exit of chain '%s'; change the chain first", pname,
				     M.route->chains[k].name);
	for (unsigned k = 0; k < M.nrules; k++) {
		const struct rule *r = &M.rules[k];
		json_t *ip = json_object_get(r->match, "in_port");
		bool out = r->action.kind == STEER_PORT && r->action.target == pi;
		if (out || (json_is_string(ip) && !strcmp(json_string_value(ip), pname)))
			return error("port_del: port '%s' is %s rule %u%s%s; delete or change the rule first", pname,
				     out ? "the action of" : "matched (in_port) by", r->id, r->name[0] ? " " : "", r->name);
	}
	if (M.malformed.kind == STEER_PORT && M.malformed.target == pi)
		return error("port_del: port '%s' is the steering malformed action (steering.malformed in the config)",
			     pname);
	uint64_t rx, tx, rxb, txb, copied;
	port_totals(&M.ports[pi], &rx, &rxb, &tx, &txb, &copied);
	uint32_t flows_gone = 0, discarded = 0;
	uint32_t pinned = port_retire((unsigned)pi, &flows_gone, &discarded);
	if (pinned)
		return error("port_del: port '%s' is where %u flows NFs pinned send their packets (flows: they go after "
			     "steering.flow_idle_ms without a packet, or when the NF unpins them); try again then",
			     pname, pinned);
	nf_pages_port((unsigned)pi, NULL);
	LOG("control: port %s deleted (port id %d; %llu packets received, %llu sent; %u flows from it removed, "
	    "%u packets left in its queue freed)", pname, pi, (unsigned long long)rx, (unsigned long long)tx, flows_gone,
	    discarded);
	return json_pack("{s:b}", "ok", 1);
}

/* ---- steering rules (docs/steering.md) ---- */

static json_t *j_rules(void)
{
	const struct rule **order = rules_sorted(M.rules, M.nrules);
	if (!order)
		return error("rules: out of memory");
	json_t *a = json_array();
	for (unsigned i = 0; i < M.nrules; i++)
		json_array_append_new(a, rule_json(order[i]));
	free(order);
	return json_pack("{s:b,s:o,s:o}", "ok", 1, "rules", a, "malformed", steer_action_json(M.malformed));
}

static json_t *cmd_service_set(json_t *req)
{
	json_t *name = json_object_get(req, "name"), *pol = json_object_get(req, "policy");
	int s = json_is_string(name) ? service_lookup(json_string_value(name)) : -1;
	if (s < 0)
		return error("service_set: field 'name': unknown service '%s'", json_is_string(name) ? json_string_value(name) : "?");
	int p = json_is_string(pol) ? svc_policy_parse(json_string_value(pol)) : -1;
	if (p < 0)
		return error("service_set: field 'policy': must be flow, least_loaded or round_robin");
	/* one byte the worker reads per pick: a plain store is enough */
	__atomic_store_n(&M.services[s].policy, (uint8_t)p, __ATOMIC_RELAXED);
	LOG("control: service %s policy %s", M.services[s].name, svc_policy_names[p]);
	return json_pack("{s:b}", "ok", 1);
}

/* Take an NF out of its service: no new packets or flows; it keeps returning what it holds. The CLI
 * stops it once `queued` and `lent` reach 0 (sluice nf scale). */
static json_t *cmd_nf_drain(json_t *req)
{
	json_t *name = json_object_get(req, "name");
	for (uint32_t i = 0; json_is_string(name) && i < M.max_nfs; i++) {
		struct nf *nf = &M.nfs[i];
		if (nf->state != NF_ATTACHED || strcmp(nf->name, json_string_value(name)))
			continue;
		struct wcmd c = { .type = WCMD_NF_DRAIN, .nf = i };
		worker_call(&c);
		LOG("control: NF %s draining", nf->name);
		return json_pack("{s:b}", "ok", 1);
	}
	return error("nf_drain: field 'name': no attached NF '%s'", json_is_string(name) ? json_string_value(name) : "?");
}

static json_t *j_flows(void)
{
	const struct flow_stats *f = &wstats()->flow_st;
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "entries", (json_int_t)f->entries,
			 "max", (json_int_t)M.cfg.flows, "idle_ms", (json_int_t)M.cfg.flow_idle_ms, "hits",
			 (json_int_t)f->hits, "misses", (json_int_t)f->misses, "rechecked", (json_int_t)f->rechecked,
			 "moved", (json_int_t)f->moved, "expired", (json_int_t)f->expired, "full", (json_int_t)f->full,
			 "pinned", (json_int_t)f->pinned, "pins", (json_int_t)f->pins, "unpins", (json_int_t)f->unpins,
			 "pin_ignored", (json_int_t)f->pin_ignored);
}

static json_t *cmd_rule_add(json_t *req)
{
	char err[256];
	int at = rules_add(json_object_get(req, "rule"), err, sizeof(err));
	if (at < 0)
		return error("rule_add: %s", err);
	LOG("control: rule %u added (%u rules)", M.rules[at].id, M.nrules);
	return ok_with("rule", rule_json(&M.rules[at]));
}

static json_t *cmd_rule_del(json_t *req)
{
	json_t *id = json_object_get(req, "id");
	if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > UINT32_MAX)
		return error("rule_del: field 'id': must be a rule id (see the rules command)");
	char err[256];
	if (rules_del((uint32_t)json_integer_value(id), err, sizeof(err)) < 0)
		return error("rule_del: %s", err);
	LOG("control: rule %lld deleted (%u rules)", (long long)json_integer_value(id), M.nrules);
	return json_pack("{s:b}", "ok", 1);
}

static json_t *cmd_rules_set(json_t *req)
{
	json_t *list = json_object_get(req, "rules");
	if (!json_is_array(list))
		return error("rules_set: field 'rules': must be a list of rules");
	char err[256];
	if (rules_set(list, err, sizeof(err)) < 0)
		return error("rules_set: %s", err);
	LOG("control: rules replaced (%u rules)", M.nrules);
	return j_rules();
}

static int unhex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Dry run: which rule and action each frame would get on a port. Counts nothing. */
static json_t *cmd_classify(json_t *req)
{
	json_t *port = json_object_get(req, "port"), *pkts = json_object_get(req, "packets");
	int pi = json_is_string(port) ? port_lookup(json_string_value(port)) : -1;
	if (pi < 0)
		return error("classify: field 'port': unknown port '%s'", json_is_string(port) ? json_string_value(port) : "?");
	if (!json_is_array(pkts))
		return error("classify: field 'packets': must be a list of frames in hex");
	json_t *out = json_array();
	size_t i;
	json_t *v;
	uint8_t frame[16384];
	json_array_foreach(pkts, i, v) {
		const char *h = json_is_string(v) ? json_string_value(v) : NULL;
		size_t hl = h ? json_string_length(v) : 0;
		bool bad = !h || hl % 2 || hl / 2 > sizeof(frame);
		for (size_t k = 0; !bad && k < hl / 2; k++) {
			int a = unhex(h[2 * k]), b = unhex(h[2 * k + 1]);
			bad = a < 0 || b < 0;
			frame[k] = (uint8_t)(a << 4 | b);
		}
		if (bad) {
			json_decref(out);
			return error("classify: field 'packets[%zu]': must be a frame of at most %zu bytes in hex", i,
				     sizeof(frame));
		}
		struct steer_result r;
		if (steer_classify_one(M.steer, frame, (uint32_t)(hl / 2), (uint8_t)pi, &r) < 0) {
			json_decref(out);
			return error("classify: the classifier failed on packets[%zu]", i);
		}
		struct steer_action a = r.action;
		if (!r.malformed && !r.rule && M.route->port_chain[pi] >= 0)
			a = (struct steer_action){ .kind = STEER_CHAIN, .target = (uint16_t)M.route->port_chain[pi] };
		json_array_append_new(out, json_pack("{s:b,s:o,s:o}", "malformed", r.malformed, "rule",
						     r.rule ? json_integer(r.rule->id) : json_null(), "action",
						     steer_action_json(a)));
	}
	return ok_with("results", out);
}

/* Every buffer in exactly one place (audit.c): free, lent to one NF, or staged. */
static json_t *cmd_pool_audit(void)
{
	uint32_t nb = 0, most = 0; /* every region's buffers, one index (audit.c audit_base) */
	for (unsigned r = 0; r < M.nregions; r++)
		if (M.regions[r]) {
			nb += M.regions[r]->nbufs;
			most = M.regions[r]->nbufs > most ? M.regions[r]->nbufs : most;
		}
	struct pool_audit a = { .cap = 2 * most + 2 * SL_BURST };
	a.objs = calloc(a.cap, sizeof(*a.objs));
	a.cnt = calloc(nb, 1);
	a.loc = calloc(nb, 1);
	a.owned = calloc(M.max_nfs, sizeof(*a.owned));
	json_t *res;
	if (!a.objs || !a.cnt || !a.loc || !a.owned) {
		res = error("pool_audit: out of memory");
		goto out;
	}
	struct wcmd c = { .type = WCMD_POOL_AUDIT, .arg = &a };
	worker_call(&c);
	json_t *dup = json_array(), *missing = json_array(), *mism = json_array();
	uint32_t ndup = 0, nmissing = 0;
	static const char *const where[] = { "free", "lent", "staged", "port" };
	for (uint32_t b = 0; b < nb; b++) {
		if (a.cnt[b] == 0 && nmissing++ < AUDIT_LIST_MAX)
			json_array_append_new(missing, json_integer(b));
		if (a.cnt[b] > 1 && ndup++ < AUDIT_LIST_MAX) {
			json_t *w = json_array();
			for (int k = 0; k < 4; k++)
				if (a.loc[b] & (1 << k))
					json_array_append_new(w, json_string(where[k]));
			json_array_append_new(dup, json_pack("{s:I,s:I,s:o}", "buf", (json_int_t)b, "places",
							     (json_int_t)a.cnt[b], "in", w));
		}
	}
	for (uint32_t i = 0; i < a.nmismatch; i++)
		json_array_append_new(mism, json_pack("{s:s,s:I,s:I}", "nf", M.nfs[a.mismatch_nf[i]].name, "lent",
						      (json_int_t)a.mismatch_lent[i], "ledger",
						      (json_int_t)a.mismatch_owned[i]));
	/* A PCI NIC's rings hold buffers no list of ours shows (posted for RX, sent and not reclaimed):
	 * as many missing buffers as its descriptors are taken to be in the device. */
	uint32_t dev_cap = 0;
	for (unsigned i = 0; i < M.nports; i++)
		if (M.ports[i].live)
			dev_cap += M.ports[i].dev_bufs;
	uint32_t in_device = nmissing <= dev_cap ? nmissing : 0;
	bool ok = ndup == 0 && nmissing == in_device && a.nmismatch == 0 && a.foreign == 0 && a.bad_owner == 0;
	res = json_pack("{s:b,s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o}", "ok", 1, "whole", ok, "mbufs",
			(json_int_t)nb, "free", (json_int_t)a.free, "lent", (json_int_t)a.lent, "staged",
			(json_int_t)(a.staged + a.port_staged), "foreign", (json_int_t)a.foreign, "bad_owner",
			(json_int_t)a.bad_owner, "n_duplicates", (json_int_t)ndup, "n_missing", (json_int_t)nmissing,
			"duplicates", dup, "missing", missing, "lent_mismatch", mism);
	if (dev_cap) {
		json_object_set_new(res, "in_device", json_integer(in_device));
		json_object_set_new(res, "device_descriptors", json_integer(dev_cap));
	}
	if (!ok)
		LOG("control: pool audit: %u duplicates, %u missing, %u NFs whose lent disagrees with the ledger, "
		    "%u foreign objects, %u buffers owned by no NF", ndup, nmissing, a.nmismatch, a.foreign, a.bad_owner);
out:
	free(a.objs);
	free(a.cnt);
	free(a.loc);
	free(a.owned);
	return res;
}

/* --test-hooks only: break something on purpose so the tests can see the audit catch it. */
static json_t *cmd_test_hook(json_t *req)
{
	if (!M.test_hooks)
		return error("field 'cmd': unknown command 'test_hook' (sluiced runs without --test-hooks)");
	json_t *w = json_object_get(req, "what");
	if (!json_is_string(w) || strcmp(json_string_value(w), "double_free"))
		return error("test_hook: field 'what': must be double_free");
	struct wcmd c = { .type = WCMD_TEST_HOOK, .nf = TEST_HOOK_DOUBLE_FREE };
	worker_call(&c);
	if (c.result == UINT32_MAX)
		return error("test_hook: the pool is empty");
	LOG("control: test hook: buffer %u freed twice on purpose", c.result);
	return json_pack("{s:b,s:I}", "ok", 1, "buf", (json_int_t)c.result);
}

static int cur_conn = -1; /* the connection whose request is being answered (-1: a replay) */

static json_t *cmd_capture(const char *c, json_t *req)
{
	char err[512];
	if (!strcmp(c, "captures"))
		return ok_with("captures", capture_list());
	if (!strcmp(c, "capture_start")) {
		json_t *r = capture_start(req, cur_conn, err, sizeof(err));
		return r ? r : error("%s", err);
	}
	json_t *id = json_object_get(req, "id");
	if (!json_is_integer(id))
		return error("capture_stop: field 'id': missing or not an integer");
	return capture_stop((uint32_t)json_integer_value(id), cur_conn, err, sizeof(err)) < 0
		       ? error("%s", err)
		       : json_pack("{s:b}", "ok", 1);
}

static json_t *cmd_trace(const char *c)
{
	char err[512];
	json_t *r = !strcmp(c, "trace_get")    ? trace_get()
		    : !strcmp(c, "trace_last") ? trace_last()
					       : trace_stop(cur_conn, err, sizeof(err));
	return r ? r : error("%s", err);
}

static json_t *dispatch_cmd(json_t *req, bool *shutdown)
{
	if (!json_is_object(req))
		return error("request must be a JSON object");
	json_t *cmd = json_object_get(req, "cmd");
	if (!json_is_string(cmd))
		return error("field 'cmd': missing or not a string");
	const char *c = json_string_value(cmd);
	if (!strcmp(c, "status"))
		return j_status();
	xstats_all = json_is_true(json_object_get(req, "xstats")); /* ports, stats: every xstat, zeros too */
	if (!strcmp(c, "ports"))
		return ok_with("ports", j_ports());
	if (!strcmp(c, "nfs"))
		return ok_with("nfs", j_nfs());
	if (!strcmp(c, "chains"))
		return ok_with("chains", j_chains());
	if (!strcmp(c, "stats")) {
		const struct worker_stats *S = wstats();
		const struct drops *d = &S->drops;
		json_t *st = json_pack("{s:b,s:o,s:o,s:o,s:o,s:o,s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}}", "ok", 1, "ports",
				 j_ports(), "nfs", j_nfs(), "services", j_services(), "chains", j_chains(), "pool",
				 j_pool(), "drops", "ring_full", (json_int_t)d->ring_full, "no_path",
				 (json_int_t)d->no_path, "nf_gone", (json_int_t)d->nf_gone, "invalid_desc",
				 (json_int_t)d->invalid_desc, "tx_full", (json_int_t)d->tx_full, "rx_invalid",
				 (json_int_t)d->rx_invalid, "rule", (json_int_t)d->rule, "malformed",
				 (json_int_t)d->malformed, "nf_detached", (json_int_t)d->nf_detached, "no_buffer", (json_int_t)d->no_buffer, "backpressure", (json_int_t)d->backpressure);
		json_object_set_new(json_object_get(st, "drops"), "quota", json_integer((json_int_t)d->quota));
		json_object_set_new(json_object_get(st, "drops"), "too_long", json_integer((json_int_t)d->too_long));
		json_object_set_new(st, "flows", j_flows());
		json_object_set_new(st, "active_set", j_active_set(S));
		json_object_set_new(st, "doorbell_epoll", json_pack("{s:I,s:I}", "polls", (json_int_t)S->bell_polls,
								    "events", (json_int_t)S->bell_events));
		json_object_set_new(st, "supply_short", json_integer((json_int_t)S->supply_short));
		json_object_set_new(st, "violations", j_violations(S));
		json_object_set_new(st, "domains", j_domains());
		json_object_set_new(st, "copies", j_copies(S));
		json_object_set_new(st, "pipes", json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I}", "enabled", M.cfg.pipes, "open",
							   (json_int_t)S->pipes.open, "opened", (json_int_t)S->pipes.opened,
							   "closed", (json_int_t)S->pipes.closed, "packets",
							   (json_int_t)S->pipes.packets, "close_timeouts",
							   (json_int_t)S->pipes.close_timeouts, "fused",
							   (json_int_t)S->pipes.fused));
		json_object_set_new(st, "nf_sched", sched_stats());
		json_object_set_new(st, "out_set", json_pack("{s:I,s:I,s:I}", "packets", (json_int_t)S->out_set.packets,
							      "frames", (json_int_t)S->out_set.frames, "copies",
							      (json_int_t)S->out_set.copies));
		return st;
	}
	if (!strcmp(c, "chain_set"))
		return cmd_chain_set(req);
	if (!strcmp(c, "port_chain_set"))
		return cmd_port_chain_set(req);
	if (!strcmp(c, "port_add"))
		return cmd_port_add(req);
	if (!strcmp(c, "port_del"))
		return cmd_port_del(req);
	if (!strcmp(c, "rules"))
		return j_rules();
	if (!strcmp(c, "service_set"))
		return cmd_service_set(req);
	if (!strcmp(c, "nf_drain"))
		return cmd_nf_drain(req);
	if (!strcmp(c, "flows"))
		return ok_with("flows", j_flows());
	if (!strcmp(c, "rule_add"))
		return cmd_rule_add(req);
	if (!strcmp(c, "rule_del"))
		return cmd_rule_del(req);
	if (!strcmp(c, "rules_set"))
		return cmd_rules_set(req);
	if (!strcmp(c, "classify"))
		return cmd_classify(req);
	if (!strcmp(c, "pool_audit"))
		return cmd_pool_audit();
	if (!strcmp(c, "test_hook"))
		return cmd_test_hook(req);
	if (!strcmp(c, "guest_prepare") || !strcmp(c, "guest_release")) { /* docs/guests.md */
		json_t *n = json_object_get(req, "name"), *sv = json_object_get(req, "service");
		char err[256];
		if (!json_is_string(n))
			return error("%s: field 'name': missing or not a string", c);
		if (!strcmp(c, "guest_release"))
			return guest_release(json_string_value(n), err, sizeof(err)) < 0 ? error("%s", err)
											  : json_pack("{s:b}", "ok", 1);
		if (!json_is_string(sv))
			return error("guest_prepare: field 'service': missing or not a string");
		json_t *r = guest_prepare(json_string_value(n), json_string_value(sv), err, sizeof(err));
		return r ? r : error("%s", err);
	}
	if (!strcmp(c, "guests"))
		return ok_with("guests", guest_list());
	if (!strcmp(c, "capture_start") || !strcmp(c, "capture_stop") || !strcmp(c, "captures"))
		return cmd_capture(c, req);
	if (!strcmp(c, "trace_start")) {
		char err[512];
		json_t *r = trace_start(req, cur_conn, err, sizeof(err));
		return r ? r : error("%s", err);
	}
	if (!strcmp(c, "trace_get") || !strcmp(c, "trace_stop") || !strcmp(c, "trace_last"))
		return cmd_trace(c);
	if (!strcmp(c, "shutdown")) {
		json_t *r = json_object_get(req, "restart");
		if (r && !json_is_boolean(r))
			return error("shutdown: field 'restart': must be true or false");
		*shutdown = true;
		M.restart = r && json_is_true(r);
		return json_pack("{s:b}", "ok", 1);
	}
	return error("field 'cmd': unknown command '%.64s' (status, ports, nfs, chains, stats, chain_set, "
		     "port_chain_set, port_add, port_del, service_set, nf_drain, rules, flows, rule_add, rule_del, rules_set, classify, pool_audit, "
		     "guests, guest_prepare, guest_release, capture_start, capture_stop, captures, trace_start, trace_get, trace_stop, trace_last, shutdown)", c);
}

/* ---- runtime state (docs/architecture.md "Restarts") ---- */

#define RUNTIME_VERSION 1

/* Commands whose effect a restarted sluiced must keep. */
static bool is_change(const char *c)
{
	static const char *const changes[] = { "chain_set", "port_chain_set", "service_set", "rule_add", "rule_del",
					       "rules_set", "port_add", "port_del", NULL };
	for (unsigned i = 0; changes[i]; i++)
		if (!strcmp(c, changes[i]))
			return true;
	return false;
}

static json_t *dispatch(json_t *req, bool *shutdown)
{
	json_t *resp = dispatch_cmd(req, shutdown);
	json_t *cmd = json_is_object(req) ? json_object_get(req, "cmd") : NULL;
	if (!M.replaying && json_is_true(json_object_get(resp, "ok")) && json_is_string(cmd) &&
	    is_change(json_string_value(cmd)))
		ctl_runtime_save();
	return resp;
}

/* The state: services (in id order: NFs name them by id), chains (in id order), ports, rules. */
static json_t *runtime_state(void)
{
	json_t *svcs = json_array(), *chains = j_chains(), *ports = json_array(), *rules = json_array();
	for (uint32_t i = 0; i < M.nservices; i++)
		json_array_append_new(svcs, json_pack("{s:s,s:s}", "name", M.services[i].name, "policy",
						      svc_policy_names[M.services[i].policy]));
	for (unsigned i = 0; i < M.nports; i++) {
		if (!M.ports[i].live)
			continue; /* deleted: replayed as a port_del */
		json_t *p = j_port(i), *keep = json_object();
		static const char *const keys[] = { "id", "name", "vdev", "chain", NULL };
		for (unsigned k = 0; keys[k]; k++)
			json_object_set(keep, keys[k], json_object_get(p, keys[k]));
		json_object_set_new(keep, "queues", json_integer(M.ports[i].nrxq));
		json_decref(p);
		json_array_append_new(ports, keep);
	}
	const struct rule **order = rules_sorted(M.rules, M.nrules);
	for (unsigned i = 0; order && i < M.nrules; i++) {
		json_t *r = rule_json(order[i]);
		json_object_del(r, "hits");
		json_array_append_new(rules, r);
	}
	free(order);
	return json_pack("{s:i,s:o,s:o,s:o,s:o}", "version", RUNTIME_VERSION, "services", svcs, "chains", chains,
			 "ports", ports, "rules", rules);
}

int ctl_runtime_save(void)
{
	char path[160], tmp[168];
	snprintf(path, sizeof(path), "%s/runtime.json", M.sock_dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	json_t *st = runtime_state();
	int rc = json_dump_file(st, tmp, JSON_COMPACT);
	json_decref(st);
	if (rc == 0 && rename(tmp, path) == 0)
		return 0;
	LOG("control: cannot write %s: %s (a restart would not keep the latest change)", path, strerror(errno));
	unlink(tmp);
	return -1;
}

/* One replayed step: a control request; a failure is logged and counted. */
static unsigned replay_step(json_t *req, const char *what)
{
	bool shutdown = false;
	json_t *resp = dispatch_cmd(req, &shutdown);
	unsigned failed = 0;
	if (!json_is_true(json_object_get(resp, "ok"))) {
		json_t *e = json_object_get(resp, "error");
		LOG("resume: %s: %s", what, json_is_string(e) ? json_string_value(e) : "failed");
		failed = 1;
	}
	json_decref(resp);
	json_decref(req);
	return failed;
}

static bool port_in(json_t *ports, const char *name)
{
	size_t i;
	json_t *p;
	json_array_foreach(ports, i, p)
		if (json_is_string(json_object_get(p, "name")) && !strcmp(json_string_value(json_object_get(p, "name")), name))
			return true;
	return false;
}

int ctl_runtime_replay(const char *path, char *err, size_t errlen)
{
	json_error_t je;
	json_t *st = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!st) {
		snprintf(err, errlen, "%s: %s (line %d)", path, je.text, je.line);
		return -1;
	}
	json_t *svcs = json_object_get(st, "services"), *chains = json_object_get(st, "chains"),
	       *ports = json_object_get(st, "ports"), *rules = json_object_get(st, "rules");
	if (json_integer_value(json_object_get(st, "version")) != RUNTIME_VERSION || !json_is_array(svcs) ||
	    !json_is_array(chains) || !json_is_array(ports) || !json_is_array(rules)) {
		snprintf(err, errlen, "%s: not a sluiced runtime state (version %d)", path, RUNTIME_VERSION);
		json_decref(st);
		return -1;
	}
	M.replaying = true;
	unsigned failed = 0;
	size_t i;
	json_t *v;
	/* services first, in id order: the ids NFs use for SL_ACT_TO_NF stay what they were */
	json_array_foreach(svcs, i, v) {
		json_t *n = json_object_get(v, "name");
		int id = json_is_string(n) ? service_get_or_create(json_string_value(n)) : -1;
		if (id < 0) {
			LOG("resume: services[%zu]: cannot create it", i);
			failed++;
		} else if (id != (int)i) /* a reload removed a service before it from config.json */
			LOG("resume: warning: service %s has id %d now, %zu before the restart (an NF that keeps "
			    "service ids must look it up again)", json_string_value(n), id, i);
	}
	/* ports added since (at their old ids), then chains, ingress chains and rules, then the ports
	 * removed since (nothing refers to them any more) */
	json_array_foreach(ports, i, v) {
		json_t *n = json_object_get(v, "name");
		if (json_is_string(n) && port_lookup(json_string_value(n)) < 0)
			failed += replay_step(json_pack("{s:s,s:O,s:O,s:O,s:O?}", "cmd", "port_add", "name", n, "vdev",
							json_object_get(v, "vdev"), "id", json_object_get(v, "id"),
							"queues", json_object_get(v, "queues")),
					      "ports: port_add");
	}
	json_array_foreach(chains, i, v)
		failed += replay_step(json_pack("{s:s,s:O,s:O,s:O}", "cmd", "chain_set", "name", json_object_get(v, "name"),
						"nfs", json_object_get(v, "nfs"), "exit", json_object_get(v, "exit")),
				      "chains: chain_set");
	json_array_foreach(ports, i, v)
		failed += replay_step(json_pack("{s:s,s:O,s:O}", "cmd", "port_chain_set", "port", json_object_get(v, "name"),
						"chain", json_object_get(v, "chain")),
				      "ports: port_chain_set");
	failed += replay_step(json_pack("{s:s,s:O}", "cmd", "rules_set", "rules", rules), "rules: rules_set");
	for (unsigned p = M.nports; p-- > 0;)
		if (M.ports[p].live && !port_in(ports, M.ports[p].name))
			failed += replay_step(json_pack("{s:s,s:s}", "cmd", "port_del", "name", M.ports[p].name),
					      "ports: port_del");
	json_array_foreach(svcs, i, v)
		failed += replay_step(json_pack("{s:s,s:O,s:O}", "cmd", "service_set", "name", json_object_get(v, "name"),
						"policy", json_object_get(v, "policy")),
				      "services: service_set");
	M.replaying = false;
	LOG("resume: %zu services, %zu chains, %zu ports, %zu rules from %s (%u steps failed)", json_array_size(svcs),
	    json_array_size(chains), json_array_size(ports), json_array_size(rules), path, failed);
	json_decref(st);
	ctl_runtime_save(); /* the state as it now is */
	return (int)failed;
}

static int reply(struct ctl_conn *c, json_t *resp)
{
	char *s = json_dumps(resp, JSON_COMPACT);
	json_decref(resp);
	if (!s)
		return -1;
	size_t n = strlen(s);
	int rc = send_all(c->fd, s, n);
	if (rc == 0)
		rc = send_all(c->fd, "\n", 1);
	free(s);
	return rc;
}

void ctl_event(void *arg, uint32_t events)
{
	struct ctl_conn *c = &conns[(uintptr_t)arg];
	if (c->fd < 0)
		return;
	(void)events;
	for (;;) {
		if (c->len == c->cap && c->cap < CTL_LINE_MAX) { /* a long line: grow the buffer */
			char *b = realloc(c->buf, c->cap * 2);
			if (b) {
				c->buf = b;
				c->cap *= 2;
			}
		}
		ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			conn_close(c);
			return;
		}
		c->len += (size_t)n;
		char *nl;
		while ((nl = memchr(c->buf, '\n', c->len))) {
			*nl = 0;
			size_t line = (size_t)(nl - c->buf);
			json_error_t je;
			bool shutdown = false;
			json_t *req = json_loadb(c->buf, line, JSON_REJECT_DUPLICATES, &je);
			cur_conn = (int)(c - conns);
			json_t *resp = req ? dispatch(req, &shutdown)
					   : error("invalid JSON at column %d: %s", je.column, je.text);
			cur_conn = -1;
			json_decref(req);
			memmove(c->buf, nl + 1, c->len - line - 1);
			c->len -= line + 1;
			if (shutdown) { /* even if the client does not wait for the answer */
				LOG("control: shutdown requested");
				M.stop = true;
			}
			if (reply(c, resp) < 0) {
				conn_close(c);
				return;
			}
		}
		if (c->len == c->cap && c->cap >= CTL_LINE_MAX) {
			reply(c, error("request line longer than %u bytes", CTL_LINE_MAX));
			conn_close(c);
			return;
		}
	}
}
