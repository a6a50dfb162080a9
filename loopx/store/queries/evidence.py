"""Evidence as :mod:`loopx.domain.evidence`, :mod:`loopx.ledger.artifacts` and :mod:`loopx.turn.governed` read it (the
core's step evidence under a run is :mod:`.runs`')."""

from __future__ import annotations


def evidence_row(tx, evidence_id: str) -> dict | None:
    """The evidence row ``evidence_id``."""
    return tx.one("SELECT * FROM evidence WHERE id = ?", (evidence_id,))


def goal_evidence(tx, goal_id: str, kind: str | None, run_id: str | None) -> list[dict]:
    """The goal's evidence rows, oldest first, optionally of one ``kind`` or run."""
    sql, params = "SELECT * FROM evidence WHERE goal_id = ?", [goal_id]
    if kind is not None:
        sql += " AND kind = ?"
        params.append(kind)
    if run_id is not None:
        sql += " AND run_id = ?"
        params.append(run_id)
    return tx.query(sql + " ORDER BY created_at, id", params)


def listing_cursor(tx, after: str, filters: dict) -> dict | None:
    """``created_at, id`` of the evidence ``after``, if the listing holds it (``filters``:
    ``{column: value}`` of ``run_id``, ``goal_id``, ``kind``, in the order given)."""
    where, params = [f"{column} = ?" for column in filters], list(filters.values())
    return tx.one(f"SELECT created_at, id FROM evidence WHERE id = ? AND {' AND '.join(where)}",
                  (after, *params))


def listing_page(tx, filters: dict, cursor: tuple | None, size: int) -> list[dict]:
    """A page of ``size`` evidence rows of the listing (``filters`` as :func:`listing_cursor`), in
    its order (created_at, id), after ``cursor`` (``(created_at, id)``, if given)."""
    page_where, page_params = [f"{column} = ?" for column in filters], list(filters.values())
    if cursor is not None:
        # Keyset paging in the listing's order (created_at, id): an index range per page.
        page_where.append("(created_at > ? OR (created_at = ? AND id > ?))")
        page_params += [cursor[0], cursor[0], cursor[1]]
    return tx.query(f"SELECT * FROM evidence WHERE {' AND '.join(page_where)} ORDER BY created_at, id"
                    " LIMIT ?", [*page_params, size])


def goal_files(tx, goal_id: str) -> list[dict]:
    """The goal's evidence that recorded a file (id, kind, summary, data, file_path, file_sha256,
    created_at), newest first."""
    return tx.query("SELECT id, kind, summary, data, file_path, file_sha256, created_at FROM evidence"
                    " WHERE goal_id = ? AND file_path IS NOT NULL AND file_sha256 IS NOT NULL"
                    " ORDER BY created_at DESC, id DESC", (goal_id,))


def run_evidence_brief(tx, run_id: str) -> list[dict]:
    """The run's evidence (id, kind, summary), oldest first."""
    return tx.query("SELECT id, kind, summary FROM evidence WHERE run_id = ? ORDER BY created_at, id", (run_id,))
