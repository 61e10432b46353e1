/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The steering key parser (src/manager/pktkey.c) against docs/steering.md:
 * VLAN/QinQ, IPv4 and IPv6 (extension headers, fragments), TCP/UDP, and every
 * way a header can be cut short or lie about its length. The last test feeds
 * every prefix of every frame, and random bytes, from an exact-size heap copy
 * so ASan sees any read past the frame.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pktkey.h"

static uint8_t F[2048];
static const uint8_t Z[64]; /* filler bytes */
static uint32_t flen;

static void put(const void *p, uint32_t n)
{
	memcpy(F + flen, p, n);
	flen += n;
}
static void put8(uint8_t v) { put(&v, 1); }
static void put16(uint16_t v) { uint16_t n = htons(v); put(&n, 2); }
static void put32(uint32_t v) { uint32_t n = htonl(v); put(&n, 4); }

static void eth(uint16_t type)
{
	flen = 0;
	static const uint8_t dst[6] = { 2, 0, 0, 0, 0, 2 }, src[6] = { 2, 0, 0, 0, 0, 1 };
	put(dst, 6);
	put(src, 6);
	put16(type);
}

/* IPv4 header, total length = 20 + payload; fixes nothing else up. */
static void ipv4(uint8_t proto, uint16_t payload, uint16_t frag, uint8_t tos)
{
	put8(0x45);
	put8(tos);
	put16((uint16_t)(20 + payload));
	put16(1);
	put16(frag);
	put8(64);
	put8(proto);
	put16(0);
	put32(0x0a000001);
	put32(0xc0a80102);
}

static void ipv6(uint8_t nh, uint16_t payload, uint8_t tclass)
{
	put32(6u << 28 | (uint32_t)tclass << 20);
	put16(payload);
	put8(nh);
	put8(64);
	uint8_t a[16] = { 0x20, 0x01, 0x0d, 0xb8 }, b[16] = { 0xfd };
	a[15] = 1;
	b[15] = 2;
	put(a, 16);
	put(b, 16);
}

static void tcp(uint16_t sport, uint16_t dport, uint8_t flags)
{
	put16(sport);
	put16(dport);
	put32(1);
	put32(0);
	put8(0x50);
	put8(flags);
	put16(1024);
	put16(0);
	put16(0);
}

static void udp(uint16_t sport, uint16_t dport)
{
	put16(sport);
	put16(dport);
	put16(8);
	put16(0);
}

static int parse(struct sl_pkt_key *k)
{
	return sl_pkt_key_parse(F, flen, 3, k);
}

static void test_ipv4_tcp(void)
{
	struct sl_pkt_key k;
	eth(0x0800);
	ipv4(6, 20, 0, 46 << 2);
	tcp(1234, 80, 0x12);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.in_port, 3);
	CHECK_EQ(k.flags, SL_KEY_IP | SL_KEY_IP4 | SL_KEY_PORTS | SL_KEY_TCP);
	CHECK_EQ(k.proto, 6);
	CHECK_EQ(k.dscp, 46);
	CHECK_EQ(ntohs(k.sport), 1234);
	CHECK_EQ(ntohs(k.dport), 80);
	CHECK_EQ(k.tcp_flags, 0x12);
	CHECK_EQ(ntohl(k.src[0]), 0x0a000001);
	CHECK_EQ(ntohl(k.dst[0]), 0xc0a80102);
	CHECK_EQ(k.src[1] | k.dst[3], 0);
	CHECK_EQ(ntohs(k.ethertype), 0x0800);
	CHECK_EQ(k.dmac[5], 2);
	CHECK_EQ(k.smac[5], 1);
	CHECK_EQ(k.payload_len, 0);
	/* Ethernet padding after the datagram is fine, and is not payload */
	put(Z, 10);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.payload_len, 0);
	/* payload: after the TCP header (data offset), up to the IP total length */
	eth(0x0800);
	ipv4(6, 24 + 5, 0, 0);
	tcp(1, 80, 0x18);
	F[14 + 20 + 12] = 6 << 4; /* data offset 6: 4 bytes of options */
	put32(0);
	put("hello", 5);
	put(Z, 7); /* padding */
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.payload_off, 14 + 20 + 24);
	CHECK_EQ(k.payload_len, 5);
	F[14 + 20 + 12] = 15 << 4; /* data offset beyond the datagram: no payload, not malformed */
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.payload_len, 0);
	eth(0x86dd);
	ipv6(17, 8 + 3, 0);
	udp(1, 2);
	put("abc", 3);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.payload_off, 14 + 40 + 8);
	CHECK_EQ(k.payload_len, 3);
}

