/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluiced: start-up, the control loop on the main lcore, and shutdown.
 *
 *   sluiced --config FILE.json [--socket-dir DIR] [--log-level N] [--resume RUNTIME.json]
 *   sluiced --check-config FILE.json [--socket-dir DIR]   (validate as at start-up, print ok or the error; no EAL)
 *
 * Set-up order (and the reverse on the way out): config -> EAL -> packet
 * region + pool -> ports -> registry (services, routes) -> rules -> sockets -> worker.
 */
#define ALLOW_EXPERIMENTAL_API /* rte_dev_event_callback_register: PCI hot-unplug (experimental in DPDK 22.11) */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mempool.h>

#include "sluiced.h"

struct manager M;

/* Is a live process accepting on this UNIX socket path? (A stale file is not.) */
static bool socket_in_use(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	bool live = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return live;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: sluiced --config FILE.json [--socket-dir DIR] [--log-level N] [--resume FILE]\n"
		   "       sluiced --check-config FILE.json [--socket-dir DIR]\n"
		   "\n"
		   "The Sluice manager: owns the ports and the packet memory, moves packet descriptors\n"
		   "between ports and NF processes. Normally started by `sluice up CONFIG.yaml`.\n"
		   "\n"
		   "  --config FILE      JSON configuration (see docs/architecture.md)\n"
		   "  --socket-dir DIR   where nf.sock and ctl.sock are created (default /run/sluice)\n"
		   "  --log-level N      DPDK log level 1..8 (default 4, warnings)\n"
		   "  --resume FILE      after start-up, replay the runtime state a previous sluiced wrote\n"
		   "                     (DIR/runtime.json: chains, rules, services, ports changed at runtime)\n"
		   "  --test-hooks       enable debug-only control commands (test_hook; tests only)\n"
		   "  --check-config FILE  check FILE as start-up does (fields, names, chains, rules) and\n"
		   "                     print ok, or the error naming the field; exit 0 or 1. Needs no\n"
		   "                     huge pages or DPDK: devices (vdevs, PCI) and lcores are not tried\n");
}

/* Free 2 MiB huge pages, from /proc/meminfo. */
static long free_hugepages(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	long free_pages = 0, size_kb = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "HugePages_Free: %ld", &free_pages);
		sscanf(line, "Hugepagesize: %ld kB", &size_kb);
	}
	fclose(f);
	return size_kb == 2048 ? free_pages : 0;
}

static int eal_start(const char *prog, bool huge, const char *log_level, size_t private_mb)
{
	char lcores[256], loglvl[32], mem_mb[24];
	snprintf(mem_mb, sizeof(mem_mb), "%zu", private_mb);
	/* lcore i runs on the i-th core named (main first, then one per worker); a core may be named
	 * twice (two workers on one core of a small machine): --lcores maps ids to cores */
	size_t used = 0;
	unsigned id = 0;
	char cores[sizeof(M.cfg.lcores)];
	snprintf(cores, sizeof(cores), "%s", M.cfg.lcores);
	for (char *save = NULL, *t = strtok_r(cores, ",", &save); t && used < sizeof(lcores); t = strtok_r(NULL, ",", &save))
		used += (size_t)snprintf(lcores + used, sizeof(lcores) - used, "%s%u@%s", id ? "," : "", id, t), id++;
	snprintf(loglvl, sizeof(loglvl), "%s", log_level);
	char *argv[16 + 2 * SL_MAX_PORTS];
	int argc = 0, npci = 0;
	argv[argc++] = (char *)prog;
	argv[argc++] = "--lcores";
	argv[argc++] = lcores;
	/* PCI devices are probed only when the config names them, and then only those
	 * (an allowlist): the machine's own NIC is never touched. */
	for (unsigned i = 0; i < M.cfg.nports; i++) {
		if (strncmp(M.cfg.ports[i].vdev, "pci:", 4) == 0) {
			argv[argc++] = "-a";
			argv[argc++] = M.cfg.ports[i].vdev + 4;
			npci++;
		}
	}
	if (npci == 0)
		argv[argc++] = "--no-pci";
	argv[argc++] = "--no-telemetry";
	argv[argc++] = "--log-level";
	argv[argc++] = loglvl;
	if (huge) {
		argv[argc++] = "--in-memory";
	} else {
		argv[argc++] = "--no-huge";
		argv[argc++] = "--no-shconf";
		argv[argc++] = "-m";
		argv[argc++] = mem_mb; /* EAL's own 128 MiB + the pools' mbuf headers */
	}
	argv[argc] = NULL;
	int rc = rte_eal_init(argc, argv);
	if (rc < 0) {
		LOG("DPDK EAL init failed: %s", rte_strerror(rte_errno));
		return -1;
	}
	return 0;
}

