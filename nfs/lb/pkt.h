/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The load balancer's state and per-packet work (docs/nfs/lb.md), DPDK-free and unit-tested
 * (tests/unit/test_lb.c).
 *
 * Forwarding is IPVS's NAT mode: a client's packet to a VIP gets its destination address and port
 * rewritten to the backend's; the backend's reply gets its source rewritten back to the VIP. The
 * IPv4 header and TCP/UDP checksums are updated incrementally (csum.h). The connection table
 * (conn.h) gives affinity: a connection keeps its backend while the Maglev tables (maglev.h)
 * change under it, except when its backend is `down`.
 *
 * Backends live in slots that outlast reloads: a backend keeps its slot (and so its counters and
 * connections) as long as its name stays in the file; a backend removed from the file keeps its
 * slot until its last connection is gone. Connection entries carry the slot, and the addresses
 * they rewrite to are read from the entry's own keys, so a reload never touches the entries.
 */
#ifndef SLUICE_NFS_LB_PKT_H
#define SLUICE_NFS_LB_PKT_H

#include <stdint.h>
#include <string.h>

#include "common/csum.h"
#include "common/pktparse.h"
#include "conf.h"
#include "conn.h"
#include "maglev.h"

#define LB_BE_REMOVED 3 /* no longer in the file; kept while connections use it */

struct lb_slot {
	char name[LB_NAME_MAX];
	uint8_t used;   /* holds a backend (configured, or removed but still in use) */
	uint8_t state;  /* LB_BE_UP, _DISABLED, _DOWN, LB_BE_REMOVED */
	uint8_t fresh;  /* (re)assigned by the last lb_apply: its counters want binding */
	uint8_t family;
	uint8_t addr[16];
	uint16_t port;
	uint64_t *pkts, *conns;        /* packets both ways, new connections (own_* until bound) */
	uint64_t own_pkts, own_conns;
};

struct lb_svc {
	uint8_t family, proto;
	uint8_t vip[16];
	uint16_t port;
	unsigned n_up;    /* backends in its table */
	uint16_t *table;  /* Maglev table: slot ids, LB_MAGLEV_NONE when none is up */
};

struct lb_stats {
	uint64_t new_conns, forwarded, replies, passed, no_backend, table_full, conflicts, malformed,
		non_ip, fragments, rescheduled;
};

struct lb {
	struct lb_ct t;
	uint32_t m; /* Maglev table size (prime) */
	struct lb_svc svc[LB_MAX_SVC];
	unsigned n_svc;
	struct lb_slot slot[LB_SLOTS_MAX];
	unsigned n_slots; /* slots ever used: [0, n_slots) */
	struct lb_stats st;
};

enum lb_verdict { LB_PASS = 0, LB_FWD = 1, LB_DROP = 2 };

/* Set up lb (not moved afterwards: slots point into themselves) with a connection table of cap
 * entries and Maglev tables of m entries (prime). Returns 0 or -1. */
static inline int lb_init(struct lb *lb, uint32_t cap, uint32_t m, uint64_t seed)
{
	memset(lb, 0, sizeof(*lb));
	if (!lb_is_prime(m) || m < 3 || lb_ct_init(&lb->t, cap, seed) < 0)
		return -1;
	lb->m = m;
	for (unsigned i = 0; i < LB_SLOTS_MAX; i++) {
		lb->slot[i].pkts = &lb->slot[i].own_pkts;
		lb->slot[i].conns = &lb->slot[i].own_conns;
	}
	return 0;
}

static inline void lb_free(struct lb *lb)
{
	for (unsigned i = 0; i < lb->n_svc; i++)
		free(lb->svc[i].table);
	lb_ct_free(&lb->t);
	lb->n_svc = 0;
}

/* Make conf the running configuration: backends matched to slots by name, new Maglev tables. All
 * or nothing: returns 0, or -1 with the reason in err and lb unchanged. Allocates (reload time). */
