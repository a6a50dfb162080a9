"""The doing-commands of an Issue-Fix run: reproduce, handoff, publish (verify is :mod:`loopx_issue_fix.verify`).

Each acts under a run (``--run-id``, or ``LOOPX_RUN_ID`` set by ``loopx exec``) and is refused
like every doing-command when the run is not open or its contract went stale, before anything
runs. Tests and git run in the goal's worktree outside any transaction; then one transaction
records the attempt as evidence (as the capability), moves the phase and marks todos done
(:func:`loopx_issue_fix.steps.record`).

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
from typing import TYPE_CHECKING, Any

import attrs

from loopx.api import LoopxError
from loopx_issue_fix import steps
from loopx_issue_fix.state import JSON, Handoff, IssueFixState, Published, Reproduction, Verification

if TYPE_CHECKING:
    from loopx.api import Registry, Writer, runs


def reproduce(reg: Registry, actor: str, *, run_id: str | None, timeout: float | None = None,
              operation_id: str | None = None) -> JSON:
    """Run the tests and record the failing test ids (red); the goal moves to ``fix``.

    A run where nothing fails is recorded (``reproduced: false``, exit 1, phase unchanged). A
    run that is not a test failure is recorded and refused: ``issue_fix.not_a_test_failure``.
    """
    from loopx import api

    from loopx_issue_fix import baserun, gitrepo, guard, testrun

    run, state, limit = steps.context(reg, run_id, ("reproduce",), "reproduce", timeout)
    wt = state.worktree
    commit, tree = gitrepo.commit_of(wt), gitrepo.candidate_tree(wt, state.outputs)
    env_problem, signature = steps.environment_problem(state)
    if env_problem:
        raise LoopxError("issue_fix.environment_changed", f"nothing run: {env_problem}")
    evidence_id = api.ids.new("evidence")
    base = _base_run(reg, state, tree, limit, evidence_id, signature)
    test, key, earlier = base["test"], base["key"], base["earlier"]
    shared = bool(key) and (earlier is not None or test["private"])
    refs = steps.refs(state)
    cases = test["report"]["cases"]
    outcome, problem, red_ids = _red(state, test)
    if outcome != "red" and not earlier:  # only a red reproduction is ever a base: its bytecode is of no use
        import shutil

        for kept in (base["store"], Path(state.goal_dir, "bytecode", evidence_id)):
            if kept is not None:
                shutil.rmtree(kept, ignore_errors=True)
    files = _test_files(wt, cases, red_ids) if outcome == "red" else []
    verdict = {"red": f"reproduced (red): {len(red_ids)} failing test(s): {', '.join(red_ids[:5])}",
               "not_reproduced": "NOT reproduced: the tests pass; they must fail first",
               "not_a_test_failure": f"not a test failure ({problem}): not counted as red"}[outcome]
    red = Reproduction(evidence_id=evidence_id, run_id=run.id, commit=commit, tree=tree, failing=red_ids, files=files,
                       passed=len(testrun.ids_with(test, "passed")), exit_code=test["exit_code"],
                       exit_status=test["report"].get("exit_status"), cases_total=len(cases),
                       results_sha256=base["artifact"]["sha256"],
                       test_files=sorted({c["file"] for c in cases.values() if c.get("file")}),
                       data_files=guard.data_files(test["report"].get("opened", [])),
                       base_key=key if shared else None, reused=test.get("reused"))

    def update(current: IssueFixState, evidence_id: str, w: Writer) -> tuple[IssueFixState, list[str], JSON]:
        after = attrs.evolve(current, attempts=attrs.evolve(current.attempts, reproduce=current.attempts.reproduce + 1),
                             log=steps.log(current, "reproduce", evidence_id, outcome, problem),
                             outputs=steps.outputs(current, []),
                             environment_signature=signature or current.environment_signature)
        if current.phase != "reproduce":
            return after, [], {"reproduced": False, "note": f"the goal moved on to {current.phase} meanwhile"}
        after.refs = refs
        if outcome == "red":
            after.phase, after.reproduction = "fix", red
        return after, ["reproduce"] if outcome == "red" else [], {"reproduced": outcome == "red"}

    out = steps.record(reg, actor, run, step="reproduce", update=update, operation_id=operation_id,
                       request={"commit": commit, "tree": tree}, evidence_id=evidence_id,
                       evidence=steps.evidence("reproduce", test, f"issue-fix reproduce: {testrun.summary_line(test)}"
                                               + (f" (the same base's run of evidence "
                                                  f"{test['reused']['evidence_id']}, reused)"
                                                  if test.get("reused") else "") + f": {verdict}",
                                               expected="fail", outcome=outcome, problem=problem, commit=commit,
                                               tree=tree, failing=red_ids, test_files=files))
    out.update(test=testrun.slim(test), outcome=outcome, failing=red_ids, test_files=files)
    if shared and not earlier and outcome == "red" and out.get("phase") == "fix":
        baserun.remember(state, key, run.goal_id, out["evidence_id"])
    if outcome == "not_a_test_failure":
        raise LoopxError("issue_fix.not_a_test_failure",
                         f"not a test failure, not counted as red: {problem} (evidence {out['evidence_id']})")
    return out


def _base_run(reg: Registry, state: IssueFixState, tree: str, limit: tuple[float, str], evidence_id: str,
              signature: str | None) -> JSON:
    """The base run of ``tree``: an earlier goal's of the same base key taken over, or run now.

    One base run per base: the same tree, command and environment were run red before (see
    baserun). A run is shared with later goals when it was private (treerun: inside a turn the
    agent cannot reach it; only a turn the user runs unconfined leaves it to its goal).
    Returns ``{"test", "artifact", "key", "earlier", "store"}``.
    """
    from loopx_issue_fix import baserun, treerun

    key = baserun.base_key(state, tree, state.plan(), signature)
    earlier = baserun.reusable(reg, state, key) if key else None
    store = baserun.base_dir(state, key) / f"bytecode-{evidence_id}" if key and not earlier else None
    if earlier:
        test, artifact = baserun.take_over(state, earlier, tree, limit, evidence_id)
    else:
        warm = baserun.donor(reg, state, skip=key) if key else None
        test, artifact = treerun.run_on_tree(state, tree, limit, evidence_id, fill_cache=True, store=store,
                                             base_cache=warm, registry_url=reg.store.url)
    return {"test": test, "artifact": artifact, "key": key, "earlier": earlier, "store": store}


def _red(state: IssueFixState, test: JSON) -> tuple[str, str | None, list[str]]:
    """``(outcome, problem, failing test ids)`` of a reproduction's run: ``red``, ``not_reproduced``
    or ``not_a_test_failure`` (``problem`` says why)."""
    from loopx_issue_fix import testrun

    cases = test["report"]["cases"]
    problem = testrun.not_a_test_failure(test)
    # pytest reports set-up and tear-down errors as <error>; other runners (unittest) report an
    # exception raised inside the test that way, which is a test failing.
    red_statuses = ("failed",) if testrun.is_pytest(state.test_command) else ("failed", "error")
    failing = testrun.ids_with(test, *red_statuses)
    red_ids: list[str] = []
    outcome = "red"
    if problem is None and state.test_ids:
        found = testrun.match_ids(state.test_ids, cases)
        missing = [w for w, m in found.items() if m is None]
        if missing:
            problem = f"the named test(s) did not run: {', '.join(missing)}"
        else:
            red_ids = [str(found[w]) for w in state.test_ids]
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
    return outcome, problem, red_ids


def _test_files(worktree: str, cases: JSON, ids: list[str]) -> list[str]:
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


def handoff(reg: Registry, actor: str, *, run_id: str | None, root_cause: str | None = None, output: str | None = None,
            timeout: float | None = None, operation_id: str | None = None) -> JSON:
    """Write the reviewer packet for the verified commit and request the publish gate.

    The packet goes to LoopX's data directory (``loopx.api.files.save_artifact``: outside anything the
    agent can write, never in the diff it describes), its sha256 recorded; ``output`` gets a copy.
    One transaction records it, adds the ``production`` gate that holds the publish todo (the goal now waits for a user) and moves to ``publish``.
    """
    import hashlib

    from loopx import api

    from loopx_issue_fix import gitrepo, packet

    root_cause = api.ids.check_text(root_cause, what="--root-cause", limit="note", required=False)
    run, state, _ = steps.context(reg, run_id, ("handoff",), "handoff", timeout)
    ver = _verified(state)
    diff = gitrepo.diff(state.worktree, state.branch.base_commit, ver.commit)
    remote_moved, local_moved = steps.ref_changes(state, steps.refs(state))
    probed = packet.probe(state)
    state = attrs.evolve(state, git_changes=steps.git_log(state, "handoff", remote_moved, local_moved))
    with reg.read() as tx:
        text, warnings = packet.render(tx, run.goal_id, state, diff, root_cause, probed)
    data = text.encode("utf-8")
    # The packet a human decides on lives in LoopX's data directory, outside anything the agent
    # can write; `--output` gets a copy (on a step's behalf only beneath the step's own roots,
    # written without following a link: loopx.api.files.write).
    with reg.read() as tx:
        saved = api.files.save_artifact(tx, run.goal_id, "handoff.md", data)
    path = Path(saved["path"])
    copy = _copy_packet(output, data) if output else None
    sha = hashlib.sha256(data).hexdigest()
    gate_id = api.ids.new("gate")
    publish = state.publish
    refs = steps.refs(state)
    remote_moved, local_moved = steps.ref_changes(state, refs)

    def update(current: IssueFixState, evidence_id: str, w: Writer) -> tuple[IssueFixState | None, list[str], JSON]:
        if current.phase != "handoff":
            return None, [], {"gate_id": None}
        # The gate is requested now that there is something to decide on, for this commit.
        api.gates.request_in(w, gate_id=gate_id, scope="production", blocks=f"todo:{current.todos['publish']}",
                            # The title says what approving does: it is shown beside the decision.
                            title=(f"Publish: approving pushes verified commit {ver.commit[:12]} to "
                                   f"{publish.remote}/{current.branch.name}"
                                   + ("" if publish.provider == "push"
                                      else f" and opens a request with {publish.provider}"))[:200])
        info = Handoff(evidence_id=evidence_id, run_id=run.id, packet=str(path), sha256=sha, root_cause=root_cause,
                       warnings=warnings, copy=copy)
        return (attrs.evolve(current, phase="publish", handoff=info, publish_gate=gate_id,
                             publish_gate_commit=ver.commit, rejected=None, refs=refs,
                             git_changes=steps.git_log(current, "handoff", remote_moved, local_moved)),
                ["handoff"], {"gate_id": gate_id, "_written": ["rejected", "git_changes"]})

    out = steps.record(reg, actor, run, step="handoff", update=update, operation_id=operation_id,
                       request={"root_cause": root_cause, "packet_sha256": sha},
                       evidence={"kind": "handoff", "summary": f"issue-fix handoff: reviewer packet {path.name} for "
                                 f"{ver.commit[:12]} ({diff['files_changed']} file(s), +{diff['insertions']} "
                                 f"-{diff['deletions']}){'; WARNINGS: ' + '; '.join(warnings) if warnings else ''}",
                                 "data": {"step": "handoff", "commit": ver.commit, "warnings": warnings},
                                 "file_path": str(path), "file_sha256": "sha256:" + sha})
    out.update(packet_path=str(path), packet_sha256=sha, packet=text, warnings=warnings, packet_copy=copy,
               commit=ver.commit)
    return out


def _verified(state: IssueFixState) -> Verification:
    """The green verification a hand-off or publish step stands on (its phase says there is one)."""
    if state.verification is None:
        raise LoopxError("issue_fix.wrong_phase", f"goal {state.goal_id} has no verified commit")
    return state.verification


def _copy_packet(output: str, data: bytes) -> str:
    """Write ``--output``'s copy of the packet (``issue_fix.packet_unwritable`` where it cannot go)."""
    from loopx import api

    try:
        return str(api.files.write(output, data))
    except LoopxError as exc:
        if exc.code == "actor_forbidden":
            raise
        raise LoopxError("issue_fix.packet_unwritable", f"cannot write the hand-off packet to {output}: "
                         f"{exc.message}") from None


