/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The IDS's alert lines: Suricata's fast.log format, and optionally eve-like JSON lines. The
 * caller formats the time once per batch (ids_fmt_time) and writes into a FILE with a large buffer,
 * flushed once per batch: no allocation and no system call per alert. Unit-tested in test_ids.c.
 */
#ifndef SLUICE_NFS_IDS_LOG_H
#define SLUICE_NFS_IDS_LOG_H

#include <stdio.h>
#include <time.h>

#include "rules.h"

#define IDS_TIME_MAX 96 /* room for any int fields: the compiler checks it */

/* "MM/DD/YYYY-HH:MM:SS.uuuuuu" (local time, as Suricata's fast.log) into t, and
 * "YYYY-MM-DDTHH:MM:SS.uuuuuu+ZZZZ" into iso. */
static inline void ids_fmt_time(const struct timespec *ts, char t[IDS_TIME_MAX], char iso[IDS_TIME_MAX])
{
	struct tm tm;
	time_t s = ts->tv_sec;
	localtime_r(&s, &tm);
	unsigned us = (unsigned)(ts->tv_nsec / 1000) % 1000000u;
	snprintf(t, IDS_TIME_MAX, "%02d/%02d/%04d-%02d:%02d:%02d.%06u", tm.tm_mon + 1, tm.tm_mday, tm.tm_year + 1900,
		 tm.tm_hour, tm.tm_min, tm.tm_sec, us);
	char z[8];
	strftime(z, sizeof(z), "%z", &tm);
	snprintf(iso, IDS_TIME_MAX, "%04d-%02d-%02dT%02d:%02d:%02d.%06u%s", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
		 tm.tm_hour, tm.tm_min, tm.tm_sec, us, z);
}

/* Suricata's protocol names ({TCP}, {UDP}, {ICMP}, {IPV6-ICMP}); others by number. */
static inline const char *ids_proto_name(uint8_t proto, char buf[16])
{
	switch (proto) {
	case 6:
		return "TCP";
	case 17:
		return "UDP";
	case 1:
		return "ICMP";
	case 58:
		return "IPV6-ICMP";
	default:
		snprintf(buf, 16, "PROTO:%03u", proto);
		return buf;
	}
}

static inline void ids_addr_str(const struct ids_pkt *k, int dst, char out[INET6_ADDRSTRLEN])
{
	inet_ntop(k->family == 4 ? AF_INET : AF_INET6, dst ? k->dst : k->src, out, INET6_ADDRSTRLEN);
}

/* One fast.log line:
 * 11/22/2026-10:00:00.123456  [Drop] [**] [1:1000001:1] MSG [**] [Classification: X] [Priority: 3] {TCP} a:1 -> b:2
 * ("[Drop] " only when the packet was dropped; Classification "(null)" without classtype, as Suricata
 * prints it; ports for TCP, UDP and ICMP (type:code) only.) */
static inline void ids_log_fast(FILE *f, const char *t, const struct ids_rule *r, int dropped,
				const struct ids_pkt *k)
{
	char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN], pb[16];
	ids_addr_str(k, 0, s);
	ids_addr_str(k, 1, d);
	fprintf(f, "%s  %s[**] [1:%u:%u] %s [**] [Classification: %s] [Priority: %u] {%s} ", t,
		dropped ? "[Drop] " : "", r->sid, r->rev, r->msg, r->classtype[0] ? r->classtype : "(null)",
		r->priority, ids_proto_name(k->proto, pb));
	if (k->has_ports || (!k->frag && (k->proto == 1 || k->proto == 58)))
		fprintf(f, "%s:%u -> %s:%u\n", s, k->sport, d, k->dport);
	else
		fprintf(f, "%s -> %s\n", s, d);
}

static inline void ids_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* One eve-like JSON line (event_type alert). */
static inline void ids_log_eve(FILE *f, const char *iso, const struct ids_rule *r, int dropped,
			       const struct ids_pkt *k)
{
	char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN], pb[16];
	ids_addr_str(k, 0, s);
	ids_addr_str(k, 1, d);
	fprintf(f, "{\"timestamp\":\"%s\",\"event_type\":\"alert\",\"src_ip\":\"%s\",", iso, s);
	if (k->has_ports)
		fprintf(f, "\"src_port\":%u,", k->sport);
	fprintf(f, "\"dest_ip\":\"%s\",", d);
	if (k->has_ports)
		fprintf(f, "\"dest_port\":%u,", k->dport);
	fprintf(f, "\"proto\":\"%s\",", ids_proto_name(k->proto, pb));
	if (!k->frag && (k->proto == 1 || k->proto == 58))
		fprintf(f, "\"icmp_type\":%u,\"icmp_code\":%u,", k->sport, k->dport);
	fprintf(f, "\"alert\":{\"action\":\"%s\",\"gid\":1,\"signature_id\":%u,\"rev\":%u,\"signature\":",
		dropped ? "blocked" : "allowed", r->sid, r->rev);
	ids_json_str(f, r->msg);
	fprintf(f, ",\"category\":");
	ids_json_str(f, r->classtype);
	fprintf(f, ",\"severity\":%u}}\n", r->priority);
}

#endif /* SLUICE_NFS_IDS_LOG_H */
