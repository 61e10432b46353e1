/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for the packet accessors (include/sluice/nf.h) and the sample
 * NFs' header parsing, reflection and flow table (nfs/common/pktparse.h, nfs/count/flowtab.h).
 */
#include <string.h>

#include "check.h"
#include "common/pktparse.h"
#include "count/flowtab.h"
#include "sluice/nf.h"

/* ---- sl_pkt accessors ---- */

static uint8_t region[4096];

static struct sl_pkt pkt(uint32_t buf_start, uint16_t head, uint16_t len, uint32_t buf_size)
{
	struct sl_pkt p = { .base = region, .buf_size = buf_size };
	p.d.off = buf_start + head;
	p.d.head = head;
	p.d.len = len;
	p.d.dest = 7;
	return p;
}

static void test_accessors(void)
{
	struct sl_pkt p = pkt(1024, 128, 100, 2048);
	CHECK(sl_pkt_data(&p) == region + 1152);
	CHECK_EQ(sl_pkt_len(&p), 100);
	CHECK_EQ(sl_pkt_in_port(&p), 7);
	CHECK_EQ(sl_pkt_headroom(&p), 128);
	CHECK_EQ(sl_pkt_tailroom(&p), 2048 - 128 - 100);
	sl_pkt_set_action(&p, SL_ACT_OUT, 3);
	CHECK_EQ(p.d.action, SL_ACT_OUT);
	CHECK_EQ(p.d.dest, 3);
}

static void test_adj_head(void)
{
	struct sl_pkt p = pkt(1024, 128, 100, 2048);
	/* prepend within headroom, up to exactly all of it */
	CHECK(sl_pkt_adj_head(&p, 14) == region + 1024 + 114);
	CHECK_EQ(p.d.len, 114);
	CHECK_EQ(p.d.head, 114);
	CHECK(sl_pkt_adj_head(&p, 115) == NULL); /* one more than the headroom */
	CHECK_EQ(p.d.len, 114);
	CHECK(sl_pkt_adj_head(&p, 114) == region + 1024);
	CHECK_EQ(sl_pkt_headroom(&p), 0);
	CHECK_EQ(p.d.len, 228);
	CHECK(sl_pkt_adj_head(&p, 1) == NULL);
	/* strip: all of it is allowed, one more is not */
	CHECK(sl_pkt_adj_head(&p, -229) == NULL);
	CHECK_EQ(p.d.len, 228);
	CHECK(sl_pkt_adj_head(&p, -228) == region + 1024 + 228);
	CHECK_EQ(p.d.len, 0);
	CHECK_EQ(p.d.head, 228);
	CHECK(sl_pkt_adj_head(&p, -1) == NULL);
	CHECK(sl_pkt_adj_head(&p, 0) == region + 1024 + 228);
	CHECK_EQ(sl_pkt_tailroom(&p), 2048 - 228);

	/* length may not exceed 65535 */
	struct sl_pkt q = pkt(0, 200, 65500, 65535 + 200);
	CHECK(sl_pkt_adj_head(&q, 35) != NULL);
	CHECK_EQ(q.d.len, 65535);
	CHECK(sl_pkt_adj_head(&q, 1) == NULL);
	CHECK_EQ(q.d.len, 65535);
}

static void test_adj_tail(void)
{
	struct sl_pkt p = pkt(0, 64, 100, 256);
	CHECK_EQ(sl_pkt_tailroom(&p), 92);
	CHECK_EQ(sl_pkt_adj_tail(&p, 93), -1);
	CHECK_EQ(p.d.len, 100);
	CHECK_EQ(sl_pkt_adj_tail(&p, 92), 0);
	CHECK_EQ(sl_pkt_tailroom(&p), 0);
	CHECK_EQ(sl_pkt_adj_tail(&p, 1), -1);
	CHECK_EQ(sl_pkt_adj_tail(&p, -193), -1);
	CHECK_EQ(sl_pkt_adj_tail(&p, -192), 0);
	CHECK_EQ(p.d.len, 0);
	CHECK_EQ(sl_pkt_adj_tail(&p, -1), -1);
	CHECK_EQ(sl_pkt_adj_tail(&p, 0), 0);
	CHECK_EQ(p.d.head, 64); /* the head never moves */

	struct sl_pkt q = pkt(0, 0, 65535, 70000);
	CHECK_EQ(sl_pkt_adj_tail(&q, 1), -1);
	CHECK_EQ(q.d.len, 65535);
}

/* ---- packet builders ---- */

static const uint8_t mac_a[6] = { 0x02, 0, 0, 0, 0, 0xaa };
static const uint8_t mac_b[6] = { 0x02, 0, 0, 0, 0, 0xbb };

