/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for attach message validation (src/lib/msg.c).
 */
#include <limits.h>
#include <string.h>

#include "check.h"
#include "sluice/abi.h"

static struct sl_msg good(uint16_t type)
{
	struct sl_msg m;
	sl_msg_init(&m, type);
	switch (type) {
	case SL_MSG_HELLO:
		m.u.hello.max_nfs = 64;
		m.u.hello.ring_size = 1024;
		strcpy(m.u.hello.manager, "sluiced");
		break;
	case SL_MSG_INIT:
		strcpy(m.u.init.name, "fwd.0");
		strcpy(m.u.init.service, "fwd");
		m.u.init.wakeup = SL_WAKE_BLOCK;
		m.u.init.batch = 32;
		m.u.init.timeout_us = 100;
		m.u.init.pid = 1234;
		break;
	case SL_MSG_ADD_REGION:
		m.u.add_region.size = 64 << 20;
		m.u.add_region.index = 0;
		m.u.add_region.buf_count = 16384;
		m.u.add_region.buf_size = 2176;
		m.u.add_region.headroom = 128;
		break;
	case SL_MSG_ADD_RING:
		m.u.add_ring.offset = 0;
		m.u.add_ring.map_size = sl_ring_bytes(1024);
		m.u.add_ring.dir = SL_RING_TX;
		m.u.add_ring.size = 1024;
		break;
	case SL_MSG_CONNECTED:
		m.u.connected.nf_id = 3;
		m.u.connected.service_id = 1;
		m.u.connected.port_count = 2;
		break;
	case SL_MSG_DISCONNECT:
		m.u.disconnect.code = SL_ERR_SHUTDOWN;
		strcpy(m.u.disconnect.reason, "bye");
		break;
	case SL_MSG_ADD_PIPE:
		m.u.add_pipe.map_size = 64 * 20480;
		m.u.add_pipe.out_offset = 3 * 20480;
		m.u.add_pipe.size = 1024;
		break;
	}
	return m;
}

static int chk(const struct sl_msg *m)
{
	return sl_msg_check(m, SL_MSG_SIZE, sl_msg_fd_count(m->type), m->type);
}

static void test_init_helper(void)
{
	struct sl_msg m;
	memset(&m, 0xa5, sizeof(m));
	sl_msg_init(&m, SL_MSG_CONNECTED);
	CHECK_EQ(m.magic, SL_ABI_MAGIC);
	CHECK_EQ(m.version, SL_ABI_VERSION);
	CHECK_EQ(m.type, SL_MSG_CONNECTED);
	for (size_t i = 0; i < sizeof(m.u.raw); i++)
		CHECK_EQ(m.u.raw[i], 0);
}

static void test_good(void)
{
	for (uint16_t t = 1; t < SL_MSG__COUNT; t++) {
		struct sl_msg m = good(t);
		CHECK_EQ(chk(&m), SL_OK);
		CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, sl_msg_fd_count(t), 0), SL_OK); /* any */
		CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE + 10, sl_msg_fd_count(t), t), SL_OK);
	}
	CHECK_EQ(sl_msg_fd_count(SL_MSG_ADD_REGION), 1);
	CHECK_EQ(sl_msg_fd_count(SL_MSG_ADD_RING), 2);
	CHECK_EQ(sl_msg_fd_count(SL_MSG_HELLO), 0);
}

static void test_header(void)
{
	struct sl_msg m = good(SL_MSG_HELLO);
	CHECK_EQ(sl_msg_check(&m, 0, 0, 0), SL_ERR_TRUNCATED);
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE - 1, 0, 0), SL_ERR_TRUNCATED);
	CHECK_EQ(sl_msg_check(NULL, SL_MSG_SIZE, 0, 0), SL_ERR_TRUNCATED);

	m.magic ^= 1;
	CHECK_EQ(chk(&m), SL_ERR_MAGIC);
	m = good(SL_MSG_HELLO);
	m.version = SL_ABI_VERSION + 1;
	CHECK_EQ(chk(&m), SL_ERR_VERSION);
	m.version = 0;
	CHECK_EQ(chk(&m), SL_ERR_VERSION);

	m = good(SL_MSG_HELLO);
	m.type = 0;
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 0, 0), SL_ERR_TYPE);
	m.type = SL_MSG__COUNT;
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 0, 0), SL_ERR_TYPE);
	m.type = 0xffff;
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 0, SL_MSG_HELLO), SL_ERR_TYPE);

	/* truncation is reported before anything else, magic before version */
	m = good(SL_MSG_HELLO);
	m.magic = 0;
	m.version = 99;
	CHECK_EQ(sl_msg_check(&m, 10, 0, 0), SL_ERR_TRUNCATED);
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 0, 0), SL_ERR_MAGIC);
}

