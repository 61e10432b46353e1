/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests of the l2switch NF's logic (nfs/l2switch/conf.h, fdb.h, pkt.h):
 * config parsing and its error messages, the VLAN map, the FDB against a brute-force model under
 * a fake clock (learning, moves, aging, sweep, capacity), and the per-frame decisions (forward with
 * tag push/pop, flood port sets per tagging, filtering, VLAN drops, malformed and random frames).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "l2switch/pkt.h"

#define SEC 1000000000ull

/* ---- config ---- */

static const char *names[] = { "a", "b", "c", "trunk", "d", "e" };

static int name_id(void *arg, const char *name)
{
	(void)arg;
	for (int i = 0; i < 6; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

static void expect_err(const char *text, const char *msg)
{
	struct l2_conf *c = malloc(sizeof(*c));
	char err[512] = "";
	int rc = l2_conf_parse("sw.conf", text, c, err, sizeof(err));
	if (rc == 0 || strstr(err, msg) == NULL) {
		fprintf(stderr, "config %s: got rc %d '%s', wanted '%s'\n", text, rc, err, msg);
		exit(1);
	}
	free(c);
}

static void test_conf(void)
{
	static struct l2_conf c;
	static struct l2_vlan_map vm;
	char err[512];
	const char *text = "# a switch\n"
			   "port a access 10\n"
			   "port b   access 10   # same VLAN\n"
			   "\n"
			   "port c access 20\n"
			   "port trunk trunk 10,20,100-102 native 30\n"
			   "port d\n"
			   "aging 7\n"
			   "max-macs 100\n";
	CHECK_EQ(l2_conf_parse("sw.conf", text, &c, err, sizeof(err)), 0);
	CHECK_EQ(c.nports, 5);
	CHECK_EQ(c.aging_s, 7);
	CHECK_EQ(c.max_macs, 100);
	CHECK_EQ(l2_conf_resolve(&c, "sw.conf", 6, name_id, NULL, &vm, err, sizeof(err)), 0);
	CHECK_EQ(vm.ports, 0x1f);
	CHECK_EQ(vm.pvid[0], 10);
	CHECK_EQ(vm.pvid[2], 20);
	CHECK_EQ(vm.pvid[3], 30);
	CHECK_EQ(vm.pvid[4], 1);
	CHECK_EQ(vm.pvid[5], 0);
	CHECK_EQ(vm.untagged[10], 0x3);
	CHECK_EQ(vm.tagged[10], 0x8);
	CHECK_EQ(vm.untagged[20], 0x4);
	CHECK_EQ(vm.tagged[20], 0x8);
	CHECK_EQ(vm.untagged[30], 0x8);
	CHECK_EQ(vm.tagged[30], 0);
	CHECK_EQ(vm.tagged[101], 0x8);
	CHECK_EQ(vm.tagged[103], 0);
	CHECK_EQ(vm.untagged[1], 0x10);

	/* defaults, and no port lines: every port is access VLAN 1 */
	CHECK_EQ(l2_conf_parse("x", "", &c, err, sizeof(err)), 0);
	CHECK_EQ(c.aging_s, 300);
	CHECK_EQ(c.max_macs, 8192);
	CHECK_EQ(l2_conf_resolve(&c, "x", 3, name_id, NULL, &vm, err, sizeof(err)), 0);
	CHECK_EQ(vm.ports, 0x7);
	CHECK_EQ(vm.untagged[1], 0x7);
	CHECK_EQ(vm.pvid[2], 1);
	CHECK_EQ(vm.pvid[3], 0);

	/* trunk "all", native removed from the tagged set */
	CHECK_EQ(l2_conf_parse("x", "port trunk trunk all native 5\n", &c, err, sizeof(err)), 0);
	CHECK_EQ(l2_conf_resolve(&c, "x", 6, name_id, NULL, &vm, err, sizeof(err)), 0);
	CHECK_EQ(vm.tagged[1], 0x8);
	CHECK_EQ(vm.tagged[4094], 0x8);
	CHECK_EQ(vm.tagged[5], 0);
	CHECK_EQ(vm.untagged[5], 0x8);
	CHECK_EQ(vm.tagged[4095], 0);

	/* resolve errors name the line */
	CHECK_EQ(l2_conf_parse("sw.conf", "port a\n\nport nosuch access 3\n", &c, err, sizeof(err)), 0);
	CHECK_EQ(l2_conf_resolve(&c, "sw.conf", 6, name_id, NULL, &vm, err, sizeof(err)), -1);
	CHECK(strstr(err, "sw.conf:3: port: sluiced has no port 'nosuch'") != NULL);

	/* parse errors: file, line, field */
	expect_err("port a access 10\nport a access 11\n", "sw.conf:2: port: 'a' configured twice (first on line 1)");
	expect_err("port a access 0\n", "sw.conf:1: access: '0' is not a VLAN id (1..4094)");
	expect_err("port a access 4095\n", "sw.conf:1: access: '4095' is not a VLAN id (1..4094)");
	expect_err("port a access\n", "sw.conf:1: access: expected 'port NAME access VLAN'");
	expect_err("port a access 10 extra\n", "sw.conf:1: access: expected");
	expect_err("\n\nport a hybrid 10\n", "sw.conf:3: mode: 'hybrid' is not access or trunk");
	expect_err("port a trunk 10,5000\n", "sw.conf:1: trunk: '5000' is not a VLAN id");
	expect_err("port a trunk 20-10\n", "sw.conf:1: trunk: '20-10' is not a VLAN id");
	expect_err("port a trunk 10,,20\n", "sw.conf:1: trunk: '10,,20' is not a VLAN id");
	expect_err("port a trunk 10,\n", "sw.conf:1: trunk: '10,' is not a VLAN id");
	expect_err("port a trunk x\n", "sw.conf:1: trunk: 'x' is not a VLAN id");
	expect_err("port a trunk 10 native\n", "sw.conf:1: trunk: expected 'port NAME trunk VLANS [native VLAN]'");
	expect_err("port a trunk 10 native 9999\n", "sw.conf:1: native: '9999' is not a VLAN id (1..4094)");
	expect_err("port a trunk 10 pvid 3\n", "sw.conf:1: 'pvid': unknown field (expected native)");
	expect_err("aging 0\n", "sw.conf:1: aging: '0' is not a number in 1..1000000 (seconds)");
	expect_err("aging 5\naging 6\n", "sw.conf:2: aging: given twice (first on line 1)");
	expect_err("aging\n", "sw.conf:1: aging: expected 'aging SECONDS'");
	expect_err("max-macs 99999999\n", "sw.conf:1: max-macs: '99999999' is not a number in 1..16777216");
	expect_err("max-macs -1\n", "sw.conf:1: max-macs: '-1' is not a number");
	expect_err("bridge br0\n", "sw.conf:1: 'bridge': unknown statement (port, aging, max-macs)");
	expect_err("port\n", "sw.conf:1: port: expected 'port NAME");
	expect_err("port aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", "sw.conf:1: port: name");
}

/* ---- FDB against a brute-force model ---- */

struct model_entry {
	uint64_t key, seen;
	uint16_t port;
	int used;
};

static void test_fdb_model(void)
{
	enum { MAXM = 600, KEYS = 500 };
	struct l2_fdb f;
	struct l2_fdb_stats st = { 0 };
	static struct model_entry m[KEYS];
	uint64_t keys[KEYS];
	uint64_t aging = 10 * SEC, now = 1000 * SEC;
	uint64_t learned = 0, moved = 0;
	CHECK_EQ(l2_fdb_init(&f, MAXM, aging), 0);
	CHECK_EQ(f.mask + 1, 2048);
	srand(5);
	for (int k = 0; k < KEYS; k++) {
		uint8_t mac[6] = { 2, 0, 0, 0, (uint8_t)(k >> 8), (uint8_t)k };
		/* some keys share the MAC in another VLAN */
		keys[k] = l2_key((uint16_t)(1 + k % 3), mac);
	}
	for (int it = 0; it < 400000; it++) {
		now += (uint64_t)(rand() % 1000) * 100000; /* 0..0.1 s per step */
		int k = rand() % KEYS;
		struct model_entry *e = &m[k];
		int live = e->used && now - e->seen < aging;
		int op = rand() % 4;
		if (op == 1)
			l2_fdb_sweep(&f, now, 5, &st); /* and a lookup */
		switch (op) {
		case 0: { /* learn */
			uint16_t port = (uint16_t)(rand() % 4);
			CHECK_EQ(l2_fdb_learn(&f, keys[k], port, now, &st), 0);
			if (!live)
				learned++;
			else if (e->port != port)
				moved++;
			e->used = 1;
			e->key = keys[k];
			e->port = port;
			e->seen = now;
			break;
		}
		default: {
			const struct l2_fdb_entry *fe = l2_fdb_find(&f, keys[k], now, &st);
			CHECK_EQ(fe != NULL, live);
			if (fe)
				CHECK_EQ(fe->port, e->port);
			if (!live)
				e->used = 0;
			break;
		}
		}
		CHECK_EQ(st.learned, learned);
		CHECK_EQ(st.moved, moved);
		CHECK_EQ(st.full, 0);
		if (it % 50000 == 0 || it == 399999) {
			uint32_t nlive = 0;
			l2_fdb_expire_all(&f, now, &st);
			for (int j = 0; j < KEYS; j++) {
				if (m[j].used && now - m[j].seen < aging)
					nlive++;
				else
					m[j].used = 0;
			}
			CHECK_EQ(f.count, nlive);
			/* every entry reachable, nothing aged that the model still has */
			for (int j = 0; j < KEYS; j++) {
				const struct l2_fdb_entry *fe = l2_fdb_find(&f, keys[j], now, &st);
				CHECK_EQ(fe != NULL, m[j].used);
			}
			CHECK_EQ(st.aged, learned - f.count);
		}
	}
	l2_fdb_free(&f);

	/* capacity: the max+1-th station is not learned (counted); aging makes room again */
	CHECK_EQ(l2_fdb_init(&f, 3, 2 * SEC), 0);
	memset(&st, 0, sizeof(st));
	uint8_t mac[6] = { 2, 0, 0, 0, 0, 1 };
	for (int i = 0; i < 3; i++) {
		mac[5] = (uint8_t)i;
		CHECK_EQ(l2_fdb_learn(&f, l2_key(1, mac), 0, 0, &st), 0);
	}
	mac[5] = 9;
	CHECK_EQ(l2_fdb_learn(&f, l2_key(1, mac), 0, SEC, &st), -1);
	CHECK_EQ(st.full, 1);
	CHECK(l2_fdb_find(&f, l2_key(1, mac), SEC, &st) == NULL);
	/* a known station still refreshes when full, and moves */
	mac[5] = 0;
	CHECK_EQ(l2_fdb_learn(&f, l2_key(1, mac), 2, SEC, &st), 0);
	CHECK_EQ(st.moved, 1);
	CHECK_EQ(f.count, 3);
	/* at 2 s the other two are dead; a sweep reclaims them, the refreshed one stays */
	l2_fdb_sweep(&f, 2 * SEC, f.mask + 1, &st);
	CHECK_EQ(st.aged, 2);
	CHECK_EQ(f.count, 1);
	mac[5] = 9;
	CHECK_EQ(l2_fdb_learn(&f, l2_key(1, mac), 1, 2 * SEC, &st), 0);
	CHECK_EQ(st.learned, 4);
	/* exactly at the aging time the entry is dead */
	mac[5] = 0;
	CHECK(l2_fdb_find(&f, l2_key(1, mac), 3 * SEC - 1, &st) != NULL);
	CHECK(l2_fdb_find(&f, l2_key(1, mac), 3 * SEC, &st) == NULL);
	CHECK_EQ(st.aged, 3);
	l2_fdb_free(&f);
}

/* ---- frames ---- */

#define HEAD 128
static uint8_t bufmem[2048];

static const uint8_t MAC_A[6] = { 2, 0, 0, 0, 0, 0xa };
static const uint8_t MAC_B[6] = { 2, 0, 0, 0, 0, 0xb };
static const uint8_t MAC_T[6] = { 2, 0, 0, 0, 0, 0x77 };
static const uint8_t BCAST[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

/* A frame dst <- src, tagged with `vid` (-1: untagged), 46 bytes of payload marked `mark`. */
static struct sl_pkt frame(const uint8_t *dst, const uint8_t *src, int vid, uint8_t mark, unsigned in)
{
	struct sl_pkt p = { .base = bufmem, .buf_size = sizeof(bufmem) };
	memset(bufmem, 0xee, sizeof(bufmem));
	uint8_t *d = bufmem + HEAD;
	uint32_t n = 0;
	memcpy(d, dst, 6);
	memcpy(d + 6, src, 6);
	n = 12;
	if (vid >= 0) {
		d[n++] = 0x81;
		d[n++] = 0x00;
		d[n++] = (uint8_t)(0xa0 | vid >> 8); /* PCP 5 */
		d[n++] = (uint8_t)vid;
	}
	d[n++] = 0x08;
	d[n++] = 0x00;
	memset(d + n, mark, 46);
	n += 46;
	p.d.off = HEAD;
	p.d.head = HEAD;
	p.d.len = (uint16_t)n;
	p.d.dest = (uint16_t)in;
	return p;
}

/* The frame's VLAN id (-1 untagged) after the decision; checks the rest of the frame is intact. */
static int vid_of(const struct sl_pkt *p, const uint8_t *dst, const uint8_t *src, uint8_t mark)
{
	const uint8_t *d = sl_pkt_data(p);
	CHECK(memcmp(d, dst, 6) == 0 && memcmp(d + 6, src, 6) == 0);
	int vid = -1, o = 12;
	if (d[12] == 0x81 && d[13] == 0) {
		vid = (d[14] << 8 | d[15]) & 0xfff;
		o = 16;
	}
	CHECK(d[o] == 0x08 && d[o + 1] == 0);
	CHECK_EQ(sl_pkt_len(p), o + 2 + 46);
	for (int i = 0; i < 46; i++)
		CHECK_EQ(d[o + 2 + i], mark);
	return vid;
}

static struct sl_out_set out_set_of(const struct sl_pkt *p)
{
	struct sl_out_set s;
	CHECK_EQ(p->d.action, SL_ACT_OUT_SET);
	memcpy(&s, sl_pkt_data(p) - sizeof(s), sizeof(s));
	CHECK_EQ(s.magic, SL_OUT_SET_MAGIC);
	CHECK_EQ(s.reserved, 0);
	return s;
}

/* ports: 0 a access 10, 1 b access 10, 2 c access 20, 3 trunk 10,20 native 30, 4 d access 30,
 * 5 e not in the bridge */
static void make_switch(struct l2sw *sw, uint64_t aging_s)
{
	static struct l2_conf c;
	char err[256];
	memset(sw, 0, sizeof(*sw));
	CHECK_EQ(l2_conf_parse("t", "port a access 10\nport b access 10\nport c access 20\n"
			       "port trunk trunk 10,20 native 30\nport d access 30\n", &c, err, sizeof(err)), 0);
	CHECK_EQ(l2_conf_resolve(&c, "t", 6, name_id, NULL, &sw->vm, err, sizeof(err)), 0);
	CHECK_EQ(l2_fdb_init(&sw->fdb, 64, aging_s * SEC), 0);
}

static void test_decisions(void)
{
	static struct l2sw sw;
	struct sl_pkt p;
	struct sl_out_set s;
	uint64_t t = 100 * SEC;
	make_switch(&sw, 5);

	/* broadcast from a (access 10): b as is, trunk tagged 10 (copy), nothing else */
	p = frame(BCAST, MAC_A, -1, 1, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	s = out_set_of(&p);
	CHECK_EQ(s.as_is, 0x2);
	CHECK_EQ(s.untag, 0);
	CHECK_EQ(s.tag, 0x8);
	CHECK_EQ(s.tci, 10);
	CHECK_EQ(vid_of(&p, BCAST, MAC_A, 1), -1);
	CHECK_EQ(sw.st.fdb.learned, 1);

	/* unknown unicast from the trunk tagged 10 to B: trunk-tagged ports none, so the tag is popped
	 * in place and a, b share the buffer */
	p = frame(MAC_B, MAC_T, 10, 2, 3);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	s = out_set_of(&p);
	CHECK_EQ(s.as_is, 0x3);
	CHECK_EQ(s.untag | s.tag, 0);
	CHECK_EQ(vid_of(&p, MAC_B, MAC_T, 2), -1);

	/* known unicast trunk(10) -> a: popped in place, OUT a */
	p = frame(MAC_A, MAC_T, 10, 3, 3);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FORWARD);
	CHECK_EQ(p.d.action, SL_ACT_OUT);
	CHECK_EQ(p.d.dest, 0);
	CHECK_EQ(vid_of(&p, MAC_A, MAC_T, 3), -1);
	/* a -> T (learned on the trunk in VLAN 10): tag 10 pushed in place */
	p = frame(MAC_T, MAC_A, -1, 4, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FORWARD);
	CHECK_EQ(p.d.dest, 3);
	CHECK_EQ(vid_of(&p, MAC_T, MAC_A, 4), 10);
	CHECK_EQ(p.d.head, HEAD - 4);
	CHECK_EQ(sw.st.forwarded, 2);

	/* T is known in VLAN 10 only: from c (VLAN 20) it is unknown -> flood in 20: trunk only, so
	 * the tag is pushed in place and the trunk takes the buffer */
	p = frame(MAC_T, MAC_B, -1, 5, 2);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	s = out_set_of(&p);
	CHECK_EQ(s.as_is, 0x8);
	CHECK_EQ(s.untag | s.tag, 0);
	CHECK_EQ(vid_of(&p, MAC_T, MAC_B, 5), 20);
	/* B (learned on c in VLAN 20) sends in VLAN 10 from b: a second, separate entry */
	p = frame(BCAST, MAC_B, -1, 6, 1);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	CHECK_EQ(sw.fdb.count, 4); /* A/10, T/10, B/20, B/10 */

	/* tagged broadcast from the trunk in VLAN 20: c untagged -> trunk has no other tagged port,
	 * popped in place */
	p = frame(BCAST, MAC_T, 20, 7, 3);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	s = out_set_of(&p);
	CHECK_EQ(s.as_is, 0x4);
	CHECK_EQ(vid_of(&p, BCAST, MAC_T, 7), -1);

	/* untagged from the trunk = native 30: d as is */
	p = frame(BCAST, MAC_T, -1, 8, 3);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	s = out_set_of(&p);
	CHECK_EQ(s.as_is, 0x10);
	CHECK_EQ(s.untag | s.tag, 0);
	/* tagged 30 on the trunk is accepted (native VLAN member) and leaves d untagged */
	p = frame(BCAST, MAC_T, 30, 9, 3);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	CHECK_EQ(out_set_of(&p).as_is, 0x10);
	CHECK_EQ(vid_of(&p, BCAST, MAC_T, 9), -1);

	/* a tagged frame of the access VLAN on an access port is accepted (as Linux does) */
	p = frame(BCAST, MAC_A, 10, 10, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	s = out_set_of(&p);
	CHECK_EQ(s.as_is, 0x8); /* the trunk shares the tagged buffer */
	CHECK_EQ(s.untag, 0x2); /* b gets an untagged copy */
	CHECK_EQ(s.tag, 0);
	/* a priority-tagged frame takes the port's VLAN into the tag, PCP kept */
	p = frame(BCAST, MAC_A, 0, 11, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	CHECK_EQ(vid_of(&p, BCAST, MAC_A, 11), 10);
	CHECK_EQ(sl_pkt_data(&p)[14] >> 5, 5);

	/* VLAN drops: other VLAN on an access port, VLAN not on the trunk, reserved 4095, untagged on a
	 * trunk without native, a port outside the bridge */
	uint64_t vd = sw.st.vlan_drop;
	p = frame(BCAST, MAC_A, 20, 12, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_VLAN_DROP);
	CHECK_EQ(p.d.action, SL_ACT_DROP);
	p = frame(BCAST, MAC_T, 99, 12, 3);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_VLAN_DROP);
	p = frame(BCAST, MAC_T, 4095, 12, 3);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_VLAN_DROP);
	p = frame(BCAST, MAC_A, -1, 12, 5);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_VLAN_DROP);
	p = frame(BCAST, MAC_A, -1, 12, 40);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_VLAN_DROP);
	CHECK_EQ(sw.st.vlan_drop, vd + 5);

	/* filtered: destination behind the ingress port */
	p = frame(MAC_T, MAC_B, -1, 13, 2); /* T/20 was learned from the tagged broadcast above */
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FORWARD);
	CHECK_EQ(p.d.dest, 3);
	CHECK_EQ(vid_of(&p, MAC_T, MAC_B, 13), 20);
	uint8_t mac_c[6] = { 2, 0, 0, 0, 0, 0xc };
	p = frame(MAC_B, mac_c, -1, 14, 2); /* B is on c in VLAN 20 */
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FILTERED);
	CHECK_EQ(p.d.action, SL_ACT_DROP);
	CHECK_EQ(sw.st.filtered, 1);
	/* a VLAN with no other port: nothing to flood to */
	static struct l2sw sw2;
	static struct l2_conf c2;
	char err[256];
	CHECK_EQ(l2_conf_parse("t", "port a access 10\nport b access 11\n", &c2, err, sizeof(err)), 0);
	CHECK_EQ(l2_conf_resolve(&c2, "t", 6, name_id, NULL, &sw2.vm, err, sizeof(err)), 0);
	CHECK_EQ(l2_fdb_init(&sw2.fdb, 8, SEC), 0);
	p = frame(BCAST, MAC_A, -1, 15, 0);
	CHECK_EQ(l2sw_pkt(&sw2, &p, t), L2_FILTERED);
	l2_fdb_free(&sw2.fdb);

	/* station move: A appears on b; frames to A now go to b */
	uint64_t moved = sw.st.fdb.moved;
	p = frame(BCAST, MAC_A, -1, 16, 1);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	CHECK_EQ(sw.st.fdb.moved, moved + 1);
	p = frame(MAC_A, MAC_T, 10, 17, 3);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FORWARD);
	CHECK_EQ(p.d.dest, 1);

	/* aging (5 s): at t+5 s A's entry is dead and the frame floods */
	p = frame(MAC_A, MAC_T, 10, 18, 3);
	CHECK_EQ(l2sw_pkt(&sw, &p, t + 5 * SEC), L2_FLOOD);
	CHECK(sw.st.fdb.aged >= 1);

	/* multicast and link-local destinations; invalid sources */
	uint8_t mcast[6] = { 0x01, 0x00, 0x5e, 0, 0, 1 }, stp[6] = { 0x01, 0x80, 0xc2, 0, 0, 0 },
		lldp[6] = { 0x01, 0x80, 0xc2, 0, 0, 0x0e }, notll[6] = { 0x01, 0x80, 0xc2, 0, 0, 0x10 },
		zero[6] = { 0 };
	p = frame(mcast, MAC_A, -1, 19, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	p = frame(stp, MAC_A, -1, 19, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_LINK_LOCAL);
	p = frame(lldp, MAC_A, -1, 19, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_LINK_LOCAL);
	p = frame(notll, MAC_A, -1, 19, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_FLOOD);
	uint64_t learned = sw.st.fdb.learned, mal = sw.st.malformed;
	p = frame(MAC_B, mcast, -1, 20, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_MALFORMED);
	p = frame(MAC_B, zero, -1, 20, 0);
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_MALFORMED);
	CHECK_EQ(sw.st.fdb.learned, learned);
	CHECK_EQ(sw.st.malformed, mal + 2);

	/* no headroom for a tag push (known unicast to the trunk) or for the port set */
	p = frame(MAC_T, MAC_A, -1, 21, 0);
	p.d.head = 2;
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_NO_ROOM);
	CHECK_EQ(p.d.action, SL_ACT_DROP);
	p = frame(BCAST, MAC_A, -1, 21, 0);
	p.d.head = 31;
	CHECK_EQ(l2sw_pkt(&sw, &p, t), L2_NO_ROOM);
	CHECK_EQ(sw.st.no_room, 2);

	/* truncation: every length below a full header is malformed, never read past (ASan) */
	for (uint32_t l = 0; l < 18; l++) {
		uint8_t *small = malloc(l ? l : 1);
		struct sl_pkt q = frame(BCAST, MAC_A, 10, 22, 0);
		memcpy(small, sl_pkt_data(&q), l);
		q.base = small;
		q.d.off = 0;
		q.d.head = 0;
		q.d.len = (uint16_t)l;
		q.buf_size = l;
		int v = l2sw_pkt(&sw, &q, t);
		CHECK(v == L2_MALFORMED);
		free(small);
	}
	l2_fdb_free(&sw.fdb);
}

