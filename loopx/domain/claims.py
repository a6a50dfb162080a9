"""Step claims and run owners: a step never starts twice for one run, and a run whose owner died is closed.

**Step claims.** ``loopx exec`` takes a claim on its step (:func:`claim_step`) in the same
transaction that records the step's start: evidence of kind ``step_started``, written by the
core, naming the step, the host and the pid of the ``exec`` process. The goal's row is held for
that transaction (``BEGIN IMMEDIATE`` on SQLite, ``FOR UPDATE`` on PostgreSQL), so of two
``exec --action X`` on one run, in any processes on any machines, exactly one is recorded as
started; the other is refused with ``step_already_started`` before anything runs.

**Run owners.** ``loopx turn``, ``loopx loop`` and ``loopx worker`` open their run with an
owner (:func:`owner_here`): host, boot id, pid and that process's start time, kept as evidence
of kind ``run_owner`` written in the transaction that opens the run. The next should-run on the
goal closes, as ``abandoned``, every open run whose owner is provably gone (same host and boot,
and no process with that pid and start time) without waiting for its lease to expire, and
records each step that had started but left no result as ``step_unknown`` - "ran, result
unknown". Runs whose owner is on another machine are closed when their lease expires, as
before. Step processes such a run left behind on this host are stopped first
(:func:`stop_leftovers`), so nothing of a dead run keeps running beside the next one.
"""

from __future__ import annotations

import json
import os

from loopx.store.queries import runs as q

STARTED, UNKNOWN, OWNER = "step_started", "step_unknown", "run_owner"


# ------------------------------------------------------------------------------ processes


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def proc_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, Linux ``/proc``), or ``None`` if there is none."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except (OSError, ValueError):
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):
        return None  # a zombie has finished: its owner is gone
    return fields[19] if len(fields) > 19 else ""


def owner_here(pid: int | None = None, **extra) -> dict:
    """This process (or ``pid``) as a run or step owner: ``{"host", "boot", "pid", "start"}`` plus ``extra``."""
    import socket

    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": pid, "start": proc_start(pid), **extra}


def gone(owner: dict | None) -> bool:
    """True only when ``owner`` is provably dead: this host and boot, and no such process now.

    An owner on another machine (or recorded without a pid) is never judged from here: its run
    ends when its lease expires.
    """
    import socket

    if not owner or not owner.get("pid") or owner.get("host") != socket.gethostname():
        return False
    if owner.get("boot") and owner.get("boot") != _boot_id():
        return True  # the machine rebooted since: every process of then is gone
    start = proc_start(owner["pid"])
    return start is None or (owner.get("start") is not None and start != owner.get("start"))


# ------------------------------------------------------------------------------ reading


def _data(row) -> dict:
    return json.loads(row["data"]) if row.get("data") else {}


def started_steps(tx, run_id: str) -> dict[str, dict]:
    """``{step id: its step_started data}`` of ``run_id`` (core-written only)."""
    rows = q.core_evidence_of_kind(tx, run_id, STARTED)
    return {d["step"]: d for d in map(_data, rows) if d.get("step")}


def owners(tx, run_ids: list[str]) -> dict[str, dict]:
    """``{run id: owner}`` for the runs among ``run_ids`` opened with one."""
    out = {}
    for run_id in run_ids:
        row = q.first_core_evidence(tx, run_id, OWNER)
        if row is not None:
            out[run_id] = _data(row)
    return out


def dead_runs(tx, open_runs: list) -> list:
    """The runs among ``open_runs`` whose recorded owner is provably gone (:func:`gone`)."""
    if not open_runs:
        return []
    found = owners(tx, [r.id for r in open_runs])
    return [r for r in open_runs if r.id in found and gone(found[r.id])]


def unfinished_steps(tx, run_id: str) -> list[dict]:
    """The steps of ``run_id`` recorded as started that have no result (command evidence) yet."""
    started = started_steps(tx, run_id)
    if not started:
        return []
    done = set()
    for row in q.step_outcomes(tx, run_id, UNKNOWN):
        done.add(_data(row).get("step"))
    return [d for step, d in started.items() if step not in done]


