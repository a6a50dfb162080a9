"""Gates: human approval checkpoints on a goal, on one of its actions, or on one of its todos.

Anyone who works on a goal may *ask* for a gate (a user, or an executor that wants to stop and
ask); only a user decides one. A gate that is not approved (pending or rejected) keeps what it
blocks blocked: a gate on ``all`` stops the goal's turns, a gate on ``action:NAME`` keeps that
action out of contracts, a gate on ``todo:ID`` keeps that todo out of the ready set.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from loopx.ledger import log as ledger
from loopx import model
from loopx.values.errors import LoopxError
from loopx.model import GATE_SCOPES, to_json
from loopx.ledger.registry import Registry
from loopx.values.validate import check_id, check_name, check_text, new_id

DECISIONS = {"approve": ("gate.approved", "approved"), "reject": ("gate.rejected", "rejected"),
             "reopen": ("gate.reopened", "pending")}

if TYPE_CHECKING:
    from loopx.model import Gate


def gate_from_row(row: dict) -> Gate:
    """A :class:`Gate` from a ``gates`` row."""
    # ``model.Gate``, not a name imported at the top: the model builds the attrs class when it is
    # first asked for (loopx.model), and ``quota should-run`` reads a goal's gates on every turn,
    # mostly finding none.
    return model.Gate(id=row["id"], goal_id=row["goal_id"], title=row["title"], scope=row["scope"],
                      blocks=row["blocks"], status=row["status"], requested_by=row["requested_by"],
                      created_at=row["created_at"], decided_by=row["decided_by"], decided_at=row["decided_at"],
                      comment=row["comment"])


def list_gates(tx, goal_id: str, *, pending_only: bool = False) -> list[Gate]:
    """The goal's gates in the order they were asked for (only pending ones with ``pending_only``)."""
    from loopx.store.queries.gates import goal_gates

    return [gate_from_row(r) for r in goal_gates(tx, goal_id, pending_only)]


def blocking(tx, goal_id: str) -> dict:
    """Every gate of the goal that is not approved, grouped by what it blocks.

    Returns ``{"all": [Gate], "actions": {name: Gate}, "todos": {todo_id: Gate}}``: ``all``
    holds the gates that block the whole goal. When several gates block one action or todo,
    a pending one is shown before a rejected one (it is the one a user can still act on).
    """
    from loopx.store.queries.gates import unapproved_gates

    rows = unapproved_gates(tx, goal_id)
    return group_blocking(map(gate_from_row, rows))


def group_blocking(unapproved) -> dict:
    """Group unapproved gates (oldest first) as :func:`blocking` returns them."""
    out: dict = {"all": [], "actions": {}, "todos": {}}
    for gate in unapproved:
        if gate.blocks == "all":
            out["all"].append(gate)
            continue
        kind, _, target = gate.blocks.partition(":")
        group = out["actions"] if kind == "action" else out["todos"]
        held = group.get(target)
        if held is None or (held.status == "rejected" and gate.status == "pending"):
            group[target] = gate
    return out


def decision_commands(gate: Gate) -> list[str]:
    """The exact, shell-quoted commands a user runs to approve or reject ``gate``."""
    base = ["loopx", "gate"]
    tail = ["--goal-id", gate.goal_id, "--gate-id", gate.id]
    return [shlex.join([*base, "approve", *tail]), shlex.join([*base, "reject", *tail, "--comment", "why"])]


def approving(gate: Gate, *, actions: dict | None = None, todo_id: str | None = None) -> str:
    """What approving ``gate`` does, in one line for the person deciding (``actions``: the goal's
    actions by name, to show the command a held-back action runs; ``todo_id``: the todo waiting)."""
    kind, _, target = gate.blocks.partition(":")
    if kind == "action":
        found = (actions or {}).get(target)
        text = f"lets action {target} run" + (f" (`{shlex.join(found.argv)}`)" if found is not None else "")
    elif kind == "todo":
        text = f"lets todo {target} be worked on"
    else:
        text = "lets the goal's turns run again"
    if todo_id and kind != "todo":
        text += f" for todo {todo_id}"
    return text


