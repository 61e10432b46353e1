/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-stackd: the socket service of docs/sockets.md. Programs started with `sluice run` (the
 * libsluice-sock.so shim) have their INET/INET6 sockets served here.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <arpa/inet.h>

#include "stackd.h"

static volatile int stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sluice-stackd [--socket-dir DIR] [--ring-kb N] [--slots N] [--poll-us N] [--no-direct]\n"
		"                     [--user-addr ADDR/LEN ... [--user-service NAME] [--user-gateway IPV4]\n"
		"                      [--user-mtu N] [--user-mac MAC] [--user-supply N] [--nf-socket PATH]]\n"
		"\n"
		"The Sluice socket service (docs/sockets.md): serves the sockets of programs started with\n"
		"`sluice run` on DIR/stack.sock; control API (newline-delimited JSON: status, stats) on\n"
		"DIR/stack-ctl.sock.\n"
		"\n"
		"  --socket-dir DIR  where the sockets go (default $SLUICE_SOCKET_DIR or /run/sluice)\n"
		"  --ring-kb N       each socket's send and receive ring, KiB, a power of two 4..16384 (256)\n"
		"  --slots N         sockets per program, 1..65536 (1024)\n"
		"  --poll-us N       after activity, poll N us before sleeping, 0..10000 (0: always sleep);\n"
		"                    programs' blocking receives and event loops poll too (N to 4N us);\n"
		"                    lower latency for a core's worth of CPU while busy\n"
		"  --no-direct       keep the engine on the data path of shm connections (by default the\n"
		"                    two ends of one owner without a rate limit move bytes themselves)\n"
		"\n"
		"The user module (`sluice run --stack user`, docs/sockets.md \"The user module\"): lwIP, attached\n"
		"to sluiced as an NF; its frames cross the service's chains. On with --user-addr.\n"
		"  --user-addr A/LEN  an address of the stack (one IPv4, up to 5 IPv6; repeat the option)\n"
		"  --user-service S   the service it attaches as (stack); token from SLUICE_NF_TOKEN\n"
		"  --user-gateway IP  IPv4 next hop for addresses off the IPv4 prefix (none)\n"
		"  --user-mtu N       the interface MTU, 576..9000 (1500)\n"
		"  --user-mac MAC     its Ethernet address (02:00:00 and the IPv4 address, or 02:00:00:00:00:01)\n"
		"  --user-supply N    empty buffers to hold for frames, 16..4096 (256)\n"
		"  --nf-socket PATH   sluiced's NF socket ($SLUICE_NF_SOCKET or DIR/nf.sock)\n");
}

static void bad(const char *opt, const char *v, const char *why)
{
	fprintf(stderr, "sluice-stackd: %s: '%s' %s\n", opt, v, why);
	exit(2);
}

static void parse_addr(struct ustack_cfg *u, const char *v)
{
	char ip[64];
	const char *slash = strchr(v, '/');
	size_t l = slash ? (size_t)(slash - v) : strlen(v);
	if (l >= sizeof(ip))
		bad("--user-addr", v, "is not ADDRESS/PREFIX");
	memcpy(ip, v, l);
	ip[l] = 0;
	if (u->naddrs >= USTACK_ADDRS_MAX)
		bad("--user-addr", v, "is one address too many (one IPv4, five IPv6)");
	int fam = strchr(ip, ':') ? AF_INET6 : AF_INET;
	if (inet_pton(fam, ip, u->addrs[u->naddrs].addr) != 1)
		bad("--user-addr", v, fam == AF_INET ? "is not an IPv4 address/prefix" : "is not an IPv6 address/prefix");
	char *end;
	long p = slash ? strtol(slash + 1, &end, 10) : (fam == AF_INET ? 32 : 64);
	if ((slash && (*end || !slash[1])) || p < 1 || p > (fam == AF_INET ? 32 : 128))
		bad("--user-addr", v, "has a prefix length out of range");
	for (unsigned i = 0; fam == AF_INET && i < u->naddrs; i++)
		if (u->addrs[i].family == AF_INET)
			bad("--user-addr", v, "is a second IPv4 address (lwIP's interface has one)");
	u->addrs[u->naddrs].family = fam;
	u->addrs[u->naddrs].prefix = (int)p;
	u->naddrs++;
}

