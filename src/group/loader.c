/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Plugin loading (nf_plugin.h "Versioning"): dlopen with RTLD_NOW, so a plugin that needs a symbol
 * this host does not export fails here with the linker's message, not at its first packet; then the
 * one exported description is checked -- ABI version, size, name, handler -- before anything of
 * the plugin is called. Library NFs have no constructors, so nothing of theirs runs before that.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

struct loaded {
	char name[SL_NAME_MAX];
	void *handle;
	const struct sl_nf_plugin *p;
	struct loaded *next;
};
static struct loaded *loaded;

static int plugin_name_ok(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n < SL_NAME_MAX && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

static const struct sl_nf_plugin *open_checked(const char *path, const char *want, void **handle, char *err,
					       size_t errlen)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "cannot load %s: %s", path, e ? e : "unknown error");
		return NULL;
	}
	const struct sl_nf_plugin *p = dlsym(h, SL_NF_PLUGIN_SYMBOL);
	const char *why = sl_nf_plugin_refusal(p);
	if (why == NULL && want != NULL && strcmp(p->name, want) != 0)
		why = "its name differs from its file's";
	if (why != NULL) {
		if (p != NULL && p->abi != SL_NF_PLUGIN_ABI)
			snprintf(err, errlen, "refusing %s: %s (plugin %u, host %u)", path, why, p->abi, SL_NF_PLUGIN_ABI);
		else
			snprintf(err, errlen, "refusing %s: %s", path, why);
		dlclose(h);
		return NULL;
	}
	*handle = h;
	return p;
}

static const struct sl_nf_plugin *remember(const char *name, void *h, const struct sl_nf_plugin *p, char *err,
					   size_t errlen)
{
	struct loaded *l = calloc(1, sizeof(*l));
	if (l == NULL) {
		snprintf(err, errlen, "out of memory");
		dlclose(h);
		return NULL;
	}
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->handle = h;
	l->p = p;
	l->next = loaded;
	loaded = l;
	return p;
}

const struct sl_nf_plugin *group_plugin_load(const char *dir, const char *name, char *err, size_t errlen)
{
	char path[4096];
	void *h;
	if (!plugin_name_ok(name)) {
		snprintf(err, errlen, "'%s' is not an NF name (1-31 of [a-z0-9_-])", name);
		return NULL;
	}
	for (struct loaded *l = loaded; l != NULL; l = l->next)
		if (strcmp(l->name, name) == 0)
			return l->p;
	if ((size_t)snprintf(path, sizeof(path), "%s/sluice-nf-%s.so", dir, name) >= sizeof(path)) {
		snprintf(err, errlen, "plugin directory path too long");
		return NULL;
	}
	const struct sl_nf_plugin *p = open_checked(path, name, &h, err, errlen);
	return p != NULL ? remember(name, h, p, err, errlen) : NULL;
}

const struct sl_nf_plugin *group_plugin_load_path(const char *path, char *err, size_t errlen)
{
	void *h;
	const struct sl_nf_plugin *p = open_checked(path, NULL, &h, err, errlen);
	if (p == NULL)
		return NULL;
	for (struct loaded *l = loaded; l != NULL; l = l->next)
		if (l->p == p) {
			dlclose(h); /* the same file again: dlopen counted it twice */
			return p;
		}
	return remember(p->name, h, p, err, errlen);
}

void group_plugins_unload(void)
{
	while (loaded != NULL) {
		struct loaded *l = loaded;
		loaded = l->next;
		dlclose(l->handle);
		free(l);
	}
}
