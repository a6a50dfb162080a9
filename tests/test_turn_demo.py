"""``loopx demo``: the README's main job runs end to end, as a real process, and exits 0."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import loopx_env


@pytest.mark.slow
def test_demo_runs_the_governed_loop_end_to_end(tmp_path):
    target = tmp_path / "demo.db"
    env = loopx_env(str(tmp_path / "never-used.db"))  # LOOPX_REGISTRY must not be touched by the demo
    p = subprocess.run([sys.executable, "-m", "loopx", "demo", "--registry", str(target)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for expected in ("decision: ask_user  (gate_pending)",           # the gate pauses it
                     "loopx gate approve",                           # ... the user approves
                     "turn r-",                                      # turns through the shell executor
                     "[command] check: exit 0",                      # evidence of each exec
                     "(quota_exhausted, turns_exhausted)",           # pause and ask
                     "loopx quota grant --goal-id",                  # ... naming the grant
                     "[command] publish: exit 0",                    # the gated action after approval
                     "score +1.00",                                  # the human reward
                     "decision: stop  (goal_closed)",
                     "rewards   1, mean +1.00"):                     # summary_all
        assert expected in out, expected
    assert p.stderr == ""
    assert not (tmp_path / "never-used.db").exists()
    # The registry it built holds what the transcript says.
    s = subprocess.run([sys.executable, "-m", "loopx", "--registry", str(target), "summary_all", "--json"],
                       env=env, capture_output=True, text=True, timeout=120)
    summary = json.loads(s.stdout)["goals"][0]
    assert summary["runs"]["by_outcome"]["ok"] == 3 and summary["todos"]["by_status"]["done"] == 3
    assert summary["gates"]["pending"] == [] and summary["goal"]["status"] == "closed"


def test_demo_refuses_a_registry_that_is_not_fresh(tmp_path):
    target = tmp_path / "used.db"
    env = loopx_env(str(target))
    subprocess.run([sys.executable, "-m", "loopx", "project_prompt", "create", "--title", "mine"], env=env,
                   check=True, capture_output=True)
    p = subprocess.run([sys.executable, "-m", "loopx", "--json", "demo", "--registry", str(target)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and json.loads(p.stdout)["error"]["code"] == "target_not_empty"


def test_demo_json_transcript_and_default_temp_registry(tmp_path):
    env = loopx_env(str(tmp_path / "elsewhere" / "untouched.db"))
    env["TMPDIR"] = str(tmp_path)
    p = subprocess.run([sys.executable, "-m", "loopx", "demo", "--json"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["registry"].startswith(str(tmp_path)) and not (tmp_path / "elsewhere").exists()
    # The temporary registry is gone with the demo: nothing left in TMPDIR (but the test's own
    # config directory, which the autouse fixture puts there), and no key or anchor left for it.
    assert doc["registry_kept"] is False and sorted(tmp_path.iterdir()) == [tmp_path / "xdg-config"]
    assert [f.name for f in (tmp_path / "xdg-config" / "loopx" / "keys").iterdir()] == []
    kinds = [e["show"] for e in doc["transcript"] if e["kind"] == "command"]
    assert kinds[-1] == "summary" and "loop" in kinds and "reward" in kinds


@pytest.mark.slow
def test_demo_removes_its_temporary_registry_and_its_last_line_works_as_printed(tmp_path):
    temp, work = tmp_path / "tmp", tmp_path / "work"
    temp.mkdir()
    work.mkdir()
    env = {**loopx_env(str(tmp_path / "untouched.db")), "TMPDIR": str(temp)}
    p = subprocess.run([sys.executable, "-m", "loopx", "demo"], cwd=work, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert list(temp.iterdir()) == []  # the temporary registry is removed
    last = p.stdout.strip().splitlines()[-1]
    assert "loopx-demo.db" in last
    # Pasted into a shell in the same directory, it builds a registry that is kept, and shows it.
    again = subprocess.run(["sh", "-c", last], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "rewards   1, mean +1.00" in again.stdout
    assert (work / "loopx-demo.db").exists() and list(temp.iterdir()) == []
    # Given a registry, the demo keeps it, and its last line looks around in it.
    kept = subprocess.run([sys.executable, "-m", "loopx", "demo", "--registry", "mine.db"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    last = kept.stdout.strip().splitlines()[-1]
    look = subprocess.run(["sh", "-c", last], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert look.returncode == 0 and "rewards   1, mean +1.00" in look.stdout, look.stderr


@pytest.mark.slow
def test_demo_prints_the_commands_it_runs(tmp_path):
    """Each `user$`/`agent$` line is the command whose answer follows it: run again by hand on
    the demo's registry, the read-only ones print the same text; the goal's line makes the same goal."""
    import shlex

    target = tmp_path / "demo.db"
    env = loopx_env(str(tmp_path / "never-used.db"))
    p = subprocess.run([sys.executable, "-m", "loopx", "demo", "--registry", str(target)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    blocks, current = [], None
    for line in p.stdout.splitlines():
        if line.startswith(("user$ ", "agent$ ")):
            current = [shlex.split(line.split("$ ", 1)[1]), []]
            blocks.append(current)
        elif current is not None and line.startswith("    "):
            current[1].append(line[4:])
        else:
            current = None
    assert len(blocks) > 15
    for argv, _ in blocks:
        assert argv[0] == "loopx" and not {"--json", "--format", "--format=json"} & set(argv), argv

    def loopx(argv, registry):
        return subprocess.run([sys.executable, "-m", "loopx", "--registry", str(registry), *argv[1:]], env=env,
                              capture_output=True, text=True, timeout=120)

    summary = next(b for b in blocks if b[0][1] == "summary-all")
    last_ask = [b for b in blocks if b[0][1:3] == ["quota", "should-run"]][-1]
    for argv, body in (summary, last_ask):
        again = loopx(argv, target)
        assert again.returncode == 0, again
        assert again.stdout.rstrip("\n").splitlines() == body, (argv, again.stdout, body)
    # The printed `project-prompt create` makes the goal the demo made (on a registry of its own).
    create = next(b for b in blocks if b[0][1:3] == ["project-prompt", "create"])[0]
    made = json.loads(loopx([*create, "--json"], tmp_path / "mine.db").stdout)
    demo_goal = json.loads(loopx(["loopx", "project-prompt", "list", "--status", "closed", "--json"], target).stdout)
    demo_goal = demo_goal[0] if isinstance(demo_goal, list) else demo_goal["goals"][0]
    for key in ("title", "description", "criteria"):
        mine, theirs = made[key], demo_goal[key]
        if key == "criteria":
            mine, theirs = [c["text"] for c in mine], [c["text"] for c in theirs]
        assert mine == theirs, key


@pytest.mark.slow
def test_the_demo_runs_on_a_machine_without_bubblewrap_and_says_how_its_steps_ran(tmp_path):
    # A fresh machine has no bubblewrap: the README's first command still runs the demo, whose
    # steps are LoopX's own commands, under Landlock alone, and says so; a real turn is refused.
    env = {**loopx_env(str(tmp_path / "never-used.db")), "LOOPX_BWRAP": str(tmp_path / "no-bwrap")}
    p = subprocess.run([sys.executable, "-m", "loopx", "demo", "--registry", str(tmp_path / "demo.db")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "bubblewrap is not installed" in p.stdout and "[command] publish: exit 0" in p.stdout
    reg = ["--registry", str(tmp_path / "mine.db")]
    made = subprocess.run([sys.executable, "-m", "loopx", "--json", *reg, "project-prompt", "create", "--title", "g"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    goal = json.loads(made.stdout)["id"]
    subprocess.run([sys.executable, "-m", "loopx", *reg, "todo", "add", "--goal-id", goal, "--text", "t"], env=env,
                   capture_output=True, text=True, timeout=120, check=True)
    turn = subprocess.run([sys.executable, "-m", "loopx", *reg, "turn", "--goal-id", goal, "--executor", "shell"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert turn.returncode == 2 and "confinement_unavailable" in turn.stderr, turn.stderr
