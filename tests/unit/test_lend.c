/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Descriptor validation: the rules that stand between an NF and the
 * manager's buffers (src/manager/lend.c).
 */
#include <string.h>

#include "check.h"
#include "lend.h"

#define NBUFS 8
#define BUF_SIZE 2176
#define HEAD 128

static uint32_t buf_off[NBUFS];
static struct sl_bufstate st[NBUFS];
static struct sl_lend L;

static void setup(void)
{
	memset(st, 0, sizeof(st));
	for (uint32_t i = 0; i < NBUFS; i++)
		buf_off[i] = 4096 + i * 2560; /* gaps between buffers, like mbuf headers */
	L = (struct sl_lend){ .region = 0, .nbufs = NBUFS, .buf_size = BUF_SIZE,
			      .region_size = 4096 + NBUFS * 2560, .buf_off = buf_off, .st = st };
}

/* Lend buffer b to NF nf (staged, then delivered into its RX ring) and return the descriptor the
 * NF would see. */
static struct sl_desc lend(uint32_t b, uint16_t nf, uint16_t len)
{
	struct sl_desc d;
	sl_lend_stage(&L, b, HEAD, len, 3, &d);
	sl_lend_deliver(&L, b, nf);
	return d;
}

static void test_good_return(void)
{
	setup();
	struct sl_desc d = lend(2, 5, 64);
	CHECK_EQ(st[2].owner, 6);
	CHECK_EQ(d.off, buf_off[2] + HEAD);
	CHECK_EQ(d.dest, 3); /* ingress port travels in dest on RX */
	CHECK_EQ(d.action, SL_ACT_NEXT);
	CHECK_EQ(sl_lend_check(&L, &d, 5, 4, 4), SL_DESC_OK);
	d.action = SL_ACT_DROP;
	CHECK_EQ(sl_lend_check(&L, &d, 5, 4, 4), SL_DESC_OK);
	d.action = SL_ACT_OUT;
	d.dest = 3;
	CHECK_EQ(sl_lend_check(&L, &d, 5, 4, 4), SL_DESC_OK);
	d.action = SL_ACT_TO_NF;
	d.dest = 0;
	CHECK_EQ(sl_lend_check(&L, &d, 5, 4, 4), SL_DESC_OK);
}

static void test_adjusted_head_and_tail(void)
{
	setup();
	struct sl_desc d = lend(1, 0, 100);
	/* prepend 14 bytes, as an encapsulating NF would */
	d.head -= 14;
	d.off -= 14;
	d.len += 14;
	CHECK_EQ(sl_lend_check(&L, &d, 0, 1, 1), SL_DESC_OK);
	/* use all the headroom and all the tailroom */
	d.off -= d.head;
	d.head = 0;
	d.len = BUF_SIZE;
	CHECK_EQ(sl_lend_check(&L, &d, 0, 1, 1), SL_DESC_OK);
	/* one byte past the end */
	d.len = BUF_SIZE + 1;
	CHECK_EQ(sl_lend_check(&L, &d, 0, 1, 1), SL_DESC_BAD_RANGE);
}

