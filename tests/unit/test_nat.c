/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for the NAT NF's DPDK-free parts: nfs/nat/table.h (mapping table, port allocation,
 * expiry), nfs/nat/conf.h (config lines and their error messages) and nfs/nat/pkt.h (translation
 * with incremental checksums, checked against full recomputation; ICMP errors; truncated and
 * random frames).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nat/pkt.h"

#define IP(a, b, c, d) ((uint32_t)(a) << 24 | (uint32_t)(b) << 16 | (uint32_t)(c) << 8 | (uint32_t)(d))

static const uint32_t IN1 = IP(10, 0, 0, 1), IN2 = IP(10, 0, 0, 2), PUB = IP(203, 0, 113, 1),
		      REM = IP(198, 51, 100, 7);

/* ---------------------------------------------------------------- frames */

/* Ethernet + IPv4 + L4 (TCP 20 / UDP 8 / ICMP echo 8) + payload, all checksums valid. */
static uint32_t build(uint8_t *f, uint8_t proto, uint32_t src, uint16_t sp, uint32_t dst, uint16_t dp,
		      uint32_t payload, uint8_t icmp_type)
{
	memset(f, 0, 14);
	f[12] = 0x08;
	uint8_t *ip = f + 14;
	uint32_t l4len = (proto == NAT_P_TCP ? 20 : 8) + payload;
	memset(ip, 0, 20);
	ip[0] = 0x45;
	cs_put16(ip + 2, (uint16_t)(20 + l4len));
	cs_put16(ip + 4, 0x1234);
	ip[8] = 64;
	ip[9] = proto;
	nat_put32(ip + 12, src);
	nat_put32(ip + 16, dst);
	cs_put16(ip + 10, cs_compute(ip, 20, 0));
	uint8_t *l4 = ip + 20;
	memset(l4, 0, l4len);
	for (uint32_t i = 0; i < payload; i++)
		l4[l4len - payload + i] = (uint8_t)(i * 7 + 3);
	if (proto == NAT_P_ICMP) {
		l4[0] = icmp_type;
		cs_put16(l4 + 4, icmp_type == NAT_ICMP_ECHO ? sp : dp);
		cs_put16(l4 + 2, cs_compute(l4, l4len, 0));
	} else {
		cs_put16(l4, sp);
		cs_put16(l4 + 2, dp);
		if (proto == NAT_P_TCP) {
			l4[12] = 0x50;
			l4[13] = 0x02; /* SYN */
			cs_put16(l4 + 16, cs_compute(l4, l4len, cs_pseudo4(ip, proto, l4len)));
		} else {
			cs_put16(l4 + 4, (uint16_t)l4len);
			cs_put16(l4 + 6, cs_compute(l4, l4len, cs_pseudo4(ip, proto, l4len)));
		}
	}
	return 14 + 20 + l4len;
}

/* All checksums of a frame built above are valid (sum to 0xffff). */
static void check_sums(const uint8_t *f)
{
	const uint8_t *ip = f + 14;
	CHECK_EQ(cs_fold(cs_sum(ip, 20, 0)), 0xffff);
	uint32_t l4len = pp_be16(ip + 2) - 20u;
	const uint8_t *l4 = ip + 20;
	if (ip[9] == NAT_P_ICMP)
		CHECK_EQ(cs_fold(cs_sum(l4, l4len, 0)), 0xffff);
	else if (ip[9] == NAT_P_UDP && pp_be16(l4 + 6) == 0)
		return;
	else
		CHECK_EQ(cs_fold(cs_sum(l4, l4len, cs_pseudo4(ip, ip[9], l4len))), 0xffff);
}

static void nat_setup(struct nat *n, uint32_t cap, const char *rules)
{
	memset(n, 0, sizeof(*n));
	nat_conf_default(&n->c);
	char buf[4096], err[256];
	strcpy(buf, rules);
	unsigned ln = 0;
	for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (nat_conf_line(&n->c, l, "t.conf", ++ln, err, sizeof(err)) != 0) {
			fprintf(stderr, "%s\n", err);
			CHECK(0);
		}
	}
	CHECK_EQ(nat_init(&n->t, cap, 12345), 0);
	n->t.to = n->c.to;
	n->max_tries = 256;
}

