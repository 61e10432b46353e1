/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The test packets of sluice-nf-gen and their payload stamp, as read back by
 * sluice-nf-sink; and the sink's per-generator sequence tracking. No DPDK.
 *
 * Packet: Ethernet (02:00:00:00:00:01 -> 02:00:00:00:00:02, type IPv4),
 * IPv4 (20 bytes, DF, TTL 64, valid header checksum), UDP (checksum 0, i.e.
 * none, which IPv4 allows; it spares the generator a pass over the payload),
 * then the 24-byte stamp right after the UDP header, then zeros. Flow k of F
 * is always the same 5-tuple: 10.0.(k>>8 & 255).(k & 255):(1024 + (k>>16))
 * -> 10.1.0.1:9 (the discard port).
 *
 * Stamp (all fields big-endian, so a hex dump reads "SLST" first):
 *   +0  uint32 magic   0x534c5354 ("SLST")
 *   +4  uint32 gen_id  which generator
 *   +8  uint64 seq     per generator, from 0, +1 per generated packet
 *   +16 uint64 tsc     the generator's TSC when it wrote the packet
 * A frame shorter than 66 bytes (42 of headers + 24) has no room for it;
 * the generator then writes the packet without a stamp.
 */
#ifndef SLUICE_NFS_STAMP_H
#define SLUICE_NFS_STAMP_H

#include <stdint.h>
#include <string.h>

#include "pktparse.h"

#define STAMP_MAGIC    0x534c5354u
#define STAMP_LEN      24u
#define GEN_HDR_LEN    42u                        /* Ethernet 14 + IPv4 20 + UDP 8 */
#define STAMP_MIN_SIZE (GEN_HDR_LEN + STAMP_LEN)  /* 66: smallest frame with a stamp */
#define GEN_MIN_SIZE   60u                        /* Ethernet minimum without the FCS */
#define GEN_MAX_SIZE   16384u                     /* the largest buffer (sluiced.buffer_size); a
                                                   * frame its buffer cannot hold is not generated */
#define GEN_MAX_FLOWS  (1u << 24)                 /* 65536 source IPs x 256 source ports */

struct stamp {
	uint32_t magic, gen_id;
	uint64_t seq, tsc;
};

static inline void st_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void st_put32(uint8_t *p, uint32_t v)
{
	st_put16(p, (uint16_t)(v >> 16));
	st_put16(p + 2, (uint16_t)v);
}

static inline void st_put64(uint8_t *p, uint64_t v)
{
	st_put32(p, (uint32_t)(v >> 32));
	st_put32(p + 4, (uint32_t)v);
}

static inline uint32_t st_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t st_get64(const uint8_t *p)
{
	return (uint64_t)st_get32(p) << 32 | st_get32(p + 4);
}

/* Write a stamp at p (STAMP_LEN bytes, any alignment). */
static inline void stamp_write(uint8_t *p, uint32_t gen_id, uint64_t seq, uint64_t tsc)
{
	st_put32(p, STAMP_MAGIC);
	st_put32(p + 4, gen_id);
	st_put64(p + 8, seq);
	st_put64(p + 16, tsc);
}

/* Find the stamp in a packet of len bytes: it sits right after the UDP header
 * of an unfragmented IPv4/UDP packet, wherever pktparse finds that header (so
 * a VLAN tag or IP options added on the way do not hide it). Returns 1 and
 * fills *s, or 0 if there is no complete stamp with the right magic. */
static inline int stamp_find(const uint8_t *p, uint32_t len, struct stamp *s)
{
	struct pp_info pi;
	pp_parse(p, len, &pi);
	if (pi.family != 4 || pi.proto != PP_IPPROTO_UDP || !pi.has_ports)
		return 0;
	uint32_t off = (uint32_t)pi.l4_off + 8;
	if (off + STAMP_LEN > len || st_get32(p + off) != STAMP_MAGIC)
		return 0;
	s->magic = STAMP_MAGIC;
	s->gen_id = st_get32(p + off + 4);
	s->seq = st_get64(p + off + 8);
	s->tsc = st_get64(p + off + 16);
	return 1;
}

/* The Internet checksum of an IPv4 header of hl bytes (its checksum field
 * included: write 0 there first). */
