"""The socket service (sluice-stackd, docs/sockets.md): its programs, their sockets, bytes, calls and
rate limits -- from stackd's own `stats` on stack-ctl.sock, when the deployment runs one."""

from .registry import collector


@collector("sockets", needs_sluiced=False)
def collect(ex, stats, status):
    st = stats.get("_stack")
    if st is None:
        return  # no socket service in this socket dir
    ex.gauge("sluice_stack_programs", "programs connected to the socket service", st.get("apps_total",
             len(st.get("apps") or [])))
    ex.gauge("sluice_stack_sockets", "sockets the socket service holds", st.get("sockets", 0))
    for a in st.get("apps") or []:
        lab = dict(program=a.get("name") or "", pids=",".join(str(p) for p in a.get("pids") or []),
                   stack=a.get("stack") or "")
        ex.gauge("sluice_stack_program_sockets", "the program's sockets", a.get("sockets"), **lab)
        ex.counter("sluice_stack_program_tx_bytes_total", "bytes the program sent", a.get("tx_bytes"), **lab)
        ex.counter("sluice_stack_program_rx_bytes_total", "bytes the program received", a.get("rx_bytes"), **lab)
        ex.counter("sluice_stack_program_throttled_total", "times the program's rate limit held it back",
                   a.get("throttled"), **lab)
        ex.counter("sluice_stack_program_calls_total", "socket calls the program made through the shim",
                   a.get("calls"), **lab)
        for kind in ("kernel", "shm", "user"):
            ex.counter("sluice_stack_program_connections_total", "connections the program made, by stack module",
                       a.get(f"conns_{kind}"), module=kind, **lab)
        if a.get("rate_bps"):
            ex.gauge("sluice_stack_program_rate_limit_bits_per_second", "the program's rate limit",
                     a["rate_bps"], **lab)
