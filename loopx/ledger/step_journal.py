"""A step that ran is never lost: a small journal beside the registry, replayed on the next write.

``loopx exec`` writes an *intent* (run, step, action, argv) here **before** it runs a step, and
holds a lock on it while the step runs and its result is recorded; once the result is in the
registry the intent is deleted. If recording fails (the disk is full, the process is killed)
the intent stays, unlocked, and the next write to the registry - from any process, the moment
there is space again - records the step and deletes the intent. An intent that cannot be
written means the step is not run (``disk_full``): a side effect nobody could record never happens.

**A full disk loses no result.** Each intent file is written with room reserved beyond it
(:data:`RESERVE`, allocated while there is space): when the step's result cannot go into the
registry (``disk_full``), :meth:`Intent.keep` writes it over that room - no new block is
needed - and the replay records the step's real result (``recorded_late`` true). Only a process
killed before it could keep the result leaves ``ran, result unknown`` (evidence of kind
``command`` by the core, ``exit_code`` null, ``result_unknown`` true: it counts as failed).
A turn reserves a *finish* entry the same way (:func:`intend_finish`): when ``run finish``
meets a full disk the outcome and hand-off are kept, and :func:`replay_finishes` (the next
turn, or worker round) closes the run with them - after its steps' results, never ``abandoned``.

The journal is a directory of one small file per intent: ``<registry>.journal/`` beside an
SQLite registry, ``journal-<hash of the URL>/`` in the user data directory for PostgreSQL.
Platforms without ``fcntl`` (Windows) keep no journal.
"""

from __future__ import annotations

import json
import os
from hashlib import sha256
from pathlib import Path

_replaying: set = set()  # registries being replayed in this thread of work (no recursion)
#: Room reserved in each intent file for the result (evidence data is at most 64 KiB).
RESERVE = 96 * 1024


def directory(store) -> Path | None:
    """Where ``store``'s journal lives (None for an in-memory registry)."""
    path = store.path  # a file (loopx.store.base.Store): its journal beside it; None: a server's
    if path is not None:
        if str(path) == ":memory:":
            return None
        return Path(f"{path}.journal")
    from loopx.values import userdirs
    from loopx.store import display_url

    key = sha256(display_url(store.url).encode()).hexdigest()[:16]
    return Path(userdirs.data_dir()) / f"journal-{key}"


