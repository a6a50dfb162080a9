"""What the agent-CLI executors share: environment, time bound, the report, the verdict.

An agent executor starts a CLI once per turn with a prompt built from the contract
(:mod:`loopx.turn.executors.prompt`), reads the JSON events it prints (a :class:`Report` collects
them), records the transcript's tail as evidence, and returns the outcome and the usage the CLI
reported - never what the model says about itself. The turn is ``failed`` when the CLI says
so, a command it ran failed, a tool call was denied, the CLI exited non-zero, or the time ran
out; ``partial`` when the todo it was given is not done; ``ok`` otherwise.
"""

from __future__ import annotations

import collections
import os
import shutil
import sys

DEFAULT_TIMEOUT = 1800.0
TRANSCRIPT_LINES = 40
LINE_SHOWN = 600


class Report:
    """What an agent CLI reported during one turn."""

    def __init__(self):
        self.tokens = 0
        self.cost = 0.0
        self.commands: list[dict] = []  # {"command", "exit_code", "ok", "output"}
        self.failures: list[str] = []
        self.warnings: list[str] = []
        self.final_text = ""
        self.finished = False  # the CLI reported the end of its turn
        self.tail: collections.deque = collections.deque(maxlen=TRANSCRIPT_LINES)

    def line(self, text: str) -> None:
        """Keep ``text`` for the transcript tail (long lines are cut)."""
        self.tail.append(text if len(text) <= LINE_SHOWN else text[: LINE_SHOWN - 1] + "…")

    def command(self, command: str, *, ok: bool, exit_code=None, output: str = "") -> None:
        """One command the agent ran through its shell tool."""
        self.commands.append({"command": command[:LINE_SHOWN], "exit_code": exit_code, "ok": ok,
                              "output": (output or "")[-LINE_SHOWN:]})
        if not ok:
            code = f"exit {exit_code}" if exit_code is not None else "error"
            self.failures.append(f"command failed ({code}): {command[:200]}")


def json_object(line: str) -> dict | None:
    """``line`` as a JSON object, or ``None`` when it is anything else (agent CLIs interleave
    plain text with their JSON events; a line that is not an event is output, not an error)."""
    import json

    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def loopx_bin_dir() -> str | None:
    """The directory holding the ``loopx`` program this process belongs to (put first on the agent's PATH)."""
    here = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(here, "loopx")):
        return here
    found = shutil.which("loopx")
    return os.path.dirname(found) if found else None


def check_program(program: str, variable: str) -> None:
    """``executor_unavailable`` unless ``program`` can be run (a path, or a name on PATH)."""
    found = shutil.which(program)
    if not found:
        from loopx.values.errors import LoopxError

        raise LoopxError("executor_unavailable", f"needs you: {program!r} is not installed or not on PATH "
                                                 f"(install it, or point {variable} at it)")


#: executor name -> what a person calls the CLI
LABELS = {"claude-code": "Claude Code", "codex": "Codex"}


def preflight(host: str) -> None:
    """Before a turn's should-run opens a run and charges it: the agent CLI of ``host`` is
    installed (``executor_unavailable``) and logged in (``agent_logged_out``), asked of the CLI
    without a model call (:mod:`loopx.views.agent_login`). A CLI that cannot say is let through."""
    from loopx.views import agent_login
    from loopx.values.errors import LoopxError

    variable = agent_login.HOSTS[host][0]
    check_program(agent_login.program(host), variable)
    found = agent_login.probe(host, version=False)
    if found["logged_in"] is False:
        raise LoopxError("agent_logged_out", f"needs you: log in to {LABELS[host]}: {found['fix']} ({found['how']}); "
                                             "no run was opened and nothing was charged")


