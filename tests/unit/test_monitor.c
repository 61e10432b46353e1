/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-monitor's parts: the pcapng writer (a file written, then parsed back block by block),
 * the frame classifier (valid and malformed frames, random frames in exact-size buffers so ASan
 * sees any over-read) and the flow table (random insert/remove against a brute-force reference).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "monitor/flow.h"
#include "monitor/pcapng.h"

/* ---------------------------------------------------------------- pcapng */

static uint32_t rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static uint16_t rd16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}

/* Find option `code` in the options at p..end; returns its value and length, or NULL. Checks that
 * the options are well formed and end with opt_endofopt exactly at `end`. */
static const uint8_t *find_opt(const uint8_t *p, const uint8_t *end, uint16_t code, uint16_t *len)
{
	const uint8_t *found = NULL;
	for (;;) {
		CHECK(p + 4 <= end);
		uint16_t c = rd16(p), l = rd16(p + 2);
		if (c == 0) {
			CHECK_EQ(l, 0);
			CHECK(p + 4 == end);
			return found;
		}
		CHECK(p + 4 + png_pad4(l) <= end);
		for (uint32_t i = l; i < png_pad4(l); i++)
			CHECK_EQ(p[4 + i], 0); /* padding is zero */
		if (c == code) {
			found = p + 4;
			*len = l;
		}
		p += 4 + png_pad4(l);
	}
}

static uint8_t pkt_byte(unsigned k, unsigned i)
{
	return (uint8_t)(k * 31 + i * 7 + 1);
}

