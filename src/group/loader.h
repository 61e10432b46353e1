/* SPDX-License-Identifier: BSD-3-Clause
 * sluice-group's plugin loader: finds sluice-nf-<name>.so, checks its description before any of
 * its code is called, and keeps each plugin loaded once however many members use it. */
#ifndef SLUICE_GROUP_LOADER_H
#define SLUICE_GROUP_LOADER_H

#include <stddef.h>

#include "sluice/nf_plugin.h"

/* The plugin NF `name` from `dir` (dir/sluice-nf-<name>.so). Returns it, or NULL with the reason
 * in err (the path and what is wrong with it: missing, not loadable, no symbol, another ABI). */
const struct sl_nf_plugin *group_plugin_load(const char *dir, const char *name, char *err, size_t errlen);

/* The same for a plugin file given by path (tests, out-of-tree plugins). */
const struct sl_nf_plugin *group_plugin_load_path(const char *path, char *err, size_t errlen);

/* Unload every plugin (after every member's finish). */
void group_plugins_unload(void);

#endif
