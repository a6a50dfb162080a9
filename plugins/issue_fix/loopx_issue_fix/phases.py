"""The doing-commands of an Issue-Fix run: reproduce, verify, handoff, publish.

Each acts under a run (``--run-id``, or ``LOOPX_RUN_ID`` set by ``loopx exec``) and is refused
like every doing-command when the run is not open or its contract went stale, before anything
runs. Tests and git run in the goal's worktree outside any transaction; then one transaction
records the attempt as evidence (as the capability), moves the phase and marks todos done.

- ``reproduce`` records the *failing test ids* from the run's JUnit report. A run that is not
  a test failure (time-out, command not found, no report, collection error) is recorded as an
  attempt and refused with ``issue_fix.not_a_test_failure``: it never counts as red.
- ``verify`` proves the fix: the code changed since the reproduction, the files holding the
  failing tests are unchanged (else ``issue_fix.tests_weakened``), the failing tests now pass,
  and no test that passed at the reproduction fails. The verified code is committed by LoopX
  (parent: the base commit) and the branch points at it.
- ``handoff`` writes the reviewer packet and requests the publish gate for that commit.
- ``publish`` publishes exactly the verified commit once a user approved; a worktree or branch
  that moved since is refused (``issue_fix.changed_since_verify``) and the goal goes back to
  verify. Afterwards the goal is closed with its criteria met.
"""

from __future__ import annotations

from pathlib import Path

from loopx.api import LoopxError
from loopx_issue_fix.workflow import CAPABILITY, CRITERIA, NAMESPACE, load_state

MAX_LOG = 100


def _context(reg, run_id: str | None, phases: tuple[str, ...], step: str, timeout: float | None = None):
    from loopx import api
    from loopx_issue_fix.workflow import step_timeout

    if not run_id:
        raise LoopxError("invalid_argument", f"issue-fix {step} acts under a run: pass --run-id (or set LOOPX_RUN_ID)")
    api.ids.check("run", run_id)
    with reg.read() as tx:
        run = api.runs.check_fresh(tx, run_id)
        state = load_state(tx, run.goal_id)
        limit = step_timeout(tx, state, run, timeout)
    phase = state["phase"]
    if phase not in phases:
        if phase == "reproduce" and step != "reproduce":
            raise LoopxError(
                "issue_fix.not_reproduced",
                f"no failing reproduction is recorded for goal {run.goal_id}: run `loopx issue-fix reproduce "
                f"--run-id {run_id}` and see the tests fail first (red, then green)",
            )
        raise LoopxError("issue_fix.wrong_phase", f"issue-fix {step} does not apply in phase {phase!r} of goal "
                         f"{run.goal_id}; the goal waits for: {_waits_for(phase)}")
    from loopx_issue_fix import gitlinks

    gitlinks.pin(state)  # git runs with the directories LoopX made, or not at all (issue_fix.git_tampered)
    return run, state, limit


def _waits_for(phase: str) -> str:
    return {"reproduce": "issue-fix reproduce", "fix": "a fix, then issue-fix verify",
            "handoff": "issue-fix handoff", "publish": "a user's decision on the publish gate, then publish",
            "published": "nothing: it is published"}.get(phase, phase)


def _log(current: dict, step: str, evidence_id: str, outcome: str, detail: str | None = None) -> list:
    entry = {"step": step, "evidence_id": evidence_id, "outcome": outcome}
    if detail:
        entry["detail"] = detail[:300]
    return [*current.get("log", []), entry][-MAX_LOG:]


def _record(reg, actor: str, run, *, step: str, evidence: dict, update, operation_id: str | None,
            request: dict, evidence_id: str | None = None) -> dict:
    """One transaction: evidence (as the capability), state changes, todos done (as ``actor``).

    ``update(state, evidence_id, w)`` returns ``(state changes, todo steps now done, result)``;
    it may emit further events through ``w``.
    """
    from loopx import api

    evidence_id = evidence_id or api.ids.new("evidence")

    def work(w):
        api.runs.check_recordable(w.tx, run.id, goal_id=run.goal_id)
        state = load_state(w.tx, run.goal_id)
        with api.state.acting(w, CAPABILITY) as cw:
            api.evidence.add_in(cw, evidence_id=evidence_id, run_id=run.id, **evidence)
        changes, done_steps, result = update(state, evidence_id, w)
        for s in done_steps:
            todo = api.todos.load(w.tx, run.goal_id, state["todos"][s])
            # A todo someone holds under a live lease is theirs to settle (the contract tells the
            # claimant to run `todo done`); the plugin settles the ones nobody holds.
            held = todo.claim is not None and todo.claim.expires_at > w.at
            if todo.status == "open" and not held:
                api.todos.done_in(w, todo_id=todo.id, note=f"issue-fix {step}: evidence {evidence_id}")
        with api.state.acting(w, CAPABILITY) as cw:
            if changes:
                api.state.put(cw, NAMESPACE, changes)
            if result.pop("_close", None):
                # The work is done and a user approved what was published: criteria met, closed.
                for index in range(len(CRITERIA)):
                    api.goals.criterion_in(cw, index=index)
                api.goals.close_in(cw, reason=result["close_reason"])
        return {"goal_id": run.goal_id, "run_id": run.id, "evidence_id": evidence_id,
                "phase": (changes or {}).get("phase", state["phase"]), **result}

    return reg.mutate(actor, work, goal_id=run.goal_id, operation_id=operation_id,
                      request={"op": f"issue_fix.{step}", "run": run.id, **request})


