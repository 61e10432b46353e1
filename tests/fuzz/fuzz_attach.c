/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libFuzzer target: the attach protocol's messages (docs/abi.md "Attach").
 *
 * Input byte 0 even: one message as sluiced or an NF receives it -- 128 bytes (or fewer: truncated),
 * the fds that came with it, the protocol state's expected type -- through sl_msg_check
 * (src/lib/msg.c). What it accepts must be safe to use: known type, the type's fd count, names and
 * reasons terminated inside their fields, an INIT's names valid, a ring that fits its map.
 *
 * Input byte 0 odd: the NF side's handshake (src/lib/nf.c, sl_nf_attach on an inherited socket) with
 * a fake manager at the other end of a socketpair, which sends an arbitrary sequence of messages with
 * fds -- memfds of any size, memfds holding an initialised ring (and info page), eventfds, pipes --
 * then closes its end. Whatever comes, sl_nf_attach must not crash, and once it returns (and
 * sl_nf_detach, when it attached) no fd it received stays open and no memfd stays mapped.
 *
 * Handshake input, after byte 0: byte: wakeup mode, then messages, each:
 *   [t] type = t & 7 (0 and 7: unknown), t & 8: raw header (magic, version: the next 6 bytes),
 *       (t >> 4) & 3: number of fds, t & 0x40: the message comes in two writes
 *   [L] body bytes that follow (up to 120; the rest of the body is zero)
 *   per fd: [k] k % 5: 0 memfd of u32 bytes (LE, at most 16 MiB); 1 ring memfd: [log2 slots][offset
 *       in cache lines][ports] -- a ring sl_ring_init made, and an info page after it; 2 eventfd;
 *       3 a pipe's read end; 4 a read-only memfd of u32 bytes
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "sluice/abi.h"
#include "sluice/nf.h"
#include "sluice/ring.h"

static int terminated(const char *s, size_t max)
{
	return memchr(s, '\0', max) != NULL;
}

static void one_message(struct in *in)
{
	size_t len = SL_MSG_SIZE - (u8(in) & 1 ? u8(in) % SL_MSG_SIZE : 0);
	int nfds = u8(in) % 4;
	uint16_t expect = u8(in) % 9;
	/* exactly len bytes (ASan: no read past what was received) */
	uint8_t *buf = malloc(len ? len : 1);
	for (size_t i = 0; i < len; i++)
		buf[i] = u8(in);
	if (len >= 8 && (buf[0] & 1) == 0) { /* mostly a valid header, so the bodies get checked */
		uint32_t magic = SL_ABI_MAGIC;
		uint16_t version = SL_ABI_VERSION;
		memcpy(buf, &magic, 4);
		memcpy(buf + 4, &version, 2);
	}
	const struct sl_msg *m = (const struct sl_msg *)buf;
	int rc = sl_msg_check(len < SL_MSG_SIZE ? (const struct sl_msg *)buf : m, len, nfds, expect);
	REQUIRE(rc >= 0 && rc < SL_ERR__COUNT);
	REQUIRE(sl_strerror(rc) != NULL);
	if (rc == SL_OK) {
		REQUIRE(len == SL_MSG_SIZE);
		REQUIRE(m->magic == SL_ABI_MAGIC && m->version == SL_ABI_VERSION);
		REQUIRE(m->type > 0 && m->type < SL_MSG__COUNT);
		REQUIRE(expect == 0 || m->type == expect || m->type == SL_MSG_DISCONNECT);
		REQUIRE(nfds == sl_msg_fd_count(m->type));
		switch (m->type) {
		case SL_MSG_HELLO:
			REQUIRE(terminated(m->u.hello.manager, SL_NAME_MAX));
			break;
		case SL_MSG_INIT:
			REQUIRE(terminated(m->u.init.name, SL_NAME_MAX) && terminated(m->u.init.service, SL_NAME_MAX));
			REQUIRE(m->u.init.name[0] && m->u.init.service[0] && m->u.init.wakeup < SL_WAKE__COUNT);
			break;
		case SL_MSG_ADD_REGION:
			REQUIRE(m->u.add_region.index < 256 && m->u.add_region.headroom < m->u.add_region.buf_size);
			break;
		case SL_MSG_ADD_RING: {
			const struct sl_msg_add_ring *r = &m->u.add_ring;
			REQUIRE(r->size >= 2 && (r->size & (r->size - 1)) == 0);
			REQUIRE(r->offset <= r->map_size && sl_ring_bytes(r->size) <= r->map_size - r->offset);
			break;
		}
		case SL_MSG_ADD_PIPE: {
			const struct sl_msg_add_pipe *pm = &m->u.add_pipe;
			REQUIRE(pm->out_offset <= pm->map_size && sl_ring_bytes(pm->size) <= pm->map_size - pm->out_offset);
			break;
		}
		case SL_MSG_DISCONNECT:
			REQUIRE(m->u.disconnect.code < SL_ERR__COUNT && terminated(m->u.disconnect.reason, SL_REASON_MAX));
			break;
		}
	}
	free(buf);
	enum sl_wakeup w;
	char name[8];
	for (size_t i = 0; i < sizeof(name); i++)
		name[i] = (char)u8(in);
	name[sizeof(name) - 1] = '\0';
	if (sl_wakeup_parse(name, &w) == 0)
		REQUIRE(w < SL_WAKE__COUNT && sl_wakeup_name(w) != NULL);
}

/* ---- the fake manager ---- */

