"""A user's decision on an Issue-Fix publish gate, written in the decision's own transaction
(the ``loopx_gate_decided`` hook): rejecting it is no dead end, reopening it undoes that."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from loopx_issue_fix.state import TODO_TEXT, IssueFixState, LogEntry, Rejected

if TYPE_CHECKING:
    from loopx.api import Writer, gates


def gate_decided(w: Writer, gate: gates.Gate, decision: str) -> None:
    """A user decided a gate of this goal (``loopx_gate_decided``, in the decision's transaction).

    Rejecting the publish gate sends the goal back to ``fix``: the fix, verify and hand-off todos
    open again, the next contract offers verify (its note carries the rejection's comment), the
    rejected publish todo is set aside as ``blocked`` and a new one waits for the next hand-off's
    gate. Reopening that gate while nothing new was verified puts the hand-off back as it was
    (phase ``publish``, the same verified commit, the gate pending again on its own todo).
    """
    from loopx_issue_fix import state as states

    state = states.find(w.tx, gate.goal_id)  # the goal whose mutation decides the gate
    if state is None:
        return
    if decision == "reject" and state.phase == "publish" and gate.id == state.publish_gate:
        states.save(w, _rejected(w, gate, state), also=("verification", "publish_gate", "publish_gate_commit"))
        return
    back = state.rejected
    if decision == "reopen" and back is not None and gate.id == back.gate_id and state.phase == "fix" \
            and not state.verification:
        states.save(w, _reopened(w, gate, state, back), also=("rejected",))


def _rejected(w: Writer, gate: gates.Gate, state: IssueFixState) -> IssueFixState:
    from loopx import api

    todos = state.todos
    note = f"issue-fix: publish gate {gate.id} rejected" + (f": {gate.comment}" if gate.comment else "")
    for step in ("fix", "verify", "handoff"):
        api.todos.reopen_in(w, todo_id=todos[step], note=note)
    api.todos.block_in(w, todo_id=todos["publish"], note=note)
    fresh = api.todos.add_in(w, todo_id=api.ids.new("todo"), text=TODO_TEXT["publish"], priority="P1",
                            depends_on=[todos["handoff"]])
    rejected = Rejected(gate_id=gate.id, comment=gate.comment, commit=state.publish_gate_commit,
                        publish_todo=todos["publish"], verification=state.verification, handoff=state.handoff)
    entry = LogEntry(step="publish", outcome="gate_rejected", gate_id=gate.id, detail=note[:300])
    return attrs.evolve(state, phase="fix", verification=None, publish_gate=None, publish_gate_commit=None,
                        rejected=rejected, todos={**todos, "publish": fresh}, log=[*state.log, entry][-100:])


def _reopened(w: Writer, gate: gates.Gate, state: IssueFixState, back: Rejected) -> IssueFixState:
    # Nothing was verified since the rejection: the hand-off the user reconsiders stands as it was.
    from loopx import api

    todos = state.todos
    note = f"issue-fix: publish gate {gate.id} reopened"
    for step in ("fix", "verify", "handoff"):
        if api.todos.load(w.tx, gate.goal_id, todos[step]).status == "open":
            api.todos.done_in(w, todo_id=todos[step], note=note)
    api.todos.block_in(w, todo_id=todos["publish"], note=note)
    api.todos.reopen_in(w, todo_id=back.publish_todo, note=note)
    return attrs.evolve(state, phase="publish", verification=back.verification, handoff=back.handoff,
                        publish_gate=gate.id, publish_gate_commit=back.commit, rejected=None,
                        todos={**todos, "publish": back.publish_todo})
