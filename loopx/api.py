"""The LoopX plugin API: the one module a plugin imports (besides ``loopx.hookimpl``).

Everything a plugin needs is here, documented section by section in ``docs/plugins.md``:
opening the registry, reading a goal and its todos, gates, evidence and runs, the domain
operations (each its own transaction, or composed inside one mutation), capability state,
extending the vocabulary (event kinds, error codes), command output helpers, errors, running a
child process, and the checks and fixtures for a plugin's own tests. Every other module of the
core may change without notice.

The module is cheap to import: names resolve lazily on first use (PEP 562), so a plugin module
that imports ``loopx.api`` at the top adds nothing measurable to ``quota should-run``.
"""

from __future__ import annotations

from loopx import hookimpl

# name -> "module:attribute", resolved on first access. Grouped as in docs/plugins.md.
_LAZY = {
    # --- errors ---
    "LoopxError": "loopx.errors:LoopxError",
    # --- registry ---
    "Registry": "loopx.registry:Registry",
    "current_actor": "loopx.registry:current_actor",
    # --- reading ---
    "load_goal": "loopx.project_prompt:load_goal",
    "list_goals": "loopx.project_prompt:list_goals",
    "show_goal": "loopx.project_prompt:show",
    "goal_history": "loopx.project_prompt:history",
    "list_todos": "loopx.todos:list_todos",
    "load_todo": "loopx.todos:load_todo",
    "ready_todos": "loopx.todos:ready",
    "list_gates": "loopx.gates:list_gates",
    "load_gate": "loopx.gates:load_gate",
    "load_run": "loopx.runs:load_run",
    "check_fresh": "loopx.runs:check_fresh",
    "check_recordable": "loopx.runs:check_recordable",
    "goal_events": "loopx.ledger:events",
    "goal_event_stream": "loopx.ledger:iter_events",
    "goal_event_rows": "loopx.ledger:iter_rows",
    "goal_usage": "loopx.usage:usage",
    "remaining_quota": "loopx.usage:remaining",
    "GOAL_TABLES": "loopx.store.schema:GOAL_TABLES",
    "SCHEMA_VERSION": "loopx.store.schema:CURRENT_VERSION",
    "list_evidence_for": "loopx.evidence:list_for",
    "to_json": "loopx.model:to_json",
    # --- tamper evidence and strict data (docs/state-interaction-model.md) ---
    "Writer": "loopx.registry:Writer",
    "goal_rows": "loopx.ledger:snapshot",
    "verify_chain": "loopx.integrity:verify_chain",
    "verify_anchor": "loopx.integrity:verify_anchor",
    "chain_head": "loopx.integrity:head",
    "chain_acknowledged": "loopx.integrity:acknowledged",
    "rechain_goal": "loopx.integrity:rechain",
    "rebuild_state": "loopx.events.capability:rebuild_state",
    "put_rows": "loopx.events.capability:put_rows",
    "seal_goal": "loopx.integrity:seal",
    "INTEGRITY_CODES": "loopx.integrity:CODES",
    "json_problem": "loopx.jsonsafe:problem",
    "json_escaped": "loopx.jsonsafe:escaped",
    # --- domain operations, one transaction each ---
    "create_goal": "loopx.project_prompt:create",
    "add_todo": "loopx.todos:add",
    "settle_todo": "loopx.todos:settle",
    "request_gate": "loopx.gates:add",
    "add_action": "loopx.actions:add",
    "add_evidence": "loopx.evidence:record",
    "should_run": "loopx.quota:should_run",
    "decide_gate": "loopx.gates:decide",
    "add_reward": "loopx.rewards:add",
    "status_overview": "loopx.status:overview",
    "default_agent": "loopx.quota:default_agent",
    # --- capabilities ---
    "Capability": "loopx.capabilities:Capability",
    "get_state": "loopx.capabilities:get_state",
    "put_state": "loopx.capabilities:put_state",
    "drop_state": "loopx.capabilities:drop_state",
    "set_state": "loopx.capabilities:set_state",
    "delete_state": "loopx.capabilities:delete_state",
    "acting": "loopx.capabilities:acting",
    "get_capability": "loopx.capabilities:get",
    # --- validation and ids ---
    "new_id": "loopx.validate:new_id",
    "check_id": "loopx.validate:check_id",
    "check_text": "loopx.validate:check_text",
    "check_name": "loopx.validate:check_name",
    "now": "loopx.clock:now",
    # --- commands ---
    "LoopxCommand": "loopx.cli.output:LoopxCommand",
    "LoopxGroup": "loopx.cli.output:LoopxGroup",
    "emit": "loopx.cli.output:emit",
    "fail": "loopx.cli.output:fail",
    "wants_json": "loopx.cli.output:wants_json",
    "operation_option": "loopx.cli.output:operation_option",
    "actor": "loopx.cli.output:actor",
    "goal_option": "loopx.cli.ids:goal_option",
    "id_option": "loopx.cli.ids:id_option",
    "progress": "loopx.progress:progress",
    # --- processes ---
    "run_command": "loopx.process:run_command",
    "in_step": "loopx.process:in_step",
    # --- executors ---
    "Executor": "loopx.executors.protocol:Executor",
    "CheckedExecutor": "loopx.executors.protocol:CheckedExecutor",
    # --- testing ---
    "CliResult": "loopx.testing:CliResult",
    "capability_doc_problems": "loopx.testing:capability_doc_problems",
}