static size_t eth(uint8_t *p, int vlan, uint16_t type)
{
	size_t o = 0;
	memcpy(p, mac_b, 6); /* dst */
	memcpy(p + 6, mac_a, 6); /* src */
	o = 12;
	if (vlan) {
		p[o++] = 0x81; p[o++] = 0x00; p[o++] = 0x00; p[o++] = 0x0a;
	}
	p[o++] = (uint8_t)(type >> 8);
	p[o++] = (uint8_t)type;
	return o;
}

/* Ethernet [+VLAN] + IPv4 (ihl 5) + 8 bytes of L4 header; returns length. */
static size_t ipv4(uint8_t *p, int vlan, uint8_t proto, uint16_t frag)
{
	size_t o = eth(p, vlan, PP_ETH_P_IPV4);
	uint8_t *ip = p + o;
	memset(ip, 0, 20);
	ip[0] = 0x45; ip[2] = 0; ip[3] = 28; ip[6] = (uint8_t)(frag >> 8); ip[7] = (uint8_t)frag;
	ip[8] = 64; ip[9] = proto; ip[10] = 0x12; ip[11] = 0x34;
	ip[12] = 10; ip[13] = 0; ip[14] = 0; ip[15] = 1;
	ip[16] = 10; ip[17] = 0; ip[18] = 0; ip[19] = 2;
	uint8_t *l4 = ip + 20;
	l4[0] = 0x04; l4[1] = 0xd2; /* 1234 */
	l4[2] = 0x00; l4[3] = 0x50; /* 80 */
	l4[4] = 0; l4[5] = 8; l4[6] = 0xab; l4[7] = 0xcd;
	return o + 28;
}

/* Ethernet [+VLAN] + IPv6 [+ hop-by-hop ext] + 8 bytes of L4; returns length. */
static size_t ipv6(uint8_t *p, int vlan, uint8_t proto, int hbh)
{
	size_t o = eth(p, vlan, PP_ETH_P_IPV6);
	uint8_t *ip = p + o;
	memset(ip, 0, 40);
	ip[0] = 0x60; ip[6] = hbh ? 0 : proto; ip[7] = 64;
	ip[8] = 0x20; ip[9] = 0x01; ip[23] = 1;  /* 2001::1 */
	ip[24] = 0x20; ip[25] = 0x01; ip[39] = 2; /* 2001::2 */
	o += 40;
	if (hbh) {
		memset(p + o, 0, 8);
		p[o] = proto; /* next header */
		p[o + 1] = 0; /* 8 bytes */
		o += 8;
	}
	uint8_t *l4 = p + o;
	l4[0] = 0x04; l4[1] = 0xd2; l4[2] = 0x00; l4[3] = 0x50;
	l4[4] = 0; l4[5] = 8; l4[6] = 0; l4[7] = 0;
	return o + 8;
}

