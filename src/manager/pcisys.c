/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Why a PCI device is not usable by DPDK, from sysfs (pcisys.h). The CLI's config check says the
 * same (python/sluice/config.py pci_device_problem); keep the two in step.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "pcisys.h"

const char *pcisys_root(void)
{
	const char *r = getenv("SLUICE_SYSFS_ROOT");
	return r && *r ? r : "/sys";
}

/* The last path component of a symlink's target ("../../../bus/pci/drivers/e1000e" -> "e1000e"),
 * or "" when there is no link. */
static void link_base(const char *path, char *out, size_t len)
{
	char t[PATH_MAX];
	ssize_t n = readlink(path, t, sizeof(t) - 1);
	out[0] = 0;
	if (n <= 0)
		return;
	t[n] = 0;
	const char *b = strrchr(t, '/');
	b = b ? b + 1 : t;
	size_t k = strlen(b) < len ? strlen(b) : len - 1;
	memcpy(out, b, k);
	out[k] = 0;
}

static int noiommu_mode(const char *root)
{
	char path[PATH_MAX], v[8] = "";
	snprintf(path, sizeof(path), "%s/module/vfio/parameters/enable_unsafe_noiommu_mode", root);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	int on = fgets(v, sizeof(v), f) && (v[0] == 'Y' || v[0] == 'y' || v[0] == '1');
	fclose(f);
	return on;
}

#define BIND_HOWTO "modprobe vfio-pci; echo vfio-pci > %s/bus/pci/devices/%s/driver_override; " \
		   "echo %s > %s/bus/pci/drivers_probe (or: dpdk-devbind.py -b vfio-pci %s)"

int pcisys_diagnose(const char *root, const char *bdf, char *msg, size_t len)
{
	char dev[PATH_MAX], path[PATH_MAX + 32], drv[128], grp[64];
	struct stat sb;
	if (!root || !*root)
		root = "/sys";
	snprintf(dev, sizeof(dev), "%s/bus/pci/devices/%s", root, bdf);
	if (stat(dev, &sb) != 0) {
		snprintf(msg, len, "no PCI device %s on this machine (nothing at %s; `lspci -D` lists the devices)",
			 bdf, dev);
		return -1;
	}
	snprintf(path, sizeof(path), "%s/driver", dev);
	link_base(path, drv, sizeof(drv));
	snprintf(path, sizeof(path), "%s/iommu_group", dev);
	link_base(path, grp, sizeof(grp));
	int uio = !strcmp(drv, "uio_pci_generic") || !strcmp(drv, "igb_uio");
	if (!drv[0] || (strcmp(drv, "vfio-pci") && !uio)) {
		int n;
		if (drv[0])
			n = snprintf(msg, len, "PCI device %s is bound to %s, not vfio-pci (DPDK uses only devices bound to "
				     "vfio-pci or uio_pci_generic): unbind and bind it: echo %s > %s/driver/unbind; ",
				     bdf, drv, bdf, dev);
		else
			n = snprintf(msg, len, "PCI device %s is bound to no driver, not vfio-pci (DPDK uses only devices "
				     "bound to vfio-pci or uio_pci_generic): bind it: ", bdf);
		if (n > 0 && (size_t)n < len)
			snprintf(msg + n, len - (size_t)n, BIND_HOWTO, root, bdf, bdf, root, bdf);
		if (!grp[0] && !noiommu_mode(root)) {
			size_t m = strlen(msg);
			snprintf(msg + m, len - m, "; it has no IOMMU group either: enable the IOMMU (intel_iommu=on or "
				 "amd_iommu=on on the kernel command line) or vfio's no-IOMMU mode first");
		}
		return -1;
	}
	if (!uio && !grp[0] && !noiommu_mode(root)) {
		snprintf(msg, len, "PCI device %s is bound to vfio-pci but has no IOMMU group: enable the IOMMU "
			 "(intel_iommu=on or amd_iommu=on on the kernel command line) or vfio's no-IOMMU mode "
			 "(echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode, then bind the device again)",
			 bdf);
		return -1;
	}
	snprintf(msg, len, "PCI device %s is bound to %s%s%s", bdf, drv, grp[0] ? ", IOMMU group " : "", grp);
	return 0;
}
