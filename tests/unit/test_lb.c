/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The lb NF's logic (nfs/lb/): config parsing and its errors, Maglev balance and minimal
 * disruption (measured), NAT-mode rewriting with valid checksums (IPv4/IPv6, TCP/UDP), connection
 * affinity across reloads (added, disabled, removed and `down` backends), timeouts, a full table,
 * no backend, and every truncation of real frames.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lb/pkt.h"

#define S 1000000000ull

/* ---------------------------------------------------------------- helpers */

static struct lb LB; /* large: static */

static int load(struct lb_conf *c, const char *text)
{
	char err[512];
	int rc = lb_conf_parse(c, text, "t.conf", err, sizeof(err));
	if (rc < 0)
		fprintf(stderr, "parse: %s\n", err);
	return rc;
}

static void apply(struct lb *lb, const char *text)
{
	static struct lb_conf c;
	char err[512];
	CHECK(load(&c, text) == 0);
	int rc = lb_apply(lb, &c, err, sizeof(err));
	if (rc < 0)
		fprintf(stderr, "apply: %s\n", err);
	CHECK(rc == 0);
}

static void expect_err(const char *text, const char *msg)
{
	static struct lb_conf c;
	char err[512] = "";
	CHECK(lb_conf_parse(&c, text, "t.conf", err, sizeof(err)) < 0);
	if (strstr(err, msg) == NULL) {
		fprintf(stderr, "expected '%s' in '%s'\n", msg, err);
		CHECK(0);
	}
}

/* An Ethernet + IPv4 or IPv6 + TCP/UDP frame with correct checksums; returns its length. */
static unsigned frame(uint8_t *p, int family, uint8_t proto, const char *src, uint16_t sport, const char *dst,
		      uint16_t dport, uint8_t tcpf, unsigned payload)
{
	memset(p, 0, 200);
	memcpy(p, "\x02\0\0\0\0\x02\x02\0\0\0\0\x01", 12);
	unsigned l3 = 14, iphl = family == 4 ? 20 : 40, l4hl = proto == 6 ? 20 : 8;
	unsigned l4len = l4hl + payload;
	uint8_t *ip = p + l3, *l4 = ip + iphl;
	uint8_t a[16];
	if (family == 4) {
		p[12] = 0x08;
		ip[0] = 0x45;
		cs_put16(ip + 2, (uint16_t)(iphl + l4len));
		ip[8] = 64;
		ip[9] = proto;
		CHECK(lb_parse_addr(src, 4, a) == 4);
		memcpy(ip + 12, a, 4);
		CHECK(lb_parse_addr(dst, 4, a) == 4);
		memcpy(ip + 16, a, 4);
		cs_put16(ip + 10, cs_compute(ip, 20, 0));
	} else {
		p[12] = 0x86;
		p[13] = 0xdd;
		ip[0] = 0x60;
		cs_put16(ip + 4, (uint16_t)l4len);
		ip[6] = proto;
		ip[7] = 64;
		CHECK(lb_parse_addr(src, 6, a) == 6);
		memcpy(ip + 8, a, 16);
		CHECK(lb_parse_addr(dst, 6, a) == 6);
		memcpy(ip + 24, a, 16);
	}
	cs_put16(l4, sport);
	cs_put16(l4 + 2, dport);
	for (unsigned i = 0; i < payload; i++)
		l4[l4hl + i] = (uint8_t)(i * 7 + 1);
	if (proto == 6) {
		l4[12] = 5 << 4;
		l4[13] = tcpf;
		cs_put16(l4 + 14, 8192);
	} else {
		cs_put16(l4 + 4, (uint16_t)l4len);
	}
	uint64_t ps = family == 4 ? cs_pseudo4(ip, proto, l4len) : cs_pseudo6(ip, proto, l4len);
	uint16_t ck = cs_compute(l4, l4len, ps);
	if (proto == 17 && ck == 0)
		ck = 0xffff;
	cs_put16(l4 + (proto == 6 ? 16 : 6), ck);
	return l3 + iphl + l4len;
}

