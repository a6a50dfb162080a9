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
    GET /api/stream                    server-sent events: ``revision`` whenever the registry changes

The standard library's ``ThreadingHTTPServer`` is enough here: the API is a few small JSON
documents per page view, and it meets the throughput and latency targets (see
``bench/bench_status.py``) without adding a dependency to a tool that runs everywhere.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import json
import queue
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from loopx import status as projection
from loopx.errors import LoopxError
from loopx.jsonsafe import dumps_out
from loopx.validate import check_id

ASSETS = Path(__file__).with_name("dashboard")
ALLOW = "GET, HEAD"
POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0
MAX_IDLE_CONNECTIONS = 16
CACHE_SECONDS = 1.0
CACHE_BYTES = 32 << 20  # encoded views kept at most (LOOPX_STATUS_CACHE_BYTES)
FLIGHT_WAIT_SECONDS = 30.0
#: A connection must deliver a request's line and headers within this many seconds of starting
#: to wait for it (keep-alive idle time included): slow or idle clients cannot hold threads.
HEAD_SECONDS = 20.0
#: A socket read or write that makes no progress for this long ends the connection.
IO_SECONDS = 60.0
#: At most this many ``/api/stream`` subscribers at once; more get 503 ``too_many_streams``.
MAX_STREAMS = 64
JSON_TYPE = "application/json; charset=utf-8"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}
ERROR_STATUS = {"goal_not_found": 404, "not_found": 404, "invalid_argument": 400, "registry_unavailable": 503,
                "schema_too_new": 503, "registry_newer": 503, "registry_corrupt": 503, "registry_invalid": 503,
                "registry_not_found": 503}
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none';"
                               " frame-ancestors 'none'; form-action 'none'",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    if host.lower() in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class RegistryPool:
    """Read-only registries shared by request threads: one per thread at a time, reused."""

    def __init__(self, url: str | None):
        from loopx.registry import Registry

        self._open = lambda: Registry.open(url, readonly=True)
        self._idle: queue.LifoQueue = queue.LifoQueue()
        try:
            self._idle.put(self._open())  # open one now, so a bad URL fails at start-up
        except LoopxError as err:
            if err.code in ("registry_unavailable", "registry_not_found"):
                raise LoopxError(err.code, f"{err.message} (the status server never creates one: create a goal"
                                           " first, or point --registry / LOOPX_REGISTRY at a registry)") from None
            raise

    def run(self, fn):
        """``fn(tx)`` inside a read transaction on a pooled read-only registry."""
        try:
            reg = self._idle.get_nowait()
        except queue.Empty:
            reg = self._open()
        try:
            with reg.read() as tx:
                result = fn(tx)
        except BaseException:
            reg.close()  # a connection that failed mid-read is not trusted again
            raise
        if self._idle.qsize() < MAX_IDLE_CONNECTIONS:
            self._idle.put(reg)
        else:
            reg.close()
        return result

    def close(self):
        """Close every idle registry."""
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


