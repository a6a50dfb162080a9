"""The status server: API shape, errors, methods, traversal, token and Host checks, live stream."""

from __future__ import annotations

import base64
import http.client
import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from loopx.views import status
from loopx.values.errors import LoopxError
from loopx.ledger.registry import Registry
from loopx.status_server import make_server
from tests.conftest import loopx_env
from tests.factories import make_goal


class Served:
    """A running server and a tiny raw HTTP client for it (paths are sent exactly as given)."""

    def __init__(self, srv):
        self.srv = srv
        self.host, self.port = srv.server_address[:2]

    def request(self, path, method="GET", headers=None, body=None, timeout=30):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            hdrs = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
            if body is not None:
                hdrs["Content-Length"] = str(len(body))
            for k, v in hdrs.items():
                conn.putheader(k, v)
            conn.endheaders(body)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def json(self, path, expect=200, **kw):
        code, headers, body = self.request(path, **kw)
        assert code == expect, (path, code, body[:500])
        assert headers["content-type"].startswith("application/json")
        return json.loads(body)


def _start(url, **kw):
    srv = make_server(url, host=kw.pop("host", "127.0.0.1"), port=0, poll_interval=0.05, **kw)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return srv


@pytest.fixture
def served(registry_url):
    Registry.open(registry_url).close()  # the server never creates a registry
    srv = _start(registry_url)
    yield Served(srv)
    srv.shutdown_all()


def _without_clock(view):
    view = dict(view)
    view.pop("generated_at")
    return view


def test_api_shape_matches_the_cli(loopx, served):
    goal_id = make_goal(loopx, title="served goal")["goal"]
    r = loopx("gate", "add", "--goal-id", goal_id, "--title", "ship it?", "--scope", "production", "--json")
    assert r.code == 0, r

    overview = served.json("/api/status")
    assert overview["schema"] == "loopx.views.status/1" and overview["view"] == "overview"
    assert _without_clock(overview) == _without_clock(loopx("status", "--json").json)
    assert overview["goals"][0]["attention"] == ["gate_pending"]

    goals = served.json("/api/goals?limit=1")
    assert goals["view"] == "goals" and [g["id"] for g in goals["goals"]] == [goal_id]
    assert goals["page"] == {"limit": 1, "next": None}

    one = served.json(f"/api/goals/{goal_id}")
    assert one["view"] == "goal" and one["goal"]["title"] == "served goal"
    assert one["gates"]["pending"][0]["title"] == "ship it?"
    assert _without_clock(one) == _without_clock(loopx("status", "--goal-id", goal_id, "--json").json)

    events = served.json(f"/api/goals/{goal_id}/events?after=1")
    assert [e["kind"] for e in events["events"]] == ["gate.added"] and events["next_after"] == 2
    assert served.json(f"/api/goals/{goal_id}/events?after=2&limit=5")["events"] == []

    health = served.json("/healthz")
    assert health["ok"] is True and health["readonly"] is True and health["revision"] == overview["revision"]

    code, headers, body = served.request("/")
    assert code == 200 and headers["content-type"].startswith("text/html")
    assert b"<title>LoopX status</title>" in body and b"/assets/dashboard.js" in body
    assert "default-src 'self'" in headers["content-security-policy"]
    for asset, kind in (("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")):
        code, headers, body = served.request(f"/assets/{asset}")
        assert code == 200 and headers["content-type"].startswith(kind) and len(body) > 100


def test_head_answers_without_a_body(loopx, served):
    for path in ("/", "/healthz", "/api/status"):
        code, headers, body = served.request(path, method="HEAD")
        assert code == 200 and body == b"" and int(headers["content-length"]) > 0


