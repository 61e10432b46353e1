/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests of the firewall NF's logic (nfs/firewall/pkt.h, rules.h, conntrack.h):
 * rule-file parsing and its error messages, first-match evaluation, the packet parser on good,
 * truncated and random frames, and the conntrack table against a brute-force model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "firewall/conntrack.h"
#include "firewall/rules.h"

/* ---- frames ---- */

static uint32_t eth(uint8_t *p, uint16_t type)
{
	memset(p, 0, 12);
	p[0] = 2;
	p[6] = 2;
	p[12] = (uint8_t)(type >> 8);
	p[13] = (uint8_t)type;
	return 14;
}

/* IPv4 header at p, total length tot, protocol proto. */
static void ip4(uint8_t *p, uint16_t tot, uint8_t proto, const char *src, const char *dst)
{
	memset(p, 0, 20);
	p[0] = 0x45;
	p[2] = (uint8_t)(tot >> 8);
	p[3] = (uint8_t)tot;
	p[8] = 64;
	p[9] = proto;
	inet_pton(AF_INET, src, p + 12);
	inet_pton(AF_INET, dst, p + 16);
}

static void ip6(uint8_t *p, uint16_t plen, uint8_t nh, const char *src, const char *dst)
{
	memset(p, 0, 40);
	p[0] = 0x60;
	p[4] = (uint8_t)(plen >> 8);
	p[5] = (uint8_t)plen;
	p[6] = nh;
	p[7] = 64;
	inet_pton(AF_INET6, src, p + 8);
	inet_pton(AF_INET6, dst, p + 24);
}

static void ports(uint8_t *p, uint16_t s, uint16_t d)
{
	p[0] = (uint8_t)(s >> 8);
	p[1] = (uint8_t)s;
	p[2] = (uint8_t)(d >> 8);
	p[3] = (uint8_t)d;
}

/* Ethernet + IPv4 + TCP (20 bytes, flags) */
static uint32_t tcp4(uint8_t *f, const char *s, const char *d, uint16_t sp, uint16_t dp, uint8_t flags)
{
	uint32_t o = eth(f, 0x0800);
	ip4(f + o, 40, 6, s, d);
	memset(f + o + 20, 0, 20);
	ports(f + o + 20, sp, dp);
	f[o + 32] = 0x50;
	f[o + 33] = flags;
	return o + 40;
}

static uint32_t udp6(uint8_t *f, const char *s, const char *d, uint16_t sp, uint16_t dp)
{
	uint32_t o = eth(f, 0x86dd);
	/* with a destination-options extension header (8 bytes) before UDP */
	ip6(f + o, 16, 60, s, d);
	memset(f + o + 40, 0, 8);
	f[o + 40] = 17;
	memset(f + o + 48, 0, 8);
	ports(f + o + 48, sp, dp);
	return o + 56;
}

