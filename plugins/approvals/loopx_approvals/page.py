"""The approvals page: what waits for a person, laid out like the dashboard (its stylesheet).

:func:`gather` reads the goals of ``status_overview`` that need a
person, have a pending gate or a finished run to score; for each, its pending gates (title,
scope, what they block) and the review packet its goal records. :func:`render` turns that into
HTML: every value escaped, every form carrying the session's CSRF token, no score prefilled.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from loopx import api

if TYPE_CHECKING:
    from loopx.api import ReadTx, Registry, gates

esc = html.escape

# What a gate holds back, in words (``blocks`` is ``all``, ``action:NAME`` or ``todo:ID``).
_ALL = "every turn of this goal"


def gather(reg: Registry, limit: int = 100) -> dict[str, Any]:
    """``{"goals": [...], "counts": {...}}``: what the page shows (the overview, then one read
    transaction for the gates, todos and packets of the goals it lists)."""
    view = api.goals.overview(reg, limit=limit)
    goals = []
    with reg.read() as tx:
        for g in view["goals"]:
            gates = api.gates.list(tx, g["id"], pending_only=True) if g.get("gates_pending") else []
            run = g.get("last_run")
            scorable = bool(run and run.get("state") != "open")
            if not (g.get("needs_you") or gates or scorable):
                continue
            goals.append({
                "goal": g,
                "gates": [{"gate": gate, "blocks_text": _blocks(tx, gate),
                           "artifacts": _gate_artifacts(tx, gate)} for gate in gates],
                "packet": _packet(tx, g["id"]) if gates else None,
                "run": run if scorable else None,
            })
    return {"goals": goals,
            "counts": {"gates": sum(len(x["gates"]) for x in goals),
                       "runs": sum(1 for x in goals if x["run"])}}


def _blocks(tx: ReadTx, gate: gates.Gate) -> str:
    """``gate.blocks`` said in words: what approving it lets run."""
    kind, _, target = gate.blocks.partition(":")
    if gate.blocks == "all":
        return _ALL
    if kind == "action":
        return f"the action {target} (other work goes on)"
    if kind == "todo":
        try:
            todo = api.todos.load(tx, gate.goal_id, target)
        except api.LoopxError:
            return f"todo {target}"
        return f"todo {target}: {todo.text}"
    return gate.blocks


def _gate_artifacts(tx: ReadTx, gate: gates.Gate) -> list[dict[str, Any]]:
    """What was recorded to decide ``gate`` (a diff of changed tests): ``{"name", "sha256", "text",
    "problem"}``, ``text`` read only while it has its recorded sha256 (else ``problem``)."""
    out = []
    for item in api.files.artifacts(tx, gate.goal_id):
        if item["gate_id"] != gate.id:
            continue
        text, problem = None, item["problem"]
        if item["ok"]:
            try:
                text = api.files.read_artifact(item["path"], item["sha256"], what=item["name"]).decode("utf-8", "replace")
            except api.LoopxError as exc:
                problem = exc.message
        out.append({"name": item["name"], "sha256": item["sha256"], "text": text, "problem": problem})
    return out


def _packet(tx: ReadTx, goal_id: str) -> dict[str, str] | None:
    """The review packet the goal records, ``{"path", "sha256", "source"}``, or None.

    Issue-Fix keeps it in its capability state (``handoff``: ``packet``/``path`` and ``sha256``);
    any other goal's hand-off evidence may name a file with its digest. Both are read through
    ``loopx.api``: nothing of the Issue-Fix plugin is imported.
    """
    handoff = api.state.get(tx, goal_id, "issue_fix").get("handoff")
    if isinstance(handoff, dict):
        path = handoff.get("packet") or handoff.get("path")
        sha = handoff.get("sha256")
        if isinstance(path, str) and isinstance(sha, str):
            return {"path": path, "sha256": sha.removeprefix("sha256:"), "source": "issue_fix state"}
    for item in reversed(api.evidence.list(tx, goal_id, kind="handoff")):
        if item.file_path and item.file_sha256:
            return {"path": item.file_path, "sha256": item.file_sha256.removeprefix("sha256:"),
                    "source": f"evidence {item.id}"}
    return None


def shell(body: str, *, status_line: str = "") -> str:
    """A whole page around ``body``: the dashboard's header and stylesheet."""
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<meta name='referrer' content='same-origin'><title>LoopX approvals</title>"
            "<link rel='icon' href='data:,'><link rel='stylesheet' href='/assets/dashboard.css'><link rel='stylesheet' href='/assets/approvals.css'></head><body>"
            "<header><h1>LoopX</h1><span class='badge plain'>approvals</span>"
            f"<span id='counts' class='muted'>{status_line}</span><span class='spacer'></span>"
            "<span class='muted small'>Decisions are recorded as yours (actor <code>user</code>).</span></header>"
            f"{body}"
            "<footer class='muted small'>The dashboard (<code>loopx status-server</code>) stays read-only; "
            "this page decides gates and scores runs, with the login link <code>loopx approvals serve</code> "
            "printed.</footer></body></html>")


def render(data: dict[str, Any], csrf: str, message: str = "") -> str:
    """The logged-in page (see the module's docstring)."""
    items, articles = [], []
    for entry in data["goals"]:
        items.append(_nav_item(entry))
        articles.append(_article(entry, csrf))
    note = f"<p id='message' class='card'>{esc(message)}</p>" if message else ""
    counts = data["counts"]
    status_line = (f"{counts['gates']} gate{'s' if counts['gates'] != 1 else ''} to decide · "
                   f"{counts['runs']} run{'s' if counts['runs'] != 1 else ''} to score")
    nav = ("<nav aria-label='Goals'><h2>Waiting for you <span class='muted small'>needs you first</span></h2>"
           f"<ol id='goals' class='goal-list'>{''.join(items)}</ol>"
           + ("" if items else "<p id='nothing' class='muted'>Nothing waits for you.</p>") + "</nav>")
    return shell(f"<main>{nav}<section id='detail'>{note}{''.join(articles)}</section></main>",
                 status_line=esc(status_line))


