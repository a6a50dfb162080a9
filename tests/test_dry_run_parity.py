"""``quota should-run --dry-run`` answers exactly what the real call then answers, and writes nothing.

Every case builds a goal in one state, asks ``--dry-run`` first and then the real call, through
the CLI, on both backends, and compares the two answers (decision, reasons and the contract,
ids and times aside). There is a case for every deciding reason the core gives
(:data:`loopx.views.contract.REASONS`, which a scan of the decision code keeps complete), and for the
situations where the real call writes before it decides: an expired run closed and charged
first, a run whose owner process is gone, an agent's own open run handed back or renewed.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.domain import actions, claims, gates, runs, todos
from loopx.views import contract, quota
from loopx import hookimpl
from loopx.domain import goals as project_prompt
from loopx.views.should_run import should_run
from tests.reliability.tamper import raw, tables
from tests.test_keyed_integrity import _copy_of, _put_back
from tests.test_turn_helpers import PY, make_goal

ROOT = Path(__file__).resolve().parent.parent


def _ask(reg, g, agent, **kw):
    return should_run(reg, "user", goal_id=g, agent=agent, **kw)


def _finished_run(reg, g, agent="prior", outcome="partial"):
    run = _ask(reg, g, agent)["interaction_contract"]["run_id"]
    runs.finish(reg, "user", run_id=run, outcome=outcome)


def _failed_run(reg, g):
    run = _ask(reg, g, "prior")["interaction_contract"]["run_id"]
    actions.execute(reg, "executor", run_id=run, action="boom")
    assert runs.finish(reg, "user", run_id=run)["outcome"] == "failed"


class _Veto:
    """A capability veto on one goal: ``answer`` is what it returns (``raise``: it fails)."""

    def __init__(self, goal_id, answer):
        self.goal_id, self.answer = goal_id, answer

    @hookimpl
    def loopx_contract_veto(self, tx, goal):
        if goal.id != self.goal_id:
            return None
        if self.answer == "raise":
            raise RuntimeError("the veto exploded")
        return self.answer


def _plain(reg, **kw):
    return make_goal(reg, acts={"boom": [PY, "-c", "raise SystemExit(3)"]}, **kw)["goal"]


# Each builder: (reg, url, register a plugin, clock) -> (goal id, asking agent).
def closed(reg, url, plug, clock):
    g = _plain(reg)
    project_prompt.transition(reg, "user", "close", g)
    return g, "a1"


def paused(reg, url, plug, clock):
    g = _plain(reg)
    project_prompt.transition(reg, "user", "pause", g)
    return g, "a1"


def tampered(reg, url, plug, clock):
    g = _plain(reg)
    raw(url, "UPDATE todos SET text = 'forged by hand' WHERE goal_id = ?", (g,))
    return g, "a1"


def rolled_back(reg, url, plug, clock):
    # The registry replaced by an older copy: the user's rejection of the gate undone.
    g = _plain(reg)
    gate = gates.add(reg, "user", goal_id=g, title="deploy?", scope="production", blocks="all")["id"]
    older = _copy_of(url, g)
    gates.decide(reg, "user", "reject", goal_id=g, gate_id=gate, comment="not this week")
    _put_back(url, g, older, older["goal_heads"][0]["seq"])
    return g, "a1"


def veto_failed(reg, url, plug, clock):
    g = _plain(reg)
    plug(_Veto(g, "raise"), "parity-veto")
    return g, "a1"


def veto_not_a_code(reg, url, plug, clock):
    g = _plain(reg)
    plug(_Veto(g, {"reason": "Needs Repair!", "message": "state needs repair"}), "parity-veto")
    return g, "a1"


def veto_own_code(reg, url, plug, clock):
    g = _plain(reg)
    plug(_Veto(g, {"reason": "ledger_mismatch", "message": "repair first",
                   "actions": [f"loopx project-prompt show --goal-id {g}"]}), "parity-veto")
    return g, "a1"


def veto_asks_user(reg, url, plug, clock):
    g = _plain(reg)
    plug(_Veto(g, {"reason": "needs_a_person", "decision": "ask_user", "message": "a user must look",
                   "user_actions": [f"loopx project-prompt show --goal-id {g}"]}), "parity-veto")
    return g, "a1"


def gate_pending(reg, url, plug, clock):
    g = _plain(reg)
    gates.add(reg, "user", goal_id=g, title="look", scope="other", blocks="all")
    return g, "a1"


def gate_rejected(reg, url, plug, clock):
    g = _plain(reg)
    gate = gates.add(reg, "user", goal_id=g, title="look", scope="other", blocks="all")["id"]
    gates.decide(reg, "user", "reject", goal_id=g, gate_id=gate, comment="no")
    return g, "a1"


def exhausted(reg, url, plug, clock):
    g = _plain(reg, limits={"max_turns": 1})
    _finished_run(reg, g)
    return g, "a1"


def stuck(reg, url, plug, clock):
    g = _plain(reg, limits={"stuck_after": 1})
    _failed_run(reg, g)
    return g, "a1"


def cadence(reg, url, plug, clock):
    g = _plain(reg, limits={"cadence_seconds": 3600})
    _finished_run(reg, g)
    return g, "a1"


def in_progress(reg, url, plug, clock):
    g = _plain(reg)
    _ask(reg, g, "other")
    return g, "a1"


def wall_reserved(reg, url, plug, clock):
    # Parallel runs: another agent's open run has reserved all the wall-clock budget left.
    g = _plain(reg, parallel=True, limits={"max_wall_seconds": 100})
    assert _ask(reg, g, "other")["decision"] == "run"
    return g, "a1"


def no_ready(reg, url, plug, clock):
    ids = make_goal(reg)
    todos.settle(reg, "user", "done", goal_id=ids["goal"], todo_id=ids["todos"][0])
    return ids["goal"], "a1"


def no_todos(reg, url, plug, clock):
    return make_goal(reg, todo_texts=())["goal"], "a1"


def ready(reg, url, plug, clock):
    return _plain(reg), "a1"


def own_run_handed_back(reg, url, plug, clock):
    g = _plain(reg)
    _ask(reg, g, "a1")
    return g, "a1"


def own_run_renewed(reg, url, plug, clock):
    g = _plain(reg)
    _ask(reg, g, "a1")
    quota.set_limits(reg, "user", goal_id=g, values={"max_turns": 10})  # the contract's inputs changed
    return g, "a1"


def expired_run_charged_first(reg, url, plug, clock):
    # The real call closes the expired run, charging its lease: the wall budget is then spent.
    g = _plain(reg, limits={"max_wall_seconds": 100})
    _ask(reg, g, "other")
    clock.advance(101)
    return g, "a1"


def expired_run_ends_the_streak(reg, url, plug, clock):
    # A failed run, then one that expired: once closed, the newest run did not fail.
    g = _plain(reg)
    _failed_run(reg, g)
    assert _ask(reg, g, "other", ttl_seconds=60)["decision"] == "run"
    quota.set_limits(reg, "user", goal_id=g, values={"stuck_after": 1})
    clock.advance(61)
    return g, "a1"


def owner_gone(reg, url, plug, clock):
    # Another agent's run whose owner process has exited: the real call closes it first.
    g = _plain(reg)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _ask(reg, g, "other", owner=claims.owner_here(pid=int(done.stdout)))
    return g, "a1"


# case -> (builder, the deciding reason both answers must give)
CASES = {
    "goal_closed": (closed, "goal_closed"),
    "goal_paused": (paused, "goal_paused"),
    "integrity_mismatch": (tampered, "integrity_mismatch"),
    "registry_rolled_back": (rolled_back, "registry_rolled_back"),
    "plugin_failed": (veto_failed, "plugin_failed"),
    "capability_veto": (veto_not_a_code, "capability_veto"),
    "veto_own_code": (veto_own_code, "ledger_mismatch"),
    "veto_asks_user": (veto_asks_user, "needs_a_person"),
    "gate_pending": (gate_pending, "gate_pending"),
    "gate_rejected": (gate_rejected, "gate_rejected"),
    "quota_exhausted": (exhausted, "quota_exhausted"),
    "repeated_failure": (stuck, "repeated_failure"),
    "cadence": (cadence, "cadence"),
    "run_in_progress": (in_progress, "run_in_progress"),
    "wall_budget_reserved": (wall_reserved, "wall_budget_reserved"),
    "no_ready_work": (no_ready, "no_ready_work"),
    "no_todos": (no_todos, "no_todos"),
    "ready_work": (ready, "ready_work"),
    "own_run_handed_back": (own_run_handed_back, "ready_work"),
    "own_run_renewed": (own_run_renewed, "ready_work"),
    "expired_run_charged_first": (expired_run_charged_first, "quota_exhausted"),
    "expired_run_ends_the_streak": (expired_run_ends_the_streak, "ready_work"),
    "owner_gone": (owner_gone, "ready_work"),
}

_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_ID = re.compile(r"\b([rc])-[0-9a-f]{12}\b")


def _comparable(answer: dict) -> dict:
    """An answer without what differs by design: ids a call draws, times, the preview's notes,
    and wall-clock charges measured up to "now"."""
    out = {k: v for k, v in answer.items() if k not in ("dry_run", "preview")}
    doc = dict(out["interaction_contract"])
    doc.pop("run_id")
    doc.pop("contract_id")
    doc["quota"] = {k: {n: v for n, v in part.items() if n != "wall_seconds"} for k, part in doc["quota"].items()}
    text = json.dumps({**out, "interaction_contract": doc}, sort_keys=True)
    return json.loads(_ID.sub(lambda m: f"{m.group(1)}-ID", _STAMP.sub("TIME", text)))


def _tables(url: str) -> dict:
    """Every row of every table (what "writes nothing" is checked against)."""
    return {n: sorted(json.dumps(r, sort_keys=True, default=str) for r in found)
            for n, found in tables(url).items()}


def _files(folder: Path) -> dict:
    """The key and anchor files (not SQLite's ``-shm`` index, which any reader updates)."""
    return {p.name: p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not p.name.endswith("-shm")} if folder.exists() else {}


@pytest.mark.parametrize("case", list(CASES))
def test_the_dry_run_answers_what_the_real_call_then_answers(case, reg, loopx, loopx_plugin, loopx_clock,
                                                              private_key_dir):
    build, reason = CASES[case]
    g, agent = build(reg, loopx.url, loopx_plugin, loopx_clock)
    tables, keys = _tables(loopx.url), _files(private_key_dir)
    dry = loopx("quota", "should-run", "--goal-id", g, "--agent", agent, "--dry-run", "--json")
    assert dry.code == 0, dry
    preview = dry.json
    # Nothing was written: not a row, not the rollback anchor beside the key.
    assert _tables(loopx.url) == tables and _files(private_key_dir) == keys
    real = loopx("quota", "should-run", "--goal-id", g, "--agent", agent, "--json")
    assert real.code == 0, real
    answer = real.json
    assert preview["dry_run"] is True and "nothing was written" in preview["preview"]
    assert (preview["decision"], preview["reasons"]) == (answer["decision"], answer["reasons"]), (preview, answer)
    assert answer["reasons"][0] == reason, answer
    if reason in contract.REASONS:
        assert answer["decision"] == contract.REASONS[reason]
    assert _comparable(preview) == _comparable(answer)
    for part in ("used", "remaining"):  # wall time charged up to "now": the two calls' moments apart
        seen = [a["interaction_contract"]["quota"][part].get("wall_seconds") for a in (preview, answer)]
        assert seen[0] == seen[1] or abs(seen[0] - seen[1]) < 30, (part, seen)
    # The preview shows no run or contract id of its own; an agent's own open run is handed back.
    doc, real_doc = preview["interaction_contract"], answer["interaction_contract"]
    own = case.startswith("own_run")
    assert doc["run_id"] == (real_doc["run_id"] if own else None)
    if case != "own_run_handed_back":
        assert doc["contract_id"] is None
    else:
        assert doc["contract_id"] == real_doc["contract_id"]


def _literals(expr) -> set[str]:
    """The codes an expression can be: a string, either side of ``a if c else b``, a list's items."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.IfExp):
        return _literals(expr.body) | _literals(expr.orelse)
    if isinstance(expr, (ast.List, ast.Tuple)):
        return set().union(*map(_literals, expr.elts))
    return set()


def _reasons_in_code() -> set[str]:
    """Every reason code written in the decision code: the reasons of each ``Decision(...)``,
    what is assigned to a ``reason`` variable there, and every ``"reason"`` of a veto made there."""
    found = set()
    for path in (ROOT / "loopx" / "views" / "contract.py", ROOT / "loopx" / "views" / "should_run.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Decision":
                found |= _literals(node.args[1]) if len(node.args) > 1 else set()
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "reason" for t in node.targets):
                found |= _literals(node.value)
            elif isinstance(node, ast.Dict):
                found |= set().union(*[_literals(v) for k, v in zip(node.keys, node.values)
                                       if getattr(k, "value", None) == "reason"])
    return found


def test_every_reason_the_code_gives_is_listed_and_has_a_case():
    written = _reasons_in_code()
    assert written, "the scan found no reason at all: it no longer reads the decision code"
    assert written - set(contract.REASONS) == set(), "a reason the code gives is missing from contract.REASONS"
    assert set(contract.REASONS) - written == set(), "contract.REASONS lists a reason the code no longer gives"
    covered = {reason for _build, reason in CASES.values()}
    assert set(contract.REASONS) - covered == set(), "a reason without a parity case"


def test_a_read_only_preview_still_sees_a_registry_rolled_back(reg, loopx):
    # A registry that cannot be written is previewed in a read transaction: the rollback anchor
    # is read beside it, so the older copy is still named (a real call could not run there).
    from loopx.ledger.registry import Registry

    g, agent = rolled_back(reg, loopx.url, None, None)
    with Registry.open(loopx.url, readonly=True) as ro:
        preview = should_run(ro, "user", goal_id=g, agent=agent, dry_run=True)
    assert (preview["decision"], preview["reasons"]) == ("repair", ["registry_rolled_back"]), preview
    assert preview["dry_run"] is True
    real = loopx("quota", "should-run", "--goal-id", g, "--agent", agent, "--json").json
    assert (real["decision"], real["reasons"]) == (preview["decision"], preview["reasons"])