static void test_parse_frames(void)
{
	uint8_t f[256];
	struct fw_pkt k;
	uint32_t n = tcp4(f, "10.0.0.1", "10.0.0.2", 1234, 80, FW_TCP_SYN);
	CHECK_EQ(fw_parse(f, n, &k), FW_K_IP);
	CHECK_EQ(k.t.family, 4);
	CHECK_EQ(k.t.proto, 6);
	CHECK_EQ(k.t.sport, 1234);
	CHECK_EQ(k.t.dport, 80);
	CHECK_EQ(k.tcp_flags, FW_TCP_SYN);
	CHECK(k.t.has_ports && !k.frag);
	/* Ethernet padding after the IP packet is fine */
	CHECK_EQ(fw_parse(f, n + 6, &k), FW_K_IP);
	/* every truncation is malformed, never a read past len (ASan build) */
	for (uint32_t l = 0; l < n; l++)
		CHECK_EQ(fw_parse(f, l, &k), FW_K_MALFORMED);
	/* IP total length beyond the frame */
	f[14 + 3] = 41;
	CHECK_EQ(fw_parse(f, n, &k), FW_K_MALFORMED);
	f[14 + 3] = 40;
	/* TCP data offset < 5 */
	f[14 + 32] = 0x40;
	CHECK_EQ(fw_parse(f, n, &k), FW_K_MALFORMED);
	f[14 + 32] = 0x50;
	/* a non-first fragment: no ports, not malformed even without an L4 header */
	f[14 + 6] = 0x00;
	f[14 + 7] = 0x10;
	f[14 + 3] = 20;
	CHECK_EQ(fw_parse(f, 34, &k), FW_K_IP);
	CHECK(k.frag && !k.t.has_ports);

	n = udp6(f, "fd00::1", "fd00::2", 53, 5353);
	CHECK_EQ(fw_parse(f, n, &k), FW_K_IP);
	CHECK_EQ(k.t.family, 6);
	CHECK_EQ(k.t.proto, 17);
	CHECK_EQ(k.t.sport, 53);
	CHECK_EQ(k.t.dport, 5353);
	for (uint32_t l = 14; l < n; l++)
		CHECK_EQ(fw_parse(f, l, &k), FW_K_MALFORMED);

	/* ARP, VLAN-tagged IPv4, a truncated VLAN tag */
	n = eth(f, 0x0806);
	memset(f + n, 0, 28);
	CHECK_EQ(fw_parse(f, n + 28, &k), FW_K_NON_IP);
	n = eth(f, 0x8100);
	f[14] = 0;
	f[15] = 5;
	f[16] = 0x08;
	f[17] = 0x00;
	ip4(f + 18, 28, 17, "1.2.3.4", "5.6.7.8");
	ports(f + 38, 1, 2);
	f[42] = 0;
	f[43] = 8;
	CHECK_EQ(fw_parse(f, 18 + 28, &k), FW_K_IP);
	CHECK_EQ(k.t.dport, 2);
	CHECK_EQ(fw_parse(f, 16, &k), FW_K_MALFORMED);

	/* ICMP echo request: id in both ports */
	n = eth(f, 0x0800);
	ip4(f + n, 28, 1, "10.0.0.1", "10.0.0.2");
	memset(f + n + 20, 0, 8);
	f[n + 20] = 8;
	f[n + 24] = 0x12;
	f[n + 25] = 0x34;
	CHECK_EQ(fw_parse(f, n + 28, &k), FW_K_IP);
	CHECK_EQ(k.icmp, FW_ICMP_ECHO_REQ);
	CHECK_EQ(k.t.sport, 0x1234);
	CHECK_EQ(k.t.dport, 0x1234);
	CHECK_EQ(fw_parse(f, n + 27, &k), FW_K_MALFORMED);

	/* ICMP port unreachable quoting a UDP packet 10.0.0.1:1000 -> 10.0.0.2:53 */
	ip4(f + n, 20 + 8 + 28, 1, "10.0.0.2", "10.0.0.1");
	memset(f + n + 20, 0, 8);
	f[n + 20] = 3;
	f[n + 21] = 3;
	ip4(f + n + 28, 60, 17, "10.0.0.1", "10.0.0.2"); /* quoted total length > quote: allowed */
	ports(f + n + 48, 1000, 53);
	f[n + 52] = 0;
	f[n + 53] = 40;
	CHECK_EQ(fw_parse(f, n + 56, &k), FW_K_IP);
	CHECK_EQ(k.icmp, FW_ICMP_ERROR);
	CHECK(k.has_inner);
	CHECK_EQ(k.inner.sport, 1000);
	CHECK_EQ(k.inner.dport, 53);
	CHECK_EQ(k.inner.proto, 17);
	/* a quote too short for ports: an error without a usable inner tuple */
	f[n + 3] = 20 + 8 + 22;
	CHECK_EQ(fw_parse(f, n + 50, &k), FW_K_IP);
	CHECK(!k.has_inner);

	/* ICMPv6 neighbor solicitation */
	n = eth(f, 0x86dd);
	ip6(f + n, 24, 58, "fe80::1", "ff02::1:ff00:2");
	memset(f + n + 40, 0, 24);
	f[n + 40] = 135;
	CHECK_EQ(fw_parse(f, n + 64, &k), FW_K_ND);

	/* random frames: never crash, never read out of bounds (ASan) */
	srand(7);
	for (int it = 0; it < 200000; it++) {
		uint32_t len = (uint32_t)(rand() % 120);
		uint8_t *buf = malloc(len ? len : 1);
		for (uint32_t i = 0; i < len; i++)
			buf[i] = (uint8_t)rand();
		if (len >= 14 && (rand() & 1)) { /* make it look like IP most of the time */
			int v6 = rand() & 1;
			buf[12] = v6 ? 0x86 : 0x08;
			buf[13] = v6 ? 0xdd : 0x00;
			if (len > 14)
				buf[14] = (uint8_t)((v6 ? 0x60 : 0x45) | (buf[14] & (rand() & 1 ? 0x0f : 0)));
		}
		fw_parse(buf, len, &k);
		free(buf);
	}
}

