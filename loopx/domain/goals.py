"""Goal lifecycle: create, list, show, pause, resume, close; and a goal's history.

The seed calls goals "project prompts"; the commands keep that name, the code says goal.
"""

from __future__ import annotations

import json
import os


from loopx.ledger import log as ledger
from loopx.values.errors import LoopxError
from loopx.model import Criterion, Goal, QuotaLimits, to_json
from loopx.ledger.registry import Registry
from loopx.values.validate import check_id, check_number, check_text, new_id

LIST_STATUSES = ("open", "paused", "closed", "active", "all")
MAX_CRITERIA = 50
MAX_LIST_LIMIT = 1000


def goal_from_row(row: dict) -> Goal:
    """A :class:`Goal` from a ``goals`` row.

    Built by hand rather than through cattrs (``model.from_row``): every command, should-run
    included, loads a goal once per process, and cattrs spends ~2 ms generating its structuring
    code on first use: a sixth of what LoopX may add to its imports per agent turn.
    """
    return Goal(
        id=row["id"],
        title=row["title"],
        description=row["description"],
        status=row["status"],
        criteria=[Criterion(text=c["text"], met=bool(c["met"])) for c in json.loads(row["criteria"])],
        limits=QuotaLimits(**json.loads(row["limits"])),
        grants=QuotaLimits(**json.loads(row["grants"])),
        parallel_runs=bool(row["parallel_runs"]),
        revision=row["revision"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        status_reason=row["status_reason"],
        # (A registry read before schema 8 reached it - opened read-only, not migrated - has none.)
        capabilities=json.loads(row.get("capabilities") or "[]"),
    )


def load_goal(tx, goal_id: str) -> Goal:
    """The goal ``goal_id`` (``goal_not_found`` if there is none)."""
    from loopx.store.queries.goals import goal_row

    row = goal_row(tx, check_id("goal", goal_id))
    if row is None:
        raise LoopxError("goal_not_found", f"no goal {goal_id}")
    return goal_from_row(row)


def _checked(title: str, description: str, criteria) -> tuple[str, str, list[str]]:
    """The one rule for a new goal's fields: ``(title, description, criteria)``."""
    title = check_text(title, what="--title", limit="title")
    description = check_text(description or "", what="--description", limit="description", required=False) or ""
    criteria = list(criteria or ())
    if len(criteria) > MAX_CRITERIA:
        raise LoopxError("invalid_argument", f"at most {MAX_CRITERIA} success criteria")
    return title, description, [check_text(c, what="--criterion", limit="text") for c in criteria]


def create_in(w, *, title: str, description: str = "", criteria=(), parallel_runs: bool = False,
              goal_id: str | None = None, capabilities=(), project: str | None = None,
              workspace_root: str | None = None) -> str:
    """Inside a mutation started without ``goal_id``: create a goal; returns its id. :func:`create`
    is this in a transaction of its own.

    ``capabilities``: the installed capabilities the goal uses (a capability's own commands pass
    its name, so the goals they create get its steps: ``capability_not_found`` otherwise).
    """
    title, description, criteria = _checked(title, description, criteria)
    goal_id = check_id("goal", goal_id) if goal_id else new_id("goal")
    body = {"title": title, "description": description, "criteria": criteria, "parallel_runs": bool(parallel_runs)}
    if capabilities:
        from loopx.seam.capability_goals import check_enabling

        body["capabilities"] = check_enabling(capabilities)
    if project:
        body["project"] = project
    if workspace_root:
        body["workspace_root"] = workspace_root
    w.emit("goal.created", body, goal_id=goal_id)
    return goal_id


def create(
    reg: Registry,
    actor: str,
    *,
    title: str,
    description: str = "",
    criteria: list[str] | tuple = (),
    parallel_runs: bool = False,
    capabilities: list[str] | tuple = (),
    operation_id: str | None = None,
    project: str | None = None,
    workspace: str | None = None,
) -> dict:
    """Create a goal; returns it as JSON-ready data.

    ``capabilities``: the installed capabilities the goal uses (``capability_not_found`` for a
    name no installed plugin declares); only these contribute steps and vetoes to its contracts.
    ``project``: the user's directory the goal works on (its agent works in a workspace LoopX
    makes from it, :mod:`loopx.domain.workspace`); ``workspace``: where that workspace goes, instead of
    LoopX's data directory. Both are recorded with the goal, in its creation event.
    """
    title, description, criteria = _checked(title, description, criteria)  # refused before the transaction
    goal_id = new_id("goal")
    body = {"title": title, "description": description, "criteria": criteria, "parallel_runs": parallel_runs}
    if project is not None or workspace is not None:
        from loopx.domain import workspace as workspaces

        body["project"] = workspaces.check_project(project or os.getcwd())
        if workspace is not None:
            body["workspace_root"] = workspaces.check_root(workspace, body["project"])
    if capabilities:
        # Checked once, by create_in inside the transaction: a replay of a recorded operation id
        # answers what was recorded even if the capability has been uninstalled since. Sorted and
        # deduplicated here only so that the request (and its idempotency hash) is the same.
        body["capabilities"] = sorted(set(capabilities))

    def work(w):
        create_in(w, **body, goal_id=goal_id)
        return to_json(load_goal(w.tx, goal_id))

    return reg.mutate(actor, work, operation_id=operation_id, request={"op": "goal.create", **body})


def list_goals(reg: Registry, *, status: str = "active", limit: int = 50, before: int | None = None,
               cursor: str | None = None) -> list[dict]:
    """Goals, newest first. ``status``: open, paused, closed, active (not closed) or all.

    ``cursor`` is the id of the last goal of the previous page: the page continues after it
    (one indexed range on ``created_seq``, however many goals there are).
    """
    if status not in LIST_STATUSES:
        raise LoopxError("invalid_argument", f"--status must be one of {', '.join(LIST_STATUSES)}")
    limit = check_number(limit, what="--limit", minimum=1, maximum=MAX_LIST_LIMIT, integer=True)
    from loopx.store.queries import goals as q

    if cursor is not None:
        check_id("goal", cursor, option="--cursor")
        with reg.read() as tx:
            row = q.goal_created_seq(tx, cursor)
        if row is None:
            raise LoopxError("invalid_argument", f"--cursor: no goal {cursor} (pass the last id of a page)")
        before = row["created_seq"] if before is None else min(before, row["created_seq"])
    with reg.read() as tx:
        return [to_json(goal_from_row(r)) for r in q.goal_page(tx, status, before, limit)]


def show(reg: Registry, goal_id: str) -> dict:
    """One goal as JSON-ready data."""
    check_id("goal", goal_id)
    with reg.read() as tx:
        return to_json(load_goal(tx, goal_id))


_TRANSITIONS = {
    # verb: (event, statuses it may start from, resulting status)
    "pause": ("goal.paused", ("open",), "paused"),
    "resume": ("goal.resumed", ("paused",), "open"),
    "close": ("goal.closed", ("open", "paused"), "closed"),
    # Stuck detection ignores runs opened before the latest retry (loopx.domain.runs.repeated_failure).
    "retry": ("goal.retried", ("open",), "open"),
}


def transition_in(w, verb: str, *, reason: str | None = None) -> None:
    """Inside a mutation: pause, resume, close or retry the writer's goal (``goal_closed`` /
    ``goal_not_open`` when its status does not allow it). :func:`transition` is this in a
    transaction of its own."""
    if verb not in _TRANSITIONS:
        raise LoopxError("invalid_argument", f"a goal is paused, resumed, closed or retried, not {verb!r}")
    kind, sources, _target = _TRANSITIONS[verb]
    reason = check_text(reason, what="--reason", limit="note", required=False)
    status = load_goal(w.tx, w.goal_id).status
    if status not in sources:
        raise LoopxError("goal_closed" if status == "closed" else "goal_not_open",
                         f"goal {w.goal_id} is {status}; cannot {verb} it")
    w.emit(kind, {"reason": reason} if reason else {})


def close_in(w, *, reason: str | None = None) -> None:
    """Inside a mutation: close the writer's goal (a user, or a capability that finished the goal's
    work); ``goal_closed`` if it already is."""
    transition_in(w, "close", reason=reason)


def transition(reg: Registry, actor: str, verb: str, goal_id: str, *, reason: str | None = None,
               operation_id: str | None = None) -> dict:
    """Pause, resume or close a goal (user only)."""
    check_id("goal", goal_id)
    reason = check_text(reason, what="--reason", limit="note", required=False)

    def work(w):
        transition_in(w, verb, reason=reason)
        return to_json(load_goal(w.tx, goal_id))

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": f"goal.{verb}", "goal": goal_id, "reason": reason})


def set_capabilities(reg: Registry, actor: str, goal_id: str, *, enable=(), disable=(),
                     operation_id: str | None = None) -> dict:
    """Enable and disable capabilities of a goal (user only); returns the goal.

    ``enable``: installed capability names (``capability_not_found`` otherwise; one on for every
    goal is refused, ``invalid_argument``); ``disable``: names the goal uses. Enabling one the goal
    already uses, or disabling one it does not, changes nothing; with nothing to change no event
    is written. The contract of the goal's next turn follows the new list.
    """
    from loopx.seam import capabilities as caps
    from loopx.seam.capability_goals import check_enabling

    check_id("goal", goal_id)
    if actor != "user":
        # Checked here as well as by the event kind: a call that changes nothing writes no event.
        raise LoopxError("actor_forbidden", f"{actor} may not change a goal's capabilities: that is for user")
    enable = check_enabling(enable)
    disable = sorted({caps.check_name(n) for n in disable})
    both = sorted(set(enable) & set(disable))
    if both:
        raise LoopxError("invalid_argument", f"--enable and --disable both name {', '.join(both)}")

    def work(w):
        current = load_goal(w.tx, goal_id).capabilities
        after = sorted((set(current) | set(enable)) - set(disable))
        if after != sorted(current):
            w.emit("goal.capabilities_set", {"capabilities": after, "enabled": sorted(set(after) - set(current)),
                                             "disabled": sorted(set(current) - set(after))})
        return to_json(load_goal(w.tx, goal_id))

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "goal.capabilities", "goal": goal_id, "enable": enable, "disable": disable})


