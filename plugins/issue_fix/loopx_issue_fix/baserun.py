"""One base run per base: reusing a red reproduction's complete results, and a cheap environment check.

A base run (``reproduce``) of a tree under a fixed interpreter gives the same results every time,
so a later goal on the same base need not run it again. Its **base key** is the sha256 of what
decides the run: the tree, the test command and LoopX's plan for it (interpreter, arguments,
variables), the interpreter's start-up fingerprint (:func:`guard.environment`) and the
:func:`signature` of its installation. A red reproduction leaves, in
``<git-common-dir>/loopx-issue-fix/base/<key>/``, its bytecode cache and a pointer
(``latest.json``: goal and evidence id) to it. The pointer is only a hint - that directory is in
``.git``, which an agent can write: :func:`reusable` trusts only what the registry holds (that
goal's ``issue_fix`` state must name the same key and evidence, the results file must have the
sha256 that evidence recorded, the run's facts come from the evidence itself).

The key has a second half that only the run itself reveals: the files it opened outside the
repository's tree and the interpreter's installation (code imported from a sibling checkout or
an editable install elsewhere, a data or configuration file in the home directory), each with
its stat fingerprint (:func:`treerun.fingerprint`), in the results file (whose sha256 the
registry holds). :func:`reusable` takes the run over only while every one of them still has that
fingerprint; a changed, new or removed one means the base runs again.

A base run is shared whether it ran inside an agent's turn or not: it runs privately
(:mod:`loopx_issue_fix.treerun`), where the agent cannot write. Only a turn the user runs
unconfined keeps its base run to its own goal.

:func:`signature` is the other half: the stat data (inode, ctime, mtime, size) of the interpreter
and of every entry of the directories its start-up scan reads. ctime cannot be set back by a
file's owner, so an unchanged signature means no ``.pth`` or ``sitecustomize`` was added, removed
or rewritten and no package was installed or removed since it was taken; a changed one only means
that the interpreter is asked again (:func:`guard.environment`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loopx_issue_fix.state import JSON, IssueFixState
    from loopx.api import Registry

#: Base directories kept per repository (newest first; ``clean`` removes the rest).
KEEP = 16


def signature(fingerprint: JSON | None) -> str | None:
    """The stat signature of the interpreter and its start-up directories (see the module's
    docstring); ``None`` for a fingerprint that names no directories (recorded by an older LoopX)."""
    if not fingerprint or not fingerprint.get("dirs"):
        return None
    digest = hashlib.sha256()

    def add(path: str, st: os.stat_result) -> None:
        digest.update(f"{path}\0{st.st_ino}\0{st.st_ctime_ns}\0{st.st_mtime_ns}\0{st.st_size}\n".encode())

    for path in [fingerprint["interpreter"], *fingerprint["dirs"]]:
        try:
            add(path, os.stat(path))
        except OSError:
            digest.update(f"{path}\0missing\n".encode())
    for d in fingerprint["dirs"]:
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            try:
                add(entry.path, entry.stat(follow_symlinks=False))
            except OSError:
                pass
    return digest.hexdigest()


def base_key(state: IssueFixState, tree: str, planned: JSON | None, sig: str | None) -> str | None:
    """The key of a base run of ``tree`` (``None``: not reusable - a command run under ``sh -c``, or
    an environment without a signature)."""
    env = state.environment
    if not planned or not env or sig is None:
        return None
    what = {"tree": tree, "command": state.test_command, "report": state.report, "plan": planned,
            "environment": {k: env.get(k) for k in ("interpreter", "python", "prefix", "files")}, "signature": sig}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def base_dir(state: IssueFixState, key: str) -> Path:
    """Where the base run with ``key`` keeps its bytecode and its pointer."""
    return Path(state.goal_dir).parent / "base" / key


def remember(state: IssueFixState, key: str, goal_id: str, evidence_id: str) -> None:
    """Point ``key``'s directory at the red reproduction ``evidence_id`` of ``goal_id`` (best effort:
    without the pointer the next goal on this base runs it again)."""
    where = base_dir(state, key)
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f".latest.{os.getpid()}"
        tmp.write_text(json.dumps({"goal_id": goal_id, "evidence_id": evidence_id}))
        os.replace(tmp, where / "latest.json")
    except OSError:
        pass


def reusable(reg: Registry, state: IssueFixState, key: str) -> JSON | None:
    """The earlier red base run with ``key``, as the registry vouches for it, or ``None``.

    Returns ``{"goal_id", "evidence_id", "data": the results file's bytes, "facts": the run as its
    evidence recorded it}``.
    """
    from loopx.api import LoopxError
    from loopx import api

    from loopx_issue_fix import state as states, treerun

    try:
        pointer = json.loads((base_dir(state, key) / "latest.json").read_text())
        goal_id, evidence_id = str(pointer["goal_id"]), str(pointer["evidence_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        with reg.read() as tx:
            earlier = states.find(tx, goal_id)
            ev = api.evidence.load(tx, evidence_id)
    except LoopxError:
        return None
    repro = earlier.reproduction if earlier else None
    if repro is None or ev is None or ev.goal_id != goal_id or repro.base_key != key \
            or repro.evidence_id != evidence_id or ev.run_id != repro.run_id or not ev.file_path \
            or not isinstance(ev.data, dict):
        return None
    try:
        data = Path(ev.file_path).read_bytes()
    except OSError:
        return None
    if "sha256:" + hashlib.sha256(data).hexdigest() != ev.file_sha256 or \
            hashlib.sha256(data).hexdigest() != repro.results_sha256:
        return None
    try:
        if treerun.outside_changed(json.loads(data)):  # the key's second half: what the run opened elsewhere
            return None
    except (ValueError, AttributeError):
        return None
    try:
        os.utime(base_dir(state, key))  # most recently used: the last that `prune` removes
    except OSError:
        pass
    return {"goal_id": goal_id, "evidence_id": evidence_id, "data": data, "facts": ev.data}


#: The facts of a run kept in its evidence that a reused base run takes over (see :func:`take_over`).
_FACTS = ("command", "ran", "isolation", "exit_code", "timed_out", "duration_seconds", "output_tail",
          "output_sha256", "output_bytes")


def take_over(state: IssueFixState, earlier: JSON, tree: str, timeout: tuple[float, str],
              evidence_id: str) -> tuple[JSON, JSON]:
    """An earlier red base run of the same base key (:func:`reusable`) as this reproduction's
    run: its complete results file, byte for byte, becomes this goal's (same sha256), its facts come
    from its evidence, and ``reused`` names where they come from."""
    data = earlier["data"]
    body = json.loads(data)
    path = Path(state.goal_dir, "results", f"{evidence_id}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    artifact = {"path": str(path), "sha256": hashlib.sha256(data).hexdigest(), "cases_total": len(body["cases"]),
                "collection_errors": len(body.get("collection_errors", {})), "exit_status": body.get("exit_status")}
    test = {k: earlier["facts"].get(k) for k in _FACTS}
    test.update(timeout_seconds=timeout[0], timeout_source=timeout[1], tree=tree, results=artifact,
                reused={"goal_id": earlier["goal_id"], "evidence_id": earlier["evidence_id"]},
                report={"found": True, "cases": body["cases"], "problem": None,
                        "collection_errors": body.get("collection_errors", {}), "exit_status": body.get("exit_status"),
                        "opened": body.get("opened", [])})
    return test, artifact


def donor(reg: Registry, state: IssueFixState, skip: str | None = None) -> JSON | None:
    """The bytecode list of the most recently used shared base run of this repository that the
    registry vouches for (see :func:`reusable`), to start a *new* base's run warm: its entries are
    copied only where a file's blob is the same in the new tree (:func:`bytecode.seed`)."""
    root = Path(state.goal_dir).parent / "base"
    try:
        dirs = sorted((d for d in root.iterdir() if d.is_dir() and d.name != skip),
                      key=lambda d: d.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for d in dirs[:3]:
        earlier = reusable(reg, state, d.name)
        if earlier is not None:
            try:
                found: JSON | None = json.loads(earlier["data"]).get("bytecode")
                return found
            except ValueError:
                return None
    return None


def prune(common: Path, keep: int = KEEP) -> list[str]:
    """Remove all but the ``keep`` most recently used base directories of a repository."""
    import shutil

    root = common / "loopx-issue-fix" / "base"
    try:
        dirs = sorted((d for d in root.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
    except OSError:
        return []
    gone = []
    for d in dirs[keep:]:
        shutil.rmtree(d, ignore_errors=True)
        gone.append(d.name)
    return gone
