"""The ``command`` executor: any other agent CLI or script, from an argv template.

``LOOPX_EXECUTOR_COMMAND`` holds the template, a JSON list of strings (or one shell-quoted
string). Placeholders: ``{prompt}`` (the managed prompt, see :mod:`loopx.turn.executors.prompt`),
``{prompt_file}`` (a file holding it), ``{run_id}``, ``{goal_id}``, ``{agent}``. The program runs
in the current directory with stdin closed, the executor environment (``LOOPX_ACTOR=executor``,
``LOOPX_RUN_ID``, ``LOOPX_GOAL_ID``, ``LOOPX_AGENT``, ``LOOPX_REGISTRY``) and ``LOOPX_PROMPT_FILE``,
for at most ``LOOPX_AGENT_TIMEOUT`` seconds (bounded by the goal's remaining wall budget).

**The usage line.** A line of its standard output of the form
``{"loopx_usage": {"tokens": 1234, "cost": 0.05}}`` charges that usage to the run (the last such
line wins; either key may be left out). ``{"loopx_handoff": "text"}`` sets the hand-off. A
non-zero exit or a timeout fails the turn.
"""

from __future__ import annotations

import json
import os

NAME = "command"
ENV = "LOOPX_EXECUTOR_COMMAND"


def template() -> list[str]:
    """The argv template from ``LOOPX_EXECUTOR_COMMAND`` (``invalid_argument`` when missing or malformed)."""
    import shlex

    from loopx.values.errors import LoopxError

    raw = (os.environ.get(ENV) or "").strip()
    if not raw:
        raise LoopxError("invalid_argument", f"the command executor needs {ENV}: a JSON argv list, e.g. "
                                             '["my-agent", "--prompt", "{prompt}"]')
    if raw.startswith("["):
        try:
            argv = json.loads(raw)
        except ValueError as exc:
            raise LoopxError("invalid_argument", f"{ENV} is not valid JSON: {exc}") from None
    else:
        argv = shlex.split(raw)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise LoopxError("invalid_argument", f"{ENV} must be a non-empty list of strings")
    return argv


PLACEHOLDERS = {"prompt": "", "prompt_file": "", "run_id": "", "goal_id": "", "agent": ""}


class CommandExecutor:
    """Runs a configured program for one turn and reads its usage line."""

    host = "generic"

    def __init__(self, timeout: float | None = None):
        self.timeout = timeout

    def check(self) -> None:
        """Refuse a missing or malformed template before a run is opened."""
        from loopx.values.errors import LoopxError

        try:
            [a.format_map(PLACEHOLDERS) for a in template()]
        except (KeyError, ValueError, IndexError) as exc:
            raise LoopxError("invalid_argument", f"{ENV} has an unknown placeholder: {exc}") from None

    def home_paths(self) -> list[str]:
        """What the step's world shows read-only (:mod:`loopx.sandbox.world`): the program and the files
        the user's template names by absolute path (a script, its configuration)."""
        from loopx.sandbox import world

        argv = template()
        named = [a for a in argv[1:] if os.path.isabs(a) and os.path.exists(a)]
        return [*world.program_paths(argv[0]), *named]

    def run_turn(self, registry, contract: dict, *, agent: str) -> dict:
        """Run the configured program for the turn ``contract`` allows; returns what ``run finish`` takes."""
        import tempfile

        from loopx.values.errors import LoopxError
        from loopx.turn.executors import agents, prompt as prompts

        from loopx.sandbox.process import STEP

        argv_t = template()
        text = prompts.build(contract, host="generic", managed=True)
        step = STEP.get()
        # In the step's private temp dir: the confined program can read it there.
        with tempfile.TemporaryDirectory(prefix="loopx-prompt-", dir=step.tmp if step is not None else None) as tmp:
            prompt_file = os.path.join(tmp, "prompt.md")
            with open(prompt_file, "w", encoding="utf-8") as f:
                f.write(text)
            values = {"prompt": text, "prompt_file": prompt_file, "run_id": contract["interaction_contract"]["run_id"],
                      "goal_id": contract["goal_id"], "agent": agent}
            try:
                argv = [a.format_map(values) for a in argv_t]
            except (KeyError, ValueError, IndexError) as exc:
                raise LoopxError("invalid_argument", f"{ENV} has an unknown placeholder: {exc}") from None
            env = agents.child_env(registry, contract, agent=agent)
            env["LOOPX_PROMPT_FILE"] = prompt_file
            report = agents.Report()
            report.finished = True  # a plain program's exit ends its turn
            return agents.run_agent(NAME, registry, contract, agent=agent, argv=argv, env=env, parse=parse,
                                    report=report, timeout=self.timeout or agents.configured_timeout(),
                                    sees_commands=False)


def parse(report, line: str) -> None:
    """Read a usage or hand-off line; anything else is plain output."""
    if not line.startswith("{"):
        return
    from loopx.turn.executors.agents import json_object

    event = json_object(line)
    if event is None:
        return
    usage = event.get("loopx_usage")
    if isinstance(usage, dict):
        tokens, cost = usage.get("tokens", 0), usage.get("cost", 0.0)
        if isinstance(tokens, int) and tokens >= 0 and isinstance(cost, (int, float)) and cost >= 0:
            report.tokens, report.cost = tokens, float(cost)
        else:
            report.warnings.append(f"ignored a malformed usage line: {line[:200]}")
    if isinstance(event.get("loopx_handoff"), str):
        report.final_text = event["loopx_handoff"]
