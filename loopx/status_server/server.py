"""The status server itself: the listening socket, its settings, the read-only registries it
shares between request threads, and the thread that closes connections too slow to ask."""

from __future__ import annotations

import queue
import threading
import time
from http.server import ThreadingHTTPServer

from loopx.values.errors import LoopxError
from loopx.status_server.access import is_loopback
from loopx.status_server.handler import StatusHandler
from loopx.status_server.stream import POLL_SECONDS, RevisionWatcher
from loopx.status_server.views import CACHE_BYTES, CACHE_SECONDS, ViewCache, assets

MAX_IDLE_CONNECTIONS = 16
#: A connection must deliver a request's line and headers within this many seconds of starting
#: to wait for it (keep-alive idle time included): slow or idle clients cannot hold threads.
HEAD_SECONDS = 20.0
#: At most this many ``/api/stream`` subscribers at once; more get 503 ``too_many_streams``.
MAX_STREAMS = 64


class RegistryPool:
    """Read-only registries shared by request threads: one per thread at a time, reused."""

    def __init__(self, url: str | None):
        from loopx.ledger.registry import Registry

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
        self.assets = assets()
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
    from loopx.values.validate import ascii_whole

    number = ascii_whole(value)
    if number is None or not 1 << 16 <= number <= 1 << 34:
        raise LoopxError("invalid_argument", "LOOPX_STATUS_CACHE_BYTES must be a whole number from 65536 to 2^34")
    return number


def make_server(registry_url: str | None, *, host: str = "127.0.0.1", port: int = 8765,
                token: str | None = None, poll_interval: float = POLL_SECONDS) -> StatusServer:
    """A bound (not yet serving) status server; call ``serve_forever()`` on it."""
    return StatusServer(registry_url, host, port, token, poll_interval)
