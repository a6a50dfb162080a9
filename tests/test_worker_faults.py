"""A worker outlives registry faults: a real ``loopx worker`` process on a registry in a small
tmpfs that is filled, then freed, while it runs. It backs off, says so in its log (``fault``
lines, then ``fault_cleared``), never exits, and takes turns again once there is room."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.testing import wait_until
from tests.conftest import loopx_env
from tests.cli_helpers import in_process
from tests.factories import make_goal, workspace_of


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs of its own (root only), unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(path):
    """Write ``path`` until the file system refuses: the disk is full."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def _runtime(tmp_path):
    """The worker's runtime directory ($XDG_RUNTIME_DIR: where it keeps the fault it backs off from)."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    return run


def _status(env):
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "status"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _events(log_path):
    lines = log_path.read_text().splitlines() if log_path.exists() else []
    return [json.loads(line) for line in lines if line.startswith("{")]


def _registry_faults(log_path):
    """The fault / fault_cleared lines about the registry (a notification's own faults aside)."""
    return [e for e in _events(log_path) if e["event"] in ("fault", "fault_cleared") and e["what"] == "registry"]


@pytest.mark.slow
def test_a_full_disk_never_ends_the_worker_it_backs_off_and_carries_on(small_disk, tmp_path):
    url = str(small_disk / "registry.db")
    work = tmp_path / "work"
    work.mkdir()
    first = make_goal(in_process(url), title="before", description="d", acts={"work": ["sh", "-c", "echo a >> before"]},
                      todo_texts=["t"])["goal"]
    # The goal it takes up once the fault has cleared, made whole now and paused: made while the worker
    # runs, it would be seen half made (no todo or no action yet), fail its turn and wait 30 s or more.
    after = make_goal(in_process(url), title="after", description="d", acts={"work": ["sh", "-c", "echo b >> after"]},
                      todo_texts=["t"])["goal"]
    assert in_process(url)("project-prompt", "pause", "--goal-id", after).code == 0
    log = tmp_path / "worker.log"
    env = loopx_env(url, XDG_RUNTIME_DIR=str(_runtime(tmp_path)))
    with open(log, "w") as err:
        w = subprocess.Popen([sys.executable, "-m", "loopx", "worker", "--beat-seconds", "0.2", "--log-format", "json"],
                             env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=err, text=True,
                             start_new_session=True)
    try:
        wait_until(lambda: any(e["event"] == "turn_end" and e["goal"] == first for e in _events(log)), "a first turn")
        _fill(small_disk / "filler")
        faults = wait_until(lambda: _registry_faults(log), "a fault line")
        assert faults[0]["event"] == "fault" and faults[0]["error"] == "disk_full", faults
        wait_until(lambda: len([e for e in _registry_faults(log) if e["event"] == "fault"]) >= 3 or w.poll() is not None,
                   "it to try again, and again")
        assert w.poll() is None, "the worker ended on a full disk"
        # `loopx status` (which only reads) shows it alive and backing off, with the fault and since when.
        shown = _status(env)["workers"][0]
        assert shown["state"] == "running" and shown["pid"] == w.pid, shown
        assert shown["fault"]["code"] == "disk_full" and shown["fault"]["attempts"] >= 1, shown
        assert shown["fault"]["since"] >= faults[0]["at"], (shown, faults[0])  # since this run of faults began
        text = subprocess.run([sys.executable, "-m", "loopx", "status"], env=env, capture_output=True, text=True,
                              timeout=60).stdout
        assert f"BACKING OFF: disk_full since {shown['fault']['since']}" in text, text
        seen = len(_events(log))
        (small_disk / "filler").unlink()
        # (On a full disk some writes still fit in space SQLite already holds: faults come and go, so
        # only a fault_cleared logged after the disk was freed counts. The worker notices at the end
        # of its current back-off, which doubles up to 30 s.)
        wait_until(lambda: any(e["event"] == "fault_cleared" and e.get("what") == "registry"
                               for e in _events(log)[seen:]), "the fault to clear", timeout=120)
        # It carries on: a goal resumed now gets its turn from the same process.
        subprocess.run([sys.executable, "-m", "loopx", "project-prompt", "resume", "--goal-id", after],
                       env=env, check=True, capture_output=True, timeout=60)
        try:
            wait_until(lambda: any(e["event"] == "turn_end" and e["goal"] == after and e["outcome"] == "ok"
                                   for e in _events(log)), "a turn after the fault cleared", timeout=120)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the worker's log ends: {log.read_text()[-4000:]}") from None
        assert w.poll() is None
        # Recovered: no fault now, and the one it came through is in its heartbeat.
        shown = wait_until(lambda: (lambda w: w if w["fault"] is None and w["last_fault"] else None)(
            _status(env)["workers"][0]), "the heartbeat after the fault")
        assert shown["last_fault"]["code"] == "disk_full" and shown["state"] == "running"
    finally:
        os.kill(w.pid, signal.SIGTERM)
        w.wait(timeout=60)
    assert w.returncode == 128 + signal.SIGTERM, log.read_text()[-2000:]  # stopped by the signal, not a fault
    assert _events(log)[-1]["event"] == "worker_stop"



@pytest.mark.parametrize("pid_reused", [False, True], ids=["pid-gone", "pid-reused"])
@pytest.mark.slow
def test_a_lease_whose_owner_was_killed_never_blocks_its_goal_even_stamped_a_year_ahead(tmp_path, loopx_clock,
                                                                                        pid_reused):
    url = str(tmp_path / "registry.db")
    work = tmp_path / "work"
    work.mkdir()
    gid = make_goal(in_process(url), title="g", description="d", todo_texts=["t"], acts={
        "work": ["sh", "-c", "touch started; while [ ! -e go ]; do sleep 0.05; done"]})["goal"]
    loopx_clock.advance(365 * 86400)  # the wall clock a year ahead: the lease expires a year from now
    a = subprocess.Popen([sys.executable, "-m", "loopx", "worker", "--beat-seconds", "1"], env=loopx_env(url), cwd=work,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until(lambda: (workspace_of(url, gid) / "started").exists(), "the step to start")
    go = workspace_of(url, gid) / "go"  # the step sees its workspace, not the checkout
    os.kill(a.pid, signal.SIGKILL)
    a.wait(timeout=10)
    go.touch()  # its orphaned turn ends (its lease stays: the worker never released it)
    if pid_reused:  # its pid now belongs to another, live process (here: this test's own)
        import sqlite3

        with sqlite3.connect(url) as db:
            info = json.loads(db.execute("SELECT info FROM workers WHERE pid = ?", (a.pid,)).fetchone()[0])
            info["owner"]["pid"] = os.getpid()
            db.execute("UPDATE workers SET pid = ?, info = ? WHERE pid = ?", (os.getpid(), json.dumps(info), a.pid))
    loopx_clock.set(0)  # the clock set right again
    log = tmp_path / "b.log"
    with open(log, "w") as err:
        b = subprocess.run([sys.executable, "-m", "loopx", "worker", "--exit-when-idle", "--log-format", "json"],
                           env=loopx_env(url), cwd=work, stdout=subprocess.DEVNULL, stderr=err, timeout=120)
    events = [(e["event"], e.get("goal")) for e in _events(log)]
    assert ("lease_taken", gid) in events and ("lease_refused", gid) not in events, events
    assert b.returncode == 0


@pytest.fixture
def own_postgres():
    """A throwaway PostgreSQL server of this test's own (tests/pg_server.py), to stop and start under a
    worker without disturbing the session's server."""
    from tests.pg_server import ServerUnavailable, ThrowawayPostgres

    server = ThrowawayPostgres()
    try:
        server.start()
    except ServerUnavailable as exc:
        pytest.skip(f"no throwaway PostgreSQL server here: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.postgres
def test_postgresql_stopped_and_started_under_a_worker_and_down_at_its_start(own_postgres, tmp_path):
    url = own_postgres.url
    work = tmp_path / "work"
    work.mkdir()
    first = make_goal(in_process(url), title="first", description="d", acts={"work": ["sh", "-c", "echo a >> first"]},
                      todo_texts=["t"])["goal"]
    after = make_goal(in_process(url), title="after", description="d", acts={"work": ["sh", "-c", "echo b >> after"]},
                      todo_texts=["t"])["goal"]  # made whole now, paused: resumed once the server is back
    assert in_process(url)("project-prompt", "pause", "--goal-id", after).code == 0
    env = loopx_env(url, XDG_RUNTIME_DIR=str(_runtime(tmp_path)))
    # A wrong password is not a fault to wait out: refused at once, exit 2, nothing started.
    wrong = subprocess.run([sys.executable, "-m", "loopx", "worker"], env={**env, "LOOPX_REGISTRY": re.sub(
        r"://(\w+):[^@]+@", r"://\1:wrong@", url)}, capture_output=True, text=True, timeout=60, cwd=work)
    assert wrong.returncode == 2 and "authentication failed" in wrong.stderr, wrong.stderr
    log = tmp_path / "worker.log"
    own_postgres.pause()  # the database is down when the worker starts: it backs off, it does not exit 2
    with open(log, "w") as err:
        w = subprocess.Popen([sys.executable, "-m", "loopx", "worker", "--beat-seconds", "0.2", "--log-format", "json"],
                             env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=err, text=True,
                             start_new_session=True)
    try:
        wait_until(lambda: len([e for e in _registry_faults(log) if e["event"] == "fault"]) >= 2 or w.poll() is not None,
                   "the worker to try, and try again")
        assert w.poll() is None, log.read_text()[-2000:]
        assert {e["error"] for e in _registry_faults(log)} == {"registry_unavailable"}, _registry_faults(log)
        own_postgres.resume()
        wait_until(lambda: any(e["event"] == "turn_end" and e["goal"] == first and e["outcome"] == "ok"
                               for e in _events(log)), "the first turn once the database is back")
        assert _registry_faults(log)[-1]["event"] == "fault_cleared"
        seen = len(_registry_faults(log))
        own_postgres.pause()  # stopped under the running worker
        wait_until(lambda: len([e for e in _registry_faults(log)[seen:] if e["event"] == "fault"]) >= 3
                   or w.poll() is not None, "faults while the server is down")
        assert w.poll() is None, log.read_text()[-2000:]
        assert all(e["error"] == "registry_unavailable" for e in _registry_faults(log)[seen:])
        # `loopx status` cannot read the registry either; it says so, and that the worker waits for it.
        down = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "status"], env=env,
                              capture_output=True, text=True, timeout=60)
        error = json.loads(down.stdout)["error"]
        assert down.returncode == 2 and error["code"] == "registry_unavailable", down
        waiting = error["details"]["workers_backing_off"]
        assert [(x["worker"], x["pid"], x["code"]) for x in waiting] == [(
            _events(log)[0]["worker"], w.pid, "registry_unavailable")], waiting
        down = subprocess.run([sys.executable, "-m", "loopx", "status"], env=env, capture_output=True, text=True,
                              timeout=60)
        assert f"backing off until it is back: worker {waiting[0]['worker']} (pid {w.pid}" in down.stderr, down.stderr
        seen = len(_events(log))
        own_postgres.resume()
        wait_until(lambda: any(e["event"] == "fault_cleared" and e.get("what") == "registry"
                               for e in _events(log)[seen:]), "the fault to clear", timeout=120)
        subprocess.run([sys.executable, "-m", "loopx", "project-prompt", "resume", "--goal-id", after],
                       env=env, check=True, capture_output=True, timeout=60)
        try:
            wait_until(lambda: any(e["event"] == "turn_end" and e["goal"] == after and e["outcome"] == "ok"
                                   for e in _events(log)), "a turn after the server came back", timeout=120)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the worker's log ends: {log.read_text()[-4000:]}") from None
        # `loopx status` says it is running, and which fault it came through.
        shown = wait_until(lambda: (lambda w: w if w["last_fault"] and w["fault"] is None else None)(
            _status(env)["workers"][0]), "the heartbeat after the fault")
        assert shown["state"] == "running" and shown["last_fault"]["code"] == "registry_unavailable", shown
        assert w.poll() is None
    finally:
        os.kill(w.pid, signal.SIGTERM)
        w.wait(timeout=60)
    assert w.returncode == 128 + signal.SIGTERM, log.read_text()[-2000:]
    assert _events(log)[-1]["event"] == "worker_stop"


@pytest.mark.slow
def test_a_worker_that_wakes_to_find_its_lease_taken_logs_lease_lost_and_stops_that_turn(tmp_path, loopx_clock):
    from loopx.domain import supervision
    from loopx.ledger.registry import Registry

    url = str(tmp_path / "registry.db")
    work = tmp_path / "work"
    work.mkdir()
    gid = make_goal(in_process(url), title="g", description="d", todo_texts=["t"], acts={
        "work": ["sh", "-c", "touch started; while [ ! -e go ]; do sleep 0.05; done"]})["goal"]
    log = tmp_path / "worker.log"
    with open(log, "w") as err:
        w = subprocess.Popen([sys.executable, "-m", "loopx", "worker", "--beat-seconds", "0.2", "--grace-seconds", "1",
                              "--log-format", "json"], env=loopx_env(url), cwd=work, stdout=subprocess.DEVNULL,
                             stderr=err, start_new_session=True)
    try:
        wait_until(lambda: (workspace_of(url, gid) / "started").exists(), "the step to start")
        space = workspace_of(url, gid)  # where the step runs (its workspace, not the checkout)
        taken = next(e for e in _events(log) if e["event"] == "lease_taken" and e["goal"] == gid)
        os.kill(w.pid, signal.SIGSTOP)  # a suspended laptop: no beat, no renewal ...
        loopx_clock.advance(120)  # ... past its lease, and another worker takes the goal over
        with Registry.open(url) as reg:
            newer = supervision.acquire(reg, gid, "w-other", 60)
        assert newer == taken["token"] + 1
        os.kill(w.pid, signal.SIGCONT)  # it wakes up: its next renewal finds the lease gone
        lost = wait_until(lambda: [e for e in _events(log) if e["event"] == "lease_lost"], "the lease_lost line")
        assert lost == [{**lost[0], "goal": gid, "token": taken["token"]}], lost
        # The turn it no longer owns was stopped (its grace second, then its step) and said so.
        end = wait_until(lambda: next((e for e in _events(log) if e["event"] == "turn_end" and e["goal"] == gid), None),
                         "the turn to end")
        assert end["outcome"] == "interrupted", end
        assert w.poll() is None
    finally:
        os.kill(w.pid, signal.SIGCONT)
        os.kill(w.pid, signal.SIGTERM)
        w.wait(timeout=60)
    assert not (space / "go").exists()


def test_a_registry_file_that_does_not_exist_is_refused_at_start_not_waited_for(tmp_path):
    missing = tmp_path / "nowhere" / "registry.db"
    p = subprocess.run([sys.executable, "-m", "loopx", "worker"], env=loopx_env(str(missing)), capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 2 and "registry_not_found" in p.stderr, p.stderr
    assert not missing.parent.exists()


def test_a_server_shut_down_under_an_open_transaction_is_a_fault_to_wait_out_not_a_crash():
    # Stopping PostgreSQL while a worker reads ends that read with AdminShutdown (a subclass of
    # OperationalError, raised by the ROLLBACK): the worker backs off as for any lost connection.
    # A constraint violation is the worker's own bug: not waited out.
    errors = pytest.importorskip("psycopg.errors")
    from loopx.values.worker_log import passing_fault

    assert passing_fault(errors.AdminShutdown("terminating connection due to administrator command")) == \
        "registry_unavailable"
    assert passing_fault(errors.OperationalError("server closed the connection")) == "registry_unavailable"
    assert passing_fault(errors.UniqueViolation("duplicate key")) is None