static inline int lb_apply(struct lb *lb, const struct lb_conf *conf, char *err, size_t errlen)
{
	static uint16_t map[LB_MAX_BE];
	static uint8_t taken[LB_SLOTS_MAX];
	static struct lb_maglev_be mb[LB_MAX_BE];
	memset(taken, 0, sizeof(taken));
	for (unsigned i = 0; i < conf->n_be; i++) {
		map[i] = LB_MAGLEV_NONE;
		for (unsigned s = 0; s < lb->n_slots; s++)
			if (lb->slot[s].used && strcmp(lb->slot[s].name, conf->be[i].name) == 0) {
				map[i] = (uint16_t)s;
				taken[s] = 1;
				break;
			}
	}
	unsigned cur = 0;
	for (unsigned i = 0; i < conf->n_be; i++) {
		if (map[i] != LB_MAGLEV_NONE)
			continue;
		/* a free slot: never used, or not in the new file and without connections */
		while (cur < LB_SLOTS_MAX && (taken[cur] || (lb->slot[cur].used && lb->t.live[cur] != 0)))
			cur++;
		if (cur == LB_SLOTS_MAX)
			return conf_err(err, errlen, "backend %s: more than %d backends known at once (removed "
					   "ones count while they have connections)", conf->be[i].name, LB_SLOTS_MAX);
		map[i] = (uint16_t)cur;
		taken[cur] = 1;
	}
	struct lb_svc nsvc[LB_MAX_SVC];
	memset(nsvc, 0, sizeof(nsvc));
	for (unsigned v = 0; v < conf->n_svc; v++) {
		const struct lb_svc_conf *sc = &conf->svc[v];
		struct lb_svc *s = &nsvc[v];
		s->family = sc->family;
		s->proto = sc->proto;
		memcpy(s->vip, sc->vip, 16);
		s->port = sc->port;
		s->table = malloc(lb->m * sizeof(uint16_t));
		unsigned n = 0;
		for (unsigned i = sc->first_be; i < sc->first_be + sc->n_be; i++)
			if (conf->be[i].state == LB_BE_UP)
				mb[n++] = (struct lb_maglev_be){ .name = conf->be[i].name, .id = map[i],
								 .weight = conf->be[i].weight };
		s->n_up = n;
		if (s->table == NULL || lb_maglev_build(s->table, lb->m, mb, n) < 0) {
			for (unsigned k = 0; k <= v; k++)
				free(nsvc[k].table);
			return conf_err(err, errlen, "out of memory for the Maglev tables");
		}
	}
	/* commit */
	for (unsigned s = 0; s < lb->n_slots; s++) {
		struct lb_slot *sl = &lb->slot[s];
		if (sl->used && !taken[s]) {
			if (lb->t.live[s] == 0)
				sl->used = 0;
			else
				sl->state = LB_BE_REMOVED;
		}
		sl->fresh = 0;
	}
	for (unsigned v = 0; v < conf->n_svc; v++)
		for (unsigned i = conf->svc[v].first_be; i < conf->svc[v].first_be + conf->svc[v].n_be; i++) {
			const struct lb_be_conf *b = &conf->be[i];
			struct lb_slot *sl = &lb->slot[map[i]];
			if (!sl->used || strcmp(sl->name, b->name) != 0) {
				memset(sl->name, 0, sizeof(sl->name));
				memcpy(sl->name, b->name, strlen(b->name));
				sl->fresh = 1;
				sl->own_pkts = sl->own_conns = 0;
				sl->pkts = &sl->own_pkts;
				sl->conns = &sl->own_conns;
			}
			sl->used = 1;
			sl->state = b->state;
			sl->family = conf->svc[v].family;
			memcpy(sl->addr, b->addr, 16);
			sl->port = b->port;
			if (map[i] >= lb->n_slots)
				lb->n_slots = map[i] + 1u;
		}
	for (unsigned v = 0; v < lb->n_svc; v++)
		free(lb->svc[v].table);
	memcpy(lb->svc, nsvc, sizeof(nsvc));
	lb->n_svc = conf->n_svc;
	return 0;
}

static inline uint32_t lb_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Rewrite the source (dst = 0) or destination (dst = 1) address and port of an IP packet (ip: its
 * header, l4: a complete TCP (20+) or UDP (8) header) and update the checksums: the IPv4 header's,
 * and TCP's or UDP's (a UDP checksum of 0, "none", stays 0; a result of 0 is sent as 0xffff). */
