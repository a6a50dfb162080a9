"""One connection's requests: deadlines, who may ask, GET and HEAD only; what each path answers
is :mod:`loopx.status_server.routes`'s."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from loopx.values.errors import LoopxError
from loopx.values.validate import ascii_whole
from loopx.status_server.access import authorised
from loopx.status_server.responses import ERROR_STATUS, send_error, send_json
from loopx.status_server.routes import route

if TYPE_CHECKING:
    from loopx.status_server.server import StatusServer

ALLOW = "GET, HEAD"
#: A socket read or write that makes no progress for this long ends the connection.
IO_SECONDS = 60.0


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
    def _not_allowed(self):
        # Drain a request body so the connection stays usable, but never act on it.
        length = self.headers.get("Content-Length")
        size = ascii_whole(length or "")
        if size is not None and size <= 1 << 20:
            self.rfile.read(size)
        elif length:
            self.close_connection = True
        if not authorised(self):  # with a token, every request needs it, whatever the method
            return
        send_error(self, 405, "method_not_allowed", f"{self.command} is not allowed: this server is read-only",
                   {"Allow": ALLOW})

    # -- methods

    def do_HEAD(self):
        """Like GET, without a body."""
        self.do_GET()

    def do_GET(self):
        """Route one request."""
        if not authorised(self):
            return
        parts = urlsplit(self.path)
        path = parts.path
        try:
            query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query),
                             max_num_fields=20)
        except ValueError:
            return send_error(self, 400, "invalid_argument", "malformed query string")
        try:
            route(self, path, {k: v[-1] for k, v in query.items()})
        except LoopxError as err:
            send_json(self, ERROR_STATUS.get(err.code, 500), err.to_json())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
