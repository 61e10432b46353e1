/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The IDS's rule file: a documented subset of Snort/Suricata rule syntax (docs/nfs/ids.md), the
 * packet view the rules are matched against, and the header (protocol/address/port) match.
 * Payload patterns are compiled and scanned by engine.h (Hyperscan). DPDK-free and
 * Hyperscan-free; unit-tested in tests/unit/test_ids.c.
 *
 *   ACTION PROTO SRC SPORT -> DST DPORT (msg:"..."; content:"a|0d 0a|b"; nocase; offset:N; depth:N;
 *                                        pcre:"/re/ism"; classtype:x; priority:N; sid:N; rev:N;)
 *
 * Errors name the file, line and keyword: "ids.rules:7: depth: '0' is not 1..65535".
 */
#ifndef SLUICE_NFS_IDS_RULES_H
#define SLUICE_NFS_IDS_RULES_H

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/confparse.h"

#include "common/pktparse.h"

#define IDS_RULES_MAX    1000000
#define IDS_PATS_PER_RULE 32       /* content + pcre options in one rule */
#define IDS_LINE_MAX     16384
#define IDS_MSG_MAX      256
#define IDS_CLASS_MAX    64
#define IDS_LIST_MAX     64        /* entries in one [address/port list] */
#define IDS_PAT_MAX      4096      /* bytes of one content / pcre */

enum { IDS_ALERT = 0, IDS_DROP = 1, IDS_PASS = 2 };
enum { IDS_PROTO_IP = 0, IDS_PROTO_TCP, IDS_PROTO_UDP, IDS_PROTO_ICMP };
enum { IDS_PAT_CONTENT = 0, IDS_PAT_PCRE = 1 };

/* ---------------------------------------------------------------- the packet */

enum { IDS_K_IP = 0, IDS_K_NON_IP, IDS_K_MALFORMED };

struct ids_pkt {
	uint8_t src[16], dst[16]; /* IPv4 uses the first 4 bytes */
	uint16_t sport, dport;    /* TCP/UDP ports; ICMP: type and code (as Suricata logs them) */
	uint8_t family;           /* 4 or 6 */
	uint8_t proto;            /* IP protocol number (IPv6: after extension headers) */
	uint8_t has_ports;        /* TCP/UDP header present (not a non-first fragment) */
	uint8_t frag;             /* a non-first fragment: the payload is the IP payload */
	uint32_t pay_off, pay_len; /* the payload the patterns scan */
};

/* Parse Ethernet (one VLAN tag), IPv4/IPv6 and the L4 header; the payload is what follows the
 * TCP/UDP/ICMP header (the IP payload for other protocols and non-first fragments), bounded by the
 * IP header's own length so Ethernet padding is never scanned. Returns IDS_K_*. */
static inline int ids_parse(const uint8_t *p, uint32_t len, struct ids_pkt *k)
{
	memset(k, 0, sizeof(*k));
	if (len < PP_ETH_LEN)
		return IDS_K_MALFORMED;
	uint32_t off = PP_ETH_LEN;
	uint16_t et = pp_be16(p + 12);
	if (et == PP_ETH_P_8021Q || et == PP_ETH_P_8021AD) {
		if (len < PP_ETH_LEN + PP_VLAN_LEN)
			return IDS_K_MALFORMED;
		et = pp_be16(p + 16);
		off += PP_VLAN_LEN;
	}
	uint32_t l4, end;
	if (et == PP_ETH_P_IPV4) {
		if (off + 20 > len || (p[off] >> 4) != 4 || (p[off] & 0x0f) < 5)
			return IDS_K_MALFORMED;
		uint32_t ihl = (uint32_t)(p[off] & 0x0f) * 4, tot = pp_be16(p + off + 2);
		if (tot < ihl || off + tot > len)
			return IDS_K_MALFORMED;
		k->family = 4;
		k->proto = p[off + 9];
		memcpy(k->src, p + off + 12, 4);
		memcpy(k->dst, p + off + 16, 4);
		k->frag = (pp_be16(p + off + 6) & 0x1fff) != 0;
		l4 = off + ihl;
		end = off + tot;
	} else if (et == PP_ETH_P_IPV6) {
		if (off + 40 > len || (p[off] >> 4) != 6)
			return IDS_K_MALFORMED;
		end = off + 40 + pp_be16(p + off + 4);
		if (end > len)
			return IDS_K_MALFORMED;
		k->family = 6;
		memcpy(k->src, p + off + 8, 16);
		memcpy(k->dst, p + off + 24, 16);
		l4 = 0;
		k->proto = pp_ipv6_skip_ext(p, end, off + 40, p[off + 6], &l4, &k->frag);
		if (l4 == 0) /* truncated (or more than 8) extension headers */
			return IDS_K_MALFORMED;
	} else {
		return IDS_K_NON_IP;
	}
	if (k->frag) {
		k->pay_off = l4;
		k->pay_len = end - l4;
		return IDS_K_IP;
	}
	uint32_t hl = 0;
	switch (k->proto) {
	case PP_IPPROTO_TCP:
		if (l4 + 20 > end || (p[l4 + 12] >> 4) < 5)
			return IDS_K_MALFORMED;
		hl = (uint32_t)(p[l4 + 12] >> 4) * 4;
		if (l4 + hl > end)
			return IDS_K_MALFORMED;
		k->sport = pp_be16(p + l4);
		k->dport = pp_be16(p + l4 + 2);
		k->has_ports = 1;
		break;
	case PP_IPPROTO_UDP:
		if (l4 + 8 > end)
			return IDS_K_MALFORMED;
		hl = 8;
		k->sport = pp_be16(p + l4);
		k->dport = pp_be16(p + l4 + 2);
		k->has_ports = 1;
		break;
	case 1:
	case 58: /* ICMP / ICMPv6: type, code, checksum and 4 bytes of "rest of header" */
		if (l4 + 8 > end)
			return IDS_K_MALFORMED;
		hl = 8;
		k->sport = p[l4];
		k->dport = p[l4 + 1];
		break;
	default:
		break;
	}
	k->pay_off = l4 + hl;
	k->pay_len = end - l4 - hl;
	return IDS_K_IP;
}