def test_not_found_and_bad_input(loopx, served):
    err = served.json("/api/goals/g-000000000000", expect=404)
    assert err["error"]["code"] == "goal_not_found"
    assert served.json("/api/goals/g-000000000000/events", expect=404)["error"]["code"] == "goal_not_found"
    for path in ("/nope", "/api", "/api/goals/g-000000000000/nope", "/assets/missing.js", "/assets/",
                 "/api/goals/g-000000000000/events/x"):
        assert served.json(path, expect=404)["error"]["code"] == "not_found", path
    goal_id = make_goal(loopx, title="a goal")["goal"]
    for path in ("/api/goals/G-000000000000", "/api/goals/g-0", "/api/goals/x-000000000000",
                 f"/api/goals/{goal_id}/events?after=-1", f"/api/goals/{goal_id}/events?after=abc",
                 f"/api/goals/{goal_id}/events?limit=0", "/api/status?limit=0", "/api/status?limit=5000",
                 "/api/status?cursor=zz", "/api/status?&&=&"):
        assert served.json(path, expect=400)["error"]["code"] == "invalid_argument", path


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND", "BREW"])
def test_only_get_and_head(served, method):
    code, headers, body = served.request("/api/status", method=method, body=b'{"title": "x"}',
                                         headers={"Content-Type": "application/json"})
    assert code == 405
    assert headers["allow"] == "GET, HEAD"
    assert json.loads(body)["error"]["code"] == "method_not_allowed"


