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
		"                    two ends of one owner without a rate limit move bytes themselves)\n");
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
	if (!cfg.socket_dir || !*cfg.socket_dir)
		cfg.socket_dir = "/run/sluice";
	static const struct option opts[] = {
		{ "socket-dir", required_argument, NULL, 'd' },
		{ "ring-kb", required_argument, NULL, 'r' },
		{ "slots", required_argument, NULL, 's' },
		{ "poll-us", required_argument, NULL, 'p' },
		{ "no-direct", no_argument, NULL, 'D' },
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
	mkdir(cfg.socket_dir, 0755);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (engine_init(&cfg) < 0) {
		engine_fini();
		return 1;
	}
	fprintf(stderr, "sluice-stackd: ready on %s/%s (rings %u KiB, %u sockets per program)\n", cfg.socket_dir,
		SL_SK_SOCKET_NAME, cfg.ring_bytes / 1024, cfg.slots);
	int rc = engine_run(&stop);
	engine_fini();
	fprintf(stderr, "sluice-stackd: stopped\n");
	return rc ? 1 : 0;
}
