/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-monitor's packet classification and flow table (DPDK-free, unit-tested in
 * tests/unit/test_monitor.c).
 *
 * mon_classify() turns a frame into a flow key (ingress port + IPv4/IPv6 5-tuple; ICMP type/code in
 * place of ports; non-IP frames keyed by their ethertype) and says whether the frame is malformed:
 * a truncated Ethernet/VLAN/IP/TCP/UDP/ICMP header, a bad IP version or header length, an IPv4 total
 * length or IPv6 payload length beyond the frame, a TCP data offset or UDP length that does not fit.
 * A malformed frame still gets the key of the headers that are complete. Never reads past `len`.
 *
 * The table is open addressing with linear probing and backward-shift deletion (idle flows are
 * removed without tombstones), allocated once by mon_init; the per-packet path never allocates.
 */
#ifndef SLUICE_NFS_MONITOR_FLOW_H
#define SLUICE_NFS_MONITOR_FLOW_H

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pktparse.h"

#define MON_IPPROTO_ICMP 1
#define MON_IPPROTO_ICMPV6 58

/* Fully zeroed before being filled, so it compares and hashes as bytes. */
struct mon_key {
	uint8_t family;     /* 4, 6, or 0: not IP (or no complete IP header) */
	uint8_t proto;      /* IP protocol (IPv6: after the extension headers) */
	uint16_t in_port;   /* ingress port id */
	uint16_t sport;     /* TCP/UDP source port; ICMP type */
	uint16_t dport;     /* TCP/UDP destination port; ICMP code */
	uint16_t ethertype; /* after VLAN tags; 0 if the Ethernet header is incomplete */
	uint8_t pad[6];
	uint8_t src[16], dst[16]; /* IPv4 addresses in the first 4 bytes */
};
_Static_assert(sizeof(struct mon_key) == 48, "flow key is 6 words");

/* TCP flag bits as in the header's 13th byte. */
#define MON_TCP_FIN 0x01
#define MON_TCP_SYN 0x02
#define MON_TCP_RST 0x04
#define MON_TCP_PSH 0x08
#define MON_TCP_ACK 0x10
#define MON_TCP_URG 0x20
#define MON_TCP_ECE 0x40
#define MON_TCP_CWR 0x80

/* Classify the `len`-byte frame at p seen on port in_port. Fills *k, ORs the TCP flags into
 * *tcp_flags (0 if not TCP). Returns 1 if the frame is malformed, 0 if not. */
