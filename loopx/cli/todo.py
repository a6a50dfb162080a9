"""``loopx todo``: the goal's plan, with dependencies, priorities, claims and leases."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option, id_option
from loopx.cli.op_options import op_option
from loopx.cli.output import LoopxGroup, actor, agent_claim, check_inside, emit, open_registry, operation_option


def todo_line(t: dict) -> str:
    """One todo for people."""
    line = f"{t['id']}  {t['priority']}  [{t['status']}]  {t['text']}"
    extra = []
    if t.get("depends_on"):
        extra.append("after " + ", ".join(t["depends_on"]))
    if t.get("actions"):
        extra.append("done by action " + ", ".join(t["actions"]))
    if t.get("blocked_by"):
        extra.append(t["blocked_by"]["text"])
    if t.get("claim"):
        c = t["claim"]
        extra.append(f"claimed by {c['agent']} until {c['expires_at']} (epoch {c['epoch']})")
    if t.get("note"):
        extra.append(f"note: {t['note']}")
    return line + "".join(f"\n    {e}" for e in extra)


@click.group(cls=LoopxGroup)
def todo():
    """Todos: the plan. Users change it any time; agents inside an open run (--run-id)."""


@todo.command()
@op_option("todo_add", "goal_id")
@op_option("todo_add", "text")
@op_option("todo_add", "depends_on")
@op_option("todo_add", "priority")
@click.option("--action", "actions", multiple=True,
              help="An action of the goal that does this todo (repeatable): a turn on it runs exactly these, "
                   "and it is done only when they ran; a gate holding one back keeps it open.")
@op_option("todo_add", "run_id")
@operation_option
def add(goal_id, text, depends_on, priority, actions, run_id, operation_id):
    """Add a todo."""
    from loopx.domain import todos

    with open_registry() as reg:
        found = todos.add(reg, actor(), goal_id=goal_id, text=text, depends_on=depends_on, priority=priority,
                          run_id=run_id, operation_id=operation_id, actions=actions)
    emit(found, todo_line)


@todo.command()
@goal_option()
@id_option("todo")
@id_option("todo", "--on", "on", multiple=True, help="A todo it must wait for (repeatable).")
@id_option("run", required=False, help="The open run an agent works under (required for agents).")
@operation_option
def depend(goal_id, todo_id, on, run_id, operation_id):
    """Make a todo wait for other todos (dependency cycles are refused)."""
    from loopx.domain import todos

    with open_registry() as reg:
        found = todos.depend(reg, actor(), goal_id=goal_id, todo_id=todo_id, depends_on=on, run_id=run_id,
                             operation_id=operation_id)
    emit(found, todo_line)


@todo.command("list")
@goal_option()
@click.option("--ready", is_flag=True, help="Only the ready set: open, unblocked, not claimed by someone else.")
@click.option("--agent", default=None, help="With --ready: whose view (their own claims stay in).")
def list_command(goal_id, ready, agent):
    """List todos, by priority then creation order."""
    from loopx.domain import todos

    with open_registry() as reg:
        found = todos.list_for(reg, goal_id, ready_only=ready, agent=agent)
    emit(found, lambda ts: "\n".join(todo_line(t) for t in ts) or ("nothing ready" if ready else "no todos"))


@todo.command()
@op_option("todo_claim", "goal_id")
@op_option("todo_claim", "todo_id")
@op_option("todo_claim", "agent")
@op_option("todo_claim", "run_id")
@click.option("--ttl-seconds", default=2700.0, type=float, show_default=True, help="Lease length.")
@operation_option
def claim(goal_id, todo_id, agent, run_id, ttl_seconds, operation_id):
    """Claim a ready todo under a lease; claiming it again extends the lease."""
    from loopx.domain import todos

    who = actor()
    check_inside(run_id)
    with open_registry() as reg:
        found = todos.claim(reg, who, goal_id=goal_id, todo_id=todo_id,
                            agent=agent_claim(agent) if run_id else agent, run_id=run_id,
                            ttl_seconds=ttl_seconds, operation_id=operation_id)
    emit(found, todo_line)


def _settle(verb: str, doc: str):
    # done, block and reopen take the options of the agent's todo_done (loopx.operations).
    @op_option("todo_done", "goal_id")
    @op_option("todo_done", "todo_id")
    @op_option("todo_done", "note")
    @op_option("todo_done", "run_id")
    @click.option("--agent", default=None, help="Who reports it (default: the agent of --run-id).")
    @click.option("--epoch", default=None, type=int,
                  help="The claim epoch the reporter holds; refused with lease_lost if it moved on.")
    @operation_option
    def command(goal_id, todo_id, note, run_id, agent, epoch, operation_id):
        from loopx.domain import todos

        who = actor()
        check_inside(run_id)
        with open_registry() as reg:
            found = todos.settle(reg, who, verb, goal_id=goal_id, todo_id=todo_id, note=note, run_id=run_id,
                                 agent=agent_claim(agent) if run_id else agent, epoch=epoch,
                                 operation_id=operation_id)
        emit(found, todo_line)

    command.__doc__ = doc
    todo.command(verb)(command)


_settle("done", "Mark a todo done (refused with lease_lost when the reporter's claim was taken over).")
_settle("block", "Mark a todo blocked, with a note saying on what.")
_settle("reopen", "Reopen a done or blocked todo.")