class Intent:
    """One step about to run: locked while its process lives; :meth:`done` once recorded."""

    def __init__(self, path: Path | None, fd: int | None, entry: dict | None = None):
        self.path, self.fd, self.entry = path, fd, entry

    def keep(self, **result) -> bool:
        """Keep what could not be recorded (``result``: the evidence's ``data`` and ``summary``, or
        a finish's fields) in the room reserved in this intent's file; no new disk block is
        needed. Returns whether it was kept; the entry is replayed once there is space."""
        if self.fd is None or self.entry is None:
            return False
        data = result.get("data")
        blob = json.dumps({**self.entry, "result": result}).encode()
        while len(blob) > RESERVE and isinstance(data, dict) and data.get("output_tail"):
            data["output_tail"] = data["output_tail"][len(data["output_tail"]) // 2:]  # the end matters most
            blob = json.dumps({**self.entry, "result": result}).encode()
        if len(blob) > RESERVE:
            return False
        try:
            os.pwrite(self.fd, blob.ljust(RESERVE, b"\0"), 0)
            os.fsync(self.fd)
        except OSError:
            return False
        return True

    def done(self) -> None:
        """The result is recorded: forget the step."""
        if self.path is not None:
            try:
                self.path.unlink()
            except OSError:
                pass
        self.release()

    def release(self) -> None:
        """Let go of the lock (the intent stays if :meth:`done` was not called)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def intend(reg, *, run, step: str | None, action: str | None, argv: list[str], by: str) -> Intent:
    """Write and lock the intent to run ``step`` of ``run``; ``disk_full`` if it cannot be written."""
    from loopx.values import clock

    entry = {"run_id": run.id, "goal_id": run.goal_id, "step": step, "action": action, "argv": argv, "by": by,
             "at": clock.now()}
    return _write(reg, entry, f"{run.id}-")


def intend_finish(reg, *, run_id: str, goal_id: str) -> Intent:
    """Reserve room to keep the turn's finish of ``run_id`` should the disk be full when it ends
    (:meth:`Intent.keep`); an intent without room (no journal, no space now) keeps nothing."""
    from loopx.values import clock
    from loopx.values.errors import LoopxError

    try:
        # "~": sorted after the steps' intents of the run, so its results are recorded first.
        return _write(reg, {"kind": "finish", "run_id": run_id, "goal_id": goal_id, "at": clock.now()},
                      f"~finish-{run_id}-")
    except (LoopxError, OSError):
        return Intent(None, None)


def _write(reg, entry: dict, prefix: str) -> Intent:
    try:
        import fcntl
    except ImportError:
        return Intent(None, None)
    folder = directory(reg.store)
    if folder is None:
        return Intent(None, None)
    import secrets

    from loopx.store.space import NO_SPACE, disk_full

    path = folder / f"{prefix}{secrets.token_hex(6)}.json"
    fd = None
    try:
        # parents: a PostgreSQL registry's journal is in the user data dir, which need not exist
        # yet (nothing else writes there when the registry is not a local file).
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = json.dumps(entry).encode()
        if os.write(fd, data) != len(data):
            raise OSError(28, "short write")
        _reserve(fd)
        os.fsync(fd)
    except OSError as exc:
        if fd is not None:
            os.close(fd)
        try:
            path.unlink()
        except OSError:
            pass
        if exc.errno in NO_SPACE or exc.strerror == "short write":
            raise disk_full(f"the step journal {folder}", "the step was not run") from None
        raise
    return Intent(path, fd, entry)


def _reserve(fd: int) -> None:
    """Allocate :data:`RESERVE` bytes for the file now (zeros past the entry; ENOSPC now, never later)."""
    try:
        os.posix_fallocate(fd, 0, RESERVE)
    except AttributeError:  # no posix_fallocate: write the zeros
        end = os.lseek(fd, 0, os.SEEK_END)
        if end < RESERVE and os.write(fd, bytes(RESERVE - end)) != RESERVE - end:
            raise OSError(28, "short write") from None
    except OSError as exc:
        import errno

        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        end = os.lseek(fd, 0, os.SEEK_END)
        if end < RESERVE and os.write(fd, bytes(RESERVE - end)) != RESERVE - end:
            raise OSError(28, "short write") from None


def _load(path: Path):
    try:
        return json.loads(path.read_bytes().rstrip(b"\0") or b"null")
    except ValueError:
        return None


def pending(store) -> bool:
    """Whether ``store``'s journal holds an intent (one ``stat``, cheap on every write)."""
    folder = getattr(store, "_loopx_journal", False)
    if folder is False:
        try:
            folder = directory(store)
        except Exception:  # noqa: BLE001 - a store of a plugin's, without a path or URL: no journal
            folder = None
        try:
            store._loopx_journal = folder
        except AttributeError:
            pass
    if folder is None:
        return False
    try:  # one directory read (no stat first): the journal is usually missing or empty
        with os.scandir(folder) as entries:
            return any(True for _ in entries)
    except (FileNotFoundError, NotADirectoryError):
        return False


def replay(reg) -> int:
    """Record every abandoned intent (its process gone, its lock free) as "ran, result unknown"
    and delete it; returns how many were recorded. Called before each write (see
    :meth:`loopx.ledger.registry.Registry.mutate`); a step still running is left alone."""
    try:
        import fcntl
    except ImportError:
        return 0
    from loopx.values.errors import LoopxError

    folder = directory(reg.store)
    if folder is None or not folder.is_dir() or id(reg) in _replaying:
        return 0
    recorded = 0
    _replaying.add(id(reg))
    try:
        for path in sorted(folder.glob("*.json")):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # its process is still running the step (or recording it)
                entry = _load(path)
                if isinstance(entry, dict) and entry.get("kind") == "finish":
                    continue  # a turn's finish: replay_finishes (the turn layer) closes its run
                if isinstance(entry, dict) and not _recorded(reg, entry):
                    try:
                        _record(reg, entry)
                    except LoopxError as err:
                        if err.code == "disk_full":
                            raise  # still no space: the write that asked fails the same way
                        continue  # kept; never blocks another write (e.g. the goal was closed since)
                    recorded += 1
                path.unlink()
            finally:
                os.close(fd)
    finally:
        _replaying.discard(id(reg))
    return recorded


def _recorded(reg, entry: dict) -> bool:
    """Whether the step's result reached the registry after all (the process died after it)."""
    from loopx.store.queries import ledger as queries

    with reg.read() as tx:
        for row in queries.step_evidence(tx, entry.get("run_id"), entry.get("at") or ""):
            data = json.loads(row["data"]) if row["data"] else {}
            if data.get("step") == entry.get("step") and data.get("argv") == entry.get("argv"):
                return True
    return False


def _record(reg, entry: dict) -> None:
    """The evidence ``loopx exec`` wrote or would have written: the result it kept when the disk
    was full (:meth:`Intent.keep`), else the result unknown (one write)."""
    from loopx.store.queries import ledger as queries
    from loopx.values.validate import new_id

    name = entry.get("action") or entry.get("step")
    run_id = entry["run_id"]
    kept = entry.get("result") if isinstance(entry.get("result"), dict) else None
    if kept and isinstance(kept.get("data"), dict):
        data = {**kept["data"], "recorded_late": True}
        summary = f"{kept.get('summary') or name} (recorded late: the disk was full when the step ended)"
    else:
        data = {"action": entry.get("action"), "step": entry.get("step"), "argv": entry.get("argv"),
                "by": entry.get("by"), "exit_code": None, "timed_out": False, "result_unknown": True,
                "started_at": entry.get("at"), "duration_seconds": None, "output_tail": "", "output_bytes": 0,
                "output_sha256": ""}
        summary = f"{name}: ran, result unknown (it could not be recorded when the step ended)"

    def work(w):
        row = queries.run_status(w.tx, run_id)
        if row is None or row["status"] == "finished":
            # The run was finished meanwhile: the fact still goes into the goal's record.
            body = {"evidence_id": new_id("evidence"), "run_id": None, "kind": "command",
                    "summary": f"run {run_id}: {summary}", "data": {**data, "run_id": run_id}}
        else:
            body = {"evidence_id": new_id("evidence"), "run_id": run_id, "kind": "command", "summary": summary,
                    "data": data}
        w.emit("evidence.added", body)

    reg.mutate("core", work, goal_id=entry["goal_id"], allow_closed=True)


def replay_finishes(reg, finish) -> int:
    """Close each run whose turn could not record its finish (the disk was full), with what it
    kept: ``finish(reg, run_id=..., **kept)`` (the turn layer passes :func:`loopx.domain.runs.finish`,
    which this layer may not import). A run finished meanwhile is left as it is. Returns how
    many were closed; ``disk_full`` when there is still no space."""
    try:
        import fcntl
    except ImportError:
        return 0
    from loopx.values.errors import LoopxError

    folder = directory(reg.store)
    if folder is None or not folder.is_dir():
        return 0
    closed = 0
    for path in sorted(folder.glob("~finish-*.json")):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its turn is still running
            entry = _load(path)
            kept = entry.get("result") if isinstance(entry, dict) else None
            if isinstance(kept, dict):
                try:
                    finish(reg, run_id=entry["run_id"], **kept)
                    closed += 1
                except LoopxError as err:
                    if err.code == "disk_full":
                        raise
                    if err.code not in ("run_not_open", "run_not_found"):
                        continue  # kept for a later try
            path.unlink()
        finally:
            os.close(fd)
    return closed
