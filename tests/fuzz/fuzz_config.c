/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libFuzzer target: sluiced's config loader (src/manager/config.c, config_load), any bytes as the JSON
 * file the CLI writes. config.c uses DPDK's headers (sluiced.h) but no DPDK function, so it builds
 * here without EAL. The file is a memfd read through /proc/self/fd. A refusal must say why (the
 * error names the field) and leave nothing allocated; an accepted config is freed with config_free
 * (LeakSanitizer checks both).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sluiced.h"

static int fd = -1;
static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (fd < 0) {
		fd = memfd_create("config", 0);
		if (fd < 0)
			abort();
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	struct config c;
	char err[512];
	err[0] = '\0';
	if (config_load(path, &c, err, sizeof(err)) == 0) {
		(void)config_service_index(&c, "fwd");
		config_free(&c);
	} else if (err[0] == '\0') {
		fprintf(stderr, "fuzz-config: config_load refused the file without saying why\n");
		abort();
	}
	return 0;
}
