"""``loopx exec``, ``loopx evidence``, ``loopx run`` and ``loopx schema``: acting under a run and recording it."""

from __future__ import annotations

import os
import sys

import click

from loopx.cli.ids import goal_option, id_option
from loopx.cli.output import (LoopxCommand, LoopxGroup, actor, agent_claim, check_inside, emit, open_registry,
                              operation_option, wants_json)

RUN_ID_HELP = "The run (default: env LOOPX_RUN_ID, set for commands started by `loopx exec`)."
AGENT_HELP = "Who acts (default: env LOOPX_AGENT); refused with run_not_yours if the run is another agent's."


def _exec_text(ev: dict) -> str:
    d = ev["data"]
    out = d["output_tail"].rstrip("\n")
    head = f"{ev['summary']}  (evidence {ev['id']}, output {d['output_bytes']} bytes, {d['output_sha256'][:19]}…)"
    return (out + "\n" if out else "") + head


@click.command("exec", cls=LoopxCommand, context_settings={"ignore_unknown_options": True})
@id_option("run", envvar="LOOPX_RUN_ID", help=RUN_ID_HELP)
@click.option("--action", "action_name", default=None, help="An allowed action of the run's contract.")
@click.option("--agent", default=None, help=AGENT_HELP)
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds before the command is killed.")
@click.option("--unconfined", is_flag=True, default=False,
              help="Run the command without OS confinement (docs/security.md). Env LOOPX_UNCONFINED=1.")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def exec_command(run_id, action_name, agent, timeout, unconfined, argv):
    """Run an allowed action (or an exact allowed command after `--`) and record it as evidence.

    Exit status 0 when the command succeeded, 1 when it failed or timed out (the evidence is
    recorded either way), 2 when LoopX refused to run it.
    """
    from loopx import actions, process

    who = actor()
    check_inside(run_id)
    with open_registry() as reg:
        def run():
            return actions.execute(reg, who, run_id=run_id, action=action_name, argv=list(argv) if argv else None,
                                   timeout=timeout, agent=agent_claim(agent))

        if process.in_step():
            ev = run()  # inside a turn: the turn's confinement applies
        else:
            # Run by hand (a harness loop): the command is confined like a turn's agent.
            from loopx import confine, runs, turn as turns
            from loopx.cli import run_inprocess

            with reg.read() as tx:
                the_run = runs.load_run(tx, run_id)
            backend = confine.check(unconfined)
            with turns.step(reg, run_id=the_run.id, goal_id=the_run.goal_id, agent=the_run.agent,
                                workdir=os.getcwd(), backend=backend, run_cli=run_inprocess):
                ev = run()
    emit(ev, _exec_text)
    if ev["data"]["exit_code"] != 0 or ev["data"]["timed_out"]:
        sys.exit(1)


@click.group(cls=LoopxGroup)
def evidence():
    """Append-only observations, bound to a run."""


@evidence.command()
@id_option("run", envvar="LOOPX_RUN_ID", required=False, help=RUN_ID_HELP)
@goal_option(required=False, help="For evidence outside any run (users and capabilities); also as the first argument.")
@click.option("--kind", required=True, help="note, command, file, metric... (a short name).")
@click.option("--summary", required=True, help="One line on what was observed.")
@click.option("--data", default=None, help="A JSON object or array with details.")
@click.option("--file", "file_path", default=None, help="A file to record by path and sha256.")
@click.option("--agent", default=None, help=AGENT_HELP)
@operation_option
def add(run_id, goal_id, kind, summary, data, file_path, agent, operation_id):
    """Record evidence in your own words (never refused on an unfinished run, even if its contract went stale).

    What a step does is recorded by the step itself (`loopx exec`); this is for notes.
    """
    from loopx import evidence as ev

    who = actor()
    check_inside(run_id)
    with open_registry() as reg:
        out = ev.record(reg, who, run_id=run_id, goal_id=goal_id, kind=kind, summary=summary,
                        data=ev.parse_data(data), file=file_path, agent=agent_claim(agent) if run_id else None,
                        operation_id=operation_id)
    emit(out, lambda e: f"recorded {e['id']} [{e['kind']}] {e['summary']}")


@evidence.command("list")
@goal_option(required=False, help="Evidence of this goal (also as the first argument).")
@id_option("run", required=False, help="Evidence of this run.")
@click.option("--kind", default=None)
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many items.")
@click.option("--after", default=None, metavar="EVIDENCE_ID",
              help="Only evidence after this one in the listing (a cursor: the last id seen).")