static void test_pcapng(void)
{
	char path[] = "/tmp/test_monitor_XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	struct png_writer w;
	CHECK_EQ(png_init(&w, fd, 1000), 0); /* raised to PNG_BUF_MIN */
	CHECK_EQ(w.cap, PNG_BUF_MIN);
	CHECK_EQ(png_shb(&w, "sluice-nf-monitor"), 0);
	CHECK_EQ(png_idb(&w, PNG_LINKTYPE_ETHERNET, 65535, "client"), 0);
	CHECK_EQ(png_idb(&w, PNG_LINKTYPE_ETHERNET, 65535, "srv"), 1);
	CHECK_EQ(png_idb(&w, PNG_LINKTYPE_ETHERNET, 128, NULL), 2);

	/* sizes covering every padding, plus big ones that overflow the buffer (several flushes) */
	enum { NP = 40 };
	uint32_t caplen[NP], origlen[NP];
	uint64_t ts[NP];
	static uint8_t data[65535];
	for (unsigned k = 0; k < NP; k++) {
		origlen[k] = k < 30 ? 14 + k : 60000 + k;
		caplen[k] = k % 5 == 4 ? origlen[k] / 2 : origlen[k];
		ts[k] = 1700000000123456789ull + k * 1000003ull;
		for (unsigned i = 0; i < caplen[k]; i++)
			data[i] = pkt_byte(k, i);
		CHECK_EQ(png_epb(&w, k % 3, ts[k], data, caplen[k], origlen[k]), 0);
	}
	CHECK(w.written > 0); /* the big packets forced flushes */
	uint64_t total = png_total(&w);
	CHECK_EQ(png_flush(&w), 0);
	CHECK_EQ(w.written, total);
	CHECK_EQ(w.used, 0);

	/* read it back */
	off_t size = lseek(fd, 0, SEEK_END);
	CHECK_EQ(size, (off_t)total);
	uint8_t *f = malloc((size_t)size);
	CHECK(f != NULL);
	CHECK_EQ(pread(fd, f, (size_t)size, 0), size);
	unsigned nshb = 0, nidb = 0, nepb = 0;
	for (off_t off = 0; off < size;) {
		CHECK(off + 12 <= size);
		uint32_t type = rd32(f + off), len = rd32(f + off + 4);
		CHECK(len % 4 == 0 && len >= 12 && off + len <= size);
		CHECK_EQ(rd32(f + off + len - 4), len); /* trailing length */
		const uint8_t *b = f + off, *end = b + len - 4;
		uint16_t ol;
		const uint8_t *o;
		if (type == PNG_BT_SHB) {
			CHECK_EQ(off, 0);
			CHECK_EQ(rd32(b + 8), PNG_BYTE_ORDER_MAGIC);
			CHECK_EQ(rd16(b + 12), 1);
			CHECK_EQ(rd16(b + 14), 0);
			for (int i = 16; i < 24; i++)
				CHECK_EQ(b[i], 0xff); /* section length unknown */
			o = find_opt(b + 24, end, PNG_SHB_USERAPPL, &ol);
			CHECK(o != NULL && ol == strlen("sluice-nf-monitor") && memcmp(o, "sluice-nf-monitor", ol) == 0);
			nshb++;
		} else if (type == PNG_BT_IDB) {
			CHECK_EQ(nshb, 1);
			CHECK_EQ(nepb, 0);
			CHECK_EQ(rd16(b + 8), PNG_LINKTYPE_ETHERNET);
			CHECK_EQ(rd32(b + 12), nidb == 2 ? 128 : 65535);
			const char *want = nidb == 0 ? "client" : nidb == 1 ? "srv" : NULL;
			o = find_opt(b + 16, end, PNG_IF_NAME, &ol);
			if (want) {
				CHECK(o != NULL && ol == strlen(want) && memcmp(o, want, ol) == 0);
			} else {
				CHECK(o == NULL);
			}
			o = find_opt(b + 16, end, PNG_IF_TSRESOL, &ol);
			CHECK(o != NULL && ol == 1 && o[0] == 9);
			nidb++;
		} else if (type == PNG_BT_EPB) {
			unsigned k = nepb;
			CHECK(k < NP);
			CHECK_EQ(rd32(b + 8), k % 3);
			CHECK(rd32(b + 8) < nidb);
			uint64_t t = (uint64_t)rd32(b + 12) << 32 | rd32(b + 16);
			CHECK(t == ts[k]);
			CHECK_EQ(rd32(b + 20), caplen[k]);
			CHECK_EQ(rd32(b + 24), origlen[k]);
			CHECK_EQ(len, 32 + png_pad4(caplen[k]));
			for (unsigned i = 0; i < caplen[k]; i++)
				CHECK_EQ(b[28 + i], pkt_byte(k, i));
			for (unsigned i = caplen[k]; i < png_pad4(caplen[k]); i++)
				CHECK_EQ(b[28 + i], 0);
			nepb++;
		} else {
			CHECK(!"unexpected block type");
		}
		off += len;
	}
	CHECK_EQ(nshb, 1);
	CHECK_EQ(nidb, 3);
	CHECK_EQ(nepb, NP);

	png_free(&w);
	free(f);

	/* a write error sets err and stops the writer */
	CHECK_EQ(png_init(&w, -1, 0), 0);
	CHECK_EQ(png_shb(&w, "x"), 0);
	CHECK_EQ(png_flush(&w), -1);
	CHECK(w.err != 0);
	CHECK_EQ(png_epb(&w, 0, 0, data, 60, 60), -1);
	png_free(&w);

	close(fd);
	unlink(path);
}

/* ---------------------------------------------------------------- classifier */

struct frame {
	uint8_t b[256];
	uint32_t len;
};

