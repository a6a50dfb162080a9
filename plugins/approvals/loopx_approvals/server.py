"""The approvals server: one page listing what waits for a person, forms to decide it.

Authentication: ``serve`` makes a one-time login token, prints the login link
(``/login?token=…``) and writes the token to a file only the user can read. Opening the link
once starts a session (a random id in an ``HttpOnly``, ``SameSite=Strict`` cookie); the token is
then spent. Every form carries the session's CSRF token, checked on every ``POST``; the ``Host``
header must name this server (no DNS rebinding), and ``Origin``, when sent, must be this server.
It listens on loopback unless ``--allow-remote``. The only things answered without a session are
two public stylesheets: ``/assets/dashboard.css``, the dashboard's own (``loopx.api.pages.dashboard_stylesheet``),
so the page looks like the dashboard, and ``/assets/approvals.css``, this page's few additions; the
Content-Security-Policy allows styles from this server only, and no script at all.

While it runs, ``serve`` announces the page (``loopx.api.pages.announce``: a file in LoopX's data
directory naming its URL, process and registry) so the read-only dashboard links to it; the file is
removed when it stops.

Every decision goes through ``loopx.api`` as actor ``user`` with the operation id
``approvals-<session>-<n>``, which the ledger keeps with the event: who acted (the user) and
from which browser session.
"""

from __future__ import annotations

import html
import ipaddress
import json
import os
import re
import secrets
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from loopx_approvals import page

COOKIE = "loopx_approvals"
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")  # a score as typed: ASCII digits only


def _ascii_number(text: str) -> float | None:
    """A score as a float, or None: ``float()`` alone also reads "١" (Arabic-Indic one), "１"
    (fullwidth), "nan" and "1e3" - not a score anyone typed into the box."""
    return float(text) if _NUMBER.fullmatch(text or "") else None


def _length(header: str | None) -> int | None:
    """A ``Content-Length`` as a number (0 when absent), or None when it is not ASCII digits
    (``int()`` would raise on "²" and read "-1" as "until the client hangs up")."""
    if not header:
        return 0
    return int(header) if header.isascii() and header.isdigit() and len(header) <= 18 else None


class State:
    """The login token (one use), the sessions and their CSRF tokens."""

    def __init__(self, url: str | None):
        self.url = url
        self.login_token: str | None = secrets.token_urlsafe(32)
        self.sessions: dict[str, str] = {}  # session id -> csrf token
        self.counter = 0
        self.lock = threading.Lock()

    def login(self, token: str) -> str | None:
        with self.lock:
            if not self.login_token or not secrets.compare_digest(token.encode(), self.login_token.encode()):
                return None
            self.login_token = None  # one use
            session = "s-" + secrets.token_hex(8)
            self.sessions[session] = secrets.token_urlsafe(24)
            return session

    def operation(self, session: str) -> str:
        with self.lock:
            self.counter += 1
            return f"approvals-{session}-{self.counter}-{secrets.token_hex(4)}"


def _score(text: str) -> float:
    number = _ascii_number(text.strip())
    if number is None:
        raise ValueError(text)  # refused below, as any score that is not a number
    return number


def _own_stylesheet() -> bytes:
    return (Path(__file__).resolve().parent / "approvals.css").read_bytes()


def _dashboard_stylesheet() -> bytes:
    from loopx import api

    return api.pages.dashboard_stylesheet()


#: The only paths answered without a session: public stylesheets, the dashboard's and this page's.
STYLESHEETS = {"/assets/dashboard.css": _dashboard_stylesheet, "/assets/approvals.css": _own_stylesheet}


def _error(text: str) -> str:
    """A refusal, as a page that looks like the others (``#error`` holds the reason)."""
    return page.shell(f"<main><section class='card'><p id='error'>{html.escape(text)}</p></section></main>")