def parse_blocks(value: str | None) -> tuple[str, str | None]:
    """``all``, ``action:NAME`` or ``todo:ID`` -> (kind, target); anything else is refused."""
    if value is None or value == "all":
        return "all", None
    if not isinstance(value, str) or ":" not in value:
        raise LoopxError("invalid_argument", f"--blocks: {value!r} must be all, action:NAME or todo:ID")
    kind, _, target = value.partition(":")
    if kind == "action":
        return "action", check_name(target, what="--blocks action name")
    if kind == "todo":
        return "todo", check_id("todo", target, option="--blocks todo")
    raise LoopxError("invalid_argument", f"--blocks: {value!r} must be all, action:NAME or todo:ID")


def _checked(title: str, scope: str, blocks: str) -> tuple[str, str, str, str | None]:
    """The one rule for a gate request's fields: ``(title, blocks, kind, target)``."""
    title = check_text(title, what="--title", limit="title")
    if scope not in GATE_SCOPES:
        raise LoopxError("invalid_argument", f"--scope must be one of {', '.join(GATE_SCOPES)}")
    kind, target = parse_blocks(blocks)
    return title, "all" if kind == "all" else f"{kind}:{target}", kind, target


def request_in(w, *, title: str, scope: str = "other", blocks: str = "all", gate_id: str | None = None,
               approval_only: bool = False) -> str:
    """Inside a mutation: ask for a gate on the writer's goal (``blocks``: ``all``, ``todo:ID`` or
    ``action:NAME``, which must exist: ``todo_not_found``, ``action_not_found``); returns its id.
    :func:`add` is this in a transaction of its own.

    ``approval_only`` (a capability's code, never the CLI): the gate blocks ``action:NAME`` for
    a name the goal does not allow - so it holds nothing back - and is an approval the capability
    checks itself by gate id (Issue-Fix's "accept these changed tests"). Without it a missing
    action is refused, since for a person it is a typo that would leave the real action ungated.
    """
    title, blocks, kind, target = _checked(title, scope, blocks)
    gate_id = check_id("gate", gate_id) if gate_id else new_id("gate")
    goal_id = w.goal_id
    if approval_only and kind != "action":
        raise LoopxError("invalid_argument", "approval_only goes with blocks='action:NAME' (a name nobody allows)")
    from loopx.store.queries.gates import action_exists
    from loopx.store.queries.todos import todo_exists

    if kind == "action" and not approval_only and not action_exists(w.tx, goal_id, target):
        raise LoopxError("action_not_found", f"goal {goal_id} has no action {target}")
    if kind == "todo" and not todo_exists(w.tx, goal_id, target):
        raise LoopxError("todo_not_found", f"goal {goal_id} has no todo {target}")
    w.emit("gate.added", {"gate_id": gate_id, "title": title, "scope": scope, "blocks": blocks})
    return gate_id


def add(reg: Registry, actor: str, *, goal_id: str, title: str, scope: str = "other", blocks: str = "all",
        operation_id: str | None = None) -> dict:
    """Ask for a gate on a goal (user or executor); returns the new gate."""
    check_id("goal", goal_id)
    title, blocks, _, _ = _checked(title, scope, blocks)  # refused before the transaction begins
    gate_id = new_id("gate")

    def work(w):
        request_in(w, title=title, scope=scope, blocks=blocks, gate_id=gate_id)
        return to_json(load_gate(w.tx, goal_id, gate_id))

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "gate.add", "goal": goal_id, "title": title, "scope": scope, "blocks": blocks})