static void handle_signal(void)
{
	struct signalfd_siginfo si;
	while (read(M.sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM) {
			LOG("signal %u: shutting down", si.ssi_signo);
			M.stop = true;
		}
	}
}

static void control_loop(void)
{
	struct epoll_event evs[64];
	uint64_t last_check = now_ms();
	while (!M.stop) {
		int n = epoll_wait(M.epfd, evs, 64, 100);
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;
			uint32_t kind = (uint32_t)(tag >> 32), idx = (uint32_t)tag;
			switch (kind) {
			case EP_NF_LISTEN: attach_accept(); break;
			case EP_CTL_LISTEN: ctl_accept(); break;
			case EP_SIGNAL: handle_signal(); break;
			case EP_NF: attach_event(&M.nfs[idx], evs[i].events); break;
			case EP_CTL: ctl_event((void *)(uintptr_t)idx, evs[i].events); break;
			case EP_FAULT: attach_faults(); break;
			case EP_DEV_EVENT: ctl_ports_unplugged(); break;
			case EP_GUEST_LISTEN: attach_guest_accept(idx); break;
			case EP_GUEST_IVSHMEM: guest_ivshmem_accept(idx); break;
			}
		}
		uint64_t now = now_ms();
		if (now - last_check >= 100) {
			attach_check_timeouts(now);
			last_check = now;
		}
	}
}

#define QUIESCE_MS 500

/* A planned restart loses less: the ports are no longer read, and what the NFs hold goes on its way
 * (out of a port, or dropped by an NF) before they are told to attach again; at most QUIESCE_MS. */
static void quiesce(void)
{
	__atomic_store_n(&M.rx_paused, true, __ATOMIC_RELEASE);
	uint64_t t0 = now_ms(), held = 0;
	do {
		held = 0;
		for (uint32_t i = 0; i < M.max_nfs; i++)
			if (M.nfs[i].state == NF_ATTACHED)
				held += M.nfs[i].lent;
		if (held == 0)
			break;
		struct timespec ts = { .tv_sec = 0, .tv_nsec = 1000000 };
		nanosleep(&ts, NULL);
	} while (now_ms() - t0 < QUIESCE_MS);
	LOG("restart: ports paused; NFs %s after %llu ms", held ? "still hold packets" : "hold nothing",
	    (unsigned long long)(now_ms() - t0));
}

/* EAL's interrupt thread: a PCI device is going (VFIO relays the kernel's request to release it). Only
 * flags the port and wakes the control loop, which takes it out of use (ctl_ports_unplugged). */
static void on_dev_event(const char *name, enum rte_dev_event_type type, void *arg)
{
	(void)arg;
	if (type != RTE_DEV_EVENT_REMOVE)
		return;
	for (unsigned i = 0; i < M.nports; i++)
		if (M.ports[i].pci && M.ports[i].live && !strcmp(M.ports[i].devname, name)) {
			__atomic_store_n(&M.ports[i].unplug, true, __ATOMIC_RELEASE);
			uint64_t one = 1;
			if (write(M.dev_efd, &one, sizeof(one)) < 0) { /* a full counter: a wake-up is pending */
			}
		}
}

#define SOCK_DIR_MAX 80 /* --socket-dir at most (M.sock_dir, and DIR/nf.sock in a sockaddr_un) */

/* --check-config: what start-up checks before it touches a device (config_load, then the registry's
 * chains and the rules, which name ports, chains and services), without EAL. The ports are names only:
 * whether DPDK can create each device, and the lcores, are the machine's business (found at start-up). */