#: Names defined in this module itself.
_OWN = (
    "hookimpl",
    "open_registry",
    "registry_url",
    "writer_create_goal",
    "writer_add_todo",
    "writer_request_gate",
    "writer_add_action",
    "writer_add_evidence",
    "writer_todo_done",
    "writer_todo_reopen",
    "writer_criterion_met",
    "writer_close_goal",
    "abandon_expired_run",
    "record_loss",
    "escape_event_bodies",
    "list_evidence",
    "load_evidence",
    "set_output_format",
    "apply_state",
    "todo_changed",
    "goal_snapshot",
    "replay_goal",
    "reindex_storage",
    "check_plugin_imports",
    "ALLOWED_IMPORTS",
)

__all__ = sorted([*_LAZY, *_OWN])


def __getattr__(name: str):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'loopx.api' has no attribute {name!r}")
    import importlib

    module, attr = target.split(":")
    if name == "LoopxError":
        importlib.import_module("loopx.plugins")  # so that plugin-registered codes are known
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # resolve once
    return value


def __dir__():
    return __all__


# --- the registry ---------------------------------------------------------------------------


def registry_url(url: str | None = None) -> str | None:
    """The registry URL in force: ``url``, else ``--registry`` of the running command, else ``None``.

    ``None`` means "``LOOPX_REGISTRY``, else the default location" to :func:`open_registry`.
    """
    if url:
        return url
    import sys

    click = sys.modules.get("click")
    if click is not None:
        ctx = click.get_current_context(silent=True)
        if ctx is not None:
            from loopx.cli.output import REGISTRY_KEY

            return ctx.meta.get(REGISTRY_KEY)
    return None


def open_registry(url: str | None = None, *, readonly: bool = False):
    """Open the registry: ``url``, else the running command's ``--registry``, else
    ``LOOPX_REGISTRY``, else the default location. Works inside a click command and outside one
    (a script, a test, a hook). Use it as a context manager: ``with open_registry() as reg:``.
    """
    from loopx.registry import Registry

    # create=False: a registry file that does not exist is refused for reading
    # (registry_not_found) and created only by the first write.
    return Registry.open(registry_url(url), readonly=readonly, create=False)


def set_output_format(fmt: str, ctx=None) -> None:
    """Make the running command print ``"json"`` or ``"text"`` (for a command that takes its own
    ``--json`` flag instead of being a :class:`LoopxCommand`)."""
    import click

    from loopx.cli.output import FORMAT_KEY

    (ctx or click.get_current_context()).meta[FORMAT_KEY] = fmt


# --- domain operations inside one mutation ------------------------------------------------------
# Each takes the writer ``w`` of ``reg.mutate(actor, work, ...)`` and writes the core's own event
# with a body the core builds and checks: a plugin never hand-builds a core event. The writer's
# actor (fixed when the mutation began) is what the ledger records, and the event kind's roles
# decide whether it may.


