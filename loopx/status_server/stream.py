"""The live stream (``GET /api/stream``): server-sent ``revision`` events whenever the registry
changes, driven by one :class:`RevisionWatcher` for the whole server."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import TYPE_CHECKING

from loopx.views import status as projection
from loopx.status_server.responses import SECURITY_HEADERS, send_error

if TYPE_CHECKING:
    from loopx.status_server.server import RegistryPool

POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0


class RevisionWatcher:
    """One poller for the whole server: notices commits and wakes live streams.

    It asks its own read-only store for ``data_version()`` (SQLite ``PRAGMA data_version``;
    PostgreSQL ``LISTEN``/``NOTIFY``), which changes on every commit by anyone else, including
    commits whose event ids were allocated before a later one's; stores without it fall back to
    the registry revision. ``generation`` counts the changes seen; it is part of every cache key.
    """

    def __init__(self, url: str | None, pool: RegistryPool, interval: float = POLL_SECONDS):
        from loopx.ledger.registry import Registry

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



def serve_stream(handler) -> None:
    """Server-sent events: ``revision`` now and whenever the registry's revision changes.

    At most ``max_streams`` at once (each holds a thread); one more gets 503.
    """
    server = handler.server
    with server.streams_lock:
        full = server.streams >= server.max_streams
        if not full:
            server.streams += 1
    if full:
        handler.close_connection = True
        return send_error(handler, 503, "too_many_streams",
                          f"{server.max_streams} event streams are open already; poll /api/status or retry later",
                          {"Retry-After": "5", "Connection": "close"})
    try:
        _stream_events(handler)
    finally:
        with server.streams_lock:
            server.streams -= 1


def _stream_events(handler):
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    for k, v in SECURITY_HEADERS.items():
        handler.send_header(k, v)
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.close_connection = True
    if handler.command == "HEAD":
        return
    watcher = handler.server.watcher
    seen = watcher.generation
    _event(handler, watcher.revision, seen, retry=True)
    last_write = time.monotonic()
    while not watcher.stopped:
        # Wake every second to notice a client that hung up, so its stream slot frees quickly.
        generation = watcher.wait(seen, 1.0)
        if _client_gone(handler):
            break
        if watcher.stopped:
            break
        if generation != seen:
            seen = generation
            _event(handler, watcher.revision, generation)
            last_write = time.monotonic()
        elif time.monotonic() - last_write >= KEEPALIVE_SECONDS:
            handler.wfile.write(b": keep-alive\n\n")
            handler.wfile.flush()
            last_write = time.monotonic()


def _client_gone(handler) -> bool:
    """Whether the client closed its end (readable with nothing to read)."""
    import select
    import socket

    try:
        readable, _, _ = select.select([handler.connection], [], [], 0)
        return bool(readable) and handler.connection.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _event(handler, rev: int, generation: int, retry: bool = False):
    data = json.dumps({"revision": rev, "generation": generation})
    head = "retry: 2000\n" if retry else ""
    handler.wfile.write(f"{head}event: revision\nid: {generation}\ndata: {data}\n\n".encode())
    handler.wfile.flush()
