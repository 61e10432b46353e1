/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libFuzzer target: the guest side's reading of the ivshmem devices (src/lib/guest.c,
 * sl__guest_open): the rings device's header and the region/pipes devices' tags, which the host
 * writes and the guest NF must not trust.
 *
 * guest.c walks /sys/bus/pci/devices and /sys/class/virtio-ports. This target runs in a private mount
 * namespace of its own (unshare, then / made private so nothing propagates to the host) with a tmpfs
 * over each of the two, filled per input with fake devices: vendor and device ids, a resource2 file of
 * the BAR's size holding a header at offset 0 or a tag in the last page, and a virtio-serial port
 * named "sluice" whose character device is /dev/null. Needs CAP_SYS_ADMIN (make test runs as root);
 * without it every input is a no-op and the target says so once.
 *
 * Input: [port flags], then up to 6 devices: [flags][BAR size: log2 pages] + 112 header bytes or 32
 * tag bytes (the magic forced by a flag bit, so both paths are reached). What must hold: a success
 * has the rings, region and port fds, a header of this ABI version with terminated names, and the
 * region device really carries the header's nonce and index; success or not, once sl__guest_close
 * ran no fd stays open and no BAR stays mapped.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "sl_internal.h"

#define PCI "/sys/bus/pci/devices"
#define VPORTS "/sys/class/virtio-ports"

static int usable = -1;

static int setup(void)
{
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		fprintf(stderr, "fuzz-guest: no private mount namespace here (needs CAP_SYS_ADMIN): nothing fuzzed\n");
		return 0;
	}
	mkdir("/sys/class/virtio-ports", 0755); /* absent on most hosts; sysfs may refuse: then no port */
	if (mount("fuzz-pci", PCI, "tmpfs", 0, "size=64m") != 0) {
		fprintf(stderr, "fuzz-guest: cannot mount a tmpfs on " PCI ": nothing fuzzed\n");
		return 0;
	}
	if (mount("fuzz-vports", VPORTS, "tmpfs", 0, "size=1m") != 0) {
		fprintf(stderr, "fuzz-guest: cannot mount a tmpfs on " VPORTS ": nothing fuzzed\n");
		return 0;
	}
	return 1;
}

static void rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[512];
	while (d && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (e->d_type == DT_DIR)
			rm_tree(p);
		else
			unlink(p);
	}
	if (d)
		closedir(d);
	if (strcmp(dir, PCI) != 0 && strcmp(dir, VPORTS) != 0)
		rmdir(dir);
}

static void put_file(const char *dir, const char *name, const char *text)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQUIRE(fd >= 0);
	REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
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

static int bars_mapped(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	REQUIRE(f != NULL);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "resource2") != NULL;
	fclose(f);
	return n;
}

struct dev {
	int has_hdr, has_tag;
	struct sl_guest_header h;
	struct sl_guest_tag t;
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (usable < 0)
		usable = setup();
	if (!usable)
		return 0;
	struct in in = { data, size };
	rm_tree(PCI);
	rm_tree(VPORTS);

