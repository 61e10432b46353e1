/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The l2switch's configuration file and the VLAN map built from it. DPDK-free; unit-tested in
 * tests/unit/test_l2switch.c. Format (docs/nfs/l2switch.md), one statement per line, '#' comments:
 *
 *   port NAME [access VLAN]                  untagged frames of one VLAN (default: access 1)
 *   port NAME trunk VLANS [native VLAN]      tagged frames of VLANS (10,20,30-39 or all); untagged
 *                                            frames belong to the native VLAN, if any
 *   aging SECONDS                            default 300
 *   max-macs N                               default 8192
 *
 * Without port lines every sluiced port is an access port of VLAN 1 (a plain learning bridge);
 * with port lines only the named ports are in the bridge. Errors name the file, line and field:
 * "sw.conf:4: native: '5000' is not a VLAN id (1..4094)".
 */
#ifndef SLUICE_NFS_L2SWITCH_CONF_H
#define SLUICE_NFS_L2SWITCH_CONF_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/confparse.h"

#define L2_PORTS_MAX 64      /* a port set is a 64-bit mask (struct sl_out_set) */
#define L2_VLAN_MAX 4094
#define L2_NAME_MAX 32       /* SL_NAME_MAX */
#define L2_LINE_MAX 4096
#define L2_AGING_DEFAULT 300
#define L2_MAX_MACS_DEFAULT 8192
#define L2_MAX_MACS_LIMIT (1u << 24)

enum { L2_ACCESS = 0, L2_TRUNK = 1 };

struct l2_port_conf {
	char name[L2_NAME_MAX];
	int line;
	uint8_t mode;                   /* L2_ACCESS / L2_TRUNK */
	uint16_t pvid;                  /* access VLAN / native VLAN; 0: untagged frames are dropped */
	uint64_t vlans[(L2_VLAN_MAX + 1 + 63) / 64]; /* trunk: VLANs carried tagged */
};

struct l2_conf {
	struct l2_port_conf port[L2_PORTS_MAX];
	unsigned nports;
	uint64_t aging_s;
	uint64_t max_macs;
};

/* What the data path reads: per VLAN, the ports that send its frames untagged and tagged; per port,
 * the VLAN of its untagged frames (0: none). A port is a member of VLAN v when its bit is in
 * untagged[v] | tagged[v]. */
struct l2_vlan_map {
	uint64_t untagged[L2_VLAN_MAX + 2];
	uint64_t tagged[L2_VLAN_MAX + 2];
	uint16_t pvid[L2_PORTS_MAX];
	uint64_t ports;                 /* ports in the bridge */
};

/* The next token of *s delimited by any of `delim`, NUL-terminated in place; NULL at the end.
 * (strtok_r without needing POSIX feature macros.) */
static inline char *l2_tok(char **s, const char *delim)
{
	char *p = *s + strspn(*s, delim);
	if (*p == '\0')
		return NULL;
	char *e = p + strcspn(p, delim);
	if (*e != '\0')
		*e++ = '\0';
	*s = e;
	return p;
}