static long parse_num(const char *opt, const char *s, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi) {
		fprintf(stderr, "sluice-stackd: %s: '%s' is not a number in %ld..%ld\n", opt, s, lo, hi);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	struct stackd_cfg cfg = { .socket_dir = getenv("SLUICE_SOCKET_DIR"), .ring_bytes = 256 * 1024, .slots = 1024 };
	static struct ustack_cfg user = { .service = "stack", .mtu = 1500, .supply = 256 };
	bool mac_set = false;
	char nf_sock[108] = "";
	if (!cfg.socket_dir || !*cfg.socket_dir)
		cfg.socket_dir = "/run/sluice";
	static const struct option opts[] = {
		{ "socket-dir", required_argument, NULL, 'd' },
		{ "ring-kb", required_argument, NULL, 'r' },
		{ "slots", required_argument, NULL, 's' },
		{ "poll-us", required_argument, NULL, 'p' },
		{ "no-direct", no_argument, NULL, 'D' },
		{ "user-addr", required_argument, NULL, 'A' },
		{ "user-service", required_argument, NULL, 'S' },
		{ "user-gateway", required_argument, NULL, 'G' },
		{ "user-mtu", required_argument, NULL, 'M' },
		{ "user-mac", required_argument, NULL, 'E' },
		{ "user-supply", required_argument, NULL, 'U' },
		{ "nf-socket", required_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			cfg.socket_dir = optarg;
			break;
		case 'r': {
			long kb = parse_num("--ring-kb", optarg, 4, 16384);
			if (kb & (kb - 1)) {
				fprintf(stderr, "sluice-stackd: --ring-kb: %ld is not a power of two\n", kb);
				return 2;
			}
			cfg.ring_bytes = (uint32_t)kb * 1024;
			break;
		}
		case 's':
			cfg.slots = (uint32_t)parse_num("--slots", optarg, 1, 65536);
			break;
		case 'p':
			cfg.poll_us = (uint32_t)parse_num("--poll-us", optarg, 0, 10000);
			break;
		case 'D':
			cfg.no_direct = true;
			break;
		case 'A':
			parse_addr(&user, optarg);
			break;
		case 'S':
			if (!*optarg || strlen(optarg) >= 28)
				bad("--user-service", optarg, "is not a service name of 1-27 characters");
			user.service = optarg;
			break;
		case 'G':
			if (inet_pton(AF_INET, optarg, user.gw4) != 1)
				bad("--user-gateway", optarg, "is not an IPv4 address");
			break;
		case 'M':
			user.mtu = (uint32_t)parse_num("--user-mtu", optarg, 576, 9000);
			break;
		case 'E': {
			unsigned m[6];
			char tail;
			if (sscanf(optarg, "%x:%x:%x:%x:%x:%x%c", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5], &tail) != 6)
				bad("--user-mac", optarg, "is not a MAC address (aa:bb:cc:dd:ee:ff)");
			for (int i = 0; i < 6; i++) {
				if (m[i] > 255)
					bad("--user-mac", optarg, "is not a MAC address (aa:bb:cc:dd:ee:ff)");
				user.mac[i] = (uint8_t)m[i];
			}
			if (user.mac[0] & 1)
				bad("--user-mac", optarg, "is a multicast address");
			mac_set = true;
			break;
		}
		case 'U':
			user.supply = (uint32_t)parse_num("--user-supply", optarg, 16, 4096);
			break;
		case 'N':
			if (!*optarg || strlen(optarg) >= sizeof(nf_sock))
				bad("--nf-socket", optarg, "is not a socket path of 1-107 bytes");
			snprintf(nf_sock, sizeof(nf_sock), "%s", optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "sluice-stackd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (user.naddrs) {
		if (!mac_set) { /* locally administered, from the IPv4 address if there is one */
			uint8_t mac[6] = { 0x02, 0x00, 0x00, 0x00, 0x00, 0x01 };
			for (unsigned i = 0; i < user.naddrs; i++)
				if (user.addrs[i].family == AF_INET)
					memcpy(mac + 2, user.addrs[i].addr, 4);
			memcpy(user.mac, mac, 6);
		}
		if (!nf_sock[0]) {
			const char *e = getenv("SLUICE_NF_SOCKET");
			if (e && *e)
				snprintf(nf_sock, sizeof(nf_sock), "%s", e);
			else
				snprintf(nf_sock, sizeof(nf_sock), "%s/nf.sock", cfg.socket_dir);
		}
		user.nf_socket = nf_sock;
		cfg.user = &user;
	}
	mkdir(cfg.socket_dir, 0755);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (engine_init(&cfg) < 0) {
		engine_fini();
		return 1;
	}
	fprintf(stderr, "sluice-stackd: ready on %s/%s (rings %u KiB, %u sockets per program%s%s)\n", cfg.socket_dir,
		SL_SK_SOCKET_NAME, cfg.ring_bytes / 1024, cfg.slots, cfg.user ? "; user stack attached as " : "",
		cfg.user ? user.service : "");
	int rc = engine_run(&stop);
	engine_fini();
	fprintf(stderr, "sluice-stackd: stopped\n");
	return rc ? 1 : 0;
}
