/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The NAT's mapping table: preallocated, no allocation after nat_init(), DPDK-free, unit-tested
 * (tests/unit/test_nat.c).
 *
 * A mapping joins two views of one connection:
 *
 *   in  = the connection as the inside sees it:   inside host:port  -> remote:port
 *   out = the connection as the outside sees it:  remote:port       -> public ip:port
 *
 * An outbound packet (from the inside port) is looked up by its own 5-tuple in the `in` hash, an
 * inbound packet (from the outside port) by its own 5-tuple in the `out` hash. SNAT (a connection
 * opened from the inside) and DNAT (a connection to a forwarded public port, opened from the
 * outside) produce the same kind of mapping. ICMP echo uses the identifier as the port: an echo
 * request's key is (src, id, dst, 0), an echo reply's (src, 0, dst, id).
 *
 * Each hash is an array of bucket heads and a chain of mapping indices (+1, 0 ends a chain). Free
 * mappings sit on a free list. Expiry is lazy (a lookup that finds an expired mapping removes it and
 * misses) plus nat_sweep(), which checks a few slots per call.
 */
#ifndef SLUICE_NFS_NAT_TABLE_H
#define SLUICE_NFS_NAT_TABLE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NAT_NONE UINT32_MAX

#define NAT_P_ICMP 1
#define NAT_P_TCP  6
#define NAT_P_UDP  17

struct nat_key {
	uint32_t sip, dip;     /* host order */
	uint16_t sport, dport; /* host order; ICMP echo: the identifier (see above) */
	uint8_t proto;
	uint8_t pad[3];
};

/* mapping flags */
#define NAT_F_USED     0x01
#define NAT_F_DNAT     0x02 /* opened from the outside (port forwarding) */
#define NAT_F_SEEN_IN  0x04 /* a packet came from the inside */
#define NAT_F_SEEN_OUT 0x08 /* a packet came from the outside */
#define NAT_F_FIN_IN   0x10 /* TCP FIN from the inside */
#define NAT_F_FIN_OUT  0x20 /* TCP FIN from the outside */
#define NAT_F_RST      0x40 /* TCP RST either way */

struct nat_map {
	struct nat_key in, out;
	uint64_t expires_ms;
	uint32_t next_in, next_out; /* chain links: index + 1, 0 = end; free list uses next_in */
	uint32_t next_src;          /* chain of the inside endpoint (in.sip, in.sport, proto) */
	uint8_t flags;
	uint8_t pad[3];
};

struct nat_timeouts {
	uint64_t tcp_est_ms, tcp_trans_ms, udp_ms, icmp_ms;
};

struct nat_table {
	struct nat_map *m;
	uint32_t *b_in, *b_out; /* bucket heads: index + 1, 0 = empty */
	uint32_t *b_src;        /* by inside endpoint: a new connection reuses its public port */
	uint32_t cap, mask;
	uint32_t free_head;     /* index + 1 */
	uint32_t count;
	uint32_t sweep_pos;
	uint32_t seed;
	uint64_t expired;       /* mappings removed because they timed out */
	struct nat_timeouts to;
};

static inline uint32_t nat_hash(const struct nat_table *t, const struct nat_key *k)
{
	uint64_t a = ((uint64_t)k->sip << 32 | k->dip) ^ ((uint64_t)t->seed << 7);
	uint64_t b = ((uint64_t)k->sport << 24 | (uint64_t)k->dport << 8 | k->proto) + t->seed;
	uint64_t h = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xc2b2ae3d27d4eb4full;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 32;
	return (uint32_t)h;
}

/* The hash of a mapping's inside endpoint (source address, port, protocol). */
static inline uint32_t nat_hash_src(const struct nat_table *t, const struct nat_key *in)
{
	struct nat_key k = { .sip = in->sip, .sport = in->sport, .proto = in->proto };
	return nat_hash(t, &k);
}

static inline int nat_key_eq(const struct nat_key *a, const struct nat_key *b)
{
	return a->sip == b->sip && a->dip == b->dip && a->sport == b->sport && a->dport == b->dport &&
	       a->proto == b->proto;
}

static inline struct nat_key nat_key_make(uint8_t proto, uint32_t sip, uint16_t sport, uint32_t dip,
					  uint16_t dport)
{
	struct nat_key k;
	memset(&k, 0, sizeof(k));
	k.proto = proto;
	k.sip = sip;
	k.dip = dip;
	k.sport = sport;
	k.dport = dport;
	return k;
}

/* The key of the same connection seen from the other end. */
static inline struct nat_key nat_key_rev(const struct nat_key *k)
{
	return nat_key_make(k->proto, k->dip, k->dport, k->sip, k->sport);
}

