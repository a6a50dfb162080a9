"""What every doing-step of an Issue-Fix run shares: its context (run, state, time limit), the one
transaction that records it, the attempt log, the refs snapshot and the environment check.

The steps themselves are in :mod:`loopx_issue_fix.phases` (reproduce, handoff, publish) and
:mod:`loopx_issue_fix.verify`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import attrs

from loopx.api import LoopxError
from loopx_issue_fix.state import CRITERIA, JSON, GitChange, IssueFixState, LogEntry

if TYPE_CHECKING:
    from loopx.api import ReadTx, Registry, Writer, runs

MAX_LOG = 100

#: ``update(state, evidence_id, w)`` -> ``(the new state or None, todo steps now done, result)``.
Update = Callable[[IssueFixState, str, "Writer"], "tuple[IssueFixState | None, list[str], JSON]"]


def worktree_root() -> Path:
    """Where goals' worktrees live: ``$LOOPX_ISSUE_FIX_WORKTREES``, else
    ``${XDG_DATA_HOME:-~/.local/share}/loopx/issue-fix``. Not inside ``.git``: agent CLIs refuse to
    edit files under a ``.git`` directory (Claude Code does, whatever its permission rules)."""
    import os

    given = os.environ.get("LOOPX_ISSUE_FIX_WORKTREES")
    if given:
        return Path(given).expanduser().resolve()
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data, "loopx", "issue-fix").resolve()


def timeout_for(need: float, remaining_wall: float | None, run_expires_in: float | None) -> tuple[int, str]:
    """The time limit of one step: the quota need, cut to the run's remaining wall budget.

    Returns ``(seconds, how)``; at least 1 second.
    """
    limit, how = need, f"the capability's quota need ({need:g}s)"
    if remaining_wall is not None and remaining_wall < limit:
        limit, how = remaining_wall, f"the goal's remaining wall budget ({remaining_wall:g}s)"
    if run_expires_in is not None and run_expires_in < limit:
        limit, how = run_expires_in, f"the run's remaining lease ({run_expires_in:g}s)"
    return max(1, math.floor(limit)), how


def expires_in(expires_at: str) -> float:
    """Seconds from now until the ISO 8601 UTC stamp ``expires_at`` (0 when past)."""
    from datetime import datetime

    from loopx.api import now

    def parse(stamp: str) -> datetime:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    return max(0.0, (parse(expires_at) - parse(now())).total_seconds())


def step_timeout(tx: ReadTx, state: IssueFixState, run: runs.Run, given: float | None) -> tuple[float, str]:
    """The time limit of a step run by hand: ``--timeout`` if given, else as the contract would."""
    from loopx import api

    if given is not None:
        return float(given), "--timeout"
    goal = api.goals.load(tx, run.goal_id)
    left = api.goals.remaining(goal, api.goals.usage(tx, goal.id)).get("wall_seconds")
    return timeout_for(state.test_timeout, left, expires_in(run.expires_at))


def context(reg: Registry, run_id: str | None, phases: tuple[str, ...], step: str,
            timeout: float | None = None) -> tuple[runs.Run, IssueFixState, tuple[float, str]]:
    """``(run, state, time limit)`` of a step under ``run_id``, refused unless the run is open and
    fresh and the goal's phase takes ``step``; the goal's git links are pinned."""
    from loopx import api

    from loopx_issue_fix import gitlinks, state as states

    if not run_id:
        raise LoopxError("invalid_argument", f"issue-fix {step} acts under a run: pass --run-id (or set LOOPX_RUN_ID)")
    api.ids.check("run", run_id)
    with reg.read() as tx:
        run = api.runs.check_fresh(tx, run_id)
        state = states.load(tx, run.goal_id)
        limit = step_timeout(tx, state, run, timeout)
    phase = state.phase
    if phase not in phases:
        if phase == "reproduce" and step != "reproduce":
            raise LoopxError(
                "issue_fix.not_reproduced",
                f"no failing reproduction is recorded for goal {run.goal_id}: run `loopx issue-fix reproduce "
                f"--run-id {run_id}` and see the tests fail first (red, then green)",
            )
        raise LoopxError("issue_fix.wrong_phase", f"issue-fix {step} does not apply in phase {phase!r} of goal "
                         f"{run.goal_id}; the goal waits for: {waits_for(phase)}")
    gitlinks.pin(state)  # git runs with the directories LoopX made, or not at all (issue_fix.git_tampered)
    return run, state, limit


def waits_for(phase: str) -> str:
    """In words, what a goal in ``phase`` waits for."""
    return {"reproduce": "issue-fix reproduce", "fix": "a fix, then issue-fix verify",
            "handoff": "issue-fix handoff", "publish": "a user's decision on the publish gate, then publish",
            "published": "nothing: it is published"}.get(phase, phase)


def log(current: IssueFixState, step: str, evidence_id: str, outcome: str, detail: str | None = None) -> list[LogEntry]:
    """The attempt log with this attempt added (the last :data:`MAX_LOG` kept)."""
    entry = LogEntry(step=step, evidence_id=evidence_id, outcome=outcome, detail=detail[:300] if detail else None)
    return [*current.log, entry][-MAX_LOG:]


def record(reg: Registry, actor: str, run: runs.Run, *, step: str, evidence: JSON, update: Update, operation_id: str | None,
           request: JSON, evidence_id: str | None = None) -> JSON:
    """One transaction: evidence (as the capability), state changes, todos done (as ``actor``).

    ``update(state, evidence_id, w)`` returns ``(the new state or None, todo steps now done,
    result)``; it may emit further events through ``w``. A result's ``_close`` closes the goal
    with its criteria met; its ``_written`` names keys written even when cleared to their default
    (:func:`state.changes`).
    """
    from loopx import api

    from loopx_issue_fix import state as states

    evidence_id = evidence_id or api.ids.new("evidence")

    def work(w: Writer) -> JSON:
        api.runs.check_recordable(w.tx, run.id, goal_id=run.goal_id)
        state = states.load(w.tx, run.goal_id)
        with api.state.acting(w, states.CAPABILITY) as cw:
            api.evidence.add_in(cw, evidence_id=evidence_id, run_id=run.id, **evidence)
        after, done_steps, result = update(state, evidence_id, w)
        _settle_todos(w, run, state, done_steps, f"issue-fix {step}: evidence {evidence_id}")
        written = result.pop("_written", ())
        if after is not None:
            states.save(w, after, written)
        if result.pop("_close", None):
            with api.state.acting(w, states.CAPABILITY) as cw:
                # The work is done and a user approved what was published: criteria met, closed.
                for index in range(len(CRITERIA)):
                    api.goals.criterion_in(cw, index=index)
                api.goals.close_in(cw, reason=result["close_reason"])
        return {"goal_id": run.goal_id, "run_id": run.id, "evidence_id": evidence_id,
                "phase": (after or state).phase, **result}

    out: JSON = reg.mutate(actor, work, goal_id=run.goal_id, operation_id=operation_id,
                           request={"op": f"issue_fix.{step}", "run": run.id, **request})
    return out


def _settle_todos(w: Writer, run: runs.Run, state: IssueFixState, steps: list[str], note: str) -> None:
    from loopx import api

    for s in steps:
        todo = api.todos.load(w.tx, run.goal_id, state.todos[s])
        # A todo someone holds under a live lease is theirs to settle (the contract tells the
        # claimant to run `todo done`); the plugin settles the ones nobody holds.
        held = todo.claim is not None and todo.claim.expires_at > w.at
        if todo.status == "open" and not held:
            api.todos.done_in(w, todo_id=todo.id, note=note)


def environment_problem(state: IssueFixState) -> tuple[str | None, str | None]:
    """Whether the interpreter's start-up code changed since ``start`` (a ``.pth``, ``sitecustomize``):
    ``(problem or None, the installation's signature now, or None)``.

    The interpreter is asked (:func:`guard.environment`) only when the installation's stat
    signature (:func:`baserun.signature`) is not the one a step recorded after asking it; the
    signature is taken *before* asking, so a change made meanwhile shows at the next step.
    """
    from loopx_issue_fix import baserun, guard

    before = state.environment
    if not before:
        return None, None
    sig = baserun.signature(before)
    if sig is not None and sig == state.environment_signature:
        return None, sig
    changed = guard.environment_changed(before, guard.environment(before["interpreter"]))
    if changed:
        return f"the test interpreter's start-up files changed since start: {', '.join(changed[:5])}", None
    return None, sig


def refs(state: IssueFixState) -> JSON:
    """The refs as they stand: local (every ref but the goal's own branch) and the remote's."""
    from loopx_issue_fix import gitremote, gitrepo

    # LoopX's own branches move when any goal verifies or closes: they are not the agent's doing.
    # One git call tells both the refs and where each branch is checked out.
    root = str(worktree_root())
    found, checked_out = gitrepo.local_refs(state.repo)
    ours = {r for r, path in checked_out.items() if path.startswith(root + "/")} | \
        {f"refs/heads/{state.branch.name}", "refs/stash"}
    local = {r: sha for r, sha in found.items() if r not in ours and not r.startswith("refs/heads/issue-fix/")}
    remote = gitremote.remote_refs(state.repo, state.branch.remote, 30)
    return {"local": local, "remote": remote}


def ref_changes(state: IssueFixState, now: JSON) -> tuple[list[str], list[str]]:
    """``(remote changes, local changes)`` since the snapshot LoopX took at its last step."""
    before = state.refs
    if not before:
        return [], []

    def diff(a: dict[str, str] | None, b: dict[str, str] | None) -> list[str]:
        if a is None or b is None:
            return []
        return [f"{r} {(a.get(r) or 'none')[:12]} -> {(b.get(r) or 'deleted')[:12]}" for r in sorted(set(a) | set(b))
                if a.get(r) != b.get(r)]

    return diff(before.get("remote"), now.get("remote")), diff(before.get("local"), now.get("local"))


def git_log(current: IssueFixState, step: str, remote: list[str], local: list[str]) -> list[GitChange]:
    """The refs-moved log with this step's changes added (when there are any; the last 50 kept)."""
    if not remote and not local:
        return current.git_changes
    return [*current.git_changes, GitChange(step=step, remote=remote[:20], local=local[:20])][-50:]


def outputs(state: IssueFixState, wrote: list[str]) -> list[str]:
    """The files the steps wrote into the worktree, with ``wrote`` added."""
    return sorted(set(state.outputs) | set(wrote))[:200]


def evidence(step: str, test: JSON | None, summary: str, **data: Any) -> JSON:
    """The evidence a step records: a ``test`` (its complete results a file named by digest) or a ``note``."""
    from loopx_issue_fix import testrun

    body = {"step": step, **data}
    out = {"kind": "test" if test is not None else "note", "summary": summary[:2000], "data": body}
    if test is not None:
        body.update(testrun.slim(test))
        if test.get("results"):
            # The complete results (every test id) are a file; the evidence holds its digest.
            out.update(file_path=test["results"]["path"], file_sha256="sha256:" + test["results"]["sha256"])
    return out


def evolve(state: IssueFixState, **changes: Any) -> IssueFixState:
    """``state`` with ``changes`` (a new value; the loaded one is left as it was)."""
    return attrs.evolve(state, **changes)
