"""A capability's command run by hand as a step records its result, as ``loopx exec`` would.

A contract lists a capability step as ``loopx exec --run-id R --agent A -- loopx CMD ...``. An
agent that runs ``loopx CMD ...`` itself (with ``--run-id R``, or inside run R) did the same
step, so its exit status is recorded as that step's evidence (kind ``command``, written by the
core, ``data.direct`` true, no output kept). Which step it is comes from the run's contract
steps (:func:`loopx.values.steps.command_step`): there is no second description of a turn. Commands
that ``loopx exec`` started are left alone (exec records them, with their output).

Only plugin commands with a run in sight pay for this: built-in commands return at once. The
registry is opened once for the whole step: the look-up's registry stays open, the command's own
``open_registry()`` (read-write, same registry) borrows it, and the result is recorded on it.
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
    """``(registry url, run id, step id, argv, registry)`` when ``args`` run a capability step of a
    run, else ``None``. The registry is the one the look-up opened, still open (see
    :func:`run_recorded`).

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
    from loopx.domain import runs
    from loopx.values import steps
    from loopx.values.errors import LoopxError
    from loopx.ledger.registry import Registry

    argv = ["loopx", *plain]
    step_id = None
    try:
        # Opened as the command opens it (read-write, never creating a file): it serves the
        # command and the record too.
        reg = Registry.open(registry, create=False)
    except (LoopxError, OSError):
        return None
    try:
        with reg.read() as tx:
            run = runs.load_run(tx, run_id)
            if run.status == "open":
                step_id = steps.command_step(runs.load_contract(tx, run.contract_id), argv)
    except (LoopxError, OSError):
        pass
    if not step_id:
        reg.close()
        return None
    return (registry, run_id, step_id, argv, reg)


def run_recorded(target, call):
    """Run ``call()`` (the CLI), then record its exit status as the step's evidence.

    While it runs, the command's read-write ``open_registry()`` of the same registry borrows the
    registry :func:`match` opened (:data:`loopx.cli.output.step_registry`); it is closed here.
    """
    import time

    from loopx.cli import output
    from loopx.ledger.registry import resolve_url

    registry, run_id, step_id, argv, reg = target
    started = time.monotonic()
    code = 0
    clean = False  # the command ended as commands end (returned or exited): its registry is as it left it
    outer = output.step_registry  # a step run in-process by another's command keeps that one's afterwards
    output.step_registry = (resolve_url(registry), reg)
    try:
        result = call()
        clean = True
        return result
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        clean = True
        raise
    except BaseException:
        code = 1
        raise
    finally:
        output.step_registry = outer
        try:
            _record(reg if clean else None, registry, run_id, step_id, argv, code,
                    round(time.monotonic() - started, 3))
        finally:
            reg.close()


def _record(reg, registry, run_id, step_id, argv, code, duration) -> None:
    """Record the step's result on ``reg`` (the step's registry), or, after a command that ended
    by an exception (its store may be mid-way), on the registry opened afresh."""
    from loopx.domain import evidence
    from loopx.values.errors import LoopxError
    from loopx.ledger.registry import Registry, current_actor

    try:
        by = current_actor()
    except LoopxError:
        by = "unknown"
    data = {"action": None, "step": step_id, "argv": argv, "by": by, "direct": True, "exit_code": code,
            "timed_out": False, "duration_seconds": duration, "output_tail": "", "output_bytes": 0,
            "output_sha256": ""}
    try:
        with (reg.lend() if reg is not None else Registry.open(registry)) as used:
            evidence.record(used, "core", run_id=run_id, kind="command", summary=f"{step_id}: exit {code} (run by hand)",
                            data=data)
    except LoopxError as err:
        print(f"loopx: could not record step {step_id} of run {run_id}: {err.message}", file=sys.stderr)
