"""The turn decision and the interaction contract document.

:func:`decide` applies the precedence table - closed -> ``stop``; paused -> ``wait``; a
capability veto -> ``repair``; an unapproved gate on the whole goal -> ``ask_user``; a budget
exhausted -> ``ask_user``; cadence not elapsed -> ``wait``; another agent's run open -> ``wait``;
nothing ready -> ``ask_user`` (or a planning ``run`` when the goal has no todos at all); else
``run``. Between the budget and the cadence rows sits stuck detection: the same step failing in
the goal's last N runs -> ``ask_user`` (``repeated_failure``). :func:`document` turns a decision
into the contract (schema ``loopx.interaction_contract/1``, shipped as
``loopx/schemas/contract.json``); its ``cli_channel.steps`` come from :mod:`loopx.values.steps`.

Everything here reads; :mod:`loopx.views.should_run` decides when to write.
"""

from __future__ import annotations

import re

from loopx.values.clock import add_seconds
from loopx.views.contract_channels import (TEXT_SHOWN, gate_json, primary_action, quota_json, short, turn_steps,
                                     user_channel)
from loopx.store.queries import runs as q
from loopx.domain.usage import exhausted, remaining

SCHEMA = "loopx.interaction_contract/1"
_CODE = r"[a-z][a-z0-9_.:-]{0,63}"  # compiled on first use (re's cache)
READY_SHOWN = 5
HANDOFF_SHOWN = 600
OBJECTIVE_SHOWN = 400
CRITERIA_SHOWN = 10
RECHECK_SECONDS = 300

#: Every deciding reason the core gives (the first of ``reasons``), with its decision: the
#: precedence table of :func:`decide` and docs/state-interaction-model.md, and what
#: :mod:`loopx.views.should_run` adds around it (integrity damage, a rolled-back registry, the wall
#: budget reserved by open runs). A capability's veto gives its own code (a ``repair`` or an
#: ``ask_user``); ``capability_veto`` stands for one whose code is not a code, ``plugin_failed``
#: for a veto hook that failed. tests/test_dry_run_parity.py has a case for each.
REASONS = {
    "goal_closed": "stop",
    "goal_paused": "wait",
    "integrity_mismatch": "repair",
    "registry_rolled_back": "repair",
    "plugin_failed": "repair",
    "capability_veto": "repair",
    "gate_pending": "ask_user",
    "gate_rejected": "ask_user",
    "quota_exhausted": "ask_user",
    "repeated_failure": "ask_user",
    "cadence": "wait",
    "run_in_progress": "wait",
    "wall_budget_reserved": "wait",
    "no_ready_work": "ask_user",
    "no_todos": "run",
    "ready_work": "run",
}


class Decision:
    """What should-run decided for one agent, and the facts the contract will show.

    A plain class rather than an attrs one: it never leaves this module's callers, and creating
    an attrs class costs about half a millisecond on the path that runs before every turn.
    """

    __slots__ = ("decision", "reasons", "goal", "agent", "own_run", "blocking", "ready", "next_eligible_at",
                 "other_run", "veto", "exhausted", "failure", "problems", "history", "held")

    def __init__(self, decision: str, reasons: list[str], *, goal, agent: str, own_run=None,
                 blocking: dict | None = None, ready: list | None = None, next_eligible_at: str | None = None,
                 other_run=None, veto: dict | None = None, exhausted: list[str] | None = None,
                 failure: dict | None = None, history: dict | None = None):
        self.decision, self.reasons, self.goal, self.agent = decision, reasons, goal, agent
        self.own_run, self.blocking, self.ready = own_run, blocking or {}, ready or []
        self.next_eligible_at, self.other_run, self.veto = next_eligible_at, other_run, veto
        self.exhausted = exhausted or []
        self.failure = failure
        #: The goal's past as :func:`loopx.domain.runs.recent` read it for this decision (None: not read).
        self.history = history
        #: At ``gate_pending`` with nothing ready: ``(Gate, todo id or None, action or None)``, the
        #: pending gate that holds the goal's remaining work (a todo, or an action it would run).
        self.held = None
        #: Malformed plugin contributions that were dropped, named by plugin (shown as notes).
        self.problems: list[str] = []


