/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The router NF's tables and packet path (nfs/router/lpm.h, conf.h, pkt.h):
 * - DIR-24-8 and the IPv6 trie against a brute-force linear longest-prefix match on random nested
 *   tables and random addresses biased to the prefixes;
 * - config errors name the line and the field;
 * - forwarding (TTL, checksum, MACs), ICMP/ICMPv6 errors (checksums, quote), echo replies,
 *   ARP and ND requests/replies/learning, on packets in ordinary memory;
 * - every truncation of valid frames and random frames in exactly-sized heap buffers (ASan build:
 *   a read past sl_pkt_len() is an error).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "router/pkt.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* ---------------------------------------------------------------- LPM vs brute force */

struct bf_route {
	uint8_t p[16];
	unsigned len;
	uint32_t nh;
};

static int bf_cmp(const void *a, const void *b)
{
	const struct bf_route *x = a, *y = b;
	return (int)x->len - (int)y->len;
}

static void random_prefix(uint8_t *p, unsigned bits, unsigned len, const uint8_t (*bases)[16], unsigned nb)
{
	memcpy(p, bases[rnd() % nb], 16);
	for (unsigned b = 0; b < bits; b++) {
		if (b >= len)
			p[b / 8] &= (uint8_t)~(0x80 >> (b % 8));
		else if (b >= 8 && rnd() % 4 == 0) /* perturb some bits below the base */
			p[b / 8] ^= (uint8_t)(0x80 >> (b % 8));
	}
}

static uint32_t bf_lookup(const struct bf_route *r, unsigned n, const uint8_t *a)
{
	int best = -1;
	uint32_t nh = 0;
	for (unsigned i = 0; i < n; i++)
		if (rt_prefix_match(a, r[i].p, r[i].len) && (int)r[i].len >= best) {
			best = (int)r[i].len;
			nh = r[i].nh; /* among equal prefixes the last one inserted wins, as in the tables */
		}
	return nh;
}

static void test_lpm(unsigned bits, unsigned nroutes, unsigned naddrs)
{
	static uint8_t bases[8][16];
	for (int i = 0; i < 8; i++)
		for (int k = 0; k < 16; k++)
			bases[i][k] = (uint8_t)rnd();
	struct bf_route *r = calloc(nroutes, sizeof(*r));
	CHECK(r != NULL);
	for (unsigned i = 0; i < nroutes; i++) {
		unsigned len = (unsigned)(rnd() % 5 == 0 ? rnd() % (bits + 1) : bits / 2 + rnd() % (bits / 2 + 1));
		if (i == 0)
			len = 0; /* a default route sometimes matters */
		if (i == 1)
			len = bits;
		r[i].len = len;
		random_prefix(r[i].p, bits, len, (const uint8_t (*)[16])bases, 8);
		r[i].nh = i + 1;
	}
	if (rnd() % 2)
		r[0].len = 1; /* ... and sometimes there is none */
	qsort(r, nroutes, sizeof(*r), bf_cmp);
	/* qsort is not stable: make "last inserted wins" well defined by reinserting in this order */
	struct lpm4 t4;
	struct lpm6 t6;
	if (bits == 32)
		CHECK(lpm4_init(&t4) == 0);
	else
		CHECK(lpm6_init(&t6) == 0);
	for (unsigned i = 0; i < nroutes; i++) {
		r[i].nh = i + 1;
		if (bits == 32)
			CHECK(lpm4_add(&t4, rt_rd32(r[i].p), r[i].len, (uint16_t)r[i].nh) == 0);
		else
			CHECK(lpm6_add(&t6, r[i].p, r[i].len, r[i].nh) == 0);
	}
	if (bits == 32) /* out of order is refused */
		CHECK(lpm4_add(&t4, 0, 0, 1) < 0 || r[nroutes - 1].len == 0);
	for (unsigned k = 0; k < naddrs; k++) {
		uint8_t a[16];
		const struct bf_route *base = &r[rnd() % nroutes];
		memcpy(a, base->p, 16);
		unsigned from = k % 3 == 0 ? 0 : base->len; /* a third fully random */
		for (unsigned b = from; b < bits; b++)
			if (rnd() & 1)
				a[b / 8] ^= (uint8_t)(0x80 >> (b % 8));
		if (bits == 32)
			memset(a + 4, 0, 12);
		uint32_t want = bf_lookup(r, nroutes, a);
		uint32_t got = bits == 32 ? lpm4_lookup(&t4, rt_rd32(a)) : lpm6_lookup(&t6, a);
		if (got != want) {
			char s[64];
			rt_fmt(bits == 32 ? 4 : 6, a, s, sizeof(s));
			fprintf(stderr, "LPM%u mismatch for %s: got %u want %u\n", bits, s, got, want);
			exit(1);
		}
	}
	if (bits == 32)
		lpm4_free(&t4);
	else
		lpm6_free(&t6);
	free(r);
}

