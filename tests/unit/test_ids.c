/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests of the IDS NF's logic (nfs/ids/rules.h, engine.h, log.h): rule parsing and its
 * error messages, header matching, the Hyperscan matcher against a brute-force reference on random
 * rules and payloads (content, nocase, offset, depth, several contents per rule, actions), the
 * packet parser on good, truncated and random frames, the fast.log line, a 5000-rule set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ids/engine.h"
#include "ids/log.h"

static char err[512];

static int parse(const char *text, struct ids_ruleset *rs)
{
	err[0] = '\0';
	return ids_rules_parse("t.rules", text, rs, err, sizeof(err));
}

static void expect_error(const char *text, const char *msg)
{
	struct ids_ruleset rs;
	if (parse(text, &rs) == 0 || strstr(err, msg) == NULL) {
		fprintf(stderr, "rule %s\n  expected error containing: %s\n  got: %s\n", text, msg, err);
		exit(1);
	}
}

/* ---- frames ---- */

static uint32_t frame4(uint8_t *f, uint8_t proto, const char *src, const char *dst, uint16_t sp, uint16_t dp,
		       const void *pay, uint32_t plen)
{
	memset(f, 0, 64);
	f[12] = 0x08;
	uint8_t *ip = f + 14;
	uint32_t l4len = proto == 6 ? 20 : 8;
	uint32_t tot = 20 + l4len + plen;
	ip[0] = 0x45;
	ip[2] = (uint8_t)(tot >> 8);
	ip[3] = (uint8_t)tot;
	ip[8] = 64;
	ip[9] = proto;
	inet_pton(AF_INET, src, ip + 12);
	inet_pton(AF_INET, dst, ip + 16);
	uint8_t *l4 = ip + 20;
	memset(l4, 0, l4len);
	if (proto == 1) {
		l4[0] = (uint8_t)sp;
		l4[1] = (uint8_t)dp;
	} else {
		l4[0] = (uint8_t)(sp >> 8);
		l4[1] = (uint8_t)sp;
		l4[2] = (uint8_t)(dp >> 8);
		l4[3] = (uint8_t)dp;
	}
	if (proto == 6)
		l4[12] = 5 << 4;
	memcpy(l4 + l4len, pay, plen);
	return 14 + tot;
}

/* ---- tests ---- */

static void test_parse_ok(void)
{
	struct ids_ruleset rs;
	const char *text =
		"# comment\n"
		"\n"
		"alert tcp any any -> 10.0.0.0/8 80 (msg:\"etc passwd \\\"q\\\"; x\"; content:\"/etc/passwd\"; "
		"nocase; offset:4; depth:40; classtype:web-application-attack; sid:1000001; rev:3;)\n"
		"drop udp [10.1.0.0/16,!10.1.2.3] [1024:,!2000] <> any [53,5353] (content:\"a|0d 0A|b\"; "
		"pcre:\"/x\\;y\\d+/is\"; priority:1; sid:7; reference:url,example.com;)\n"
		"pass ip !192.168.0.1 any -> any any (sid:8;)\n"
		"   alert icmp any any -> fd00::/64 any (msg:\"v6 ping\"; content:\"ping\"; sid:9;)\n";
	if (parse(text, &rs) != 0) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	CHECK_EQ(rs.n, 4);
	CHECK_EQ(rs.np, 4);
	const struct ids_rule *r = &rs.r[0];
	CHECK_EQ(r->action, IDS_ALERT);
	CHECK_EQ(r->proto, IDS_PROTO_TCP);
	CHECK_EQ(r->sid, 1000001);
	CHECK_EQ(r->rev, 3);
	CHECK_EQ(r->priority, 3);
	CHECK_EQ(r->line, 3);
	CHECK(strcmp(r->msg, "etc passwd \"q\"; x") == 0);
	CHECK(strcmp(r->classtype, "web-application-attack") == 0);
	CHECK_EQ(r->npat, 1);
	const struct ids_pat *p = &rs.p[r->first_pat];
	CHECK(p->len == 11 && memcmp(p->s, "/etc/passwd", 11) == 0);
	CHECK(p->nocase && p->has_offset && p->offset == 4 && p->has_depth && p->depth == 40);
	r = &rs.r[1];
	CHECK_EQ(r->action, IDS_DROP);
	CHECK_EQ(r->bidir, 1);
	CHECK_EQ(r->priority, 1);
	CHECK(strcmp(r->msg, "sid 7") == 0);
	CHECK_EQ(r->npat, 2);
	p = &rs.p[r->first_pat];
	CHECK(p->len == 4 && memcmp(p->s, "a\r\nb", 4) == 0);
	p++;
	CHECK(p->kind == IDS_PAT_PCRE && strcmp(p->s, "x;y\\d+") == 0 && p->nocase && p->dotall && !p->multiline);
	CHECK_EQ(r->src.n, 2);
	CHECK_EQ(r->sp.n, 2);
	CHECK_EQ(rs.r[2].action, IDS_PASS);
	CHECK_EQ(rs.r[2].npat, 0);
	CHECK_EQ(rs.r[2].src.neg, 1);
	CHECK_EQ(rs.r[3].line, 6);
	CHECK_EQ(rs.r[3].dst.e[0].family, 6);
	ids_rules_free(&rs);
}