def publish(reg: Registry, actor: str, *, run_id: str | None, timeout: float | None = None,
            operation_id: str | None = None) -> JSON:
    """Publish exactly the verified commit, once a user approved the gate; then close the goal.

    Refused with ``gate_pending`` before approval. When the branch head or the worktree's code
    is not the verified commit any more, nothing is pushed: the attempt is recorded, the goal
    goes back to ``fix`` (verify again; a new gate is requested at the next hand-off) and the
    command fails with ``issue_fix.changed_since_verify``; when the verified commit's object does
    not hold the tree verify tested on the base commit as its parent (read with replace refs
    off), the same with ``issue_fix.tree_mismatch``.
    """
    from loopx import api

    from loopx_issue_fix import gitremote

    run, state, limit = steps.context(reg, run_id, ("publish",), "publish", timeout)
    with reg.read() as tx:
        gate = api.gates.load(tx, run.goal_id, state.publish_gate or "")  # set by hand-off, before publish
    if gate.status != "approved":
        raise LoopxError("gate_pending", f"publishing waits for a user to approve gate {gate.id} "
                         f"({gate.status}): loopx gate approve --goal-id {run.goal_id} --gate-id {gate.id}")
    wt, ver, branch, how = state.worktree, _verified(state), state.branch, state.publish
    moved = _moved_since_verify(state, ver)
    if moved:
        _refuse_publish(reg, actor, run, moved, operation_id)
    seconds = limit[0]
    # A request's body is the packet the user decided on: checked against its recorded sha256
    # before anything is pushed (artifact_tampered: nothing pushed, nothing opened).
    body = _packet_body(state) if how.provider != "push" else None
    remote_moved, local_moved = steps.ref_changes(state, steps.refs(state))
    pushed = gitremote.push(state.repo, branch.remote, ver.commit, branch.name, seconds)
    refs = steps.refs(state)
    request = _open_request(state, body or "", seconds) if how.provider != "push" else None

    def update(current: IssueFixState, evidence_id: str, w: Writer) -> tuple[IssueFixState | None, list[str], JSON]:
        if current.phase != "publish":
            return None, [], {}
        info = Published(evidence_id=evidence_id, commit=ver.commit, remote_sha=pushed["remote_sha"],
                         remote=branch.remote, branch=branch.name, provider=how.provider, request=request)
        return (attrs.evolve(current, phase="published", published=info, refs=refs,
                             git_changes=steps.git_log(current, "publish", remote_moved, local_moved),
                             attempts=attrs.evolve(current.attempts, publish=current.attempts.publish + 1),
                             log=steps.log(current, "publish", evidence_id, "published")),
                ["publish"], {"_close": True, "close_reason": f"issue-fix: verified commit {ver.commit[:12]} published",
                              "_written": ["git_changes"]})

    out = steps.record(reg, actor, run, step="publish", update=update, operation_id=operation_id,
                       request={"commit": ver.commit},
                       evidence={"kind": "publish", "summary": f"issue-fix publish: {branch.remote} now holds "
                                 f"{pushed['remote_sha']} at refs/heads/{branch.name} (the verified commit)"
                                 + (f"; {how.provider}: {request}" if request else ""),
                                 "data": {"step": "publish", "commit": ver.commit, "remote_sha": pushed["remote_sha"],
                                          "remote": branch.remote, "branch": branch.name, "gate_id": gate.id,
                                          "provider": how.provider, "request": request, "report": pushed["report"],
                                          "timeout_seconds": seconds, "timeout_source": limit[1]}})
    out.update(commit=ver.commit, remote_sha=pushed["remote_sha"], branch=branch.name, remote=branch.remote,
               provider=how.provider, request=request)
    out["removed"] = _remove_after_publish(state, wt)
    return out


