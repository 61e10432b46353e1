/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The firewall's rule file: parser and first-match evaluation. DPDK-free; unit-tested in
 * tests/unit/test_firewall.c. Format (docs/nfs/firewall.md), one rule per line, '#' comments:
 *
 *   default allow|drop
 *   allow|drop [in PORT] [family ipv4|ipv6] [proto tcp|udp|icmp|icmpv6|N] [src PREFIX] [dst PREFIX]
 *              [sport N|N-M] [dport N|N-M] [stateless] [name LABEL]
 *
 * Errors name the file, line and field: "fw.rules:7: dport: '99999' is not a port or range".
 */
#ifndef SLUICE_NFS_FIREWALL_RULES_H
#define SLUICE_NFS_FIREWALL_RULES_H

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/confparse.h"

#include "pkt.h"

#define FW_RULES_MAX 1000     /* sluiced shows at most 1024 counters per NF */
#define FW_LABEL_MAX 18       /* "rule." + label fits a 23-character counter name */
#define FW_LINE_MAX 1024
#define FW_PORTNAME_MAX 32

enum { FW_DROP = 0, FW_ALLOW = 1 };

struct fw_rule {
	uint64_t src[2], src_mask[2]; /* address & mask, as loaded from 16 packet-order bytes */
	uint64_t dst[2], dst_mask[2];
	uint16_t sport_lo, sport_hi, dport_lo, dport_hi;
	int32_t in_port;   /* -1: any (resolved from in_name by fw_rules_resolve) */
	int16_t proto;     /* -1: any */
	uint8_t family;    /* 0 any, 4, 6 */
	uint8_t action;    /* FW_ALLOW / FW_DROP */
	uint8_t stateless; /* allow without creating a conntrack entry */
	uint8_t has_src, has_dst, has_l4;
	int line;
	char label[FW_LABEL_MAX + 1];     /* "" if none: the counter is rule.<index> */
	char in_name[FW_PORTNAME_MAX];    /* "" if no `in` */
	uint64_t *hits;                   /* set by the NF (a counter), NULL in tests */
};

struct fw_ruleset {
	struct fw_rule *r;
	unsigned n;
	uint8_t default_action; /* FW_DROP unless `default allow` */
};

static inline void fw_rules_free(struct fw_ruleset *rs)
{
	free(rs->r);
	rs->r = NULL;
	rs->n = 0;
}

static inline int fw_label_ok(const char *s)
{
	size_t n = strlen(s);
	return n >= 1 && n <= FW_LABEL_MAX &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-") == n;
}

/* Parse a whole rule file held in `text`. `file` names it in messages. Returns 0 and fills *out
 * (free with fw_rules_free), or -1 with "file:line: field: problem" in err. Port names are kept in
 * in_name; in_port is -1 until fw_rules_resolve. */
