/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The rate limiter's configuration file: parser and first-match classification. DPDK-free;
 * unit-tested in tests/unit/test_ratelimit.c. Format (docs/nfs/ratelimit.md), one statement per
 * line, '#' comments:
 *
 *   length ip|frame
 *   class NAME [per-flow] [color-aware] match MATCH...
 *         srtcm cir RATE cbs BYTES ebs BYTES | trtcm cir RATE pir RATE cbs BYTES pbs BYTES
 *         [green ACTION] [yellow ACTION] [red ACTION]
 *   MATCH:  any | family ipv4|ipv6 | proto tcp|udp|icmp|icmpv6|N | src PREFIX | dst PREFIX |
 *           sport N[-M] | dport N[-M] | dscp D[,D...]
 *   ACTION: pass | drop | mark DSCP
 *
 * Errors name the file, line and field: "rl.conf:4: cir: '10X' is not a rate (e.g. 800k, 10M, 1G)".
 */
#ifndef SLUICE_NFS_RATELIMIT_CONF_H
#define SLUICE_NFS_RATELIMIT_CONF_H

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/confparse.h"

#include "meter.h"
#include "pkt.h"

#define RL_CLASSES_MAX 128      /* 6 counters each: sluiced shows at most 1024 per NF */
#define RL_NAME_MAX 14          /* NAME + ".yellow_b" fits a 23-character counter name */
#define RL_LINE_MAX 1024
#define RL_RATE_MAX 1000000000000ull  /* 1 Tbit/s */
#define RL_BURST_MAX (1ull << 30)      /* 1 GiB */

enum rl_act { RL_ACT_PASS = 0, RL_ACT_DROP, RL_ACT_MARK };
enum { RL_CTR_GREEN = 0, RL_CTR_GREEN_B, RL_CTR_YELLOW, RL_CTR_YELLOW_B, RL_CTR_RED, RL_CTR_RED_B,
       RL_CTR_N };

struct rl_action {
	uint8_t kind;  /* enum rl_act */
	uint8_t dscp;  /* RL_ACT_MARK */
};

struct rl_class {
	/* match */
	uint64_t src[2], src_mask[2], dst[2], dst_mask[2];
	uint64_t dscp_mask;          /* bit d: DSCP d matches (all ones: any) */
	uint16_t sport_lo, sport_hi, dport_lo, dport_hi;
	int16_t proto;               /* -1: any */
	uint8_t family;              /* 0 any, 4, 6 */
	uint8_t has_src, has_dst, has_l4;
	/* policing */
	uint8_t per_flow, color_aware;
	struct rl_action act[3];     /* by enum rl_color */
	struct rl_params mp;         /* den is set by rl_conf_start */
	/* state */
	struct rl_meter shared;      /* the class's meter (per-flow classes: for flows the table cannot hold) */
	uint64_t idle_cycles;        /* a per-flow meter idle this long is forgotten */
	uint64_t *ctr[RL_CTR_N];     /* counters (set by the NF; NULL in tests) */
	int line;
	char name[RL_NAME_MAX + 1];
};

struct rl_conf {
	struct rl_class *c;
	unsigned n;
	uint8_t len_frame;           /* meter the whole frame instead of the IP packet */
};

static inline void rl_conf_free(struct rl_conf *cf)
{
	free(cf->c);
	cf->c = NULL;
	cf->n = 0;
}

/* "I[.F]" then a unit: the whole value times mult must be an integer in 1..max. */
static inline int rl_parse_unit(const char *s, const char *const units[], const uint64_t mults[], uint64_t lo,
				uint64_t max, uint64_t *out)
{
	unsigned __int128 ip = 0, fp = 0, fden = 1;
	const char *q = s;
	if (!isdigit((unsigned char)*q))
		return -1;
	for (; isdigit((unsigned char)*q); q++) {
		ip = ip * 10 + (unsigned)(*q - '0');
		if (ip > max)
			return -1;
	}
	if (*q == '.') {
		q++;
		if (!isdigit((unsigned char)*q))
			return -1;
		for (int nd = 0; isdigit((unsigned char)*q); q++, nd++) {
			if (nd >= 12)
				return -1;
			fp = fp * 10 + (unsigned)(*q - '0');
			fden *= 10;
		}
	}
	for (int i = 0; units[i] != NULL; i++) {
		if (strcmp(q, units[i]) != 0)
			continue;
		unsigned __int128 m = mults[i];
		unsigned __int128 v = ip * m + fp * m / fden;
		if (fp * m % fden != 0 || v < lo || v > max)
			return -1;
		*out = (uint64_t)v;
		return 0;
	}
	return -1;
}