static int check_config(const char *path, const char *sock_dir)
{
	char err[512];
	int rc = 1;
	if (config_load(path, &M.cfg, err, sizeof(err)) != 0) {
		printf("config error: %s\n", err);
		return 1;
	}
	if (strlen(sock_dir) > SOCK_DIR_MAX) {
		snprintf(err, sizeof(err), "--socket-dir: path too long (max %d characters)", SOCK_DIR_MAX);
		goto out;
	}
	M.max_nfs = M.cfg.max_nfs;
	for (unsigned i = 0; i < M.cfg.nports; i++) {
		memcpy(M.ports[i].name, M.cfg.ports[i].name, sizeof(M.ports[i].name));
		M.ports[i].live = true;
		M.nports = i + 1;
	}
	if (registry_init(err, sizeof(err)) < 0)
		goto out;
	struct steer_action malformed;
	if (M.cfg.malformed && steer_action_parse(M.cfg.malformed, "steering.malformed", &malformed, err, sizeof(err)) < 0)
		goto out;
	size_t n = json_array_size(M.cfg.rules), i;
	if (n > SL_MAX_RULES) {
		snprintf(err, sizeof(err), "rules: %zu rules, at most %d", n, SL_MAX_RULES);
		goto out;
	}
	json_t *v;
	json_array_foreach(M.cfg.rules, i, v) {
		char where[32];
		struct rule r;
		snprintf(where, sizeof(where), "rules[%zu]", i);
		if (rule_parse(v, where, &r, err, sizeof(err)) < 0)
			goto out;
		rule_release(&r);
	}
	rc = 0;
out:
	if (rc)
		printf("config error: %s\n", err);
	else
		printf("ok\n");
	registry_fini();
	M.nports = 0;
	config_free(&M.cfg);
	return rc;
}

static int epoll_add(int fd, enum ep_kind kind)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = (uint64_t)kind << 32 };
	return epoll_ctl(M.epfd, EPOLL_CTL_ADD, fd, &ev);
}

