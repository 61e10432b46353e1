/* SPDX-License-Identifier: BSD-3-Clause
 *
 * 64-byte TCP ping-pong over loopback for bench/sockets.py: round-trip times of an unmodified
 * program, run plain or under `sluice run`.
 *
 *   sluice-bench-pingpong server PORT
 *   sluice-bench-pingpong client PORT ROUNDS [SIZE]   -> one JSON line: p50/p90/p99 (us), rounds
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int full(int fd, char *buf, size_t n, int rd)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = rd ? recv(fd, buf + done, n - done, 0) : send(fd, buf + done, n - done, MSG_NOSIGNAL);
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s server PORT | client PORT ROUNDS [SIZE]\n", argv[0]);
		return 2;
	}
	int port = atoi(argv[2]), one = 1;
	size_t size = argc > 4 ? (size_t)atoi(argv[4]) : 64;
	char buf[65536];
	if (size < 1 || size > sizeof(buf))
		return 2;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (!strcmp(argv[1], "server")) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 8) < 0) {
			perror("pingpong server");
			return 1;
		}
		printf("listening\n");
		fflush(stdout);
		for (;;) {
			int c = accept(fd, NULL, NULL);
			if (c < 0)
				return 1;
			setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			uint32_t sz;
			if (full(c, (char *)&sz, sizeof(sz), 1) == 0 && sz <= sizeof(buf))
				while (full(c, buf, sz, 1) == 0 && full(c, buf, sz, 0) == 0)
					;
			close(c);
		}
	}
	int rounds = atoi(argv[3]);
	if (rounds < 1 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("pingpong client");
		return 1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	uint32_t sz = (uint32_t)size;
	full(fd, (char *)&sz, sizeof(sz), 0);
	double *rtt = malloc(sizeof(double) * (size_t)rounds);
	memset(buf, 'p', size);
	for (int i = -rounds / 10; i < rounds; i++) { /* a tenth more as warm-up */
		double t0 = now_us();
		if (full(fd, buf, size, 0) || full(fd, buf, size, 1)) {
			fprintf(stderr, "pingpong client: connection lost\n");
			return 1;
		}
		if (i >= 0)
			rtt[i] = now_us() - t0;
	}
	qsort(rtt, (size_t)rounds, sizeof(double), cmp);
	printf("{\"rounds\": %d, \"size\": %zu, \"p50_us\": %.2f, \"p90_us\": %.2f, \"p99_us\": %.2f}\n", rounds, size,
	       rtt[rounds / 2], rtt[rounds * 9 / 10], rtt[rounds * 99 / 100]);
	return 0;
}
