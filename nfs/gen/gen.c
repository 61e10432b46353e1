/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-gen: a paced test-packet generator.
 *
 * NFs cannot allocate buffers (only sluiced owns mbufs), so the generator
 * recycles the buffers an upstream supply hands it: typically a net_null
 * port at full rate whose chain starts with this NF. Each received buffer is
 * either rewritten in place into the next test packet (Ethernet/IPv4/UDP of
 * --size bytes, 5-tuple cycling over --flows flows, payload stamp: see
 * stamp.h) and sent on (SL_ACT_NEXT), or dropped when the token bucket
 * (--rate-pps, --burst) has no token, when the buffer cannot hold --size
 * bytes, or after --count packets. The pacing is therefore only as fine as
 * the supply: the generator can emit at most what it receives.
 *
 * Counters are written as JSON to --dump FILE (or SLUICE_NF_DUMP) on exit
 * and, at the next batch, after SIGUSR1.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/nf_common.h"
#include "common/stamp.h"
#include "common/tsc.h"

#define PROG "sluice-nf-gen"

enum { OPT_RATE = NF_OPT_APP, OPT_BURST, OPT_SIZE, OPT_FLOWS, OPT_COUNT, OPT_GEN_ID, OPT_WARMUP, OPT_DUMP };

struct gen_ctx {
	/* configuration */
	uint64_t rate_pps;   /* 0 = unlimited */
	uint64_t burst;
	uint64_t count;      /* stop after this many; 0 = never */
	uint64_t warmup;     /* the first `warmup` of them carry gen_id + 1, not gen_id */
	uint32_t size, flows, gen_id;
	const char *dump;
	int dump_set;        /* --dump given (else SLUICE_NF_DUMP, read in start) */
	/* state */
	uint64_t hz;
	struct tbucket tb;
	uint64_t seq;        /* next sequence number = packets generated so far */
	uint32_t flow;       /* next flow, seq % flows kept without a division */
	uint64_t paced_drops, too_small, after_count;
	uint64_t tsc_first, tsc_last; /* stamps of the first counted and the last packet */
	sig_atomic_t usr1_seen;
};

static int fill_json(FILE *f, void *arg)
{
	const struct gen_ctx *c = arg;
	fprintf(f,
		"{\"generated\": %" PRIu64 ", \"paced_drops\": %" PRIu64 ", \"too_small\": %" PRIu64
		", \"after_count\": %" PRIu64 ", \"tsc_hz\": %" PRIu64 ", \"rate_pps\": %" PRIu64
		", \"burst\": %" PRIu64 ", \"size\": %u, \"flows\": %u, \"gen_id\": %u, \"count\": %" PRIu64
		", \"warmup\": %" PRIu64 ", \"counted_ns\": %" PRIu64 ", \"stamped\": %s}\n",
		c->seq, c->paced_drops, c->too_small, c->after_count, c->hz, c->rate_pps, c->burst, c->size,
		c->flows, c->gen_id, c->count, c->warmup,
		c->seq > c->warmup ? tsc_to_ns(c->tsc_last - c->tsc_first, c->hz) : 0, c->size >= STAMP_MIN_SIZE ? "true" : "false");
	return ferror(f) ? -1 : 0;
}

