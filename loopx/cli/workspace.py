"""``loopx workspace``: the goal's own workspace, its diff, and bringing the diff to the project."""

from __future__ import annotations

import sys

import click

from loopx.cli.ids import goal_option
from loopx.cli.output import LoopxGroup, actor, emit, open_registry, wants_json, wants_lines


@click.group(cls=LoopxGroup)
def workspace():
    """A goal's workspace: where its agent works, never your checkout (docs/workspaces.md)."""


def _show_text(d: dict) -> str:
    lines = [f"{d['goal_id']}: project {d['project'] or '(set by its first turn)'}",
             f"  workspace {d['workspace']}" + ("" if d["exists"] else " (made by the next turn)")]
    if d.get("branch"):
        lines.append(f"  branch {d['branch']} from {d['base'][:12]}")
    elif d.get("kind") == "copy":
        lines.append(f"  a copy (not a git checkout), base {d['base'][:12]}")
    return "\n".join(lines)


@workspace.command()
@goal_option()
def show(goal_id):
    """The goal's project, workspace path and branch (no git is run)."""
    from loopx.domain import workspace as workspaces

    with open_registry(readonly=True) as reg:
        emit(workspaces.show(reg, goal_id), _show_text)


@workspace.command()
@goal_option()
@click.option("--stat", is_flag=True, help="Only the changed files, not the patch.")
def diff(goal_id, stat):
    """What the agent changed in its workspace, against the workspace's base (committed or not).

    Files your own tools run or read (agent settings, hooks, .envrc, Makefiles, git's files, CI
    workflows) are marked RISKY (in red on a terminal; "risky": true in JSON): read them first.
    """
    from loopx.domain import workspace as workspaces
    from loopx.values.terminal import safe

    with open_registry(readonly=True) as reg:
        d = workspaces.diff(reg, goal_id)
    if stat:
        d.pop("patch")
    if wants_json() or wants_lines():
        emit(d)
        return
    red = sys.stdout.isatty()
    out = [f"{d['goal_id']}: {len(d['files'])} file(s) changed in {d['workspace']} (base {d['base'][:12]})"]
    for f in d["files"]:
        line = f"  {f['status']} {safe(f['path'])}" + ("   RISKY: your own tools run or read it" if f["risky"] else "")
        out.append(click.style(line, fg="red", bold=True) if f["risky"] and red else line)
    click.echo("\n".join(out))
    if not stat and d["patch"]:
        click.echo(safe(d["patch"]).rstrip("\n"))


@workspace.command()
@goal_option()
def apply(goal_id):
    """Apply the workspace's diff to the project (you only; recorded on the goal). Refused, with
    nothing changed, when it does not apply to your checkout as it is now."""
    from loopx.domain import workspace as workspaces

    with open_registry() as reg:
        d = workspaces.apply(reg, actor(), goal_id)
    emit(d, lambda d: f"applied {len(d['files'])} file(s) to {d['project']} (diff sha256 {d['sha256'][:12]})")


@workspace.command()
@goal_option()
def discard(goal_id):
    """Remove the goal's workspace and its branch (you only); the next turn makes a new one."""
    from loopx.domain import workspace as workspaces

    with open_registry() as reg:
        d = workspaces.discard(reg, actor(), goal_id)
    emit(d, lambda d: f"discarded {d['discarded']}" + (f" and branch {d['branch']}" if d.get("branch") else ""))
