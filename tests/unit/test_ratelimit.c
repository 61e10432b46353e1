/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests of the rate limiter's logic (nfs/ratelimit/meter.h, pkt.h, conf.h, flow.h):
 *  - the srTCM and trTCM meters, colour-blind and colour-aware, against a literal transcription of
 *    RFC 2697 / RFC 2698 that adds one byte of token at a time at the instants the RFCs define, on a
 *    fake clock, over random packet traces (the colour of every packet must agree); then against a
 *    closed-form 128-bit model with a real TSC frequency, 100 Gbit/s rates and hour-long gaps;
 *  - the configuration parser (units, every error message word for word) and first-match classes;
 *  - the packet parser on good, truncated and random frames; DSCP re-marking (IPv4 checksum, ECN);
 *  - the per-flow table against a brute-force model (random gets and expiry sweeps, forced collisions).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ratelimit/conf.h"
#include "ratelimit/flow.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	/* xorshift64*: deterministic, so a failure reproduces */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}
static uint64_t rnd_in(uint64_t lo, uint64_t hi) { return lo + rnd() % (hi - lo + 1); }

/* ---------------------------------------------------------------- RFC reference (literal) */

/* The RFCs' state, advanced one byte of token at a time. Rates are in bytes per second as the RFCs
 * write them; ours are bit/s, so "CIR times per second" is cir_bits / 8 times per second: byte k is
 * added at the first clock tick t with (t - t0) * cir_bits >= k * 8 * hz. */
struct ref {
	int trtcm;
	uint64_t cir, pir, cbs, xbs, hz, t0; /* cir/pir in bit/s */
	uint64_t tc, tx;                     /* Tc and Te (srTCM) or Tp (trTCM) */
	uint64_t kc, kp;                     /* increments done so far */
};

static void ref_init(struct ref *r, int trtcm, uint64_t cir, uint64_t pir, uint64_t cbs, uint64_t xbs,
		     uint64_t hz, uint64_t t0)
{
	memset(r, 0, sizeof(*r));
	r->trtcm = trtcm;
	r->cir = cir;
	r->pir = pir;
	r->cbs = cbs;
	r->xbs = xbs;
	r->hz = hz;
	r->t0 = t0;
	r->tc = cbs; /* "initially (at time 0) full" */
	r->tx = xbs;
}

/* Apply every token increment that happens at or before time t, one at a time. */
static void ref_advance(struct ref *r, uint64_t t)
{
	unsigned __int128 el = t - r->t0;
	uint64_t due_c = (uint64_t)(el * r->cir / (8 * (unsigned __int128)r->hz));
	while (r->kc < due_c) {
		r->kc++;
		if (!r->trtcm) {
			/* RFC 2697: "If Tc is less than CBS, Tc is incremented by one, else if Te is less than
			 * EBS, Te is incremented by one, else neither Tc nor Te is incremented." */
			if (r->tc < r->cbs)
				r->tc++;
			else if (r->tx < r->xbs)
				r->tx++;
		} else {
			/* RFC 2698: "Tc is incremented by one CIR times per second up to CBS" */
			if (r->tc < r->cbs)
				r->tc++;
		}
	}
	if (r->trtcm) {
		uint64_t due_p = (uint64_t)(el * r->pir / (8 * (unsigned __int128)r->hz));
		while (r->kp < due_p) {
			r->kp++;
			if (r->tx < r->xbs) /* "Tp is incremented by one PIR times per second up to PBS" */
				r->tx++;
		}
	}
}

/* The RFCs' marking rules, written out case by case (aware = colour-aware mode). */
static int ref_color(struct ref *r, uint64_t t, uint64_t B, int aware, int pre)
{
	ref_advance(r, t);
	int64_t tc = (int64_t)r->tc, tx = (int64_t)r->tx, b = (int64_t)B;
	if (!r->trtcm) {
		if (!aware) {
			if (tc - b >= 0) { r->tc -= B; return RL_GREEN; }
			if (tx - b >= 0) { r->tx -= B; return RL_YELLOW; }
			return RL_RED;
		}
		if (pre == RL_GREEN && tc - b >= 0) { r->tc -= B; return RL_GREEN; }
		if ((pre == RL_GREEN || pre == RL_YELLOW) && tx - b >= 0) { r->tx -= B; return RL_YELLOW; }
		return RL_RED;
	}
	if (!aware) {
		if (tx - b < 0)
			return RL_RED;
		if (tc - b < 0) { r->tx -= B; return RL_YELLOW; }
		r->tx -= B;
		r->tc -= B;
		return RL_GREEN;
	}
	if (pre == RL_RED || tx - b < 0)
		return RL_RED;
	if (pre == RL_YELLOW || tc - b < 0) { r->tx -= B; return RL_YELLOW; }
	r->tx -= B;
	r->tc -= B;
	return RL_GREEN;
}

/* One random trace: the implementation and the reference must colour every packet alike. Extra
 * refills at random instants between packets must not change anything (the carry is exact). */