/* ---------------------------------------------------------------- config errors */

static void expect_error(const char *text, const char *want)
{
	struct rt_conf c;
	char buf[4096], err[512];
	snprintf(buf, sizeof(buf), "%s", text);
	int rc = rt_conf_parse(&c, buf, "r.conf", err, sizeof(err));
	if (rc == 0 || strstr(err, want) == NULL) {
		fprintf(stderr, "config:\n%s\nwant error containing: %s\ngot rc=%d: %s\n", text, want, rc, rc ? err : "");
		exit(1);
	}
	rt_conf_free(&c);
}

static void test_conf_errors(void)
{
	const char *A = "addr a 10.1.0.1/24 02:00:00:00:01:01\n";
	char t[1024];
	expect_error("route 10.0.0.0/8 dev a\n", "r.conf:1: dev: 'a' is not a port of this router");
	snprintf(t, sizeof(t), "%s# c\n\nroute 10.0.0.0/33 dev a\n", A);
	expect_error(t, "r.conf:4: prefix: '10.0.0.0/33' is not an IPv4 or IPv6 prefix");
	snprintf(t, sizeof(t), "%sroute 10.0.0.1/8 dev a\n", A);
	expect_error(t, "r.conf:2: prefix: '10.0.0.1/8' has host bits set");
	snprintf(t, sizeof(t), "%sroute 10.9.0.0/16 via 10.2.0.1 dev a\n", A);
	expect_error(t, "r.conf:2: via: '10.2.0.1' is not on a connected subnet of port 'a'");
	snprintf(t, sizeof(t), "%sroute 10.9.0.0/16 via 2001:db8::1 dev a\n", A);
	expect_error(t, "r.conf:2: via: '2001:db8::1' is not an IPv4 address like the prefix");
	snprintf(t, sizeof(t), "%sroute 10.9.0.0/16 dev a\nroute 10.9.0.0/16 via 10.1.0.5 dev a\n", A);
	expect_error(t, "r.conf:3: prefix: '10.9.0.0/16' duplicates the route of line 2");
	snprintf(t, sizeof(t), "%sneigh 10.1.0.2 lladdr 02:00:00:00:01 dev a\n", A);
	expect_error(t, "r.conf:2: lladdr: '02:00:00:00:01' is not a unicast MAC address");
	snprintf(t, sizeof(t), "%sneigh 10.1.0.2 dev a\n", A);
	expect_error(t, "r.conf:2: lladdr: '' is missing");
	snprintf(t, sizeof(t), "%saddr a 10.3.0.1/24 02:00:00:00:01:02\n", A);
	expect_error(t, "r.conf:2: mac: '02:00:00:00:01:02' differs from port 'a''s MAC on line 1");
	expect_error("addr a 10.1.0.0/24 02:00:00:00:01:01\n", "r.conf:1: addr: '10.1.0.0/24' is the subnet's own prefix");
	expect_error("addr a 10.1.0.1 02:00:00:00:01:01\nfoo bar\n", "r.conf:2: statement: 'foo' is not addr, route or neigh");
	snprintf(t, sizeof(t), "%sroute 10.9.0.0/16 dev a metric 5\n", A);
	expect_error(t, "r.conf:2: keyword: 'metric' is not expected here");
	snprintf(t, sizeof(t), "%saddr b 10.1.0.2/24 02:00:00:00:02:01\n", A);
	expect_error(t, "r.conf:2: addr: '10.1.0.2/24' makes a connected route 10.1.0.0/24 that line 1 already has");
}

