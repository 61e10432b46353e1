/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libsluice in a KVM guest (docs/guests.md): the attach protocol runs over the virtio-serial port
 * named "sluice", and the memory a process NF would receive as file descriptors is the BAR2 of
 * ivshmem PCI devices, mapped through sysfs (include/sluice/guest.h says how they are told apart).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "sluice/guest.h"
#include "sl_internal.h"

#define PCI_DIR   "/sys/bus/pci/devices"
#define VPORT_DIR "/sys/class/virtio-ports"

static int read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return 0;
}

/* The character device of the virtio-serial port named SL_GUEST_PORT_NAME ("/dev/vport0p1"), in
 * `dev`; 0, or -1 when there is none. */
static int find_port(char *dev, size_t size)
{
	DIR *d = opendir(VPORT_DIR);
	if (d == NULL)
		return -1;
	int rc = -1;
	struct dirent *e;
	while (rc < 0 && (e = readdir(d)) != NULL) {
		char path[512], name[64];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), VPORT_DIR "/%s/name", e->d_name);
		if (read_small(path, name, sizeof(name)) == 0 && strcmp(name, SL_GUEST_PORT_NAME) == 0) {
			snprintf(dev, size, "/dev/%s", e->d_name);
			rc = 0;
		}
	}
	closedir(d);
	return rc;
}

int sl__guest_present(void)
{
	char dev[300];
	return find_port(dev, sizeof(dev)) == 0;
}

/* Copy `len` bytes at `off` of an ivshmem BAR (open fd of its sysfs resource2) into `out`. */
static int bar_peek(int fd, uint64_t bar, uint64_t off, void *out, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t base = off & ~(uint64_t)(pg - 1);
	if (off + len > bar)
		return -1;
	size_t span = (size_t)(off - base) + len;
	void *p = mmap(NULL, span, PROT_READ, MAP_SHARED, fd, (off_t)base);
	if (p == MAP_FAILED)
		return -1;
	memcpy(out, (uint8_t *)p + (off - base), len);
	munmap(p, span);
	return 0;
}

void sl__guest_close(struct sl_guest_devs *g)
{
	int *fds[] = { &g->port_fd, &g->rings_fd, &g->region_fd, &g->pipes_fd };
	for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

int sl__guest_open(struct sl_guest_devs *g)
{
	g->port_fd = g->rings_fd = g->region_fd = g->pipes_fd = -1;
	char dev[300];
	if (find_port(dev, sizeof(dev)) < 0) {
		fprintf(stderr, "sluice-nf: guest: no virtio-serial port named '%s' (" VPORT_DIR ")\n",
			SL_GUEST_PORT_NAME);
		return SL_ERR_IO;
	}
	/* every ivshmem device: the rings one first (its header names the others' nonces) */
	struct cand {
		int fd;
		uint64_t size;
		struct sl_guest_tag tag;
	} cand[16];
	unsigned nc = 0;
	DIR *d = opendir(PCI_DIR);
	struct dirent *e;
	while (d != NULL && (e = readdir(d)) != NULL) {
		char path[512], v[32], dv[32];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), PCI_DIR "/%s/vendor", e->d_name);
		if (read_small(path, v, sizeof(v)) < 0 || strtoul(v, NULL, 16) != SL_IVSHMEM_VENDOR)
			continue;
		snprintf(path, sizeof(path), PCI_DIR "/%s/device", e->d_name);
		if (read_small(path, dv, sizeof(dv)) < 0 || strtoul(dv, NULL, 16) != SL_IVSHMEM_DEVICE)
			continue;
		snprintf(path, sizeof(path), PCI_DIR "/%s/resource2", e->d_name);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || st.st_size < (off_t)(2 * SL_GUEST_TAG_PAGE)) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		uint64_t size = (uint64_t)st.st_size;
		struct sl_guest_header h;
		if (g->rings_fd < 0 && bar_peek(fd, size, 0, &h, sizeof(h)) == 0 && h.magic == SL_GUEST_MAGIC) {
			g->rings_fd = fd;
			g->hdr = h;
			g->hdr.name[SL_NAME_MAX - 1] = g->hdr.service[SL_NAME_MAX - 1] = '\0';
			continue;
		}
		if (nc < sizeof(cand) / sizeof(cand[0]) &&
		    bar_peek(fd, size, size - SL_GUEST_TAG_PAGE, &cand[nc].tag, sizeof(cand[nc].tag)) == 0 &&
		    cand[nc].tag.magic == SL_GUEST_TAG_MAGIC) {
			cand[nc].fd = fd;
			cand[nc].size = size;
			nc++;
			continue;
		}
		close(fd);
	}
	if (d != NULL)
		closedir(d);
	int err = SL_OK;
	if (g->rings_fd < 0) {
		fprintf(stderr, "sluice-nf: guest: no ivshmem device (%04x:%04x) with a Sluice header in its BAR2\n",
			SL_IVSHMEM_VENDOR, SL_IVSHMEM_DEVICE);
		err = SL_ERR_MAP;
	} else if (g->hdr.version != SL_ABI_VERSION) {
		fprintf(stderr, "sluice-nf: guest: header of ABI version %u, this SDK speaks %u\n", g->hdr.version,
			SL_ABI_VERSION);
		err = SL_ERR_VERSION;
	}
	for (unsigned i = 0; i < nc; i++) {
		int *slot = NULL;
		if (err == SL_OK && cand[i].tag.nonce == g->hdr.region_nonce &&
		    cand[i].tag.kind == SL_GUEST_TAG_REGION && cand[i].tag.index == g->hdr.region_index)
			slot = &g->region_fd;
		else if (err == SL_OK && g->hdr.pipes_nonce != 0 && cand[i].tag.nonce == g->hdr.pipes_nonce &&
			 cand[i].tag.kind == SL_GUEST_TAG_PIPES)
			slot = &g->pipes_fd;
		if (slot != NULL && *slot < 0)
			*slot = cand[i].fd;
		else
			close(cand[i].fd);
	}
	if (err == SL_OK && g->region_fd < 0) {
		fprintf(stderr, "sluice-nf: guest: no ivshmem device carries the region the header names\n");
		err = SL_ERR_MAP;
	}
	if (err == SL_OK && (g->port_fd = open(dev, O_RDWR | O_CLOEXEC)) < 0) {
		fprintf(stderr, "sluice-nf: guest: %s: %s\n", dev, strerror(errno));
		err = SL_ERR_IO;
	}
	if (err != SL_OK)
		sl__guest_close(g);
	return err;
}
