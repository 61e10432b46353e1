/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Steering rules (docs/steering.md): JSON rule <-> compiled rule, and the
 * classifier built from a rule list with rte_acl over struct sl_pkt_key.
 *
 * The control thread owns the rule list (M.rules) and builds an immutable
 * struct steer from it; the worker swaps it in between bursts
 * (WCMD_STEER_SET) and only reads it. Hit counters live outside the steer
 * object, one per rule, so they survive rebuilds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include <hs/hs.h>
#include <rte_acl.h>
#include <rte_errno.h>
#include <rte_log.h>

#include "pktkey.h"
#include "sluiced.h"

/* rte_acl field indexes: one per key field (MACs split in 4+2 bytes to fit 4-byte groups). */
enum {
	F_PROTO, F_IN_PORT, F_FLAGS, F_DSCP, F_TCP_FLAGS, F_VLAN, F_ETHERTYPE, F_SPORT, F_DPORT,
	F_DMAC_HI, F_DMAC_LO, F_SMAC_HI, F_SMAC_LO, F_SRC0, F_DST0 = F_SRC0 + 4, F_NUM = F_DST0 + 4
};
_Static_assert(F_NUM == STEER_FIELDS, "sluiced.h STEER_FIELDS matches the field list");

RTE_ACL_RULE_DEF(acl_rule, F_NUM);

static void acl_defs(struct rte_acl_config *cfg)
{
	/* {type, size, field index, input index, offset}: a lone byte, then groups of 4 bytes */
	static const struct rte_acl_field_def defs[F_NUM] = {
		{ RTE_ACL_FIELD_TYPE_BITMASK, 1, F_PROTO, 0, offsetof(struct sl_pkt_key, proto) },
		{ RTE_ACL_FIELD_TYPE_BITMASK, 1, F_IN_PORT, 1, offsetof(struct sl_pkt_key, in_port) },
		{ RTE_ACL_FIELD_TYPE_BITMASK, 1, F_FLAGS, 1, offsetof(struct sl_pkt_key, flags) },
		{ RTE_ACL_FIELD_TYPE_BITMASK, 1, F_DSCP, 1, offsetof(struct sl_pkt_key, dscp) },
		{ RTE_ACL_FIELD_TYPE_BITMASK, 1, F_TCP_FLAGS, 1, offsetof(struct sl_pkt_key, tcp_flags) },
		{ RTE_ACL_FIELD_TYPE_BITMASK, 2, F_VLAN, 2, offsetof(struct sl_pkt_key, vlan) },
		{ RTE_ACL_FIELD_TYPE_BITMASK, 2, F_ETHERTYPE, 2, offsetof(struct sl_pkt_key, ethertype) },
		{ RTE_ACL_FIELD_TYPE_RANGE, 2, F_SPORT, 3, offsetof(struct sl_pkt_key, sport) },
		{ RTE_ACL_FIELD_TYPE_RANGE, 2, F_DPORT, 3, offsetof(struct sl_pkt_key, dport) },
		{ RTE_ACL_FIELD_TYPE_MASK, 4, F_DMAC_HI, 4, offsetof(struct sl_pkt_key, dmac) },
		{ RTE_ACL_FIELD_TYPE_BITMASK, 2, F_DMAC_LO, 5, offsetof(struct sl_pkt_key, dmac) + 4 },
		{ RTE_ACL_FIELD_TYPE_BITMASK, 2, F_SMAC_HI, 5, offsetof(struct sl_pkt_key, smac) },
		{ RTE_ACL_FIELD_TYPE_MASK, 4, F_SMAC_LO, 6, offsetof(struct sl_pkt_key, smac) + 2 },
		{ RTE_ACL_FIELD_TYPE_MASK, 4, F_SRC0, 7, offsetof(struct sl_pkt_key, src) },
		{ RTE_ACL_FIELD_TYPE_MASK, 4, F_SRC0 + 1, 8, offsetof(struct sl_pkt_key, src) + 4 },
		{ RTE_ACL_FIELD_TYPE_MASK, 4, F_SRC0 + 2, 9, offsetof(struct sl_pkt_key, src) + 8 },
		{ RTE_ACL_FIELD_TYPE_MASK, 4, F_SRC0 + 3, 10, offsetof(struct sl_pkt_key, src) + 12 },
		{ RTE_ACL_FIELD_TYPE_MASK, 4, F_DST0, 11, offsetof(struct sl_pkt_key, dst) },
		{ RTE_ACL_FIELD_TYPE_MASK, 4, F_DST0 + 1, 12, offsetof(struct sl_pkt_key, dst) + 4 },
		{ RTE_ACL_FIELD_TYPE_MASK, 4, F_DST0 + 2, 13, offsetof(struct sl_pkt_key, dst) + 8 },
		{ RTE_ACL_FIELD_TYPE_MASK, 4, F_DST0 + 3, 14, offsetof(struct sl_pkt_key, dst) + 12 },
	};
	memset(cfg, 0, sizeof(*cfg));
	cfg->num_categories = 1;
	cfg->num_fields = F_NUM;
	memcpy(cfg->defs, defs, sizeof(defs));
}

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- JSON -> rule ---- */

