/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for libsluice's attach handshake, receive loop and teardown
 * (src/lib/nf.c), against a minimal fake manager in this process: the test
 * is the manager, the NF runs in a thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <sys/syscall.h>

#include "check.h"
#include "sluice/nf.h"
#include "sluice/ring.h"

#define NBUF     512
#define BUF_SIZE 256
#define HEADROOM 64
#define SLOTS    64
#define REGION_BYTES (NBUF * BUF_SIZE)
#define RING_MAP 4096
/* with fm_info: the rings' memfd also holds an info page (counters), after the rings */
#define INFO_OFF 4096
#define RING_MAP_INFO (INFO_OFF + ((sizeof(struct sl_nf_info) + 4095) & ~(size_t)4095))
static int fm_info;

/* ---- fake manager ---- */

struct fm {
	char path[108];
	int lfd, cfd;
	int region_fd, ring_fd, efd_rx, efd_tx;
	uint8_t *region;
	uint8_t *ringmem;
	struct sl_ring *rx, *tx;
};

static void fm_listen(struct fm *m)
{
	static int seq;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memset(m, 0, sizeof(*m));
	m->cfd = m->region_fd = m->ring_fd = m->efd_rx = m->efd_tx = -1;
	snprintf(m->path, sizeof(m->path), "/tmp/sluice-test-%d-%d.sock", (int)getpid(), seq++);
	unlink(m->path);
	memcpy(sa.sun_path, m->path, strlen(m->path) + 1);
	m->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(m->lfd >= 0);
	CHECK(bind(m->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CHECK(listen(m->lfd, 4) == 0);
}

static void fm_accept(struct fm *m)
{
	m->cfd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
	CHECK(m->cfd >= 0);
}

static void fm_close(struct fm *m)
{
	int fds[] = { m->lfd, m->cfd, m->region_fd, m->ring_fd, m->efd_rx, m->efd_tx };
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (m->region)
		munmap(m->region, REGION_BYTES);
	if (m->ringmem)
		munmap(m->ringmem, fm_info ? RING_MAP_INFO : RING_MAP);
	unlink(m->path);
}

static void fm_send(struct fm *m, const struct sl_msg *msg, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = SL_MSG_SIZE };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds > 0) {
		memset(&cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	CHECK(sendmsg(m->cfd, &mh, MSG_NOSIGNAL) == SL_MSG_SIZE);
}

/* Receive one message; returns 0, or -1 on EOF. */
static int fm_recv(struct fm *m, struct sl_msg *msg)
{
	size_t got = 0;
	while (got < SL_MSG_SIZE) {
		ssize_t n = recv(m->cfd, (char *)msg + got, SL_MSG_SIZE - got, 0);
		if (n == 0)
			return -1;
		CHECK(n > 0);
		got += (size_t)n;
	}
	return 0;
}

static void fm_hello(struct fm *m)
{
	struct sl_msg msg;
	sl_msg_init(&msg, SL_MSG_HELLO);
	msg.u.hello.max_nfs = 8;
	msg.u.hello.ring_size = SLOTS;
	strcpy(msg.u.hello.manager, "fake");
	fm_send(m, &msg, NULL, 0);
}

static void fm_expect_init(struct fm *m, const char *name, int wakeup)
{
	struct sl_msg msg;
	CHECK_EQ(fm_recv(m, &msg), 0);
	CHECK_EQ(sl_msg_check(&msg, SL_MSG_SIZE, 0, SL_MSG_INIT), SL_OK);
	CHECK(strcmp(msg.u.init.name, name) == 0);
	CHECK_EQ(msg.u.init.wakeup, wakeup);
	CHECK_EQ(msg.u.init.pid, getpid());
}

static void fm_expect_disconnect(struct fm *m, int code)
{
	struct sl_msg msg;
	CHECK_EQ(fm_recv(m, &msg), 0);
	CHECK_EQ(sl_msg_check(&msg, SL_MSG_SIZE, 0, SL_MSG_DISCONNECT), SL_OK);
	CHECK_EQ(msg.type, SL_MSG_DISCONNECT);
	CHECK_EQ(msg.u.disconnect.code, code);
}

static void fm_disconnect(struct fm *m, int code)
{
	struct sl_msg msg;
	sl_msg_init(&msg, SL_MSG_DISCONNECT);
	msg.u.disconnect.code = (uint32_t)code;
	strcpy(msg.u.disconnect.reason, "test");
	fm_send(m, &msg, NULL, 0);
}

/* The memory, rings and messages after INIT, up to CONNECTED. */
static void fm_setup(struct fm *m)
{
	struct sl_msg msg;
	int fds[2];

	m->region_fd = memfd_create("sl-region", MFD_CLOEXEC);
	CHECK(m->region_fd >= 0 && ftruncate(m->region_fd, REGION_BYTES) == 0);
	m->region = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, m->region_fd, 0);
	CHECK(m->region != MAP_FAILED);
	size_t map = fm_info ? RING_MAP_INFO : RING_MAP;
	m->ring_fd = memfd_create("sl-rings", MFD_CLOEXEC);
	CHECK(m->ring_fd >= 0 && ftruncate(m->ring_fd, (off_t)map) == 0);
	m->ringmem = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_SHARED, m->ring_fd, 0);
	CHECK(m->ringmem != MAP_FAILED);
	m->rx = (struct sl_ring *)m->ringmem;
	m->tx = (struct sl_ring *)(m->ringmem + sl_ring_bytes(SLOTS));
	CHECK_EQ(sl_ring_init(m->rx, SLOTS), 0);
	CHECK_EQ(sl_ring_init(m->tx, SLOTS), 0);
	m->efd_rx = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	m->efd_tx = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	CHECK(m->efd_rx >= 0 && m->efd_tx >= 0);

	sl_msg_init(&msg, SL_MSG_ADD_REGION);
	msg.u.add_region.size = REGION_BYTES;
	msg.u.add_region.index = 0;
	msg.u.add_region.buf_count = NBUF;
	msg.u.add_region.buf_size = BUF_SIZE;
	msg.u.add_region.headroom = HEADROOM;
	fm_send(m, &msg, &m->region_fd, 1);

	for (int dir = 0; dir < 2; dir++) {
		sl_msg_init(&msg, SL_MSG_ADD_RING);
		msg.u.add_ring.offset = dir == SL_RING_RX ? 0 : sl_ring_bytes(SLOTS);
		msg.u.add_ring.map_size = map;
		msg.u.add_ring.index = (uint32_t)dir;
		msg.u.add_ring.dir = (uint32_t)dir;
		msg.u.add_ring.size = SLOTS;
		fds[0] = m->ring_fd;
		fds[1] = dir == SL_RING_RX ? m->efd_rx : m->efd_tx;
		fm_send(m, &msg, fds, 2);
	}
	sl_msg_init(&msg, SL_MSG_CONNECTED);
	msg.u.connected.nf_id = 42;
	msg.u.connected.service_id = 7;
	msg.u.connected.port_count = 2;
	if (fm_info) {
		struct sl_nf_info *info = (struct sl_nf_info *)(m->ringmem + INFO_OFF);
		info->port_count = 2;
		info->counters_max = SL_COUNTERS_MAX;
		__atomic_store_n(&info->magic, SL_ABI_MAGIC, __ATOMIC_RELEASE);
		msg.u.connected.info_offset = INFO_OFF;
		msg.u.connected.info_size = sizeof(struct sl_nf_info);
	}
	fm_send(m, &msg, NULL, 0);
}

