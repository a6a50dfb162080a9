"""A capability's step run by hand (``loopx CMD --run-id R``, loopx/cli/steprun.py) opens the
registry once: the look-up's registry serves the command and the record of its exit status."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from loopx import hookimpl
from tests.test_turn_helpers import ask, make_goal, plugin


class Probe:
    """A plugin whose contract step ``loopx probe look --run-id R`` reads its run through
    ``open_registry()`` (read-write, or read-only with ``--readonly``), or fails with ``--crash``."""

    @hookimpl
    def loopx_contract_actions(self, tx, goal, run_id, remaining):
        return [{"argv": ["loopx", "probe", "look", "--run-id", run_id], "action": "look"}] if run_id else None


@click.group()
def probe():
    """Probe."""


@probe.command()
@click.option("--run-id", required=True)
@click.option("--readonly", is_flag=True)
@click.option("--crash", is_flag=True)
def look(run_id, readonly, crash):
    """Read the run; print its status."""
    from loopx.domain import runs
    from loopx.api import open_registry

    with open_registry(readonly=readonly) as reg, reg.read() as tx:
        print(runs.load_run(tx, run_id).status)
    with open_registry() as reg, reg.read() as tx:  # a second open in the same command
        runs.load_run(tx, run_id)
    if crash:
        raise RuntimeError("boom")


@pytest.fixture
def probed(reg, monkeypatch):
    """``(run id, opens)``: a goal whose open run lists the probe's step; ``opens`` counts the
    stores opened from now on (every Registry.open goes through ``open_store``)."""
    from loopx.ledger import registry
    from loopx.cli import cli

    g = make_goal(reg)["goal"]
    cli.list_commands(None)  # the plugin manager's commands first: adding ours later keeps them
    with plugin(Probe(), "probe"):
        cli.add_command(probe)
        try:
            run_id = ask(reg, g)["interaction_contract"]["run_id"]
            opens = []
            real = registry.open_store

            def counted(*a, **kw):
                opens.append(kw.get("readonly", False))
                return real(*a, **kw)

            monkeypatch.setattr(registry, "open_store", counted)
            yield run_id, opens
        finally:
            cli.commands.pop("probe", None)


def run(reg, *args):
    from loopx.cli import cli

    return CliRunner().invoke(cli, list(args), env={"LOOPX_REGISTRY": str(reg.store.url), "LOOPX_ACTOR": "executor"})


def recorded(reg, run_id):
    with reg.read() as tx:
        rows = tx.query("SELECT summary, data FROM evidence WHERE run_id = ? AND kind = 'command'", (run_id,))
    return [(r["summary"], json.loads(r["data"])["direct"]) for r in rows]


def test_a_step_run_by_hand_opens_the_registry_once_and_records_its_exit(reg, probed):
    run_id, opens = probed
    r = run(reg, "probe", "look", "--run-id", run_id)
    assert (r.exit_code, r.stdout) == (0, "open\n"), r.output
    # The look-up, the command's two open_registry() and the record: one store, opened read-write.
    assert opens == [False]
    assert recorded(reg, run_id) == [("probe:look: exit 0 (run by hand)", True)]


def test_a_read_only_open_is_not_served_by_the_steps_read_write_registry(reg, probed):
    run_id, opens = probed
    r = run(reg, "probe", "look", "--run-id", run_id, "--readonly")
    assert r.exit_code == 0, r.output
    assert opens == [False, True]  # the step's, then the command's own read-only one
    assert recorded(reg, run_id) == [("probe:look: exit 0 (run by hand)", True)]


def test_after_a_command_that_crashed_the_exit_is_recorded_on_a_registry_opened_afresh(reg, probed):
    run_id, opens = probed
    r = run(reg, "probe", "look", "--run-id", run_id, "--crash")
    assert r.exit_code == 1 and isinstance(r.exception, RuntimeError), r.output
    assert opens == [False, False]
    assert recorded(reg, run_id) == [("probe:look: exit 1 (run by hand)", True)]


def test_a_command_that_is_not_a_step_of_the_run_leaves_no_registry_lent(reg, probed):
    from loopx.cli import output

    run_id, opens = probed
    r = run(reg, "probe", "look", "--run-id", "r-000000000000")  # no such run: not a step
    assert r.exit_code == 2 and "[run_not_found]" in r.output, r.output
    # The look-up's registry was closed; the command opened its own (and failed in it).
    assert opens == [False, False]
    assert output.step_registry is None and recorded(reg, run_id) == []
