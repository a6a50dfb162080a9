"""``loopx self-repair check|fix|skill``."""

from __future__ import annotations

import sys
from typing import Any

import click

from loopx.api import cli, open_registry


def _finding_line(f: dict[str, Any]) -> str:
    where = f["goal_id"] or "registry"
    tag = "" if f["severity"] == "damage" else f" ({f['severity']})"
    return f"{where}  {f['code']}{tag}: {f['message']}"


def _check_text(report: dict[str, Any]) -> str:
    if report["ok"]:
        return f"ok: {report['checked']['goals']} goal(s) checked, nothing to repair"
    lines = [_finding_line(f) for f in report["findings"]]
    if _only_housekeeping(report):
        lines.append(f"{len(report['findings'])} warning(s), housekeeping only (turns are not held up);"
                     " tidy with `loopx self-repair fix`")
    else:
        lines.append(f"{len(report['findings'])} finding(s); repair with `loopx self-repair fix`")
    return "\n".join(lines)


def _fix_text(result: dict[str, Any]) -> str:
    if result.get("dry_run"):
        lines = [f"would   {_finding_line(f)}  -> {f['would']}" for f in result["plan"]]
        return "\n".join(lines + ["dry run: nothing written" if lines else "ok: nothing to repair"])
    lines = [f"backup  {result['backup']}"] if result.get("backup") else []
    lines += [f"repaired  {_finding_line(r)}  -> {r['result']}" for r in result["repaired"]]
    lines += [f"REMAINING {_finding_line(f)}" for f in result["remaining"]]
    if result["ok"]:
        lines.append("ok: nothing left to repair" if lines else "ok: nothing to repair")
    return "\n".join(lines)


def _only_housekeeping(report: dict[str, Any]) -> bool:
    return bool(report["findings"]) and all(f["severity"] == "housekeeping" for f in report["findings"])


@click.group(cls=cli.LoopxGroup, epilog="Example:\n  loopx self-repair check")
def self_repair() -> None:
    """Detect and repair state that disagrees with the ledger or points at nothing."""


@self_repair.command(epilog="Example:\n  loopx self-repair check --json")
@cli.goal_option(required=False, help="Check one goal (default: every goal); also as the first argument.")
@click.option("--strict", is_flag=True, help="Exit 1 for housekeeping findings too (stale leases, abandoned runs).")
def check(goal_id: str | None, strict: bool) -> None:
    """Run every detector; exit status 1 when something needs repair.

    Housekeeping findings alone (state the core already treats correctly, such as an expired
    claim) are warnings: listed, exit status 0, unless --strict.
    """
    from loopx_self_repair import detectors

    with open_registry(readonly=True) as reg:
        report = detectors.check(reg, goal_id=goal_id)
    cli.emit(report, _check_text)
    if not report["ok"] and (strict or not _only_housekeeping(report)):
        sys.exit(1)


@self_repair.command(epilog="Examples:\n  loopx self-repair fix --goal-id g-2ce4\n  loopx self-repair fix --dry-run")
@cli.goal_option(required=False, help="Repair one goal (default: every goal); also as the first argument.")
@click.option("--dry-run", is_flag=True, help="Show what would be repaired; write nothing (no backup either).")
@cli.operation_option
def fix(goal_id: str | None, dry_run: bool, operation_id: str | None) -> None:
    """Repair what the detectors find, each repair recorded in the goal's ledger.

    An SQLite registry is first copied to FILE.bak-TIME. A rebuild never drops a gate, claim,
    approval or evidence the ledger lacks: it keeps them and the goal waits for a user
    (`loopx self-repair accept`). Exit status 1 when something could not be repaired (it is
    listed under "remaining").
    """
    from loopx.api import LoopxError, cli
    from loopx_self_repair import repairs

    if cli.current_actor() == "dashboard":
        raise LoopxError("actor_forbidden", "the dashboard never writes")
    result = repairs.fix(cli.registry_url(), goal_id=goal_id, operation_id=operation_id, dry_run=dry_run)
    cli.emit(result, _fix_text)
    if not result["ok"]:
        sys.exit(1)


@self_repair.command(epilog="Example:\n  loopx self-repair accept --goal-id g-2ce4")
@cli.goal_option(help="The goal whose kept state you checked (also as the first argument).")
@cli.operation_option
def accept(goal_id: str, operation_id: str | None) -> None:
    """Confirm what a repair kept (a gate, claim, approval or evidence the ledger lacked).

    Until a user runs this, `quota should-run` answers ask_user (repair_needs_user). Users only.
    """
    from loopx.api import LoopxError, cli
    from loopx_self_repair import repairs

    if cli.current_actor() != "user":
        raise LoopxError("actor_forbidden", "only a user accepts what a repair kept")
    with open_registry() as reg:
        result = repairs.accept(reg, goal_id, operation_id=operation_id)
    cli.emit(result, lambda r: f"accepted: goal {r['goal_id']} may run again" if r["accepted"] else r["message"])


@self_repair.command(epilog="Example:\n  loopx self-repair skill --path")
@click.option("--path", "path_only", is_flag=True, help="Print where the skill file is instead of its text.")
def skill(path_only: bool) -> None:
    """Print the loopx-self-repair agent skill (SKILL.md), to install it in an agent host."""
    from importlib.resources import files

    resource = files("loopx_self_repair").joinpath("SKILL.md")
    data = {"path": str(resource), "text": resource.read_text(encoding="utf-8")}
    cli.emit(data, lambda d: d["path"] if path_only else d["text"].rstrip("\n"))