def _cut_short(tx, run_id: str) -> list[dict]:
    """The steps of ``run_id`` whose ``exec`` recorded a result although the grace period's stop
    ended them (``stopped_by``: an exec served inside the turn's own process outlives its step)."""
    out = []
    for row in q.command_evidence(tx, run_id):
        d = _data(row)
        if d.get("step") and d.get("stopped_by"):
            out.append(d)
    return out


# ------------------------------------------------------------------------------ writing


def claim_step(reg, *, run_id: str, step_id: str, action: str | None, by: str, agent: str | None = None) -> dict:
    """Record that ``step_id`` of ``run_id`` starts now, in this process; refuse a second start.

    One transaction, the goal held: the run must still be open with a fresh contract
    (``run_not_open`` / ``contract_stale``), and the step must not have started before in this
    run (``step_already_started``, naming when and where it did). Returns the evidence.
    """
    from loopx.domain import runs
    from loopx.values.errors import LoopxError
    from loopx.values.validate import new_id

    with reg.read() as tx:
        goal_id = runs.load_run(tx, run_id).goal_id
    me = owner_here()

    def work(w):
        run = runs.check_owner(runs.check_fresh(w.tx, run_id, now=w.at), agent)
        before = started_steps(w.tx, run_id).get(step_id)
        if before is not None:
            raise LoopxError("step_already_started",
                             f"step {step_id} of run {run_id} already started at {before.get('at')} "
                             f"(pid {before.get('pid')} on {before.get('host')}); a step runs once per run - "
                             f"ask `loopx quota should-run --goal-id {run.goal_id}` for the next turn")
        data = {"step": step_id, "action": action, "by": by, "at": w.at, **me}
        w.emit("evidence.added", {"evidence_id": new_id("evidence"), "run_id": run_id, "kind": STARTED,
                                  "summary": f"{step_id}: started (pid {me['pid']} on {me['host']})"[:500],
                                  "data": data})
        return data

    return reg.mutate("core", work, goal_id=goal_id)


def emit_owner(w, run_id: str, owner: dict) -> None:
    """Inside should-run's transaction: record who owns the run it just opened."""
    from loopx.values.validate import new_id

    w.emit("evidence.added", {"evidence_id": new_id("evidence"), "run_id": run_id, "kind": OWNER,
                              "summary": f"owned by pid {owner.get('pid')} on {owner.get('host')}"[:500],
                              "data": owner})


def emit_abandoned(w, run, *, reason: str) -> None:
    """Inside a transaction: close ``run`` as abandoned now, each started-but-unreported step
    recorded as ``step_unknown`` ("ran, result unknown")."""
    from loopx.values.validate import new_id

    for d in unfinished_steps(w.tx, run.id):
        w.emit("evidence.added", {"evidence_id": new_id("evidence"), "run_id": run.id, "kind": UNKNOWN,
                                  "summary": f"{d['step']}: ran, result unknown ({reason})"[:500],
                                  "data": {"step": d["step"], "action": d.get("action"), "result": "unknown",
                                           "reason": reason, "pid": d.get("pid"), "host": d.get("host")}})
    w.emit("run.abandoned", {"run_id": run.id, "agent": run.agent, "reason": reason})


class Leftovers:
    """What :func:`stop_leftovers` read: the runs whose owner is gone (``dead``, their ids), and
    the goal's open runs (expired ones included) at goal ``revision`` (None: no such goal), which
    should-run's transaction reuses while the revision has not moved (every change to a run is an
    event, so it moves the revision), rather than reading them a second time."""

    __slots__ = ("dead", "revision", "open_runs")

    def __init__(self, dead: list[str], revision: int | None, open_runs: list):
        self.dead, self.revision, self.open_runs = dead, revision, open_runs

    def open_runs_at(self, revision: int) -> list | None:
        """The open runs read, if the goal is still at the revision they were read at."""
        return self.open_runs if self.revision is not None and self.revision == revision else None