/* The fake manager's view of counter `name` in the info page (NULL: not registered). */
static const struct sl_counter *fm_counter(const struct fm *m, const char *name)
{
	const struct sl_nf_info *info = (const struct sl_nf_info *)(m->ringmem + INFO_OFF);
	for (uint32_t i = 0; i < info->counters_used; i++)
		if (strcmp(info->counter[i].name, name) == 0)
			return &info->counter[i];
	return NULL;
}

/* ---- NF thread ---- */

static uint32_t attach_timeout_ms = 2000;
static uint32_t reattach_ms; /* nf_start's cfg.reattach_ms (0: the loop ends when the manager goes) */

struct nf_thread {
	struct sl_nf_config cfg;
	sl_handler_fn run;    /* also run the loop with this handler after attaching (NULL: attach only) */
	int attach_rc, run_rc;
	struct sl_nf *nf;     /* published once attached (atomic) */
	struct sl_nf_stats st;
	uint32_t id, service_id;
	pthread_t th;
};

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	(void)nf;
	(void)arg;
	CHECK(n >= 1 && n <= SL_BURST_MAX);
	for (unsigned i = 0; i < n; i++) {
		uint8_t *d = sl_pkt_data(&pkts[i]);
		CHECK_EQ(sl_pkt_headroom(&pkts[i]), HEADROOM);
		CHECK_EQ(sl_pkt_tailroom(&pkts[i]), BUF_SIZE - HEADROOM - sl_pkt_len(&pkts[i]));
		d[0] ^= 0xff;
		sl_pkt_set_action(&pkts[i], SL_ACT_OUT, (uint16_t)(sl_pkt_in_port(&pkts[i]) + 100));
	}
}

static void *nf_main(void *arg)
{
	struct nf_thread *t = arg;
	struct sl_nf *nf = NULL;
	t->attach_rc = sl_nf_attach(&t->cfg, &nf);
	if (t->attach_rc == 0) {
		t->id = sl_nf_id(nf);
		t->service_id = sl_nf_service_id(nf);
		CHECK(strcmp(sl_nf_name(nf), t->cfg.name) == 0);
		__atomic_store_n(&t->nf, nf, __ATOMIC_RELEASE);
		if (t->run)
			t->run_rc = sl_nf_run(nf, t->run, NULL);
		sl_nf_get_stats(nf, &t->st);
		sl_nf_detach(nf);
	}
	return NULL;
}

