"""Ports: traffic, drops by reason, link state, the device's own counters, per-queue counters, xstats."""

from .registry import collector

TRAFFIC = (("rx_pkts", "sluice_port_rx_packets_total", "packets sluiced received on the port"),
           ("rx_bytes", "sluice_port_rx_bytes_total", "bytes sluiced received on the port"),
           ("tx_pkts", "sluice_port_tx_packets_total", "packets sluiced sent on the port"),
           ("tx_bytes", "sluice_port_tx_bytes_total", "bytes sluiced sent on the port"),
           ("rx_csum_bad", "sluice_port_rx_checksum_bad_total", "packets the device flagged with a bad checksum"),
           ("rx_copied", "sluice_port_rx_copied_total", "packets received into the port's own pool and copied "
                                                        "into the region (af_xdp)"),
           ("tx_copied", "sluice_port_tx_copied_total", "packets copied into the PCI port's own pool to be sent"),
           ("malformed", "sluice_port_rx_malformed_total", "received frames too short or inconsistent to parse"))
DEVICE = (("ipackets", "sluice_port_device_rx_packets_total", "packets the device (PMD) received"),
          ("imissed", "sluice_port_device_rx_missed_total", "packets the device dropped before sluiced saw them "
                                                            "(its RX queue was full)"),
          ("ierrors", "sluice_port_device_rx_errors_total", "erroneous packets the device received"),
          ("oerrors", "sluice_port_device_tx_errors_total", "packets the device failed to send"))


@collector("ports")
def collect(ex, stats, status):
    for p in stats.get("ports") or []:
        port = p.get("name")
        ex.gauge("sluice_port_info", "1 per port: its device (vdev or PCI address), ingress chain and state",
                 1, port=port, vdev=p.get("vdev") or "", chain=p.get("chain") or "", state=p.get("state") or "live")
        link = p.get("link") or {}
        ex.gauge("sluice_port_link_up", "1 if the port's link is up", 1 if link.get("up") else 0, port=port)
        if link.get("speed_mbps") is not None:
            ex.gauge("sluice_port_link_speed_mbps", "the link's speed as the device reports it, in Mb/s",
                     link["speed_mbps"], port=port)
        if p.get("mtu") is not None:
            ex.gauge("sluice_port_mtu_bytes", "the port's MTU", p["mtu"], port=port)
        if p.get("polled") is not None:
            ex.gauge("sluice_port_polled", "1 if a worker polls the port (it has an ingress chain or rules)",
                     1 if p["polled"] else 0, port=port)
        for key, name, help_ in TRAFFIC:
            if p.get(key) is not None:
                ex.counter(name, help_, p[key], port=port)
        for reason, v in (p.get("drops") or {}).items():
            ex.counter("sluice_port_drops_total", "packets sluiced dropped at the port, by reason (docs/api.md)",
                       v, port=port, reason=reason)
        dev = p.get("device") or {}
        for key, name, help_ in DEVICE:
            if key in dev:
                ex.counter(name, help_, dev[key], port=port)
        for q in p.get("queues") or []:
            lab = dict(port=port, queue=str(q.get("queue")), worker=str(q.get("worker")))
            ex.counter("sluice_port_rx_queue_packets_total", "packets received on the RX queue", q.get("rx_pkts"), **lab)
            ex.counter("sluice_port_rx_queue_bytes_total", "bytes received on the RX queue", q.get("rx_bytes"), **lab)
            if "device_ipackets" in q:
                ex.counter("sluice_port_rx_queue_device_packets_total", "the device's own count for the RX queue",
                           q["device_ipackets"], **lab)
        for q in p.get("tx_queues") or []:
            lab = dict(port=port, queue=str(q.get("queue")), worker=str(q.get("worker")))
            ex.counter("sluice_port_tx_queue_packets_total", "packets sent on the TX queue", q.get("tx_pkts"), **lab)
            ex.counter("sluice_port_tx_queue_bytes_total", "bytes sent on the TX queue", q.get("tx_bytes"), **lab)
        for xname, v in (p.get("xstats") or {}).items():
            ex.untyped("sluice_port_xstat", "the PMD's extended statistics (rte_eth_xstats), nonzero ones, by name",
                       v, port=port, xstat=xname)