static void meter_trace(int trtcm, int aware, uint64_t hz, uint64_t cir, uint64_t pir, uint64_t cbs,
			uint64_t xbs, unsigned npkts, uint64_t max_gap, unsigned *seen)
{
	struct rl_params p;
	struct rl_meter m;
	struct ref r;
	uint64_t t = rnd_in(0, 1000000);
	rl_params_init(&p, trtcm ? RL_TRTCM : RL_SRTCM, cir, pir, cbs, xbs, hz);
	rl_meter_init(&p, &m, t);
	ref_init(&r, trtcm, cir, pir, cbs, xbs, hz, t);
	for (unsigned i = 0; i < npkts; i++) {
		uint64_t gap = rnd() % 8 == 0 ? 0 : rnd_in(0, max_gap); /* some packets share a batch */
		if (rnd() % 4 == 0) {
			uint64_t mid = t + rnd_in(0, gap);
			rl_meter_refill(&p, &m, mid);
		}
		t += gap;
		uint64_t B = rnd() % 16 == 0 ? rnd_in(1, 4000) : rnd_in(40, 1500);
		int pre = aware ? (int)(rnd() % 3) : RL_GREEN;
		int want = ref_color(&r, t, B, aware, pre);
		int got = rl_meter_color(&p, &m, t, B, (enum rl_color)pre);
		if (got != want || m.tc != r.tc || m.tx != r.tx) {
			fprintf(stderr, "%s %s hz=%llu cir=%llu pir=%llu cbs=%llu xbs=%llu pkt %u t=%llu B=%llu "
				"pre=%d: got %d want %d (tc %llu/%llu tx %llu/%llu)\n",
				trtcm ? "trTCM" : "srTCM", aware ? "aware" : "blind", (unsigned long long)hz,
				(unsigned long long)cir, (unsigned long long)pir, (unsigned long long)cbs,
				(unsigned long long)xbs, i, (unsigned long long)t, (unsigned long long)B, pre, got,
				want, (unsigned long long)m.tc, (unsigned long long)r.tc,
				(unsigned long long)m.tx, (unsigned long long)r.tx);
			exit(1);
		}
		seen[got]++;
	}
}

static void test_meter_vs_rfc(void)
{
	unsigned seen[3] = { 0 };
	for (int trial = 0; trial < 400; trial++) {
		int trtcm = trial & 1, aware = (trial >> 1) & 1;
		uint64_t hz = rnd() % 2 ? 1000000 : rnd_in(999, 3000000); /* odd frequencies too */
		uint64_t cir = rnd_in(1, 2000000);                       /* 1 bit/s .. 2 Mbit/s */
		uint64_t pir = cir + (rnd() % 2 ? 0 : rnd_in(0, 2000000));
		uint64_t cbs = rnd_in(0, 6000), xbs = rnd_in(0, 6000);
		if (trtcm) {
			cbs += 1;
			xbs += 1;
		} else if (cbs == 0 && xbs == 0) {
			xbs = 1;
		}
		/* average gap around the time one 750-byte packet earns at CIR, so all colours occur */
		uint64_t per_pkt = (uint64_t)(750.0 * 8 * (double)hz / (double)cir);
		uint64_t max_gap = per_pkt < 2 ? 2 : per_pkt * 2;
		if (max_gap > 100 * hz)
			max_gap = 100 * hz;
		meter_trace(trtcm, aware, hz, cir, pir, cbs, xbs, 600, max_gap, seen);
	}
	/* the traces exercised every colour, many times */
	CHECK(seen[RL_GREEN] > 10000 && seen[RL_YELLOW] > 10000 && seen[RL_RED] > 10000);
	printf("meter vs RFC: %u green %u yellow %u red\n", seen[0], seen[1], seen[2]);
	fflush(stdout);
}

