"""A capability's command run by hand as a step records its result, as ``loopx exec`` would.

A contract lists a capability step as ``loopx exec --run-id R --agent A -- loopx CMD ...``. An
agent that runs ``loopx CMD ...`` itself (with ``--run-id R``, or inside run R) did the same
step, so its exit status is recorded as that step's evidence (kind ``command``, written by the
core, ``data.direct`` true, no output kept). Which step it is comes from the run's contract
steps (:func:`loopx.steps.command_step`): there is no second description of a turn. Commands
that ``loopx exec`` started are left alone (exec records them, with their output).

Only plugin commands with a run in sight pay for this: built-in commands return at once.
"""

from __future__ import annotations

import os
import sys

_FORMAT_FLAGS = ("--json", "--format=json", "--format=text")


def _plain(args: list[str]) -> tuple[list[str], str | None]:
    """``args`` without output-format flags and the leading ``--registry``; and that registry."""
    out, registry, i = [], None, 0
    while i < len(args):
        a = args[i]
        if a in _FORMAT_FLAGS:
            i += 1
            continue
        if a == "--format" and i + 1 < len(args):
            i += 2
            continue
        if not out and a == "--registry" and i + 1 < len(args):
            registry, i = args[i + 1], i + 2
            continue
        if not out and a.startswith("--registry="):
            registry, i = a.split("=", 1)[1], i + 1
            continue
        out.append(a)
        i += 1
    return out, registry


def match(args: list[str], *, builtin=frozenset()):
    """``(registry url, run id, step id, argv)`` when ``args`` run a capability step of a run, else ``None``.

    ``builtin``: the core's own command names (never a capability step).
    """
    if os.environ.get("LOOPX_STEP_ID"):
        return None
    plain, registry = _plain(args)
    if not plain or plain[0] in builtin:
        return None
    run_id = None
    if "--run-id" in plain[:-1]:
        run_id = plain[plain.index("--run-id") + 1]
    run_id = run_id or os.environ.get("LOOPX_RUN_ID")
    if not run_id or not plain or plain[0].startswith("-"):
        return None
    from loopx import runs, steps
    from loopx.errors import LoopxError
    from loopx.registry import Registry

    argv = ["loopx", *plain]
    try:
        with Registry.open(registry, readonly=True) as reg, reg.read() as tx:
            run = runs.load_run(tx, run_id)
            if run.status != "open":
                return None
            step_id = steps.command_step(runs.load_contract(tx, run.contract_id), argv)
    except (LoopxError, OSError):
        return None
    return (registry, run_id, step_id, argv) if step_id else None


def run_recorded(target, call):
    """Run ``call()`` (the CLI), then record its exit status as the step's evidence."""
    import time

    registry, run_id, step_id, argv = target
    started = time.monotonic()
    code = 0
    try:
        return call()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    except BaseException:
        code = 1
        raise
    finally:
        _record(registry, run_id, step_id, argv, code, round(time.monotonic() - started, 3))


def _record(registry, run_id, step_id, argv, code, duration) -> None:
    from loopx import evidence
    from loopx.errors import LoopxError
    from loopx.registry import Registry, current_actor

    try:
        by = current_actor()
    except LoopxError:
        by = "unknown"
    data = {"action": None, "step": step_id, "argv": argv, "by": by, "direct": True, "exit_code": code,
            "timed_out": False, "duration_seconds": duration, "output_tail": "", "output_bytes": 0,
            "output_sha256": ""}
    try:
        with Registry.open(registry) as reg:
            evidence.record(reg, "core", run_id=run_id, kind="command", summary=f"{step_id}: exit {code} (run by hand)",
                            data=data)
    except LoopxError as err:
        print(f"loopx: could not record step {step_id} of run {run_id}: {err.message}", file=sys.stderr)
