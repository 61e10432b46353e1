/* SPDX-License-Identifier: BSD-3-Clause
 *
 * libFuzzer target for one library NF (tests/fuzz/meson.build builds it once per NF, -DNF_NAME=...):
 * the NF's own source in its plugin form (nfs/<name>/<name>.c, SL_NF_PLUGIN_REGISTER), driven the way
 * a host drives it -- options, start, attached, the handler per batch, a reload, finish -- without
 * sluiced or DPDK. The SDK calls the NF makes outside its inline packet accessors are stubbed below
 * (six ports, named as in the seed configs; counters in a private table).
 *
 * Input: the NF's config file text (its rule/config parser sees arbitrary text), a NUL byte, then
 * frames: [len hi][len lo][in_port][head][tail] + len bytes each, handed to the handler in batches of
 * up to SL_BURST_MAX. Each frame sits in its own allocation of exactly head + len + tail bytes (the
 * buffer size the NF is told), so a read past the buffer is an ASan report. An input without a NUL is
 * a config only. NFs without a config file (monitor, count) take the whole input as frames.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/nf_common.h"
#include "sluice/nf_plugin.h"

extern const struct sl_nf_plugin sl_nf_plugin_v1;

/* ---- the SDK's non-inline calls, stubbed ---- */

struct sl_nf {
	int unused;
};
static struct sl_nf fake_nf;
/* the port names the seed configs use (tests/fuzz/seeds.py) */
static const char *const port_names[] = { "lan", "wan", "a", "b", "lan1", "up" };
#define NPORTS 6
#define NCOUNTERS 256
static char counter_names[NCOUNTERS][SL_COUNTER_NAME_MAX];
static uint64_t counter_vals[NCOUNTERS];
static unsigned ncounters;

uint32_t sl_nf_port_count(const struct sl_nf *nf)
{
	(void)nf;
	return NPORTS;
}

const char *sl_nf_port_name(const struct sl_nf *nf, uint32_t id)
{
	(void)nf;
	return id < NPORTS ? port_names[id] : NULL;
}

int sl_nf_port_id(const struct sl_nf *nf, const char *name)
{
	(void)nf;
	for (int i = 0; i < NPORTS; i++)
		if (strcmp(name, port_names[i]) == 0)
			return i;
	return -1;
}

/* Like the SDK: names cut at SL_COUNTER_NAME_MAX - 1 characters; a full table gives NULL (the NF
 * uses its fallback). */
uint64_t *sl_nf_counter(struct sl_nf *nf, const char *full)
{
	(void)nf;
	char name[SL_COUNTER_NAME_MAX];
	snprintf(name, sizeof(name), "%s", full);
	for (unsigned i = 0; i < ncounters; i++)
		if (strcmp(counter_names[i], name) == 0)
			return &counter_vals[i];
	if (ncounters == NCOUNTERS)
		return NULL;
	strcpy(counter_names[ncounters], name);
	counter_vals[ncounters] = 0;
	return &counter_vals[ncounters++];
}

/* No sleeping here: the ratelimit NF calibrates its TSC clock over a 50 ms nanosleep in start(),
 * once per input. Without the sleep it measures over a few microseconds (a rougher rate is still a
 * rate; tsc_calibrate never returns 0). */
int nanosleep(const struct timespec *req, struct timespec *rem)
{
	(void)req;
	if (rem)
		rem->tv_sec = rem->tv_nsec = 0;
	return 0;
}

enum sl_sandbox sl_nf_process_sandbox(void)
{
	return SL_SANDBOX_NONE;
}

/* ---- per-NF options ---- */

#define STR_(x) #x
#define STR(x) STR_(x)
static const char nf_name[] = STR(NF_NAME);

static char conf_path[64], out_path[64], out2_path[64];
static int conf_fd = -1;

/* "--flag value" pairs; "@CONF@" is the config file, "@OUT@"/"@OUT2@" scratch output files. */
static const char *const *nf_args(int *has_conf)
{
	static const char *const firewall[] = { "config", "@CONF@", "ct-max", "64", NULL };
	static const char *const nat[] = { "inside", "lan", "outside", "wan", "config", "@CONF@",
					   "max-mappings", "64", NULL };
	static const char *const router[] = { "config", "@CONF@", "neigh-max", "64", NULL };
	static const char *const lb[] = { "config", "@CONF@", "max-conns", "64", "table-size", "251", NULL };
	static const char *const ids[] = { "rules", "@CONF@", "alert-log", "@OUT@", "eve-log", "@OUT2@", NULL };
	static const char *const ratelimit[] = { "config", "@CONF@", "flows", "64", NULL };
	static const char *const l2switch[] = { "config", "@CONF@", "max-macs", "64", "dump", "@OUT@", NULL };
	static const char *const monitor[] = { "flows", "64", "records", "@OUT@", "pcap", "@OUT2@",
					       "snaplen", "200", "pcap-buffer-mb", "1", NULL };
	static const char *const count[] = { "flows", "64", "dump", "@OUT@", NULL };
	static const struct {
		const char *name;
		const char *const *args;
	} t[] = { { "firewall", firewall }, { "nat", nat }, { "router", router }, { "lb", lb },
		  { "ids", ids }, { "ratelimit", ratelimit }, { "l2switch", l2switch },
		  { "monitor", monitor }, { "count", count } };
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (strcmp(t[i].name, nf_name) == 0) {
			*has_conf = 0;
			for (const char *const *a = t[i].args; *a; a++)
				*has_conf |= strcmp(*a, "@CONF@") == 0;
			return t[i].args;
		}
	abort();
}