class HookTx:
    """What a contract hook gets as ``tx``: a read-only view of a read transaction.

    Hooks run before the write transaction begins, never while the lock is held; the view is
    revoked when the hook phase ends, so a hook that overran its deadline and goes on in the
    background cannot touch the transaction that follows.
    """

    __slots__ = ("_tx", "_lock", "_known")

    def __init__(self, tx, known: dict | None = None):
        import threading

        self._tx = tx
        # ``{goal id: {what: rows}}``: what the core read for this decision in this transaction
        # (see :meth:`known`), so the hooks' reads of the same rows are not sent again.
        self._known = known or {}
        # Held while a query runs, and by revoke(): once revoked, no query is still in flight.
        self._lock = threading.Lock()

    @property
    def dialect(self):
        return self._call("dialect")

    def _call(self, what, *args):
        with self._lock:
            if self._tx is None:
                from loopx.values.errors import LoopxError

                raise LoopxError("plugin_error", "this transaction ended: a contract hook ran past its deadline")
            attr = getattr(self._tx, what)
            return attr(*args) if args else attr

    def known(self, goal_id: str, what: str):
        """Rows the core already read in this transaction for this decision, or ``None``: the
        goal's ``capability_state`` (``{namespace: {key: JSON text}}``, used by
        :func:`loopx.seam.capabilities.get_state`) and its ``damage_probe`` (the goal's row with the
        cheap damage probe's columns, used by :func:`loopx.domain.damage.cheap`). The same answer the
        query would give here: same transaction, nothing written in between."""
        with self._lock:
            if self._tx is None:
                from loopx.values.errors import LoopxError

                raise LoopxError("plugin_error", "this transaction ended: a contract hook ran past its deadline")
            return self._known.get(goal_id, {}).get(what)

    def one(self, sql, params=()):
        """One row as a dict, or ``None``."""
        return self._call("one", sql, params)

    def query(self, sql, params=()):
        """All rows as dicts."""
        return self._call("query", sql, params)

    def revoke(self) -> None:
        """End the view (the hook phase is over); waits for a query in flight."""
        with self._lock:
            self._tx = None


def _check_veto(found) -> str | None:
    if found is None:
        return None
    if not isinstance(found, dict):
        from loopx.seam.hookspecs.answers import Veto  # only a plugin that answers one has loaded it

        if isinstance(found, Veto):
            return None
        return f"a veto is None, a Veto or a dict, not {type(found).__name__}"
    if not isinstance(found.get("reason"), str) or not isinstance(found.get("message", ""), str):
        return "a veto needs a text reason (and message)"
    if not isinstance(found.get("actions", []), list):
        return "a veto's actions are a list of argv lists (or commands), not a string"
    return None


def veto(tx, goal) -> dict | None:
    """The first capability veto (``loopx_contract_veto``) of the capabilities serving ``goal``,
    or ``None``.

    Fails closed: a veto hook that raises, times out or returns the wrong type makes the decision
    ``repair`` with reason ``plugin_failed`` naming the plugin (a broken safety check never
    means "go ahead").
    """
    from loopx.seam import plugins

    hooks = plugins.hooks()
    if not hooks.implemented(hooks.contract_veto):
        return None
    from loopx.seam.capability_goals import skipped_plugins

    # Only the capabilities serving the goal are asked (a capability on for every goal always is).
    skip = skipped_plugins(goal)
    try:
        found = hooks.contract_veto(tx, goal, check=_check_veto, skip=skip)
    except plugins.HookFault as fault:
        plugins.faults.append((fault.plugin, fault.hook, fault.message))
        import sys

        print(f"loopx: warning: plugin {fault.plugin!r} {fault.hook} {fault.message}; failing closed (repair)",
              file=sys.stderr)
        return {"reason": "plugin_failed", "plugin": fault.plugin,
                "message": f"plugin {fault.plugin!r}: its contract veto {fault.message}; the goal waits until "
                           f"the plugin is fixed or disabled (LOOPX_DISABLE_PLUGINS={fault.plugin})",
                "actions": ["loopx plugins"], "argvs": [["loopx", "plugins"]], "problems": []}
    from loopx.values import steps

    if found is None or not found.value:
        return None
    name, answer = found
    if not isinstance(answer, dict):  # a Veto (the check let nothing else through)
        from loopx.seam.hookspecs.answers import plain

        answer = plain(answer)
    # Each action is checked as argv (never passed on as text to eval); bad ones are named.
    argvs, problems = steps.veto_actions(answer.get("actions"), name)
    for p in problems:
        plugins.report_fault(name, "loopx_contract_veto", p.split(": ", 1)[-1])
    return {**answer, "argvs": argvs, "problems": problems}


