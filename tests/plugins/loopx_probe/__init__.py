"""A test plugin written only against ``loopx.api``: it adds an event kind, an error code, a
command, a contract action and a veto (see tests/test_plugin_vocabulary.py)."""

from loopx import hookimpl

NS = "probe"


@hookimpl
def loopx_register_capabilities(register):
    from loopx.api import Capability

    register(Capability(name="probe", version="1.0", summary="Notes, for the plugin API tests.", owns=(NS,),
                        commands=("probe",), actions=("note",), doc="docs/capabilities/probe.md"))


def _noted(tx, event):
    """Apply ``probe.noted``: append the note to the goal's ``probe`` state."""
    from loopx import api

    notes = api.state.get(tx, event.goal_id, NS).get("notes", [])
    api.state.apply_rows(tx, event, NS, {"notes": [*notes, event.body["text"]]})


@hookimpl
def loopx_register_event_kinds(register):
    register("probe.noted", _noted, writers=("user", "executor"))


@hookimpl
def loopx_register_error_codes(register):
    register("probe.too_loud", "a note written in capital letters")


@hookimpl
def loopx_register_commands(cli):
    import click

    from loopx import api
    from loopx.api import LoopxError, open_registry

    @click.group("probe", cls=api.cli.LoopxGroup)
    def probe():
        """Notes, for the plugin API tests."""

    @probe.command(epilog="Examples:\n  loopx probe note --goal-id g-2ce4 --text seen\n  loopx probe note --goal-id g-2ce4 --text halt")
    @click.option("--goal-id", required=True)
    @click.option("--text", required=True)
    @api.cli.operation_option
    def note(goal_id, text, operation_id):
        """Record a note (a probe.noted event)."""
        api.ids.check("goal", goal_id)
        text = api.ids.check_text(text, what="--text", limit="note")
        if text.isupper():
            raise LoopxError("probe.too_loud", f"{text!r} is shouted; say it quietly")

        def work(w):
            w.emit("probe.noted", {"text": text})
            return api.state.get(w.tx, goal_id, NS)

        with open_registry() as reg:
            out = reg.mutate(api.cli.actor(), work, goal_id=goal_id, operation_id=operation_id,
                             request={"op": "probe.note", "goal": goal_id, "text": text})
        api.cli.emit(out, lambda o: ", ".join(o["notes"]))

    @probe.command()
    @click.option("--goal-id", required=True)
    @click.option("--as", "name", required=True, help="The capability to act as.")
    @click.option("--namespace", default=NS)
    @click.option("--whole", is_flag=True, help="Write in a mutation of its own (api.state.set), not inside the user's.")
    def tag(goal_id, name, namespace, whole):
        """Tag the goal in capability state, acting as capability NAME (only probe is ours)."""
        from loopx import api

        with open_registry() as reg:
            if whole:
                out = api.state.set(reg, name, goal_id, {"tag": "x"}, namespace=namespace)
            else:
                def work(w):
                    with api.state.acting(w, name) as cw:
                        api.state.put(cw, namespace, {"tag": "x"})
                    return api.state.get(w.tx, goal_id, namespace)

                out = reg.mutate(api.cli.actor(), work, goal_id=goal_id)
        api.cli.emit(out, lambda o: o["tag"])

    cli.add_command(probe)


@hookimpl
def loopx_contract_actions(tx, goal, run_id, remaining):
    import shlex

    return [{"command": shlex.join(["loopx", "probe", "note", "--goal-id", goal.id, "--text", "seen"]),
             "note": "say you saw it", "capability": "probe", "action": "note"}]


@hookimpl
def loopx_contract_veto(tx, goal):
    from loopx import api

    notes = api.state.get(tx, goal.id, NS).get("notes", [])
    if notes and notes[-1] == "halt":
        return {"reason": "probe.halted", "message": "the last note said halt",
                "actions": [f"loopx probe note --goal-id {goal.id} --text go"]}
    return None