static int set_opt(const struct sl_nf_plugin *p, void *ctx, const char *flag, const char *val)
{
	for (const struct option *o = p->opts; o && o->name; o++)
		if (strcmp(o->name, flag) == 0)
			return p->opt(ctx, o->val, val);
	fprintf(stderr, "fuzz-nf-%s: no option --%s\n", nf_name, flag);
	abort();
}

static int scratch(char *path, size_t n, const char *what)
{
	int fd = memfd_create(what, 0);
	if (fd < 0)
		abort();
	snprintf(path, n, "/proc/self/fd/%d", fd);
	return fd;
}

static int out_fd = -1, out2_fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	conf_fd = scratch(conf_path, sizeof(conf_path), "conf");
	/* outputs: files the NF writes (records, pcapng, logs, dumps), in memory, truncated per input */
	out_fd = scratch(out_path, sizeof(out_path), "out");
	out2_fd = scratch(out2_path, sizeof(out2_path), "out2");
	return 0;
}

#define MAX_FRAMES 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct sl_nf_plugin *p = &sl_nf_plugin_v1;
	int has_conf;
	const char *const *args = nf_args(&has_conf);
	const uint8_t *frames = data;
	size_t flen = size;

	if (has_conf) {
		const uint8_t *nul = memchr(data, 0, size);
		size_t clen = nul ? (size_t)(nul - data) : size;
		if (ftruncate(conf_fd, 0) < 0 || pwrite(conf_fd, data, clen, 0) != (ssize_t)clen)
			abort();
		frames = nul ? nul + 1 : data + size;
		flen = nul ? size - clen - 1 : 0;
	}
	if (ftruncate(out_fd, 0) < 0 || ftruncate(out2_fd, 0) < 0)
		abort();

	void *ctx = calloc(1, p->ctx_size ? p->ctx_size : 1);
	if (p->ctx_defaults)
		memcpy(ctx, p->ctx_defaults, p->ctx_size);
	for (const char *const *a = args; *a; a += 2) {
		const char *v = a[1];
		if (strcmp(v, "@CONF@") == 0)
			v = conf_path;
		else if (strcmp(v, "@OUT@") == 0)
			v = out_path;
		else if (strcmp(v, "@OUT2@") == 0)
			v = out2_path;
		if (set_opt(p, ctx, a[0], v) < 0)
			abort(); /* the fixed options are valid */
	}
	ncounters = 0;
	if (p->start && p->start(ctx) < 0) {
		free(ctx);
		return 0; /* a config the NF refused: start frees what it took */
	}
	if (p->attached && p->attached(&fake_nf, ctx) < 0) {
		if (p->finish)
			p->finish(ctx, NULL);
		free(ctx);
		return 0;
	}

	struct sl_pkt pkts[SL_BURST_MAX];
	uint8_t *bufs[SL_BURST_MAX];
	unsigned n = 0, total = 0;
	size_t i = 0;
	while (total < MAX_FRAMES) {
		int last = flen - i < 5;
		if (!last) {
			uint32_t len = (uint32_t)frames[i] << 8 | frames[i + 1];
			uint8_t in_port = frames[i + 2], head = frames[i + 3], tail = frames[i + 4];
			i += 5;
			if (len > flen - i)
				len = (uint32_t)(flen - i);
			uint8_t *b = malloc((size_t)head + len + tail + 1);
			memset(b, 0, head);
			memcpy(b + head, frames + i, len);
			memset(b + head + len, 0, tail);
			i += len;
			bufs[n] = b;
			pkts[n] = (struct sl_pkt){
				.d = { .buf = n, .off = head, .len = (uint16_t)len, .head = head,
				       .action = SL_ACT_NEXT, .dest = (uint16_t)(in_port % (NPORTS + 1)) },
				.base = b,
				.buf_size = (uint32_t)head + len + tail,
			};
			n++;
			total++;
		}
		if (n > 0 && (n == SL_BURST_MAX || last)) {
			p->handler(&fake_nf, pkts, n, ctx);
			for (unsigned k = 0; k < n; k++) {
				/* what the NF handed back stays inside its buffer */
				const struct sl_desc *d = &pkts[k].d;
				if (d->action != SL_ACT_KEEP &&
				    ((uint32_t)d->head + d->len > pkts[k].buf_size || d->off != d->head)) {
					fprintf(stderr, "fuzz-nf-%s: packet %u handed back outside its buffer "
						"(head %u len %u off %u buf_size %u)\n", nf_name, k, d->head, d->len,
						(unsigned)d->off, pkts[k].buf_size);
					abort();
				}
				free(bufs[k]);
			}
			n = 0;
			/* halfway: a reload (SIGHUP / SIGUSR1 as the NF would see them at its next batch) */
			if (total >= 8 && total < 8 + SL_BURST_MAX) {
				nf_hup_gen++;
				nf_usr1_gen++;
			}
		}
		if (last)
			break;
	}
	if (p->finish) {
		FILE *out = fopen("/dev/null", "w");
		p->finish(ctx, out);
		if (out)
			fclose(out);
	}
	free(ctx);
	return 0;
}
