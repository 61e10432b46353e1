/* SPDX-License-Identifier: BSD-3-Clause
 *
 * A log-linear latency histogram (the HdrHistogram layout with 4 bits of
 * precision): fixed size, no allocation, O(1) recording, any uint64_t value.
 *
 * Values 0..15 each have their own bucket. Above that, each power-of-two
 * range [2^m, 2^(m+1)) (m = 4..63, "group" m - 3) is split into 16 equal
 * sub-buckets of width 2^(m-4), so a bucket's width is at most 1/16 of its
 * lower bound: any percentile read back is within 6.25 % (half of that when
 * the bucket's midpoint is reported, as here) of the true sample, whatever
 * the scale. 61 groups x 16 = 976 counters = 7.8 KiB.
 *
 * Units are whatever the caller records (the sink records TSC cycles and
 * converts to nanoseconds only when it reports).
 */
#ifndef SLUICE_NFS_LATENCY_HIST_H
#define SLUICE_NFS_LATENCY_HIST_H

#include <stdint.h>
#include <string.h>

#define LH_SUB_BITS 4
#define LH_SUB      (1u << LH_SUB_BITS)              /* 16 sub-buckets per group */
#define LH_GROUPS   (64 - LH_SUB_BITS + 1)           /* 61: group 0 is the exact 0..15 */
#define LH_BUCKETS  (LH_GROUPS * LH_SUB)             /* 976 */

struct lat_hist {
	uint64_t count;
	uint64_t min, max;   /* exact, not bucketed */
	double sum;          /* for the mean; a double cannot overflow on uint64 inputs */
	uint64_t b[LH_BUCKETS];
};

static inline void lh_init(struct lat_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

/* Bucket index of value v. */
static inline unsigned lh_index(uint64_t v)
{
	if (v < LH_SUB)
		return (unsigned)v;
	unsigned m = 63u - (unsigned)__builtin_clzll(v);          /* 4..63 */
	unsigned sub = (unsigned)(v >> (m - LH_SUB_BITS)) - LH_SUB; /* next 4 bits below the top one */
	return (m - LH_SUB_BITS + 1) * LH_SUB + sub;
}

/* Smallest value that falls in bucket i. */
static inline uint64_t lh_lower(unsigned i)
{
	unsigned g = i / LH_SUB, sub = i % LH_SUB;
	if (g == 0)
		return sub;
	return (uint64_t)(LH_SUB + sub) << (g - 1);
}

/* Largest value that falls in bucket i (inclusive, so the last bucket's is
 * UINT64_MAX without overflowing). */
static inline uint64_t lh_upper(unsigned i)
{
	unsigned g = i / LH_SUB;
	uint64_t width = g == 0 ? 1 : (uint64_t)1 << (g - 1);
	return lh_lower(i) + (width - 1);
}

static inline void lh_record(struct lat_hist *h, uint64_t v)
{
	h->b[lh_index(v)]++;
	h->count++;
	h->sum += (double)v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

/* The value at quantile q (0..1): the midpoint of the bucket holding the
 * sample of rank ceil(q * count), clamped to the exact [min, max]. 0 when
 * the histogram is empty. q = 0 gives min, q = 1 gives max. */
static inline uint64_t lh_quantile(const struct lat_hist *h, double q)
{
	if (h->count == 0)
		return 0;
	if (q <= 0.0)
		return h->min;
	if (q >= 1.0)
		return h->max;
	double r = q * (double)h->count;
	uint64_t rank = (uint64_t)r;
	if ((double)rank < r)
		rank++; /* ceil without libm */
	if (rank == 0)
		rank = 1;
	uint64_t seen = 0;
	for (unsigned i = 0; i < LH_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			uint64_t lo = lh_lower(i), hi = lh_upper(i);
			uint64_t mid = lo + (hi - lo) / 2;
			if (mid < h->min)
				mid = h->min;
			if (mid > h->max)
				mid = h->max;
			return mid;
		}
	}
	return h->max; /* not reached: the buckets sum to count */
}

static inline double lh_mean(const struct lat_hist *h)
{
	return h->count != 0 ? h->sum / (double)h->count : 0.0;
}

#endif /* SLUICE_NFS_LATENCY_HIST_H */
