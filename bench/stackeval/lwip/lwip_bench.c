/* lwip_bench.c -- lwIP (Debian liblwip 2.1.3) under the stackeval harness.
 *
 * Two lwIP instances in ONE thread, joined by an in-memory Ethernet link (MTU 1500) that the
 * harness drives: a frame an instance sends (netif->linkoutput) is copied into a buffer of the
 * harness's own frame pool (the "foreign buffer pool"), queued, and later handed to the other
 * instance's netif->input as a custom PBUF_REF pbuf that points into that pool buffer (zero-copy
 * RX; the pool buffer comes back through the pbuf's custom_free_function).
 *
 * lwIP keeps its state in globals, so one process normally holds one lwIP.  --instances 2 (the
 * default) loads liblwip.so twice with dlmopen(LM_ID_NEWLM) and calls each copy through a
 * function table: two complete stacks (own PCB lists, ARP/ND caches, timers, heaps) in one
 * thread.  --instances 1 uses the copy linked with -llwip for both ends: one stack, two netifs,
 * every PCB bound to its netif (tcp_bind_netif) so that all traffic still crosses the link.
 *
 * Only the raw API is used; tcpip_init() is never called.  The Debian build is NO_SYS=0 with
 * LWIP_TCPIP_CORE_LOCKING; its sys_check_core_locking() only checks once a tcpip thread has been
 * marked, which never happens here, so raw-API calls from this one thread are legal.  Timers run
 * from sys_check_timeouts().
 *
 * Modes (one JSON object on stdout):
 *   bulk  --family 4|6 --seconds S      one connection A->B, payload Gbit/s over S seconds
 *   conns --family 4|6 --conns N        N concurrent connections A->B, 1 KiB each echoed by B
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lwip/init.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/tcp.h"
#include "lwip/timeouts.h"
#include "lwip/etharp.h"
#include "lwip/ethip6.h"
#include "netif/ethernet.h"

#include "../common/frames.h"

/* ---------- one lwIP instance: a function table ---------- */

#define LWIP_FNS(X) \
  X(lwip_init) X(netif_add) X(netif_set_up) X(netif_set_link_up) X(netif_set_default) \
  X(ethernet_input) X(etharp_output) X(ethip6_output) \
  X(netif_create_ip6_linklocal_address) X(netif_add_ip6_address) \
  X(tcp_new_ip_type) X(tcp_bind) X(tcp_bind_netif) X(tcp_listen_with_backlog) X(tcp_accept) \
  X(tcp_arg) X(tcp_recv) X(tcp_sent) X(tcp_err) X(tcp_connect) X(tcp_write) X(tcp_output) \
  X(tcp_recved) X(tcp_close) X(tcp_abort) \
  X(pbuf_alloced_custom) X(pbuf_free) X(pbuf_copy_partial) X(sys_check_timeouts)

struct inst {
  const char *name;
  void *handle; /* dlmopen handle, NULL when linked */
#define DECL(f) __typeof__(&f) f;
  LWIP_FNS(DECL)
#undef DECL
  struct mallinfo2 (*mallinfo2)(void);
  struct netif netif;
  int side; /* 0 = A (client), 1 = B (server) */
};

static struct inst I[2];
static int n_instances = 2;