/* Capacity cap mappings (1..2^26). Returns 0 or -1 (no memory). */
static inline int nat_init(struct nat_table *t, uint32_t cap, uint32_t seed)
{
	memset(t, 0, sizeof(*t));
	if (cap == 0 || cap > (1u << 26))
		return -1;
	uint32_t nb = 16;
	while (nb < 2 * cap)
		nb <<= 1;
	t->m = calloc(cap, sizeof(*t->m));
	t->b_in = calloc(nb, sizeof(uint32_t));
	t->b_out = calloc(nb, sizeof(uint32_t));
	t->b_src = calloc(nb, sizeof(uint32_t));
	if (t->m == NULL || t->b_in == NULL || t->b_out == NULL || t->b_src == NULL) {
		free(t->m);
		free(t->b_in);
		free(t->b_out);
		free(t->b_src);
		memset(t, 0, sizeof(*t));
		return -1;
	}
	t->cap = cap;
	t->mask = nb - 1;
	t->seed = seed;
	for (uint32_t i = 0; i < cap; i++)
		t->m[i].next_in = i + 2 <= cap ? i + 2 : 0;
	t->free_head = 1;
	t->to.tcp_est_ms = 7440000;
	t->to.tcp_trans_ms = 240000;
	t->to.udp_ms = 120000;
	t->to.icmp_ms = 30000;
	return 0;
}

static inline void nat_free(struct nat_table *t)
{
	free(t->m);
	free(t->b_in);
	free(t->b_out);
	free(t->b_src);
	memset(t, 0, sizeof(*t));
}

/* The idle timeout of mapping m in its current state. */
static inline uint64_t nat_timeout(const struct nat_table *t, const struct nat_map *m)
{
	switch (m->in.proto) {
	case NAT_P_TCP:
		if ((m->flags & NAT_F_RST) || (m->flags & (NAT_F_FIN_IN | NAT_F_FIN_OUT)) ==
							(NAT_F_FIN_IN | NAT_F_FIN_OUT) ||
		    (m->flags & (NAT_F_SEEN_IN | NAT_F_SEEN_OUT)) != (NAT_F_SEEN_IN | NAT_F_SEEN_OUT))
			return t->to.tcp_trans_ms;
		return t->to.tcp_est_ms;
	case NAT_P_UDP:
		return t->to.udp_ms;
	default:
		return t->to.icmp_ms;
	}
}

/* the chain link of view v (0 in, 1 out, 2 src) */
static inline uint32_t *nat_link(struct nat_map *m, int v)
{
	return v == 0 ? &m->next_in : v == 1 ? &m->next_out : &m->next_src;
}

static inline void nat_unlink(uint32_t *heads, struct nat_map *ms, uint32_t bucket, uint32_t idx, int v)
{
	uint32_t *pp = &heads[bucket];
	while (*pp != 0) {
		if (*pp - 1 == idx) {
			*pp = *nat_link(&ms[idx], v);
			return;
		}
		pp = nat_link(&ms[*pp - 1], v);
	}
}

static inline void nat_remove(struct nat_table *t, uint32_t idx)
{
	struct nat_map *m = &t->m[idx];
	if (!(m->flags & NAT_F_USED))
		return;
	nat_unlink(t->b_in, t->m, nat_hash(t, &m->in) & t->mask, idx, 0);
	nat_unlink(t->b_out, t->m, nat_hash(t, &m->out) & t->mask, idx, 1);
	nat_unlink(t->b_src, t->m, nat_hash_src(t, &m->in) & t->mask, idx, 2);
	memset(m, 0, sizeof(*m));
	m->next_in = t->free_head;
	t->free_head = idx + 1;
	t->count--;
}

/* Look a key up in the inside (out = 0) or outside (out = 1) view. An expired mapping found on the
 * way is removed (counted in t->expired) and not returned. Returns the index or NAT_NONE. */
static inline uint32_t nat_lookup(struct nat_table *t, const struct nat_key *k, int out, uint64_t now_ms)
{
	uint32_t h = nat_hash(t, k) & t->mask;
	uint32_t i = out ? t->b_out[h] : t->b_in[h];
	while (i != 0) {
		struct nat_map *m = &t->m[i - 1];
		if (nat_key_eq(out ? &m->out : &m->in, k)) {
			if (m->expires_ms <= now_ms) {
				nat_remove(t, i - 1);
				t->expired++;
				return NAT_NONE;
			}
			return i - 1;
		}
		i = out ? m->next_out : m->next_in;
	}
	return NAT_NONE;
}

/* Enter a mapping. Returns its index, or NAT_NONE when the table is full. The caller checked that
 * neither key is in use. */
static inline uint32_t nat_insert(struct nat_table *t, const struct nat_key *in, const struct nat_key *out,
				  uint8_t flags, uint64_t now_ms)
{
	if (t->free_head == 0)
		return NAT_NONE;
	uint32_t idx = t->free_head - 1;
	struct nat_map *m = &t->m[idx];
	t->free_head = m->next_in;
	memset(m, 0, sizeof(*m));
	m->in = *in;
	m->out = *out;
	m->flags = (uint8_t)(flags | NAT_F_USED);
	uint32_t hi = nat_hash(t, in) & t->mask, ho = nat_hash(t, out) & t->mask;
	m->next_in = t->b_in[hi];
	t->b_in[hi] = idx + 1;
	m->next_out = t->b_out[ho];
	t->b_out[ho] = idx + 1;
	uint32_t hs = nat_hash_src(t, in) & t->mask;
	m->next_src = t->b_src[hs];
	t->b_src[hs] = idx + 1;
	m->expires_ms = now_ms + nat_timeout(t, m);
	t->count++;
	return idx;
}