/* Every checksum of a frame made by frame() is right. */
static int checksums_ok(const uint8_t *p, unsigned len)
{
	const uint8_t *ip = p + 14;
	int family = (ip[0] >> 4) == 4 ? 4 : 6;
	unsigned iphl = family == 4 ? 20 : 40;
	uint8_t proto = family == 4 ? ip[9] : ip[6];
	unsigned l4len = len - 14 - iphl;
	const uint8_t *l4 = ip + iphl;
	if (family == 4 && cs_fold(cs_sum(ip, 20, 0)) != 0xffff)
		return 0;
	if (proto == 17 && pp_be16(l4 + 6) == 0)
		return 1;
	uint64_t ps = family == 4 ? cs_pseudo4(ip, proto, l4len) : cs_pseudo6(ip, proto, l4len);
	return cs_fold(cs_sum(l4, l4len, ps)) == 0xffff;
}

/* "a.b.c.d:port" / "[v6]:port" of the frame's source (dst = 0) or destination. */
static const char *endpoint(const uint8_t *p, int dst)
{
	static char buf[2][80];
	const uint8_t *ip = p + 14;
	char a[64];
	if ((ip[0] >> 4) == 4) {
		inet_ntop(AF_INET, ip + 12 + 4 * dst, a, sizeof(a));
		snprintf(buf[dst], sizeof(buf[dst]), "%s:%u", a, pp_be16(ip + 20 + 2 * dst));
	} else {
		inet_ntop(AF_INET6, ip + 8 + 16 * dst, a, sizeof(a));
		snprintf(buf[dst], sizeof(buf[dst]), "[%s]:%u", a, pp_be16(ip + 40 + 2 * dst));
	}
	return buf[dst];
}

/* Send client cport -> VIP; returns the backend's name it went to, or NULL (dropped / passed). */
static const char *connect_tcp(struct lb *lb, uint16_t cport, uint8_t flags, uint64_t now)
{
	uint8_t p[256];
	unsigned n = frame(p, 4, 6, "10.0.0.1", cport, "10.80.0.100", 80, flags, 10);
	if (lb_packet(lb, p, n, now) != LB_FWD)
		return NULL;
	CHECK(checksums_ok(p, n));
	for (unsigned s = 0; s < lb->n_slots; s++) {
		char want[64], a[32];
		inet_ntop(AF_INET, lb->slot[s].addr, a, sizeof(a));
		snprintf(want, sizeof(want), "%s:%u", a, lb->slot[s].port);
		if (lb->slot[s].used && strcmp(endpoint(p, 1), want) == 0)
			return lb->slot[s].name;
	}
	CHECK(0);
	return NULL;
}

/* ---------------------------------------------------------------- config */