static int get_int(json_t *v, const char *path, const char *key, long lo, long hi, long *out, char *err,
		   size_t errlen)
{
	if (!json_is_integer(v))
		return fail(err, errlen, "%s.%s: must be an integer %ld..%ld", path, key, lo, hi);
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi)
		return fail(err, errlen, "%s.%s: %lld out of range %ld..%ld", path, key, (long long)x, lo, hi);
	*out = (long)x;
	return 0;
}

int steer_action_parse(json_t *v, const char *path, struct steer_action *a, char *err, size_t errlen)
{
	if (json_is_string(v) && !strcmp(json_string_value(v), "drop")) {
		*a = (struct steer_action){ .kind = STEER_DROP };
		return 0;
	}
	if (!json_is_object(v) || json_object_size(v) != 1)
		return fail(err, errlen, "%s: must be \"drop\" or one of {\"chain\": C}, {\"service\": S}, "
			    "{\"port\": P}", path);
	const char *key = json_object_iter_key(json_object_iter(v));
	json_t *name = json_object_iter_value(json_object_iter(v));
	if (!json_is_string(name) || !config_valid_name(json_string_value(name)))
		return fail(err, errlen, "%s.%s: must be a name of 1-31 characters from A-Z a-z 0-9 _ - .", path,
			    key);
	const char *n = json_string_value(name);
	if (!strcmp(key, "chain")) {
		for (unsigned i = 0; i < M.route->nchains; i++)
			if (!strcmp(M.route->chains[i].name, n)) {
				*a = (struct steer_action){ .kind = STEER_CHAIN, .target = (uint16_t)i };
				return 0;
			}
		return fail(err, errlen, "%s.chain: unknown chain '%s'", path, n);
	}
	if (!strcmp(key, "port")) {
		int p = port_lookup(n);
		if (p < 0)
			return fail(err, errlen, "%s.port: unknown port '%s'", path, n);
		*a = (struct steer_action){ .kind = STEER_PORT, .target = (uint16_t)p };
		return 0;
	}
	if (!strcmp(key, "service")) {
		int s = service_get_or_create(n);
		if (s < 0)
			return fail(err, errlen, "%s.service: too many services", path);
		*a = (struct steer_action){ .kind = STEER_SERVICE, .target = (uint16_t)s };
		return 0;
	}
	return fail(err, errlen, "%s.%s: unknown action (chain, service, port, or \"drop\")", path, key);
}

json_t *steer_action_json(struct steer_action a)
{
	switch (a.kind) {
	case STEER_CHAIN:
		return json_pack("{s:s}", "chain", a.target < M.route->nchains ? M.route->chains[a.target].name : "?");
	case STEER_SERVICE:
		return json_pack("{s:s}", "service", M.services[a.target].name);
	case STEER_PORT:
		return json_pack("{s:s}", "port", M.ports[a.target].name);
	case STEER_DROP:
		return json_string("drop");
	default:
		return json_null();
	}
}

static int parse_mac(json_t *v, const char *path, const char *key, uint8_t mac[6], char *err, size_t errlen)
{
	unsigned b[6];
	char tail;
	if (!json_is_string(v) || sscanf(json_string_value(v), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2],
					 &b[3], &b[4], &b[5], &tail) != 6)
		return fail(err, errlen, "%s.%s: must be a MAC address like \"02:00:00:00:00:01\"", path, key);
	for (int i = 0; i < 6; i++)
		mac[i] = (uint8_t)b[i];
	return 0;
}