/* The test NF's config: NF test.0 of service test on the fake manager at `path`. */
static void nf_cfg(struct sl_nf_config *cfg, const char *path, enum sl_wakeup w)
{
	sl_nf_config_default(cfg);
	snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s", path);
	snprintf(cfg->name, sizeof(cfg->name), "test.0");
	snprintf(cfg->service, sizeof(cfg->service), "test");
	cfg->wakeup = w;
	cfg->spin_us = 50;
	cfg->attach_timeout_ms = attach_timeout_ms;
	cfg->reattach_ms = reattach_ms;
}

static void nf_start(struct nf_thread *t, const struct fm *m, enum sl_wakeup w, sl_handler_fn run)
{
	memset(t, 0, sizeof(*t));
	nf_cfg(&t->cfg, m->path, w);
	t->run = run;
	CHECK_EQ(pthread_create(&t->th, NULL, nf_main, t), 0);
}

/* An NF thread (nf_start) taken through the whole attach by the fake manager, up to CONNECTED. */
static void nf_connect(struct nf_thread *t, struct fm *m, enum sl_wakeup w, sl_handler_fn run)
{
	fm_listen(m);
	nf_start(t, m, w, run);
	fm_accept(m);
	fm_hello(m);
	fm_expect_init(m, "test.0", w);
	fm_setup(m);
}

static struct sl_nf *nf_wait_attached(struct nf_thread *t)
{
	struct sl_nf *nf;
	while ((nf = __atomic_load_n(&t->nf, __ATOMIC_ACQUIRE)) == NULL)
		usleep(100);
	return nf;
}

/* ---- tests ---- */

/* Push `total` packets through the NF, at most SLOTS in flight, with pauses
 * so that a blocking NF goes to sleep between rounds. */
static void fm_traffic(struct fm *m, uint32_t total, int pause_us)
{
	uint32_t sent = 0, back = 0;
	while (back < total) {
		struct sl_desc d[SLOTS];
		uint32_t n = 0, room = SLOTS - (sent - back);
		while (n < room && sent + n < total && n < 20) {
			uint32_t b = (sent + n) % NBUF;
			d[n] = (struct sl_desc){ .buf = b, .off = b * BUF_SIZE + HEADROOM, .len = 60,
						 .head = HEADROOM, .region = 0, .dest = (uint16_t)(b % 4) };
			m->region[d[n].off] = (uint8_t)b;
			n++;
		}
		if (n > 0) {
			CHECK_EQ(sl_ring_enqueue_burst(m->rx, d, n), n);
			sent += n;
			if (sl_ring_needs_kick(m->rx)) {
				uint64_t one = 1;
				CHECK(write(m->efd_rx, &one, sizeof(one)) == sizeof(one));
			}
		}
		uint32_t k = sl_ring_dequeue_burst(m->tx, d, SLOTS);
		for (uint32_t i = 0; i < k; i++) {
			CHECK_EQ(d[i].buf, back % NBUF);
			CHECK_EQ(d[i].action, SL_ACT_OUT);
			CHECK_EQ(d[i].dest, d[i].buf % 4 + 100);
			CHECK_EQ(d[i].len, 60);
			CHECK_EQ(m->region[d[i].off], (uint8_t)~(uint8_t)d[i].buf);
			back++;
		}
		if (pause_us && n > 0)
			usleep((useconds_t)pause_us);
	}
	CHECK_EQ(m->tx->need_kick, 0);
}

static void test_run(enum sl_wakeup w)
{
	struct fm m;
	struct nf_thread t;
	struct sl_msg msg;

	nf_connect(&t, &m, w, handler);
	fm_traffic(&m, 5000, w == SL_WAKE_POLL ? 0 : 300);

	/* a bad descriptor (region not mapped, or out of range) comes back dropped */
	struct sl_desc bad[2] = {
		{ .buf = 1, .off = 100, .len = 10, .head = 0, .region = 3 },
		{ .buf = 2, .off = REGION_BYTES - 10, .len = 60, .head = HEADROOM, .region = 0 },
	};
	CHECK_EQ(sl_ring_enqueue_burst(m.rx, bad, 2), 2);
	if (sl_ring_needs_kick(m.rx)) {
		uint64_t one = 1;
		CHECK(write(m.efd_rx, &one, sizeof(one)) == sizeof(one));
	}
	struct sl_desc out[2];
	uint32_t got = 0;
	while (got < 2)
		got += sl_ring_dequeue_burst(m.tx, out + got, 2 - got);
	CHECK_EQ(out[0].action, SL_ACT_DROP);
	CHECK_EQ(out[1].action, SL_ACT_DROP);
	CHECK_EQ(out[1].buf, 2);

	fm_disconnect(&m, SL_ERR_SHUTDOWN);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.attach_rc, 0);
	CHECK_EQ(t.id, 42);
	CHECK_EQ(t.service_id, 7);
	CHECK_EQ(t.run_rc, -SL_ERR_SHUTDOWN);
	CHECK_EQ(t.st.rx_pkts, 5002);
	CHECK_EQ(t.st.tx_pkts, 5002);
	CHECK(t.st.batches > 0);
	if (w == SL_WAKE_POLL)
		CHECK_EQ(t.st.sleeps, 0);
	else
		CHECK(t.st.sleeps > 0 && t.st.wakeups > 0);
	/* detach tells the manager */
	fm_expect_disconnect(&m, SL_ERR_SHUTDOWN);
	CHECK_EQ(fm_recv(&m, &msg), -1);
	fm_close(&m);
}

