/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The load balancer's configuration file (docs/nfs/lb.md). One statement per line, '#' starts a
 * comment, words are separated by blanks:
 *
 *   vip ADDRESS tcp|udp PORT                  a service; the backend lines after it belong to it
 *   backend NAME ADDRESS[:PORT] [weight W] [disabled|down]
 *
 * ADDRESS is IPv4 (10.0.0.1) or IPv6; an IPv6 backend with a port is written [fd00::1]:8080.
 * Without a port a backend listens on the VIP's port. A backend has the VIP's family.
 * Errors name the file, line and field: "lb.conf:7: weight: '0' is not 1..1000".
 * DPDK-free, unit-tested (tests/unit/test_lb.c).
 */
#ifndef SLUICE_NFS_LB_CONF_H
#define SLUICE_NFS_LB_CONF_H

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/confparse.h"

#define LB_MAX_SVC      64
#define LB_MAX_BE       1024 /* backends in one file, all services together */
#define LB_NAME_MAX     15   /* 14 characters + NUL: "be.NAME.conns" fits a sluiced counter name */
#define LB_WEIGHT_MAX   1000

/* backend states */
#define LB_BE_UP       0 /* takes new connections */
#define LB_BE_DISABLED 1 /* no new connections; its connections keep it (IPVS weight 0) */
#define LB_BE_DOWN     2 /* no new connections; its connections move to another backend */

struct lb_be_conf {
	char name[LB_NAME_MAX];
	uint8_t addr[16]; /* IPv4: the 4 bytes first, rest 0 */
	uint16_t port;
	uint16_t weight;
	uint8_t state;
	unsigned line;
};

struct lb_svc_conf {
	uint8_t family; /* 4 or 6 */
	uint8_t proto;  /* 6 or 17 */
	uint8_t vip[16];
	uint16_t port;
	unsigned first_be, n_be; /* its backends: be[first_be .. first_be + n_be) */
	unsigned line;
};

struct lb_conf {
	struct lb_svc_conf svc[LB_MAX_SVC];
	unsigned n_svc;
	struct lb_be_conf be[LB_MAX_BE];
	unsigned n_be;
};

