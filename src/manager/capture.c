/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Live capture (docs/observability.md "Capture"; the ring: include/sluice/capture.h).
 *
 * A capture is a set of points -- a port's RX or TX, an NF's way in or out -- a filter and a ring
 * file. Each point has a tap mask (struct port tap_rx/tap_tx, struct nf tap_in/tap_out) with one bit
 * per live capture; the workers test it once per burst (an NF's way out: once per packet, where the
 * descriptor is already in hand) and call capture_pkts only when it is set, so no capture costs one
 * predictable branch. A worker copies matching packets into its own ring of the capture's file (the
 * copy: a capture never holds a buffer) and the reader -- `sluice capture` -- drains it. A full ring
 * loses the copy and counts it.
 *
 * A capture belongs to the control connection that started it and ends with it (a killed reader
 * cannot leave a tap behind). Pipes (datapath.c "Pipes") pass packets from NF to NF without a worker:
 * while an NF's way in or out is captured, the pipes through that hop are closed and its packets go
 * through the worker again (the same path they take without pipes), and they reopen when it ends.
 */
#define ALLOW_EXPERIMENTAL_API 1 /* rte_bpf_convert */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pcap/pcap.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <rte_bpf.h>
#include <rte_cycles.h>
#include <rte_malloc.h>

#include "capture.h"

static uint32_t next_id = 1;

/* ---- the control thread ---- */

static void taps_set(struct capture *c, unsigned k, bool on)
{
	uint8_t bit = (uint8_t)(1u << k);
	for (unsigned i = 0; i < c->npoints; i++) {
		uint16_t o = c->pt[i].obj;
		uint8_t *t = c->pt[i].kind == SL_CAP_PORT_RX ? &M.ports[o].tap_rx
			   : c->pt[i].kind == SL_CAP_PORT_TX ? &M.ports[o].tap_tx
			   : c->pt[i].kind == SL_CAP_NF_IN   ? &M.nfs[o].tap_in
							     : &M.nfs[o].tap_out;
		if (on)
			__atomic_fetch_or(t, bit, __ATOMIC_RELEASE);
		else
			__atomic_fetch_and(t, (uint8_t)~bit, __ATOMIC_RELEASE);
	}
}

/* Wait (bounded) until the pipes through the captured NF hops are closed: from then on every packet
 * through them passes the worker, where the copies are taken. */
static bool pipes_closed(const struct capture *c)
{
	uint64_t end = rte_rdtsc() + M.tsc_hz / 2;
	for (;;) {
		bool open = false;
		for (unsigned i = 0; i < c->npoints && !open; i++) {
			const struct nf *nf = &M.nfs[c->pt[i].obj];
			if (c->pt[i].kind == SL_CAP_NF_IN)
				open = __atomic_load_n(&nf->pipe_from, __ATOMIC_ACQUIRE) >= 0;
			else if (c->pt[i].kind == SL_CAP_NF_OUT)
				open = __atomic_load_n(&nf->pipe_to, __ATOMIC_ACQUIRE) >= 0;
		}
		if (!open)
			return true;
		if (rte_rdtsc() > end)
			return false;
		usleep(1000);
	}
}

static void capture_free(struct capture *c)
{
	if (c->map && c->map != MAP_FAILED)
		munmap(c->map, c->map_size);
	if (c->path[0])
		unlink(c->path);
	if (c->bpf)
		rte_bpf_destroy(c->bpf);
	memset(c, 0, sizeof(*c));
	c->conn = -1;
}

static void stop_slot(unsigned k)
{
	struct capture *c = &caps[k];
	taps_set(c, k, false);
	__atomic_store_n(&c->live, false, __ATOMIC_RELEASE);
	/* after the barrier no worker is inside a burst that saw the capture live: the ring can go
	 * (and the pipes it closed reopen) */
	worker_sync_all();
	LOG("capture %u: stopped", c->id);
	capture_free(c);
}

