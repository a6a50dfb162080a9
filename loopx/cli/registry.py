"""``loopx registry``: move a registry between stores (SQLite <-> PostgreSQL), verified."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxGroup, emit


@click.group(cls=LoopxGroup)
def registry():
    """The registry itself: where it lives, and moving it."""


def _copied_text(summary: dict) -> str:
    replaced = " (its former contents replaced)" if summary["replaced"] else ""
    return (
        f"copied {summary['goals']} goals, {summary['events']} events and {summary['operations']} operations\n"
        f"  from {summary['source']}\n  to   {summary['target']}{replaced}\n"
        "verified: the same events in the same order, and every goal's replayed state equal to the source's"
    )


@registry.command()
@click.option("--from", "source", required=True, metavar="URL",
              help="The registry to copy: a path, sqlite:///path or postgresql://... (opened read-only).")
@click.option("--to", "target", required=True, metavar="URL", help="The registry to copy into; must be empty.")
@click.option("--force", is_flag=True, help="Replace whatever the target holds.")
def copy(source, target, force):
    """Copy every goal's ledger and the idempotency keys into another registry, then verify.

    The target's state is rebuilt by replaying the ledger, and compared with the source's before
    anything is committed: a copy is complete and verified, or nothing is written.
    """
    from loopx.registry_copy import copy_registry

    emit(copy_registry(source, target, force=force), _copied_text)
