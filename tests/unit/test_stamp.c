/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for the generator's packets and stamp (nfs/common/stamp.h), the sink's
 * sequence tracking (same header) and the token bucket (nfs/common/tsc.h).
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "common/pktparse.h"
#include "common/stamp.h"
#include "common/tsc.h"

static uint8_t buf[GEN_MAX_SIZE + 64];

static void test_stamp_bytes(void)
{
	uint8_t s[STAMP_LEN + 1];
	memset(s, 0xee, sizeof(s));
	stamp_write(s, 0x01020304u, 0x1112131415161718ull, 0x2122232425262728ull);
	static const uint8_t want[STAMP_LEN] = {
		'S', 'L', 'S', 'T', 1, 2, 3, 4,
		0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
		0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
	};
	CHECK(memcmp(s, want, STAMP_LEN) == 0);
	CHECK_EQ(s[STAMP_LEN], 0xee); /* nothing written past the stamp */
}

/* Every size of a standard frame, then jumbo sizes in steps of 61, then the largest. */
static uint32_t next_size(uint32_t size)
{
	if (size < 2048 || size == GEN_MAX_SIZE)
		return size + 1;
	return size + 61 < GEN_MAX_SIZE ? size + 61 : GEN_MAX_SIZE;
}

static void test_packet_roundtrip(void)
{
	for (uint32_t size = GEN_MIN_SIZE; size <= GEN_MAX_SIZE; size = next_size(size)) {
		memset(buf, 0xa5, sizeof(buf));
		int stamped = gen_write_pkt(buf, size, 70000 + size, 7, size * 3ull, 0xabcdef0123ull + size);
		CHECK_EQ(stamped, size >= STAMP_MIN_SIZE);
		CHECK_EQ(buf[size], 0xa5); /* nothing past the frame */
		struct pp_info pi;
		pp_parse(buf, size, &pi);
		CHECK_EQ(pi.family, 4);
		CHECK_EQ(pi.proto, PP_IPPROTO_UDP);
		CHECK(pi.has_ports);
		CHECK_EQ(pi.l4_off, 34);
		CHECK_EQ(pp_be16(buf + 16), size - 14);      /* IPv4 total length */
		CHECK_EQ(pp_be16(buf + 38), size - 34);      /* UDP length */
		CHECK_EQ(ip4_csum(buf + 14, 20), 0);         /* a valid header sums to 0xffff */
		CHECK_EQ(pp_be16(buf + 40), 0);              /* no UDP checksum */
		struct stamp s;
		CHECK_EQ(stamp_find(buf, size, &s), stamped);
		if (stamped) {
			CHECK_EQ(s.gen_id, 7);
			CHECK(s.seq == size * 3ull);
			CHECK(s.tsc == 0xabcdef0123ull + size);
			for (uint32_t i = STAMP_MIN_SIZE; i < size; i++)
				CHECK_EQ(buf[i], 0);
			/* truncated by one byte: no stamp */
			CHECK_EQ(stamp_find(buf, STAMP_MIN_SIZE - 1, &s), 0);
		} else {
			for (uint32_t i = GEN_HDR_LEN; i < size; i++)
				CHECK_EQ(buf[i], 0);
		}
	}
}

static void test_flows(void)
{
	/* flow k is a fixed tuple; distinct k give distinct tuples */
	CHECK_EQ(gen_flow_src_ip(0), 0x0a000000);
	CHECK_EQ(gen_flow_src_ip(0x1234), 0x0a001234);
	CHECK_EQ(gen_flow_src_port(0), 1024);
	CHECK_EQ(gen_flow_src_ip(0x10000), 0x0a000000);
	CHECK_EQ(gen_flow_src_port(0x10000), 1025);
	CHECK_EQ(gen_flow_src_port(GEN_MAX_FLOWS - 1), 1024 + 255);
	gen_write_pkt(buf, 128, 0x20305, 0, 0, 0);
	CHECK_EQ(buf[26], 10);
	CHECK_EQ(buf[27], 0);
	CHECK_EQ(buf[28], 3);
	CHECK_EQ(buf[29], 5);
	CHECK_EQ(pp_be16(buf + 34), 1026);
	CHECK_EQ(pp_be16(buf + 36), 9);
}

static void test_stamp_rejects(void)
{
	struct stamp s;
	gen_write_pkt(buf, 128, 1, 1, 1, 1);
	CHECK_EQ(stamp_find(buf, 128, &s), 1);
	buf[GEN_HDR_LEN] ^= 1; /* wrong magic */
	CHECK_EQ(stamp_find(buf, 128, &s), 0);
	gen_write_pkt(buf, 128, 1, 1, 1, 1);
	buf[23] = PP_IPPROTO_TCP;
	CHECK_EQ(stamp_find(buf, 128, &s), 0);
	gen_write_pkt(buf, 128, 1, 1, 1, 1);
	buf[21] = 1; /* fragment offset 8: a non-first fragment, no UDP header */
	CHECK_EQ(stamp_find(buf, 128, &s), 0);
	CHECK_EQ(stamp_find(buf, 0, &s), 0);
	CHECK_EQ(stamp_find(buf, 13, &s), 0);
	/* found after a VLAN tag too (pktparse skips it) */
	uint8_t v[200];
	gen_write_pkt(buf, 128, 1, 9, 42, 5);
	memcpy(v, buf, 12);
	v[12] = 0x81, v[13] = 0x00, v[14] = 0x00, v[15] = 0x05;
	memcpy(v + 16, buf + 12, 128 - 12);
	CHECK_EQ(stamp_find(v, 132, &s), 1);
	CHECK_EQ(s.gen_id, 9);
	CHECK_EQ(s.seq, 42);
}

