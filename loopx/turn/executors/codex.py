"""The ``codex`` executor: one turn of Codex (``codex exec``) under the contract.

Runs ``codex exec --json --skip-git-repo-check`` with stdin closed (Codex reads stdin
otherwise), plugins off (``features.plugins=false``: it would try the network for them),
non-login shells (``allow_login_shell=false``: a login shell re-reads ``/etc/profile`` and loses
the PATH that finds ``loopx``), and a sandbox that lets commands run (Codex's default read-only
sandbox makes commands fail silently): ``LOOPX_CODEX_SANDBOX``, default ``danger-full-access``,
since the registry may live anywhere (or on a PostgreSQL server) and LoopX, not the sandbox,
decides what the turn may do.

Configuration: ``LOOPX_CODEX_BIN`` (default ``codex``), ``LOOPX_CODEX_MODEL`` (``-m``),
``CODEX_HOME`` (the user's login and settings, which LoopX seeds the goal's own ``CODEX_HOME``
from before the turn: :mod:`loopx.turn.executors.homes`), ``LOOPX_CODEX_BASE_URL`` (a custom Responses-API provider
named ``loopx``; its key is read from the variable ``LOOPX_CODEX_ENV_KEY`` names, default
``OPENAI_API_KEY``), ``LOOPX_AGENT_TIMEOUT``. Tokens are summed from every
``turn.completed.usage`` (input + output; Codex reports no cost, so the cost charged is 0);
``command_execution`` items with a non-zero exit code, error items after the turn started,
``turn.failed`` and ``error`` events fail the turn.
"""

from __future__ import annotations

import json
import os

NAME = "codex"


class CodexExecutor:
    """Carries out one turn with the Codex CLI."""

    host = NAME

    def __init__(self, timeout: float | None = None):
        self.timeout = timeout

    def check(self) -> None:
        """Refuse before a run is opened when the CLI cannot be found or is not logged in."""
        from loopx.turn.executors.agents import preflight

        preflight(NAME)

    def seed_goal(self, registry, goal_id: str) -> None:
        """Before should-run: make the goal's own Codex directory from the user's login
        (:mod:`loopx.turn.executors.homes`; ``agent_logged_out`` when it cannot be carried)."""
        from loopx.turn.executors import homes

        homes.seed(registry, goal_id, NAME)

    def home_paths(self) -> list[str]:
        """What of ``$HOME`` the CLI reads, shown read-only in the step's world (:mod:`loopx.sandbox.world`):
        the CLI's own install (its state is ``$CODEX_HOME``, writable)."""
        from loopx.views import agent_login
        from loopx.sandbox import world

        return [*world.program_paths(agent_login.program(NAME))]

    def argv(self, prompt: str) -> list[str]:
        """The command line for one turn."""
        sandbox = sandbox_mode()
        argv = [os.environ.get("LOOPX_CODEX_BIN") or "codex", "exec", "--json", "--skip-git-repo-check",
                "--sandbox", sandbox, "-c", "features.plugins=false", "-c", "allow_login_shell=false",
                # A governed turn talks to its model and nothing else.
                "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false"]
        base = os.environ.get("LOOPX_CODEX_BASE_URL")
        if base:
            key = os.environ.get("LOOPX_CODEX_ENV_KEY") or "OPENAI_API_KEY"
            argv += ["-c", "model_provider=loopx",
                     "-c", f"model_providers.loopx={{name=\"loopx\", base_url={_toml(base)}, "
                           f"wire_api=\"responses\", env_key={_toml(key)}}}"]
        if os.environ.get("LOOPX_CODEX_MODEL"):
            argv += ["-m", os.environ["LOOPX_CODEX_MODEL"]]
        return [*argv, prompt]

    def run_turn(self, registry, contract: dict, *, agent: str) -> dict:
        """Run Codex for the turn ``contract`` allows; returns what ``run finish`` takes."""
        from loopx.turn.executors import agents, homes, prompt as prompts

        env = agents.child_env(registry, contract, agent=agent)
        # The goal's own directory, never the user's $CODEX_HOME (loopx.turn.executors.homes).
        env["CODEX_HOME"] = homes.home(registry, contract["goal_id"], NAME)
        report = agents.Report()
        out = agents.run_agent(NAME, registry, contract, agent=agent,
                               argv=self.argv(prompts.build(contract, host=NAME, managed=True)), env=env,
                               parse=parse, report=report, timeout=self.timeout or agents.configured_timeout(),
                               summarize=summarize)
        if out["outcome"] == "failed" and not report.commands and sandbox_mode() == "read-only":
            # Codex says nothing about it (no command item, exit 0): the turn's reason says why.
            out["handoff"] = (f"{NAME}: failed [{READ_ONLY}]: Codex ran in its read-only sandbox "
                              "(LOOPX_CODEX_SANDBOX=read-only), which forbids edits and lets no command run; set "
                              "LOOPX_CODEX_SANDBOX=workspace-write (edits in the working directory only) or leave "
                              "it unset; " + out["handoff"])[:4000]
        return out