def adopt_capabilities(tx) -> int:
    """Schema v8's second step: each goal not closed that capabilities keep state for (they wrote
    ``capability.state_set`` on it: an Issue-Fix goal in progress) uses them from now on, recorded
    as a ``goal.capabilities_set`` event by ``core`` and sealed as the goal was (untrusted stays
    untrusted). Returns the number of goals changed."""
    from loopx.ledger import integrity
    from loopx.ledger.registry import Writer
    from loopx.store.queries import goals as q

    rows = q.goals_with_capability_state(tx)
    changed = 0
    for goal_id in (r["goal_id"] for r in rows):
        goal = q.goal_row(tx, goal_id)
        writers = q.capability_state_writers(tx, goal_id)
        names = sorted({r["actor"].split(":", 1)[1] for r in writers if r["actor"].startswith("capability:")}
                       - set(json.loads(goal["capabilities"])))
        if not names:
            continue
        recorded = integrity.head(tx, goal_id)
        w = Writer(tx, "core", goal, None)
        after = sorted(set(json.loads(goal["capabilities"])) | set(names))
        w.emit("goal.capabilities_set", {"capabilities": after, "enabled": names, "disabled": []})
        integrity.seal(tx, goal_id, trusted=recorded is None or recorded["state_digest"] != integrity.UNTRUSTED,
                       legacy=True)  # schema v8: state_macs comes at v9
        changed += 1
    return changed