def child_env(registry, contract: dict, *, agent: str) -> dict:
    """The environment an agent CLI runs in: the executor identity for this run, ``loopx`` on PATH.

    Other ``LOOPX_*`` variables of this process are removed so the agent cannot act as anyone else.
    """
    env: dict = {k: None for k in os.environ if k.startswith("LOOPX_")}
    env.update({"LOOPX_ACTOR": "executor", "LOOPX_RUN_ID": contract["interaction_contract"]["run_id"],
                "LOOPX_AGENT": agent, "LOOPX_GOAL_ID": contract["goal_id"],
                "LOOPX_REGISTRY": _absolute(registry.store.url)})
    bindir = loopx_bin_dir()
    if bindir:
        env["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    return env


def _absolute(url: str) -> str:
    # The agent runs in another directory than ours may be; a relative SQLite path would move.
    return url if "://" in url else os.path.abspath(url)


def workdir(contract: dict) -> str:
    """Where the agent CLI runs: the directory the contract names (``agent_channel.workdir``, set
    by a capability such as Issue-Fix, whose agent edits the goal's own git worktree), else the
    current directory."""
    return contract["interaction_contract"]["agent_channel"].get("workdir") or os.getcwd()


def time_bound(contract: dict, configured: float) -> float:
    """Seconds the CLI may run: ``configured``, bounded by the goal's remaining wall budget and
    by the run's lease (after it expires nothing the agent does under the run is accepted)."""
    from loopx.values import clock

    doc = contract["interaction_contract"]
    remaining = (doc.get("quota") or {}).get("remaining") or {}
    wall = remaining.get("wall_seconds")
    bound = float(configured)
    if isinstance(wall, (int, float)):
        bound = min(bound, float(wall))
    if doc.get("expires_at"):
        bound = min(bound, clock.seconds_between(clock.now(), doc["expires_at"]))
    return max(bound, 1.0)


def configured_timeout(default: float = DEFAULT_TIMEOUT) -> float:
    """``LOOPX_AGENT_TIMEOUT`` seconds, else ``default``."""
    raw = os.environ.get("LOOPX_AGENT_TIMEOUT")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        from loopx.values.errors import LoopxError

        raise LoopxError("invalid_argument", f"LOOPX_AGENT_TIMEOUT must be a number of seconds, not {raw!r}") from None
    return value if value > 0 else default


def run_agent(name: str, registry, contract: dict, *, agent: str, argv: list[str], env: dict, parse,
              report: Report, timeout: float, sees_commands: bool = True, summarize=None) -> dict:
    """Run one agent CLI for the turn and return what ``run finish`` takes.

    ``parse(report, line)`` reads one line of the CLI's standard output into ``report``;
    ``sees_commands``: the CLI reports the commands it runs (so running none of them is a failure);
    ``summarize(line)``: one short line for a person about that event (or None), shown on stderr
    as it streams when stderr is a terminal (:func:`loopx.values.progress.activity_on`), never in a pipe.
    """
    from loopx.turn.executors import prompt as prompts
    from loopx.sandbox.process import run_command
    from loopx.values.progress import activity_on

    shown = activity_on() and summarize is not None

    def on_line(text: str) -> None:
        report.line(text)
        parse(report, text)
        if shown:
            show_activity(name, summarize(text))

    bound = time_bound(contract, timeout)
    cwd = workdir(contract)
    if not os.path.isdir(cwd):
        # Started anywhere else, the agent would edit the wrong files: the turn fails instead.
        report.failures.append(f"the contract's working directory {cwd} does not exist; the agent was not started")
        result = {"exit_code": None, "timed_out": False, "duration_seconds": 0.0, "output_sha256": None,
                  "output_tail": ""}
        _record_transcript(name, registry, contract, report, result)
        return {"outcome": "failed", "tokens": 0, "cost": 0.0, "handoff": handoff(name, "failed", report)}
    result = run_command(argv, env=env, timeout=bound, cwd=cwd, on_line=on_line, reap=True,
                         tail_bytes=16 * 1024)
    if result.get("limit_hit"):  # loopx/sandbox/limits.py: a stable reason, first in the hand-off
        report.failures.insert(0, f"{result['limit_hit']}: the step hit its limit; everything it started was stopped")
    elif result["timed_out"]:
        report.failures.insert(0, f"timed out after {bound:.1f}s; the CLI and everything it started were stopped")
    elif result["exit_code"] != 0:
        # The CLI's own events usually say why; its last line only when they do not.
        why = "" if report.failures else f": {_last_line(result['output_tail'])}"
        report.failures.insert(0, f"{argv[0].rsplit('/', 1)[-1]} exited {result['exit_code']}{why}")
    elif not report.finished:
        report.failures.append("the CLI ended without reporting the end of its turn")
    elif sees_commands and not report.commands and prompts.commands(contract, managed=True):
        # Codex in a read-only sandbox "runs" nothing and exits 0: a turn that ran none of the
        # contract's commands did not do the work, whatever the CLI says.
        report.failures.append("the agent ran none of the contract's commands")
    _record_transcript(name, registry, contract, report, result)
    outcome = "failed" if report.failures else _progress(registry, contract)
    return {"outcome": outcome, "tokens": report.tokens, "cost": round(report.cost, 6),
            "handoff": handoff(name, outcome, report)}


def show_activity(name: str, summary: str | None) -> None:
    """One line of an agent's activity on stderr: ``claude-code: $ make test``."""
    from loopx.values.progress import shown_line

    if not summary:
        return
    try:
        sys.stderr.write(f"{name}: {shown_line(summary)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # the terminal went away: the turn goes on
        pass


def _last_line(text: str) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def _progress(registry, contract: dict) -> str:
    """``ok`` when the turn's todo is done (or, planning, the goal now has todos); else ``partial``."""
    from loopx.domain import todos

    goal_id = contract["goal_id"]
    ready = contract["interaction_contract"]["agent_channel"].get("ready_todos") or []
    with registry.read() as tx:
        if not ready:
            return "ok" if todos.count(tx, goal_id) else "partial"
        return "ok" if todos.load_todo(tx, goal_id, ready[0]["id"]).status == "done" else "partial"


def handoff(name: str, outcome: str, report: Report) -> str:
    """The hand-off note: why a turn failed first, then the agent's own reply."""
    parts = [f"{name}: {outcome}"]
    if report.failures:
        parts.append("; ".join(list(dict.fromkeys(report.failures))[:5]))
    ran = len(report.commands)
    if ran:
        parts.append(f"{ran} command{'s' if ran != 1 else ''} run")
    if report.final_text:
        parts.append("agent: " + report.final_text.strip())
    return "; ".join(parts)[:4000]


def _record_transcript(name: str, registry, contract: dict, report: Report, result: dict) -> None:
    from loopx.domain import evidence

    failed = [c for c in report.commands if not c["ok"]]
    summary = f"{name}: {len(report.commands)} commands"
    if failed:
        summary += f", {len(failed)} failed ({'; '.join(c['command'][:120] for c in failed[:3])})"
    summary += f"; {report.tokens} tokens, ${report.cost:.4f}"
    if result["timed_out"]:
        summary += "; timed out"
    data = {"commands": report.commands[-50:], "failures": report.failures[:20], "warnings": report.warnings[:20],
            "exit_code": result["exit_code"], "timed_out": result["timed_out"], "limit_hit": result.get("limit_hit"),
            "duration_seconds": result["duration_seconds"], "output_sha256": result["output_sha256"],
            "transcript_tail": list(report.tail)}
    # The data cap is 64 KiB: shrink the tail until it fits rather than lose the record.
    import json

    while len(json.dumps(data)) > 60 * 1024 and data["transcript_tail"]:
        data["transcript_tail"] = data["transcript_tail"][len(data["transcript_tail"]) // 2 + 1:]
    evidence.record(registry, "executor", run_id=contract["interaction_contract"]["run_id"], kind="transcript",
                    summary=summary, data=data)