/* ---------------------------------------------------------------- packet path */

static const char *CONF =
	"addr a 10.1.0.1/24 02:00:00:00:0a:01\n"
	"addr a 2001:db8:a::1/64 02:00:00:00:0a:01\n"
	"addr b 10.2.0.1/24 02:00:00:00:0b:01\n"
	"addr b 2001:db8:b::1/64 02:00:00:00:0b:01\n"
	"route 10.100.0.0/16 via 10.2.0.2 dev b\n"
	"route 2001:db8:100::/48 via 2001:db8:b::2 dev b\n"
	"neigh 10.2.0.2 lladdr 02:00:00:00:0b:02 dev b\n"
	"neigh 2001:db8:b::2 lladdr 02:00:00:00:0b:02 dev b\n";

static const uint8_t MAC_A[6] = { 2, 0, 0, 0, 0x0a, 1 }, MAC_B[6] = { 2, 0, 0, 0, 0x0b, 1 };
static const uint8_t HOST_A[6] = { 2, 0, 0, 0, 0x0a, 2 }, NB_B[6] = { 2, 0, 0, 0, 0x0b, 2 };

static uint8_t bufmem[4096];

static void pkt_init(struct sl_pkt *p, const uint8_t *frame, unsigned len, uint16_t in)
{
	memset(p, 0, sizeof(*p));
	memset(bufmem, 0xee, sizeof(bufmem));
	p->base = bufmem;
	p->buf_size = 2048 + 128;
	p->d.head = 128;
	p->d.off = 128;
	p->d.len = (uint16_t)len;
	p->d.dest = in;
	memcpy(bufmem + 128, frame, len);
}

static unsigned eth(uint8_t *f, const uint8_t *dst, const uint8_t *src, uint16_t type)
{
	memcpy(f, dst, 6);
	memcpy(f + 6, src, 6);
	cs_put16(f + 12, type);
	return 14;
}

/* Ethernet + IPv4 + UDP(8 bytes) + payload */
static unsigned ip4_udp(uint8_t *f, const char *src, const char *dst, uint8_t ttl, unsigned payload)
{
	unsigned n = eth(f, MAC_A, HOST_A, 0x0800);
	uint8_t *ip = f + n;
	memset(ip, 0, 28 + payload);
	ip[0] = 0x45;
	cs_put16(ip + 2, (uint16_t)(28 + payload));
	cs_put16(ip + 4, 0x1234);
	ip[8] = ttl;
	ip[9] = 17;
	inet_pton(AF_INET, src, ip + 12);
	inet_pton(AF_INET, dst, ip + 16);
	cs_put16(ip + 10, cs_compute(ip, 20, 0));
	cs_put16(ip + 20, 5555);
	cs_put16(ip + 22, 7777);
	cs_put16(ip + 24, (uint16_t)(8 + payload));
	for (unsigned i = 0; i < payload; i++)
		ip[28 + i] = (uint8_t)i;
	return n + 28 + payload;
}

