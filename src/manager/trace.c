/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The packet tracer, control side (docs/observability.md "Trace"; shared state: trace.h).
 *
 * trace_start arms it: the next `count` packets that arrive at the port (any port) and match the
 * filter are marked, and every worker step they take is logged with its time -- RX, the steering
 * decision (rule, flow hit or miss), the replica picked and why, each NF and the action it set,
 * copies at domain boundaries, hand-offs between workers, TX or the drop and its reason -- until they
 * leave. A hop over a pipe shows as the step where the worker accounts for it (pipe_account: the
 * downstream NF took it), a fused group segment as the step where its last member's return is adopted.
 * One trace at a time; it belongs to the control connection that started it, like a capture. The
 * last one stays readable (trace_last: the web view shows it).
 */
#include <stdio.h>
#include <string.h>

#include <rte_bpf.h>
#include <rte_cycles.h>

#include "sluice/abi.h"
#include "trace.h"

static int owner = -1;         /* the connection of the armed trace */
static uint64_t started_tsc;
static char filter_text[256];
static json_t *last;           /* the last trace stopped */

static const char *const drop_names[] = { "dropped", "no_path", "rule", "nf", "ring_full", "tx_full", "nf_gone",
					   "quota", "invalid_desc", "backpressure" };
static const char *const why_names[] = { "only replica", "round_robin", "least_loaded", "flow hash",
					  "a replica on this worker", "the flow's replica" };
static const char *const flow_names[] = { "none", "hit", "miss (entered)", "rechecked" };
static const char *const steer_names[] = { "ingress chain", "chain", "service", "port", "drop", "chain hop" };
static const char *const act_names[] = { "next", "to_nf", "out", "drop", "out_set" };

static const char *svc_name(uint32_t i) { return i < M.nservices ? M.services[i].name : "?"; }
static const char *port_name(uint32_t i) { return i < M.nports ? M.ports[i].name : "?"; }
static const char *nf_name(uint32_t i) { return i < M.max_nfs ? M.nfs[i].name : "?"; }
static const char *dom_name(uint32_t i) { return i < M.nregions ? M.regions[i]->name : "?"; }