def list_command(goal_id, run_id, kind, limit, after):
    """Evidence of a goal or a run, oldest first.

    Streamed as it is read, in bounded memory (`--format jsonl` prints one JSON document a line);
    page with `--limit N` and `--after EVIDENCE_ID`.
    """
    from loopx import evidence as ev
    from loopx.cli.output import emit_stream

    with open_registry() as reg:
        emit_stream(ev.list_stream(reg, goal_id=goal_id, run_id=run_id, kind=kind, limit=limit, after=after),
                    lambda e: "no evidence" if e is None else
                    f"{e['created_at']}  {e['id']}  {e['run_id'] or '-':<14} [{e['kind']}] {e['summary']}")


def _run_text(r: dict) -> str:
    lines = [f"{r['id']}  [{r.get('state', r['status'])}]  agent {r['agent']}  opened {r['opened_at']}"]
    if r.get("finished_at"):
        lines.append(f"  finished {r['finished_at']}  outcome {r['outcome']}  tokens {r['tokens']}  cost {r['cost']}")
    if r.get("handoff"):
        lines.append(f"  hand-off: {r['handoff']}")
    for e in r.get("evidence", []):
        lines.append(f"  evidence {e['id']} [{e['kind']}] {e['summary']}")
    return "\n".join(lines)


@click.group(cls=LoopxGroup)
def run():
    """Runs: one agent turn each (opened by `quota should-run`)."""


@run.command()
@id_option("run", envvar="LOOPX_RUN_ID", help=RUN_ID_HELP)
@click.option("--outcome", default=None, type=click.Choice(["ok", "partial", "failed"]),
              help="Default: what the run's evidence supports (failed when a step failed or never ran, else ok).")
@click.option("--force-outcome", default=None, metavar="REASON",
              help="With --outcome ok: record ok although a step failed, and why (kept as evidence).")
@click.option("--tokens", type=int, default=0, help="Tokens the turn used.")
@click.option("--cost", type=float, default=0.0, help="What the turn cost, in USD.")
@click.option("--handoff", default=None, help="A note for whoever acts next (default for a failed run: why).")
@click.option("--agent", default=None, help=AGENT_HELP)
@operation_option
def finish(run_id, outcome, force_outcome, tokens, cost, handoff, agent, operation_id):
    """Close a run with its outcome, usage and hand-off note."""
    from loopx import runs

    who = actor()
    check_inside(run_id)
    with open_registry() as reg:
        out = runs.finish(reg, who, run_id=run_id, outcome=outcome, tokens=tokens, cost=cost, handoff=handoff,
                          agent=agent_claim(agent), force_outcome=force_outcome, operation_id=operation_id)
    emit(out, lambda r: f"finished {r['id']}: {r['outcome']} after {r['wall_seconds']}s"
                        + (" (late: the run had expired)" if r.get("late") else "")
                        + (f"\n  hand-off: {r['handoff']}" if r.get("handoff") and r["outcome"] == "failed" else ""))


@run.command()
@id_option("run")
def show(run_id):
    """One run, its contract and its evidence."""
    from loopx import runs

    with open_registry() as reg:
        out = runs.show(reg, run_id)
    emit(out, _run_text)


@run.command("list")
@goal_option()
@click.option("--limit", type=int, default=50)
def list_command_runs(goal_id, limit):
    """The goal's runs, newest first."""
    from loopx import runs

    with open_registry() as reg:
        found = runs.list_runs(reg, goal_id, limit=limit)
    emit(found, lambda rs: "\n".join(_run_text(r) for r in rs) or "no runs")


def schema_names() -> list[str]:
    """The JSON Schemas shipped in ``loopx/schemas/`` (``contract``, ``reward_record``...)."""
    from pathlib import Path

    return sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "schemas").glob("*.json"))


@click.command(cls=LoopxCommand)
@click.argument("name", required=False)
def schema(name):
    """Print a JSON Schema shipped with LoopX: `contract` (the interaction contract), ...

    Without a name, list the schemas there are.
    """
    import json
    from pathlib import Path

    from loopx.errors import LoopxError

    names = schema_names()
    if name is None:
        emit(names, lambda ns: "\n".join(ns))
        return
    if name not in names:
        raise LoopxError("not_found", f"no schema {name!r} (available: {', '.join(names)})")
    data = json.loads((Path(__file__).resolve().parent.parent / "schemas" / f"{name}.json").read_text())
    if wants_json():
        emit(data)
    else:
        click.echo(json.dumps(data, indent=2))