/* ---- rules ---- */

static int ports_cb(void *arg, const char *name)
{
	(void)arg;
	if (strcmp(name, "lan") == 0)
		return 0;
	if (strcmp(name, "wan") == 0)
		return 1;
	return -1;
}

static void expect_err(const char *text, const char *want)
{
	struct fw_ruleset rs;
	char err[512];
	int rc = fw_rules_parse("fw.rules", text, &rs, err, sizeof(err));
	if (rc == 0 || strcmp(err, want) != 0) {
		fprintf(stderr, "rules %s\n  want error: %s\n  got (rc %d): %s\n", text, want, rc,
			rc ? err : "");
		exit(1);
	}
}

static void test_rules(void)
{
	const char *text = "# a firewall between lan and wan\n"
			   "\n"
			   "default drop\n"
			   "allow in lan proto tcp dport 22 name ssh   # admins\n"
			   "drop  src 10.9.0.0/16\n"
			   "allow in lan proto udp sport 1024-65535 dport 53\n"
			   "allow proto icmp\n"
			   "allow dst fd00:1::/64 proto icmpv6 stateless\n"
			   "allow family ipv6 proto 47\n";
	struct fw_ruleset rs;
	char err[512];
	CHECK_EQ(fw_rules_parse("fw.rules", text, &rs, err, sizeof(err)), 0);
	CHECK_EQ(rs.n, 6);
	CHECK_EQ(rs.default_action, FW_DROP);
	CHECK_EQ(rs.r[0].line, 4);
	CHECK(strcmp(rs.r[0].label, "ssh") == 0);
	CHECK_EQ(rs.r[0].dport_lo, 22);
	CHECK_EQ(rs.r[0].dport_hi, 22);
	CHECK_EQ(rs.r[2].sport_lo, 1024);
	CHECK_EQ(rs.r[3].family, 4);
	CHECK_EQ(rs.r[4].family, 6);
	CHECK(rs.r[4].stateless);
	CHECK_EQ(rs.r[5].proto, 47);
	CHECK_EQ(fw_rules_resolve(&rs, "fw.rules", ports_cb, NULL, err, sizeof(err)), 0);
	CHECK_EQ(rs.r[0].in_port, 0);
	CHECK_EQ(rs.r[1].in_port, -1);

	uint8_t f[256];
	struct fw_pkt k;
	fw_parse(f, tcp4(f, "10.0.0.1", "10.1.0.1", 40000, 22, FW_TCP_SYN), &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), 0);
	CHECK_EQ(fw_rules_eval(&rs, &k, 1), -1); /* from wan: no rule, default */
	fw_parse(f, tcp4(f, "10.9.3.1", "10.1.0.1", 40000, 22, FW_TCP_SYN), &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), 0); /* first match wins */
	CHECK_EQ(fw_rules_eval(&rs, &k, 1), 1);
	fw_parse(f, tcp4(f, "10.9.3.1", "10.1.0.1", 40000, 23, FW_TCP_SYN), &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), 1);
	fw_parse(f, tcp4(f, "10.10.0.1", "10.1.0.1", 40000, 23, FW_TCP_SYN), &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), -1); /* 10.10/16 is outside 10.9/16 */
	/* UDP port ranges */
	uint32_t n = udp6(f, "fd00::1", "fd00::2", 1024, 53);
	fw_parse(f, n, &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), 2); /* no family: IPv6 too */
	CHECK_EQ(fw_rules_eval(&rs, &k, 1), -1);
	n = eth(f, 0x0800);
	ip4(f + n, 28, 17, "10.0.0.1", "10.1.0.1");
	ports(f + n + 20, 1023, 53);
	f[n + 24] = 0;
	f[n + 25] = 8;
	fw_parse(f, n + 28, &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), -1);
	ports(f + n + 20, 1024, 53);
	fw_parse(f, n + 28, &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), 2);
	ports(f + n + 20, 65535, 53);
	fw_parse(f, n + 28, &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), 2);
	/* a non-first fragment never matches a rule with ports */
	f[n + 7] = 0x20;
	fw_parse(f, n + 28, &k);
	CHECK(k.frag);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), -1);
	fw_rules_free(&rs);

	/* prefixes: host bits masked, /0, IPv6 */
	CHECK_EQ(fw_rules_parse("x", "default allow\ndrop src 10.1.2.3/8\ndrop dst ::/0", &rs, err,
				sizeof(err)), 0);
	CHECK_EQ(rs.default_action, FW_ALLOW);
	fw_parse(f, tcp4(f, "10.200.0.1", "1.1.1.1", 1, 2, FW_TCP_ACK), &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), 0);
	fw_parse(f, tcp4(f, "11.0.0.1", "1.1.1.1", 1, 2, FW_TCP_ACK), &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), -1);
	fw_parse(f, udp6(f, "fd00::1", "2001:db8::1", 1, 2), &k);
	CHECK_EQ(fw_rules_eval(&rs, &k, 0), 1);
	fw_rules_free(&rs);

	/* errors name the line and the field */
	expect_err("allow proto tcp\nallow proto tcp dport 99999\n",
		   "fw.rules:2: dport: '99999' is not a port or range (0..65535, N-M)");
	expect_err("allow proto udp sport 90-80", "fw.rules:1: sport: '90-80' is not a port or range (0..65535, N-M)");
	expect_err("allow dport 80", "fw.rules:1: dport: needs proto tcp or udp");
	expect_err("\n\nallow proto tcp dport", "fw.rules:3: dport: missing value");
	expect_err("allow src 10.0.0.0/33", "fw.rules:1: src: '10.0.0.0/33' is not an address or prefix");
	expect_err("allow dst 10.0.0.x", "fw.rules:1: dst: '10.0.0.x' is not an address or prefix");
	expect_err("allow src 10.0.0.0/8 dst fd00::/8", "fw.rules:1: dst: is IPv6 but src is IPv4");
	expect_err("allow proto icmp src fd00::1", "fw.rules:1: src: is IPv6 but proto is IPv4");
	expect_err("allow family ipv6 proto icmp", "fw.rules:1: proto: is IPv4 but family is IPv6");
	expect_err("allow proto sctp", "fw.rules:1: proto: 'sctp' is not tcp, udp, icmp, icmpv6 or 0..255");
	expect_err("allow proto 256", "fw.rules:1: proto: '256' is not tcp, udp, icmp, icmpv6 or 0..255");
	expect_err("permit proto tcp", "fw.rules:1: action: 'permit' is not allow, drop or default");
	expect_err("allow port 80", "fw.rules:1: 'port': unknown field (expected in, family, proto, src, "
				    "dst, sport, dport, stateless, name)");
	expect_err("allow proto tcp proto udp", "fw.rules:1: proto: given twice");
	expect_err("default drop\ndefault allow", "fw.rules:2: default: given twice (first on line 1)");
	expect_err("default reject", "fw.rules:1: default: expected 'default allow' or 'default drop'");
	expect_err("drop stateless", "fw.rules:1: stateless: only for allow rules");
	expect_err("allow name a\nallow name a", "fw.rules:2: name: 'a' already names the rule on line 1");
	expect_err("allow name bad/name", "fw.rules:1: name: 'bad/name' is not 1-18 characters of [A-Za-z0-9_.:-]");
	expect_err("allow family ipx", "fw.rules:1: family: 'ipx' is not ipv4 or ipv6");

	CHECK_EQ(fw_rules_parse("fw.rules", "allow in dmz", &rs, err, sizeof(err)), 0);
	CHECK_EQ(fw_rules_resolve(&rs, "fw.rules", ports_cb, NULL, err, sizeof(err)), -1);
	CHECK(strcmp(err, "fw.rules:1: in: sluiced has no port 'dmz'") == 0);
	fw_rules_free(&rs);
}

