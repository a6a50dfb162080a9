"""The status server's view cache: keyed by the revision of what a view shows, single-flight, bounded."""

from __future__ import annotations

import http.client
import json
import sys
import threading

import pytest

from loopx.ledger.registry import Registry
from loopx.status_server import ViewCache, make_server
from loopx.testing import wait_until
from tests.factories import make_goal


def _get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200, body
        return json.loads(body)
    finally:
        conn.close()


def _inside(threads, function: str) -> int:
    """How many of ``threads`` are inside ``function`` now (building, or waiting for a build)."""
    frames = sys._current_frames()
    count = 0
    for t in threads:
        frame = frames.get(t.ident)
        while frame is not None and frame.f_code.co_name != function:
            frame = frame.f_back
        count += frame is not None
    return count


@pytest.fixture
def server(registry_url, monkeypatch):
    monkeypatch.setenv("LOOPX_STATUS_CACHE_SECONDS", "60")  # only revisions may invalidate here
    Registry.open(registry_url).close()
    srv = make_server(registry_url, port=0, poll_interval=0.05)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield srv
    srv.shutdown_all()


def test_a_write_to_one_goal_leaves_other_goal_views_cached(loopx, server):
    port = server.server_address[1]
    a, b = make_goal(loopx, title="a")["goal"], make_goal(loopx, title="b")["goal"]
    first = _get(port, f"/api/goals/{a}")
    assert loopx("todo", "add", "--goal-id", b, "--text", "elsewhere").code == 0
    # The overview moves once the watcher has seen the commit ...
    wait_until(lambda: _get(port, "/api/status")["revision"] > first["revision"], "the overview to move")
    assert _get(port, f"/api/goals/{a}") == first  # ... the other goal's view does not: same bytes

    assert loopx("todo", "add", "--goal-id", a, "--text", "here").code == 0
    again = _get(port, f"/api/goals/{a}")
    assert again["goal"]["revision"] == first["goal"]["revision"] + 1
    assert [t["text"] for t in again["todos"]["items"]] == ["here"]
    events = _get(port, f"/api/goals/{a}/events")
    assert [e["kind"] for e in events["events"]] == ["goal.created", "todo.added"]


def test_the_overview_follows_every_write(loopx, server):
    port = server.server_address[1]
    a = make_goal(loopx, title="a")["goal"]
    assert [g["id"] for g in _get(port, "/api/status")["goals"]] == [a]
    b = make_goal(loopx, title="b")["goal"]
    wait_until(lambda: [g["id"] for g in _get(port, "/api/status")["goals"]] == [b, a], "the overview to show b")


def test_concurrent_misses_build_once():
    cache = ViewCache(ttl=60)
    calls = []

    release = threading.Event()

    def build():
        calls.append(1)
        assert release.wait(60)
        return b"view"

    out = []
    threads = [threading.Thread(target=lambda: out.append(cache.get_or_build(("k", 1), build))) for _ in range(8)]
    for t in threads:
        t.start()
    wait_until(lambda: _inside(threads, "get_or_build") == 8, "all eight to ask while the first builds")
    release.set()
    for t in threads:
        t.join()
    assert out == [b"view"] * 8 and len(calls) == 1
    cache.get_or_build(("k", 2), build)  # a new revision is a new view
    assert len(calls) == 2


def test_a_failed_build_is_not_cached_and_reaches_every_waiter():
    cache = ViewCache(ttl=60)

    release = threading.Event()

    def fail():
        assert release.wait(60)
        raise ValueError("broken")

    errors = []

    def ask():
        try:
            cache.get_or_build("k", fail)
        except ValueError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: _inside(threads, "get_or_build") == 4, "all four to ask while the first builds")
    release.set()
    for t in threads:
        t.join()
    assert errors == ["broken"] * 4
    assert cache.get_or_build("k", lambda: b"fixed") == b"fixed"


def test_memory_stays_under_the_byte_cap():
    cache = ViewCache(ttl=60, max_bytes=100_000)
    for i in range(100):
        cache.get_or_build(i, lambda: b"x" * 10_000)
        assert cache.size_bytes <= 100_000
    assert cache.get_or_build(99, lambda: b"rebuilt") == b"x" * 10_000  # the newest stay
    assert cache.get_or_build(0, lambda: b"rebuilt") == b"rebuilt"  # the oldest went


def test_while_a_new_version_builds_others_get_the_previous_one():
    cache = ViewCache(ttl=60)
    assert cache.get_or_build(("overview", 1), lambda: b"v1", family="overview") == b"v1"
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(10)
        return b"v2"

    leader = []
    t = threading.Thread(target=lambda: leader.append(cache.get_or_build(("overview", 2), slow, family="overview")))
    t.start()
    started.wait(10)
    # No queue: the build is held until after this answer, so waiting for it could not give v1.
    assert cache.get_or_build(("overview", 2), slow, family="overview") == b"v1"
    release.set()
    t.join()
    assert leader == [b"v2"]  # the request that built it saw the new version
    assert cache.get_or_build(("overview", 2), slow, family="overview") == b"v2"
