"""``loopx issue-fix verify``: prove the fix on a clean copy of the candidate tree, then commit it.

The step in stages: the candidate (what changed since the reproduction, and the refs), the
refusals that run nothing (:func:`_refusal`), one run on exactly the candidate tree judged
against the reproduction (:func:`_judge`), LoopX's commit of what passed, and one transaction
that records it and moves the phase (:func:`_update`, through :func:`loopx_issue_fix.steps.record`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from loopx.api import LoopxError
from loopx_issue_fix import steps
from loopx_issue_fix.state import (CAPABILITY, JSON, AcceptFailingGate, IssueFixState, Reproduction,
                                   TestChangeGate, Verification)

if TYPE_CHECKING:
    from loopx.api import Registry, Writer, runs

#: The reasons verify fails with an error (exit 2) rather than ``verified: false`` (exit 1).
REFUSALS = ("tests_weakened", "not_a_test_failure", "tests_changed", "environment_changed", "git_changed",
            "runner_tampered")


@attrs.define
class Attempt:
    """One verify attempt, as its stages find it."""

    run: runs.Run
    state: IssueFixState
    repro: Reproduction
    evidence_id: str
    head: str
    tree: str
    ignored: list[str]
    refs: JSON
    remote_moved: list[str]
    local_moved: list[str]
    #: Files holding the failing tests that changed (empty when test changes are allowed).
    touched: list[str]
    #: Test infrastructure that changed (conftest, test modules, configuration, data files).
    infra: list[str]
    approved: bool
    accepted: list[str] = attrs.Factory(list)
    reason: str | None = None
    problem: str | None = None
    signature: str | None = None
    test: JSON | None = None
    result: JSON = attrs.Factory(dict)
    commit: str | None = None
    diff: JSON = attrs.Factory(dict)
    #: ``{path: blob id}`` of the changed test files a user may accept at a gate (``tests_changed``).
    files_now: dict[str, str | None] | None = None
    test_patch: str = ""


def verify(reg: Registry, actor: str, *, run_id: str | None, timeout: float | None = None,
           operation_id: str | None = None) -> JSON:
    """Prove the fix on a clean checkout of the worktree's code; on success commit it and move to ``handoff``.

    Refused (nothing runs) with ``issue_fix.not_reproduced`` before a red reproduction;
    ``issue_fix.git_changed`` when the remote's refs moved since LoopX's last step (a push it did
    not make; refused once, then reported in the packet); ``issue_fix.tests_weakened`` when a
    file holding a failing test changed (unless allowed at ``start``); ``issue_fix.tests_changed``
    when a conftest, test module, pytest configuration or data file the base run read changed
    (unless a user approved exactly that change at the gate verify requests);
    ``issue_fix.environment_changed`` when the interpreter's start-up files changed. Otherwise
    the tests run once on a fresh copy of exactly the candidate tree: ``verified`` is true when
    every failing test passes (FAIL_TO_PASS), every test that passed at the reproduction still
    exists and passes (PASS_TO_PASS), there is no collection error, pytest's exit status agrees,
    no new test module appeared, and the code differs from the reproduced code; else ``reason``
    is ``test_failed``, ``regression``, ``unchanged`` (flaky), ``exit_status``, or a refusal.
    """
    from loopx_issue_fix import testrun

    run, state, limit = steps.context(reg, run_id, ("fix", "handoff"), "verify", timeout)
    a = _candidate(reg, run, state)
    _refusal(a)
    a.accepted = _accepted_failing(reg, state)
    if a.reason is None:
        _judge(reg, a, limit)
    _commit(a)
    outcome = "green" if a.reason is None else a.reason
    how = testrun.summary_line(a.test) if a.test is not None else "tests not run"
    verdict = (f"verified (green): commit {a.commit[:12]}, {a.diff['files_changed']} file(s) changed" if a.commit
               else f"not verified ({a.reason}): {a.problem}")
    out = steps.record(reg, actor, run, step="verify", update=lambda cur, ev, w: _update(a, outcome, cur, ev, w),
                       operation_id=operation_id, evidence_id=a.evidence_id, request={"head": a.head, "tree": a.tree},
                       evidence=steps.evidence("verify", a.test, f"issue-fix verify: {how}: {verdict}", expected="pass",
                                               outcome=outcome, problem=a.problem, head=a.head, tree=a.tree,
                                               commit=a.commit, touched_test_files=a.touched, tests_changed=a.infra,
                                               ignored=a.ignored[:50],
                                               git_changes={"remote": a.remote_moved[:20], "local": a.local_moved[:20]},
                                               **a.result, diff={k: a.diff[k] for k in ("files_changed", "insertions",
                                                                                         "deletions", "stat")}))
    out.update(test=testrun.slim(a.test) if a.test else None, commit=a.commit, tree=a.tree, problem=a.problem,
               tests_changed=a.infra, ignored=a.ignored,
               diff={k: a.diff[k] for k in ("files", "files_changed", "insertions", "deletions", "stat")}, **a.result)
    if a.reason in REFUSALS:
        raise LoopxError(f"issue_fix.{a.reason}", f"not verified: {a.problem} (evidence {out['evidence_id']})")
    return out


def _candidate(reg: Registry, run: runs.Run, state: IssueFixState) -> Attempt:
    """The candidate tree and what changed in it since the reproduction (git asked, nothing run)."""
    from loopx import api

    from loopx_issue_fix import gitrepo, guard

    repro = state.reproduction
    if repro is None:  # phase fix or handoff: a red reproduction is recorded
        raise LoopxError("issue_fix.not_reproduced", f"no failing reproduction is recorded for goal {state.goal_id}")
    wt, allow = state.worktree, state.allow_test_changes
    head = gitrepo.commit_of(wt)
    tree = gitrepo.candidate_tree(wt, state.outputs)
    ignored = gitrepo.ignored_files(wt)
    refs = steps.refs(state)
    remote_moved, local_moved = steps.ref_changes(state, refs)
    # One diff of the reproduced tree against the candidate answers both questions below.
    changed = gitrepo.changed_paths(state.repo, repro.tree, tree)
    touched = [] if allow else [p for p in changed if any(p == f or p.startswith(f.rstrip("/") + "/")
                                                          for f in repro.files)]
    infra = guard.tests_changed(state.repo, repro.tree, tree, test_files=repro.test_files or [],
                                opened=repro.data_files, exempt=repro.files if allow else [], changed=changed)
    return Attempt(run=run, state=state, repro=repro, evidence_id=api.ids.new("evidence"), head=head, tree=tree,
                   ignored=ignored, refs=refs, remote_moved=remote_moved, local_moved=local_moved, touched=touched,
                   infra=infra, approved=_approved_changes(reg, state, tree, infra))


def _refusal(a: Attempt) -> None:
    """The reasons to run nothing: refs moved, tests weakened or changed, the environment changed."""
    state = a.state
    if a.remote_moved:
        a.reason = "git_changed"
        a.problem = f"the remote {state.branch.remote} changed since LoopX's last step (a push LoopX did not " \
                    f"make): {', '.join(a.remote_moved[:5])}"
    elif a.touched:
        a.reason = "tests_weakened"
        a.problem = f"the file(s) holding the failing tests changed: {', '.join(a.touched)}"
    elif a.infra and not a.approved:
        a.reason = "tests_changed"
        a.problem = f"the tests are not the base's: {', '.join(a.infra[:10])} changed"
    else:
        a.problem, a.signature = steps.environment_problem(state)
        if a.problem:
            a.reason = "environment_changed"


def _approved_changes(reg: Registry, state: IssueFixState, tree: str, paths: list[str]) -> bool:
    """Whether a user approved exactly these test changes (the same files with the same content)."""
    from loopx import api

    from loopx_issue_fix import gitrepo

    asked = state.test_change_gate
    if not asked or not paths:
        return False
    with reg.read() as tx:
        gate = api.gates.load(tx, state.goal_id, asked.gate_id)
    if gate.status != "approved":
        return False
    return all(p in asked.files and asked.files[p] == gitrepo.blob_id(state.repo, tree, p) for p in paths)


def _accepted_failing(reg: Registry, state: IssueFixState) -> list[str]:
    """The failing tests a user accepted at the gate a ``still_failing`` verify requested (the
    gate's exact list once approved; before that, what an earlier approved gate accepted)."""
    from loopx import api

    asked = state.accept_failing_gate
    if asked:
        with reg.read() as tx:
            gate = api.gates.load(tx, state.goal_id, asked.gate_id)
        if gate.status == "approved":
            return list(asked.tests)
    return list(state.accepted_failing)


def _judge(reg: Registry, a: Attempt, limit: tuple[float, str]) -> None:
    """Run the tests once on exactly the candidate tree and judge the run against the reproduction."""
    from loopx_issue_fix import testrun, treerun

    state, repro = a.state, a.repro
    base_results = treerun.read_results(state, repro.evidence_id, reg)
    test, _artifact = treerun.run_on_tree(state, a.tree, limit, a.evidence_id,
                                          base_cache=base_results.get("bytecode"), registry_url=reg.store.url,
                                          deselect=a.accepted)
    a.test = test
    rep = test["report"]
    problem = testrun.not_a_test_failure(test)
    if rep.get("tampered"):
        # The judge's record, pytest's results, its JUnit XML and the exit status disagree.
        a.reason, a.problem = "runner_tampered", f"the test run's records disagree: {'; '.join(rep['tampered'][:4])}"
    elif problem:
        a.reason, a.problem = "not_a_test_failure", problem
    else:
        _compare(reg, a, base_results["cases"])


def _compare(reg: Registry, a: Attempt, base: JSON) -> None:
    """FAIL_TO_PASS and PASS_TO_PASS of a run that is a test run: ``a.result``, and ``a.reason``
    unless it is green."""
    from loopx_issue_fix import testrun

    state, repro, test = a.state, a.repro, a.test
    assert test is not None
    cases, status = test["report"]["cases"], test["report"].get("exit_status")
    found = testrun.match_ids(repro.failing, cases)
    gone = [w for w, m in found.items() if m is None or cases[m]["status"] == "skipped"]
    still = [w for w, m in found.items() if m is not None and cases[m]["status"] in ("failed", "error")]
    base_passed = [i for i, c in base.items() if c["status"] == "passed"]
    broke = [i for i in base_passed if i in cases and cases[i]["status"] in ("failed", "error")]
    vanished = [i for i in base_passed if i not in cases or cases[i]["status"] == "skipped"]
    base_files = set(repro.test_files or [])
    new_files = sorted({c["file"] for c in cases.values() if c.get("file") and c["file"] not in base_files})
    if repro.test_files is None or _approved_changes(reg, state, a.tree, new_files):
        new_files = []
    failing_now = [i for i, c in cases.items() if c["status"] in ("failed", "error")]
    # Tests that fail now and failed at the base too, beside the named ones: never green
    # unless a user accepted them (then they are left out of the run, see _accepted_failing).
    named = {m for m in found.values() if m}
    base_failing = [i for i in failing_now if i not in named and i not in broke]
    a.result = {"fail_to_pass": {w: (cases[m]["status"] if m else "missing") for w, m in found.items()},
                "still_failing": [*still, *base_failing], "accepted_failing": a.accepted,
                "regressions": broke, "missing": gone + vanished,
                "new_test_files": new_files, "exit_status": status,
                "collection_errors": len(test["report"].get("collection_errors", {})),
                "pass_to_pass": {"total": len(base_passed), "still_passing": len(base_passed) - len(broke)
                                 - len(vanished), "broke": len(broke), "missing": len(vanished)}}
    allow = state.allow_test_changes
    if new_files and not allow:
        a.reason, a.problem = "tests_changed", f"new test module(s) the base did not have: {', '.join(new_files[:5])}"
    elif (gone or vanished) and not allow:
        a.reason, a.problem = "tests_weakened", ("test(s) that ran at the reproduction are missing or skipped now: "
                                                 f"{', '.join((gone + vanished)[:5])}")
    elif still or gone:
        a.reason, a.problem = "test_failed", f"still failing: {', '.join((still + gone + base_failing)[:5])}"
    elif broke:
        a.reason, a.problem = "regression", (f"{len(broke)} test(s) passed at the reproduction and fail now: "
                                             f"{', '.join(broke[:5])}")
    elif base_failing:
        a.reason, a.problem = "still_failing", (
            f"still failing: {len(base_failing)} test(s) that failed at the reproduction too: "
            f"{', '.join(base_failing[:5])}; a user accepts them at the gate verify requested, or fix them")
    elif status is not None and status != (1 if failing_now else 0):
        a.reason, a.problem = "exit_status", (f"pytest exited {status} with {len(failing_now)} failing test(s) "
                                              "in its results: the run is not what the results say")
    elif status not in (None, 0) or test["exit_code"] != 0:
        a.reason, a.problem = "exit_status", (f"the test run exited {test['exit_code']} (pytest: {status}): a run "
                                              "that does not exit 0 is never verified")
    elif a.tree == repro.tree:
        a.reason, a.problem = "unchanged", "the failing tests passed on the very code that failed: flaky, not a fix"


def _commit(a: Attempt) -> None:
    """Commit a green candidate (parent: the base commit) and point the branch at it; the diff from
    the base either way, and the changed test files a user may accept at a gate."""
    from loopx_issue_fix import gitrepo

    state, branch, wt = a.state, a.state.branch, a.state.worktree
    if a.reason is None:
        a.commit = gitrepo.commit_tree(wt, a.tree, branch.base_commit,
                                       f"{state.issue.title}\n\nVerified by LoopX Issue-Fix under run {a.run.id}: "
                                       f"{', '.join(a.repro.failing[:10])} fail at {branch.base_commit[:12]} and "
                                       "pass here.")
        gitrepo.move_branch(wt, branch.name, a.commit, a.head)
    a.diff = gitrepo.diff(wt, branch.base_commit, a.commit or a.tree)
    asked_for = a.infra or a.result.get("new_test_files") or []
    if a.reason == "tests_changed" and asked_for:
        a.files_now = {p: gitrepo.blob_id(state.repo, a.tree, p) for p in asked_for}
        # What the user decides at the test-change gate: the unified diff of exactly those files.
        a.test_patch = gitrepo.diff(state.repo, a.repro.tree, a.tree, paths=sorted(a.files_now))["patch"]


def _update(a: Attempt, outcome: str, current: IssueFixState, evidence_id: str,
            w: Writer) -> tuple[IssueFixState, list[str], JSON]:
    """In the recording transaction: the attempt counted and logged, the gates it asks for, and
    the phase moved (``handoff`` when green; back to ``fix`` otherwise)."""
    after = attrs.evolve(current, attempts=attrs.evolve(current.attempts, verify=current.attempts.verify + 1),
                         log=steps.log(current, "verify", evidence_id, outcome, a.problem), refs=a.refs,
                         git_changes=steps.git_log(current, "verify", a.remote_moved, a.local_moved))
    if a.signature and a.signature != current.environment_signature:
        after.environment_signature = a.signature
    if a.reason == "unchanged":
        after.flaky = sorted(set(current.flaky) | set(a.repro.failing))
    if a.files_now:
        _ask_test_changes(a, after, w)
    if a.approved and a.infra and a.reason is None:
        after.approved_test_changes = sorted(a.infra)
    if a.reason == "still_failing":
        _ask_accept_failing(a, after, w)
    if a.accepted:
        after.accepted_failing = a.accepted
    if current.phase not in ("fix", "handoff"):
        return after, [], {"verified": False, "reason": "phase_moved", "_written": ["git_changes"]}
    if a.commit:
        assert a.test is not None
        after.phase = "handoff"
        after.verification = Verification(
            evidence_id=evidence_id, run_id=a.run.id, commit=a.commit, tree=a.tree, tested_tree=a.tree,
            parent=a.state.branch.base_commit, passed=a.repro.failing, ignored=a.ignored,
            results_sha256=a.test["results"]["sha256"], cases_total=a.test["results"]["cases_total"],
            pass_to_pass=a.result["pass_to_pass"], accepted_failing=a.accepted,
            diff={k: a.diff[k] for k in ("files_changed", "insertions", "deletions")},
            paths=[f["path"] for f in a.diff["files"]][:200])
        return after, ["fix", "verify"], {"verified": True, "reason": None, "_written": ["git_changes"]}
    if current.phase == "handoff":
        # A failed re-verify takes back the earlier green: its todos are open again.
        from loopx import api

        for name in ("fix", "verify"):
            api.todos.reopen_in(w, todo_id=current.todos[name], note=f"issue-fix verify failed ({evidence_id})")
    after.phase, after.verification = "fix", None
    return after, [], {"verified": False, "reason": a.reason, "_written": ["git_changes", "verification"]}


def _ask_test_changes(a: Attempt, after: IssueFixState, w: Writer) -> None:
    """A user may accept exactly this change of the tests: a gate for it, blocking nothing else (the
    goal goes on; verify keeps refusing until it is approved). One gate for every test file this
    attempt changed, its diff saved as an artifact (path and sha256 recorded) that ``loopx
    issue-fix show`` prints, checked."""
    from loopx import api

    files_now = a.files_now or {}
    asked = after.test_change_gate
    if asked and asked.files == files_now:
        return
    goal_id = after.goal_id
    gate_id = api.ids.new("gate")
    saved = api.files.save_artifact(w.tx, goal_id, f"test-changes-{gate_id}.diff", a.test_patch.encode("utf-8"))
    names = ", ".join(sorted(files_now))
    api.gates.request_in(w, gate_id=gate_id, scope="other", blocks="action:issue-fix-test-changes", approval_only=True,
                        title=(f"Accept changed tests for this fix ({len(files_now)} file(s), diff: loopx "
                               f"issue-fix show {goal_id}): {names}")[:200])
    after.test_change_gate = TestChangeGate(gate_id=gate_id, files=files_now, diff=saved)
    # Recorded as evidence naming the gate: the core shows it beside that gate (status,
    # gate show, the dashboard, the approvals page), checked against this sha256.
    with api.state.acting(w, CAPABILITY) as cw:
        api.evidence.add_in(cw, kind="test_changes", run_id=a.run.id, file_path=saved["path"],
                            file_sha256="sha256:" + saved["sha256"],
                            data={"gate_id": gate_id, "files": sorted(files_now)},
                            summary=f"issue-fix verify: diff of the changed test files ({names}) for "
                                    f"gate {gate_id}"[:300])


def _ask_accept_failing(a: Attempt, after: IssueFixState, w: Writer) -> None:
    """The user decides whether these may stay failing: a gate for exactly this set (with the ones
    accepted before), blocking nothing else; approved, the next verify leaves them out."""
    from loopx import api

    wanted = sorted(set(a.accepted) | set(a.result["still_failing"]))
    asked = after.accept_failing_gate
    if asked and asked.tests == wanted:
        return
    gate_id = api.ids.new("gate")
    api.gates.request_in(w, gate_id=gate_id, scope="other", blocks="action:issue-fix-accept-failing",
                        approval_only=True,
                        title=(f"Accept {len(wanted)} test(s) still failing after this fix (they failed "
                               f"at the base too): {', '.join(wanted)}")[:200])
    after.accept_failing_gate = AcceptFailingGate(gate_id=gate_id, tests=wanted)