static inline int fw_rules_parse(const char *file, const char *text, struct fw_ruleset *out, char *err,
				 size_t errlen)
{
	struct fw_ruleset rs = { .r = NULL, .n = 0, .default_action = FW_DROP };
	unsigned cap = 0;
	int lineno = 0, default_line = 0;
	const char *p = text;
	char line[FW_LINE_MAX + 2];

	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		lineno++;
		if (n > FW_LINE_MAX) {
			conf_err(err, errlen, "%s:%d: line longer than %d characters", file, lineno, FW_LINE_MAX);
			goto fail;
		}
		memcpy(line, p, n);
		line[n] = '\0';
		p += n + (nl ? 1 : 0);
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';

		char *tok[64];
		int nt = 0;
		for (char *s = strtok(line, " \t\r\v\f"); s; s = strtok(NULL, " \t\r\v\f")) {
			if (nt == 64) {
				conf_err(err, errlen, "%s:%d: too many words", file, lineno);
				goto fail;
			}
			tok[nt++] = s;
		}
		if (nt == 0)
			continue;

		if (strcmp(tok[0], "default") == 0) {
			if (nt != 2 || (strcmp(tok[1], "allow") != 0 && strcmp(tok[1], "drop") != 0)) {
				conf_err(err, errlen, "%s:%d: default: expected 'default allow' or 'default drop'",
				       file, lineno);
				goto fail;
			}
			if (default_line) {
				conf_err(err, errlen, "%s:%d: default: given twice (first on line %d)", file, lineno,
				       default_line);
				goto fail;
			}
			default_line = lineno;
			rs.default_action = strcmp(tok[1], "allow") == 0 ? FW_ALLOW : FW_DROP;
			continue;
		}
		if (strcmp(tok[0], "allow") != 0 && strcmp(tok[0], "drop") != 0) {
			conf_err(err, errlen, "%s:%d: action: '%s' is not allow, drop or default", file, lineno,
			       tok[0]);
			goto fail;
		}
		if (rs.n == FW_RULES_MAX) {
			conf_err(err, errlen, "%s:%d: more than %d rules", file, lineno, FW_RULES_MAX);
			goto fail;
		}
		if (rs.n == cap) {
			cap = cap ? cap * 2 : 16;
			struct fw_rule *nr = realloc(rs.r, cap * sizeof(*nr));
			if (nr == NULL) {
				conf_err(err, errlen, "%s:%d: out of memory", file, lineno);
				goto fail;
			}
			rs.r = nr;
		}
		struct fw_rule *r = &rs.r[rs.n];
		memset(r, 0, sizeof(*r));
		r->action = strcmp(tok[0], "allow") == 0 ? FW_ALLOW : FW_DROP;
		r->in_port = -1;
		r->proto = -1;
		r->sport_hi = r->dport_hi = 65535;
		r->line = lineno;
		unsigned seen = 0;
		int src_fam = 0, dst_fam = 0, proto_fam = 0;
		for (int i = 1; i < nt; i++) {
			static const char *const fields[] = { "in", "family", "proto", "src", "dst",
							      "sport", "dport", "name", "stateless" };
			const char *f = tok[i];
			unsigned fi;
			for (fi = 0; fi < sizeof(fields) / sizeof(fields[0]); fi++)
				if (strcmp(f, fields[fi]) == 0)
					break;
			if (fi == sizeof(fields) / sizeof(fields[0])) {
				conf_err(err, errlen,
				       "%s:%d: '%s': unknown field (expected in, family, proto, src, dst, sport, "
				       "dport, stateless, name)", file, lineno, f);
				goto fail;
			}
			if (seen & (1u << fi)) {
				conf_err(err, errlen, "%s:%d: %s: given twice", file, lineno, f);
				goto fail;
			}
			seen |= 1u << fi;
			if (fi == 8) { /* stateless: a flag */
				if (r->action != FW_ALLOW) {
					conf_err(err, errlen, "%s:%d: stateless: only for allow rules", file, lineno);
					goto fail;
				}
				r->stateless = 1;
				continue;
			}
			if (i + 1 >= nt) {
				conf_err(err, errlen, "%s:%d: %s: missing value", file, lineno, f);
				goto fail;
			}
			const char *v = tok[++i];
			switch (fi) {
			case 0: /* in */
				if (strlen(v) >= FW_PORTNAME_MAX) {
					conf_err(err, errlen, "%s:%d: in: '%s' is too long for a port name", file,
					       lineno, v);
					goto fail;
				}
				snprintf(r->in_name, sizeof(r->in_name), "%s", v);
				break;
			case 1: /* family */
				if (strcmp(v, "ipv4") == 0 || strcmp(v, "ip") == 0)
					r->family = 4;
				else if (strcmp(v, "ipv6") == 0 || strcmp(v, "ip6") == 0)
					r->family = 6;
				else {
					conf_err(err, errlen, "%s:%d: family: '%s' is not ipv4 or ipv6", file, lineno, v);
					goto fail;
				}
				break;
			case 2: /* proto */
				if (strcmp(v, "tcp") == 0)
					r->proto = FW_IPPROTO_TCP;
				else if (strcmp(v, "udp") == 0)
					r->proto = FW_IPPROTO_UDP;
				else if (strcmp(v, "icmp") == 0) {
					r->proto = FW_IPPROTO_ICMP;
					proto_fam = 4;
				} else if (strcmp(v, "icmpv6") == 0) {
					r->proto = FW_IPPROTO_ICMPV6;
					proto_fam = 6;
				} else {
					char *end;
					unsigned long x = strtoul(v, &end, 10);
					if (v[0] < '0' || v[0] > '9' || *end != '\0' || x > 255) {
						conf_err(err, errlen,
						       "%s:%d: proto: '%s' is not tcp, udp, icmp, icmpv6 or 0..255",
						       file, lineno, v);
						goto fail;
					}
					r->proto = (int16_t)x;
				}
				break;
			case 3: /* src */
			case 4: { /* dst */
				int fam = conf_parse_prefix(v, fi == 3 ? r->src : r->dst,
							  fi == 3 ? r->src_mask : r->dst_mask);
				if (fam < 0) {
					conf_err(err, errlen, "%s:%d: %s: '%s' is not an address or prefix", file,
					       lineno, f, v);
					goto fail;
				}
				if (fi == 3) {
					src_fam = fam;
					r->has_src = 1;
				} else {
					dst_fam = fam;
					r->has_dst = 1;
				}
				break;
			}
			case 5: /* sport */
			case 6: /* dport */
				if (conf_parse_range(v, fi == 5 ? &r->sport_lo : &r->dport_lo,
						   fi == 5 ? &r->sport_hi : &r->dport_hi) < 0) {
					conf_err(err, errlen, "%s:%d: %s: '%s' is not a port or range (0..65535, N-M)",
					       file, lineno, f, v);
					goto fail;
				}
				r->has_l4 = 1;
				break;
			case 7: /* name */
				if (!fw_label_ok(v)) {
					conf_err(err, errlen,
					       "%s:%d: name: '%s' is not 1-%d characters of [A-Za-z0-9_.:-]", file,
					       lineno, v, FW_LABEL_MAX);
					goto fail;
				}
				for (unsigned j = 0; j < rs.n; j++)
					if (strcmp(rs.r[j].label, v) == 0) {
						conf_err(err, errlen, "%s:%d: name: '%s' already names the rule on line %d",
						       file, lineno, v, rs.r[j].line);
						goto fail;
					}
				snprintf(r->label, sizeof(r->label), "%s", v);
				break;
			}
		}
		/* consistency */
		const char *famname[7] = { [4] = "IPv4", [6] = "IPv6" };
		int fam = r->family;
		const char *why = fam ? "family" : NULL;
		struct { int f; const char *name; } cons[3] = { { proto_fam, "proto" }, { src_fam, "src" },
							      { dst_fam, "dst" } };
		for (int c = 0; c < 3; c++) {
			if (!cons[c].f)
				continue;
			if (fam && fam != cons[c].f) {
				conf_err(err, errlen, "%s:%d: %s: is %s but %s is %s", file, lineno, cons[c].name,
				       famname[cons[c].f], why, famname[fam]);
				goto fail;
			}
			fam = cons[c].f;
			why = cons[c].name;
		}
		r->family = (uint8_t)fam;
		if (r->has_l4 && r->proto != FW_IPPROTO_TCP && r->proto != FW_IPPROTO_UDP) {
			conf_err(err, errlen, "%s:%d: %s: needs proto tcp or udp", file, lineno,
			       (seen & (1u << 5)) ? "sport" : "dport");
			goto fail;
		}
		rs.n++;
	}
	*out = rs;
	return 0;