/* "addr/len" -> 4 mask fields starting at f; sets *v6. */
static int parse_prefix(json_t *v, const char *path, const char *key, struct rte_acl_field *f, bool *v6,
			char *err, size_t errlen)
{
	char buf[64], *slash, tail;
	unsigned plen;
	if (!json_is_string(v) || json_string_length(v) >= sizeof(buf))
		return fail(err, errlen, "%s.%s: must be a prefix like \"10.0.0.0/8\" or \"2001:db8::/32\"", path, key);
	snprintf(buf, sizeof(buf), "%s", json_string_value(v));
	if (!(slash = strchr(buf, '/')) || sscanf(slash + 1, "%u%c", &plen, &tail) != 1)
		return fail(err, errlen, "%s.%s: '%s' is not addr/len", path, key, json_string_value(v));
	*slash = 0;
	uint8_t a[16] = { 0 };
	*v6 = strchr(buf, ':') != NULL;
	if (inet_pton(*v6 ? AF_INET6 : AF_INET, buf, a) != 1)
		return fail(err, errlen, "%s.%s: '%s' is not an IPv%d address", path, key, buf, *v6 ? 6 : 4);
	unsigned bits = *v6 ? 128 : 32;
	if (plen > bits)
		return fail(err, errlen, "%s.%s: prefix length %u longer than %u", path, key, plen, bits);
	for (unsigned i = 0; i < bits; i++)
		if (i >= plen && (a[i / 8] >> (7 - i % 8) & 1))
			return fail(err, errlen, "%s.%s: host bits set in '%s' (the prefix is /%u)", path, key,
				    json_string_value(v), plen);
	for (unsigned w = 0; w < bits / 32; w++) {
		int left = (int)plen - (int)(32 * w);
		f[w].value.u32 = (uint32_t)a[4 * w] << 24 | (uint32_t)a[4 * w + 1] << 16 | (uint32_t)a[4 * w + 2] << 8 |
				 a[4 * w + 3];
		f[w].mask_range.u32 = left <= 0 ? 0 : left >= 32 ? 32 : (uint32_t)left;
	}
	return 0;
}

static int parse_range(json_t *v, const char *path, const char *key, struct rte_acl_field *f, char *err,
		       size_t errlen)
{
	if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 0)) ||
	    !json_is_integer(json_array_get(v, 1)))
		return fail(err, errlen, "%s.%s: must be [lo, hi]", path, key);
	json_int_t lo = json_integer_value(json_array_get(v, 0)), hi = json_integer_value(json_array_get(v, 1));
	if (lo < 0 || hi > 65535 || lo > hi)
		return fail(err, errlen, "%s.%s: [%lld, %lld] is not a range within 0..65535", path, key,
			    (long long)lo, (long long)hi);
	f->value.u16 = (uint16_t)lo;
	f->mask_range.u16 = (uint16_t)hi;
	return 0;
}

/* The compiled match of a rule: F_NUM rte_acl fields, all wildcards to start. */
static void fields_any(struct rte_acl_field *f)
{
	memset(f, 0, sizeof(*f) * F_NUM);
	f[F_SPORT].mask_range.u16 = 0xffff;
	f[F_DPORT].mask_range.u16 = 0xffff;
}

