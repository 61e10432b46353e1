/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The NF info page (include/sluice/abi.h, struct sl_nf_info): the manager fills in the port names
 * and reads back the NF's named counters. DPDK-free, unit-tested (tests/unit/test_nfinfo.c).
 */
#ifndef SLUICED_NFINFO_H
#define SLUICED_NFINFO_H

#include <stdint.h>

#include "sluice/abi.h"

/* Bytes of the page in the ring memfd (a whole number of 4 KiB pages). */
#define NFINFO_BYTES ((sizeof(struct sl_nf_info) + 4095) & ~(size_t)4095)

/* Fill a zeroed page: magic, counters_max, and `nports` port names (at most SL_INFO_PORTS_MAX). */
void nfinfo_init(struct sl_nf_info *info, const char (*port_names)[SL_NAME_MAX], uint32_t nports);

/* Name (or, name NULL, unname) port `id` in a page nfinfo_init filled, and make `nports` the page's
 * port_count: a port added or deleted while the NF is attached. The SDK copies the names once, when
 * CONNECTED arrives (take_info), so an NF attached earlier keeps the table it saw; the page is kept
 * true for what reads it later. Ordered for a reader copying at the same moment: a growing count is
 * stored after the name, a shrinking one before the name goes. */
void nfinfo_set_port(struct sl_nf_info *info, uint32_t id, const char *name, uint32_t nports);

/* Copy the NF's counters out of `info`, which the NF may have filled with anything: at most
 * min(counters_used, SL_COUNTERS_MAX, max) entries; every name NUL-terminated and made of
 * [A-Za-z0-9_.:-] (other bytes dropped); entries whose name ends up empty are skipped. Returns the
 * number written to `out`. */
uint32_t nfinfo_counters(const struct sl_nf_info *info, struct sl_counter *out, uint32_t max);

#endif