/* ---------------------------------------------------------------- table */

static void test_table(void)
{
	struct nat_table t;
	CHECK_EQ(nat_init(&t, 4, 1), 0);
	struct nat_key in = nat_key_make(NAT_P_UDP, IN1, 5000, REM, 53), out;
	CHECK_EQ(nat_alloc_port(&t, &in, PUB, 1024, 65535, 0, 256, 0, &out), 0);
	CHECK_EQ(out.dport, 5000); /* the source port is kept when free */
	CHECK_EQ(out.sip, REM);
	CHECK_EQ(out.sport, 53);
	CHECK_EQ(out.dip, PUB);
	uint32_t a = nat_insert(&t, &in, &out, 0, 0);
	CHECK(a != NAT_NONE);
	CHECK_EQ(nat_lookup(&t, &in, 0, 1), a);
	CHECK_EQ(nat_lookup(&t, &out, 1, 1), a);
	CHECK_EQ(nat_lookup(&t, &out, 0, 1), NAT_NONE); /* views are separate */

	/* a second host with the same source port to the same remote: another port */
	struct nat_key in2 = nat_key_make(NAT_P_UDP, IN2, 5000, REM, 53), out2;
	CHECK_EQ(nat_alloc_port(&t, &in2, PUB, 1024, 65535, 0, 256, 0, &out2), 0);
	CHECK(out2.dport != 5000 && out2.dport >= 1024);
	uint16_t pp2 = out2.dport;
	CHECK(nat_insert(&t, &in2, &out2, 0, 0) != NAT_NONE);
	/* ... and again to another remote port: the endpoint keeps its public port 5001 (endpoint-
	 * independent mapping, like Linux), although 5000 would be free for that remote */
	struct nat_key in3 = nat_key_make(NAT_P_UDP, IN2, 5000, REM, 54), out3;
	CHECK_EQ(nat_alloc_port(&t, &in3, PUB, 1024, 65535, 0, 256, 0, &out3), 0);
	CHECK_EQ(out3.dport, pp2);
	/* a new endpoint to that remote keeps its port, also outside the range when keep_any */
	struct nat_key in4 = nat_key_make(NAT_P_UDP, IN1, 700, REM, 54), out4;
	CHECK_EQ(nat_alloc_port(&t, &in4, PUB, 1024, 65535, 1, 256, 0, &out4), 0);
	CHECK_EQ(out4.dport, 700);
	CHECK_EQ(nat_alloc_port(&t, &in4, PUB, 1024, 65535, 0, 256, 0, &out4), 0);
	CHECK(out4.dport >= 1024);
	/* a port below the range maps into it; a range of 2 is exhausted after 2 */
	struct nat_key p1 = nat_key_make(NAT_P_UDP, IN1, 100, REM, 9), o;
	CHECK_EQ(nat_alloc_port(&t, &p1, PUB, 2000, 2001, 0, 256, 0, &o), 0);
	CHECK(o.dport == 2000 || o.dport == 2001);
	CHECK(nat_insert(&t, &p1, &o, 0, 0) != NAT_NONE);
	struct nat_key p2 = nat_key_make(NAT_P_UDP, IN1, 101, REM, 9);
	CHECK_EQ(nat_alloc_port(&t, &p2, PUB, 2000, 2001, 0, 256, 0, &o), 0);
	CHECK(nat_insert(&t, &p2, &o, 0, 0) != NAT_NONE);
	CHECK_EQ(t.count, 4);
	struct nat_key p3 = nat_key_make(NAT_P_UDP, IN1, 102, REM, 9);
	CHECK_EQ(nat_alloc_port(&t, &p3, PUB, 2000, 2001, 0, 256, 0, &o), -1);
	/* the table is full (capacity 4) */
	CHECK_EQ(nat_insert(&t, &in3, &out3, 0, 0), NAT_NONE);

	/* expiry: lazy on lookup, and by the sweep */
	uint64_t late = t.to.udp_ms + 1;
	CHECK_EQ(nat_lookup(&t, &in, 0, late), NAT_NONE);
	CHECK_EQ(t.expired, 1);
	CHECK_EQ(t.count, 3);
	CHECK_EQ(nat_sweep(&t, 100, late), 3);
	CHECK_EQ(t.count, 0);
	CHECK_EQ(t.expired, 4);
	/* the freed slots are reusable, the lookups of the others miss */
	for (int i = 0; i < 4; i++) {
		struct nat_key k = nat_key_make(NAT_P_TCP, IN1, (uint16_t)(7000 + i), REM, 80);
		struct nat_key ko = nat_key_make(NAT_P_TCP, REM, 80, PUB, (uint16_t)(7000 + i));
		CHECK(nat_insert(&t, &k, &ko, 0, late) != NAT_NONE);
	}
	CHECK_EQ(nat_lookup(&t, &in2, 0, late), NAT_NONE);
	/* TCP state: transitory until both sides were seen, established after; transitory after FINs */
	struct nat_key k0 = nat_key_make(NAT_P_TCP, IN1, 7000, REM, 80);
	uint32_t i0 = nat_lookup(&t, &k0, 0, late);
	CHECK(i0 != NAT_NONE);
	nat_touch(&t, i0, 0, 0x02, late);
	CHECK_EQ(t.m[i0].expires_ms, late + t.to.tcp_trans_ms);
	nat_touch(&t, i0, 1, 0x12, late);
	CHECK_EQ(t.m[i0].expires_ms, late + t.to.tcp_est_ms);
	nat_touch(&t, i0, 0, 0x11, late);
	CHECK_EQ(t.m[i0].expires_ms, late + t.to.tcp_est_ms);
	nat_touch(&t, i0, 1, 0x11, late);
	CHECK_EQ(t.m[i0].expires_ms, late + t.to.tcp_trans_ms);
	nat_free(&t);

	/* many mappings: every one found in both views, removal keeps the chains intact */
	CHECK_EQ(nat_init(&t, 5000, 7), 0);
	for (uint32_t i = 0; i < 5000; i++) {
		struct nat_key k = nat_key_make(NAT_P_UDP, IN1 + i % 50, (uint16_t)(1000 + i), REM, 53);
		struct nat_key ko;
		CHECK_EQ(nat_alloc_port(&t, &k, PUB, 1024, 65535, 0, 256, 0, &ko), 0);
		CHECK(nat_insert(&t, &k, &ko, 0, 0) != NAT_NONE);
	}
	for (uint32_t i = 0; i < 5000; i += 2) {
		struct nat_key k = nat_key_make(NAT_P_UDP, IN1 + i % 50, (uint16_t)(1000 + i), REM, 53);
		uint32_t idx = nat_lookup(&t, &k, 0, 0);
		CHECK(idx != NAT_NONE);
		struct nat_key ko = t.m[idx].out;
		CHECK_EQ(nat_lookup(&t, &ko, 1, 0), idx);
		nat_remove(&t, idx);
	}
	CHECK_EQ(t.count, 2500);
	for (uint32_t i = 0; i < 5000; i++) {
		struct nat_key k = nat_key_make(NAT_P_UDP, IN1 + i % 50, (uint16_t)(1000 + i), REM, 53);
		CHECK_EQ(nat_lookup(&t, &k, 0, 0) != NAT_NONE, i % 2 == 1);
	}
	nat_free(&t);
}