def criterion_in(w, *, index: int, met: bool = True) -> None:
    """Inside a mutation: mark criterion ``index`` (0-based) of the writer's goal met or not met
    (``invalid_argument`` if the goal has no such criterion)."""
    criteria = load_goal(w.tx, w.goal_id).criteria
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(criteria):
        shown = index + 1 if isinstance(index, int) and not isinstance(index, bool) else index
        raise LoopxError("invalid_argument", f"goal {w.goal_id} has {len(criteria)} success criteria, not {shown}")
    w.emit("goal.criterion_met", {"index": index, "met": bool(met)})


def mark_criterion(reg: Registry, actor: str, goal_id: str, number: int, *, met: bool = True,
                   operation_id: str | None = None) -> dict:
    """Mark success criterion ``number`` (1-based, as ``show`` lists them) met or not met (user only)."""
    check_id("goal", goal_id)
    number = check_number(number, what="--criterion", minimum=1, integer=True)

    def work(w):
        criterion_in(w, index=number - 1, met=met)
        return to_json(load_goal(w.tx, goal_id))

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "goal.criterion", "goal": goal_id, "number": number, "met": met})


def history(reg: Registry, goal_id: str, *, after: int = 0, limit: int | None = None) -> list[dict]:
    """The goal's ledger: every event, who caused it, when (:func:`history_stream` as a list).

    An event of a kind no installed code knows (its plugin was uninstalled) is listed like any
    other, with ``"unknown_kind"`` saying why it is not understood (:func:`loopx.ledger.log.unknown_kind`).
    """
    return list(history_stream(reg, goal_id, after=after, limit=limit))


def history_stream(reg: Registry, goal_id: str, *, after: int = 0, limit: int | None = None):
    """The events of :func:`history` one at a time, read in pages (bounded memory whatever the
    ledger's length). Checks the goal before returning, so a bad id fails before any output."""
    import sys

    check_id("goal", goal_id)
    after = check_number(after, what="--after", minimum=0, integer=True)
    if limit is not None:
        limit = check_number(limit, what="--limit", minimum=1, integer=True)
    reading = reg.read()
    tx = reading.__enter__()
    try:
        load_goal(tx, goal_id)
    except BaseException:
        reading.__exit__(*sys.exc_info())
        raise

    def stream():
        try:
            why = {}
            for e in ledger.iter_events(tx, goal_id, after=after, limit=limit):
                if e.kind not in why:
                    why[e.kind] = ledger.unknown_kind(e.kind)
                # A capability's repair is understood without its plugin (the core replays it).
                unknown = why[e.kind] and ledger.unknown_event(e)
                yield to_json(e) if not unknown else {**to_json(e), "unknown_kind": unknown}
        finally:
            reading.__exit__(None, None, None)

    return stream()