static int parse_match(json_t *m, const char *path, struct rte_acl_field *f, char *err, size_t errlen)
{
	static const char *const keys[] = { "in_port", "src_mac", "dst_mac", "vlan", "ethertype", "src", "dst",
					    "proto", "src_port", "dst_port", "dscp", "tcp_flags", NULL };
	char mpath[96];
	snprintf(mpath, sizeof(mpath), "%s.match", path);
	fields_any(f);
	if (!m || json_is_null(m))
		return 0;
	if (!json_is_object(m))
		return fail(err, errlen, "%s: must be an object", mpath);
	const char *key;
	json_t *v;
	json_object_foreach(m, key, v) {
		bool known = false;
		for (const char *const *k = keys; *k; k++)
			known |= !strcmp(*k, key);
		if (!known)
			return fail(err, errlen, "%s.%s: unknown field (in_port, src_mac, dst_mac, vlan, ethertype, "
				    "src, dst, proto, src_port, dst_port, dscp, tcp_flags)", mpath, key);
	}
	uint8_t need = 0;
	long x = 0;
	if ((v = json_object_get(m, "in_port"))) {
		int p = json_is_string(v) ? port_lookup(json_string_value(v)) : -1;
		if (p < 0)
			return fail(err, errlen, "%s.in_port: unknown port '%s'", mpath,
				    json_is_string(v) ? json_string_value(v) : "?");
		f[F_IN_PORT].value.u8 = (uint8_t)p;
		f[F_IN_PORT].mask_range.u8 = 0xff;
	}
	uint8_t mac[6];
	if ((v = json_object_get(m, "dst_mac"))) {
		if (parse_mac(v, mpath, "dst_mac", mac, err, errlen))
			return -1;
		f[F_DMAC_HI].value.u32 = (uint32_t)mac[0] << 24 | (uint32_t)mac[1] << 16 | (uint32_t)mac[2] << 8 | mac[3];
		f[F_DMAC_HI].mask_range.u32 = 32;
		f[F_DMAC_LO].value.u16 = (uint16_t)(mac[4] << 8 | mac[5]);
		f[F_DMAC_LO].mask_range.u16 = 0xffff;
	}
	if ((v = json_object_get(m, "src_mac"))) {
		if (parse_mac(v, mpath, "src_mac", mac, err, errlen))
			return -1;
		f[F_SMAC_HI].value.u16 = (uint16_t)(mac[0] << 8 | mac[1]);
		f[F_SMAC_HI].mask_range.u16 = 0xffff;
		f[F_SMAC_LO].value.u32 = (uint32_t)mac[2] << 24 | (uint32_t)mac[3] << 16 | (uint32_t)mac[4] << 8 | mac[5];
		f[F_SMAC_LO].mask_range.u32 = 32;
	}
	if ((v = json_object_get(m, "vlan"))) {
		if (get_int(v, mpath, "vlan", 0, 4095, &x, err, errlen))
			return -1;
		f[F_VLAN].value.u16 = (uint16_t)x;
		f[F_VLAN].mask_range.u16 = 0x0fff;
		need |= SL_KEY_VLAN;
	}
	if ((v = json_object_get(m, "ethertype"))) {
		if (get_int(v, mpath, "ethertype", 0, 65535, &x, err, errlen))
			return -1;
		f[F_ETHERTYPE].value.u16 = (uint16_t)x;
		f[F_ETHERTYPE].mask_range.u16 = 0xffff;
	}
	bool v6 = false;
	int family = 0; /* 4 or 6 once a prefix names it */
	const char *pkeys[2] = { "src", "dst" };
	for (int i = 0; i < 2; i++) {
		if (!(v = json_object_get(m, pkeys[i])))
			continue;
		if (parse_prefix(v, mpath, pkeys[i], &f[i ? F_DST0 : F_SRC0], &v6, err, errlen))
			return -1;
		if (family && family != (v6 ? 6 : 4))
			return fail(err, errlen, "%s.dst: IPv%d prefix with an IPv%d src: the rule could never match",
				    mpath, v6 ? 6 : 4, family);
		family = v6 ? 6 : 4;
		need |= SL_KEY_IP | (v6 ? SL_KEY_IP6 : SL_KEY_IP4);
	}
	if ((v = json_object_get(m, "proto"))) {
		if (get_int(v, mpath, "proto", 0, 255, &x, err, errlen))
			return -1;
		f[F_PROTO].value.u8 = (uint8_t)x;
		f[F_PROTO].mask_range.u8 = 0xff;
		need |= SL_KEY_IP;
	}
	if ((v = json_object_get(m, "dscp"))) {
		if (get_int(v, mpath, "dscp", 0, 63, &x, err, errlen))
			return -1;
		f[F_DSCP].value.u8 = (uint8_t)x;
		f[F_DSCP].mask_range.u8 = 0xff;
		need |= SL_KEY_IP;
	}
	if ((v = json_object_get(m, "src_port"))) {
		if (parse_range(v, mpath, "src_port", &f[F_SPORT], err, errlen))
			return -1;
		need |= SL_KEY_PORTS;
	}
	if ((v = json_object_get(m, "dst_port"))) {
		if (parse_range(v, mpath, "dst_port", &f[F_DPORT], err, errlen))
			return -1;
		need |= SL_KEY_PORTS;
	}
	if ((v = json_object_get(m, "tcp_flags"))) {
		long set = 0, clear = 0;
		json_t *s = json_is_object(v) ? json_object_get(v, "set") : NULL,
		       *c = json_is_object(v) ? json_object_get(v, "clear") : NULL;
		if (!json_is_object(v) || json_object_size(v) != (size_t)(!!s + !!c))
			return fail(err, errlen, "%s.tcp_flags: must be {\"set\": bits, \"clear\": bits}", mpath);
		if ((s && get_int(s, mpath, "tcp_flags.set", 0, 255, &set, err, errlen)) ||
		    (c && get_int(c, mpath, "tcp_flags.clear", 0, 255, &clear, err, errlen)))
			return -1;
		if (set & clear)
			return fail(err, errlen, "%s.tcp_flags: flags 0x%02lx both set and clear", mpath, set & clear);
		f[F_TCP_FLAGS].value.u8 = (uint8_t)set;
		f[F_TCP_FLAGS].mask_range.u8 = (uint8_t)(set | clear);
		need |= SL_KEY_TCP;
	}
	f[F_FLAGS].value.u8 = need;
	f[F_FLAGS].mask_range.u8 = need;
	return 0;
}