def runner(state: dict) -> dict | None:
    """How the tests run: the plan fixed at ``start`` (interpreter, pytest arguments), or ``None``
    for a command LoopX runs under ``sh -c``."""
    from loopx_issue_fix import testrun

    if "runner" in state:
        return state["runner"]
    return testrun.plan(state["test_command"], state["repo"])


def _environment_problem(state: dict) -> tuple[str | None, str | None]:
    """Whether the interpreter's start-up code changed since ``start`` (a ``.pth``, ``sitecustomize``):
    ``(problem or None, the installation's signature now, or None)``.

    The interpreter is asked (:func:`guard.environment`) only when the installation's stat
    signature (:func:`baserun.signature`) is not the one a step recorded after asking it; the
    signature is taken *before* asking, so a change made meanwhile shows at the next step.
    """
    from loopx_issue_fix import baserun, guard

    before = state.get("environment")
    if not before:
        return None, None
    sig = baserun.signature(before)
    if sig is not None and sig == state.get("environment_signature"):
        return None, sig
    changed = guard.environment_changed(before, guard.environment(before["interpreter"]))
    if changed:
        return f"the test interpreter's start-up files changed since start: {', '.join(changed[:5])}", None
    return None, sig


def _refs(state: dict) -> dict:
    """The refs as they stand: local (every ref but the goal's own branch) and the remote's."""
    from loopx_issue_fix import gitrepo

    from loopx_issue_fix.workflow import worktree_root

    # LoopX's own branches move when any goal verifies or closes: they are not the agent's doing.
    # One git call tells both the refs and where each branch is checked out.
    root = str(worktree_root())
    refs, checked_out = gitrepo.local_refs(state["repo"])
    ours = {r for r, path in checked_out.items() if path.startswith(root + "/")} | \
        {f"refs/heads/{state['branch']['name']}", "refs/stash"}
    local = {r: sha for r, sha in refs.items() if r not in ours and not r.startswith("refs/heads/issue-fix/")}
    remote = gitrepo.remote_refs(state["repo"], state["branch"]["remote"], 30)
    return {"local": local, "remote": remote}


def _ref_changes(state: dict, now: dict) -> tuple[list[str], list[str]]:
    """``(remote changes, local changes)`` since the snapshot LoopX took at its last step."""
    before = state.get("refs")
    if not before:
        return [], []

    def diff(a, b):
        if a is None or b is None:
            return []
        return [f"{r} {(a.get(r) or 'none')[:12]} -> {(b.get(r) or 'deleted')[:12]}" for r in sorted(set(a) | set(b))
                if a.get(r) != b.get(r)]

    return diff(before.get("remote"), now.get("remote")), diff(before.get("local"), now.get("local"))


def _git_log(current: dict, step: str, remote: list[str], local: list[str]) -> list:
    if not remote and not local:
        return current.get("git_changes", [])
    entry = {"step": step, "remote": remote[:20], "local": local[:20]}
    return [*current.get("git_changes", []), entry][-50:]


def _outputs(state: dict, wrote: list[str]) -> list[str]:
    return sorted(set(state.get("outputs", [])) | set(wrote))[:200]


def _red_statuses(state: dict) -> tuple[str, ...]:
    from loopx_issue_fix import testrun

    # pytest reports set-up and tear-down errors as <error>; other runners (unittest) report an
    # exception raised inside the test that way, which is a test failing.
    return ("failed",) if testrun.is_pytest(state["test_command"]) else ("failed", "error")


def _test_files(worktree: str, cases: dict, ids: list[str]) -> list[str]:
    """The files that hold the tests ``ids``: the report's ``file``, else the module of its class."""
    files = set()
    for i in ids:
        case = cases.get(i) or {}
        if case.get("file"):
            files.add(case["file"])
            continue
        dotted = i.split("::")[0].split(".")
        for n in range(len(dotted), 0, -1):
            path = "/".join(dotted[:n]) + ".py"
            if Path(worktree, path).is_file():
                files.add(path)
                break
    return sorted(files)


def _evidence(step: str, test: dict | None, summary: str, **data) -> dict:
    from loopx_issue_fix import testrun

    body = {"step": step, **data}
    out = {"kind": "test" if test is not None else "note", "summary": summary[:2000], "data": body}
    if test is not None:
        body.update(testrun.slim(test))
        if test.get("results"):
            # The complete results (every test id) are a file; the evidence holds its digest.
            out.update(file_path=test["results"]["path"], file_sha256="sha256:" + test["results"]["sha256"])
    return out