static void test_parse_errors(void)
{
	expect_error("alert tcp any any -> any any (content:\"x\"; flow:established; sid:1;)",
		     "t.rules:1: flow: keyword not supported");
	expect_error("\nalert tcp any any -> any 99999 (sid:1;)", "t.rules:2: destination port: '99999'");
	expect_error("alert tcp any any -> any any (content:\"abcdef\"; depth:3; sid:1;)",
		     "t.rules:1: depth: 3 is shorter than the content (6 bytes)");
	expect_error("alert tcp any any -> any any (content:\"x\";)", "t.rules:1: sid: missing");
	expect_error("alert tcp any any -> any any (sid:5;)\n#\nalert udp any any -> any any (sid:5;)",
		     "t.rules:3: sid: 5 already used on line 1");
	expect_error("alert tcp $HOME_NET any -> any any (sid:1;)", "t.rules:1: address: variables such as '$HOME_NET'");
	expect_error("alert tcp any any -> any any (pcre:\"/a/R\"; sid:1;)", "t.rules:1: pcre: flag 'R' is not supported");
	expect_error("reject tcp any any -> any any (sid:1;)", "t.rules:1: action: 'reject' is not alert, drop or pass");
	expect_error("alert sctp any any -> any any (sid:1;)", "t.rules:1: protocol: 'sctp'");
	expect_error("alert icmp any 80 -> any any (sid:1;)", "t.rules:1: port: ports other than any need protocol tcp or udp");
	expect_error("alert tcp any any -> any any (nocase; content:\"x\"; sid:1;)", "t.rules:1: nocase: must follow a content");
	expect_error("alert tcp any any -> any any (content:\"a|0g|\"; sid:1;)", "t.rules:1: content: not a hex digit");
	expect_error("alert tcp any any -> any any (content:\"a|0|\"; sid:1;)", "t.rules:1: content: odd number of hex digits");
	expect_error("alert tcp any any -> any any (content:!\"a\"; sid:1;)", "t.rules:1: content: negated content");
	expect_error("alert tcp 10.0.0.0/33 any -> any any (sid:1;)", "t.rules:1: source address: '10.0.0.0/33'");
	expect_error("alert tcp any any => any any (sid:1;)", "t.rules:1: direction: '=>'");
	expect_error("alert tcp any any -> any any (msg:\"unterminated; sid:1;)", "t.rules:1: msg: unterminated");
	expect_error("alert tcp any any -> any any sid:1;", "t.rules:1: expected 'ACTION PROTO");
	expect_error("alert tcp any any -> any any (content:\"x\"; offset:x; sid:1;)", "t.rules:1: offset: 'x' is not 0..65535");
	expect_error("alert tcp [1.2.3.4,[5.6.7.8]] any -> any any (sid:1;)", "t.rules:1: source address");
	expect_error("alert tcp any [1:2,3:] -> any 5:4 (sid:1;)", "t.rules:1: destination port: '5:4'");
	/* Hyperscan's own refusal names the line too: back-references are not supported */
	struct ids_ruleset rs;
	struct ids_engine e;
	CHECK(parse("alert tcp any any -> any any (sid:1;)\nalert tcp any any -> any any (pcre:\"/(a)\\1/\"; sid:2;)\n",
		    &rs) == 0);
	CHECK(ids_engine_build(&e, &rs, "t.rules", err, sizeof(err)) < 0);
	CHECK(strstr(err, "t.rules:2: pcre: rejected by Hyperscan") != NULL);
	ids_rules_free(&rs);
}