#define PAYLOAD_DEPTH_DEFAULT 256

/* payload: {"pattern": P, "regex": bool, "caseless": bool, "depth": N} -> a Hyperscan database. */
static int parse_payload(json_t *v, const char *path, struct rule *r, char *err, size_t errlen)
{
	char ppath[96];
	snprintf(ppath, sizeof(ppath), "%s.payload", path);
	static const char *const keys[] = { "pattern", "regex", "caseless", "depth", NULL };
	if (!json_is_object(v))
		return fail(err, errlen, "%s: must be {\"pattern\": ..., \"regex\": bool, \"caseless\": bool, "
			    "\"depth\": bytes}", ppath);
	const char *key;
	json_t *x;
	json_object_foreach(v, key, x) {
		bool known = false;
		for (const char *const *k = keys; *k; k++)
			known |= !strcmp(*k, key);
		if (!known)
			return fail(err, errlen, "%s.%s: unknown field (pattern, regex, caseless, depth)", ppath, key);
	}
	json_t *pat = json_object_get(v, "pattern"), *re = json_object_get(v, "regex"),
	       *nc = json_object_get(v, "caseless"), *dp = json_object_get(v, "depth");
	if (!json_is_string(pat) || json_string_length(pat) == 0 || json_string_length(pat) > 1024)
		return fail(err, errlen, "%s.pattern: must be a string of 1..1024 characters", ppath);
	if ((re && !json_is_boolean(re)) || (nc && !json_is_boolean(nc)))
		return fail(err, errlen, "%s.%s: must be true or false", ppath, re && !json_is_boolean(re) ? "regex" : "caseless");
	long depth = PAYLOAD_DEPTH_DEFAULT;
	if (dp && get_int(dp, ppath, "depth", 1, 65535, &depth, err, errlen))
		return -1;
	/* a literal becomes a regex of escaped bytes */
	const char *p = json_string_value(pat);
	size_t n = json_string_length(pat);
	char *expr = malloc(4 * n + 1), *o = expr;
	if (!expr)
		return fail(err, errlen, "%s: out of memory", ppath);
	if (re && json_is_true(re)) {
		memcpy(expr, p, n + 1);
	} else {
		for (size_t i = 0; i < n; i++)
			o += sprintf(o, "\\x%02x", (unsigned char)p[i]);
		*o = 0;
	}
	unsigned flags = HS_FLAG_SINGLEMATCH | HS_FLAG_DOTALL | (nc && json_is_true(nc) ? HS_FLAG_CASELESS : 0);
	hs_compile_error_t *ce = NULL;
	hs_database_t *db = NULL;
	int rc = hs_compile(expr, flags, HS_MODE_BLOCK, NULL, &db, &ce);
	free(expr);
	if (rc != HS_SUCCESS) {
		fail(err, errlen, "%s.pattern: %s", ppath, ce && ce->message ? ce->message : "cannot compile");
		hs_free_compile_error(ce);
		return -1;
	}
	r->payload = db;
	r->depth = (uint32_t)depth;
	return 0;
}