def stop_leftovers(reg, goal_id: str, now: str, known: tuple | None = None) -> Leftovers:
    """Stop, on this host, the step processes of the goal's open runs whose owner is gone.

    Runs before should-run's transaction (never while the goal is held). Returns what it read
    (:class:`Leftovers`): the runs found, and the goal's open runs with the revision they are at.
    ``known``: ``(revision, open runs)`` the caller read just before (should-run's hook phase),
    used instead of reading them again.
    """
    from loopx.domain import runs

    if known is not None:
        revision, open_runs = known
        live = [r for r in open_runs if r.expires_at > now]
        if not live:  # no owner to look at: nothing to read
            return Leftovers([], revision, open_runs)
    with reg.read() as tx:
        if known is None:
            # One statement: the goal's revision and its open runs (none: one row of NULLs).
            rows = q.revision_and_open_runs(tx, goal_id)
            revision = rows[0]["goal_revision"] if rows else None
            open_runs = [runs.run_from_row(r) for r in rows if r["id"] is not None]
            live = [r for r in open_runs if r.expires_at > now]
        dead = dead_runs(tx, live)
        pending = [(r.id, d) for r in dead for d in unfinished_steps(tx, r.id)]
    if pending:
        import socket

        from loopx.sandbox.process import kill_tree

        for _, d in pending:
            if d.get("host") == socket.gethostname() and d.get("pid") and proc_start(d["pid"]) == d.get("start"):
                kill_tree(int(d["pid"]), grace=2.0)
    return Leftovers([r.id for r in dead], revision, open_runs)


def close_interrupted(reg, actor: str, *, run_id: str, executor: str, agent: str | None, info: dict | None,
                      result: dict | None = None) -> dict:
    """Record an interruption (SIGTERM / SIGINT) as evidence and close the run ``interrupted``.

    The evidence (kind ``interrupted``, written by the core) names the signal, whether the
    running step had to be stopped after the grace period (``forced``), and the steps that had
    started without a result (each also recorded as ``step_unknown``).
    """
    from loopx.domain import runs
    from loopx.values.validate import new_id

    info = dict(info or {})
    with reg.read() as tx:
        goal_id = runs.load_run(tx, run_id).goal_id

    def work(w):
        runs.check_recordable(w.tx, run_id)
        cut = unfinished_steps(w.tx, run_id) + _cut_short(w.tx, run_id)
        for d in cut:
            w.emit("evidence.added", {"evidence_id": new_id("evidence"), "run_id": run_id, "kind": UNKNOWN,
                                      "summary": f"{d['step']}: stopped by {info.get('signal')}, result unknown"[:500],
                                      "data": {"step": d["step"], "action": d.get("action"), "result": "unknown",
                                               "reason": "interrupted"}})
        data = {**info, "executor": executor, "steps_stopped": [d["step"] for d in cut], "by": actor}
        w.emit("evidence.added", {"evidence_id": new_id("evidence"), "run_id": run_id, "kind": "interrupted",
                                  "summary": f"interrupted by {info.get('signal')}"
                                             + (f"; stopped {', '.join(data['steps_stopped'])} after the grace period"
                                                if cut else "; no step was cut short")[:400],
                                  "data": data})
        return data

    reg.mutate("core", work, goal_id=goal_id)
    note = (result or {}).get("handoff")
    handoff = f"interrupted by {info.get('signal')}" + (f"; {note}" if note else "")
    return runs.finish(reg, actor, run_id=run_id, outcome="interrupted", tokens=(result or {}).get("tokens", 0),
                       cost=(result or {}).get("cost", 0.0), handoff=handoff[:2000], agent=agent)


def check_not_carried_out_elsewhere(reg, run_id: str) -> None:
    """Refuse (``run_in_progress``) to carry out a run another live process owns.

    Should-run hands an agent its own open run back; when a ``loopx turn`` of that agent is still
    carrying it out (its owner is alive, or on another machine), a second one must not run the
    same steps beside it or finish the run under it.
    """
    from loopx.values.errors import LoopxError

    with reg.read() as tx:
        owner = owners(tx, [run_id]).get(run_id)
    if owner is None or gone(owner):
        return
    me = owner_here()
    if (owner.get("host"), owner.get("pid"), owner.get("start")) == (me["host"], me["pid"], me["start"]):
        return
    raise LoopxError("run_in_progress", f"run {run_id} is being carried out by pid {owner.get('pid')} on "
                                        f"{owner.get('host')}; wait for it, or stop that process (its run is then "
                                        "closed abandoned and the next turn starts afresh)")
