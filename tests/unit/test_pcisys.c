/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Unit tests for pcisys_diagnose (src/manager/pcisys.c): why a pci: port's device is unusable, read
 * from a fake sysfs tree in a temporary directory (the CLI's pci_device_problem says the same).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "check.h"
#include "pcisys.h"

#define BDF "0000:7f:1f.7"

static char root[64];

static void run(const char *cmd)
{
	char c[512];
	snprintf(c, sizeof(c), "cd %s && %s", root, cmd);
	CHECK(system(c) == 0);
}

/* a fresh tree: the device, bound to `driver` (NULL: none), with an IOMMU group or not */
static void tree(const char *driver, int group, int noiommu)
{
	run("rm -rf bus kernel module && mkdir -p bus/pci/devices/" BDF " kernel/iommu_groups/3 module/vfio/parameters");
	char c[256];
	if (driver) {
		snprintf(c, sizeof(c), "mkdir -p bus/pci/drivers/%s && ln -s ../../../bus/pci/drivers/%s bus/pci/devices/" BDF
			 "/driver", driver, driver);
		run(c);
	}
	if (group)
		run("ln -s ../../../kernel/iommu_groups/3 bus/pci/devices/" BDF "/iommu_group");
	run(noiommu ? "echo Y > module/vfio/parameters/enable_unsafe_noiommu_mode"
		    : "echo N > module/vfio/parameters/enable_unsafe_noiommu_mode");
}

static int diag(char *msg)
{
	return pcisys_diagnose(root, BDF, msg, 1024);
}

int main(void)
{
	char msg[1024];
	snprintf(root, sizeof(root), "/tmp/sl-pcisys-XXXXXX");
	CHECK(mkdtemp(root) != NULL);

	CHECK_EQ(diag(msg), -1); /* nothing there */
	CHECK(strstr(msg, "no PCI device " BDF " on this machine") != NULL);

	tree("e1000e", 1, 0);
	CHECK_EQ(diag(msg), -1);
	CHECK(strstr(msg, "bound to e1000e, not vfio-pci") && strstr(msg, "driver/unbind") &&
	      strstr(msg, "driver_override") && !strstr(msg, "IOMMU"));

	tree(NULL, 0, 0);
	CHECK_EQ(diag(msg), -1);
	CHECK(strstr(msg, "bound to no driver") && strstr(msg, "no IOMMU group either"));

	tree("vfio-pci", 0, 0);
	CHECK_EQ(diag(msg), -1);
	CHECK(strstr(msg, "bound to vfio-pci but has no IOMMU group") && strstr(msg, "intel_iommu=on"));

	tree("vfio-pci", 0, 1); /* vfio's no-IOMMU mode */
	CHECK_EQ(diag(msg), 0);
	tree("vfio-pci", 1, 0);
	CHECK_EQ(diag(msg), 0);
	CHECK(strstr(msg, "IOMMU group 3") != NULL);
	tree("uio_pci_generic", 0, 0);
	CHECK_EQ(diag(msg), 0);

	setenv("SLUICE_SYSFS_ROOT", root, 1);
	CHECK(!strcmp(pcisys_root(), root));
	unsetenv("SLUICE_SYSFS_ROOT");
	CHECK(!strcmp(pcisys_root(), "/sys"));

	run("rm -rf bus kernel module");
	rmdir(root);
	printf("pcisys: ok\n");
	return 0;
}
