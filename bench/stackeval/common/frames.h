/* frames.h -- what the stackeval harness sees on its in-memory Ethernet link.
 * Counts frames per direction and kind (ARP, IPv6 neighbour discovery, TCP) and records the
 * options of the first SYN and SYN-ACK (MSS, window scale, SACK permitted, timestamps) and the
 * receive windows advertised.  The smoltcp harness has the same parser in Rust (src/frames.rs);
 * both print the same JSON. */
#ifndef STACKEVAL_FRAMES_H
#define STACKEVAL_FRAMES_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct syn_opts {
  int seen;
  int mss;        /* -1: absent */
  int wscale;     /* -1: absent */
  int sack_perm;  /* 0/1 */
  int timestamps; /* 0/1 */
  int window;     /* raw 16-bit window field (never scaled in a SYN) */
  int family;
};

struct frame_stats {
  uint64_t frames[2], bytes[2];           /* index: sending side (0 = A, client; 1 = B, server) */
  uint64_t arp_req[2], arp_rep[2];
  uint64_t nd_ns[2], nd_na[2], nd_rs[2], mld[2];
  uint64_t tcp[2], tcp_payload[2], sack_blocks[2], rst[2];
  struct syn_opts syn, synack;            /* syn: from A; synack: from B */
  uint32_t max_win_field[2];              /* largest raw window field in non-SYN segments */
};

static inline void frame_stats_init(struct frame_stats *s) {
  memset(s, 0, sizeof *s);
  s->syn.mss = s->syn.wscale = s->synack.mss = s->synack.wscale = -1;
}

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static inline void frame_tcp(struct frame_stats *s, int side, int family, const uint8_t *t, int len) {
  if (len < 20) return;
  int doff = (t[12] >> 4) * 4;
  if (doff < 20 || doff > len) return;
  uint8_t flags = t[13];
  uint16_t win = rd16(t + 14);
  s->tcp[side]++;
  s->tcp_payload[side] += (uint64_t)(len - doff);
  if (flags & 0x04) s->rst[side]++;
  struct syn_opts o = {1, -1, -1, 0, 0, win, family};
  for (int i = 20; i < doff;) {
    uint8_t k = t[i];
    if (k == 0) break;
    if (k == 1) { i++; continue; }
    if (i + 1 >= doff) break;
    uint8_t l = t[i + 1];
    if (l < 2 || i + l > doff) break;
    if (k == 2 && l == 4) o.mss = rd16(t + i + 2);
    else if (k == 3 && l == 3) o.wscale = t[i + 2];
    else if (k == 4) o.sack_perm = 1;
    else if (k == 5) s->sack_blocks[side] += (uint64_t)((l - 2) / 8);
    else if (k == 8) o.timestamps = 1;
    i += l;
  }
  if (flags & 0x02) { /* SYN */
    struct syn_opts *d = (flags & 0x10) ? &s->synack : &s->syn;
    if (!d->seen) *d = o;
  } else if (win > s->max_win_field[side]) {
    s->max_win_field[side] = win;
  }
}

static inline void frame_inspect(struct frame_stats *s, int side, const uint8_t *f, int len) {
  s->frames[side]++;
  s->bytes[side] += (uint64_t)len;
  if (len < 14) return;
  uint16_t et = rd16(f + 12);
  const uint8_t *p = f + 14; int n = len - 14;
  if (et == 0x0806 && n >= 8) {
    uint16_t op = rd16(p + 6);
    if (op == 1) s->arp_req[side]++; else if (op == 2) s->arp_rep[side]++;
  } else if (et == 0x0800 && n >= 20) {
    int ihl = (p[0] & 15) * 4;
    int tot = rd16(p + 2);
    if (p[9] == 6 && tot <= n && ihl < tot) frame_tcp(s, side, 4, p + ihl, tot - ihl);
  } else if (et == 0x86dd && n >= 40) {
    int plen = rd16(p + 4); uint8_t nh = p[6];
    const uint8_t *q = p + 40;
    if (40 + plen > n) return;
    if (nh == 0 && plen >= 8) { /* hop-by-hop (MLD carries router alert) */
      int hl = (q[1] + 1) * 8; nh = q[0]; q += hl; plen -= hl;
    }
    if (nh == 6) frame_tcp(s, side, 6, q, plen);
    else if (nh == 58 && plen >= 1) {
      switch (q[0]) {
      case 133: s->nd_rs[side]++; break;
      case 135: s->nd_ns[side]++; break;
      case 136: s->nd_na[side]++; break;
      case 131: case 132: case 143: s->mld[side]++; break;
      }
    }
  }
}

static inline void syn_json(const struct syn_opts *o, FILE *f) {
  if (!o->seen) { fputs("null", f); return; }
  fprintf(f, "{\"mss\":%d,\"wscale\":%d,\"sack_permitted\":%s,\"timestamps\":%s,\"window\":%d}",
          o->mss, o->wscale, o->sack_perm ? "true" : "false", o->timestamps ? "true" : "false", o->window);
}

static inline void frame_stats_json(const struct frame_stats *s, FILE *f) {
  int ws = s->syn.wscale >= 0 && s->synack.wscale >= 0; /* negotiated only if both sent it */
  fputs("{\"syn\":", f); syn_json(&s->syn, f);
  fputs(",\"synack\":", f); syn_json(&s->synack, f);
  fprintf(f, ",\"wscale_negotiated\":%s,\"sack_negotiated\":%s",
          ws ? "true" : "false", s->syn.sack_perm && s->synack.sack_perm ? "true" : "false");
  for (int side = 0; side < 2; side++) {
    int shift = ws ? (side ? s->synack.wscale : s->syn.wscale) : 0;
    fprintf(f, ",\"%s\":{\"frames\":%llu,\"bytes\":%llu,\"arp_req\":%llu,\"arp_rep\":%llu,"
               "\"nd_ns\":%llu,\"nd_na\":%llu,\"nd_rs\":%llu,\"mld\":%llu,\"tcp\":%llu,"
               "\"tcp_payload\":%llu,\"sack_blocks\":%llu,\"rst\":%llu,\"max_window_field\":%u,\"max_window_bytes\":%llu}",
            side ? "from_B" : "from_A",
            (unsigned long long)s->frames[side], (unsigned long long)s->bytes[side],
            (unsigned long long)s->arp_req[side], (unsigned long long)s->arp_rep[side],
            (unsigned long long)s->nd_ns[side], (unsigned long long)s->nd_na[side],
            (unsigned long long)s->nd_rs[side], (unsigned long long)s->mld[side],
            (unsigned long long)s->tcp[side], (unsigned long long)s->tcp_payload[side],
            (unsigned long long)s->sack_blocks[side], (unsigned long long)s->rst[side], s->max_win_field[side],
            (unsigned long long)s->max_win_field[side] << shift);
  }
  fputs("}", f);
}
#endif
