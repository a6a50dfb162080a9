"""Issue-Fix end to end with the real Codex CLI in its sandbox modes, inside LoopX's confinement.

Every turn is ``loopx turn --goal-id G --executor codex`` as a real process, started in a
directory that is not the worktree. The real Codex CLI talks only to a scripted Responses-API
server on 127.0.0.1 (``tests/model_servers.py``) that runs the contract's commands with Codex's
shell tool and, before ``issue-fix verify``, edits ``calc.py`` by a relative path - inside Codex's
own sandbox (``LOOPX_CODEX_SANDBOX``), nested in the turn's Landlock confinement. A missing CLI
skips the test, saying where it was looked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from issue_fix_helpers import BUGGY, FAILING_ID, FIXED, TEST_COMMAND, git, make_project

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # the repository's shared test helpers (model servers, agent CLIs)
    sys.path.insert(0, str(ROOT))

from tests.model_servers import OpenAIServer, cli_path, prompt_commands  # noqa: E402

pytestmark = pytest.mark.agents  # drives the real agent CLIs: not in the quick tier

FIX = ("python3 -c \"import pathlib; p = pathlib.Path('calc.py'); "
       "p.write_text(p.read_text().replace('return a - b', 'return a + b', 1))\"")


class Developer(OpenAIServer):
    """The scripted model: the contract's commands in order, with ``FIX`` run just before
    ``issue-fix verify``; like the prompt tells it, it stops at the first command that fails."""

    def next_command(self, prompt: str, done: int) -> str | None:
        with self.lock:
            self.prompts.append(prompt)
        script = []
        for command in prompt_commands(prompt):
            if " issue-fix verify " in command:
                script.append(FIX)
            script.append(command)
        return script[done] if done < len(script) else None


def harness(tmp_path: Path, sandbox: str):
    """A project, a goal on it, and ``loopx(*args)`` running LoopX as Codex's harness."""
    codex = cli_path("codex")
    project = make_project(tmp_path)
    elsewhere = tmp_path / "elsewhere"  # where the harness runs: not the worktree
    elsewhere.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_", "OPENAI_", "CODEX_"))}
    env.update({"LOOPX_REGISTRY": str(tmp_path / "registry.db"), "HOME": str(home), "LOOPX_CODEX_BIN": codex,
                "LOOPX_CODEX_SANDBOX": sandbox, "LOOPX_CODEX_MODEL": "scripted-model",
                "OPENAI_API_KEY": "sk-scripted", "CODEX_HOME": str(tmp_path / "codex-home"),
                "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})

    def loopx(*args, code=0):
        p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *map(str, args)], env=env,
                           cwd=elsewhere, capture_output=True, text=True, timeout=300)
        assert p.returncode == code, (json.loads(p.stdout).get("handoff") if p.stdout.startswith("{") else p.stdout[-3000:], p.stderr[-3000:])
        return json.loads(p.stdout)

    out = loopx("issue-fix", "start", "--repo", project, "--title", "add subtracts",
                "--issue-text", "add(2, 3) returns -1 instead of 5", "--test-command", TEST_COMMAND)
    return project, out, env, loopx


def test_codex_in_its_workspace_write_sandbox_fixes_an_issue(tmp_path):
    project, out, env, loopx = harness(tmp_path, "workspace-write")
    g, wt, base = out["goal_id"], Path(out["worktree"]), out["base_commit"]
    with Developer() as server:
        env["LOOPX_CODEX_BASE_URL"] = server.url()
        t = loopx("turn", "--goal-id", g, "--executor", "codex")
        assert t["outcome"] == "ok", t["handoff"]
        s = loopx("issue-fix", "show", "--goal-id", g)
        assert s["phase"] == "fix" and s["reproduction"]["failing"] == [FAILING_ID]
        # The fix: Codex edits calc.py in the worktree, inside its sandbox; verify proves it.
        t = loopx("turn", "--goal-id", g, "--executor", "codex")
        assert t["outcome"] == "ok", t["handoff"]
    s = loopx("issue-fix", "show", "--goal-id", g)
    commit = s["verification"]["commit"]
    assert s["phase"] == "handoff" and git(wt, "rev-parse", "HEAD") == commit
    assert git(wt, "show", f"{commit}:calc.py") + "\n" == FIXED
    assert (project / "calc.py").read_text() == BUGGY and git(project, "rev-parse", "HEAD") == base
    assert server.paths() == {"POST /v1/responses"}


def test_codex_in_its_read_only_sandbox_runs_nothing_inside_loopx_confinement(tmp_path):
    _project, out, env, loopx = harness(tmp_path, "read-only")
    g, wt = out["goal_id"], Path(out["worktree"])
    with Developer() as server:
        env["LOOPX_CODEX_BASE_URL"] = server.url()
        t = loopx("turn", "--goal-id", g, "--executor", "codex", code=1)
    # Codex's own sandbox cannot start inside LoopX's confinement: no command runs, the turn fails.
    assert t["outcome"] == "failed" and "ran none of the contract's commands" in t["handoff"], t["handoff"]
    # ... and the turn's reason says why, with a stable code (Codex itself says nothing).
    assert t["handoff"].startswith("codex: failed [codex_sandbox_read_only]") and "forbids edits" in t["handoff"]
    s = loopx("issue-fix", "show", "--goal-id", g)
    assert s["phase"] == "reproduce" and s.get("reproduction") is None
    assert (wt / "calc.py").read_text() == BUGGY