def reproduce(reg, actor: str, *, run_id: str | None, timeout: float | None = None,
              operation_id: str | None = None) -> dict:
    """Run the tests and record the failing test ids (red); the goal moves to ``fix``.

    A run where nothing fails is recorded (``reproduced: false``, exit 1, phase unchanged). A
    run that is not a test failure is recorded and refused: ``issue_fix.not_a_test_failure``.
    """
    from loopx_issue_fix import baserun, gitrepo, guard, testrun, treerun
    from loopx import api

    run, state, limit = _context(reg, run_id, ("reproduce",), "reproduce", timeout)
    wt = state["worktree"]
    commit, tree = gitrepo.commit_of(wt), gitrepo.candidate_tree(wt, state.get("outputs", []))
    env_problem, signature = _environment_problem(state)
    if env_problem:
        raise LoopxError("issue_fix.environment_changed", f"nothing run: {env_problem}")
    evidence_id = api.ids.new("evidence")
    # One base run per base: the same tree, command and environment were run red before (see
    # baserun). A run is shared with later goals when it was private (treerun: inside a turn the
    # agent cannot reach it; only a turn the user runs unconfined leaves it to its goal).
    key = baserun.base_key(state, tree, runner(state), signature)
    earlier = baserun.reusable(reg, state, key) if key else None
    store = baserun.base_dir(state, key) / f"bytecode-{evidence_id}" if key and not earlier else None
    if earlier:
        test, artifact = baserun.take_over(state, earlier, tree, limit, evidence_id)
    else:
        warm = baserun.donor(reg, state, skip=key) if key else None
        test, artifact = treerun.run_on_tree(state, tree, limit, evidence_id, fill_cache=True, store=store,
                                             base_cache=warm, registry_url=reg.store.url)
    shared = bool(key) and (earlier is not None or test["private"])
    wrote: list[str] = []
    refs = _refs(state)
    cases = test["report"]["cases"]
    problem = testrun.not_a_test_failure(test)
    failing = testrun.ids_with(test, *_red_statuses(state))
    red_ids: list[str] = []
    outcome = "red"
    if problem is None and state["test_ids"]:
        found = testrun.match_ids(state["test_ids"], cases)
        missing = [w for w, m in found.items() if m is None]
        if missing:
            problem = f"the named test(s) did not run: {', '.join(missing)}"
        else:
            red_ids = [found[w] for w in state["test_ids"]]
            passing = [i for i in red_ids if cases[i]["status"] == "passed"]
            other = [i for i in red_ids if i not in failing and i not in passing]
            if other:
                problem = f"the named test(s) did not fail but were {cases[other[0]]['status']}: {', '.join(other)}"
            elif passing:
                outcome = "not_reproduced"
    elif problem is None:
        red_ids = failing
        if not failing:
            if test["exit_code"] == 0:
                outcome = "not_reproduced"
            else:
                problem = f"exit {test['exit_code']} but no test failed in the report"
    if problem:
        outcome = "not_a_test_failure"
    if outcome != "red" and not earlier:  # only a red reproduction is ever a base: its bytecode is of no use
        import shutil

        for kept in (store, Path(state["goal_dir"], "bytecode", evidence_id)):
            if kept is not None:
                shutil.rmtree(kept, ignore_errors=True)
    files = _test_files(wt, cases, red_ids) if outcome == "red" else []
    passed = testrun.ids_with(test, "passed")
    verdict = {"red": f"reproduced (red): {len(red_ids)} failing test(s): {', '.join(red_ids[:5])}",
               "not_reproduced": "NOT reproduced: the tests pass; they must fail first",
               "not_a_test_failure": f"not a test failure ({problem}): not counted as red"}[outcome]

    def update(current, evidence_id, w):
        changes = {"attempts": {**current["attempts"], "reproduce": current["attempts"]["reproduce"] + 1},
                   "log": _log(current, "reproduce", evidence_id, outcome, problem),
                   "outputs": _outputs(current, wrote)}
        if signature:
            changes["environment_signature"] = signature
        if current["phase"] != "reproduce":
            return changes, [], {"reproduced": False, "note": f"the goal moved on to {current['phase']} meanwhile"}
        if outcome == "red":
            changes["phase"] = "fix"
            changes["reproduction"] = {"evidence_id": evidence_id, "run_id": run.id, "commit": commit, "tree": tree,
                                       "failing": red_ids, "files": files, "passed": len(passed),
                                       "exit_code": test["exit_code"],
                                       "exit_status": test["report"].get("exit_status"),
                                       "cases_total": len(cases), "results_sha256": artifact["sha256"],
                                       "test_files": sorted({c["file"] for c in cases.values() if c.get("file")}),
                                       "data_files": guard.data_files(test["report"].get("opened", [])),
                                       "base_key": key if shared else None, "reused": test.get("reused")}
        changes["refs"] = refs
        return changes, ["reproduce"] if outcome == "red" else [], {"reproduced": outcome == "red"}

    out = _record(reg, actor, run, step="reproduce", update=update, operation_id=operation_id,
                  request={"commit": commit, "tree": tree}, evidence_id=evidence_id,
                  evidence=_evidence("reproduce", test, f"issue-fix reproduce: {testrun.summary_line(test)}"
                                     + (f" (the same base's run of evidence {test['reused']['evidence_id']}, reused)"
                                        if test.get("reused") else "") + f": {verdict}",
                                     expected="fail", outcome=outcome, problem=problem, commit=commit, tree=tree,
                                     failing=red_ids, test_files=files))
    out.update(test=testrun.slim(test), outcome=outcome, failing=red_ids, test_files=files)
    if shared and not earlier and outcome == "red" and out.get("phase") == "fix":
        baserun.remember(state, key, run.goal_id, out["evidence_id"])
    if outcome == "not_a_test_failure":
        raise LoopxError("issue_fix.not_a_test_failure",
                         f"not a test failure, not counted as red: {problem} (evidence {out['evidence_id']})")
    return out


