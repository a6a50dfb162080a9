"""Evidence: append-only observations, bound to the run they were made in.

An executor records evidence only under a run of its goal; users and capabilities may also
record evidence on a goal without a run. Recording is never refused because a contract went
stale or a lease ran out: only a run that was already *finished* takes no more evidence.
Files are kept by reference: their path and the sha256 of their bytes at recording time.
"""

from __future__ import annotations

import json

from loopx.ledger import log as ledger
from loopx.values.errors import LoopxError
from loopx.model import Evidence, to_json
from loopx.ledger.registry import Registry, check_actor
from loopx.store.queries import evidence as q
from loopx.values.validate import check_id, check_name, check_number, check_text, new_id

#: What ``--data`` on the command line may hold (``invalid_argument``); the registry's cap on a
#: stored payload (``loopx.ledger.caps``, ``evidence_too_large``, 1 MiB unless a user changed it) holds
#: for every writer, plugins included.
MAX_DATA_BYTES = 64 * 1024
MAX_LIST_LIMIT = 1000


def evidence_from_row(row: dict) -> Evidence:
    """An :class:`Evidence` from an ``evidence`` row."""
    return Evidence(
        id=row["id"], goal_id=row["goal_id"], run_id=row["run_id"], kind=row["kind"], summary=row["summary"],
        actor=row["actor"], created_at=row["created_at"],
        data=None if row["data"] is None else json.loads(row["data"]),
        file_path=row["file_path"], file_sha256=row["file_sha256"],
    )


def parse_data(text: str | None):
    """``--data`` JSON text -> a JSON object or list (64 KiB at most), parsed strictly
    (see :mod:`loopx.values.jsonsafe`: no NaN/Infinity, no lone surrogates, bounded depth)."""
    from loopx.values import jsonsafe

    if text is None:
        return None
    data = jsonsafe.loads(text, what="--data", max_bytes=MAX_DATA_BYTES)
    if not isinstance(data, (dict, list)):
        raise LoopxError("invalid_argument", "--data must be a JSON object or array")
    return data


def hash_file(path: str) -> tuple[str, str]:
    """``(absolute path, "sha256:...")`` of a readable regular file, hashed from the descriptor it
    was opened as. On a step's behalf it must lie beneath the step's roots, reached with no
    symbolic link, and have one link (:mod:`loopx.sandbox.safe_open`): what the broker checked is what is
    hashed, whatever the agent swaps in meanwhile."""
    from loopx.sandbox import safe_open

    try:
        return safe_open.hash_file(path)
    except LoopxError as exc:
        raise LoopxError(exc.code, f"--file: {exc.message}") from None
    except OSError as exc:
        raise LoopxError("invalid_argument", f"--file: cannot read {path}: {exc.strerror}") from None


def _check_data(data) -> None:
    if data is not None and len(json.dumps(data)) > MAX_DATA_BYTES:
        raise LoopxError("invalid_argument", f"evidence data is larger than {MAX_DATA_BYTES} bytes")


def record_in(w, *, kind: str, summary: str, run_id: str | None = None, data=None, file_path: str | None = None,
              file_sha256: str | None = None, evidence_id: str | None = None) -> str:
    """Inside a mutation: append evidence to the writer's goal (bound to ``run_id`` if given, which
    must not be finished; an executor must name one); returns its id. :func:`record` is this in a
    transaction of its own (and hashes a file for you)."""
    return _record_in(w, kind=kind, summary=summary, run_id=run_id, data=data, file_path=file_path,
                      file_sha256=file_sha256, evidence_id=evidence_id)


def _record_in(w, *, kind, summary, run_id=None, data=None, file_path=None, file_sha256=None, evidence_id=None,
               run=None) -> str:
    # ``run``: the run's row as this transaction already read it (record's goal_of).
    from loopx.domain import runs

    check_name(kind, what="--kind")
    summary = check_text(summary, what="--summary", limit="summary")
    # No 64 KiB limit on data here (that is record's, for --data): a capability's evidence is held
    # to the evidence cap (loopx.ledger.caps, 1 MiB unless a user changed it) when the event is written.
    if run_id is None:
        if ledger.role(w.actor) == ledger.EXECUTOR:
            raise LoopxError("run_not_open", "an executor records evidence only inside a run: pass --run-id")
    else:
        runs.check_recordable(w.tx, check_id("run", run_id), goal_id=w.goal_id, run=run)
    evidence_id = check_id("evidence", evidence_id) if evidence_id else new_id("evidence")
    body = {"evidence_id": evidence_id, "run_id": run_id, "kind": kind, "summary": summary}
    if data is not None:
        body["data"] = data
    if file_path is not None:
        body["file_path"], body["file_sha256"] = file_path, file_sha256
    w.emit("evidence.added", body)
    return evidence_id