/* A rate in bit/s: "800000", "800k", "1.5M", "10G", optionally followed by "bit" or "bps". */
static inline int rl_parse_rate(const char *s, uint64_t *out)
{
	static const char *const u[] = { "", "bit", "bps", "k", "kbit", "kbps", "K", "Kbit", "Kbps",
					 "M", "Mbit", "Mbps", "m", "mbit", "mbps", "G", "Gbit", "Gbps",
					 "g", "gbit", "gbps", NULL };
	static const uint64_t m[] = { 1, 1, 1, 1000, 1000, 1000, 1000, 1000, 1000, 1000000, 1000000,
				      1000000, 1000000, 1000000, 1000000, 1000000000, 1000000000,
				      1000000000, 1000000000, 1000000000, 1000000000 };
	return rl_parse_unit(s, u, m, 1, RL_RATE_MAX, out);
}

/* A size in bytes: "1500", "64k" / "64kb" (x1024), "1m" / "1mb" (x1048576), as tc does. */
static inline int rl_parse_bytes(const char *s, uint64_t *out)
{
	static const char *const u[] = { "", "b", "k", "kb", "K", "KB", "m", "mb", "M", "MB", NULL };
	static const uint64_t m[] = { 1, 1, 1024, 1024, 1024, 1024, 1048576, 1048576, 1048576, 1048576 };
	return rl_parse_unit(s, u, m, 0, RL_BURST_MAX, out);
}

/* A DSCP: 0..63 or a name (be, cs0-cs7, af11-af43, ef, va). Returns 0..63 or -1. */
static inline int rl_parse_dscp(const char *s)
{
	char *end;
	if (isdigit((unsigned char)s[0])) {
		errno = 0;
		unsigned long v = strtoul(s, &end, 10);
		return (*end == '\0' && errno == 0 && v <= 63) ? (int)v : -1;
	}
	if (strcmp(s, "be") == 0 || strcmp(s, "default") == 0)
		return 0;
	if (strcmp(s, "ef") == 0)
		return 46;
	if (strcmp(s, "va") == 0)
		return 44;
	if (s[0] == 'c' && s[1] == 's' && s[2] >= '0' && s[2] <= '7' && s[3] == '\0')
		return (s[2] - '0') << 3;
	if (s[0] == 'a' && s[1] == 'f' && s[2] >= '1' && s[2] <= '4' && s[3] >= '1' && s[3] <= '3' &&
	    s[4] == '\0')
		return ((s[2] - '0') << 3) | ((s[3] - '0') << 1);
	return -1;
}

