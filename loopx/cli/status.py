"""``loopx status``: the read-only projection of goals in a terminal (``status-server`` serves it over HTTP)."""

from __future__ import annotations

import os

import click

from loopx.cli.ids import goal_option
from loopx.cli.output import LoopxCommand, emit, open_registry, wants_json

BAR_WIDTH = 20


def _bar(used, limit) -> str:
    if limit is None:
        return f"{_num(used)} used (unlimited)"
    frac = 1.0 if limit <= 0 else min(1.0, max(0.0, used / limit))
    filled = round(frac * BAR_WIDTH)
    return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {_num(used)}/{_num(limit)}"


def _num(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _quota_lines(quota: dict, indent: str = "  ") -> list[str]:
    lines = []
    for field in ("turns", "tokens", "cost", "wall_seconds"):
        budget = quota["budget"][field]
        if budget is None and not quota["used"][field]:
            continue
        mark = "  EXHAUSTED" if field in quota["exhausted"] else ""
        lines.append(f"{indent}{field:<13}{_bar(quota['used'][field], budget)}{mark}")
    return lines


def overview_text(view: dict) -> str:
    """The all-goals view for people."""
    counts = view["counts"]["goals"]
    lines = [
        f"{counts['open']} open, {counts['paused']} paused, {counts['closed']} closed;"
        f" {view['counts']['attention']} need you  (revision {view['revision']})"
    ]
    if not view["goals"]:
        closed = counts["closed"]
        # Never "no goals" when some exist: say where the closed ones are.
        lines.append(f"no open or paused goals; {closed} closed (loopx status --all shows them)" if closed
                     else "no goals")
    for g in view["goals"]:
        flag = "!" if g.get("needs_you") else " "
        todos = g["todos"]
        lines.append(f"{flag} {g['id']}  [{g['status']}]  {g['title']}")
        detail = f"    todos {todos['done']}/{sum(todos.values())} done"
        if g["gates_pending"]:
            detail += f", {g['gates_pending']} gate(s) pending"
        if g["last_run"]:
            r = g["last_run"]
            detail += f", last run {r['state']}" + (f" ({r['outcome']})" if r["outcome"] else "")
        lines.append(detail)
        if g.get("capabilities"):
            lines.append(f"    capabilities: {', '.join(g['capabilities'])}")
        if g["attention"]:
            lines.append(f"    attention: {', '.join(g['attention'])}")
        if g.get("retry"):
            r = g["retry"]
            lines.append(f"    next attempt at {r['at']} (back-off: {r['failed_turns']} failed turn(s) in a row,"
                         f" --retry-seconds {r['retry_seconds']:g} doubling)")
        lines += _needs_you_lines(g.get("needs_you"))
    lines += _worker_lines(view)
    if view["page"]["next"]:
        lines.append(f"more: loopx status --cursor {view['page']['next']}")
    return "\n".join(lines)


def _needs_you_lines(needs, indent: str = "    ") -> list[str]:
    """A goal waiting for a person: the decision, the reason, and what to type."""
    if not needs:
        return []
    out = [f"{indent}NEEDS YOU: {needs['decision']} ({needs['reason']}): {needs['message']}"]
    for d in needs.get("decisions") or []:
        out.append(f"{indent}  gate {d['gate_id']} ({d['title']}): approving {d['approving']}")
    out += [f"{indent}  $ {c}" for c in needs["commands"]]
    return out


def _worker_lines(view: dict) -> list[str]:
    out = []
    for w in view.get("workers") or []:
        if w["state"] == "stopped":
            continue
        goals = f", on {', '.join(w['goals'])}" if w["goals"] else ", idle"
        out.append(f"worker {w['id']} {w['state'].upper()}: pid {w['pid']} on {w['host']}, since {w['started_at']},"
                   f" last beat {w['last_beat_at']}{goals}")
        out += fault_lines(w)
    for j in (view.get("clock_jumps") or [])[:1]:
        out.append(f"clock jump: {j['direction']} {abs(j['jump_seconds']):.0f}s, seen {j['seen_at']} by {j['worker']}")
    return out


def fault_lines(w: dict, indent: str = "  ") -> list[str]:
    """A worker's registry fault: the one it is backing off from now, else the last it recovered from."""
    f = w.get("fault")
    if f:
        return [f"{indent}BACKING OFF: {f['code']} since {f['since']} ({f['attempts']} attempt(s), next in"
                f" {f['retry_in']:g}s): {f.get('message') or ''}".rstrip(": ")]
    last = w.get("last_fault")
    if last and w["state"] == "running":
        return [f"{indent}recovered from {last['code']} ({last['since']} to {last['until']}, {last['attempts']} attempt(s))"]
    return []


def goal_text(view: dict) -> str:
    """One goal's view for people."""
    g = view["goal"]
    lines = [f"{g['id']}  [{g['status']}]  {g['title']}  (revision {g['revision']})"]
    if view["attention"]:
        lines.append(f"attention: {', '.join(view['attention'])}")
    lines += _needs_you_lines(view.get("needs_you"), indent="")
    now = view.get("current_contract")
    if now:
        lines.append(f"decision now: {now['decision']} ({', '.join(now['reasons'])}): {now['primary_action']}")
    for c in g["criteria"]:
        lines.append(f"  [{'x' if c['met'] else ' '}] {c['text']}")
    if g.get("capabilities"):
        lines.append(f"capabilities: {', '.join(g['capabilities'])}")
    ws = view.get("workspace")
    if ws:
        where = ws["workspace"] + ("" if ws["exists"] else " (made by its next turn)")
        lines.append(f"workspace: {where}" + (f" on branch {ws['branch']}" if ws.get("branch") else "")
                     + f"  (project {ws['project'] or 'set by its next turn'}; `loopx workspace diff {g['id']}`)")
    gates = view["gates"]
    if gates["pending"] or gates["decided"]:
        lines.append("gates:")
        for x in gates["pending"] + gates["decided"]:
            lines.append(f"  {x['id']}  {x['status']:<8} {x['scope']:<10} blocks {x['blocks']}  {x['title']}")
            if x.get("decide"):
                lines.append(f"    decide: {x['decide']['approve']}")
                lines.append(f"        or: {x['decide']['reject']}")
    todos = view["todos"]
    ready = set(todos["ready"])
    if todos["items"]:
        c = todos["counts"]
        lines.append(f"todos: {c['done']} done, {c['open']} open ({len(ready)} ready), {c['blocked']} blocked")
        for t in todos["items"]:
            state = "ready" if t["id"] in ready else t["status"]
            claim = f"  claimed by {t['claim']['agent']}" if t["claim"] and t["claim"]["valid"] else ""
            held = f"  ({t['blocked_by']['text']})" if t.get("blocked_by") else ""
            lines.append(f"  {t['id']}  {t['priority']} {state:<7} {t['text']}{claim}{held}")
    quota = _quota_lines(view["quota"])
    if quota:
        lines.append("quota:")
        lines.extend(quota)
    contract = view.get("last_contract")
    if contract:
        lines.append(f"last contract: {contract['contract_id']} ({contract['decision']}, run {contract['run_id']},"
                     f" {contract['issued_at']})")
    if view["handoff"]:
        lines.append(f"hand-off ({view['handoff']['run_id']}): {view['handoff']['note']}")
    from loopx.ledger.artifacts import lines as artifact_lines

    lines += artifact_lines(view.get("artifacts") or [])
    if view["rewards"]["total"]:
        lines.append(f"rewards: {view['rewards']['total']}, mean score {view['rewards']['mean']}")
    if view["timeline"]:
        lines.append("timeline:")
        for item in view["timeline"][:15]:
            lines.append(f"  {item['at']}  {item['kind']:<12} {item['text']}")
    return "\n".join(lines)


@click.command(cls=LoopxCommand)
@goal_option(required=False, help="Show one goal in full instead of the overview (also as the first argument).")
@click.option("--limit", default=50, type=int, help="Goals per page of the overview (1-1000).")
@click.option("--cursor", default=None, help="The next page: the cursor the previous page ended with.")
@click.option("--all", "include_closed", is_flag=True, help="Include closed goals in the overview.")
@click.option("--watch", is_flag=True,
              help="Keep the view on screen, redrawn whenever the registry changes (Ctrl-C quits).")
@click.option("--interval", default=0.5, type=click.FloatRange(0.05, 3600), show_default=True,
              help="With --watch: seconds between checks for a change.")
def status(goal_id, limit, cursor, include_closed, watch, interval):
    """What needs attention, and where every goal stands (read-only).

    Without --goal-id: all goals, those needing a human first (pending gates, exhausted
    budgets, abandoned or failing runs), then the rest, newest first.
    """
    from loopx.views import status as projection

    # Opened like every other command (a first run creates the empty registry); the status
    # server is the part that must be read-only by construction.
    if watch:
        from loopx.views import watch as live
        from loopx.ledger.registry import display_url, resolve_url
        from loopx.cli.output import REGISTRY_KEY

        with open_registry() as reg:
            if goal_id is not None:
                projection.goal_view(reg, goal_id)  # a bad id fails now, not in the loop

                def build(tx):
                    return projection.goal_view_tx(tx, goal_id)
            else:
                projection.overview(reg, limit=limit, include_closed=include_closed)  # bad options fail now

                def build(tx):
                    return projection.overview_tx(tx, limit=limit, include_closed=include_closed)
            url = display_url(resolve_url(click.get_current_context().meta.get(REGISTRY_KEY)))
            live.run(reg, build, goal_text if goal_id else overview_text, as_json=wants_json(), interval=interval,
                     refresh=10.0, label=url)
        return
    from loopx.values.errors import LoopxError

    try:
        with open_registry() as reg:
            if goal_id is not None:
                emit(projection.goal_view(reg, goal_id), goal_text)
            else:
                emit(projection.overview(reg, limit=limit, cursor=cursor, include_closed=include_closed), overview_text)
    except LoopxError as err:
        if err.code == "registry_unavailable":
            _say_who_backs_off(err)
        raise


def _say_who_backs_off(err) -> None:
    """The database is down: which workers of this host are waiting for it (their fault files)."""
    from loopx.cli.output import REGISTRY_KEY
    from loopx.ledger.registry import resolve_url
    from loopx.values.worker_log import backing_off

    url = resolve_url(click.get_current_context().meta.get(REGISTRY_KEY))
    waiting = backing_off(url if "://" in url else os.path.abspath(url))
    if waiting:
        err.details["workers_backing_off"] = waiting
        err.message += "; backing off until it is back: " + ", ".join(
            f"worker {w['worker']} (pid {w['pid']}, {w['code']} since {w['since']}, {w['attempts']} attempt(s))"
            for w in waiting)