def writer_create_goal(w, *, title: str, description: str = "", criteria=(), parallel_runs: bool = False,
                       goal_id: str | None = None) -> str:
    """Create a goal inside a mutation started without ``goal_id``; returns its id."""
    from loopx.validate import check_id, check_text, new_id

    title = check_text(title, what="title", limit="title")
    description = check_text(description, what="description", limit="description", required=False) or ""
    criteria = [check_text(c, what="criterion", limit="text") for c in criteria]
    goal_id = check_id("goal", goal_id) if goal_id else new_id("goal")
    w.emit("goal.created", {"title": title, "description": description, "criteria": criteria,
                            "parallel_runs": bool(parallel_runs)}, goal_id=goal_id)
    return goal_id


def writer_add_todo(w, *, text: str, priority: str = "P2", depends_on=(), todo_id: str | None = None) -> str:
    """Add a todo to the writer's goal; dependencies must exist. Returns the todo id."""
    from loopx import todos
    from loopx.validate import check_id, check_text, new_id

    text = check_text(text, what="todo text", limit="text")
    todos._check_priority(priority)
    deps = todos._check_deps(w.tx, w.goal_id, depends_on)
    todo_id = check_id("todo", todo_id) if todo_id else new_id("todo")
    w.emit("todo.added", {"todo_id": todo_id, "text": text, "priority": priority, "depends_on": deps})
    return todo_id


def writer_request_gate(w, *, title: str, scope: str = "other", blocks: str = "all",
                        gate_id: str | None = None) -> str:
    """Ask for a human gate on the writer's goal (``blocks``: ``all``, ``todo:ID``, ``action:NAME``)."""
    from loopx import gates
    from loopx.errors import LoopxError
    from loopx.validate import check_id, check_text, new_id

    title = check_text(title, what="gate title", limit="title")
    if scope not in gates.GATE_SCOPES:
        raise LoopxError("invalid_argument", f"gate scope must be one of {', '.join(gates.GATE_SCOPES)}")
    kind, target = gates.parse_blocks(blocks)
    blocks = "all" if kind == "all" else f"{kind}:{target}"
    gate_id = check_id("gate", gate_id) if gate_id else new_id("gate")
    w.emit("gate.added", {"gate_id": gate_id, "title": title, "scope": scope, "blocks": blocks})
    return gate_id


def writer_add_action(w, *, name: str, argv, gate_id: str | None = None, source: str | None = None) -> None:
    """Allow a command on the writer's goal under ``name`` (a user's mutation only)."""
    from loopx import actions
    from loopx.validate import check_name

    body = {"name": check_name(name, what="action name"), "argv": actions.check_argv(argv)}
    if gate_id is not None:
        body["gate_id"] = gate_id
    if source is not None:
        body["source"] = source
    w.emit("action.added", body)


def writer_add_evidence(w, *, kind: str, summary: str, run_id: str | None = None, data=None,
                        file_path: str | None = None, file_sha256: str | None = None,
                        evidence_id: str | None = None) -> str:
    """Append evidence to the writer's goal (bound to ``run_id`` if given, which must not be finished)."""
    from loopx import runs
    from loopx.validate import check_id, check_name, check_text, new_id

    check_name(kind, what="evidence kind")
    summary = check_text(summary, what="evidence summary", limit="summary")
    if run_id is not None:
        runs.check_recordable(w.tx, run_id, goal_id=w.goal_id)
    evidence_id = check_id("evidence", evidence_id) if evidence_id else new_id("evidence")
    body = {"evidence_id": evidence_id, "run_id": run_id, "kind": kind, "summary": summary}
    if data is not None:
        body["data"] = data
    if file_path is not None:
        body["file_path"], body["file_sha256"] = file_path, file_sha256
    w.emit("evidence.added", body)
    return evidence_id


def writer_todo_done(w, *, todo_id: str, note: str | None = None) -> None:
    """Mark an open todo of the writer's goal done (``todo_not_open`` otherwise)."""
    from loopx import todos
    from loopx.errors import LoopxError
    from loopx.validate import check_text

    todo = todos.load_todo(w.tx, w.goal_id, todo_id)
    if todo.status != "open":
        raise LoopxError("todo_not_open", f"todo {todo_id} is {todo.status}")
    note = check_text(note, what="note", limit="note", required=False)
    w.emit("todo.done", {"todo_id": todo_id, "note": note} if note else {"todo_id": todo_id})