/* Closed-form model for rates and gaps too large to step through byte by byte. */
static void test_meter_large(void)
{
	unsigned seen[3] = { 0 };
	for (int trial = 0; trial < 200; trial++) {
		int trtcm = trial & 1;
		uint64_t hz = rnd_in(1000000000ull, 5200000000ull);
		uint64_t cir = rnd_in(1000000, 100000000000ull), pir = cir + rnd_in(0, 100000000000ull);
		uint64_t cbs = rnd_in(1, 1u << 30), xbs = rnd_in(1, 1u << 30);
		struct rl_params p;
		struct rl_meter m;
		uint64_t t0 = rnd(), t = t0; /* anywhere in the TSC's range ... */
		if (t > UINT64_MAX / 2)
			t0 = t = t / 2; /* ... that leaves room for the gaps below */
		rl_params_init(&p, trtcm ? RL_TRTCM : RL_SRTCM, cir, pir, cbs, xbs, hz);
		rl_meter_init(&p, &m, t);
		uint64_t tc = cbs, tx = xbs, kc = 0, kp = 0;
		for (int i = 0; i < 2000; i++) {
			uint64_t r = rnd() % 100;
			t += r == 0 ? rnd_in(hz, 7200 * hz) : r < 5 ? rnd_in(0, hz / 10) : rnd_in(0, hz / 100000);
			unsigned __int128 el = t - t0;
			uint64_t dc = (uint64_t)(el * cir / (8 * (unsigned __int128)hz)) - kc;
			uint64_t dp = (uint64_t)(el * pir / (8 * (unsigned __int128)hz)) - kp;
			kc += dc;
			kp += dp;
			if (!trtcm) {
				uint64_t room = cbs - tc, into_c = dc < room ? dc : room;
				tc += into_c;
				dc -= into_c;
				room = xbs - tx;
				tx += dc < room ? dc : room;
			} else {
				tc += dc < cbs - tc ? dc : cbs - tc;
				tx += dp < xbs - tx ? dp : xbs - tx;
			}
			uint64_t B = rnd_in(1, cbs / 2 + 2);
			int want;
			if (!trtcm)
				want = tc >= B ? (tc -= B, RL_GREEN) : tx >= B ? (tx -= B, RL_YELLOW) : RL_RED;
			else
				want = tx < B ? RL_RED : tc < B ? (tx -= B, RL_YELLOW) : (tx -= B, tc -= B, RL_GREEN);
			int got = rl_meter_color(&p, &m, t, B, RL_GREEN);
			CHECK_EQ(got, want);
			CHECK(m.tc == tc && m.tx == tx);
			seen[got]++;
		}
	}
	CHECK(seen[RL_GREEN] > 1000 && seen[RL_YELLOW] > 1000 && seen[RL_RED] > 1000);
	printf("meter large: %u green %u yellow %u red\n", seen[0], seen[1], seen[2]);
	fflush(stdout);
}

/* A worked example by hand: srTCM 8000 bit/s = 1000 B/s, CBS 1500, EBS 1000, 1 kHz clock. */
static void test_meter_by_hand(void)
{
	struct rl_params p;
	struct rl_meter m;
	rl_params_init(&p, RL_SRTCM, 8000, 0, 1500, 1000, 1000);
	rl_meter_init(&p, &m, 0);
	CHECK_EQ(rl_meter_color(&p, &m, 0, 1000, RL_GREEN), RL_GREEN);  /* Tc 1500 -> 500 */
	CHECK_EQ(rl_meter_color(&p, &m, 0, 1000, RL_GREEN), RL_YELLOW); /* Te 1000 -> 0 */
	CHECK_EQ(rl_meter_color(&p, &m, 0, 1, RL_GREEN), RL_GREEN);     /* Tc 500 -> 499 */
	CHECK_EQ(rl_meter_color(&p, &m, 0, 500, RL_GREEN), RL_RED);
	/* 1 ms later one byte arrived: Tc 500 */
	CHECK_EQ(rl_meter_color(&p, &m, 1, 500, RL_GREEN), RL_GREEN);
	CHECK_EQ(m.tc, 0);
	/* 2.5 s later: 2500 bytes offered, 1500 fill C, 1000 fill E */
	CHECK_EQ(rl_meter_color(&p, &m, 2501, 1, RL_GREEN), RL_GREEN);
	CHECK(m.tc == 1499 && m.tx == 1000);
	/* colour-aware: a yellow packet never goes green, a red one stays red */
	CHECK_EQ(rl_meter_color(&p, &m, 2501, 100, RL_YELLOW), RL_YELLOW);
	CHECK_EQ(rl_meter_color(&p, &m, 2501, 1, RL_RED), RL_RED);
	CHECK(m.tc == 1499 && m.tx == 900);
	/* trTCM 8000/16000 bit/s, CBS 1000, PBS 2000 */
	rl_params_init(&p, RL_TRTCM, 8000, 16000, 1000, 2000, 1000);
	rl_meter_init(&p, &m, 0);
	CHECK_EQ(rl_meter_color(&p, &m, 0, 1000, RL_GREEN), RL_GREEN);  /* Tp 1000, Tc 0 */
	CHECK_EQ(rl_meter_color(&p, &m, 0, 1000, RL_GREEN), RL_YELLOW); /* Tp 0 */
	CHECK_EQ(rl_meter_color(&p, &m, 0, 1, RL_GREEN), RL_RED);
	CHECK_EQ(rl_meter_color(&p, &m, 10, 15, RL_GREEN), RL_YELLOW);  /* 10 ms: Tc 10, Tp 20 -> 5 */
	CHECK(m.tc == 10 && m.tx == 5);
	/* fill time: (1500+1000) bytes at 1000 B/s = 2.5 s = 2500 ticks (+1) */
	rl_params_init(&p, RL_SRTCM, 8000, 0, 1500, 1000, 1000);
	CHECK_EQ(rl_fill_cycles(&p), 2501);
	rl_params_init(&p, RL_TRTCM, 8000, 16000, 1000, 4000, 1000);
	CHECK_EQ(rl_fill_cycles(&p), 2001);
}

/* ---------------------------------------------------------------- configuration */

