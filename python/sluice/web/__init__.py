"""The web view (`sluice web`, docs/observability.md "Web view"): a page on loopback that draws the
deployment -- ports, chains of services and their replicas, trust domains, groups -- with live rates and
drops on the edges and CPU per NF, updated every second, and the latest packet trace.

    state.py   samples `stats`/`status` once a second; the view with rates from the last two samples
    server.py  the HTTP server: the page (static/, plain HTML, CSS and JavaScript: no CDN, no build
               step, works offline), /api/state and /api/trace

Like the exporter, it only reads sluiced's control API (the control thread's answers, never a worker).
"""
