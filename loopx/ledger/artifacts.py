"""What a human reviews, kept where no step can write it, and shown only when it is what was recorded.

A reviewer packet (Issue-Fix's ``handoff.md``) and any other artifact a capability writes for a
human live in LoopX's data directory, per registry and goal::

    <user data dir>/loopx/artifacts/<registry id>/<goal id>/<name>

never in the agent's workdir or in a ``.git`` it can write. They are written through
:mod:`loopx.sandbox.safe_open` (a temporary file renamed into place, no link followed) and their sha256
is recorded with the event that names them. :func:`read_verified` reads one back only when its
bytes still have that sha256; anything else - changed, replaced, removed, a link - is refused
with ``artifact_tampered``, and nothing of it is shown. Artifacts recorded at an older place (a
packet in ``.git/loopx-issue-fix/<goal>/``) are read and checked the same way.
"""

from __future__ import annotations

import hashlib
import os
import re

from loopx.values.errors import LoopxError

#: A name safe as one path component (goal ids, artifact names); loopx.turn.executors.homes uses it too.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def root() -> str:
    """Where every registry's artifacts live: ``<user data dir>/loopx/artifacts``."""
    from loopx.values.userdirs import data_dir

    return os.path.join(data_dir(), "artifacts")


def registry_key(tx) -> str:
    """The directory name of the registry ``tx`` reads: its id, else a digest of where it lives."""
    from loopx.ledger import keys

    rid = keys.stored_id(tx)
    if rid and NAME.match(rid):
        return rid
    return "loc-" + hashlib.sha256(keys.location(tx).encode()).hexdigest()[:24]


def directory(tx, goal_id: str) -> str:
    """The directory of ``goal_id``'s artifacts in the registry ``tx`` reads."""
    return os.path.join(root(), registry_key(tx), goal_id)


def save(tx, goal_id: str, name: str, data: bytes) -> dict:
    """Write the artifact ``name`` of ``goal_id`` (replacing an earlier one of that name);
    ``{"path", "sha256"}`` to record with the event that names it."""
    from loopx.sandbox import safe_open

    if not NAME.match(name) or not NAME.match(goal_id):
        raise LoopxError("invalid_argument", f"not an artifact name: {goal_id}/{name}")
    rel = os.path.join(registry_key(tx), goal_id, name)
    try:
        path = safe_open.write_beneath(root(), rel, data)
    except OSError as exc:
        raise LoopxError("invalid_argument", f"cannot write {name} in {root()}: {exc.strerror}") from None
    return {"path": path, "sha256": hashlib.sha256(data).hexdigest()}


def read_verified(path: str, sha256: str, *, what: str = "the artifact") -> bytes:
    """The bytes of the artifact at ``path`` if their sha256 is ``sha256`` (hex, ``sha256:`` allowed);
    else ``artifact_tampered``. The file itself is opened with no link followed."""
    expected = sha256.split(":", 1)[-1].lower()
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise LoopxError("artifact_tampered", f"TAMPERED: {what} {path} cannot be read as LoopX wrote it "
                         f"({exc.strerror}); it is not shown") from None
    import stat

    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LoopxError("artifact_tampered", f"TAMPERED: {what} {path} is not a regular file any more; "
                             "it is not shown")
        data = fh.read()
    if hashlib.sha256(data).hexdigest() != expected:
        raise LoopxError("artifact_tampered", f"TAMPERED: {what} {path} changed after LoopX recorded it "
                         f"(recorded sha256 {expected[:16]}..., the file's differs); it is not shown")
    return data


def of_goal(tx, goal_id: str) -> list[dict]:
    """The goal's artifacts a human reviews, as the evidence that names them recorded them: each
    file in the goal's artifact directory named by an evidence item (the newest item per name),
    ``{"name", "path", "sha256", "evidence_id", "kind", "recorded_at", "summary", "gate_id", "ok", "problem"}``
    (``gate_id``: the gate the evidence says the artifact is there to decide, e.g. a diff of changed tests).
    ``ok`` is whether the file still has the recorded sha256 (``problem`` says why not); nothing of
    a file that fails is shown. No capability is named: whatever a capability saved and recorded."""
    base = directory(tx, goal_id) + os.sep
    import json

    from loopx.store.queries.evidence import goal_files

    rows = goal_files(tx, goal_id)
    out: dict[str, dict] = {}
    for row in rows:
        path = row["file_path"]
        if not path.startswith(base) or os.sep in path[len(base):]:
            continue
        name = path[len(base):]
        if name in out or not NAME.match(name):
            continue
        sha = row["file_sha256"].split(":", 1)[-1].lower()
        try:
            read_verified(path, sha, what=name)
            ok, problem = True, None
        except LoopxError as exc:
            ok, problem = False, exc.message
        try:
            data = json.loads(row["data"]) if row["data"] else {}
        except ValueError:
            data = {}
        gate_id = data.get("gate_id") if isinstance(data, dict) and isinstance(data.get("gate_id"), str) else None
        out[name] = {"name": name, "path": path, "sha256": sha, "evidence_id": row["id"], "kind": row["kind"],
                     "recorded_at": row["created_at"], "summary": row["summary"], "gate_id": gate_id,
                     "ok": ok, "problem": problem}
    return sorted(out.values(), key=lambda a: a["recorded_at"], reverse=True)


def read_named(tx, goal_id: str, name: str) -> bytes:
    """The bytes of the goal's artifact ``name`` (:func:`of_goal`), only while they have the
    recorded sha256 (``artifact_tampered`` otherwise; ``not_found`` when no evidence names it)."""
    for item in of_goal(tx, goal_id):
        if item["name"] == name:
            return read_verified(item["path"], item["sha256"], what=name)
    raise LoopxError("not_found", f"goal {goal_id} has no artifact {name!r}")


def lines(items: list[dict]) -> list[str]:
    """``artifact NAME PATH sha256 HEX`` lines for people (``TAMPERED`` when the file changed)."""
    return [f"artifact {a['name']}: {a['path']} sha256 {a['sha256']}"
            + ("" if a["ok"] else f"  TAMPERED: {a['problem']}") for a in items]