static void expect_error(const char *text, const char *msg)
{
	struct rl_conf cf;
	char err[512] = "";
	int rc = rl_conf_parse("rl.conf", text, &cf, err, sizeof(err));
	if (rc == 0 || strcmp(err, msg) != 0) {
		fprintf(stderr, "config:\n%s\nexpected: %s\ngot (rc %d): %s\n", text, msg, rc, err);
		exit(1);
	}
}

static void test_units(void)
{
	uint64_t v;
	CHECK(rl_parse_rate("800k", &v) == 0 && v == 800000);
	CHECK(rl_parse_rate("1.5M", &v) == 0 && v == 1500000);
	CHECK(rl_parse_rate("10Gbit", &v) == 0 && v == 10000000000ull);
	CHECK(rl_parse_rate("64000bps", &v) == 0 && v == 64000);
	CHECK(rl_parse_rate("0.001k", &v) == 0 && v == 1);
	CHECK(rl_parse_rate("1T", &v) < 0);
	CHECK(rl_parse_rate("0.5", &v) < 0);   /* not a whole bit/s */
	CHECK(rl_parse_rate("0", &v) < 0);
	CHECK(rl_parse_rate("1001G", &v) < 0); /* above 1 Tbit/s */
	CHECK(rl_parse_rate("1000G", &v) == 0 && v == 1000000000000ull);
	CHECK(rl_parse_rate("k", &v) < 0 && rl_parse_rate("1.k", &v) < 0 && rl_parse_rate("-1", &v) < 0);
	CHECK(rl_parse_rate("99999999999999999999999999", &v) < 0);
	CHECK(rl_parse_bytes("64k", &v) == 0 && v == 65536);
	CHECK(rl_parse_bytes("1500", &v) == 0 && v == 1500);
	CHECK(rl_parse_bytes("0", &v) == 0 && v == 0);
	CHECK(rl_parse_bytes("1.5kb", &v) == 0 && v == 1536);
	CHECK(rl_parse_bytes("1M", &v) == 0 && v == 1048576);
	CHECK(rl_parse_bytes("1025m", &v) < 0 && rl_parse_bytes("10x", &v) < 0);
	CHECK_EQ(rl_parse_dscp("ef"), 46);
	CHECK_EQ(rl_parse_dscp("af11"), 10);
	CHECK_EQ(rl_parse_dscp("af43"), 38);
	CHECK_EQ(rl_parse_dscp("cs6"), 48);
	CHECK_EQ(rl_parse_dscp("63"), 63);
	CHECK(rl_parse_dscp("64") < 0 && rl_parse_dscp("af44") < 0 && rl_parse_dscp("af51") < 0);
	/* colour-aware mapping: AF drop precedence */
	CHECK_EQ(rl_precolor(10), RL_GREEN);
	CHECK_EQ(rl_precolor(12), RL_YELLOW);
	CHECK_EQ(rl_precolor(14), RL_RED);
	CHECK_EQ(rl_precolor(38), RL_RED);
	CHECK_EQ(rl_precolor(36), RL_YELLOW);
	CHECK_EQ(rl_precolor(46), RL_GREEN);
	CHECK_EQ(rl_precolor(0), RL_GREEN);
	CHECK_EQ(rl_precolor(44), RL_GREEN); /* class 5 is not AF */
	CHECK_EQ(rl_precolor(13), RL_GREEN); /* not an AF code point (odd) */
}

static const char *GOOD =
	"# classes\n"
	"length frame\n"
	"class web match proto tcp dport 80 srtcm cir 10M cbs 64k ebs 128k yellow mark af12\n"
	"class voice match dscp ef,cs5 trtcm cir 1M pir 2M cbs 8k pbs 16k yellow mark 10 red pass\n"
	"class hosts per-flow color-aware match src 10.0.0.0/8 srtcm cir 800k cbs 3000 ebs 0 green mark af11\n"
	"class v6 match family ipv6 dst fd00::/16 srtcm cir 1G cbs 1m ebs 1m red drop\n"
	"\n"
	"class all match any srtcm cir 100M cbs 1500 ebs 1500  # catch-all\n";