def decide(tx, inputs, *, agent: str, now: str, own_run, vetoed: dict | None = None) -> Decision:
    """Apply the precedence table for ``agent`` at ``now`` (``own_run``: its open run, if any).

    ``inputs`` is the goal's :class:`loopx.views.inputs.TurnInputs` (read once per should-run);
    ``vetoed`` the capability veto, asked for before the transaction (:func:`veto`).
    """
    goal = inputs.goal
    d = dict(goal=goal, agent=agent, own_run=own_run)
    if goal.status == "closed":
        return Decision("stop", ["goal_closed"], **d)
    if goal.status == "paused":
        return Decision("wait", ["goal_paused"], **d)
    found = vetoed
    if found:
        reason = str(found.get("reason") or "")
        # Reasons are stable machine codes; a plugin's free text is not one.
        if not re.fullmatch(_CODE, reason):
            reason = "capability_veto"
        # A veto may ask for a person instead of a repair (self-repair: repair_needs_user).
        decision = "ask_user" if found.get("decision") == "ask_user" else "repair"
        out = Decision(decision, [reason], veto=found, **d)
        out.problems = list(found.get("problems") or [])
        return out
    blocking = inputs.blocking()
    d["blocking"] = blocking
    if blocking["all"]:
        pending = any(g.status == "pending" for g in blocking["all"])
        return Decision("ask_user", ["gate_pending" if pending else "gate_rejected"], **d)
    exclude = own_run.id if own_run else None
    spent = exhausted(goal, inputs.usage(exclude))
    if spent:
        return Decision("ask_user", ["quota_exhausted", *[f"{k}_exhausted" for k in spent]], exhausted=spent, **d)
    from loopx.domain.runs import recent, repeated_failure
    from loopx.values.steps import stuck_after

    # The goal's past in one statement: the runs the failure check reads, and the hand-off and
    # rewards the contract shows (document() takes them from the decision).
    history = recent(tx, goal.id, max(stuck_after(goal), 0))
    failure = repeated_failure(tx, goal, history)
    if failure:
        return Decision("ask_user", ["repeated_failure"], failure=failure, history=history, **d)
    d["history"] = history
    cadence = goal.limits.cadence_seconds
    if cadence:
        last = inputs.last_opened_other_than(tx, exclude)
        if last is not None and last > now:
            # Opened "in the future": the wall clock was ahead then (a jump, since undone). Not
            # trusted, or the goal would wait until the clock catches up; the latest run opened
            # at a believable time counts instead.
            last = q.last_opened_believably(tx, goal.id, now, exclude or "")
        if last is not None:
            eligible = add_seconds(last, cadence)
            if eligible > now:
                return Decision("wait", ["cadence"], next_eligible_at=eligible, **d)
    others = [r for r in inputs.live_runs(now) if r.agent != agent]
    if others and not goal.parallel_runs:
        return Decision("wait", ["run_in_progress"], other_run=others[0], next_eligible_at=others[0].expires_at, **d)
    ready = inputs.ready(tx, agent, now, READY_SHOWN)
    if not ready:
        if not inputs.has_todos(tx):
            return Decision("run", ["no_todos"], **d)
        held = _pending_hold(tx, inputs)
        if held is not None:
            # Work is waiting for a person's decision, not missing: closing now would skip it.
            out = Decision("ask_user", ["gate_pending"], **d)
            out.held = held
            return out
        return Decision("ask_user", ["no_ready_work"], **d)
    return Decision("run", ["ready_work"], ready=ready, **d)


