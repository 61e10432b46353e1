/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Private helpers shared by libsluice's translation units (not installed).
 */
#ifndef SLUICE_INTERNAL_H
#define SLUICE_INTERNAL_H

#include <stddef.h>

/* 1 if s is a valid NF or service name: NUL-terminated within `max` bytes,
 * non-empty, only [A-Za-z0-9_.-]; else 0. */
__attribute__((visibility("hidden"))) int sl__name_ok(const char *s, size_t max);

/* The strict sandbox (sandbox.c, docs/abi.md "Sandbox"): install the seccomp filter on every thread
 * of the process, for good. `sock` is the attach socket, the only fd it may send and receive on.
 * Returns 0 or a negative errno. */
__attribute__((visibility("hidden"))) int sl__sandbox_strict(int sock);

/* Unregister this thread's restartable-sequences area, which glibc registers for every thread (a
 * real-time NF's turns, nf.c). Returns 1 if it is off now (or glibc never registered one), 0 if it
 * stays on (errno then says why). */
__attribute__((visibility("hidden"))) int sl__rseq_unregister(void);

/* The guest transport (guest.c, docs/guests.md): the virtio-serial port and the ivshmem devices. */
#include "sluice/guest.h"
struct sl_guest_devs {
	int port_fd;    /* the "sluice" virtio-serial port: the attach protocol, without fds */
	int rings_fd;   /* sysfs resource2 of the rings device (header at 0) */
	int region_fd;  /* ... of the device tagged with the header's region nonce */
	int pipes_fd;   /* ... of the pipes device, -1: none */
	struct sl_guest_header hdr; /* a private copy, read once */
	char rings_bdf[32];         /* PCI address of the rings device */
	int vfio_container, vfio_group, vfio_dev; /* doorbell (sl__guest_doorbell), -1: none */
	uint64_t bell_off;          /* the doorbell register's offset in vfio_dev */
};
/* 1 if this is a guest with a virtio-serial port named "sluice". */
__attribute__((visibility("hidden"))) int sl__guest_present(void);
/* Find and open the port and devices. Returns SL_OK or an enum sl_err (printed to stderr); on error
 * nothing stays open. */
__attribute__((visibility("hidden"))) int sl__guest_open(struct sl_guest_devs *g);
__attribute__((visibility("hidden"))) void sl__guest_close(struct sl_guest_devs *g);
/* Take the rings device's doorbell: returns the eventfd its interrupt (sluiced's kick) signals, or -1
 * (printed why) when it cannot (the NF naps then). */
__attribute__((visibility("hidden"))) int sl__guest_doorbell(struct sl_guest_devs *g);
/* Ring sluiced (its TX eventfd) through the doorbell register. */
__attribute__((visibility("hidden"))) void sl__guest_ring(const struct sl_guest_devs *g);

#endif /* SLUICE_INTERNAL_H */