def _moved_since_verify(state: IssueFixState, ver: Verification) -> JSON | None:
    """What makes the verified commit not the one to publish: ``{"code", "problem", "head", "tree"}``,
    or ``None``. What is pushed is the commit object itself: its tree must be the one verify
    exported and tested, its parent the base (read from the object as stored, replace refs off)."""
    from loopx_issue_fix import gitrepo

    wt, branch = state.worktree, state.branch
    pushed_tree, parents = gitrepo.commit_shape(state.repo, ver.commit)
    tested = ver.tested_tree
    if pushed_tree != tested or parents != [branch.base_commit]:
        return {"code": "tree_mismatch", "head": ver.commit, "tree": pushed_tree, "verified": ver.commit,
                "problem": f"commit {ver.commit[:12]} holds tree {pushed_tree[:12]} on "
                           f"{', '.join(p[:12] for p in parents)}, not the tested tree {tested[:12]} on the base "
                           f"{branch.base_commit[:12]}"}
    head, tree = gitrepo.commit_of(wt), gitrepo.candidate_tree(wt, state.outputs)
    moved = []
    if head != ver.commit:
        moved.append(f"the branch head is {head[:12]}, not the verified {ver.commit[:12]}")
    if tree != ver.tree:
        changed = gitrepo.changed_paths(wt, ver.tree, tree)
        moved.append(f"the worktree's code differs from it ({', '.join(changed[:5])})")
    if state.publish_gate_commit != ver.commit:
        moved.append("the approved gate was for another commit")
    if not moved:
        return None
    return {"code": "changed_since_verify", "head": head, "tree": tree, "verified": ver.commit,
            "problem": "; ".join(moved)}