static void test_conf(void)
{
	static struct lb_conf c;
	CHECK(load(&c, "# web\nvip 10.80.0.100 tcp 80\n"
		       "backend web1 10.80.1.11:8080 weight 3\n"
		       "  backend web2 10.80.1.12 disabled   # comment\n"
		       "backend web3 10.80.1.13 down\n\n"
		       "vip fd80::100 udp 53\nbackend dns1 [fd80::1]:5353\nbackend dns2 fd80::2\n") == 0);
	CHECK_EQ(c.n_svc, 2);
	CHECK_EQ(c.n_be, 5);
	CHECK_EQ(c.svc[0].family, 4);
	CHECK_EQ(c.svc[0].proto, 6);
	CHECK_EQ(c.svc[0].port, 80);
	CHECK_EQ(c.svc[0].n_be, 3);
	CHECK_EQ(c.be[0].port, 8080);
	CHECK_EQ(c.be[0].weight, 3);
	CHECK_EQ(c.be[0].addr[3], 11);
	CHECK_EQ(c.be[1].port, 80);
	CHECK_EQ(c.be[1].state, LB_BE_DISABLED);
	CHECK_EQ(c.be[2].state, LB_BE_DOWN);
	CHECK_EQ(c.svc[1].family, 6);
	CHECK_EQ(c.svc[1].proto, 17);
	CHECK_EQ(c.be[3].port, 5353);
	CHECK_EQ(c.be[4].port, 53);
	CHECK_EQ(c.be[4].addr[15], 2);

	expect_err("vip 10.80.0.100 tcp 80\nbackend a 10.0.0.1\nbackend b 10.0.0.2 weight 0\n",
		   "t.conf:3: weight: '0' is not 1..1000");
	expect_err("vip 10.80.0.1000 tcp 80\n", "t.conf:1: vip address: '10.80.0.1000' is not an IPv4 or IPv6");
	expect_err("vip 10.80.0.1 sctp 80\n", "t.conf:1: vip protocol: 'sctp' is not tcp or udp");
	expect_err("vip 10.80.0.1 tcp 0\n", "t.conf:1: vip port: '0' is not 1..65535");
	expect_err("vip 10.80.0.1 tcp\n", "t.conf:1: vip: expected");
	expect_err("backend a 10.0.0.1\n", "t.conf:1: backend: comes before any vip line");
	expect_err("vip 10.80.0.1 tcp 80\nbackend a 10.0.0.1:99999\n", "t.conf:2: backend port: '99999' is not 1..65535");
	expect_err("vip 10.80.0.1 tcp 80\nbackend a fd00::1\n", "t.conf:2: backend address: 'fd00::1' is IPv6 but the vip is IPv4");
	expect_err("vip 10.80.0.1 tcp 80\nbackend a 10.0.0.1\nbackend a 10.0.0.2\n",
		   "t.conf:3: backend name: 'a' is already used on line 2");
	expect_err("vip 10.80.0.1 tcp 80\nbackend a 10.0.0.1\nbackend b 10.0.0.1:80\n",
		   "t.conf:3: backend address: '10.0.0.1:80' is already backend 'a'");
	expect_err("vip 10.80.0.1 tcp 80\nbackend this-name-is-too-long 10.0.0.1\n", "t.conf:2: backend name:");
	expect_err("vip 10.80.0.1 tcp 80\nbackend a 10.0.0.1 fast\n", "t.conf:2: 'fast': unknown field");
	expect_err("vip 10.80.0.1 tcp 80\nbackend a 10.0.0.1 disabled down\n", "t.conf:2: down: a state is given twice");
	expect_err("vip 10.80.0.1 tcp 80\nbackend a 10.0.0.1\nvip 10.80.0.1 tcp 80\n",
		   "t.conf:3: vip: 10.80.0.1 tcp 80 is already defined on line 1");
	expect_err("vip 10.80.0.1 tcp 80\nvip 10.80.0.1 tcp 81\nbackend a 10.0.0.1\n", "t.conf:1: vip: has no backend lines");
	expect_err("# nothing\n", "t.conf: no vip line");
	expect_err("vip 10.80.0.1 tcp 80\nbackend a 10.0.0.1\nfrontend x\n", "t.conf:3: 'frontend': unknown statement");
	char err[256];
	CHECK(lb_conf_load(&c, "/nonexistent/lb.conf", err, sizeof(err)) < 0 && strstr(err, "cannot open"));
}

/* ---------------------------------------------------------------- Maglev */

static const char *bname(unsigned i)
{
	static char names[64][16];
	snprintf(names[i], sizeof(names[i]), "backend-%u", i);
	return names[i];
}

static void build(uint16_t *t, uint32_t m, const unsigned *ids, const unsigned *weights, unsigned n)
{
	struct lb_maglev_be be[64];
	for (unsigned i = 0; i < n; i++)
		be[i] = (struct lb_maglev_be){ .name = bname(ids[i]), .id = (uint16_t)ids[i],
					       .weight = (uint16_t)(weights ? weights[i] : 1) };
	CHECK(lb_maglev_build(t, m, be, n) == 0);
}