/* sl_nf_yield: the loop gives the core up right after a batch whose handler asked, where it would
 * otherwise go on to the next full burst (a busy NF yields every SL_YIELD_BUSY bursts). The test
 * counts the loop's sched_yield() calls by interposing it: no timing involved. */
static __thread unsigned long yield_calls;
int sched_yield(void)
{
	yield_calls++;
	return (int)syscall(SYS_sched_yield);
}

#define YB_MAX 4096
struct yb_batch { uint32_t before, n; unsigned long in, out; }; /* packets before it, size, yields at entry/exit */
static struct yb_batch yb[YB_MAX];
static uint32_t yb_n, yb_pkts;
static int yb_ask;

static void yield_handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	unsigned long in = yield_calls;
	handler(nf, pkts, n, arg);
	if (yb_ask)
		sl_nf_yield(nf);
	if (yb_n < YB_MAX)
		yb[yb_n++] = (struct yb_batch){ .before = yb_pkts, .n = n, .in = in, .out = yield_calls };
	yb_pkts += n;
}

/* Rounds of SLOTS (two full bursts) published at once; returns in how many rounds the loop yielded
 * between the two bursts. */
static unsigned yield_rounds(int ask, unsigned rounds)
{
	struct fm m;
	struct nf_thread t;
	yb_n = yb_pkts = 0;
	yb_ask = ask;
	nf_connect(&t, &m, SL_WAKE_POLL, yield_handler);
	CHECK(SLOTS == 2 * SL_BURST_MAX);
	for (unsigned r = 0; r < rounds; r++) {
		struct sl_desc d[SLOTS];
		for (uint32_t i = 0; i < SLOTS; i++) {
			uint32_t b = (r * SLOTS + i) % NBUF;
			d[i] = (struct sl_desc){ .buf = b, .off = b * BUF_SIZE + HEADROOM, .len = 60,
						 .head = HEADROOM, .region = 0, .dest = 0 };
		}
		CHECK_EQ(sl_ring_enqueue_burst(m.rx, d, SLOTS), SLOTS); /* one publish: the NF sees all or none */
		for (uint32_t back = 0; back < SLOTS;)
			back += sl_ring_dequeue_burst(m.tx, d, SLOTS);
	}
	fm_disconnect(&m, SL_ERR_SHUTDOWN);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	fm_expect_disconnect(&m, SL_ERR_SHUTDOWN);
	fm_close(&m);
	unsigned yielded = 0, seen = 0;
	for (uint32_t i = 0; i + 1 < yb_n; i++) {
		if (yb[i].before % SLOTS != 0)
			continue;
		CHECK_EQ(yb[i].n, SL_BURST_MAX); /* the round's first burst, full; the second follows */
		CHECK_EQ(yb[i + 1].before, yb[i].before + SL_BURST_MAX);
		seen++;
		yielded += yb[i + 1].in > yb[i].out;
	}
	CHECK_EQ(seen, rounds - (yb_n && yb[yb_n - 1].before % SLOTS == 0));
	return yielded;
}

static void test_yield_asked(void)
{
	unsigned rounds = 200;
	unsigned without = yield_rounds(0, rounds), with = yield_rounds(1, rounds);
	CHECK_EQ(with, rounds);        /* asked: a yield after every batch */
	CHECK(without < rounds / 2);   /* not asked: only every SL_YIELD_BUSY busy bursts */
}

/* sl_nf_stop from another thread ends a blocked loop with 0. */
static void test_stop(void)
{
	struct fm m;
	struct nf_thread t;
	nf_connect(&t, &m, SL_WAKE_BLOCK, handler);
	struct sl_nf *nf = nf_wait_attached(&t);
	while (__atomic_load_n(&m.rx->need_kick, __ATOMIC_RELAXED) == 0)
		usleep(100); /* asleep */
	sl_nf_stop(nf);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.run_rc, 0);
	fm_expect_disconnect(&m, SL_ERR_SHUTDOWN);
	fm_close(&m);
}

/* The manager vanishing ends the loop with -SL_ERR_IO, in every mode. */
static void test_manager_gone(enum sl_wakeup w)
{
	struct fm m;
	struct nf_thread t;
	nf_connect(&t, &m, w, handler);
	nf_wait_attached(&t);
	usleep(5000);
	shutdown(m.cfd, SHUT_RDWR);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.run_rc, -SL_ERR_IO);
	fm_close(&m);
}

