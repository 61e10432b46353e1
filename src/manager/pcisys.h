/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Why a PCI device named by a port is not usable by DPDK, read from sysfs (DPDK-free; unit-tested
 * against a fake tree). docs/ports.md "PCI NICs".
 */
#ifndef SLUICE_PCISYS_H
#define SLUICE_PCISYS_H

#include <stddef.h>

/* The sysfs root: $SLUICE_SYSFS_ROOT (tests only: a fake tree), else "/sys". */
const char *pcisys_root(void);

/* Look at /sys/bus/pci/devices/BDF under `root`: 0 if it looks usable (bound to vfio-pci with an
 * IOMMU group or vfio's no-IOMMU mode, or to uio_pci_generic / igb_uio), else -1 with the reason
 * and how to fix it in msg: no such device, bound to no driver or another one, no IOMMU group. */
int pcisys_diagnose(const char *root, const char *bdf, char *msg, size_t len);

#endif