static void dump(struct gen_ctx *c)
{
	if (c->dump != NULL)
		nf_write_file(PROG, c->dump, fill_json, c);
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct gen_ctx *c = arg;
	/* one refill per batch: the batch arrived at once, and rdtsc per token
	 * would only add cost, not precision */
	tb_refill(&c->tb, tsc_now());
	/* Decide first, write and stamp after: the stamp says when the packet
	 * leaves for the chain, which is when the handler returns (the SDK
	 * publishes the batch then), not before the rest of the batch was
	 * handled -- dropping ~30 unused supply buffers took microseconds that
	 * were counted as the chain's latency. */
	unsigned send[SL_BURST_MAX], ns = 0, dry = 0;
	for (unsigned i = 0; i < n; i++) {
		struct sl_pkt *p = &pkts[i];
		if (c->count != 0 && c->seq + ns >= c->count) { /* ns of this batch not counted in seq yet */
			c->after_count++;
			sl_pkt_set_action(p, SL_ACT_DROP, 0);
			continue;
		}
		/* check the room before taking a token, so a useless buffer costs none */
		if ((uint32_t)sl_pkt_len(p) + sl_pkt_tailroom(p) < c->size) {
			c->too_small++;
			sl_pkt_set_action(p, SL_ACT_DROP, 0);
			continue;
		}
		if (!tb_take(&c->tb)) {
			dry = 1;
			c->paced_drops++;
			sl_pkt_set_action(p, SL_ACT_DROP, 0);
			continue;
		}
		sl_pkt_adj_tail(p, (int)c->size - (int)sl_pkt_len(p)); /* fits: checked above */
		sl_pkt_set_action(p, SL_ACT_NEXT, 0);
		send[ns++] = i;
	}
	/* Write every packet first (each a buffer maybe cold in cache), then read the clock once and
	 * put the stamp in: what it says is when the batch leaves, as the Linux generator stamps its
	 * prepared frames right before sendmmsg. Warm-up packets go out under their own id with their
	 * own sequence, so a sink measuring gen_id sees the counted packets only, numbered from 0. */
	int stamped = 0;
	for (unsigned k = 0; k < ns; k++) {
		stamped = gen_write_pkt(sl_pkt_data(&pkts[send[k]]), c->size, c->flow, c->gen_id, 0, 0);
		if (++c->flow == c->flows)
			c->flow = 0;
	}
	if (ns != 0) {
		uint64_t t = tsc_now();
		for (unsigned k = 0; k < ns && stamped; k++) {
			uint64_t seq = c->seq + k;
			uint8_t *st = sl_pkt_data(&pkts[send[k]]) + GEN_HDR_LEN;
			if (seq < c->warmup)
				stamp_write(st, c->gen_id + 1, seq, t);
			else
				stamp_write(st, c->gen_id, seq - c->warmup, t);
		}
		if (c->seq + ns > c->warmup) {
			if (c->seq <= c->warmup)
				c->tsc_first = t; /* the first counted packet (seq == warmup) is in this batch */
			c->tsc_last = t;
		}
		c->seq += ns;
	}
	/* All that was due went out and the rest was supply: hand the chain the core now. Otherwise, on
	 * a shared core, what was just stamped waits while gen recycles more supply (its input is always
	 * a full burst, so it keeps the core for 8 bursts a turn). Unpaced, the bucket never runs dry and
	 * gen keeps its long turns, and its ceiling. */
	if (dry)
		sl_nf_yield(nf);
	if (nf_signal_taken(&nf_usr1_gen, &c->usr1_seen))
		dump(c);
}

static int opt(void *ctx, int o, const char *arg)
{
	struct gen_ctx *c = ctx;
	uint64_t v;
	switch (o) {
	case OPT_RATE:
		return nf_parse_u64(PROG, "rate-pps", arg, 0, 1000000000u, &c->rate_pps);
	case OPT_BURST:
		return nf_parse_u64(PROG, "burst", arg, 1, 65536, &c->burst);
	case OPT_COUNT:
		return nf_parse_u64(PROG, "count", arg, 0, UINT64_MAX, &c->count);
	case OPT_SIZE:
		if (nf_parse_u64(PROG, "size", arg, GEN_MIN_SIZE, GEN_MAX_SIZE, &v) < 0)
			return -1;
		c->size = (uint32_t)v;
		return 0;
	case OPT_FLOWS:
		if (nf_parse_u64(PROG, "flows", arg, 1, GEN_MAX_FLOWS, &v) < 0)
			return -1;
		c->flows = (uint32_t)v;
		return 0;
	case OPT_GEN_ID:
		if (nf_parse_u64(PROG, "gen-id", arg, 0, UINT32_MAX, &v) < 0)
			return -1;
		c->gen_id = (uint32_t)v;
		return 0;
	case OPT_WARMUP:
		return nf_parse_u64(PROG, "warmup", arg, 0, UINT64_MAX, &c->warmup);
	case OPT_DUMP:
		c->dump = arg[0] != '\0' ? arg : NULL;
		c->dump_set = 1;
		return 0;
	default:
		return -1;
	}
}