def _refuse_publish(reg: Registry, actor: str, run: runs.Run, moved: JSON, operation_id: str | None) -> None:
    """Record the refused publish, send the goal back to verify, and raise ``issue_fix.<code>``."""
    from loopx import api

    code, problem, head, tree = moved["code"], moved["problem"], moved["head"], moved["tree"]

    def back(current: IssueFixState, evidence_id: str, w: Writer) -> tuple[IssueFixState | None, list[str], JSON]:
        for step in ("fix", "verify", "handoff"):
            api.todos.reopen_in(w, todo_id=current.todos[step],
                               note=f"issue-fix publish refused: changed since verify ({evidence_id})")
        return (attrs.evolve(current, phase="fix", verification=None, publish_gate=None, publish_gate_commit=None,
                             attempts=attrs.evolve(current.attempts, publish=current.attempts.publish + 1),
                             log=steps.log(current, "publish", evidence_id, code, problem)), [],
                {"_written": ["verification", "publish_gate", "publish_gate_commit"]})

    out = steps.record(reg, actor, run, step="publish", update=back, operation_id=operation_id,
                       request={"head": head, "tree": tree},
                       evidence=steps.evidence("publish", None, f"issue-fix publish refused: {code.replace('_', ' ')}: "
                                               f"{problem}", outcome=code, head=head, tree=tree,
                                               verified=moved["verified"]))
    raise LoopxError(f"issue_fix.{code}",
                     f"nothing published: {problem}; the goal is back to verify (evidence {out['evidence_id']})")


