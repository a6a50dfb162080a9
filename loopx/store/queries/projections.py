"""The current-state tables the event appliers write (:mod:`loopx.ledger.events`), and the ready-set index
the todo events keep (:mod:`loopx.ledger.todo_ready`).

One module for all of them: every mutating command, ``quota should-run`` first of all, applies
events, so this module is on the start-up path anyway, and one module is cheaper to load than one
per table (docs/performance.md).
"""

from __future__ import annotations

# --- goals (loopx.ledger.events.goal, loopx.ledger.events.quota, loopx.ledger.events.applying) -----------------------


def insert_goal(tx, values: tuple) -> None:
    """A new goal's row: ``values`` are the 12 columns after its fixed status (see the statement)."""
    tx.execute(
        "INSERT INTO goals (id, created_seq, title, description, status, status_reason, criteria,"
        " limits, grants, parallel_runs, revision, created_at, updated_at, capabilities)"
        " VALUES (?, ?, ?, ?, 'open', NULL, ?, ?, ?, ?, ?, ?, ?, ?)",
        values,
    )


def goal_workspace_row(tx, goal_id: str) -> dict | None:
    """The goal's ``goal_workspaces`` row, if it has one."""
    return tx.one("SELECT * FROM goal_workspaces WHERE goal_id = ?", (goal_id,))


def delete_goal_workspace(tx, goal_id: str) -> None:
    """Drop the goal's ``goal_workspaces`` row (before it is written anew)."""
    tx.execute("DELETE FROM goal_workspaces WHERE goal_id = ?", (goal_id,))