static inline int mon_classify(const uint8_t *p, uint32_t len, uint16_t in_port, struct mon_key *k,
			       uint8_t *tcp_flags)
{
	memset(k, 0, sizeof(*k));
	k->in_port = in_port;
	*tcp_flags = 0;
	if (len < PP_ETH_LEN)
		return 1;
	uint32_t off = PP_ETH_LEN;
	uint16_t et = pp_be16(p + 12);
	for (int tags = 0; (et == PP_ETH_P_8021Q || et == PP_ETH_P_8021AD) && tags < 2; tags++) {
		if (off + PP_VLAN_LEN > len) {
			k->ethertype = et;
			return 1;
		}
		et = pp_be16(p + off + 2);
		off += PP_VLAN_LEN;
	}
	k->ethertype = et;

	uint32_t end, l4 = 0;
	int bad = 0, frag = 0;
	if (et == PP_ETH_P_IPV4) {
		if (off + 20 > len || (p[off] >> 4) != 4 || (p[off] & 0x0f) < 5)
			return 1;
		uint32_t hl = (uint32_t)(p[off] & 0x0f) * 4, tot = pp_be16(p + off + 2);
		k->family = 4;
		k->proto = p[off + 9];
		memcpy(k->src, p + off + 12, 4);
		memcpy(k->dst, p + off + 16, 4);
		if (off + hl > len || tot < hl)
			return 1;
		end = off + tot;
		if (end > len) { /* truncated: look at what is there */
			bad = 1;
			end = len;
		}
		frag = (pp_be16(p + off + 6) & 0x1fff) != 0;
		l4 = off + hl;
	} else if (et == PP_ETH_P_IPV6) {
		if (off + 40 > len || (p[off] >> 4) != 6)
			return 1;
		k->family = 6;
		memcpy(k->src, p + off + 8, 16);
		memcpy(k->dst, p + off + 24, 16);
		end = off + 40 + pp_be16(p + off + 4);
		if (end > len) {
			bad = 1;
			end = len;
		}
		uint8_t fr = 0;
		k->proto = pp_ipv6_skip_ext(p, end, off + 40, p[off + 6], &l4, &fr);
		if (l4 == 0) { /* truncated (or too many) extension headers */
			k->proto = 0;
			return 1;
		}
		frag = fr;
	} else {
		return 0; /* another protocol: keyed by its ethertype */
	}
	if (frag)
		return bad; /* a non-first fragment carries no L4 header */

	uint32_t avail = end - l4;
	const uint8_t *h = p + l4;
	switch (k->proto) {
	case PP_IPPROTO_TCP:
		if (avail >= 4) {
			k->sport = pp_be16(h);
			k->dport = pp_be16(h + 2);
		}
		if (avail >= 14)
			*tcp_flags = h[13];
		if (avail < 20 || (h[12] >> 4) < 5 || (uint32_t)(h[12] >> 4) * 4 > avail)
			bad = 1;
		break;
	case PP_IPPROTO_UDP:
		if (avail >= 4) {
			k->sport = pp_be16(h);
			k->dport = pp_be16(h + 2);
		}
		if (avail < 8 || pp_be16(h + 4) < 8 || pp_be16(h + 4) > avail)
			bad = 1;
		break;
	case MON_IPPROTO_ICMP:
	case MON_IPPROTO_ICMPV6:
		if (avail < 4) {
			bad = 1;
			break;
		}
		k->sport = h[0];
		k->dport = h[1];
		break;
	default:
		break;
	}
	return bad;
}

static inline uint32_t mon_hash(const struct mon_key *k)
{
	uint64_t w[6], h = 0x243f6a8885a308d3ull;
	memcpy(w, k, sizeof(w));
	for (int i = 0; i < 6; i++)
		h = (h ^ w[i]) * 0x9e3779b97f4a7c15ull;
	return (uint32_t)(h ^ (h >> 29) ^ (h >> 47));
}

struct mon_flow {
	struct mon_key key;
	uint64_t id;          /* unique per flow record, from 1; 0: free slot */
	uint64_t pkts, bytes;
	uint64_t first_ns, last_ns;
	uint64_t malformed;   /* malformed packets of this flow */
	uint8_t tcp_flags;    /* OR of the TCP flags seen */
	uint8_t pad[7];
};

struct mon_table {
	struct mon_flow *slot;
	uint32_t mask;       /* slots - 1 */
	uint32_t cap, count; /* flows allowed / in the table */
	uint64_t next_id;    /* the next flow record's id */
	uint64_t full;       /* packets of new flows that found the table full */
};

/* Allocate a table for up to cap flows (load factor <= 3/4). 0 or -1. */
static inline int mon_init(struct mon_table *t, uint32_t cap)
{
	uint64_t want = (uint64_t)cap * 4 / 3 + 1, slots = 2;
	memset(t, 0, sizeof(*t));
	if (cap == 0 || cap > (1u << 24))
		return -1;
	while (slots < want)
		slots <<= 1;
	t->slot = calloc(slots, sizeof(*t->slot));
	if (t->slot == NULL)
		return -1;
	t->mask = (uint32_t)(slots - 1);
	t->cap = cap;
	t->next_id = 1;
	return 0;
}

static inline void mon_free(struct mon_table *t)
{
	free(t->slot);
	t->slot = NULL;
}

/* The flow of key k (hash h), added if new (first_ns = now). NULL when the table is full. */
static inline struct mon_flow *mon_get(struct mon_table *t, const struct mon_key *k, uint32_t h,
				       uint64_t now)
{
	for (uint32_t i = h;; i++) {
		struct mon_flow *e = &t->slot[i & t->mask];
		if (e->id == 0) {
			if (t->count == t->cap) {
				t->full++;
				return NULL;
			}
			t->count++;
			memset(e, 0, sizeof(*e));
			e->key = *k;
			e->id = t->next_id++;
			e->first_ns = now;
			return e;
		}
		if (memcmp(&e->key, k, sizeof(*k)) == 0)
			return e;
	}
}