/* ---- re-attach (docs/abi.md "Restarts") ---- */

struct ra_thread {
	struct sl_nf_config cfg;
	int run_rc;
	uint64_t *counter;          /* registered before the loop; must stay valid across re-attaches */
	struct sl_nf_stats st;
	struct sl_nf *nf;           /* published once attached (atomic) */
	pthread_t th;
};

/* Counts packets in an NF counter, and does what `handler` does to them. */
static void counting_handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct ra_thread *t = arg;
	*t->counter += n;
	handler(nf, pkts, n, NULL);
}

static void *ra_main(void *arg)
{
	struct ra_thread *t = arg;
	struct sl_nf *nf = NULL;
	CHECK_EQ(sl_nf_attach(&t->cfg, &nf), 0);
	t->counter = sl_nf_counter(nf, "packets");
	CHECK(t->counter != NULL);
	*t->counter = 1000;
	__atomic_store_n(&t->nf, nf, __ATOMIC_RELEASE);
	t->run_rc = sl_nf_run(nf, counting_handler, t);
	sl_nf_get_stats(nf, &t->st);
	sl_nf_detach(nf);
	return NULL;
}

/* A manager that comes back at the same socket path. */
static void fm_listen_at(struct fm *m, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memset(m, 0, sizeof(*m));
	m->cfd = m->region_fd = m->ring_fd = m->efd_rx = m->efd_tx = -1;
	snprintf(m->path, sizeof(m->path), "%s", path);
	unlink(m->path);
	memcpy(sa.sun_path, m->path, strlen(m->path) + 1);
	m->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(m->lfd >= 0);
	CHECK(bind(m->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CHECK(listen(m->lfd, 4) == 0);
}

/* The manager dies (or restarts: code SL_ERR_RESTART) and a new one appears at the same path: the NF
 * attaches again by itself, its handler and counter pointer unchanged, the counter's value carried
 * into the new info page, packets flowing through the new rings. */
static void test_reattach(enum sl_wakeup w, int code)
{
	struct fm m;
	struct ra_thread t;
	char path[108];
	fm_info = 1;
	fm_listen(&m);
	snprintf(path, sizeof(path), "%s", m.path);
	memset(&t, 0, sizeof(t));
	nf_cfg(&t.cfg, path, w);
	t.cfg.reattach_ms = 5000;
	CHECK_EQ(pthread_create(&t.th, NULL, ra_main, &t), 0);
	fm_accept(&m);
	fm_hello(&m);
	fm_expect_init(&m, "test.0", w);
	fm_setup(&m);
	while (__atomic_load_n(&t.nf, __ATOMIC_ACQUIRE) == NULL)
		usleep(100);
	fm_traffic(&m, 100, 0);
	CHECK_EQ(fm_counter(&m, "packets")->value, 1100);
	uint64_t *before = t.counter;

	/* the manager goes: killed (the socket closes) or restarting (DISCONNECT first) */
	if (code == SL_ERR_RESTART)
		fm_disconnect(&m, SL_ERR_RESTART);
	fm_close(&m);
	usleep(30000); /* the NF retries against a missing socket meanwhile */

	struct fm m2;
	fm_listen_at(&m2, path);
	fm_accept(&m2);
	fm_hello(&m2);
	fm_expect_init(&m2, "test.0", w);
	fm_setup(&m2);
	fm_traffic(&m2, 50, 0);
	CHECK(t.counter == before); /* the NF's pointer still counts, and the new page reports it */
	CHECK_EQ(fm_counter(&m2, "packets")->value, 1150);
	CHECK_EQ(fm_counter(&m2, "sdk.reattaches")->value, 1);
	CHECK(fm_counter(&m2, "sdk.restart_lost") != NULL);
	sl_nf_stop(__atomic_load_n(&t.nf, __ATOMIC_ACQUIRE));
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.run_rc, 0);
	CHECK_EQ(t.st.reattaches, 1);
	fm_expect_disconnect(&m2, SL_ERR_SHUTDOWN);
	fm_close(&m2);
	fm_info = 0;
}

/* Nobody comes back within reattach_ms: the loop returns the code; a refusal by the new manager
 * (its DISCONNECT during the handshake) is final at once. */
static void test_reattach_gives_up(void)
{
	for (int refuse = 0; refuse < 2; refuse++) {
		struct fm m;
		struct nf_thread t;
		char path[108];
		fm_listen(&m);
		snprintf(path, sizeof(path), "%s", m.path);
		reattach_ms = refuse ? 5000 : 200;
		nf_start(&t, &m, SL_WAKE_BLOCK, handler);
		reattach_ms = 0;
		fm_accept(&m);
		fm_hello(&m);
		fm_expect_init(&m, "test.0", SL_WAKE_BLOCK);
		fm_setup(&m);
		nf_wait_attached(&t);
		fm_close(&m);
		if (refuse) {
			struct fm m2;
			fm_listen_at(&m2, path);
			fm_accept(&m2);
			fm_hello(&m2);
			fm_expect_init(&m2, "test.0", SL_WAKE_BLOCK);
			fm_disconnect(&m2, SL_ERR_PERM);
			CHECK_EQ(pthread_join(t.th, NULL), 0);
			CHECK_EQ(t.run_rc, -SL_ERR_PERM);
			fm_close(&m2);
		} else {
			CHECK_EQ(pthread_join(t.th, NULL), 0);
			CHECK_EQ(t.run_rc, -SL_ERR_IO);
		}
		CHECK_EQ(t.st.reattaches, 0);
	}
}

/* SIGTERM ends the loop with 0 and the old handler is restored. */
static volatile sig_atomic_t old_handler_ran;
static void old_handler(int s)
{
	(void)s;
	old_handler_ran = 1;
}

static void test_signal(void)
{
	struct fm m;
	struct nf_thread t;
	struct sigaction sa = { .sa_handler = old_handler };
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGTERM, &sa, NULL) == 0);

	nf_connect(&t, &m, SL_WAKE_BLOCK, handler);
	nf_wait_attached(&t);
	while (__atomic_load_n(&m.rx->need_kick, __ATOMIC_RELAXED) == 0)
		usleep(100);
	CHECK_EQ(pthread_kill(t.th, SIGTERM), 0);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.run_rc, 0);
	CHECK_EQ(old_handler_ran, 0);
	raise(SIGTERM);
	CHECK_EQ(old_handler_ran, 1);
	signal(SIGTERM, SIG_DFL);
	fm_close(&m);
}