static void test_order_and_fds(void)
{
	struct sl_msg m = good(SL_MSG_CONNECTED);
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 0, SL_MSG_HELLO), SL_ERR_ORDER);
	m = good(SL_MSG_ADD_RING);
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 2, SL_MSG_ADD_REGION), SL_ERR_ORDER);
	/* DISCONNECT is acceptable whatever is expected */
	m = good(SL_MSG_DISCONNECT);
	for (uint16_t t = 1; t < SL_MSG__COUNT; t++)
		CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 0, t), SL_OK);
	/* ... but is still checked */
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 1, SL_MSG_HELLO), SL_ERR_FDS);

	m = good(SL_MSG_ADD_REGION);
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 0, 0), SL_ERR_FDS);
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 2, 0), SL_ERR_FDS);
	m = good(SL_MSG_ADD_RING);
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 1, 0), SL_ERR_FDS);
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 3, 0), SL_ERR_FDS);
	m = good(SL_MSG_HELLO);
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, 1, 0), SL_ERR_FDS);
	CHECK_EQ(sl_msg_check(&m, SL_MSG_SIZE, -1, 0), SL_ERR_FDS);
}

#define BAD(m) CHECK_EQ(chk(&(m)), SL_ERR_FIELD)
#define OK(m) CHECK_EQ(chk(&(m)), SL_OK)

static void test_fields_init(void)
{
	struct sl_msg m;

	m = good(SL_MSG_INIT); memset(m.u.init.name, 'a', SL_NAME_MAX); BAD(m);   /* unterminated */
	m = good(SL_MSG_INIT); memset(m.u.init.name, 'a', SL_NAME_MAX - 1); OK(m); /* 31 chars */
	m = good(SL_MSG_INIT); m.u.init.name[0] = 0; BAD(m);                      /* empty */
	m = good(SL_MSG_INIT); strcpy(m.u.init.name, "a b"); BAD(m);
	m = good(SL_MSG_INIT); strcpy(m.u.init.name, "a/b"); BAD(m);
	m = good(SL_MSG_INIT); strcpy(m.u.init.name, "\xc3\xa9"); BAD(m);
	m = good(SL_MSG_INIT); strcpy(m.u.init.name, "Az09_.-"); OK(m);
	m = good(SL_MSG_INIT); memset(m.u.init.service, 'x', SL_NAME_MAX); BAD(m);
	m = good(SL_MSG_INIT); m.u.init.service[0] = 0; BAD(m);
	m = good(SL_MSG_INIT); strcpy(m.u.init.service, "fw:1"); BAD(m);

	m = good(SL_MSG_INIT); m.u.init.wakeup = SL_WAKE__COUNT; BAD(m);
	m = good(SL_MSG_INIT); m.u.init.wakeup = 255; BAD(m);
	m = good(SL_MSG_INIT); m.u.init.batch = 0; BAD(m);
	m = good(SL_MSG_INIT); m.u.init.batch = 65536; OK(m);
	m = good(SL_MSG_INIT); m.u.init.batch = 65537; BAD(m);
	m = good(SL_MSG_INIT); m.u.init.timeout_us = 10000000; OK(m);
	m = good(SL_MSG_INIT); m.u.init.timeout_us = 10000001; BAD(m);
	m = good(SL_MSG_INIT); m.u.init.wakeup = SL_WAKE_ADAPTIVE; m.u.init.batch = 65537; BAD(m);
	/* poll mode ignores the block-mode limits, but not batch >= 1 */
	m = good(SL_MSG_INIT); m.u.init.wakeup = SL_WAKE_POLL; m.u.init.batch = 1u << 20;
	m.u.init.timeout_us = UINT32_MAX; OK(m);
	m = good(SL_MSG_INIT); m.u.init.wakeup = SL_WAKE_POLL; m.u.init.batch = 0; BAD(m);
}

