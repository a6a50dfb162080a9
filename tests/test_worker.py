"""``loopx worker``: real worker processes, real signals, two workers on one registry, a scripted clock jump."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from loopx.testing import signal_delivered, wait_until
from tests.cli_helpers import loopx_in_process
from tests.conftest import loopx_env
from tests.cli_helpers import in_process
from tests.factories import make_goal, workspace_of


def _cli(url, *args, env=None, timeout=60):
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *map(str, args)],
                       env=loopx_env(url, **(env or {})), capture_output=True, text=True, timeout=timeout)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr


def _read(url, *args):
    """Like :func:`_cli`, in this process (tests/cli_helpers.py): for the set-up and the reads (and
    polls) that check what the worker processes did; the workers and turns stay real processes."""
    r = loopx_in_process("--format", "json", *args, env=loopx_env(url))
    return r.code, (json.loads(r.out) if r.out.strip() else None), r.err


def _worker(url, *args, env=None, cwd=None):
    return subprocess.Popen([sys.executable, "-m", "loopx", "--format", "json", "worker", *map(str, args)],
                            env=loopx_env(url, **(env or {})), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, cwd=cwd)


def _work(tmp_path):
    # The worker's cwd, which its turns inherit. Each goal's step runs in the goal's own workspace
    # (loopx/domain/workspace.py) and writes only there: what a step leaves is read from workspace_of(url, goal).
    work = tmp_path / "work"
    work.mkdir()
    return work


def _goal(url, script, *, todos=1, title="g", limits=None):
    return make_goal(in_process(url), title=title, description="d", acts={"work": ["sh", "-c", script]},
                     todo_texts=[f"todo {i}" for i in range(todos)], limits=limits)["goal"]


def _runs(url, gid):
    return _read(url, "run", "list", gid)[1]


@pytest.mark.parametrize("registry_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
@pytest.mark.slow
def test_two_workers_on_one_registry_never_run_one_goal_twice(registry_url, tmp_path):
    url = registry_url
    work = _work(tmp_path)
    # mkdir is atomic: a second turn of one goal running at the same time (in the goal's one
    # workspace) would find the directory.
    script = "mkdir lock || echo OVERLAP >> log; echo $LOOPX_GOAL_ID >> log; sleep 0.2; rmdir lock"
    goals = [_goal(url, script, todos=2, title=f"g{i}") for i in range(3)]
    workers = [_worker(url, "--concurrency", "2", "--exit-when-idle", "--beat-seconds", "0.5", cwd=work)
               for _ in range(2)]
    outs = [w.communicate(timeout=240) for w in workers]
    for w, (out, err) in zip(workers, outs):
        assert w.returncode == 0, err
    log = [x for g in goals for x in (workspace_of(url, g) / "log").read_text().split()]
    assert "OVERLAP" not in log
    assert sorted(log) == sorted(goals * 2)  # every todo's step ran, each exactly once
    stats = [json.loads(out) for out, _ in outs]
    assert sum(s["turns"] for s in stats) == 6
    for gid in goals:
        runs = _runs(url, gid)
        assert [r["outcome"] for r in runs if r["status"] == "finished"].count("ok") == 2
        for r in runs:  # every run was opened under a worker's lease, with its fencing token
            owner = next(e for e in _read(url, "evidence", "list", "--run-id", r["id"])[1] if e["kind"] == "run_owner")
            assert owner["data"]["lease_token"] >= 1 and owner["data"]["worker"].startswith("w-")


@pytest.mark.slow
def test_a_stale_fencing_token_cannot_open_a_run(sqlite_url, tmp_path, loopx_clock):
    from loopx.domain import supervision
    from loopx.ledger.registry import Registry

    url = sqlite_url
    gid = _goal(url, "true")
    with Registry.open(url) as reg:
        first = supervision.acquire(reg, gid, "w-old", 60)
        assert supervision.acquire(reg, gid, "w-new", 60) is None  # held
        loopx_clock.advance(120)  # the old worker's lease has run out (scripted time, no sleeping)
        second = supervision.acquire(reg, gid, "w-new", 60)
    assert second == first + 1
    code, out, _ = _cli(url, "turn", gid, "--worker-lease", f"w-old:{first}")
    assert code == 2 and out["error"]["code"] == "lease_lost"
    assert _runs(url, gid) == []  # nothing was opened
    code, out, err = _cli(url, "turn", gid, "--worker-lease", f"w-new:{second}")
    assert code == 0 and out["outcome"] == "ok", err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow
def test_a_signal_lets_running_steps_finish_closes_their_runs_and_stops_the_worker(sqlite_url, tmp_path, sig):
    url = sqlite_url
    work = _work(tmp_path)
    # `go` in each goal's own workspace: the step's world shows it nothing else of the test's.
    script = "touch started; while [ ! -e go ]; do sleep 0.05; done; echo $LOOPX_GOAL_ID >> finished"
    goals = [_goal(url, script, todos=3, title=f"g{i}") for i in range(2)]
    w = _worker(url, "--concurrency", "2", "--grace-seconds", "60", "--beat-seconds", "0.5", cwd=work)
    wait_until(lambda: all((workspace_of(url, g) / "started").exists() for g in goals), "both steps to start")
    # The worker reports its goals at its next heartbeat (--beat-seconds), not as each turn starts.
    running = wait_until(lambda: next((x for x in _read(url, "status")[1]["workers"]
                                   if x["state"] == "running" and sorted(x["goals"]) == sorted(goals)), None),
                     "the worker to report both goals")
    assert running["pid"] == w.pid
    os.kill(w.pid, sig)
    # The worker takes it while the steps still run; its handler passes it on to the turns at once.
    wait_until(lambda: signal_delivered(w.pid, sig), "the worker to take the signal")
    for g in goals:
        (workspace_of(url, g) / "go").touch()
    out, err = w.communicate(timeout=60)
    assert w.returncode == 128 + sig, err
    assert [(workspace_of(url, g) / "finished").read_text().split() for g in goals] == [[g] for g in goals]  # both finished
    for gid in goals:
        runs = _runs(url, gid)
        assert [r["outcome"] for r in runs] == ["interrupted"]  # and no new turn was started
    code, status, _ = _read(url, "status")
    assert status["workers"][0]["state"] == "stopped" and status["workers"][0]["goals"] == []


@pytest.mark.slow
def test_a_sigkilled_worker_shows_as_died_and_its_turns_die_with_it_recorded_interrupted(sqlite_url, tmp_path,
                                                                                         loopx_clock):
    url = sqlite_url
    work = _work(tmp_path)
    go = work / "go"
    # The step would wait for ever: nobody touches `go`. Its command line names `go`, so it can be
    # found (its pid inside the step's world is not the host's).
    gid = _goal(url, f"touch started; while [ ! -e {go} ]; do sleep 0.05; done", todos=1)
    w = _worker(url, "--beat-seconds", "1", "--grace-seconds", "1", cwd=work)
    wait_until(lambda: (workspace_of(url, gid) / "started").exists(), "the step to start")
    assert _running_with(str(go))
    os.kill(w.pid, signal.SIGKILL)
    w.wait(timeout=10)
    # The turn took its worker's death as a stop: its step had its grace second, was stopped,
    # and the run was closed `interrupted` - no turn runs on unsupervised.
    wait_until(lambda: (_runs(url, gid) or [{}])[0].get("status") == "finished", "the orphaned turn to end", timeout=60)
    assert [r["outcome"] for r in _runs(url, gid)] == ["interrupted"]
    run_id = _runs(url, gid)[0]["id"]
    kinds = [e["kind"] for e in _read(url, "evidence", "list", "--run-id", run_id)[1]]
    assert "interrupted" in kinds, kinds
    wait_until(lambda: not _running_with(str(go)), "the step to be stopped")
    assert not go.exists()
    loopx_clock.advance(30)  # thirty seconds on: three beats missed (scripted, no sleeping)
    code, status, _ = _read(url, "status")
    assert status["workers"][0]["state"] == "died" and status["workers"][0]["pid"] == w.pid


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie nobody reaped yet is gone as far as work goes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_clock_jump_is_recorded_and_cadence_recovers(sqlite_url, tmp_path, loopx_clock):
    url = sqlite_url
    work = _work(tmp_path)
    gid = _goal(url, "echo ran >> log", todos=5, limits={"cadence_seconds": 3600})
    w = _worker(url, "--beat-seconds", "0.3", cwd=work)  # on the test's clock (loopx_env)
    wait_until(lambda: (workspace_of(url, gid) / "log").exists() and len(_runs(url, gid)) == 1
           and _runs(url, gid)[0]["status"] == "finished", "the first turn")
    year = 365 * 24 * 3600
    loopx_clock.set(year)  # the wall clock jumps a year ahead ...
    wait_until(lambda: len(_runs(url, gid)) == 2 and _runs(url, gid)[0]["status"] == "finished",
           "the turn the jump made due")
    loopx_clock.set(0)  # ... and back
    jumps = wait_until(lambda: len(_read(url, "status")[1]["clock_jumps"]) >= 2
                       and _read(url, "status")[1]["clock_jumps"],
                   "both jumps to be recorded")
    assert [j["direction"] for j in jumps[:2]] == ["back", "ahead"]
    assert abs(jumps[1]["jump_seconds"] - year) < 60
    # Cadence counts from the last run opened at a believable time: due within the hour, not in a year.
    code, preview, _ = _cli(url, "quota", "should-run", gid, "--dry-run")
    assert preview["decision"] == "wait"
    first_opened = _runs(url, gid)[-1]["opened_at"]
    from loopx.values import clock
    assert clock.seconds_between(first_opened, preview["interaction_contract"]["next_eligible_at"]) == 3600
    os.kill(w.pid, signal.SIGTERM)
    w.communicate(timeout=60)
    assert len(_runs(url, gid)) == 2  # and nothing ran after the clock came back


def test_print_unit_is_a_systemd_user_unit_for_this_registry(sqlite_url, tmp_path):
    import shlex

    code = subprocess.run([sys.executable, "-m", "loopx", "worker", "--print-unit", "--concurrency", "4"],
                          env=loopx_env(sqlite_url), capture_output=True, text=True, cwd=tmp_path)
    assert code.returncode == 0, code.stderr
    unit = code.stdout
    assert "[Service]" in unit and "[Install]" in unit and "WantedBy=default.target" in unit
    exec_line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_line[len("ExecStart="):])
    # The installed console script by its absolute path (never `python -m loopx`, which imports
    # from the working directory), in LoopX's own directory; the agents work where it was printed.
    assert argv[0] == os.path.join(os.path.dirname(sys.executable), "loopx") and "-m" not in argv, argv
    assert argv[1:4] == ["worker", "--concurrency", "4"] and argv[argv.index("--workdir") + 1] == str(tmp_path)
    assert "WorkingDirectory=/" in unit.splitlines()
    assert subprocess.run([argv[0], "--version"], capture_output=True, text=True).stdout.startswith("loopx ")
    assert f"LOOPX_REGISTRY={sqlite_url}" in unit and "KillSignal=SIGTERM" in unit
    # A stop by SIGTERM exits 143: the unit counts it a success, not a failure to restart from.
    assert "SuccessExitStatus=143" in unit.splitlines() and "Restart=on-failure" in unit.splitlines()


def test_the_printed_unit_passes_systemd_analyze_verify(sqlite_url, tmp_path):
    import shutil

    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here (systemd's own check of the unit)")
    printed = subprocess.run([sys.executable, "-m", "loopx", "worker", "--print-unit"], env=loopx_env(sqlite_url),
                             capture_output=True, text=True, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    unit = tmp_path / "loopx-worker.service"
    unit.write_text(printed.stdout)
    runtime = tmp_path / "runtime"  # --user verify needs a runtime directory, not a user manager
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    # systemd checks every setting and that ExecStart's program exists and is executable.
    checked = subprocess.run([analyze, "--user", "verify", str(unit)], capture_output=True, text=True, env=env,
                             timeout=60)
    assert checked.returncode == 0 and checked.stderr.strip() == "", checked.stderr


def test_print_unit_warns_when_notify_command_starts_with_a_relative_path(sqlite_url, tmp_path):
    def printed():
        return subprocess.run([sys.executable, "-m", "loopx", "worker", "--print-unit"], env=loopx_env(sqlite_url),
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)

    assert _cli(sqlite_url, "config", "set", "notify.command", "./notify.sh --urgent")[0] == 0
    p = printed()
    assert p.returncode == 0 and "ExecStart=" in p.stdout
    assert "relative path './notify.sh'" in p.stderr and "runs in /" in p.stderr, p.stderr
    assert _cli(sqlite_url, "config", "set", "notify.command", f"{tmp_path}/notify.sh")[0] == 0
    assert printed().stderr == ""


def _running_with(text: str) -> list[int]:
    """The pids of processes whose command line holds ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found