def insert_goal_workspace(tx, goal_id: str, fields: tuple, at: str) -> None:
    """The goal's ``goal_workspaces`` row: ``fields`` are project, root, path, branch, base, kind."""
    tx.execute("INSERT INTO goal_workspaces (goal_id, project, root, path, branch, base, kind, updated_at)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (goal_id, *fields, at))


def set_goal_capabilities(tx, goal_id: str, capabilities: str) -> None:
    """The capabilities the goal uses (JSON list)."""
    tx.execute("UPDATE goals SET capabilities = ? WHERE id = ?", (capabilities, goal_id))


def set_goal_status(tx, goal_id: str, status: str, reason: str | None) -> None:
    """The goal's status and why."""
    tx.execute(
        "UPDATE goals SET status = ?, status_reason = ? WHERE id = ?",
        (status, reason, goal_id),
    )


def goal_criteria(tx, goal_id: str) -> dict | None:
    """The goal's ``criteria`` (JSON text) as a row."""
    return tx.one("SELECT criteria FROM goals WHERE id = ?", (goal_id,))


def set_goal_criteria(tx, goal_id: str, criteria: str) -> None:
    """The goal's success criteria (JSON list)."""
    tx.execute("UPDATE goals SET criteria = ? WHERE id = ?", (criteria, goal_id))


def set_goal_limits(tx, goal_id: str, limits: str) -> None:
    """The goal's quota limits (JSON object)."""
    tx.execute("UPDATE goals SET limits = ? WHERE id = ?", (limits, goal_id))


def goal_grants(tx, goal_id: str) -> dict | None:
    """The goal's ``grants`` (JSON text) as a row."""
    return tx.one("SELECT grants FROM goals WHERE id = ?", (goal_id,))


def set_goal_grants(tx, goal_id: str, grants: str) -> None:
    """The goal's quota grants (JSON object)."""
    tx.execute("UPDATE goals SET grants = ? WHERE id = ?", (grants, goal_id))


def goal_revised(tx, goal_id: str, seq: int, at: str) -> None:
    """The goal's revision and time move to the event just applied."""
    tx.execute(
        "UPDATE goals SET revision = ?, updated_at = ? WHERE id = ?",
        (seq, at, goal_id),
    )


# --- actions, gates, evidence, rewards, capability state -----------------------------------------


def delete_action(tx, goal_id: str, name: str) -> None:
    """Drop the goal's action ``name``."""
    tx.execute("DELETE FROM actions WHERE goal_id = ? AND name = ?", (goal_id, name))


def insert_action(tx, goal_id: str, name: str, argv: str, source: str, at: str, gate_id: str | None) -> None:
    """An allowed action of the goal (``argv``: JSON list)."""
    tx.execute(
        "INSERT INTO actions (goal_id, name, argv, source, created_at, gate_id) VALUES (?, ?, ?, ?, ?, ?)",
        (goal_id, name, argv, source, at, gate_id),
    )


def insert_gate(tx, gate_id: str, goal_id: str, title: str, scope: str, blocks: str, requested_by: str,
                at: str) -> None:
    """A pending gate."""
    tx.execute(
        "INSERT INTO gates (id, goal_id, title, scope, blocks, status, requested_by, created_at,"
        " decided_by, decided_at, comment) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, NULL, NULL, NULL)",
        (gate_id, goal_id, title, scope, blocks, requested_by, at),
    )


def decide_gate(tx, gate_id: str, goal_id: str, status: str, by: str, at: str, comment: str | None) -> None:
    """A gate approved or rejected."""
    tx.execute(
        "UPDATE gates SET status = ?, decided_by = ?, decided_at = ?, comment = ? WHERE id = ? AND goal_id = ?",
        (status, by, at, comment, gate_id, goal_id),
    )


def reopen_gate(tx, gate_id: str, goal_id: str, comment: str | None) -> None:
    """A decided gate pending again."""
    tx.execute(
        "UPDATE gates SET status = 'pending', decided_by = NULL, decided_at = NULL, comment = ?"
        " WHERE id = ? AND goal_id = ?",
        (comment, gate_id, goal_id),
    )


def insert_evidence(tx, values: tuple) -> None:
    """An evidence row: id, goal_id, run_id, kind, summary, actor, created_at, data, file_path, file_sha256."""
    tx.execute(
        "INSERT INTO evidence (id, goal_id, run_id, kind, summary, actor, created_at, data, file_path, file_sha256)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        values,
    )


def insert_reward(tx, values: tuple) -> None:
    """A reward row: id, goal_id, run_id, score, comment, author, created_at."""
    tx.execute(
        "INSERT INTO rewards (id, goal_id, run_id, score, comment, author, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        values,
    )


def delete_capability_state(tx, goal_id: str, namespace: str, key: str) -> None:
    """Drop one key of a capability's state of the goal."""
    tx.execute("DELETE FROM capability_state WHERE goal_id = ? AND namespace = ? AND key = ?",
               (goal_id, namespace, key))


def insert_capability_state(tx, goal_id: str, namespace: str, key: str, value: str, at: str) -> None:
    """One key of a capability's state of the goal (``value``: JSON text)."""
    tx.execute("INSERT INTO capability_state (goal_id, namespace, key, value, updated_at) VALUES (?, ?, ?, ?, ?)",
               (goal_id, namespace, key, value, at))


# --- runs and contracts (loopx.ledger.events.run) --------------------------------------------------------


def insert_contract(tx, values: tuple) -> None:
    """A contract row: id, goal_id, run_id, fingerprint, issued_at, expires_at, document."""
    tx.execute(
        "INSERT INTO contracts (id, goal_id, run_id, fingerprint, issued_at, expires_at, document)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        values,
    )


def insert_open_run(tx, values: tuple) -> None:
    """An open run's row: id, goal_id, agent, contract_id, fingerprint, opened_at, expires_at."""
    tx.execute(
        "INSERT INTO runs (id, goal_id, agent, status, contract_id, fingerprint, opened_at, expires_at,"
        " finished_at, outcome, tokens, cost, handoff) VALUES (?, ?, ?, 'open', ?, ?, ?, ?, NULL, NULL, 0, 0, NULL)",
        values,
    )


def renew_run(tx, run_id: str, contract_id: str, fingerprint: str, expires_at: str) -> None:
    """An open run's new contract and expiry."""
    tx.execute(
        "UPDATE runs SET contract_id = ?, fingerprint = ?, expires_at = ? WHERE id = ?",
        (contract_id, fingerprint, expires_at, run_id),
    )


def finish_run(tx, run_id: str, at: str, outcome: str, tokens, cost, handoff) -> None:
    """A run finished at ``at`` with what it reported."""
    tx.execute(
        "UPDATE runs SET status = 'finished', finished_at = ?, outcome = ?, tokens = ?, cost = ?, handoff = ?"
        " WHERE id = ?",
        (at, outcome, tokens, cost, handoff, run_id),
    )


def run_status(tx, run_id, goal_id: str) -> dict | None:
    """The run's status and expiry, if the goal has it."""
    return tx.one("SELECT status, expires_at FROM runs WHERE id = ? AND goal_id = ?", (run_id, goal_id))


def abandon_run_now(tx, run_id: str, at: str) -> None:
    """An open run abandoned at ``at`` (or at its expiry, if that came first)."""
    tx.execute("UPDATE runs SET status = 'abandoned', finished_at = CASE WHEN expires_at < ? THEN expires_at"
               " ELSE ? END WHERE id = ?", (at, at, run_id))


def abandon_run_at_expiry(tx, run_id: str) -> None:
    """An open run abandoned at its expiry."""
    tx.execute(
        "UPDATE runs SET status = 'abandoned', finished_at = expires_at WHERE id = ?", (run_id,)
    )


_CHARGED = "SELECT goal_id, opened_at, expires_at, finished_at, tokens, cost FROM runs WHERE id = ?"


def run_charges(tx, run_id: str) -> dict | None:
    """What the run is charged (its goal, times, tokens and cost), if it exists."""
    return tx.one(_CHARGED, (run_id,))


# --- todos and the ready set (loopx.ledger.events.todo, loopx.ledger.todo_ready) --------------------------------


def insert_todo(tx, values: tuple) -> None:
    """An open todo's row: id, goal_id, created_seq, text, priority, depends_on, created_at, updated_at."""
    tx.execute(
        "INSERT INTO todos (id, goal_id, created_seq, text, priority, depends_on, status, note,"
        " claim_agent, claim_run_id, claim_expires_at, epoch, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, 'open', NULL, NULL, NULL, NULL, 0, ?, ?)",
        values,
    )


def todo_depends_on(tx, todo_id: str, goal_id: str) -> dict | None:
    """The todo's ``depends_on`` (JSON text) as a row."""
    return tx.one("SELECT depends_on FROM todos WHERE id = ? AND goal_id = ?", (todo_id, goal_id))


def set_todo_depends_on(tx, todo_id: str, goal_id: str, deps: str, at: str) -> None:
    """The todo's dependencies (JSON list)."""
    tx.execute(
        "UPDATE todos SET depends_on = ?, updated_at = ? WHERE id = ? AND goal_id = ?",
        (deps, at, todo_id, goal_id),
    )


def claim_todo(tx, todo_id: str, goal_id: str, agent: str, run_id, expires_at: str, epoch: int, at: str) -> None:
    """The todo's holder and its lease."""
    tx.execute(
        "UPDATE todos SET claim_agent = ?, claim_run_id = ?, claim_expires_at = ?, epoch = ?, updated_at = ?"
        " WHERE id = ? AND goal_id = ?",
        (agent, run_id, expires_at, epoch, at, todo_id, goal_id),
    )


def settle_todo(tx, todo_id: str, goal_id: str, status: str, note, at: str) -> None:
    """The todo's new status and note; its claim released."""
    tx.execute(
        "UPDATE todos SET status = ?, note = ?, claim_agent = NULL, claim_run_id = NULL,"
        " claim_expires_at = NULL, updated_at = ? WHERE id = ? AND goal_id = ?",
        (status, note, at, todo_id, goal_id),
    )


def open_todos_naming(tx, goal_id: str, pattern: str) -> list[dict]:
    """The open todos whose ``depends_on`` text is ``LIKE pattern`` (id, depends_on)."""
    return tx.query("SELECT id, depends_on FROM todos WHERE goal_id = ? AND status = 'open'"
                    " AND depends_on LIKE ?", (goal_id, pattern))


def count_done(tx, goal_id: str, todo_ids: list[str]) -> int:
    """How many of ``todo_ids`` (not empty) are done."""
    marks = ", ".join("?" for _ in todo_ids)
    done = tx.one(f"SELECT COUNT(*) AS n FROM todos WHERE goal_id = ? AND status = 'done' AND id IN ({marks})",
                  (goal_id, *todo_ids))
    return int(done["n"])


def todo_readiness(tx, todo_id: str, goal_id: str) -> dict | None:
    """What the ready set needs of a todo: status, priority, created_seq, depends_on."""
    return tx.one("SELECT status, priority, created_seq, depends_on FROM todos WHERE id = ? AND goal_id = ?",
                  (todo_id, goal_id))


def drop_ready(tx, goal_id: str, todo_id: str) -> None:
    """Take the todo out of the ready set."""
    tx.execute("DELETE FROM todo_ready WHERE goal_id = ? AND todo_id = ?", (goal_id, todo_id))


def insert_ready(tx, goal_id: str, todo_id: str, priority: str, created_seq: int) -> None:
    """Put the todo in the ready set."""
    tx.execute("INSERT INTO todo_ready (goal_id, todo_id, priority, created_seq) VALUES (?, ?, ?, ?)",
               (goal_id, todo_id, priority, created_seq))


def add_dep_edge(tx, goal_id: str, todo_id: str, dep: str) -> None:
    """The edge ``todo_id`` -> ``dep`` (kept if it is there already)."""
    tx.execute("INSERT INTO todo_deps (goal_id, todo_id, dep_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
               (goal_id, todo_id, dep))


def drop_dep_edges(tx, goal_id: str, todo_id: str) -> None:
    """Drop the todo's dependency edges."""
    tx.execute("DELETE FROM todo_deps WHERE goal_id = ? AND todo_id = ?", (goal_id, todo_id))


def insert_dep_edge(tx, goal_id: str, todo_id: str, dep: str) -> None:
    """The edge ``todo_id`` -> ``dep``."""
    tx.execute("INSERT INTO todo_deps (goal_id, todo_id, dep_id) VALUES (?, ?, ?)", (goal_id, todo_id, dep))


def waiting_on(tx, goal_id: str, todo_id: str) -> list[dict]:
    """The todos (``todo_id`` rows) that depend on ``todo_id``."""
    return tx.query("SELECT todo_id FROM todo_deps WHERE goal_id = ? AND dep_id = ?", (goal_id, todo_id))


def free_sql(alias: str, agent: str | None) -> str:
    """The one definition of "no claim keeps this todo from ``agent``", as an SQL condition on
    the ``todos`` row ``alias``; its parameters are :func:`free_params`.

    A claim holds a todo while its lease is valid *and*, for a claim taken under a run, while
    that run is open and not expired: a claim left by a run that failed, finished or expired
    holds nothing (whoever asks next is offered the todo). The agent's own claims never hold it
    back from that agent.
    """
    own = "" if agent is None else f" OR {alias}.claim_agent = ?"
    return (f"({alias}.claim_agent IS NULL OR {alias}.claim_expires_at IS NULL OR {alias}.claim_expires_at <= ?"
            f" OR ({alias}.claim_run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM runs claim_run"
            f" WHERE claim_run.id = {alias}.claim_run_id AND claim_run.status = 'open'"
            f" AND claim_run.expires_at > ?)){own})")


def free_params(agent: str | None, now: str) -> tuple:
    """The parameters of :func:`free_sql`, in order."""
    return (now, now) if agent is None else (now, now, agent)


def claim_held(tx, goal_id: str, todo_id: str, agent: str | None, now: str) -> bool:
    """Whether a claim keeps ``todo_id`` from ``agent`` at ``now`` (see :func:`free_sql`)."""
    row = tx.one(f"SELECT 1 AS held FROM todos t WHERE t.goal_id = ? AND t.id = ? AND NOT {free_sql('t', agent)}",
                 (goal_id, todo_id, *free_params(agent, now)))
    return row is not None


def ready_page(tx, goal_id: str, agent: str | None, now: str, limit: int | None) -> list[dict]:
    """The todos rows of the ready set free for ``agent`` at ``now``, in its order (priority, then
    creation); the first ``limit`` of them (``None``: all)."""
    sql = (f"SELECT t.* FROM todo_ready r JOIN todos t ON t.id = r.todo_id"
           f" WHERE r.goal_id = ? AND {free_sql('t', agent)} ORDER BY r.priority, r.created_seq")
    params: tuple = (goal_id, *free_params(agent, now))
    if limit is not None:
        sql += " LIMIT ?"
        params += (limit,)
    return tx.query(sql, params)


def has_todo(tx, goal_id: str) -> bool:
    """Whether the goal has any todo at all (one index probe)."""
    return tx.one("SELECT 1 AS x FROM todos WHERE goal_id = ? LIMIT 1", (goal_id,)) is not None


def clear_ready_index(tx) -> None:
    """Empty ``todo_deps`` and ``todo_ready`` (before they are built anew)."""
    tx.execute("DELETE FROM todo_deps")
    tx.execute("DELETE FROM todo_ready")


def every_todo_readiness(tx) -> list[dict]:
    """Every todo's id, goal_id, status, priority, created_seq and depends_on."""
    return tx.query("SELECT id, goal_id, status, priority, created_seq, depends_on FROM todos")


def insert_dep_edges(tx, edges: list[tuple]) -> None:
    """Many ``(goal_id, todo_id, dep_id)`` edges."""
    tx.executemany("INSERT INTO todo_deps (goal_id, todo_id, dep_id) VALUES (?, ?, ?)", edges)


def insert_ready_rows(tx, rows: list[tuple]) -> None:
    """Many ``(goal_id, todo_id, priority, created_seq)`` ready-set rows."""
    tx.executemany("INSERT INTO todo_ready (goal_id, todo_id, priority, created_seq) VALUES (?, ?, ?, ?)", rows)