static inline void lb_rewrite(uint8_t *ip, int family, uint8_t *l4, uint8_t proto, int dst, const uint8_t *addr,
			      uint16_t port)
{
	uint8_t *ckp = l4 + (proto == 6 ? 16 : 6);
	uint16_t ck = pp_be16(ckp);
	int has_ck = proto == 6 || ck != 0;
	if (family == 4) {
		uint8_t *a = ip + 12 + 4 * dst;
		uint32_t old = lb_be32(a), new_ = lb_be32(addr);
		memcpy(a, addr, 4);
		cs_put16(ip + 10, cs_update32(pp_be16(ip + 10), old, new_));
		ck = cs_update32(ck, old, new_);
	} else {
		uint8_t *a = ip + 8 + 16 * dst;
		uint8_t old[16];
		memcpy(old, a, 16);
		memcpy(a, addr, 16);
		ck = cs_update128(ck, old, addr);
	}
	uint16_t oldp = pp_be16(l4 + 2 * dst);
	cs_put16(l4 + 2 * dst, port);
	ck = cs_update16(ck, oldp, port);
	if (has_ck) {
		if (proto == 17 && ck == 0)
			ck = 0xffff;
		cs_put16(ckp, ck);
	}
}

/* The service of (family, proto, address, port), or NULL. */
static inline const struct lb_svc *lb_svc_find(const struct lb *lb, const struct lb_key *k)
{
	for (unsigned i = 0; i < lb->n_svc; i++) {
		const struct lb_svc *s = &lb->svc[i];
		if (s->port == k->dport && s->proto == k->proto && s->family == k->family &&
		    memcmp(s->vip, k->dst, 16) == 0)
			return s;
	}
	return NULL;
}

static inline int lb_is_vip_addr(const struct lb *lb, int family, const uint8_t *a)
{
	for (unsigned i = 0; i < lb->n_svc; i++)
		if (lb->svc[i].family == family && memcmp(lb->svc[i].vip, a, family == 4 ? 4 : 16) == 0)
			return 1;
	return 0;
}

/* Which backend slot a new connection with key k gets (LB_MAGLEV_NONE: none is up). The hash has a
 * fixed seed, so every LB instance with the same backends picks the same one. */
static inline uint16_t lb_pick(const struct lb *lb, const struct lb_svc *s, const struct lb_key *k)
{
	return s->table[lb_key_hash(k, 0) % lb->m];
}

/* Balance one frame of len bytes at p (now: monotonic ns). Returns LB_FWD (rewritten), LB_PASS (not
 * ours: unchanged) or LB_DROP; the reason is counted in lb->st. */