/* random frames on random ports: never crash, never read or write outside the buffer (ASan), and
 * every verdict leaves a consistent action */
static void test_random(void)
{
	static struct l2sw sw;
	make_switch(&sw, 1);
	srand(11);
	for (int it = 0; it < 300000; it++) {
		uint32_t len = (uint32_t)(rand() % 80), head = (uint32_t)(rand() % 48);
		uint8_t *buf = malloc(head + len + 1);
		for (uint32_t i = 0; i < head + len; i++)
			buf[i] = (uint8_t)rand();
		if (len >= 18 && (rand() & 1)) {
			buf[head + 12] = 0x81;
			buf[head + 13] = 0x00;
			buf[head + 14] &= 0xf0;
			buf[head + 15] = (uint8_t)(rand() % 4 == 0 ? 0 : rand() & 1 ? 10 : 20);
		}
		if (len >= 12 && rand() % 8 != 0) {
			buf[head] = 2;
			buf[head + 1] = buf[head + 2] = buf[head + 3] = buf[head + 4] = 0;
			buf[head + 5] = (uint8_t)(rand() % 4);
			buf[head + 6] = 2;
			buf[head + 7] = buf[head + 8] = buf[head + 9] = buf[head + 10] = 0;
			buf[head + 11] = (uint8_t)(rand() % 4);
		}
		struct sl_pkt p = { .base = buf, .buf_size = head + len };
		p.d.off = head;
		p.d.head = (uint16_t)head;
		p.d.len = (uint16_t)len;
		p.d.dest = (uint16_t)(rand() % 7);
		int v = l2sw_pkt(&sw, &p, (uint64_t)it * 1000000ull + (uint64_t)(it / 50000) * 2 * SEC); /* idle gaps */
		switch (v) {
		case L2_FORWARD:
			CHECK_EQ(p.d.action, SL_ACT_OUT);
			CHECK(p.d.dest < 5);
			break;
		case L2_FLOOD: {
			struct sl_out_set s = out_set_of(&p);
			CHECK(((s.as_is | s.untag | s.tag) & ~0x1full) == 0);
			CHECK(s.as_is | s.untag | s.tag);
			break;
		}
		default:
			CHECK_EQ(p.d.action, SL_ACT_DROP);
		}
		CHECK(p.d.off + p.d.len <= head + len + 4);
		free(buf);
	}
	CHECK(sw.st.forwarded > 1000 && sw.st.flooded > 1000 && sw.st.filtered > 1000);
	CHECK(sw.st.fdb.aged > 0 && sw.st.fdb.moved > 0);
	l2_fdb_free(&sw.fdb);
}

int main(void)
{
	test_conf();
	test_fdb_model();
	test_decisions();
	test_random();
	printf("test_l2switch: ok\n");
	return 0;
}
