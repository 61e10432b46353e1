/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Maglev consistent hashing (Eisenbud et al., NSDI'16, section 3.4) with integer weights.
 *
 * Each backend has a permutation of the M table slots (M prime): offset = h1(name) mod M,
 * skip = h2(name) mod (M - 1) + 1, the j-th preference is (offset + j * skip) mod M. Backends take
 * turns claiming their next preferred free slot until the table is full; a backend of weight W
 * takes W turns per round, so its share is about W / (sum of weights). A connection goes to
 * table[hash(5-tuple) mod M]. Removing one of N backends changes little more than its own 1/N of
 * the table (measured in tests/unit/test_lb.c).
 *
 * The permutation depends only on the name, and the backends are ordered by name before the build,
 * so the table does not depend on the order of the config file's lines, and two LB instances with
 * the same backends build the same table. DPDK-free.
 */
#ifndef SLUICE_NFS_LB_MAGLEV_H
#define SLUICE_NFS_LB_MAGLEV_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LB_MAGLEV_M_DEFAULT 65537u
#define LB_MAGLEV_NONE      0xffffu /* table entry when no backend is up */

static inline uint64_t lb_mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

/* FNV-1a over a string, then a finalizer: two seeds give two independent hashes of a name. */
static inline uint64_t lb_hash_name(const char *s, uint64_t seed)
{
	uint64_t h = 0xcbf29ce484222325ull ^ seed;
	for (; *s; s++) {
		h ^= (uint8_t)*s;
		h *= 0x100000001b3ull;
	}
	return lb_mix64(h ^ seed);
}

static inline int lb_is_prime(uint32_t m)
{
	if (m < 2)
		return 0;
	for (uint32_t d = 2; (uint64_t)d * d <= m; d++)
		if (m % d == 0)
			return 0;
	return 1;
}

struct lb_maglev_be {
	const char *name;
	uint16_t id;     /* what the table holds for it */
	uint16_t weight; /* >= 1 */
};

static int lb_maglev_cmp(const void *a, const void *b)
{
	return strcmp(((const struct lb_maglev_be *)a)->name, ((const struct lb_maglev_be *)b)->name);
}

/* Fill table[0..m) (m prime) from n backends (sorted in place by name). With n == 0 every entry is
 * LB_MAGLEV_NONE. Returns 0, or -1 when m is not prime or out of memory. */
static inline int lb_maglev_build(uint16_t *table, uint32_t m, struct lb_maglev_be *be, unsigned n)
{
	if (!lb_is_prime(m))
		return -1;
	for (uint32_t i = 0; i < m; i++)
		table[i] = LB_MAGLEV_NONE;
	if (n == 0)
		return 0;
	uint64_t *pos = malloc(n * sizeof(*pos)), *skip = malloc(n * sizeof(*skip));
	if (pos == NULL || skip == NULL) {
		free(pos);
		free(skip);
		return -1;
	}
	qsort(be, n, sizeof(*be), lb_maglev_cmp);
	for (unsigned i = 0; i < n; i++) {
		pos[i] = lb_hash_name(be[i].name, 0x5eed0001) % m;
		skip[i] = lb_hash_name(be[i].name, 0x5eed0002) % (m - 1) + 1;
	}
	uint32_t filled = 0;
	for (;;) {
		for (unsigned i = 0; i < n; i++) {
			for (unsigned t = 0; t < be[i].weight; t++) {
				/* the next free slot in this backend's permutation (there is one: not full) */
				while (table[pos[i]] != LB_MAGLEV_NONE) {
					pos[i] += skip[i];
					if (pos[i] >= m)
						pos[i] -= m;
				}
				table[pos[i]] = be[i].id;
				if (++filled == m)
					goto done;
			}
		}
	}
done:
	free(pos);
	free(skip);
	return 0;
}

#endif /* SLUICE_NFS_LB_MAGLEV_H */