def _approved_changes(reg, state: dict, tree: str, paths: list[str]) -> bool:
    """Whether a user approved exactly these test changes (the same files with the same content)."""
    from loopx import api

    from loopx_issue_fix import gitrepo

    asked = state.get("test_change_gate")
    if not asked or not paths:
        return False
    with reg.read() as tx:
        gate = api.gates.load(tx, state_goal(state), asked["gate_id"])
    if gate.status != "approved":
        return False
    return all(p in asked["files"] and asked["files"][p] == gitrepo.blob_id(state["repo"], tree, p) for p in paths)


def _accepted_failing(reg, state: dict) -> list[str]:
    """The failing tests a user accepted at the gate a ``still_failing`` verify requested (the
    gate's exact list once approved; before that, what an earlier approved gate accepted)."""
    from loopx import api

    asked = state.get("accept_failing_gate")
    if asked:
        with reg.read() as tx:
            gate = api.gates.load(tx, state_goal(state), asked["gate_id"])
        if gate.status == "approved":
            return list(asked["tests"])
    return list(state.get("accepted_failing") or [])


def state_goal(state: dict) -> str:
    """The goal id an Issue-Fix state belongs to (its directory's name)."""
    return Path(state["goal_dir"]).name


def verify(reg, actor: str, *, run_id: str | None, timeout: float | None = None,
           operation_id: str | None = None) -> dict:
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
    from loopx_issue_fix import gitrepo, guard, testrun, treerun
    from loopx import api

    run, state, limit = _context(reg, run_id, ("fix", "handoff"), "verify", timeout)
    wt, repro, allow = state["worktree"], state["reproduction"], state.get("allow_test_changes")
    head = gitrepo.commit_of(wt)
    tree = gitrepo.candidate_tree(wt, state.get("outputs", []))
    ignored = gitrepo.ignored_files(wt)
    refs = _refs(state)
    remote_moved, local_moved = _ref_changes(state, refs)
    # One diff of the reproduced tree against the candidate answers both questions below.
    changed = gitrepo.changed_paths(state["repo"], repro["tree"], tree)
    touched = [] if allow else [p for p in changed if any(p == f or p.startswith(f.rstrip("/") + "/")
                                                          for f in repro["files"])]
    infra = guard.tests_changed(state["repo"], repro["tree"], tree, test_files=repro.get("test_files", []),
                                opened=repro.get("data_files", []), exempt=repro["files"] if allow else [],
                                changed=changed)
    approved = _approved_changes(reg, state, tree, infra)
    evidence_id = api.ids.new("evidence")
    test, problem, result, reason, signature = None, None, {}, None, None
    if remote_moved:
        reason = "git_changed"
        problem = f"the remote {state['branch']['remote']} changed since LoopX's last step (a push LoopX did not " \
                  f"make): {', '.join(remote_moved[:5])}"
    elif touched:
        reason = "tests_weakened"
        problem = f"the file(s) holding the failing tests changed: {', '.join(touched)}"
    elif infra and not approved:
        reason = "tests_changed"
        problem = f"the tests are not the base's: {', '.join(infra[:10])} changed"
    else:
        problem, signature = _environment_problem(state)
        if problem:
            reason = "environment_changed"
    accepted = _accepted_failing(reg, state)
    if reason is None:
        base_results = treerun.read_results(state, repro["evidence_id"], reg)
        test, _artifact = treerun.run_on_tree(state, tree, limit, evidence_id, base_cache=base_results.get("bytecode"),
                                              registry_url=reg.store.url, deselect=accepted)
        rep = test["report"]
        cases = rep["cases"]
        problem = testrun.not_a_test_failure(test)
        if rep.get("tampered"):
            # The judge's record, pytest's results, its JUnit XML and the exit status disagree.
            reason, problem = "runner_tampered", f"the test run's records disagree: {'; '.join(rep['tampered'][:4])}"
        elif problem:
            reason = "not_a_test_failure"
        else:
            base = base_results["cases"]
            found = testrun.match_ids(repro["failing"], cases)
            gone = [w for w, m in found.items() if m is None or cases[m]["status"] == "skipped"]
            still = [w for w, m in found.items() if m is not None and cases[m]["status"] in ("failed", "error")]
            base_passed = [i for i, c in base.items() if c["status"] == "passed"]
            broke = [i for i in base_passed if i in cases and cases[i]["status"] in ("failed", "error")]
            vanished = [i for i in base_passed if i not in cases or cases[i]["status"] == "skipped"]
            base_files = set(repro.get("test_files", []))
            new_files = sorted({c["file"] for c in cases.values() if c.get("file") and c["file"] not in base_files})
            if "test_files" not in repro or _approved_changes(reg, state, tree, new_files):
                new_files = []
            failing_now = [i for i, c in cases.items() if c["status"] in ("failed", "error")]
            # Tests that fail now and failed at the base too, beside the named ones: never green
            # unless a user accepted them (then they are left out of the run, see _accepted_failing).
            named = {m for m in found.values() if m}
            base_failing = [i for i in failing_now if i not in named and i not in broke]
            status = rep.get("exit_status")
            unchanged = tree == repro["tree"]
            result = {"fail_to_pass": {w: (cases[m]["status"] if m else "missing") for w, m in found.items()},
                      "still_failing": [*still, *base_failing], "accepted_failing": accepted,
                      "regressions": broke, "missing": gone + vanished,
                      "new_test_files": new_files, "exit_status": status,
                      "collection_errors": len(rep.get("collection_errors", {})),
                      "pass_to_pass": {"total": len(base_passed), "still_passing": len(base_passed) - len(broke)
                                       - len(vanished), "broke": len(broke), "missing": len(vanished)}}
            if new_files and not allow:
                reason = "tests_changed"
                problem = f"new test module(s) the base did not have: {', '.join(new_files[:5])}"
            elif (gone or vanished) and not allow:
                reason = "tests_weakened"
                problem = f"test(s) that ran at the reproduction are missing or skipped now: {', '.join((gone + vanished)[:5])}"
            elif still or gone:
                reason, problem = "test_failed", f"still failing: {', '.join((still + gone + base_failing)[:5])}"
            elif broke:
                reason, problem = "regression", (f"{len(broke)} test(s) passed at the reproduction and fail now: "
                                                 f"{', '.join(broke[:5])}")
            elif base_failing:
                reason, problem = "still_failing", (
                    f"still failing: {len(base_failing)} test(s) that failed at the reproduction too: "
                    f"{', '.join(base_failing[:5])}; a user accepts them at the gate verify requested, or fix them")
            elif status is not None and status != (1 if failing_now else 0):
                reason, problem = "exit_status", (f"pytest exited {status} with {len(failing_now)} failing test(s) "
                                                  "in its results: the run is not what the results say")
            elif status not in (None, 0) or test["exit_code"] != 0:
                reason, problem = "exit_status", (f"the test run exited {test['exit_code']} (pytest: {status}): a run "
                                                  "that does not exit 0 is never verified")
            elif unchanged:
                reason, problem = "unchanged", "the failing tests passed on the very code that failed: flaky, not a fix"
    commit = None
    if reason is None:
        branch = state["branch"]
        commit = gitrepo.commit_tree(wt, tree, branch["base_commit"],
                                     f"{state['issue']['title']}\n\nVerified by LoopX Issue-Fix under run {run.id}: "
                                     f"{', '.join(repro['failing'][:10])} fail at {branch['base_commit'][:12]} and "
                                     "pass here.")
        gitrepo.move_branch(wt, branch["name"], commit, head)
    diff = gitrepo.diff(wt, state["branch"]["base_commit"], commit or tree)
    outcome = "green" if reason is None else reason
    how = testrun.summary_line(test) if test is not None else "tests not run"
    verdict = (f"verified (green): commit {commit[:12]}, {diff['files_changed']} file(s) changed" if commit
               else f"not verified ({reason}): {problem}")
    asked_for = infra or result.get("new_test_files") or []
    files_now = {p: gitrepo.blob_id(state["repo"], tree, p) for p in asked_for} if reason == "tests_changed" \
        and asked_for else None
    # What the user decides at the test-change gate: the unified diff of exactly those files.
    test_patch = gitrepo.diff(state["repo"], repro["tree"], tree, paths=sorted(files_now))["patch"] if files_now \
        else ""

    def update(current, evidence_id, w):
        changes = {"attempts": {**current["attempts"], "verify": current["attempts"]["verify"] + 1},
                   "log": _log(current, "verify", evidence_id, outcome, problem),
                   "refs": refs, "git_changes": _git_log(current, "verify", remote_moved, local_moved)}
        if signature and signature != current.get("environment_signature"):
            changes["environment_signature"] = signature
        if reason == "unchanged":
            changes["flaky"] = sorted(set(current.get("flaky", [])) | set(repro["failing"]))
        if files_now:
            asked = current.get("test_change_gate")
            if not asked or asked["files"] != files_now:
                # A user may accept exactly this change of the tests: a gate for it, blocking nothing
                # else (the goal goes on; verify keeps refusing until it is approved).
                # One gate for every test file this attempt changed, its diff saved as an artifact
                # (path and sha256 recorded) that `loopx issue-fix show` prints, checked.
                from loopx import api

                gate_id = api.ids.new("gate")
                saved = api.files.save_artifact(w.tx, state_goal(current), f"test-changes-{gate_id}.diff",
                                      test_patch.encode("utf-8"))
                names = ", ".join(sorted(files_now))
                api.gates.request_in(w, gate_id=gate_id, scope="other", blocks="action:issue-fix-test-changes",
                                    approval_only=True,
                                    title=(f"Accept changed tests for this fix ({len(files_now)} file(s), diff: loopx "
                                           f"issue-fix show {state_goal(current)}): {names}")[:200])
                changes["test_change_gate"] = {"gate_id": gate_id, "files": files_now, "diff": saved}
                # Recorded as evidence naming the gate: the core shows it beside that gate (status,
                # gate show, the dashboard, the approvals page), checked against this sha256.
                from loopx import api

                with api.state.acting(w, CAPABILITY) as cw:
                    api.evidence.add_in(cw, kind="test_changes", run_id=run.id, file_path=saved["path"],
                                        file_sha256="sha256:" + saved["sha256"],
                                        data={"gate_id": gate_id, "files": sorted(files_now)},
                                        summary=f"issue-fix verify: diff of the changed test files ({names}) for "
                                                f"gate {gate_id}"[:300])
        if approved and infra and reason is None:
            changes["approved_test_changes"] = sorted(infra)
        if reason == "still_failing":
            # The user decides whether these may stay failing: a gate for exactly this set (with the
            # ones accepted before), blocking nothing else; approved, the next verify leaves them out.
            wanted = sorted(set(accepted) | set(result["still_failing"]))
            asked = current.get("accept_failing_gate")
            if not asked or asked["tests"] != wanted:
                from loopx import api

                gate_id = api.ids.new("gate")
                api.gates.request_in(w, gate_id=gate_id, scope="other", blocks="action:issue-fix-accept-failing",
                                    approval_only=True,
                                    title=(f"Accept {len(wanted)} test(s) still failing after this fix (they failed "
                                           f"at the base too): {', '.join(wanted)}")[:200])
                changes["accept_failing_gate"] = {"gate_id": gate_id, "tests": wanted}
        if accepted:
            changes["accepted_failing"] = accepted
        if current["phase"] not in ("fix", "handoff"):
            return changes, [], {"verified": False, "reason": "phase_moved"}
        if commit:
            changes["phase"] = "handoff"
            changes["verification"] = {"evidence_id": evidence_id, "run_id": run.id, "commit": commit, "tree": tree,
                                       "tested_tree": tree, "parent": state["branch"]["base_commit"],
                                       "passed": repro["failing"], "ignored": ignored,
                                       "results_sha256": test["results"]["sha256"],
                                       "cases_total": test["results"]["cases_total"],
                                       "pass_to_pass": result["pass_to_pass"], "accepted_failing": accepted,
                                       "diff": {k: diff[k] for k in ("files_changed", "insertions", "deletions")},
                                       "paths": [f["path"] for f in diff["files"]][:200]}
            return changes, ["fix", "verify"], {"verified": True, "reason": None}
        if current["phase"] == "handoff":
            # A failed re-verify takes back the earlier green: its todos are open again.
            from loopx import api

            for name in ("fix", "verify"):
                api.todos.reopen_in(w, todo_id=current["todos"][name], note=f"issue-fix verify failed ({evidence_id})")
        changes["phase"] = "fix"
        changes["verification"] = None
        return changes, [], {"verified": False, "reason": reason}

    out = _record(reg, actor, run, step="verify", update=update, operation_id=operation_id, evidence_id=evidence_id,
                  request={"head": head, "tree": tree},
                  evidence=_evidence("verify", test, f"issue-fix verify: {how}: {verdict}", expected="pass",
                                     outcome=outcome, problem=problem, head=head, tree=tree, commit=commit,
                                     touched_test_files=touched, tests_changed=infra, ignored=ignored[:50],
                                     git_changes={"remote": remote_moved[:20], "local": local_moved[:20]},
                                     **result,
                                     diff={k: diff[k] for k in ("files_changed", "insertions", "deletions", "stat")}))
    out.update(test=testrun.slim(test) if test else None, commit=commit, tree=tree, problem=problem,
               tests_changed=infra, ignored=ignored,
               diff={k: diff[k] for k in ("files", "files_changed", "insertions", "deletions", "stat")}, **result)
    if reason in ("tests_weakened", "not_a_test_failure", "tests_changed", "environment_changed", "git_changed",
                  "runner_tampered"):
        raise LoopxError(f"issue_fix.{reason}", f"not verified: {problem} (evidence {out['evidence_id']})")
    return out


