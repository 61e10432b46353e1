/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The NAT's configuration file (one rule per line, '#' starts a comment):
 *
 *   snat from 10.0.0.0/24 to 203.0.113.1 [ports 1024-65535]
 *   dnat proto tcp|udp to 203.0.113.1:8080 -> 10.0.0.1:80
 *   timeout tcp_established|tcp_transitory|udp|icmp SECONDS
 *
 * Errors name the file, line and field: "nat.conf:7: to: '1.2.3' is not an IPv4 address".
 * DPDK-free, unit-tested (tests/unit/test_nat.c).
 */
#ifndef SLUICE_NFS_NAT_CONF_H
#define SLUICE_NFS_NAT_CONF_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"

#define NAT_MAX_SNAT 64
#define NAT_MAX_DNAT 256

struct nat_snat {
	uint32_t net, mask; /* source prefix */
	uint32_t pub;       /* public address */
	uint16_t lo, hi;    /* TCP/UDP port range (ICMP identifiers: always 0..65535) */
	uint8_t ports_given; /* no 'ports': keep any free source port; else pick like Linux */
};

struct nat_dnat {
	uint8_t proto;
	uint32_t pub, priv;
	uint16_t pub_port, priv_port;
};

struct nat_conf {
	struct nat_snat snat[NAT_MAX_SNAT];
	unsigned n_snat;
	struct nat_dnat dnat[NAT_MAX_DNAT];
	unsigned n_dnat;
	struct nat_timeouts to;
};

static inline void nat_conf_default(struct nat_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->to.tcp_est_ms = 7440000;
	c->to.tcp_trans_ms = 240000;
	c->to.udp_ms = 120000;
	c->to.icmp_ms = 30000;
}

/* Dotted quad, exactly four decimal parts 0..255. Returns 0 or -1. */
static inline int nat_parse_ip(const char *s, uint32_t *out)
{
	uint32_t v = 0;
	for (int part = 0; part < 4; part++) {
		if (*s < '0' || *s > '9')
			return -1;
		uint32_t x = 0;
		int digits = 0;
		while (*s >= '0' && *s <= '9') {
			x = x * 10 + (uint32_t)(*s++ - '0');
			if (++digits > 3 || x > 255)
				return -1;
		}
		v = v << 8 | x;
		if (part < 3 && *s++ != '.')
			return -1;
	}
	if (*s != '\0')
		return -1;
	*out = v;
	return 0;
}