static void test_fields_other(void)
{
	struct sl_msg m;

	m = good(SL_MSG_HELLO); memset(m.u.hello.manager, 'm', SL_NAME_MAX); BAD(m);
	m = good(SL_MSG_HELLO); m.u.hello.manager[0] = 0; OK(m);

	m = good(SL_MSG_ADD_REGION); m.u.add_region.size = 0; BAD(m);
	m = good(SL_MSG_ADD_REGION); m.u.add_region.buf_size = 0; m.u.add_region.headroom = 0; BAD(m);
	m = good(SL_MSG_ADD_REGION); m.u.add_region.headroom = 2176; BAD(m);
	m = good(SL_MSG_ADD_REGION); m.u.add_region.headroom = 2175; OK(m);
	m = good(SL_MSG_ADD_REGION); m.u.add_region.index = 255; OK(m);
	m = good(SL_MSG_ADD_REGION); m.u.add_region.index = 256; BAD(m);

	/* ADD_PIPE: a power-of-two ring, aligned, inside the map */
	m = good(SL_MSG_ADD_PIPE); OK(m);
	m = good(SL_MSG_ADD_PIPE); m.u.add_pipe.size = 1000; BAD(m);
	m = good(SL_MSG_ADD_PIPE); m.u.add_pipe.size = 1; BAD(m);
	m = good(SL_MSG_ADD_PIPE); m.u.add_pipe.out_offset += 8; BAD(m); /* misaligned */
	m = good(SL_MSG_ADD_PIPE); m.u.add_pipe.out_offset = m.u.add_pipe.map_size; BAD(m); /* outside */
	m = good(SL_MSG_ADD_PIPE); m.u.add_pipe.out_offset = m.u.add_pipe.map_size - sl_ring_bytes(1024); OK(m);
	m = good(SL_MSG_ADD_PIPE); m.u.add_pipe.out_offset = UINT64_MAX - 63; BAD(m); /* overflow */
	m = good(SL_MSG_ADD_PIPE); m.u.add_pipe.map_size = 0; m.u.add_pipe.out_offset = 0; BAD(m);

	m = good(SL_MSG_ADD_RING); m.u.add_ring.dir = 2; BAD(m);
	m = good(SL_MSG_ADD_RING); m.u.add_ring.dir = SL_RING_RX; OK(m);
	m = good(SL_MSG_ADD_RING); m.u.add_ring.size = 0; BAD(m);
	m = good(SL_MSG_ADD_RING); m.u.add_ring.size = 1; BAD(m);
	m = good(SL_MSG_ADD_RING); m.u.add_ring.size = 1000; BAD(m);
	m = good(SL_MSG_ADD_RING); m.u.add_ring.size = 2; OK(m);
	m = good(SL_MSG_ADD_RING); m.u.add_ring.size = 2048; BAD(m); /* does not fit the map */
	m = good(SL_MSG_ADD_RING); m.u.add_ring.map_size -= 1; BAD(m);
	m = good(SL_MSG_ADD_RING); m.u.add_ring.offset = 64; BAD(m);
	m = good(SL_MSG_ADD_RING); m.u.add_ring.offset = 64; m.u.add_ring.map_size += 64; OK(m);
	m = good(SL_MSG_ADD_RING); m.u.add_ring.offset = 8; m.u.add_ring.map_size += 64; BAD(m); /* misaligned */
	m = good(SL_MSG_ADD_RING); m.u.add_ring.offset = UINT64_MAX - 63; BAD(m); /* overflow */
	m = good(SL_MSG_ADD_RING); m.u.add_ring.offset = UINT64_MAX - 63;
	m.u.add_ring.map_size = UINT64_MAX; BAD(m);
	m = good(SL_MSG_ADD_RING); m.u.add_ring.size = 1u << 31;
	m.u.add_ring.map_size = UINT64_MAX; OK(m);

	m = good(SL_MSG_DISCONNECT); m.u.disconnect.code = SL_ERR__COUNT; BAD(m);
	m = good(SL_MSG_DISCONNECT); m.u.disconnect.code = UINT32_MAX; BAD(m);
	m = good(SL_MSG_DISCONNECT); m.u.disconnect.code = SL_OK; OK(m);
	m = good(SL_MSG_DISCONNECT); memset(m.u.disconnect.reason, 'r', SL_REASON_MAX); BAD(m);
	m = good(SL_MSG_DISCONNECT); memset(m.u.disconnect.reason, 'r', SL_REASON_MAX - 1); OK(m);
}

static void test_strerror(void)
{
	int probes[] = { INT_MIN, INT_MIN + 1, -1000, -SL_ERR__COUNT, -1, 0, 1,
			 SL_ERR__COUNT - 1, SL_ERR__COUNT, 1000, INT_MAX };
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++)
		CHECK(sl_strerror(probes[i]) != NULL);
	for (int e = -300; e < 300; e++)
		CHECK(sl_strerror(e) != NULL && sl_strerror(e)[0] != '\0');
	for (int e = 1; e < SL_ERR__COUNT; e++) {
		CHECK(strcmp(sl_strerror(e), "unknown error") != 0);
		CHECK(strcmp(sl_strerror(e), sl_strerror(-e)) == 0); /* SDK returns are negated */
	}
	CHECK(strcmp(sl_strerror(SL_ERR__COUNT), "unknown error") == 0);
	CHECK(strcmp(sl_strerror(INT_MIN), "unknown error") == 0);
}

int main(void)
{
	test_init_helper();
	test_good();
	test_header();
	test_order_and_fds();
	test_fields_init();
	test_fields_other();
	test_strerror();
	printf("test_msg: ok\n");
	return 0;
}