/* ---- conntrack ---- */

static void tuple(struct fw_tuple *t, uint32_t a, uint32_t b, uint16_t sp, uint16_t dp, uint8_t proto)
{
	memset(t, 0, sizeof(*t));
	t->family = 4;
	t->proto = proto;
	memcpy(t->src, &a, 4);
	memcpy(t->dst, &b, 4);
	t->sport = sp;
	t->dport = dp;
	t->has_ports = 1;
}

static void test_ct_basic(void)
{
	struct fw_ct ct;
	struct fw_tuple t, r;
	struct fw_ct_key k1, k2;
	CHECK_EQ(fw_ct_init(&ct, 4), 0);
	tuple(&t, 1, 2, 1000, 80, 6);
	tuple(&r, 2, 1, 80, 1000, 6);
	int d1 = fw_ct_key(&t, &k1), d2 = fw_ct_key(&r, &k2);
	CHECK(fw_ct_key_eq(&k1, &k2)); /* both directions: one key */
	CHECK(d1 != d2);
	uint32_t h = fw_ct_hash(&k1);
	CHECK(fw_ct_find(&ct, &k1, h, 0) == NULL);
	struct fw_ct_entry *e = fw_ct_insert(&ct, &k1, h, 0);
	CHECK(e != NULL);
	e->orig_dir = (uint8_t)d1;
	fw_ct_touch(&ct, e, d1, FW_TCP_SYN, 0);
	CHECK_EQ(e->expire, ct.timeout_ns[FW_TO_TCP_SYN]);
	CHECK(fw_ct_find(&ct, &k2, fw_ct_hash(&k2), 1) == e);
	fw_ct_touch(&ct, e, d2, FW_TCP_SYN | FW_TCP_ACK, 1);
	CHECK(e->replied);
	CHECK_EQ(e->expire, 1 + ct.timeout_ns[FW_TO_TCP]);
	fw_ct_touch(&ct, e, d1, FW_TCP_FIN | FW_TCP_ACK, 2);
	CHECK(e->closing);
	CHECK_EQ(e->expire, 2 + ct.timeout_ns[FW_TO_TCP_CLOSE]);
	/* expired: gone at lookup */
	CHECK(fw_ct_find(&ct, &k1, h, e->expire) == NULL);
	CHECK_EQ(ct.count, 0);

	/* full table */
	for (uint32_t i = 0; i < 4; i++) {
		tuple(&t, 10, 20, (uint16_t)i, 1, 17);
		fw_ct_key(&t, &k1);
		e = fw_ct_insert(&ct, &k1, fw_ct_hash(&k1), 0);
		CHECK(e != NULL);
		fw_ct_touch(&ct, e, 0, 0, 0);
	}
	tuple(&t, 10, 20, 99, 1, 17);
	fw_ct_key(&t, &k1);
	CHECK(fw_ct_insert(&ct, &k1, fw_ct_hash(&k1), 0) == NULL);
	/* once they expired, the sweep inside insert makes room */
	CHECK(fw_ct_insert(&ct, &k1, fw_ct_hash(&k1), ct.timeout_ns[FW_TO_UDP]) != NULL);
	CHECK_EQ(ct.count, 1);
	fw_ct_free(&ct);

	/* can_create mirrors Linux: SYN or ACK, not SYN-ACK, FIN, RST; echo requests only */
	struct fw_pkt k;
	memset(&k, 0, sizeof(k));
	k.t.proto = 6;
	k.tcp_flags = FW_TCP_SYN;
	CHECK(fw_ct_can_create(&k));
	k.tcp_flags = FW_TCP_ACK | 0x08;
	CHECK(fw_ct_can_create(&k));
	k.tcp_flags = FW_TCP_SYN | FW_TCP_ACK;
	CHECK(!fw_ct_can_create(&k));
	k.tcp_flags = FW_TCP_RST;
	CHECK(!fw_ct_can_create(&k));
	k.tcp_flags = FW_TCP_FIN | FW_TCP_ACK;
	CHECK(!fw_ct_can_create(&k));
	k.t.proto = 1;
	k.icmp = FW_ICMP_ECHO_REP;
	CHECK(!fw_ct_can_create(&k));
	k.icmp = FW_ICMP_ECHO_REQ;
	CHECK(fw_ct_can_create(&k));
}