def _nav_item(entry: dict[str, Any]) -> str:
    g = entry["goal"]
    needs = g.get("needs_you")
    meta = []
    if entry["gates"]:
        meta.append(f"{len(entry['gates'])} gate{'s' if len(entry['gates']) > 1 else ''} pending")
    if entry["run"]:
        meta.append(f"last run {entry['run'].get('outcome') or entry['run'].get('state')}")
    badge = (f"<span class='badge warn'>needs you: {esc(needs['reason'].replace('_', ' '))}</span>"
             if needs else "")
    return (f"<li class='{'attention' if needs else ''}' data-goal-link='{esc(g['id'])}'>"
            f"<a href='#goal-{esc(g['id'])}'><span class='title'>{esc(g['title'])}</span></a> "
            f"<span class='badge {esc(g['status'])}'>{esc(g['status'])}</span> {badge}"
            f"<div class='meta'>{esc(' · '.join(meta))}</div></li>")


def _article(entry: dict[str, Any], csrf: str) -> str:
    g = entry["goal"]
    needs = g.get("needs_you")
    hidden = (f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
              f'<input type="hidden" name="goal_id" value="{esc(g["id"])}">')
    needs_html = (f"<div class='needs-you' data-reason='{esc(needs['reason'])}'><strong>Needs you: "
                  f"{esc(needs.get('decision', ''))} ({esc(needs['reason'].replace('_', ' '))})</strong>"
                  f"<div class='small'>{esc(needs.get('message', ''))}</div></div>" if needs else "")
    cards = [_gate_card(x, entry["packet"], hidden) for x in entry["gates"]]
    if entry["run"]:
        cards.append(_reward_card(entry["run"], hidden))
    return (f"<article class='goal' id='goal-{esc(g['id'])}' data-goal-id='{esc(g['id'])}'>"
            f"<div class='goal-head'><h2>{esc(g['title'])}</h2><span class='badge {esc(g['status'])}'>"
            f"{esc(g['status'])}</span><code class='muted'>{esc(g['id'])}</code></div>"
            f"{needs_html}<div class='grid'>{''.join(cards)}</div></article>")


def _gate_card(item: dict[str, Any], packet: dict[str, str] | None, hidden: str) -> str:
    gate = item["gate"]
    packet_html = ""
    if packet:
        packet_html = (f"<p class='packet'>Review packet: <code class='packet-path'>{esc(packet['path'])}</code><br>"
                       f"sha256 <code class='packet-sha256'>{esc(packet['sha256'])}</code> "
                       f"<span class='muted small'>(from {esc(packet['source'])})</span></p>")
    return (f"<section class='card wide gate-card' data-gate-id='{esc(gate.id)}' data-scope='{esc(gate.scope)}'>"
            f"<h3 class='gate-title'>{esc(gate.title)}</h3>"
            "<table class='gate-facts'><tbody>"
            f"<tr><th>scope</th><td class='gate-scope'><span class='badge warn'>{esc(gate.scope)}</span></td></tr>"
            f"<tr><th>blocks</th><td class='gate-blocks'><code>{esc(gate.blocks)}</code> — "
            f"{esc(item['blocks_text'])}</td></tr>"
            f"<tr><th>asked</th><td>by {esc(gate.requested_by)} at {esc(gate.created_at)} · "
            f"<code class='muted'>{esc(gate.id)}</code></td></tr></tbody></table>"
            f"{packet_html}"
            + "".join(f"<details class='gate-artifact' open data-artifact='{esc(a['name'])}'><summary class='small'>"
                      f"{esc(a['name'])} · sha256 <code>{esc(a['sha256'])}</code></summary>"
                      + (f"<pre class='artifact-text small'>{esc(a['text'])}</pre>" if a["text"] is not None
                         else f"<p class='bad'>TAMPERED: {esc(a['problem'] or '')}</p>") + "</details>"
                      for a in item.get("artifacts", []))
            + f"<form method='post' action='/decide' class='gate decide' data-gate-id='{esc(gate.id)}'>{hidden}"
            f"<input type='hidden' name='gate_id' value='{esc(gate.id)}'>"
            "<input name='comment' placeholder='comment (kept with the decision)' size='40'> "
            "<button name='verb' value='approve'>Approve</button> "
            "<button name='verb' value='reject'>Reject</button></form></section>")


def _reward_card(run: dict[str, Any], hidden: str) -> str:
    outcome: str = run.get("outcome") or run["state"]  # every run in the overview has a state
    return (f"<section class='card reward-card' data-run-id='{esc(run['id'])}'>"
            f"<h3>Score run <code>{esc(run['id'])}</code> <span class='badge {esc(outcome)}'>{esc(outcome)}</span></h3>"
            f"<form method='post' action='/reward' class='reward' data-run-id='{esc(run['id'])}'>{hidden}"
            f"<input type='hidden' name='run_id' value='{esc(run['id'])}'>"
            "<label>score <input name='score' size='6' required inputmode='decimal' "
            "placeholder='-1 to 1' autocomplete='off'></label> "
            "<input name='comment' placeholder='comment'> <button>Add reward</button></form>"
            "<p class='muted small'>No score is filled in: a reward is your explicit choice, "
            "a number from -1 to 1.</p></section>")
