/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluiced's JSON configuration (the CLI writes it from the user's YAML).
 * Every error names the field: "chains[1].exit: unknown port 'x'".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "sluiced.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

const char *const port_offload_names[PORT_OFF__COUNT] = { "rx_checksum", "vlan_strip", "vlan_insert" };

int port_opts_parse(json_t *v, const char *where, uint32_t room, struct port_opts *o, char *err, size_t errlen)
{
	memset(o, 0, sizeof(*o));
	static const char *const desc[] = { "rx_desc", "tx_desc" };
	for (int k = 0; k < 2; k++) {
		json_t *d = json_object_get(v, desc[k]);
		if (!d)
			continue;
		json_int_t x = json_is_integer(d) ? json_integer_value(d) : -1;
		if (x < 64 || x > 16384 || (x & (x - 1)))
			return fail(err, errlen, "%s.%s: must be a power of two 64..16384 (descriptors in the device's ring)",
				    where, desc[k]);
		*(k ? &o->tx_desc : &o->rx_desc) = (uint16_t)x;
	}
	json_t *m = json_object_get(v, "mtu");
	if (m) {
		json_int_t x = json_is_integer(m) ? json_integer_value(m) : -1;
		if (x < 68 || x > 9600)
			return fail(err, errlen, "%s.mtu: must be an integer 68..9600", where);
		if ((uint32_t)x + 18 > room)
			return fail(err, errlen, "%s.mtu: %lld needs frames of %lld bytes (MTU + 14 bytes of Ethernet header "
				    "+ 4 of a VLAN tag), but a buffer holds %u (sluiced.buffer_size; a frame is carried in one "
				    "buffer): set sluiced.buffer_size to at least %lld, or lower the MTU", where, (long long)x,
				    (long long)x + 18, room, ((long long)x + 18 + SL_DATA_ROOM_ALIGN - 1) / SL_DATA_ROOM_ALIGN *
				    SL_DATA_ROOM_ALIGN);
		o->mtu = (uint16_t)x;
	}
	json_t *ol = json_object_get(v, "offloads");
	if (ol) {
		if (!json_is_array(ol))
			return fail(err, errlen, "%s.offloads: must be a list of rx_checksum, vlan_strip, vlan_insert", where);
		o->offloads_set = true;
		size_t i;
		json_t *x;
		json_array_foreach(ol, i, x) {
			const char *s = json_is_string(x) ? json_string_value(x) : "";
			int b;
			for (b = 0; b < PORT_OFF__COUNT && strcmp(s, port_offload_names[b]); b++)
				;
			if (b < PORT_OFF__COUNT) {
				o->offloads |= (uint8_t)(1u << b);
				continue;
			}
			if (!strcmp(s, "tx_checksum"))
				return fail(err, errlen, "%s.offloads[%zu]: tx_checksum is not offered yet: the device computes a "
					    "checksum only for packets whose mbuf asks for it, and NFs cannot ask (the descriptor "
					    "has no room for it); NFs fix checksums themselves (docs/ports.md \"PCI NICs\")",
					    where, i);
			return fail(err, errlen, "%s.offloads[%zu]: unknown offload '%s' (rx_checksum, vlan_strip, vlan_insert)",
				    where, i, s);
		}
	}
	return 0;
}

const char *const svc_policy_names[SVC__COUNT] = { "flow", "least_loaded", "round_robin" };

int svc_policy_parse(const char *s)
{
	for (int i = 0; i < SVC__COUNT; i++)
		if (!strcmp(s, svc_policy_names[i]))
			return i;
	return -1;
}

bool config_valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n >= SL_NAME_LEN)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || c == '.'))
			return false;
	}
	return true;
}