/* ---------------------------------------------------------------- config */

static void conf_err(const char *line, const char *want)
{
	struct nat_conf c;
	nat_conf_default(&c);
	char buf[256], err[256] = "";
	strcpy(buf, line);
	CHECK_EQ(nat_conf_line(&c, buf, "nat.conf", 7, err, sizeof(err)), -1);
	if (strstr(err, want) == NULL) {
		fprintf(stderr, "line '%s': error '%s' lacks '%s'\n", line, err, want);
		CHECK(0);
	}
	CHECK(strncmp(err, "nat.conf:7: ", 12) == 0);
}

static void test_conf(void)
{
	struct nat_conf c;
	nat_conf_default(&c);
	char err[256];
	char l1[] = "snat from 10.0.0.0/24 to 203.0.113.1 ports 2000-2001  # comment";
	char l2[] = "  dnat proto tcp to 203.0.113.1:8080 -> 10.0.0.1:80";
	char l3[] = "timeout udp 5";
	char l4[] = "   # only a comment";
	char l5[] = "snat from 0.0.0.0/0 to 203.0.113.1";
	CHECK_EQ(nat_conf_line(&c, l1, "f", 1, err, sizeof(err)), 0);
	CHECK_EQ(nat_conf_line(&c, l2, "f", 2, err, sizeof(err)), 0);
	CHECK_EQ(nat_conf_line(&c, l3, "f", 3, err, sizeof(err)), 0);
	CHECK_EQ(nat_conf_line(&c, l4, "f", 4, err, sizeof(err)), 0);
	CHECK_EQ(nat_conf_line(&c, l5, "f", 5, err, sizeof(err)), 0);
	CHECK_EQ(c.n_snat, 2);
	CHECK_EQ(c.snat[0].net, IP(10, 0, 0, 0));
	CHECK_EQ(c.snat[0].mask, 0xffffff00u);
	CHECK_EQ(c.snat[0].lo, 2000);
	CHECK_EQ(c.snat[0].hi, 2001);
	CHECK_EQ(c.snat[1].mask, 0);
	CHECK_EQ(c.snat[1].lo, 1024);
	CHECK_EQ(c.n_dnat, 1);
	CHECK_EQ(c.dnat[0].proto, NAT_P_TCP);
	CHECK_EQ(c.dnat[0].pub_port, 8080);
	CHECK_EQ(c.dnat[0].priv, IN1);
	CHECK_EQ(c.to.udp_ms, 5000);

	conf_err("snat from 10.0.0.0/33 to 1.2.3.4", "from: '10.0.0.0/33'");
	conf_err("snat from 10.0.0.1/24 to 1.2.3.4", "host bits");
	conf_err("snat from 10.0.0.0/24 to 1.2.3", "to: '1.2.3' is not an IPv4 address");
	conf_err("snat from 10.0.0.0/24 to 1.2.3.256", "to: '1.2.3.256'");
	conf_err("snat from 10.0.0.0/24 to 1.2.3.4 ports 5-2", "ports: '5-2'");
	conf_err("snat from 10.0.0.0/24 to 1.2.3.4 ports 0-2", "ports: '0-2'");
	conf_err("snat to 10.0.0.0/24 from 1.2.3.4", "expected 'from'");
	conf_err("dnat proto sctp to 1.2.3.4:80 -> 10.0.0.1:80", "proto: 'sctp'");
	conf_err("dnat proto tcp to 1.2.3.4:99999 -> 10.0.0.1:80", "to: '1.2.3.4:99999' is not IPv4:PORT");
	conf_err("dnat proto tcp to 1.2.3.4:80 -> 10.0.0.1", "->: '10.0.0.1'");
	conf_err("timeout udp -1", "udp: '-1'");
	conf_err("timeout tcp 10", "timeout: 'tcp'");
	conf_err("nat everything", "rule: 'nat'");

	/* a duplicate forwarded port */
	char d1[] = "dnat proto tcp to 203.0.113.1:8080 -> 10.0.0.2:80";
	CHECK_EQ(nat_conf_line(&c, d1, "nat.conf", 9, err, sizeof(err)), -1);
	CHECK(strstr(err, "nat.conf:9: to: '203.0.113.1:8080' is already forwarded") != NULL);
}

