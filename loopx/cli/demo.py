"""``loopx demo``: run the governed demo loop on a fresh registry and print its transcript."""

from __future__ import annotations

import json
import shlex

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
    from loopx.cli.goals import goal_text
    from loopx.cli.quota import contract_text, quota_text
    from loopx.cli.turn import loop_text

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
        from loopx.summary_all import to_text

        body = to_text(r)
    else:
        body = json.dumps(r, indent=2)
    return head + "\n" + _indent(body)


@click.command(cls=LoopxCommand)
@click.option("--registry", "demo_registry", default=None,
              help="Where to build the demo registry (default: a new temporary directory). Must be new or empty.")
def demo(demo_registry):
    """Run a governed agent loop end to end on a fresh registry, printing a readable transcript.

    A goal with criteria, allowed commands, a budget, gates that pause it, the approvals, turns
    through the shell executor with evidence, a human reward, and the final summary_all.
    """
    import tempfile
    from pathlib import Path

    from loopx import demo as d
    from loopx.registry import Registry

    ctx = click.get_current_context()
    url = demo_registry
    root = ctx.find_root()
    if url is None and root.get_parameter_source("registry_url") == click.core.ParameterSource.COMMANDLINE:
        url = root.meta.get(REGISTRY_KEY) or ctx.meta.get(REGISTRY_KEY)
    if url is None:
        # Never the user's own registry (LOOPX_REGISTRY is ignored here): always a fresh one.
        url = str(Path(tempfile.mkdtemp(prefix="loopx-demo-")) / "registry.db")
    d.check_fresh_target(url)
    entries = []
    as_json = wants_json()
    if not as_json:
        click.echo("LoopX demo: a governed agent loop, end to end")
        click.echo(f"registry: {url}")
    with Registry.open(url) as reg:
        for entry in d.steps(reg):
            entries.append(entry)
            if not as_json:
                click.echo(render(entry))
    if as_json:
        click.echo(json.dumps({"registry": url, "transcript": entries}, indent=2, ensure_ascii=False))
    else:
        from loopx.registry import display_url

        click.echo(f"\nDone. Look around: LOOPX_REGISTRY={shlex.quote(display_url(url))} loopx summary_all")