int main(int argc, char **argv)
{
	const char *config_path = NULL, *sock_dir = "/run/sluice", *log_level = "4", *resume = NULL, *check_path = NULL;
	static const struct option opts[] = { { "config", required_argument, 0, 'c' },
					      { "socket-dir", required_argument, 0, 's' },
					      { "log-level", required_argument, 0, 'l' },
					      { "test-hooks", no_argument, 0, 'T' },
					      { "resume", required_argument, 0, 'r' },
					      { "check-config", required_argument, 0, 'C' },
					      { "help", no_argument, 0, 'h' },
					      { 0, 0, 0, 0 } };
	int o;
	while ((o = getopt_long(argc, argv, "c:s:l:h", opts, NULL)) != -1) {
		switch (o) {
		case 'c': config_path = optarg; break;
		case 's': sock_dir = optarg; break;
		case 'l': log_level = optarg; break;
		case 'T': M.test_hooks = true; break;
		case 'r': resume = optarg; break;
		case 'C': check_path = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (check_path)
		return check_config(check_path, sock_dir);
	if (!config_path) {
		usage(stderr);
		return 2;
	}
	setvbuf(stderr, NULL, _IOLBF, 0);
	M.nf_listen = M.ctl_listen = M.epfd = M.sigfd = M.dev_efd = -1;
	M.started_ms = now_ms();
	char err[512];
	if (config_load(config_path, &M.cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "sluiced: config error: %s\n", err);
		return 2;
	}
	if (strlen(sock_dir) > SOCK_DIR_MAX) {
		fprintf(stderr, "sluiced: --socket-dir: path too long (max %d characters)\n", SOCK_DIR_MAX);
		return 2;
	}
	snprintf(M.sock_dir, sizeof(M.sock_dir), "%s", sock_dir);
	snprintf(M.nf_sock_path, sizeof(M.nf_sock_path), "%s/nf.sock", sock_dir);
	snprintf(M.ctl_sock_path, sizeof(M.ctl_sock_path), "%s/ctl.sock", sock_dir);
	mkdir(sock_dir, 0770);
	if (socket_in_use(M.ctl_sock_path) || socket_in_use(M.nf_sock_path)) {
		fprintf(stderr, "sluiced: another sluiced is already serving %s (stop it first, e.g. `sluice down`)\n",
			sock_dir);
		config_free(&M.cfg);
		return 1;
	}

	/* Huge pages when there are enough of them: every domain's region, and sluiced's private memory
	 * (EAL's own ~64 MiB plus every pool's mbuf headers, about 256 bytes a buffer, and ring). */
	size_t region_total = 0, mbufs_total = 0;
	for (unsigned d = 0; d < M.cfg.ndomains; d++) {
		region_total += region_bytes(M.cfg.domains[d].pool_mbufs, M.cfg.domains[d].buffer_size, true);
		mbufs_total += M.cfg.domains[d].pool_mbufs;
	}
	size_t headers = mbufs_total * 256 + (size_t)M.cfg.ndomains * (1u << 20);
	size_t want_pages = (region_total + headers + (40u << 20)) / (2u << 20) + 32;
	long have = free_hugepages();
	bool huge = M.cfg.huge == 1 || (M.cfg.huge == -1 && have >= (long)want_pages);
	if (M.cfg.huge == 1 && have < (long)want_pages)
		LOG("warning: huge_pages is on but only %ld free 2 MiB pages (about %zu wanted)", have, want_pages);
	if (huge)
		LOG("memory: using huge pages (%ld free 2 MiB huge pages)", have);
	else if (M.cfg.huge == 0)
		LOG("memory: using 4 KiB pages (--no-huge): sluiced.huge_pages is off");
	else
		LOG("memory: huge pages unavailable (%ld free 2 MiB pages, about %zu wanted), using 4 KiB pages (--no-huge)",
		    have, want_pages);

	/* Block the stop signals before EAL starts its threads, so they inherit
	 * the mask and the signals reach only the control loop's signalfd. */
	sigset_t ss;
	sigemptyset(&ss);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &ss, NULL);
	sigdelset(&ss, SIGPIPE);

	int rc = 1;
	bool eal = false;
	if (eal_start(argv[0], huge, log_level, 128 + (headers >> 20)) < 0)
		goto out;
	eal = true;
	M.tsc_hz = rte_get_tsc_hz();
	M.worker_lcore = rte_get_next_lcore(rte_get_main_lcore(), 1, 0);
	if (M.worker_lcore >= RTE_MAX_LCORE) {
		LOG("sluiced.lcores: '%s' gives no worker lcore: name two cores, e.g. \"0,1\"", M.cfg.lcores);
		goto out;
	}
	/* One region per trust domain, in domain order (0 = default); torn down in reverse. */
	for (unsigned d = 0; d < M.cfg.ndomains; d++) {
		struct region *r = d == 0 ? &M.region : calloc(1, sizeof(*r));
		if (!r)
			goto out;
		M.regions[d] = r;
		M.nregions = d + 1;
		if (region_create(r, (uint8_t)d, M.cfg.domains[d].name, M.cfg.domains[d].pool_mbufs,
				  M.cfg.domains[d].buffer_size, huge) < 0)
			goto out;
		if (M.cfg.pipes && pipe_area_create(r, M.cfg.max_nfs, M.cfg.ring_size) < 0)
			goto out;
	}

	M.max_nfs = M.cfg.max_nfs;
	/* Each NF costs sluiced 4 descriptors (socket, ring memfd, two eventfds): lift the soft limit
	 * to the hard one and say so if even that is short of max_nfs. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rlim_t want = (rlim_t)M.max_nfs * 4 + 256;
		if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
		if (rl.rlim_cur < want)
			LOG("warning: open-file limit %llu is below the %llu that sluiced.max_nfs %u needs; "
			    "raise it (ulimit -n) or NFs will be refused", (unsigned long long)rl.rlim_cur,
			    (unsigned long long)want, M.max_nfs);
	}
	M.nfs = calloc(M.max_nfs, sizeof(*M.nfs));
	if (!M.nfs || worker_init() < 0) {
		LOG("out of memory");
		goto out;
	}
	for (unsigned i = 0; i < M.cfg.nports; i++) {
		struct port *p = &M.ports[i];
		memcpy(p->name, M.cfg.ports[i].name, sizeof(p->name));
		memcpy(p->vdev, M.cfg.ports[i].vdev, sizeof(p->vdev));
		p->opts = M.cfg.ports[i].opts;
		if (port_open(p, M.region.pool, M.cfg.ports[i].queues, err, sizeof(err)) < 0) {
			LOG("config error: %s", err);
			goto out;
		}
		p->live = true; /* no worker runs yet: port_add's WCMD_PORT_ADD does this for a later port */
		M.nports = i + 1;
	}
	if (registry_init(err, sizeof(err)) < 0) {
		LOG("config error: %s", err);
		goto out;
	}
	if (rules_load(M.cfg.rules, M.cfg.malformed, err, sizeof(err)) < 0) {
		LOG("config error: %s", err);
		goto out;
	}

	M.sigfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
	M.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (M.sigfd < 0 || M.epfd < 0 || attach_listen() < 0 || ctl_listen() < 0)
		goto out;
	epoll_add(M.sigfd, EP_SIGNAL);
	epoll_add(M.nf_listen, EP_NF_LISTEN);
	epoll_add(M.ctl_listen, EP_CTL_LISTEN);
	epoll_add(worker_fault_fd(), EP_FAULT);
	bool pci = false;
	for (unsigned i = 0; i < M.nports; i++)
		pci |= M.ports[i].pci;
	if (pci) { /* hot-unplug of a PCI NIC (docs/ports.md "PCI NICs"); teardown twin below */
		M.dev_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (M.dev_efd < 0 || rte_dev_event_callback_register(NULL, on_dev_event, NULL) != 0) {
			LOG("warning: no device events (%s): an unplugged PCI NIC would not be noticed", strerror(errno));
			if (M.dev_efd >= 0)
				close(M.dev_efd);
			M.dev_efd = -1;
		} else
			epoll_add(M.dev_efd, EP_DEV_EVENT);
	}

	if (sched_start() < 0 || worker_launch() < 0)
		goto out;
	/* a restart: what the control API changed before it, before any NF or client is served */
	if (resume && access(resume, F_OK) == 0 && ctl_runtime_replay(resume, err, sizeof(err)) < 0)
		LOG("resume: %s; starting from the config alone", err);
	else if (resume && access(resume, F_OK) != 0)
		LOG("resume: no %s (nothing was changed at runtime); starting from the config", resume);
	LOG("nf socket %s, control socket %s", M.nf_sock_path, M.ctl_sock_path);
	LOG("ready");
	control_loop();
	rc = 0;
	if (M.restart) {
		quiesce();
		/* NFs told to attach again must not reach this sluiced's socket while it goes: they wait
		 * (refused) for the next one */
		close(M.nf_listen);
		unlink(M.nf_sock_path);
		M.nf_listen = -1;
	}
out:
	/* Teardown: the reverse of set-up. */
	for (uint32_t i = 0; M.nfs && i < M.max_nfs; i++)
		nf_detach(&M.nfs[i], M.restart ? SL_ERR_RESTART : SL_ERR_SHUTDOWN,
			  M.restart ? "sluiced is restarting: attach again" : "sluiced is shutting down");
	worker_stop();
	sched_stop();
	if (M.dev_efd >= 0) {
		rte_dev_event_callback_unregister(NULL, on_dev_event, NULL);
		close(M.dev_efd);
		M.dev_efd = -1;
	}
	guest_release_all();
	ctl_close_all();
	if (M.ctl_listen >= 0) {
		close(M.ctl_listen);
		unlink(M.ctl_sock_path);
	}
	if (M.nf_listen >= 0) {
		close(M.nf_listen);
		unlink(M.nf_sock_path);
	}
	if (M.epfd >= 0)
		close(M.epfd);
	if (M.sigfd >= 0)
		close(M.sigfd);
	rules_unload();
	worker_fini();
	registry_fini(); /* packets a port still stages are freed by port close */
	for (unsigned i = M.nports; i-- > 0;)
		port_close(&M.ports[i]);
	for (unsigned d = M.nregions; d-- > 0;) {
		struct region *r = M.regions[d];
		region_stash_release(r);
		pipe_area_destroy(r);
		if (r->pool) {
			unsigned avail = rte_mempool_avail_count(r->pool);
			if (avail != r->nbufs)
				LOG("shutdown: %u of %u mbufs not back in the pool of domain %s", r->nbufs - avail,
				    r->nbufs, r->name);
		}
		region_destroy(r);
		if (r != &M.region)
			free(r);
		M.regions[d] = NULL;
	}
	M.nregions = 0;
	free(M.nfs);
	config_free(&M.cfg);
	if (eal)
		rte_eal_cleanup();
	LOG("stopped");
	return rc;
}