static void test_parse(void)
{
	uint8_t p[256] = { 0 };
	struct pp_info pi;
	size_t n;

	/* too short for Ethernet */
	pp_parse(p, 13, &pi);
	CHECK_EQ(pi.has_eth, 0);
	CHECK_EQ(pi.family, 0);

	n = ipv4(p, 0, PP_IPPROTO_UDP, 0);
	pp_parse(p, (uint32_t)n, &pi);
	CHECK_EQ(pi.has_eth, 1);
	CHECK_EQ(pi.ethertype, PP_ETH_P_IPV4);
	CHECK_EQ(pi.vlan, 0);
	CHECK_EQ(pi.family, 4);
	CHECK_EQ(pi.proto, 17);
	CHECK_EQ(pi.l3_off, 14);
	CHECK_EQ(pi.has_ports, 1);
	CHECK_EQ(pi.l4_off, 34);

	n = ipv4(p, 1, PP_IPPROTO_TCP, 0);
	pp_parse(p, (uint32_t)n, &pi);
	CHECK_EQ(pi.vlan, 1);
	CHECK_EQ(pi.l3_off, 18);
	CHECK_EQ(pi.family, 4);
	CHECK_EQ(pi.l4_off, 38);
	CHECK_EQ(pi.has_ports, 1);

	/* every truncation of a VLAN/IPv4/TCP packet parses only what is there */
	for (uint32_t len = 0; len <= n; len++) {
		pp_parse(p, len, &pi);
		CHECK_EQ(pi.has_eth, len >= 14);
		CHECK_EQ(pi.vlan, len >= 18);
		CHECK_EQ(pi.family, len >= 38 ? 4 : 0);
		CHECK_EQ(pi.has_ports, len >= 42);
	}

	/* IPv4 with options: L4 after ihl*4 */
	n = ipv4(p, 0, PP_IPPROTO_UDP, 0);
	p[14] = 0x46;
	pp_parse(p, (uint32_t)n, &pi);
	CHECK_EQ(pi.l4_off, 38);
	pp_parse(p, 14 + 24 + 3, &pi); /* options present, ports not */
	CHECK_EQ(pi.family, 4);
	CHECK_EQ(pi.has_ports, 0);
	p[14] = 0x44; /* ihl < 5 */
	pp_parse(p, (uint32_t)n, &pi);
	CHECK_EQ(pi.family, 0);
	p[14] = 0x65; /* wrong version */
	pp_parse(p, (uint32_t)n, &pi);
	CHECK_EQ(pi.family, 0);

	/* non-first fragment: no ports; first fragment (MF set): ports */
	n = ipv4(p, 0, PP_IPPROTO_UDP, 0x00b9);
	pp_parse(p, (uint32_t)n, &pi);
	CHECK_EQ(pi.frag, 1);
	CHECK_EQ(pi.has_ports, 0);
	n = ipv4(p, 0, PP_IPPROTO_UDP, 0x2000);
	pp_parse(p, (uint32_t)n, &pi);
	CHECK_EQ(pi.frag, 0);
	CHECK_EQ(pi.has_ports, 1);

	/* ICMP: IP but no ports */
	n = ipv4(p, 0, 1, 0);
	pp_parse(p, (uint32_t)n, &pi);
	CHECK_EQ(pi.family, 4);
	CHECK_EQ(pi.proto, 1);
	CHECK_EQ(pi.has_ports, 0);

	/* IPv6, with VLAN and a hop-by-hop header */
	n = ipv6(p, 1, PP_IPPROTO_TCP, 1);
	pp_parse(p, (uint32_t)n, &pi);
	CHECK_EQ(pi.family, 6);
	CHECK_EQ(pi.proto, 6);
	CHECK_EQ(pi.l3_off, 18);
	CHECK_EQ(pi.l4_off, 18 + 40 + 8);
	CHECK_EQ(pi.has_ports, 1);
	for (uint32_t len = 0; len <= n; len++) {
		pp_parse(p, len, &pi);
		CHECK_EQ(pi.family, len >= 58 ? 6 : 0);
		CHECK_EQ(pi.has_ports, len >= 70);
	}
	n = ipv6(p, 0, PP_IPPROTO_UDP, 0);
	pp_parse(p, (uint32_t)n, &pi);
	CHECK_EQ(pi.family, 6);
	CHECK_EQ(pi.l4_off, 54);
	CHECK_EQ(pi.has_ports, 1);
	/* IPv6 fragment header with a non-zero offset: no ports */
	n = ipv6(p, 0, 44, 0);
	memset(p + 54, 0, 8);
	p[54] = PP_IPPROTO_UDP;
	p[57] = 0x08; /* offset 1 */
	pp_parse(p, 62 + 4, &pi);
	CHECK_EQ(pi.family, 6);
	CHECK_EQ(pi.frag, 1);
	CHECK_EQ(pi.has_ports, 0);

	/* ARP: Ethernet only */
	n = eth(p, 0, 0x0806);
	pp_parse(p, 60, &pi);
	CHECK_EQ(pi.has_eth, 1);
	CHECK_EQ(pi.ethertype, 0x0806);
	CHECK_EQ(pi.family, 0);
}