/* ---------------------------------------------------------------- rules */

struct ids_addr {
	uint8_t a[16], m[16];
	uint8_t family, neg;
};
struct ids_addrset {
	uint8_t any, neg; /* neg: the whole set is negated (![...] or !ADDR) */
	uint16_t n;
	struct ids_addr *e;
};
struct ids_port {
	uint16_t lo, hi;
	uint8_t neg;
};
struct ids_portset {
	uint8_t any, neg;
	uint16_t n;
	struct ids_port *e;
};

struct ids_pat {
	uint32_t rule;     /* index of its rule */
	uint8_t kind;      /* IDS_PAT_CONTENT / IDS_PAT_PCRE */
	uint8_t nocase;    /* content: nocase; pcre: the i flag */
	uint8_t has_offset, has_depth;
	uint8_t dotall, multiline; /* pcre s, m */
	uint32_t offset, depth;
	uint32_t len;      /* bytes in `s` */
	char *s;           /* content: the literal bytes; pcre: the expression between the slashes */
};

struct ids_rule {
	uint8_t action, proto, bidir;
	struct ids_addrset src, dst;
	struct ids_portset sp, dp;
	uint32_t sid, rev, priority;
	uint32_t first_pat, npat;
	int line;
	char msg[IDS_MSG_MAX];
	char classtype[IDS_CLASS_MAX]; /* "" if none */
	uint64_t *hits;                /* set by the NF, NULL in tests */
};

struct ids_ruleset {
	struct ids_rule *r;
	unsigned n, cap;
	struct ids_pat *p;
	unsigned np, pcap;
};

static inline void ids_rule_free_sets(struct ids_rule *r)
{
	free(r->src.e);
	free(r->dst.e);
	free(r->sp.e);
	free(r->dp.e);
}

static inline void ids_rules_free(struct ids_ruleset *rs)
{
	for (unsigned i = 0; i < rs->n; i++)
		ids_rule_free_sets(&rs->r[i]);
	for (unsigned i = 0; i < rs->np; i++)
		free(rs->p[i].s);
	free(rs->r);
	free(rs->p);
	memset(rs, 0, sizeof(*rs));
}

/* "ADDR" or "ADDR/LEN", IPv4 or IPv6; host bits masked off. Returns 0 or -1. */
static inline int ids_parse_cidr(const char *s, struct ids_addr *a)
{
	char buf[64];
	const char *slash = strchr(s, '/');
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);
	if (alen == 0 || alen >= sizeof(buf))
		return -1;
	memcpy(buf, s, alen);
	buf[alen] = '\0';
	memset(a->a, 0, 16);
	memset(a->m, 0, 16);
	unsigned bits;
	if (inet_pton(AF_INET, buf, a->a) == 1) {
		a->family = 4;
		bits = 32;
	} else if (inet_pton(AF_INET6, buf, a->a) == 1) {
		a->family = 6;
		bits = 128;
	} else {
		return -1;
	}
	unsigned plen = bits;
	if (slash) {
		const char *t = slash + 1;
		char *end;
		if (t[0] < '0' || t[0] > '9' || strlen(t) > 3)
			return -1;
		unsigned long l = strtoul(t, &end, 10);
		if (*end != '\0' || l > bits)
			return -1;
		plen = (unsigned)l;
	}
	for (unsigned i = 0; i < plen; i++)
		a->m[i / 8] |= (uint8_t)(0x80 >> (i % 8));
	for (int i = 0; i < 16; i++)
		a->a[i] &= a->m[i];
	return 0;
}

