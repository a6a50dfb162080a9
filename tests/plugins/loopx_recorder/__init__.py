"""A test plugin that implements every LoopX hook and records each call: one JSON line per call
in ``$RECORDER_LOG`` naming the hook and what it was given (tests/test_hooks_meta.py). Written
only against ``loopx.api``; what it adds (a command, an event kind, an error code, an executor, a
capability) exists so that the CLI has a way to fire each hook."""

import inspect
import json
import os

from loopx import hookimpl

NS = "recorder"


def _record(hook, **data):
    path = os.environ.get("RECORDER_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"hook": hook, "pid": os.getpid(), **data}, default=repr) + "\n")


def _signature(register):
    return str(inspect.signature(register))


@hookimpl
def loopx_register_stores(register):
    _record("loopx_register_stores", signature=_signature(register))


@hookimpl
def loopx_event_committed(registry, events):
    _record("loopx_event_committed", registry=registry.store.url,
            events=[{"kind": e.kind, "goal_id": e.goal_id, "seq": e.seq, "actor": e.actor} for e in events])


@hookimpl
def loopx_contract_veto(tx, goal):
    row = tx.one("SELECT title FROM goals WHERE id = ?", (goal.id,))
    _record("loopx_contract_veto", goal_id=goal.id, status=goal.status, title_read=row and row["title"])
    return None


@hookimpl
def loopx_contract_actions(tx, goal, run_id, remaining):
    _record("loopx_contract_actions", goal_id=goal.id, run_id=run_id, remaining=remaining)
    return [{"argv": ["loopx", "recorder-ping", "--goal-id", goal.id], "note": "the recorder's step"}]


class RecordingExecutor:
    """Carries out nothing: records the contract it was given."""

    def run_turn(self, registry, contract, *, agent):
        doc = contract["interaction_contract"]
        _record("run_turn", run_id=doc["run_id"], agent=agent, decision=contract["decision"],
                steps=[s["kind"] for s in doc["cli_channel"]["steps"]])
        return {"outcome": "partial", "tokens": 7, "cost": 0.0, "handoff": "recorded the contract"}


@hookimpl
def loopx_register_executors(register):
    _record("loopx_register_executors", signature=_signature(register))
    register("recorder", RecordingExecutor())


@hookimpl
def loopx_register_capabilities(register):
    from loopx.api import Capability

    _record("loopx_register_capabilities", signature=_signature(register))
    register(Capability(name=NS, version="1.0", summary="Records hook calls, for the hooks meta-test.", owns=(NS,),
                        commands=("recorder-ping",), doc="docs/capabilities/recorder.md"))


@hookimpl
def loopx_register_commands(cli):
    import click

    from loopx import api
    from loopx.api import LoopxError, open_registry

    _record("loopx_register_commands", cli=cli.name, builtin_quota="quota" in cli.list_commands(None))

    @click.command("recorder-ping", cls=api.cli.LoopxCommand)
    @click.option("--goal-id", required=True)
    @click.option("--refuse", is_flag=True)
    def ping(goal_id, refuse):
        """Write a recorder.noted event on the goal (or refuse with the recorder's own error code)."""
        if refuse:
            raise LoopxError("recorder.refused", "the recorder refuses, as asked")
        with open_registry() as reg:
            reg.mutate(api.cli.actor(), lambda w: w.emit("recorder.noted", {"note": "ping"}), goal_id=goal_id)
        api.cli.emit({"pinged": goal_id}, lambda d: "pinged")

    cli.add_command(ping)


def _noted(tx, event):
    """Apply ``recorder.noted``: nothing to keep (the event itself is the record)."""


@hookimpl
def loopx_register_event_kinds(register):
    _record("loopx_register_event_kinds", signature=_signature(register))
    register("recorder.noted", _noted, writers=("user", "executor"))


@hookimpl
def loopx_register_error_codes(register):
    _record("loopx_register_error_codes", signature=_signature(register))
    register("recorder.refused", "the recorder refused, as asked")


@hookimpl
def loopx_gate_decided(writer, gate, decision):
    # Writes its own state in the decision's transaction (what the hook is for).
    from loopx import api

    with api.state.acting(writer, NS) as cw:
        api.state.put(cw, NS, {"last_gate_decision": {"gate_id": gate.id, "decision": decision}})
    _record("loopx_gate_decided", goal_id=gate.goal_id, gate_id=gate.id, status=gate.status, decision=decision,
            actor=writer.actor)


@hookimpl
def loopx_notify(notification):
    _record("loopx_notify", notification=notification)
    return True
