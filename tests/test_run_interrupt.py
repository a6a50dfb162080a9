"""A step never starts twice for one run, and interruptions lose nothing (real processes, real signals)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from loopx.testing import signal_delivered, wait_until
from tests.conftest import loopx_env
from tests.cli_helpers import in_process
from tests.factories import make_goal, workspace_of


def _cli(url, *args, cwd=None, timeout=60):
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *map(str, args)], env=loopx_env(url),
                       capture_output=True, text=True, timeout=timeout, cwd=cwd)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr


def _spawn(url, *args, cwd=None):
    return subprocess.Popen([sys.executable, "-m", "loopx", "--format", "json", *map(str, args)],
                            env=loopx_env(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            start_new_session=True)


def _work(tmp_path):
    # The cwd of the loopx process that runs the turns: the goal's project. Its step runs in the
    # goal's own workspace (loopx/domain/workspace.py), made from it on the first turn, in a world whose
    # /tmp is private (tmp_path is invisible to it): a step's files are relative to its directory
    # and read (or a sentinel put) in workspace_of(url, goal).
    work = tmp_path / "work"
    work.mkdir()
    return work


def _tag():
    """A unique `sleep` duration: it names the step's processes on the host (the step's world has
    a PID namespace of its own, so a pid it prints is not the host's)."""
    return f"60.{uuid.uuid4().int % 10**9:09d}"