static void test_seq_track(void)
{
	struct seq_track t;
	seq_init(&t);
	CHECK_EQ(seq_lost(&t), 0);
	for (uint64_t s = 0; s < 10000; s++)
		seq_record(&t, s);
	CHECK_EQ(t.received, 10000);
	CHECK_EQ(t.max_seq, 9999);
	CHECK_EQ(seq_lost(&t), 0);
	CHECK_EQ(t.reordered + t.duplicates, 0);

	/* a gap, then the missing ones late (reordered), then a duplicate */
	seq_record(&t, 10005);
	CHECK_EQ(seq_lost(&t), 5);
	seq_record(&t, 10001);
	seq_record(&t, 10000);
	CHECK_EQ(seq_lost(&t), 3);
	CHECK_EQ(t.reordered, 2);
	seq_record(&t, 10001);
	CHECK_EQ(t.duplicates, 1);
	CHECK_EQ(seq_lost(&t), 3);
	seq_record(&t, 10005); /* duplicate of the highest */
	CHECK_EQ(t.duplicates, 2);

	/* a jump larger than the window forgets everything before it */
	seq_record(&t, 10005 + 3 * SEQ_WIN);
	CHECK_EQ(seq_lost(&t), 3 + 3 * SEQ_WIN - 1);
	seq_record(&t, 10005 + 3 * SEQ_WIN - 1);
	CHECK_EQ(t.reordered, 3);
	seq_record(&t, 10005 + 3 * SEQ_WIN - 1);
	CHECK_EQ(t.duplicates, 3);
	/* older than the window: reordered, cannot be told from a duplicate */
	seq_record(&t, 5);
	CHECK_EQ(t.reordered, 4);

	/* a first packet that is not 0 counts the ones before it as lost */
	seq_init(&t);
	seq_record(&t, 99);
	CHECK_EQ(seq_lost(&t), 99);

	/* the window's reuse of bit positions: s and s + SEQ_WIN are different packets */
	seq_init(&t);
	seq_record(&t, 1);
	seq_record(&t, 1 + SEQ_WIN);
	CHECK_EQ(t.duplicates, 0);
	seq_record(&t, 2); /* within the window, not seen */
	CHECK_EQ(t.reordered, 1);
	CHECK_EQ(t.duplicates, 0);
}

static void test_token_bucket(void)
{
	struct tbucket b;
	const uint64_t hz = 1000000000u; /* 1 GHz: one cycle per ns, easy arithmetic */

	/* unlimited */
	tb_init(&b, hz, 0, 32, 0);
	for (int i = 0; i < 1000; i++)
		CHECK(tb_take(&b));

	/* 1000 pps, burst 4: starts full */
	tb_init(&b, hz, 1000, 4, 0);
	int got = 0;
	while (tb_take(&b))
		got++;
	CHECK_EQ(got, 4);
	tb_refill(&b, 999999); /* just short of one packet's time */
	CHECK(!tb_take(&b));
	tb_refill(&b, 1000000);
	CHECK(tb_take(&b));
	CHECK(!tb_take(&b));
	/* a long pause refills only up to the burst */
	tb_refill(&b, 1000000 + 10 * hz);
	got = 0;
	while (tb_take(&b))
		got++;
	CHECK_EQ(got, 4);
	/* time running backwards grants nothing and does not wrap */
	tb_refill(&b, 5);
	CHECK(!tb_take(&b));

	/* over one simulated second of 10 us refills, exactly rate packets (+ the initial burst) */
	tb_init(&b, hz, 200000, 32, 0);
	uint64_t n = 0;
	for (uint64_t t = 0; t <= hz; t += 10000) {
		tb_refill(&b, t);
		while (tb_take(&b))
			n++;
	}
	CHECK_EQ(n, 200000 + 32);

	/* an odd rate that does not divide hz: no drift (credit is exact) */
	tb_init(&b, 2500000000u, 7, 1, 0);
	while (tb_take(&b))
		;
	n = 0;
	for (uint64_t t = 0; t <= 2500000000ull * 100; t += 12345678) {
		tb_refill(&b, t);
		while (tb_take(&b))
			n++;
	}
	CHECK(n >= 699 && n <= 700);
}

int main(void)
{
	test_stamp_bytes();
	test_packet_roundtrip();
	test_flows();
	test_stamp_rejects();
	test_seq_track();
	test_token_bucket();
	return 0;
}
