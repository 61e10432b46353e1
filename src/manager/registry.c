/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The registry: sluiced's names for ports, services and chains, and the route
 * (chains + each port's ingress chain) the worker reads. The control thread
 * builds and replaces it; the worker only reads a published route, swapped in
 * between bursts (WCMD_ROUTE_SET), and the service table, which only grows.
 *
 * Set-up: registry_init (after the ports are open: a chain's exit names a port);
 * teardown: registry_fini (after the worker stopped).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluiced.h"

int service_lookup(const char *name)
{
	for (uint32_t i = 0; i < M.nservices; i++)
		if (!strcmp(M.services[i].name, name))
			return (int)i;
	return -1;
}

/* Services are only ever added (ids stay stable); the worker reads the count. */
int service_get_or_create(const char *name)
{
	int s = service_lookup(name);
	if (s >= 0)
		return s;
	if (M.nservices >= M.max_services)
		return -1;
	struct service *sv = &M.services[M.nservices];
	memset(sv, 0, sizeof(*sv));
	snprintf(sv->name, sizeof(sv->name), "%s", name);
	__atomic_store_n(&M.nservices, M.nservices + 1, __ATOMIC_RELEASE);
	return (int)(M.nservices - 1);
}

int port_lookup(const char *name)
{
	for (unsigned i = 0; i < M.nports; i++) /* a deleted port's id (a hole) is no port; an unplugged one is */
		if ((M.ports[i].live || M.ports[i].gone) && !strcmp(M.ports[i].name, name))
			return (int)i;
	return -1;
}

void route_free(struct route *r)
{
	if (!r)
		return;
	for (unsigned i = 0; i < r->nchains; i++)
		free(r->chains[i].svc);
	free(r->chains);
	free(r->auth);
	free(r->auth_bits);
	free(r);
}

/* Where each declared service with a may_send may send (docs/abi.md "Next hops"): the services after
 * it in every chain of r that contains it, those chains' exits and ingress ports, and what its
 * may_send names. Services without may_send, and services created later, may send anywhere. */
static int route_auth(struct route *r, char *err, size_t errlen)
{
	unsigned nres = 0;
	for (unsigned i = 0; i < M.cfg.nservices; i++)
		nres += M.cfg.auth && !M.cfg.auth[i].may_any;
	if (nres == 0)
		return 0;
	for (unsigned i = 0; i < M.cfg.nservices; i++) /* the services a may_send names exist from now on */
		for (unsigned k = 0; !M.cfg.auth[i].may_any && k < M.cfg.auth[i].nsvc; k++)
			if (service_get_or_create(M.cfg.auth[i].svc[k]) < 0) {
				snprintf(err, errlen, "nfs[%u].may_send.services[%u]: too many services", i, k);
				return -1;
			}
	uint32_t n = M.nservices, words = (n + 63) / 64;
	r->auth = calloc(n, sizeof(*r->auth));
	r->auth_bits = calloc((size_t)nres * words + 1, sizeof(uint64_t));
	if (!r->auth || !r->auth_bits) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	r->nauth = n;
	for (uint32_t s = 0; s < n; s++)
		r->auth[s].any = true;
	uint64_t *bits = r->auth_bits;
	for (unsigned i = 0; i < M.cfg.nservices; i++) {
		const struct cfg_auth *ca = &M.cfg.auth[i];
		int sid = service_lookup(M.cfg.services[i]);
		if (ca->may_any || sid < 0)
			continue;
		struct sl_dest_auth *a = &r->auth[sid];
		a->any = false;
		a->nsvc = n;
		a->svc = bits;
		a->ports = ca->ports;
		for (unsigned k = 0; k < ca->nsvc; k++) {
			int t = service_lookup(ca->svc[k]);
			bits[t / 64] |= 1ull << (t % 64);
		}
		for (unsigned c = 0; c < r->nchains; c++) {
			const struct chain *ch = &r->chains[c];
			bool in = false;
			for (unsigned h = 0; h < ch->len; h++) {
				if (in)
					bits[ch->svc[h] / 64] |= 1ull << (ch->svc[h] % 64);
				in |= ch->svc[h] == sid;
			}
			if (!in)
				continue;
			if (ch->exit >= 0)
				a->ports |= 1ull << ch->exit;
			for (unsigned p = 0; p < SL_MAX_PORTS; p++)
				if (r->port_chain[p] == (int32_t)c)
					a->ports |= 1ull << p;
		}
		bits += words;
	}
	return 0;
}

struct route *route_build(const struct cfg_chain *specs, unsigned n, const int32_t *port_chain, char *err,
			  size_t errlen)
{
	struct route *r = calloc(1, sizeof(*r));
	if (!r || !(r->chains = calloc(n + 1, sizeof(*r->chains)))) {
		snprintf(err, errlen, "out of memory");
		free(r);
		return NULL;
	}
	for (unsigned i = 0; i < SL_MAX_PORTS; i++)
		r->port_chain[i] = port_chain ? port_chain[i] : -1;
	for (unsigned i = 0; i < n; i++) {
		struct chain *c = &r->chains[i];
		const struct cfg_chain *s = &specs[i];
		snprintf(c->name, sizeof(c->name), "%s", s->name);
		c->exit = s->exit[0] ? port_lookup(s->exit) : -1;
		if (s->exit[0] && c->exit < 0) {
			snprintf(err, errlen, "chains[%u].exit: unknown port '%s'", i, s->exit);
			goto fail;
		}
		c->svc = calloc(s->nsvc, sizeof(*c->svc));
		r->nchains = (uint16_t)(i + 1);
		for (unsigned k = 0; k < s->nsvc; k++) {
			int id = service_get_or_create(s->svc[k]);
			if (id < 0) {
				snprintf(err, errlen, "chains[%u].nfs[%u]: too many services", i, k);
				goto fail;
			}
			c->svc[k] = (uint16_t)id;
		}
		c->len = (uint16_t)s->nsvc;
	}
	if (route_auth(r, err, errlen) < 0)
		goto fail;
	return r;
fail:
	route_free(r);
	return NULL;
}

int registry_init(char *err, size_t errlen)
{
	M.max_services = M.max_nfs + 256;
	M.services = calloc(M.max_services, sizeof(*M.services));
	if (!M.services) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (unsigned i = 0; i < M.cfg.nservices; i++) {
		int s = service_get_or_create(M.cfg.services[i]);
		if (s >= 0)
			M.services[s].policy = M.cfg.service_policy[i];
	}
	int32_t port_chain[SL_MAX_PORTS]; /* route chain k is cfg chain k (route_auth needs the ingress map) */
	for (unsigned i = 0; i < SL_MAX_PORTS; i++)
		port_chain[i] = -1;
	for (unsigned i = 0; i < M.nports; i++)
		for (unsigned k = 0; M.cfg.ports[i].chain[0] && k < M.cfg.nchains; k++)
			if (!strcmp(M.cfg.chains[k].name, M.cfg.ports[i].chain))
				port_chain[i] = (int32_t)k;
	M.route = route_build(M.cfg.chains, M.cfg.nchains, port_chain, err, errlen);
	return M.route ? 0 : -1;
}

void registry_fini(void)
{
	route_free(M.route);
	M.route = NULL;
	free(M.services);
	M.services = NULL;
	M.nservices = M.max_services = 0;
}
