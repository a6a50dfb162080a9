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

from issue_fix_helpers import BUGGY, FAILING_ID, FIXED, TEST_COMMAND, git, make_project, origin_of

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # the repository's shared test helpers (model servers, agent CLIs)
    sys.path.insert(0, str(ROOT))

from tests.model_servers import AnthropicServer, cli_path, prompt_commands  # noqa: E402

ROOT_CAUSE = "add() subtracted its arguments"


class Developer:
    """The scripted model: per request, the next tool call of this turn's plan, or ``None`` (done).

    The plan is the contract's commands in order (from the prompt's ```sh block); before the
    ``issue-fix verify`` step it reads and edits ``calc.py`` (one of ``fixes`` per verify turn, in
    order); it adds ``--root-cause`` to the hand-off step. Like the prompt tells it, it stops at
    the first command that fails.
    """

    def __init__(self, fixes):
        self.fixes = list(fixes)
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
                old, new = self.fix_of_run[run]
                plan += [("Read", {"file_path": "calc.py"}),
                         ("Edit", {"file_path": "calc.py", "old_string": old, "new_string": new})]
            if " issue-fix handoff " in command:
                command += " --root-cause " + shlex.quote(ROOT_CAUSE)
            plan.append(("Bash", {"command": command, "description": "contract step"}))
        return plan[len(results)] if len(results) < len(plan) else None


def test_claude_code_fixes_an_issue_through_the_harness_loop(tmp_path):
    claude = cli_path("claude")
    project = make_project(tmp_path)
    elsewhere = tmp_path / "elsewhere"  # where the harness runs: not the worktree
    elsewhere.mkdir()
    (elsewhere / "calc.py").write_text(BUGGY)  # a decoy: an agent started here would edit this one
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_", "ANTHROPIC_"))}
    env.update({"LOOPX_REGISTRY": str(tmp_path / "registry.db"), "HOME": str(home), "LOOPX_CLAUDE_BIN": claude,
                "ANTHROPIC_API_KEY": "sk-ant-scripted", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})

    def loopx(*args, code=0, **extra):
        p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *map(str, args)],
                           env={**env, **extra}, cwd=elsewhere, capture_output=True, text=True, timeout=300)
        assert p.returncode == code, (p.stdout[-3000:], p.stderr[-3000:])
        return json.loads(p.stdout)

    def show():
        return loopx("issue-fix", "show", "--goal-id", g)

    out = loopx("issue-fix", "start", "--repo", project, "--title", "add subtracts",
                "--issue-text", "add(2, 3) returns -1 instead of 5", "--test-command", TEST_COMMAND)
    g, wt, base = out["goal_id"], Path(out["worktree"]), out["base_commit"]
    wrong = ("return a - b\n\n\ndef sub", "return a * b\n\n\ndef sub")
    right = ("return a * b\n\n\ndef sub", "return a + b\n\n\ndef sub")
    developer = Developer([wrong, right])
    with AnthropicServer(policy=developer) as server:
        env["ANTHROPIC_BASE_URL"] = server.url()

        def turn():
            return loopx("turn", "--goal-id", g, "--executor", "claude-code")

        # Turn 1: reproduce. The contract names the worktree as the agent's working directory.
        t = turn()
        assert t["outcome"] == "ok", t["handoff"]
        assert f"Working directory: {wt}" in developer.prompts[-1]
        s = show()
        assert s["phase"] == "fix" and s["reproduction"]["failing"] == [FAILING_ID]
        assert s["todo_status"]["reproduce"] == "done"

        # Turn 2: a wrong fix, edited by the agent in the worktree: verify fails, so does the turn;
        # the todo stays open and nothing is committed.
        t = turn()
        assert t["outcome"] == "failed", t["handoff"]
        assert "issue-fix verify" in t["handoff"] and "exit 1" in t["handoff"]
        assert (wt / "calc.py").read_text() == BUGGY.replace("a - b", "a * b", 1)
        assert (elsewhere / "calc.py").read_text() == BUGGY and (project / "calc.py").read_text() == BUGGY
        s = show()
        assert s["phase"] == "fix" and s["log"][-1]["outcome"] == "test_failed"
        assert s["todo_status"]["fix"] == "open" and s["todo_status"]["verify"] == "open"
        assert git(wt, "rev-parse", "HEAD") == base
        run2 = loopx("run", "show", "--run-id", t["run_id"])
        assert run2["status"] == "finished" and run2["outcome"] == "failed"

        # Turn 3: the right fix; verify proves it and LoopX commits exactly that code.
        t = turn()
        assert t["outcome"] == "ok", t["handoff"]
        s = show()
        commit = s["verification"]["commit"]
        assert s["phase"] == "handoff" and git(wt, "rev-parse", "HEAD") == commit
        assert git(wt, "rev-parse", f"{commit}^") == base
        assert git(wt, "log", "-1", "--format=%an", commit) == "LoopX Issue-Fix"
        assert git(wt, "show", f"{commit}:calc.py") + "\n" == FIXED
        assert s["todo_status"]["fix"] == "done" and s["todo_status"]["verify"] == "done"
        assert loopx("gate", "list", "--goal-id", g) == []

        # Turn 4: the packet, with the agent's root cause; the publish gate is requested now.
        t = turn()
        assert t["outcome"] == "ok", t["handoff"]
        s = show()
        packet = Path(s["handoff"]["packet"]).read_text()
        for needle in (ROOT_CAUSE, f"| `{FAILING_ID}` | failed | passed |", "| 2 | verify | test_failed |",
                       "-    return a - b", "+    return a + b", commit, "## Environment"):
            assert needle in packet, needle
        assert s["phase"] == "publish" and s["publish_gate_status"] == "pending"

        # Waiting for review: no turn runs, nothing is pushed.
        t = turn()
        assert t["decision"] == "ask_user" and t["run_id"] is None
        assert git(origin_of(project), "branch", "--list") == ""

        # A user approves (the agent could not); the next turn publishes exactly the verified commit.
        loopx("gate", "approve", "--goal-id", g, "--gate-id", s["publish_gate"])
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