static void test_conf(void)
{
	struct rl_conf cf;
	char err[512];
	CHECK(rl_conf_parse("rl.conf", GOOD, &cf, err, sizeof(err)) == 0);
	CHECK_EQ(cf.n, 5);
	CHECK_EQ(cf.len_frame, 1);
	const struct rl_class *c = &cf.c[0];
	CHECK(strcmp(c->name, "web") == 0 && c->proto == 6 && c->dport_lo == 80 && c->dport_hi == 80);
	CHECK(c->mp.kind == RL_SRTCM && c->mp.cir == 10000000 && c->mp.cbs == 65536 && c->mp.xbs == 131072);
	CHECK(c->act[RL_GREEN].kind == RL_ACT_PASS && c->act[RL_YELLOW].kind == RL_ACT_MARK &&
	      c->act[RL_YELLOW].dscp == 12 && c->act[RL_RED].kind == RL_ACT_DROP);
	CHECK_EQ(c->line, 3);
	c = &cf.c[1];
	CHECK(c->mp.kind == RL_TRTCM && c->mp.pir == 2000000 && c->mp.xbs == 16384);
	CHECK(c->dscp_mask == ((1ull << 46) | (1ull << 40)) && c->act[RL_RED].kind == RL_ACT_PASS);
	c = &cf.c[2];
	CHECK(c->per_flow && c->color_aware && c->family == 4 && c->has_src && c->mp.xbs == 0);
	CHECK(c->act[RL_GREEN].kind == RL_ACT_MARK && c->act[RL_GREEN].dscp == 10);
	CHECK(cf.c[3].family == 6 && cf.c[4].family == 0 && cf.c[4].line == 8);

	/* classification: first match */
	struct rl_pkt k;
	memset(&k, 0, sizeof(k));
	k.family = 4;
	k.proto = 6;
	k.has_ports = 1;
	k.dport = 80;
	inet_pton(AF_INET, "10.1.2.3", k.src);
	CHECK_EQ(rl_classify(&cf, &k), 0);
	k.dport = 81;
	CHECK_EQ(rl_classify(&cf, &k), 2);
	k.dscp = 40;
	CHECK_EQ(rl_classify(&cf, &k), 1);
	k.dscp = 0;
	inet_pton(AF_INET, "11.1.2.3", k.src);
	CHECK_EQ(rl_classify(&cf, &k), 4);
	k.has_ports = 0; /* a non-first fragment never matches a port */
	k.dport = 80;
	CHECK_EQ(rl_classify(&cf, &k), 4);
	memset(&k, 0, sizeof(k));
	k.family = 6;
	inet_pton(AF_INET6, "fd00:1::1", k.dst);
	CHECK_EQ(rl_classify(&cf, &k), 3);
	inet_pton(AF_INET6, "fe00:1::1", k.dst);
	CHECK_EQ(rl_classify(&cf, &k), 4);
	rl_conf_free(&cf);

	/* a file without a catch-all: unmatched */
	CHECK(rl_conf_parse("rl.conf", "class a match proto udp dport 1000-2000 srtcm cir 1k cbs 1 ebs 1\n",
			    &cf, err, sizeof(err)) == 0);
	memset(&k, 0, sizeof(k));
	k.family = 6;
	k.proto = 17;
	k.has_ports = 1;
	k.dport = 2000;
	CHECK_EQ(rl_classify(&cf, &k), 0);
	k.dport = 2001;
	CHECK_EQ(rl_classify(&cf, &k), -1);
	rl_conf_free(&cf);
	CHECK(rl_conf_parse("rl.conf", "# empty\n\n", &cf, err, sizeof(err)) == 0 && cf.n == 0);
	rl_conf_free(&cf);

	/* errors name file, line and field */
	expect_error("class a match any srtcm cir 10X cbs 1 ebs 1\n",
		     "rl.conf:1: cir: '10X' is not a rate in bit/s (1..1000G, e.g. 800k, 10M, 1.5G)");
	expect_error("\n\nclass a match any srtcm cir 1k cbs -1 ebs 1\n",
		     "rl.conf:3: cbs: '-1' is not a size in bytes (0..1024m, e.g. 1500, 64k, 1m)");
	expect_error("class a match any\n",
		     "rl.conf:1: meter: missing (srtcm cir R cbs B ebs B, or trtcm cir R pir R cbs B pbs B)");
	expect_error("class a match any srtcm cir 1k cbs 100\n", "rl.conf:1: ebs: missing (needed by srtcm)");
	expect_error("class a match any trtcm cir 1k pir 2k cbs 100\n", "rl.conf:1: pbs: missing (needed by trtcm)");
	expect_error("class a match any trtcm cir 1k pir 2k cbs 100 pbs 100 ebs 5\n",
		     "rl.conf:1: ebs: not a parameter of trtcm");
	expect_error("class a match any srtcm cir 1k cbs 100 ebs 100 pir 5k\n",
		     "rl.conf:1: pir: not a parameter of srtcm");
	expect_error("class a match any trtcm cir 2k pir 1k cbs 100 pbs 100\n",
		     "rl.conf:1: pir: must be at least cir (RFC 2698)");
	expect_error("class a match any trtcm cir 1k pir 1k cbs 0 pbs 100\n",
		     "rl.conf:1: cbs: must be greater than 0 (RFC 2698)");
	expect_error("class a match any srtcm cir 1k cbs 0 ebs 0\n",
		     "rl.conf:1: cbs: cbs and ebs cannot both be 0 (RFC 2697)");
	expect_error("class a match any srtcm trtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:1: trtcm: a class has one meter, srtcm or trtcm");
	expect_error("class a match dport 80 srtcm cir 1k cbs 1 ebs 1\n", "rl.conf:1: dport: needs proto tcp or udp");
	expect_error("class a match proto udp dport 99999 srtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:1: dport: '99999' is not a port or range (0..65535, N-M)");
	expect_error("class a match src 10.0.0.0/40 srtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:1: src: '10.0.0.0/40' is not an address or prefix");
	expect_error("class a match src 10.0.0.0/8 dst fd00::/8 srtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:1: dst: is IPv6 but src is IPv4");
	expect_error("class a match family ipv6 proto icmp srtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:1: proto: is IPv4 but family is IPv6");
	expect_error("class a match dscp 10,64 srtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:1: dscp: '64' is not a DSCP (0..63, be, csN, afXY, ef)");
	expect_error("class a match any srtcm cir 1k cbs 1 ebs 1 yellow mark\n",
		     "rl.conf:1: yellow: mark needs a DSCP (0..63, be, csN, afXY, ef)");
	expect_error("class a match any srtcm cir 1k cbs 1 ebs 1 red mark af99\n",
		     "rl.conf:1: red: mark needs a DSCP (0..63, be, csN, afXY, ef), not 'af99'");
	expect_error("class a match any srtcm cir 1k cbs 1 ebs 1 green frob\n",
		     "rl.conf:1: green: 'frob' is not pass, drop or mark DSCP");
	expect_error("class a match any srtcm cir 1k cbs 1 ebs 1 cir 2k\n", "rl.conf:1: cir: given twice");
	expect_error("class a match any srtcm cir 1k cbs 1 ebs\n", "rl.conf:1: ebs: missing value");
	expect_error("class a frobnicate any\n",
		     "rl.conf:1: 'frobnicate': unknown field (expected per-flow, color-aware, match, family, proto, "
		     "src, dst, sport, dport, dscp, srtcm, trtcm, cir, pir, cbs, ebs, pbs, green, yellow, red)");
	expect_error("class a match any proto tcp srtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:1: any: cannot be combined with other match fields");
	expect_error("class averyveryverylongname match any srtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:1: name: 'averyveryverylongname' is not 1-14 of [A-Za-z0-9_-]");
	expect_error("class\n", "rl.conf:1: name: missing is not 1-14 of [A-Za-z0-9_-]");
	expect_error("class a match any srtcm cir 1k cbs 1 ebs 1\nclass a match any srtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:2: name: 'a' already names the class on line 1");
	expect_error("length ip\nlength frame\n", "rl.conf:2: length: given twice (first on line 1)");
	expect_error("length l4\n", "rl.conf:1: length: expected 'length ip' or 'length frame'");
	expect_error("police a\n", "rl.conf:1: 'police': expected class or length");
	expect_error("class a match proto 256 srtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:1: proto: '256' is not tcp, udp, icmp, icmpv6 or 0..255");
	expect_error("class a match family ipx srtcm cir 1k cbs 1 ebs 1\n",
		     "rl.conf:1: family: 'ipx' is not ipv4 or ipv6");
	/* at most RL_CLASSES_MAX classes */
	size_t cap = (RL_CLASSES_MAX + 1) * 64;
	char *big = malloc(cap), *w = big;
	for (int i = 0; i <= RL_CLASSES_MAX; i++)
		w += sprintf(w, "class c%d match any srtcm cir 1k cbs 1 ebs 1\n", i);
	expect_error(big, "rl.conf:129: more than 128 classes");
	free(big);
}

