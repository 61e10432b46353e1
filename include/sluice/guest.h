/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Sluice guest transport (docs/guests.md): how an NF inside a KVM guest finds the memory sluiced
 * shares with it. No change to the descriptor ABI: a guest NF runs the attach protocol of abi.h over
 * a virtio-serial port, and where a process NF would get a file descriptor with ADD_REGION, ADD_RING
 * or ADD_PIPE it maps BAR2 of an ivshmem PCI device (1af4:1110) instead.
 *
 *   rings device   BAR2 = the NF's ring memory: this header at offset 0, then the RX ring, the TX
 *                  ring and the info page at the offsets ADD_RING and CONNECTED give (as for a
 *                  process: offsets, never pointers).
 *   region device  BAR2 = the domain's packet region: buffers from offset 0 (ADD_REGION's size), a
 *                  struct sl_guest_tag in the last 4 KiB page.
 *   pipes device   BAR2 = the domain's pipe area (only when sluiced.pipes is on), tag likewise.
 *
 * A BAR is a power of two bytes, so a region or pipe area is exported in a file rounded up to one,
 * with a page to spare for the tag. The guest tells the devices apart by their contents: the rings
 * device by the header's magic, the others by a tag whose nonce the header names. sluiced writes the
 * header and the tags once and never reads them back (the guest can write them: hostile input).
 */
#ifndef SLUICE_GUEST_H
#define SLUICE_GUEST_H

#include <stdint.h>

#include "sluice/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_GUEST_MAGIC     0x55474c53u /* "SLGU" little-endian: the rings device's header */
#define SL_GUEST_TAG_MAGIC 0x47544c53u /* "SLTG": the tag in a region or pipes device's last page */
#define SL_GUEST_TAG_PAGE  4096u       /* the tag is at (BAR size - SL_GUEST_TAG_PAGE) */
#define SL_GUEST_PORT_NAME "sluice"    /* the virtio-serial port the attach protocol runs on */
#define SL_IVSHMEM_VENDOR  0x1af4
#define SL_IVSHMEM_DEVICE  0x1110

enum sl_guest_tag_kind {
	SL_GUEST_TAG_REGION = 1,
	SL_GUEST_TAG_PIPES = 2,
};

struct sl_guest_header {
	uint32_t magic;          /* SL_GUEST_MAGIC */
	uint32_t version;        /* SL_ABI_VERSION */
	uint64_t bar_size;       /* bytes of this device's BAR2 */
	uint64_t region_nonce;   /* the tag of the region device of this guest's domain */
	uint64_t pipes_nonce;    /* the tag of the pipes device; 0: none */
	uint32_t region_index;   /* the region index its descriptors carry */
	uint32_t ring_slots;
	char name[SL_NAME_MAX];  /* the NF this guest runs (INIT must name it) */
	char service[SL_NAME_MAX];
	uint32_t flags;          /* SL_GUEST_F_* */
	uint32_t pad;
};
_Static_assert(sizeof(struct sl_guest_header) == 112, "guest header is 112 bytes");
/* The rings device is an ivshmem-doorbell whose server is sluiced: MSI-X vector 0 is sluiced's kick
 * (the RX eventfd of a process NF), and a write of (0 << 16 | 0) to its doorbell register (BAR0
 * offset 12) rings sluiced (the TX eventfd). Without it the guest naps (docs/guests.md "Wakeups"). */
#define SL_GUEST_F_DOORBELL 0x1u
#define SL_IVSHMEM_REG_DOORBELL 12 /* BAR0 register: (peer << 16) | vector */

struct sl_guest_tag {
	uint32_t magic;          /* SL_GUEST_TAG_MAGIC */
	uint32_t kind;           /* enum sl_guest_tag_kind */
	uint64_t nonce;          /* random, per region or pipe area */
	uint64_t data_size;      /* bytes of the region or pipe area itself (from offset 0) */
	uint32_t index;          /* region index */
	uint32_t pad;
};
_Static_assert(sizeof(struct sl_guest_tag) == 32, "guest tag is 32 bytes");

/* The smallest power of two that holds `bytes` and a tag page. */
static inline uint64_t sl_guest_bar_bytes(uint64_t bytes)
{
	uint64_t need = bytes + SL_GUEST_TAG_PAGE, p = 1;
	while (p < need)
		p <<= 1;
	return p;
}

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_GUEST_H */