static void test_forged(void)
{
	setup();
	struct sl_desc d = lend(4, 1, 64);
	struct sl_desc f = d;
	f.region = 1;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 1, 1), SL_DESC_BAD_REGION);
	f = d;
	f.buf = NBUFS;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 1, 1), SL_DESC_BAD_BUF);
	f.buf = 0xffffffffu;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 1, 1), SL_DESC_BAD_BUF);
	/* another NF's buffer */
	CHECK_EQ(sl_lend_check(&L, &d, 2, 1, 1), SL_DESC_NOT_LENT);
	/* a buffer nobody holds */
	f = d;
	f.buf = 0;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 1, 1), SL_DESC_NOT_LENT);
	/* offset that does not match the buffer (pointing into another buffer) */
	f = d;
	f.off = buf_off[5] + HEAD;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 1, 1), SL_DESC_BAD_RANGE);
	/* headroom claimed larger than the buffer */
	f = d;
	f.head = BUF_SIZE;
	f.off = buf_off[4] + BUF_SIZE;
	f.len = 1;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 1, 1), SL_DESC_BAD_RANGE);
	/* bad action and destinations */
	f = d;
	f.action = SL_ACT__COUNT;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 1, 1), SL_DESC_BAD_ACTION);
	f.action = 0xff;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 1, 1), SL_DESC_BAD_ACTION);
	f = d;
	f.action = SL_ACT_OUT;
	f.dest = 2;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), SL_DESC_BAD_DEST);
	f.action = SL_ACT_TO_NF;
	f.dest = 9;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), SL_DESC_BAD_DEST);
	/* flow flags: one of PIN / UNPIN with a valid action; the destination is still checked */
	f = d;
	f.action = SL_ACT_OUT | SL_ACT_F_PIN;
	f.dest = 1;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), SL_DESC_OK);
	f.dest = 2;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), SL_DESC_BAD_DEST);
	f.action = SL_ACT_NEXT | SL_ACT_F_UNPIN;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), SL_DESC_OK);
	f.action = SL_ACT_NEXT | SL_ACT_F_PIN | SL_ACT_F_UNPIN;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), SL_DESC_BAD_ACTION);
	f.action = SL_ACT_DROP | 0x20; /* a flag bit with no meaning */
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), SL_DESC_BAD_ACTION);
	f.action = SL_ACT__COUNT | SL_ACT_F_PIN;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), SL_DESC_BAD_ACTION);
	/* port sets: the set needs headroom to live in; no flow flags (a flow entry cannot hold a set) */
	f = d;
	f.action = SL_ACT_OUT_SET;
	f.dest = 0xffff; /* ignored */
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), d.head >= sizeof(struct sl_out_set) ? SL_DESC_OK : SL_DESC_BAD_RANGE);
	f.action = SL_ACT_OUT_SET | SL_ACT_F_PIN;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), SL_DESC_BAD_ACTION);
	f = d;
	f.action = SL_ACT_OUT_SET;
	f.head = sizeof(struct sl_out_set) - 1;
	f.off = buf_off[d.buf] + f.head;
	CHECK_EQ(sl_lend_check(&L, &f, 1, 2, 9), SL_DESC_BAD_RANGE);
}

static void test_double_return(void)
{
	setup();
	struct sl_desc d = lend(3, 7, 64);
	CHECK_EQ(sl_lend_check(&L, &d, 7, 1, 1), SL_DESC_OK);
	sl_lend_return(&L, d.buf); /* the manager takes it back */
	CHECK_EQ(st[3].owner, SL_OWNER_NONE);
	CHECK_EQ(sl_lend_check(&L, &d, 7, 1, 1), SL_DESC_NOT_LENT);
	/* re-lent to someone else: the first NF still cannot return it */
	lend(3, 8, 64);
	CHECK_EQ(sl_lend_check(&L, &d, 7, 1, 1), SL_DESC_NOT_LENT);
}

/* Issue 15: ownership began when a packet was staged for an NF, before it reached the NF's RX ring.
 * An NF returning (a duplicate of) a buffer in that window had it accepted: the buffer went on while
 * also being delivered, so it was freed twice and `lent` fell below zero. Only a delivered buffer
 * can come back, and only once. */
static void test_staged_is_not_returnable(void)
{
	setup();
	struct sl_desc d;
	sl_lend_stage(&L, 5, HEAD, 64, 0, &d);
	CHECK_EQ(st[5].owner, SL_OWNER_NONE); /* staged: still the manager's */
	CHECK_EQ(sl_lend_check(&L, &d, 2, 1, 1), SL_DESC_NOT_LENT);
	sl_lend_deliver(&L, 5, 2);
	CHECK_EQ(st[5].owner, 3);
	CHECK_EQ(sl_lend_check(&L, &d, 2, 1, 1), SL_DESC_OK);
	sl_lend_return(&L, 5);
	CHECK_EQ(sl_lend_check(&L, &d, 2, 1, 1), SL_DESC_NOT_LENT); /* the same descriptor again */
	/* staged for the same NF again: a stale copy of the old descriptor is still refused */
	sl_lend_stage(&L, 5, HEAD, 64, 0, &d);
	CHECK_EQ(sl_lend_check(&L, &d, 2, 1, 1), SL_DESC_NOT_LENT);
}

