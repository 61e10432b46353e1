/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Internet checksum helpers for NFs that rewrite headers (NAT, router, lb). All values are host-order
 * 16-bit words as read with pp_be16(): read the checksum field, update it, write it back big-endian.
 *
 *   uint16_t ck = pp_be16(ip + 10);
 *   ck = cs_update32(ck, old_addr, new_addr);   // after rewriting an IPv4 address
 *   cs_put16(ip + 10, ck);
 *
 * Incremental updates follow RFC 1624 (HC' = ~(~HC + ~m + m')), which never yields 0xffff-for-0
 * mistakes of RFC 1141. A UDP checksum of 0 means "none" over IPv4: callers leave it 0; and a
 * computed or updated UDP checksum that comes out 0 must be sent as 0xffff (RFC 768).
 */
#ifndef SLUICE_NFS_CSUM_H
#define SLUICE_NFS_CSUM_H

#include <stddef.h>
#include <stdint.h>

static inline uint16_t cs_fold(uint64_t s)
{
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

/* One's-complement sum of n bytes (big-endian words; an odd last byte is padded with 0), plus sum. */
static inline uint64_t cs_sum(const uint8_t *p, size_t n, uint64_t sum)
{
	size_t i = 0;
	for (; i + 1 < n; i += 2)
		sum += (uint32_t)p[i] << 8 | p[i + 1];
	if (i < n)
		sum += (uint32_t)p[i] << 8;
	return sum;
}

/* The checksum (complemented sum) to store over n bytes whose checksum field is zero. */
static inline uint16_t cs_compute(const uint8_t *p, size_t n, uint64_t sum)
{
	return (uint16_t)~cs_fold(cs_sum(p, n, sum));
}

/* A 16-bit word of the covered data changed from old to new. */
static inline uint16_t cs_update16(uint16_t ck, uint16_t old, uint16_t new_)
{
	return (uint16_t)~cs_fold((uint64_t)(uint16_t)~ck + (uint16_t)~old + new_);
}

/* A 32-bit field (an IPv4 address) changed from old to new (host order). */
static inline uint16_t cs_update32(uint16_t ck, uint32_t old, uint32_t new_)
{
	return (uint16_t)~cs_fold((uint64_t)(uint16_t)~ck + (uint16_t)~(old >> 16) + (uint16_t)~(old & 0xffff) +
				  (new_ >> 16) + (new_ & 0xffff));
}

/* A 16-byte field (an IPv6 address) changed from old to new (packet bytes). */
static inline uint16_t cs_update128(uint16_t ck, const uint8_t *old, const uint8_t *new_)
{
	uint64_t s = (uint16_t)~ck;
	for (int i = 0; i < 16; i += 2) {
		s += (uint16_t)~((uint16_t)(old[i] << 8 | old[i + 1]));
		s += (uint16_t)(new_[i] << 8 | new_[i + 1]);
	}
	return (uint16_t)~cs_fold(s);
}

static inline void cs_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* Pseudo-header sums for TCP/UDP/ICMPv6 checksums (l4len: the L4 header + payload bytes). */
static inline uint64_t cs_pseudo4(const uint8_t *ip4, uint8_t proto, uint32_t l4len)
{
	return cs_sum(ip4 + 12, 8, 0) + proto + l4len;
}

static inline uint64_t cs_pseudo6(const uint8_t *ip6, uint8_t proto, uint32_t l4len)
{
	return cs_sum(ip6 + 8, 32, 0) + proto + (l4len >> 16) + (l4len & 0xffff);
}

#endif /* SLUICE_NFS_CSUM_H */