static void test_ipv4_bad_headers(void)
{
	struct sl_pkt_key k;
	eth(0x0800);
	ipv4(17, 8, 0, 0);
	udp(1, 2);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.flags & SL_KEY_PORTS, SL_KEY_PORTS);
	F[14] = 0x44; /* IHL 4 */
	CHECK_EQ(parse(&k), -1);
	F[14] = 0x46; /* IHL 6: options would pass the total length? 24 <= 28: ok, but UDP is cut to 4 */
	CHECK_EQ(parse(&k), -1);
	F[14] = 0x4f; /* IHL 15 = 60 bytes > frame */
	CHECK_EQ(parse(&k), -1);
	F[14] = 0x55; /* version 5 */
	CHECK_EQ(parse(&k), -1);
	F[14] = 0x45;
	F[16] = 0x01; /* total length 256+28 > frame */
	CHECK_EQ(parse(&k), -1);
	F[16] = 0;
	F[17] = 19; /* total length < IHL */
	CHECK_EQ(parse(&k), -1);
	F[17] = 27; /* UDP cut to 7 bytes by the total length */
	CHECK_EQ(parse(&k), -1);
	eth(0x0800);
	ipv4(6, 13, 0, 0); /* TCP needs 14 bytes */
	tcp(1, 2, 2);
	flen -= 7;
	CHECK_EQ(parse(&k), -1);
	eth(0x0800);
	ipv4(1, 8, 0, 0); /* ICMP: not looked into */
	put32(0x08000000);
	put32(0);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.flags, SL_KEY_IP | SL_KEY_IP4);
	CHECK_EQ(k.proto, 1);
}

static void test_ipv4_fragments(void)
{
	struct sl_pkt_key k;
	eth(0x0800);
	ipv4(17, 8, 0x2000, 0); /* MF, offset 0: first fragment, has ports */
	udp(53, 9999);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.flags, SL_KEY_IP | SL_KEY_IP4 | SL_KEY_FRAG | SL_KEY_PORTS);
	eth(0x0800);
	ipv4(17, 8, 0x0010, 0); /* offset 16*8: non-first, no ports even though bytes follow */
	udp(53, 9999);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.flags, SL_KEY_IP | SL_KEY_IP4 | SL_KEY_FRAG | SL_KEY_NONFIRST);
	CHECK_EQ(k.sport | k.dport, 0);
	eth(0x0800);
	ipv4(6, 4, 0x2003, 0); /* non-first with 4 bytes: not malformed, TCP not looked at */
	put32(0);
	CHECK_EQ(parse(&k), 0);
	eth(0x0800);
	ipv4(6, 4, 0x2000, 0); /* a first fragment too short for TCP: malformed */
	put32(0);
	CHECK_EQ(parse(&k), -1);
}

static void test_vlan(void)
{
	struct sl_pkt_key k;
	eth(0x8100);
	put16(0x2000 | 100); /* PCP 1, VID 100 */
	put16(0x0800);
	ipv4(17, 8, 0, 0);
	udp(1, 2);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(ntohs(k.vlan), 100);
	CHECK_EQ(ntohs(k.ethertype), 0x0800);
	CHECK_EQ(k.flags & (SL_KEY_VLAN | SL_KEY_PORTS), SL_KEY_VLAN | SL_KEY_PORTS);
	eth(0x88a8); /* QinQ: the outer VID counts */
	put16(300);
	put16(0x8100);
	put16(7);
	put16(0x86dd);
	ipv6(17, 8, 0);
	udp(5, 6);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(ntohs(k.vlan), 300);
	CHECK_EQ(k.flags & SL_KEY_IP6, SL_KEY_IP6);
	eth(0x8100); /* three tags: no IP */
	put16(1);
	put16(0x8100);
	put16(2);
	put16(0x8100);
	put16(3);
	put16(0x0800);
	ipv4(17, 8, 0, 0);
	udp(1, 2);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(ntohs(k.ethertype), 0x8100);
	CHECK_EQ(k.flags, SL_KEY_VLAN);
	eth(0x8100); /* a tag cut short */
	put16(5);
	CHECK_EQ(parse(&k), -1);
	flen = 13;
	CHECK_EQ(parse(&k), -1);
	eth(0x0806); /* ARP: L2 only */
	put(Z, 28);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.flags, 0);
	CHECK_EQ(ntohs(k.ethertype), 0x0806);
}