/* ---------------------------------------------------------------- packets */

static uint32_t udp4(uint8_t *f, uint16_t sport, uint16_t dport, uint32_t payload, uint8_t tos)
{
	uint32_t tot = 20 + 8 + payload;
	memset(f, 0, 14 + tot);
	f[12] = 0x08;
	uint8_t *ip = f + 14;
	ip[0] = 0x45;
	ip[1] = tos;
	ip[2] = (uint8_t)(tot >> 8);
	ip[3] = (uint8_t)tot;
	ip[8] = 64;
	ip[9] = 17;
	inet_pton(AF_INET, "10.0.0.1", ip + 12);
	inet_pton(AF_INET, "10.0.0.2", ip + 16);
	cs_put16(ip + 10, cs_compute(ip, 20, 0));
	cs_put16(ip + 20, sport);
	cs_put16(ip + 22, dport);
	cs_put16(ip + 24, (uint16_t)(8 + payload));
	return 14 + tot;
}

static uint32_t tcp6(uint8_t *f, uint16_t sport, uint16_t dport, uint8_t tc, int ext)
{
	uint32_t plen = (ext ? 8 : 0) + 20;
	memset(f, 0, 14 + 40 + plen);
	f[12] = 0x86;
	f[13] = 0xdd;
	uint8_t *ip = f + 14;
	ip[0] = (uint8_t)(0x60 | tc >> 4);
	ip[1] = (uint8_t)(tc << 4 | 0x0a); /* flow label bits set: must survive a re-mark */
	ip[2] = 0xbc;
	ip[3] = 0xde;
	ip[4] = 0;
	ip[5] = (uint8_t)plen;
	ip[6] = ext ? 60 : 6;
	ip[7] = 64;
	inet_pton(AF_INET6, "fd00::1", ip + 8);
	inet_pton(AF_INET6, "fd00::2", ip + 24);
	uint8_t *l4 = ip + 40;
	if (ext) {
		l4[0] = 6; /* destination options, 8 bytes */
		l4 += 8;
	}
	cs_put16(l4, sport);
	cs_put16(l4 + 2, dport);
	l4[12] = 0x50;
	return 14 + 40 + plen;
}