/* Decimal in lo..hi, digits only. Returns 0 or -1. */
static inline int l2_parse_num(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	if (s[0] < '0' || s[0] > '9' || strlen(s) > 12)
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* "all" or a comma list of VLAN ids and ranges "10,20,30-39". Sets bits in bm. Returns 0 or -1
 * (with the offending element in bad). */
static inline int l2_parse_vlans(const char *s, uint64_t *bm, char *bad, size_t badlen)
{
	if (strcmp(s, "all") == 0) {
		for (unsigned v = 1; v <= L2_VLAN_MAX; v++)
			bm[v / 64] |= 1ull << (v % 64);
		return 0;
	}
	char buf[L2_LINE_MAX];
	snprintf(buf, sizeof(buf), "%s", s);
	char *save = buf;
	int any = 0;
	for (char *el = l2_tok(&save, ","); el; el = l2_tok(&save, ",")) {
		uint64_t a, b;
		char *dash = strchr(el, '-');
		if (dash) {
			*dash = '\0';
			if (l2_parse_num(el, 1, L2_VLAN_MAX, &a) < 0 || l2_parse_num(dash + 1, 1, L2_VLAN_MAX, &b) < 0 ||
			    b < a) {
				*dash = '-';
				snprintf(bad, badlen, "%s", el);
				return -1;
			}
		} else {
			if (l2_parse_num(el, 1, L2_VLAN_MAX, &a) < 0) {
				snprintf(bad, badlen, "%s", el);
				return -1;
			}
			b = a;
		}
		for (uint64_t v = a; v <= b; v++)
			bm[v / 64] |= 1ull << (v % 64);
		any = 1;
	}
	if (!any || s[strlen(s) - 1] == ',' || s[0] == ',' || strstr(s, ",,")) {
		snprintf(bad, badlen, "%s", s);
		return -1;
	}
	return 0;
}

/* Parse a whole configuration held in `text`; `file` names it in messages. Returns 0 and fills
 * *out, or -1 with "file:line: field: problem" in err. */
static inline int l2_conf_parse(const char *file, const char *text, struct l2_conf *out, char *err,
				size_t errlen)
{
	struct l2_conf *c = out;
	int lineno = 0, aging_line = 0, max_line = 0;
	const char *p = text;
	char line[L2_LINE_MAX + 2];

	memset(c, 0, sizeof(*c));
	c->aging_s = L2_AGING_DEFAULT;
	c->max_macs = L2_MAX_MACS_DEFAULT;
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		lineno++;
		if (n > L2_LINE_MAX)
			return conf_err(err, errlen, "%s:%d: line longer than %d characters", file, lineno, L2_LINE_MAX);
		memcpy(line, p, n);
		line[n] = '\0';
		p += n + (nl ? 1 : 0);
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *tok[8];
		int nt = 0;
		char *save = line;
		for (char *s = l2_tok(&save, " \t\r\v\f"); s; s = l2_tok(&save, " \t\r\v\f")) {
			if (nt == 8)
				return conf_err(err, errlen, "%s:%d: too many words", file, lineno);
			tok[nt++] = s;
		}
		if (nt == 0)
			continue;

		if (strcmp(tok[0], "aging") == 0 || strcmp(tok[0], "max-macs") == 0) {
			int is_aging = tok[0][0] == 'a';
			int *seen = is_aging ? &aging_line : &max_line;
			if (*seen)
				return conf_err(err, errlen, "%s:%d: %s: given twice (first on line %d)", file, lineno,
					      tok[0], *seen);
			if (nt != 2)
				return conf_err(err, errlen, "%s:%d: %s: expected '%s %s'", file, lineno, tok[0], tok[0],
					      is_aging ? "SECONDS" : "N");
			uint64_t v;
			if (is_aging ? l2_parse_num(tok[1], 1, 1000000, &v) < 0
				     : l2_parse_num(tok[1], 1, L2_MAX_MACS_LIMIT, &v) < 0)
				return conf_err(err, errlen, "%s:%d: %s: '%s' is not a number in %s", file, lineno, tok[0],
					      tok[1], is_aging ? "1..1000000 (seconds)" : "1..16777216");
			*seen = lineno;
			*(is_aging ? &c->aging_s : &c->max_macs) = v;
			continue;
		}
		if (strcmp(tok[0], "port") != 0)
			return conf_err(err, errlen, "%s:%d: '%s': unknown statement (port, aging, max-macs)", file,
				      lineno, tok[0]);
		if (nt < 2)
			return conf_err(err, errlen, "%s:%d: port: expected 'port NAME [access VLAN | trunk VLANS "
				      "[native VLAN]]'", file, lineno);
		if (strlen(tok[1]) >= L2_NAME_MAX)
			return conf_err(err, errlen, "%s:%d: port: name '%s' is longer than %d characters", file, lineno,
				      tok[1], L2_NAME_MAX - 1);
		for (unsigned i = 0; i < c->nports; i++)
			if (strcmp(c->port[i].name, tok[1]) == 0)
				return conf_err(err, errlen, "%s:%d: port: '%s' configured twice (first on line %d)", file,
					      lineno, tok[1], c->port[i].line);
		if (c->nports == L2_PORTS_MAX)
			return conf_err(err, errlen, "%s:%d: port: more than %d ports", file, lineno, L2_PORTS_MAX);
		struct l2_port_conf *pc = &c->port[c->nports];
		memset(pc, 0, sizeof(*pc));
		snprintf(pc->name, sizeof(pc->name), "%s", tok[1]);
		pc->line = lineno;
		uint64_t v;
		if (nt == 2) {
			pc->mode = L2_ACCESS;
			pc->pvid = 1;
		} else if (strcmp(tok[2], "access") == 0) {
			if (nt != 4)
				return conf_err(err, errlen, "%s:%d: access: expected 'port NAME access VLAN'", file, lineno);
			if (l2_parse_num(tok[3], 1, L2_VLAN_MAX, &v) < 0)
				return conf_err(err, errlen, "%s:%d: access: '%s' is not a VLAN id (1..4094)", file, lineno,
					      tok[3]);
			pc->mode = L2_ACCESS;
			pc->pvid = (uint16_t)v;
		} else if (strcmp(tok[2], "trunk") == 0) {
			char bad[64];
			if (nt != 4 && nt != 6)
				return conf_err(err, errlen, "%s:%d: trunk: expected 'port NAME trunk VLANS [native VLAN]'",
					      file, lineno);
			if (l2_parse_vlans(tok[3], pc->vlans, bad, sizeof(bad)) < 0)
				return conf_err(err, errlen, "%s:%d: trunk: '%s' is not a VLAN id (1..4094), range "
					      "(A-B) or list", file, lineno, bad);
			pc->mode = L2_TRUNK;
			if (nt == 6) {
				if (strcmp(tok[4], "native") != 0)
					return conf_err(err, errlen, "%s:%d: '%s': unknown field (expected native)", file,
						      lineno, tok[4]);
				if (l2_parse_num(tok[5], 1, L2_VLAN_MAX, &v) < 0)
					return conf_err(err, errlen, "%s:%d: native: '%s' is not a VLAN id (1..4094)", file,
						      lineno, tok[5]);
				pc->pvid = (uint16_t)v;
				/* the native VLAN leaves untagged, never tagged */
				pc->vlans[v / 64] &= ~(1ull << (v % 64));
			}
		} else {
			return conf_err(err, errlen, "%s:%d: mode: '%s' is not access or trunk", file, lineno, tok[2]);
		}
		c->nports++;
	}
	return 0;
}