def writer_todo_reopen(w, *, todo_id: str, note: str | None = None) -> None:
    """Open a done or blocked todo of the writer's goal again, unclaimed (an open one stays as it is)."""
    from loopx import todos
    from loopx.validate import check_text

    if todos.load_todo(w.tx, w.goal_id, todo_id).status == "open":
        return
    note = check_text(note, what="note", limit="note", required=False)
    w.emit("todo.reopened", {"todo_id": todo_id, "note": note} if note else {"todo_id": todo_id})


def writer_criterion_met(w, *, index: int, met: bool = True) -> None:
    """Mark criterion ``index`` (0-based) of the writer's goal met (a user, or a capability that did the work)."""
    from loopx.errors import LoopxError
    from loopx.project_prompt import load_goal

    if not isinstance(index, int) or not 0 <= index < len(load_goal(w.tx, w.goal_id).criteria):
        raise LoopxError("invalid_argument", f"goal {w.goal_id} has no criterion {index!r}")
    w.emit("goal.criterion_met", {"index": index, "met": bool(met)})


def writer_close_goal(w, *, reason: str | None = None) -> None:
    """Close the writer's goal (a user, or a capability that finished the goal's work)."""
    from loopx.validate import check_text

    reason = check_text(reason, what="reason", limit="note", required=False)
    w.emit("goal.closed", {"reason": reason} if reason else {})


def abandon_expired_run(w, run_id: str) -> None:
    """Ask the core to mark an open run past its expiry abandoned (what should-run would do).

    A core transition a capability may ask for: the ledger records the capability
    (``capability:NAME``) as the actor, and the core refuses unless the run is open and expired.
    """
    w.emit("run.abandoned", {"run_id": run_id, "by": w.actor})


def record_loss(w, *, lost=(), acknowledged=()) -> None:
    """Record on the writer's goal the event numbers a repair found lost, and the chain breaks it
    acknowledged (``capability.loss_recorded``; only a capability that declared repairs).

    Emit it first in the repair's mutation: a gap in the ledger is recorded loss, not fresh damage,
    when the event right after it names the lost numbers. The core's hash-chain check reads it
    whether or not the plugin that wrote it is still installed.
    """
    w.emit("capability.loss_recorded", {"lost": sorted(set(lost)), "acknowledged": sorted(set(acknowledged))})


def escape_event_bodies(w, seqs) -> list[dict]:
    """Make the stored bodies of the writer's goal's events ``seqs`` interoperable JSON again
    (NaN/Infinity, lone surrogates older versions let in; :func:`json_escaped`) and re-chain the
    goal from the first; returns ``[{"seq", "original_body"}]`` for the repair to keep as
    evidence. The one sanctioned rewrite of the ledger: only a capability that declared repairs.
    """
    import json

    from loopx import integrity, jsonsafe
    from loopx.capabilities import capability_of, load
    from loopx.errors import LoopxError

    name = capability_of(w.actor)
    cap = load().get(name) if name else None
    if cap is None or not cap.repairs:
        raise LoopxError("ownership_violation", f"{w.actor} declared no repairs, so it may not rewrite the ledger")
    originals = []
    for seq in sorted(set(seqs)):
        row = w.tx.one("SELECT id, body FROM events WHERE goal_id = ? AND seq = ?", (w.goal_id, seq))
        if row is None:
            continue
        fixed = json.dumps(jsonsafe.escaped(json.loads(row["body"])), sort_keys=True, separators=(",", ":"))
        w.tx.execute("UPDATE events SET body = ? WHERE id = ?", (fixed, row["id"]))
        originals.append({"seq": seq, "original_body": row["body"]})
    if originals:
        integrity.rechain(w.tx, w.goal_id, originals[0]["seq"])
    return originals


def apply_state(tx, event, namespace: str, values: dict) -> None:
    """For the ``apply(tx, event)`` of a plugin's own event kind: set state keys of the event's
    goal in ``namespace`` (what :func:`get_state` reads), using only the event. Replays run it too."""
    from loopx.events.capability import set_rows

    set_rows(tx, event, namespace, values)