static inline int lb_packet(struct lb *lb, uint8_t *p, uint32_t len, uint64_t now)
{
	struct pp_info pi;
	pp_parse(p, len, &pi);
	if (pi.ethertype != PP_ETH_P_IPV4 && pi.ethertype != PP_ETH_P_IPV6) {
		lb->st.non_ip++;
		return LB_PASS;
	}
	if (pi.family == 0)
		goto malformed;
	uint32_t l3 = pi.l3_off, end;
	uint8_t *ip = p + l3;
	int family = pi.family, frag;
	uint8_t proto = pi.proto;
	if (family == 4) {
		uint32_t ihl = (uint32_t)(ip[0] & 0x0f) * 4, tot = pp_be16(ip + 2);
		if (tot < ihl || l3 + tot > len)
			goto malformed;
		end = l3 + tot;
		frag = (pp_be16(ip + 6) & 0x3fff) != 0; /* MF or an offset: ports are not in every piece */
	} else {
		end = l3 + 40 + pp_be16(ip + 4);
		if (end > len)
			goto malformed;
		frag = pi.frag;
	}
	if (frag) {
		if (lb_is_vip_addr(lb, family, ip + (family == 4 ? 16 : 24))) {
			lb->st.fragments++;
			return LB_DROP;
		}
		lb->st.passed++;
		return LB_PASS;
	}
	if (proto != 6 && proto != 17) {
		lb->st.passed++;
		return LB_PASS;
	}
	if (!pi.has_ports || pi.l4_off > end)
		goto malformed;
	uint8_t *l4 = p + pi.l4_off;
	uint32_t l4len = end - pi.l4_off;
	if (proto == 6 ? l4len < 20 || (l4[12] >> 4) < 5 || (uint32_t)(l4[12] >> 4) * 4 > l4len : l4len < 8)
		goto malformed;

	struct lb_key k;
	memset(&k, 0, sizeof(k));
	k.family = (uint8_t)family;
	k.proto = proto;
	memcpy(k.src, ip + (family == 4 ? 12 : 8), family == 4 ? 4 : 16);
	memcpy(k.dst, ip + (family == 4 ? 16 : 24), family == 4 ? 4 : 16);
	k.sport = pp_be16(l4);
	k.dport = pp_be16(l4 + 2);
	uint8_t tcpf = proto == 6 ? l4[13] : 0;
	uint64_t h = lb_key_hash(&k, lb->t.seed);
	struct lb_ct *t = &lb->t;

	uint32_t idx = lb_ct_find(t, &k, h, 0, now);
	if (idx != LB_NONE) { /* client -> VIP of a known connection */
		struct lb_conn *e = &t->c[idx];
		struct lb_slot *sl = &lb->slot[e->slot];
		if (sl->state == LB_BE_DOWN) {
			lb_ct_remove(t, idx);
			lb->st.rescheduled++;
		} else if ((tcpf & 0x12) == 0x02 && (e->flags & (LB_F_FIN | LB_F_RST))) {
			lb_ct_remove(t, idx); /* a new SYN on a closed connection's ports: schedule afresh */
		} else {
			lb_rewrite(ip, family, l4, proto, 1, e->rev.src, e->rev.sport);
			lb_ct_touch(t, idx, 0, tcpf, now);
			lb->st.forwarded++;
			(*sl->pkts)++;
			return LB_FWD;
		}
	} else if ((idx = lb_ct_find(t, &k, h, 1, now)) != LB_NONE) { /* backend -> client */
		struct lb_conn *e = &t->c[idx];
		lb_rewrite(ip, family, l4, proto, 0, e->fwd.dst, e->fwd.dport);
		lb_ct_touch(t, idx, 1, tcpf, now);
		lb->st.replies++;
		(*lb->slot[e->slot].pkts)++;
		return LB_FWD;
	}

	const struct lb_svc *s = lb_svc_find(lb, &k);
	if (s == NULL) {
		lb->st.passed++;
		return LB_PASS;
	}
	uint16_t sid = lb_pick(lb, s, &k);
	if (sid == LB_MAGLEV_NONE) {
		lb->st.no_backend++;
		return LB_DROP;
	}
	struct lb_slot *sl = &lb->slot[sid];
	struct lb_key rev;
	memset(&rev, 0, sizeof(rev));
	rev.family = k.family;
	rev.proto = k.proto;
	memcpy(rev.src, sl->addr, 16);
	rev.sport = sl->port;
	memcpy(rev.dst, k.src, 16);
	rev.dport = k.sport;
	if (lb_ct_find(t, &rev, lb_key_hash(&rev, t->seed), 1, now) != LB_NONE) {
		/* the same client endpoint already talks to this backend endpoint through another VIP:
		 * the replies could not be told apart */
		lb->st.conflicts++;
		return LB_DROP;
	}
	idx = lb_ct_insert(t, &k, &rev, sid, now);
	if (idx == LB_NONE) {
		lb->st.table_full++;
		return LB_DROP;
	}
	lb->st.new_conns++;
	(*sl->conns)++;
	lb_rewrite(ip, family, l4, proto, 1, sl->addr, sl->port);
	lb_ct_touch(t, idx, 0, tcpf, now);
	lb->st.forwarded++;
	(*sl->pkts)++;
	return LB_FWD;
malformed:
	lb->st.malformed++;
	return LB_DROP;
}

#endif /* SLUICE_NFS_LB_PKT_H */