static inline uint16_t ip4_csum(const uint8_t *h, unsigned hl)
{
	uint32_t sum = 0;
	for (unsigned i = 0; i + 1 < hl; i += 2)
		sum += pp_be16(h + i);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

/* Flow k's varying fields: source address and UDP source port. */
static inline uint32_t gen_flow_src_ip(uint32_t k)
{
	return 0x0a000000u | (k & 0xffffu); /* 10.0.x.y */
}

static inline uint16_t gen_flow_src_port(uint32_t k)
{
	return (uint16_t)(1024u + (k >> 16));
}

/* Write a complete test packet of `size` bytes (GEN_MIN_SIZE..GEN_MAX_SIZE)
 * for flow k at p: headers, zero payload, and the stamp when size allows
 * (returns 1 then, else 0). The payload is zeroed so a packet's bytes depend
 * only on (size, k, gen_id, seq, tsc), whatever the buffer held before. */
static inline int gen_write_pkt(uint8_t *p, uint32_t size, uint32_t k, uint32_t gen_id, uint64_t seq,
				uint64_t tsc)
{
	static const uint8_t eth[14] = { 0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00 };
	uint8_t *ip = p + PP_ETH_LEN, *udp = ip + 20;

	memcpy(p, eth, sizeof(eth));
	ip[0] = 0x45;                                   /* version 4, 5 words */
	ip[1] = 0;                                      /* DSCP/ECN */
	st_put16(ip + 2, (uint16_t)(size - PP_ETH_LEN)); /* total length */
	st_put16(ip + 4, 0);                            /* id: unused with DF (RFC 6864) */
	st_put16(ip + 6, 0x4000);                       /* DF, offset 0 */
	ip[8] = 64;                                     /* TTL */
	ip[9] = PP_IPPROTO_UDP;
	st_put16(ip + 10, 0);
	st_put32(ip + 12, gen_flow_src_ip(k));
	st_put32(ip + 16, 0x0a010001u);                 /* 10.1.0.1 */
	st_put16(ip + 10, ip4_csum(ip, 20));
	st_put16(udp, gen_flow_src_port(k));
	st_put16(udp + 2, 9);
	st_put16(udp + 4, (uint16_t)(size - PP_ETH_LEN - 20));
	st_put16(udp + 6, 0);                           /* no UDP checksum */
	if (size < STAMP_MIN_SIZE) {
		memset(p + GEN_HDR_LEN, 0, size - GEN_HDR_LEN);
		return 0;
	}
	stamp_write(p + GEN_HDR_LEN, gen_id, seq, tsc);
	memset(p + STAMP_MIN_SIZE, 0, size - STAMP_MIN_SIZE);
	return 1;
}

/* ---- per-generator sequence tracking (the sink) ----
 *
 * A window of the last SEQ_WIN sequence numbers below the highest seen tells
 * a late packet (reordered: counted once, not lost) from a duplicate. A
 * packet older than the window is counted as reordered, never duplicate. */
#define SEQ_WIN 4096u

struct seq_track {
	uint64_t received;   /* every stamped packet of this generator, duplicates included */
	uint64_t max_seq;    /* highest sequence number seen (valid if received > 0) */
	uint64_t reordered;  /* arrived after a higher sequence number (not duplicates) */
	uint64_t duplicates; /* a sequence number seen before (within the window) */
	uint64_t win[SEQ_WIN / 64]; /* bit seq % SEQ_WIN: seen, for max_seq - SEQ_WIN < seq <= max_seq */
};

static inline void seq_init(struct seq_track *t)
{
	memset(t, 0, sizeof(*t));
}

static inline void seq_bit_clear(struct seq_track *t, uint64_t s)
{
	t->win[(s % SEQ_WIN) / 64] &= ~((uint64_t)1 << (s % 64));
}

/* Set the bit for s; returns whether it was set already. */
static inline int seq_bit_test_set(struct seq_track *t, uint64_t s)
{
	uint64_t *w = &t->win[(s % SEQ_WIN) / 64], m = (uint64_t)1 << (s % 64);
	int was = (*w & m) != 0;
	*w |= m;
	return was;
}

static inline void seq_record(struct seq_track *t, uint64_t s)
{
	if (t->received++ == 0) {
		t->max_seq = s;
		seq_bit_test_set(t, s);
		return;
	}
	if (s > t->max_seq) {
		/* the window slides: forget the numbers that now fall out of it */
		if (s - t->max_seq >= SEQ_WIN)
			memset(t->win, 0, sizeof(t->win));
		else
			for (uint64_t x = t->max_seq + 1; x <= s; x++)
				seq_bit_clear(t, x);
		t->max_seq = s;
		seq_bit_test_set(t, s);
	} else if (t->max_seq - s < SEQ_WIN) {
		if (seq_bit_test_set(t, s))
			t->duplicates++;
		else
			t->reordered++;
	} else {
		t->reordered++;
	}
}

/* Sequence numbers up to the highest seen that never arrived. Packets lost
 * after the last one received are invisible here: compare with the
 * generator's own count for those. */
static inline uint64_t seq_lost(const struct seq_track *t)
{
	if (t->received == 0)
		return 0;
	uint64_t unique = t->received - t->duplicates;
	uint64_t expect = t->max_seq + 1;
	return expect > unique ? expect - unique : 0;
}

#endif /* SLUICE_NFS_STAMP_H */
