/* SPDX-License-Identifier: BSD-3-Clause */
#include "lend.h"

enum sl_desc_verdict sl_lend_dest_check(const struct sl_dest_auth *a, const struct sl_desc *d, uint16_t in_port)
{
	if (a->any)
		return SL_DESC_OK;
	switch (d->action & SL_ACT_MASK) {
	case SL_ACT_TO_NF:
		return d->dest < a->nsvc && (a->svc[d->dest / 64] >> (d->dest % 64) & 1) ? SL_DESC_OK : SL_DESC_FORBIDDEN;
	case SL_ACT_OUT:
		return d->dest < 64 && sl_lend_ports_ok(a, 1ull << d->dest, in_port) ? SL_DESC_OK : SL_DESC_FORBIDDEN;
	default: /* NEXT, DROP; OUT_SET's set is checked where it is read */
		return SL_DESC_OK;
	}
}

const char *sl_desc_verdict_str(int v)
{
	static const char *const names[] = {
		[SL_DESC_OK] = "ok",
		[SL_DESC_BAD_REGION] = "unknown region",
		[SL_DESC_BAD_BUF] = "buffer id out of range",
		[SL_DESC_NOT_LENT] = "buffer not lent to this NF",
		[SL_DESC_BAD_RANGE] = "offset or length outside the buffer",
		[SL_DESC_BAD_ACTION] = "unknown action",
		[SL_DESC_BAD_DEST] = "destination out of range",
		[SL_DESC_BAD_OUT_SET] = "invalid port set",
		[SL_DESC_FORBIDDEN] = "destination not allowed for this service",
		[SL_DESC_RO_CHANGED] = "read-only NF changed the packet's bounds",
	};
	_Static_assert(sizeof(names) / sizeof(names[0]) == SL_DESC__COUNT, "every verdict has a name");
	if (v < 0 || v >= SL_DESC__COUNT)
		return "unknown verdict";
	return names[v];
}

const char *sl_desc_verdict_key(int v)
{
	static const char *const keys[] = {
		[SL_DESC_OK] = "ok",
		[SL_DESC_BAD_REGION] = "region",
		[SL_DESC_BAD_BUF] = "buf",
		[SL_DESC_NOT_LENT] = "not_lent",
		[SL_DESC_BAD_RANGE] = "range",
		[SL_DESC_BAD_ACTION] = "action",
		[SL_DESC_BAD_DEST] = "dest",
		[SL_DESC_BAD_OUT_SET] = "out_set",
		[SL_DESC_FORBIDDEN] = "forbidden_dest",
		[SL_DESC_RO_CHANGED] = "ro_changed",
	};
	_Static_assert(sizeof(keys) / sizeof(keys[0]) == SL_DESC__COUNT, "every verdict has a key");
	if (v < 0 || v >= SL_DESC__COUNT)
		return "unknown";
	return keys[v];
}