/* A packet of mapping idx passed (from the outside if from_out); tcp_flags: the TCP flags byte
 * (0 for UDP/ICMP). Updates the state and the expiry. */
static inline void nat_touch(struct nat_table *t, uint32_t idx, int from_out, uint8_t tcp_flags, uint64_t now_ms)
{
	struct nat_map *m = &t->m[idx];
	m->flags |= from_out ? NAT_F_SEEN_OUT : NAT_F_SEEN_IN;
	if (tcp_flags & 0x04) /* RST */
		m->flags |= NAT_F_RST;
	if (tcp_flags & 0x01) /* FIN */
		m->flags |= from_out ? NAT_F_FIN_OUT : NAT_F_FIN_IN;
	if ((tcp_flags & 0x02) && !(tcp_flags & 0x10)) /* a new SYN reuses a closed mapping */
		m->flags &= (uint8_t)~(NAT_F_RST | NAT_F_FIN_IN | NAT_F_FIN_OUT);
	m->expires_ms = now_ms + nat_timeout(t, m);
}

/* Find a public port for a new outbound connection `in` (inside view) on public address pub, in
 * the order Linux's NAT tries them:
 *   1. the public port of a live mapping of the same inside endpoint (address, port, protocol) on
 *      pub: one endpoint keeps one public port towards every remote (endpoint-independent mapping,
 *      RFC 4787 REQ-1), as long as that remote endpoint does not already use it;
 *   2. the original source port (or ICMP identifier), if keep_any or it lies in lo..hi;
 *   3. max_tries ports of lo..hi in a row, from a start hashed from the connection.
 * A port is free when the outside view (remote -> pub:port) is. Fills *out and returns 0, or
 * returns -1 (port exhaustion for this remote endpoint). */
static inline int nat_alloc_port(struct nat_table *t, const struct nat_key *in, uint32_t pub, uint16_t lo,
				 uint16_t hi, int keep_any, uint32_t max_tries, uint64_t now_ms, struct nat_key *out)
{
	uint32_t i = t->b_src[nat_hash_src(t, in) & t->mask];
	while (i != 0) {
		const struct nat_map *m = &t->m[i - 1];
		i = m->next_src;
		if (m->in.sip != in->sip || m->in.sport != in->sport || m->in.proto != in->proto ||
		    m->out.dip != pub || (m->flags & NAT_F_DNAT) || m->expires_ms <= now_ms)
			continue;
		*out = nat_key_make(in->proto, in->dip, in->dport, pub, m->out.dport);
		if (nat_lookup(t, out, 1, now_ms) == NAT_NONE)
			return 0;
		break;
	}
	if (keep_any && (in->sport < lo || in->sport > hi)) {
		*out = nat_key_make(in->proto, in->dip, in->dport, pub, in->sport);
		if (nat_lookup(t, out, 1, now_ms) == NAT_NONE)
			return 0;
	}
	uint32_t n = (uint32_t)hi - lo + 1;
	if (in->sport >= lo && in->sport <= hi) {
		*out = nat_key_make(in->proto, in->dip, in->dport, pub, in->sport);
		if (nat_lookup(t, out, 1, now_ms) == NAT_NONE)
			return 0;
	}
	/* then from a point that depends on the whole connection (hashed with the table's seed):
	 * connections that all want the same port spread over the range instead of probing the
	 * same ever longer run of taken ports */
	uint32_t first = lo + nat_hash(t, in) % n;
	uint32_t tries = n < max_tries ? n : max_tries;
	for (uint32_t k = 0; k < tries; k++) {
		uint32_t p = first + k;
		if (p > hi)
			p -= n;
		*out = nat_key_make(in->proto, in->dip, in->dport, pub, (uint16_t)p);
		if (nat_lookup(t, out, 1, now_ms) == NAT_NONE)
			return 0;
	}
	return -1;
}

/* Check up to n slots for expired mappings (round robin); returns how many were removed (also
 * added to t->expired). */
static inline uint32_t nat_sweep(struct nat_table *t, uint32_t n, uint64_t now_ms)
{
	uint32_t removed = 0;
	for (uint32_t k = 0; k < n && k < t->cap; k++) {
		uint32_t i = t->sweep_pos++;
		if (t->sweep_pos >= t->cap)
			t->sweep_pos = 0;
		struct nat_map *m = &t->m[i];
		if ((m->flags & NAT_F_USED) && m->expires_ms <= now_ms) {
			nat_remove(t, i);
			removed++;
		}
	}
	t->expired += removed;
	return removed;
}

#endif /* SLUICE_NFS_NAT_TABLE_H */
