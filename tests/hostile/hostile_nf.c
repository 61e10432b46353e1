/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-hostile-nf: an NF that breaks the rules on purpose (issue 15; driven by
 * tests/integration/test_hostile_nf.py).
 *
 *   sluice-hostile-nf --socket PATH --name NAME [--service SVC] --mode MODE [--after N]
 *
 * It attaches with the SDK like any NF, then runs its own loop on the raw ring memory (the layout of
 * include/sluice/ring.h, found in its own mappings of the ring memfd) so that it can misbehave. It
 * forwards every packet (NEXT) until it has received --after packets (default 1000), then:
 *
 *   none        nothing: keeps forwarding by the rules (the control case)
 *   dup-return  returns descriptors twice: each burst's first one again at once, and a few it
 *               returned in earlier bursts; keeps going
 *   ring-mask   writes a size and mask of 0xffffffff (and no magic) into both rings' headers; keeps
 *               forwarding with its own copies
 *   own-index   keeps writing sluiced's own indices: the RX producer forwards, the TX consumer back
 *   index-back  once sluiced has taken all it returned, moves its TX producer index backwards
 *   index-past  same, but more than a ring ahead
 *   rx-past     moves its RX consumer index past what sluiced produced
 *   truncate    reopens the region and ring memfds (the SDK closed its fds; /proc/self/map_files
 *               gives them back to root), tries to grow and to shrink them to 0 and to add
 *               F_SEAL_FUTURE_WRITE to the region; keeps forwarding if all that was refused
 *   zero-region memsets every writable mapping of a packet region it has (all of the packet memory it
 *               can reach: before hole 5 was closed, the mbuf headers and the pool's ring too); keeps
 *               forwarding (counter `zeroed`: bytes)
 *   write-ro    writes one byte into the next packet it receives (an access: ro NF: SIGSEGV here)
 *   hold        keeps every packet it receives from then on and returns none (a domain's pool
 *               exhaustion); counter `held`
 *   forge       every burst: one of its own descriptors made invalid in turn (offset inside the next
 *               buffer, offset past the region, length past the buffer, unknown action, destination
 *               out of range: sluiced takes the buffer back), plus extra descriptors of a region that
 *               does not exist, a buffer id out of range, a buffer it was never lent, one it returned
 *               before (now free or lent to another NF) and the same buffer twice; counter `forged`
 *   rewrite     rewrites each burst's descriptors in the TX ring right after publishing them
 *               (offset or destination made invalid); counter `rewrites`
 *   bell-spam   keeps forwarding, but claims to sleep (its RX need_kick) and writes its eventfds in a
 *               loop (the TX one is its doorbell); counter `bells`
 *   forbidden-dest  returns everything with TO_NF --to-service ID and OUT --to-port NAME in turn;
 *               counter `forbidden`
 *   random      --count random descriptors from --seed (default 2000000, seed 1): garbage in every
 *               field, mixed with its own buffers under random actions; then forwards; counter `random`
 *
 * --token T sends T as its service's attach token (SLUICE_NF_TOKEN works too).
 *
 * The index modes stop forwarding and wait for sluiced to disconnect them. Counters (sluice stats,
 * the NF's `counters`): rx, tx, dup, tamper, trunc_refused, trunc_done, seal_refused, seal_done.
 * Exit status: 0 after SIGTERM/SIGINT, 3 when sluiced disconnected it (code and reason on stdout),
 * 1 on an error of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <dirent.h>

#include "sluice/nf.h"
#include "sluice/ring.h"

#define BURST 32
#define HIST 256

static volatile sig_atomic_t stop;

static void on_signal(int s)
{
	(void)s;
	stop = 1;
}

struct map {
	unsigned long start, end;
};

/* The lowest mapping of a memfd whose name contains `name`, at file offset 0. */
static int find_map(const char *name, struct map *m)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long s, e, off;
		if (!strstr(line, name) || sscanf(line, "%lx-%lx %*s %lx", &s, &e, &off) != 3 || off != 0)
			continue;
		if (!found || s < m->start) {
			m->start = s;
			m->end = e;
			found = 1;
		}
	}
	fclose(f);
	return found ? 0 : -1;
}