static int get_name(json_t *obj, const char *key, const char *path, char *out, bool required,
		    char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);
	if (!v || json_is_null(v)) {
		if (required)
			return fail(err, errlen, "%s.%s: missing", path, key);
		out[0] = 0;
		return 0;
	}
	if (!json_is_string(v))
		return fail(err, errlen, "%s.%s: must be a string", path, key);
	if (!config_valid_name(json_string_value(v)))
		return fail(err, errlen, "%s.%s: '%s' is not a valid name (1-31 chars of A-Z a-z 0-9 _ - .)",
			    path, key, json_string_value(v));
	strcpy(out, json_string_value(v));
	return 0;
}

static int get_uint(json_t *obj, const char *key, uint32_t *out, uint32_t lo, uint32_t hi,
		    bool pow2, char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	if (!json_is_integer(v))
		return fail(err, errlen, "sluiced.%s: must be an integer %u..%u", key, lo, hi);
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi)
		return fail(err, errlen, "sluiced.%s: %lld out of range %u..%u", key, (long long)x, lo, hi);
	if (pow2 && (x & (x - 1)))
		return fail(err, errlen, "sluiced.%s: %lld is not a power of two", key, (long long)x);
	*out = (uint32_t)x;
	return 0;
}

static int get_uint_at(json_t *obj, const char *path, const char *key, uint32_t *out, uint32_t lo, uint32_t hi,
		       char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return fail(err, errlen, "%s.%s: must be an integer %u..%u", path, key, lo, hi);
	*out = (uint32_t)json_integer_value(v);
	return 0;
}

static int check_keys(json_t *obj, const char *path, const char *const *allowed, char *err, size_t errlen)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		(void)v;
		bool ok = false;
		for (const char *const *a = allowed; *a; a++)
			ok |= strcmp(*a, key) == 0;
		if (!ok)
			return fail(err, errlen, "%s.%s: unknown field", path, key);
	}
	return 0;
}

static int parse_sluiced(json_t *s, struct config *c, char *err, size_t errlen)
{
	static const char *const keys[] = { "pool_mbufs", "ring_size", "max_nfs", "huge_pages",
					    "lcores", "socket_dir", "attach", "buffer_size", "pipes", "workers", "nf_sched", NULL };
	if (!json_is_object(s))
		return fail(err, errlen, "sluiced: must be an object");
	if (check_keys(s, "sluiced", keys, err, errlen) ||
	    get_uint(s, "pool_mbufs", &c->pool_mbufs, 1024, 1u << 20, false, err, errlen) ||
	    get_uint(s, "ring_size", &c->ring_size, 16, 65536, true, err, errlen) ||
	    get_uint(s, "max_nfs", &c->max_nfs, 1, SL_MAX_NFS_LIMIT, false, err, errlen) ||
	    get_uint(s, "buffer_size", &c->buffer_size, SL_DATA_ROOM_MIN, SL_DATA_ROOM_MAX, false, err, errlen))
		return -1;
	if (c->buffer_size % SL_DATA_ROOM_ALIGN)
		return fail(err, errlen, "sluiced.buffer_size: %u is not a multiple of %d (e.g. 9216 for a 9000-byte MTU)",
			    c->buffer_size, SL_DATA_ROOM_ALIGN);
	json_t *h = json_object_get(s, "huge_pages");
	if (h) {
		const char *v = json_is_string(h) ? json_string_value(h) : NULL;
		if (json_is_true(h) || (v && !strcmp(v, "on")))
			c->huge = 1;
		else if (json_is_false(h) || (v && !strcmp(v, "off")))
			c->huge = 0;
		else if (v && !strcmp(v, "auto"))
			c->huge = -1;
		else
			return fail(err, errlen, "sluiced.huge_pages: must be auto, on or off");
	}
	if (get_uint(s, "workers", &c->workers, 1, SL_MAX_WORKERS, false, err, errlen))
		return -1;
	json_t *pp = json_object_get(s, "pipes");
	if (pp) {
		if (!json_is_boolean(pp))
			return fail(err, errlen, "sluiced.pipes: must be true or false");
		c->pipes = json_is_true(pp);
	}
	json_t *ns = json_object_get(s, "nf_sched");
	if (ns) {
		const char *v = json_is_string(ns) ? json_string_value(ns) : "";
		if (strcmp(v, "other") && strcmp(v, "fifo"))
			return fail(err, errlen, "sluiced.nf_sched: must be other or fifo");
		c->nf_fifo = !strcmp(v, "fifo");
	}
	json_t *at = json_object_get(s, "attach");
	if (at) {
		const char *v = json_is_string(at) ? json_string_value(at) : "";
		if (strcmp(v, "token") && strcmp(v, "open"))
			return fail(err, errlen, "sluiced.attach: must be token or open");
		c->attach_token = !strcmp(v, "token");
	}
	json_t *l = json_object_get(s, "lcores");
	if (l) {
		if (!json_is_string(l) || json_string_length(l) >= sizeof(c->lcores) || json_string_length(l) == 0)
			return fail(err, errlen, "sluiced.lcores: must be a string like \"0,1\"");
		strcpy(c->lcores, json_string_value(l));
		for (const char *p = c->lcores; *p; p++)
			if (!((*p >= '0' && *p <= '9') || *p == ','))
				return fail(err, errlen, "sluiced.lcores: '%s': use \"MAIN,WORKER\" core numbers", c->lcores);
	}
	unsigned ncores = 1;
	for (const char *p = c->lcores; *p; p++)
		ncores += *p == ',';
	if (ncores != c->workers + 1)
		return fail(err, errlen, "sluiced.lcores: '%s' names %u cores; sluiced.workers %u needs %u (the main "
			    "lcore, then one per worker; a core may be named twice)", c->lcores, ncores, c->workers,
			    c->workers + 1);
	return 0;
}

