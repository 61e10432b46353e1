/* SPDX-License-Identifier: BSD-3-Clause
 *
 * sluice-nf-firewall: a stateful firewall. Every IPv4/IPv6 packet is first looked up in the
 * connection tracking table (either direction of an allowed connection passes: "established"; an
 * ICMP error quoting a tracked connection passes: "related"); otherwise the first matching rule of
 * the --config file decides (allow -> NEXT, drop -> DROP), or the default policy. A packet a rule
 * allows starts a tracked connection (unless the rule is `stateless`). SIGHUP reloads the rule file
 * at the next batch; the conntrack table survives, so established flows keep passing.
 * Docs: docs/nfs/firewall.md. Parsing and tables: pkt.h, rules.h, conntrack.h.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/nf_common.h"
#include "conntrack.h"
#include "rules.h"

#define PROG "sluice-nf-firewall"

enum {
	OPT_CONFIG = NF_OPT_APP, OPT_CHECK, OPT_NON_IP, OPT_CT_MAX, OPT_CT_TCP, OPT_CT_TCP_SYN,
	OPT_CT_TCP_CLOSE, OPT_CT_UDP, OPT_CT_ICMP, OPT_CT_OTHER,
};

struct fw_ctx {
	const char *config;
	int check;
	uint8_t non_ip_action;
	uint64_t ct_max;
	uint64_t timeout_s[FW_TO_N]; /* 0: default */
	struct fw_ruleset rs;
	struct fw_ct ct;
	struct sl_nf *nf;
	sig_atomic_t hup_seen;
	/* counters reported by sluiced */
	uint64_t *c_default, *c_established, *c_related, *c_ct_entries, *c_ct_full, *c_malformed,
		*c_non_ip, *c_nd, *c_fragments, *c_allowed, *c_dropped, *c_reloads, *c_reload_errors;
};

static uint64_t no_counter; /* where updates go if sluiced gave no info page or no room */

static uint64_t *counter(struct sl_nf *nf, const char *name)
{
	return nf_counter(nf, name, &no_counter);
}

static int port_id_cb(void *arg, const char *name)
{
	return sl_nf_port_id(arg, name);
}

/* Resolve port names and give every rule its hit counter ("rule.<name>" or "rule.<index>"). */
static int rules_bind(struct sl_nf *nf, struct fw_ruleset *rs, const char *file, char *err, size_t errlen)
{
	if (fw_rules_resolve(rs, file, port_id_cb, nf, err, errlen) < 0)
		return -1;
	for (unsigned i = 0; i < rs->n; i++) {
		char name[SL_COUNTER_NAME_MAX + 8];
		if (rs->r[i].label[0])
			snprintf(name, sizeof(name), "rule.%s", rs->r[i].label);
		else
			snprintf(name, sizeof(name), "rule.%u", i + 1);
		rs->r[i].hits = counter(nf, name);
	}
	return 0;
}

static void reload(struct fw_ctx *c)
{
	struct fw_ruleset nrs;
	char err[512];
	int rc = fw_rules_load(c->config, &nrs, err, sizeof(err));
	if (rc == 0 && (rc = rules_bind(c->nf, &nrs, c->config, err, sizeof(err))) < 0)
		fw_rules_free(&nrs);
	if (rc < 0) {
		fprintf(stderr, PROG ": reload failed, keeping the previous rules: %s\n", err);
		(*c->c_reload_errors)++;
		return;
	}
	fw_rules_free(&c->rs);
	c->rs = nrs;
	(*c->c_reloads)++;
	fprintf(stderr, PROG ": reloaded %s: %u rules, default %s\n", c->config, c->rs.n,
		c->rs.default_action == FW_ALLOW ? "allow" : "drop");
}