/* Decimal in lo..hi, the whole string. Returns 0 or -1. */
static inline int lb_parse_num(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (*end != '\0' || errno != 0 || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* An address of either family; family 0 accepts both. Returns the family (4, 6) or 0. */
static inline int lb_parse_addr(const char *s, int family, uint8_t out[16])
{
	memset(out, 0, 16);
	if (family != 6 && inet_pton(AF_INET, s, out) == 1)
		return 4;
	if (family != 4 && inet_pton(AF_INET6, s, out) == 1)
		return 6;
	return 0;
}

static inline int lb_name_ok(const char *s)
{
	size_t n = strlen(s);
	return n >= 1 && n < LB_NAME_MAX &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

/* "ADDR", "ADDR:PORT" (IPv4) or "[ADDR]:PORT" / "ADDR" (IPv6) of the given family. Returns 0, or -1
 * with the message in err (field "address" or "port"). port is left alone when none is given. */
static inline int lb_parse_backend_addr(const char *s, int family, uint8_t addr[16], uint16_t *port,
					const char *where, char *err, size_t errlen)
{
	char buf[80];
	const char *ps = NULL;
	if (strlen(s) >= sizeof(buf))
		return conf_err(err, errlen, "%s address: '%.40s...' is too long", where, s);
	snprintf(buf, sizeof(buf), "%s", s);
	if (buf[0] == '[') {
		char *close = strchr(buf, ']');
		if (close == NULL || (close[1] != '\0' && close[1] != ':'))
			return conf_err(err, errlen, "%s address: '%s' is not [IPv6]:PORT", where, s);
		*close = '\0';
		if (close[1] == ':')
			ps = close + 2;
		memmove(buf, buf + 1, strlen(buf + 1) + 1);
	} else {
		char *colon = strchr(buf, ':');
		if (colon != NULL && strchr(colon + 1, ':') == NULL) { /* exactly one ':': IPv4:PORT */
			*colon = '\0';
			ps = colon + 1;
		}
	}
	int f = lb_parse_addr(buf, 0, addr);
	if (f == 0)
		return conf_err(err, errlen, "%s address: '%s' is not an IPv4 or IPv6 address", where, s);
	if (f != family)
		return conf_err(err, errlen, "%s address: '%s' is IPv%d but the vip is IPv%d", where, s, f,
				   family);
	if (ps != NULL) {
		unsigned long v;
		if (lb_parse_num(ps, 1, 65535, &v) < 0)
			return conf_err(err, errlen, "%s port: '%s' is not 1..65535", where, ps);
		*port = (uint16_t)v;
	}
	return 0;
}

/* Parse one line (already without its comment) into c. Returns 0 or -1 (err without "file:line: "). */
static inline int lb_conf_line(struct lb_conf *c, char *line, unsigned lineno, char *err, size_t errlen)
{
	char *w[16];
	unsigned n = 0;
	for (char *tok = strtok(line, " \t\r\n"); tok != NULL; tok = strtok(NULL, " \t\r\n")) {
		if (n == 16)
			return conf_err(err, errlen, "line: too many words");
		w[n++] = tok;
	}
	if (n == 0)
		return 0;
	unsigned long v;
	if (strcmp(w[0], "vip") == 0) {
		if (n != 4)
			return conf_err(err, errlen, "vip: expected 'vip ADDRESS tcp|udp PORT'");
		if (c->n_svc == LB_MAX_SVC)
			return conf_err(err, errlen, "vip: more than %d services", LB_MAX_SVC);
		struct lb_svc_conf *s = &c->svc[c->n_svc];
		memset(s, 0, sizeof(*s));
		s->family = (uint8_t)lb_parse_addr(w[1], 0, s->vip);
		if (s->family == 0)
			return conf_err(err, errlen, "vip address: '%s' is not an IPv4 or IPv6 address", w[1]);
		if (strcmp(w[2], "tcp") == 0)
			s->proto = 6;
		else if (strcmp(w[2], "udp") == 0)
			s->proto = 17;
		else
			return conf_err(err, errlen, "vip protocol: '%s' is not tcp or udp", w[2]);
		if (lb_parse_num(w[3], 1, 65535, &v) < 0)
			return conf_err(err, errlen, "vip port: '%s' is not 1..65535", w[3]);
		s->port = (uint16_t)v;
		for (unsigned i = 0; i < c->n_svc; i++) {
			const struct lb_svc_conf *o = &c->svc[i];
			if (o->family == s->family && o->proto == s->proto && o->port == s->port &&
			    memcmp(o->vip, s->vip, 16) == 0)
				return conf_err(err, errlen, "vip: %s %s %s is already defined on line %u", w[1],
						   w[2], w[3], o->line);
		}
		s->first_be = c->n_be;
		s->line = lineno;
		c->n_svc++;
		return 0;
	}
	if (strcmp(w[0], "backend") == 0) {
		if (c->n_svc == 0)
			return conf_err(err, errlen, "backend: comes before any vip line");
		if (n < 3)
			return conf_err(err, errlen, "backend: expected 'backend NAME ADDRESS[:PORT] ...'");
		if (c->n_be == LB_MAX_BE)
			return conf_err(err, errlen, "backend: more than %d backends", LB_MAX_BE);
		struct lb_svc_conf *s = &c->svc[c->n_svc - 1];
		struct lb_be_conf *b = &c->be[c->n_be];
		memset(b, 0, sizeof(*b));
		if (!lb_name_ok(w[1]))
			return conf_err(err, errlen, "backend name: '%s' is not 1-%d characters of [A-Za-z0-9_-]",
					   w[1], LB_NAME_MAX - 1);
		for (unsigned i = 0; i < c->n_be; i++)
			if (strcmp(c->be[i].name, w[1]) == 0)
				return conf_err(err, errlen, "backend name: '%s' is already used on line %u",
						   w[1], c->be[i].line);
		snprintf(b->name, sizeof(b->name), "%s", w[1]);
		b->port = s->port;
		b->weight = 1;
		b->state = LB_BE_UP;
		if (lb_parse_backend_addr(w[2], s->family, b->addr, &b->port, "backend", err, errlen) < 0)
			return -1;
		int seen_w = 0, seen_state = 0;
		for (unsigned i = 3; i < n; i++) {
			if (strcmp(w[i], "weight") == 0) {
				if (seen_w++)
					return conf_err(err, errlen, "weight: given twice");
				if (i + 1 >= n)
					return conf_err(err, errlen, "weight: needs a value");
				if (lb_parse_num(w[++i], 1, LB_WEIGHT_MAX, &v) < 0)
					return conf_err(err, errlen, "weight: '%s' is not 1..%d", w[i], LB_WEIGHT_MAX);
				b->weight = (uint16_t)v;
			} else if (strcmp(w[i], "disabled") == 0 || strcmp(w[i], "down") == 0) {
				if (seen_state++)
					return conf_err(err, errlen, "%s: a state is given twice", w[i]);
				b->state = w[i][0] == 'd' && w[i][1] == 'i' ? LB_BE_DISABLED : LB_BE_DOWN;
			} else {
				return conf_err(err, errlen, "'%s': unknown field (expected weight, disabled, down)",
						   w[i]);
			}
		}
		for (unsigned i = s->first_be; i < c->n_be; i++)
			if (memcmp(c->be[i].addr, b->addr, 16) == 0 && c->be[i].port == b->port)
				return conf_err(err, errlen, "backend address: '%s' is already backend '%s' of this vip",
						   w[2], c->be[i].name);
		b->line = lineno;
		c->n_be++;
		s->n_be++;
		return 0;
	}
	return conf_err(err, errlen, "'%s': unknown statement (expected vip or backend)", w[0]);
}

/* Parse text (a whole file's contents) named `file` in messages. Returns 0, or -1 with
 * "file:line: field: problem" in err. */
static inline int lb_conf_parse(struct lb_conf *c, const char *text, const char *file, char *err, size_t errlen)
{
	char line[512], msg[400];
	unsigned lineno = 0;
	memset(c, 0, sizeof(*c));
	while (*text != '\0') {
		const char *nl = strchr(text, '\n');
		size_t len = nl ? (size_t)(nl - text) : strlen(text);
		lineno++;
		if (len >= sizeof(line))
			return conf_err(err, errlen, "%s:%u: line: longer than %zu characters", file, lineno,
					   sizeof(line) - 1);
		memcpy(line, text, len);
		line[len] = '\0';
		text += len + (nl != NULL);
		char *hash = strchr(line, '#');
		if (hash != NULL)
			*hash = '\0';
		if (lb_conf_line(c, line, lineno, msg, sizeof(msg)) < 0)
			return conf_err(err, errlen, "%s:%u: %s", file, lineno, msg);
	}
	if (c->n_svc == 0)
		return conf_err(err, errlen, "%s: no vip line: nothing to balance", file);
	for (unsigned i = 0; i < c->n_svc; i++)
		if (c->svc[i].n_be == 0)
			return conf_err(err, errlen, "%s:%u: vip: has no backend lines", file, c->svc[i].line);
	return 0;
}

/* Read and parse a file. Returns 0 or -1 (message in err). */
static inline int lb_conf_load(struct lb_conf *c, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return conf_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap + 1);
	if (buf == NULL) {
		fclose(f);
		return conf_err(err, errlen, "%s: out of memory", path);
	}
	size_t r;
	while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap) {
			char *nb = cap < (1u << 24) ? realloc(buf, cap * 2 + 1) : NULL;
			if (nb == NULL) {
				free(buf);
				fclose(f);
				return conf_err(err, errlen, "%s: too large", path);
			}
			buf = nb;
			cap *= 2;
		}
	}
	int rd_err = ferror(f);
	fclose(f);
	buf[n] = '\0';
	int rc = rd_err ? conf_err(err, errlen, "%s: read error", path) : lb_conf_parse(c, buf, path, err, errlen);
	free(buf);
	return rc;
}

#endif /* SLUICE_NFS_LB_CONF_H */
