"""A worker you can watch: its log lines as they happen, `loopx worker list` while it runs, and
`loopx worker stop` ending it gracefully with exit status 0. Real `loopx worker` processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from loopx.ledger.registry import Registry
from loopx.testing import wait_until
from tests.conftest import loopx_env
from tests.cli_helpers import in_process
from tests.factories import make_goal, workspace_of


def _cli(url, *args):
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *map(str, args)], env=loopx_env(url),
                       capture_output=True, text=True, timeout=180)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr


class _Worker:
    """A real worker whose stderr lines are collected as they come (the log is flushed per line)."""

    def __init__(self, url, *args, cwd):
        self.proc = subprocess.Popen([sys.executable, "-m", "loopx", "--format", "json", "worker", *map(str, args)],
                                     env=loopx_env(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, cwd=cwd)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def events(self, kind=None):
        out = [json.loads(line) for line in list(self.lines)]
        return [e for e in out if kind is None or e["event"] == kind]

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.reader.join(10)


@pytest.mark.slow
def test_the_log_says_what_the_worker_does_as_it_does_it_and_worker_list_and_stop_work(sqlite_url, tmp_path):
    url = sqlite_url
    work = tmp_path / "work"
    work.mkdir()
    gid = make_goal(in_process(url), title="watched", description="d",
                    acts={"work": ["sh", "-c", "touch started; while [ ! -e go ]; do sleep 0.05; done"]},
                    todo_texts=["one"])["goal"]
    notes = tmp_path / "notes.jsonl"
    assert _cli(url, "config", "set", "notify.command", f"cat >> {notes}; echo >> {notes}")[0] == 0
    w = _Worker(url, "--log-format", "json", "--beat-seconds", "0.3", cwd=work)
    try:
        wait_until(lambda: (workspace_of(url, gid) / "started").exists(), "the step to start")
        go = workspace_of(url, gid) / "go"  # the step sees its workspace, not the checkout
        # Every line is one JSON object, written as it happened: the turn's start is there while it runs.
        start = wait_until(lambda: w.events("turn_start"), "the turn_start line")[0]
        assert start["goal"] == gid and start["executor"] == "shell" and start["worker"].startswith("w-")
        taken = w.events("lease_taken")
        assert [e["goal"] for e in taken] == [gid] and taken[0]["token"] >= 1
        assert w.events("worker_start")[0]["pid"] == w.proc.pid
        assert w.events("turn_end") == []

        # `worker list`: the live worker, its host, pid, heartbeat and the turn it runs now.
        listed = wait_until(lambda: [x for x in _cli(url, "worker", "list")[1] if x.get("turns")],
                            "the worker to report its turn")
        assert len(listed) == 1
        me = listed[0]
        assert me["id"] == start["worker"] and me["pid"] == w.proc.pid and me["host"] and me["last_beat_at"]
        assert me["state"] == "running" and me["goals"] == [gid]
        assert [t["goal"] for t in me["turns"]] == [gid] and me["turns"][0]["executor"] == "shell"
        text = subprocess.run([sys.executable, "-m", "loopx", "worker", "list"], env=loopx_env(url),
                              capture_output=True, text=True, timeout=60).stdout
        assert f"pid {w.proc.pid}" in text and f"turn on {gid} (shell)" in text

        go.touch()
        end = wait_until(lambda: w.events("turn_end"), "the turn_end line")[0]
        run = _cli(url, "run", "list", gid)[1][0]
        assert end["goal"] == gid and end["run"] == run["id"] and end["outcome"] == "ok"
        assert end["decision"] == "run" and end["executor"] == "shell"
        assert end["tokens"] == run["tokens"] and end["cost"] == run["cost"]
        assert 0 < end["duration_seconds"] < 120
        # Nothing left to do: the goal needs its user, and the log says the notification went out.
        note = wait_until(lambda: w.events("notification"), "the notification line")[0]
        assert note["goal"] == gid and note["reason"]
        assert json.loads(notes.read_text().splitlines()[0])["goal_id"] == gid

        # `worker stop` (no id: the only one running) stops it gracefully; both exit 0.
        code, out, err = _cli(url, "worker", "stop")
        assert code == 0, err
        assert out["worker_id"] == me["id"] and out["stopped"] is True and out["stop_requested"]["by"] == "user"
        assert w.proc.wait(timeout=60) == 0
        w.reader.join(10)
        assert [e["event"] for e in w.events()][-3:] == ["stop_requested", "stopping", "worker_stop"]
        assert w.events("worker_stop")[0]["stopped_by"] == "request"
        assert _cli(url, "worker", "list")[1] == []
        assert _cli(url, "worker", "list", "--all")[1][0]["state"] == "stopped"
    finally:
        w.stop()
    # Stopping a worker that is not there: one clear line, exit 2.
    code, out, _ = _cli(url, "worker", "stop")
    assert code == 2 and out["error"]["code"] == "worker_not_found"
    code, out, _ = _cli(url, "worker", "stop", me["id"])
    assert code == 2 and out["error"]["code"] == "worker_not_found"


@pytest.mark.slow
def test_worker_stop_while_a_turn_runs_lets_the_step_finish_and_closes_the_run_interrupted(sqlite_url, tmp_path):
    url = sqlite_url
    work = tmp_path / "work"
    work.mkdir()
    gid = make_goal(in_process(url), title="busy", description="d",
                    acts={"work": ["sh", "-c", "touch started; while [ ! -e go ]; do sleep 0.05; done;"
                                               " touch finished"]},
                    todo_texts=["a", "b"])["goal"]
    w = _Worker(url, "--beat-seconds", "0.3", "--grace-seconds", "60", cwd=work)
    try:
        wait_until(lambda: (workspace_of(url, gid) / "started").exists(), "the step to start")
        go = workspace_of(url, gid) / "go"  # the step sees its workspace, not the checkout
        worker_id = wait_until(lambda: [x["id"] for x in _cli(url, "worker", "list")[1]], "the worker listed")[0]
        p = subprocess.Popen([sys.executable, "-m", "loopx", "--format", "json", "worker", "stop", worker_id[:6]],
                             env=loopx_env(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # The request reaches the worker, which passes SIGTERM on to its turn; the step may finish.
        wait_until(lambda: any("stop_requested" in line for line in w.lines), "the worker to read the request")
        go.touch()
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and json.loads(out)["stopped"] is True, err
        assert w.proc.wait(timeout=60) == 0
        assert (workspace_of(url, gid) / "finished").exists()
        runs = _cli(url, "run", "list", gid)[1]
        assert [r["outcome"] for r in runs] == ["interrupted"]  # and the second todo's turn never started
    finally:
        w.stop()
    # The text log: one line per event, for people.
    text = "".join(w.lines)
    assert f"turn_start goal={gid} executor=shell" in text and "worker_stop stopped_by=request" in text


def test_an_agent_in_the_workers_own_turn_cannot_stop_it(sqlite_url, tmp_path):
    """The hostile agent, for real: its step, in a turn the worker runs, calls `loopx worker stop`."""
    url = sqlite_url
    work = tmp_path / "work"
    work.mkdir()
    gid = make_goal(in_process(url), title="hostile", description="d",
                    acts={"work": ["sh", "-c", "loopx worker stop --no-wait; echo EXIT $?"]}, todo_texts=["x"])["goal"]
    w = _Worker(url, "--beat-seconds", "0.3", "--log-format", "json", cwd=work)
    try:
        end = wait_until(lambda: w.events("turn_end"), "the turn to end")[0]
        with Registry.open(url) as reg, reg.read() as tx:
            out = "".join(json.loads(e["data"])["output_tail"] for e in
                          tx.query("SELECT data FROM evidence WHERE run_id = ? AND kind = 'command'", (end["run"],)))
            refused = [json.loads(e["data"]) for e in
                       tx.query("SELECT data FROM evidence WHERE run_id = ? AND kind = 'refused'", (end["run"],))]
        assert "actor_forbidden" in out and "EXIT 2" in out, out
        assert [r["code"] for r in refused] == ["actor_forbidden"]
        listed = _cli(url, "worker", "list")[1]
        assert [x["id"] for x in listed] == [end["worker"]] and listed[0]["stop_requested"] is None
        assert w.proc.poll() is None and w.events("stop_requested") == []
    finally:
        w.stop()
    assert w.proc.returncode == 128 + signal.SIGTERM  # a signal is still a signal (the unit: SuccessExitStatus=143)


@pytest.mark.slow
def test_a_sigterm_before_should_run_opens_no_run_and_charges_nothing(sqlite_url, tmp_path):
    """A real `loopx turn`, held in its executor's pre-turn check (a test plugin), gets SIGTERM there."""
    from loopx.testing import signal_delivered
    from tests.plugin_site import plugin_env

    env = plugin_env(tmp_path, sqlite_url, slow="slow_check")
    env.update(SLOW_CHECK_READY=str(tmp_path / "ready"), SLOW_CHECK_GO=str(tmp_path / "go"))
    gid = make_goal(in_process(sqlite_url), title="early", description="d", acts={"work": ["true"]}, todo_texts=["x"],
                    limits={"max_turns": 3})["goal"]
    for n in range(3):  # three early signals, as in the soak: the budget stays whole
        (tmp_path / "ready").unlink(missing_ok=True)
        (tmp_path / "go").unlink(missing_ok=True)
        p = subprocess.Popen([sys.executable, "-m", "loopx", "--format", "json", "turn", gid, "--executor",
                              "slow-check", "--unconfined"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        wait_until(lambda: (tmp_path / "ready").exists(), "the turn to reach its pre-turn check")
        os.kill(p.pid, signal.SIGTERM)
        wait_until(lambda: signal_delivered(p.pid, signal.SIGTERM), "the turn to take the signal")
        (tmp_path / "go").touch()
        out, err = p.communicate(timeout=60)
        assert p.returncode == 128 + signal.SIGTERM, err
        answer = json.loads(out)
        assert answer["run_id"] is None and answer["reasons"] == ["interrupted_before_start"], answer
    assert _cli(sqlite_url, "run", "list", gid)[1] == []
    used = _cli(sqlite_url, "quota", "should-run", gid, "--dry-run")[1]
    assert used["decision"] == "run"  # three turns still there to take
    status = _cli(sqlite_url, "summary-all", "--goal-id", gid)[1]["goals"][0]
    assert status["quota"]["used"]["turns"] == 0 and status["runs"]["total"] == 0


def test_a_lease_another_worker_holds_is_logged_and_its_goal_left_alone(sqlite_url, tmp_path):
    from loopx.domain import supervision

    url = sqlite_url
    work = tmp_path / "work"
    work.mkdir()
    gid = make_goal(in_process(url), title="held", description="d", acts={"work": ["true"]}, todo_texts=["x"])["goal"]
    with Registry.open(url) as reg:
        token = supervision.acquire(reg, gid, "w-elsewhere", 600)  # another worker's, for ten minutes
    w = _Worker(url, "--log-format", "json", "--exit-when-idle", cwd=work)
    assert w.proc.wait(timeout=120) == 0
    w.reader.join(10)
    assert [(e["goal"]) for e in w.events("lease_refused")] == [gid]
    assert w.events("lease_taken") == [] and w.events("turn_start") == []
    assert _cli(url, "run", "list", gid)[1] == [] and token >= 1