static int start(void *ctx)
{
	struct gen_ctx *c = ctx;
	if (!c->dump_set) { /* no --dump: SLUICE_NF_DUMP, if set and not empty */
		const char *e = getenv("SLUICE_NF_DUMP");
		c->dump = e != NULL && e[0] != '\0' ? e : NULL;
	}
	if (c->gen_id == UINT32_MAX && c->warmup != 0) {
		fprintf(stderr, PROG ": --warmup needs a --gen-id below %u (warm-up packets use gen-id + 1)\n",
			UINT32_MAX);
		return -1;
	}
	if (c->count != 0 && c->warmup > c->count) {
		fprintf(stderr, PROG ": --warmup %" PRIu64 " is more than --count %" PRIu64 " (the warm-up is part of the count)\n",
			c->warmup, c->count);
		return -1;
	}
	if (c->size < STAMP_MIN_SIZE)
		fprintf(stderr, PROG ": --size %u leaves no room for the %u-byte stamp (needs %u): "
			"packets go out unstamped, so a sink measures neither latency nor loss\n",
			c->size, STAMP_LEN, STAMP_MIN_SIZE);
	c->hz = tsc_calibrate(50);
	tb_init(&c->tb, c->hz, c->rate_pps, c->burst, tsc_now());
	nf_catch_usr1();
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct gen_ctx *c = ctx;
	if (out == NULL)
		return;
	fprintf(out, " generated=%" PRIu64 " paced_drops=%" PRIu64 " too_small=%" PRIu64 " tsc_hz=%" PRIu64,
		c->seq, c->paced_drops, c->too_small, c->hz);
	dump(c);
}

static const struct gen_ctx defaults = { .burst = 32, .size = STAMP_MIN_SIZE, .flows = 1024 };

static const struct option opts[] = {
	{ "rate-pps", required_argument, NULL, OPT_RATE },
	{ "burst", required_argument, NULL, OPT_BURST },
	{ "size", required_argument, NULL, OPT_SIZE },
	{ "flows", required_argument, NULL, OPT_FLOWS },
	{ "count", required_argument, NULL, OPT_COUNT },
	{ "gen-id", required_argument, NULL, OPT_GEN_ID },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "dump", required_argument, NULL, OPT_DUMP },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "gen",
	.about = "Sluice NF: rewrite the buffers it receives into paced, stamped UDP test packets.",
	.opts = opts,
	.opts_help =
		"  --rate-pps R       packets per second, token bucket on the TSC (default 0 = unlimited)\n"
		"  --burst N          token bucket depth in packets (default 32)\n"
		"  --size B           frame size without FCS, 60..16384 (default 66, the smallest\n"
		"                     with a stamp; above 1514 needs a jumbo sluiced.buffer_size)\n"
		"  --flows F          cycle through F UDP flows, 1..16777216 (default 1024)\n"
		"  --count N          generate N packets, then drop everything (default 0 = no limit)\n"
		"  --gen-id ID        generator id written in every stamp (default 0)\n"
		"  --warmup N         the first N packets (part of --count) are a warm-up: they carry\n"
		"                     gen-id + 1 and their own sequence numbers (default 0)\n"
		"  --dump FILE        write counters as JSON here on exit and on SIGUSR1\n"
		"                     (SLUICE_NF_DUMP)\n",
	.ctx_size = sizeof(struct gen_ctx),
	.ctx_defaults = &defaults,
	.opt = opt,
	.start = start,
	.handler = handler,
	.finish = finish,
)