static int memfd_of(uint64_t size)
{
	int fd = memfd_create("fuzz-attach", MFD_CLOEXEC);
	REQUIRE(fd >= 0);
	REQUIRE(ftruncate(fd, (off_t)size) == 0);
	return fd;
}

static int make_fd(struct in *in)
{
	uint8_t k = u8(in);
	switch (k % 5) {
	case 0:
		return memfd_of(u32(in) % (16u << 20));
	case 1: {
		uint32_t slots = 2u << (u8(in) % 10);
		uint64_t off = (uint64_t)(u8(in) % 8) * SL_CACHE_LINE;
		uint32_t ports = u8(in) % 8;
		uint64_t ring_end = off + sl_ring_bytes(slots);
		uint64_t info_off = (ring_end + SL_CACHE_LINE - 1) / SL_CACHE_LINE * SL_CACHE_LINE;
		uint64_t size = info_off + sizeof(struct sl_nf_info);
		int fd = memfd_of(size);
		uint8_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		REQUIRE(p != MAP_FAILED);
		REQUIRE(sl_ring_init((struct sl_ring *)(p + off), slots) == 0);
		struct sl_nf_info *info = (struct sl_nf_info *)(p + info_off);
		info->magic = SL_ABI_MAGIC;
		info->port_count = ports == 7 ? 0xffffffffu : ports; /* 7: more than the page holds */
		info->counters_max = u8(in) & 1 ? SL_COUNTERS_MAX : u32(in);
		info->counters_used = u8(in) & 1 ? 0 : u32(in);
		for (uint32_t i = 0; i < SL_INFO_PORTS_MAX && i < 8; i++)
			memset(info->port_name[i], 'a' + (int)i, SL_NAME_MAX); /* unterminated */
		munmap(p, size);
		return fd;
	}
	case 2:
		return eventfd(0, EFD_CLOEXEC);
	case 3: {
		int pp[2];
		REQUIRE(pipe2(pp, O_CLOEXEC) == 0);
		close(pp[1]);
		return pp[0];
	}
	default: {
		int fd = memfd_of(u32(in) % (16u << 20));
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		int ro = open(path, O_RDONLY | O_CLOEXEC);
		close(fd);
		REQUIRE(ro >= 0);
		return ro;
	}
	}
}

static int send_with_fds(int sock, const void *p, size_t n, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds > 0) {
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n ? 0 : -1;
}

static int count_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	REQUIRE(d != NULL);
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n;
}

static int memfds_mapped(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	REQUIRE(f != NULL);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "memfd:fuzz-attach") != NULL;
	fclose(f);
	return n;
}

static void handshake(struct in *in)
{
	int before = count_fds();
	int sp[2];
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
	int mgr = sp[0];
	uint8_t wake = u8(in) % SL_WAKE__COUNT;
	for (int msgs = 0; in->n > 0 && msgs < 32; msgs++) {
		uint8_t t = u8(in);
		struct sl_msg m;
		sl_msg_init(&m, t & 7);
		if (t & 8) {
			uint8_t h[6];
			for (int i = 0; i < 6; i++)
				h[i] = u8(in);
			memcpy(&m, h, 6);
		}
		size_t L = u8(in) % (SL_MSG_SIZE - 8 + 1);
		for (size_t i = 0; i < L; i++)
			m.u.raw[i] = u8(in);
		int nfds = (t >> 4) & 3, fds[4];
		for (int i = 0; i < nfds; i++)
			fds[i] = make_fd(in);
		int bad;
		if (t & 0x40) {
			bad = send_with_fds(mgr, &m, 50, fds, nfds) < 0 ||
			      send_with_fds(mgr, (uint8_t *)&m + 50, sizeof(m) - 50, NULL, 0) < 0;
		} else {
			bad = send_with_fds(mgr, &m, sizeof(m), fds, nfds) < 0;
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]); /* in flight: the socket holds them now */
		if (bad)
			break;
	}
	shutdown(mgr, SHUT_WR); /* then EOF: the NF never waits for its timeout */

	struct sl_nf_config cfg;
	sl_nf_config_default(&cfg);
	cfg.sock_fd = sp[1];
	snprintf(cfg.name, sizeof(cfg.name), "fz.0");
	snprintf(cfg.service, sizeof(cfg.service), "fz");
	cfg.wakeup = wake;
	cfg.attach_timeout_ms = 200;
	struct sl_nf *nf = NULL;
	int rc = sl_nf_attach(&cfg, &nf);
	if (getenv("FUZZ_ATTACH_VERBOSE")) /* to check a seed reaches CONNECTED */
		fprintf(stderr, "fuzz-attach: sl_nf_attach: %d (%s)\n", rc, sl_strerror(rc < 0 ? -rc : rc));
	if (rc == 0) {
		REQUIRE(nf != NULL);
		uint32_t np = sl_nf_port_count(nf);
		for (uint32_t i = 0; i < np && i < 70; i++) {
			const char *s = sl_nf_port_name(nf, i);
			if (s)
				REQUIRE(strlen(s) < SL_NAME_MAX);
		}
		(void)sl_nf_port_id(nf, "aaaa");
		uint64_t *c = sl_nf_counter(nf, "fuzz");
		if (c)
			(*c)++;
		(void)sl_nf_ring_size(nf);
		sl_nf_detach(nf);
	} else {
		REQUIRE(nf == NULL && rc < 0);
	}
	close(mgr); /* what the NF did not take goes with the socket */
	REQUIRE(count_fds() == before);
	REQUIRE(memfds_mapped() == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	if (u8(&in) & 1)
		handshake(&in);
	else
		one_message(&in);
	return 0;
}