int rule_parse(json_t *j, const char *path, struct rule *r, char *err, size_t errlen)
{
	static const char *const keys[] = { "id", "name", "priority", "match", "payload", "action", "hits", NULL };
	memset(r, 0, sizeof(*r));
	if (!json_is_object(j))
		return fail(err, errlen, "%s: must be an object with match and action", path);
	const char *key;
	json_t *v;
	json_object_foreach(j, key, v) {
		bool known = false;
		for (const char *const *k = keys; *k; k++)
			known |= !strcmp(*k, key);
		if (!known)
			return fail(err, errlen, "%s.%s: unknown field (name, priority, match, payload, action)", path, key);
	}
	if ((v = json_object_get(j, "name")) && !json_is_null(v)) {
		if (!json_is_string(v) || !config_valid_name(json_string_value(v)))
			return fail(err, errlen, "%s.name: must be a name of 1-31 characters from A-Z a-z 0-9 _ - .",
				    path);
		snprintf(r->name, sizeof(r->name), "%s", json_string_value(v));
	}
	long prio = 0;
	if ((v = json_object_get(j, "priority")) && get_int(v, path, "priority", 0, 65535, &prio, err, errlen))
		return -1;
	r->priority = (uint32_t)prio;
	json_t *m = json_object_get(j, "match");
	if (parse_match(m, path, r->fields, err, errlen))
		return -1;
	char apath[96];
	snprintf(apath, sizeof(apath), "%s.action", path);
	if (!(v = json_object_get(j, "action")))
		return fail(err, errlen, "%s: missing", apath);
	if (steer_action_parse(v, apath, &r->action, err, errlen))
		return -1;
	json_t *pl = json_object_get(j, "payload");
	if (pl && !json_is_null(pl) && parse_payload(pl, path, r, err, errlen))
		return -1;
	r->payload_json = pl && !json_is_null(pl) ? json_deep_copy(pl) : NULL;
	r->match = m && !json_is_null(m) ? json_deep_copy(m) : json_object();
	r->hits = calloc(1, sizeof(*r->hits));
	if (!r->match || !r->hits) {
		rule_release(r);
		return fail(err, errlen, "%s: out of memory", path);
	}
	return 0;
}

void rule_release(struct rule *r)
{
	json_decref(r->match);
	json_decref(r->payload_json);
	free(r->hits);
	hs_free_database(r->payload);
	r->match = r->payload_json = NULL;
	r->hits = NULL;
	r->payload = NULL;
}

json_t *rule_json(const struct rule *r)
{
	json_t *j = json_pack("{s:I,s:o,s:I,s:O,s:o,s:I}", "id", (json_int_t)r->id, "name",
			      r->name[0] ? json_string(r->name) : json_null(), "priority", (json_int_t)r->priority,
			      "match", r->match, "action", steer_action_json(r->action), "hits", (json_int_t)*r->hits);
	if (j && r->payload_json)
		json_object_set(j, "payload", r->payload_json);
	return j;
}