/* Read and parse `path`. Returns 0, or -1 with the reason (file named) in err. */
static inline int l2_conf_load(const char *path, struct l2_conf *c, char *err, size_t errlen)
{
	char *text = NULL;
	if (conf_read_text(path, 64, &text, err, errlen) < 0)
		return -1;
	int rc = l2_conf_parse(path, text, c, err, errlen);
	free(text);
	return rc;
}

/* Build the VLAN map: the configured ports resolved through port_id(arg, name) (-1: no such port),
 * or, without port lines, all `nports` sluiced ports as access ports of VLAN 1. Returns 0, or -1
 * with "file:line: port: ..." in err. */
static inline int l2_conf_resolve(const struct l2_conf *c, const char *file, unsigned nports,
				  int (*port_id)(void *arg, const char *name), void *arg,
				  struct l2_vlan_map *vm, char *err, size_t errlen)
{
	memset(vm, 0, sizeof(*vm));
	if (c->nports == 0) {
		for (unsigned i = 0; i < nports && i < L2_PORTS_MAX; i++) {
			vm->pvid[i] = 1;
			vm->untagged[1] |= 1ull << i;
			vm->ports |= 1ull << i;
		}
		return 0;
	}
	for (unsigned k = 0; k < c->nports; k++) {
		const struct l2_port_conf *pc = &c->port[k];
		int id = port_id(arg, pc->name);
		if (id < 0)
			return conf_err(err, errlen, "%s:%d: port: sluiced has no port '%s'", file, pc->line, pc->name);
		if (id >= L2_PORTS_MAX)
			return conf_err(err, errlen, "%s:%d: port: '%s' has id %d; port sets reach only ids 0..%d",
				      file, pc->line, pc->name, id, L2_PORTS_MAX - 1);
		uint64_t bit = 1ull << id;
		if (vm->ports & bit)
			return conf_err(err, errlen, "%s:%d: port: '%s' is the same sluiced port as an earlier line",
				      file, pc->line, pc->name);
		vm->ports |= bit;
		vm->pvid[id] = pc->pvid;
		if (pc->pvid)
			vm->untagged[pc->pvid] |= bit;
		if (pc->mode == L2_TRUNK)
			for (unsigned v = 1; v <= L2_VLAN_MAX; v++)
				if (pc->vlans[v / 64] >> (v % 64) & 1)
					vm->tagged[v] |= bit;
	}
	return 0;
}

#endif /* SLUICE_NFS_L2SWITCH_CONF_H */
