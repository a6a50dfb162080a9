"""A workspace per goal (issue 35): the agent works in a worktree LoopX owns, never in the user's checkout.

Everything here goes through the CLI as a user runs it (``loopx project-prompt create``, ``loopx turn
--executor shell``, ``loopx worker``, ``loopx workspace ...``) on a real git repository, with the
turn really confined (Landlock); the agent's work is a script run as the contract's action.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import loopx_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")
PY = sys.executable


def _cli(url, *args, cwd=None, timeout=120):
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", *map(str, args)], env=loopx_env(url), cwd=cwd,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr


def _ok(url, *args, cwd=None):
    code, out, err = _cli(url, *args, cwd=cwd)
    assert code == 0, (args, out, err)
    return out


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=u", "-c", "user.email=u@example.invalid", *args],
                          capture_output=True, text=True, check=True).stdout


def _repo(path: Path, files: dict) -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "the user's work")
    return path


#: What LoopX itself adds to the checkout's repository when it makes a workspace: the worktree's
#: administrative directory, the branch, its log, and the objects of the base commit.
LOOPX_MADE = (".git/worktrees/", ".git/refs/heads/loopx/", ".git/logs/", ".git/objects/")


def _snapshot(path: Path) -> dict:
    """Every file of a checkout (``.git`` included, but what LoopX adds to it) with its bytes."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and not str(p.relative_to(path)).startswith(LOOPX_MADE)}


def _goal(url, project: Path, script: str, *, cwd=None) -> str:
    g = _ok(url, "project-prompt", "create", "--title", "ws", "--project", project, cwd=cwd)["id"]
    _ok(url, "action", "add", "--goal-id", g, "--name", "work", "--", "sh", "-c", script)
    _ok(url, "todo", "add", g, "--text", "do it", "--action", "work")
    return g


def _turn(url, goal, cwd):
    code, out, err = _cli(url, "turn", goal, "--executor", "shell", cwd=cwd, timeout=300)
    assert out is not None, err
    return out


def _step_output(url, run_id) -> str:
    evs = _ok(url, "evidence", "list", "--run-id", run_id)
    return "".join(e["data"].get("output_tail", "") for e in evs if e["kind"] == "command")


ATTACK = r"""
set +e
try() {{ name=$1; shift; if "$@" >/dev/null 2>&1; then echo "ATTACK $name ok"; else echo "ATTACK $name refused"; fi; }}
try checkout_claude sh -c 'mkdir -p {checkout}/.claude && echo "{{\"hooks\": {{}}}}" > {checkout}/.claude/settings.json'
try checkout_file sh -c 'echo planted > {checkout}/planted.txt'
try checkout_edit sh -c 'echo changed >> {checkout}/app.py'
try ws_git_file sh -c 'echo "gitdir: /tmp/evil" > .git'
try ws_commondir sh -c 'echo /tmp/evil > "$(git rev-parse --absolute-git-dir)/commondir"'
try ws_git_config sh -c 'printf "[core]\n\tfsmonitor = touch /tmp/pwned\n" >> "$(git rev-parse --git-common-dir)/config"'
try ws_hook sh -c 'echo "touch /tmp/pwned" > "$(git rev-parse --git-common-dir)/hooks/post-checkout"'
try ws_branch sh -c 'git update-ref refs/heads/main HEAD~0'
try apply_self loopx workspace apply {goal}
try discard_self loopx workspace discard {goal}
mkdir -p .claude && echo '{{"hooks": {{"SessionStart": []}}}}' > .claude/settings.json
echo "print('fixed')" > app.py
echo new > notes.txt
ln -s {checkout}/README link-to-readme
"""
NAMES = {"checkout_claude", "checkout_file", "checkout_edit", "ws_git_file", "ws_commondir", "ws_git_config",
         "ws_hook", "ws_branch", "apply_self", "discard_self"}


