/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for the sink's log-linear latency histogram (nfs/common/latency_hist.h)
 * and the TSC conversion helpers it is reported with (nfs/common/tsc.h).
 */
#include <stdint.h>

#include "check.h"
#include "common/latency_hist.h"
#include "common/tsc.h"

/* a static histogram: 7.8 KiB is fine on the stack too, but keep tests alike */
static struct lat_hist h;

static void test_bucket_boundaries(void)
{
	/* 0..15 are exact; 16..31 are still width 1 (group 1) */
	for (uint64_t v = 0; v < 32; v++) {
		CHECK_EQ(lh_index(v), v);
		CHECK_EQ(lh_lower(lh_index(v)), v);
		CHECK_EQ(lh_upper(lh_index(v)), v);
	}
	/* group 2: [32, 64) in buckets of width 2 */
	CHECK_EQ(lh_index(32), 32);
	CHECK_EQ(lh_index(33), 32);
	CHECK_EQ(lh_index(34), 33);
	CHECK_EQ(lh_index(63), 47);
	CHECK_EQ(lh_index(64), 48);
	CHECK_EQ(lh_lower(33), 34);
	CHECK_EQ(lh_upper(33), 35);
	/* buckets tile the whole range: each starts one past the previous end */
	for (unsigned i = 1; i < LH_BUCKETS; i++) {
		CHECK(lh_lower(i) == lh_upper(i - 1) + 1);
		CHECK_EQ(lh_index(lh_lower(i)), i);
		CHECK_EQ(lh_index(lh_upper(i)), i);
	}
	CHECK(lh_upper(LH_BUCKETS - 1) == UINT64_MAX);
	CHECK_EQ(lh_index(UINT64_MAX), LH_BUCKETS - 1);
	/* relative width never exceeds 1/16 above the exact range */
	for (unsigned i = 16; i < LH_BUCKETS; i++) {
		uint64_t w = lh_upper(i) - lh_lower(i) + 1;
		CHECK(w * 16 <= lh_lower(i));
	}
	/* powers of two and their neighbours land where they should */
	for (unsigned m = 4; m < 64; m++) {
		uint64_t p = (uint64_t)1 << m;
		CHECK_EQ(lh_index(p), (m - 3) * 16);
		CHECK_EQ(lh_index(p - 1), (m - 3) * 16 - 1);
	}
}

static void test_empty(void)
{
	lh_init(&h);
	CHECK_EQ(h.count, 0);
	CHECK_EQ(lh_quantile(&h, 0.5), 0);
	CHECK_EQ(lh_quantile(&h, 0.0), 0);
	CHECK_EQ(lh_quantile(&h, 1.0), 0);
	CHECK(lh_mean(&h) == 0.0);
}

static void test_single_value(void)
{
	lh_init(&h);
	lh_record(&h, 12345);
	/* min/max are exact and the midpoint is clamped to them */
	CHECK_EQ(lh_quantile(&h, 0.0), 12345);
	CHECK_EQ(lh_quantile(&h, 0.5), 12345);
	CHECK_EQ(lh_quantile(&h, 0.999), 12345);
	CHECK_EQ(lh_quantile(&h, 1.0), 12345);
	CHECK(lh_mean(&h) == 12345.0);
}

/* |got - want| is at most one bucket width at want */
static int within_bucket(uint64_t got, uint64_t want)
{
	unsigned i = lh_index(want);
	uint64_t w = lh_upper(i) - lh_lower(i) + 1;
	uint64_t d = got > want ? got - want : want - got;
	return d <= w;
}

