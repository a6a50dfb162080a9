"""A goal's bytecode cache: the base run compiles, the goal's later runs read a checked copy of it.

Every run of the tests is on a fresh export of a tree (:func:`gitrepo.export_tree`), so without a
cache Python and pytest's assertion rewriting compile every module again on every run. The probe
(:mod:`loopx_issue_fix.probe`) therefore points ``sys.pycache_prefix`` at a directory of the run's
own, which pytest's rewriting honours too:

- the **base run** (``reproduce``) starts with an empty one and writes into it; afterwards
  :func:`harvest` moves it to ``<goal_dir>/bytecode/<evidence id>`` and lists every ``.pyc`` with
  its sha256 - and, for bytecode of a file of the tree, that file's path and blob id - in the run's
  results file (whose own sha256 is in the evidence);
- a **later run** (``verify``) gets a *new* directory that :func:`seed` fills with copies of the
  listed files whose sha256 still matches, and, for the tree's files, only those whose blob is the
  same in the tree under test. It never writes bytecode (``sys.dont_write_bytecode``), and what it
  could write anyway goes into its own copy, which is removed with the run.

Why that is safe: see "Bytecode cache" in docs/capabilities/issue_fix.md.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from pathlib import Path
from typing import Any

#: Bounds on what a base run may leave in its cache (its code could write anything there).
MAX_FILES = 20_000
MAX_BYTES = 256 << 20


def _inside(prefix: Path, checkout: Path) -> str:
    """Where ``checkout``'s bytecode lives below ``prefix`` (``sys.pycache_prefix`` + absolute path)."""
    return os.path.abspath(checkout).lstrip(os.sep)


def harvest(prefix: Path, checkout: Path, blobs: dict[str, str], store: Path) -> dict[str, Any]:
    """After the base run: keep its cache ``prefix`` as ``store``; ``{"store", "files": {key: entry}}``.

    A key is ``tree/<path of the .pyc below the checkout>`` (entry: ``sha256``, ``source``, ``blob``)
    or ``abs/<path below the prefix>`` for a module outside the tree (entry: ``sha256``; Python's
    own mtime and size check decides whether it is current). Only regular ``*.pyc`` files count;
    for the tree, only bytecode of a ``.py`` file the tree holds.
    """
    files: dict[str, dict[str, Any]] = {}
    if not prefix.is_dir():
        return {"store": str(store), "files": files}
    store.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(prefix, store)
    except OSError:  # the run's private directory may be on another file system than the store
        import shutil

        shutil.move(str(prefix), str(store))
    ck = _inside(prefix, checkout) + "/"
    total = 0
    for dirpath, _dirs, names in os.walk(store):  # does not follow symbolic links
        for name in names:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if not name.endswith(".pyc") or not stat.S_ISREG(st.st_mode):
                continue
            total += st.st_size
            if len(files) >= MAX_FILES or total > MAX_BYTES:
                return {"store": str(store), "files": files, "truncated": True}
            rel = os.path.relpath(full, store).replace(os.sep, "/")
            if rel.startswith(ck):
                inner = rel[len(ck):]
                source = posixpath.join(posixpath.dirname(inner), name.split(".", 1)[0] + ".py")
                if source not in blobs:
                    continue
                entry = {"source": source, "blob": blobs[source]}
                key = "tree/" + inner
            else:
                entry, key = {}, "abs/" + rel
            with open(full, "rb") as fh:
                entry["sha256"] = hashlib.sha256(fh.read()).hexdigest()
            files[key] = {"file": rel, **entry}
    return {"store": str(store), "files": files}


def seed(cache: dict[str, Any] | None, prefix: Path, checkout: Path, blobs: dict[str, str]) -> dict[str, Any]:
    """Fill the new directory ``prefix`` from a base run's ``cache`` (see :func:`harvest`) for a run
    of ``checkout`` (whose files have the blob ids ``blobs``); ``{"copied", "changed", "refused"}``.

    A file is copied only when its bytes still have the sha256 the base run recorded (``refused``
    counts the others: the store is in the repository's git directory, which an agent can write)
    and, for bytecode of a tree's file, when that file's blob is the base's (``changed`` counts the
    others: a changed source always compiles afresh, whatever its mtime and size).
    """
    prefix.mkdir(parents=True, exist_ok=False)
    counts = {"copied": 0, "changed": 0, "refused": 0}
    if not cache or not cache.get("files"):
        return counts
    store, ck = Path(cache["store"]), Path(_inside(prefix, checkout))
    for key, entry in cache["files"].items():
        kind, _, rel = key.partition("/")
        if ".." in rel.split("/") or rel.startswith("/") or ".." in entry["file"].split("/"):
            counts["refused"] += 1
            continue
        if kind == "tree":
            if blobs.get(entry.get("source")) != entry.get("blob"):
                counts["changed"] += 1
                continue
            dest = prefix / ck / rel
        elif kind == "abs":
            dest = prefix / rel
        else:
            counts["refused"] += 1
            continue
        try:
            with open(store / entry["file"], "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
        except OSError:
            counts["refused"] += 1
            continue
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            counts["refused"] += 1
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        counts["copied"] += 1
    return counts