static void test_maglev(void)
{
	const uint32_t M = LB_MAGLEV_M_DEFAULT;
	uint16_t *a = malloc(M * 2), *b = malloc(M * 2);
	unsigned ids[64];
	for (unsigned i = 0; i < 64; i++)
		ids[i] = i;
	CHECK(lb_maglev_build(a, 65536, NULL, 0) < 0); /* not prime */

	/* balance: every backend within 0.5 % of 1/N (measured: under 0.05 % with M = 65537) */
	for (unsigned n = 2; n <= 40; n += 19) {
		build(a, M, ids, NULL, n);
		unsigned cnt[64] = { 0 };
		for (uint32_t i = 0; i < M; i++) {
			CHECK(a[i] < n);
			cnt[a[i]]++;
		}
		double worst = 0;
		for (unsigned i = 0; i < n; i++) {
			double dev = (double)cnt[i] * n / M - 1.0;
			worst = dev > worst ? dev : -dev > worst ? -dev : worst;
		}
		printf("maglev M=%u N=%u: worst share deviation %.3f %%\n", M, n, worst * 100);
		CHECK(worst < 0.005);
	}
	/* weights 1:2:3 -> shares 1/6, 2/6, 3/6 within 2 % */
	{
		unsigned w[3] = { 1, 2, 3 }, cnt[3] = { 0 };
		build(a, M, ids, w, 3);
		for (uint32_t i = 0; i < M; i++)
			cnt[a[i]]++;
		for (unsigned i = 0; i < 3; i++) {
			double share = (double)cnt[i] / M, want = w[i] / 6.0;
			printf("maglev weight %u: share %.4f (want %.4f)\n", w[i], share, want);
			CHECK(share > want * 0.98 && share < want * 1.02);
		}
	}
	/* the order of the backends does not matter */
	{
		unsigned rev[10];
		for (unsigned i = 0; i < 10; i++)
			rev[i] = 9 - i;
		build(a, M, ids, NULL, 10);
		build(b, M, rev, NULL, 10);
		CHECK(memcmp(a, b, M * 2) == 0);
	}
	/* minimal disruption. Removing backend r of N: its own ~1/N of the entries must move; the
	 * others should stay. Adding one: ~1/(N+1) move to it, few elsewhere. Measured over several N
	 * and removed backends; bound: at most 1 % of the table moves needlessly (measured: under
	 * 0.4 %), and at most a tenth of what modulo hashing (hash % N) would move. */
	for (unsigned n = 5; n <= 20; n += 5) {
		build(a, M, ids, NULL, n);
		for (unsigned r = 0; r < n; r += n / 2) {
			unsigned rest[64], k = 0;
			for (unsigned i = 0; i < n; i++)
				if (i != r)
					rest[k++] = i;
			build(b, M, rest, NULL, k);
			uint32_t own = 0, needless = 0;
			for (uint32_t i = 0; i < M; i++) {
				CHECK(b[i] != r);
				if (a[i] == r)
					own++;
				else if (a[i] != b[i])
					needless++;
			}
			/* modulo hashing: entry i goes to i % n; with n - 1 backends most entries move */
			uint32_t modulo = 0;
			for (uint32_t i = 0; i < M; i++)
				modulo += i % n != i % (n - 1);
			printf("maglev remove 1 of %u: own %.2f %% (1/N %.2f %%), needless %.2f %% (modulo: %.1f %%)\n",
			       n, 100.0 * own / M, 100.0 / n, 100.0 * needless / M, 100.0 * modulo / M);
			CHECK(needless < M / 100 && needless * 10 < modulo);
			/* adding r back gives exactly the first table (the build is deterministic) */
			build(b, M, ids, NULL, n);
			CHECK(memcmp(a, b, M * 2) == 0);
		}
		/* add backend n to the n first */
		build(b, M, ids, NULL, n + 1);
		uint32_t to_new = 0, needless = 0;
		for (uint32_t i = 0; i < M; i++) {
			if (b[i] == n)
				to_new++;
			else if (a[i] != b[i])
				needless++;
		}
		printf("maglev add 1 to %u: to the new one %.2f %% (1/(N+1) %.2f %%), needless %.2f %%\n", n,
		       100.0 * to_new / M, 100.0 / (n + 1), 100.0 * needless / M);
		CHECK(to_new > M / (n + 1) * 0.98 && to_new < M / (n + 1) * 1.02);
		CHECK(needless < M / 100);
	}
	/* a small prime table works too (every entry filled, all backends present) */
	{
		uint16_t t[251];
		build(t, 251, ids, NULL, 7);
		unsigned cnt[7] = { 0 };
		for (unsigned i = 0; i < 251; i++) {
			CHECK(t[i] < 7);
			cnt[t[i]]++;
		}
		for (unsigned i = 0; i < 7; i++)
			CHECK(cnt[i] >= 35 && cnt[i] <= 37);
	}
	free(a);
	free(b);
}

/* ---------------------------------------------------------------- packets */

static const char *CONF3 = "vip 10.80.0.100 tcp 80\n"
			   "backend web1 10.80.1.11\n"
			   "backend web2 10.80.1.12:8080\n"
			   "backend web3 10.80.1.13\n"
			   "vip 10.80.0.100 udp 53\n"
			   "backend dns1 10.80.2.1:5353\n"
			   "vip fd80::100 tcp 443\n"
			   "backend six1 [fd80:1::11]:8443\n";

