/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Longest-prefix-match tables for the router NF (nfs/router/router.c), DPDK-free.
 *
 * IPv4: DIR-24-8. A first-level table of 2^24 uint16 entries indexed by the top 24 bits of the
 * address; an entry is a next-hop id (1..32767, 0 = no route) or, with bit 15 set, the index of a
 * 256-entry second-level group indexed by the last byte (for prefixes longer than /24). One or two
 * memory reads per lookup. 32 MiB (calloc: pages never written stay unbacked).
 *
 * IPv6: a multibit trie with 8-bit strides (16 levels at most, like rte_lpm6 below its first
 * level). A node is 256 uint32 entries; an entry is a next-hop id (1..2^31-1, 0 = none) or, with bit
 * 31 set, the index of a child node. Prefixes are expanded to the stride (controlled prefix
 * expansion); a child node inherits the entry it replaces.
 *
 * Both tables are built whole from a route list (the router rebuilds them on reload) and insertions
 * must come in ascending prefix length: a longer prefix then simply overwrites what shorter ones
 * wrote, so no per-entry depth is needed. Lookups are read-only; building allocates.
 */
#ifndef SLUICE_NFS_ROUTER_LPM_H
#define SLUICE_NFS_ROUTER_LPM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- IPv4 DIR-24-8 */

#define LPM4_EXT 0x8000u
#define LPM4_NH_MAX 0x7fffu     /* next-hop ids 1..32767 */
#define LPM4_GROUPS_MAX 0x8000u /* second-level groups 0..32767 */

struct lpm4 {
	uint16_t *tbl24;  /* 1 << 24 entries */
	uint16_t *tbl8;   /* groups * 256 entries */
	uint32_t groups, groups_cap;
	uint8_t last_len; /* insertion order check */
};

static inline int lpm4_init(struct lpm4 *t)
{
	memset(t, 0, sizeof(*t));
	t->tbl24 = calloc((size_t)1 << 24, sizeof(uint16_t));
	return t->tbl24 ? 0 : -1;
}

static inline void lpm4_free(struct lpm4 *t)
{
	free(t->tbl24);
	free(t->tbl8);
	memset(t, 0, sizeof(*t));
}

static inline int lpm4_new_group(struct lpm4 *t, uint16_t fill)
{
	if (t->groups >= LPM4_GROUPS_MAX)
		return -1;
	if (t->groups == t->groups_cap) {
		uint32_t cap = t->groups_cap ? t->groups_cap * 2 : 16;
		if (cap > LPM4_GROUPS_MAX)
			cap = LPM4_GROUPS_MAX;
		uint16_t *n = realloc(t->tbl8, (size_t)cap * 256 * sizeof(uint16_t));
		if (n == NULL)
			return -1;
		t->tbl8 = n;
		t->groups_cap = cap;
	}
	uint16_t *g = t->tbl8 + (size_t)t->groups * 256;
	for (int i = 0; i < 256; i++)
		g[i] = fill;
	return (int)t->groups++;
}

/* Insert prefix/len (host order, host bits zero) -> nh (1..LPM4_NH_MAX). Calls must come in
 * ascending len. Returns 0, or -1 (out of memory / groups, bad argument, order). */
static inline int lpm4_add(struct lpm4 *t, uint32_t prefix, unsigned len, uint16_t nh)
{
	if (len > 32 || nh == 0 || nh > LPM4_NH_MAX || len < t->last_len)
		return -1;
	t->last_len = (uint8_t)len;
	if (len <= 24) {
		uint32_t start = len ? (prefix >> 8) & ~((1u << (24 - len)) - 1) : 0;
		uint32_t count = 1u << (24 - len);
		for (uint32_t i = start; i < start + count; i++) {
			uint16_t e = t->tbl24[i];
			if (e & LPM4_EXT) { /* only with out-of-order use; cover the whole group */
				uint16_t *g = t->tbl8 + (size_t)(e & ~LPM4_EXT) * 256;
				for (int k = 0; k < 256; k++)
					g[k] = nh;
			} else {
				t->tbl24[i] = nh;
			}
		}
		return 0;
	}
	uint32_t i24 = prefix >> 8;
	uint16_t e = t->tbl24[i24];
	if (!(e & LPM4_EXT)) {
		int g = lpm4_new_group(t, e);
		if (g < 0)
			return -1;
		e = (uint16_t)(LPM4_EXT | (unsigned)g);
		t->tbl24[i24] = e;
	}
	uint16_t *g = t->tbl8 + (size_t)(e & ~LPM4_EXT) * 256;
	uint32_t start = prefix & 0xff & ~((1u << (32 - len)) - 1);
	uint32_t count = 1u << (32 - len);
	for (uint32_t i = start; i < start + count; i++)
		g[i] = nh;
	return 0;
}