fail:
	free(rs.r);
	return -1;
}

/* Read and parse a rule file. Returns 0 or -1 with a message in err. */
static inline int fw_rules_load(const char *path, struct fw_ruleset *out, char *err, size_t errlen)
{
	char *text = NULL;
	if (conf_read_text(path, 64, &text, err, errlen) < 0)
		return -1;
	int rc = fw_rules_parse(path, text, out, err, errlen);
	free(text);
	return rc;
}

/* Turn `in` port names into ids with port_id(arg, name) (-1: no such port). Returns 0 or -1 with
 * "file:line: in: no port 'x'" in err. */
static inline int fw_rules_resolve(struct fw_ruleset *rs, const char *file,
				   int (*port_id)(void *arg, const char *name), void *arg, char *err,
				   size_t errlen)
{
	for (unsigned i = 0; i < rs->n; i++) {
		struct fw_rule *r = &rs->r[i];
		if (r->in_name[0] == '\0') {
			r->in_port = -1;
			continue;
		}
		int id = port_id(arg, r->in_name);
		if (id < 0)
			return conf_err(err, errlen, "%s:%d: in: sluiced has no port '%s'", file, r->line,
				      r->in_name);
		r->in_port = id;
	}
	return 0;
}

static inline int fw_addr_match(const uint8_t a[16], const uint64_t v[2], const uint64_t m[2])
{
	uint64_t x[2];
	memcpy(x, a, 16);
	return ((x[0] & m[0]) == v[0]) & ((x[1] & m[1]) == v[1]);
}

static inline int fw_rule_match(const struct fw_rule *r, const struct fw_pkt *k, int in_port)
{
	const struct fw_tuple *t = &k->t;
	if (r->in_port >= 0 && r->in_port != in_port)
		return 0;
	if (r->family && r->family != t->family)
		return 0;
	if (r->proto >= 0 && r->proto != t->proto)
		return 0;
	if (r->has_src && !fw_addr_match(t->src, r->src, r->src_mask))
		return 0;
	if (r->has_dst && !fw_addr_match(t->dst, r->dst, r->dst_mask))
		return 0;
	if (r->has_l4) {
		/* ports exist only for TCP/UDP (proto is checked above) and not in later fragments */
		if (k->frag || !t->has_ports)
			return 0;
		if (t->sport < r->sport_lo || t->sport > r->sport_hi || t->dport < r->dport_lo ||
		    t->dport > r->dport_hi)
			return 0;
	}
	return 1;
}

/* First matching rule's index, or -1 (the default applies). */
static inline int fw_rules_eval(const struct fw_ruleset *rs, const struct fw_pkt *k, int in_port)
{
	for (unsigned i = 0; i < rs->n; i++)
		if (fw_rule_match(&rs->r[i], k, in_port))
			return (int)i;
	return -1;
}

#endif /* SLUICE_NFS_FIREWALL_RULES_H */