static void test_rewrite_and_replies(void)
{
	struct lb *lb = &LB;
	CHECK(lb_init(lb, 1024, 251, 42) == 0);
	apply(lb, CONF3);
	uint8_t p[256], orig[256];
	uint64_t now = 1000 * S;

	/* client -> VIP: destination becomes the backend, checksums stay right */
	unsigned n = frame(p, 4, 6, "10.0.0.1", 40000, "10.80.0.100", 80, 0x02, 0);
	CHECK_EQ(lb_packet(lb, p, n, now), LB_FWD);
	CHECK(checksums_ok(p, n));
	CHECK(strcmp(endpoint(p, 0), "10.0.0.1:40000") == 0);
	char be[64];
	snprintf(be, sizeof(be), "%s", endpoint(p, 1));
	CHECK(strncmp(be, "10.80.1.1", 9) == 0);
	CHECK_EQ(lb->st.new_conns, 1);
	CHECK_EQ(lb->t.count, 1);
	/* the same connection again: same backend, no new entry */
	n = frame(p, 4, 6, "10.0.0.1", 40000, "10.80.0.100", 80, 0x10, 100);
	CHECK_EQ(lb_packet(lb, p, n, now), LB_FWD);
	CHECK(strcmp(endpoint(p, 1), be) == 0 && checksums_ok(p, n));
	CHECK_EQ(lb->st.new_conns, 1);
	/* the backend's reply: source becomes the VIP again */
	char bip[64];
	snprintf(bip, sizeof(bip), "%s", be);
	*strchr(bip, ':') = '\0';
	uint16_t bport = (uint16_t)atoi(strchr(be, ':') + 1);
	n = frame(p, 4, 6, bip, bport, "10.0.0.1", 40000, 0x12, 33);
	CHECK_EQ(lb_packet(lb, p, n, now), LB_FWD);
	CHECK(checksums_ok(p, n));
	CHECK(strcmp(endpoint(p, 0), "10.80.0.100:80") == 0);
	CHECK(strcmp(endpoint(p, 1), "10.0.0.1:40000") == 0);
	CHECK_EQ(lb->st.replies, 1);
	CHECK(lb->t.c[0].flags & LB_F_REPLY);

	/* not ours: unchanged, byte for byte */
	const char *others[][2] = { { "10.0.0.1", "10.80.0.101" }, { "10.80.1.11", "10.0.0.9" } };
	for (unsigned i = 0; i < 2; i++) {
		n = frame(p, 4, 6, others[i][0], 1234, others[i][1], 80, 0x02, 5);
		memcpy(orig, p, n);
		CHECK_EQ(lb_packet(lb, p, n, now), LB_PASS);
		CHECK(memcmp(p, orig, n) == 0);
	}
	n = frame(p, 4, 6, "10.0.0.1", 1234, "10.80.0.100", 81, 0x02, 5); /* the VIP, another port */
	CHECK_EQ(lb_packet(lb, p, n, now), LB_PASS);
	n = frame(p, 4, 17, "10.0.0.1", 1234, "10.80.0.100", 80, 0, 5); /* udp 80 is no service */
	CHECK_EQ(lb_packet(lb, p, n, now), LB_PASS);
	CHECK_EQ(lb->st.passed, 4);

	/* UDP service, with a checksum and without one (0 stays 0) */
	n = frame(p, 4, 17, "10.0.0.2", 5000, "10.80.0.100", 53, 0, 20);
	CHECK_EQ(lb_packet(lb, p, n, now), LB_FWD);
	CHECK(checksums_ok(p, n) && pp_be16(p + 34 + 6) != 0);
	CHECK(strcmp(endpoint(p, 1), "10.80.2.1:5353") == 0);
	n = frame(p, 4, 17, "10.0.0.2", 5001, "10.80.0.100", 53, 0, 20);
	cs_put16(p + 34 + 6, 0);
	CHECK_EQ(lb_packet(lb, p, n, now), LB_FWD);
	CHECK_EQ(pp_be16(p + 34 + 6), 0);
	CHECK(cs_fold(cs_sum(p + 14, 20, 0)) == 0xffff);
	n = frame(p, 4, 17, "10.80.2.1", 5353, "10.0.0.2", 5001, 0, 20);
	cs_put16(p + 34 + 6, 0);
	CHECK_EQ(lb_packet(lb, p, n, now), LB_FWD);
	CHECK(strcmp(endpoint(p, 0), "10.80.0.100:53") == 0 && pp_be16(p + 34 + 6) == 0);

	/* IPv6 */
	n = frame(p, 6, 6, "fd80:2::1", 33333, "fd80::100", 443, 0x02, 7);
	CHECK_EQ(lb_packet(lb, p, n, now), LB_FWD);
	CHECK(checksums_ok(p, n));
	CHECK(strcmp(endpoint(p, 1), "[fd80:1::11]:8443") == 0);
	n = frame(p, 6, 6, "fd80:1::11", 8443, "fd80:2::1", 33333, 0x12, 7);
	CHECK_EQ(lb_packet(lb, p, n, now), LB_FWD);
	CHECK(checksums_ok(p, n));
	CHECK(strcmp(endpoint(p, 0), "[fd80::100]:443") == 0);

	/* a VLAN tag in front changes nothing */
	n = frame(p, 4, 6, "10.0.0.7", 7777, "10.80.0.100", 80, 0x02, 0);
	memmove(p + 16, p + 12, n - 12);
	p[12] = 0x81;
	p[13] = 0;
	p[14] = 0;
	p[15] = 5;
	CHECK_EQ(lb_packet(lb, p, n + 4, now), LB_FWD);
	memmove(p + 12, p + 16, n - 12);
	CHECK(checksums_ok(p, n));
	CHECK(strncmp(endpoint(p, 1), "10.80.1.1", 9) == 0);

	/* per-backend counters add up */
	uint64_t pk = 0, cn = 0;
	for (unsigned s = 0; s < lb->n_slots; s++) {
		pk += *lb->slot[s].pkts;
		cn += *lb->slot[s].conns;
	}
	CHECK_EQ(cn, lb->st.new_conns);
	CHECK_EQ(pk, lb->st.forwarded + lb->st.replies);
	lb_free(lb);
}