static void test_uniform(void)
{
	lh_init(&h);
	for (uint64_t v = 1; v <= 1000000; v++)
		lh_record(&h, v);
	CHECK_EQ(h.count, 1000000);
	CHECK_EQ(h.min, 1);
	CHECK_EQ(h.max, 1000000);
	CHECK(within_bucket(lh_quantile(&h, 0.5), 500000));
	CHECK(within_bucket(lh_quantile(&h, 0.9), 900000));
	CHECK(within_bucket(lh_quantile(&h, 0.99), 990000));
	CHECK(within_bucket(lh_quantile(&h, 0.999), 999000));
	CHECK_EQ(lh_quantile(&h, 1.0), 1000000);
	CHECK_EQ(lh_quantile(&h, 0.0), 1);
	double m = lh_mean(&h);
	CHECK(m > 500000.0 && m < 500001.0);
	/* percentiles are monotonic */
	uint64_t prev = 0;
	for (int k = 0; k <= 1000; k++) {
		uint64_t q = lh_quantile(&h, k / 1000.0);
		CHECK(q >= prev);
		prev = q;
	}
	/* the buckets account for every sample */
	uint64_t tot = 0;
	for (unsigned i = 0; i < LH_BUCKETS; i++)
		tot += h.b[i];
	CHECK_EQ(tot, 1000000);
}

static void test_bimodal(void)
{
	/* 99 % at ~1000, 1 % at ~1e6: p50 and p90 low, p999 high, p99 at the edge */
	lh_init(&h);
	for (int i = 0; i < 9900; i++)
		lh_record(&h, 1000);
	for (int i = 0; i < 100; i++)
		lh_record(&h, 1000000);
	CHECK(within_bucket(lh_quantile(&h, 0.5), 1000));
	CHECK(within_bucket(lh_quantile(&h, 0.9), 1000));
	CHECK(within_bucket(lh_quantile(&h, 0.99), 1000));   /* rank 9900: the last low sample */
	CHECK(within_bucket(lh_quantile(&h, 0.995), 1000000));
	CHECK(within_bucket(lh_quantile(&h, 0.999), 1000000));
	CHECK(lh_quantile(&h, 0.999) <= 1000000);              /* never above the exact max */
}

static void test_huge_values(void)
{
	lh_init(&h);
	lh_record(&h, UINT64_MAX);
	lh_record(&h, UINT64_MAX - 1);
	lh_record(&h, (uint64_t)1 << 63);
	lh_record(&h, 0);
	CHECK_EQ(h.count, 4);
	CHECK_EQ(h.min, 0);
	CHECK(h.max == UINT64_MAX);
	CHECK_EQ(h.b[0], 1);
	CHECK_EQ(h.b[LH_BUCKETS - 1], 2);
	CHECK_EQ(h.b[lh_index((uint64_t)1 << 63)], 1);
	CHECK(lh_quantile(&h, 1.0) == UINT64_MAX);
	CHECK(lh_quantile(&h, 0.75) >= (uint64_t)15 << 59); /* the top bucket's midpoint */
	CHECK(lh_mean(&h) > 1e19);
}

static void test_tsc_to_ns(void)
{
	CHECK_EQ(tsc_to_ns(0, 2000000000u), 0);
	CHECK_EQ(tsc_to_ns(2000000000u, 2000000000u), 1000000000);
	CHECK_EQ(tsc_to_ns(3, 3000000000u), 1);
	CHECK_EQ(tsc_to_ns(2999, 3000000000u), 999);
	/* no overflow at the top of the range: UINT64_MAX cycles at 1 GHz */
	CHECK(tsc_to_ns(UINT64_MAX, 1000000000u) == UINT64_MAX);
	/* 1 hour at 2.5 GHz */
	CHECK(tsc_to_ns(9000000000000ull, 2500000000u) == 3600000000000ull);
}

static void test_calibrate(void)
{
	/* a sanity range, not a precision test: 100 MHz .. 20 GHz */
	uint64_t hz = tsc_calibrate(20);
	CHECK(hz > 100000000u && hz < 20000000000ull);
	/* the TSC advances */
	uint64_t a = tsc_now(), b = tsc_now();
	CHECK(b >= a);
}

int main(void)
{
	test_bucket_boundaries();
	test_empty();
	test_single_value();
	test_uniform();
	test_bimodal();
	test_huge_values();
	test_tsc_to_ns();
	test_calibrate();
	return 0;
}
