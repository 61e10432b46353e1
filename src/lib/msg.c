/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Attach message validation and error texts (shared by sluiced and libsluice).
 */
#include <string.h>

#include "sluice/abi.h"
#include "sl_internal.h"

#define SL_BATCH_MAX      65536u
#define SL_TIMEOUT_US_MAX 10000000u /* 10 s */
#define SL_REGION_MAX     256u      /* sl_desc.region is 8 bits */

int sl__name_ok(const char *s, size_t max)
{
	size_t n = strnlen(s, max);
	if (n == 0 || n == max)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}

static int terminated(const char *s, size_t max)
{
	return memchr(s, '\0', max) != NULL;
}

static int check_fields(const struct sl_msg *m)
{
	switch (m->type) {
	case SL_MSG_HELLO:
		return terminated(m->u.hello.manager, sizeof(m->u.hello.manager));
	case SL_MSG_INIT: {
		const struct sl_msg_init *in = &m->u.init;
		if (!sl__name_ok(in->name, sizeof(in->name)) ||
		    !sl__name_ok(in->service, sizeof(in->service)))
			return 0;
		if (in->wakeup >= SL_WAKE__COUNT || in->batch < 1)
			return 0;
		if (in->wakeup != SL_WAKE_POLL &&
		    (in->batch > SL_BATCH_MAX || in->timeout_us > SL_TIMEOUT_US_MAX))
			return 0;
		return 1;
	}
	case SL_MSG_ADD_REGION: {
		const struct sl_msg_add_region *r = &m->u.add_region;
		return r->size > 0 && r->buf_size > 0 && r->headroom < r->buf_size &&
		       r->index < SL_REGION_MAX && (r->flags & ~SL_REGION_F__ALL) == 0 && r->pad == 0;
	}
	case SL_MSG_ADD_RING: {
		const struct sl_msg_add_ring *r = &m->u.add_ring;
		if (r->dir != SL_RING_RX && r->dir != SL_RING_TX)
			return 0;
		if (r->size < 2 || (r->size & (r->size - 1)) != 0)
			return 0;
		/* the ring's atomics and cache-line layout need an aligned header */
		if (r->offset % SL_CACHE_LINE != 0)
			return 0;
		uint64_t bytes = sl_ring_bytes(r->size);
		return r->offset <= r->map_size && bytes <= r->map_size - r->offset;
	}
	case SL_MSG_ADD_PIPE: {
		const struct sl_msg_add_pipe *pm = &m->u.add_pipe;
		if (pm->size < 2 || (pm->size & (pm->size - 1)) != 0 || pm->out_offset % SL_CACHE_LINE != 0)
			return 0;
		return pm->out_offset <= pm->map_size && sl_ring_bytes(pm->size) <= pm->map_size - pm->out_offset;
	}
	case SL_MSG_CONNECTED:
		return 1;
	case SL_MSG_DISCONNECT:
		return m->u.disconnect.code < SL_ERR__COUNT &&
		       terminated(m->u.disconnect.reason, sizeof(m->u.disconnect.reason));
	default:
		return 0;
	}
}

int sl_msg_check(const struct sl_msg *m, size_t len, int nfds, uint16_t expect)
{
	if (m == NULL || len < SL_MSG_SIZE)
		return SL_ERR_TRUNCATED;
	if (m->magic != SL_ABI_MAGIC)
		return SL_ERR_MAGIC;
	if (m->version != SL_ABI_VERSION)
		return SL_ERR_VERSION;
	if (m->type == 0 || m->type >= SL_MSG__COUNT)
		return SL_ERR_TYPE;
	/* DISCONNECT is acceptable in every protocol state */
	if (expect != 0 && m->type != expect && m->type != SL_MSG_DISCONNECT)
		return SL_ERR_ORDER;
	if (nfds != sl_msg_fd_count(m->type))
		return SL_ERR_FDS;
	if (!check_fields(m))
		return SL_ERR_FIELD;
	return SL_OK;
}

void sl_msg_init(struct sl_msg *m, uint16_t type)
{
	memset(m, 0, sizeof(*m));
	m->magic = SL_ABI_MAGIC;
	m->version = SL_ABI_VERSION;
	m->type = type;
}

static const char *const wakeup_names[SL_WAKE__COUNT] = {
	[SL_WAKE_POLL] = "poll", [SL_WAKE_BLOCK] = "block", [SL_WAKE_ADAPTIVE] = "adaptive",
};

const char *sl_wakeup_name(int wakeup)
{
	return wakeup >= 0 && wakeup < SL_WAKE__COUNT ? wakeup_names[wakeup] : "unknown";
}

int sl_wakeup_parse(const char *s, enum sl_wakeup *out)
{
	for (int w = 0; w < SL_WAKE__COUNT; w++)
		if (strcmp(s, wakeup_names[w]) == 0) {
			*out = (enum sl_wakeup)w;
			return 0;
		}
	return -1;
}

const char *sl_strerror(int err)
{
	static const char *const text[SL_ERR__COUNT] = {
		[SL_OK] = "success",
		[SL_ERR_MAGIC] = "bad magic cookie",
		[SL_ERR_VERSION] = "ABI version mismatch",
		[SL_ERR_TRUNCATED] = "truncated message",
		[SL_ERR_TYPE] = "unknown message type",
		[SL_ERR_ORDER] = "message out of order",
		[SL_ERR_FIELD] = "field out of range",
		[SL_ERR_FDS] = "wrong number of file descriptors",
		[SL_ERR_PERM] = "permission denied",
		[SL_ERR_NOMEM] = "out of memory",
		[SL_ERR_LIMIT] = "too many NFs",
		[SL_ERR_SHUTDOWN] = "shutdown",
		[SL_ERR_IO] = "I/O error or peer vanished",
		[SL_ERR_NAME] = "NF name already attached",
		[SL_ERR_TIMEOUT] = "attach timed out",
		[SL_ERR_MAP] = "cannot map shared memory",
		[SL_ERR_RING] = "ring protocol violation",
		[SL_ERR_RESTART] = "manager restarting",
	};
	/* accept SDK return values (negated codes) as well */
	if (err < 0 && err > -SL_ERR__COUNT)
		err = -err;
	if (err < 0 || err >= SL_ERR__COUNT || text[err] == NULL)
		return "unknown error";
	return text[err];
}