/* The attach socket: the only socket this process has. */
static int find_socket(void)
{
	for (int fd = 3; fd < 1024; fd++) {
		struct stat st;
		if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
			return fd;
	}
	return -1;
}

/* Has sluiced disconnected us? Prints its DISCONNECT and returns 1; 0 if the socket is quiet. */
static int disconnected(int sock, int timeout_ms)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	if (poll(&p, 1, timeout_ms) <= 0 || p.revents == 0)
		return 0;
	struct sl_msg m;
	size_t got = 0;
	while (got < sizeof(m)) {
		ssize_t n = recv(sock, (char *)&m + got, sizeof(m) - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got == sizeof(m) && m.type == SL_MSG_DISCONNECT) {
		m.u.disconnect.reason[SL_REASON_MAX - 1] = '\0';
		printf("disconnected: code %u (%s): %s\n", m.u.disconnect.code, sl_strerror((int)m.u.disconnect.code),
		       m.u.disconnect.reason);
	} else {
		printf("disconnected: connection closed\n");
	}
	fflush(stdout);
	return 1;
}

/* Try one thing to a memfd; count it as refused or done and say which. */
static void attempt(const char *what, int rc, uint64_t *refused, uint64_t *done, int *any_done)
{
	int e = errno;
	if (rc == 0) {
		(*done)++;
		*any_done = 1;
		printf("truncate: %s: done\n", what);
	} else {
		(*refused)++;
		printf("truncate: %s: refused (%s)\n", what, strerror(e));
	}
}

/* Returns 1 if anything was done that makes our own mappings unsafe to touch. */
static int do_truncate(uint64_t *trunc_refused, uint64_t *trunc_done, uint64_t *seal_refused, uint64_t *seal_done)
{
	const char *names[2] = { "sluice-region0", "sluice-nf-rings" };
	int shrunk = 0;
	uint64_t tr = 0, td = 0, sr = 0, sd = 0;
	for (int i = 0; i < 2; i++) {
		struct map m;
		char path[128], what[64];
		if (find_map(names[i], &m) < 0) {
			printf("truncate: no mapping of %s\n", names[i]);
			continue;
		}
		snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", m.start, m.end);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0) {
			printf("truncate: cannot reopen %s: %s\n", names[i], strerror(errno));
			continue;
		}
		struct stat st;
		off_t size = fstat(fd, &st) == 0 ? st.st_size : (off_t)(m.end - m.start);
		int sealed = 0, grown = 0;
		if (i == 0) /* a seal of its own would stop later NFs from mapping the region writable */
			attempt("region: add F_SEAL_FUTURE_WRITE", fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) < 0 ? -1 : 0,
				&sr, &sd, &sealed);
		snprintf(what, sizeof(what), "%s: grow", names[i]);
		attempt(what, ftruncate(fd, size * 2), &tr, &td, &grown);
		if (grown) /* put it back (the pages sluiced uses are below the old size) */
			(void)!ftruncate(fd, size);
		snprintf(what, sizeof(what), "%s: shrink to 0", names[i]);
		attempt(what, ftruncate(fd, 0), &tr, &td, &shrunk);
		close(fd);
	}
	fflush(stdout);
	if (!shrunk) { /* our counters live in the ring memfd: touch them only while it is whole */
		*trunc_refused += tr;
		*trunc_done += td;
		*seal_refused += sr;
		*seal_done += sd;
	}
	return shrunk;
}