static void test_header_match(void)
{
	struct ids_ruleset rs;
	CHECK(parse("alert udp [10.1.0.0/16,!10.1.2.3] [1024:,!2000] <> any [53,5353] (sid:1;)\n"
		    "alert tcp ![10.0.0.0/8,192.168.0.0/16] any -> any !80 (sid:2;)\n"
		    "alert icmp any any -> any any (sid:3;)\n"
		    "alert ip fd00::/8 any -> any any (sid:4;)\n", &rs) == 0);
	struct ids_pkt k;
	memset(&k, 0, sizeof(k));
	k.family = 4;
	k.proto = 17;
	k.has_ports = 1;
	inet_pton(AF_INET, "10.1.9.9", k.src);
	inet_pton(AF_INET, "8.8.8.8", k.dst);
	k.sport = 40000;
	k.dport = 53;
	CHECK(ids_rule_hdr_match(&rs.r[0], &k));
	k.sport = 2000; /* negated port */
	CHECK(!ids_rule_hdr_match(&rs.r[0], &k));
	k.sport = 1023; /* below 1024: */
	CHECK(!ids_rule_hdr_match(&rs.r[0], &k));
	inet_pton(AF_INET, "10.1.2.3", k.src); /* the excluded host */
	k.sport = 40000;
	CHECK(!ids_rule_hdr_match(&rs.r[0], &k));
	/* <>: the reply direction matches too */
	struct ids_pkt rev = k;
	inet_pton(AF_INET, "10.1.9.9", k.src);
	memcpy(rev.src, k.dst, 16);
	memcpy(rev.dst, k.src, 16);
	rev.sport = 53;
	rev.dport = 40000;
	CHECK(ids_rule_hdr_match(&rs.r[0], &rev));
	CHECK(!ids_rule_hdr_match(&rs.r[2], &k)); /* icmp rule, udp packet */
	k.proto = 6;
	CHECK(!ids_rule_hdr_match(&rs.r[1], &k)); /* src inside the negated list */
	inet_pton(AF_INET, "11.0.0.1", k.src);
	CHECK(ids_rule_hdr_match(&rs.r[1], &k));
	k.dport = 80;
	CHECK(!ids_rule_hdr_match(&rs.r[1], &k));
	k.has_ports = 0; /* a fragment: a port condition never matches */
	k.dport = 443;
	CHECK(!ids_rule_hdr_match(&rs.r[1], &k));
	k.proto = 58;
	CHECK(ids_rule_hdr_match(&rs.r[2], &k)); /* icmp covers ICMPv6 */
	CHECK(!ids_rule_hdr_match(&rs.r[3], &k)); /* IPv6 prefix, IPv4 packet */
	k.family = 6;
	inet_pton(AF_INET6, "fd12::1", k.src);
	CHECK(ids_rule_hdr_match(&rs.r[3], &k));
	ids_rules_free(&rs);
}

/* ---- the matcher against a brute-force reference ---- */