/* Account one packet of `bytes` bytes to flow e. */
static inline void mon_account(struct mon_flow *e, uint32_t bytes, uint8_t tcp_flags, int malformed,
			       uint64_t now)
{
	e->pkts++;
	e->bytes += bytes;
	e->tcp_flags |= tcp_flags;
	e->malformed += (unsigned)malformed;
	e->last_ns = now;
}

/* Remove the flow in slot i (backward-shift deletion: later entries of the probe run move up so
 * every remaining key is still reachable from its hash without tombstones). */
static inline void mon_remove(struct mon_table *t, uint32_t i)
{
	uint32_t m = t->mask;
	i &= m;
	for (uint32_t j = (i + 1) & m;; j = (j + 1) & m) {
		struct mon_flow *e = &t->slot[j];
		if (e->id == 0)
			break;
		uint32_t home = mon_hash(&e->key) & m;
		/* e may move to i if i lies cyclically within [home, j) */
		if (((j - home) & m) >= ((j - i) & m)) {
			t->slot[i] = *e;
			i = j;
		}
	}
	t->slot[i].id = 0;
	t->count--;
}

/* "FSRPAUEC" letters of the flags set, in that order. out: at least 9 bytes. */
static inline void mon_tcp_flags_str(uint8_t f, char *out)
{
	static const char letters[] = "FSRPAUEC";
	int n = 0;
	for (int b = 0; b < 8; b++)
		if (f & (1u << b))
			out[n++] = letters[b];
	out[n] = '\0';
}

/* One flow record as a JSON object on one line (no newline). `state`: "active" (the flow goes on),
 * "idle" (expired), "end" (the monitor stopped). `in_if`: the ingress port's name or NULL. */
static inline int mon_flow_json(const struct mon_flow *e, const char *state, const char *in_if, FILE *f)
{
	const struct mon_key *k = &e->key;
	fprintf(f, "{\"type\":\"flow\",\"id\":%llu,\"state\":\"%s\",\"in_port\":%u,", (unsigned long long)e->id,
		state, k->in_port);
	if (in_if != NULL)
		fprintf(f, "\"in_if\":\"%s\",", in_if); /* port names are [A-Za-z0-9_.-] */
	else
		fputs("\"in_if\":null,", f);
	fprintf(f, "\"ethertype\":%u,\"family\":%u", k->ethertype, k->family);
	if (k->family != 0) {
		char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN];
		int af = k->family == 4 ? AF_INET : AF_INET6;
		inet_ntop(af, k->src, s, sizeof(s));
		inet_ntop(af, k->dst, d, sizeof(d));
		fprintf(f, ",\"proto\":%u,\"src\":\"%s\",\"dst\":\"%s\"", k->proto, s, d);
		if (k->proto == PP_IPPROTO_TCP || k->proto == PP_IPPROTO_UDP)
			fprintf(f, ",\"sport\":%u,\"dport\":%u", k->sport, k->dport);
		else if (k->proto == MON_IPPROTO_ICMP || k->proto == MON_IPPROTO_ICMPV6)
			fprintf(f, ",\"icmp_type\":%u,\"icmp_code\":%u", k->sport, k->dport);
		if (k->proto == PP_IPPROTO_TCP) {
			char fl[9];
			mon_tcp_flags_str(e->tcp_flags, fl);
			fprintf(f, ",\"tcp_flags\":%u,\"tcp_flags_str\":\"%s\"", e->tcp_flags, fl);
		}
	}
	fprintf(f, ",\"packets\":%llu,\"bytes\":%llu,\"malformed\":%llu,\"first_ns\":%llu,\"last_ns\":%llu}",
		(unsigned long long)e->pkts, (unsigned long long)e->bytes,
		(unsigned long long)e->malformed, (unsigned long long)e->first_ns,
		(unsigned long long)e->last_ns);
	return ferror(f) ? -1 : 0;
}

#endif /* SLUICE_NFS_MONITOR_FLOW_H */