/* ---------------------------------------------------------------- packets */

static void test_packets(void)
{
	struct nat n;
	nat_setup(&n, 64,
		  "snat from 10.0.0.0/24 to 203.0.113.1\n"
		  "dnat proto tcp to 203.0.113.1:8080 -> 10.0.0.1:80\n");
	uint8_t f[256];
	uint16_t p4000 = 0; /* host 2's public UDP port */
	const uint8_t protos[] = { NAT_P_UDP, NAT_P_TCP, NAT_P_ICMP };
	for (unsigned pi = 0; pi < 3; pi++) {
		uint8_t pr = protos[pi];
		/* host 1, then host 2 with the same source port / identifier */
		for (int h = 0; h < 2; h++) {
			uint32_t src = h ? IN2 : IN1;
			uint32_t len = build(f, pr, src, 4000, REM, 53, 11, NAT_ICMP_ECHO);
			CHECK_EQ(nat_packet(&n, f, len, 0, 10), NAT_FWD);
			check_sums(f);
			CHECK_EQ(nat_be32(f + 26), PUB);
			CHECK_EQ(nat_be32(f + 30), REM);
			uint16_t pport = pp_be16(f + 34 + (pr == NAT_P_ICMP ? 4 : 0));
			CHECK(h ? pport != 4000 : pport == 4000);
			if (pr == NAT_P_UDP && h)
				p4000 = pport;
			/* the reply comes back to the right host and port */
			len = build(f, pr, REM, 53, PUB, pport, 11, NAT_ICMP_ECHO_REPLY);
			CHECK_EQ(nat_packet(&n, f, len, 1, 20), NAT_FWD);
			check_sums(f);
			CHECK_EQ(nat_be32(f + 26), REM);
			CHECK_EQ(nat_be32(f + 30), src);
			CHECK_EQ(pp_be16(f + 34 + (pr == NAT_P_ICMP ? 4 : 2)), 4000);
		}
	}
	CHECK_EQ(n.st.snat_new, 6);
	CHECK_EQ(n.st.translated_out, 6);
	CHECK_EQ(n.st.translated_in, 6);

	/* UDP without a checksum keeps 0 */
	uint32_t len = build(f, NAT_P_UDP, IN1, 4444, REM, 53, 5, 0);
	cs_put16(f + 40, 0);
	CHECK_EQ(nat_packet(&n, f, len, 0, 30), NAT_FWD);
	CHECK_EQ(pp_be16(f + 40), 0);

	/* fragments (MF, or an offset) are not translated */
	len = build(f, NAT_P_UDP, IN1, 4000, REM, 53, 11, 0);
	f[20] = 0x20; /* MF */
	CHECK_EQ(nat_packet(&n, f, len, 0, 30), NAT_DROP);
	f[20] = 0x00;
	f[21] = 0x10; /* offset 16 * 8 */
	CHECK_EQ(nat_packet(&n, f, len, 0, 30), NAT_DROP);
	CHECK_EQ(n.st.fragments, 2);
	CHECK_EQ(nat_be32(f + 26), IN1);

	/* unsolicited inbound: dropped, counted */
	len = build(f, NAT_P_UDP, REM, 53, PUB, 9999, 5, 0);
	CHECK_EQ(nat_packet(&n, f, len, 1, 30), NAT_DROP);
	CHECK_EQ(n.st.no_mapping, 1);
	/* a source outside every snat prefix */
	len = build(f, NAT_P_UDP, IP(192, 168, 1, 1), 53, REM, 53, 5, 0);
	CHECK_EQ(nat_packet(&n, f, len, 0, 30), NAT_DROP);
	CHECK_EQ(n.st.no_rule, 1);

	/* DNAT: outside -> pub:8080 reaches 10.0.0.1:80, the answer leaves as pub:8080 */
	len = build(f, NAT_P_TCP, REM, 33333, PUB, 8080, 0, 0);
	CHECK_EQ(nat_packet(&n, f, len, 1, 40), NAT_FWD);
	check_sums(f);
	CHECK_EQ(nat_be32(f + 30), IN1);
	CHECK_EQ(pp_be16(f + 36), 80);
	CHECK_EQ(n.st.dnat_new, 1);
	len = build(f, NAT_P_TCP, IN1, 80, REM, 33333, 9, 0);
	CHECK_EQ(nat_packet(&n, f, len, 0, 40), NAT_FWD);
	check_sums(f);
	CHECK_EQ(nat_be32(f + 26), PUB);
	CHECK_EQ(pp_be16(f + 34), 8080);
	CHECK_EQ(n.st.snat_new, 7); /* the 0-checksum UDP one; the DNAT answer made no new mapping */

	/* ICMP port unreachable from the remote about host 2's UDP flow (sent as pub:p4000) */
	uint8_t q[128];
	uint32_t qlen = build(q, NAT_P_UDP, PUB, p4000, REM, 53, 11, 0); /* as it left the NAT */
	uint32_t quoted = qlen - 14;
	uint8_t *ip = f + 14;
	memset(f, 0, sizeof(f));
	f[12] = 0x08;
	ip[0] = 0x45;
	cs_put16(ip + 2, (uint16_t)(20 + 8 + quoted));
	ip[8] = 64;
	ip[9] = NAT_P_ICMP;
	nat_put32(ip + 12, REM);
	nat_put32(ip + 16, PUB);
	cs_put16(ip + 10, cs_compute(ip, 20, 0));
	ip[20] = NAT_ICMP_UNREACH;
	ip[21] = 3;
	memcpy(ip + 28, q + 14, quoted);
	cs_put16(ip + 22, cs_compute(ip + 20, 8 + quoted, 0));
	len = 14 + 28 + quoted;
	CHECK_EQ(nat_packet(&n, f, len, 1, 50), NAT_FWD);
	check_sums(f);
	CHECK_EQ(nat_be32(ip + 16), IN2);              /* outer destination */
	CHECK_EQ(nat_be32(ip + 28 + 12), IN2);         /* quoted source */
	CHECK_EQ(pp_be16(ip + 48), 4000);              /* quoted source port */
	CHECK_EQ(cs_fold(cs_sum(ip + 28, 20, 0)), 0xffff); /* quoted IP header checksum */
	CHECK_EQ(cs_fold(cs_sum(ip + 48, 8 + 11, cs_pseudo4(ip + 28, NAT_P_UDP, 19))), 0xffff);
	CHECK_EQ(n.st.icmp_errors, 1);
	/* translated already: it now quotes 10.0.0.2 as the source, no outside mapping has that */
	CHECK_EQ(nat_packet(&n, f, len, 1, 50), NAT_DROP);
	CHECK_EQ(n.st.no_mapping, 2);
	/* quoting only the IP header + 8 bytes (RFC 792) about host 1's flow (pub:4000) */
	qlen = build(q, NAT_P_UDP, PUB, 4000, REM, 53, 11, 0);
	memset(f, 0, sizeof(f));
	f[12] = 0x08;
	ip[0] = 0x45;
	cs_put16(ip + 2, 20 + 8 + 28);
	ip[8] = 64;
	ip[9] = NAT_P_ICMP;
	nat_put32(ip + 12, IP(192, 0, 2, 99)); /* a router on the way */
	nat_put32(ip + 16, PUB);
	cs_put16(ip + 10, cs_compute(ip, 20, 0));
	ip[20] = NAT_ICMP_TIME_EXCEED;
	memcpy(ip + 28, q + 14, 28);
	cs_put16(ip + 22, cs_compute(ip + 20, 8 + 28, 0));
	len = 14 + 20 + 8 + 28;
	CHECK_EQ(nat_packet(&n, f, len, 1, 50), NAT_FWD);
	CHECK_EQ(cs_fold(cs_sum(ip, 20, 0)), 0xffff);
	CHECK_EQ(cs_fold(cs_sum(ip + 20, 8 + 28, 0)), 0xffff);
	CHECK_EQ(nat_be32(ip + 12), IP(192, 0, 2, 99));
	CHECK_EQ(nat_be32(ip + 16), IN1);
	CHECK_EQ(nat_be32(ip + 28 + 12), IN1);
	CHECK_EQ(pp_be16(ip + 48), 4000);
	/* ... and one from the inside about a DNAT'ed packet (10.0.0.1:80 unreachable) leaves as pub */
	qlen = build(q, NAT_P_TCP, REM, 33333, IN1, 80, 0, 0); /* as the NAT delivered it */
	memset(f, 0, sizeof(f));
	f[12] = 0x08;
	ip[0] = 0x45;
	cs_put16(ip + 2, 20 + 8 + 40);
	ip[8] = 64;
	ip[9] = NAT_P_ICMP;
	nat_put32(ip + 12, IN1);
	nat_put32(ip + 16, REM);
	cs_put16(ip + 10, cs_compute(ip, 20, 0));
	ip[20] = NAT_ICMP_UNREACH;
	ip[21] = 3;
	memcpy(ip + 28, q + 14, 40);
	cs_put16(ip + 22, cs_compute(ip + 20, 8 + 40, 0));
	len = 14 + 20 + 8 + 40;
	CHECK_EQ(nat_packet(&n, f, len, 0, 50), NAT_FWD);
	CHECK_EQ(cs_fold(cs_sum(ip, 20, 0)), 0xffff);
	CHECK_EQ(cs_fold(cs_sum(ip + 20, 8 + 40, 0)), 0xffff);
	CHECK_EQ(nat_be32(ip + 12), PUB);
	CHECK_EQ(nat_be32(ip + 28 + 16), PUB);
	CHECK_EQ(pp_be16(ip + 48 + 2), 8080);
	CHECK_EQ(cs_fold(cs_sum(ip + 48, 20, cs_pseudo4(ip + 28, NAT_P_TCP, 20))), 0xffff);
	CHECK_EQ(n.st.icmp_errors, 3);

	/* expiry: after the UDP timeout the reply finds nothing */
	len = build(f, NAT_P_UDP, REM, 53, PUB, 4000, 5, 0);
	CHECK_EQ(nat_packet(&n, f, len, 1, 60 + n.t.to.udp_ms), NAT_DROP);
	CHECK(n.t.expired >= 1);
	nat_free(&n.t);
}