static int ref_content(const struct ids_pat *p, const uint8_t *pay, uint32_t len)
{
	uint32_t start = p->has_offset ? p->offset : 0;
	uint64_t end = p->has_depth ? (uint64_t)start + p->depth : len;
	if (end > len)
		end = len;
	for (uint64_t i = start; i + p->len <= end; i++) {
		uint32_t j = 0;
		for (; j < p->len; j++) {
			uint8_t a = pay[i + j], b = (uint8_t)p->s[j];
			if (p->nocase ? tolower(a) != tolower(b) : a != b)
				break;
		}
		if (j == p->len)
			return 1;
	}
	return 0;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

static void test_engine_random(void)
{
	/* small alphabet so that random contents do match random payloads */
	static const char alpha[] = "aAbB|;x";
	char *text = malloc(1 << 20);
	size_t tl = 0;
	const int NR = 150;
	for (int i = 0; i < NR; i++) {
		/* tuned so that each of the three verdicts is common: pass rules are few and longer */
		uint32_t a = rnd(16);
		const char *act = a == 0 ? "pass" : a < 4 ? "drop" : "alert";
		tl += (size_t)sprintf(text + tl, "%s tcp any any -> any %s (msg:\"r%d\";", act,
				      (rnd(4) == 0 || a >= 12) ? "80" : "any", i);
		int nc = a == 0 ? 2 : (int)rnd(3) + (a < 12 || rnd(8) ? 1 : 0); /* a few alerts have none */
		for (int c = 0; c < nc; c++) {
			int len = 2 + (int)rnd(3);
			tl += (size_t)sprintf(text + tl, " content:\"");
			for (int j = 0; j < len; j++) {
				char ch = alpha[rnd(sizeof(alpha) - 1)];
				if (ch == '|')
					tl += (size_t)sprintf(text + tl, "|7C|");
				else if (ch == ';')
					tl += (size_t)sprintf(text + tl, "\\;");
				else
					text[tl++] = ch;
			}
			tl += (size_t)sprintf(text + tl, "\";");
			if (rnd(3) == 0)
				tl += (size_t)sprintf(text + tl, " nocase;");
			if (rnd(3) == 0)
				tl += (size_t)sprintf(text + tl, " offset:%u;", rnd(12));
			if (rnd(3) == 0)
				tl += (size_t)sprintf(text + tl, " depth:%u;", (unsigned)len + rnd(12));
		}
		tl += (size_t)sprintf(text + tl, " sid:%d;)\n", 100 + i);
	}
	text[tl] = '\0';
	struct ids_ruleset rs;
	struct ids_engine e;
	if (parse(text, &rs) != 0 || ids_engine_build(&e, &rs, "t.rules", err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	free(text);
	uint8_t f[256];
	uint64_t matched_any = 0, nothing = 0, verdicts[3] = { 0 };
	for (int t = 0; t < 4000; t++) {
		uint8_t pay[40];
		uint32_t plen = rnd(sizeof(pay) + 1);
		for (uint32_t j = 0; j < plen; j++)
			pay[j] = (uint8_t)alpha[rnd(sizeof(alpha) - 1)];
		uint16_t dport = rnd(2) ? 80 : 8080;
		uint32_t fl = frame4(f, 6, "10.0.0.1", "10.0.0.2", 1234, dport, pay, plen);
		struct ids_pkt k;
		CHECK_EQ(ids_parse(f, fl, &k), IDS_K_IP);
		CHECK_EQ(k.pay_len, plen);
		struct ids_result res;
		CHECK_EQ(ids_engine_match(&e, &k, f + k.pay_off, k.pay_len, &res), 0);
		/* reference: every rule whose contents all occur (and whose port matches) */
		uint32_t want[3][400], nw[3] = { 0, 0, 0 };
		for (unsigned i = 0; i < rs.n; i++) {
			const struct ids_rule *r = &rs.r[i];
			int m = ids_rule_hdr_match(r, &k);
			for (uint32_t c = 0; m && c < r->npat; c++)
				m = ref_content(&rs.p[r->first_pat + c], pay, plen);
			if (m)
				want[r->action][nw[r->action]++] = i;
		}
		uint8_t v = nw[IDS_PASS] ? IDS_PASS : nw[IDS_DROP] ? IDS_DROP : IDS_ALERT;
		CHECK_EQ(res.verdict, v);
		verdicts[v]++;
		uint32_t exp[800], ne = 0;
		if (v == IDS_PASS) {
			memcpy(exp, want[IDS_PASS], nw[IDS_PASS] * 4);
			ne = nw[IDS_PASS];
		} else { /* alerts and drops, merged in file order */
			uint32_t a = 0, d = 0;
			while (a < nw[0] || d < nw[1])
				exp[ne++] = (d == nw[1] || (a < nw[0] && want[0][a] < want[1][d])) ? want[0][a++]
												  : want[1][d++];
		}
		if (ne > IDS_MATCH_MAX) {
			CHECK_EQ(res.n + res.more, ne);
			continue;
		}
		CHECK_EQ(res.n, ne);
		CHECK_EQ(res.more, 0);
		for (uint32_t i = 0; i < ne; i++)
			CHECK_EQ(res.rule[i], exp[i]);
		matched_any += ne > 0;
		nothing += nw[0] + nw[1] + nw[2] == 0;
	}
	printf("random: %llu alert/none, %llu drop, %llu pass, %llu matched, %llu nothing\n",
	       (unsigned long long)verdicts[0], (unsigned long long)verdicts[1], (unsigned long long)verdicts[2],
	       (unsigned long long)matched_any, (unsigned long long)nothing);
	/* the test can fail: all three outcomes happened, and many packets matched something */
	CHECK(verdicts[0] > 100 && verdicts[1] > 100 && verdicts[2] > 100);
	CHECK(matched_any > 1000 && nothing > 50);
	ids_engine_free(&e);
	ids_rules_free(&rs);
}

static void test_engine_pcre_and_options(void)
{
	struct ids_ruleset rs;
	struct ids_engine e;
	CHECK(parse("alert tcp any any -> any any (content:\"GET \"; depth:4; pcre:\"/^GET \\/[a-z]+\\.php\\?id=\\d+/\"; sid:1;)\n"
		    "alert tcp any any -> any any (content:\"passwd\"; offset:10; sid:2;)\n"
		    "alert tcp any any -> any any (pcre:\"/ADMIN/i\"; sid:3;)\n"
		    "alert tcp any any -> any any (pcre:\"/^line2$/m\"; sid:4;)\n"
		    "alert tcp any any -> any any (pcre:\"/a.b/s\"; sid:5;)\n"
		    "alert tcp any any -> any any (pcre:\"/a.b/\"; sid:6;)\n"
		    "alert tcp any any -> any any (content:\"|00 ff|\"; sid:7;)\n", &rs) == 0);
	CHECK(ids_engine_build(&e, &rs, "t.rules", err, sizeof(err)) == 0);
	struct { const char *pay; uint32_t len; uint32_t want; } cases[] = {
		{ "GET /index.php?id=42 HTTP/1.0", 29, 1u << 1 },
		{ " GET /index.php?id=42", 21, 0 },
		{ "0123456789passwd", 16, 1u << 2 },
		{ "012345678passwd!", 16, 0 },
		{ "xx aDmIn", 8, 1u << 3 },
		{ "line1\nline2\nline3", 17, 1u << 4 },
		{ "a\nb", 3, 1u << 5 },
		{ "a-b", 3, 1u << 5 | 1u << 6 },
		{ "x\0\xff", 3, 1u << 7 },
	};
	uint8_t f[256];
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint32_t fl = frame4(f, 6, "1.1.1.1", "2.2.2.2", 1, 80, cases[i].pay, cases[i].len);
		struct ids_pkt k;
		struct ids_result res;
		CHECK_EQ(ids_parse(f, fl, &k), IDS_K_IP);
		CHECK_EQ(ids_engine_match(&e, &k, f + k.pay_off, k.pay_len, &res), 0);
		uint32_t got = 0;
		for (uint32_t j = 0; j < res.n; j++)
			got |= 1u << rs.r[res.rule[j]].sid;
		if (got != cases[i].want) {
			fprintf(stderr, "case %u '%s': got %#x want %#x\n", i, cases[i].pay, got, cases[i].want);
			exit(1);
		}
	}
	ids_engine_free(&e);
	ids_rules_free(&rs);
}

static void test_parser_frames(void)
{
	uint8_t f[256];
	struct ids_pkt k;
	uint32_t fl = frame4(f, 6, "10.0.0.1", "10.0.0.2", 1234, 80, "hello", 5);
	CHECK_EQ(ids_parse(f, fl, &k), IDS_K_IP);
	CHECK(k.family == 4 && k.proto == 6 && k.has_ports && k.sport == 1234 && k.dport == 80);
	CHECK(k.pay_off == 54 && k.pay_len == 5 && memcmp(f + k.pay_off, "hello", 5) == 0);
	/* Ethernet padding beyond the IP length is not payload */
	CHECK_EQ(ids_parse(f, fl + 10, &k), IDS_K_IP);
	CHECK_EQ(k.pay_len, 5);
	/* every truncation of a good frame is malformed, never read past the end */
	for (uint32_t n = 0; n < fl; n++) {
		uint8_t *cut = malloc(n ? n : 1);
		memcpy(cut, f, n);
		CHECK_EQ(ids_parse(cut, n, &k), IDS_K_MALFORMED);
		free(cut);
	}
	fl = frame4(f, 1, "10.0.0.1", "10.0.0.2", 8, 0, "ping", 4);
	CHECK_EQ(ids_parse(f, fl, &k), IDS_K_IP);
	CHECK(!k.has_ports && k.sport == 8 && k.dport == 0 && k.pay_len == 4);
	/* a non-first fragment: the IP payload, no ports */
	fl = frame4(f, 17, "10.0.0.1", "10.0.0.2", 1, 2, "abcdefgh", 8);
	f[14 + 6] = 0x00;
	f[14 + 7] = 0x10;
	CHECK_EQ(ids_parse(f, fl, &k), IDS_K_IP);
	CHECK(k.frag && !k.has_ports && k.pay_len == 16);
	/* TCP data offset < 5 */
	fl = frame4(f, 6, "10.0.0.1", "10.0.0.2", 1, 2, "x", 1);
	f[14 + 20 + 12] = 0x40;
	CHECK_EQ(ids_parse(f, fl, &k), IDS_K_MALFORMED);
	f[12] = 0x08;
	f[13] = 0x06;
	CHECK_EQ(ids_parse(f, fl, &k), IDS_K_NON_IP);
	/* IPv6 + UDP behind a VLAN tag */
	uint8_t g[128] = { 0 };
	g[12] = 0x81;
	g[16] = 0x86;
	g[17] = 0xdd;
	uint8_t *ip = g + 18;
	ip[0] = 0x60;
	ip[5] = 8 + 3;
	ip[6] = 17;
	inet_pton(AF_INET6, "fd00::1", ip + 8);
	inet_pton(AF_INET6, "fd00::2", ip + 24);
	ip[40 + 1] = 53;
	ip[40 + 3] = 99;
	memcpy(ip + 48, "abc", 3);
	CHECK_EQ(ids_parse(g, 18 + 40 + 11, &k), IDS_K_IP);
	CHECK(k.family == 6 && k.proto == 17 && k.sport == 53 && k.dport == 99 && k.pay_len == 3);
	CHECK_EQ(ids_parse(g, 18 + 40 + 10, &k), IDS_K_MALFORMED);
	/* random frames: no crash, payload always inside the frame (ASan checks the reads) */
	for (int t = 0; t < 200000; t++) {
		uint32_t n = rnd(100);
		uint8_t *r = malloc(n ? n : 1);
		for (uint32_t j = 0; j < n; j++)
			r[j] = (uint8_t)rnd(256);
		if (n > 14 && rnd(2)) {
			r[12] = 0x08;
			r[13] = 0x00;
			r[14] = (uint8_t)(0x45 + rnd(3));
		}
		if (ids_parse(r, n, &k) == IDS_K_IP)
			CHECK((uint64_t)k.pay_off + k.pay_len <= n);
		free(r);
	}
}

static void test_log_line(void)
{
	struct ids_ruleset rs;
	CHECK(parse("drop tcp any any -> any 80 (msg:\"ETC passwd\"; content:\"x\"; classtype:web-attack; priority:1; sid:1000001; rev:2;)\n"
		    "alert icmp any any -> any any (msg:\"ping \\\"quoted\\\"\"; sid:2;)\n", &rs) == 0);
	uint8_t f[256];
	struct ids_pkt k;
	CHECK_EQ(ids_parse(f, frame4(f, 6, "10.1.1.1", "10.1.1.2", 1234, 80, "x", 1), &k), IDS_K_IP);
	char *buf = NULL;
	size_t bl = 0;
	FILE *m = open_memstream(&buf, &bl);
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 123456000 };
	char t[IDS_TIME_MAX], iso[IDS_TIME_MAX];
	ids_fmt_time(&ts, t, iso);
	CHECK(strlen(t) == 26 && t[2] == '/' && t[10] == '-' && strcmp(t + 19, ".123456") == 0);
	ids_log_fast(m, "11/22/2026-10:00:00.123456", &rs.r[0], 1, &k);
	CHECK_EQ(ids_parse(f, frame4(f, 1, "10.1.1.1", "10.1.1.2", 8, 0, "p", 1), &k), IDS_K_IP);
	ids_log_fast(m, "11/22/2026-10:00:00.123456", &rs.r[1], 0, &k);
	ids_log_eve(m, "2026-11-22T10:00:00.123456+0000", &rs.r[1], 0, &k);
	fclose(m);
	const char *want =
		"11/22/2026-10:00:00.123456  [Drop] [**] [1:1000001:2] ETC passwd [**] [Classification: web-attack] "
		"[Priority: 1] {TCP} 10.1.1.1:1234 -> 10.1.1.2:80\n"
		"11/22/2026-10:00:00.123456  [**] [1:2:1] ping \"quoted\" [**] [Classification: (null)] "
		"[Priority: 3] {ICMP} 10.1.1.1:8 -> 10.1.1.2:0\n"
		"{\"timestamp\":\"2026-11-22T10:00:00.123456+0000\",\"event_type\":\"alert\",\"src_ip\":\"10.1.1.1\","
		"\"dest_ip\":\"10.1.1.2\",\"proto\":\"ICMP\",\"icmp_type\":8,\"icmp_code\":0,\"alert\":{\"action\":"
		"\"allowed\",\"gid\":1,\"signature_id\":2,\"rev\":1,\"signature\":\"ping \\\"quoted\\\"\","
		"\"category\":\"\",\"severity\":3}}\n";
	if (strcmp(buf, want) != 0) {
		fprintf(stderr, "got:\n%s\nwant:\n%s\n", buf, want);
		exit(1);
	}
	free(buf);
	ids_rules_free(&rs);
}

static void test_many_rules(void)
{
	const int N = 5000;
	char *text = malloc((size_t)N * 160);
	size_t tl = 0;
	for (int i = 0; i < N; i++)
		tl += (size_t)sprintf(text + tl,
				      "alert tcp any any -> any any (msg:\"sig %d\"; content:\"sig-%05d-x\"; %ssid:%d;)\n",
				      i, i, i % 3 == 0 ? "nocase; " : "", 2000000 + i);
	struct ids_ruleset rs;
	struct ids_engine e;
	CHECK(parse(text, &rs) == 0);
	free(text);
	CHECK_EQ(rs.n, N);
	CHECK(ids_engine_build(&e, &rs, "t.rules", err, sizeof(err)) == 0);
	printf("5000 rules compiled in %.0f ms, database %zu KiB\n", e.compile_ms, e.db_bytes / 1024);
	uint8_t f[256];
	struct ids_pkt k;
	struct ids_result res;
	const char *pay = "..SIG-04997-X..sig-04999-x";
	CHECK_EQ(ids_parse(f, frame4(f, 6, "1.1.1.1", "2.2.2.2", 1, 2, pay, (uint32_t)strlen(pay)), &k), IDS_K_IP);
	CHECK_EQ(ids_engine_match(&e, &k, f + k.pay_off, k.pay_len, &res), 0);
	CHECK_EQ(res.n, 1); /* 4997 is not nocase (4997 % 3 != 0): only 4999 */
	CHECK_EQ(rs.r[res.rule[0]].sid, 2004999);
	pay = "..SIG-04995-X..";
	CHECK_EQ(ids_parse(f, frame4(f, 6, "1.1.1.1", "2.2.2.2", 1, 2, pay, (uint32_t)strlen(pay)), &k), IDS_K_IP);
	CHECK_EQ(ids_engine_match(&e, &k, f + k.pay_off, k.pay_len, &res), 0);
	CHECK(res.n == 1 && rs.r[res.rule[0]].sid == 2004995);
	ids_engine_free(&e);
	ids_rules_free(&rs);
}

int main(void)
{
	test_parse_ok();
	test_parse_errors();
	test_header_match();
	test_engine_pcre_and_options();
	test_engine_random();
	test_parser_frames();
	test_log_line();
	test_many_rules();
	printf("test_ids: all passed\n");
	return 0;
}
