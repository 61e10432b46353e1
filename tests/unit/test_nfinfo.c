/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for the NF info page reader (src/manager/nfinfo.c): the manager reads counters an NF
 * wrote, so whatever the NF put there must come out bounded and clean.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nfinfo.h"

static struct sl_nf_info *page(void)
{
	struct sl_nf_info *p = calloc(1, NFINFO_BYTES);
	CHECK(p != NULL);
	char names[3][SL_NAME_MAX] = { "in", "out", "a-port-name-of-exactly-31-chars" };
	nfinfo_init(p, (const char(*)[SL_NAME_MAX])names, 3);
	return p;
}

static void put(struct sl_nf_info *p, uint32_t i, const void *name, size_t n, uint64_t v)
{
	memset(p->counter[i].name, 0, SL_COUNTER_NAME_MAX);
	memcpy(p->counter[i].name, name, n);
	p->counter[i].value = v;
}

static void test_init(void)
{
	struct sl_nf_info *p = page();
	CHECK_EQ(p->magic, SL_ABI_MAGIC);
	CHECK_EQ(p->port_count, 3);
	CHECK_EQ(p->counters_max, SL_COUNTERS_MAX);
	CHECK(!strcmp(p->port_name[1], "out"));
	CHECK(!strcmp(p->port_name[2], "a-port-name-of-exactly-31-chars"));
	CHECK(NFINFO_BYTES % 4096 == 0 && NFINFO_BYTES >= sizeof(struct sl_nf_info));
	free(p);
	/* more ports than the page holds: cut at SL_INFO_PORTS_MAX */
	static char many[SL_INFO_PORTS_MAX + 5][SL_NAME_MAX];
	p = calloc(1, NFINFO_BYTES);
	nfinfo_init(p, (const char(*)[SL_NAME_MAX])many, SL_INFO_PORTS_MAX + 5);
	CHECK_EQ(p->port_count, SL_INFO_PORTS_MAX);
	free(p);
}

/* Ports added and deleted at runtime (port_add, port_del): names and count follow; the other names
 * and ids stay. */
static void test_set_port(void)
{
	struct sl_nf_info *p = page();
	nfinfo_set_port(p, 3, "late", 4); /* added after the three */
	CHECK_EQ(p->port_count, 4);
	CHECK(!strcmp(p->port_name[3], "late") && !strcmp(p->port_name[2], "a-port-name-of-exactly-31-chars"));
	nfinfo_set_port(p, 1, NULL, 4); /* a hole: ids above keep theirs */
	CHECK_EQ(p->port_count, 4);
	CHECK(p->port_name[1][0] == '\0' && !strcmp(p->port_name[3], "late") && !strcmp(p->port_name[0], "in"));
	nfinfo_set_port(p, 3, NULL, 3); /* the last one goes: the count shrinks */
	CHECK_EQ(p->port_count, 3);
	CHECK(p->port_name[3][0] == '\0');
	nfinfo_set_port(p, 1, "x-name-longer-than-the-31-bytes-a-name-has", 3); /* cut, terminated */
	CHECK_EQ(strlen(p->port_name[1]), SL_NAME_MAX - 1);
	nfinfo_set_port(p, SL_INFO_PORTS_MAX, "beyond", SL_INFO_PORTS_MAX + 1); /* outside the page: ignored */
	CHECK_EQ(p->port_count, 3);
	nfinfo_set_port(p, SL_INFO_PORTS_MAX - 1, "top", SL_INFO_PORTS_MAX + 9); /* count capped */
	CHECK_EQ(p->port_count, SL_INFO_PORTS_MAX);
	free(p);
}

static void test_counters_clean(void)
{
	struct sl_nf_info *p = page();
	static struct sl_counter out[SL_COUNTERS_MAX];
	CHECK_EQ(nfinfo_counters(p, out, SL_COUNTERS_MAX), 0);
	put(p, 0, "packets", 7, 42);
	put(p, 1, "rule.web:hits", 13, UINT64_MAX);
	p->counters_used = 2;
	CHECK_EQ(nfinfo_counters(p, out, SL_COUNTERS_MAX), 2);
	CHECK(!strcmp(out[0].name, "packets") && out[0].value == 42);
	CHECK(!strcmp(out[1].name, "rule.web:hits") && out[1].value == UINT64_MAX);
	CHECK_EQ(nfinfo_counters(p, out, 1), 1); /* the caller's bound */
	free(p);
}

static void test_counters_hostile(void)
{
	struct sl_nf_info *p = page();
	static struct sl_counter out[SL_COUNTERS_MAX];
	/* a name filling all 24 bytes with no NUL: cut to 23 characters */
	char full[SL_COUNTER_NAME_MAX];
	memset(full, 'x', sizeof(full));
	put(p, 0, full, sizeof(full), 1);
	/* quotes, control characters, spaces and high bytes are dropped */
	put(p, 1, "a\"b\\c d\n\x01\xffz", 12, 2);
	/* nothing left after dropping: skipped */
	put(p, 2, "\"\" \t", 4, 3);
	put(p, 3, "", 0, 4);
	put(p, 4, "ok", 2, 5);
	p->counters_used = 5;
	uint32_t n = nfinfo_counters(p, out, SL_COUNTERS_MAX);
	CHECK_EQ(n, 3);
	CHECK_EQ(strlen(out[0].name), SL_COUNTER_NAME_MAX - 1);
	CHECK(!strcmp(out[1].name, "abcdz") && out[1].value == 2);
	CHECK(!strcmp(out[2].name, "ok") && out[2].value == 5);
	/* a count beyond the table is bounded by SL_COUNTERS_MAX */
	for (uint32_t i = 0; i < SL_COUNTERS_MAX; i++)
		put(p, i, "c", 1, i);
	p->counters_used = 0xffffffffu;
	CHECK_EQ(nfinfo_counters(p, out, SL_COUNTERS_MAX), SL_COUNTERS_MAX);
	/* random bytes everywhere: bounded, every name clean */
	srand(7);
	for (int round = 0; round < 200; round++) {
		uint8_t *raw = (uint8_t *)p->counter;
		for (size_t i = 0; i < sizeof(p->counter); i++)
			raw[i] = (uint8_t)rand();
		p->counters_used = (uint32_t)rand();
		n = nfinfo_counters(p, out, SL_COUNTERS_MAX);
		CHECK(n <= SL_COUNTERS_MAX);
		for (uint32_t i = 0; i < n; i++) {
			size_t len = strnlen(out[i].name, SL_COUNTER_NAME_MAX);
			CHECK(len > 0 && len < SL_COUNTER_NAME_MAX);
			for (size_t k = 0; k < len; k++)
				CHECK(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-",
					     out[i].name[k]) != NULL);
		}
	}
	free(p);
}

int main(void)
{
	test_init();
	test_set_port();
	test_counters_clean();
	test_counters_hostile();
	printf("test_nfinfo: ok\n");
	return 0;
}