/* Decimal in lo..hi, the whole string. */
static inline int nat_parse_num(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	if (*s < '0' || *s > '9' || strlen(s) > 12)
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end != '\0' || errno != 0 || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* "A.B.C.D:PORT" with PORT 1..65535. */
static inline int nat_parse_ep(char *s, uint32_t *ip, uint16_t *port)
{
	char *colon = strrchr(s, ':');
	uint64_t p;
	if (colon == NULL)
		return -1;
	*colon = '\0';
	int bad = nat_parse_ip(s, ip) < 0 || nat_parse_num(colon + 1, 1, 65535, &p) < 0;
	*colon = ':';
	if (bad)
		return -1;
	*port = (uint16_t)p;
	return 0;
}

#define NAT_ERR(...)                                                        \
	do {                                                                \
		snprintf(err, errlen, "%s:%u: ", fname, lineno);            \
		size_t l_ = strlen(err);                                    \
		snprintf(err + l_, errlen > l_ ? errlen - l_ : 0, __VA_ARGS__); \
		return -1;                                                  \
	} while (0)

/* Parse one line (modified in place). Returns 0, or -1 with the message in err. */
static inline int nat_conf_line(struct nat_conf *c, char *line, const char *fname, unsigned lineno, char *err,
				size_t errlen)
{
	char *hash = strchr(line, '#');
	if (hash)
		*hash = '\0';
	char *tok[16];
	unsigned n = 0;
	for (char *save = NULL, *t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save)) {
		if (n == 16)
			NAT_ERR("too many fields");
		tok[n++] = t;
	}
	if (n == 0)
		return 0;
	if (strcmp(tok[0], "snat") == 0 || strcmp(tok[0], "masquerade") == 0) {
		/* snat from PREFIX to IP [ports LO-HI] */
		if (n != 5 && n != 7)
			NAT_ERR("snat: expected 'snat from PREFIX to PUBLIC_IP [ports LO-HI]'");
		if (strcmp(tok[1], "from") != 0)
			NAT_ERR("snat: expected 'from', got '%s'", tok[1]);
		if (strcmp(tok[3], "to") != 0)
			NAT_ERR("snat: expected 'to', got '%s'", tok[3]);
		if (c->n_snat == NAT_MAX_SNAT)
			NAT_ERR("snat: more than %d snat rules", NAT_MAX_SNAT);
		struct nat_snat r = { .lo = 1024, .hi = 65535 };
		char *slash = strchr(tok[2], '/');
		uint64_t plen = 32;
		if (slash)
			*slash = '\0';
		int bad = nat_parse_ip(tok[2], &r.net) < 0 || (slash && nat_parse_num(slash + 1, 0, 32, &plen) < 0);
		if (slash)
			*slash = '/';
		if (bad)
			NAT_ERR("from: '%s' is not an IPv4 prefix A.B.C.D[/LEN]", tok[2]);
		r.mask = plen == 0 ? 0 : ~0u << (32 - plen);
		if (r.net & ~r.mask)
			NAT_ERR("from: '%s' has host bits set", tok[2]);
		if (nat_parse_ip(tok[4], &r.pub) < 0)
			NAT_ERR("to: '%s' is not an IPv4 address", tok[4]);
		if (n == 7) {
			if (strcmp(tok[5], "ports") != 0)
				NAT_ERR("snat: expected 'ports', got '%s'", tok[5]);
			char *dash = strchr(tok[6], '-');
			uint64_t lo, hi;
			if (dash)
				*dash = '\0';
			bad = !dash || nat_parse_num(tok[6], 1, 65535, &lo) < 0 ||
			      nat_parse_num(dash + 1, 1, 65535, &hi) < 0 || lo > hi;
			if (dash)
				*dash = '-';
			if (bad)
				NAT_ERR("ports: '%s' is not a port range LO-HI (1..65535, LO <= HI)", tok[6]);
			r.lo = (uint16_t)lo;
			r.hi = (uint16_t)hi;
			r.ports_given = 1;
		}
		c->snat[c->n_snat++] = r;
		return 0;
	}
	if (strcmp(tok[0], "dnat") == 0) {
		/* dnat proto tcp to IP:PORT -> IP:PORT */
		if (n != 7 || strcmp(tok[1], "proto") != 0 || strcmp(tok[3], "to") != 0 || strcmp(tok[5], "->") != 0)
			NAT_ERR("dnat: expected 'dnat proto tcp|udp to PUBLIC_IP:PORT -> INSIDE_IP:PORT'");
		if (c->n_dnat == NAT_MAX_DNAT)
			NAT_ERR("dnat: more than %d dnat rules", NAT_MAX_DNAT);
		struct nat_dnat r;
		memset(&r, 0, sizeof(r));
		if (strcmp(tok[2], "tcp") == 0)
			r.proto = NAT_P_TCP;
		else if (strcmp(tok[2], "udp") == 0)
			r.proto = NAT_P_UDP;
		else
			NAT_ERR("proto: '%s' is not tcp or udp", tok[2]);
		if (nat_parse_ep(tok[4], &r.pub, &r.pub_port) < 0)
			NAT_ERR("to: '%s' is not IPv4:PORT", tok[4]);
		if (nat_parse_ep(tok[6], &r.priv, &r.priv_port) < 0)
			NAT_ERR("->: '%s' is not IPv4:PORT", tok[6]);
		for (unsigned i = 0; i < c->n_dnat; i++)
			if (c->dnat[i].proto == r.proto && c->dnat[i].pub == r.pub && c->dnat[i].pub_port == r.pub_port)
				NAT_ERR("to: '%s' is already forwarded (%s)", tok[4], tok[2]);
		c->dnat[c->n_dnat++] = r;
		return 0;
	}
	if (strcmp(tok[0], "timeout") == 0) {
		if (n != 3)
			NAT_ERR("timeout: expected 'timeout tcp_established|tcp_transitory|udp|icmp SECONDS'");
		uint64_t *dst;
		if (strcmp(tok[1], "tcp_established") == 0)
			dst = &c->to.tcp_est_ms;
		else if (strcmp(tok[1], "tcp_transitory") == 0)
			dst = &c->to.tcp_trans_ms;
		else if (strcmp(tok[1], "udp") == 0)
			dst = &c->to.udp_ms;
		else if (strcmp(tok[1], "icmp") == 0)
			dst = &c->to.icmp_ms;
		else
			NAT_ERR("timeout: '%s' is not tcp_established, tcp_transitory, udp or icmp", tok[1]);
		uint64_t s;
		if (nat_parse_num(tok[2], 1, 30 * 86400, &s) < 0)
			NAT_ERR("%s: '%s' is not a number of seconds 1..2592000", tok[1], tok[2]);
		*dst = s * 1000;
		return 0;
	}
	NAT_ERR("rule: '%s' is not snat, dnat or timeout", tok[0]);
}

/* Parse a whole file. Returns 0, or -1 with the message in err. */
static inline int nat_conf_load(struct nat_conf *c, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	char line[1024];
	unsigned lineno = 0;
	int rc = 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		lineno++;
		if (strchr(line, '\n') == NULL && !feof(f)) {
			snprintf(err, errlen, "%s:%u: line longer than %zu bytes", path, lineno, sizeof(line) - 2);
			rc = -1;
			break;
		}
		if (nat_conf_line(c, line, path, lineno, err, errlen) < 0) {
			rc = -1;
			break;
		}
	}
	fclose(f);
	return rc;
}

#undef NAT_ERR

#endif /* SLUICE_NFS_NAT_CONF_H */