static void test_reflect(void)
{
	uint8_t p[256] = { 0 }, orig[256];
	size_t n;

	/* IPv4/UDP with VLAN: everything swapped, checksums bytes untouched */
	n = ipv4(p, 1, PP_IPPROTO_UDP, 0);
	memcpy(orig, p, n);
	pp_reflect(p, (uint32_t)n);
	CHECK(memcmp(p, mac_a, 6) == 0 && memcmp(p + 6, mac_b, 6) == 0);
	CHECK(memcmp(p + 18 + 12, orig + 18 + 16, 4) == 0);
	CHECK(memcmp(p + 18 + 16, orig + 18 + 12, 4) == 0);
	CHECK(memcmp(p + 38, orig + 40, 2) == 0 && memcmp(p + 40, orig + 38, 2) == 0);
	CHECK(memcmp(p + 18 + 10, orig + 18 + 10, 2) == 0); /* IP checksum */
	CHECK(memcmp(p + 44, orig + 44, 2) == 0);            /* UDP checksum */
	pp_reflect(p, (uint32_t)n);
	CHECK(memcmp(p, orig, n) == 0); /* an involution */

	/* IPv6/TCP */
	n = ipv6(p, 0, PP_IPPROTO_TCP, 0);
	memcpy(orig, p, n);
	pp_reflect(p, (uint32_t)n);
	CHECK(memcmp(p + 14 + 8, orig + 14 + 24, 16) == 0);
	CHECK(memcmp(p + 14 + 24, orig + 14 + 8, 16) == 0);
	CHECK(memcmp(p + 54, orig + 56, 2) == 0 && memcmp(p + 56, orig + 54, 2) == 0);

	/* truncated: guard bytes after len never touched; only complete headers swapped */
	n = ipv4(p, 0, PP_IPPROTO_TCP, 0);
	for (uint32_t len = 0; len <= n; len++) {
		uint8_t q[256];
		memcpy(q, p, n);
		memset(q + len, 0xee, sizeof(q) - len);
		pp_reflect(q, len);
		for (size_t i = len; i < sizeof(q); i++)
			CHECK_EQ(q[i], 0xee);
		if (len >= 14)
			CHECK(memcmp(q, mac_a, 6) == 0);
		else
			CHECK(memcmp(q, p, len) == 0);
		if (len >= 34)
			CHECK(memcmp(q + 26, p + 30, 4) == 0);
		else if (len >= 30)
			CHECK(memcmp(q + 26, p + 26, 4) == 0);
		if (len >= 38)
			CHECK(memcmp(q + 34, p + 36, 2) == 0);
		else if (len >= 36)
			CHECK(memcmp(q + 34, p + 34, 2) == 0);
	}
}

static void test_flowtab(void)
{
	uint8_t p[256] = { 0 };
	struct flowtab t;
	struct ft_key k;
	size_t n;

	CHECK_EQ(ft_init(&t, 0), -1);
	CHECK_EQ(ft_init(&t, 3), 0);
	CHECK_EQ(t.mask + 1, 8); /* 3 * 4/3 + 1 -> 8 */

	n = ipv4(p, 1, PP_IPPROTO_TCP, 0);
	ft_key_from_pkt(p, (uint32_t)n, &k);
	CHECK_EQ(k.family, 4);
	CHECK_EQ(k.proto, 6);
	CHECK_EQ(k.sport, 1234);
	CHECK_EQ(k.dport, 80);
	CHECK(k.src[0] == 10 && k.src[3] == 1 && k.dst[3] == 2);
	ft_account(&t, &k, 100);
	ft_account(&t, &k, 50);
	CHECK_EQ(t.count, 1);

	n = ipv6(p, 0, PP_IPPROTO_UDP, 0);
	ft_key_from_pkt(p, (uint32_t)n, &k);
	CHECK_EQ(k.family, 6);
	CHECK_EQ(k.dport, 80);
	ft_account(&t, &k, 70);

	ft_key_from_pkt(p, 20, &k); /* truncated IPv6 -> other */
	CHECK_EQ(k.family, 0);
	ft_account(&t, &k, 20);
	CHECK_EQ(t.count, 3);

	n = ipv4(p, 0, 1, 0); /* ICMP: ports 0; a 4th flow does not fit */
	ft_key_from_pkt(p, (uint32_t)n, &k);
	CHECK_EQ(k.sport, 0);
	ft_account(&t, &k, 42);
	CHECK_EQ(t.count, 3);
	CHECK_EQ(t.table_full, 1);
	CHECK_EQ(t.total_pkts, 5);
	CHECK_EQ(t.total_bytes, 282);

	char *buf = NULL;
	size_t sz = 0;
	FILE *f = open_memstream(&buf, &sz);
	CHECK(f != NULL);
	CHECK_EQ(ft_dump_json(&t, f), 0);
	fclose(f);
	CHECK(strstr(buf, "{\"proto\":6,\"src\":\"10.0.0.1\",\"dst\":\"10.0.0.2\",\"sport\":1234,"
			  "\"dport\":80,\"pkts\":2,\"bytes\":150}") != NULL);
	CHECK(strstr(buf, "\"src\":\"2001::1\",\"dst\":\"2001::2\"") != NULL);
	CHECK(strstr(buf, "{\"proto\":0,\"src\":null,\"dst\":null,\"sport\":0,\"dport\":0,"
			  "\"pkts\":1,\"bytes\":20}") != NULL);
	CHECK(strstr(buf, "\"total_pkts\":5,\"total_bytes\":282,\"table_full\":1}") != NULL);
	free(buf);
	ft_free(&t);
}

int main(void)
{
	test_accessors();
	test_adj_head();
	test_adj_tail();
	test_parse();
	test_reflect();
	test_flowtab();
	printf("test_nf_pkt: ok\n");
	return 0;
}
