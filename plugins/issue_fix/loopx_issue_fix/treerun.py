"""One run of the tests on a private export of exactly one tree, and its complete results.

The run's directory is a :func:`loopx.api.process.private_dir` (beneath LoopX's private root, outside
the repository, the worktree and the agent's ``TMPDIR``): LoopX exports the tree into it, and the
tests run under :func:`loopx.api.process.run_confined`, which lets them write only there. Every turn's
policy hides that root, so an agent whose turn goes on while the tests run (it called
``loopx issue-fix reproduce`` or ``verify``) can neither write nor read the run, and the run
cannot write the agent's worktree either. Where Landlock is missing the run is refused
(``confinement_unavailable``) unless the user opted out of confinement.

The results file also records the files the run opened *outside* the tree and the
interpreter's installation (:func:`outside_fingerprints`): a later goal reuses a base run only
while each of them is as it was (see :mod:`loopx_issue_fix.baserun`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopx.api import LoopxError

if TYPE_CHECKING:
    from loopx_issue_fix.state import JSON, IssueFixState
    from loopx.api import Registry


def fingerprint(path: str) -> str:
    """A file's stat fingerprint: device, inode, size, mtime and ctime (``missing`` if absent).

    ctime changes with every write, rename or chmod, and a file's owner cannot set it back (only
    the clock's owner can); a new file at the same path has a new inode. So an unchanged
    fingerprint means unchanged bytes, without reading them; a changed one (even a mere
    ``touch``) only means the base runs again.
    """
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def outside_fingerprints(paths: list[str]) -> dict[str, str]:
    """``{path: fingerprint}`` of the files a run opened outside its tree and installation (and,
    for bytecode in a ``__pycache__``, of its source: a changed source makes it stale)."""
    import importlib.util

    out = {}
    for p in paths:
        out[p] = fingerprint(p)
        if p.endswith(".pyc") and "__pycache__" in p:
            try:
                source = importlib.util.source_from_cache(p)
            except ValueError:
                continue
            out[source] = fingerprint(source)
    return out


def outside_changed(body: JSON) -> list[str]:
    """The files of a base run's results (``outside``) that changed since (all of them, as
    ``["*"]``, when the run did not record them or recorded too many)."""
    recorded = body.get("outside")
    if not isinstance(recorded, dict) or body.get("outside_truncated"):
        return ["*"]
    return [p for p, fp in recorded.items() if fingerprint(p) != fp]


def run_on_tree(state: IssueFixState, tree: str, timeout: tuple[float, str], evidence_id: str, *,
                registry_url: str | None, base_cache: JSON | None = None, fill_cache: bool = False,
                store: Path | None = None, deselect: list[str] | tuple[str, ...] = ()) -> tuple[JSON, JSON]:
    """One run of the tests on a private copy of exactly ``tree`` (never in the agent's worktree).

    The copy is made from the repository's objects into a new private directory (see the
    module's docstring) and removed afterwards. The complete results (every test id) are
    written to ``<goal_dir>/results/<evidence_id>.json``; returns the run and ``{"path",
    "sha256", ...}`` of that file. ``test["private"]`` says whether nobody but LoopX could write
    the run's directory while it ran (confined, or outside any turn). Bytecode (a run LoopX
    starts itself): ``fill_cache`` (the base run) writes a new cache and keeps it in ``store``
    when the run was private (else, and by default, in ``<goal_dir>/bytecode/<evidence_id>``); its
    list goes into the results file, as ``bytecode``. ``base_cache`` (that list) gives a later
    run a checked copy to read - or a base run a warm start (another base's list: only files
    whose blob is the same are copied, the rest it compiles and adds). ``deselect``: failing tests a
    user accepted, left out of the run. The judge's disagreements (:mod:`loopx_issue_fix.verdict`)
    are in the results file as ``tampered``.
    """
    import hashlib
    import json

    from loopx import api

    from loopx_issue_fix import bytecode, gitrepo, testrun

    planned, cache, seeded = state.plan(), None, None
    with api.process.private_dir("run") as where:
        # resolved: the bytecode cache is keyed by the checkout's absolute path (sys.pycache_prefix)
        work = Path(where)
        checkout = work / "tree"
        blobs = gitrepo.export_tree(state.repo, tree, checkout)
        pycache = work / "pycache" if planned else None
        if pycache is not None and (base_cache or not fill_cache):
            seeded = bytecode.seed(base_cache, pycache, checkout, blobs)
        test = testrun.run_test(str(checkout), state.test_command, report=work / "report" / "last.xml",
                                report_option=state.report, timeout=timeout[0], planned=planned,
                                pycache=pycache, write_bytecode=fill_cache, private=work,
                                registry_url=registry_url, deselect=deselect, junit=not fill_cache)
        test["private"] = bool(test.pop("confined")) or not api.process.in_step()
        if pycache is not None and fill_cache:
            keep = store if store is not None and test["private"] else Path(state.goal_dir, "bytecode", evidence_id)
            cache = bytecode.harvest(pycache, checkout, blobs, keep)
    if seeded is not None:
        test["bytecode"] = seeded
    test["timeout_source"] = timeout[1]
    test["tree"] = tree
    rep = test["report"]
    outside = rep.get("outside") or []
    body = {"tree": tree, "command": test["command"], "ran": test["ran"], "isolation": test["isolation"],
            "exit_code": test["exit_code"], "exit_status": rep.get("exit_status"), "timed_out": test["timed_out"],
            "collection_errors": rep.get("collection_errors", {}), "cases": rep["cases"],
            "opened": rep.get("opened", []), "outside": outside_fingerprints(outside),
            **({"tampered": rep["tampered"]} if rep.get("tampered") else {}),
            **({"outside_truncated": True} if rep.get("outside_truncated") else {}),
            **({"bytecode": cache} if cache else {})}
    data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    # Written with no link followed beneath the goal's directory (which the agent's git directory
    # holds): a link planted at `results/` must not carry LoopX's write elsewhere.
    from loopx import api

    path = Path(api.files.write_beneath(state.goal_dir, f"results/{evidence_id}.json", data))
    artifact = {"path": str(path), "sha256": hashlib.sha256(data).hexdigest(), "cases_total": len(rep["cases"]),
                "collection_errors": len(rep.get("collection_errors", {})), "exit_status": rep.get("exit_status")}
    test["results"] = artifact
    test["outside_files"] = len(outside)
    return test, artifact


def read_results(state: IssueFixState, evidence_id: str, reg: Registry) -> JSON:
    """The complete results a run recorded (its artifact file), checked against the sha256 its
    evidence holds (``issue_fix.evidence_changed`` if the file is gone or differs)."""
    import hashlib
    import json

    from loopx import api

    with reg.read() as tx:
        ev = api.evidence.load(tx, evidence_id)
    if ev is not None and not ev.file_path and isinstance(ev.data, dict) and "cases" in ev.data:
        return {"cases": ev.data["cases"]}  # recorded before results files existed: what it kept
    if ev is None or not ev.file_path:
        raise LoopxError("issue_fix.evidence_changed", f"evidence {evidence_id} names no results file")
    try:
        data = Path(ev.file_path).read_bytes()
    except OSError as exc:
        raise LoopxError("issue_fix.evidence_changed", f"the results of evidence {evidence_id} cannot be read "
                         f"({ev.file_path}: {exc.strerror})") from None
    if "sha256:" + hashlib.sha256(data).hexdigest() != ev.file_sha256:
        raise LoopxError("issue_fix.evidence_changed", f"the results file of evidence {evidence_id} changed since it "
                         f"was recorded ({ev.file_path}): its sha256 is not {ev.file_sha256}")
    results: JSON = json.loads(data)
    return results
