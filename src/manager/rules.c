/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The rule list (control thread): load from the config, add, delete, replace.
 * Every change builds a new classifier from the whole list and swaps it into
 * the worker between bursts; a rule's hit counter is freed only after the
 * classifier that counts into it has been swapped out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluiced.h"

/* Build a classifier for rules[0..n) and hand it to the worker. 0, or -1 with err (nothing changed). */
static int publish(const struct rule *rules, unsigned n, struct steer_action malformed, char *err, size_t errlen)
{
	struct steer *s = steer_build(rules, n, malformed, err, errlen);
	if (!s)
		return -1;
	struct wcmd c = { .type = WCMD_STEER_SET, .steer = s };
	worker_call(&c);
	steer_free(c.steer);
	return 0;
}

static void release_all(struct rule *rules, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		rule_release(&rules[i]);
	free(rules);
}

/* Parse a JSON list of rules into a new array with fresh ids. */
static struct rule *parse_list(json_t *list, const char *what, unsigned *n, char *err, size_t errlen)
{
	size_t cnt = list ? json_array_size(list) : 0, i;
	if (cnt > SL_MAX_RULES) {
		snprintf(err, errlen, "%s: %zu rules, at most %d", what, cnt, SL_MAX_RULES);
		return NULL;
	}
	struct rule *rules = calloc(cnt + 1, sizeof(*rules));
	if (!rules) {
		snprintf(err, errlen, "%s: out of memory", what);
		return NULL;
	}
	json_t *v;
	char path[64];
	*n = 0;
	json_array_foreach(list, i, v) {
		snprintf(path, sizeof(path), "%s[%zu]", what, i);
		if (rule_parse(v, path, &rules[i], err, errlen) < 0) {
			release_all(rules, (unsigned)i);
			return NULL;
		}
		rules[i].id = M.next_rule_id + (uint32_t)i;
	}
	*n = (unsigned)cnt;
	return rules;
}

int rules_load(json_t *list, json_t *malformed, char *err, size_t errlen)
{
	M.next_rule_id = 1;
	M.malformed = (struct steer_action){ .kind = STEER_DROP };
	if (malformed && steer_action_parse(malformed, "steering.malformed", &M.malformed, err, errlen) < 0)
		return -1;
	return rules_set(list, err, errlen);
}

void rules_unload(void)
{
	steer_free(M.steer); /* the worker has stopped */
	M.steer = NULL;
	release_all(M.rules, M.nrules);
	M.rules = NULL;
	M.nrules = 0;
}

int rules_set(json_t *list, char *err, size_t errlen)
{
	unsigned n;
	struct rule *rules = parse_list(list, "rules", &n, err, errlen);
	if (!rules)
		return -1;
	if (publish(rules, n, M.malformed, err, errlen) < 0) {
		release_all(rules, n);
		return -1;
	}
	release_all(M.rules, M.nrules);
	M.rules = rules;
	M.nrules = n;
	M.next_rule_id += n;
	return 0;
}

int rules_add(json_t *j, char *err, size_t errlen)
{
	if (M.nrules >= SL_MAX_RULES) {
		snprintf(err, errlen, "rule: already %d rules, the most sluiced keeps", SL_MAX_RULES);
		return -1;
	}
	struct rule r;
	if (rule_parse(j, "rule", &r, err, errlen) < 0)
		return -1;
	r.id = M.next_rule_id;
	struct rule *grown = realloc(M.rules, (M.nrules + 1) * sizeof(*grown));
	if (!grown) {
		rule_release(&r);
		snprintf(err, errlen, "rule: out of memory");
		return -1;
	}
	M.rules = grown;
	M.rules[M.nrules] = r;
	if (publish(M.rules, M.nrules + 1, M.malformed, err, errlen) < 0) {
		rule_release(&M.rules[M.nrules]);
		return -1;
	}
	M.nrules++;
	M.next_rule_id++;
	return (int)(M.nrules - 1);
}

int rules_del(uint32_t id, char *err, size_t errlen)
{
	unsigned at = M.nrules;
	for (unsigned i = 0; i < M.nrules; i++)
		if (M.rules[i].id == id)
			at = i;
	if (at == M.nrules) {
		snprintf(err, errlen, "id: no rule %u", id);
		return -1;
	}
	struct rule gone = M.rules[at];
	memmove(&M.rules[at], &M.rules[at + 1], (M.nrules - at - 1) * sizeof(*M.rules));
	M.nrules--;
	if (publish(M.rules, M.nrules, M.malformed, err, errlen) < 0) {
		memmove(&M.rules[at + 1], &M.rules[at], (M.nrules - at) * sizeof(*M.rules));
		M.rules[at] = gone;
		M.nrules++;
		return -1;
	}
	rule_release(&gone); /* the classifier that counted into its hits is gone */
	return 0;
}