/* Evaluation order: priority high to low, then the rule added first. */
static int rule_order(const void *a, const void *b)
{
	const struct rule *x = *(const struct rule *const *)a, *y = *(const struct rule *const *)b;
	if (x->priority != y->priority)
		return x->priority > y->priority ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

const struct rule **rules_sorted(const struct rule *rules, unsigned n)
{
	const struct rule **v = calloc(n + 1, sizeof(*v));
	for (unsigned i = 0; v && i < n; i++)
		v[i] = &rules[i];
	if (v)
		qsort(v, n, sizeof(*v), rule_order);
	return v;
}

/* ---- the classifier ---- */

static void acl_set_free(struct steer_acl *a)
{
	for (unsigned i = 0; i < a->n; i++)
		rte_acl_free(a->ctx[i]);
	free(a->ctx);
	a->n = 0;
	a->ctx = NULL;
}

/* The fields a compiled rule matches on, one bit per rte_acl field. */
static uint32_t rule_shape(const struct acl_rule *r)
{
	uint32_t shape = 0;
	for (unsigned f = 0; f < F_NUM; f++) {
		const struct rte_acl_field *x = &r->field[f];
		bool any = f == F_SPORT || f == F_DPORT ? x->value.u16 == 0 && x->mask_range.u16 == 0xffff
							: x->mask_range.u64 == 0;
		shape |= (uint32_t)!any << f;
	}
	return shape;
}

static int shape_order(const void *a, const void *b)
{
	const struct acl_rule *x = a, *y = b;
	uint32_t sx = rule_shape(x), sy = rule_shape(y);
	if (sx != sy)
		return sx < sy ? -1 : 1;
	return x->data.userdata < y->data.userdata ? -1 : x->data.userdata > y->data.userdata;
}

/* One rte_acl context over ar[0..n); 0 or a negative errno. */
static int acl_one(struct rte_acl_ctx **out, const struct acl_rule *ar, unsigned n, const char *name)
{
	struct rte_acl_param prm = { .name = name, .socket_id = SOCKET_ID_ANY, .rule_size = RTE_ACL_RULE_SZ(F_NUM),
				     .max_rule_num = n };
	struct rte_acl_config cfg;
	acl_defs(&cfg);
	struct rte_acl_ctx *c = rte_acl_create(&prm);
	if (!c)
		return rte_errno ? -rte_errno : -ENOMEM;
	int rc = rte_acl_add_rules(c, (const struct rte_acl_rule *)ar, n);
	if (rc == 0)
		rc = rte_acl_build(c, &cfg);
	if (rc != 0) {
		rte_acl_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Compile ar[0..n) (userdata = evaluation index + 1) into as few contexts as rte_acl takes: all in
 * one if it can; else the rules grouped by shape (same-shape rules share tries) in runs, the run
 * length halved when a run does not build ("Exceeded max number of tries" is -ENOMEM) and kept for
 * the next run when it does. 0, or -1 with err. */
static int acl_set_build(struct steer_acl *set, const struct acl_rule *ar, unsigned n, unsigned gen, char kind,
			 char *err, size_t errlen)
{
	set->n = 0;
	set->ctx = NULL;
	if (n == 0)
		return 0;
	struct acl_rule *v = malloc(n * sizeof(*v));
	if (!v)
		return fail(err, errlen, "out of memory for %u rules", n);
	memcpy(v, ar, n * sizeof(*v));
	unsigned pos = 0, size = n, attempt = 0, cap = 0;
	int rc = 0, acl_log = rte_log_get_level(RTE_LOGTYPE_ACL);
	rte_log_set_level(RTE_LOGTYPE_ACL, RTE_LOG_CRIT); /* a run too big is expected: no error lines */
	while (pos < n) {
		if (size > n - pos)
			size = n - pos;
		if (set->n == cap) {
			struct rte_acl_ctx **g = realloc(set->ctx, (cap ? 2 * cap : 4) * sizeof(*g));
			if (!g) {
				rc = -ENOMEM;
				break;
			}
			set->ctx = g;
			cap = cap ? 2 * cap : 4;
		}
		char name[RTE_ACL_NAMESIZE];
		snprintf(name, sizeof(name), "sluice-steer-%u-%c%u", gen, kind, attempt++);
		struct rte_acl_ctx *c = NULL;
		rc = acl_one(&c, v + pos, size, name);
		if (rc == 0) {
			set->ctx[set->n++] = c;
			pos += size;
			continue;
		}
		if (rc != -ENOMEM || size == 1)
			break;
		if (pos == 0 && size == n) /* not in one context: group the rules by shape first */
			qsort(v, n, sizeof(*v), shape_order);
		size = (size + 1) / 2;
	}
	free(v);
	if (acl_log >= 0)
		rte_log_set_level(RTE_LOGTYPE_ACL, (uint32_t)acl_log);
	if (pos < n) {
		acl_set_free(set);
		return fail(err, errlen, "building the classifier for %u rules failed: %s", n, strerror(-rc));
	}
	if (set->n > 1)
		LOG("steering: %u rules too varied for one rte_acl context: %u contexts, each searched", n, set->n);
	return 0;
}

void steer_free(struct steer *s)
{
	if (!s)
		return;
	acl_set_free(&s->acl);
	acl_set_free(&s->acl_hdr);
	hs_free_scratch(s->scratch);
	hs_free_scratch(s->ctl_scratch);
	free(s->rules);
	free(s);
}

struct steer *steer_build(const struct rule *rules, unsigned n, struct steer_action malformed, char *err,
			  size_t errlen)
{
	static unsigned generation;
	struct steer *s = calloc(1, sizeof(*s));
	const struct rule **order = rules_sorted(rules, n);
	struct acl_rule *ar = calloc(n + 1, sizeof(*ar));
	if (!s || !order || !ar || !(s->rules = calloc(n + 1, sizeof(*s->rules)))) {
		fail(err, errlen, "out of memory for %u rules", n);
		goto fail;
	}
	unsigned npayload = 0;
	s->malformed = malformed;
	s->nrules = n;
	s->gen = ++generation;
	for (unsigned i = 0; i < n; i++) {
		const struct rule *r = order[i];
		s->rules[i] = (struct steer_rule){ .act = r->action, .hits = r->hits, .id = r->id,
						   .payload = r->payload, .depth = r->depth };
		npayload += r->payload != NULL;
		if (r->payload && hs_alloc_scratch(r->payload, &s->scratch) != HS_SUCCESS) {
			fail(err, errlen, "out of memory for the payload matcher");
			goto fail;
		}
		ar[i].data = (struct rte_acl_rule_data){ .category_mask = 1, .priority = (int32_t)(n - i),
							 .userdata = i + 1 };
		memcpy(ar[i].field, r->fields, sizeof(ar[i].field));
		if (r->fields[F_IN_PORT].mask_range.u8)
			s->poll_port[r->fields[F_IN_PORT].value.u8] = true;
	}
	if (acl_set_build(&s->acl, ar, n, s->gen, 'a', err, errlen) < 0)
		goto fail;
	if (npayload > 0) {
		/* the fallback when a payload rule's pattern is absent: the header-only rules alone */
		unsigned nh = 0;
		for (unsigned i = 0; i < n; i++)
			if (!order[i]->payload)
				ar[nh++] = ar[i];
		if (acl_set_build(&s->acl_hdr, ar, nh, s->gen, 'h', err, errlen) < 0)
			goto fail;
		if (hs_clone_scratch(s->scratch, &s->ctl_scratch) != HS_SUCCESS) {
			fail(err, errlen, "out of memory for the payload matcher");
			goto fail;
		}
	}
	free(order);
	free(ar);
	return s;
fail:
	free(order);
	free(ar);
	steer_free(s);
	return NULL;
}

static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned flags, void *ctx)
{
	(void)id, (void)from, (void)to, (void)flags;
	*(bool *)ctx = true;
	return 1; /* one match is all we need: stop */
}

uint32_t steer_payload_resolve(const struct steer *s, uint32_t hit, const uint8_t *frame,
			       const struct sl_pkt_key *k, struct hs_scratch *scratch, bool *undecided)
{
	*undecided = false;
	if (hit == 0 || !s->rules[hit - 1].payload)
		return hit;
	const struct steer_rule *r = &s->rules[hit - 1];
	if (k->payload_len > 0) {
		bool found = false;
		hs_scan(r->payload, (const char *)frame + k->payload_off, k->payload_len < r->depth ? k->payload_len : r->depth,
			0, scratch, on_match, &found);
		if (found)
			return hit;
	} else {
		*undecided = true;
	}
	uint32_t h = 0;
	const uint8_t *data[1] = { (const uint8_t *)k };
	if (steer_acl_classify(&s->acl_hdr, data, &h, 1) != 0)
		h = 0;
	return h;
}

int steer_classify_one(const struct steer *s, const uint8_t *frame, uint32_t len, uint8_t in_port,
		       struct steer_result *res)
{
	struct sl_pkt_key k;
	memset(res, 0, sizeof(*res));
	if (!s->acl.n) /* no rules: packets are not parsed (as in the worker) */
		return 0;
	if (sl_pkt_key_parse(frame, len, in_port, &k) < 0) {
		res->malformed = true;
		res->action = s->malformed;
		return 0;
	}
	uint32_t hit = 0;
	const uint8_t *data[1] = { (const uint8_t *)&k };
	if (steer_acl_classify(&s->acl, data, &hit, 1) != 0)
		return -1;
	hit = steer_payload_resolve(s, hit, frame, &k, s->ctl_scratch, &res->undecided);
	if (hit) {
		res->rule = &s->rules[hit - 1];
		res->action = res->rule->act;
	}
	return 0;
}