/* A domain's region (pool_mbufs buffers of headroom + buffer_size bytes) must stay below 4 GiB:
 * descriptor offsets are 32-bit. `where` names the domain's entry, `field` the field to blame. */
static int check_region_size(const struct cfg_domain *d, const char *where, const char *field, char *err,
			     size_t errlen)
{
	uint64_t bytes = (uint64_t)d->pool_mbufs * (d->buffer_size + RTE_PKTMBUF_HEADROOM);
	if (bytes <= SL_REGION_MAX_BYTES - (2u << 20)) /* room for the rounding to whole huge pages */
		return 0;
	return fail(err, errlen, "%s.%s: %u buffers of %u bytes (buffer_size %u + %u headroom) make a region of "
		    "%.1f GiB; a region is at most 4 GiB (descriptor offsets are 32-bit): lower pool_mbufs or buffer_size",
		    where, field, d->pool_mbufs, d->buffer_size + RTE_PKTMBUF_HEADROOM, d->buffer_size,
		    RTE_PKTMBUF_HEADROOM, (double)bytes / (1u << 30));
}

/* domains: [{name, pool_mbufs, buffer_size}] after the built-in "default" (domain 0, sized by
 * sluiced.pool_mbufs and sluiced.buffer_size). */
static int parse_domains(json_t *list, struct config *c, char *err, size_t errlen)
{
	c->ndomains = 1;
	snprintf(c->domains[0].name, SL_NAME_LEN, "default");
	c->domains[0].pool_mbufs = c->pool_mbufs;
	c->domains[0].buffer_size = c->buffer_size;
	if (check_region_size(&c->domains[0], "sluiced", "buffer_size", err, errlen))
		return -1;
	if (!list)
		return 0;
	if (!json_is_array(list))
		return fail(err, errlen, "domains: must be a list");
	if (json_array_size(list) > SL_MAX_DOMAINS - 1)
		return fail(err, errlen, "domains: at most %d domains besides default", SL_MAX_DOMAINS - 1);
	static const char *const keys[] = { "name", "pool_mbufs", "buffer_size", NULL };
	size_t i;
	json_t *v;
	char where[32];
	json_array_foreach(list, i, v) {
		struct cfg_domain *d = &c->domains[c->ndomains];
		snprintf(where, sizeof(where), "domains[%zu]", i);
		if (!json_is_object(v))
			return fail(err, errlen, "%s: must be an object", where);
		d->pool_mbufs = 4096;
		d->buffer_size = c->buffer_size;
		if (check_keys(v, where, keys, err, errlen) || get_name(v, "name", where, d->name, true, err, errlen) ||
		    get_uint_at(v, where, "pool_mbufs", &d->pool_mbufs, 1024, 1u << 20, err, errlen) ||
		    get_uint_at(v, where, "buffer_size", &d->buffer_size, SL_DATA_ROOM_MIN, SL_DATA_ROOM_MAX, err, errlen))
			return -1;
		if (d->buffer_size % SL_DATA_ROOM_ALIGN)
			return fail(err, errlen, "%s.buffer_size: %u is not a multiple of %d (e.g. 9216 for a 9000-byte MTU)",
				    where, d->buffer_size, SL_DATA_ROOM_ALIGN);
		if (check_region_size(d, where, json_object_get(v, "buffer_size") ? "buffer_size" : "pool_mbufs", err,
				      errlen))
			return -1;
		for (unsigned k = 0; k < c->ndomains; k++)
			if (!strcmp(c->domains[k].name, d->name))
				return fail(err, errlen, "%s.name: duplicate domain name '%s'", where, d->name);
		c->ndomains++;
	}
	return 0;
}