/* The next-hop id for addr (host order), 0 if no route. */
static inline uint16_t lpm4_lookup(const struct lpm4 *t, uint32_t addr)
{
	uint16_t e = t->tbl24[addr >> 8];
	if (e & LPM4_EXT)
		e = t->tbl8[(size_t)(e & ~LPM4_EXT) * 256 + (addr & 0xff)];
	return e;
}

/* ---------------------------------------------------------------- IPv6 8-bit-stride trie */

#define LPM6_CHILD 0x80000000u
#define LPM6_NH_MAX 0x7fffffffu
#define LPM6_NODES_MAX (1u << 24)

struct lpm6 {
	uint32_t *nodes; /* nodes * 256 entries; node 0 is the root */
	uint32_t n, cap;
	uint8_t last_len;
};

static inline int lpm6_new_node(struct lpm6 *t, uint32_t fill)
{
	if (t->n >= LPM6_NODES_MAX)
		return -1;
	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 16;
		uint32_t *n = realloc(t->nodes, (size_t)cap * 256 * sizeof(uint32_t));
		if (n == NULL)
			return -1;
		t->nodes = n;
		t->cap = cap;
	}
	uint32_t *nd = t->nodes + (size_t)t->n * 256;
	for (int i = 0; i < 256; i++)
		nd[i] = fill;
	return (int)t->n++;
}

static inline int lpm6_init(struct lpm6 *t)
{
	memset(t, 0, sizeof(*t));
	return lpm6_new_node(t, 0) == 0 ? 0 : -1;
}

static inline void lpm6_free(struct lpm6 *t)
{
	free(t->nodes);
	memset(t, 0, sizeof(*t));
}

/* Set every leaf under entry *e to nh (the entry itself, or its whole subtree). */
static inline void lpm6_fill(struct lpm6 *t, uint32_t *e, uint32_t nh, int depth)
{
	if (!(*e & LPM6_CHILD) || depth > 16) {
		*e = nh;
		return;
	}
	uint32_t *nd = t->nodes + (size_t)(*e & ~LPM6_CHILD) * 256;
	for (int i = 0; i < 256; i++)
		lpm6_fill(t, &nd[i], nh, depth + 1);
}

/* Insert prefix (16 bytes, host bits zero)/len -> nh (1..LPM6_NH_MAX), in ascending len.
 * Returns 0 or -1. */
static inline int lpm6_add(struct lpm6 *t, const uint8_t prefix[16], unsigned len, uint32_t nh)
{
	if (len > 128 || nh == 0 || nh > LPM6_NH_MAX || len < t->last_len)
		return -1;
	t->last_len = (uint8_t)len;
	uint32_t node = 0;
	unsigned d = 0;
	while (len > 8 * (d + 1)) {
		uint32_t *e = &t->nodes[(size_t)node * 256 + prefix[d]];
		if (!(*e & LPM6_CHILD)) {
			int c = lpm6_new_node(t, *e); /* may move t->nodes */
			if (c < 0)
				return -1;
			e = &t->nodes[(size_t)node * 256 + prefix[d]];
			*e = LPM6_CHILD | (uint32_t)c;
		}
		node = *e & ~LPM6_CHILD;
		d++;
	}
	unsigned r = len - 8 * d; /* 0..8 bits of this byte belong to the prefix */
	uint32_t start = r ? prefix[d] & (0xffu << (8 - r)) & 0xff : 0;
	uint32_t count = 1u << (8 - r);
	for (uint32_t i = start; i < start + count; i++)
		lpm6_fill(t, &t->nodes[(size_t)node * 256 + i], nh, (int)d + 1);
	return 0;
}

static inline uint32_t lpm6_lookup(const struct lpm6 *t, const uint8_t addr[16])
{
	uint32_t node = 0;
	for (int d = 0; d < 16; d++) {
		uint32_t e = t->nodes[(size_t)node * 256 + addr[d]];
		if (!(e & LPM6_CHILD))
			return e;
		node = e & ~LPM6_CHILD;
	}
	return 0; /* not reached: a /128 ends in a leaf at depth 15 */
}

#endif /* SLUICE_NFS_ROUTER_LPM_H */
