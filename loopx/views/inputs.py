"""What one ``quota should-run`` decides on, read once.

:func:`gather` reads a goal's rows in a handful of statements - the goal, its open runs, its
usage counters, its gates, its actions - into one :class:`TurnInputs`, which the decision, the
fingerprint, the contract document and the plugins' contributions all use; none of them reads
those tables again. Everything that depends on the time (which runs and claims are still live,
the ready set, cadence) is computed from the rows at the instant the decision is made, so inputs
gathered before the write transaction stay good for it as long as the goal's revision is
unchanged (every change to a goal is an event, and every event moves the revision). The ready
set is the one thing read when deciding: a page of the ready index (:mod:`loopx.ledger.todo_ready`),
never the goal's whole list of todos.
"""

from __future__ import annotations

import json

from loopx.model import QuotaUsage


class TurnInputs:
    """One goal's decision inputs: the goal, its open runs, usage, limits, gates, todos, actions."""

    __slots__ = ("goal", "revision", "open_runs", "totals", "last_opened", "gates", "actions",
                 "for_hooks", "_blocking", "_limits")

    def __init__(self, goal, revision, open_runs, totals, last_opened, gates, actions, for_hooks=None):
        self.goal, self.revision, self.open_runs = goal, revision, open_runs
        self.totals, self.last_opened = totals, last_opened
        self.gates, self.actions = gates, actions
        # What the contract hooks' view serves from these reads (``gather(..., for_hooks=True)``;
        # see loopx.views.contract.HookTx.known), or None.
        self.for_hooks = for_hooks
        self._blocking = None
        self._limits = None

    # --- runs and usage ---

    def live_runs(self, now: str) -> list:
        """Open runs unexpired at ``now``, oldest first."""
        return [r for r in self.open_runs if r.expires_at > now]

    def expired_runs(self, now: str) -> list:
        """Runs still marked open whose expiry has passed at ``now``."""
        return [r for r in self.open_runs if r.expires_at <= now]

    def usage(self, exclude_run: str | None = None) -> QuotaUsage:
        """What the goal has used (without ``exclude_run``'s own charges: an open run's turn,
        tokens and cost; an open run has no wall time yet)."""
        turns, tokens, cost, wall = self.totals
        run = next((r for r in self.open_runs if r.id == exclude_run), None) if exclude_run else None
        if run is not None:
            turns, tokens, cost = turns - 1, tokens - int(run.tokens), cost - float(run.cost)
        return QuotaUsage(turns=int(turns), tokens=int(tokens), cost=round(float(cost), 6),
                          wall_seconds=round(wall, 3))

    def effective_limits(self):
        """The goal's limits raised by its grants."""
        if self._limits is None:
            from loopx.domain.usage import effective_limits

            self._limits = effective_limits(self.goal)
        return self._limits

    def last_opened_other_than(self, tx, run_id: str | None) -> str | None:
        """When the latest run other than ``run_id`` was opened (for cadence; reads only when
        ``run_id`` is the latest)."""
        latest = self.last_opened
        if latest is None or run_id is None:
            return latest
        own = next((r for r in self.open_runs if r.id == run_id), None)
        if own is None or own.opened_at != latest:
            return latest
        from loopx.store.queries.usage import last_opened_but

        return last_opened_but(tx, self.goal.id, run_id)

    # --- gates ---

    def blocking(self) -> dict:
        """Unapproved gates by what they block: ``{"all": [Gate], "actions": {name: Gate}, "todos": {id: Gate}}``."""
        if self._blocking is None:
            from loopx.domain.gates import group_blocking

            self._blocking = group_blocking(g for g in self.gates if g.status in ("pending", "rejected"))
        return self._blocking

    def gated_actions(self, blocking: dict | None = None) -> dict:
        """``{action name: Gate}`` for the actions an unapproved gate holds back."""
        blocking = blocking or self.blocking()
        held = dict(blocking["actions"])
        unapproved = {g.id: g for g in self.gates if g.status in ("pending", "rejected")}
        for a in self.actions:
            if a.name not in held and a.gate_id in unapproved:
                held[a.name] = unapproved[a.gate_id]
        return held

    def fingerprint(self, exclude_run: str | None = None) -> str:
        """The contract fingerprint (:func:`loopx.domain.usage.fingerprint`) from these inputs."""
        from loopx.domain.usage import fingerprint_of

        return fingerprint_of(self.goal, [(g.id, g.status, g.blocks) for g in self.gates],
                              [(a.name, a.argv, a.gate_id) for a in self.actions], self.usage(exclude_run))

    # --- todos ---

    def ready(self, tx, agent: str | None, now: str, limit: int) -> list:
        """The first ``limit`` todos of the ready set for ``agent`` at ``now`` (see
        :func:`loopx.domain.todos.ready`), read from the ready index (:mod:`loopx.ledger.todo_ready`): a page,
        not the goal's whole list."""
        from loopx.ledger import todo_ready
        from loopx.domain.todos import todo_from_row

        gated = set(self.held_todos(tx))
        return [todo_from_row(r) for r in todo_ready.first_ready(tx, self.goal.id, agent=agent, now=now,
                                                                 exclude=gated, limit=limit)]

    def held_todos(self, tx) -> dict:
        """``{todo id: (Gate, action name or None)}``: the todos an unapproved gate holds, by a gate
        on ``todo:ID`` or on an action the todo names (as :func:`loopx.domain.todos.held_by_gates`; the
        todos are read only when a gate holds an action back)."""
        blocking = self.blocking()
        out = {t: (g, None) for t, g in blocking["todos"].items()}
        held = self.gated_actions(blocking)
        if held:
            from loopx.ledger import todo_ready

            for todo_id, name in todo_ready.naming_actions(tx, self.goal.id, held).items():
                gate = held[name]
                if todo_id not in out or (out[todo_id][0].status == "rejected" and gate.status == "pending"):
                    out[todo_id] = (gate, name)
        return out

    def has_todos(self, tx) -> bool:
        """Whether the goal has any todo at all."""
        from loopx.ledger import todo_ready

        return todo_ready.any_todo(tx, self.goal.id)


