"""``loopx gate``: ask for, decide and list human approval checkpoints."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option, id_option
from loopx.cli.op_options import op_option
from loopx.cli.output import LoopxGroup, actor, emit, open_registry, operation_option


def gate_line(g: dict) -> str:
    """One gate for people."""
    line = f"{g['id']}  [{g['status']}]  {g['scope']:<10}  blocks {g['blocks']:<20}  {g['title']}"
    if g.get("decided_by"):
        line += f"\n    {g['status']} by {g['decided_by']} at {g['decided_at']}"
        if g.get("comment"):
            line += f": {g['comment']}"
    else:
        line += f"\n    asked by {g['requested_by']} at {g['created_at']}"
    return line


def _gate_text(g: dict) -> str:
    text = gate_line(g)
    if g["status"] == "pending":
        from loopx.domain.gates import decision_commands
        from loopx.model import from_json, Gate

        approve, reject = decision_commands(from_json(g, Gate))
        text += f"\n  decide it (user only):\n    {approve}\n    {reject}"
    return text


@click.group(cls=LoopxGroup)
def gate():
    """Gates: human approval checkpoints. Anyone may ask for one; only a user decides."""


@gate.command()
@op_option("gate_request", "goal_id")
@op_option("gate_request", "title")
@op_option("gate_request", "scope")
@op_option("gate_request", "blocks")
@operation_option
def add(goal_id, title, scope, blocks, operation_id):
    """Ask for a gate (a user, or an agent that wants to stop and ask)."""
    from loopx.domain import gates

    with open_registry() as reg:
        found = gates.add(reg, actor(), goal_id=goal_id, title=title, scope=scope, blocks=blocks,
                          operation_id=operation_id)
    emit(found, _gate_text)


def _decision(verb: str, doc: str):
    @goal_option()
    @id_option("gate")
    @click.option("--comment", default=None, help="Why; a rejection's comment reaches the agent.")
    @operation_option
    def command(goal_id, gate_id, comment, operation_id):
        from loopx.domain import gates

        with open_registry() as reg:
            found = gates.decide(reg, actor(), verb, goal_id=goal_id, gate_id=gate_id, comment=comment,
                                 operation_id=operation_id)
        emit(found, gate_line)

    command.__doc__ = doc
    gate.command(verb)(command)


_decision("approve", "Approve a pending gate (user only).")
_decision("reject", "Reject a pending gate (user only): what it blocks stays blocked.")
_decision("reopen", "Reopen a decided gate (user only): it is pending again, to be decided anew; "
                    "the earlier decision stays in the history.")


@gate.command("list")
@goal_option()
@click.option("--pending", is_flag=True, help="Only gates still waiting for a decision.")
def list_command(goal_id, pending):
    """List a goal's gates, oldest first."""
    from loopx.domain import gates

    with open_registry() as reg:
        found = gates.list_for(reg, goal_id, pending_only=pending)
    emit(found, lambda gs: "\n".join(gate_line(g) for g in gs) or "no gates")


@gate.command("show")
@goal_option()
@id_option("gate")
def show_command(goal_id, gate_id):
    """One gate in full: what approving it does, how to decide it, and what was recorded to decide
    it (a diff of changed tests, ...), shown only while it is what LoopX recorded (sha256)."""
    from loopx.domain import gates

    with open_registry() as reg:
        found = gates.show(reg, goal_id, gate_id)

    def text(g):
        out = [_gate_text(g), f"  approving {g['approving']}"]
        for a in g["artifacts"]:
            out.append(f"  artifact {a['name']}: {a['path']} sha256 {a['sha256']}")
            out.append(a["text"].rstrip("\n") if a["ok"] else f"  TAMPERED: {a['problem']}")
        return "\n".join(out)

    emit(found, text)