static json_t *j_step(const struct trace_step *s, uint64_t t0)
{
	json_t *j = json_pack("{s:I,s:i}", "t_ns", (json_int_t)((double)(s->tsc - t0) * 1e9 / (double)M.tsc_hz),
			      "worker", s->worker);
	const char *what = "?";
	char text[160] = "";
	switch (s->kind) {
	case TR_RX:
		what = "rx";
		snprintf(text, sizeof(text), "port %s queue %u", port_name(s->a), s->b);
		json_object_set_new(j, "port", json_string(port_name(s->a)));
		break;
	case TR_STEER: {
		uint8_t kind = s->b & 0xff, flow = (s->b >> 8) & 0xff;
		uint16_t target = (uint16_t)(s->b >> 16);
		what = "steer";
		const char *tn = kind == STEER_CHAIN || kind == STEER_CHAIN_HOP
					 ? (M.route && target < M.route->nchains ? M.route->chains[target].name : "?")
				 : kind == STEER_SERVICE ? svc_name(target)
				 : kind == STEER_PORT	? port_name(target)
							: "";
		if (s->a)
			snprintf(text, sizeof(text), "rule %u -> %s %s, flow %s", s->a, steer_names[kind % 6], tn,
				 flow_names[flow % 4]);
		else
			snprintf(text, sizeof(text), "no rule -> %s%s%s, flow %s", steer_names[kind % 6], *tn ? " " : "",
				 tn, flow_names[flow % 4]);
		json_object_set_new(j, "rule", json_integer(s->a));
		json_object_set_new(j, "flow", json_string(flow_names[flow % 4]));
		break;
	}
	case TR_REPLICA:
		what = "replica";
		snprintf(text, sizeof(text), "service %s -> %s (%s)", svc_name(s->a), nf_name(s->b & 0xffff),
			 why_names[(s->b >> 16) % 6]);
		json_object_set_new(j, "service", json_string(svc_name(s->a)));
		json_object_set_new(j, "nf", json_string(nf_name(s->b & 0xffff)));
		json_object_set_new(j, "why", json_string(why_names[(s->b >> 16) % 6]));
		break;
	case TR_TO_NF:
		what = "to_nf";
		snprintf(text, sizeof(text), "%s (hop %u)", nf_name(s->a), s->b);
		json_object_set_new(j, "nf", json_string(nf_name(s->a)));
		break;
	case TR_NF: {
		uint8_t act = s->b & 0xff;
		uint32_t dest = s->b >> 8;
		what = "nf";
		snprintf(text, sizeof(text), "%s: %s%s%s", nf_name(s->a), act < 5 ? act_names[act] : "?",
			 act == SL_ACT_OUT ? " " : act == SL_ACT_TO_NF ? " " : "",
			 act == SL_ACT_OUT ? port_name(dest) : act == SL_ACT_TO_NF ? svc_name(dest) : "");
		json_object_set_new(j, "nf", json_string(nf_name(s->a)));
		json_object_set_new(j, "action", json_string(act < 5 ? act_names[act] : "?"));
		break;
	}
	case TR_INVALID:
		what = "invalid";
		snprintf(text, sizeof(text), "%s returned a descriptor refused (verdict %u)", nf_name(s->a), s->b);
		json_object_set_new(j, "nf", json_string(nf_name(s->a)));
		break;
	case TR_COPY:
		what = "copy";
		snprintf(text, sizeof(text), "domain %s -> %s", dom_name(s->a), dom_name(s->b));
		break;
	case TR_HANDOFF:
		what = "handoff";
		snprintf(text, sizeof(text), "to worker %u (for its %s)", s->a, s->b == 1 ? "NF" : "port");
		break;
	case TR_TX:
		what = "tx";
		snprintf(text, sizeof(text), "port %s", port_name(s->a));
		json_object_set_new(j, "port", json_string(port_name(s->a)));
		break;
	case TR_MULTI:
		what = "tx";
		snprintf(text, sizeof(text), "a copy to port %s", port_name(s->a));
		json_object_set_new(j, "port", json_string(port_name(s->a)));
		break;
	case TR_PIPE:
		what = "pipe";
		snprintf(text, sizeof(text), "%s -> %s (NF to NF over a pipe; %s's action: next)", nf_name(s->a),
			 nf_name(s->b), nf_name(s->a));
		json_object_set_new(j, "from", json_string(nf_name(s->a)));
		json_object_set_new(j, "to", json_string(nf_name(s->b)));
		break;
	case TR_FUSED:
		what = "fused";
		snprintf(text, sizeof(text), "%s -> %s (by calls in one group process, each member's next)",
			 nf_name(s->a), nf_name(s->b));
		json_object_set_new(j, "from", json_string(nf_name(s->a)));
		json_object_set_new(j, "to", json_string(nf_name(s->b)));
		break;
	case TR_DROP:
		what = "drop";
		snprintf(text, sizeof(text), "%s", s->a < 10 ? drop_names[s->a] : "?");
		json_object_set_new(j, "reason", json_string(s->a < 10 ? drop_names[s->a] : "?"));
		break;
	}
	json_object_set_new(j, "step", json_string(what));
	json_object_set_new(j, "text", json_string(text));
	return j;
}

static json_t *j_trace(void)
{
	json_t *pkts = json_array();
	uint32_t n = trace_marked();
	for (uint32_t i = 0; i < n; i++) {
		const struct trace_pkt *p = &tr.pkt[i];
		char hex[2 * sizeof(p->head) + 1];
		uint32_t h = p->len < sizeof(p->head) ? p->len : (uint32_t)sizeof(p->head);
		for (uint32_t k = 0; k < h; k++)
			snprintf(hex + 2 * k, 3, "%02x", p->head[k]);
		hex[2 * h] = 0;
		json_t *steps = json_array();
		uint64_t t0 = p->nsteps ? p->step[0].tsc : 0;
		for (uint32_t k = 0; k < p->nsteps; k++)
			json_array_append_new(steps, j_step(&p->step[k], t0));
		json_array_append_new(pkts, json_pack("{s:I,s:s,s:b,s:I,s:o}", "len", (json_int_t)p->len, "head", hex,
						      "done", p->done, "t_ns", (json_int_t)((double)(t0 - started_tsc) * 1e9 / (double)M.tsc_hz),
						      "steps", steps));
	}
	return json_pack("{s:s,s:I,s:I,s:o}", "filter", filter_text, "want", (json_int_t)tr.want, "marked",
			 (json_int_t)n, "packets", pkts);
}