class ApprovalsHandler(BaseHTTPRequestHandler):
    """The page and its forms; :func:`make_handler` gives it the server's state and allowed hosts."""

    server_version = "loopx-approvals"
    state: State
    allowed_hosts: set[str]

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def _refuse(self, message: str) -> None:
        """400 with a JSON error (``invalid_argument``), and the connection closed: what
        follows a request whose length is unknown cannot be read as the next one."""
        self.close_connection = True
        return self._send(400, json.dumps({"error": {"code": "invalid_argument", "message": message}}),
                          ctype="application/json; charset=utf-8")

    def _send(self, code: int, body: str, *, headers: dict[str, str] | None = None,
              ctype: str = "text/html; charset=utf-8") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Content-Security-Policy",
                         "default-src 'none'; form-action 'self'; style-src 'self'; img-src data:; "
                         "frame-ancestors 'none'; base-uri 'none'")
        self.send_header("X-Content-Type-Options", "nosniff")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _host_ok(self) -> bool:
        return self.headers.get("Host", "") in self.allowed_hosts

    def _session(self) -> str | None:
        for part in (self.headers.get("Cookie") or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and value in self.state.sessions:
                return value
        return None

    def do_GET(self) -> None:
        from loopx import api

        state = self.state
        if not self._host_ok():
            return self._send(421, "wrong host")
        url = urlparse(self.path)
        if url.path in STYLESHEETS:
            return self._send(200, STYLESHEETS[url.path]().decode(), ctype="text/css; charset=utf-8")
        if url.path == "/login":
            token = (parse_qs(url.query).get("token") or [""])[0]
            session = state.login(token)
            if session is None:
                return self._send(403, _error("This login link is wrong or was used already."))
            return self._send(303, "", headers={
                "Location": "/", "Set-Cookie": f"{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/"})
        session = self._session()
        if session is None:
            return self._send(401, _error("Log in with the link `loopx approvals serve` printed."))
        if url.path != "/":
            return self._send(404, "not found")
        message = (parse_qs(url.query).get("m") or [""])[0][:300]
        with api.Registry.open(state.url, readonly=True) as reg:
            data = page.gather(reg)
        return self._send(200, page.render(data, state.sessions[session], message))

    def do_POST(self) -> None:
        if not self._host_ok():
            return self._send(421, "wrong host")
        session = self._session()
        if session is None:
            return self._send(401, _error("not logged in"))
        origin = self.headers.get("Origin")
        if origin and urlparse(origin).netloc not in self.allowed_hosts:
            return self._send(403, _error("cross-site request refused"))
        size = _length(self.headers.get("Content-Length"))
        if size is None:
            return self._refuse("Content-Length must be a whole number (ASCII digits)")
        if size > 65536:
            return self._send(413, "too large")
        form = {k: v[0] for k, v in parse_qs(self.rfile.read(size).decode(errors="replace")).items()}
        if not secrets.compare_digest(form.get("csrf", "").encode(), self.state.sessions[session].encode()):
            return self._send(403, _error("CSRF token missing or wrong; nothing was changed"))
        message = self._write(form, session)
        if message is None:
            return self._send(404, "not found")
        from urllib.parse import quote

        return self._send(303, "", headers={"Location": "/?m=" + quote(message)})

    def _write(self, form: dict[str, str], session: str) -> str | None:
        """Apply the form posted to this path as actor ``user``: the line to show, or None when
        the path names no form (nothing written)."""
        from loopx import api

        op = self.state.operation(session)
        try:
            with api.Registry.open(self.state.url) as reg:
                if self.path == "/decide":
                    gate = api.gates.decide(reg, "user", form.get("verb", ""), goal_id=form.get("goal_id", ""),
                                           gate_id=form.get("gate_id", ""), comment=form.get("comment") or None,
                                           operation_id=op)
                    return f"gate {gate['id']} {gate['status']} (session {session})"
                if self.path == "/reward":
                    reward = api.runs.add_reward(reg, "user", goal_id=form.get("goal_id", ""),
                                            run_id=form.get("run_id", ""),
                                            score=_score(form.get("score", "")),
                                            comment=form.get("comment") or None, operation_id=op)
                    return f"reward {reward['id']} added (session {session})"
                return None
        except api.LoopxError as err:
            return f"refused: {err.message} [{err.code}]"
        except ValueError:
            return "refused: the score is a number in [-1, 1]"


def make_handler(state: State, allowed_hosts: set[str]) -> type[ApprovalsHandler]:
    """The request handler class of one server: :class:`ApprovalsHandler` over ``state``, answering
    only requests whose ``Host`` is one of ``allowed_hosts``."""
    return type("Handler", (ApprovalsHandler,), {"state": state, "allowed_hosts": allowed_hosts})


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def run(*, host: str, port: int, allow_remote: bool, token_file: str | None) -> None:
    """Serve until interrupted (see the module's docstring)."""
    from loopx import api

    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not allow_remote:
        raise api.LoopxError("invalid_argument", f"--host {host} is not a loopback address; add --allow-remote "
                                                 "(and put TLS in front of it) to serve other machines")
    url = api.cli.registry_url()
    with api.Registry.open(url) as reg:  # refuse a registry that is not there before printing a link
        with reg.read() as tx:
            registry = api.pages.registry_id(tx)
    state = State(url)
    allowed: set[str] = set()  # filled once the port is known, before the first request is served
    server = ThreadingHTTPServer((host, port), make_handler(state, allowed))
    real_port = server.server_address[1]
    allowed.update({f"{host}:{real_port}", f"127.0.0.1:{real_port}", f"localhost:{real_port}"})
    path = token_file or os.path.join(os.path.expanduser("~"), ".config", "loopx", "approvals.token")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    assert state.login_token is not None  # a new State's token: nobody has logged in yet
    with os.fdopen(fd, "w") as f:
        f.write(state.login_token + "\n")
    link = f"http://{host}:{real_port}/login?token={state.login_token}"
    print(json.dumps({"url": f"http://{host}:{real_port}/", "login": link, "token_file": path}), flush=True)
    print(f"loopx approvals: open {link} once to log in (token also in {path})", file=sys.stderr, flush=True)
    # SIGTERM stops it as Ctrl-C does, so the announcement below is withdrawn either way.
    signal.signal(signal.SIGTERM, _interrupt)
    announced = api.pages.announce("approvals", title="Approvals", url=f"http://{host}:{real_port}/",
                                  registry=registry)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        api.pages.withdraw(announced)
        server.server_close()
