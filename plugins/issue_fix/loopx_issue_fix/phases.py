"""The doing-commands of an Issue-Fix run: reproduce, verify, handoff, publish.

Each one acts under a run (``--run-id``, or ``LOOPX_RUN_ID`` set by ``loopx exec``) and is
refused like every doing-command when the run is not open or its contract went stale
(:func:`loopx.runs.check_fresh`), before anything runs. The slow part (the test command, git)
runs outside any transaction; then one transaction records the evidence as the capability,
moves the phase (``issue_fix`` state) and marks the finished todos done as the caller (except a
todo someone holds under a live claim: the contract tells its holder to settle it).

Red then green: ``verify`` is refused (``not_reproduced``) until ``reproduce`` has seen the test
fail, and a pass on unchanged code (the same worktree fingerprint as the failing run) is a
flaky test, not a fix: it is recorded and does not count.
"""

from __future__ import annotations

from loopx.api import LoopxError

from loopx_issue_fix.workflow import CAPABILITY, NAMESPACE, load_state


def _context(reg, run_id: str | None, phases: tuple[str, ...], step: str) -> tuple:
    from loopx.api import check_fresh, check_id

    if not run_id:
        raise LoopxError("invalid_argument", f"issue-fix {step} acts under a run: pass --run-id (or set LOOPX_RUN_ID)")
    check_id("run", run_id)
    with reg.read() as tx:
        run = check_fresh(tx, run_id)
        state = load_state(tx, run.goal_id)
    phase = state["phase"]
    if phase not in phases:
        if phase == "reproduce" and step != "reproduce":
            raise LoopxError(
                "not_reproduced",
                f"no failing reproduction is recorded for goal {run.goal_id}: run `loopx issue-fix reproduce "
                f"--run-id {run_id}` and see the test fail first (red, then green)",
            )
        raise LoopxError("issue_fix_error", f"issue-fix {step} does not apply in phase {phase!r} of goal "
                         f"{run.goal_id}; the goal waits for: {_waits_for(phase)}")
    return run, state


def _waits_for(phase: str) -> str:
    return {"reproduce": "issue-fix reproduce", "fix": "a fix, then issue-fix verify",
            "handoff": "issue-fix handoff", "publish": "a user's decision on the publish gate, then publish",
            "published": "nothing: it is published"}.get(phase, phase)


def _record(reg, actor: str, run, *, step: str, evidence: dict, update, operation_id: str | None,
            request: dict) -> dict:
    """One transaction: evidence (as the capability), state changes, todos done (as ``actor``).

    ``update(state, evidence_id)`` returns ``(state changes, todo steps now done, result)``,
    or ``None`` changes when the phase moved on meanwhile (the evidence is still kept).
    """
    from loopx.api import (acting, check_recordable, load_todo, new_id, put_state, writer_add_evidence,
                           writer_todo_done)

    evidence_id = new_id("evidence")

    def work(w):
        check_recordable(w.tx, run.id, goal_id=run.goal_id)
        state = load_state(w.tx, run.goal_id)
        changes, done_steps, result = update(state, evidence_id)
        with acting(w, CAPABILITY) as cw:
            writer_add_evidence(cw, evidence_id=evidence_id, run_id=run.id, **evidence)
            if changes:
                put_state(cw, NAMESPACE, changes)
        for s in done_steps:
            todo_id = state["todos"].get(s)
            try:
                todo = load_todo(w.tx, run.goal_id, todo_id)
            except LoopxError:
                continue
            # A todo someone holds under a live lease is theirs to settle (the contract tells the
            # claimant to run `todo done`); the plugin settles the ones nobody holds.
            held = todo.claim is not None and todo.claim.expires_at > w.at
            if todo.status == "open" and not held:
                writer_todo_done(w, todo_id=todo_id, note=f"issue-fix {step}: evidence {evidence_id}")
        return {"goal_id": run.goal_id, "run_id": run.id, "evidence_id": evidence_id,
                "phase": (changes or {}).get("phase", state["phase"]), **result}

    return reg.mutate(actor, work, goal_id=run.goal_id, operation_id=operation_id,
                      request={"op": f"issue_fix.{step}", "run": run.id, **request})


