"""Issue-Fix end to end with a real agent CLI: Claude Code, driven by LoopX's own harness loop.

Every turn is ``loopx turn --goal-id G --executor claude-code`` as a real process (should-run,
the contract's steps, the executor, ``run finish``), started in a directory that is *not* the
worktree. The real Claude Code CLI talks only to a scripted model server on 127.0.0.1
(``tests/model_servers.py``) that plays a developer: it runs the contract's commands through
Claude Code's ``Bash`` tool and edits ``calc.py`` with Claude Code's own ``Read`` and ``Edit``
tools, by a relative path, so the edit lands wherever the executor started the CLI: the
contract's working directory, the goal's worktree. A missing CLI skips the test, saying where it
was looked for.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from issue_fix_helpers import BUGGY, FAILING_ID, FIXED, TEST_COMMAND, git, make_project, origin_of

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # the repository's shared test helpers (model servers, agent CLIs)
    sys.path.insert(0, str(ROOT))

from tests.model_servers import AnthropicServer, cli_path, prompt_commands  # noqa: E402

pytestmark = pytest.mark.agents  # drives the real agent CLIs: not in the quick tier

ROOT_CAUSE = "add() subtracted its arguments"


class Developer:
    """The scripted model: per request, the next tool call of this turn's plan, or ``None`` (done).

    The plan is the contract's commands in order (from the prompt's ```sh block); before the
    ``issue-fix verify`` step it makes one of ``fixes`` per verify turn, in order: each a list of
    Claude Code tool calls (``Read``/``Edit``/``Write``, relative paths); it adds ``--root-cause``
    to the hand-off step. Like the prompt tells it, it stops at the first command that fails.
    """

    def __init__(self, fixes, root_cause=True):
        self.fixes, self.root_cause = list(fixes), root_cause
        self.fix_of_run: dict[str, tuple[str, str]] = {}
        self.prompts: list[str] = []

    def __call__(self, results, tools, prompt):
        commands = prompt_commands(prompt)
        if not commands:
            return None
        if prompt not in self.prompts:
            self.prompts.append(prompt)
        if results and (results[-1].startswith("Exit code") or "tool_use_error" in results[-1]):
            return None
        plan = []
        for command in commands:
            if " issue-fix verify " in command:
                run = command.split("--run-id ", 1)[1].split()[0]
                if run not in self.fix_of_run:
                    self.fix_of_run[run] = self.fixes[len(self.fix_of_run)]
                plan += self.fix_of_run[run]
            if " issue-fix handoff " in command and self.root_cause:
                command += " --root-cause " + shlex.quote(ROOT_CAUSE)
            plan.append(("Bash", {"command": command, "description": "contract step"}))
        return plan[len(results)] if len(results) < len(plan) else None


def edit(path, old, new):
    """Claude Code's own tools: read the file, then replace ``old`` by ``new`` in it."""
    return [("Read", {"file_path": path}), ("Edit", {"file_path": path, "old_string": old, "new_string": new})]


REWRITE = ("import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
           "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")


@pytest.mark.parametrize("permissions", ["bypass", "allowlist"])
def test_claude_code_fixes_an_issue_through_the_harness_loop(tmp_path, permissions, loopx_cli):
    claude = cli_path("claude")
    project = make_project(tmp_path)
    elsewhere = tmp_path / "elsewhere"  # where the harness runs: not the worktree
    elsewhere.mkdir()
    (elsewhere / "calc.py").write_text(BUGGY)  # a decoy: an agent started here would edit this one
    home = tmp_path / "home"
    home.mkdir()
    # (XDG_CONFIG_HOME is loopx_cli's empty registry's: the harness's key lives beneath its HOME.)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_", "ANTHROPIC_")) and k != "XDG_CONFIG_HOME"}
    env.update({"LOOPX_REGISTRY": str(tmp_path / "harness.db"), "HOME": str(home), "LOOPX_CLAUDE_BIN": claude,
                "LOOPX_CLAUDE_PERMISSIONS": permissions,
                "ANTHROPIC_API_KEY": "sk-ant-scripted", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})

    def loopx(*args, code=0, **extra):
        p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *map(str, args)],
                           env={**env, **extra}, cwd=elsewhere, capture_output=True, text=True, timeout=300)
        assert p.returncode == code, (p.stdout[-3000:], p.stderr[-3000:])
        return json.loads(p.stdout)

    def user(*args, code=0):
        """What the user looks at or decides between turns (the goal's state, a gate), in-process
        on the same registry with the same environment: the turns, the agent CLI and its steps
        are the real processes this test is about."""
        r = loopx_cli("--format", "json", *args, env={**{k: None for k in os.environ}, **env})
        assert r.code == code, (r.out[-3000:], r.err[-3000:])
        return json.loads(r.out)

    def show():
        return user("issue-fix", "show", "--goal-id", g)

    out = loopx("issue-fix", "start", "--repo", project, "--title", "add subtracts",
                "--issue-text", "add(2, 3) returns -1 instead of 5", "--test-command", TEST_COMMAND)
    g, wt, base = out["goal_id"], Path(out["worktree"]), out["base_commit"]
    wrong = edit("calc.py", "return a - b\n\n\ndef sub", "return a * b\n\n\ndef sub")
    # Three attacks on verify, each refused: a conftest that rewrites reports; the same conftest
    # hidden from git by a .gitignore that ignores itself; the failing test's expectation edited.
    attack_conftest = [("Write", {"file_path": "conftest.py", "content": REWRITE})]
    attack_hidden = [("Write", {"file_path": ".gitignore", "content": "conftest.py\n.gitignore\n"})]
    attack_test = edit("test_calc.py", "== 5", "== 6")
    right = [*edit("test_calc.py", "== 6", "== 5"),
             *edit("calc.py", "return a * b\n\n\ndef sub", "return a + b\n\n\ndef sub")]
    # On an allow-list only the contract's exact commands may run: no --root-cause added there.
    developer = Developer([wrong, attack_conftest, attack_hidden, attack_test, right],
                          root_cause=permissions == "bypass")
    with AnthropicServer(policy=developer) as server:
        env["ANTHROPIC_BASE_URL"] = server.url()

        def turn(code=0):
            return loopx("turn", "--goal-id", g, "--executor", "claude-code", code=code)

        # Turn 1: reproduce. The contract names the worktree as the agent's working directory.
        t = turn()
        assert t["outcome"] == "ok", t["handoff"]
        assert f"Working directory: {wt}" in developer.prompts[-1]
        s = show()
        assert s["phase"] == "fix" and s["reproduction"]["failing"] == [FAILING_ID]
        assert s["todo_status"]["reproduce"] == "done"

        # Turn 2: a wrong fix, edited by the agent in the worktree: verify fails, so does the turn;
        # the todo stays open and nothing is committed.
        t = turn(code=1)
        assert t["outcome"] == "failed", t["handoff"]
        assert "issue-fix verify" in t["handoff"] and "exit 1" in t["handoff"]
        assert (wt / "calc.py").read_text() == BUGGY.replace("a - b", "a * b", 1), t["handoff"]
        assert (elsewhere / "calc.py").read_text() == BUGGY and (project / "calc.py").read_text() == BUGGY
        s = show()
        assert s["phase"] == "fix" and s["log"][-1]["outcome"] == "test_failed"
        assert s["todo_status"]["fix"] == "open" and s["todo_status"]["verify"] == "open"
        assert git(wt, "rev-parse", "HEAD") == base
        run2 = user("run", "show", "--run-id", t["run_id"])
        assert run2["status"] == "finished" and run2["outcome"] == "failed"

        # The attacks: each turn fails with verify's refusal; nothing is committed.
        t = turn(code=1)
        assert t["outcome"] == "failed" and show()["log"][-1]["outcome"] == "tests_changed", t["handoff"]
        assert (wt / "conftest.py").is_file()
        t = turn(code=1)
        # Hidden from git, the conftest is not in the clean copy verify tests: still red.
        assert t["outcome"] == "failed" and show()["log"][-1]["outcome"] == "test_failed", t["handoff"]
        # Three failed turns in a row: LoopX asks a user before another; the user lets it retry.
        assert user("quota", "should-run", "--goal-id", g)["reasons"] == ["repeated_failure"]
        user("project-prompt", "retry", "--goal-id", g)
        t = turn(code=1)
        assert t["outcome"] == "failed" and show()["log"][-1]["outcome"] == "tests_weakened", t["handoff"]
        assert git(wt, "rev-parse", "HEAD") == base

        # Turn 3: the right fix; verify proves it and LoopX commits exactly that code.
        t = turn()
        assert t["outcome"] == "ok", t["handoff"]
        s = show()
        commit = s["verification"]["commit"]
        assert s["phase"] == "handoff" and git(wt, "rev-parse", "HEAD") == commit
        assert git(wt, "rev-parse", f"{commit}^") == base
        assert git(wt, "log", "-1", "--format=%an", commit) == "LoopX Issue-Fix"
        assert git(wt, "show", f"{commit}:calc.py") + "\n" == FIXED
        # The hidden conftest is not in the verified commit, and the packet will name it.
        assert "conftest.py" not in git(wt, "ls-tree", "--name-only", commit)
        assert s["todo_status"]["fix"] == "done" and s["todo_status"]["verify"] == "done"
        # No publish gate yet; the only gate is the one verify asked about the conftest change (never approved).
        assert [x["scope"] for x in user("gate", "list", "--goal-id", g)] == ["other"]

        # Turn 4: the packet, with the agent's root cause; the publish gate is requested now.
        t = turn()
        assert t["outcome"] == "ok", t["handoff"]
        s = show()
        packet = Path(s["handoff"]["packet"]).read_text()
        for needle in (ROOT_CAUSE if permissions == "bypass" else "## Root cause",
                       f"| `{FAILING_ID}` | failed | passed |", "| 2 | verify | test_failed |",
                       "| 3 | verify | tests_changed |", "| 5 | verify | tests_weakened |", "- `conftest.py`",
                       "-    return a - b", "+    return a + b", commit, "## Environment"):
            assert needle in packet, needle
        assert s["phase"] == "publish" and s["publish_gate_status"] == "pending"

        # Waiting for review: no turn runs, nothing is pushed.
        t = turn()
        assert t["decision"] == "ask_user" and t["run_id"] is None
        assert git(origin_of(project), "branch", "--list") == ""

        # A user approves (the agent could not); the next turn publishes exactly the verified commit.
        user("gate", "approve", "--goal-id", g, "--gate-id", s["publish_gate"])
        t = turn()
        assert t["outcome"] == "ok", t["handoff"]
        assert git(origin_of(project), "rev-parse", f"refs/heads/{out['branch']}") == commit

        # Closed with its criteria met, every todo done; no further turn runs.
        s = show()
        assert s["phase"] == "published" and s["status"] == "closed"
        assert all(c["met"] for c in s["criteria"]) and set(s["todo_status"].values()) == {"done"}
        assert turn()["decision"] != "run"
    # Only the model API was called; the user's checkout never changed.
    assert server.paths() == {"POST /v1/messages?beta=true"}
    assert git(project, "status", "--porcelain") == "" and git(project, "rev-parse", "HEAD") == base
