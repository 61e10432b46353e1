/* SPDX-License-Identifier: BSD-3-Clause */
#include "nfinfo.h"

#include <string.h>

void nfinfo_init(struct sl_nf_info *info, const char (*port_names)[SL_NAME_MAX], uint32_t nports)
{
	if (nports > SL_INFO_PORTS_MAX)
		nports = SL_INFO_PORTS_MAX;
	for (uint32_t i = 0; i < nports; i++) {
		memcpy(info->port_name[i], port_names[i], SL_NAME_MAX);
		info->port_name[i][SL_NAME_MAX - 1] = '\0';
	}
	info->port_count = nports;
	info->counters_max = SL_COUNTERS_MAX;
	info->counters_used = 0;
	info->pipe_in = (struct sl_pipe_in){ .offset = SL_PIPE_NONE };
	__atomic_store_n(&info->magic, SL_ABI_MAGIC, __ATOMIC_RELEASE);
}

void nfinfo_set_port(struct sl_nf_info *info, uint32_t id, const char *name, uint32_t nports)
{
	if (id >= SL_INFO_PORTS_MAX)
		return;
	if (nports > SL_INFO_PORTS_MAX)
		nports = SL_INFO_PORTS_MAX;
	if (nports < info->port_count)
		__atomic_store_n(&info->port_count, nports, __ATOMIC_RELEASE);
	char n[SL_NAME_MAX] = { 0 };
	if (name)
		memcpy(n, name, strnlen(name, SL_NAME_MAX - 1));
	memcpy(info->port_name[id], n, SL_NAME_MAX);
	if (nports >= info->port_count)
		__atomic_store_n(&info->port_count, nports, __ATOMIC_RELEASE);
}

static int name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
	       c == ':' || c == '-';
}

uint32_t nfinfo_counters(const struct sl_nf_info *info, struct sl_counter *out, uint32_t max)
{
	/* The NF writes this page concurrently: read each field once. */
	uint32_t used = __atomic_load_n(&info->counters_used, __ATOMIC_ACQUIRE);
	if (used > SL_COUNTERS_MAX)
		used = SL_COUNTERS_MAX;
	uint32_t n = 0;
	for (uint32_t i = 0; i < used && n < max; i++) {
		char raw[SL_COUNTER_NAME_MAX];
		memcpy(raw, info->counter[i].name, sizeof(raw));
		uint32_t k = 0;
		for (uint32_t j = 0; j < sizeof(raw) && raw[j] != '\0'; j++)
			if (name_char(raw[j]) && k < SL_COUNTER_NAME_MAX - 1)
				out[n].name[k++] = raw[j];
		if (k == 0)
			continue;
		memset(out[n].name + k, 0, SL_COUNTER_NAME_MAX - k);
		out[n].value = __atomic_load_n(&info->counter[i].value, __ATOMIC_RELAXED);
		n++;
	}
	return n;
}