def handoff(reg, actor: str, *, run_id: str | None, root_cause: str | None = None, output: str | None = None,
            timeout: float | None = None, operation_id: str | None = None) -> dict:
    """Write the reviewer packet for the verified commit and request the publish gate.

    The packet goes to LoopX's data directory (``loopx.api.files.save_artifact``: outside anything the
    agent can write, never in the diff it describes), its sha256 recorded; ``output`` gets a copy.
    One transaction records it, adds the ``production`` gate that holds the publish todo (the goal now waits for a user) and moves to ``publish``.
    """
    import hashlib

    from loopx_issue_fix import gitrepo, packet
    from loopx import api

    root_cause = api.ids.check_text(root_cause, what="--root-cause", limit="note", required=False)
    run, state, _ = _context(reg, run_id, ("handoff",), "handoff", timeout)
    ver = state["verification"]
    diff = gitrepo.diff(state["worktree"], state["branch"]["base_commit"], ver["commit"])
    refs = _refs(state)
    remote_moved, local_moved = _ref_changes(state, refs)
    probed = packet.probe(state)
    state = {**state, "git_changes": _git_log(state, "handoff", remote_moved, local_moved)}
    with reg.read() as tx:
        text, warnings = packet.render(tx, run.goal_id, state, diff, root_cause, probed)
    data = text.encode("utf-8")
    # The packet a human decides on lives in LoopX's data directory, outside anything the agent
    # can write; `--output` gets a copy (on a step's behalf only beneath the step's own roots,
    # written without following a link: loopx.api.files.write).
    with reg.read() as tx:
        saved = api.files.save_artifact(tx, run.goal_id, "handoff.md", data)
    path = Path(saved["path"])
    copy = None
    if output:
        try:
            copy = api.files.write(output, data)
        except LoopxError as exc:
            if exc.code == "actor_forbidden":
                raise
            raise LoopxError("issue_fix.packet_unwritable", f"cannot write the hand-off packet to {output}: "
                             f"{exc.message}") from None
    sha = hashlib.sha256(data).hexdigest()
    gate_id = api.ids.new("gate")
    publish = state["publish"]
    refs = _refs(state)
    remote_moved, local_moved = _ref_changes(state, refs)

    def update(current, evidence_id, w):
        if current["phase"] != "handoff":
            return {}, [], {"gate_id": None}
        # The gate is requested now that there is something to decide on, for this commit.
        api.gates.request_in(w, gate_id=gate_id, scope="production", blocks=f"todo:{current['todos']['publish']}",
                            # The title says what approving does: it is shown beside the decision.
                            title=(f"Publish: approving pushes verified commit {ver['commit'][:12]} to "
                                   f"{publish['remote']}/{current['branch']['name']}"
                                   + ("" if publish["provider"] == "push"
                                      else f" and opens a request with {publish['provider']}"))[:200])
        info = {"evidence_id": evidence_id, "run_id": run.id, "packet": str(path), "sha256": sha,
                "root_cause": root_cause, "warnings": warnings, "copy": copy}
        return ({"phase": "publish", "handoff": info, "publish_gate": gate_id, "publish_gate_commit": ver["commit"],
                 "rejected": None,
                 "refs": refs, "git_changes": _git_log(current, "handoff", remote_moved, local_moved)},
                ["handoff"], {"gate_id": gate_id})

    out = _record(reg, actor, run, step="handoff", update=update, operation_id=operation_id,
                  request={"root_cause": root_cause, "packet_sha256": sha},
                  evidence={"kind": "handoff", "summary": f"issue-fix handoff: reviewer packet {path.name} for "
                            f"{ver['commit'][:12]} ({diff['files_changed']} file(s), +{diff['insertions']} "
                            f"-{diff['deletions']}){'; WARNINGS: ' + '; '.join(warnings) if warnings else ''}",
                            "data": {"step": "handoff", "commit": ver["commit"], "warnings": warnings},
                            "file_path": str(path), "file_sha256": "sha256:" + sha})
    out.update(packet_path=str(path), packet_sha256=sha, packet=text, warnings=warnings, packet_copy=copy,
               commit=ver["commit"])
    return out