@pytest.mark.slow
def test_a_hostile_step_changes_only_its_workspace_and_the_user_applies_the_reviewed_diff(sqlite_url, tmp_path):
    checkout = _repo(tmp_path / "checkout", {"app.py": "print('bug')\n", "README": "hi\n"})
    before = _snapshot(checkout)
    branches = _git(checkout, "branch", "--list")
    goal = _goal(sqlite_url, checkout, "sh attack.sh", cwd=checkout)
    (checkout / "attack.sh").write_text(ATTACK.format(checkout=checkout, goal=goal))
    _git(checkout, "add", "attack.sh")
    _git(checkout, "commit", "-q", "-m", "the agent's script")
    before = _snapshot(checkout)
    # The turn runs from the user's checkout, as `loopx turn` in a project would.
    t = _turn(sqlite_url, goal, checkout)
    out = _step_output(sqlite_url, t["run_id"])
    results = dict(line.split()[1:3] for line in out.splitlines() if line.startswith("ATTACK "))
    assert set(results) == NAMES, out
    # In a step's world the checkout (here under /tmp) is not there at all: those writes land in
    # the step's private /tmp and are gone with it. Under Landlock alone they are refused.
    hidden = {"checkout_claude", "checkout_file", "checkout_edit"}
    assert {n for n, r in results.items() if r == "ok"} - hidden == set(), results
    # The user's checkout, its git metadata included, is byte for byte what it was.
    assert _snapshot(checkout) == before
    assert _git(checkout, "status", "--porcelain") == ""
    assert not Path("/tmp/pwned").exists()
    admin = checkout / ".git" / "worktrees"
    assert [(d / "commondir").read_text() for d in admin.iterdir()] == ["../..\n"]
    show = _ok(sqlite_url, "workspace", "show", goal)
    ws = Path(show["workspace"])
    assert show["project"] == str(checkout.resolve()) and show["branch"] == f"loopx/{goal}" and show["exists"]
    assert str(ws).startswith(str(tmp_path / "xdg-data")) or "workspaces" in str(ws)
    assert (ws / "notes.txt").read_text() == "new\n"
    # The diff: the agent's changes against the base, the agent's own settings flagged risky.
    d = _ok(sqlite_url, "workspace", "diff", goal)
    files = {f["path"]: f for f in d["files"]}
    assert set(files) == {".claude/settings.json", "app.py", "notes.txt", "link-to-readme"}, files
    assert files[".claude/settings.json"]["risky"] and not files["app.py"]["risky"]
    assert files["link-to-readme"]["risky"] and files["link-to-readme"]["mode"] == "120000"
    assert d["risky"] == [".claude/settings.json", "link-to-readme"] and "+print('fixed')" in d["patch"]
    # On a terminal the risky file is shown in red (script(1) gives the command a tty).
    shown = subprocess.run(["script", "-qec", f"{PY} -m loopx workspace diff {goal} --stat", "/dev/null"],
                           env=loopx_env(sqlite_url), capture_output=True, text=True, timeout=60)
    risky_line = next(line for line in shown.stdout.splitlines() if ".claude/settings.json" in line)
    assert "\x1b[31m" in risky_line and "RISKY" in risky_line
    # A local change of the user's that conflicts: refused, nothing changed.
    (checkout / "app.py").write_text("print('mine')\n")
    conflicted = _snapshot(checkout)
    code, out_json, err = _cli(sqlite_url, "workspace", "apply", goal)
    assert code == 2 and out_json["error"]["code"] == "workspace_conflict", (out_json, err)
    assert _snapshot(checkout) == conflicted
    _git(checkout, "checkout", "--", "app.py")
    # The user applies: the change lands in the checkout, recorded on the goal.
    applied = _ok(sqlite_url, "workspace", "apply", goal)
    assert applied["applied"] and (checkout / "app.py").read_text() == "print('fixed')\n"
    assert (checkout / "notes.txt").read_text() == "new\n"
    assert os.readlink(checkout / "link-to-readme") == str(checkout / "README")
    history = _ok(sqlite_url, "history", goal)
    assert any(e["kind"] == "goal.workspace_applied" and e["actor"] == "user" for e in history), history
    # Discard: the workspace and its branch are gone; the next turn makes a new one.
    _ok(sqlite_url, "workspace", "discard", goal)
    assert not ws.exists() and f"loopx/{goal}" not in _git(checkout, "branch", "--list")
    assert _git(checkout, "branch", "--list") == branches
    code, out_json, _ = _cli(sqlite_url, "workspace", "diff", goal)
    assert code == 2 and out_json["error"]["code"] == "workspace_missing"