int filter_compile(const char *expr, uint32_t snaplen, struct rte_bpf **bpf, uint64_t (**jit)(void *), char *err,
		   size_t errlen)
{
	*bpf = NULL;
	*jit = NULL;
	pcap_t *pc = pcap_open_dead(DLT_EN10MB, (int)snaplen);
	if (!pc) {
		snprintf(err, errlen, "filter: libpcap could not start");
		return -1;
	}
	struct bpf_program prog;
	if (pcap_compile(pc, &prog, expr, 1, PCAP_NETMASK_UNKNOWN) != 0) {
		snprintf(err, errlen, "filter '%.200s': %s", expr, pcap_geterr(pc));
		pcap_close(pc);
		return -1;
	}
	struct rte_bpf_prm *prm = rte_bpf_convert(&prog);
	pcap_freecode(&prog);
	pcap_close(pc);
	if (!prm) {
		snprintf(err, errlen, "filter '%.200s': DPDK's BPF could not convert it (%s)", expr,
			 strerror(rte_errno));
		return -1;
	}
	*bpf = rte_bpf_load(prm);
	rte_free(prm);
	if (!*bpf) {
		snprintf(err, errlen, "filter '%.200s': DPDK's BPF refused it (%s)", expr, strerror(rte_errno));
		return -1;
	}
	struct rte_bpf_jit j;
	if (rte_bpf_get_jit(*bpf, &j) == 0 && j.func)
		*jit = j.func;
	return 0;
}

static int add_point(struct capture *c, uint8_t kind, uint16_t obj, unsigned idx, char *err, size_t errlen)
{
	for (unsigned i = 0; i < c->npoints; i++)
		if (c->pt[i].kind == kind && c->pt[i].obj == obj)
			return 0; /* named twice (an NF and its service): one point */
	if (c->npoints == CAP_POINTS_MAX) {
		snprintf(err, errlen, "points[%u]: more than %u capture points", idx, CAP_POINTS_MAX);
		return -1;
	}
	c->pt[c->npoints++] = (struct cap_point){ .kind = kind, .obj = obj };
	return 0;
}

/* points[i]: {"port": NAME, "hop": "rx"|"tx"} or {"nf": NAME, "hop": "in"|"out"}; an NF name may be a
 * service's: each of its instances is a point. */
static int parse_point(struct capture *c, json_t *p, unsigned idx, char *err, size_t errlen)
{
	json_t *port = json_object_get(p, "port"), *nf = json_object_get(p, "nf"), *hop = json_object_get(p, "hop");
	if (!json_is_object(p) || (port != NULL) == (nf != NULL)) {
		snprintf(err, errlen, "points[%u]: expected {\"port\": NAME} or {\"nf\": NAME}", idx);
		return -1;
	}
	const char *h = json_is_string(hop) ? json_string_value(hop) : NULL;
	if (hop && !h) {
		snprintf(err, errlen, "points[%u].hop: not a string", idx);
		return -1;
	}
	if (port) {
		if (!json_is_string(port)) {
			snprintf(err, errlen, "points[%u].port: not a string", idx);
			return -1;
		}
		if (!h || (strcmp(h, "rx") && strcmp(h, "tx"))) {
			snprintf(err, errlen, "points[%u].hop: '%s' for a port: rx or tx", idx, h ? h : "(missing)");
			return -1;
		}
		int pi = port_lookup(json_string_value(port));
		if (pi < 0 || !M.ports[pi].live) {
			snprintf(err, errlen, "points[%u].port: no port named '%.64s'", idx, json_string_value(port));
			return -1;
		}
		return add_point(c, strcmp(h, "rx") ? SL_CAP_PORT_TX : SL_CAP_PORT_RX, (uint16_t)pi, idx, err, errlen);
	}
	if (!json_is_string(nf)) {
		snprintf(err, errlen, "points[%u].nf: not a string", idx);
		return -1;
	}
	if (!h || (strcmp(h, "in") && strcmp(h, "out"))) {
		snprintf(err, errlen, "points[%u].hop: '%s' for an NF: in or out", idx, h ? h : "(missing)");
		return -1;
	}
	uint8_t kind = strcmp(h, "in") ? SL_CAP_NF_OUT : SL_CAP_NF_IN;
	const char *name = json_string_value(nf);
	int svc = service_lookup(name);
	unsigned found = 0;
	for (uint32_t i = 0; i < M.max_nfs; i++) {
		const struct nf *x = &M.nfs[i];
		if (x->state != NF_ATTACHED || (strcmp(x->name, name) && (svc < 0 || x->service != svc)))
			continue;
		if (add_point(c, kind, (uint16_t)i, idx, err, errlen) < 0)
			return -1;
		found++;
	}
	if (!found) {
		snprintf(err, errlen, "points[%u].nf: no attached NF or service with NFs named '%.64s'", idx, name);
		return -1;
	}
	return 0;
}