def gather(tx, goal_id: str, *, goal_row: dict | None = None, open_runs: list | None = None,
           for_hooks: bool = False) -> TurnInputs:
    """Read everything a turn decision needs about ``goal_id`` (``goal_not_found`` if absent).

    ``goal_row``: the goal's row when the caller already holds it (the write transaction locked
    it), so it is not read twice. ``open_runs``: the goal's open runs (expired ones included),
    oldest first, when the caller read them at the goal's current revision. ``for_hooks``: also
    read, in the same two statements, what the bundled contract hooks read of the goal (its
    capability state, and the cheap damage probe's columns beside its row), kept in
    ``for_hooks`` for their view (:class:`loopx.views.contract.HookTx`), so they do not read it again.
    """
    from loopx.ledger import usage_counts
    from loopx.domain.actions import action_from_row
    from loopx.domain.gates import gate_from_row
    from loopx.domain.goals import goal_from_row, load_goal
    from loopx.domain.runs import run_from_row
    from loopx.ledger.state_macs import text_sql
    from loopx.store.queries.usage import side_rows

    probe = None
    if for_hooks and goal_row is None:
        from loopx.values.errors import LoopxError
        from loopx.store.queries.usage import goal_with_probe

        probe = goal_with_probe(tx, goal_id)
        if probe is None:
            raise LoopxError("goal_not_found", f"no goal {goal_id}")
        goal_row = probe
    goal = goal_from_row(goal_row) if goal_row is not None else load_goal(tx, goal_id)
    # The usage counters (one row, whatever the goal's history), the gates, the actions, and the
    # open runs unless the caller has them: one statement, each row as the database prints it in
    # JSON (the text its MAC is made from).
    tables = ("goal_usage", "gates", "actions") + (("runs",) if open_runs is None else ()) + (
        ("capability_state",) if for_hooks else ())
    found: dict[str, list] = {t: [] for t in tables}
    for r in side_rows(tx, goal_id, tables, lambda t, alias: text_sql(tx.dialect, t, alias)):
        found[r["tbl"]].append(json.loads(r["txt"]))
    if open_runs is None:  # oldest first, as the runs_by_goal index orders them
        open_runs = [run_from_row(r) for r in sorted(found["runs"], key=lambda r: (r["opened_at"] or "", r["id"]))]
    used = usage_counts.read_row(found["goal_usage"][0]) if found["goal_usage"] else dict(usage_counts.ZERO)
    totals = (used["turns"], used["tokens"], used["cost_micros"] / 1_000_000, used["wall_us"] / 1_000_000)
    gates = [gate_from_row(r) for r in sorted(found["gates"], key=lambda r: (r["created_at"], r["id"]))]
    actions = [action_from_row(r) for r in sorted(found["actions"], key=lambda r: (r["created_at"], r["name"]))]
    hooks = None
    if for_hooks:
        state: dict[str, dict] = {}
        for r in found["capability_state"]:
            state.setdefault(r["namespace"], {})[r["key"]] = r["value"]
        hooks = {goal_id: {"capability_state": state, **({"damage_probe": probe} if probe is not None else {})}}
    return TurnInputs(goal, goal.revision, open_runs, totals, used["last_opened"], gates, actions, hooks)