static void disarm(void)
{
	__atomic_store_n(&trace_on, false, __ATOMIC_RELEASE);
	worker_sync_all(); /* no worker is in a hook after this: the log is still */
	json_decref(last);
	last = j_trace();
	if (tr.bpf)
		rte_bpf_destroy(tr.bpf);
	tr.bpf = NULL;
	owner = -1;
}

json_t *trace_start(json_t *req, int conn, char *err, size_t errlen)
{
	if (conn < 0) {
		snprintf(err, errlen, "trace_start: only on a control connection (it ends with it)");
		return NULL;
	}
	if (trace_on) {
		snprintf(err, errlen, "trace_start: a trace is running already (one at a time)");
		return NULL;
	}
	json_t *port = json_object_get(req, "port"), *filter = json_object_get(req, "filter");
	json_t *count = json_object_get(req, "count");
	int32_t pi = -1;
	if (port && !json_is_null(port)) {
		if (!json_is_string(port) || (pi = port_lookup(json_string_value(port))) < 0 || !M.ports[pi].live) {
			snprintf(err, errlen, "trace_start: field 'port': no port named '%.64s'",
				 json_is_string(port) ? json_string_value(port) : "(not a string)");
			return NULL;
		}
	}
	if (count && (!json_is_integer(count) || json_integer_value(count) < 1 ||
		      json_integer_value(count) > TRACE_PKTS_MAX)) {
		snprintf(err, errlen, "trace_start: field 'count': an integer 1..%u", TRACE_PKTS_MAX);
		return NULL;
	}
	if (filter && !json_is_string(filter)) {
		snprintf(err, errlen, "trace_start: field 'filter': not a string");
		return NULL;
	}
	memset(&tr, 0, sizeof(tr));
	filter_text[0] = 0;
	if (filter && json_string_value(filter)[0]) {
		if (filter_compile(json_string_value(filter), 65535, &tr.bpf, &tr.jit, err, errlen) < 0)
			return NULL;
		snprintf(filter_text, sizeof(filter_text), "%s", json_string_value(filter));
	}
	tr.port = pi;
	tr.want = count ? (uint32_t)json_integer_value(count) : 1;
	owner = conn;
	started_tsc = rte_rdtsc();
	__atomic_store_n(&trace_on, true, __ATOMIC_RELEASE);
	LOG("trace: armed for %u packet(s)%s%s", tr.want, filter_text[0] ? ", filter " : "", filter_text);
	return json_pack("{s:b,s:I}", "ok", 1, "want", (json_int_t)tr.want);
}

json_t *trace_get(void)
{
	uint32_t n = trace_marked(), done = 0;
	for (uint32_t i = 0; i < n; i++)
		done += __atomic_load_n(&tr.pkt[i].done, __ATOMIC_ACQUIRE);
	return json_pack("{s:b,s:b,s:I,s:I,s:I}", "ok", 1, "armed", trace_on, "want", (json_int_t)tr.want, "marked",
			 (json_int_t)n, "done", (json_int_t)done);
}

json_t *trace_stop(int conn, char *err, size_t errlen)
{
	if (!trace_on) {
		snprintf(err, errlen, "trace_stop: no trace is running");
		return NULL;
	}
	if (conn != owner) {
		snprintf(err, errlen, "trace_stop: the trace belongs to another connection");
		return NULL;
	}
	disarm();
	return json_pack("{s:b,s:O}", "ok", 1, "trace", last);
}

json_t *trace_last(void)
{
	return json_pack("{s:b,s:O?}", "ok", 1, "trace", last);
}

void trace_conn_closed(int conn)
{
	if (trace_on && conn == owner)
		disarm();
}