/* "N", "N:M", "N:", ":M" */
static inline int ids_parse_portrange(const char *s, struct ids_port *pr)
{
	const char *colon = strchr(s, ':');
	unsigned long lo = 0, hi = 65535;
	char *end;
	if (colon == NULL) {
		if (!isdigit((unsigned char)s[0]))
			return -1;
		errno = 0;
		lo = hi = strtoul(s, &end, 10);
		if (errno || *end || lo > 65535)
			return -1;
	} else {
		if (colon != s) {
			if (!isdigit((unsigned char)s[0]))
				return -1;
			lo = strtoul(s, &end, 10);
			if (end != colon || lo > 65535)
				return -1;
		}
		if (colon[1] != '\0') {
			if (!isdigit((unsigned char)colon[1]))
				return -1;
			hi = strtoul(colon + 1, &end, 10);
			if (*end || hi > 65535)
				return -1;
		} else if (colon == s) {
			return -1; /* ":" alone */
		}
		if (lo > hi)
			return -1;
	}
	pr->lo = (uint16_t)lo;
	pr->hi = (uint16_t)hi;
	return 0;
}

/* Split a "[a,b,!c]" list (no nesting) or a single item into an array of items, each with its
 * leading '!' counted off. Returns the item count or -1. `*whole_neg` is set for "!..." outside. */
static inline int ids_split_list(char *s, char **items, uint8_t *negs, int max, uint8_t *whole_neg)
{
	*whole_neg = 0;
	if (s[0] == '!') {
		*whole_neg = 1;
		s++;
	}
	if (s[0] != '[') {
		if (s[0] == '\0' || strchr(s, ',') || strchr(s, ']'))
			return -1;
		items[0] = s;
		negs[0] = 0;
		return 1;
	}
	size_t n = strlen(s);
	if (n < 3 || s[n - 1] != ']')
		return -1;
	s[n - 1] = '\0';
	s++;
	if (strchr(s, '[') || strchr(s, ']'))
		return -1; /* nested lists: not in the subset */
	int k = 0;
	for (char *save = NULL, *t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ')
			t++;
		if (k == max)
			return -1;
		negs[k] = 0;
		if (t[0] == '!') {
			negs[k] = 1;
			t++;
		}
		if (t[0] == '\0')
			return -1;
		items[k++] = t;
	}
	return k;
}

static inline int ids_parse_addrset(const char *v, struct ids_addrset *as)
{
	char buf[2048];
	char *items[IDS_LIST_MAX];
	uint8_t negs[IDS_LIST_MAX];
	memset(as, 0, sizeof(*as));
	if (strcmp(v, "any") == 0) {
		as->any = 1;
		return 0;
	}
	if (strlen(v) >= sizeof(buf))
		return -1;
	strcpy(buf, v);
	int n = ids_split_list(buf, items, negs, IDS_LIST_MAX, &as->neg);
	if (n <= 0)
		return -1;
	as->e = calloc((size_t)n, sizeof(*as->e));
	if (as->e == NULL)
		return -1;
	for (int i = 0; i < n; i++) {
		if (ids_parse_cidr(items[i], &as->e[i]) < 0) {
			free(as->e);
			as->e = NULL;
			return -1;
		}
		as->e[i].neg = negs[i];
	}
	as->n = (uint16_t)n;
	return 0;
}

static inline int ids_parse_portset(const char *v, struct ids_portset *ps)
{
	char buf[2048];
	char *items[IDS_LIST_MAX];
	uint8_t negs[IDS_LIST_MAX];
	memset(ps, 0, sizeof(*ps));
	if (strcmp(v, "any") == 0) {
		ps->any = 1;
		return 0;
	}
	if (strlen(v) >= sizeof(buf))
		return -1;
	strcpy(buf, v);
	int n = ids_split_list(buf, items, negs, IDS_LIST_MAX, &ps->neg);
	if (n <= 0)
		return -1;
	ps->e = calloc((size_t)n, sizeof(*ps->e));
	if (ps->e == NULL)
		return -1;
	for (int i = 0; i < n; i++) {
		if (ids_parse_portrange(items[i], &ps->e[i]) < 0) {
			free(ps->e);
			ps->e = NULL;
			return -1;
		}
		ps->e[i].neg = negs[i];
	}
	ps->n = (uint16_t)n;
	return 0;
}