def publish(reg, actor: str, *, run_id: str | None, timeout: float | None = None,
            operation_id: str | None = None) -> dict:
    """Publish exactly the verified commit, once a user approved the gate; then close the goal.

    Refused with ``gate_pending`` before approval. When the branch head or the worktree's code
    is not the verified commit any more, nothing is pushed: the attempt is recorded, the goal
    goes back to ``fix`` (verify again; a new gate is requested at the next hand-off) and the
    command fails with ``issue_fix.changed_since_verify``; when the verified commit's object does
    not hold the tree verify tested on the base commit as its parent (read with replace refs
    off), the same with ``issue_fix.tree_mismatch``.
    """
    from loopx_issue_fix import gitrepo
    from loopx import api

    run, state, limit = _context(reg, run_id, ("publish",), "publish", timeout)
    with reg.read() as tx:
        gate = api.gates.load(tx, run.goal_id, state["publish_gate"])
    if gate.status != "approved":
        raise LoopxError("gate_pending", f"publishing waits for a user to approve gate {gate.id} "
                         f"({gate.status}): loopx gate approve --goal-id {run.goal_id} --gate-id {gate.id}")
    wt, ver, branch, how = state["worktree"], state["verification"], state["branch"], state["publish"]
    # What is pushed is the commit object itself: its tree must be the one verify exported and
    # tested, its parent the base (read from the object as stored, replace refs off), checked first.
    pushed_tree, parents = gitrepo.commit_shape(state["repo"], ver["commit"])
    tested = ver.get("tested_tree", ver["tree"])
    if pushed_tree != tested or parents != [branch["base_commit"]]:
        head, tree, code = ver["commit"], pushed_tree, "tree_mismatch"
        moved = [f"commit {ver['commit'][:12]} holds tree {pushed_tree[:12]} on {', '.join(p[:12] for p in parents)}"
                 f", not the tested tree {tested[:12]} on the base {branch['base_commit'][:12]}"]
    else:
        head, tree, code = gitrepo.commit_of(wt), gitrepo.candidate_tree(wt, state.get("outputs", [])), \
            "changed_since_verify"
        moved = []
        if head != ver["commit"]:
            moved.append(f"the branch head is {head[:12]}, not the verified {ver['commit'][:12]}")
        if tree != ver["tree"]:
            changed = gitrepo.changed_paths(wt, ver["tree"], tree)
            moved.append(f"the worktree's code differs from it ({', '.join(changed[:5])})")
        if state.get("publish_gate_commit") != ver["commit"]:
            moved.append("the approved gate was for another commit")
    if moved:
        problem = "; ".join(moved)

        def back(current, evidence_id, w):
            for step in ("fix", "verify", "handoff"):
                api.todos.reopen_in(w, todo_id=current["todos"][step],
                                   note=f"issue-fix publish refused: changed since verify ({evidence_id})")
            return ({"phase": "fix", "verification": None, "publish_gate": None, "publish_gate_commit": None,
                     "attempts": {**current["attempts"], "publish": current["attempts"].get("publish", 0) + 1},
                     "log": _log(current, "publish", evidence_id, code, problem)}, [], {})

        out = _record(reg, actor, run, step="publish", update=back, operation_id=operation_id,
                      request={"head": head, "tree": tree},
                      evidence=_evidence("publish", None, f"issue-fix publish refused: {code.replace('_', ' ')}: "
                                         f"{problem}", outcome=code, head=head, tree=tree, verified=ver["commit"]))
        raise LoopxError(f"issue_fix.{code}",
                         f"nothing published: {problem}; the goal is back to verify (evidence {out['evidence_id']})")
    seconds = limit[0]
    # A request's body is the packet the user decided on: checked against its recorded sha256
    # before anything is pushed (artifact_tampered: nothing pushed, nothing opened).
    body = _packet_body(state) if how["provider"] != "push" else None
    remote_moved, local_moved = _ref_changes(state, _refs(state))
    pushed = gitrepo.push(state["repo"], branch["remote"], ver["commit"], branch["name"], seconds)
    refs = _refs(state)
    request = _open_request(state, body, seconds) if how["provider"] != "push" else None

    def update(current, evidence_id, w):
        if current["phase"] != "publish":
            return {}, [], {}
        info = {"evidence_id": evidence_id, "commit": ver["commit"], "remote_sha": pushed["remote_sha"],
                "remote": branch["remote"], "branch": branch["name"], "provider": how["provider"],
                "request": request}
        return ({"phase": "published", "published": info, "refs": refs,
                 "git_changes": _git_log(current, "publish", remote_moved, local_moved),
                 "attempts": {**current["attempts"], "publish": current["attempts"].get("publish", 0) + 1},
                 "log": _log(current, "publish", evidence_id, "published")},
                ["publish"], {"_close": True,
                              "close_reason": f"issue-fix: verified commit {ver['commit'][:12]} published"})

    out = _record(reg, actor, run, step="publish", update=update, operation_id=operation_id,
                  request={"commit": ver["commit"]},
                  evidence={"kind": "publish", "summary": f"issue-fix publish: {branch['remote']} now holds "
                            f"{pushed['remote_sha']} at refs/heads/{branch['name']} (the verified commit)"
                            + (f"; {how['provider']}: {request}" if request else ""),
                            "data": {"step": "publish", "commit": ver["commit"], "remote_sha": pushed["remote_sha"],
                                     "remote": branch["remote"], "branch": branch["name"], "gate_id": gate.id,
                                     "provider": how["provider"], "request": request, "report": pushed["report"],
                                     "timeout_seconds": seconds, "timeout_source": limit[1]}})
    out.update(commit=ver["commit"], remote_sha=pushed["remote_sha"], branch=branch["name"], remote=branch["remote"],
               provider=how["provider"], request=request)
    # The goal is closed: its worktree and local branch go (the branch is on the remote), unless
    # `start --keep` asked to keep them. The packet and the results stay in the goal's directory.
    # An agent runs this step *inside* the worktree: removing it there would pull the directory
    # from under the agent's next command; `loopx issue-fix clean` (also run by `start`) does it.
    from loopx import api

    # Where the agent stands (a command served by the turn's broker runs elsewhere).
    here = Path(api.process.caller_dir() or Path.cwd())
    inside = here.resolve().is_relative_to(Path(wt).resolve()) if Path(wt).exists() else False
    out["removed"] = [] if state.get("keep") or inside else \
        gitrepo.remove_goal_worktree(state["repo"], wt, branch["name"])
    return out


