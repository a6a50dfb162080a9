"""``loopx demo``: run the governed demo loop on a fresh registry and print its transcript."""

from __future__ import annotations

import json
import shlex

import os

import click

from loopx.cli.output import REGISTRY_KEY, LoopxCommand, wants_json


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def render(entry: dict) -> str:
    """One transcript entry for people."""
    if entry["kind"] == "heading":
        return f"\n== {entry['text']} =="
    if entry["kind"] == "note":
        return f"  ({entry['text']})"
    from loopx.cli.project_prompt import goal_text
    from loopx.cli.quota import contract_text, quota_text
    from loopx.cli.loop import loop_text

    prompt = "agent$" if entry["actor"] != "user" else "user$"
    head = f"{prompt} {shlex.join(entry['argv'])}"
    r, show = entry["result"], entry["show"]
    if show == "goal":
        body = goal_text(r)
    elif show == "action":
        body = f"allowed {r['name']}"
    elif show == "quota":
        body = quota_text(r)
    elif show == "todo":
        body = f"{r['id']}  [{r['status']}]  {r['text']}" + (f"  (after {', '.join(r['depends_on'])})"
                                                            if r["depends_on"] else "")
    elif show == "gate":
        body = f"{r['id']}  [{r['status']}]  {r['title']}  (blocks {r['blocks']}, scope {r['scope']})"
    elif show == "contract":
        body = contract_text(r)
    elif show == "loop":
        body = loop_text(r)
    elif show == "reward":
        body = f"{r['id']}  score {r['score']:+.2f} on run {r['run_id']}: {r.get('comment') or ''}"
    elif show == "summary":
        from loopx.views.summary_all import to_text

        body = to_text(r)
    else:
        body = json.dumps(r, indent=2)
    return head + "\n" + _indent(body)


@click.command(cls=LoopxCommand)
@click.option("--registry", "demo_registry", default=None,
              help="Where to build the demo registry, kept afterwards (default: a temporary directory, "
                   "removed when the demo ends). Must be new or empty.")
def demo(demo_registry):
    """Run a governed agent loop end to end on a fresh registry, printing a readable transcript.

    A goal with criteria, allowed commands, a budget, gates that pause it until a user decides, turns
    through the shell executor with evidence, a human reward, and the final summary_all.
    """
    import tempfile
    from pathlib import Path

    ctx = click.get_current_context()
    url = demo_registry
    root = ctx.find_root()
    if url is None and root.get_parameter_source("registry_url") == click.core.ParameterSource.COMMANDLINE:
        url = root.meta.get(REGISTRY_KEY) or ctx.meta.get(REGISTRY_KEY)
    temp_dir = None
    if url is None:
        # Never the user's own registry (LOOPX_REGISTRY is ignored here): always a fresh one,
        # in a temporary directory removed when the demo ends.
        temp_dir = tempfile.mkdtemp(prefix="loopx-demo-")
        url = str(Path(temp_dir) / "registry.db")
    before = os.getcwd()
    from loopx.domain import workspace

    made = [d for d in (workspace.root(), os.path.dirname(workspace.root()),
                        os.path.dirname(os.path.dirname(workspace.root()))) if not os.path.exists(d)]
    try:
        if temp_dir is not None:
            # The demo goal's project is a directory of the demo's own, never the one it is run in
            # (its workspace, loopx/domain/workspace.py, would be a worktree of that checkout).
            os.mkdir(Path(temp_dir) / "project")
            os.chdir(Path(temp_dir) / "project")
        _run(url, kept=temp_dir is None)
    finally:
        if temp_dir is not None:
            import shutil

            os.chdir(before)
            _forget_workspaces(url, made)
            _forget_keys(url)
            shutil.rmtree(temp_dir, ignore_errors=True)


def _forget_workspaces(url: str, made: list[str]) -> None:
    # The temporary registry's goals' workspaces go with it, and the directories made for them.
    import shutil

    from loopx.domain import workspace
    from loopx.ledger.artifacts import registry_key
    from loopx.ledger.registry import Registry

    try:
        with Registry.open(url, readonly=True) as reg, reg.read() as tx:
            key = registry_key(tx)
    except Exception:  # nothing was made
        return
    shutil.rmtree(os.path.join(workspace.root(), key), ignore_errors=True)
    for d in made:  # innermost first; only what the demo made, and only if nothing else is there now
        try:
            os.rmdir(d)
        except OSError:
            break


def _forget_keys(url: str) -> None:
    # The temporary registry's integrity key and anchor go with it (docs/security.md).
    from loopx.ledger import keys
    from loopx.views.key_files import sqlite_id

    registry_id = sqlite_id(url)
    if registry_id:
        keys.forget(registry_id, keys.sqlite_location(url))


def _run(url: str, kept: bool) -> None:
    from loopx import demo as d
    from loopx.ledger.registry import Registry

    d.check_fresh_target(url)
    entries = []
    as_json = wants_json()
    if not as_json:
        click.echo("LoopX demo: a governed agent loop, end to end")
        click.echo(f"registry: {url}" + ("" if kept else "  (temporary: removed when the demo ends)"))
    with Registry.open(url) as reg:
        from loopx.cli import run_inprocess

        for entry in d.steps(reg, run_cli=run_inprocess):
            entries.append(entry)
            if not as_json:
                click.echo(render(entry))
    if as_json:
        click.echo(json.dumps({"registry": url, "registry_kept": kept, "transcript": entries}, indent=2,
                              ensure_ascii=False))
    elif kept:
        from loopx.ledger.registry import display_url

        click.echo("\nDone. Look around in the demo's registry:")
        click.echo(f"LOOPX_REGISTRY={shlex.quote(display_url(url))} {program()} summary-all")
    else:
        keep = free_name("loopx-demo.db")
        click.echo("\nDone. The demo's temporary registry is removed. To run it on one you keep and look around:")
        click.echo(f"{program()} demo --registry {shlex.quote(keep)} && "
                   f"LOOPX_REGISTRY={shlex.quote(keep)} {program()} summary-all")


def program() -> str:
    """How to call LoopX again the way this process was called: ``loopx`` if that is on PATH, else its path."""
    import os
    import shutil
    import sys

    argv0 = sys.argv[0]
    if os.path.basename(argv0) == "__main__.py":  # python -m loopx
        return f"{shlex.quote(sys.executable)} -m loopx"
    on_path = shutil.which("loopx")
    if on_path and os.path.realpath(on_path) == os.path.realpath(shutil.which(argv0) or argv0):
        return "loopx"
    return shlex.quote(argv0)


def free_name(name: str) -> str:
    """``name`` in the current directory, or ``stem-2.db``, ``stem-3.db``, … if it is taken."""
    import os

    stem, ext = os.path.splitext(name)
    candidate, n = name, 1
    while os.path.exists(candidate):
        n += 1
        candidate = f"{stem}-{n}{ext}"
    return candidate
