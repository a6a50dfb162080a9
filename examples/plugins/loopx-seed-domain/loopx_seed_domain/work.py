"""What the two commands do, below the CLI: find the run, do the work, record evidence.

Both are *doing* commands, so they act only under a fresh contract: the run named by
``--run-id`` / ``$LOOPX_RUN_ID`` (set by ``loopx exec``) if it is still open and its contract not
stale; otherwise they ask ``quota should-run`` for the goal (``--goal-id``, ``$LOOPX_GOAL_ID``,
else the newest open goal) exactly as an agent would, and act only on a ``run`` decision.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from loopx.api import LoopxError

if TYPE_CHECKING:
    from loopx.api import Registry

REPORT_FORMATS = ("pdf", "md", "json")


def resolve_run(reg: Registry, actor: str, *, run_id: str | None, goal_id: str | None) -> tuple[str, str]:
    """``(run_id, goal_id)`` of the run to act under (see the module docstring)."""
    from loopx import api

    run_id = run_id or os.environ.get("LOOPX_RUN_ID") or None
    if run_id:
        with reg.read() as tx:
            run = api.runs.check_fresh(tx, run_id)
        return run.id, run.goal_id
    goal_id = goal_id or os.environ.get("LOOPX_GOAL_ID") or None
    if goal_id is None:
        newest = api.goals.list(reg, status="open", limit=1)
        if not newest:
            raise LoopxError("goal_not_found", "no open goal: create one, or pass --goal-id")
        goal_id = newest[0]["id"]
    answer = api.runs.should_run(reg, actor, goal_id=goal_id)
    if answer["decision"] != "run":
        raise LoopxError("action_not_allowed", f"the contract for goal {goal_id} says {answer['decision']} "
                         f"({', '.join(answer['reasons'])}), not run; nothing was done")
    return answer["interaction_contract"]["run_id"], goal_id


def run_model(reg: Registry, actor: str, *, model: str, run_id: str | None = None, goal_id: str | None = None,
              data: str | None = None) -> dict[str, Any]:
    """Run ``model`` on the data and record its figures as ``model`` evidence; returns them with ``run_id``."""
    from loopx import api

    from loopx_seed_domain import models

    if model not in models.MODELS:
        raise LoopxError("invalid_argument", f"--model: unknown model {model!r}; known: {', '.join(models.MODELS)}")
    try:
        series, source, digest = models.load_series(data)
    except models.ModelError as exc:
        raise LoopxError("invalid_argument", f"--data: {exc}") from None
    run_id, goal_id = resolve_run(reg, actor, run_id=run_id, goal_id=goal_id)
    figures = models.run(model, series)
    verdict = "a spike" if figures["spike"] else "no spike"
    summary = (f"{model}: {figures['latest_quarter']} revenue {figures['latest_revenue']:,.0f} vs expected "
               f"{figures['expected_revenue']:,.0f} (z={figures['residual_z']}): {verdict}; "
               f"next quarter {figures['next_quarter_forecast']:,.0f}")
    ev = api.evidence.add(reg, actor, kind="model", summary=summary, run_id=run_id,
                         data={**figures, "data_source": source, "data_sha256": digest})
    return {"run_id": run_id, "goal_id": goal_id, "evidence_id": ev["id"], "summary": summary, **figures}


def _report_lines(goal: dict[str, Any], models_run: list[dict[str, Any]], run_id: str) -> list[str]:
    lines = [f"Report: {goal['title']}", "=" * 60, "", goal.get("description") or "", "",
             f"Goal {goal['id']}, run {run_id}", ""]
    if not models_run:
        lines.append("No model runs are recorded for this goal yet (loopx run-model --model NAME).")
    for ev in models_run:
        d = ev["data"]
        lines += [
            f"Model {d['model']} (evidence {ev['id']}, run {ev['run_id']}, {ev['created_at']})",
            f"  data: {d.get('data_source')} ({d['quarters']} quarters, sha256 {str(d.get('data_sha256'))[:16]}...)",
            f"  {d['latest_quarter']}: actual {d['latest_revenue']:,.0f}, expected {d['expected_revenue']:,.0f}",
            f"  residual {d['residual']:,.0f} (z = {d['residual_z']}): {'SPIKE' if d['spike'] else 'within range'}",
            f"  trend {d['trend_per_quarter']:,.0f} per quarter; in-sample MAE {d['mae_in_sample']:,.0f}",
            f"  next quarter forecast: {d['next_quarter_forecast']:,.0f}",
            "",
        ]
    return lines


def generate_report(reg: Registry, actor: str, *, fmt: str, run_id: str | None = None, goal_id: str | None = None,
                    output: str | None = None) -> dict[str, Any]:
    """Write the report of the goal's model runs (latest per model) and record it as ``report`` evidence."""
    import json
    from pathlib import Path

    from loopx import api

    if fmt not in REPORT_FORMATS:
        raise LoopxError("invalid_argument", f"--format must be one of {', '.join(REPORT_FORMATS)}")
    run_id, goal_id = resolve_run(reg, actor, run_id=run_id, goal_id=goal_id)
    goal = api.goals.show(reg, goal_id)
    latest: dict[str, dict[str, Any]] = {}
    for ev in api.evidence.list_for(reg, goal_id=goal_id, kind="model"):
        if isinstance(ev.get("data"), dict) and "model" in ev["data"]:
            latest[ev["data"]["model"]] = ev  # oldest first, so the latest wins
    models_run = sorted(latest.values(), key=lambda e: e["data"]["model"])
    lines = _report_lines(goal, models_run, run_id)
    if fmt == "pdf":
        from loopx_seed_domain import pdf

        content = pdf.render(lines, title=goal["title"])
    elif fmt == "md":
        content = ("\n".join(["# " + lines[0], *lines[2:]]) + "\n").encode()
    else:
        content = json.dumps({"goal": goal, "run_id": run_id, "models": models_run}, indent=2).encode()
    base = Path(os.environ.get("LOOPX_REPORT_DIR") or ".")
    path = Path(output) if output else base / f"report-{goal_id}.{fmt}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    except OSError as exc:
        raise LoopxError("invalid_argument", f"cannot write the report to {path}: {exc.strerror}") from None
    ev = api.evidence.add(reg, actor, kind="report", run_id=run_id, file=str(path),
                         summary=f"{fmt} report of {len(models_run)} model run(s): {path.name}",
                         data={"format": fmt, "models": [e["id"] for e in models_run], "bytes": len(content)})
    return {"run_id": run_id, "goal_id": goal_id, "evidence_id": ev["id"], "path": ev["file_path"],
            "sha256": ev["file_sha256"], "format": fmt, "models": len(models_run)}