def _pending_hold(tx, inputs) -> tuple | None:
    """``(Gate, todo id, action)`` of the first pending gate holding an open todo (by ``todo:ID`` or
    an action the todo names), else of the first pending gate on an action; ``None`` when no
    pending gate holds work back."""
    found = [(g, t, a) for t, (g, a) in inputs.held_todos(tx).items() if g.status == "pending"]
    if found:
        return min(found, key=lambda h: (h[0].created_at, h[0].id))
    actions = [(g, None, name) for name, g in inputs.gated_actions().items() if g.status == "pending"]
    return min(actions, key=lambda h: (h[0].created_at, h[0].id)) if actions else None


def _check_actions(found) -> str | None:
    if found is None or isinstance(found, list):
        return None
    return f"contract actions are None or a list of dicts, not {type(found).__name__}"


def contributions(tx, goal, run_id: str, left: dict | None, problems: list | None = None) -> list[dict]:
    """Plugin contributions (``loopx_contract_actions``) for a ``run`` contract of ``run_id``,
    from plain plugins and the capabilities serving ``goal`` (:func:`loopx.seam.capability_goals.skipped_plugins`).

    Asked for before the write transaction begins, each hook under a deadline; a hook that fails
    or returns the wrong type is named in a warning and skipped. Each action is checked as argv
    when it is contributed (:func:`loopx.values.steps.contributed`): a malformed one is dropped, named
    in a warning and added to ``problems`` (the contract's notes), never passed on.
    """
    from loopx.values import steps

    from loopx.seam import plugins

    hooks = plugins.hooks()
    if not hooks.implemented(hooks.contract_actions):
        return []
    from loopx.seam.capability_goals import skipped_plugins

    out = []
    # Only the capabilities the goal enables are asked (their steps belong to those goals alone).
    for plugin, found in hooks.contract_actions(tx, goal, run_id, left, check=_check_actions,
                                                skip=skipped_plugins(goal)):
        if isinstance(found, list) and not all(isinstance(a, dict) for a in found):
            from loopx.seam.hookspecs.answers import plain  # ContributedAction objects, as dicts

            found = plain(found)
        good, bad = steps.contributed(found, plugin)
        out += good
        for p in bad:
            plugins.report_fault(plugin, "loopx_contract_actions", p.split(": ", 1)[-1])
        if problems is not None:
            problems += bad
    return out


def _offer(d: Decision, inputs, run_id: str | None, contributed: list | None, notes: list) -> tuple:
    """``(allowed actions, contributed actions, workdir, gates shown)`` of decision ``d``; notes
    on what is not offered are added to ``notes``."""
    blocking = d.blocking or {"all": [], "actions": {}, "todos": {}}
    if d.decision != "run":
        shown_gates = list({id(g): g for g in [*blocking["all"], *blocking["actions"].values(),
                                                *blocking["todos"].values()]}.values())
        return [], [], None, shown_gates
    goal, workdir = d.goal, None
    held = inputs.gated_actions(blocking)
    allowed = [a for a in inputs.actions if a.name not in held]
    # A capability whose quota needs per run exceed what remains is not offered. Its needs count
    # this run's own turn, so they are measured against what remained before this run.
    from loopx.seam import capabilities, capability_goals

    contributed = contributed if run_id is not None else []
    contributed = capabilities.filter_actions(contributed or [], goal, remaining(goal, inputs.usage(run_id)))
    contributed = capability_goals.serving_only(contributed, goal)
    notes += [f"{c.get('capability') or 'plugin'}: {c['note']}" for c in contributed if c.get("note")]
    # Where the agent works this turn (e.g. Issue-Fix's worktree): executors start the agent
    # there. Capabilities that disagree name none, and the notes say so.
    dirs = sorted({c["workdir"] for c in contributed if c.get("workdir")})
    if len(dirs) == 1:
        workdir = dirs[0]
    elif dirs:
        notes.append("capabilities name different working directories (" + ", ".join(dirs) + "); none is used")
    shown_gates = list({id(g): g for g in [*blocking["all"], *held.values(), *blocking["todos"].values()]}.values())
    return allowed, contributed, workdir, shown_gates