def _remove_after_publish(state: IssueFixState, wt: str) -> list[str]:
    """The goal is closed: its worktree and local branch go (the branch is on the remote), unless
    `start --keep` asked to keep them. The packet and the results stay in the goal's directory.
    An agent runs this step *inside* the worktree: removing it there would pull the directory
    from under the agent's next command; `loopx issue-fix clean` (also run by `start`) does it."""
    from loopx import api

    from loopx_issue_fix import gitrepo

    # Where the agent stands (a command served by the turn's broker runs elsewhere).
    here = Path(api.process.caller_dir() or Path.cwd())
    inside = here.resolve().is_relative_to(Path(wt).resolve()) if Path(wt).exists() else False
    if state.keep or inside:
        return []
    removed: list[str] = gitrepo.remove_goal_worktree(state.repo, wt, state.branch.name)
    return removed


def _packet_body(state: IssueFixState) -> str:
    """The recorded hand-off packet's text, only while its sha256 is the recorded one."""
    from loopx import api

    handoff = state.handoff
    if handoff is None:
        raise LoopxError("issue_fix.wrong_phase", f"goal {state.goal_id} has no hand-off packet")
    text: str = api.files.read_artifact(handoff.packet, handoff.sha256, what="the hand-off packet").decode(
        "utf-8", "replace")[:60000]
    return text


def _open_request(state: IssueFixState, body: str, timeout: float) -> str:
    """Open a pull (``gh``) or merge (``glab``) request from the pushed branch, ``body`` its
    description; its URL or output."""
    from loopx import api

    from loopx_issue_fix import gitremote

    provider, title = state.publish.provider, state.issue.title
    if provider == "gh":
        argv = ["gh", "pr", "create", "--head", state.branch.name, "--title", title, "--body", body]
    else:
        argv = ["glab", "mr", "create", "--source-branch", state.branch.name, "--title", title,
                "--description", body, "--yes"]
    # LoopX's own publishing, after a user approved it: outside the turn's confinement.
    # gh and glab run git in the repository: with the same settings as LoopX's own push.
    res = api.process.run(argv, env=gitremote.transport_env(state.repo), timeout=timeout, cwd=state.repo,
                      confine=False)
    if res["exit_code"] != 0 or res["timed_out"]:
        raise LoopxError("issue_fix.publish_failed", f"the branch is pushed, but `{provider}` could not open the request: "
                         f"{(res['output_tail'].strip().splitlines() or ['timed out'])[-1]}")
    line: str = res["output_tail"].strip().splitlines()[-1]
    return line
