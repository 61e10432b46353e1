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
#include <limits.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <linux/vfio.h>

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
	int *fds[] = { &g->port_fd, &g->rings_fd, &g->region_fd, &g->pipes_fd, &g->vfio_dev, &g->vfio_group,
		       &g->vfio_container };
	for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	int e = errno;
	close(fd);
	errno = e;
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Doorbells (docs/guests.md "Wakeups"): the rings device is an ivshmem-doorbell whose MSI-X vector 0
 * is sluiced's kick. A process in a guest without an IOMMU can take an MSI-X interrupt only through
 * VFIO's no-IOMMU mode: bind the device to vfio-pci, route vector 0 to an eventfd (which then works
 * like a process NF's RX eventfd), and ring sluiced by writing the doorbell register in BAR0. VFIO needs
 * an IOMMU group: the guest has QEMU's intel-iommu (Debian's kernel has no VFIO no-IOMMU mode). Returns
 * the eventfd, or -1 (why on stderr): the NF then naps instead of sleeping. */
int sl__guest_doorbell(struct sl_guest_devs *g)
{
	char path[512], link[PATH_MAX], why[160] = "";
	if (!(g->hdr.flags & SL_GUEST_F_DOORBELL) || g->rings_bdf[0] == '\0')
		return -1;
	snprintf(path, sizeof(path), PCI_DIR "/%s/driver", g->rings_bdf);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	link[n > 0 ? n : 0] = '\0';
	if (n <= 0 || strcmp(strrchr(link, '/') ? strrchr(link, '/') + 1 : link, "vfio-pci") != 0) {
		if (n > 0) { /* bound to another driver (uio_pci_generic?): let go */
			snprintf(path, sizeof(path), PCI_DIR "/%s/driver/unbind", g->rings_bdf);
			(void)write_file(path, g->rings_bdf);
		}
		snprintf(path, sizeof(path), PCI_DIR "/%s/driver_override", g->rings_bdf);
		if (write_file(path, "vfio-pci") < 0 || write_file(PCI_DIR "/../drivers_probe", g->rings_bdf) < 0) {
			snprintf(why, sizeof(why), "binding %s to vfio-pci: %s", g->rings_bdf, strerror(errno));
			goto fail;
		}
	}
	snprintf(path, sizeof(path), PCI_DIR "/%s/iommu_group", g->rings_bdf);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0) {
		snprintf(why, sizeof(why), "%s has no iommu_group (the guest has no IOMMU: QEMU -device intel-iommu, "
			 "intel_iommu=on)", g->rings_bdf);
		goto fail;
	}
	link[n] = '\0';
	const char *grp = strrchr(link, '/') ? strrchr(link, '/') + 1 : link;
	/* the guest's IOMMU (QEMU's intel-iommu) gives the device a group; a kernel with
	 * CONFIG_VFIO_NOIOMMU could do without one (noiommu-N) */
	unsigned long iommu = VFIO_TYPE1v2_IOMMU;
	snprintf(path, sizeof(path), "/dev/vfio/%.32s", grp);
	if (access(path, F_OK) != 0) {
		snprintf(path, sizeof(path), "/dev/vfio/noiommu-%.32s", grp);
		iommu = VFIO_NOIOMMU_IOMMU;
	}
	g->vfio_container = open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC);
	g->vfio_group = open(path, O_RDWR | O_CLOEXEC);
	if (g->vfio_container < 0 || g->vfio_group < 0) {
		snprintf(why, sizeof(why), "%.80s: %s", g->vfio_group < 0 ? path : "/dev/vfio/vfio", strerror(errno));
		goto fail;
	}
	struct vfio_group_status gs = { .argsz = sizeof(gs) };
	if (ioctl(g->vfio_group, VFIO_GROUP_GET_STATUS, &gs) < 0 || !(gs.flags & VFIO_GROUP_FLAGS_VIABLE) ||
	    ioctl(g->vfio_group, VFIO_GROUP_SET_CONTAINER, &g->vfio_container) < 0 ||
	    ioctl(g->vfio_container, VFIO_SET_IOMMU, iommu) < 0 ||
	    (g->vfio_dev = ioctl(g->vfio_group, VFIO_GROUP_GET_DEVICE_FD, g->rings_bdf)) < 0) {
		snprintf(why, sizeof(why), "VFIO set-up of %s: %s", g->rings_bdf, strerror(errno));
		goto fail;
	}
	struct vfio_region_info bar0 = { .argsz = sizeof(bar0), .index = VFIO_PCI_BAR0_REGION_INDEX };
	struct vfio_region_info cfg = { .argsz = sizeof(cfg), .index = VFIO_PCI_CONFIG_REGION_INDEX };
	if (ioctl(g->vfio_dev, VFIO_DEVICE_GET_REGION_INFO, &bar0) < 0 ||
	    ioctl(g->vfio_dev, VFIO_DEVICE_GET_REGION_INFO, &cfg) < 0) {
		snprintf(why, sizeof(why), "VFIO regions of %s: %s", g->rings_bdf, strerror(errno));
		goto fail;
	}
	g->bell_off = (uint64_t)bar0.offset + SL_IVSHMEM_REG_DOORBELL;
	/* MSI-X is a memory write by the device: bus mastering on */
	uint16_t cmd = 0;
	if (pread(g->vfio_dev, &cmd, sizeof(cmd), (off_t)cfg.offset + 4) != sizeof(cmd)) {
		snprintf(why, sizeof(why), "PCI command of %s: %s", g->rings_bdf, strerror(errno));
		goto fail;
	}
	cmd |= 0x4; /* PCI_COMMAND_MASTER */
	if (pwrite(g->vfio_dev, &cmd, sizeof(cmd), (off_t)cfg.offset + 4) != sizeof(cmd)) {
		snprintf(why, sizeof(why), "PCI command of %s: %s", g->rings_bdf, strerror(errno));
		goto fail;
	}
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	union {
		struct vfio_irq_set s;
		char buf[sizeof(struct vfio_irq_set) + sizeof(int)];
	} irq;
	memset(&irq, 0, sizeof(irq));
	irq.s.argsz = sizeof(irq);
	irq.s.flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
	irq.s.index = VFIO_PCI_MSIX_IRQ_INDEX;
	irq.s.start = 0;
	irq.s.count = 1;
	memcpy(irq.s.data, &efd, sizeof(efd));
	if (efd < 0 || ioctl(g->vfio_dev, VFIO_DEVICE_SET_IRQS, &irq) < 0) {
		snprintf(why, sizeof(why), "MSI-X of %s: %s", g->rings_bdf, strerror(errno));
		if (efd >= 0)
			close(efd);
		goto fail;
	}
	return efd;
fail:
	fprintf(stderr, "sluice-nf: guest: no doorbell (naps instead of sleeping): %s\n", why);
	int *fds[] = { &g->vfio_dev, &g->vfio_group, &g->vfio_container };
	for (unsigned i = 0; i < 3; i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
	return -1;
}

void sl__guest_ring(const struct sl_guest_devs *g)
{
	uint32_t v = 0; /* (peer 0: sluiced) << 16 | vector 0 */
	ssize_t n = pwrite(g->vfio_dev, &v, sizeof(v), (off_t)g->bell_off);
	(void)n;
}

int sl__guest_open(struct sl_guest_devs *g)
{
	g->port_fd = g->rings_fd = g->region_fd = g->pipes_fd = -1;
	g->vfio_dev = g->vfio_group = g->vfio_container = -1;
	g->rings_bdf[0] = '\0';
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
			snprintf(g->rings_bdf, sizeof(g->rings_bdf), "%.31s", e->d_name);
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