/* Attach failures: each gives its code and leaves nothing open. */
static void test_attach_errors(void)
{
	struct fm m;
	struct nf_thread t;
	struct sl_msg msg;

	/* nobody listening */
	fm_listen(&m);
	fm_close(&m);
	nf_start(&t, &m, SL_WAKE_POLL, NULL);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.attach_rc, -SL_ERR_IO);

	/* no HELLO: timeout */
	fm_listen(&m);
	attach_timeout_ms = 200;
	nf_start(&t, &m, SL_WAKE_POLL, NULL);
	attach_timeout_ms = 2000;
	fm_accept(&m);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.attach_rc, -SL_ERR_TIMEOUT);
	fm_close(&m);

	/* bad magic: the NF says why and gives up */
	fm_listen(&m);
	nf_start(&t, &m, SL_WAKE_POLL, NULL);
	fm_accept(&m);
	sl_msg_init(&msg, SL_MSG_HELLO);
	msg.magic = 0xdeadbeef;
	fm_send(&m, &msg, NULL, 0);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.attach_rc, -SL_ERR_MAGIC);
	fm_expect_disconnect(&m, SL_ERR_MAGIC);
	fm_close(&m);

	/* refused after INIT */
	fm_listen(&m);
	nf_start(&t, &m, SL_WAKE_ADAPTIVE, NULL);
	fm_accept(&m);
	fm_hello(&m);
	fm_expect_init(&m, "test.0", SL_WAKE_ADAPTIVE);
	fm_disconnect(&m, SL_ERR_NAME);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.attach_rc, -SL_ERR_NAME);
	fm_close(&m);

	/* ADD_REGION without its fd */
	fm_listen(&m);
	nf_start(&t, &m, SL_WAKE_POLL, NULL);
	fm_accept(&m);
	fm_hello(&m);
	fm_expect_init(&m, "test.0", SL_WAKE_POLL);
	sl_msg_init(&msg, SL_MSG_ADD_REGION);
	msg.u.add_region.size = 4096;
	msg.u.add_region.buf_size = 2048;
	fm_send(&m, &msg, NULL, 0);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.attach_rc, -SL_ERR_FDS);
	fm_expect_disconnect(&m, SL_ERR_FDS);
	fm_close(&m);

	/* CONNECTED before the rings */
	fm_listen(&m);
	nf_start(&t, &m, SL_WAKE_POLL, NULL);
	fm_accept(&m);
	fm_hello(&m);
	fm_expect_init(&m, "test.0", SL_WAKE_POLL);
	sl_msg_init(&msg, SL_MSG_CONNECTED);
	fm_send(&m, &msg, NULL, 0);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.attach_rc, -SL_ERR_ORDER);
	fm_expect_disconnect(&m, SL_ERR_ORDER);
	fm_close(&m);

	/* region bigger than its memfd */
	fm_listen(&m);
	nf_start(&t, &m, SL_WAKE_POLL, NULL);
	fm_accept(&m);
	fm_hello(&m);
	fm_expect_init(&m, "test.0", SL_WAKE_POLL);
	int fd = memfd_create("small", MFD_CLOEXEC);
	CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
	sl_msg_init(&msg, SL_MSG_ADD_REGION);
	msg.u.add_region.size = 8192;
	msg.u.add_region.buf_size = 2048;
	fm_send(&m, &msg, &fd, 1);
	close(fd);
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.attach_rc, -SL_ERR_MAP);
	fm_expect_disconnect(&m, SL_ERR_MAP);
	fm_close(&m);

	/* invalid local config is refused before connecting */
	fm_listen(&m);
	attach_timeout_ms = 200;
	nf_start(&t, &m, SL_WAKE_POLL, NULL);
	attach_timeout_ms = 2000;
	CHECK_EQ(pthread_join(t.th, NULL), 0);
	CHECK_EQ(t.attach_rc, 0 - SL_ERR_TIMEOUT); /* sanity: the good config does connect */
	struct sl_nf_config bad;
	const char *names[] = { "", "a b", "a/b", NULL /* unterminated */ };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		sl_nf_config_default(&bad);
		bad.attach_timeout_ms = 100;
		snprintf(bad.socket_path, sizeof(bad.socket_path), "%s", m.path);
		if (names[i] != NULL)
			snprintf(bad.name, sizeof(bad.name), "%s", names[i]);
		else
			memset(bad.name, 'a', sizeof(bad.name));
		struct sl_nf *nf = (struct sl_nf *)&bad;
		CHECK_EQ(sl_nf_attach(&bad, &nf), -SL_ERR_FIELD);
		CHECK(nf == NULL);
	}
	sl_nf_config_default(&bad);
	bad.attach_timeout_ms = 100;
	snprintf(bad.socket_path, sizeof(bad.socket_path), "%s", m.path);
	bad.wakeup = SL_WAKE_BLOCK;
	bad.batch = 0;
	struct sl_nf *nf;
	CHECK_EQ(sl_nf_attach(&bad, &nf), -SL_ERR_FIELD);
	bad.batch = 1;
	bad.wakeup = (enum sl_wakeup)7;
	CHECK_EQ(sl_nf_attach(&bad, &nf), -SL_ERR_FIELD);
	bad.wakeup = SL_WAKE_POLL;
	bad.socket_path[0] = 0;
	CHECK_EQ(sl_nf_attach(&bad, &nf), -SL_ERR_FIELD);
	/* nothing was connected: accept() would block, so check the backlog is empty */
	int fl = fcntl(m.lfd, F_GETFL);
	CHECK(fcntl(m.lfd, F_SETFL, fl | O_NONBLOCK) == 0);
	int c = accept(m.lfd, NULL, NULL); /* the timeout case's connection */
	CHECK(c >= 0);
	close(c);
	CHECK(accept(m.lfd, NULL, NULL) < 0 && errno == EAGAIN);
	fm_close(&m);
}

