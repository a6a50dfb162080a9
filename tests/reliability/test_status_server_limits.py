"""The status server against hostile clients: non-ASCII numbers, slow or idle connections, and
more event streams than it will hold threads for."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from loopx.ledger.registry import Registry
from loopx.status_server import make_server
from loopx.testing import wait_until
from tests.factories import make_goal


@pytest.fixture
def server(registry_url, monkeypatch):
    def start(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, str(v))
        Registry.open(registry_url).close()
        srv = make_server(registry_url, port=0, poll_interval=0.05)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(srv)
        return srv

    started = []
    yield start
    for srv in started:
        srv.shutdown_all()


def _goal(url) -> str:
    with Registry.open(url) as reg:
        return make_goal(reg, title="g")["goal"]


@pytest.mark.parametrize("query", ["after=%C2%B2", "after=%D9%A3", "after=%EF%BC%91", "limit=%E2%91%A0",
                                   "after=1%C2%B2", "limit=%F0%9D%9F%8F"])
def test_unicode_digits_are_a_400_and_the_connection_lives_on(server, registry_url, query):
    srv = server()
    goal_id = _goal(registry_url)
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
    try:
        conn.request("GET", f"/api/goals/{goal_id}/events?{query}")
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert resp.status == 400 and body["error"]["code"] == "invalid_argument"
        # The same keep-alive connection still serves the next request.
        conn.request("GET", f"/api/goals/{goal_id}/events?after=0")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["events"]
    finally:
        conn.close()


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> float:
    """Seconds until the server closes ``sock`` (sending ``trickle`` a byte at a time meanwhile)."""
    start = time.monotonic()
    sock.settimeout(0.2)
    i = 0
    while time.monotonic() - start < seconds:
        if trickle:
            try:
                sock.sendall(trickle[i % len(trickle):i % len(trickle) + 1])
            except OSError:
                return time.monotonic() - start
            i += 1
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - start
    raise AssertionError(f"connection still open after {seconds}s")


def test_an_idle_connection_is_closed(server):
    srv = server(LOOPX_STATUS_HEAD_SECONDS=0.5)
    with socket.create_connection(("127.0.0.1", srv.server_address[1])) as sock:
        assert _closed_within(sock, 10) < 5


def test_a_slowly_trickled_request_head_is_cut_off(server):
    srv = server(LOOPX_STATUS_HEAD_SECONDS=1)
    with socket.create_connection(("127.0.0.1", srv.server_address[1])) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        # One header byte every 0.2 s: every read makes progress, yet the head never completes.
        assert _closed_within(sock, 15, trickle=b"X-Slow: aaaaaaaa\r\n") < 6


def test_a_keep_alive_connection_closes_once_idle_but_serves_before(server):
    srv = server(LOOPX_STATUS_HEAD_SECONDS=1)
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() and conn.sock is not None
    assert _closed_within(conn.sock, 10) < 5
    conn.close()


def _open_stream(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/api/stream")
    return conn, conn.getresponse()


def test_event_streams_are_capped_with_a_clear_503(server):
    srv = server(LOOPX_STATUS_MAX_STREAMS=2)
    port = srv.server_address[1]
    first, r1 = _open_stream(port)
    second, r2 = _open_stream(port)
    assert r1.status == r2.status == 200
    third, r3 = _open_stream(port)
    body = json.loads(r3.read())
    assert r3.status == 503 and body["error"]["code"] == "too_many_streams" and r3.getheader("Retry-After")
    third.close()
    # Other routes are still served while the streams are full.
    ok = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    ok.request("GET", "/healthz")
    assert ok.getresponse().status == 200
    ok.close()
    # A stream that ends frees its place.
    r1.close()
    first.close()

    def place_freed():
        again, r4 = _open_stream(port)
        ok = r4.status == 200
        r4.close() if ok else r4.read()
        again.close()
        return ok

    wait_until(place_freed, "a closed stream to free its place", timeout=20, interval=0.2)
    r2.close()
    second.close()