def _summary(step: str, test: dict, verdict: str) -> str:
    how = "timed out" if test["timed_out"] else ("passed" if test["passed"] else f"failed (exit {test['exit_code']})")
    return f"issue-fix {step}: `{test['command']}` {how} in {test['duration_seconds']}s: {verdict}"


def reproduce(reg, actor: str, *, run_id: str | None, timeout: float | None = None,
              operation_id: str | None = None) -> dict:
    """Run the test command and expect it to fail; a failure moves the goal to ``fix``.

    Returns ``{"reproduced": bool, "test": {...}, "evidence_id", "phase", ...}``. A passing
    test is recorded (``reproduced: false``) and the goal stays in ``reproduce``.
    """
    from loopx_issue_fix import gitrepo, testrun

    run, state = _context(reg, run_id, ("reproduce",), "reproduce")
    repo = state["repo"]
    commit, tree = gitrepo.head(repo), gitrepo.worktree_fingerprint(repo)
    test = testrun.run_test(repo, state["test_command"], **({"timeout": timeout} if timeout else {}))
    red = not test["passed"]
    verdict = "the issue is reproduced (red)" if red else "the issue did NOT reproduce: the test must fail first"

    def update(current, evidence_id):
        attempts = {**current["attempts"], "reproduce": current["attempts"]["reproduce"] + 1}
        if current["phase"] != "reproduce":
            return None, [], {"reproduced": red, "note": f"the goal moved on to {current['phase']} meanwhile"}
        changes = {"attempts": attempts}
        if red:
            changes["phase"] = "fix"
            changes["reproduction"] = {"evidence_id": evidence_id, "run_id": run.id, "commit": commit,
                                       "worktree": tree, "exit_code": test["exit_code"]}
        return changes, ["reproduce"] if red else [], {"reproduced": red}

    out = _record(reg, actor, run, step="reproduce", update=update, operation_id=operation_id,
                  request={"commit": commit, "worktree": tree},
                  evidence={"kind": "test", "summary": _summary("reproduce", test, verdict),
                            "data": {"step": "reproduce", "expected": "fail", "commit": commit,
                                     "worktree": tree, **test}})
    out["test"] = test
    return out


def verify(reg, actor: str, *, run_id: str | None, timeout: float | None = None,
           operation_id: str | None = None) -> dict:
    """Run the test command on the changed code; a pass moves the goal to ``handoff``.

    Refused with ``not_reproduced`` unless a failing reproduction came first. Records pass or
    fail, the diff stat since the base commit, and the commit. A pass on the very code that
    failed (nothing changed) is recorded as ``verified: false`` with reason ``unchanged``.
    """
    from loopx_issue_fix import gitrepo, testrun

    run, state = _context(reg, run_id, ("fix", "handoff"), "verify")
    repo = state["repo"]
    commit, tree = gitrepo.head(repo), gitrepo.worktree_fingerprint(repo)
    diff = gitrepo.diff_stat(repo, state["branch"]["base_commit"])
    test = testrun.run_test(repo, state["test_command"], **({"timeout": timeout} if timeout else {}))
    unchanged = tree == state["reproduction"]["worktree"]
    green = test["passed"] and not unchanged
    if green:
        verdict = f"the fix is verified (green; {diff['files_changed']} file(s) changed)"
    elif test["passed"]:
        verdict = "the test passed on the very code that failed: a flaky test, not a fix"
    else:
        verdict = "the test still fails: keep fixing"
    reason = None if green else ("unchanged" if test["passed"] else "test_failed")

    def update(current, evidence_id):
        attempts = {**current["attempts"], "verify": current["attempts"]["verify"] + 1}
        if current["phase"] not in ("fix", "handoff"):
            return None, [], {"verified": False, "reason": "phase_moved"}
        changes = {"attempts": attempts}
        if green:
            changes["phase"] = "handoff"
            changes["verification"] = {"evidence_id": evidence_id, "run_id": run.id, "commit": commit,
                                       "worktree": tree, "diff": {k: diff[k] for k in
                                                                  ("files_changed", "insertions", "deletions")}}
        else:
            changes["phase"] = "fix"
        return changes, ["fix", "verify"] if green else [], {"verified": green, "reason": reason}

    out = _record(reg, actor, run, step="verify", update=update, operation_id=operation_id,
                  request={"commit": commit, "worktree": tree},
                  evidence={"kind": "test", "summary": _summary("verify", test, verdict),
                            "data": {"step": "verify", "expected": "pass", "commit": commit, "worktree": tree,
                                     "diff": diff, **test}})
    out.update(test=test, diff=diff, commit=commit)
    return out


