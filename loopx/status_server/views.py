"""What the status server shows: the dashboard's files and the JSON views of the status
projection, each encoded once per version of what it shows (:class:`ViewCache`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from loopx.views import status as projection
from loopx.values.jsonsafe import dumps_out
from loopx.status_server.responses import JSON_TYPE, send, send_error
from loopx.store.queries import status as status_queries

ASSETS = Path(__file__).resolve().parent.parent / "dashboard"
CACHE_SECONDS = 1.0
CACHE_BYTES = 32 << 20  # encoded views kept at most (LOOPX_STATUS_CACHE_BYTES)
FLIGHT_WAIT_SECONDS = 30.0
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}


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



def assets() -> dict[str, Path]:
    """The dashboard's files by name."""
    # The served files are exactly the regular files in the assets folder, found once at start:
    # a request names a key of this map, never a path, so nothing outside it can be reached.
    return {p.name: p for p in ASSETS.iterdir() if p.is_file() and p.suffix in CONTENT_TYPES}


def send_asset(handler, name: str) -> None:
    """Send the dashboard file ``name`` (404 when there is none by that name)."""
    found = handler.server.assets.get(name)
    if found is None:
        return send_error(handler, 404, "not_found", "no such page")
    send(handler, 200, found.read_bytes(), CONTENT_TYPES[found.suffix])


def send_view(handler, key, build, version=None) -> None:
    """Send ``build(tx)`` as JSON, reusing an encoding made at the same ``version(tx)`` (default:
    the registry's revision and change generation; see :class:`ViewCache`)."""
    server = handler.server

    def work(tx):
        seen = version(tx) if version else (projection.revision(tx), server.watcher.generation)
        return server.cache.get_or_build(
            (key, seen), lambda: dumps_out(build(tx), separators=(",", ":")).encode(),
            family=key)

    send(handler, 200, server.pool.run(work), JSON_TYPE)


def goal_revision(goal_id: str):
    """``version(tx)`` of one goal's views: its own revision (None when there is no such goal;
    the view then raises goal_not_found, which is never cached)."""

    def version(tx):
        return status_queries.goal_revision(tx, goal_id)

    return version
