"""A step that ran is never lost: a small journal beside the registry, replayed on the next write.

``loopx exec`` writes an *intent* (run, step, action, argv) here **before** it runs a step, and
holds a lock on it while the step runs and its result is recorded; once the result is in the
registry the intent is deleted. If recording fails (the disk is full, the process is killed)
the intent stays, unlocked, and the next write to the registry - from any process, the moment
there is space again - records the step as ``ran, result unknown`` (evidence of kind
``command`` by the core, ``exit_code`` null, ``result_unknown`` true: it counts as failed) and
deletes the intent. An intent that cannot be written means the step is not run (``disk_full``):
a side effect nobody could record never happens.

The journal is a directory of one small file per intent: ``<registry>.journal/`` beside an
SQLite registry, ``journal-<hash of the URL>/`` in the user data directory for PostgreSQL.
Platforms without ``fcntl`` (Windows) keep no journal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

_replaying: set = set()  # registries being replayed in this thread of work (no recursion)


def directory(store) -> Path | None:
    """Where ``store``'s journal lives (None for an in-memory registry)."""
    path = getattr(store, "path", None)
    if getattr(store, "dialect", None) == "sqlite":
        if path is None or str(path) == ":memory:":
            return None
        return Path(f"{path}.journal")
    from loopx import userdirs
    from loopx.store import display_url

    key = _sha256(display_url(store.url).encode()).hexdigest()[:16]
    return Path(userdirs.data_dir()) / f"journal-{key}"


def _sha256(data: bytes):
    """SHA-256 from CPython's built-in module when there is one: ``hashlib`` loads OpenSSL
    (milliseconds), and this runs on every write, should-run included (same digest either way)."""
    try:
        from _sha256 import sha256  # CPython <= 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # CPython >= 3.12
        except ImportError:
            from hashlib import sha256
    return sha256(data)


class Intent:
    """One step about to run: locked while its process lives; :meth:`done` once recorded."""

    def __init__(self, path: Path | None, fd: int | None):
        self.path, self.fd = path, fd

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
    try:
        import fcntl
    except ImportError:
        return Intent(None, None)
    folder = directory(reg.store)
    if folder is None:
        return Intent(None, None)
    import secrets

    from loopx import clock
    from loopx.store.space import NO_SPACE, disk_full

    entry = {"run_id": run.id, "goal_id": run.goal_id, "step": step, "action": action, "argv": argv, "by": by,
             "at": clock.now()}
    path = folder / f"{run.id}-{secrets.token_hex(6)}.json"
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
    return Intent(path, fd)


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
    :meth:`loopx.registry.Registry.mutate`); a step still running is left alone."""
    try:
        import fcntl
    except ImportError:
        return 0
    from loopx.errors import LoopxError

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
                try:
                    entry = json.loads(path.read_bytes() or b"null")
                except ValueError:
                    entry = None
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
    with reg.read() as tx:
        for row in tx.query("SELECT data FROM evidence WHERE run_id = ? AND kind = 'command' AND actor = 'core'"
                            " AND created_at >= ?", (entry.get("run_id"), entry.get("at") or "")):
            data = json.loads(row["data"]) if row["data"] else {}
            if data.get("step") == entry.get("step") and data.get("argv") == entry.get("argv"):
                return True
    return False


def _record(reg, entry: dict) -> None:
    """The evidence ``loopx exec`` would have written, with the result unknown (one write)."""
    from loopx.validate import new_id

    name = entry.get("action") or entry.get("step")
    run_id = entry["run_id"]
    data = {"action": entry.get("action"), "step": entry.get("step"), "argv": entry.get("argv"),
            "by": entry.get("by"), "exit_code": None, "timed_out": False, "result_unknown": True,
            "started_at": entry.get("at"), "duration_seconds": None, "output_tail": "", "output_bytes": 0,
            "output_sha256": ""}
    summary = f"{name}: ran, result unknown (it could not be recorded when the step ended)"

    def work(w):
        row = w.tx.one("SELECT status FROM runs WHERE id = ?", (run_id,))
        if row is None or row["status"] == "finished":
            # The run was finished meanwhile: the fact still goes into the goal's record.
            body = {"evidence_id": new_id("evidence"), "run_id": None, "kind": "command",
                    "summary": f"run {run_id}: {summary}", "data": {**data, "run_id": run_id}}
        else:
            body = {"evidence_id": new_id("evidence"), "run_id": run_id, "kind": "command", "summary": summary,
                    "data": data}
        w.emit("evidence.added", body)

    reg.mutate("core", work, goal_id=entry["goal_id"], allow_closed=True)