static void test_balance_and_affinity(void)
{
	struct lb *lb = &LB;
	CHECK(lb_init(lb, 100000, LB_MAGLEV_M_DEFAULT, 7) == 0);
	apply(lb, CONF3);
	uint64_t now = 5 * S;
	const char *first[3000];
	unsigned cnt[3] = { 0 };
	for (unsigned i = 0; i < 3000; i++) {
		first[i] = connect_tcp(lb, (uint16_t)(10000 + i), 0x02, now);
		CHECK(first[i] != NULL);
		cnt[first[i][3] - '1']++;
	}
	printf("3000 connections over 3 backends: %u %u %u\n", cnt[0], cnt[1], cnt[2]);
	for (unsigned i = 0; i < 3; i++)
		CHECK(cnt[i] > 850 && cnt[i] < 1150);

	/* reload: web1 disabled, web4 added. Every existing connection keeps its backend; new ones
	 * avoid web1 and some go to web4 */
	apply(lb, "vip 10.80.0.100 tcp 80\n"
		  "backend web1 10.80.1.11 disabled\n"
		  "backend web2 10.80.1.12:8080\n"
		  "backend web3 10.80.1.13\n"
		  "backend web4 10.80.1.14\n");
	for (unsigned i = 0; i < 3000; i++)
		CHECK(strcmp(connect_tcp(lb, (uint16_t)(10000 + i), 0x10, now), first[i]) == 0);
	CHECK_EQ(lb->st.new_conns, 3000);
	unsigned c4 = 0;
	for (unsigned i = 0; i < 1000; i++) {
		const char *b = connect_tcp(lb, (uint16_t)(20000 + i), 0x02, now);
		CHECK(b != NULL && strcmp(b, "web1") != 0);
		c4 += strcmp(b, "web4") == 0;
	}
	CHECK(c4 > 200 && c4 < 450);
	/* web1 removed from the file: its connections stay (and its slot with them) */
	apply(lb, "vip 10.80.0.100 tcp 80\n"
		  "backend web2 10.80.1.12:8080\n"
		  "backend web3 10.80.1.13\n"
		  "backend web4 10.80.1.14\n");
	unsigned web1 = 0;
	for (unsigned i = 0; i < 3000; i++) {
		CHECK(strcmp(connect_tcp(lb, (uint16_t)(10000 + i), 0x10, now), first[i]) == 0);
		web1 += strcmp(first[i], "web1") == 0;
	}
	unsigned s1 = 0;
	while (strcmp(lb->slot[s1].name, "web1") != 0)
		s1++;
	CHECK(lb->slot[s1].used && lb->slot[s1].state == LB_BE_REMOVED);
	CHECK_EQ(lb->t.live[s1], web1);
	/* web2 down: its connections move to another backend at their next packet (rescheduled) */
	apply(lb, "vip 10.80.0.100 tcp 80\n"
		  "backend web2 10.80.1.12:8080 down\n"
		  "backend web3 10.80.1.13\n"
		  "backend web4 10.80.1.14\n");
	unsigned moved = 0, was2 = 0;
	for (unsigned i = 0; i < 3000; i++) {
		const char *b = connect_tcp(lb, (uint16_t)(10000 + i), 0x10, now);
		CHECK(b != NULL && strcmp(b, "web2") != 0);
		was2 += strcmp(first[i], "web2") == 0;
		moved += strcmp(b, first[i]) != 0;
		if (strcmp(first[i], "web2") != 0)
			CHECK(strcmp(b, first[i]) == 0);
	}
	CHECK_EQ(moved, was2);
	CHECK_EQ(lb->st.rescheduled, was2);
	/* every backend disabled: new connections dropped (no_backend), old ones keep going */
	apply(lb, "vip 10.80.0.100 tcp 80\n"
		  "backend web3 10.80.1.13 disabled\n"
		  "backend web4 10.80.1.14 disabled\n");
	CHECK(connect_tcp(lb, 60000, 0x02, now) == NULL);
	CHECK_EQ(lb->st.no_backend, 1);
	for (unsigned i = 0; i < 3000; i++)
		if (strcmp(first[i], "web3") == 0)
			CHECK(strcmp(connect_tcp(lb, (uint16_t)(10000 + i), 0x10, now), "web3") == 0);
	/* web1's connections expire (idle: unanswered SYN timeout), then its slot is free for a new
	 * backend, which starts with zeroed counters */
	uint64_t later = now + lb->t.timeout_ns[LB_TO_TCP_SYN] + S;
	while (lb_ct_sweep(&lb->t, 100000, later) > 0)
		;
	CHECK_EQ(lb->t.count, 0);
	CHECK_EQ(lb->t.live[s1], 0);
	apply(lb, "vip 10.80.0.100 tcp 80\nbackend new1 10.80.1.21\n");
	unsigned sn = 0;
	while (strcmp(lb->slot[sn].name, "new1") != 0)
		sn++;
	CHECK(lb->slot[sn].fresh && *lb->slot[sn].conns == 0);
	CHECK(sn < 5); /* reused a slot rather than growing */
	lb_free(lb);
}

