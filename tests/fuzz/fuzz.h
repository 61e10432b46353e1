/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Shared by the fuzz targets: reading an input as a stream of little-endian fields (zeros once it
 * runs out, so every input is a complete program), and REQUIRE, an invariant whose breaking aborts
 * (libFuzzer keeps the input as a crash).
 */
#ifndef SLUICE_FUZZ_H
#define SLUICE_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define REQUIRE(c)                                                                             \
	do {                                                                                   \
		if (!(c)) {                                                                    \
			fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #c); \
			abort();                                                               \
		}                                                                              \
	} while (0)

struct in {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t u8(struct in *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

static inline uint16_t u16(struct in *in)
{
	uint16_t lo = u8(in);
	return (uint16_t)(lo | u8(in) << 8);
}

static inline uint32_t u32(struct in *in)
{
	uint32_t lo = u16(in);
	return lo | (uint32_t)u16(in) << 16;
}

static inline uint64_t u64(struct in *in)
{
	uint64_t lo = u32(in);
	return lo | (uint64_t)u32(in) << 32;
}

#endif