static void handler(struct sl_nf *nf, struct sl_pkt *pkts, unsigned n, void *arg)
{
	struct fw_ctx *c = arg;
	struct timespec ts;
	uint64_t allowed = 0;
	(void)nf;

	if (nf_signal_taken(&nf_hup_gen, &c->hup_seen))
		reload(c);
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no system call */
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	struct fw_ct *ct = &c->ct;
	fw_ct_sweep(ct, now, 8); /* a few slots per batch: the table is large and cold */
	/* the headers of a whole batch are fetched at once, not one cache miss after another */
	for (unsigned i = 0; i < n; i++)
		__builtin_prefetch(sl_pkt_data(&pkts[i]));

	for (unsigned i = 0; i < n; i++) {
		struct sl_pkt *p = &pkts[i];
		int in = sl_pkt_in_port(p);
		struct fw_pkt k;
		uint8_t verdict;

		switch (fw_parse(sl_pkt_data(p), sl_pkt_len(p), &k)) {
		case FW_K_MALFORMED:
			(*c->c_malformed)++;
			verdict = FW_DROP;
			goto done;
		case FW_K_NON_IP:
			(*c->c_non_ip)++;
			verdict = c->non_ip_action;
			goto done;
		case FW_K_ND:
			(*c->c_nd)++;
			verdict = FW_ALLOW;
			goto done;
		default:
			break;
		}

		struct fw_ct_key key;
		uint32_t h = 0;
		int dir = 0;
		struct fw_ct_entry *e = NULL;
		if (k.frag) {
			(*c->c_fragments)++;
		} else if (k.icmp == FW_ICMP_ERROR) {
			if (k.has_inner) {
				struct fw_ct_key ik;
				fw_ct_key(&k.inner, &ik);
				if (fw_ct_find(ct, &ik, fw_ct_hash(&ik), now) != NULL) {
					(*c->c_related)++;
					verdict = FW_ALLOW;
					goto done;
				}
			}
		} else {
			dir = fw_ct_key(&k.t, &key);
			h = fw_ct_hash(&key);
			e = fw_ct_find(ct, &key, h, now);
			if (e != NULL && fw_ct_accepts(e, &k, dir)) {
				fw_ct_touch(ct, e, dir, k.tcp_flags, now);
				(*c->c_established)++;
				verdict = FW_ALLOW;
				goto done;
			}
		}

		int ri = fw_rules_eval(&c->rs, &k, in);
		int stateless = 0;
		if (ri >= 0) {
			const struct fw_rule *r = &c->rs.r[ri];
			(*r->hits)++;
			verdict = r->action;
			stateless = r->stateless;
		} else {
			(*c->c_default)++;
			verdict = c->rs.default_action;
		}
		if (verdict == FW_ALLOW && !stateless && !k.frag && k.icmp != FW_ICMP_ERROR && e == NULL &&
		    fw_ct_can_create(&k)) {
			e = fw_ct_insert(ct, &key, h, now);
			if (e != NULL) {
				e->orig_dir = (uint8_t)dir;
				fw_ct_touch(ct, e, dir, k.tcp_flags, now);
			} else {
				(*c->c_ct_full)++;
			}
		}
	done:
		allowed += verdict == FW_ALLOW;
		sl_pkt_set_action(p, verdict == FW_ALLOW ? SL_ACT_NEXT : SL_ACT_DROP, 0);
	}
	*c->c_allowed += allowed;
	*c->c_dropped += n - allowed;
	*c->c_ct_entries = ct->count;
}

static int opt(void *ctx, int o, const char *arg)
{
	struct fw_ctx *c = ctx;
	static const char *const to_flag[FW_TO_N] = { "ct-tcp", "ct-tcp-syn", "ct-tcp-close",
						      "ct-udp", "ct-icmp", "ct-other" };
	switch (o) {
	case OPT_CONFIG:
		c->config = arg;
		return 0;
	case OPT_CHECK:
		c->check = 1;
		return 0;
	case OPT_NON_IP:
		if (strcmp(arg, "allow") == 0)
			c->non_ip_action = FW_ALLOW;
		else if (strcmp(arg, "drop") == 0)
			c->non_ip_action = FW_DROP;
		else {
			fprintf(stderr, PROG ": --non-ip '%s': expected allow or drop\n", arg);
			return -1;
		}
		return 0;
	case OPT_CT_MAX:
		return nf_parse_u64(PROG, "ct-max", arg, 1, 1u << 24, &c->ct_max);
	default:
		if (o >= OPT_CT_TCP && o <= OPT_CT_OTHER)
			return nf_parse_u64(PROG, to_flag[o - OPT_CT_TCP], arg, 1, 30 * 86400,
					    &c->timeout_s[o - OPT_CT_TCP]);
		return -1;
	}
}

static int start(void *ctx)
{
	struct fw_ctx *c = ctx;
	char err[512];
	if (c->config == NULL) {
		fprintf(stderr, PROG ": --config FILE is required (the rule file; see --help)\n");
		return -1;
	}
	if (fw_rules_load(c->config, &c->rs, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": %s\n", err);
		return -1;
	}
	if (c->check) {
		printf("%s: ok, %u rules, default %s\n", c->config, c->rs.n,
		       c->rs.default_action == FW_ALLOW ? "allow" : "drop");
		fw_rules_free(&c->rs);
		exit(0);
	}
	if (fw_ct_init(&c->ct, (uint32_t)c->ct_max) < 0) {
		fprintf(stderr, PROG ": cannot allocate a conntrack table of %llu entries\n",
			(unsigned long long)c->ct_max);
		return -1;
	}
	for (int i = 0; i < FW_TO_N; i++)
		if (c->timeout_s[i])
			c->ct.timeout_ns[i] = c->timeout_s[i] * 1000000000ull;
	nf_catch_hup();
	return 0;
}