#: The stable code a turn's hand-off starts with when Codex's read-only sandbox kept it from doing anything.
READ_ONLY = "codex_sandbox_read_only"


def sandbox_mode() -> str:
    """The ``--sandbox`` Codex gets: ``LOOPX_CODEX_SANDBOX`` (default ``danger-full-access``), except
    that ``workspace-write`` inside LoopX's confinement becomes ``danger-full-access``.

    Why: Codex's Linux sandbox is bubblewrap in a new user namespace, which must write
    ``/proc/self/uid_map``; LoopX's Landlock policy does not let a turn write under ``/proc``, so
    every command would fail ("bwrap: setting up uid map: Permission denied"), and Codex's legacy
    Landlock sandbox refuses restricted file systems ("requires bubblewrap"). LoopX's confinement
    already is a workspace-write sandbox - writes only in the worktree, the turn's temp dir and
    the goal's own CLI state directory - so nothing is lost. ``read-only``
    is passed on as asked: inside the confinement Codex cannot start its sandbox, every command
    fails and so does the turn (see docs/agents.md).
    """
    from loopx.sandbox.process import active_step

    sandbox = os.environ.get("LOOPX_CODEX_SANDBOX") or "danger-full-access"
    if sandbox == "workspace-write" and active_step()[0] is not None:
        return "danger-full-access"
    return sandbox


def _toml(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


def summarize(line: str) -> str | None:
    """One line for a person about one ``codex exec --json`` event (``loopx turn`` on a terminal), or None."""
    from loopx.turn.executors.agents import json_object

    event = json_object(line)
    if event is None:
        return None
    kind = event.get("type")
    item = event.get("item") if isinstance(event.get("item"), dict) else {}
    what = item.get("type")
    if kind == "thread.started":
        return "started"
    if kind == "item.started" and what == "command_execution":
        return f"$ {item.get('command')}"
    if kind == "item.completed" and what == "command_execution":
        code = item.get("exit_code")
        return "-> ok" if code == 0 else f"-> failed: exit {code}"
    if kind == "item.completed" and what == "agent_message":
        return f"says: {item.get('text') or ''}"
    if kind == "item.completed" and what == "reasoning":
        return f"thinking: {item.get('text') or ''}"
    if kind == "item.completed" and what == "file_change":
        return "edits " + ", ".join(str(c.get("path")) for c in item.get("changes") or [] if isinstance(c, dict))
    if kind == "turn.completed":
        usage = event.get("usage") or {}
        return f"done: {int(usage.get('input_tokens') or 0) + int(usage.get('output_tokens') or 0)} tokens"
    if kind in ("turn.failed", "error"):
        return f"error: {(event.get('error') or {}).get('message') if kind == 'turn.failed' else event.get('message')}"
    return None


def parse(report, line: str) -> None:
    """Read one ``codex exec --json`` event into ``report``."""
    from loopx.turn.executors.agents import json_object

    event = json_object(line)
    if event is None:
        return
    kind = event.get("type")
    item = event.get("item") if isinstance(event.get("item"), dict) else {}
    if kind == "turn.started":
        report.__dict__["started"] = True
    elif kind == "item.completed" and item.get("type") == "command_execution":
        code = item.get("exit_code")
        report.command(str(item.get("command") or "?"), ok=code == 0 and item.get("status") != "failed",
                       exit_code=code, output=str(item.get("aggregated_output") or ""))
    elif kind == "item.completed" and item.get("type") == "error":
        message = str(item.get("message") or "error")
        # Before the turn starts Codex reports configuration warnings (e.g. unknown model
        # metadata) as error items; they do not make the turn fail.
        if report.__dict__.get("started"):
            report.failures.append(f"Codex error: {message[:300]}")
        else:
            report.warnings.append(message[:300])
    elif kind == "item.completed" and item.get("type") == "agent_message":
        report.final_text = str(item.get("text") or "")
    elif kind == "turn.completed":
        report.finished = True
        usage = event.get("usage") or {}
        report.tokens += int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
    elif kind == "turn.failed":
        report.finished = True
        message = f"Codex error: {str((event.get('error') or {}).get('message'))[:300]}"
        if message not in report.failures:  # the same error usually arrived as an `error` event first
            report.failures.append(message)
    elif kind == "error":
        message = str(event.get("message"))[:300]
        # "Reconnecting... 2/5" is a retry in progress, not the end of the turn.
        (report.warnings if message.startswith("Reconnecting") else report.failures).append(f"Codex error: {message}")
