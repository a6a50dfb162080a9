"""Hook implementations, found by LoopX through the ``loopx`` entry point ``seed_domain``.

Kept cheap to import: LoopX loads it before every agent turn. Everything else is imported
inside the hooks.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from loopx import hookimpl

from loopx_seed_domain import __version__

#: The model the contract offers (default ``revenue-forecast``).
ENV_MODEL = "LOOPX_SEED_DOMAIN_MODEL"

if TYPE_CHECKING:
    import click

    from loopx.api import ReadTx, goals, registrars


@hookimpl
def loopx_register_capabilities(register: registrars.Capabilities) -> None:
    """Declare the ``seed_domain`` capability (it owns no state: its results are evidence)."""
    from loopx.api import Capability

    register(Capability(
        name="seed_domain",
        version=__version__,
        summary="Revenue analysis for the seed walkthrough: run-model (trend + seasonal forecast, spike score) "
                "and generate-report (PDF, Markdown or JSON), both recorded as evidence.",
        owns=(),
        reads=("goals", "runs", "evidence"),
        quota={"turns": 1, "tokens": 0, "wall_seconds": 5},
        commands=("run-model", "generate-report"),
        actions=("run-model", "generate-report"),
        doc="docs/capabilities/seed_domain.md",
    ))


@hookimpl
def loopx_register_commands(cli: click.Group) -> None:
    """Add ``loopx run-model`` and ``loopx generate-report``."""
    from loopx_seed_domain.commands import generate_report, run_model

    cli.add_command(run_model)
    cli.add_command(generate_report)


@hookimpl
def loopx_contract_actions(tx: ReadTx, goal: goals.Goal, run_id: str, remaining: dict[str, Any] | None
                           ) -> list[dict[str, Any]] | None:
    """Offer the model run and the report, in that order.

    LoopX asks only for goals that enable ``seed_domain`` (``loopx project-prompt create
    --capability seed_domain``, or ``loopx project-prompt capabilities G --enable seed_domain``).
    """
    if not run_id:
        return None
    model = os.environ.get(ENV_MODEL) or "revenue-forecast"
    return [
        {"argv": ["loopx", "run-model", "--model", model, "--run-id", run_id],
         "note": f"run the {model} model on the quarterly revenue data (recorded as evidence)",
         "capability": "seed_domain", "action": "run-model"},
        {"argv": ["loopx", "generate-report", "--format", "pdf", "--run-id", run_id],
         "note": "write the report of the model runs (recorded as evidence with its sha256)",
         "capability": "seed_domain", "action": "generate-report"},
    ]