/* A set matches when some positive entry matches (or it has none) and no negative entry does;
 * then the whole-set '!' inverts. */
static inline int ids_addr_match(const struct ids_addrset *as, uint8_t family, const uint8_t a[16])
{
	if (as->any)
		return 1;
	int pos = 0, has_pos = 0, neg = 0;
	for (unsigned i = 0; i < as->n; i++) {
		const struct ids_addr *e = &as->e[i];
		int m = e->family == family;
		for (int j = 0; m && j < (family == 4 ? 4 : 16); j++)
			m = (a[j] & e->m[j]) == e->a[j];
		if (e->neg)
			neg |= m;
		else {
			has_pos = 1;
			pos |= m;
		}
	}
	int r = (pos || !has_pos) && !neg;
	return as->neg ? !r : r;
}

static inline int ids_port_match(const struct ids_portset *ps, int has_ports, uint16_t port)
{
	if (ps->any)
		return 1;
	if (!has_ports)
		return 0; /* a port condition never matches a packet without ports */
	int pos = 0, has_pos = 0, neg = 0;
	for (unsigned i = 0; i < ps->n; i++) {
		const struct ids_port *e = &ps->e[i];
		int m = port >= e->lo && port <= e->hi;
		if (e->neg)
			neg |= m;
		else {
			has_pos = 1;
			pos |= m;
		}
	}
	int r = (pos || !has_pos) && !neg;
	return ps->neg ? !r : r;
}

static inline int ids_proto_match(uint8_t rp, uint8_t proto)
{
	switch (rp) {
	case IDS_PROTO_TCP:
		return proto == PP_IPPROTO_TCP;
	case IDS_PROTO_UDP:
		return proto == PP_IPPROTO_UDP;
	case IDS_PROTO_ICMP:
		return proto == 1 || proto == 58;
	default:
		return 1;
	}
}

/* The header part of a rule: protocol, addresses, ports (either direction for `<>`). */
static inline int ids_rule_hdr_match(const struct ids_rule *r, const struct ids_pkt *k)
{
	if (!ids_proto_match(r->proto, k->proto))
		return 0;
	if (ids_addr_match(&r->src, k->family, k->src) && ids_addr_match(&r->dst, k->family, k->dst) &&
	    ids_port_match(&r->sp, k->has_ports, k->sport) && ids_port_match(&r->dp, k->has_ports, k->dport))
		return 1;
	return r->bidir && ids_addr_match(&r->src, k->family, k->dst) &&
	       ids_addr_match(&r->dst, k->family, k->src) && ids_port_match(&r->sp, k->has_ports, k->dport) &&
	       ids_port_match(&r->dp, k->has_ports, k->sport);
}

/* ---------------------------------------------------------------- option values */

static inline int ids_hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* content's string (between the quotes, escapes as written) -> bytes. "a|0d 0a|\"b" ->
 * 'a' CR LF '"' 'b'. Returns the length, or -1 with a reason in *why. */
static inline int ids_content_bytes(const char *s, uint8_t *out, size_t max, const char **why)
{
	size_t n = 0;
	int hex = 0, half = -1;
	for (; *s; s++) {
		if (hex) {
			if (*s == '|') {
				if (half >= 0) {
					*why = "odd number of hex digits between | |";
					return -1;
				}
				hex = 0;
			} else if (*s == ' ') {
				if (half >= 0) {
					*why = "a space inside a hex byte";
					return -1;
				}
			} else {
				int v = ids_hexval((unsigned char)*s);
				if (v < 0) {
					*why = "not a hex digit between | |";
					return -1;
				}
				if (half < 0)
					half = v;
				else {
					if (n == max) {
						*why = "too long";
						return -1;
					}
					out[n++] = (uint8_t)(half << 4 | v);
					half = -1;
				}
			}
			continue;
		}
		if (*s == '|') {
			hex = 1;
			continue;
		}
		if (*s == '\\') {
			if (s[1] == '\0') {
				*why = "ends with a backslash";
				return -1;
			}
			s++;
		} else if (*s == '"' || *s == ';') {
			*why = "unescaped '\"' or ';' (write \\\" or \\;)";
			return -1;
		}
		if (n == max) {
			*why = "too long";
			return -1;
		}
		out[n++] = (uint8_t)*s;
	}
	if (hex) {
		*why = "unterminated | |";
		return -1;
	}
	if (n == 0) {
		*why = "empty";
		return -1;
	}
	return (int)n;
}