def _agent_channel(tx, d: Decision, run_id: str | None, notes: list, workdir: str | None) -> dict:
    """The contract's ``agent_channel``: what the work is for, what to do now, what came before."""
    from loopx.domain import rewards, runs

    goal = d.goal
    if d.history is not None:
        handoff, given = d.history["handoff"], d.history["feedback"]
    else:
        handoff, given = runs.latest_handoff_note(tx, goal.id), rewards.feedback(tx, goal.id, limit=3)
    feedback = [{"run_id": f["run_id"], "score": f["score"], "comment": short(f["comment"], TEXT_SHOWN)}
                for f in given]
    agent_channel = {
        "agent": d.agent,
        # What the work is for lives in the goal, not in the agent's memory: every contract
        # restates it, briefly (`loopx project-prompt show` has the whole description).
        "objective": {
            "title": goal.title,
            "description": short(goal.description, OBJECTIVE_SHOWN) or "",
            "criteria": [{"text": short(c.text, TEXT_SHOWN), "met": c.met} for c in goal.criteria[:CRITERIA_SHOWN]],
        },
        "primary_action": primary_action(d, run_id),
        "ready_todos": [{"id": t.id, "text": short(t.text, TEXT_SHOWN), "priority": t.priority}
                        for t in d.ready[:READY_SHOWN]],
        "handoff": short(handoff, HANDOFF_SHOWN),
        "feedback": feedback,
    }
    if notes:
        agent_channel["notes"] = notes
    if d.decision == "run":
        # Each command of the turn runs within these (loopx/sandbox/limits.py), and what enforces them here.
        from loopx.sandbox import limits

        agent_channel["limits"] = limits.contract_entry(
            {r["key"]: r["value"] for r in q.limit_settings(tx)})
    if workdir:
        agent_channel["workdir"] = workdir
    if d.own_run is not None and d.decision != "run":
        agent_channel["open_run"] = d.own_run.id
    return agent_channel


def document(tx, d: Decision, inputs, *, contract_id: str | None, run_id: str | None, fingerprint: str,
             issued_at: str, expires_at: str | None = None, opening: bool = False,
             contributed: list | None = None, problems: list | None = None) -> dict:
    """The interaction contract for decision ``d`` (``run_id``: the run it opens or renews).

    ``opening``: the run is about to be opened, so its turn is shown as already used.
    ``contributed``: the plugins' actions for ``run_id`` (:func:`contributions`, asked for
    before the transaction). ``inputs``: the goal's :class:`loopx.views.inputs.TurnInputs`.
    ``problems``: contributions dropped as malformed, named by plugin (shown as notes).
    """
    goal = d.goal
    used = inputs.usage()
    if opening:
        used = type(used)(turns=used.turns + 1, tokens=used.tokens, cost=used.cost, wall_seconds=used.wall_seconds)
    notes = [*d.problems, *(problems or [])]
    allowed, contributed, workdir, shown_gates = _offer(d, inputs, run_id, contributed, notes)
    for gate in shown_gates:
        if gate.status == "rejected" and gate.comment:
            notes.append(f"gate {gate.id} ({gate.blocks}) was rejected: {short(gate.comment, TEXT_SHOWN)}")
    agent_channel = _agent_channel(tx, d, run_id, notes, workdir)
    if expires_at is None:
        expires_at = d.next_eligible_at or add_seconds(issued_at, RECHECK_SECONDS)
    from loopx.values.steps import lines

    steps = turn_steps(d, run_id, allowed, contributed)
    doc = {
        "schema": SCHEMA,
        "contract_id": contract_id,
        "run_id": run_id,
        "fingerprint": fingerprint,
        "issued_at": issued_at,
        "expires_at": expires_at,
        "quota": quota_json(goal, used),
        "gates": {"pending": [gate_json(g) for g in shown_gates]},
        "user_channel": user_channel(d, shown_gates, inputs),
        "agent_channel": agent_channel,
        "cli_channel": {"steps": steps, "next_cli_actions": lines(steps)},
    }
    if d.failure is not None:
        doc["repeated_failure"] = d.failure
    if d.next_eligible_at is not None:
        doc["next_eligible_at"] = d.next_eligible_at
    return doc