/* zero-region: every writable mapping of a packet region memfd ("sluice-region<N>"). Bytes zeroed. */
static uint64_t zero_regions(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	unsigned long s[64], e[64];
	int n = 0;
	if (!f)
		return 0;
	while (n < 64 && fgets(line, sizeof(line), f)) {
		char perms[8];
		if (strstr(line, "sluice-region") && sscanf(line, "%lx-%lx %7s", &s[n], &e[n], perms) == 3 &&
		    perms[1] == 'w')
			n++;
	}
	fclose(f);
	uint64_t bytes = 0;
	for (int i = 0; i < n; i++) {
		memset((void *)s[i], 0, e[i] - s[i]);
		bytes += e[i] - s[i];
		printf("zero-region: zeroed %lx-%lx\n", s[i], e[i]);
	}
	return bytes;
}

static uint32_t rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void usage(void)
{
	fprintf(stderr, "usage: sluice-hostile-nf --socket PATH --name NAME [--service SVC] --mode MODE [--after N]\n"
			"modes: none dup-return ring-mask own-index index-back index-past rx-past truncate zero-region\n"
			"       write-ro hold forge rewrite bell-spam forbidden-dest random\n"
			"options: --token T --to-service ID --to-port NAME --seed S --count N\n");
}

enum mode { M_NONE, M_DUP, M_MASK, M_OWN, M_BACK, M_PAST, M_RXPAST, M_TRUNC, M_ZERO, M_WRITE_RO, M_HOLD,
	    M_FORGE, M_REWRITE, M_BELL, M_FORBID, M_RANDOM };