def _running(tag):
    """The host's live (not zombie) processes whose command line holds ``tag``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if tag.encode() in f.read() and _alive(int(name)):
                        found.append(int(name))
            except OSError:
                pass
    return found


def _goal(url, tmp_path, *actions):
    return make_goal(in_process(url), title="t", description="d", acts={name: ["sh", "-c", script] for name, script in actions},
                     todo_texts=("work",))["goal"]


def _evidence(url, run_id):
    code, rows, err = _cli(url, "evidence", "list", "--run-id", run_id)
    assert code == 0, err
    return rows


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("registry_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
@pytest.mark.slow
def test_two_processes_racing_one_step_run_it_once(registry_url, tmp_path):
    work = _work(tmp_path)
    gid = _goal(registry_url, tmp_path, ("slow", f"echo start >> {work}/log; sleep 1"))
    code, contract, err = _cli(registry_url, "quota", "should-run", gid)
    run_id = contract["interaction_contract"]["run_id"]
    procs = [_spawn(registry_url, "exec", "--run-id", run_id, "--action", "slow", cwd=work) for _ in range(2)]
    outs = [(p.wait(timeout=60), p.stdout.read()) for p in procs]
    codes = sorted(c for c, _ in outs)
    assert codes == [0, 2], outs
    refused = json.loads(next(o for c, o in outs if c == 2))
    assert refused["error"]["code"] == "step_already_started"
    assert (work / "log").read_text() == "start\n"
    started = [e for e in _evidence(registry_url, run_id) if e["kind"] == "step_started"]
    assert len(started) == 1 and started[0]["actor"] == "core"


@pytest.mark.slow
def test_sigkilled_turn_never_runs_its_step_again_and_its_run_is_abandoned(sqlite_url, tmp_path):
    url = sqlite_url
    work = _work(tmp_path)
    tag = _tag()
    # The first start of the step hangs (until stopped); a later one returns at once.
    script = f"n=$(cat log 2>/dev/null | wc -l); echo run >> log; [ $n -gt 0 ] || sleep {tag}"
    gid = _goal(url, tmp_path, ("work", script))
    log = workspace_of(url, gid) / "log"
    turn = _spawn(url, "turn", gid, "--executor", "shell", cwd=work)
    wait_until(lambda: log.exists() and _running(f"sleep {tag}"), "the step to start")
    os.kill(turn.pid, signal.SIGKILL)
    turn.wait(timeout=10)
    # Under the turn's broker the step's exec runs inside the turn itself, so the step's watcher
    # (loopx.sandbox.process) ends the step with it: nothing of the dead turn keeps running.
    wait_until(lambda: not _running(tag), "the dead turn's step to be stopped", timeout=15)
    code, listed, _ = _cli(url, "run", "list", gid)
    first = listed[0]["id"]
    assert listed[0]["state"] == "open"
    # The same step of the same run, started again by hand: refused (it started once already).
    code, out, _ = _cli(url, "exec", "--run-id", first, "--action", "work", cwd=work)
    assert code == 2 and out["error"]["code"] == "step_already_started"
    assert log.read_text() == "run\n"

    code, out, err = _cli(url, "turn", gid, "--executor", "shell", cwd=work)
    assert code == 0, err
    assert out["run_id"] != first and out["outcome"] == "ok"
    code, shown, err = _cli(url, "run", "show", "--run-id", first)
    assert code == 0, (shown, err)
    assert shown["status"] == "abandoned"
    # The started step is recorded once as "ran, result unknown": the exec inside the killed turn
    # left its intent in the step journal (loopx.ledger.step_journal), which the next write records; the
    # abandonment then finds the step's result in and adds no second record (step_unknown).
    unknown = [e for e in shown["evidence"] if "ran, result unknown" in e["summary"]]
    assert len(unknown) == 1, [(e["kind"], e["summary"]) for e in shown["evidence"]]
    recorded = next(e for e in _evidence(url, first) if e["id"] == unknown[0]["id"])
    assert recorded["kind"] == "command" and recorded["data"]["result_unknown"] is True
    assert log.read_text() == "run\nrun\n"  # once per run, never twice in one


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow
def test_signal_lets_the_step_finish_starts_no_other_and_closes_the_run_interrupted(sqlite_url, tmp_path, sig):
    url = sqlite_url
    work = _work(tmp_path)
    gid = _goal(url, tmp_path,
                ("first", "touch started; while [ ! -e go ]; do sleep 0.05; done; echo done > first"),
                ("second", "touch second"))
    ws = workspace_of(url, gid)
    go = ws / "go"
    turn = _spawn(url, "turn", gid, "--executor", "shell", "--grace-seconds", "60", cwd=work)
    wait_until(lambda: (ws / "started").exists(), "the first step to start")
    os.kill(turn.pid, sig)
    wait_until(lambda: signal_delivered(turn.pid, sig), "the turn to take the signal")  # before the step ends
    go.touch()
    out, err = turn.communicate(timeout=60)
    assert turn.returncode == 128 + sig, err
    doc = json.loads(out)
    assert doc["outcome"] == "interrupted"
    assert (ws / "first").read_text() == "done\n"  # the running step finished
    assert not (ws / "second").exists()  # the next one never started
    code, shown, _ = _cli(url, "run", "show", "--run-id", doc["run_id"])
    assert shown["status"] == "finished" and shown["outcome"] == "interrupted"
    ev = next(e for e in shown["evidence"] if e["kind"] == "interrupted")
    assert signal.Signals(sig).name in ev["summary"] and "no step was cut short" in ev["summary"]


def test_grace_over_stops_the_step_group_and_records_it(sqlite_url, tmp_path):
    url = sqlite_url
    work = _work(tmp_path)
    tag = _tag()
    gid = _goal(url, tmp_path, ("hang", f"sleep {tag}; true"))
    turn = _spawn(url, "turn", gid, "--executor", "shell", "--grace-seconds", "0.5", cwd=work)
    wait_until(lambda: _running(f"sleep {tag}"), "the step to start")
    started = time.monotonic()
    os.kill(turn.pid, signal.SIGTERM)
    out, err = turn.communicate(timeout=30)
    assert time.monotonic() - started < 15
    doc = json.loads(out)
    assert doc["outcome"] == "interrupted", err
    assert _running(tag) == []  # the step's shell and its sleep: the whole group
    code, shown, _ = _cli(url, "run", "show", "--run-id", doc["run_id"])
    kinds = [e["kind"] for e in shown["evidence"]]
    assert "step_unknown" in kinds and "interrupted" in kinds
    ev = next(e for e in shown["evidence"] if e["kind"] == "interrupted")
    assert "after the grace period" in ev["summary"]


def test_sigterm_in_loop_starts_no_new_turn(sqlite_url, tmp_path):
    url = sqlite_url
    work = _work(tmp_path)
    gid = _goal(url, tmp_path, ("step", "touch started; while [ ! -e go ]; do sleep 0.05; done"))
    ws = workspace_of(url, gid)
    go = ws / "go"
    loop = _spawn(url, "loop", gid, "--executor", "shell", "--max-turns", "5", cwd=work)
    wait_until(lambda: (ws / "started").exists(), "the first turn's step")
    os.kill(loop.pid, signal.SIGTERM)
    wait_until(lambda: signal_delivered(loop.pid, signal.SIGTERM), "the loop to take the signal")
    go.touch()
    out, err = loop.communicate(timeout=60)
    assert loop.returncode == 143, err
    doc = json.loads(out)
    assert doc["stopped"] == "interrupted"
    code, listed, _ = _cli(url, "run", "list", gid)
    assert len(listed) == 1 and listed[0]["outcome"] == "interrupted"


def test_a_second_turn_does_not_carry_out_a_run_a_live_turn_owns(sqlite_url, tmp_path):
    url = sqlite_url
    work = _work(tmp_path)
    gid = _goal(url, tmp_path, ("work", "touch started; while [ ! -e go ]; do sleep 0.05; done; echo ran >> log"))
    ws = workspace_of(url, gid)
    go = ws / "go"
    first = _spawn(url, "turn", gid, "--executor", "shell", cwd=work)
    wait_until(lambda: (ws / "started").exists(), "the step to start")
    code, out, _ = _cli(url, "turn", gid, "--executor", "shell", cwd=work)  # same agent: should-run hands the run back
    assert code == 2 and out["error"]["code"] == "run_in_progress"
    go.touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0 and json.loads(out)["outcome"] == "ok", err
    assert (ws / "log").read_text() == "ran\n"


def test_a_run_whose_lease_expired_mid_step_records_the_step_as_result_unknown(sqlite_url, tmp_path):
    from loopx.values import clock

    url = sqlite_url
    gid = _goal(url, tmp_path, ("work", "true"))
    code, contract, _ = _cli(url, "quota", "should-run", gid, "--ttl-seconds", "60")
    run_id = contract["interaction_contract"]["run_id"]
    # The step's start as `loopx exec` records it, from a process on another machine (so only
    # the lease can tell that it is gone), then the lease runs out (scripted clock, no sleeping).
    from loopx.domain.claims import STARTED
    from loopx.ledger.registry import Registry
    from loopx.values.validate import new_id

    with Registry.open(url) as reg:
        def work(w):
            w.emit("evidence.added", {"evidence_id": new_id("evidence"), "run_id": run_id, "kind": STARTED,
                                      "summary": "action:work: started", "data": {"step": "action:work",
                                      "action": "work", "host": "elsewhere", "pid": 1, "at": w.at}})
        reg.mutate("core", work, goal_id=gid)
    offset = tmp_path / "offset"
    offset.write_text("120")
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "quota", "should-run", gid],
                       env=loopx_env(url, LOOPX_CLOCK_OFFSET_FILE=str(offset)), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    code, shown, _ = _cli(url, "run", "show", "--run-id", run_id)
    assert shown["status"] == "abandoned"
    unknown = [e for e in shown["evidence"] if e["kind"] == "step_unknown"]
    assert len(unknown) == 1 and "ran, result unknown (lease_expired)" in unknown[0]["summary"]
    assert clock.seconds_between(shown["opened_at"], shown["finished_at"]) == 60  # charged up to its expiry
