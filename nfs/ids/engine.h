/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The IDS's matcher: every content and pcre of every rule goes into one Hyperscan block-mode
 * database (one compile, however many rules), each pattern with HS_FLAG_SINGLEMATCH so it reports at
 * most once per packet. content offset/depth become hs_expr_ext min_offset/max_offset on the match's
 * END offset (a literal of n bytes starts at >= offset iff it ends at >= offset + n), so no
 * start-of-match tracking (HS_FLAG_SOM_LEFTMOST) is needed. A rule is a candidate once all its
 * patterns reported (a counter per rule, reset by a generation number rather than a memset per
 * packet); then its header (protocol, addresses, ports) is checked. Rules without any pattern are
 * checked on every packet. DPDK-free; unit-tested in tests/unit/test_ids.c.
 */
#ifndef SLUICE_NFS_IDS_ENGINE_H
#define SLUICE_NFS_IDS_ENGINE_H

#include <hs/hs.h>
#include <time.h>

#include "rules.h"

#define IDS_MATCH_MAX 64 /* matched rules reported per packet; more are counted in `more` */

struct ids_engine {
	hs_database_t *db;         /* NULL when no rule has a pattern */
	hs_scratch_t *scratch;
	const struct ids_ruleset *rs;
	uint32_t *gen;             /* per rule: the packet generation its count belongs to */
	uint8_t *cnt;              /* per rule: its patterns that matched in this generation */
	uint32_t cur;
	uint32_t *cand;            /* rules whose patterns all matched (at most every rule once) */
	uint32_t ncand;
	uint32_t *nopat;           /* rules without patterns */
	uint32_t nnopat;
	double compile_ms;
	size_t db_bytes;
};

struct ids_result {
	uint8_t verdict;   /* IDS_ALERT (nothing or alerts only: forward), IDS_DROP, IDS_PASS */
	uint32_t n;        /* rules in `rule`, ascending file order: with IDS_PASS the pass rules, otherwise
	                    * the matching alert and drop rules */
	uint32_t more;     /* matching rules beyond IDS_MATCH_MAX */
	uint32_t rule[IDS_MATCH_MAX];
};

static inline void ids_engine_free(struct ids_engine *e)
{
	if (e->scratch)
		hs_free_scratch(e->scratch);
	if (e->db)
		hs_free_database(e->db);
	free(e->gen);
	free(e->cnt);
	free(e->cand);
	free(e->nopat);
	memset(e, 0, sizeof(*e));
}

/* The Hyperscan expression of a content: alphanumerics as themselves (so HS_FLAG_CASELESS
 * applies to them), every other byte as \xHH. */
static inline char *ids_content_expr(const struct ids_pat *p)
{
	char *x = malloc((size_t)p->len * 4 + 1), *w = x;
	if (x == NULL)
		return NULL;
	for (uint32_t i = 0; i < p->len; i++) {
		uint8_t c = (uint8_t)p->s[i];
		if (isalnum(c))
			*w++ = (char)c;
		else
			w += sprintf(w, "\\x%02x", c);
	}
	*w = '\0';
	return x;
}