static void test_timeouts_full_and_reuse(void)
{
	struct lb *lb = &LB;
	CHECK(lb_init(lb, 2, 251, 1) == 0);
	apply(lb, CONF3);
	uint64_t now = 100 * S;
	const char *b = connect_tcp(lb, 1, 0x02, now);
	CHECK(b != NULL);
	CHECK(connect_tcp(lb, 2, 0x02, now) != NULL);
	CHECK(connect_tcp(lb, 3, 0x02, now) == NULL); /* 2 entries: full */
	CHECK_EQ(lb->st.table_full, 1);
	/* connection 1 is answered: established timeout; connection 2 closes: FIN timeout */
	struct lb_conn *e1 = NULL, *e2 = NULL;
	for (unsigned i = 0; i < 2; i++)
		*(lb->t.c[i].fwd.sport == 1 ? &e1 : &e2) = &lb->t.c[i];
	uint8_t p[256];
	char bip[32];
	inet_ntop(AF_INET, e1->rev.src, bip, sizeof(bip));
	unsigned n = frame(p, 4, 6, bip, e1->rev.sport, "10.0.0.1", 1, 0x12, 0);
	CHECK_EQ(lb_packet(lb, p, n, now), LB_FWD);
	CHECK_EQ(e1->expires_ns, now + lb->t.timeout_ns[LB_TO_TCP]);
	CHECK(connect_tcp(lb, 2, 0x11, now) != NULL);
	CHECK_EQ(e2->expires_ns, now + lb->t.timeout_ns[LB_TO_TCP_FIN]);
	/* a new SYN on connection 2's ports after its FIN: scheduled afresh (same entry count) */
	CHECK(connect_tcp(lb, 2, 0x02, now) != NULL);
	CHECK_EQ(lb->st.new_conns, 3);
	CHECK_EQ(lb->t.count, 2);
	/* past the SYN timeout the sweep removes connection 2 (1 is established); room again */
	uint64_t later = now + lb->t.timeout_ns[LB_TO_TCP_SYN] + 1;
	CHECK_EQ(lb_ct_sweep(&lb->t, 10, later), 1);
	CHECK_EQ(lb->t.expired, 1);
	CHECK(connect_tcp(lb, 3, 0x02, later) != NULL);
	CHECK(strcmp(connect_tcp(lb, 1, 0x10, later), b) == 0);
	CHECK_EQ(lb->st.new_conns, 4);
	/* lazy expiry: a lookup that meets an expired entry removes it, and the packet is scheduled anew */
	uint64_t later2 = later + lb->t.timeout_ns[LB_TO_TCP_SYN] + 1;
	CHECK(connect_tcp(lb, 3, 0x10, later2) != NULL);
	CHECK_EQ(lb->t.expired, 2);
	CHECK_EQ(lb->st.new_conns, 5);
	lb_free(lb);
}

