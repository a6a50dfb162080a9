"""The ``claude-code`` executor: one turn of Claude Code (``claude -p``) under the contract.

Runs ``claude -p PROMPT --output-format stream-json --verbose`` in the current directory with
stdin closed. Claude Code asks before running a command unless told otherwise, and in ``-p``
mode nobody can answer: as root it needs ``--permission-mode bypassPermissions`` *and*
``IS_SANDBOX=1``, so by default (``LOOPX_CLAUDE_PERMISSIONS=bypass``) LoopX passes both;
``LOOPX_CLAUDE_PERMISSIONS=allowlist`` passes ``--allowedTools`` with one ``Bash(...)`` entry per
contract command instead, plus ``Edit(//DIR/**)`` when the contract names a working directory DIR
(anything else is then denied, and a denial fails the turn).

Configuration: ``LOOPX_CLAUDE_BIN`` (default ``claude`` on PATH), ``LOOPX_CLAUDE_MODEL``
(``--model``), ``LOOPX_AGENT_TIMEOUT``; ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` reach the
CLI unchanged. The CLI runs with ``CLAUDE_CONFIG_DIR`` set to the goal's own directory, seeded
from the user's login before the turn (:mod:`loopx.turn.executors.homes`). Tokens and cost are read
from the final ``result`` event (``modelUsage`` or ``usage``, ``total_cost_usd``); ``is_error``
and ``permission_denials`` fail the turn.
"""

from __future__ import annotations

import json
import os
import re

NAME = "claude-code"
_EXIT = re.compile(r"Exit code (\d+)")