def handoff(reg, actor: str, *, run_id: str | None, root_cause: str | None = None, output: str | None = None,
            operation_id: str | None = None) -> dict:
    """Write the reviewer packet (issue, root cause, diff stat, test evidence) and record it.

    The packet goes to ``output`` or ``<repo>/.git/loopx-issue-fix/<goal>-handoff.md`` (inside
    ``.git`` so it never shows up in the diff it describes). The goal moves to ``publish``.
    """
    import hashlib
    from pathlib import Path

    from loopx.api import check_text

    from loopx_issue_fix import gitrepo, packet

    root_cause = check_text(root_cause, what="--root-cause", limit="note", required=False)
    run, state = _context(reg, run_id, ("handoff",), "handoff")
    repo = state["repo"]
    diff = gitrepo.diff_stat(repo, state["branch"]["base_commit"])
    with reg.read() as tx:
        text = packet.render(tx, run.goal_id, state, diff, root_cause)
    path = Path(output).expanduser() if output else gitrepo.git_dir(repo) / "loopx-issue-fix" / f"{run.goal_id}-handoff.md"
    data = text.encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        raise LoopxError("issue_fix_error", f"cannot write the hand-off packet to {path}: {exc.strerror}") from None
    sha = hashlib.sha256(data).hexdigest()

    def update(current, evidence_id):
        if current["phase"] != "handoff":
            return None, [], {}
        info = {"evidence_id": evidence_id, "run_id": run.id, "packet": str(path.resolve()), "sha256": sha,
                "root_cause": root_cause}
        return {"phase": "publish", "handoff": info}, ["handoff"], {}

    out = _record(reg, actor, run, step="handoff", update=update, operation_id=operation_id,
                  request={"root_cause": root_cause, "packet_sha256": sha},
                  evidence={"kind": "handoff", "summary": f"issue-fix handoff: reviewer packet {path.name} "
                            f"({diff['files_changed']} file(s), +{diff['insertions']} -{diff['deletions']})",
                            "data": {"step": "handoff", "diff": {k: diff[k] for k in
                                                                 ("files_changed", "insertions", "deletions")}},
                            "file_path": str(path.resolve()), "file_sha256": "sha256:" + sha})
    out.update(packet_path=str(path.resolve()), packet_sha256=sha, packet=text)
    return out


def publish(reg, actor: str, *, run_id: str | None, operation_id: str | None = None) -> dict:
    """Push the goal's branch to its remote, once a user approved the production gate.

    Normally run as the goal's ``publish`` action (``loopx exec --run-id R --action publish``),
    which the core keeps out of contracts until the gate is approved; checked here again.
    """
    from loopx.api import load_gate

    from loopx_issue_fix import gitrepo

    run, state = _context(reg, run_id, ("publish",), "publish")
    with reg.read() as tx:
        gate = load_gate(tx, run.goal_id, state["publish_gate"])
    if gate.status != "approved":
        raise LoopxError("gate_pending", f"publishing waits for a user to approve gate {gate.id} "
                         f"({gate.status}): loopx gate approve --goal-id {run.goal_id} --gate-id {gate.id}")
    repo, branch = state["repo"], state["branch"]
    report = gitrepo.push(repo, branch["remote"], branch["name"])
    commit = gitrepo.head(repo)

    def update(current, evidence_id):
        if current["phase"] != "publish":
            return None, [], {}
        return {"phase": "published", "published": {"evidence_id": evidence_id, "commit": commit,
                                                    "remote": branch["remote"], "branch": branch["name"]}}, \
            ["publish"], {}

    out = _record(reg, actor, run, step="publish", update=update, operation_id=operation_id,
                  request={"commit": commit},
                  evidence={"kind": "publish", "summary": f"issue-fix publish: pushed {branch['name']} "
                            f"({commit[:12]}) to {branch['remote']}; open a pull request from it",
                            "data": {"step": "publish", "commit": commit, "remote": branch["remote"],
                                     "branch": branch["name"], "gate_id": gate.id, "report": report[-2000:]}})
    out.update(commit=commit, branch=branch["name"], remote=branch["remote"])
    return out