static inline int rl_name_ok(const char *s)
{
	size_t n = strlen(s);
	return n >= 1 && n <= RL_NAME_MAX &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

/* The words a class line may contain, each at most once. */
static const char *const rl_fields[] = {
	"per-flow", "color-aware", "match", "any", "family", "proto", "src", "dst", "sport", "dport",
	"dscp", "srtcm", "trtcm", "cir", "pir", "cbs", "ebs", "pbs", "green", "yellow", "red",
};
enum { RLF_PER_FLOW, RLF_AWARE, RLF_MATCH, RLF_ANY, RLF_FAMILY, RLF_PROTO, RLF_SRC, RLF_DST, RLF_SPORT,
       RLF_DPORT, RLF_DSCP, RLF_SRTCM, RLF_TRTCM, RLF_CIR, RLF_PIR, RLF_CBS, RLF_EBS, RLF_PBS,
       RLF_GREEN, RLF_YELLOW, RLF_RED, RLF_N };

/* Parse one class line (tok[0] == "class"). Returns 0 or -1 with the message in err. */
static inline int rl_parse_class(const char *file, int lineno, char **tok, int nt, struct rl_class *c,
				 char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	c->line = lineno;
	c->proto = -1;
	c->sport_hi = c->dport_hi = 65535;
	c->dscp_mask = ~0ull;
	c->act[RL_RED].kind = RL_ACT_DROP;
	if (nt < 2 || !rl_name_ok(tok[1]))
		return conf_err(err, errlen, "%s:%d: name: %s%s%s is not 1-%d of [A-Za-z0-9_-]", file, lineno,
			      nt < 2 ? "missing" : "'", nt < 2 ? "" : tok[1], nt < 2 ? "" : "'", RL_NAME_MAX);
	snprintf(c->name, sizeof(c->name), "%s", tok[1]);
	uint32_t seen = 0;
	int src_fam = 0, dst_fam = 0, proto_fam = 0;
	for (int i = 2; i < nt; i++) {
		const char *f = tok[i];
		unsigned fi;
		for (fi = 0; fi < RLF_N; fi++)
			if (strcmp(f, rl_fields[fi]) == 0)
				break;
		if (fi == RLF_N)
			return conf_err(err, errlen,
				      "%s:%d: '%s': unknown field (expected per-flow, color-aware, match, family, "
				      "proto, src, dst, sport, dport, dscp, srtcm, trtcm, cir, pir, cbs, ebs, pbs, "
				      "green, yellow, red)", file, lineno, f);
		if (seen & (1u << fi))
			return conf_err(err, errlen, "%s:%d: %s: given twice", file, lineno, f);
		seen |= 1u << fi;
		if (fi == RLF_PER_FLOW || fi == RLF_AWARE || fi == RLF_MATCH || fi == RLF_ANY ||
		    fi == RLF_SRTCM || fi == RLF_TRTCM) {
			if (fi == RLF_PER_FLOW)
				c->per_flow = 1;
			else if (fi == RLF_AWARE)
				c->color_aware = 1;
			else if (fi == RLF_SRTCM || fi == RLF_TRTCM) {
				if (seen & (1u << (fi == RLF_SRTCM ? RLF_TRTCM : RLF_SRTCM)))
					return conf_err(err, errlen, "%s:%d: %s: a class has one meter, srtcm or trtcm",
						      file, lineno, f);
				c->mp.kind = fi == RLF_SRTCM ? RL_SRTCM : RL_TRTCM;
			}
			continue;
		}
		if (i + 1 >= nt)
			return conf_err(err, errlen, "%s:%d: %s: missing value", file, lineno, f);
		const char *v = tok[++i];
		switch (fi) {
		case RLF_FAMILY:
			if (strcmp(v, "ipv4") == 0 || strcmp(v, "ip") == 0)
				c->family = 4;
			else if (strcmp(v, "ipv6") == 0 || strcmp(v, "ip6") == 0)
				c->family = 6;
			else
				return conf_err(err, errlen, "%s:%d: family: '%s' is not ipv4 or ipv6", file, lineno, v);
			break;
		case RLF_PROTO:
			if (strcmp(v, "tcp") == 0)
				c->proto = 6;
			else if (strcmp(v, "udp") == 0)
				c->proto = 17;
			else if (strcmp(v, "icmp") == 0)
				c->proto = 1, proto_fam = 4;
			else if (strcmp(v, "icmpv6") == 0)
				c->proto = 58, proto_fam = 6;
			else {
				char *end;
				errno = 0;
				unsigned long n = strtoul(v, &end, 10);
				if (!isdigit((unsigned char)v[0]) || *end || errno || n > 255)
					return conf_err(err, errlen,
						      "%s:%d: proto: '%s' is not tcp, udp, icmp, icmpv6 or 0..255", file,
						      lineno, v);
				c->proto = (int16_t)n;
			}
			break;
		case RLF_SRC:
		case RLF_DST: {
			int fam = conf_parse_prefix(v, fi == RLF_SRC ? c->src : c->dst,
						  fi == RLF_SRC ? c->src_mask : c->dst_mask);
			if (fam < 0)
				return conf_err(err, errlen, "%s:%d: %s: '%s' is not an address or prefix", file, lineno,
					      f, v);
			if (fi == RLF_SRC)
				src_fam = fam, c->has_src = 1;
			else
				dst_fam = fam, c->has_dst = 1;
			break;
		}
		case RLF_SPORT:
		case RLF_DPORT:
			if (conf_parse_range(v, fi == RLF_SPORT ? &c->sport_lo : &c->dport_lo,
					   fi == RLF_SPORT ? &c->sport_hi : &c->dport_hi) < 0)
				return conf_err(err, errlen, "%s:%d: %s: '%s' is not a port or range (0..65535, N-M)",
					      file, lineno, f, v);
			c->has_l4 = 1;
			break;
		case RLF_DSCP: {
			char buf[RL_LINE_MAX + 1];
			snprintf(buf, sizeof(buf), "%s", v);
			c->dscp_mask = 0;
			for (char *save = NULL, *d = strtok_r(buf, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
				int x = rl_parse_dscp(d);
				if (x < 0)
					return conf_err(err, errlen,
						      "%s:%d: dscp: '%s' is not a DSCP (0..63, be, csN, afXY, ef)", file,
						      lineno, d);
				c->dscp_mask |= 1ull << x;
			}
			if (c->dscp_mask == 0)
				return conf_err(err, errlen, "%s:%d: dscp: '%s' is not a list of DSCPs", file, lineno, v);
			break;
		}
		case RLF_CIR:
		case RLF_PIR:
			if (rl_parse_rate(v, fi == RLF_CIR ? &c->mp.cir : &c->mp.pir) < 0)
				return conf_err(err, errlen,
					      "%s:%d: %s: '%s' is not a rate in bit/s (1..1000G, e.g. 800k, 10M, 1.5G)",
					      file, lineno, f, v);
			break;
		case RLF_CBS:
		case RLF_EBS:
		case RLF_PBS:
			if (rl_parse_bytes(v, fi == RLF_CBS ? &c->mp.cbs : &c->mp.xbs) < 0)
				return conf_err(err, errlen,
					      "%s:%d: %s: '%s' is not a size in bytes (0..1024m, e.g. 1500, 64k, 1m)",
					      file, lineno, f, v);
			break;
		case RLF_GREEN:
		case RLF_YELLOW:
		case RLF_RED: {
			struct rl_action *a = &c->act[fi - RLF_GREEN];
			if (strcmp(v, "pass") == 0) {
				a->kind = RL_ACT_PASS;
			} else if (strcmp(v, "drop") == 0) {
				a->kind = RL_ACT_DROP;
			} else if (strcmp(v, "mark") == 0) {
				int x = i + 1 < nt ? rl_parse_dscp(tok[i + 1]) : -1;
				if (x < 0)
					return conf_err(err, errlen,
						      "%s:%d: %s: mark needs a DSCP (0..63, be, csN, afXY, ef)%s%s%s",
						      file, lineno, f, i + 1 < nt ? ", not '" : "",
						      i + 1 < nt ? tok[i + 1] : "", i + 1 < nt ? "'" : "");
				a->kind = RL_ACT_MARK;
				a->dscp = (uint8_t)x;
				i++;
			} else {
				return conf_err(err, errlen, "%s:%d: %s: '%s' is not pass, drop or mark DSCP", file,
					      lineno, f, v);
			}
			break;
		}
		default:
			return conf_err(err, errlen, "%s:%d: %s: unexpected", file, lineno, f);
		}
	}
	/* consistency */
	if ((seen & (1u << RLF_ANY)) &&
	    (seen & ((1u << RLF_FAMILY) | (1u << RLF_PROTO) | (1u << RLF_SRC) | (1u << RLF_DST) |
		     (1u << RLF_SPORT) | (1u << RLF_DPORT) | (1u << RLF_DSCP))))
		return conf_err(err, errlen, "%s:%d: any: cannot be combined with other match fields", file, lineno);
	int fam = c->family;
	const struct { int f; const char *what; } fams[] = { { src_fam, "src" }, { dst_fam, "dst" },
							      { proto_fam, "proto" } };
	const char *fam_from = "family";
	for (int k = 0; k < 3; k++) {
		if (fams[k].f == 0)
			continue;
		if (fam != 0 && fam != fams[k].f)
			return conf_err(err, errlen, "%s:%d: %s: is IPv%d but %s is IPv%d", file, lineno, fams[k].what,
				      fams[k].f, fam_from, fam);
		fam = fams[k].f;
		fam_from = fams[k].what;
	}
	c->family = (uint8_t)fam;
	if (c->has_l4 && c->proto != 6 && c->proto != 17)
		return conf_err(err, errlen, "%s:%d: %s: needs proto tcp or udp", file, lineno,
			      (seen & (1u << RLF_SPORT)) ? "sport" : "dport");
	if (!(seen & ((1u << RLF_SRTCM) | (1u << RLF_TRTCM))))
		return conf_err(err, errlen, "%s:%d: meter: missing (srtcm cir R cbs B ebs B, or trtcm cir R pir R "
			      "cbs B pbs B)", file, lineno);
	const int is_sr = c->mp.kind == RL_SRTCM;
	const unsigned need[] = { RLF_CIR, RLF_CBS, is_sr ? RLF_EBS : RLF_PIR, is_sr ? RLF_CBS : RLF_PBS };
	for (int k = 0; k < 4; k++)
		if (!(seen & (1u << need[k])))
			return conf_err(err, errlen, "%s:%d: %s: missing (needed by %s)", file, lineno,
				      rl_fields[need[k]], is_sr ? "srtcm" : "trtcm");
	const unsigned bad[] = { is_sr ? RLF_PIR : RLF_EBS, is_sr ? RLF_PBS : RLF_EBS };
	for (int k = 0; k < 2; k++)
		if (seen & (1u << bad[k]))
			return conf_err(err, errlen, "%s:%d: %s: not a parameter of %s", file, lineno,
				      rl_fields[bad[k]], is_sr ? "srtcm" : "trtcm");
	if (is_sr && c->mp.cbs == 0 && c->mp.xbs == 0)
		return conf_err(err, errlen, "%s:%d: cbs: cbs and ebs cannot both be 0 (RFC 2697)", file, lineno);
	if (!is_sr) {
		if (c->mp.pir < c->mp.cir)
			return conf_err(err, errlen, "%s:%d: pir: must be at least cir (RFC 2698)", file, lineno);
		if (c->mp.cbs == 0 || c->mp.xbs == 0)
			return conf_err(err, errlen, "%s:%d: %s: must be greater than 0 (RFC 2698)", file, lineno,
				      c->mp.cbs == 0 ? "cbs" : "pbs");
	}
	return 0;
}

/* Parse a whole file held in `text` (`file` names it in messages). Returns 0 and fills *out (free
 * with rl_conf_free), or -1 with "file:line: field: problem" in err. */
static inline int rl_conf_parse(const char *file, const char *text, struct rl_conf *out, char *err,
				size_t errlen)
{
	struct rl_conf cf = { .c = NULL, .n = 0, .len_frame = 0 };
	int lineno = 0, length_line = 0;
	const char *p = text;
	char line[RL_LINE_MAX + 2];

	cf.c = calloc(RL_CLASSES_MAX, sizeof(*cf.c));
	if (cf.c == NULL)
		return conf_err(err, errlen, "%s: out of memory", file);
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		lineno++;
		if (n > RL_LINE_MAX) {
			conf_err(err, errlen, "%s:%d: line longer than %d characters", file, lineno, RL_LINE_MAX);
			goto fail;
		}
		memcpy(line, p, n);
		line[n] = '\0';
		p += n + (nl ? 1 : 0);
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *tok[64], *save = NULL;
		int nt = 0;
		for (char *s = strtok_r(line, " \t\r\v\f", &save); s; s = strtok_r(NULL, " \t\r\v\f", &save)) {
			if (nt == 64) {
				conf_err(err, errlen, "%s:%d: too many words", file, lineno);
				goto fail;
			}
			tok[nt++] = s;
		}
		if (nt == 0)
			continue;
		if (strcmp(tok[0], "length") == 0) {
			if (nt != 2 || (strcmp(tok[1], "ip") != 0 && strcmp(tok[1], "frame") != 0)) {
				conf_err(err, errlen, "%s:%d: length: expected 'length ip' or 'length frame'", file, lineno);
				goto fail;
			}
			if (length_line) {
				conf_err(err, errlen, "%s:%d: length: given twice (first on line %d)", file, lineno,
				       length_line);
				goto fail;
			}
			length_line = lineno;
			cf.len_frame = strcmp(tok[1], "frame") == 0;
			continue;
		}
		if (strcmp(tok[0], "class") != 0) {
			conf_err(err, errlen, "%s:%d: '%s': expected class or length", file, lineno, tok[0]);
			goto fail;
		}
		if (cf.n == RL_CLASSES_MAX) {
			conf_err(err, errlen, "%s:%d: more than %d classes", file, lineno, RL_CLASSES_MAX);
			goto fail;
		}
		struct rl_class *c = &cf.c[cf.n];
		if (rl_parse_class(file, lineno, tok, nt, c, err, errlen) < 0)
			goto fail;
		for (unsigned k = 0; k < cf.n; k++)
			if (strcmp(cf.c[k].name, c->name) == 0) {
				conf_err(err, errlen, "%s:%d: name: '%s' already names the class on line %d", file, lineno,
				       c->name, cf.c[k].line);
				goto fail;
			}
		cf.n++;
	}
	*out = cf;
	return 0;
fail:
	free(cf.c);
	return -1;
}

/* Read and parse `path`. Returns 0 or -1 with a message naming the file in err. */
static inline int rl_conf_load(const char *path, struct rl_conf *out, char *err, size_t errlen)
{
	char *text = NULL;
	if (conf_read_text(path, 16, &text, err, errlen) < 0)
		return -1;
	int rc = rl_conf_parse(path, text, out, err, errlen);
	free(text);
	return rc;
}

/* Set every class's meter parameters for a clock of hz ticks per second, fill its shared meter at
 * `now`, and compute its per-flow idle limit (at least timeout_cycles). */
static inline void rl_conf_start(struct rl_conf *cf, uint64_t hz, uint64_t now, uint64_t timeout_cycles)
{
	for (unsigned i = 0; i < cf->n; i++) {
		struct rl_class *c = &cf->c[i];
		rl_params_init(&c->mp, c->mp.kind, c->mp.cir, c->mp.pir, c->mp.cbs, c->mp.xbs, hz);
		rl_meter_init(&c->mp, &c->shared, now);
		uint64_t fill = rl_fill_cycles(&c->mp);
		c->idle_cycles = fill > timeout_cycles ? fill : timeout_cycles;
	}
}

static inline int rl_addr_in(const uint8_t a[16], const uint64_t v[2], const uint64_t m[2])
{
	uint64_t w[2];
	memcpy(w, a, 16);
	return ((w[0] & m[0]) == v[0]) & ((w[1] & m[1]) == v[1]);
}

/* The first class matching the packet, or -1. */
static inline int rl_classify(const struct rl_conf *cf, const struct rl_pkt *k)
{
	for (unsigned i = 0; i < cf->n; i++) {
		const struct rl_class *c = &cf->c[i];
		if ((c->family && c->family != k->family) || (c->proto >= 0 && c->proto != k->proto) ||
		    !((c->dscp_mask >> k->dscp) & 1))
			continue;
		if ((c->has_src && !rl_addr_in(k->src, c->src, c->src_mask)) ||
		    (c->has_dst && !rl_addr_in(k->dst, c->dst, c->dst_mask)))
			continue;
		if (c->has_l4 && (!k->has_ports || k->sport < c->sport_lo || k->sport > c->sport_hi ||
				  k->dport < c->dport_lo || k->dport > c->dport_hi))
			continue;
		return (int)i;
	}
	return -1;
}

/* The colour a packet arrives with, for colour-aware classes: the drop precedence of the Assured
 * Forwarding PHB (RFC 2597) in its DSCP. AFx2 yellow, AFx3 red, anything else green. */
static inline enum rl_color rl_precolor(uint8_t dscp)
{
	uint8_t cls = dscp >> 3, dp = (dscp >> 1) & 3;
	if (cls < 1 || cls > 4 || (dscp & 1) || dp == 0)
		return RL_GREEN;
	return dp == 2 ? RL_YELLOW : dp == 3 ? RL_RED : RL_GREEN;
}

#endif /* SLUICE_NFS_RATELIMIT_CONF_H */
