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
	for (unsigned i = 0; i < M.nports; i++)
		if (!strcmp(M.ports[i].name, name))
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
	free(r);
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
	M.route = route_build(M.cfg.chains, M.cfg.nchains, NULL, err, errlen);
	if (!M.route)
		return -1;
	for (unsigned i = 0; i < M.nports; i++)
		for (unsigned k = 0; M.cfg.ports[i].chain[0] && k < M.route->nchains; k++)
			if (!strcmp(M.route->chains[k].name, M.cfg.ports[i].chain))
				M.route->port_chain[i] = (int32_t)k;
	return 0;
}

void registry_fini(void)
{
	route_free(M.route);
	M.route = NULL;
	free(M.services);
	M.services = NULL;
	M.nservices = M.max_services = 0;
}