	uint8_t pf = u8(&in);
	if (pf & 1) { /* the port: "null" -> /dev/null, named sluice (or not) */
		char d[128];
		snprintf(d, sizeof(d), VPORTS "/%s", pf & 2 ? "null" : "vport0p9");
		mkdir(d, 0755);
		put_file(d, "name", pf & 4 ? "sluice\n" : "other");
	}
	struct dev devs[6];
	unsigned nd = u8(&in) % 7;
	for (unsigned i = 0; i < nd; i++) {
		struct dev *v = &devs[i];
		memset(v, 0, sizeof(*v));
		uint8_t f = u8(&in);
		char d[128], id[16];
		snprintf(d, sizeof(d), PCI "/0000:00:%02x.0", i + 3);
		mkdir(d, 0755);
		snprintf(id, sizeof(id), "0x%04x\n", f & 1 ? 0x8086 : SL_IVSHMEM_VENDOR);
		put_file(d, "vendor", id);
		snprintf(id, sizeof(id), "0x%04x\n", f & 2 ? 0x1234 : SL_IVSHMEM_DEVICE);
		put_file(d, "device", id);
		if (f & 4)
			continue; /* no resource2 */
		uint64_t bar = (uint64_t)SL_GUEST_TAG_PAGE << (u8(&in) % 8); /* 4 KiB .. 512 KiB */
		char p[512];
		snprintf(p, sizeof(p), "%s/resource2", d);
		int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
		REQUIRE(fd >= 0 && ftruncate(fd, (off_t)bar) == 0);
		if (f & 8) { /* a header at 0 */
			uint8_t raw[sizeof(v->h)];
			for (size_t k = 0; k < sizeof(raw); k++)
				raw[k] = u8(&in);
			memcpy(&v->h, raw, sizeof(raw));
			if (f & 16)
				v->h.magic = SL_GUEST_MAGIC;
			if (f & 32)
				v->h.version = SL_ABI_VERSION;
			REQUIRE(pwrite(fd, &v->h, sizeof(v->h), 0) == sizeof(v->h));
			v->has_hdr = 1;
		} else { /* a tag in the last page */
			uint8_t raw[sizeof(v->t)];
			for (size_t k = 0; k < sizeof(raw); k++)
				raw[k] = u8(&in);
			memcpy(&v->t, raw, sizeof(raw));
			if (f & 16)
				v->t.magic = SL_GUEST_TAG_MAGIC;
			if (f & 32) /* the nonce and index of the header before it, if any */
				for (unsigned k = 0; k < i; k++)
					if (devs[k].has_hdr) {
						v->t.nonce = v->t.kind == SL_GUEST_TAG_PIPES ? devs[k].h.pipes_nonce
											     : devs[k].h.region_nonce;
						v->t.index = devs[k].h.region_index;
					}
			if (bar >= 2 * SL_GUEST_TAG_PAGE)
				REQUIRE(pwrite(fd, &v->t, sizeof(v->t), (off_t)(bar - SL_GUEST_TAG_PAGE)) == sizeof(v->t));
			v->has_tag = 1;
		}
		close(fd);
	}

	int before = count_fds();
	struct sl_guest_devs g;
	memset(&g, 0xff, sizeof(g));
	REQUIRE(sl__guest_present() == ((pf & 5) == 5)); /* a port named sluice, whatever its device */
	int rc = sl__guest_open(&g);
	if (getenv("FUZZ_GUEST_VERBOSE")) /* to check a seed opens the devices */
		fprintf(stderr, "fuzz-guest: sl__guest_open: %d (%s), pipes %s\n", rc, sl_strerror(rc),
			rc == SL_OK && g.pipes_fd >= 0 ? "yes" : "no");
	REQUIRE(rc >= 0 && rc < SL_ERR__COUNT);
	if (rc == SL_OK) {
		REQUIRE(g.port_fd >= 0 && g.rings_fd >= 0 && g.region_fd >= 0);
		REQUIRE(g.hdr.magic == SL_GUEST_MAGIC && g.hdr.version == SL_ABI_VERSION);
		REQUIRE(memchr(g.hdr.name, 0, SL_NAME_MAX) && memchr(g.hdr.service, 0, SL_NAME_MAX));
		REQUIRE(memchr(g.rings_bdf, 0, sizeof(g.rings_bdf)));
		struct stat st;
		REQUIRE(fstat(g.region_fd, &st) == 0 && st.st_size >= (off_t)(2 * SL_GUEST_TAG_PAGE));
		struct sl_guest_tag t;
		REQUIRE(pread(g.region_fd, &t, sizeof(t), st.st_size - SL_GUEST_TAG_PAGE) == sizeof(t));
		REQUIRE(t.magic == SL_GUEST_TAG_MAGIC && t.kind == SL_GUEST_TAG_REGION &&
			t.nonce == g.hdr.region_nonce && t.index == g.hdr.region_index);
		if (g.pipes_fd >= 0) {
			REQUIRE(fstat(g.pipes_fd, &st) == 0);
			REQUIRE(pread(g.pipes_fd, &t, sizeof(t), st.st_size - SL_GUEST_TAG_PAGE) == sizeof(t));
			REQUIRE(t.kind == SL_GUEST_TAG_PIPES && t.nonce == g.hdr.pipes_nonce && t.nonce != 0);
		}
		sl__guest_close(&g);
	} else {
		REQUIRE(g.port_fd == -1 && g.rings_fd == -1 && g.region_fd == -1 && g.pipes_fd == -1);
	}
	REQUIRE(count_fds() == before);
	REQUIRE(bars_mapped() == 0);
	return 0;
}
