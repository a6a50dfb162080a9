"""Fault injection beyond a full disk: a registry on a file system remounted read-only, and
``loopx`` processes killed (SIGKILL) at points during a write. Afterwards the registry is
consistent (``self-repair check`` ok, SQLite's integrity check ok) and holds exactly what was
committed; a step whose ``exec`` was killed is recorded as "ran, result unknown"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from loopx.domain import actions
from loopx.views.should_run import should_run
from loopx.ledger.registry import Registry
from loopx.testing import wait_until
from tests.factories import make_goal
from tests.reliability.conftest import env as plugin_env
from tests.reliability.faults import loopx, small_fs, snapshot  # noqa: F401 (fixture)

PY = sys.executable


def _goal(url) -> str:
    with Registry.open(url) as reg:
        return make_goal(reg, title="faults", todo_texts=("first",))["goal"]


def _consistent(url):
    code, out, err = loopx(url, "self-repair", "check", "--json")
    assert code == 0 and json.loads(out)["ok"] is True, (out, err)
    import sqlite3

    conn = sqlite3.connect(url)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


# --- read-only ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_registry_on_a_read_only_file_system_refuses_writes_in_one_line_and_stays_whole(small_fs):
    url = str(small_fs.root / "registry.db")
    g = _goal(url)
    before = snapshot(url)
    small_fs.readonly()
    try:
        for args in (("todo", "add", g, "--text", "more"), ("quota", "should-run", g),
                     ("project-prompt", "create", "--title", "another")):
            code, out, err = loopx(url, *args)
            assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)
            assert err.strip().endswith("[registry_readonly]") and "read-only file system" in err, err
            code, out, _ = loopx(url, "--json", *args)
            assert code == 2 and json.loads(out)["error"]["code"] == "registry_readonly", out
        # Reading still works, and the check says the registry is whole.
        code, out, err = loopx(url, "project-prompt", "list", "--json")
        assert code == 0 and [x["id"] for x in json.loads(out)] == [g], err
        assert loopx(url, "self-repair", "check")[0] == 0
    finally:
        small_fs.readonly(False)
    assert snapshot(url) == before
    _consistent(url)


# --- killed at points during a write -------------------------------------------------------------

# A child that opens the registry and, inside one write transaction, kills itself at a chosen
# point: before anything is written, after the event is appended and applied but before the
# commit, and just after the commit.
KILL_IN_WRITE = r"""
import os, signal, sys
from loopx.ledger.registry import Registry
url, goal, point = sys.argv[1], sys.argv[2], sys.argv[3]
reg = Registry.open(url)
from loopx.domain import todos
if point == "after_commit":
    todos.add(reg, "user", goal_id=goal, text="committed")
    os.kill(os.getpid(), signal.SIGKILL)
store_write = reg.store.write
def write(work, **kw):  # kw: then= (the anchor moved in the queue), passed on
    def dying(tx):
        if point == "before_work":
            os.kill(os.getpid(), signal.SIGKILL)
        out = work(tx)
        os.kill(os.getpid(), signal.SIGKILL)  # before_commit: everything written, nothing committed
        return out
    return store_write(dying, **kw)
reg.store.write = write
todos.add(reg, "user", goal_id=goal, text="never committed")
"""


@pytest.mark.parametrize("point", ["before_work", "before_commit", "after_commit"])
def test_a_writer_killed_at_any_point_of_a_write_leaves_the_registry_consistent(tmp_path, point):
    url = str(tmp_path / "registry.db")
    g = _goal(url)
    p = subprocess.run([PY, "-c", KILL_IN_WRITE, url, g, point], env=plugin_env(url), capture_output=True, timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr
    _consistent(url)
    texts = [t["text"] for t in json.loads(loopx(url, "todo", "list", g, "--json")[1])]
    assert texts == (["first", "committed"] if point == "after_commit" else ["first"])
    assert loopx(url, "todo", "add", g, "--text", "after")[0] == 0  # the next writer is not blocked


WRITER_LOOP = r"""
import sys
from loopx.ledger.registry import Registry
from loopx.domain import todos
url, goal = sys.argv[1], sys.argv[2]
with Registry.open(url) as reg:
    for i in range(10000):
        todos.add(reg, "user", goal_id=goal, text=f"t{i}")
        print(f"t{i}", flush=True)