static void test_buffer_past_region_end(void)
{
	setup();
	L.region_size = buf_off[NBUFS - 1] + 100; /* last buffer would overrun the region */
	struct sl_desc d = lend(NBUFS - 1, 0, 10);
	CHECK_EQ(sl_lend_check(&L, &d, 0, 1, 1), SL_DESC_BAD_RANGE);
}

static void test_verdict_names(void)
{
	for (int v = -3; v < 20; v++)
		CHECK(sl_desc_verdict_str(v) != NULL);
	CHECK(strcmp(sl_desc_verdict_str(SL_DESC_NOT_LENT), "buffer not lent to this NF") == 0);
	for (int v = -3; v < 20; v++)
		CHECK(sl_desc_verdict_key(v) != NULL);
	CHECK(strcmp(sl_desc_verdict_key(SL_DESC_NOT_LENT), "not_lent") == 0);
	CHECK(strcmp(sl_desc_verdict_key(SL_DESC_BAD_OUT_SET), "out_set") == 0);
	CHECK(strcmp(sl_desc_verdict_key(SL_DESC__COUNT), "unknown") == 0);
}

/* Next hops (docs/abi.md): TO_NF only to allowed services, OUT to allowed ports or the packet's
 * own ingress port, NEXT and DROP always; `any` allows everything. */
static void test_dest_auth(void)
{
	uint64_t bits[2] = { 1ull << 5, 1ull << (70 - 64) }; /* services 5 and 70 */
	struct sl_dest_auth a = { .any = false, .nsvc = 128, .svc = bits, .ports = 1ull << 2 };
	struct sl_desc d = { .action = SL_ACT_TO_NF, .dest = 5 };
	CHECK(sl_lend_dest_check(&a, &d, 0) == SL_DESC_OK);
	d.dest = 70;
	CHECK(sl_lend_dest_check(&a, &d, 0) == SL_DESC_OK);
	for (uint16_t s = 0; s < 300; s++) { /* every other id, in and past the bitmap */
		d.dest = s;
		CHECK((sl_lend_dest_check(&a, &d, 0) == SL_DESC_OK) == (s == 5 || s == 70));
	}
	d.dest = 0xffff;
	CHECK(sl_lend_dest_check(&a, &d, 0) == SL_DESC_FORBIDDEN);
	d.action = SL_ACT_OUT | SL_ACT_F_PIN;
	d.dest = 2;
	CHECK(sl_lend_dest_check(&a, &d, 0) == SL_DESC_OK);
	d.dest = 3;
	CHECK(sl_lend_dest_check(&a, &d, 0) == SL_DESC_FORBIDDEN);
	CHECK(sl_lend_dest_check(&a, &d, 3) == SL_DESC_OK); /* back out of its ingress port (reflect) */
	d.dest = 64;
	CHECK(sl_lend_dest_check(&a, &d, 64) == SL_DESC_FORBIDDEN);
	d.action = SL_ACT_NEXT;
	CHECK(sl_lend_dest_check(&a, &d, 0) == SL_DESC_OK);
	d.action = SL_ACT_DROP;
	CHECK(sl_lend_dest_check(&a, &d, 0) == SL_DESC_OK);
	CHECK(sl_lend_ports_ok(&a, 1ull << 2, 0));
	CHECK(sl_lend_ports_ok(&a, 1ull << 2 | 1ull << 7, 7));
	CHECK(!sl_lend_ports_ok(&a, 1ull << 2 | 1ull << 7, 0));
	struct sl_dest_auth any = { .any = true };
	d.action = SL_ACT_TO_NF;
	d.dest = 9999;
	CHECK(sl_lend_dest_check(&any, &d, 0) == SL_DESC_OK);
	CHECK(sl_lend_ports_ok(&any, ~0ull, 0));
	CHECK(strcmp(sl_desc_verdict_key(SL_DESC_FORBIDDEN), "forbidden_dest") == 0);
}

int main(void)
{
	test_dest_auth();
	test_good_return();
	test_adjusted_head_and_tail();
	test_forged();
	test_double_return();
	test_staged_is_not_returnable();
	test_buffer_past_region_end();
	test_verdict_names();
	printf("test_lend: ok\n");
	return 0;
}