static void test_packets(void)
{
	uint8_t f[2048];
	struct rl_pkt k;
	uint32_t n = udp4(f, 1234, 53, 100, (10 << 2) | 1);
	CHECK_EQ(rl_parse(f, n, &k), RL_P_IP);
	CHECK(k.family == 4 && k.proto == 17 && k.has_ports && k.sport == 1234 && k.dport == 53);
	CHECK(k.dscp == 10 && k.l3_len == 128 && k.l3_off == 14);
	/* Ethernet padding does not count; a shorter frame than the IP length is malformed */
	CHECK_EQ(rl_parse(f, n + 20, &k), RL_P_IP);
	CHECK_EQ(k.l3_len, 128);
	for (uint32_t cut = 0; cut < n; cut++)
		CHECK_EQ(rl_parse(f, cut, &k), RL_P_MALFORMED);
	/* re-mark: checksum stays valid, ECN kept */
	CHECK_EQ(rl_parse(f, n, &k), RL_P_IP);
	rl_set_dscp(f, &k, 46);
	CHECK_EQ(f[15], (46 << 2) | 1);
	CHECK_EQ(cs_fold(cs_sum(f + 14, 20, 0)), 0xffff);
	for (int d = 0; d < 64; d++) {
		struct rl_pkt k2;
		CHECK_EQ(rl_parse(f, n, &k2), RL_P_IP);
		rl_set_dscp(f, &k2, (uint8_t)d);
		CHECK_EQ(cs_fold(cs_sum(f + 14, 20, 0)), 0xffff);
		CHECK_EQ(rl_parse(f, n, &k2), RL_P_IP);
		CHECK(k2.dscp == d && (f[15] & 3) == 1);
	}
	/* a non-first fragment: IP, no ports */
	n = udp4(f, 1, 2, 10, 0);
	f[14 + 6] = 0x00;
	f[14 + 7] = 0x10;
	CHECK_EQ(rl_parse(f, n, &k), RL_P_IP);
	CHECK(!k.has_ports && k.proto == 17);
	/* IPv6 + extension header + TCP; traffic class re-mark keeps ECN and the flow label */
	n = tcp6(f, 4000, 443, (12 << 2) | 2, 1);
	CHECK_EQ(rl_parse(f, n, &k), RL_P_IP);
	CHECK(k.family == 6 && k.proto == 6 && k.sport == 4000 && k.dport == 443 && k.dscp == 12);
	CHECK_EQ(k.l3_len, 40 + 28);
	for (uint32_t cut = 0; cut < n; cut++)
		CHECK_EQ(rl_parse(f, cut, &k), RL_P_MALFORMED);
	CHECK_EQ(rl_parse(f, n, &k), RL_P_IP);
	rl_set_dscp(f, &k, 46);
	CHECK_EQ(rl_parse(f, n, &k), RL_P_IP);
	CHECK_EQ(k.dscp, 46);
	CHECK(f[14] >> 4 == 6 && ((f[15] >> 4) & 3) == 2 && (f[15] & 0x0f) == 0x0a && f[16] == 0xbc);
	/* VLAN */
	n = udp4(f + 4, 1, 5001, 10, 0);
	memset(f, 0, 12);
	f[12] = 0x81;
	f[13] = 0x00;
	f[16] = 0x08;
	f[17] = 0x00;
	CHECK_EQ(rl_parse(f, n + 4, &k), RL_P_IP);
	CHECK(k.l3_off == 18 && k.dport == 5001);
	CHECK_EQ(rl_parse(f, 17, &k), RL_P_MALFORMED);
	/* non-IP, bad headers */
	memset(f, 0, 64);
	f[12] = 0x08;
	f[13] = 0x06;
	CHECK_EQ(rl_parse(f, 60, &k), RL_P_NON_IP);
	n = udp4(f, 1, 2, 10, 0);
	f[14] = 0x44; /* IHL 4 */
	CHECK_EQ(rl_parse(f, n, &k), RL_P_MALFORMED);
	f[14] = 0x65; /* version 6 */
	CHECK_EQ(rl_parse(f, n, &k), RL_P_MALFORMED);
	n = tcp6(f, 1, 2, 0, 0);
	f[14 + 4] = f[14 + 5] = 0; /* jumbogram */
	CHECK_EQ(rl_parse(f, n, &k), RL_P_MALFORMED);
	n = tcp6(f, 1, 2, 0, 0);
	f[14 + 40 + 12] = 0x40; /* TCP data offset 4 */
	CHECK_EQ(rl_parse(f, n, &k), RL_P_MALFORMED);
	/* random frames: never read out of bounds (ASan), kind always one of the three */
	unsigned kinds[3] = { 0 };
	for (int i = 0; i < 200000; i++) {
		uint32_t len = (uint32_t)rnd_in(0, 200);
		uint8_t *buf = malloc(len ? len : 1);
		for (uint32_t j = 0; j < len; j++)
			buf[j] = (uint8_t)rnd();
		if (len >= 14 && rnd() % 2) {
			buf[12] = rnd() % 2 ? 0x08 : 0x86;
			buf[13] = buf[12] == 0x08 ? 0x00 : 0xdd;
			if (len >= 15)
				buf[14] = buf[12] == 0x08 ? (uint8_t)(0x45 + rnd() % 3) : (uint8_t)(0x60 | (buf[14] & 15));
			if (len > 18 && buf[12] == 0x08) {
				buf[16] = 0;
				buf[17] = (uint8_t)rnd_in(0, len - 14);
			}
		}
		int r = rl_parse(buf, len, &k);
		CHECK(r >= RL_P_IP && r <= RL_P_MALFORMED);
		if (r == RL_P_IP) {
			CHECK(k.l3_off + k.l3_len <= len);
			rl_set_dscp(buf, &k, (uint8_t)(rnd() % 64));
		}
		kinds[r]++;
		free(buf);
	}
	CHECK(kinds[0] > 1000 && kinds[1] > 1000 && kinds[2] > 1000);
}