static void load(struct inst *in, int dl) {
  if (dl) {
    in->handle = dlmopen(LM_ID_NEWLM, "liblwip.so", RTLD_NOW | RTLD_LOCAL);
    if (!in->handle) { fprintf(stderr, "dlmopen: %s\n", dlerror()); exit(2); }
#define LOAD(f) in->f = (__typeof__(&f))dlsym(in->handle, #f); \
    if (!in->f) { fprintf(stderr, "dlsym %s: %s\n", #f, dlerror()); exit(2); }
    LWIP_FNS(LOAD)
#undef LOAD
    in->mallinfo2 = (struct mallinfo2 (*)(void))dlsym(in->handle, "mallinfo2");
  } else {
#define LINK(f) in->f = &f;
    LWIP_FNS(LINK)
#undef LINK
    in->mallinfo2 = &mallinfo2;
  }
}

/* ---------- the link and the foreign frame pool ---------- */

#define FRAME_BUF 2048
static uint32_t pool_n;
static uint8_t *pool;               /* pool_n * FRAME_BUF bytes: the foreign buffers */
static uint32_t *pool_free; static uint32_t pool_free_n;
static uint32_t pool_used_max;
struct rxpbuf { struct pbuf_custom pc; uint32_t idx; };
static struct rxpbuf *rxp;          /* one custom pbuf header per pool buffer */

struct q { uint32_t *idx; uint16_t *len; uint32_t head, tail, mask; };
static struct q link_q[2];          /* link_q[s]: frames travelling towards side s */
static struct frame_stats fst;      /* frames, bytes, SYN options seen on the link */
static uint64_t tx_copy_bytes, tx_chained, tx_pool_empty, rx_zero_copy;
static uint64_t rx_payload_in_pool, rx_payload_elsewhere; /* where the pbufs given to tcp_recv point */
static int in_pool(const void *x) { return (const uint8_t *)x >= pool && (const uint8_t *)x < pool + (size_t)pool_n * FRAME_BUF; }

static void pool_init(uint32_t n) {
  pool_n = n;
  pool = aligned_alloc(4096, (size_t)n * FRAME_BUF);
  memset(pool, 0, (size_t)n * FRAME_BUF); /* pre-fault: the pool is harness memory, in the baseline RSS */
  pool_free = malloc(n * sizeof *pool_free);
  rxp = calloc(n, sizeof *rxp);
  for (uint32_t i = 0; i < n; i++) pool_free[i] = n - 1 - i;
  pool_free_n = n;
  uint32_t qs = 1; while (qs < n) qs <<= 1;
  for (int s = 0; s < 2; s++) {
    link_q[s].idx = malloc(qs * sizeof(uint32_t));
    link_q[s].len = malloc(qs * sizeof(uint16_t));
    link_q[s].mask = qs - 1;
  }
}
static inline uint32_t pool_get(void) {
  if (!pool_free_n) return UINT32_MAX;
  uint32_t used = pool_n - pool_free_n + 1;
  if (used > pool_used_max) pool_used_max = used;
  return pool_free[--pool_free_n];
}
static inline void pool_put(uint32_t i) { pool_free[pool_free_n++] = i; }

/* TX: lwIP owns the pbuf (it may be a segment on the retransmission queue), so the frame is
 * copied into a pool buffer: the one copy lwIP needs to place a frame in a foreign buffer. */
static err_t linkoutput(struct netif *netif, struct pbuf *p) {
  struct inst *in = netif->state;
  uint32_t b = pool_get();
  if (b == UINT32_MAX) { tx_pool_empty++; return ERR_MEM; }
  if (p->next) tx_chained++;
  uint8_t *dst = pool + (size_t)b * FRAME_BUF;
  uint16_t len = in->pbuf_copy_partial(p, dst, p->tot_len, 0);
  tx_copy_bytes += len;
  frame_inspect(&fst, in->side, dst, len);
  struct q *q = &link_q[!in->side];
  q->idx[q->tail & q->mask] = b; q->len[q->tail & q->mask] = len; q->tail++;
  return ERR_OK;
}

static void rx_free(struct pbuf *p) {
  struct rxpbuf *r = (struct rxpbuf *)p;
  pool_put(r->idx);
}

/* RX: a custom PBUF_REF pbuf over the pool buffer (lwIP's doc/ZeroCopyRx.c pattern) */
static int deliver(int side) {
  struct inst *in = &I[side];
  struct q *q = &link_q[side];
  int n = 0;
  while (q->head != q->tail) {
    uint32_t b = q->idx[q->head & q->mask]; uint16_t len = q->len[q->head & q->mask]; q->head++;
    struct rxpbuf *r = &rxp[b];
    r->idx = b;
    r->pc.custom_free_function = rx_free;
    struct pbuf *p = in->pbuf_alloced_custom(PBUF_RAW, len, PBUF_REF, &r->pc,
                                             pool + (size_t)b * FRAME_BUF, FRAME_BUF);
    rx_zero_copy++;
    if (in->netif.input(p, &in->netif) != ERR_OK) in->pbuf_free(p);
    n++;
  }
  return n;
}

static err_t netif_init_cb(struct netif *n) {
  struct inst *in = n->state;
  n->name[0] = 'e'; n->name[1] = (char)('a' + in->side);
  n->output = in->etharp_output;
  n->output_ip6 = in->ethip6_output;
  n->linkoutput = linkoutput;
  n->mtu = 1500;
  n->hwaddr_len = 6;
  uint8_t mac[6] = {0x02, 0, 0, 0, 0, (uint8_t)(1 + in->side)};
  memcpy(n->hwaddr, mac, 6);
  n->flags = NETIF_FLAG_BROADCAST | NETIF_FLAG_ETHARP | NETIF_FLAG_ETHERNET | NETIF_FLAG_IGMP | NETIF_FLAG_MLD6;
  return ERR_OK;
}

static double now_s(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r"); long a = 0, b = 0;
  if (f) { if (fscanf(f, "%ld %ld", &a, &b) != 2) b = 0; fclose(f); }
  return b * (sysconf(_SC_PAGESIZE) / 1024);
}
static size_t heap_used(int side) { /* bytes malloc'd by this instance (its own libc in its namespace) */
  return I[side].mallinfo2().uordblks;
}

static void timers(void) {
  I[0].sys_check_timeouts();
  if (n_instances == 2) I[1].sys_check_timeouts();
}
/* one turn of the harness: every queued frame crosses the link, then timers */
static int turn(void) {
  int n = deliver(1);
  n += deliver(0);
  timers();
  return n;
}

static ip_addr_t addr_of(int side, int family) {
  ip_addr_t a;
  if (family == 4) IP_ADDR4(&a, 10, 0, 0, 1 + side);
  else IP_ADDR6(&a, PP_HTONL(0xfd000000UL), 0, 0, PP_HTONL(1 + side));
  return a;
}

static int ip6_ready(struct inst *in) {
  for (int i = 0; i < 2; i++)
    if (!ip6_addr_ispreferred(netif_ip6_addr_state(&in->netif, i))) return 0;
  return 1;
}

static double dad_wait_s;
static void setup(void) {
  for (int s = 0; s < 2; s++) {
    struct inst *in = &I[s];
    if (s == 1 && n_instances == 1) { /* one stack: both netifs in the linked copy */
      void *keep = in->handle; *in = I[0]; in->handle = keep;
    }
    in->side = s; in->name = s ? "B" : "A";
    if (s == 0 || n_instances == 2) in->lwip_init();
    ip4_addr_t ip, mask, gw;
    IP4_ADDR(&ip, 10, 0, 0, 1 + s); IP4_ADDR(&mask, 255, 255, 255, 0); IP4_ADDR(&gw, 0, 0, 0, 0);
    memset(&in->netif, 0, sizeof in->netif);
    if (!in->netif_add(&in->netif, &ip, &mask, &gw, in, netif_init_cb, in->ethernet_input)) {
      fprintf(stderr, "netif_add failed\n"); exit(2);
    }
    in->netif_create_ip6_linklocal_address(&in->netif, 1);
    ip6_addr_t g; IP6_ADDR(&g, PP_HTONL(0xfd000000UL), 0, 0, PP_HTONL(1 + s));
    s8_t idx;
    if (in->netif_add_ip6_address(&in->netif, &g, &idx) != ERR_OK) { fprintf(stderr, "ip6 addr\n"); exit(2); }
    if (n_instances == 2) in->netif_set_default(&in->netif);
    in->netif_set_up(&in->netif);
    in->netif_set_link_up(&in->netif);
  }
  /* IPv6 addresses start TENTATIVE: duplicate address detection runs over the link (NS to the
   * solicited-node address, 1 attempt, nd6_tmr each second) before they may be used. */
  double t0 = now_s();
  while (!(ip6_ready(&I[0]) && ip6_ready(&I[1]))) {
    turn();
    usleep(1000);
    if (now_s() - t0 > 10) { fprintf(stderr, "IPv6 DAD did not finish\n"); exit(3); }
  }
  dad_wait_s = now_s() - t0;
}

static struct tcp_pcb *new_pcb(int side, int family) {
  struct inst *in = &I[side];
  struct tcp_pcb *p = in->tcp_new_ip_type(family == 4 ? IPADDR_TYPE_V4 : IPADDR_TYPE_V6);
  if (!p) { fprintf(stderr, "tcp_new failed\n"); exit(2); }
  in->tcp_bind_netif(p, &in->netif); /* needed with one instance; harmless with two */
  return p;
}

/* ---------- bulk ---------- */

static uint8_t src_buf[65536], sink_buf[65536];
static uint64_t sink_bytes;
static int b_connected, b_errors;
static struct tcp_pcb *b_client;

static err_t sink_recv(void *arg, struct tcp_pcb *pcb, struct pbuf *p, err_t err) {
  (void)arg; (void)err;
  if (!p) return ERR_OK;
  for (struct pbuf *q = p; q; q = q->next) { if (in_pool(q->payload)) rx_payload_in_pool++; else rx_payload_elsewhere++; }
  /* the one copy out of the stack (into the socket's receive ring, in sluice-stackd) */
  I[1].pbuf_copy_partial(p, sink_buf, p->tot_len, 0); /* tot_len <= TCP_WND < sizeof sink_buf */
  sink_bytes += p->tot_len;
  I[1].tcp_recved(pcb, p->tot_len);
  I[1].pbuf_free(p);
  return ERR_OK;
}
static void any_err(void *arg, err_t err) { (void)arg; (void)err; b_errors++; }
static err_t bulk_accept(void *arg, struct tcp_pcb *npcb, err_t err) {
  (void)arg; (void)err;
  I[1].tcp_recv(npcb, sink_recv);
  I[1].tcp_err(npcb, any_err);
  return ERR_OK;
}
static err_t bulk_connected(void *arg, struct tcp_pcb *pcb, err_t err) {
  (void)arg; (void)pcb; (void)err; b_connected = 1; return ERR_OK;
}
static void fill(void) {
  struct inst *in = &I[0];
  int wrote = 0;
  while (tcp_sndbuf(b_client) > 0 && tcp_sndqueuelen(b_client) < TCP_SND_QUEUELEN - 8) {
    u16_t n = tcp_sndbuf(b_client);
    if (n > 16384) n = 16384;
    if (in->tcp_write(b_client, src_buf, n, TCP_WRITE_FLAG_COPY) != ERR_OK) break;
    wrote = 1;
  }
  if (wrote) in->tcp_output(b_client);
}

static void run_bulk(int family, double seconds) {
  for (size_t i = 0; i < sizeof src_buf; i++) src_buf[i] = (uint8_t)(i * 7);
  struct tcp_pcb *l = new_pcb(1, family);
  ip_addr_t any; if (family == 4) IP_ADDR4(&any, 0, 0, 0, 0); else IP_ADDR6(&any, 0, 0, 0, 0);
  if (I[1].tcp_bind(l, &any, 5001) != ERR_OK) { fprintf(stderr, "bind\n"); exit(2); }
  l = I[1].tcp_listen_with_backlog(l, TCP_DEFAULT_LISTEN_BACKLOG);
  I[1].tcp_accept(l, bulk_accept);
  b_client = new_pcb(0, family);
  I[0].tcp_err(b_client, any_err);
  ip_addr_t dst = addr_of(1, family);
  double tc = now_s();
  if (I[0].tcp_connect(b_client, &dst, 5001, bulk_connected) != ERR_OK) { fprintf(stderr, "connect\n"); exit(2); }
  while (!b_connected) { turn(); if (now_s() - tc > 10) { fprintf(stderr, "no connection\n"); exit(3); } }
  double connect_ms = (now_s() - tc) * 1e3;
  /* warm up 0.2 s, then measure */
  double t = now_s(), tw = t + 0.2;
  while ((t = now_s()) < tw) { fill(); turn(); }
  uint64_t b0 = sink_bytes; double t0 = now_s(), tend = t0 + seconds; uint64_t turns = 0;
  while ((t = now_s()) < tend) { fill(); turn(); turns++; }
  double el = t - t0; uint64_t bytes = sink_bytes - b0;
  printf("{\"stack\":\"lwip\",\"mode\":\"bulk\",\"family\":%d,\"instances\":%d,\"seconds\":%.3f,"
         "\"payload_bytes\":%llu,\"gbps\":%.4f,\"turns\":%llu,\"connect_ms\":%.2f,\"dad_wait_s\":%.2f,"
         "\"errors\":%d,\"tx_copy_bytes\":%llu,\"tx_chained_pbufs\":%llu,\"tx_pool_empty\":%llu,"
         "\"rx_zero_copy_frames\":%llu,\"rx_payload_pbufs_in_pool\":%llu,\"rx_payload_pbufs_elsewhere\":%llu,"
         "\"pool_buffers_max_in_use\":%u,\"link\":",
         family, n_instances, el, (unsigned long long)bytes, bytes * 8 / el / 1e9,
         (unsigned long long)turns, connect_ms, dad_wait_s, b_errors,
         (unsigned long long)tx_copy_bytes, (unsigned long long)tx_chained,
         (unsigned long long)tx_pool_empty, (unsigned long long)rx_zero_copy,
         (unsigned long long)rx_payload_in_pool, (unsigned long long)rx_payload_elsewhere, pool_used_max);
  frame_stats_json(&fst, stdout);
  printf("}\n");
}

/* ---------- many connections, 1 KiB echo ---------- */

#define ECHO_LEN 1024
struct conn { struct tcp_pcb *pcb; uint16_t got; uint8_t done, failed; };
static struct conn *conns;
static uint32_t c_done, c_failed, c_bad;
static uint8_t pattern[ECHO_LEN];

static err_t echo_recv(void *arg, struct tcp_pcb *pcb, struct pbuf *p, err_t err) {
  (void)arg; (void)err;
  struct inst *in = &I[1];
  if (!p) { in->tcp_close(pcb); return ERR_OK; }
  for (struct pbuf *q = p; q; q = q->next)
    if (in->tcp_write(pcb, q->payload, q->len, TCP_WRITE_FLAG_COPY) != ERR_OK) c_bad++;
  in->tcp_output(pcb);
  in->tcp_recved(pcb, p->tot_len);
  in->pbuf_free(p);
  return ERR_OK;
}
static err_t echo_accept(void *arg, struct tcp_pcb *npcb, err_t err) {
  (void)arg; (void)err;
  I[1].tcp_recv(npcb, echo_recv);
  return ERR_OK;
}
static err_t cli_recv(void *arg, struct tcp_pcb *pcb, struct pbuf *p, err_t err) {
  (void)err;
  struct conn *c = arg;
  if (!p) return ERR_OK;
  uint8_t tmp[ECHO_LEN];
  uint16_t n = p->tot_len;
  if (c->got + n > ECHO_LEN) { c_bad++; n = ECHO_LEN - c->got; }
  I[0].pbuf_copy_partial(p, tmp, n, 0);
  if (memcmp(tmp, pattern + c->got, n)) c_bad++;
  c->got += n;
  I[0].tcp_recved(pcb, p->tot_len);
  I[0].pbuf_free(p);
  if (c->got == ECHO_LEN && !c->done) { c->done = 1; c_done++; }
  return ERR_OK;
}
static void cli_err(void *arg, err_t err) {
  (void)err;
  struct conn *c = arg;
  c->pcb = NULL;
  if (!c->done && !c->failed) { c->failed = 1; c_failed++; }
}
static err_t cli_connected(void *arg, struct tcp_pcb *pcb, err_t err) {
  (void)arg; (void)err;
  if (I[0].tcp_write(pcb, pattern, ECHO_LEN, TCP_WRITE_FLAG_COPY) != ERR_OK) c_bad++;
  I[0].tcp_output(pcb);
  return ERR_OK;
}

static int open_and_echo(int family, uint32_t n, double limit_s) {
  ip_addr_t dst = addr_of(1, family);
  for (uint32_t i = 0; i < n; i++) {
    struct conn *c = &conns[i];
    c->pcb = new_pcb(0, family);
    I[0].tcp_arg(c->pcb, c);
    I[0].tcp_recv(c->pcb, cli_recv);
    I[0].tcp_err(c->pcb, cli_err);
    if (I[0].tcp_connect(c->pcb, &dst, 7, cli_connected) != ERR_OK) { c->failed = 1; c_failed++; }
  }
  double t0 = now_s();
  while (c_done + c_failed < n && now_s() - t0 < limit_s) turn();
  return c_done + c_failed == n;
}

static void close_all(uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (conns[i].pcb) { I[0].tcp_arg(conns[i].pcb, NULL); I[0].tcp_recv(conns[i].pcb, NULL);
                        I[0].tcp_err(conns[i].pcb, NULL); I[0].tcp_close(conns[i].pcb); conns[i].pcb = NULL; }
}

static void run_conns(int family, uint32_t n) {
  for (int i = 0; i < ECHO_LEN; i++) pattern[i] = (uint8_t)(i * 13 + 1);
  struct tcp_pcb *l = new_pcb(1, family);
  ip_addr_t any; if (family == 4) IP_ADDR4(&any, 0, 0, 0, 0); else IP_ADDR6(&any, 0, 0, 0, 0);
  if (I[1].tcp_bind(l, &any, 7) != ERR_OK) { fprintf(stderr, "bind\n"); exit(2); }
  l = I[1].tcp_listen_with_backlog(l, TCP_DEFAULT_LISTEN_BACKLOG);
  I[1].tcp_accept(l, echo_accept);
  conns = calloc(n + 1, sizeof *conns);
  /* warm-up: one echo; ARP / neighbour discovery resolves over the link here */
  open_and_echo(family, 1, 10);
  if (c_done != 1) { fprintf(stderr, "warm-up failed\n"); exit(3); }
  close_all(1);
  for (int i = 0; i < 50; i++) turn();
  c_done = c_failed = 0; memset(conns, 0, sizeof *conns);
  malloc_trim(0);
  long rss0 = rss_kib(); size_t h0a = heap_used(0), h0b = n_instances == 2 ? heap_used(1) : 0;
  double t0 = now_s();
  int ok = open_and_echo(family, n, 120);
  double el = now_s() - t0;
  long rss1 = rss_kib(); size_t h1a = heap_used(0), h1b = n_instances == 2 ? heap_used(1) : 0;
  /* settle 1 s (delayed ACKs flushed, nothing left unacknowledged), then measure again */
  double ts = now_s(); while (now_s() - ts < 1.0) { turn(); usleep(100); }
  long rss2 = rss_kib(); size_t h2a = heap_used(0), h2b = n_instances == 2 ? heap_used(1) : 0;
  printf("{\"stack\":\"lwip\",\"mode\":\"conns\",\"family\":%d,\"instances\":%d,\"conns\":%u,"
         "\"completed\":%u,\"failed\":%u,\"bad\":%u,\"finished\":%s,\"seconds\":%.4f,"
         "\"rss_kib_before\":%ld,\"rss_kib_after\":%ld,\"rss_bytes_per_conn\":%.0f,"
         "\"heap_bytes_per_conn_client\":%.0f,\"heap_bytes_per_conn_server\":%.0f,"
         "\"settled_rss_bytes_per_conn\":%.0f,\"settled_heap_bytes_per_conn_client\":%.0f,\"settled_heap_bytes_per_conn_server\":%.0f,"
         "\"sizeof_tcp_pcb\":%zu,\"tx_pool_empty\":%llu,\"pool_buffers_max_in_use\":%u,\"link\":",
         family, n_instances, n, c_done, c_failed, c_bad, ok ? "true" : "false", el,
         rss0, rss1, (rss1 - rss0) * 1024.0 / n,
         ((double)h1a - (double)h0a) / n, ((double)h1b - (double)h0b) / n,
         (rss2 - rss0) * 1024.0 / n, ((double)h2a - (double)h0a) / n, ((double)h2b - (double)h0b) / n,
         sizeof(struct tcp_pcb), (unsigned long long)tx_pool_empty, pool_used_max);
  frame_stats_json(&fst, stdout);
  printf("}\n");
  if (n_instances == 1) fprintf(stderr, "note: with --instances 1 both ends share one heap: heap_bytes_per_conn_client covers both\n");
}

int main(int argc, char **argv) {
  const char *mode = "bulk"; int family = 4; double seconds = 3; uint32_t nconns = 1000;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
    else if (!strcmp(argv[i], "--family") && i + 1 < argc) family = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--conns") && i + 1 < argc) nconns = (uint32_t)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--instances") && i + 1 < argc) n_instances = atoi(argv[++i]);
    else { fprintf(stderr, "usage: %s [--mode bulk|conns] [--family 4|6] [--seconds S] [--conns N] [--instances 1|2]\n", argv[0]); return 2; }
  }
  if (family != 4 && family != 6) return 2;
  if (n_instances != 1 && n_instances != 2) return 2;
  load(&I[0], n_instances == 2);
  if (n_instances == 2) load(&I[1], 1);
  pool_init(!strcmp(mode, "conns") ? (nconns * 3 > 8192 ? nconns * 3 : 8192) : 8192);
  frame_stats_init(&fst);
  setup();
  if (!strcmp(mode, "bulk")) run_bulk(family, seconds);
  else run_conns(family, nconns);
  return 0;
}