/* Sandbox strict, attached over an inherited socket (cfg.sock_fd, SLUICE_NF_FD) as `sluice up` does
 * for a sandboxed NF: the NF is a child process (the filter is for good), the test is the manager on
 * the other end of a socket pair. The loop runs under the filter in every wakeup mode; a handler that
 * opens a file ends the process with SL_SANDBOX_EXIT. */
static void violating_handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	handler(nf, pkts, n, arg);
	int fd = open("/dev/null", O_RDONLY); /* refused: the process ends here */
	(void)fd;
}

static void test_strict_over_fd(enum sl_wakeup w, int violate)
{
	struct fm m;
	struct sl_msg msg;
	int sp[2];
	memset(&m, 0, sizeof(m));
	m.lfd = m.region_fd = m.ring_fd = m.efd_rx = m.efd_tx = -1;
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
	m.cfd = sp[0];
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(sp[0]);
		struct sl_nf_config cfg;
		struct sl_nf *nf;
		sl_nf_config_default(&cfg);
		cfg.socket_path[0] = '\0'; /* not used: the fd is */
		cfg.sock_fd = sp[1];
		cfg.sandbox = SL_SANDBOX_STRICT;
		snprintf(cfg.name, sizeof(cfg.name), "strict.0");
		snprintf(cfg.service, sizeof(cfg.service), "test");
		cfg.wakeup = w;
		cfg.spin_us = 50;
		if (sl_nf_attach(&cfg, &nf) != 0)
			_exit(10);
		int rc = sl_nf_run(nf, violate ? violating_handler : handler, NULL);
		sl_nf_detach(nf);
		_exit(rc == -SL_ERR_SHUTDOWN ? 0 : 11);
	}
	close(sp[1]);
	fm_hello(&m);
	CHECK_EQ(fm_recv(&m, &msg), 0);
	CHECK_EQ(sl_msg_check(&msg, SL_MSG_SIZE, 0, SL_MSG_INIT), SL_OK);
	CHECK(strcmp(msg.u.init.name, "strict.0") == 0);
	CHECK_EQ(msg.u.init.pid, pid);
	fm_setup(&m);
	int status;
	if (violate) {
		struct sl_desc d = { .buf = 0, .off = HEADROOM, .len = 60, .head = HEADROOM };
		CHECK_EQ(sl_ring_enqueue_burst(m.rx, &d, 1), 1);
		uint64_t one = 1;
		CHECK(write(m.efd_rx, &one, sizeof(one)) == sizeof(one));
		CHECK(waitpid(pid, &status, 0) == pid);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == SL_SANDBOX_EXIT);
	} else {
		fm_traffic(&m, 3000, w == SL_WAKE_POLL ? 0 : 300);
		fm_disconnect(&m, SL_ERR_SHUTDOWN);
		fm_expect_disconnect(&m, SL_ERR_SHUTDOWN); /* sl_nf_detach, under the filter */
		CHECK(waitpid(pid, &status, 0) == pid);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	fm_close(&m);
}