/* Every eventfd of this process (its RX kick and TX doorbell eventfds): how many found. */
static int find_eventfds(int *fds, int max)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;
	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL && n < max) {
		char path[300], link[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t l = readlink(path, link, sizeof(link) - 1);
		if (l > 0) {
			link[l] = '\0';
			if (strstr(link, "eventfd"))
				fds[n++] = atoi(e->d_name);
		}
	}
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	static const char *const modes[] = { "none", "dup-return", "ring-mask", "own-index", "index-back",
					     "index-past", "rx-past", "truncate", "zero-region", "write-ro", "hold", "forge",
					     "rewrite", "bell-spam", "forbidden-dest", "random", NULL };
	static const struct option opts[] = { { "socket", required_argument, 0, 's' },
					      { "name", required_argument, 0, 'n' },
					      { "service", required_argument, 0, 'v' },
					      { "mode", required_argument, 0, 'm' },
					      { "after", required_argument, 0, 'a' },
					      { "token", required_argument, 0, 't' },
					      { "to-service", required_argument, 0, 'S' },
					      { "to-port", required_argument, 0, 'P' },
					      { "seed", required_argument, 0, 'e' },
					      { "count", required_argument, 0, 'c' },
					      { 0, 0, 0, 0 } };
	struct sl_nf_config cfg;
	sl_nf_config_default(&cfg);
	int mode = -1, o;
	unsigned long after = 1000, to_service = 0, count = 2000000, seed_arg = 1;
	const char *to_port = NULL;
	int have_service = 0;
	sl_nf_config_from_env(&cfg); /* SLUICE_NF_TOKEN */
	while ((o = getopt_long(argc, argv, "s:n:v:m:a:t:S:P:e:c:", opts, NULL)) != -1) {
		switch (o) {
		case 't': snprintf(cfg.token, sizeof(cfg.token), "%s", optarg); break;
		case 'S': to_service = strtoul(optarg, NULL, 10); break;
		case 'P': to_port = optarg; break;
		case 'e': seed_arg = strtoul(optarg, NULL, 10); break;
		case 'c': count = strtoul(optarg, NULL, 10); break;
		case 's': snprintf(cfg.socket_path, sizeof(cfg.socket_path), "%s", optarg); break;
		case 'n': snprintf(cfg.name, sizeof(cfg.name), "%s", optarg); break;
		case 'v': snprintf(cfg.service, sizeof(cfg.service), "%s", optarg); have_service = 1; break;
		case 'a': after = strtoul(optarg, NULL, 10); break;
		case 'm':
			for (int i = 0; modes[i]; i++)
				if (!strcmp(optarg, modes[i]))
					mode = i;
			break;
		default: usage(); return 1;
		}
	}
	if (mode < 0) {
		usage();
		return 1;
	}
	if (!have_service)
		snprintf(cfg.service, sizeof(cfg.service), "%s", cfg.name);
	cfg.wakeup = SL_WAKE_POLL;
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	struct sl_nf *nf;
	int rc = sl_nf_attach(&cfg, &nf);
	if (rc < 0) {
		fprintf(stderr, "hostile: attach: %s\n", sl_strerror(-rc));
		return 1;
	}
	struct map rm;
	int sock = find_socket();
	if (find_map("sluice-nf-rings", &rm) < 0 || sock < 0) {
		fprintf(stderr, "hostile: cannot find my rings or my socket\n");
		sl_nf_detach(nf);
		return 1;
	}
	struct sl_ring *rx = (struct sl_ring *)rm.start;
	const uint32_t size = rx->size, mask = size - 1;
	size_t one = (sl_ring_bytes(size) + 4095) & ~(size_t)4095; /* as sluiced lays them out */
	struct sl_ring *tx = (struct sl_ring *)(rm.start + one);
	if (rx->magic != SL_ABI_MAGIC || tx->magic != SL_ABI_MAGIC || tx->size != size || size == 0 ||
	    (size & mask) != 0 || rm.start + one + sl_ring_bytes(size) > rm.end) {
		fprintf(stderr, "hostile: the ring memfd does not look as expected\n");
		sl_nf_detach(nf);
		return 1;
	}
	uint64_t *c_rx = sl_nf_counter(nf, "rx"), *c_tx = sl_nf_counter(nf, "tx"), *c_dup = sl_nf_counter(nf, "dup"),
		 *c_tamper = sl_nf_counter(nf, "tamper"), *c_trr = sl_nf_counter(nf, "trunc_refused"),
		 *c_trd = sl_nf_counter(nf, "trunc_done"), *c_sr = sl_nf_counter(nf, "seal_refused"),
		 *c_sd = sl_nf_counter(nf, "seal_done"), *c_zero = sl_nf_counter(nf, "zeroed"),
		 *c_held = sl_nf_counter(nf, "held"), *c_forged = sl_nf_counter(nf, "forged"),
		 *c_rewrites = sl_nf_counter(nf, "rewrites"), *c_bells = sl_nf_counter(nf, "bells"),
		 *c_forbidden = sl_nf_counter(nf, "forbidden"), *c_random = sl_nf_counter(nf, "random");
	struct map regm;
	if (find_map("sluice-region", &regm) < 0) {
		fprintf(stderr, "hostile: cannot find my packet region\n");
		sl_nf_detach(nf);
		return 1;
	}
	if (!c_rx || !c_tx || !c_dup || !c_tamper || !c_trr || !c_trd || !c_sr || !c_sd || !c_zero || !c_held ||
	    !c_forged || !c_rewrites || !c_bells || !c_forbidden || !c_random) {
		fprintf(stderr, "hostile: no counters\n");
		sl_nf_detach(nf);
		return 1;
	}
	printf("hostile: attached as %s, mode %s, rings of %u, misbehaving after %lu packets\n", cfg.name,
	       modes[mode], size, after);

	int port_id = to_port ? sl_nf_port_id(nf, to_port) : 0;
	if (port_id < 0) {
		fprintf(stderr, "hostile: no port %s\n", to_port);
		sl_nf_detach(nf);
		return 1;
	}
	int efds[8], nefds = mode == M_BELL ? find_eventfds(efds, 8) : 0;
	uint32_t rseed = (uint32_t)(seed_arg * 2654435761u) | 1u;
	uint64_t randoms = 0;
	struct sl_desc held[64];
	uint32_t nheld = 0;
	uint32_t rc_idx = rx->cons, tp = tx->prod; /* our own indices, private */
	struct sl_desc hist[HIST];
	uint32_t nhist = 0, seed = 0x9e3779b9u, idle = 0, bursts = 0;
	uint64_t received = 0;
	int triggered = 0, halted = 0, status = 0;
	while (!stop) {
		if (halted || ++idle % 1024 == 0) {
			if (disconnected(sock, halted ? 100 : 0)) {
				status = 3;
				break;
			}
			if (halted)
				continue;
		}
		if (!triggered && received >= after && mode != M_NONE) {
			triggered = 1;
			printf("hostile: misbehaving now (%s)\n", modes[mode]);
			switch (mode) {
			case M_MASK:
				rx->size = tx->size = 0xffffffffu;
				rx->mask = tx->mask = 0xffffffffu;
				rx->magic = tx->magic = 0;
				(*c_tamper)++;
				break;
			case M_BACK:
			case M_PAST: {
				/* wait until sluiced took everything returned, so the move is unambiguous */
				struct timespec t0, t;
				clock_gettime(CLOCK_MONOTONIC, &t0);
				while (__atomic_load_n(&tx->cons, __ATOMIC_ACQUIRE) != tp && !stop) {
					clock_gettime(CLOCK_MONOTONIC, &t);
					if (t.tv_sec - t0.tv_sec > 10) {
						fprintf(stderr, "hostile: sluiced did not take what I returned\n");
						sl_nf_detach(nf);
						return 1;
					}
					sched_yield();
				}
				uint32_t bad = mode == M_BACK ? tp - 5 : tp + size + 7;
				printf("hostile: TX producer %u -> %u (consumer %u)\n", tp, bad, tp);
				__atomic_store_n(&tx->prod, bad, __ATOMIC_RELEASE);
				(*c_tamper)++;
				halted = 1;
				continue;
			}
			case M_RXPAST: {
				/* sluiced can never have produced more than a ring beyond what we took */
				uint32_t bad = rc_idx + size + 1;
				printf("hostile: RX consumer %u -> %u (producer %u)\n", rc_idx, bad,
				       __atomic_load_n(&rx->prod, __ATOMIC_ACQUIRE));
				__atomic_store_n(&rx->cons, bad, __ATOMIC_RELEASE);
				(*c_tamper)++;
				halted = 1;
				continue;
			}
			case M_ZERO:
				*c_zero += zero_regions();
				break;
			case M_TRUNC:
				if (do_truncate(c_trr, c_trd, c_sr, c_sd)) {
					printf("hostile: a memfd shrank: no longer touching shared memory\n");
					halted = 1;
					continue;
				}
				break;
			default:
				break;
			}
		}
		if (triggered && mode == M_BELL) { /* "asleep", and ringing: the TX eventfd is the doorbell */
			__atomic_store_n(&rx->need_kick, 1, __ATOMIC_RELAXED);
			uint64_t one = 1;
			for (int k = 0; k < 16; k++)
				for (int i = 0; i < nefds; i++)
					if (write(efds[i], &one, sizeof(one)) == sizeof(one))
						(*c_bells)++;
		}
		if (triggered && mode == M_RANDOM && randoms < count) {
			/* take what came in (kept, so the NF stays busy and sluiced keeps draining it) */
			uint32_t pr = __atomic_load_n(&rx->prod, __ATOMIC_ACQUIRE), av = pr - rc_idx;
			if (av > size)
				av = 0;
			while (av > 0 && nheld < 64) {
				held[nheld++] = rx->desc[rc_idx & mask];
				rc_idx++;
				av--;
				received++;
				(*c_rx)++;
			}
			__atomic_store_n(&rx->cons, rc_idx, __ATOMIC_RELEASE);
			uint32_t cons = __atomic_load_n(&tx->cons, __ATOMIC_ACQUIRE), room = size - (tp - cons);
			if (room > size)
				room = 0;
			uint32_t k = room < BURST ? room : BURST;
			for (uint32_t i = 0; i < k; i++) {
				struct sl_desc d;
				uint32_t r1 = rnd(&rseed), r2 = rnd(&rseed), r3 = rnd(&rseed);
				if (nheld > 8 && r1 % 8 == 0) { /* one of its own, under a random action and dest */
					d = held[--nheld];
					d.action = (uint8_t)(r2 % 6 == 5 ? r2 >> 8 : r2 % 5);
					d.dest = (uint16_t)(r3 % 4 == 0 ? r3 >> 16 : r3 % 8);
					if (r3 % 16 == 1)
						d.len = (uint16_t)(r3 >> 8);
					if (r3 % 16 == 2)
						d.off ^= 1u << (r2 % 32);
				} else { /* garbage: ids near and far, every field random */
					d.buf = r1 % 4 == 0 ? r1 : r1 % 40000;
					d.off = r2 % 3 == 0 ? r2 : r2 % (64u << 20);
					d.len = (uint16_t)r3;
					d.head = (uint16_t)(r3 >> 16);
					d.region = (uint8_t)(r1 % 7 == 0 ? r1 >> 24 : 0);
					d.action = (uint8_t)(r2 >> 24);
					d.dest = (uint16_t)(r2 >> 8);
				}
				tx->desc[(tp + i) & mask] = d;
			}
			tp += k;
			__atomic_store_n(&tx->prod, tp, __ATOMIC_RELEASE);
			randoms += k;
			*c_random = randoms;
			*c_tx += k;
			if (randoms >= count) { /* done: give back what it kept, forward from now on */
				printf("hostile: %llu random descriptors sent\n", (unsigned long long)randoms);
				while (nheld > 0 && !stop) {
					uint32_t c2 = __atomic_load_n(&tx->cons, __ATOMIC_ACQUIRE);
					if (size - (tp - c2) == 0 || size - (tp - c2) > size) {
						sched_yield();
						continue;
					}
					tx->desc[tp & mask] = held[--nheld];
					tx->desc[tp & mask].action = SL_ACT_DROP;
					__atomic_store_n(&tx->prod, ++tp, __ATOMIC_RELEASE);
				}
			}
			if (k == 0)
				sched_yield();
			continue;
		}
		uint32_t prod = __atomic_load_n(&rx->prod, __ATOMIC_ACQUIRE), avail = prod - rc_idx;
		if (avail > size) /* not a real count (own-index: our own scribble): look again later */
			avail = 0;
		uint32_t n = avail < BURST ? avail : BURST;
		if (n == 0) {
			if (idle % 64 == 0)
				sched_yield();
			continue;
		}
		struct sl_desc out[BURST + 8];
		for (uint32_t i = 0; i < n; i++) {
			out[i] = rx->desc[(rc_idx + i) & mask];
			out[i].action = SL_ACT_NEXT;
			out[i].dest = 0;
		}
		rc_idx += n;
		__atomic_store_n(&rx->cons, rc_idx, __ATOMIC_RELEASE);
		received += n;
		*c_rx += n;
		bursts++;
		if (triggered && mode == M_WRITE_RO) {
			printf("write-ro: writing into packet buffer %u\n", out[0].buf);
			fflush(stdout);
			((volatile uint8_t *)regm.start)[out[0].off] = 0x55; /* read-only: SIGSEGV */
			printf("write-ro: the write went through\n");
		}
		if (triggered && mode == M_HOLD) {
			*c_held += n;
			idle = 0;
			continue;
		}
		uint32_t nout = n;
		if (triggered && mode == M_FORBID) {
			for (uint32_t i = 0; i < n; i++) {
				out[i].action = (uint8_t)((received + i) % 2 ? SL_ACT_TO_NF : SL_ACT_OUT);
				out[i].dest = (uint16_t)(out[i].action == SL_ACT_TO_NF ? to_service : (unsigned long)port_id);
			}
			*c_forbidden += n;
		}
		if (triggered && mode == M_FORGE) {
			struct sl_desc real = out[0];
			uint32_t start = real.off - real.head;
			switch (bursts % 5) { /* its own buffer, made invalid: sluiced takes it back */
			case 0: out[0].off = start + 4096 + real.head; break; /* inside the next buffer */
			case 1: out[0].off = 0xffffff00u; break;             /* past the region */
			case 2: out[0].len = 4096; break;                    /* past the buffer */
			case 3: out[0].action = 9; break;                    /* unknown action */
			default: out[0].action = SL_ACT_TO_NF; out[0].dest = 0xfff0; break; /* no such service */
			}
			struct sl_desc x = real;
			x.region = 1; /* a region it was not given */
			out[nout++] = x;
			x = real;
			x.buf = 0x7fffffffu; /* out of range */
			out[nout++] = x;
			x = real;
			x.buf = (real.buf + 1 + rnd(&seed) % 1000) % 16384; /* never lent to it, or another's */
			out[nout++] = x;
			if (nhist > 0) /* returned before: free now, or lent to another NF */
				out[nout++] = hist[(nhist - 1 - rnd(&seed) % (nhist < 96 ? nhist : 96)) % HIST];
			if (n > 1)
				out[nout++] = out[1]; /* the same buffer twice */
			*c_forged += nout - n + 1;
		}
		if (triggered && mode == M_DUP) {
			out[nout++] = out[0]; /* the same descriptor twice in one burst */
			for (int k = 0; k < 4 && nhist > 0; k++) /* and a few returned before */
				out[nout++] = hist[(nhist - 1 - rnd(&seed) % (nhist < 96 ? nhist : 96)) % HIST];
			*c_dup += nout - n;
		}
		for (uint32_t i = 0; i < n; i++)
			hist[nhist++ % HIST] = out[i];
		/* return them all, waiting for room (sluiced drains 32 a loop) */
		uint32_t done = 0, spins = 0;
		while (done < nout && !stop) {
			uint32_t cons = __atomic_load_n(&tx->cons, __ATOMIC_ACQUIRE), room = size - (tp - cons);
			if (room > size) /* own-index: our own scribble of its consumer index */
				room = 0;
			uint32_t k = nout - done < room ? nout - done : room;
			for (uint32_t i = 0; i < k; i++)
				tx->desc[(tp + i) & mask] = out[done + i];
			tp += k;
			__atomic_store_n(&tx->prod, tp, __ATOMIC_RELEASE);
			done += k;
			if (done < nout) {
				sched_yield();
				if (++spins % 4096 == 0 && disconnected(sock, 0)) {
					status = 3;
					stop = 1;
				}
			}
		}
		*c_tx += done;
		idle = 0;
		if (triggered && mode == M_REWRITE) { /* what it published, changed under sluiced's feet */
			for (uint32_t i = 0; i < done; i++) {
				struct sl_desc *d = &tx->desc[(tp - done + i) & mask];
				if (i % 2) {
					d->off += 1;
				} else {
					d->action = SL_ACT_TO_NF;
					d->dest = 0xfff0;
				}
			}
			*c_rewrites += done;
		}
		if (triggered && mode == M_OWN && bursts % 16 == 0) {
			/* sluiced's own indices: its RX producer far ahead, its TX consumer rewound */
			__atomic_store_n(&rx->prod, __atomic_load_n(&rx->prod, __ATOMIC_RELAXED) + 12345u, __ATOMIC_RELAXED);
			__atomic_store_n(&tx->cons, __atomic_load_n(&tx->cons, __ATOMIC_RELAXED) - 7u, __ATOMIC_RELAXED);
			(*c_tamper)++;
		}
	}
	printf("hostile: stopping (received %llu)\n", (unsigned long long)received);
	sl_nf_detach(nf);
	return status;
}