static int attached(struct sl_nf *nf, void *ctx)
{
	struct fw_ctx *c = ctx;
	char err[512];
	c->nf = nf;
	c->c_allowed = counter(nf, "allowed");
	c->c_dropped = counter(nf, "dropped");
	c->c_default = counter(nf, "default");
	c->c_established = counter(nf, "established");
	c->c_related = counter(nf, "related");
	c->c_ct_entries = counter(nf, "ct_entries");
	c->c_ct_full = counter(nf, "ct_full");
	c->c_malformed = counter(nf, "malformed");
	c->c_non_ip = counter(nf, "non_ip");
	c->c_nd = counter(nf, "nd");
	c->c_fragments = counter(nf, "fragments");
	c->c_reloads = counter(nf, "reloads");
	c->c_reload_errors = counter(nf, "reload_errors");
	if (rules_bind(nf, &c->rs, c->config, err, sizeof(err)) < 0) {
		fprintf(stderr, PROG ": %s (ports:", err);
		for (uint32_t i = 0; i < sl_nf_port_count(nf); i++)
			fprintf(stderr, " %s", sl_nf_port_name(nf, i) ? sl_nf_port_name(nf, i) : "?");
		fprintf(stderr, ")\n");
		return -1;
	}
	fprintf(stderr, PROG ": %s: %u rules, default %s, conntrack %u entries\n", c->config, c->rs.n,
		c->rs.default_action == FW_ALLOW ? "allow" : "drop", c->ct.max);
	return 0;
}

static void finish(void *ctx, FILE *out)
{
	struct fw_ctx *c = ctx;
	if (out != NULL && c->c_allowed != NULL)
		fprintf(out, " allowed=%llu dropped=%llu ct_entries=%u", (unsigned long long)*c->c_allowed,
			(unsigned long long)*c->c_dropped, c->ct.count);
	fw_rules_free(&c->rs);
	fw_ct_free(&c->ct);
}

static const struct fw_ctx defaults = { .non_ip_action = FW_ALLOW, .ct_max = 65536 };

static const struct option opts[] = {
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "check", no_argument, NULL, OPT_CHECK },
	{ "non-ip", required_argument, NULL, OPT_NON_IP },
	{ "ct-max", required_argument, NULL, OPT_CT_MAX },
	{ "ct-tcp", required_argument, NULL, OPT_CT_TCP },
	{ "ct-tcp-syn", required_argument, NULL, OPT_CT_TCP_SYN },
	{ "ct-tcp-close", required_argument, NULL, OPT_CT_TCP_CLOSE },
	{ "ct-udp", required_argument, NULL, OPT_CT_UDP },
	{ "ct-icmp", required_argument, NULL, OPT_CT_ICMP },
	{ "ct-other", required_argument, NULL, OPT_CT_OTHER },
	{ NULL, 0, NULL, 0 },
};

SL_NF_PLUGIN_REGISTER(
	.name = "firewall",
	.about = "Sluice NF: stateful firewall (rules from --config, connection tracking; SIGHUP reloads).",
	.opts = opts,
	.opts_help =
		"  --config FILE      rule file (required; docs/nfs/firewall.md); SIGHUP reloads it\n"
		"  --check            check the rule file's syntax and exit (port names not checked)\n"
		"  --non-ip allow|drop  what to do with non-IP frames such as ARP (default allow)\n"
		"  --ct-max N         conntrack table capacity in connections (default 65536)\n"
		"  --ct-tcp S         idle timeout of an answered TCP connection (default 3600 s)\n"
		"  --ct-tcp-syn S     ... of an unanswered TCP connection (default 60 s)\n"
		"  --ct-tcp-close S   ... of a TCP connection after FIN or RST (default 10 s)\n"
		"  --ct-udp S         ... of a UDP flow (default 60 s)\n"
		"  --ct-icmp S        ... of an ICMP echo exchange (default 30 s)\n"
		"  --ct-other S       ... of other IP protocols (default 600 s)\n",
	.ctx_size = sizeof(struct fw_ctx),
	.ctx_defaults = &defaults,
	.opt = opt,
	.start = start,
	.attached = attached,
	.handler = handler,
	.finish = finish,
)