static void eth(struct frame *f, uint16_t type)
{
	memset(f, 0, sizeof(*f));
	for (int i = 0; i < 12; i++)
		f->b[i] = (uint8_t)(0x10 + i);
	f->b[12] = (uint8_t)(type >> 8);
	f->b[13] = (uint8_t)type;
	f->len = 14;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* IPv4 header at 14 + L4 of l4len bytes (ports 1000 -> 2000 for TCP/UDP). */
static void ip4(struct frame *f, uint8_t proto, uint32_t l4len)
{
	eth(f, PP_ETH_P_IPV4);
	uint8_t *ip = f->b + 14, *l4 = ip + 20;
	ip[0] = 0x45;
	put16(ip + 2, (uint16_t)(20 + l4len));
	ip[8] = 64;
	ip[9] = proto;
	memcpy(ip + 12, (uint8_t[]){ 10, 0, 0, 1 }, 4);
	memcpy(ip + 16, (uint8_t[]){ 10, 0, 0, 2 }, 4);
	if (proto == PP_IPPROTO_TCP) {
		put16(l4, 1000);
		put16(l4 + 2, 2000);
		l4[12] = 5 << 4;
		l4[13] = MON_TCP_SYN | MON_TCP_ACK;
	} else if (proto == PP_IPPROTO_UDP) {
		put16(l4, 1000);
		put16(l4 + 2, 2000);
		put16(l4 + 4, (uint16_t)l4len);
	} else if (proto == MON_IPPROTO_ICMP) {
		l4[0] = 8;
		l4[1] = 0;
	}
	f->len = 14 + 20 + l4len;
}

static void ip6(struct frame *f, uint8_t nh, uint32_t l4len)
{
	eth(f, PP_ETH_P_IPV6);
	uint8_t *ip = f->b + 14, *l4 = ip + 40;
	ip[0] = 0x60;
	put16(ip + 4, (uint16_t)l4len);
	ip[6] = nh;
	ip[7] = 64;
	ip[8] = 0xfd;
	ip[23] = 1;
	ip[24] = 0xfd;
	ip[39] = 2;
	if (nh == PP_IPPROTO_UDP) {
		put16(l4, 53);
		put16(l4 + 2, 5353);
		put16(l4 + 4, (uint16_t)l4len);
	}
	f->len = 14 + 40 + l4len;
}

/* classify f in an exact-size heap copy (ASan catches any read past len) */
static int classify(const struct frame *f, struct mon_key *k, uint8_t *fl)
{
	uint8_t *p = malloc(f->len ? f->len : 1);
	CHECK(p != NULL);
	memcpy(p, f->b, f->len);
	int bad = mon_classify(p, f->len, 3, k, fl);
	free(p);
	CHECK_EQ(k->in_port, 3);
	return bad;
}

static void test_classify(void)
{
	struct frame f;
	struct mon_key k;
	uint8_t fl;

	ip4(&f, PP_IPPROTO_TCP, 20);
	CHECK_EQ(classify(&f, &k, &fl), 0);
	CHECK(k.family == 4 && k.proto == 6 && k.sport == 1000 && k.dport == 2000 && k.ethertype == 0x0800);
	CHECK(k.src[0] == 10 && k.src[3] == 1 && k.dst[3] == 2);
	CHECK_EQ(fl, MON_TCP_SYN | MON_TCP_ACK);
	f.len += 10; /* Ethernet padding after the IP packet is fine */
	CHECK_EQ(classify(&f, &k, &fl), 0);

	ip4(&f, PP_IPPROTO_UDP, 8 + 5);
	CHECK_EQ(classify(&f, &k, &fl), 0);
	CHECK(k.proto == 17 && k.sport == 1000 && k.dport == 2000 && fl == 0);

	ip4(&f, MON_IPPROTO_ICMP, 8);
	CHECK_EQ(classify(&f, &k, &fl), 0);
	CHECK(k.proto == 1 && k.sport == 8 && k.dport == 0);

	ip6(&f, PP_IPPROTO_UDP, 8);
	CHECK_EQ(classify(&f, &k, &fl), 0);
	CHECK(k.family == 6 && k.proto == 17 && k.sport == 53 && k.dport == 5353 && k.src[0] == 0xfd &&
	      k.dst[15] == 2);

	eth(&f, 0x0806);
	f.len = 42;
	CHECK_EQ(classify(&f, &k, &fl), 0);
	CHECK(k.family == 0 && k.ethertype == 0x0806);

	/* VLAN-tagged IPv4 */
	ip4(&f, PP_IPPROTO_UDP, 8);
	memmove(f.b + 18, f.b + 14, f.len - 14);
	put16(f.b + 12, PP_ETH_P_8021Q);
	put16(f.b + 14, 7);
	put16(f.b + 16, PP_ETH_P_IPV4);
	f.len += 4;
	CHECK_EQ(classify(&f, &k, &fl), 0);
	CHECK(k.family == 4 && k.sport == 1000);

	/* non-first IPv4 fragment: no ports, not malformed */
	ip4(&f, PP_IPPROTO_UDP, 8);
	put16(f.b + 14 + 6, 100);
	put16(f.b + 14 + 20, 0xffff);
	CHECK_EQ(classify(&f, &k, &fl), 0);
	CHECK(k.family == 4 && k.sport == 0);

	/* ---- malformed ---- */
	eth(&f, PP_ETH_P_IPV4);
	for (uint32_t n = 0; n < 14; n++) { /* truncated Ethernet */
		f.len = n;
		CHECK_EQ(classify(&f, &k, &fl), 1);
		CHECK(k.family == 0 && k.ethertype == 0);
	}
	eth(&f, PP_ETH_P_8021Q);
	f.len = 16; /* truncated VLAN tag */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK_EQ(k.ethertype, PP_ETH_P_8021Q);

	ip4(&f, PP_IPPROTO_TCP, 20);
	f.len = 14 + 19; /* truncated IPv4 header */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK(k.family == 0 && k.ethertype == 0x0800);

	ip4(&f, PP_IPPROTO_TCP, 20);
	f.b[14] = 0x44; /* IHL 4 */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	ip4(&f, PP_IPPROTO_TCP, 20);
	f.b[14] = 0x55; /* version 5 */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	ip4(&f, PP_IPPROTO_TCP, 20);
	f.b[14] = 0x4f; /* IHL 15: 60 bytes, frame has 40 */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK(k.family == 4 && k.proto == 6 && k.sport == 0); /* addresses known, no L4 */
	ip4(&f, PP_IPPROTO_TCP, 20);
	put16(f.b + 16, 19); /* total length < header */
	CHECK_EQ(classify(&f, &k, &fl), 1);

	ip4(&f, PP_IPPROTO_UDP, 8);
	put16(f.b + 16, 200); /* total length beyond the frame: truncated packet */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK(k.family == 4 && k.sport == 1000); /* what is there is still parsed */

	ip4(&f, PP_IPPROTO_TCP, 20);
	f.len -= 10;
	put16(f.b + 16, 30); /* TCP header of 10 bytes */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK(k.sport == 1000 && k.dport == 2000 && fl == 0);
	ip4(&f, PP_IPPROTO_TCP, 20);
	f.b[14 + 20 + 12] = 15 << 4; /* data offset 60 > 20 */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK_EQ(fl, MON_TCP_SYN | MON_TCP_ACK);
	ip4(&f, PP_IPPROTO_TCP, 20);
	f.b[14 + 20 + 12] = 4 << 4; /* data offset < 5 */
	CHECK_EQ(classify(&f, &k, &fl), 1);

	ip4(&f, PP_IPPROTO_UDP, 8);
	f.len -= 4;
	put16(f.b + 16, 24); /* UDP header of 4 bytes */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK(k.sport == 1000);
	ip4(&f, PP_IPPROTO_UDP, 8);
	put16(f.b + 14 + 20 + 4, 9); /* UDP length beyond the IP packet */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	ip4(&f, MON_IPPROTO_ICMP, 2);
	CHECK_EQ(classify(&f, &k, &fl), 1);

	ip6(&f, PP_IPPROTO_UDP, 8);
	f.len = 14 + 39; /* truncated IPv6 header */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK(k.family == 0 && k.ethertype == 0x86dd);
	ip6(&f, PP_IPPROTO_UDP, 8);
	f.b[14] = 0x40; /* version 4 in an IPv6 frame */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	ip6(&f, PP_IPPROTO_UDP, 8);
	put16(f.b + 14 + 4, 100); /* payload length beyond the frame */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK(k.family == 6 && k.sport == 53);
	ip6(&f, 60, 4); /* destination options header cut short */
	f.b[14 + 40] = PP_IPPROTO_UDP;
	f.b[14 + 41] = 1; /* 16 bytes, only 4 there */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK(k.family == 6 && k.proto == 0);
	ip6(&f, 60, 16); /* a complete one, then UDP cut */
	f.b[14 + 40] = PP_IPPROTO_UDP;
	f.b[14 + 41] = 0; /* 8 bytes */
	CHECK_EQ(classify(&f, &k, &fl), 1);
	CHECK(k.family == 6 && k.proto == 17);

	/* random frames, mostly with an IP ethertype: never a crash or an over-read (ASan build) */
	srand(7);
	for (int it = 0; it < 200000; it++) {
		f.len = (uint32_t)rand() % 120;
		for (uint32_t i = 0; i < f.len; i++)
			f.b[i] = (uint8_t)rand();
		if (f.len >= 14 && rand() % 4) {
			put16(f.b + 12, rand() % 2 ? PP_ETH_P_IPV4 : PP_ETH_P_IPV6);
			if (f.len > 14)
				f.b[14] = (uint8_t)((f.b[12] == 0x08 ? 0x40 : 0x60) | (f.b[14] & 0x0f));
			if (f.len > 23 && rand() % 2)
				f.b[23] = (uint8_t)(rand() % 2 ? 6 : 17);
		}
		classify(&f, &k, &fl);
	}
}

/* ---------------------------------------------------------------- table */

static void test_table(void)
{
	enum { CAP = 1000, KEYS = 3000 };
	struct mon_table t;
	static struct mon_key keys[KEYS];
	static int in[KEYS];
	CHECK_EQ(mon_init(&t, 0), -1);
	CHECK_EQ(mon_init(&t, CAP), 0);
	for (int i = 0; i < KEYS; i++) {
		memset(&keys[i], 0, sizeof(keys[i]));
		keys[i].family = 4;
		keys[i].proto = 17;
		keys[i].sport = (uint16_t)i;
		keys[i].src[0] = (uint8_t)(i >> 8);
	}
	uint32_t count = 0;
	uint64_t ids = 0;
	srand(11);
	for (int it = 0; it < 300000; it++) {
		int i = rand() % KEYS;
		if (rand() % 3) {
			struct mon_flow *e = mon_get(&t, &keys[i], mon_hash(&keys[i]), (uint64_t)it);
			if (in[i]) {
				CHECK(e != NULL && memcmp(&e->key, &keys[i], sizeof(keys[i])) == 0);
			} else if (count == CAP) {
				CHECK(e == NULL);
				continue;
			} else {
				CHECK(e != NULL && e->pkts == 0 && e->first_ns == (uint64_t)it);
				CHECK_EQ(e->id, ++ids);
				in[i] = 1;
				count++;
			}
			mon_account(e, 100, 0, 0, (uint64_t)it);
		} else if (in[i]) {
			/* find it, remove it */
			uint32_t j = mon_hash(&keys[i]);
			while (memcmp(&t.slot[j & t.mask].key, &keys[i], sizeof(keys[i])) != 0 ||
			       t.slot[j & t.mask].id == 0)
				j++;
			mon_remove(&t, j);
			in[i] = 0;
			count--;
		}
		CHECK_EQ(t.count, count);
		if (it % 10000 == 0) { /* every key present is reachable from its hash, absent ones not */
			uint32_t seen = 0;
			for (uint32_t s = 0; s <= t.mask; s++)
				seen += t.slot[s].id != 0;
			CHECK_EQ(seen, count);
			for (int q = 0; q < KEYS; q++) {
				int found = 0;
				for (uint32_t j = mon_hash(&keys[q]);; j++) {
					const struct mon_flow *e = &t.slot[j & t.mask];
					if (e->id == 0)
						break;
					if (memcmp(&e->key, &keys[q], sizeof(keys[q])) == 0) {
						found = 1;
						break;
					}
				}
				CHECK_EQ(found, in[q]);
			}
		}
	}
	CHECK(t.full > 0);

	/* JSON of one record */
	struct mon_flow e;
	memset(&e, 0, sizeof(e));
	e.key.family = 4;
	e.key.proto = 6;
	e.key.sport = 1;
	e.key.dport = 2;
	e.key.ethertype = 0x0800;
	e.key.src[0] = 10;
	e.key.dst[0] = 11;
	e.id = 5;
	e.pkts = 3;
	e.bytes = 180;
	e.tcp_flags = MON_TCP_SYN | MON_TCP_FIN | MON_TCP_ACK;
	char buf[1024];
	FILE *f = fmemopen(buf, sizeof(buf), "w");
	CHECK(f != NULL);
	CHECK_EQ(mon_flow_json(&e, "end", "cli", f), 0);
	fclose(f);
	CHECK(strstr(buf, "\"src\":\"10.0.0.0\",\"dst\":\"11.0.0.0\",\"sport\":1,\"dport\":2") != NULL);
	CHECK(strstr(buf, "\"tcp_flags\":19,\"tcp_flags_str\":\"FSA\"") != NULL);
	CHECK(strstr(buf, "\"in_if\":\"cli\"") != NULL && strstr(buf, "\"packets\":3,\"bytes\":180") != NULL);
	mon_free(&t);
}

int main(void)
{
	test_pcapng();
	test_classify();
	test_table();
	printf("test_monitor: ok\n");
	return 0;
}
