"""The click commands: parse, make one call, render (LoopX's own output helpers do the rest)."""

from __future__ import annotations

import click

from loopx import api
from loopx.api import open_registry

RUN = click.option("--run-id", default=None, help="Run to act under (default: $LOOPX_RUN_ID, else ask should-run).")
GOAL = click.option("--goal-id", default=None, help="Goal to ask a contract for when no run is given "
                                                    "(default: $LOOPX_GOAL_ID, else the newest open goal).")


@click.command("run-model", cls=api.cli.LoopxCommand)
@click.option("--model", required=True, help="revenue-forecast or revenue-trend.")
@click.option("--data", default=None, help="CSV with quarter,revenue columns (default: the shipped sample).")
@RUN
@GOAL
def run_model(model: str, data: str | None, run_id: str | None, goal_id: str | None) -> None:
    """Run a revenue model and record its figures as evidence of the run."""
    from loopx_seed_domain import work

    with open_registry() as reg:
        out = work.run_model(reg, api.cli.actor(), model=model, run_id=run_id, goal_id=goal_id, data=data)
    api.cli.emit(out, lambda o: f"{o['summary']}\nrun {o['run_id']}; evidence {o['evidence_id']}")


# Not an api.cli.LoopxCommand: LoopX gives every command `--format text|json` for its output, but the
# seed spells the report's file format `generate-report --format pdf`. So this command keeps
# `--format` for the report, takes `--json` (or the root's `loopx --format json`) for output,
# and renders LoopX errors itself.
@click.command("generate-report")
@click.option("--format", "fmt", type=click.Choice(["pdf", "md", "json"]), default="pdf", show_default=True,
              help="Report file format.")
@click.option("--output", default=None, help="Report file (default: $LOOPX_REPORT_DIR or ., report-<goal>.<format>).")
@click.option("--json", "json_flag", is_flag=True, help="Print the result as JSON.")
@RUN
@GOAL
@click.pass_context
def generate_report(ctx: click.Context, fmt: str, output: str | None, json_flag: bool, run_id: str | None,
                    goal_id: str | None) -> None:
    """Write the report of the goal's model runs and record it (with its sha256) as evidence."""
    from loopx import api
    from loopx.api import LoopxError

    from loopx_seed_domain import work

    if json_flag:
        api.cli.set_output_format("json", ctx)
    try:
        with open_registry() as reg:
            out = work.generate_report(reg, api.cli.actor(), fmt=fmt, run_id=run_id, goal_id=goal_id, output=output)
    except LoopxError as err:
        api.cli.fail(err, ctx)
    api.cli.emit(out, lambda o: f"wrote {o['path']} ({o['models']} model run(s)); evidence {o['evidence_id']}")
