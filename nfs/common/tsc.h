/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Time-stamp counter helpers shared by sluice-nf-gen and sluice-nf-sink, and
 * the generator's token bucket. No DPDK.
 *
 * Why the TSC: reading it costs a few nanoseconds and it is the same counter
 * in every process on the host, so a stamp written by one NF can be compared
 * with a reading in another. This assumes an invariant TSC (constant_tsc and
 * nonstop_tsc in /proc/cpuinfo, true for every x86 CPU of the last decade and
 * for KVM guests that expose it) and that all cores' TSCs are synchronised
 * (the kernel checks this at boot and falls back to another clocksource when
 * they are not). The sink still guards against a stamp from the future.
 *
 * Frequency: tsc_calibrate() measures it against CLOCK_MONOTONIC, which is
 * NTP-disciplined and the reference every other timing on the host uses:
 * read (TSC, monotonic) pairs ~50 ms apart and divide. Each pair is taken as
 * TSC / clock_gettime / TSC, repeated a few times keeping the pair whose two
 * TSC reads are closest, so a preemption or VM exit between the reads cannot
 * skew the endpoint by more than that bracket (typically < 100 cycles, i.e.
 * < 1 ppm of 50 ms). The result is good to a few ppm, far below the histogram's
 * 6 % bucket width. The kernel's own tsc_khz is not exported to user space,
 * and CPUID leaf 0x15 is missing on many CPUs and hypervisors; calibration
 * works everywhere.
 *
 * On a non-x86 build the "TSC" is CLOCK_MONOTONIC in nanoseconds (1 GHz), so
 * the NFs still build and run, only with a costlier clock read.
 */
#ifndef SLUICE_NFS_TSC_H
#define SLUICE_NFS_TSC_H

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define TSC_IS_RDTSC 1
#else
#define TSC_IS_RDTSC 0
#endif

static inline uint64_t tsc_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The current TSC value. Not serialising: an out-of-order read may move by
 * a few tens of cycles, which is noise at the resolution used here. */
static inline uint64_t tsc_now(void)
{
#if TSC_IS_RDTSC
	return __rdtsc();
#else
	return tsc_mono_ns();
#endif
}

/* One (tsc, ns) sample with the smallest TSC bracket out of a few tries. */
static inline void tsc_pair(uint64_t *tsc, uint64_t *ns)
{
	uint64_t best = UINT64_MAX;
	*tsc = *ns = 0; /* always overwritten by the first try; tells the compiler so */
	for (int i = 0; i < 8; i++) {
		uint64_t a = tsc_now();
		uint64_t t = tsc_mono_ns();
		uint64_t b = tsc_now();
		if (b - a < best) {
			best = b - a;
			*tsc = a + (b - a) / 2;
			*ns = t;
		}
	}
}

/* TSC ticks per second, measured over about `ms` milliseconds (50 is plenty:
 * see above). Sleeps rather than spins, so the other NFs sharing the core are
 * not starved during start-up. Never returns 0. */
static inline uint64_t tsc_calibrate(unsigned ms)
{
#if !TSC_IS_RDTSC
	(void)ms;
	return 1000000000u;
#else
	uint64_t t0, n0, t1, n1;
	tsc_pair(&t0, &n0);
	struct timespec d = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	while (nanosleep(&d, &d) != 0)
		; /* EINTR: sleep the rest; the measured interval is what counts anyway */
	tsc_pair(&t1, &n1);
	uint64_t dt = t1 - t0, dn = n1 - n0;
	if (dn == 0 || dt == 0)
		return 1000000000u;
	/* dt * 1e9 overflows 64 bits beyond ~18 s at 1 GHz: split the division */
	uint64_t hz = dt / dn * 1000000000u + dt % dn * 1000000000u / dn;
	return hz != 0 ? hz : 1;
#endif
}

/* Convert a TSC interval to nanoseconds without overflow for any input
 * (cycles % hz < hz < 2^34, so the second product stays below 2^64). */
static inline uint64_t tsc_to_ns(uint64_t cycles, uint64_t hz)
{
	return cycles / hz * 1000000000u + cycles % hz * 1000000000u / hz;
}

/* ---- token bucket (the generator's pacing) ----
 *
 * Integer and drift-free: credit is kept in units of 1/hz packet, so a packet
 * costs `hz` credit and `e` elapsed cycles earn `e * rate` credit. Nothing is
 * rounded, so over any interval the number of packets granted is within
 * `burst` of rate * interval. The bucket holds at most `burst` packets, which
 * bounds what a generator can emit at once after it was descheduled. */
struct tbucket {
	uint64_t hz, rate;  /* rate in packets per second; 0 = unlimited */
	uint64_t cap;       /* burst * hz + (hz - 1): whole packets plus a fraction of one */
	uint64_t credit;    /* 0..cap */
	uint64_t full_gap;  /* an elapsed time at least this long refills the bucket */
	uint64_t last;      /* TSC of the last refill */
};

static inline void tb_init(struct tbucket *b, uint64_t hz, uint64_t rate, uint64_t burst, uint64_t now)
{
	b->hz = hz;
	b->rate = rate;
	/* The cap keeps the fraction of a packet earned on top of `burst` whole
	 * ones: credit is only sampled once per batch, and clipping at exactly
	 * burst * hz would throw that fraction away whenever a refill finds the
	 * bucket nearly full, making a small burst undershoot the rate. */
	b->cap = burst * hz + (hz - 1);
	b->credit = burst * hz; /* start full: the first burst goes out at once */
	/* capping the elapsed time keeps e * rate below cap + rate: no overflow */
	b->full_gap = rate != 0 ? b->cap / rate + 1 : 0;
	b->last = now;
}

/* Add the credit earned since the last refill. Once per batch is enough. */
static inline void tb_refill(struct tbucket *b, uint64_t now)
{
	if (b->rate == 0)
		return;
	uint64_t e = now > b->last ? now - b->last : 0; /* never run backwards */
	b->last = now;
	if (e >= b->full_gap) {
		b->credit = b->cap;
		return;
	}
	b->credit += e * b->rate;
	if (b->credit > b->cap)
		b->credit = b->cap;
}

/* Take one packet's worth of credit: 1 if granted, 0 if the bucket is empty. */
static inline int tb_take(struct tbucket *b)
{
	if (b->rate == 0)
		return 1;
	if (b->credit < b->hz)
		return 0;
	b->credit -= b->hz;
	return 1;
}

#endif /* SLUICE_NFS_TSC_H */
