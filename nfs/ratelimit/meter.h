/* SPDX-License-Identifier: BSD-3-Clause
 *
 * Exact RFC 2697 (srTCM) and RFC 2698 (trTCM) meters on an integer clock (the TSC), for
 * sluice-nf-ratelimit. DPDK-free; tested against a literal event-by-event transcription of the RFCs
 * in tests/unit/test_ratelimit.c.
 *
 * The RFCs increment a token count by one byte "CIR times per second". With the rate in bit/s and a
 * clock of hz ticks per second, byte k (k = 1, 2, ...) arrives at the first tick t with
 * (t - t0) * rate >= k * 8 * hz. The meter keeps the remainder of (elapsed * rate) modulo 8 * hz
 * between updates ("carry"), so after any sequence of updates exactly floor((t - t0) * rate /
 * (8 * hz)) bytes have been offered: no rounding, no drift, whatever the update pattern. Offered
 * bytes a full bucket cannot take are lost (srTCM: they spill from C into E first, as in the RFC).
 *
 * Overflow: elapsed * rate is done in 64 bits while it fits (any gap shorter than ~1 s at 100 Gbit/s
 * and a 5 GHz TSC) and in 128 bits otherwise, so an idle meter of any age refills exactly.
 */
#ifndef SLUICE_NFS_RATELIMIT_METER_H
#define SLUICE_NFS_RATELIMIT_METER_H

#include <stdint.h>

enum rl_color { RL_GREEN = 0, RL_YELLOW = 1, RL_RED = 2 };
enum rl_kind { RL_SRTCM = 0, RL_TRTCM = 1 };

/* Parameters, shared by every meter of a class. */
struct rl_params {
	uint8_t kind;       /* RL_SRTCM / RL_TRTCM */
	uint64_t cir, pir;  /* bit/s; pir only for trTCM */
	uint64_t cbs;       /* bytes: committed burst (bucket C) */
	uint64_t xbs;       /* bytes: srTCM excess burst EBS (bucket E) / trTCM peak burst PBS (bucket P) */
	uint64_t den;       /* 8 * hz: a byte of token is worth den units of (cycles * bit/s) */
};

/* The state of one meter: 40 bytes. */
struct rl_meter {
	uint64_t tc;        /* bucket C, bytes */
	uint64_t tx;        /* bucket E (srTCM) or P (trTCM), bytes */
	uint64_t carry_c;   /* 0..den-1: credit toward the next byte of C (srTCM: of C then E) */
	uint64_t carry_p;   /* trTCM: the same toward the next byte of P */
	uint64_t last;      /* clock of the last update */
};

static inline void rl_params_init(struct rl_params *p, uint8_t kind, uint64_t cir, uint64_t pir,
				  uint64_t cbs, uint64_t xbs, uint64_t hz)
{
	p->kind = kind;
	p->cir = cir;
	p->pir = kind == RL_TRTCM ? pir : 0;
	p->cbs = cbs;
	p->xbs = xbs;
	p->den = 8 * hz;
}

/* A meter whose buckets are full at time `now` (both RFCs start full). */
static inline void rl_meter_init(const struct rl_params *p, struct rl_meter *m, uint64_t now)
{
	m->tc = p->cbs;
	m->tx = p->xbs;
	m->carry_c = m->carry_p = 0;
	m->last = now;
}

/* Whole bytes earned at `rate` over `e` cycles, updating *carry. Saturates at UINT64_MAX. */
static inline uint64_t rl_earn(uint64_t e, uint64_t rate, uint64_t den, uint64_t *carry)
{
	if (rate == 0 || e == 0)
		return 0;
	if (e <= (UINT64_MAX - den) / rate) {
		uint64_t acc = *carry + e * rate;
		*carry = acc % den;
		return acc / den;
	}
	/* a long idle gap: exact in 128 bits (rare; buckets end up full anyway) */
	unsigned __int128 acc = (unsigned __int128)*carry + (unsigned __int128)e * rate;
	*carry = (uint64_t)(acc % den);
	acc /= den;
	return acc > UINT64_MAX ? UINT64_MAX : (uint64_t)acc;
}

/* Add the tokens earned since the last update. */
static inline void rl_meter_refill(const struct rl_params *p, struct rl_meter *m, uint64_t now)
{
	uint64_t e = now > m->last ? now - m->last : 0; /* a clock never runs backwards */
	m->last = now;
	uint64_t n = rl_earn(e, p->cir, p->den, &m->carry_c);
	if (p->kind == RL_SRTCM) {
		/* RFC 2697 2.: each byte goes to C while Tc < CBS, else to E while Te < EBS */
		uint64_t room = p->cbs - m->tc;
		if (n <= room) {
			m->tc += n;
		} else {
			m->tc = p->cbs;
			n -= room;
			room = p->xbs - m->tx;
			m->tx += n < room ? n : room;
		}
	} else {
		/* RFC 2698 2.: C grows at CIR up to CBS, P at PIR up to PBS, independently */
		uint64_t room = p->cbs - m->tc;
		m->tc += n < room ? n : room;
		n = rl_earn(e, p->pir, p->den, &m->carry_p);
		room = p->xbs - m->tx;
		m->tx += n < room ? n : room;
	}
}

/* The colour of a packet of `len` bytes at time `now`, updating the buckets. `pre` is the packet's
 * colour on arrival for colour-aware mode; colour-blind mode is pre = RL_GREEN (both RFCs' aware
 * rules reduce to their blind rules for a green packet). */
static inline enum rl_color rl_meter_color(const struct rl_params *p, struct rl_meter *m, uint64_t now,
					   uint64_t len, enum rl_color pre)
{
	rl_meter_refill(p, m, now);
	if (p->kind == RL_SRTCM) {
		/* RFC 2697 3.: green if pre-green and Tc >= B; else yellow if not pre-red and Te >= B */
		if (pre == RL_GREEN && m->tc >= len) {
			m->tc -= len;
			return RL_GREEN;
		}
		if (pre != RL_RED && m->tx >= len) {
			m->tx -= len;
			return RL_YELLOW;
		}
		return RL_RED;
	}
	/* RFC 2698 3.: red if pre-red or Tp < B; else yellow if pre-yellow or Tc < B (Tp -= B);
	 * else green (Tp -= B, Tc -= B) */
	if (pre == RL_RED || m->tx < len)
		return RL_RED;
	m->tx -= len;
	if (pre == RL_YELLOW || m->tc < len)
		return RL_YELLOW;
	m->tc -= len;
	return RL_GREEN;
}

/* Cycles after which an idle meter is certainly full again: a meter idle this long equals a fresh
 * one (up to its sub-byte carry), so the flow table may forget it. */
static inline uint64_t rl_fill_cycles(const struct rl_params *p)
{
	unsigned __int128 den = p->den;
	unsigned __int128 c = p->kind == RL_SRTCM ? (p->cbs + p->xbs) * den / p->cir + 1
						  : p->cbs * den / p->cir + 1;
	if (p->kind == RL_TRTCM) {
		unsigned __int128 x = p->xbs * den / p->pir + 1;
		if (x > c)
			c = x;
	}
	return c > UINT64_MAX ? UINT64_MAX : (uint64_t)c;
}

#endif /* SLUICE_NFS_RATELIMIT_METER_H */
