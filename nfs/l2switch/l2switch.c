/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-l2switch: a VLAN-aware learning bridge (VALE-like) across sluiced's ports. Each frame's
 * source is learned into a (VLAN, MAC) -> port table with aging; known unicast goes out of one port
 * (SL_ACT_OUT, 802.1Q tag pushed or popped in place as the egress port wants), unknown unicast,
 * broadcast and multicast are flooded to the VLAN's other ports with one SL_ACT_OUT_SET (ports that
 * want the frame as it is share the buffer; the others get tagged/untagged copies from sluiced).
 * SIGUSR1 writes the table to --dump FILE at the next batch (and on exit).
 * Docs: docs/nfs/l2switch.md. Logic: pkt.h, fdb.h, conf.h.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/nf_common.h"
#include "pkt.h"

#define PROG "sluice-nf-l2switch"
#define SWEEP_SLOTS 16 /* FDB slots examined for dead entries per batch */

enum { OPT_CONFIG = NF_OPT_APP, OPT_CHECK, OPT_DUMP, OPT_AGING, OPT_MAX_MACS };

struct l2_ctx {
	const char *config;
	const char *dump;
	int dump_set; /* --dump given (else SLUICE_NF_DUMP, read in start) */
	int check;
	uint64_t aging_s, max_macs; /* 0: from the config file */
	struct l2_conf conf;
	struct l2sw sw;
	struct sl_nf *nf;
	uint64_t dump_now; /* the clock the dump being written judges ages by */
	sig_atomic_t usr1_seen;
	/* counters reported by sluiced (copied from sw.st after every batch) */
	uint64_t *c_learned, *c_moved, *c_aged, *c_fdb_full, *c_flooded, *c_forwarded, *c_filtered,
		*c_vlan_drop, *c_malformed, *c_link_local, *c_no_room, *c_macs;
};

static uint64_t no_counter; /* where updates go if sluiced gave no info page or no room */