static void test_hostile(void)
{
	struct nat n;
	nat_setup(&n, 256, "snat from 0.0.0.0/0 to 203.0.113.1\ndnat proto udp to 203.0.113.1:53 -> 10.0.0.1:53\n");
	uint8_t f[256], g[256];
	const uint8_t protos[] = { NAT_P_UDP, NAT_P_TCP, NAT_P_ICMP };
	/* every truncation of every kind of frame, both directions: never translated past len */
	uint64_t dropped = 0;
	for (unsigned pi = 0; pi < 3; pi++) {
		uint32_t full = build(f, protos[pi], IN1, 1500, REM, 53, 20, NAT_ICMP_ECHO);
		for (uint32_t l = 0; l < full; l++) {
			memcpy(g, f, sizeof(g));
			/* the IP total length still claims the full packet */
			if (nat_packet(&n, g, l, 0, 1) == NAT_DROP)
				dropped++;
			CHECK(memcmp(g + l, f + l, sizeof(g) - l) == 0); /* nothing written past len */
		}
	}
	CHECK_EQ(n.st.malformed + n.st.non_ip, dropped);
	CHECK_EQ(n.st.translated_out, 0);
	/* random bytes with a plausible header, both directions */
	srand(5);
	for (int round = 0; round < 200000; round++) {
		uint32_t l = (uint32_t)rand() % 120;
		for (uint32_t i = 0; i < sizeof(f); i++)
			f[i] = (uint8_t)rand();
		f[12] = 0x08;
		f[13] = 0x00;
		if (rand() % 2) {
			f[14] = 0x45;
			f[20] = 0;
			f[21] = 0;
			f[23] = (uint8_t[]){ 1, 6, 17 }[rand() % 3];
			cs_put16(f + 16, (uint16_t)(rand() % 100));
			if (f[23] == 1 && rand() % 2) {
				f[34] = (uint8_t)(rand() % 2 ? 3 : 11);
				f[42] = 0x45;
			}
		}
		memcpy(g, f, sizeof(g));
		nat_packet(&n, f, l, rand() % 2, (uint64_t)round);
		CHECK(memcmp(f + l, g + l, sizeof(f) - l) == 0);
	}
	nat_free(&n.t);
}

int main(void)
{
	test_table();
	test_conf();
	test_packets();
	test_hostile();
	printf("test_nat: ok\n");
	return 0;
}
