"""Services (replica sets) and chains."""

from .registry import collector


@collector("services")
def collect(ex, stats, status):
    for s in stats.get("services") or []:
        svc = s.get("name")
        ex.gauge("sluice_service_info", "1 per service: its replica policy", 1, service=svc,
                 policy=s.get("policy") or "")
        ex.gauge("sluice_service_instances", "NFs serving the service now", len(s.get("instances") or []),
                 service=svc)
        ex.gauge("sluice_service_saturated", "1 while every instance of the service is overloaded (backpressure)",
                 1 if s.get("saturated") else 0, service=svc)
        for reason, v in (s.get("drops") or {}).items():
            ex.counter("sluice_service_drops_total", "packets for the service dropped, by reason", v, service=svc,
                       reason=reason)
    for c in stats.get("chains") or []:
        ex.gauge("sluice_chain_info", "1 per chain: its services in order and its exit port", 1,
                 chain=c.get("name"), nfs=",".join(c.get("nfs") or []), exit=c.get("exit") or "")
        ex.gauge("sluice_chain_length", "services in the chain", len(c.get("nfs") or []), chain=c.get("name"))