static inline int ids_parse_u32(const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	if (!isdigit((unsigned char)v[0]))
		return -1;
	errno = 0;
	unsigned long x = strtoul(v, &end, 10);
	if (errno || *end || x < lo || x > hi)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

/* ---------------------------------------------------------------- the parser */

static inline struct ids_pat *ids_new_pat(struct ids_ruleset *rs)
{
	if (rs->np == rs->pcap) {
		unsigned c = rs->pcap ? rs->pcap * 2 : 64;
		struct ids_pat *np = realloc(rs->p, c * sizeof(*np));
		if (np == NULL)
			return NULL;
		rs->p = np;
		rs->pcap = c;
	}
	struct ids_pat *p = &rs->p[rs->np];
	memset(p, 0, sizeof(*p));
	return p;
}

/* Keywords accepted and ignored (they do not change what matches). Anything else not handled
 * below is an error, so a rule never silently matches more than its author meant. */
static const char *const ids_ignored_kw[] = { "reference", "metadata", "gid", "target", NULL };

/* Parse one rule line (comments and blank lines are skipped by the caller). */
static inline int ids_parse_rule(struct ids_ruleset *rs, const char *file, int lineno, char *line,
				 char *err, size_t errlen)
{
#define IDS_FAIL(...) do { conf_err(err, errlen, __VA_ARGS__); goto fail; } while (0)
	struct ids_rule r;
	unsigned pat0 = rs->np;
	memset(&r, 0, sizeof(r));
	r.line = lineno;
	r.rev = 1; /* Suricata's defaults */
	r.priority = 3;
	r.first_pat = pat0;

	char *open = strchr(line, '(');
	size_t ll = strlen(line);
	while (ll && isspace((unsigned char)line[ll - 1]))
		line[--ll] = '\0';
	if (open == NULL || ll == 0 || line[ll - 1] != ')')
		IDS_FAIL("%s:%d: expected 'ACTION PROTO SRC SPORT -> DST DPORT (OPTIONS)'", file, lineno);
	*open = '\0';
	line[ll - 1] = '\0';
	char *opts = open + 1;

	char *tok[8];
	int nt = 0;
	for (char *save = NULL, *t = strtok_r(line, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
		if (nt == 8)
			IDS_FAIL("%s:%d: header: too many words before '(' (lists must not contain spaces)",
				 file, lineno);
		tok[nt++] = t;
	}
	if (nt != 7)
		IDS_FAIL("%s:%d: header: expected 'ACTION PROTO SRC SPORT -> DST DPORT', got %d words", file,
			 lineno, nt);
	if (strcmp(tok[0], "alert") == 0)
		r.action = IDS_ALERT;
	else if (strcmp(tok[0], "drop") == 0)
		r.action = IDS_DROP;
	else if (strcmp(tok[0], "pass") == 0)
		r.action = IDS_PASS;
	else
		IDS_FAIL("%s:%d: action: '%s' is not alert, drop or pass", file, lineno, tok[0]);
	if (strcmp(tok[1], "tcp") == 0)
		r.proto = IDS_PROTO_TCP;
	else if (strcmp(tok[1], "udp") == 0)
		r.proto = IDS_PROTO_UDP;
	else if (strcmp(tok[1], "icmp") == 0)
		r.proto = IDS_PROTO_ICMP;
	else if (strcmp(tok[1], "ip") == 0)
		r.proto = IDS_PROTO_IP;
	else
		IDS_FAIL("%s:%d: protocol: '%s' is not tcp, udp, icmp or ip", file, lineno, tok[1]);
	if (tok[2][0] == '$' || tok[5][0] == '$')
		IDS_FAIL("%s:%d: address: variables such as '%s' are not supported (write any, an address, "
			 "a CIDR or a [list])", file, lineno, tok[2][0] == '$' ? tok[2] : tok[5]);
	if (tok[3][0] == '$' || tok[6][0] == '$')
		IDS_FAIL("%s:%d: port: variables such as '%s' are not supported", file, lineno,
			 tok[3][0] == '$' ? tok[3] : tok[6]);
	if (ids_parse_addrset(tok[2], &r.src) < 0)
		IDS_FAIL("%s:%d: source address: '%s' is not any, ADDR, ADDR/LEN or a [list] of them", file,
			 lineno, tok[2]);
	if (ids_parse_addrset(tok[5], &r.dst) < 0)
		IDS_FAIL("%s:%d: destination address: '%s' is not any, ADDR, ADDR/LEN or a [list] of them",
			 file, lineno, tok[5]);
	if (ids_parse_portset(tok[3], &r.sp) < 0)
		IDS_FAIL("%s:%d: source port: '%s' is not any, N, N:M or a [list] of them", file, lineno,
			 tok[3]);
	if (ids_parse_portset(tok[6], &r.dp) < 0)
		IDS_FAIL("%s:%d: destination port: '%s' is not any, N, N:M or a [list] of them", file,
			 lineno, tok[6]);
	if (strcmp(tok[4], "->") == 0)
		r.bidir = 0;
	else if (strcmp(tok[4], "<>") == 0)
		r.bidir = 1;
	else
		IDS_FAIL("%s:%d: direction: '%s' is not -> or <>", file, lineno, tok[4]);
	if ((!r.sp.any || !r.dp.any) && r.proto != IDS_PROTO_TCP && r.proto != IDS_PROTO_UDP)
		IDS_FAIL("%s:%d: port: ports other than any need protocol tcp or udp", file, lineno);

	/* options: keyword[:value]; separated by ';' outside quotes */
	int have_sid = 0, have_msg = 0;
	struct ids_pat *last_content = NULL;
	char *s = opts;
	static uint8_t bytes[IDS_PAT_MAX];
	for (;;) {
		while (isspace((unsigned char)*s))
			s++;
		if (*s == '\0')
			break;
		char *kw = s;
		while (*s && *s != ':' && *s != ';' && !isspace((unsigned char)*s))
			s++;
		char *kwend = s;
		while (isspace((unsigned char)*s))
			s++;
		char *val = NULL;
		int quoted = 0, negated = 0;
		if (*s == ':') {
			s++;
			while (isspace((unsigned char)*s))
				s++;
			if (*s == '!') {
				negated = 1;
				s++;
			}
			if (*s == '"') {
				quoted = 1;
				val = ++s;
				while (*s && *s != '"') {
					if (*s == '\\' && s[1])
						s++;
					s++;
				}
				if (*s != '"')
					IDS_FAIL("%s:%d: %.*s: unterminated quoted value", file, lineno,
						 (int)(kwend - kw), kw);
				*s++ = '\0';
				while (isspace((unsigned char)*s))
					s++;
			} else {
				val = s;
				while (*s && *s != ';')
					s++;
				char *ve = s;
				while (ve > val && isspace((unsigned char)ve[-1]))
					ve--;
				if (*s == ';')
					s++;
				*ve = '\0';
				goto have_value;
			}
		}
		if (*s == ';')
			s++;
		else if (*s != '\0')
			IDS_FAIL("%s:%d: %.*s: expected ';' after the option", file, lineno, (int)(kwend - kw), kw);
	have_value:
		*kwend = '\0';
		if (kw[0] == '\0')
			IDS_FAIL("%s:%d: options: an empty option (';;')", file, lineno);
		if (negated && strcmp(kw, "content") != 0 && strcmp(kw, "pcre") != 0)
			IDS_FAIL("%s:%d: %s: unexpected '!'", file, lineno, kw);
		if (strcmp(kw, "msg") == 0) {
			if (!quoted)
				IDS_FAIL("%s:%d: msg: expected a quoted string", file, lineno);
			size_t n = 0;
			for (const char *c = val; *c && n + 1 < sizeof(r.msg); c++) {
				if (*c == '\\' && c[1])
					c++;
				r.msg[n++] = *c;
			}
			r.msg[n] = '\0';
			have_msg = 1;
		} else if (strcmp(kw, "content") == 0) {
			const char *why = NULL;
			if (negated)
				IDS_FAIL("%s:%d: content: negated content (content:!\"...\") is not supported",
					 file, lineno);
			if (!quoted)
				IDS_FAIL("%s:%d: content: expected a quoted string", file, lineno);
			int n = ids_content_bytes(val, bytes, sizeof(bytes), &why);
			if (n < 0)
				IDS_FAIL("%s:%d: content: %s", file, lineno, why);
			if (rs->np - pat0 == IDS_PATS_PER_RULE)
				IDS_FAIL("%s:%d: content: more than %d content/pcre options in one rule", file,
					 lineno, IDS_PATS_PER_RULE);
			struct ids_pat *p = ids_new_pat(rs);
			if (p == NULL || (p->s = malloc((size_t)n)) == NULL)
				IDS_FAIL("%s:%d: out of memory", file, lineno);
			memcpy(p->s, bytes, (size_t)n);
			p->len = (uint32_t)n;
			p->kind = IDS_PAT_CONTENT;
			p->rule = rs->n;
			rs->np++;
			last_content = p;
		} else if (strcmp(kw, "nocase") == 0 || strcmp(kw, "offset") == 0 || strcmp(kw, "depth") == 0) {
			if (last_content == NULL)
				IDS_FAIL("%s:%d: %s: must follow a content option", file, lineno, kw);
			if (kw[0] == 'n') {
				if (val != NULL)
					IDS_FAIL("%s:%d: nocase: takes no value", file, lineno);
				if (last_content->nocase)
					IDS_FAIL("%s:%d: nocase: given twice for one content", file, lineno);
				last_content->nocase = 1;
			} else {
				uint32_t x;
				int is_depth = kw[0] == 'd';
				if (val == NULL || quoted ||
				    ids_parse_u32(val, is_depth ? 1 : 0, 65535, &x) < 0)
					IDS_FAIL("%s:%d: %s: '%s' is not %s..65535", file, lineno, kw,
						 val ? val : "", is_depth ? "1" : "0");
				if (is_depth) {
					if (last_content->has_depth)
						IDS_FAIL("%s:%d: depth: given twice for one content", file, lineno);
					if (x < last_content->len)
						IDS_FAIL("%s:%d: depth: %u is shorter than the content (%u bytes)",
							 file, lineno, x, last_content->len);
					last_content->has_depth = 1;
					last_content->depth = x;
				} else {
					if (last_content->has_offset)
						IDS_FAIL("%s:%d: offset: given twice for one content", file, lineno);
					last_content->has_offset = 1;
					last_content->offset = x;
				}
			}
		} else if (strcmp(kw, "pcre") == 0) {
			if (negated)
				IDS_FAIL("%s:%d: pcre: negated pcre (pcre:!\"...\") is not supported", file, lineno);
			if (!quoted || val[0] != '/')
				IDS_FAIL("%s:%d: pcre: expected \"/regex/flags\"", file, lineno);
			/* undo the rule-level escapes \" and \; ; every other backslash belongs to the regex */
			char *w = val;
			for (const char *c = val; *c; c++) {
				if (c[0] == '\\' && (c[1] == '"' || c[1] == ';'))
					c++;
				*w++ = *c;
			}
			*w = '\0';
			char *last = strrchr(val, '/');
			if (last == val)
				IDS_FAIL("%s:%d: pcre: expected \"/regex/flags\" (no closing '/')", file, lineno);
			if (last - val - 1 == 0)
				IDS_FAIL("%s:%d: pcre: empty regex", file, lineno);
			if (rs->np - pat0 == IDS_PATS_PER_RULE)
				IDS_FAIL("%s:%d: pcre: more than %d content/pcre options in one rule", file, lineno,
					 IDS_PATS_PER_RULE);
			uint8_t ci = 0, dotall = 0, ml = 0;
			for (const char *f = last + 1; *f; f++) {
				if (*f == 'i')
					ci = 1;
				else if (*f == 's')
					dotall = 1;
				else if (*f == 'm')
					ml = 1;
				else
					IDS_FAIL("%s:%d: pcre: flag '%c' is not supported (only i, s, m)", file, lineno,
						 *f);
			}
			size_t n = (size_t)(last - val - 1);
			if (n >= IDS_PAT_MAX)
				IDS_FAIL("%s:%d: pcre: longer than %d bytes", file, lineno, IDS_PAT_MAX - 1);
			struct ids_pat *p = ids_new_pat(rs);
			if (p == NULL || (p->s = malloc(n + 1)) == NULL)
				IDS_FAIL("%s:%d: out of memory", file, lineno);
			memcpy(p->s, val + 1, n);
			p->s[n] = '\0';
			p->len = (uint32_t)n;
			p->kind = IDS_PAT_PCRE;
			p->nocase = ci;
			p->dotall = dotall;
			p->multiline = ml;
			p->rule = rs->n;
			rs->np++;
			last_content = NULL; /* nocase/offset/depth after a pcre would be Suricata errors too */
		} else if (strcmp(kw, "sid") == 0 || strcmp(kw, "rev") == 0 || strcmp(kw, "priority") == 0) {
			uint32_t x;
			uint32_t lo = 1, hi = kw[0] == 'p' ? 255 : 0xffffffffu;
			if (val == NULL || quoted || ids_parse_u32(val, lo, hi, &x) < 0)
				IDS_FAIL("%s:%d: %s: '%s' is not %u..%u", file, lineno, kw, val ? val : "", lo, hi);
			if (kw[0] == 's') {
				if (have_sid)
					IDS_FAIL("%s:%d: sid: given twice", file, lineno);
				have_sid = 1;
				r.sid = x;
			} else if (kw[0] == 'r') {
				r.rev = x;
			} else {
				r.priority = x;
			}
		} else if (strcmp(kw, "classtype") == 0) {
			if (val == NULL || quoted || strlen(val) >= sizeof(r.classtype) || val[0] == '\0')
				IDS_FAIL("%s:%d: classtype: expected a name of at most %d characters", file, lineno,
					 IDS_CLASS_MAX - 1);
			strcpy(r.classtype, val);
		} else {
			int ignored = 0;
			for (int i = 0; ids_ignored_kw[i]; i++)
				ignored |= strcmp(kw, ids_ignored_kw[i]) == 0;
			if (!ignored)
				IDS_FAIL("%s:%d: %s: keyword not supported (supported: msg, content, nocase, offset, "
					 "depth, pcre, sid, rev, classtype, priority; ignored: reference, metadata, "
					 "gid, target)", file, lineno, kw);
		}
	}
	if (!have_sid)
		IDS_FAIL("%s:%d: sid: missing (every rule needs sid:N)", file, lineno);
	if (!have_msg)
		snprintf(r.msg, sizeof(r.msg), "sid %u", r.sid);
	r.npat = rs->np - pat0;
	if (rs->n == rs->cap) {
		unsigned c = rs->cap ? rs->cap * 2 : 64;
		struct ids_rule *nr = realloc(rs->r, c * sizeof(*nr));
		if (nr == NULL)
			IDS_FAIL("%s:%d: out of memory", file, lineno);
		rs->r = nr;
		rs->cap = c;
	}
	rs->r[rs->n++] = r;
	return 0;
fail:
	for (unsigned i = pat0; i < rs->np; i++)
		free(rs->p[i].s);
	rs->np = pat0;
	ids_rule_free_sets(&r);
	return -1;
#undef IDS_FAIL
}

static inline int ids_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Parse a whole rule file held in `text` ('#' starts a comment line). Returns 0 and fills *out
 * (free with ids_rules_free), or -1 with "file:line: keyword: problem" in err. */
static inline int ids_rules_parse(const char *file, const char *text, struct ids_ruleset *out, char *err,
				  size_t errlen)
{
	struct ids_ruleset rs;
	memset(&rs, 0, sizeof(rs));
	int lineno = 0;
	const char *p = text;
	char *line = malloc(IDS_LINE_MAX + 1);
	if (line == NULL)
		return conf_err(err, errlen, "%s: out of memory", file);
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		lineno++;
		if (n > IDS_LINE_MAX) {
			conf_err(err, errlen, "%s:%d: line longer than %d characters", file, lineno, IDS_LINE_MAX);
			goto fail;
		}
		memcpy(line, p, n);
		line[n] = '\0';
		p += n + (nl ? 1 : 0);
		char *t = line;
		while (isspace((unsigned char)*t))
			t++;
		if (*t == '\0' || *t == '#')
			continue;
		if (rs.n == IDS_RULES_MAX) {
			conf_err(err, errlen, "%s:%d: more than %d rules", file, lineno, IDS_RULES_MAX);
			goto fail;
		}
		if (ids_parse_rule(&rs, file, lineno, t, err, errlen) < 0)
			goto fail;
	}
	free(line);
	line = NULL;
	/* duplicate sids: sorted once, not compared pairwise (rule sets have many thousands) */
	if (rs.n > 1) {
		uint64_t *k = malloc(rs.n * sizeof(*k));
		if (k == NULL) {
			conf_err(err, errlen, "%s: out of memory", file);
			goto fail;
		}
		for (unsigned i = 0; i < rs.n; i++)
			k[i] = (uint64_t)rs.r[i].sid << 32 | (uint32_t)rs.r[i].line;
		qsort(k, rs.n, sizeof(*k), ids_cmp_u64);
		for (unsigned i = 1; i < rs.n; i++)
			if (k[i] >> 32 == k[i - 1] >> 32) {
				conf_err(err, errlen, "%s:%u: sid: %u already used on line %u", file,
					(unsigned)(uint32_t)k[i], (unsigned)(k[i] >> 32), (unsigned)(uint32_t)k[i - 1]);
				free(k);
				goto fail;
			}
		free(k);
	}
	*out = rs;
	return 0;
fail:
	free(line);
	ids_rules_free(&rs);
	return -1;
}

/* Read and parse a rule file. Returns 0 or -1 with a message in err. */
static inline int ids_rules_load(const char *path, struct ids_ruleset *out, char *err, size_t errlen)
{
	char *text = NULL;
	if (conf_read_text(path, 256, &text, err, errlen) < 0)
		return -1;
	int rc = ids_rules_parse(path, text, out, err, errlen);
	free(text);
	return rc;
}

#endif /* SLUICE_NFS_IDS_RULES_H */
