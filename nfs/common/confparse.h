/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Pieces the NFs' configuration parsers share (firewall, ratelimit, ids, lb, l2switch): the error
 * message helper, the port-range and address-prefix fields, and reading a whole text file. DPDK-free; unit-tested through the
 * NFs' parsers (tests/unit/test_firewall.c, test_ratelimit.c, ...).
 */
#ifndef SLUICE_NFS_CONFPARSE_H
#define SLUICE_NFS_CONFPARSE_H

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Format an error message into err (errlen bytes). Returns -1, so a parser can `return conf_err(...)`. */
static inline int conf_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* "N" or "N-M", 0..65535, N <= M */
static inline int conf_parse_range(const char *s, uint16_t *lo, uint16_t *hi)
{
	char *end;
	if (s[0] < '0' || s[0] > '9')
		return -1;
	errno = 0;
	unsigned long a = strtoul(s, &end, 10), b = a;
	if (errno || a > 65535)
		return -1;
	if (*end == '-') {
		const char *t = end + 1;
		if (t[0] < '0' || t[0] > '9')
			return -1;
		b = strtoul(t, &end, 10);
		if (errno || b > 65535 || b < a)
			return -1;
	}
	if (*end != '\0')
		return -1;
	*lo = (uint16_t)a;
	*hi = (uint16_t)b;
	return 0;
}

/* "ADDR" or "ADDR/LEN" (IPv4 or IPv6). Host bits are masked off. Returns the family or -1. */
static inline int conf_parse_prefix(const char *s, uint64_t v[2], uint64_t m[2])
{
	char buf[64];
	uint8_t a[16] = { 0 }, mask[16] = { 0 };
	const char *slash = strchr(s, '/');
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);
	if (alen == 0 || alen >= sizeof(buf))
		return -1;
	memcpy(buf, s, alen);
	buf[alen] = '\0';
	int fam;
	unsigned bits;
	if (inet_pton(AF_INET, buf, a) == 1) {
		fam = 4;
		bits = 32;
	} else if (inet_pton(AF_INET6, buf, a) == 1) {
		fam = 6;
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
		mask[i / 8] |= (uint8_t)(0x80 >> (i % 8));
	for (int i = 0; i < 16; i++)
		a[i] &= mask[i];
	memcpy(v, a, 16);
	memcpy(m, mask, 16);
	return fam;
}

/* Read the whole text file `path` (at most max_mib MiB) into a NUL-terminated buffer the caller
 * frees. Returns 0, or -1 with a message naming the file in err ("FILE: <strerror>", out of memory, too
 * large, read error, or a NUL byte inside: not a text file). */
static inline int conf_read_text(const char *path, unsigned max_mib, char **text, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return conf_err(err, errlen, "%s: %s", path, strerror(errno));
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (buf == NULL) {
			fclose(f);
			return conf_err(err, errlen, "%s: out of memory", path);
		}
		n += fread(buf + n, 1, cap - 1 - n, f);
		if (n < cap - 1)
			break;
		if (cap >= ((size_t)max_mib << 20)) {
			free(buf);
			fclose(f);
			return conf_err(err, errlen, "%s: larger than %u MiB", path, max_mib);
		}
		cap *= 2;
		char *nb = realloc(buf, cap);
		if (nb == NULL)
			free(buf);
		buf = nb;
	}
	int rerr = ferror(f);
	fclose(f);
	if (rerr) {
		free(buf);
		return conf_err(err, errlen, "%s: read error", path);
	}
	buf[n] = '\0';
	if (memchr(buf, '\0', n) != NULL) {
		free(buf);
		return conf_err(err, errlen, "%s: contains a NUL byte (not a text file)", path);
	}
	*text = buf;
	return 0;
}

#endif /* SLUICE_NFS_CONFPARSE_H */
