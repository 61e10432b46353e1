/* SPDX-License-Identifier: BSD-3-Clause
 *
 * A small pcapng writer for sluice-nf-monitor (no DPDK, no libpcap).
 *
 * Blocks are built in host byte order (the Section Header Block's byte-order magic tells readers
 * which) in one buffer preallocated by png_init, and written to the file descriptor in large chunks
 * by png_flush: when the next block does not fit, and whenever the owner asks (SIGUSR1, a timer,
 * exit). The buffer only ever holds whole blocks, so after each flush the file is a complete,
 * readable pcapng file (tshark can read it while the capture goes on).
 *
 *   struct png_writer w;
 *   png_init(&w, fd, 4 << 20);
 *   png_shb(&w, "sluice-nf-monitor");
 *   png_idb(&w, PNG_LINKTYPE_ETHERNET, 65535, "port0");       // interface 0 (if_tsresol = 9: ns)
 *   png_epb(&w, 0, ts_ns, data, caplen, len);                  // one packet
 *   png_flush(&w);
 *   png_free(&w);
 *
 * Format: https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng-01.html
 */
#ifndef SLUICE_NFS_MONITOR_PCAPNG_H
#define SLUICE_NFS_MONITOR_PCAPNG_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PNG_BT_SHB 0x0A0D0D0Au
#define PNG_BT_IDB 0x00000001u
#define PNG_BT_EPB 0x00000006u
#define PNG_BYTE_ORDER_MAGIC 0x1A2B3C4Du
#define PNG_LINKTYPE_ETHERNET 1

#define PNG_OPT_ENDOFOPT 0
#define PNG_OPT_COMMENT 1
#define PNG_SHB_USERAPPL 4
#define PNG_IF_NAME 2
#define PNG_IF_TSRESOL 9

#define PNG_EPB_OVERHEAD 32u    /* EPB without packet data and options */
#define PNG_BUF_MIN (256u << 10) /* holds the largest EPB (64 KiB of data) several times over */

struct png_writer {
	uint8_t *buf;
	size_t cap, used;   /* buffered bytes: whole blocks only */
	int fd;
	uint64_t written;   /* bytes in the file (flushed) */
	uint32_t n_if;      /* interfaces described so far (IDBs); EPB interface ids are below this */
	int err;            /* errno of the first write failure; 0 = fine. Nothing is written after. */
};

static inline uint32_t png_pad4(uint32_t n)
{
	return (n + 3u) & ~3u;
}

/* Allocate the buffer (cap is raised to PNG_BUF_MIN). 0 or -1. The fd is the owner's. */
static inline int png_init(struct png_writer *w, int fd, size_t cap)
{
	memset(w, 0, sizeof(*w));
	w->fd = fd;
	if (cap < PNG_BUF_MIN)
		cap = PNG_BUF_MIN;
	w->buf = malloc(cap);
	if (w->buf == NULL)
		return -1;
	w->cap = cap;
	return 0;
}

static inline void png_free(struct png_writer *w)
{
	free(w->buf);
	w->buf = NULL;
	w->cap = w->used = 0;
}

/* Bytes the file will have after the next flush. */
static inline uint64_t png_total(const struct png_writer *w)
{
	return w->written + w->used;
}

/* Write the buffer to the file. 0, or -1 with w->err set (the file is cut back to its last
 * complete block, best effort, and nothing is written from then on). */
static inline int png_flush(struct png_writer *w)
{
	size_t done = 0;
	if (w->err)
		return -1;
	while (done < w->used) {
		ssize_t n = write(w->fd, w->buf + done, w->used - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			w->err = n < 0 ? errno : EIO;
			if (ftruncate(w->fd, (off_t)w->written) != 0) {
				/* nothing more we can do: the reader sees a cut last block */
			}
			w->used = 0;
			return -1;
		}
		done += (size_t)n;
	}
	w->written += w->used;
	w->used = 0;
	return 0;
}

/* Room for `need` more bytes in the buffer (flushing first if needed). Returns the write position
 * or NULL (write error, or need > cap). */
static inline uint8_t *png_room(struct png_writer *w, size_t need)
{
	if (w->err || need > w->cap)
		return NULL;
	if (w->cap - w->used < need && png_flush(w) < 0)
		return NULL;
	return w->buf + w->used;
}