def _packet_body(state: dict) -> str:
    """The recorded hand-off packet's text, only while its sha256 is the recorded one."""
    from loopx import api

    handoff = state["handoff"]
    return api.files.read_artifact(handoff["packet"], handoff["sha256"], what="the hand-off packet").decode(
        "utf-8", "replace")[:60000]


def _open_request(state: dict, body: str, timeout: float) -> str:
    """Open a pull (``gh``) or merge (``glab``) request from the pushed branch, ``body`` its
    description; its URL or output."""
    from loopx import api

    provider, title = state["publish"]["provider"], state["issue"]["title"]
    if provider == "gh":
        argv = ["gh", "pr", "create", "--head", state["branch"]["name"], "--title", title, "--body", body]
    else:
        argv = ["glab", "mr", "create", "--source-branch", state["branch"]["name"], "--title", title,
                "--description", body, "--yes"]
    # LoopX's own publishing, after a user approved it: outside the turn's confinement.
    from loopx_issue_fix import gitrepo

    # gh and glab run git in the repository: with the same settings as LoopX's own push.
    res = api.process.run(argv, env=gitrepo.transport_env(state["repo"]), timeout=timeout, cwd=state["repo"],
                      confine=False)
    if res["exit_code"] != 0 or res["timed_out"]:
        raise LoopxError("issue_fix.publish_failed", f"the branch is pushed, but `{provider}` could not open the request: "
                         f"{(res['output_tail'].strip().splitlines() or ['timed out'])[-1]}")
    return res["output_tail"].strip().splitlines()[-1]