"""


@pytest.mark.slow
def test_writers_killed_at_random_moments_lose_nothing_that_was_committed(tmp_path):
    url = str(tmp_path / "registry.db")
    g = _goal(url)
    acknowledged = []
    for seen in (1, 3, 10, 30):
        p = subprocess.Popen([PY, "-c", WRITER_LOOP, url, g], env=plugin_env(url), stdout=subprocess.PIPE, text=True)
        # Wait until it has acknowledged `seen` writes, then kill it inside its stream of writes (it
        # goes on writing while this reads, so the kill lands at a moment no one chose).
        first = [p.stdout.readline().strip() for _ in range(seen)]
        os.kill(p.pid, signal.SIGKILL)
        rest, _ = p.communicate(timeout=30)
        acknowledged += first + rest.split()
        _consistent(url)
    with Registry.open(url) as reg, reg.read() as tx:
        stored = {r["text"] for r in tx.query("SELECT text FROM todos WHERE goal_id = ?", (g,))}
    # Every write a writer saw committed is there; at most one per kill committed unseen.
    assert set(acknowledged) <= stored
    assert len(stored - set(acknowledged) - {"first"}) <= 4


def test_an_exec_killed_while_its_step_runs_is_recorded_as_ran_result_unknown(tmp_path):
    # A confined step writes only its workdir (the exec's cwd), never the registry's directory.
    work = tmp_path / "work"
    work.mkdir()
    url, started = str(tmp_path / "registry.db"), work / "started"
    g = _goal(url)
    with Registry.open(url) as reg:
        actions.add(reg, "user", goal_id=g, name="slow",
                    argv=[PY, "-c", f"import time; open({str(started)!r}, 'w').close(); time.sleep(60)"])
        run = should_run(reg, "user", goal_id=g)["interaction_contract"]["run_id"]
    p = subprocess.Popen([PY, "-m", "loopx", "exec", "--run-id", run, "--action", "slow"],
                         env=plugin_env(url, LOOPX_ACTOR="executor"), start_new_session=True, cwd=work,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def step_started():
        assert p.poll() is None, "the exec ended before its step started"
        return started.exists()

    wait_until(step_started, "the step to start", interval=0.02)
    # While it runs, other writes leave its journal entry alone (its lock is held).
    assert loopx(url, "todo", "add", g, "--text", "meanwhile")[0] == 0
    with Registry.open(url) as reg, reg.read() as tx:
        # Only exec's own start record (step_started, loopx/domain/claims.py): no result, known or unknown.
        kinds = [r["kind"] for r in tx.query("SELECT kind FROM evidence WHERE run_id = ?", (run,))]
        assert kinds == ["step_started"], kinds
    os.killpg(p.pid, signal.SIGKILL)  # the exec and its step
    p.wait(30)
    assert loopx(url, "todo", "add", g, "--text", "after")[0] == 0
    with Registry.open(url) as reg, reg.read() as tx:
        rows = tx.query("SELECT summary, data FROM evidence WHERE run_id = ? AND kind <> 'step_started'", (run,))
    assert len(rows) == 1 and "ran, result unknown" in rows[0]["summary"], rows
    assert json.loads(rows[0]["data"])["result_unknown"] is True
    _consistent(url)


def test_a_fix_leaves_one_whole_backup_readable_by_its_owner_only(tmp_path):
    """The backup holds what the registry holds: owner-only (0600) like the reserved name it
    replaces, and nothing of its making left beside it."""
    import stat

    from tests.reliability import tamper

    url = str(tmp_path / "registry.db")
    g = _goal(url)
    tamper.raw(url, "UPDATE goals SET title = 'edited behind its back' WHERE id = ?", (g,))
    code, out, err = loopx(url, "self-repair", "fix", "--json")
    assert code == 0, (out, err)
    made = sorted(p.name for p in tmp_path.iterdir() if ".bak-" in p.name)
    assert len(made) == 1 and made[0].startswith("registry.db.bak-"), made
    assert stat.S_IMODE((tmp_path / made[0]).stat().st_mode) == 0o600
    assert snapshot(str(tmp_path / made[0]))["goals"]


@pytest.mark.slow
def test_a_fix_killed_while_it_writes_its_backup_leaves_no_half_backup(tmp_path):
    """The moment a repair's backup has bytes on disk, the repair is killed: what is left under
    the backup's name (``registry.db.bak-*``) is empty or a whole registry, and no journal beside
    it. (Written in place, the name held a half copy with a hot ``-journal``.)"""
    import sqlite3

    from loopx.domain import evidence
    from tests.reliability import tamper

    url = str(tmp_path / "registry.db")
    with Registry.open(url) as reg:  # ~25 MB: a backup that takes long enough to be caught part way
        g = make_goal(reg, title="big", todo_texts=("first",))["goal"]
        for i in range(1500):
            evidence.record(reg, "user", goal_id=g, kind="note", summary=f"{i} " + "x" * 8000)
    tamper.raw(url, "UPDATE goals SET title = 'edited behind its back' WHERE id = ?", (g,))
    p = subprocess.Popen([PY, "-m", "loopx", "self-repair", "fix"], env=plugin_env(url),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    caught = False
    while p.poll() is None and not caught:
        for f in tmp_path.glob("*registry.db.bak-*"):
            try:
                caught = f.stat().st_size > 0
            except FileNotFoundError:
                continue
            if caught:
                p.kill()
                break
    p.wait(30)
    assert caught, "the backup was never seen part way"
    left = sorted(tmp_path.glob("registry.db.bak-*"))
    assert left and not [f.name for f in left if f.name.endswith("-journal")]
    for b in left:
        if b.stat().st_size:  # whole: every goal there, the hand edit included
            conn = sqlite3.connect(f"file:{b}?mode=ro", uri=True)
            try:
                assert conn.execute("SELECT title FROM goals").fetchall() == [("edited behind its back",)]
            finally:
                conn.close()


@pytest.mark.slow
def test_a_later_fix_sweeps_what_a_killed_fixs_backup_left_and_never_a_live_ones(tmp_path):
    """A fix killed while copying leaves its hidden ``.registry.db.bak-TIME.part`` (as large as
    the registry), maybe its journal, and the empty name it reserved: the next fix removes them.
    A copy another fix is writing (it holds the copy's lock) or has just begun is left alone."""
    import fcntl

    from tests.reliability import tamper

    url = str(tmp_path / "registry.db")
    g = _goal(url)
    tamper.raw(url, "UPDATE goals SET title = 'edited behind its back' WHERE id = ?", (g,))
    dead, live, young = (tmp_path / f".registry.db.bak-20260101T00000{i}.part" for i in range(3))
    journal, reserved = tmp_path / (dead.name + "-journal"), tmp_path / dead.name[1:-len(".part")]
    for f in (dead, live, young, journal):
        f.write_bytes(b"SQLite format 3\0" + b"x" * 4096)
    reserved.touch()
    for f in (dead, live):
        os.utime(f, (time.time() - 600, time.time() - 600))  # ten minutes old
    held = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # a live fix writing it
        code, out, err = loopx(url, "self-repair", "fix", "--json")
        assert code == 0 and json.loads(out)["ok"] is True, (out, err)
    finally:
        os.close(held)
    assert not dead.exists() and not journal.exists() and not reserved.exists()
    assert live.exists() and young.exists()


@pytest.mark.slow
def test_a_self_repair_fix_killed_part_way_leaves_a_registry_the_next_fix_completes(tmp_path):
    from tests.reliability import tamper

    url = str(tmp_path / "registry.db")
    goals = [_goal(url) for _ in range(12)]
    for g in goals:
        tamper.raw(url, "UPDATE goals SET title = 'edited behind its back' WHERE id = ?", (g,))
    for delay in (0.2, 0.6):
        p = subprocess.Popen([PY, "-m", "loopx", "self-repair", "fix"], env=plugin_env(url),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)  # not a wait: the moment the fix is killed, wherever it is by then
        p.kill()
        p.wait(30)
        import sqlite3

        conn = sqlite3.connect(url)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()
    code, out, err = loopx(url, "self-repair", "fix", "--json")
    assert code == 0 and json.loads(out)["ok"] is True, (out, err)
    _consistent(url)
    # Backups a killed fix left are whole copies or none at all, never a name reused.
    for b in tmp_path.glob("registry.db.bak-*"):
        if b.stat().st_size:
            assert snapshot(str(b))["goals"]