static unsigned ip6_udp(uint8_t *f, const char *src, const char *dst, uint8_t hlim, unsigned payload)
{
	unsigned n = eth(f, MAC_A, HOST_A, 0x86dd);
	uint8_t *ip = f + n;
	memset(ip, 0, 48 + payload);
	ip[0] = 0x60;
	cs_put16(ip + 4, (uint16_t)(8 + payload));
	ip[6] = 17;
	ip[7] = hlim;
	inet_pton(AF_INET6, src, ip + 8);
	inet_pton(AF_INET6, dst, ip + 24);
	cs_put16(ip + 40, 5555);
	cs_put16(ip + 42, 7777);
	cs_put16(ip + 44, (uint16_t)(8 + payload));
	cs_put16(ip + 46, cs_compute(ip + 40, 8 + payload, cs_pseudo6(ip, 17, 8 + payload)));
	return n + 48 + payload;
}

static void setup(struct rt_conf *c, struct router *r)
{
	char buf[2048], err[512];
	snprintf(buf, sizeof(buf), "%s", CONF);
	if (rt_conf_parse(c, buf, "t.conf", err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	c->ports[0].sl_id = 3; /* a */
	c->ports[1].sl_id = 5; /* b */
	memset(r, 0, sizeof(*r));
	r->c = c;
	CHECK(rt_neigh_init(&r->nb, 64) == 0);
	CHECK(rt_bind(r) == 0);
	r->now = 5000000000ull;
}

static int ip4_ok(const uint8_t *ip)
{
	return cs_fold(cs_sum(ip, (ip[0] & 15u) * 4, 0)) == 0xffff;
}

static void test_packets(void)
{
	struct rt_conf c;
	struct router r;
	struct sl_pkt p;
	uint8_t f[2048], orig[2048];
	setup(&c, &r);

	/* forward: 10.1.0.2 -> 10.100.3.4 via 10.2.0.2 (static) out of b */
	unsigned n = ip4_udp(f, "10.1.0.2", "10.100.3.4", 64, 100);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	uint8_t *d = sl_pkt_data(&p);
	CHECK_EQ(p.d.action, SL_ACT_OUT);
	CHECK_EQ(p.d.dest, 5);
	CHECK(memcmp(d, NB_B, 6) == 0 && memcmp(d + 6, MAC_B, 6) == 0);
	CHECK_EQ(d[14 + 8], 63);
	CHECK(ip4_ok(d + 14));
	CHECK(memcmp(d + 14 + 9, f + 14 + 9, 1) == 0 && memcmp(d + 14 + 12, f + 14 + 12, n - 26) == 0);
	CHECK_EQ(r.st.forwarded, 1);

	/* Ethernet padding is trimmed */
	n = ip4_udp(f, "10.1.0.2", "10.100.3.4", 64, 2);
	pkt_init(&p, f, 60, 3);
	rt_packet(&r, &p);
	CHECK_EQ(p.d.action, SL_ACT_OUT);
	CHECK_EQ(p.d.len, n);

	/* TTL 1: time exceeded from 10.1.0.1 back out of a, quoting the original */
	n = ip4_udp(f, "10.1.0.2", "10.100.3.4", 1, 600);
	memcpy(orig, f, n);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK_EQ(p.d.action, SL_ACT_OUT);
	CHECK_EQ(p.d.dest, 3);
	CHECK_EQ(p.d.len, 14 + 20 + 8 + RT_ICMP4_QUOTE);
	CHECK(memcmp(d, HOST_A, 6) == 0 && memcmp(d + 6, MAC_A, 6) == 0);
	CHECK(ip4_ok(d + 14));
	CHECK_EQ(pp_be16(d + 16), 20 + 8 + RT_ICMP4_QUOTE);
	CHECK_EQ(d[14 + 9], 1);
	CHECK(memcmp(d + 14 + 12, "\x0a\x01\x00\x01", 4) == 0 && memcmp(d + 14 + 16, "\x0a\x01\x00\x02", 4) == 0);
	CHECK_EQ(d[34], 11);
	CHECK_EQ(d[35], 0);
	CHECK_EQ(cs_fold(cs_sum(d + 34, 8 + RT_ICMP4_QUOTE, 0)), 0xffff);
	CHECK(memcmp(d + 42, orig + 14, RT_ICMP4_QUOTE) == 0);
	CHECK_EQ(r.st.ttl_exceeded, 1);

	/* no route: 192.0.2.1 -> net unreachable; a short packet quotes all of itself */
	n = ip4_udp(f, "10.1.0.2", "192.0.2.1", 64, 4);
	memcpy(orig, f, n);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK_EQ(p.d.action, SL_ACT_OUT);
	CHECK_EQ(p.d.len, 42 + 32);
	CHECK(d[34] == 3 && d[35] == 0);
	CHECK_EQ(cs_fold(cs_sum(d + 34, 8 + 32, 0)), 0xffff);
	CHECK(memcmp(d + 42, orig + 14, 32) == 0);
	/* ... but never for an ICMP error */
	n = ip4_udp(f, "10.1.0.2", "192.0.2.1", 64, 4);
	f[14 + 9] = 1;
	f[14 + 20] = 11;
	f[14 + 10] = f[14 + 11] = 0;
	cs_put16(f + 24, cs_compute(f + 14, 20, 0));
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	CHECK_EQ(p.d.action, SL_ACT_DROP);
	CHECK_EQ(r.st.no_route, 2);

	/* bad header checksum, wrong MAC, martian, broadcast */
	n = ip4_udp(f, "10.1.0.2", "10.100.3.4", 64, 4);
	f[14 + 10] ^= 1;
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	CHECK(p.d.action == SL_ACT_DROP && r.st.bad_header == 1);
	n = ip4_udp(f, "10.1.0.2", "10.100.3.4", 64, 4);
	f[0] = 0x44;
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	CHECK(p.d.action == SL_ACT_DROP && r.st.not_for_us == 1);
	n = ip4_udp(f, "127.0.0.1", "10.100.3.4", 64, 4);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	CHECK(p.d.action == SL_ACT_DROP && r.st.martian == 1);
	n = ip4_udp(f, "10.1.0.2", "10.2.0.255", 64, 4);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	CHECK(p.d.action == SL_ACT_DROP && r.st.martian == 2);
	/* a port the router does not know */
	pkt_init(&p, f, n, 4);
	rt_packet(&r, &p);
	CHECK(p.d.action == SL_ACT_DROP && r.st.unknown_port == 1);

	/* unknown neighbour on b's subnet: the packet becomes an ARP request, once per second */
	n = ip4_udp(f, "10.1.0.2", "10.2.0.9", 64, 100);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK_EQ(p.d.action, SL_ACT_OUT);
	CHECK_EQ(p.d.dest, 5);
	CHECK_EQ(p.d.len, 60);
	CHECK(memcmp(d, "\xff\xff\xff\xff\xff\xff", 6) == 0 && memcmp(d + 6, MAC_B, 6) == 0);
	CHECK(pp_be16(d + 12) == 0x0806 && pp_be16(d + 20) == 1);
	CHECK(memcmp(d + 28, "\x0a\x02\x00\x01", 4) == 0 && memcmp(d + 38, "\x0a\x02\x00\x09", 4) == 0);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	CHECK_EQ(p.d.action, SL_ACT_DROP);
	CHECK(r.st.arp_miss == 2 && r.st.arp_requests == 1);
	/* the ARP reply is learned (and consumed); then the packet goes through */
	uint8_t arp[60] = { 0 };
	static const uint8_t H9[6] = { 2, 0, 0, 0, 0x0b, 9 };
	eth(arp, MAC_B, H9, 0x0806);
	memcpy(arp + 14, "\x00\x01\x08\x00\x06\x04\x00\x02", 8);
	memcpy(arp + 22, H9, 6);
	memcpy(arp + 28, "\x0a\x02\x00\x09", 4);
	memcpy(arp + 32, MAC_B, 6);
	memcpy(arp + 38, "\x0a\x02\x00\x01", 4);
	pkt_init(&p, arp, 60, 5);
	rt_packet(&r, &p);
	CHECK(p.d.action == SL_ACT_DROP && r.st.neigh_learned == 1);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK(p.d.action == SL_ACT_OUT && p.d.dest == 5 && memcmp(d, H9, 6) == 0);

	/* an ARP request for the router's address on a: answered in place, the asker learned */
	memcpy(arp, "\xff\xff\xff\xff\xff\xff", 6);
	memcpy(arp + 6, HOST_A, 6);
	memcpy(arp + 14, "\x00\x01\x08\x00\x06\x04\x00\x01", 8);
	memcpy(arp + 22, HOST_A, 6);
	memcpy(arp + 28, "\x0a\x01\x00\x02", 4);
	memset(arp + 32, 0, 6);
	memcpy(arp + 38, "\x0a\x01\x00\x01", 4);
	pkt_init(&p, arp, 60, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK(p.d.action == SL_ACT_OUT && p.d.dest == 3);
	CHECK(memcmp(d, HOST_A, 6) == 0 && memcmp(d + 6, MAC_A, 6) == 0 && pp_be16(d + 20) == 2);
	CHECK(memcmp(d + 22, MAC_A, 6) == 0 && memcmp(d + 28, "\x0a\x01\x00\x01", 4) == 0);
	CHECK(memcmp(d + 32, HOST_A, 6) == 0 && memcmp(d + 38, "\x0a\x01\x00\x02", 4) == 0);
	/* ... for someone else's address: ignored */
	memcpy(arp + 38, "\x0a\x01\x00\x07", 4);
	pkt_init(&p, arp, 60, 3);
	rt_packet(&r, &p);
	CHECK_EQ(p.d.action, SL_ACT_DROP);

	/* a ping to the router: echo reply */
	n = ip4_udp(f, "10.1.0.2", "10.2.0.1", 64, 8);
	f[14 + 9] = 1;
	f[14 + 10] = f[14 + 11] = 0;
	cs_put16(f + 24, cs_compute(f + 14, 20, 0));
	memset(f + 34, 0, 8);
	f[34] = 8;
	cs_put16(f + 36, cs_compute(f + 34, 16, 0));
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK(p.d.action == SL_ACT_OUT && p.d.dest == 3 && d[34] == 0);
	CHECK(ip4_ok(d + 14) && cs_fold(cs_sum(d + 34, 16, 0)) == 0xffff);
	CHECK(memcmp(d + 26, "\x0a\x02\x00\x01", 4) == 0 && memcmp(d + 30, "\x0a\x01\x00\x02", 4) == 0);

	/* IPv6 forward via the static neighbour */
	n = ip6_udp(f, "2001:db8:a::2", "2001:db8:100::5", 64, 50);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK(p.d.action == SL_ACT_OUT && p.d.dest == 5 && d[14 + 7] == 63);
	CHECK(memcmp(d, NB_B, 6) == 0 && memcmp(d + 6, MAC_B, 6) == 0);
	CHECK_EQ(r.st.forwarded_v6, 1);

	/* hop limit 1: ICMPv6 time exceeded from 2001:db8:a::1 */
	n = ip6_udp(f, "2001:db8:a::2", "2001:db8:100::5", 1, 50);
	memcpy(orig, f, n);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK(p.d.action == SL_ACT_OUT && p.d.dest == 3);
	CHECK_EQ(p.d.len, 62 + n - 14);
	CHECK(d[54] == 3 && d[55] == 0 && d[14 + 6] == 58);
	CHECK_EQ(cs_fold(cs_sum(d + 54, p.d.len - 54, cs_pseudo6(d + 14, 58, p.d.len - 54))), 0xffff);
	CHECK(memcmp(d + 62, orig + 14, n - 14) == 0);
	/* no route: ICMPv6 destination unreachable, code 0 */
	n = ip6_udp(f, "2001:db8:a::2", "2001:db8:999::5", 64, 50);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK(p.d.action == SL_ACT_OUT && d[54] == 1 && d[55] == 0);
	CHECK_EQ(cs_fold(cs_sum(d + 54, p.d.len - 54, cs_pseudo6(d + 14, 58, p.d.len - 54))), 0xffff);

	/* unknown IPv6 neighbour: the packet becomes an NS to the solicited-node group; an NA teaches */
	n = ip6_udp(f, "2001:db8:a::2", "2001:db8:b::77", 64, 50);
	memcpy(orig, f, n);
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK(p.d.action == SL_ACT_OUT && p.d.dest == 5 && p.d.len == 86);
	CHECK(memcmp(d, "\x33\x33\xff\x00\x00\x77", 6) == 0 && d[54] == 135 && d[14 + 7] == 255);
	CHECK_EQ(cs_fold(cs_sum(d + 54, 32, cs_pseudo6(d + 14, 58, 32))), 0xffff);
	uint8_t na[86];
	memcpy(na, d, 86);
	/* build the NA from the NS: swap roles */
	static const uint8_t H77[6] = { 2, 0, 0, 0, 0x0b, 0x77 };
	eth(na, MAC_B, H77, 0x86dd);
	inet_pton(AF_INET6, "2001:db8:b::77", na + 22);
	inet_pton(AF_INET6, "2001:db8:b::1", na + 38);
	na[54] = 136;
	na[58] = 0x60;
	na[78] = 2;
	memcpy(na + 80, H77, 6);
	na[56] = na[57] = 0;
	cs_put16(na + 56, cs_compute(na + 54, 32, cs_pseudo6(na + 14, 58, 32)));
	pkt_init(&p, na, 86, 5);
	uint64_t learned = r.st.neigh_learned;
	rt_packet(&r, &p);
	CHECK(p.d.action == SL_ACT_DROP && r.st.neigh_learned == learned + 1);
	pkt_init(&p, orig, n, 3);
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK(p.d.action == SL_ACT_OUT && p.d.dest == 5 && memcmp(d, H77, 6) == 0);

	/* an NS for the router's address on a (multicast): NA in place, checksum right, asker learned */
	uint8_t ns[86];
	memcpy(ns, na, 86);
	eth(ns, (const uint8_t *)"\x33\x33\xff\x00\x00\x01", HOST_A, 0x86dd);
	inet_pton(AF_INET6, "2001:db8:a::2", ns + 22);
	inet_pton(AF_INET6, "ff02::1:ff00:1", ns + 38);
	memset(ns + 54, 0, 32);
	ns[54] = 135;
	inet_pton(AF_INET6, "2001:db8:a::1", ns + 62);
	ns[78] = 1;
	ns[79] = 1;
	memcpy(ns + 80, HOST_A, 6);
	cs_put16(ns + 56, cs_compute(ns + 54, 32, cs_pseudo6(ns + 14, 58, 32)));
	pkt_init(&p, ns, 86, 3);
	learned = r.st.neigh_learned;
	rt_packet(&r, &p);
	d = sl_pkt_data(&p);
	CHECK(p.d.action == SL_ACT_OUT && p.d.dest == 3 && p.d.len == 86);
	CHECK(memcmp(d, HOST_A, 6) == 0 && d[54] == 136 && d[58] == 0xe0);
	CHECK_EQ(cs_fold(cs_sum(d + 54, 32, cs_pseudo6(d + 14, 58, 32))), 0xffff);
	CHECK(r.st.neigh_learned == learned + 1);
	/* a corrupted NS checksum is refused */
	ns[60] ^= 1;
	pkt_init(&p, ns, 86, 3);
	rt_packet(&r, &p);
	CHECK_EQ(p.d.action, SL_ACT_DROP);

	/* ICMP rate limit: burst 2, then nothing until time passes */
	r.icmp_rate = 1;
	r.icmp_burst = 2;
	r.icmp_credit = 2000000000ull;
	r.icmp_last = r.now;
	unsigned sent = 0;
	for (int i = 0; i < 5; i++) {
		n = ip4_udp(f, "10.1.0.2", "192.0.2.1", 64, 4);
		pkt_init(&p, f, n, 3);
		rt_packet(&r, &p);
		sent += p.d.action == SL_ACT_OUT;
	}
	CHECK_EQ(sent, 2);
	CHECK_EQ(r.st.icmp_ratelimited, 3);
	r.now += 1000000000ull;
	pkt_init(&p, f, n, 3);
	rt_packet(&r, &p);
	CHECK_EQ(p.d.action, SL_ACT_OUT);
	r.icmp_rate = 0;

	/* every truncation of valid frames, in exactly-sized heap buffers */
	uint8_t frames[6][2048];
	unsigned lens[6];
	lens[0] = ip4_udp(frames[0], "10.1.0.2", "10.100.3.4", 64, 30);
	lens[1] = ip4_udp(frames[1], "10.1.0.2", "10.100.3.4", 1, 30);
	lens[2] = ip6_udp(frames[2], "2001:db8:a::2", "2001:db8:100::5", 1, 30);
	memcpy(frames[3], arp, 60);
	lens[3] = 60;
	memcpy(frames[4], ns, 86);
	frames[4][60] ^= 1;
	lens[4] = 86;
	lens[5] = ip6_udp(frames[5], "2001:db8:a::2", "2001:db8:a::1", 64, 30);
	for (int k = 0; k < 6; k++) {
		for (unsigned l = 0; l <= lens[k]; l++) {
			for (int in = 0; in < 2; in++) {
				uint8_t *m = malloc(128 + l + 1);
				CHECK(m != NULL);
				memcpy(m + 128, frames[k], l);
				memset(&p, 0, sizeof(p));
				p.base = m;
				p.buf_size = 128 + l;
				p.d.head = p.d.off = 128;
				p.d.len = (uint16_t)l;
				p.d.dest = in ? 5 : 3;
				rt_packet(&r, &p);
				CHECK(p.d.head + p.d.len <= p.buf_size);
				free(m);
			}
		}
	}
	/* random frames (a valid Ethernet header to one of the router's MACs half of the time) */
	for (int i = 0; i < 100000; i++) {
		unsigned l = (unsigned)(rnd() % 200);
		uint8_t *m = malloc(128 + l + 1);
		CHECK(m != NULL);
		for (unsigned b = 0; b < l; b++)
			m[128 + b] = (uint8_t)rnd();
		if (l >= 34 && (i & 1)) {
			memcpy(m + 128, i & 2 ? MAC_A : MAC_B, 6);
			m[128 + 12] = i & 4 ? 0x86 : 0x08;
			m[128 + 13] = i & 4 ? 0xdd : (i & 8 ? 0x06 : 0x00);
			m[128 + 14] = i & 4 ? 0x60 : 0x45;
		}
		memset(&p, 0, sizeof(p));
		p.base = m;
		p.buf_size = 128 + l + (unsigned)(rnd() % 2) * 0; /* no tailroom: growing must fail cleanly */
		p.d.head = p.d.off = 128;
		p.d.len = (uint16_t)l;
		p.d.dest = (uint16_t)(rnd() % 8);
		rt_packet(&r, &p);
		CHECK(p.d.head + p.d.len <= p.buf_size);
		free(m);
	}
	rt_neigh_free(&r.nb);
	rt_conf_free(&c);
}

int main(void)
{
	for (int i = 0; i < 3; i++) {
		test_lpm(32, 2000, 20000);
		test_lpm(128, 2000, 20000);
	}
	test_lpm(32, 50, 20000);
	test_lpm(128, 50, 20000);
	test_conf_errors();
	test_packets();
	printf("test_router: ok\n");
	return 0;
}
