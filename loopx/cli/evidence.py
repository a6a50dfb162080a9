"""``loopx evidence``: append-only observations, bound to a run."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option, id_option
from loopx.cli.op_options import op_option
from loopx.cli.output import AGENT_HELP, LoopxGroup, actor, agent_claim, check_inside, emit, open_registry, operation_option


@click.group(cls=LoopxGroup)
def evidence():
    """Append-only observations, bound to a run."""


@evidence.command()
@op_option("evidence_add", "run_id")
@goal_option(required=False, help="For evidence outside any run (users and capabilities); also as the first argument.")
@op_option("evidence_add", "kind")
@op_option("evidence_add", "summary")
@op_option("evidence_add", "data")
@click.option("--file", "file_path", type=click.Path(), default=None, help="A file to record by path and sha256.")
@click.option("--agent", default=None, help=AGENT_HELP)
@operation_option
def add(run_id, goal_id, kind, summary, data, file_path, agent, operation_id):
    """Record evidence in your own words (never refused on an unfinished run, even if its contract went stale).

    What a step does is recorded by the step itself (`loopx exec`); this is for notes.
    """
    from loopx.domain import evidence as ev

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
    from loopx.domain import evidence as ev
    from loopx.cli.output import emit_stream

    with open_registry() as reg:
        emit_stream(ev.list_stream(reg, goal_id=goal_id, run_id=run_id, kind=kind, limit=limit, after=after),
                    lambda e: "no evidence" if e is None else
                    f"{e['created_at']}  {e['id']}  {e['run_id'] or '-':<14} [{e['kind']}] {e['summary']}")
