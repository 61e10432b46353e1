/* SPDX-License-Identifier: BSD-3-Clause
 *
 * memcpy bandwidth of this core, the yardstick for the cost of a copy at a trust-domain boundary
 * (bench/trust.py, BENCHMARKS.md "Trust domains").
 *
 *   sluice-bench-memcpy [--size B] [--seconds S] [--pool-mib M]
 *
 * Copies B-byte frames from one buffer slot to another, slot after slot, across two pools of
 * M MiB each carved into 2176-byte slots (sluiced's buffer size: 128 B headroom + 2048 B data
 * room), as the worker does when it moves a packet into another domain's pool. With pools larger
 * than the last-level cache this is the cold-copy rate; the default (16 MiB each) matches a pool of
 * ~7,700 buffers. Prints one JSON line: bytes per copy, copies/s, GB/s, ns per copy.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOT 2176u

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: sluice-bench-memcpy [--size BYTES (1..2048, default 1500)] [--seconds S (default 1)]\n"
		   "                           [--pool-mib M (default 16)]\n");
}

int main(int argc, char **argv)
{
	unsigned size = 1500;
	double seconds = 1.0;
	unsigned pool_mib = 16;
	static const struct option opts[] = { { "size", required_argument, 0, 's' },
					      { "seconds", required_argument, 0, 't' },
					      { "pool-mib", required_argument, 0, 'p' },
					      { "help", no_argument, 0, 'h' },
					      { 0, 0, 0, 0 } };
	int o;
	while ((o = getopt_long(argc, argv, "s:t:p:h", opts, NULL)) != -1) {
		switch (o) {
		case 's': size = (unsigned)strtoul(optarg, NULL, 10); break;
		case 't': seconds = strtod(optarg, NULL); break;
		case 'p': pool_mib = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (size < 1 || size > 2048 || seconds <= 0 || pool_mib < 1 || pool_mib > 4096) {
		usage(stderr);
		return 2;
	}
	size_t bytes = (size_t)pool_mib << 20;
	size_t slots = bytes / SLOT;
	uint8_t *src = aligned_alloc(64, slots * SLOT), *dst = aligned_alloc(64, slots * SLOT);
	if (!src || !dst) {
		fprintf(stderr, "sluice-bench-memcpy: out of memory\n");
		return 1;
	}
	memset(src, 0xa5, slots * SLOT);
	memset(dst, 0x5a, slots * SLOT);

	/* headroom of 128 B as in a fresh mbuf; the slot order is strided so the prefetcher does not
	 * turn the walk into one long stream */
	const size_t stride = 7919; /* prime, coprime with any slot count we use */
	uint64_t copies = 0;
	size_t i = 0;
	double t0 = now_s(), t1 = t0;
	while (t1 - t0 < seconds) {
		for (unsigned k = 0; k < 4096; k++) {
			size_t s = i % slots, d = (i * 3 + 1) % slots;
			memcpy(dst + d * SLOT + 128, src + s * SLOT + 128, size);
			i += stride;
		}
		copies += 4096;
		t1 = now_s();
	}
	/* keep the copies observable */
	unsigned sum = 0;
	for (size_t s = 0; s < slots; s += 97)
		sum += dst[s * SLOT + 128];
	double el = t1 - t0;
	printf("{\"size\": %u, \"pool_mib\": %u, \"seconds\": %.3f, \"copies\": %llu, \"copies_per_s\": %.0f, "
	       "\"gbytes_per_s\": %.3f, \"ns_per_copy\": %.2f, \"check\": %u}\n",
	       size, pool_mib, el, (unsigned long long)copies, copies / el, copies * (double)size / el / 1e9,
	       el * 1e9 / (double)copies, sum & 1);
	free(src);
	free(dst);
	return 0;
}