/* Every prefix of real frames, and broken header fields: never a crash, never a rewrite of a
 * truncated frame; what is cut inside IP/TCP/UDP is `malformed`. */
static void test_malformed(void)
{
	struct lb *lb = &LB;
	CHECK(lb_init(lb, 1024, 251, 3) == 0);
	apply(lb, CONF3);
	uint8_t good[256], p[256];
	struct {
		int family;
		uint8_t proto;
		const char *s, *d;
		uint16_t dp;
	} kinds[] = { { 4, 6, "10.0.0.1", "10.80.0.100", 80 }, { 4, 17, "10.0.0.1", "10.80.0.100", 53 },
		      { 6, 6, "fd80:2::1", "fd80::100", 443 } };
	for (unsigned k = 0; k < 3; k++) {
		unsigned n = frame(good, kinds[k].family, kinds[k].proto, kinds[k].s, 999, kinds[k].d, kinds[k].dp,
				   0x02, 0);
		unsigned hdrs = n; /* no payload: any cut is inside a header */
		for (unsigned len = 0; len < hdrs; len++) {
			uint64_t before = lb->st.malformed, nonip = lb->st.non_ip;
			memcpy(p, good, len);
			int v = lb_packet(lb, p, len, 10 * S);
			if (len < 14) {
				CHECK(v == LB_PASS && lb->st.non_ip == nonip + 1);
			} else {
				CHECK(v == LB_DROP);
				CHECK_EQ(lb->st.malformed, before + 1);
			}
		}
		/* the whole frame but an IP length claiming more than there is */
		memcpy(p, good, n);
		if (kinds[k].family == 4)
			cs_put16(p + 16, (uint16_t)(n + 1));
		else
			cs_put16(p + 18, (uint16_t)(n));
		CHECK_EQ(lb_packet(lb, p, n, 10 * S), LB_DROP);
	}
	unsigned n = frame(good, 4, 6, "10.0.0.1", 999, "10.80.0.100", 80, 0x02, 0);
	uint64_t before = lb->st.malformed;
	memcpy(p, good, n);
	p[14] = 0x44; /* IHL 4 */
	CHECK_EQ(lb_packet(lb, p, n, 10 * S), LB_DROP);
	memcpy(p, good, n);
	p[34 + 12] = 0x40; /* TCP data offset 4 */
	CHECK_EQ(lb_packet(lb, p, n, 10 * S), LB_DROP);
	memcpy(p, good, n);
	p[34 + 12] = 0x60; /* TCP data offset 6: beyond the 20 bytes there */
	CHECK_EQ(lb_packet(lb, p, n, 10 * S), LB_DROP);
	CHECK_EQ(lb->st.malformed, before + 3);
	/* fragments: to a VIP dropped (their ports are not in every piece), others pass */
	memcpy(p, good, n);
	cs_put16(p + 20, 0x2000); /* MF */
	CHECK_EQ(lb_packet(lb, p, n, 10 * S), LB_DROP);
	CHECK_EQ(lb->st.fragments, 1);
	n = frame(p, 4, 6, "10.0.0.1", 999, "10.9.9.9", 80, 0x02, 0);
	cs_put16(p + 20, 0x0004);
	CHECK_EQ(lb_packet(lb, p, n, 10 * S), LB_PASS);
	/* ARP and ICMP pass */
	memset(p, 0, 60);
	p[12] = 0x08;
	p[13] = 0x06;
	CHECK_EQ(lb_packet(lb, p, 60, 10 * S), LB_PASS);
	n = frame(p, 4, 6, "10.0.0.1", 999, "10.80.0.100", 80, 0x02, 0);
	p[14 + 9] = 1;
	CHECK_EQ(lb_packet(lb, p, n, 10 * S), LB_PASS);
	CHECK_EQ(lb->t.count, 0);
	lb_free(lb);
}

int main(void)
{
	test_conf();
	test_maglev();
	test_rewrite_and_replies();
	test_balance_and_affinity();
	test_timeouts_full_and_reuse();
	test_malformed();
	printf("test_lb: ok\n");
	return 0;
}