static uint64_t *counter(struct sl_nf *nf, const char *name)
{
	return nf_counter(nf, name, &no_counter);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no system call */
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void publish(struct l2_ctx *c)
{
	const struct l2_stats *st = &c->sw.st;
	*c->c_learned = st->fdb.learned;
	*c->c_moved = st->fdb.moved;
	*c->c_aged = st->fdb.aged;
	*c->c_fdb_full = st->fdb.full;
	*c->c_flooded = st->flooded;
	*c->c_forwarded = st->forwarded;
	*c->c_filtered = st->filtered;
	*c->c_vlan_drop = st->vlan_drop;
	*c->c_malformed = st->malformed;
	*c->c_link_local = st->link_local;
	*c->c_no_room = st->no_room;
	*c->c_macs = c->sw.fdb.count;
}

/* The table as JSON: {"macs": N, ..., "fdb": [{"vlan", "mac", "port", "port_id", "age_ms"}]} */
static int fill_dump(FILE *f, void *arg)
{
	struct l2_ctx *c = arg;
	struct l2_fdb *fdb = &c->sw.fdb;
	uint64_t now = c->dump_now; /* dump() expired the dead entries at this time */
	fprintf(f, "{\"macs\": %u, \"max_macs\": %u, \"aging_s\": %llu, \"fdb\": [", fdb->count, fdb->max,
		(unsigned long long)(fdb->aging_ns / 1000000000ull));
	int first = 1;
	for (uint32_t i = 0; i <= fdb->mask; i++) {
		const struct l2_fdb_entry *e = &fdb->t[i];
		if (e->key == 0)
			continue;
		const char *pname = c->nf ? sl_nf_port_name(c->nf, e->port) : NULL;
		fprintf(f, "%s\n {\"vlan\": %u, \"mac\": \"%02x:%02x:%02x:%02x:%02x:%02x\", \"port\": \"%s\", "
			"\"port_id\": %u, \"age_ms\": %llu}", first ? "" : ",", l2_key_vlan(e->key),
			(unsigned)(e->key >> 40 & 0xff), (unsigned)(e->key >> 32 & 0xff),
			(unsigned)(e->key >> 24 & 0xff), (unsigned)(e->key >> 16 & 0xff),
			(unsigned)(e->key >> 8 & 0xff), (unsigned)(e->key & 0xff), pname ? pname : "?", e->port,
			(unsigned long long)(now >= e->seen ? (now - e->seen) / 1000000 : 0));
		first = 0;
	}
	fprintf(f, "\n]}\n");
	return ferror(f) ? -1 : 0;
}

/* Dead entries go first and the counters are published before the file appears: whoever reads
 * the new dump and then the counters sees an `aged` that includes every entry the dump lacks. */
static void dump(struct l2_ctx *c)
{
	if (c->dump == NULL)
		return;
	c->dump_now = now_ns();
	l2_fdb_expire_all(&c->sw.fdb, c->dump_now, &c->sw.st.fdb);
	if (c->c_aged != NULL)
		publish(c);
	nf_write_file(PROG, c->dump, fill_dump, c);
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct l2_ctx *c = arg;
	(void)nf;
	uint64_t now = now_ns();
	/* the headers of a whole batch are fetched at once, not one cache miss after another */
	for (unsigned i = 0; i < n; i++)
		__builtin_prefetch(sl_pkt_data(&pkts[i]));
	l2_fdb_sweep(&c->sw.fdb, now, SWEEP_SLOTS, &c->sw.st.fdb);
	for (unsigned i = 0; i < n; i++)
		l2sw_pkt(&c->sw, &pkts[i], now);
	if (nf_signal_taken(&nf_usr1_gen, &c->usr1_seen))
		dump(c);
	publish(c);
}

static int opt(void *ctx, int o, const char *arg)
{
	struct l2_ctx *c = ctx;
	switch (o) {
	case OPT_CONFIG:
		c->config = arg;
		return 0;
	case OPT_CHECK:
		c->check = 1;
		return 0;
	case OPT_DUMP:
		c->dump = arg;
		c->dump_set = 1;
		return 0;
	case OPT_AGING:
		return nf_parse_u64(PROG, "aging", arg, 1, 1000000, &c->aging_s);
	case OPT_MAX_MACS:
		return nf_parse_u64(PROG, "max-macs", arg, 1, L2_MAX_MACS_LIMIT, &c->max_macs);
	default:
		return -1;
	}
}

static int start(void *ctx)
{
	struct l2_ctx *c = ctx;
	char err[512];
	if (!c->dump_set) { /* no --dump: SLUICE_NF_DUMP, if set and not empty */
		const char *e = getenv("SLUICE_NF_DUMP");
		c->dump = e != NULL && e[0] != '\0' ? e : NULL;
	}
	if (c->config != NULL) {
		if (l2_conf_load(c->config, &c->conf, err, sizeof(err)) < 0) {
			fprintf(stderr, PROG ": %s\n", err);
			return -1;
		}
	} else {
		l2_conf_parse("(none)", "", &c->conf, err, sizeof(err)); /* the defaults */
	}
	if (c->aging_s)
		c->conf.aging_s = c->aging_s;
	if (c->max_macs)
		c->conf.max_macs = c->max_macs;
	if (c->check) {
		printf("%s: ok, %u ports%s, aging %llu s, max-macs %llu\n", c->config ? c->config : "(no config)",
		       c->conf.nports, c->conf.nports ? "" : " (every port: access VLAN 1)",
		       (unsigned long long)c->conf.aging_s, (unsigned long long)c->conf.max_macs);
		exit(0);
	}
	if (l2_fdb_init(&c->sw.fdb, (uint32_t)c->conf.max_macs, c->conf.aging_s * 1000000000ull) < 0) {
		fprintf(stderr, PROG ": cannot allocate a table of %llu MACs\n", (unsigned long long)c->conf.max_macs);
		return -1;
	}
	nf_catch_usr1();
	return 0;
}

static int port_id_cb(void *arg, const char *name)
{
	return sl_nf_port_id(arg, name);
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct l2_ctx *c = ctx;
	char err[512];
	c->nf = nf;
	if (l2_conf_resolve(&c->conf, c->config ? c->config : "(none)", sl_nf_port_count(nf), port_id_cb, nf,
			    &c->sw.vm, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": %s (ports:", err);
		for (uint32_t i = 0; i < sl_nf_port_count(nf); i++)
			fprintf(stderr, " %s", sl_nf_port_name(nf, i) ? sl_nf_port_name(nf, i) : "?");
		fprintf(stderr, ")\n");
		return -1;
	}
	c->c_learned = counter(nf, "learned");
	c->c_moved = counter(nf, "moved");
	c->c_aged = counter(nf, "aged");
	c->c_fdb_full = counter(nf, "fdb_full");
	c->c_flooded = counter(nf, "flooded");
	c->c_forwarded = counter(nf, "forwarded");
	c->c_filtered = counter(nf, "filtered");
	c->c_vlan_drop = counter(nf, "vlan_drop");
	c->c_malformed = counter(nf, "malformed");
	c->c_link_local = counter(nf, "link_local");
	c->c_no_room = counter(nf, "no_room");
	c->c_macs = counter(nf, "macs");
	publish(c);
	fprintf(stderr, PROG ": %s: %u bridge ports (", c->config ? c->config : "no config",
		(unsigned)__builtin_popcountll(c->sw.vm.ports));
	for (unsigned i = 0; i < L2_PORTS_MAX; i++)
		if (c->sw.vm.ports >> i & 1)
			fprintf(stderr, " %s", sl_nf_port_name(nf, i) ? sl_nf_port_name(nf, i) : "?");
	fprintf(stderr, " ), aging %llu s, max-macs %u\n", (unsigned long long)c->conf.aging_s, c->sw.fdb.max);
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct l2_ctx *c = ctx;
	if (c->sw.fdb.t != NULL && c->nf != NULL)
		dump(c);
	if (out != NULL)
		fprintf(out, " macs=%u forwarded=%llu flooded=%llu", c->sw.fdb.count,
			(unsigned long long)c->sw.st.forwarded, (unsigned long long)c->sw.st.flooded);
	l2_fdb_free(&c->sw.fdb);
}

static const struct option opts[] = {
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "check", no_argument, NULL, OPT_CHECK },
	{ "dump", required_argument, NULL, OPT_DUMP },
	{ "aging", required_argument, NULL, OPT_AGING },
	{ "max-macs", required_argument, NULL, OPT_MAX_MACS },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "l2switch",
	.about = "Sluice NF: VLAN-aware learning bridge over sluiced's ports (MAC aging, flooding).",
	.opts = opts,
	.opts_help =
		"  --config FILE      ports and VLANs (docs/nfs/l2switch.md); without it every sluiced\n"
		"                     port is an access port of VLAN 1 (a plain learning bridge):\n"
		"                       port NAME [access VLAN]\n"
		"                       port NAME trunk VLANS [native VLAN]   (VLANS: 10,20,30-39 | all)\n"
		"                       aging SECONDS                         (default 300)\n"
		"                       max-macs N                            (default 8192)\n"
		"  --check            check the config file's syntax and exit (port names not checked)\n"
		"  --aging S          MAC aging time in seconds (overrides the file)\n"
		"  --max-macs N       forwarding table capacity (overrides the file)\n"
		"  --dump FILE        write the forwarding table as JSON here on exit and, at the next\n"
		"                     batch, after SIGUSR1 (also SLUICE_NF_DUMP)\n",
	.ctx_size = sizeof(struct l2_ctx),
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
	.finish = finish,
)