static json_t *j_points(const struct capture *c)
{
	static const char *const hop[] = { "rx", "tx", "in", "out" };
	json_t *a = json_array();
	for (unsigned i = 0; i < c->npoints; i++) {
		bool port = c->pt[i].kind <= SL_CAP_PORT_TX;
		uint16_t o = c->pt[i].obj;
		json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:I}", "kind", port ? "port" : "nf", "name",
						   port ? M.ports[o].name : M.nfs[o].name, "hop", hop[c->pt[i].kind],
						   "id", (json_int_t)o));
	}
	return a;
}

static int ring_file(struct capture *c, uint32_t ring_size, char *err, size_t errlen)
{
	snprintf(c->path, sizeof(c->path), "%s/capture-%u.ring", M.sock_dir, c->id);
	int fd = open(c->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	c->map_size = SL_CAP_HDR_SIZE + (size_t)ring_size * M.nworkers;
	if (fd < 0 || ftruncate(fd, (off_t)c->map_size) < 0) {
		snprintf(err, errlen, "capture ring %s: %s", c->path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	c->map = mmap(NULL, c->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (c->map == MAP_FAILED) {
		snprintf(err, errlen, "capture ring %s: mmap: %s", c->path, strerror(errno));
		return -1;
	}
	c->hdr = c->map;
	*c->hdr = (struct sl_cap_hdr){ .magic = SL_CAP_MAGIC, .version = SL_CAP_VERSION, .nrings = M.nworkers,
				       .ring_size = ring_size, .snaplen = c->snaplen, .npoints = c->npoints,
				       .tsc_hz = M.tsc_hz };
	for (unsigned w = 0; w < M.nworkers; w++)
		capring_init(&c->ring[w], &c->hdr->ring[w],
			     (uint8_t *)c->map + SL_CAP_HDR_SIZE + (size_t)ring_size * w, ring_size);
	return 0;
}

/* Ring files of a sluiced that was killed (a stopped capture removes its own): gone before the first
 * capture of this one, which would reuse their names. */
void capture_sweep(void)
{
	DIR *d = opendir(M.sock_dir);
	if (!d)
		return;
	struct dirent *e;
	unsigned n = 0;
	while ((e = readdir(d)) != NULL) {
		unsigned id;
		char tail[8];
		if (sscanf(e->d_name, "capture-%u.%7s", &id, tail) == 2 && !strcmp(tail, "ring") &&
		    unlinkat(dirfd(d), e->d_name, 0) == 0)
			n++;
	}
	closedir(d);
	if (n)
		LOG("capture: removed %u ring file(s) a killed sluiced left in %s", n, M.sock_dir);
}

json_t *capture_start(json_t *req, int conn, char *err, size_t errlen)
{
	if (conn < 0) {
		snprintf(err, errlen, "capture_start: only on a control connection (it ends with it)");
		return NULL;
	}
	unsigned k = 0;
	while (k < CAPTURES_MAX && caps[k].live)
		k++;
	if (k == CAPTURES_MAX) {
		snprintf(err, errlen, "capture_start: %u captures are running already (the most at once)", CAPTURES_MAX);
		return NULL;
	}
	json_t *points = json_object_get(req, "points"), *filter = json_object_get(req, "filter");
	json_t *snap = json_object_get(req, "snaplen"), *buf = json_object_get(req, "buffer_kib");
	if (!json_is_array(points) || json_array_size(points) == 0) {
		snprintf(err, errlen, "capture_start: field 'points': missing or empty (a list of ports and NF hops)");
		return NULL;
	}
	if (filter && !json_is_string(filter)) {
		snprintf(err, errlen, "capture_start: field 'filter': not a string");
		return NULL;
	}
	if (snap && (!json_is_integer(snap) || json_integer_value(snap) < 1 || json_integer_value(snap) > CAP_SNAPLEN_MAX)) {
		snprintf(err, errlen, "capture_start: field 'snaplen': an integer 1..%u", CAP_SNAPLEN_MAX);
		return NULL;
	}
	if (buf && (!json_is_integer(buf) || json_integer_value(buf) < CAP_BUFFER_KIB_MIN ||
		    json_integer_value(buf) > CAP_BUFFER_KIB_MAX)) {
		snprintf(err, errlen, "capture_start: field 'buffer_kib': an integer %u..%u (KiB per worker)",
			 CAP_BUFFER_KIB_MIN, CAP_BUFFER_KIB_MAX);
		return NULL;
	}
	struct capture *c = &caps[k];
	capture_free(c);
	c->snaplen = snap ? (uint32_t)json_integer_value(snap) : CAP_SNAPLEN_MAX;
	size_t i;
	json_t *p;
	json_array_foreach(points, i, p)
		if (parse_point(c, p, (unsigned)i, err, errlen) < 0)
			goto fail;
	if (filter && json_string_value(filter)[0]) {
		if (filter_compile(json_string_value(filter), c->snaplen, &c->bpf, &c->jit, err, errlen) < 0)
			goto fail;
		snprintf(c->filter, sizeof(c->filter), "%s", json_string_value(filter));
	}
	c->id = next_id++;
	uint32_t ring_size = (buf ? (uint32_t)json_integer_value(buf) : CAP_BUFFER_KIB_DEFAULT) * 1024u;
	if (ring_file(c, ring_size, err, errlen) < 0)
		goto fail;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	c->base_tsc = rte_rdtsc();
	c->base_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	c->ns_per_tsc = 1e9 / (double)M.tsc_hz;
	c->conn = conn;
	__atomic_store_n(&c->live, true, __ATOMIC_RELEASE);
	taps_set(c, k, true);
	worker_sync_all(); /* pipes through captured NF hops start closing */
	bool closed = pipes_closed(c);
	LOG("capture %u: started, %u point(s)%s%s", c->id, c->npoints, c->filter[0] ? ", filter " : "", c->filter);
	return json_pack("{s:b,s:I,s:s,s:I,s:I,s:I,s:I,s:s,s:o,s:b}", "ok", 1, "id", (json_int_t)c->id, "path",
			 c->path, "size", (json_int_t)c->map_size, "rings", (json_int_t)M.nworkers, "ring_size",
			 (json_int_t)ring_size, "snaplen", (json_int_t)c->snaplen, "filter", c->filter, "points",
			 j_points(c), "pipes_closed", closed);
fail:
	capture_free(c);
	return NULL;
}

int capture_stop(uint32_t id, int conn, char *err, size_t errlen)
{
	for (unsigned k = 0; k < CAPTURES_MAX; k++)
		if (caps[k].live && caps[k].id == id) {
			if (caps[k].conn != conn) {
				snprintf(err, errlen, "capture_stop: capture %u belongs to another connection", id);
				return -1;
			}
			stop_slot(k);
			return 0;
		}
	snprintf(err, errlen, "capture_stop: no capture %u", id);
	return -1;
}

void capture_conn_closed(int conn)
{
	for (unsigned k = 0; k < CAPTURES_MAX; k++)
		if (caps[k].live && caps[k].conn == conn)
			stop_slot(k);
}

json_t *capture_list(void)
{
	json_t *a = json_array();
	for (unsigned k = 0; k < CAPTURES_MAX; k++) {
		const struct capture *c = &caps[k];
		if (!c->live)
			continue;
		uint64_t pk = 0, by = 0, lost = 0, lost_by = 0;
		for (unsigned w = 0; w < M.nworkers; w++) { /* the workers' own counts, not the file's */
			const struct capring *r = &c->ring[w];
			pk += __atomic_load_n(&r->packets, __ATOMIC_RELAXED);
			by += __atomic_load_n(&r->bytes, __ATOMIC_RELAXED);
			lost += __atomic_load_n(&r->lost, __ATOMIC_RELAXED);
			lost_by += __atomic_load_n(&r->lost_bytes, __ATOMIC_RELAXED);
		}
		json_array_append_new(a, json_pack("{s:I,s:o,s:s,s:I,s:I,s:I,s:I,s:I}", "id", (json_int_t)c->id, "points",
						   j_points(c), "filter", c->filter, "snaplen", (json_int_t)c->snaplen,
						   "packets", (json_int_t)pk, "bytes", (json_int_t)by, "lost",
						   (json_int_t)lost, "lost_bytes", (json_int_t)lost_by));
	}
	return a;
}
