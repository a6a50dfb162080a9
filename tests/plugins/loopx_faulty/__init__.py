"""A test plugin whose hooks fail on demand (``FAULTY_VETO``, ``FAULTY_ACTIONS``,
``FAULTY_COMMANDS``: ``raise``, ``sleep:SECONDS``, ``block:PATH``, ``wrongtype``...), for the plugin-fault suite.

``block:PATH`` creates ``PATH.in`` once inside the hook, then stays there until ``PATH`` exists
(the test decides when the hook ends, instead of guessing how long it takes)."""

import os
import time

from loopx import hookimpl


def _mode(hook: str) -> str:
    return os.environ.get(f"FAULTY_{hook}", "")


def _sleep(mode: str) -> None:
    if mode.startswith("sleep:"):
        time.sleep(float(mode.split(":", 1)[1]))  # the fault: a hook that takes this long
    if mode.startswith("block:"):
        path = mode.split(":", 1)[1]
        open(path + ".in", "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)


@hookimpl
def loopx_contract_veto(tx, goal):
    mode = _mode("VETO")
    _sleep(mode)
    if mode == "raise":
        raise RuntimeError("the veto exploded")
    if mode == "wrongtype":
        return "yes please"
    return None


@hookimpl
def loopx_contract_actions(tx, goal, run_id, remaining):
    mode = _mode("ACTIONS")
    _sleep(mode)
    if mode == "raise":
        raise RuntimeError("the actions exploded")
    if mode == "wrongtype":
        return {"command": "loopx faulty-hello"}
    if mode == "baditem":
        return [42, {"command": "rm -rf /tmp/x"}, {"command": "loopx faulty-hello", "note": "still fine"}]
    return [{"command": "loopx faulty-hello", "note": "say hello"}]


@hookimpl
def loopx_register_commands(cli):
    import click

    from loopx import api

    @click.command("faulty-hello", cls=api.cli.LoopxCommand)
    def hello():
        """Say hello."""
        api.cli.emit({"hello": "world"}, lambda d: "hello")

    cli.add_command(hello)
    if _mode("COMMANDS") == "raise":
        raise RuntimeError("the commands hook exploded")