static inline void png_put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static inline void png_put16(uint8_t *p, uint16_t v)
{
	memcpy(p, &v, 2);
}

/* One option (code, length, value padded to 4). Returns the bytes written. */
static inline uint32_t png_opt(uint8_t *p, uint16_t code, const void *val, uint16_t len)
{
	png_put16(p, code);
	png_put16(p + 2, len);
	memcpy(p + 4, val, len);
	memset(p + 4 + len, 0, png_pad4(len) - len);
	return 4 + png_pad4(len);
}

static inline uint32_t png_optlen(size_t len)
{
	return 4 + png_pad4((uint32_t)len);
}

/* Section Header Block (section length unknown: -1) with shb_userappl. 0 or -1. */
static inline int png_shb(struct png_writer *w, const char *appl)
{
	size_t al = strnlen(appl, 256);
	uint32_t len = 28 + png_optlen(al) + 4;
	uint8_t *p = png_room(w, len);
	if (p == NULL)
		return -1;
	png_put32(p, PNG_BT_SHB);
	png_put32(p + 4, len);
	png_put32(p + 8, PNG_BYTE_ORDER_MAGIC);
	png_put16(p + 12, 1); /* major */
	png_put16(p + 14, 0); /* minor */
	memset(p + 16, 0xff, 8);
	uint32_t o = 24;
	o += png_opt(p + o, PNG_SHB_USERAPPL, appl, (uint16_t)al);
	png_put32(p + o, PNG_OPT_ENDOFOPT); /* code 0, length 0 */
	o += 4;
	png_put32(p + o, len);
	w->used += len;
	return 0;
}

/* Interface Description Block: interface w->n_if (returned), if_name `name` (may be NULL),
 * if_tsresol 9 (nanoseconds). Returns the interface id or -1. */
static inline int png_idb(struct png_writer *w, uint16_t linktype, uint32_t snaplen, const char *name)
{
	size_t nl = name ? strnlen(name, 256) : 0;
	uint32_t len = 16 + (nl ? png_optlen(nl) : 0) + png_optlen(1) + 4 + 4;
	uint8_t *p = png_room(w, len);
	if (p == NULL)
		return -1;
	uint8_t tsresol = 9;
	png_put32(p, PNG_BT_IDB);
	png_put32(p + 4, len);
	png_put16(p + 8, linktype);
	png_put16(p + 10, 0);
	png_put32(p + 12, snaplen);
	uint32_t o = 16;
	if (nl)
		o += png_opt(p + o, PNG_IF_NAME, name, (uint16_t)nl);
	o += png_opt(p + o, PNG_IF_TSRESOL, &tsresol, 1);
	png_put32(p + o, PNG_OPT_ENDOFOPT);
	o += 4;
	png_put32(p + o, len);
	w->used += len;
	return (int)w->n_if++;
}

/* Enhanced Packet Block: `caplen` bytes of a `origlen`-byte packet seen on interface `ifid` at
 * `ts_ns` (ns since the epoch, matching if_tsresol 9). 0 or -1 (write error; caller counts it). */
static inline int png_epb(struct png_writer *w, uint32_t ifid, uint64_t ts_ns, const uint8_t *data,
			  uint32_t caplen, uint32_t origlen)
{
	uint32_t dl = png_pad4(caplen);
	uint32_t len = PNG_EPB_OVERHEAD + dl;
	uint8_t *p = png_room(w, len);
	if (p == NULL)
		return -1;
	png_put32(p, PNG_BT_EPB);
	png_put32(p + 4, len);
	png_put32(p + 8, ifid);
	png_put32(p + 12, (uint32_t)(ts_ns >> 32));
	png_put32(p + 16, (uint32_t)ts_ns);
	png_put32(p + 20, caplen);
	png_put32(p + 24, origlen);
	memcpy(p + 28, data, caplen);
	memset(p + 28 + caplen, 0, dl - caplen);
	png_put32(p + 28 + dl, len);
	w->used += len;
	return 0;
}

#endif /* SLUICE_NFS_MONITOR_PCAPNG_H */