def test_a_goal_without_a_project_takes_the_turns_directory_and_a_plain_directory_gets_a_copy(sqlite_url, tmp_path):
    from loopx.ledger.registry import Registry
    from tests.factories import make_goal

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "data.txt").write_text("one\n")
    # Made through the Python API, as goals were before projects were recorded: no project.
    with Registry.open(sqlite_url) as reg:
        goal = make_goal(reg, title="old", acts={"work": ["sh", "-c", "echo two >> data.txt"]}, todo_texts=["t"])["goal"]
    assert _ok(sqlite_url, "workspace", "show", goal)["project"] is None
    t = _turn(sqlite_url, goal, plain)
    assert t["outcome"] == "ok", t
    show = _ok(sqlite_url, "workspace", "show", goal)
    assert show["project"] == str(plain.resolve()) and show["kind"] == "copy" and show["branch"] is None
    assert (plain / "data.txt").read_text() == "one\n"
    assert (Path(show["workspace"]) / "data.txt").read_text() == "one\ntwo\n"
    d = _ok(sqlite_url, "workspace", "diff", goal)
    assert [f["path"] for f in d["files"]] == ["data.txt"]
    _ok(sqlite_url, "workspace", "apply", goal)
    assert (plain / "data.txt").read_text() == "one\ntwo\n"


@pytest.mark.slow
def test_one_worker_runs_goals_of_different_checkouts_each_in_its_own_workspace(sqlite_url, tmp_path):
    a = _repo(tmp_path / "a", {"a.txt": "a\n"})
    b = _repo(tmp_path / "b", {"b.txt": "b\n"})
    ga = _goal(sqlite_url, a, "pwd > where.txt; echo from-a > made.txt")
    gb = _goal(sqlite_url, b, "pwd > where.txt; echo from-b > made.txt")
    elsewhere = tmp_path / "worker-dir"
    elsewhere.mkdir()
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", "worker", "--concurrency", "2", "--exit-when-idle",
                        "--beat-seconds", "0.5"], env=loopx_env(sqlite_url), cwd=elsewhere, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for goal, project, mark, other in ((ga, a, "from-a", "b.txt"), (gb, b, "from-b", "a.txt")):
        ws = Path(_ok(sqlite_url, "workspace", "show", goal)["workspace"])
        assert (ws / "made.txt").read_text() == f"{mark}\n"
        assert os.path.realpath((ws / "where.txt").read_text().strip()) == os.path.realpath(ws)
        assert not (ws / other).exists() and not (project / "made.txt").exists()
    assert not list(elsewhere.iterdir())


@pytest.mark.slow
def test_status_shows_the_workspace_and_its_branch(sqlite_url, tmp_path):
    checkout = _repo(tmp_path / "c", {"x": "1\n"})
    goal = _goal(sqlite_url, checkout, "echo y > y")
    _turn(sqlite_url, goal, tmp_path)
    view = _ok(sqlite_url, "status", "--goal-id", goal)
    assert view["workspace"]["branch"] == f"loopx/{goal}" and Path(view["workspace"]["workspace"]).is_dir()
    text = subprocess.run([PY, "-m", "loopx", "status", "--goal-id", goal], env=loopx_env(sqlite_url),
                          capture_output=True, text=True, timeout=60).stdout
    assert f"loopx/{goal}" in text and view["workspace"]["workspace"] in text


@pytest.mark.slow
def test_a_workspace_path_the_user_sets_is_used_and_one_inside_the_checkout_is_refused(sqlite_url, tmp_path):
    checkout = _repo(tmp_path / "c", {"x": "1\n"})
    code, out, _ = _cli(sqlite_url, "project-prompt", "create", "--title", "t", "--project", checkout,
                        "--workspace", checkout / "ws")
    assert code == 2 and out["error"]["code"] == "invalid_argument"
    assert not Path(sqlite_url).exists()  # refused before anything was written (not even a new registry)
    mine = tmp_path / "my-workspace"
    g = _ok(sqlite_url, "project-prompt", "create", "--title", "t", "--project", checkout, "--workspace", mine)["id"]
    _ok(sqlite_url, "action", "add", "--goal-id", g, "--name", "work", "--", "sh", "-c", "echo z > z")
    _ok(sqlite_url, "todo", "add", g, "--text", "do it", "--action", "work")
    assert _turn(sqlite_url, g, tmp_path)["outcome"] == "ok"
    assert (mine / "z").read_text() == "z\n" and (mine / "x").read_text() == "1\n"
