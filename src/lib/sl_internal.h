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

#endif /* SLUICE_INTERNAL_H */