/* Random inserts, lookups and expiries against a brute-force list: checks backward-shift deletion. */
static void test_ct_model(void)
{
	enum { MAX = 300, KEYS = 800 };
	struct fw_ct ct;
	static uint64_t model[KEYS]; /* expire time, 0 = absent */
	CHECK_EQ(fw_ct_init(&ct, MAX), 0);
	ct.mask = 511; /* use only 512 slots: dense table, long probe chains */
	srand(11);
	uint64_t now = 1;
	for (int it = 0; it < 400000; it++) {
		uint32_t id = (uint32_t)rand() % KEYS;
		struct fw_tuple t;
		struct fw_ct_key k;
		tuple(&t, id * 7919u, 5, (uint16_t)id, 9, 17);
		fw_ct_key(&t, &k);
		if (rand() % 16 == 0)
			now += (uint64_t)(rand() % 50);
		if (rand() % 64 == 0)
			fw_ct_sweep(&ct, now, (uint32_t)(rand() % 100));
		/* a third of the keys share 16 home slots: long probe chains, many shifts */
		uint32_t h = (id % 3 == 0) ? (id & 0xf) : fw_ct_hash(&k);
		struct fw_ct_entry *e = fw_ct_find(&ct, &k, h, now);
		int live = model[id] > now;
		CHECK_EQ(e != NULL, live);
		if (!live)
			model[id] = 0;
		if (e == NULL && rand() % 2) {
			e = fw_ct_insert(&ct, &k, h, now);
			if (e == NULL) {
				CHECK(ct.count >= MAX);
				continue;
			}
			e->expire = now + 1 + (uint64_t)(rand() % 200);
			model[id] = e->expire;
		} else if (e != NULL && rand() % 2) {
			e->expire = now + 1 + (uint64_t)(rand() % 200);
			model[id] = e->expire;
		}
		CHECK(ct.count <= MAX);
	}
	/* every slot's entry is reachable from its home slot */
	for (uint32_t i = 0; i <= ct.mask; i++) {
		if (!ct.slot[i].used)
			continue;
		for (uint32_t j = ct.slot[i].hash & ct.mask; j != i; j = (j + 1) & ct.mask)
			CHECK(ct.slot[j].used);
	}
	fw_ct_free(&ct);
}

int main(void)
{
	test_parse_frames();
	test_rules();
	test_ct_basic();
	test_ct_model();
	printf("firewall: ok\n");
	return 0;
}
