"""``GET /api/pages``: the read-only status server lists the pages capabilities announce in LoopX's
data directory (the dashboard links to each) - only a live process's, for this very registry,
with a plain http(s) URL; a stale, foreign or hostile announcement is not linked, and the status
server writes nothing to learn about them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request

import pytest

from loopx.ledger import served_pages
from loopx.ledger.registry import Registry
from loopx.status_server import make_server


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data" / "loopx" / "pages"


@pytest.fixture
def dashboard(sqlite_url, data_dir):
    Registry.open(sqlite_url).close()
    srv = make_server(sqlite_url, host="127.0.0.1", port=0, poll_interval=0.1)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield srv
    srv.shutdown_all()


def _pages(srv):
    with urllib.request.urlopen(srv.url + "api/pages") as resp:
        assert resp.status == 200
        return json.load(resp)["pages"]


def _registry_id(url):
    with Registry.open(url, readonly=True) as reg, reg.read() as tx:
        return served_pages.registry_id(tx)


def _write(folder, name, **page):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(page))


def test_a_live_announcement_for_this_registry_is_listed_until_withdrawn(dashboard, sqlite_url, data_dir):
    assert _pages(dashboard) == []
    rid = _registry_id(sqlite_url)
    assert rid
    path = served_pages.announce("approvals", title="Approvals", url="http://127.0.0.1:8766/", registry=rid)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert _pages(dashboard) == [{"capability": "approvals", "title": "Approvals", "url": "http://127.0.0.1:8766/"}]
    served_pages.withdraw(path)
    assert _pages(dashboard) == []


def test_stale_foreign_and_hostile_announcements_are_not_listed(dashboard, sqlite_url, data_dir):
    import socket

    rid = _registry_id(sqlite_url)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    me = os.getpid()
    _write(data_dir, "stale", url="http://127.0.0.1:1/", pid=dead.pid, host=host, registry_id=rid)
    _write(data_dir, "foreign", url="http://127.0.0.1:2/", pid=me, host=host, registry_id="another-registry")
    _write(data_dir, "unkeyed", url="http://127.0.0.1:3/", pid=me, host=host, registry_id=None)
    _write(data_dir, "script", url="javascript:alert(1)", pid=me, host=host, registry_id=rid)
    _write(data_dir, "elsewhere", url="http://127.0.0.1:4/", pid=me, host=host + "-other", registry_id=rid)
    (data_dir / "broken.json").write_text("{not json")
    before = {p.name: p.read_bytes() for p in data_dir.iterdir()}
    assert _pages(dashboard) == []
    _write(data_dir, "good", url="https://127.0.0.1:5/", pid=me, host=host, registry_id=rid, title="Good")
    assert [p["url"] for p in _pages(dashboard)] == ["https://127.0.0.1:5/"]
    # Read-only: the status server changed none of the files it read.
    assert {p.name: p.read_bytes() for p in data_dir.iterdir() if p.name != "good.json"} == before


def test_withdraw_leaves_another_process_announcement_alone(data_dir):
    path = served_pages.announce("approvals", title="Approvals", url="http://127.0.0.1:8766/", registry="r")
    page = json.loads(open(path).read())
    page["pid"] = page["pid"] + 1  # a newer server replaced it
    with open(path, "w") as f:
        json.dump(page, f)
    served_pages.withdraw(path)
    assert os.path.exists(path)