static void test_env(void)
{
	struct sl_nf_config c;
	sl_nf_config_default(&c);
	CHECK(strcmp(c.socket_path, "/run/sluice/nf.sock") == 0);
	CHECK(strcmp(c.name, "nf") == 0 && strcmp(c.service, "nf") == 0);
	CHECK_EQ(c.wakeup, SL_WAKE_POLL);
	CHECK_EQ(c.batch, 32);
	CHECK_EQ(c.timeout_us, 100);
	CHECK_EQ(c.spin_us, 200);
	CHECK_EQ(c.attach_timeout_ms, 5000);

	CHECK_EQ(sl_nf_config_from_env(&c), 0); /* nothing set */
	setenv("SLUICE_NF_SOCKET", "/tmp/x.sock", 1);
	setenv("SLUICE_NF_NAME", "fw.1", 1);
	setenv("SLUICE_NF_SERVICE", "fw", 1);
	setenv("SLUICE_NF_WAKEUP", "adaptive", 1);
	setenv("SLUICE_NF_BATCH", "8", 1);
	setenv("SLUICE_NF_TIMEOUT_US", "0", 1);
	setenv("SLUICE_NF_SPIN_US", "1000", 1);
	CHECK_EQ(sl_nf_config_from_env(&c), 0);
	CHECK(strcmp(c.socket_path, "/tmp/x.sock") == 0);
	CHECK(strcmp(c.name, "fw.1") == 0 && strcmp(c.service, "fw") == 0);
	CHECK_EQ(c.wakeup, SL_WAKE_ADAPTIVE);
	CHECK_EQ(c.batch, 8);
	CHECK_EQ(c.timeout_us, 0);
	CHECK_EQ(c.spin_us, 1000);

	const char *bad[][2] = {
		{ "SLUICE_NF_WAKEUP", "sleepy" }, { "SLUICE_NF_BATCH", "0" },
		{ "SLUICE_NF_BATCH", "12x" }, { "SLUICE_NF_BATCH", "-1" },
		{ "SLUICE_NF_BATCH", "" }, { "SLUICE_NF_TIMEOUT_US", "99999999999" },
		{ "SLUICE_NF_NAME", "a b" }, { "SLUICE_NF_SERVICE", "" },
		{ "SLUICE_NF_NAME", "0123456789012345678901234567890123" },
		{ "SLUICE_NF_SOCKET", "" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char saved[128];
		snprintf(saved, sizeof(saved), "%s", getenv(bad[i][0]));
		setenv(bad[i][0], bad[i][1], 1);
		CHECK_EQ(sl_nf_config_from_env(&c), -SL_ERR_FIELD);
		setenv(bad[i][0], saved, 1);
	}
	const char *vars[] = { "SLUICE_NF_SOCKET", "SLUICE_NF_NAME", "SLUICE_NF_SERVICE",
			       "SLUICE_NF_WAKEUP", "SLUICE_NF_BATCH", "SLUICE_NF_TIMEOUT_US",
			       "SLUICE_NF_SPIN_US" };
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	sl_nf_detach(NULL);
	test_env();
	test_run(SL_WAKE_POLL);
	test_run(SL_WAKE_BLOCK);
	test_run(SL_WAKE_ADAPTIVE);
	test_stop();
	test_yield_asked();
	test_signal();
	test_manager_gone(SL_WAKE_POLL);
	test_manager_gone(SL_WAKE_BLOCK);
	test_manager_gone(SL_WAKE_ADAPTIVE);
	test_attach_errors();
	test_reattach(SL_WAKE_POLL, SL_ERR_IO);
	test_reattach(SL_WAKE_BLOCK, SL_ERR_RESTART);
	test_reattach(SL_WAKE_ADAPTIVE, SL_ERR_IO);
	test_reattach_gives_up();
	test_strict_over_fd(SL_WAKE_POLL, 0);
	test_strict_over_fd(SL_WAKE_BLOCK, 0);
	test_strict_over_fd(SL_WAKE_ADAPTIVE, 0);
	test_strict_over_fd(SL_WAKE_BLOCK, 1);
	printf("test_nf_attach: ok\n");
	return 0;
}