def record(reg: Registry, actor: str, *, kind: str, summary: str, run_id: str | None = None,
           goal_id: str | None = None, data=None, file: str | None = None, agent: str | None = None,
           operation_id: str | None = None) -> dict:
    """Append one piece of evidence; returns it.

    With ``run_id`` the evidence belongs to that run (and its goal); an executor must name a
    run. Refused with ``run_not_open`` only when the run was already finished, and with
    ``run_not_yours`` when ``agent`` names someone other than the run's agent.
    """
    from loopx.domain import runs

    check_actor(actor)
    if actor == "dashboard":
        raise LoopxError("actor_forbidden", "the dashboard never writes")
    check_name(kind, what="--kind")
    summary = check_text(summary, what="--summary", limit="summary")
    if run_id is not None:
        check_id("run", run_id)
    if goal_id is not None:
        check_id("goal", goal_id)
    if run_id is None:
        if goal_id is None:
            raise LoopxError("invalid_argument", "say what the evidence is about: --run-id R (or --goal-id G)")
        if ledger.role(actor) == ledger.EXECUTOR:
            raise LoopxError("run_not_open", "an executor records evidence only inside a run: pass --run-id")
    file_path = file_sha = None
    if file is not None:
        file_path, file_sha = hash_file(file)
    goal_of, found = None, {}
    if run_id is not None:
        named = goal_id

        def goal_of(tx):
            # Found in the write transaction (reg.mutate), not in a read of its own.
            found["tx"], found["run"] = tx, runs.check_owner(runs.load_run(tx, run_id), agent)
            owner = found["run"].goal_id
            if named is not None and named != owner:
                raise LoopxError("run_not_found", f"run {run_id} belongs to goal {owner}, not {named}")
            return owner
    evidence_id = new_id("evidence")
    body = {"evidence_id": evidence_id, "run_id": run_id, "kind": kind, "summary": summary}
    if data is not None:
        body["data"] = data
    if file_path is not None:
        body["file_path"], body["file_sha256"] = file_path, file_sha

    _check_data(data)

    def work(w):
        # The run's row goal_of read in this same transaction, which has written nothing since.
        run = found.get("run") if found.get("tx") is w.tx and not w.events else None
        _record_in(w, kind=kind, summary=summary, run_id=run_id, data=data, file_path=file_path,
                   file_sha256=file_sha, evidence_id=evidence_id, run=run)
        row = q.evidence_row(w.tx, evidence_id)
        return to_json(evidence_from_row(row))

    request = {k: v for k, v in body.items() if k != "evidence_id"}
    return reg.mutate(actor, work, goal_id=None if goal_of else goal_id, goal_of=goal_of, operation_id=operation_id,
                      allow_closed=run_id is not None, request={"op": "evidence.add", "goal": goal_id, **request})


def of_goal(tx, goal_id: str, *, kind: str | None = None, run_id: str | None = None) -> list:
    """A goal's evidence (:class:`loopx.model.Evidence`), oldest first, optionally of one kind or run."""
    return [evidence_from_row(r) for r in q.goal_evidence(tx, goal_id, kind, run_id)]


def load_evidence(tx, evidence_id: str) -> Evidence | None:
    """One piece of evidence by id, or ``None``."""
    row = q.evidence_row(tx, evidence_id)
    return None if row is None else evidence_from_row(row)


def list_for(reg: Registry, *, goal_id: str | None = None, run_id: str | None = None, kind: str | None = None,
             limit: int = 100, after: str | None = None) -> list[dict]:
    """Evidence of a goal or of one run, oldest first, optionally of one kind (at most
    :data:`MAX_LIST_LIMIT`; :func:`list_stream` reads any number)."""
    limit = check_number(limit, what="--limit", minimum=1, maximum=MAX_LIST_LIMIT, integer=True)
    return list(list_stream(reg, goal_id=goal_id, run_id=run_id, kind=kind, limit=limit, after=after))


def list_stream(reg: Registry, *, goal_id: str | None = None, run_id: str | None = None, kind: str | None = None,
                limit: int | None = 100, after: str | None = None, batch: int = 500):
    """:func:`list_for` as a stream read in pages (bounded memory), after the evidence ``after``
    (a cursor: the id of the last item seen). Checks its arguments before returning."""
    import sys

    from loopx.domain import runs
    from loopx.domain.goals import load_goal

    if limit is not None:
        limit = check_number(limit, what="--limit", minimum=1, integer=True)
    if kind is not None:
        check_name(kind, what="--kind")
    if after is not None:
        check_id("evidence", after)
    filters: dict = {}  # {column: value} the listing keeps, in order
    reading = reg.read()
    tx = reading.__enter__()
    try:
        if run_id is not None:
            run = runs.load_run(tx, run_id)
            if goal_id is not None and check_id("goal", goal_id) != run.goal_id:
                raise LoopxError("run_not_found", f"run {run_id} belongs to goal {run.goal_id}, not {goal_id}")
            filters["run_id"] = run_id
        elif goal_id is not None:
            load_goal(tx, goal_id)
            filters["goal_id"] = goal_id
        else:
            raise LoopxError("invalid_argument", "name --goal-id or --run-id")
        if kind is not None:
            filters["kind"] = kind
        cursor = None
        if after is not None:
            cursor = q.listing_cursor(tx, after, filters)
            if cursor is None:
                raise LoopxError("not_found", f"--after {after}: no such evidence in this listing")
            cursor = (cursor["created_at"], cursor["id"])
    except BaseException:
        reading.__exit__(*sys.exc_info())
        raise

    def stream(cursor=cursor):
        try:
            left = limit
            while left is None or left > 0:
                size = batch if left is None else min(batch, left)
                rows = q.listing_page(tx, filters, cursor, size)
                for r in rows:
                    yield to_json(evidence_from_row(r))
                if len(rows) < size:
                    return
                cursor = (rows[-1]["created_at"], rows[-1]["id"])
                if left is not None:
                    left -= len(rows)
        finally:
            reading.__exit__(None, None, None)

    return stream()