/* Compile the rule set's patterns. Returns 0, or -1 with "file:line: content|pcre: ..." in err. */
static inline int ids_engine_build(struct ids_engine *e, const struct ids_ruleset *rs, const char *file,
				   char *err, size_t errlen)
{
	memset(e, 0, sizeof(*e));
	e->rs = rs;
	unsigned nr = rs->n ? rs->n : 1, np = rs->np;
	e->gen = calloc(nr, sizeof(*e->gen));
	e->cnt = calloc(nr, sizeof(*e->cnt));
	e->cand = calloc(nr, sizeof(*e->cand));
	e->nopat = calloc(nr, sizeof(*e->nopat));
	if (!e->gen || !e->cnt || !e->cand || !e->nopat) {
		ids_engine_free(e);
		return conf_err(err, errlen, "%s: out of memory for %u rules", file, rs->n);
	}
	for (unsigned i = 0; i < rs->n; i++)
		if (rs->r[i].npat == 0)
			e->nopat[e->nnopat++] = i;
	if (np == 0)
		return 0;

	char **expr = calloc(np, sizeof(*expr));
	unsigned *flags = calloc(np, sizeof(*flags)), *ids = calloc(np, sizeof(*ids));
	hs_expr_ext_t *ext = calloc(np, sizeof(*ext));
	const hs_expr_ext_t **extp = calloc(np, sizeof(*extp));
	int rc = -1;
	if (!expr || !flags || !ids || !ext || !extp) {
		conf_err(err, errlen, "%s: out of memory for %u patterns", file, np);
		goto out;
	}
	for (unsigned i = 0; i < np; i++) {
		const struct ids_pat *p = &rs->p[i];
		ids[i] = i;
		flags[i] = HS_FLAG_SINGLEMATCH | (p->nocase ? HS_FLAG_CASELESS : 0);
		if (p->kind == IDS_PAT_CONTENT) {
			expr[i] = ids_content_expr(p);
			if (p->has_offset && p->offset > 0) {
				ext[i].flags |= HS_EXT_FLAG_MIN_OFFSET;
				ext[i].min_offset = (unsigned long long)p->offset + p->len;
			}
			if (p->has_depth) {
				ext[i].flags |= HS_EXT_FLAG_MAX_OFFSET;
				ext[i].max_offset = (unsigned long long)p->offset + p->depth;
			}
		} else {
			expr[i] = strdup(p->s);
			/* PCRE matches /a* / on any payload (an empty match): so does Hyperscan with ALLOWEMPTY */
			flags[i] |= HS_FLAG_ALLOWEMPTY | (p->dotall ? HS_FLAG_DOTALL : 0) |
				    (p->multiline ? HS_FLAG_MULTILINE : 0);
		}
		if (expr[i] == NULL) {
			conf_err(err, errlen, "%s: out of memory", file);
			goto out;
		}
		extp[i] = ext[i].flags ? &ext[i] : NULL;
	}
	hs_compile_error_t *ce = NULL;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (hs_compile_ext_multi((const char *const *)expr, flags, ids, extp, np, HS_MODE_BLOCK, NULL, &e->db,
				 &ce) != HS_SUCCESS) {
		if (ce && ce->expression >= 0 && (unsigned)ce->expression < np) {
			const struct ids_pat *p = &rs->p[ce->expression];
			conf_err(err, errlen, "%s:%d: %s: rejected by Hyperscan: %s", file, rs->r[p->rule].line,
				p->kind == IDS_PAT_PCRE ? "pcre" : "content", ce->message);
		} else {
			conf_err(err, errlen, "%s: Hyperscan compile failed: %s", file, ce ? ce->message : "?");
		}
		hs_free_compile_error(ce);
		e->db = NULL;
		goto out;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	e->compile_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	hs_database_size(e->db, &e->db_bytes);
	if (hs_alloc_scratch(e->db, &e->scratch) != HS_SUCCESS) {
		conf_err(err, errlen, "%s: cannot allocate Hyperscan scratch space", file);
		goto out;
	}
	rc = 0;
out:
	if (expr)
		for (unsigned i = 0; i < np; i++)
			free(expr[i]);
	free(expr);
	free(flags);
	free(ids);
	free(ext);
	free(extp);
	if (rc < 0)
		ids_engine_free(e);
	return rc;
}

static int ids_on_match(unsigned int id, unsigned long long from, unsigned long long to, unsigned int fl,
			void *ctx)
{
	struct ids_engine *e = ctx;
	(void)from;
	(void)to;
	(void)fl;
	uint32_t r = e->rs->p[id].rule;
	if (e->gen[r] != e->cur) {
		e->gen[r] = e->cur;
		e->cnt[r] = 0;
	}
	/* SINGLEMATCH: each pattern reports once, so the count reaches npat exactly once */
	if (++e->cnt[r] == e->rs->r[r].npat)
		e->cand[e->ncand++] = r;
	return 0;
}

/* Judge one parsed packet whose payload is pay[0..len). Precedence as Suricata's default
 * action-order: a matching pass rule wins (no alert, no drop), then drop, then alert. Returns 0,
 * or -1 if Hyperscan failed to scan (the packet is then judged on pattern-free rules only). */
static inline int ids_engine_match(struct ids_engine *e, const struct ids_pkt *k, const uint8_t *pay,
				   uint32_t len, struct ids_result *res)
{
	const struct ids_ruleset *rs = e->rs;
	int rc = 0;
	if (++e->cur == 0) { /* wrapped after 4G packets: forget every stale count once */
		memset(e->gen, 0, rs->n * sizeof(*e->gen));
		e->cur = 1;
	}
	e->ncand = 0;
	if (e->db && len > 0 &&
	    hs_scan(e->db, (const char *)pay, len, 0, e->scratch, ids_on_match, e) != HS_SUCCESS)
		rc = -1;
	uint32_t have[3] = { 0, 0, 0 };
	res->n = 0;
	res->more = 0;
	/* pass 1: which actions matched at all */
	for (int pass = 0; pass < 2; pass++) {
		const uint32_t *list = pass ? e->nopat : e->cand;
		uint32_t n = pass ? e->nnopat : e->ncand;
		for (uint32_t i = 0; i < n; i++) {
			const struct ids_rule *r = &rs->r[list[i]];
			if (ids_rule_hdr_match(r, k))
				have[r->action]++;
			else
				((uint32_t *)list)[i] |= 0x80000000u; /* remember the header mismatch */
		}
	}
	res->verdict = have[IDS_PASS] ? IDS_PASS : have[IDS_DROP] ? IDS_DROP : IDS_ALERT;
	/* pass 2: collect the rules to report, in file order */
	for (int pass = 0; pass < 2; pass++) {
		uint32_t *list = pass ? e->nopat : e->cand;
		uint32_t n = pass ? e->nnopat : e->ncand;
		for (uint32_t i = 0; i < n; i++) {
			uint32_t ri = list[i];
			if (ri & 0x80000000u) {
				list[i] = ri & 0x7fffffffu;
				continue;
			}
			uint8_t a = rs->r[ri].action;
			if ((res->verdict == IDS_PASS) != (a == IDS_PASS))
				continue;
			if (res->n == IDS_MATCH_MAX) {
				res->more++;
				continue;
			}
			uint32_t j = res->n++;
			while (j > 0 && res->rule[j - 1] > ri) {
				res->rule[j] = res->rule[j - 1];
				j--;
			}
			res->rule[j] = ri;
		}
	}
	return rc;
}

#endif /* SLUICE_NFS_IDS_ENGINE_H */