def decide(reg: Registry, actor: str, verb: str, *, goal_id: str, gate_id: str, comment: str | None = None,
           operation_id: str | None = None) -> dict:
    """Approve or reject a pending gate, or reopen a decided one so it can be decided again (user
    only; the earlier decision stays in the ledger); returns the gate."""
    if verb not in DECISIONS:
        raise LoopxError("invalid_argument", f"a gate decision is approve, reject or reopen, not {verb!r}")
    kind, _ = DECISIONS[verb]
    check_id("goal", goal_id)
    check_id("gate", gate_id)
    comment = check_text(comment, what="--comment", limit="comment", required=False)
    if ledger.role(actor) != ledger.USER:
        # The event kind's writers refuse it too; this says why in words a harness log can show.
        raise LoopxError("actor_forbidden",
                         f"only a user may {verb} a gate; {actor} may ask for one but never decide it")

    def work(w):
        gate = load_gate(w.tx, goal_id, gate_id)
        if verb == "reopen":
            if gate.status == "pending":
                raise LoopxError("gate_pending", f"gate {gate_id} is pending already: approve or reject it")
        elif gate.status != "pending":
            raise LoopxError("gate_decided",
                             f"gate {gate_id} was already {gate.status} by {gate.decided_by} at {gate.decided_at}"
                             f"; to decide it again: loopx gate reopen --goal-id {goal_id} --gate-id {gate_id}")
        w.emit(kind, {"gate_id": gate_id, "comment": comment} if comment else {"gate_id": gate_id})
        decided = load_gate(w.tx, goal_id, gate_id)
        _tell_capabilities(w, decided, verb)
        return to_json(decided)

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": f"gate.{verb}", "goal": goal_id, "gate": gate_id, "comment": comment})


def _tell_capabilities(w, gate: Gate, verb: str) -> None:
    """Let the capabilities serving the goal write their part of the decision in its transaction
    (``loopx_gate_decided``): a rejected publish gate sends Issue-Fix's goal back to its fix, in
    the same commit as the rejection. A plugin that fails refuses the decision (nothing written)."""
    from loopx.seam.capability_goals import skipped_for_events
    from loopx.seam.hooks import HookFault
    from loopx.seam.plugins import hooks

    h = hooks()
    if not h.implemented(h.gate_decided):
        return
    try:
        h.gate_decided(w, gate, verb, skip=skipped_for_events(w.goal, ()))
    except HookFault as fault:
        raise LoopxError("plugin_error", f"plugin {fault.plugin!r} could not record its part of this decision "
                         f"({fault.message}); nothing changed: fix or disable the plugin "
                         f"(LOOPX_DISABLE_PLUGINS={fault.plugin}) to decide without it") from None


def load_gate(tx, goal_id: str, gate_id: str) -> Gate:
    """The gate ``gate_id`` of ``goal_id`` (``gate_not_found`` otherwise)."""
    from loopx.store.queries.gates import gate_row

    row = gate_row(tx, goal_id, gate_id)
    if row is None:
        raise LoopxError("gate_not_found", f"goal {goal_id} has no gate {gate_id}")
    return gate_from_row(row)


def list_for(reg: Registry, goal_id: str, *, pending_only: bool = False) -> list[dict]:
    """``gate list``: the goal's gates as JSON-ready data."""
    from loopx.domain.goals import load_goal

    check_id("goal", goal_id)
    with reg.read() as tx:
        load_goal(tx, goal_id)
        return [to_json(g) for g in list_gates(tx, goal_id, pending_only=pending_only)]


def show(reg: Registry, goal_id: str, gate_id: str) -> dict:
    """``gate show``: one gate, what approving it does, the commands that decide it (while pending)
    and the artifacts recorded to decide it (a capability's evidence naming the gate, e.g. the diff
    of changed tests), each read back only while it has its recorded sha256."""
    import json
    from types import SimpleNamespace

    from loopx.ledger import artifacts
    from loopx.domain.goals import load_goal
    from loopx.store.queries.gates import action_argvs

    check_id("goal", goal_id)
    check_id("gate", gate_id)
    with reg.read() as tx:
        load_goal(tx, goal_id)
        gate = load_gate(tx, goal_id, gate_id)
        names = {a["name"]: SimpleNamespace(argv=json.loads(a["argv"]))
                 for a in action_argvs(tx, goal_id)}
        shown = [a for a in artifacts.of_goal(tx, goal_id) if a["gate_id"] == gate_id]
        for item in shown:
            item["text"] = artifacts.read_verified(item["path"], item["sha256"], what=item["name"]).decode(
                "utf-8", "replace") if item["ok"] else None
    out = to_json(gate)
    out["approving"] = approving(gate, actions=names)
    if gate.status == "pending":
        out["decide"] = dict(zip(("approve", "reject"), decision_commands(gate)))
    out["artifacts"] = shown
    return out
