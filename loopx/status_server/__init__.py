"""The status server: the dashboard and a read-only JSON API over the status projection.

Read-only by construction: every registry it uses is opened with ``readonly=True`` (SQLite
``mode=ro``, so the engine itself refuses writes) and it answers only GET and HEAD (405 with
``Allow`` otherwise). It binds loopback by default; binding anything else needs a token, and
then every request must carry it (``Authorization: Bearer T``, or HTTP Basic auth with the
token as password so a browser can prompt for it). Without a token only loopback ``Host``
names are answered, which defeats DNS-rebinding pages. No CORS headers are ever sent.

Routes::

    GET /                              the dashboard (assets under /assets/NAME)
    GET /healthz                       {"ok": true, "revision": N, ...}
    GET /api/status?limit=&cursor=&all=   the overview (attention first, paged)
    GET /api/goals?limit=&cursor=&all=    the overview's goal list and page
    GET /api/goals/{id}                one goal in full
    GET /api/goals/{id}/events?after=N&limit=   the goal's ledger after seq N
    GET /api/goals/{id}/artifacts/{name}   an artifact its evidence recorded, as text, only while its
                                       sha256 matches (409 ``artifact_tampered`` otherwise)
    GET /api/stream                    server-sent events: ``revision`` whenever the registry changes
    GET /api/pages                     pages capabilities serve for this registry (loopx.ledger.served_pages)

The standard library's ``ThreadingHTTPServer`` is enough here: the API is a few small JSON
documents per page view, and it meets the throughput and latency targets (see
``bench/bench_status.py``) without adding a dependency to a tool that runs everywhere.

The package, one module for each part of a request's way through it::

    server.py     the listening socket, its settings, the pooled read-only registries
    handler.py    one connection: deadlines, GET/HEAD only, then routes.route
    access.py     who is answered: loopback Host names, or the token
    routes.py     the URL table above
    views.py      the dashboard's files and the cached JSON views
    stream.py     /api/stream and the one watcher that notices commits
    responses.py  headers, JSON bodies and errors, as every answer writes them
"""

from __future__ import annotations

from loopx.status_server.server import StatusServer, make_server
from loopx.status_server.views import ViewCache

__all__ = ["StatusServer", "ViewCache", "make_server"]