static void test_ipv6(void)
{
	struct sl_pkt_key k;
	eth(0x86dd);
	ipv6(6, 20, 0xb8);
	tcp(443, 5555, 0x11);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.flags, SL_KEY_IP | SL_KEY_IP6 | SL_KEY_PORTS | SL_KEY_TCP);
	CHECK_EQ(k.dscp, 0xb8 >> 2);
	CHECK_EQ(ntohl(k.src[0]), 0x20010db8);
	CHECK_EQ(ntohl(k.src[3]), 1);
	CHECK_EQ(ntohl(k.dst[0]), 0xfd000000);
	CHECK_EQ(ntohs(k.dport), 5555);
	/* hop-by-hop (8) -> routing (24) -> dest opts (16) -> AH (12: len 1 -> (1+2)*4) -> UDP */
	eth(0x86dd);
	ipv6(0, 8 + 24 + 16 + 12 + 8, 0);
	put8(43); put8(0); put(Z, 6);
	put8(60); put8(2); put(Z, 22);
	put8(51); put8(1); put(Z, 14);
	put8(17); put8(1); put(Z, 10);
	udp(7, 8);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.proto, 17);
	CHECK_EQ(ntohs(k.sport), 7);
	/* fragment header, offset 0 + M: first fragment, walk continues */
	eth(0x86dd);
	ipv6(44, 8 + 8, 0);
	put8(17); put8(0); put16(0x0001); put32(99);
	udp(7, 8);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.flags & (SL_KEY_FRAG | SL_KEY_PORTS | SL_KEY_NONFIRST), SL_KEY_FRAG | SL_KEY_PORTS);
	/* non-first fragment: proto from the fragment header, no ports */
	eth(0x86dd);
	ipv6(44, 8 + 8, 0);
	put8(6); put8(0); put16(0x0008); put32(99);
	udp(7, 8);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.proto, 6);
	CHECK_EQ(k.flags & (SL_KEY_NONFIRST | SL_KEY_PORTS), SL_KEY_NONFIRST);
	/* ESP ends the walk */
	eth(0x86dd);
	ipv6(50, 8, 0);
	put(Z, 8);
	CHECK_EQ(parse(&k), 0);
	CHECK_EQ(k.proto, 50);
	/* 8 extension headers are walked, a 9th is malformed */
	for (int n = 8; n <= 9; n++) {
		eth(0x86dd);
		ipv6(60, (uint16_t)(8 * n + 8), 0);
		for (int i = 0; i < n; i++) {
			put8(i == n - 1 ? 17 : 60);
			put8(0);
			put(Z, 6);
		}
		udp(1, 2);
		CHECK_EQ(parse(&k), n == 8 ? 0 : -1);
	}
	/* an extension header longer than the payload */
	eth(0x86dd);
	ipv6(0, 8, 0);
	put8(17); put8(1); put(Z, 6);
	CHECK_EQ(parse(&k), -1);
	/* payload length beyond the frame; version 4 in an IPv6 ethertype */
	eth(0x86dd);
	ipv6(17, 100, 0);
	udp(1, 2);
	CHECK_EQ(parse(&k), -1);
	eth(0x86dd);
	ipv6(17, 8, 0);
	udp(1, 2);
	F[14] = 0x40;
	CHECK_EQ(parse(&k), -1);
}

/* Every prefix of a set of frames, and random frames, from exact-size heap copies. */
static void test_never_reads_past_the_frame(void)
{
	uint8_t frames[6][256];
	uint32_t lens[6];
	int nf = 0;
	eth(0x0800); ipv4(6, 20, 0, 0); tcp(1, 2, 3);
	memcpy(frames[nf], F, flen); lens[nf++] = flen;
	eth(0x8100); put16(9); put16(0x86dd); ipv6(0, 8 + 8 + 20, 0);
	put8(44); put8(0); put(Z, 6); put8(6); put8(0); put16(1); put32(1); tcp(1, 2, 3);
	memcpy(frames[nf], F, flen); lens[nf++] = flen;
	eth(0x86dd); ipv6(51, 12 + 8, 0); put8(17); put8(1); put(Z, 10); udp(1, 2);
	memcpy(frames[nf], F, flen); lens[nf++] = flen;
	for (int i = 0; i < nf; i++)
		for (uint32_t n = 0; n <= lens[i]; n++) {
			uint8_t *p = malloc(n ? n : 1);
			memcpy(p, frames[i], n);
			struct sl_pkt_key k;
			int rc = sl_pkt_key_parse(p, n, 0, &k);
			CHECK(n == lens[i] ? rc == 0 : rc == -1 || n >= 14);
			free(p);
		}
	srand(7);
	for (int i = 0; i < 200000; i++) {
		uint32_t n = (uint32_t)(rand() % 160);
		uint8_t *p = malloc(n ? n : 1);
		for (uint32_t b = 0; b < n; b++)
			p[b] = (uint8_t)rand();
		if (n >= 14) { /* bias towards headers the parser walks */
			static const uint16_t types[] = { 0x0800, 0x86dd, 0x8100, 0x88a8 };
			uint16_t t = types[rand() % 4];
			p[12] = (uint8_t)(t >> 8);
			p[13] = (uint8_t)t;
			if (n > 14)
				p[14] = (uint8_t)((t == 0x86dd ? 0x60 : 0x45) | (rand() % 4 == 0 ? rand() & 0xf : 0));
		}
		struct sl_pkt_key k;
		(void)sl_pkt_key_parse(p, n, 0, &k);
		free(p);
	}
}

int main(void)
{
	test_ipv4_tcp();
	test_ipv4_bad_headers();
	test_ipv4_fragments();
	test_vlan();
	test_ipv6();
	test_never_reads_past_the_frame();
	printf("pktkey: ok\n");
	return 0;
}
