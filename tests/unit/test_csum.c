/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for nfs/common/csum.h: known IPv4 header checksums, and incremental updates (RFC 1624)
 * that always agree with recomputing from scratch, on random data.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/csum.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd16(p) << 16 | rd16(p + 2); }

static void test_known(void)
{
	/* RFC 1071-style example header: 4500 0073 0000 4000 4011 [b861] c0a8 0001 c0a8 00c7 */
	uint8_t h[20] = { 0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
			  0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7 };
	CHECK_EQ(cs_compute(h, 20, 0), 0xb861);
	cs_put16(h + 10, 0xb861);
	CHECK_EQ(cs_fold(cs_sum(h, 20, 0)), 0xffff); /* a valid header sums to all ones */
	uint8_t odd[3] = { 0x01, 0x02, 0x03 };
	CHECK_EQ(cs_fold(cs_sum(odd, 3, 0)), 0x0102 + 0x0300);
}

static void test_incremental(void)
{
	srand(11);
	uint8_t b[64];
	for (int round = 0; round < 100000; round++) {
		for (size_t i = 0; i < sizeof(b); i++)
			b[i] = (uint8_t)rand();
		memset(b, round & 1 ? 0xff : 0x00, (size_t)(round % 5)); /* runs of 0x00 / 0xff edges */
		b[0] = b[1] = 0;
		uint16_t ck = cs_compute(b, sizeof(b), 0);
		size_t at = 2 + 2 * (size_t)(rand() % 14); /* word-aligned field after the checksum */
		int kind = rand() % 3;
		if (kind == 0) {
			uint16_t old = rd16(b + at), nw = (uint16_t)rand();
			cs_put16(b + at, nw);
			ck = cs_update16(ck, old, nw);
		} else if (kind == 1) {
			uint32_t old = rd32(b + at), nw = (uint32_t)rand() * 2654435761u;
			cs_put16(b + at, (uint16_t)(nw >> 16));
			cs_put16(b + at + 2, (uint16_t)nw);
			ck = cs_update32(ck, old, nw);
		} else {
			uint8_t old[16], nw[16];
			memcpy(old, b + at, 16);
			for (int i = 0; i < 16; i++)
				nw[i] = (uint8_t)rand();
			memcpy(b + at, nw, 16);
			ck = cs_update128(ck, old, nw);
		}
		uint16_t full = cs_compute(b, sizeof(b), 0);
		/* 0x0000 and 0xffff are the same one's-complement value; RFC 1624 never produces -0 here */
		CHECK(ck == full || (ck == 0xffff && full == 0x0000) || (ck == 0 && full == 0xffff));
		cs_put16(b, ck);
		CHECK_EQ(cs_fold(cs_sum(b, sizeof(b), 0)), 0xffff);
	}
}

int main(void)
{
	test_known();
	test_incremental();
	printf("test_csum: ok\n");
	return 0;
}