class ClaudeCodeExecutor:
    """Carries out one turn with the Claude Code CLI."""

    host = NAME

    def __init__(self, timeout: float | None = None):
        self.timeout = timeout

    def check(self) -> None:
        """Refuse before a run is opened when the CLI cannot be found or is not logged in."""
        from loopx.turn.executors.agents import preflight

        preflight(NAME)

    def seed_goal(self, registry, goal_id: str) -> None:
        """Before should-run: make the goal's own Claude Code directory from the user's login
        (:mod:`loopx.turn.executors.homes`; ``agent_logged_out`` when it cannot be carried)."""
        from loopx.turn.executors import homes

        homes.seed(registry, goal_id, NAME)

    def home_paths(self) -> list[str]:
        """What of ``$HOME`` the CLI reads, shown read-only in the step's world (:mod:`loopx.sandbox.world`):
        ``~/.claude.json`` and the CLI's own install."""
        from loopx.views import agent_login
        from loopx.sandbox import world

        home = os.path.expanduser("~")
        return [os.path.join(home, ".claude.json"), *world.program_paths(agent_login.program(NAME))]

    def argv(self, prompt: str, contract: dict) -> list[str]:
        """The command line for one turn."""
        from loopx.values.errors import LoopxError
        from loopx.turn.executors import prompt as prompts

        argv = [os.environ.get("LOOPX_CLAUDE_BIN") or "claude", "-p", prompt, "--output-format", "stream-json",
                "--verbose"]
        mode = os.environ.get("LOOPX_CLAUDE_PERMISSIONS") or "bypass"
        if mode == "bypass":
            argv += ["--permission-mode", "bypassPermissions"]
        elif mode == "allowlist":
            allowed = [f"Bash({line})" for line in prompts.commands(contract, managed=True)]
            where = contract["interaction_contract"].get("agent_channel", {}).get("workdir")
            if where:
                # The contract names the directory the work happens in (a goal's worktree): edits
                # there, and only there, are allowed (`//` makes the pattern absolute).
                allowed.append(f"Edit(/{os.path.abspath(where)}/**)")
            argv += ["--allowedTools", ",".join(allowed)]
        else:
            raise LoopxError("invalid_argument", "LOOPX_CLAUDE_PERMISSIONS must be bypass or allowlist")
        if os.environ.get("LOOPX_CLAUDE_MODEL"):
            argv += ["--model", os.environ["LOOPX_CLAUDE_MODEL"]]
        return argv

    def run_turn(self, registry, contract: dict, *, agent: str) -> dict:
        """Run Claude Code for the turn ``contract`` allows; returns what ``run finish`` takes."""
        from loopx.turn.executors import agents, homes, prompt as prompts

        text = prompts.build(contract, host=NAME, managed=True)
        env = agents.child_env(registry, contract, agent=agent)
        # The goal's own config directory, never the user's ~/.claude (loopx.turn.executors.homes).
        env["CLAUDE_CONFIG_DIR"] = homes.home(registry, contract["goal_id"], NAME)
        # Root may bypass permissions only inside a sandbox it declares; updates and telemetry
        # would be traffic nobody asked for in a governed turn.
        env.update({"IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
        report = agents.Report()
        return agents.run_agent(NAME, registry, contract, agent=agent, argv=self.argv(text, contract), env=env,
                                parse=parse, report=report, summarize=summarize,
                                timeout=self.timeout or agents.configured_timeout())


def parse(report, line: str) -> None:
    """Read one stream-json event of Claude Code into ``report``."""
    from loopx.turn.executors.agents import json_object

    event = json_object(line)
    if event is None:
        return
    kind = event.get("type")
    message = event.get("message") if isinstance(event.get("message"), dict) else {}
    if kind == "assistant":
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                pending = report.__dict__.setdefault("pending", {})
                tool_input = block.get("input") or {}
                label = tool_input.get("command") if block.get("name") == "Bash" else None
                pending[block.get("id")] = label or f"{block.get('name')} {json.dumps(tool_input)[:200]}"
    elif kind == "user":
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                command = report.__dict__.get("pending", {}).pop(block.get("tool_use_id"), "?")
                output = _text(block.get("content"))
                code = _EXIT.search(output) if block.get("is_error") else None
                report.command(command, ok=not block.get("is_error"),
                               exit_code=int(code.group(1)) if code else (None if block.get("is_error") else 0),
                               output=output)
    elif kind == "result":
        report.finished = True
        report.tokens = _tokens(event)
        report.cost = float(event.get("total_cost_usd") or 0.0)
        report.final_text = str(event.get("result") or "")
        if event.get("is_error"):
            # Its `result` is then the error (e.g. "API Error: 400 ..."), not a reply.
            report.failures.append(f"Claude Code error: {report.final_text[:300] or event.get('subtype')}")
            report.final_text = ""
        for denial in event.get("permission_denials") or []:
            tool_input = denial.get("tool_input") or {}
            what = tool_input.get("command") or json.dumps(tool_input)[:200]
            report.failures.append(f"permission denied: {denial.get('tool_name')} {what}")


def summarize(line: str) -> str | None:
    """One line for a person about one stream-json event (``loopx turn`` on a terminal), or None."""
    from loopx.turn.executors.agents import json_object

    event = json_object(line)
    if event is None:
        return None
    kind = event.get("type")
    message = event.get("message") if isinstance(event.get("message"), dict) else {}
    if kind == "system" and event.get("subtype") == "init":
        return f"started (model {event.get('model') or '?'})"
    if kind == "assistant":
        said = []
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                tool_input = block.get("input") or {}
                if block.get("name") == "Bash":
                    said.append(f"$ {tool_input.get('command')}")
                else:
                    said.append(f"{block.get('name')} {tool_input.get('file_path') or json.dumps(tool_input)[:80]}")
            elif block.get("type") == "text" and str(block.get("text") or "").strip():
                said.append(f"says: {block['text']}")
        return " | ".join(said) or None
    if kind == "user":
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                output = _text(block.get("content")).strip()
                first = output.splitlines()[0] if output else ""
                return f"-> failed: {first}" if block.get("is_error") else "-> ok"
        return None
    if kind == "result":
        if event.get("is_error"):
            return f"error: {event.get('result') or event.get('subtype')}"
        return f"done: {_tokens(event)} tokens, ${float(event.get('total_cost_usd') or 0.0):.4f}"
    return None


def _tokens(event: dict) -> int:
    models = event.get("modelUsage")
    if isinstance(models, dict) and models:
        return sum(int(u.get(k) or 0) for u in models.values() if isinstance(u, dict)
                   for k in ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens"))
    usage = event.get("usage") or {}
    return sum(int(usage.get(k) or 0) for k in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                                                  "cache_creation_input_tokens"))


def _text(content) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text")) for p in content or [] if isinstance(p, dict) and "text" in p)