/* nfs[].domain (default "default") and nfs[].access (rw | ro) of declared service `i`. */
static int parse_nf_domain(json_t *v, const char *where, struct config *c, unsigned i, char *err, size_t errlen)
{
	char name[SL_NAME_LEN];
	if (get_name(v, "domain", where, name, false, err, errlen))
		return -1;
	c->service_domain[i] = 0;
	if (name[0]) {
		unsigned k = 0;
		while (k < c->ndomains && strcmp(c->domains[k].name, name))
			k++;
		if (k == c->ndomains)
			return fail(err, errlen, "%s.domain: unknown domain '%s'", where, name);
		c->service_domain[i] = (uint8_t)k;
	}
	json_t *a = json_object_get(v, "access");
	const char *as = json_is_string(a) ? json_string_value(a) : NULL;
	if (a && !json_is_null(a) && !(as && (!strcmp(as, "rw") || !strcmp(as, "ro"))))
		return fail(err, errlen, "%s.access: must be rw or ro", where);
	c->service_ro[i] = as && !strcmp(as, "ro");
	return 0;
}

int config_service_index(const struct config *c, const char *service)
{
	for (unsigned i = 0; i < c->nservices; i++)
		if (!strcmp(c->services[i], service))
			return (int)i;
	return -1;
}

static int find_port(const struct config *c, const char *name)
{
	for (unsigned i = 0; i < c->nports; i++)
		if (!strcmp(c->ports[i].name, name))
			return (int)i;
	return -1;
}

