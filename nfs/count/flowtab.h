/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Fixed-capacity per-flow packet/byte counters (open addressing, linear
 * probing) for sluice-nf-count. All memory is allocated by ft_init; the
 * per-packet path never allocates.
 */
#ifndef SLUICE_NFS_COUNT_FLOWTAB_H
#define SLUICE_NFS_COUNT_FLOWTAB_H

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pktparse.h"

/* 5-tuple; family 0 is the single "other" (non-IP) flow. Always fully
 * zeroed before being filled so it can be compared with memcmp. */
struct ft_key {
	uint8_t family;  /* 4, 6 or 0 */
	uint8_t proto;
	uint16_t sport, dport;
	uint8_t pad[2];
	uint8_t src[16], dst[16];
};
_Static_assert(sizeof(struct ft_key) == 40, "flow key is 5 words");

struct ft_entry {
	struct ft_key key;
	uint64_t pkts;   /* 0: free slot */
	uint64_t bytes;
};

struct flowtab {
	struct ft_entry *slot;
	uint32_t mask;        /* slots - 1 */
	uint32_t cap, count;  /* flows allowed / in use */
	uint64_t total_pkts, total_bytes;
	uint64_t table_full;  /* packets of new flows that found the table full */
};

/* Allocate a table for up to cap flows (load factor <= 3/4). 0 or -1. */
static inline int ft_init(struct flowtab *t, uint32_t cap)
{
	uint64_t want = (uint64_t)cap * 4 / 3 + 1, slots = 2;
	memset(t, 0, sizeof(*t));
	if (cap == 0 || cap > (1u << 28))
		return -1;
	while (slots < want)
		slots <<= 1;
	t->slot = calloc(slots, sizeof(*t->slot));
	if (t->slot == NULL)
		return -1;
	t->mask = (uint32_t)(slots - 1);
	t->cap = cap;
	return 0;
}

static inline void ft_free(struct flowtab *t)
{
	free(t->slot);
	t->slot = NULL;
}

/* The flow key of a packet. */
static inline void ft_key_from_pkt(const uint8_t *p, uint32_t len, struct ft_key *k)
{
	struct pp_info pi;
	memset(k, 0, sizeof(*k));
	pp_parse(p, len, &pi);
	if (pi.family == 4) {
		memcpy(k->src, p + pi.l3_off + 12, 4);
		memcpy(k->dst, p + pi.l3_off + 16, 4);
	} else if (pi.family == 6) {
		memcpy(k->src, p + pi.l3_off + 8, 16);
		memcpy(k->dst, p + pi.l3_off + 24, 16);
	} else {
		return; /* other */
	}
	k->family = pi.family;
	k->proto = pi.proto;
	if (pi.has_ports) {
		k->sport = pp_be16(p + pi.l4_off);
		k->dport = pp_be16(p + pi.l4_off + 2);
	}
}

static inline uint32_t ft_hash(const struct ft_key *k)
{
	uint64_t w[5], h = 0x243f6a8885a308d3ull;
	memcpy(w, k, sizeof(w));
	for (int i = 0; i < 5; i++)
		h = (h ^ w[i]) * 0x9e3779b97f4a7c15ull;
	return (uint32_t)(h ^ (h >> 29) ^ (h >> 47));
}

/* Count one packet of `bytes` bytes for flow k. */
static inline void ft_account(struct flowtab *t, const struct ft_key *k, uint32_t bytes)
{
	t->total_pkts++;
	t->total_bytes += bytes;
	for (uint32_t i = ft_hash(k);; i++) {
		struct ft_entry *e = &t->slot[i & t->mask];
		if (e->pkts == 0) {
			if (t->count == t->cap) {
				t->table_full++;
				return;
			}
			t->count++;
			e->key = *k;
		} else if (memcmp(&e->key, k, sizeof(*k)) != 0) {
			continue;
		}
		e->pkts++;
		e->bytes += bytes;
		return;
	}
}

/* Write the table as one JSON object. Returns 0 or -1 (stdio error). */
static inline int ft_dump_json(const struct flowtab *t, FILE *f)
{
	const char *sep = "";
	fputs("{\"flows\":[", f);
	for (uint32_t i = 0; t->slot != NULL && i <= t->mask; i++) {
		const struct ft_entry *e = &t->slot[i];
		char src[INET6_ADDRSTRLEN + 2] = "null", dst[INET6_ADDRSTRLEN + 2] = "null";
		if (e->pkts == 0)
			continue;
		if (e->key.family != 0) {
			int af = e->key.family == 4 ? AF_INET : AF_INET6;
			char a[INET6_ADDRSTRLEN];
			inet_ntop(af, e->key.src, a, sizeof(a));
			snprintf(src, sizeof(src), "\"%s\"", a);
			inet_ntop(af, e->key.dst, a, sizeof(a));
			snprintf(dst, sizeof(dst), "\"%s\"", a);
		}
		fprintf(f, "%s\n{\"proto\":%u,\"src\":%s,\"dst\":%s,\"sport\":%u,\"dport\":%u,"
			"\"pkts\":%llu,\"bytes\":%llu}",
			sep, e->key.proto, src, dst, e->key.sport, e->key.dport,
			(unsigned long long)e->pkts, (unsigned long long)e->bytes);
		sep = ",";
	}
	fprintf(f, "],\n\"total_pkts\":%llu,\"total_bytes\":%llu,\"table_full\":%llu}\n",
		(unsigned long long)t->total_pkts, (unsigned long long)t->total_bytes,
		(unsigned long long)t->table_full);
	return ferror(f) ? -1 : 0;
}

#endif /* SLUICE_NFS_COUNT_FLOWTAB_H */