def todo_changed(tx, event, todo_id: str) -> None:
    """For the ``apply(tx, event)`` of a repair kind that changed a todo row of the event's goal
    itself (its dependencies or status): bring the ready set's index up to date for that todo and
    the todos waiting on it (:mod:`loopx.todo_ready`). Replays run it too."""
    from loopx import todo_ready

    todo_ready.resync(tx, event.goal_id, todo_id)


# --- reading evidence -----------------------------------------------------------------------


def list_evidence(tx, goal_id: str, *, kind: str | None = None, run_id: str | None = None) -> list:
    """A goal's evidence (:class:`loopx.model.Evidence`), oldest first, optionally of one kind or run."""
    from loopx.evidence import evidence_from_row

    sql, params = "SELECT * FROM evidence WHERE goal_id = ?", [goal_id]
    if kind is not None:
        sql += " AND kind = ?"
        params.append(kind)
    if run_id is not None:
        sql += " AND run_id = ?"
        params.append(run_id)
    return [evidence_from_row(r) for r in tx.query(sql + " ORDER BY created_at, id", params)]


def load_evidence(tx, evidence_id: str):
    """One piece of evidence by id, or ``None``."""
    from loopx.evidence import evidence_from_row

    row = tx.one("SELECT * FROM evidence WHERE id = ?", (evidence_id,))
    return None if row is None else evidence_from_row(row)


# --- checking state against the ledger (for repair capabilities) -------------------------------


def goal_snapshot(tx, goal_id: str) -> dict[str, list[dict]]:
    """Every current-state row of one goal, per table (:data:`GOAL_TABLES`), comparable across backends."""
    from loopx import ledger

    return ledger.normalise(ledger.snapshot(tx, goal_id))


def replay_goal(goal_events) -> tuple[dict, object]:
    """``(snapshot, usage)`` that replaying ``goal_events`` into an empty scratch registry produces.

    The snapshot compares equal to :func:`goal_snapshot` of a healthy goal; ``usage`` is its
    :class:`~loopx.model.QuotaUsage` (``None`` for no events).
    """
    from loopx import ledger, usage

    found = ledger.replay(goal_events, lambda tx, goal_id: (ledger.snapshot(tx, goal_id),
                                                            usage.usage(tx, goal_id)))
    if found is None:
        return {}, None
    snap, used = found
    return ledger.normalise(snap), used


def reindex_storage(reg) -> None:
    """Rebuild every index of the registry's tables (cures index corruption)."""
    from loopx.store import schema

    def reindex(tx):
        if tx.dialect == "sqlite":
            tx.execute("REINDEX")
        else:
            for table in ("events", "operations", *schema.GOAL_TABLES):
                tx.execute(f"REINDEX TABLE {table}")

    reg.store.write(reindex)


# --- the import check -------------------------------------------------------------------------

#: The LoopX modules a plugin may import.
ALLOWED_IMPORTS = ("loopx", "loopx.api")


def check_plugin_imports(package_dir) -> list[str]:
    """Every import of a LoopX module other than ``loopx.api`` (and ``loopx`` for ``hookimpl``)
    in the Python files under ``package_dir``, as ``"path:line: what"``; empty when clean.

    Walks the syntax trees, so imports inside functions count too. Run it in your plugin's tests:
    ``assert loopx.api.check_plugin_imports(Path(my_plugin.__file__).parent) == []``. A check
    that could not look is not a pass: a path that does not exist, a directory without Python
    files, or a file that does not parse is a problem too.
    """
    import ast
    from pathlib import Path

    problems = []
    root = Path(package_dir)
    if not root.exists():
        return [f"{root}: does not exist (nothing was checked)"]
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    if root.is_file():
        root = root.parent
    if not files:
        return [f"{root}: holds no Python files (nothing was checked)"]
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
            problems.append(f"{path.relative_to(root.parent)}: cannot be read as Python ({exc}); not checked")
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [(node.module, [a.name for a in node.names])]
            else:
                continue
            for module, members in names:
                if module != "loopx" and not module.startswith("loopx."):
                    continue
                if module == "loopx.api":
                    continue
                if module == "loopx" and (members is None or set(members) <= {"hookimpl", "api", "__version__"}):
                    continue
                what = f"from {module} import {', '.join(members)}" if members else f"import {module}"
                problems.append(f"{path.relative_to(root.parent)}:{node.lineno}: {what}")
    return problems