/* nfs[i].token, .quota, .may_send (docs/abi.md "Service tokens" and "Next hops"). */
static int parse_nf_auth(json_t *v, const char *where, struct config *c, struct cfg_auth *a, char *err,
			 size_t errlen)
{
	a->may_any = true;
	json_t *t = json_object_get(v, "token");
	if (t && !json_is_null(t)) {
		if (!json_is_string(t) || json_string_length(t) == 0 || json_string_length(t) > SL_TOKEN_MAX)
			return fail(err, errlen, "%s.token: must be a string of 1..%d characters", where, SL_TOKEN_MAX);
		a->has_token = true;
		memcpy(a->token, json_string_value(t), json_string_length(t));
	}
	if (get_uint_at(v, where, "quota", &a->quota, 1, c->ring_size, err, errlen))
		return -1;
	json_t *ms = json_object_get(v, "may_send");
	if (!ms || json_is_null(ms) || (json_is_string(ms) && !strcmp(json_string_value(ms), "any")))
		return 0;
	if (!json_is_object(ms))
		return fail(err, errlen, "%s.may_send: must be \"any\" or {\"services\": [...], \"ports\": [...]}", where);
	static const char *const keys[] = { "services", "ports", NULL };
	if (check_keys(ms, where, keys, err, errlen))
		return -1;
	a->may_any = false;
	json_t *sv = json_object_get(ms, "services"), *pv = json_object_get(ms, "ports");
	if ((sv && !json_is_array(sv)) || (pv && !json_is_array(pv)))
		return fail(err, errlen, "%s.may_send: services and ports must be lists of names", where);
	size_t i;
	json_t *x;
	a->svc = calloc(json_array_size(sv) + 1, sizeof(*a->svc));
	if (!a->svc)
		return fail(err, errlen, "out of memory");
	json_array_foreach(sv, i, x) {
		if (!json_is_string(x) || !config_valid_name(json_string_value(x)))
			return fail(err, errlen, "%s.may_send.services[%zu]: must be a service name", where, i);
		strcpy(a->svc[a->nsvc++], json_string_value(x));
	}
	json_array_foreach(pv, i, x) {
		int pi = json_is_string(x) ? find_port(c, json_string_value(x)) : -1;
		if (pi < 0)
			return fail(err, errlen, "%s.may_send.ports[%zu]: unknown port '%s'", where, i,
				    json_is_string(x) ? json_string_value(x) : "?");
		a->ports |= 1ull << pi;
	}
	return 0;
}

static int find_chain(const struct config *c, const char *name)
{
	for (unsigned i = 0; i < c->nchains; i++)
		if (!strcmp(c->chains[i].name, name))
			return (int)i;
	return -1;
}

