"""Issue-Fix's test runs are private: a run LoopX makes while the agent's turn goes on (the agent
called ``loopx issue-fix reproduce``) lives where the agent can neither write nor read, so it is
shared with later goals like any other base run; a base run is reused only while the files it
opened outside the tree and the installation are unchanged; confinement fails closed."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from issue_fix_helpers import BUGGY, FAILING_ID, FIXED, TEST, git, make_project
from test_issue_fix import start, state, step
from test_issue_fix_reuse import reproduce, results_file

# A tiny agent: starts its tamperer in the background, runs the prompt's ```sh block line by line
# (the contract's reproduce step), then waits for the tamperer.
AGENT = r'''
import os, re, subprocess, sys
tamper = os.environ.get("TAMPER")
report = os.path.join(os.environ["TMPDIR"], os.environ.get("REPORT", "tamper.json"))  # the step's own temp dir
bg = subprocess.Popen([sys.executable, tamper], stderr=open(report + ".err", "w")) if tamper else None
block = re.search(r"```sh\n(.*?)\n```", open(os.environ["LOOPX_PROMPT_FILE"]).read(), re.S).group(1)
for line in block.splitlines():
    subprocess.run(line, shell=True, check=False)
if bg:
    bg.wait(timeout=120)
'''

# The agent's accomplice, in the turn's confinement: once told where the test run is (the test
# harness watches LoopX's private root from outside), it tries to reach it every way it can while
# the tests run, then says what happened where the running test can read it.
TAMPER = r'''
import json, os, sys, time
root, where = os.environ["PRIVATE_ROOT"], os.environ["WHERE"]
report = os.path.join(os.environ["TMPDIR"], os.environ["REPORT"])  # the step's own temp dir
end = time.monotonic() + 90
while not os.path.exists(where) and time.monotonic() < end:
    time.sleep(0.02)
run = open(where).read().strip()
out = {}

def attempt(name, fn):
    try:
        fn()
        out[name] = "done"
    except OSError as exc:
        out[name] = "refused: " + (exc.strerror or str(exc))

def write(path, text="pwned\n", mode="w"):
    with open(path, mode) as f:
        f.write(text)

attempt("list_private_root", lambda: os.listdir(root))
attempt("read_run", lambda: os.listdir(run))
attempt("create_in_run", lambda: write(os.path.join(run, "pwned")))
attempt("rewrite_code_under_test", lambda: write(os.path.join(run, "tree", "calc.py"), "def add(a, b):\n    return a + b\n"))
attempt("forge_results", lambda: write(os.path.join(run, "report", "last.json"), "{}"))
attempt("rename_run", lambda: os.rename(run, run + "-moved"))
# The run's directory exists a moment before its test process starts: look until it shows (or 60 s).
pids, deadline = [], time.monotonic() + 60
while not pids and time.monotonic() < deadline:
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and b"_loopx_issue_fix_probe" in open("/proc/%s/cmdline" % p, "rb").read():
                pids.append(p)
        except OSError:
            pass
    time.sleep(0.05)
out["test_processes_seen"] = len(pids)
for p in pids[:1]:
    attempt("write_through_proc_cwd", lambda: write("/proc/%s/cwd/pwned" % p))
    attempt("rewrite_through_proc_cwd", lambda: write("/proc/%s/cwd/calc.py" % p, "\n", "a"))
with open(report + ".tmp", "w") as f:
    json.dump(out, f)
os.rename(report + ".tmp", report)
'''

# The project's suite waits (while its run is alive) until the accomplice has tried.
WAITING_TEST = TEST + '''

def test_waits_for_the_agent():
    import os, time
    end = time.monotonic() + 20
    while not os.path.exists({report!r}) and time.monotonic() < end:
        time.sleep(0.02)
    assert os.path.exists({report!r})
'''


def _turn_env(cli, tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_") or k == "LOOPX_ISSUE_FIX_WORKTREES"}
    (tmp_path / "agent.py").write_text(AGENT)
    # The step's world shows the test's directory read-only (`world.grant`, as a user grants it):
    # the agent's files, the signals the test sends it.
    cli("config", "set", "world.grant", str(tmp_path))
    env.update({"LOOPX_REGISTRY": cli.url,
                "LOOPX_EXECUTOR_COMMAND": json.dumps([sys.executable, str(tmp_path / "agent.py")]),
                "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}", **extra})
    return env


def _turn(goal_id, env, cwd):
    return subprocess.Popen([sys.executable, "-m", "loopx", "--format", "json", "turn", "--goal-id", goal_id,
                             "--executor", "command"], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.slow
def test_a_base_run_inside_an_agents_turn_is_out_of_the_agents_reach_and_shared(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    private = tmp_path / "cache" / "loopx" / "private"
    # (in a directory that exists when the turn's policy is made: the registry beside it is hidden,
    # so the test's directory is covered entry by entry)
    report, where = tmp_path / "agent-state" / "tamper.json", tmp_path / "signals" / "where.txt"
    where.parent.mkdir()
    report.parent.mkdir()
    project = make_project(tmp_path, test=WAITING_TEST.format(report=str(report)))
    (tmp_path / "tamper.py").write_text(TAMPER)
    inside = start(cli, project)["goal_id"]
    # Landlock alone (no world): there the agent sees the test run's processes in /proc and tries
    # them; in the step's world it would not see them at all (a PID namespace of its own).
    env = _turn_env(cli, tmp_path, TAMPER=str(tmp_path / "tamper.py"), PRIVATE_ROOT=str(private),
                    WHERE=str(where), REPORT="tamper.json", XDG_CACHE_HOME=str(tmp_path / "cache"),
                    LOOPX_CONFINE_BACKEND="landlock")
    turn = _turn(inside, env, tmp_path)
    try:
        # Watch LoopX's private root from outside the turn for the test run's directory.
        end, run = time.monotonic() + 120, None
        while run is None and time.monotonic() < end and turn.poll() is None:
            found = [d for d in private.glob("run-*") if (d / "tree").is_dir()] if private.is_dir() else []
            run = found[0] if found else None
            time.sleep(0.02)
        assert run is not None, turn.communicate(timeout=60)
        where.write_text(str(run))
        # The agent writes only its step's roots (its CLI's state directory is the goal's own, the
        # user's $CODEX_HOME is read-only to it; a file in the worktree would change the tree the
        # base run is keyed on): it reports in the step's temp dir, and this test relays the report
        # to where the project's suite waits for it.
        end, tampered = time.monotonic() + 120, None
        while tampered is None and time.monotonic() < end and turn.poll() is None:
            found = glob.glob(os.path.join(tempfile.gettempdir(), f"loopx-step-{turn.pid}-*", "tmp", "tamper.json"))
            tampered = Path(found[0]) if found else None
            time.sleep(0.02)
        if tampered is not None:  # (written whole: the accomplice renames it into place)
            report.write_bytes(tampered.read_bytes())
        out, err = turn.communicate(timeout=240)
    finally:
        if turn.poll() is None:
            turn.kill()
    assert turn.returncode == 0, (out[-3000:], err[-3000:])
    tried = json.loads(report.read_text())
    assert tried["test_processes_seen"] >= 1, tried
    refused = {k: v for k, v in tried.items() if k != "test_processes_seen"}
    assert len(refused) == 8 and all(v.startswith("refused") for v in refused.values()), tried
    assert not run.exists()  # removed after the run, by LoopX
    s = state(cli, inside)
    repro = s["reproduction"]
    assert s["phase"] == "fix" and repro["failing"] == [FAILING_ID] and repro["base_key"], repro
    # The run made inside the turn is the base's run: the next goal on this base takes it over
    # (byte for byte, no second base run) ...
    g, wt, again = reproduce(cli, project)
    assert again["test"]["reused"] == {"goal_id": inside, "evidence_id": repro["evidence_id"]}, again["test"]
    assert state(cli, g)["reproduction"]["results_sha256"] == repro["results_sha256"]
    assert results_file(cli, g).read_bytes() == results_file(cli, inside).read_bytes()
    # ... and its bytecode starts that goal's verify warm.
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True, r
    assert r.json["test"]["bytecode"]["copied"] >= 1 and r.json["test"]["bytecode"]["refused"] == 0, r.json["test"]


@pytest.mark.slow
def test_a_turn_the_user_runs_unconfined_keeps_its_base_run_and_its_bytecode_goes_with_the_goal(cli, project, tmp_path):
    inside = start(cli, project)["goal_id"]
    p = _turn(inside, _turn_env(cli, tmp_path, LOOPX_UNCONFINED="1"), tmp_path)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, (out[-3000:], err[-3000:])
    s = state(cli, inside)
    # Unconfined, the agent could have written into the run while it ran: kept to its goal.
    assert s["phase"] == "fix" and s["reproduction"]["base_key"] is None, s["reproduction"]
    own = Path(s["goal_dir"], "bytecode", s["reproduction"]["evidence_id"])
    assert any(own.rglob("*.pyc")), own
    _g, _wt, ran = reproduce(cli, project)
    assert ran["test"].get("reused") is None, ran["test"]
    shared = list(Path(s["goal_dir"]).parent.glob("base/*/bytecode-*"))
    assert shared and any(shared[0].rglob("*.pyc"))
    # Closing the goal removes its own bytecode cache (and only its own: the shared one stays).
    r = cli("issue-fix", "close", "--goal-id", inside, "--json")
    assert r.code == 0, r
    assert not own.exists() and not Path(s["goal_dir"], "bytecode").exists()
    assert any(shared[0].rglob("*.pyc"))


HELPER_TEST = TEST.replace("from calc import add, sub\n", "import sys\nsys.path.insert(0, {shared!r})\n"
                           "from calc import add, sub\nfrom helper import FIVE\n").replace("== 5", "== FIVE")


@pytest.mark.slow
def test_a_file_the_base_run_opened_outside_the_tree_that_changed_means_the_base_runs_again(cli, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "helper.py").write_text("FIVE = 5\n")
    project = make_project(tmp_path, test=HELPER_TEST.format(shared=str(shared)))
    first, _wt, _ = reproduce(cli, project)
    body = json.loads(results_file(cli, first).read_bytes())
    assert str(shared / "helper.py") in body["outside"], body["outside"]
    _g, _wt, same = reproduce(cli, project)
    assert same["test"]["reused"]["goal_id"] == first, same["test"]
    (shared / "helper.py").write_text("FIVE = 5  # same value, other bytes\n")
    g, _wt, after = reproduce(cli, project)
    assert after["test"].get("reused") is None, after["test"]
    # The fresh run is the base's from now on (its fingerprints are today's).
    _g, _wt, third = reproduce(cli, project)
    assert third["test"]["reused"]["goal_id"] == g, third["test"]
    # A file it opened that did not exist then and does now counts too.
    (shared / "helper.py").unlink()
    (shared / "helper.py").write_text("FIVE = 5  # same value, other bytes\n")
    _g, _wt, recreated = reproduce(cli, project)
    assert recreated["test"].get("reused") is None, recreated["test"]


@pytest.mark.slow
def test_code_imported_from_outside_only_as_bytecode_is_covered_too(cli, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "helper.py").write_text("FIVE = 5\n")
    project = make_project(tmp_path, test=HELPER_TEST.format(shared=str(shared)))
    reproduce(cli, project)  # compiles helper.py into the shared base's bytecode
    (project / "NOTES.txt").write_text("a new base\n")
    git(project, "add", "NOTES.txt")
    git(project, "commit", "-qm", "notes")
    g, _wt, warm = reproduce(cli, project)  # a new base, started warm: helper.py is read as bytecode only
    assert warm["test"].get("reused") is None and warm["test"]["bytecode"]["copied"] >= 1, warm["test"]
    assert str(shared / "helper.py") in json.loads(results_file(cli, g).read_bytes())["outside"]
    (shared / "helper.py").write_text("FIVE = 5  # same value, other bytes\n")
    _g, _wt, after = reproduce(cli, project)
    assert after["test"].get("reused") is None, after["test"]


@pytest.mark.slow
def test_without_landlock_the_test_run_is_refused_not_run_unconfined(cli, project, monkeypatch):
    out = start(cli, project)
    g, marker = out["goal_id"], project.parent / "ran"
    monkeypatch.setenv("LOOPX_CONFINE_BACKEND", "none")
    monkeypatch.delenv("LOOPX_UNCONFINED", raising=False)
    Path(out["worktree"], "conftest.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    r, _ = step(cli, g, expect=2)
    assert "confinement_unavailable" in r.err + r.out, r
    assert not marker.exists() and state(cli, g)["phase"] == "reproduce"
    assert state(cli, g)["attempts"]["reproduce"] == 0  # nothing recorded
    # The user may opt out, knowingly: then it runs (and says so).
    monkeypatch.setenv("LOOPX_UNCONFINED", "1")
    r, _ = step(cli, g, expect=0)
    assert r.json["reproduced"] is True, r


@pytest.mark.slow
def test_the_test_run_cannot_write_outside_its_own_directory(cli, tmp_path):
    target = tmp_path / "written-by-the-tests"
    project = make_project(tmp_path, code=BUGGY, test=TEST + f'''

def test_writes_outside():
    open({str(target)!r}, "w").write("x")
''')
    g = start(cli, project)["goal_id"]
    r, _ = step(cli, g)
    assert r.json["reproduced"] is True, r
    assert not target.exists()
    cases = json.loads(results_file(cli, g).read_bytes())["cases"]
    assert cases["test_calc.py::test_writes_outside"]["status"] == "failed", cases


# Logs every process a Python process starts (the audit event of subprocess.Popen), with its own pid.
SPAWN_LOG = r'''
import json, os, sys
def _hook(event, args):
    if event == "subprocess.Popen" and os.environ.get("SPAWN_LOG"):
        try:
            with open(os.environ["SPAWN_LOG"], "a") as f:
                f.write(json.dumps({"pid": os.getpid(), "argv": [str(a) for a in (args[1] or [])]}) + "\n")
        except OSError:
            pass  # a confined process may not write there
sys.addaudithook(_hook)
'''


@pytest.mark.slow
def test_a_step_that_is_a_loopx_command_runs_in_the_turns_process_not_in_two_more(cli, project, tmp_path):
    """The contract's `loopx exec -- loopx issue-fix reproduce` inside a turn: `exec` hands the step
    to the turn's broker, which serves it in the turn's own process. Before, exec started a confined
    `loopx` (a broker client) and the busy broker a whole second `python -m loopx` for its request."""
    inside = start(cli, project)["goal_id"]
    site, log = tmp_path / "site", tmp_path / "spawns.jsonl"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SPAWN_LOG)
    p = _turn(inside, _turn_env(cli, tmp_path, PYTHONPATH=str(site), SPAWN_LOG=str(log)), tmp_path)
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, (out[-3000:], err[-3000:])
    # The step was done: reproduced, recorded by exec with the command's own output.
    s = state(cli, inside)
    assert s["phase"] == "fix" and s["reproduction"]["failing"] == [FAILING_ID], s
    listed = cli("--format", "json", "evidence", "list", "--goal-id", inside).json
    items = listed["evidence"] if isinstance(listed, dict) else listed
    steps = [e for e in items if e["kind"] == "command"]
    assert len(steps) == 1 and steps[0]["data"]["exit_code"] == 0, steps
    assert steps[0]["data"]["argv"][:3] == ["loopx", "issue-fix", "reproduce"], steps[0]["data"]
    assert steps[0]["data"]["output_bytes"] > 0 and "reproduce" in steps[0]["data"]["output_tail"], steps[0]["data"]
    # What the turn's process started: the agent, and the step's own commands (git, the test
    # run's watcher) - never a `loopx`.
    started = [json.loads(line) for line in log.read_text().splitlines()]
    by_turn = [e["argv"] for e in started if e["pid"] == p.pid]
    assert any(str(tmp_path / "agent.py") in a for a in by_turn), by_turn
    loopx_children = [a for a in by_turn if "loopx" in a[:6] and "-m" in a[:6]]
    assert loopx_children == [], loopx_children