TRAVERSALS = [
    "/../loopx/status.py",
    "/../../etc/passwd",
    "/assets/../status.py",
    "/assets/../status_server/server.py",
    "/assets/../../pyproject.toml",
    "/assets/%2e%2e/status.py",
    "/assets/%2e%2e%2fstatus.py",
    "/assets/..%2f..%2fpyproject.toml",
    "/assets/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
    "/assets//etc/passwd",
    "/assets/..\\status.py",
    "/assets/dashboard.js%00.html",
    "/assets/./dashboard.js/../../status.py",
    "//etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/api/goals/..%2f..%2fetc%2fpasswd",
    "/api/goals/g-000000000000/../../../etc/passwd",
    "/api/goals/g-000000000000%2f..%2f..",
    "/api/goals/g-000000000000/events/../../../../status.py",
    "http://127.0.0.1/../../etc/passwd",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_no_path_reaches_outside_the_assets(served, path):
    code, headers, body = served.request(path)
    assert code in (400, 404), (path, code)
    assert headers["content-type"].startswith("application/json")
    assert b"root:" not in body and b"import " not in body and b"[project]" not in body


def test_no_cors_headers(served):
    code, headers, _ = served.request("/api/status", headers={"Origin": "http://evil.example"})
    assert code == 200
    assert not [h for h in headers if h.startswith("access-control-")]
    code, headers, _ = served.request("/api/status", method="OPTIONS",
                                      headers={"Origin": "http://evil.example",
                                               "Access-Control-Request-Method": "GET"})
    assert code == 405 and not [h for h in headers if h.startswith("access-control-")]


def test_only_loopback_host_names_without_a_token(served):
    for host in ("evil.example", "evil.example:80", "10.0.0.1", "127.0.0.1.evil.example"):
        code, _, body = served.request("/healthz", headers={"Host": host})
        assert code == 403 and json.loads(body)["error"]["code"] == "forbidden", host
    for host in (f"localhost:{served.port}", f"127.0.0.1:{served.port}", f"[::1]:{served.port}"):
        assert served.request("/healthz", headers={"Host": host})[0] == 200, host


def test_non_loopback_bind_needs_a_token(registry_url):
    Registry.open(registry_url).close()
    with pytest.raises(LoopxError) as err:
        make_server(registry_url, host="0.0.0.0", port=0)
    assert err.value.code == "invalid_argument" and "--token" in err.value.message
    with pytest.raises(LoopxError):
        make_server(registry_url, host="127.0.0.1", port=0, token="  ")


def test_token_is_required_on_every_request(registry_url):
    Registry.open(registry_url).close()
    # Binding every interface is allowed with a token; the test talks to it over loopback only.
    srv = _start(registry_url, host="0.0.0.0", token="s3cret-token")
    served = Served(srv)
    try:
        for path in ("/", "/healthz", "/api/status", "/api/stream", "/assets/dashboard.js", "/nope"):
            code, headers, body = served.request(path)
            assert code == 401, path
            assert "Bearer" in headers["www-authenticate"]
            assert json.loads(body)["error"]["code"] == "unauthorized"
        for value in ("Bearer wrong", "Bearer", "s3cret-token", "Bearer s3cret-token-and-more",
                      "Basic " + base64.b64encode(b"user:wrong").decode(), "Basic !!!"):
            assert served.request("/healthz", headers={"Authorization": value})[0] == 401, value
        ok = {"Authorization": "Bearer s3cret-token", "Host": "dashboard.example:8765"}
        assert served.request("/healthz", headers=ok)[0] == 200
        assert served.request("/", headers=ok)[0] == 200
        basic = {"Authorization": "Basic " + base64.b64encode(b"anyone:s3cret-token").decode()}
        assert served.request("/api/status", headers=basic)[0] == 200
        # A method other than GET/HEAD is refused either way, and only after the token check.
        assert served.request("/api/status", method="POST", body=b"x")[0] == 401
        assert served.request("/api/status", method="POST", body=b"x", headers=ok)[0] == 405
    finally:
        srv.shutdown_all()


def _read_event(resp, deadline):
    """The next ``revision`` event's data from an SSE response."""
    event = {}
    while time.monotonic() < deadline:
        line = resp.fp.readline().decode()
        if not line:
            raise AssertionError("stream ended")
        line = line.rstrip("\n")
        if line == "" and event.get("event") == "revision":
            return json.loads(event["data"])
        if line == "":
            event = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(": ")
            event[key] = value
    raise AssertionError("no event in time")


def test_stream_reports_every_change(loopx, served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    try:
        conn.request("GET", "/api/stream")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream")
        deadline = time.monotonic() + 60
        first = _read_event(resp, deadline)["revision"]
        goal_id = make_goal(loopx, title="live")["goal"]
        second = _read_event(resp, deadline)["revision"]
        assert second > first
        assert served.json(f"/api/goals/{goal_id}")["revision"] == second
        assert loopx("gate", "add", "--goal-id", goal_id, "--title", "later").code == 0
        assert _read_event(resp, deadline)["revision"] > second
    finally:
        conn.close()


def test_the_server_cannot_write(served):
    # Read-only by construction: the store refuses writes, not just the routes.
    with pytest.raises(Exception) as err:
        served.srv.pool.run(lambda tx: tx.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')"))
    assert "read" in str(err.value).lower()
    with served.srv.pool._open() as reg:  # what the pool opens for every request thread
        assert reg.store.readonly
        with pytest.raises(LoopxError) as refused:
            reg.mutate("user", lambda w: w.emit("goal.created", {"title": "t"}, goal_id="g-000000000000"))
        assert refused.value.code == "registry_readonly"


def test_missing_registry_is_an_error_not_a_new_file(tmp_path):
    path = tmp_path / "none.db"
    with pytest.raises(LoopxError) as err:
        make_server(str(path), port=0)
    assert err.value.code == "registry_not_found" and not path.exists()


def test_status_server_command_as_a_real_process(loopx, registry_url):
    goal_id = make_goal(loopx, title="from a process")["goal"]
    proc = subprocess.Popen([sys.executable, "-m", "loopx", "status-server", "--port", "0", "--json"],
                            env=loopx_env(registry_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert info["readonly"] is True and info["url"].startswith("http://127.0.0.1:")
        port = int(info["url"].rstrip("/").rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", f"/api/goals/{goal_id}")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["goal"]["title"] == "from a process"
        conn.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    r = loopx("status-server", "--host", "0.0.0.0", "--port", "0", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"


def _fingerprint(url):
    """Everything durable: the ledger, every goal's current state, and (SQLite) the file bytes."""
    import hashlib
    import os
    import sqlite3

    from loopx.ledger import log as ledger

    with Registry.open(url) as reg, reg.read() as tx:
        events = tx.query("SELECT * FROM events ORDER BY id")
        goals = [r["id"] for r in tx.query("SELECT id FROM goals ORDER BY id")]
        snaps = {g: ledger.snapshot(tx, g) for g in goals}
        operations = tx.query("SELECT * FROM operations ORDER BY id")
    files = {}
    if "://" not in url:
        # Fold the WAL into the main file first, so that only a write could change the bytes later.
        conn = sqlite3.connect(url)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        for suffix in ("", "-wal"):
            if os.path.exists(url + suffix):
                files[suffix] = hashlib.sha256(open(url + suffix, "rb").read()).hexdigest()
    return events, snaps, operations, files


def test_a_barrage_of_requests_changes_nothing(loopx, registry_url):
    goal_id = make_goal(loopx, title="keep me")["goal"]
    assert loopx("gate", "add", "--goal-id", goal_id, "--title", "hold").code == 0
    assert loopx("todo", "add", "--goal-id", goal_id, "--text", "step").code == 0
    assert loopx("quota", "should-run", "--goal-id", goal_id).code == 0
    before = _fingerprint(registry_url)
    assert before[0] and (before[3] or "://" in registry_url)

    srv = _start(registry_url)
    served = Served(srv)
    body = json.dumps({"title": "injected", "goal_id": goal_id}).encode()
    requests = [
        ("GET", "/api/status", None), ("GET", f"/api/goals/{goal_id}", None), ("GET", "/", None),
        ("GET", f"/api/goals/{goal_id}/events?after=0", None), ("HEAD", "/api/goals", None),
        ("GET", "/healthz", None), ("POST", "/api/goals", body), ("PUT", f"/api/goals/{goal_id}", body),
        ("DELETE", f"/api/goals/{goal_id}", None), ("PATCH", "/api/status", body), ("POST", "/api/stream", body),
        ("GET", "/api/goals/g-000000000000", None), ("GET", "/assets/%2e%2e/status.py", None),
        ("GET", "/api/goals/x'%3B%20DROP%20TABLE%20events%3B%20--", None), ("GET", "/api/status?limit=1;DELETE", None),
    ]
    seen, failures, counting = {}, [], threading.Lock()

    def worker(n):
        for i in range(60):
            method, path, data = requests[(n + i) % len(requests)]
            try:
                code = served.request(path, method=method, body=data)[0]
            except Exception as exc:  # collected, so the main thread reports it
                failures.append(f"{method} {path}: {exc!r}")
                continue
            with counting:  # eight threads count: a bare read-modify-write of the dict can lose one
                seen[code] = seen.get(code, 0) + 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        srv.shutdown_all()
    assert not failures, failures[:5]
    assert not [t for t in threads if t.is_alive()], "a client thread still waiting for its answer"
    assert sum(seen.values()) == 480 and set(seen) <= {200, 400, 404, 405}, seen
    assert seen[405] >= 100 and seen[200] >= 150
    assert _fingerprint(registry_url) == before


def test_views_are_fresh_right_after_a_write(loopx, served):
    goal_id = make_goal(loopx, title="fresh")["goal"]
    for i in range(5):
        before = served.json(f"/api/goals/{goal_id}")
        # A repeat read shows the same state (it may be rebuilt: the change poller can tick between).
        assert _without_clock(served.json(f"/api/goals/{goal_id}")) == _without_clock(before)
        r = loopx("todo", "add", "--goal-id", goal_id, "--text", f"step {i}")
        assert r.code == 0, r
        after = served.json(f"/api/goals/{goal_id}")  # no wait: the write is visible at once
        assert after["todos"]["counts"]["open"] == i + 1 and after["revision"] > before["revision"]
        assert served.json("/api/status")["goals"][0]["todos"]["open"] == i + 1


def _raw(port, head: bytes) -> tuple[int, bytes]:
    """Send a request head exactly as given; the status code and the body."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("hosts", [
    [b"127.0.0.1", b"127.0.0.1"],                   # duplicate
    [b"127.0.0.1", b"evil.example"],                # conflicting
    [b"evil.example", b"127.0.0.1"],
    [b"127.0.0.1, evil.example"],                   # one header naming two
    [],                                              # none, on HTTP/1.1
], ids=["duplicate", "conflicting", "conflicting-reversed", "two-in-one", "missing"])
def test_an_ambiguous_host_is_a_400(served, hosts):
    head = b"GET /healthz HTTP/1.1\r\n" + b"".join(b"Host: " + h + b"\r\n" for h in hosts) + b"Connection: close\r\n\r\n"
    code, body = _raw(served.port, head)
    assert code == 400 and json.loads(body)["error"]["code"] == "bad_request", body
    # An absolute request target naming another host than the Host header.
    code, _ = _raw(served.port, b"GET http://evil.example/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert code == 400
    ok = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    assert _raw(served.port, ok)[0] == 200