int config_load(const char *path, struct config *c, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	c->pool_mbufs = 16384;
	c->buffer_size = SL_DATA_ROOM;
	c->ring_size = 1024;
	c->max_nfs = 64;
	c->workers = 1;
	c->huge = -1;
	strcpy(c->lcores, "0,1");

	json_error_t je;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return fail(err, errlen, "%s: line %d: %s", path, je.line, je.text);
	int rc = -1;
	char where[64];
	if (!json_is_object(root)) {
		fail(err, errlen, "config: top level must be an object");
		goto out;
	}
	static const char *const top[] = { "sluiced", "ports", "chains", "nfs", "rules", "steering", "domains", NULL };
	if (check_keys(root, "config", top, err, errlen))
		goto out;
	json_t *s = json_object_get(root, "sluiced");
	if (s && parse_sluiced(s, c, err, errlen))
		goto out;

	if ((uint64_t)c->ring_size * 4 > c->pool_mbufs) {
		/* one NF may hold a whole ring's worth of buffers */
		fail(err, errlen, "sluiced.ring_size: %u is too large for pool_mbufs %u (need pool_mbufs >= 4 x ring_size)",
		     c->ring_size, c->pool_mbufs);
		goto out;
	}
	if (parse_domains(json_object_get(root, "domains"), c, err, errlen))
		goto out;
	json_t *ports = json_object_get(root, "ports");
	if (!json_is_array(ports) || json_array_size(ports) == 0) {
		fail(err, errlen, "ports: must be a non-empty list");
		goto out;
	}
	if (json_array_size(ports) > SL_MAX_PORTS) {
		fail(err, errlen, "ports: at most %d ports", SL_MAX_PORTS);
		goto out;
	}
	static const char *const port_keys[] = { "name", "vdev", "chain", "queues", "rx_desc", "tx_desc", "mtu", "offloads", NULL };
	size_t i;
	json_t *v;
	json_array_foreach(ports, i, v) {
		struct cfg_port *p = &c->ports[i];
		snprintf(where, sizeof(where), "ports[%zu]", i);
		if (!json_is_object(v)) {
			fail(err, errlen, "%s: must be an object", where);
			goto out;
		}
		if (check_keys(v, where, port_keys, err, errlen) ||
		    get_name(v, "name", where, p->name, true, err, errlen) ||
		    get_name(v, "chain", where, p->chain, false, err, errlen))
			goto out;
		json_t *vd = json_object_get(v, "vdev");
		if (!json_is_string(vd) || json_string_length(vd) == 0 || json_string_length(vd) >= sizeof(p->vdev)) {
			fail(err, errlen, "%s.vdev: must be a DPDK vdev string like \"net_null0\"", where);
			goto out;
		}
		strcpy(p->vdev, json_string_value(vd));
		if (strncmp(p->vdev, "pci:", 4) == 0) {
			unsigned dom, bus, dev, fn;
			char extra;
			if (sscanf(p->vdev + 4, "%4x:%2x:%2x.%1x%c", &dom, &bus, &dev, &fn, &extra) != 4) {
				fail(err, errlen, "%s.vdev: '%s': a PCI port is written pci:DDDD:BB:DD.F", where, p->vdev);
				goto out;
			}
		} else if (strncmp(p->vdev, "net_", 4) != 0) {
			fail(err, errlen, "%s.vdev: '%s' is neither a DPDK virtual device (net_*) nor pci:DDDD:BB:DD.F",
			     where, p->vdev);
			goto out;
		}
		if (port_opts_parse(v, where, c->buffer_size, &p->opts, err, errlen))
			goto out;
		json_t *q = json_object_get(v, "queues");
		p->queues = 1;
		if (q && !json_is_null(q)) {
			if (!json_is_integer(q) || json_integer_value(q) < 1 || json_integer_value(q) > SL_MAX_QUEUES) {
				fail(err, errlen, "%s.queues: must be 1..%d", where, SL_MAX_QUEUES);
				goto out;
			}
			p->queues = (uint8_t)json_integer_value(q);
		}
		if (find_port(c, p->name) >= 0) {
			fail(err, errlen, "%s.name: duplicate port name '%s'", where, p->name);
			goto out;
		}
		c->nports++;
	}

	json_t *nfs = json_object_get(root, "nfs");
	if (nfs && !json_is_array(nfs)) {
		fail(err, errlen, "nfs: must be a list");
		goto out;
	}
	c->services = calloc(json_array_size(nfs) + 1, sizeof(*c->services));
	c->service_policy = calloc(json_array_size(nfs) + 1, 1);
	c->auth = calloc(json_array_size(nfs) + 1, sizeof(*c->auth));
	c->service_domain = calloc(json_array_size(nfs) + 1, 1);
	c->service_ro = calloc(json_array_size(nfs) + 1, 1);
	json_array_foreach(nfs, i, v) {
		snprintf(where, sizeof(where), "nfs[%zu]", i);
		if (!json_is_object(v)) {
			fail(err, errlen, "%s: must be an object", where);
			goto out;
		}
		if (get_name(v, "name", where, c->services[c->nservices], true, err, errlen))
			goto out;
		json_t *pol = json_object_get(v, "policy");
		int p = pol ? svc_policy_parse(json_is_string(pol) ? json_string_value(pol) : "") : SVC_FLOW;
		if (p < 0) {
			fail(err, errlen, "%s.policy: must be flow, least_loaded or round_robin", where);
			goto out;
		}
		c->service_policy[c->nservices] = (uint8_t)p;
		if (parse_nf_auth(v, where, c, &c->auth[c->nservices], err, errlen))
			goto out;
		if (parse_nf_domain(v, where, c, c->nservices, err, errlen))
			goto out;
		c->nservices++;
	}

	json_t *chains = json_object_get(root, "chains");
	if (chains && !json_is_array(chains)) {
		fail(err, errlen, "chains: must be a list");
		goto out;
	}
	c->chains = calloc(json_array_size(chains) + 1, sizeof(*c->chains));
	static const char *const chain_keys[] = { "name", "nfs", "exit", NULL };
	json_array_foreach(chains, i, v) {
		struct cfg_chain *ch = &c->chains[i];
		snprintf(where, sizeof(where), "chains[%zu]", i);
		if (!json_is_object(v)) {
			fail(err, errlen, "%s: must be an object", where);
			goto out;
		}
		if (check_keys(v, where, chain_keys, err, errlen) ||
		    get_name(v, "name", where, ch->name, true, err, errlen) ||
		    get_name(v, "exit", where, ch->exit, false, err, errlen))
			goto out;
		if (find_chain(c, ch->name) >= 0) {
			fail(err, errlen, "%s.name: duplicate chain name '%s'", where, ch->name);
			goto out;
		}
		if (ch->exit[0] && find_port(c, ch->exit) < 0) {
			fail(err, errlen, "%s.exit: unknown port '%s'", where, ch->exit);
			goto out;
		}
		json_t *list = json_object_get(v, "nfs");
		if (!json_is_array(list) || json_array_size(list) == 0 || json_array_size(list) > 250) {
			fail(err, errlen, "%s.nfs: must be a list of 1..250 service names", where);
			goto out;
		}
		ch->svc = calloc(json_array_size(list), sizeof(*ch->svc));
		size_t j;
		json_t *sv;
		json_array_foreach(list, j, sv) {
			if (!json_is_string(sv) || !config_valid_name(json_string_value(sv))) {
				fail(err, errlen, "%s.nfs[%zu]: must be a service name", where, j);
				goto out;
			}
			strcpy(ch->svc[j], json_string_value(sv));
			ch->nsvc++;
		}
		c->nchains++;
	}
	for (i = 0; i < c->nports; i++) {
		if (c->ports[i].chain[0] && find_chain(c, c->ports[i].chain) < 0) {
			fail(err, errlen, "ports[%zu].chain: unknown chain '%s'", i, c->ports[i].chain);
			goto out;
		}
	}
	c->flows = 65536;
	c->flow_idle_ms = 30000;
	/* Rules name ports and chains: checked here for shape, resolved by rules_load() at start-up. */
	json_t *rules = json_object_get(root, "rules");
	if (rules && !json_is_array(rules)) {
		fail(err, errlen, "rules: must be a list");
		goto out;
	}
	c->rules = json_incref(rules);
	json_t *steering = json_object_get(root, "steering");
	if (steering) {
		static const char *const steer_keys[] = { "malformed", "flows", "flow_idle_ms", NULL };
		if (!json_is_object(steering)) {
			fail(err, errlen, "steering: must be an object");
			goto out;
		}
		if (check_keys(steering, "steering", steer_keys, err, errlen))
			goto out;
		c->malformed = json_incref(json_object_get(steering, "malformed"));
		if (get_uint_at(steering, "steering", "flows", &c->flows, 0, 1u << 24, err, errlen) ||
		    get_uint_at(steering, "steering", "flow_idle_ms", &c->flow_idle_ms, 1, 86400000, err, errlen))
			goto out;
	}
	rc = 0;
out:
	json_decref(root);
	if (rc)
		config_free(c);
	return rc;
}

void config_free(struct config *c)
{
	for (unsigned i = 0; c->chains && i < c->nchains + 1; i++)
		free(c->chains[i].svc);
	free(c->chains);
	free(c->services);
	for (unsigned i = 0; c->auth && i < c->nservices + 1; i++)
		free(c->auth[i].svc);
	free(c->auth);
	c->auth = NULL;
	free(c->service_policy);
	c->service_policy = NULL;
	free(c->service_domain);
	free(c->service_ro);
	c->service_domain = c->service_ro = NULL;
	json_decref(c->rules);
	json_decref(c->malformed);
	c->rules = c->malformed = NULL;
	c->chains = NULL;
	c->services = NULL;
	c->nchains = 0;
	c->nservices = 0;
}