/* ---------------------------------------------------------------- flow table */

static void check_reachable(const struct rl_ftab *t)
{
	uint32_t used = 0;
	for (uint32_t i = 0; i <= t->mask; i++) {
		const struct rl_fentry *e = &t->slot[i];
		if (!e->used)
			continue;
		used++;
		/* no empty slot between its home and its slot */
		for (uint32_t j = e->hash & t->mask; j != i; j = (j + 1) & t->mask)
			CHECK(t->slot[j].used);
	}
	CHECK_EQ(used, t->count);
}

static void test_flowtab(void)
{
	enum { CAP = 200, KEYS = 400 };
	struct rl_ftab t;
	uint64_t idle[2] = { 1000, 5000 };
	struct { int present; uint64_t last; } model[KEYS];
	memset(model, 0, sizeof(model));
	CHECK(rl_ftab_init(&t, CAP) == 0);
	CHECK_EQ(t.mask + 1, 512);
	uint64_t now = 1;
	unsigned full = 0, created = 0, expired = 0, hit = 0;
	for (int op = 0; op < 400000; op++) {
		now += rnd_in(0, 10);
		int key = (int)(rnd() % KEYS);
		struct rl_fkey fk;
		struct rl_pkt k;
		memset(&k, 0, sizeof(k));
		k.family = 4;
		k.proto = 17;
		k.sport = (uint16_t)key;
		uint16_t cls = (uint16_t)(key & 1);
		rl_fkey_make(&fk, &k, cls);
		/* few distinct hashes: long probe runs and wrap-around */
		uint32_t h = (uint32_t)(rl_fkey_hash(&fk) % 37) * 13 + 500;
		if (rnd() % 50 == 0) {
			uint32_t n = (uint32_t)rnd_in(1, 700);
			uint32_t del = rl_ftab_sweep(&t, n, now, idle);
			expired += del;
			/* the sweep removed expired flows only, and all of them when it saw every slot */
			int left[KEYS] = { 0 };
			for (uint32_t i = 0; i <= t.mask; i++)
				if (t.slot[i].used)
					left[t.slot[i].key.sport] = 1;
			unsigned gone = 0;
			for (int q = 0; q < KEYS; q++) {
				int is_expired = model[q].present && now - model[q].last > idle[q & 1];
				if (model[q].present && !left[q]) {
					CHECK(is_expired);
					gone++;
				}
				CHECK(!left[q] || model[q].present);
				if (n - del >= t.mask + 1) /* it saw every slot */
					CHECK(!(is_expired && left[q]));
				model[q].present = left[q];
			}
			CHECK_EQ(gone, del);
			check_reachable(&t);
			continue;
		}
		int cr;
		uint32_t before = t.count;
		struct rl_fentry *e = rl_ftab_get(&t, &fk, h, now, idle, &cr);
		if (model[key].present) {
			CHECK(e != NULL);
			CHECK(memcmp(&e->key, &fk, sizeof(fk)) == 0);
			CHECK_EQ(e->m.last, model[key].last);
			CHECK_EQ(cr, now - model[key].last > idle[cls] ? 2 : 0);
			hit++;
		} else if (before >= CAP) {
			CHECK(e == NULL);
			full++;
			continue;
		} else {
			CHECK(e != NULL && cr == 1);
			created++;
			model[key].present = 1;
		}
		e->m.last = now;
		model[key].last = now;
	}
	/* the sweep really removed expired entries only: everything left is either fresh or unswept */
	check_reachable(&t);
	CHECK(full > 1000 && created > 1000 && expired > 1000 && hit > 10000);
	rl_ftab_clear(&t);
	CHECK_EQ(t.count, 0);
	rl_ftab_free(&t);
	CHECK(rl_ftab_init(&t, 0) < 0);
}

int main(void)
{
	test_meter_by_hand();
	test_meter_vs_rfc();
	test_meter_large();
	test_units();
	test_conf();
	test_packets();
	test_flowtab();
	printf("test_ratelimit: ok\n");
	return 0;
}