class RevisionWatcher:
    """One poller for the whole server: notices commits and wakes live streams.

    It asks its own read-only store for ``data_version()`` (SQLite ``PRAGMA data_version``;
    PostgreSQL ``LISTEN``/``NOTIFY``), which changes on every commit by anyone else, including
    commits whose event ids were allocated before a later one's; stores without it fall back to
    the registry revision. ``generation`` counts the changes seen; it is part of every cache key.
    """

    def __init__(self, url: str | None, pool: RegistryPool, interval: float = POLL_SECONDS):
        from loopx.registry import Registry

        self.pool, self.interval = pool, interval
        self._reg = Registry.open(url, readonly=True)
        self._probe = getattr(self._reg.store, "data_version", None)
        self._last = self._sample()
        self.revision = pool.run(projection.revision)
        self.generation = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="loopx-revision", daemon=True)
        self._thread.start()

    def _sample(self):
        if self._probe is not None:
            return self._probe()
        with self._reg.read() as tx:
            return projection.revision(tx)

    def _loop(self):
        while not self._stop.wait(self.interval):
            try:
                sample = self._sample()
                if sample == self._last:
                    continue
                self._last = sample
                rev = self.pool.run(projection.revision)
            except Exception as exc:  # keep serving; the next poll may succeed
                from loopx.store import display_url

                print(display_url(f"loopx status-server: poll failed: {exc}"), file=sys.stderr)
                continue
            with self._cond:
                self.revision = rev
                self.generation += 1
                self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        """The generation once it differs from ``seen`` (or after ``timeout`` seconds)."""
        with self._cond:
            self._cond.wait_for(lambda: self.generation != seen or self._stop.is_set(), timeout)
            return self.generation

    def stop(self):
        """End the poller and release every waiting stream."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=10)
        self._reg.close()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop.is_set()


class ViewCache:
    """Encoded JSON views, each keyed on the revision of what it shows.

    A key names the view *and* the version of its inputs: a goal view (or a goal's events) the
    goal's own revision, so writes to other goals leave it cached; the overview the registry's
    revision and the watcher's change generation, since any write may move it. A view is also
    reused for at most ``ttl`` seconds, because the projection reads the clock too (lease
    validity, run expiry). Misses are single-flight: while one request builds a view, others
    asking for the same key wait for its result instead of building it again. Memory is bounded
    by ``max_bytes`` of encoded bodies, least recently used out first.
    """

    def __init__(self, ttl: float = CACHE_SECONDS, max_bytes: int = CACHE_BYTES):
        from collections import OrderedDict

        self.ttl, self.max_bytes = ttl, max_bytes
        self._items: OrderedDict = OrderedDict()  # key -> (monotonic time, body)
        self._bytes = 0
        self._flights: dict = {}  # key -> _Flight being built
        self._latest: dict = {}  # family -> its newest key (served while the next is built)
        self._lock = threading.Lock()
        self.builds = 0  # how many views were computed (for tests and the benchmark)

    @property
    def size_bytes(self) -> int:
        """Bytes of encoded bodies held now."""
        return self._bytes

    def get_or_build(self, key, build, family=None) -> bytes:
        """The cached body for ``key``, else ``build()``'s, computed once however many ask at once.

        ``family`` names the view without its version: while one request builds a new version,
        the others get the family's previous version if it is under ``ttl`` old (so a writer
        committing every 100 ms does not make readers queue behind each rebuild); the request
        that builds - the first after a change - always gets the new one.
        """
        if self.ttl <= 0:
            self.builds += 1
            return build()
        with self._lock:
            now = time.monotonic()
            found = self._items.get(key)
            if found is not None and now - found[0] <= self.ttl:
                self._items.move_to_end(key)
                return found[1]
            flight = self._flights.get(key)
            leader = flight is None
            if leader:
                flight = self._flights[key] = _Flight()
            elif family is not None:
                previous = self._items.get(self._latest.get(family))
                if previous is not None and now - previous[0] <= self.ttl:
                    return previous[1]
        if not leader:
            if flight.done.wait(FLIGHT_WAIT_SECONDS) and flight.body is not None:
                return flight.body
            if flight.error is not None:
                raise flight.error
            return build()  # the leader is stuck: answer this request on its own
        try:
            self.builds += 1
            body = flight.body = build()
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                self._flights.pop(key, None)
            flight.done.set()
        self._put(key, body, family)
        return body

    def _put(self, key, body: bytes, family=None) -> None:
        if len(body) > self.max_bytes // 4:  # one huge page must not flush everything else
            return
        with self._lock:
            if family is not None:
                self._latest[family] = key
                if len(self._latest) > 4 * len(self._items) + 1024:  # forget families long evicted
                    self._latest = {f: k for f, k in self._latest.items() if k in self._items}
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= len(old[1])
            self._items[key] = (time.monotonic(), body)
            self._bytes += len(body)
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= len(dropped)


class _Flight:
    """One view being built: waiters block on ``done``."""

    __slots__ = ("done", "body", "error")

    def __init__(self):
        self.done = threading.Event()
        self.body: bytes | None = None
        self.error: BaseException | None = None


def _assets() -> dict[str, Path]:
    # The served files are exactly the regular files in the assets folder, found once at start:
    # a request names a key of this map, never a path, so nothing outside it can be reached.
    return {p.name: p for p in ASSETS.iterdir() if p.is_file() and p.suffix in CONTENT_TYPES}


class StatusServer(ThreadingHTTPServer):
    """The HTTP server: holds the registry pool, the token and the revision watcher."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, registry_url: str | None, host: str, port: int, token: str | None,
                 poll_interval: float = POLL_SECONDS):
        if token is not None and not token.strip():
            raise LoopxError("invalid_argument", "--token must not be empty")
        if not is_loopback(host) and not token:
            raise LoopxError("invalid_argument",
                             f"--host {host} is not a loopback address: binding it requires --token")
        self.token = token
        self.head_seconds = _env_number("LOOPX_STATUS_HEAD_SECONDS", HEAD_SECONDS, 0.1, 3600)
        self.max_streams = int(_env_number("LOOPX_STATUS_MAX_STREAMS", MAX_STREAMS, 0, 10_000))
        self.streams = 0
        self.streams_lock = threading.Lock()
        self.reaper = HeadReaper()
        self.pool = RegistryPool(registry_url)
        self.watcher = RevisionWatcher(registry_url, self.pool, poll_interval)
        self.cache = ViewCache(cache_seconds(), cache_bytes())
        self.assets = _assets()
        if ":" in host and not host.startswith("["):
            import socket

            self.address_family = socket.AF_INET6
        try:
            super().__init__((host.strip("[]"), port), StatusHandler)
        except OSError as exc:
            self.watcher.stop()
            self.pool.close()
            raise LoopxError("invalid_argument", f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    @property
    def url(self) -> str:
        """``http://HOST:PORT/`` as bound."""
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def shutdown_all(self):
        """Stop serving, end live streams and close the registries."""
        self.watcher.stop()
        self.reaper.stop()
        self.shutdown()
        self.server_close()
        self.pool.close()


class HeadReaper:
    """Shuts down connections that did not deliver a request head by their deadline.

    One thread for the whole server (started on first use) instead of a timer per request:
    a socket time-out alone would let a client trickle one header byte at a time forever.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._deadlines: dict = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, conn, seconds: float) -> None:
        """Close ``conn`` unless :meth:`done` is called within ``seconds``."""
        with self._lock:
            self._deadlines[conn] = time.monotonic() + seconds
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="loopx-head-reaper", daemon=True)
                self._thread.start()

    def done(self, conn) -> None:
        """``conn`` delivered its request head (or is gone)."""
        with self._lock:
            self._deadlines.pop(conn, None)

    def _loop(self):
        import socket

        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self._lock:
                late = [c for c, t in self._deadlines.items() if t <= now]
                for c in late:
                    del self._deadlines[c]
            for c in late:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self):
        """End the thread."""
        self._stop.set()


def _env_number(name: str, default: float, low: float, high: float) -> float:
    import os

    value = os.environ.get(name, "")
    try:
        number = float(value) if value else default
    except ValueError:
        raise LoopxError("invalid_argument", f"{name}={value!r} is not a number") from None
    if not low <= number <= high:
        raise LoopxError("invalid_argument", f"{name} must be between {low:g} and {high:g}")
    return number


def cache_seconds() -> float:
    """How long a view may be reused at an unchanged revision: ``LOOPX_STATUS_CACHE_SECONDS``
    (default 1; 0 turns the cache off)."""
    import os

    value = os.environ.get("LOOPX_STATUS_CACHE_SECONDS", "")
    try:
        seconds = float(value) if value else CACHE_SECONDS
    except ValueError:
        raise LoopxError("invalid_argument", f"LOOPX_STATUS_CACHE_SECONDS={value!r} is not a number") from None
    if not 0 <= seconds <= 60:
        raise LoopxError("invalid_argument", "LOOPX_STATUS_CACHE_SECONDS must be between 0 and 60")
    return seconds


def cache_bytes() -> int:
    """The view cache's memory bound: ``LOOPX_STATUS_CACHE_BYTES`` (default 32 MiB)."""
    import os

    value = os.environ.get("LOOPX_STATUS_CACHE_BYTES", "")
    if not value:
        return CACHE_BYTES
    if not value.isdigit() or not 1 << 16 <= int(value) <= 1 << 34:
        raise LoopxError("invalid_argument", "LOOPX_STATUS_CACHE_BYTES must be a whole number from 65536 to 2^34")
    return int(value)


def make_server(registry_url: str | None, *, host: str = "127.0.0.1", port: int = 8765,
                token: str | None = None, poll_interval: float = POLL_SECONDS) -> StatusServer:
    """A bound (not yet serving) status server; call ``serve_forever()`` on it."""
    return StatusServer(registry_url, host, port, token, poll_interval)


class StatusHandler(BaseHTTPRequestHandler):
    """One connection's requests. HTTP/1.1 keep-alive, so a client reuses its connection."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle's algorithm on, the second waits for
    # the client's delayed ACK (~40 ms) on every keep-alive request.
    disable_nagle_algorithm = True
    server_version = "loopx-status"
    server: StatusServer
    #: Socket time-out for every read and write (StreamRequestHandler applies it in setup()).
    timeout = IO_SECONDS

    def handle_one_request(self):
        """Serve one request, closing the connection if its head is not in by the deadline."""
        self.server.reaper.watch(self.connection, self.server.head_seconds)
        try:
            super().handle_one_request()
        except (TimeoutError, ConnectionError, OSError):
            self.close_connection = True
        finally:
            self.server.reaper.done(self.connection)

    def parse_request(self):
        """Parse the request line and headers; the head deadline stops counting once they are in."""
        ok = super().parse_request()
        self.server.reaper.done(self.connection)
        return ok

    def version_string(self):
        """The ``Server`` header: no Python version on the wire."""
        return self.server_version

    # -- plumbing

    def __getattr__(self, name):
        # Every method but GET and HEAD, whatever its name, gets 405 (not the default 501).
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        """Quiet by default: a busy dashboard would flood the terminal."""

    def _send(self, status: int, body: bytes, content_type: str, extra: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data, extra: dict | None = None):
        body = dumps_out(data, separators=(",", ":")).encode()
        self._send(status, body, JSON_TYPE, extra)

    def _error(self, status: int, code: str, message: str, extra: dict | None = None):
        self._json(status, {"error": {"code": code, "message": message}}, extra)

    def _not_allowed(self):
        # Drain a request body so the connection stays usable, but never act on it.
        length = self.headers.get("Content-Length")
        if length and length.isascii() and length.isdigit() and int(length) <= 1 << 20:
            self.rfile.read(int(length))
        elif length:
            self.close_connection = True
        if not self._authorised():  # with a token, every request needs it, whatever the method
            return
        self._error(405, "method_not_allowed", f"{self.command} is not allowed: this server is read-only",
                    {"Allow": ALLOW})

    def _authorised(self) -> bool:
        if not self._one_host():
            return False
        token = self.server.token
        if token is None:
            if not is_loopback(_host_name(self.headers.get("Host") or "")):
                self._error(403, "forbidden", "only loopback Host names are served without a token")
                return False
            return True
        given = self.headers.get("Authorization") or ""
        scheme, _, value = given.partition(" ")
        candidate = ""
        if scheme.lower() == "bearer":
            candidate = value.strip()
        elif scheme.lower() == "basic":
            try:
                candidate = base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                candidate = ""
        if candidate and hmac.compare_digest(candidate.encode(), token.encode()):
            return True
        self._error(401, "unauthorized", "this server needs its token: Authorization: Bearer TOKEN",
                    {"WWW-Authenticate": 'Bearer realm="loopx", Basic realm="loopx", charset="UTF-8"'})
        return False

    def _one_host(self) -> bool:
        """Refuse (400) a request whose ``Host`` is ambiguous: two ``Host`` headers (equal or not),
        one naming several hosts, none on HTTP/1.1, or an absolute request target naming another
        host. A proxy and this server could otherwise each believe a different one."""
        hosts = self.headers.get_all("Host") or []
        problem = None
        if len(hosts) > 1:
            problem = "more than one Host header"
        elif not hosts and self.request_version == "HTTP/1.1":
            problem = "no Host header (HTTP/1.1 requires one)"
        elif hosts and (not hosts[0].strip() or any(c in hosts[0] for c in ", \t/@")):
            problem = "a malformed Host header"
        elif "://" in self.path:
            target = urlsplit(self.path).netloc.lower()
            if not hosts or target != hosts[0].strip().lower():
                problem = "a request target naming another host than the Host header"
        if problem:
            self.close_connection = True
            self._error(400, "bad_request", f"refused: {problem}")
            return False
        return True

    # -- methods

    def do_HEAD(self):
        """Like GET, without a body."""
        self.do_GET()

    def do_GET(self):
        """Route one request."""
        if not self._authorised():
            return
        parts = urlsplit(self.path)
        path = parts.path
        try:
            query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query),
                             max_num_fields=20)
        except ValueError:
            return self._error(400, "invalid_argument", "malformed query string")
        try:
            self._route(path, {k: v[-1] for k, v in query.items()})
        except LoopxError as err:
            self._json(ERROR_STATUS.get(err.code, 500), err.to_json())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _route(self, path: str, q: dict):
        if path == "/" or path == "/index.html":
            return self._asset("index.html")
        if path.startswith("/assets/"):
            return self._asset(path[len("/assets/"):])
        if path == "/healthz":
            rev = self.server.pool.run(projection.revision)
            return self._json(200, {"ok": True, "schema": projection.SCHEMA, "revision": rev, "readonly": True})
        if path in ("/api/status", "/api/goals"):
            limit = _int(q, "limit", 50)
            part, after = projection.parse_cursor(q.get("cursor") or None)
            include_closed = q.get("all", "") in ("1", "true", "yes")
            if not 1 <= limit <= projection.MAX_LIMIT:
                raise LoopxError("invalid_argument", f"limit must be 1-{projection.MAX_LIMIT}")

            def overview(tx):
                view = projection.overview_tx(tx, limit=limit, part=part, after=after, include_closed=include_closed)
                if path == "/api/goals":
                    view = {k: view[k] for k in ("schema", "generated_at", "revision", "goals", "page")}
                    view["view"] = "goals"
                return view

            return self._view((path, limit, part, after, include_closed), overview)
        if path == "/api/stream":
            return self._stream()
        segments = path.split("/")
        # "/api/goals/ID" -> ["", "api", "goals", ID]; "/api/goals/ID/events" adds "events".
        if len(segments) in (4, 5) and segments[1:3] == ["api", "goals"]:
            goal_id = check_id("goal", segments[3], option="goal id")
            if len(segments) == 4:
                return self._view(("goal", goal_id), lambda tx: projection.goal_view_tx(tx, goal_id),
                                  version=_goal_revision(goal_id))
            if segments[4] == "events":
                after = _int(q, "after", 0)
                limit = _int(q, "limit", 200)
                if after < 0 or not 1 <= limit <= projection.MAX_EVENTS:
                    raise LoopxError("invalid_argument", f"after must be >= 0 and limit 1-{projection.MAX_EVENTS}")
                return self._view(("events", goal_id, after, limit),
                                  lambda tx: projection.goal_events_tx(tx, goal_id, after=after, limit=limit),
                                  version=_goal_revision(goal_id))
        self._error(404, "not_found", "no such page")

    def _view(self, key, build, version=None):
        """Send ``build(tx)`` as JSON, reusing an encoding made at the same ``version(tx)`` (default:
        the registry's revision and change generation; see :class:`ViewCache`)."""
        server = self.server

        def work(tx):
            seen = version(tx) if version else (projection.revision(tx), server.watcher.generation)
            return server.cache.get_or_build(
                (key, seen), lambda: dumps_out(build(tx), separators=(",", ":")).encode(),
                family=key)

        self._send(200, server.pool.run(work), JSON_TYPE)

    def _asset(self, name: str):
        found = self.server.assets.get(name)
        if found is None:
            return self._error(404, "not_found", "no such page")
        self._send(200, found.read_bytes(), CONTENT_TYPES[found.suffix])

    def _stream(self):
        """Server-sent events: ``revision`` now and whenever the registry's revision changes.

        At most ``max_streams`` at once (each holds a thread); one more gets 503.
        """
        server = self.server
        with server.streams_lock:
            full = server.streams >= server.max_streams
            if not full:
                server.streams += 1
        if full:
            self.close_connection = True
            return self._error(503, "too_many_streams",
                               f"{server.max_streams} event streams are open already; poll /api/status or retry later",
                               {"Retry-After": "5", "Connection": "close"})
        try:
            self._stream_events()
        finally:
            with server.streams_lock:
                server.streams -= 1

    def _stream_events(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        for k, v in SECURITY_HEADERS.items():
            self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if self.command == "HEAD":
            return
        watcher = self.server.watcher
        seen = watcher.generation
        self._event(watcher.revision, seen, retry=True)
        last_write = time.monotonic()
        while not watcher.stopped:
            # Wake every second to notice a client that hung up, so its stream slot frees quickly.
            generation = watcher.wait(seen, 1.0)
            if self._client_gone():
                break
            if watcher.stopped:
                break
            if generation != seen:
                seen = generation
                self._event(watcher.revision, generation)
                last_write = time.monotonic()
            elif time.monotonic() - last_write >= KEEPALIVE_SECONDS:
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
                last_write = time.monotonic()

    def _client_gone(self) -> bool:
        """Whether the client closed its end (readable with nothing to read)."""
        import select
        import socket

        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _event(self, rev: int, generation: int, retry: bool = False):
        data = json.dumps({"revision": rev, "generation": generation})
        head = "retry: 2000\n" if retry else ""
        self.wfile.write(f"{head}event: revision\nid: {generation}\ndata: {data}\n\n".encode())
        self.wfile.flush()


def _goal_revision(goal_id: str):
    """``version(tx)`` of one goal's views: its own revision (None when there is no such goal;
    the view then raises goal_not_found, which is never cached)."""

    def version(tx):
        row = tx.one("SELECT revision FROM goals WHERE id = ?", (goal_id,))
        return None if row is None else row["revision"]

    return version


def _host_name(header: str) -> str:
    """The name part of a ``Host`` header: ``[::1]:8765`` -> ``[::1]``, ``localhost:80`` -> ``localhost``."""
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _int(q: dict, name: str, default: int) -> int:
    value = q.get(name)
    if value is None or value == "":
        return default
    # isascii() first: str.isdigit() accepts "²" and other Unicode digits int() refuses.
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise LoopxError("invalid_argument", f"{name} must be a whole number")
    return int(value)
