"""Issue-Fix goals: starting one, reading its state, time-outs, and the next contract action.

An Issue-Fix goal is an ordinary LoopX goal (todos, a gate, evidence) plus the state this
capability owns in the ``issue_fix`` namespace. Its work happens in a git worktree of its own
(branch ``issue-fix/...`` from a clean base commit); the user's checkout is never used or
changed. The phases, in order:

``reproduce``  the test command must show named tests failing (red) -> ``fix``
``fix``        the agent edits the worktree; ``verify`` proves the fix, commits it -> ``handoff``
``handoff``    the reviewer packet is written and the publish gate requested -> ``publish``
``publish``    a user approves the gate; exactly the verified commit is published -> ``published``
               (the goal is closed with its criteria met)
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopx.api import LoopxError
from loopx_issue_fix.state import CAPABILITY, CRITERIA, JSON, STEPS, TODO_TEXT, IssueFixState, TestChangeGate

if TYPE_CHECKING:
    from loopx.api import ReadTx, Registry, Writer, goals

PHASES = ("reproduce", "fix", "handoff", "publish", "published")
PROVIDERS = ("push", "gh", "glab")
MAX_ISSUE_BYTES = 64 * 1024
#: The declared per-run wall-clock need; also the default time limit of one test run.
WALL_NEED_SECONDS = 60


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-")
    return slug or "issue"


def _read_issue(issue_text: str | None, issue_file: str | None) -> tuple[str, str]:
    from loopx import api

    if (issue_text is None) == (issue_file is None):
        raise LoopxError("invalid_argument", "give the issue as exactly one of --issue-text TEXT or --issue-file F")
    if issue_file is not None:
        try:
            with open(issue_file, "rb") as fh:
                raw = fh.read(MAX_ISSUE_BYTES + 1)
        except OSError as exc:
            raise LoopxError("invalid_argument", f"--issue-file {issue_file}: {exc.strerror}") from None
        try:
            issue_text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise LoopxError("invalid_argument", f"--issue-file {issue_file} is not UTF-8 text") from None
        source = f"file:{issue_file}"
    else:
        source = "text"
    return api.ids.check_text(issue_text, what="the issue text", limit="description"), source


def check_provider(provider: str) -> dict[str, Any]:
    """``{"provider", "tool"}`` if publishing through ``provider`` can work here, else refused."""
    import shutil

    if provider not in PROVIDERS:
        raise LoopxError("invalid_argument", f"--publish must be one of {', '.join(PROVIDERS)}")
    if provider == "push":
        return {"provider": "push", "tool": None}
    tool = shutil.which(provider)
    if tool is None:
        raise LoopxError("issue_fix.publish_unavailable",
                         f"--publish {provider}: the `{provider}` command is not installed; use --publish push "
                         "(push the branch and open the pull request yourself)")
    return {"provider": provider, "tool": tool}


def _check_report(report: str | None, command: str) -> str | None:
    from loopx_issue_fix import testrun

    if report is not None:
        if not report or report.startswith("/") or ".." in report.split("/"):
            raise LoopxError("invalid_argument", f"--report {report!r}: give a path inside the repository")
        return report
    if "{report}" in command or testrun.is_pytest(command):
        return None
    raise LoopxError("invalid_argument", "the test command must write a JUnit XML report: use pytest (LoopX adds "
                     "--junitxml), put {report} where the runner takes its report path, or name the file it writes "
                     "with --report PATH")


def start(reg: Registry, actor: str, *, repo: str, title: str, test_command: str, issue_text: str | None = None,
          issue_file: str | None = None, test_ids: tuple[str, ...] = (), report: str | None = None,
          allow_test_changes: bool = False, base: str | None = None, branch: str | None = None,
          remote: str = "origin", provider: str = "push", test_timeout: float | None = None,
          keep: bool = False, operation_id: str | None = None) -> JSON:
    """Create an Issue-Fix goal with a worktree and branch of its own, from a clean base commit.

    The base is ``--base`` or the user's ``HEAD`` commit; uncommitted changes in the user's
    checkout are neither used nor touched (they are reported as ``user_checkout.dirty``). One
    transaction writes the goal, the todos reproduce -> fix -> verify -> hand-off -> publish and
    the capability's state; the worktree is removed again if the registry refuses. The publish
    gate is not requested here but when the work reaches it (``handoff``).

    A plain pytest command's interpreter is fixed here (an absolute path, see
    :func:`testrun.plan`) and its start-up files fingerprinted (:func:`guard.environment`): later
    steps run the tests on exactly that interpreter and refuse when its ``.pth`` or
    ``sitecustomize`` files changed.
    """
    from loopx import api

    from loopx_issue_fix import gitlinks, gitrepo, steps

    title = api.ids.check_text(title, what="--title", limit="title")
    test_command = api.ids.check_text(test_command, what="--test-command", limit="text")
    issue, source = _read_issue(issue_text, issue_file)
    ids = [api.ids.check_text(t, what="--test-id", limit="summary") for t in test_ids]
    report = _check_report(report, test_command)
    remote = api.ids.check_text(remote, what="--remote", limit="agent")
    if remote.startswith("-") or any(c.isspace() for c in remote):
        raise LoopxError("invalid_argument", f"--remote: {remote!r} is not a git remote name")
    publish = check_provider(provider)
    root = gitrepo.toplevel(repo)
    common = gitlinks.user_common_dir(root)  # issue_fix.git_tampered: a .git/commondir planted in the checkout
    try:  # what earlier goals of this repository left behind once closed (a publish run by an agent)
        clean(reg, root, unknown=False)
    except LoopxError:
        pass
    goal_id = api.ids.new("goal")
    state = _initial_state(root, str(common), goal_id, title=title, issue=issue, source=source,
                           test_command=test_command, test_ids=ids, report=report,
                           allow_test_changes=allow_test_changes, base=base, branch=branch, remote=remote,
                           provider=publish["provider"], keep=keep, need=float(test_timeout or WALL_NEED_SECONDS))
    worktree, goal_dir = Path(state.worktree), Path(state.goal_dir)
    goal_dir.mkdir(parents=True, exist_ok=True)  # `clean` finds the goal's leftovers through it
    gitrepo.add_worktree(root, worktree, state.branch.name, state.branch.base_commit)
    state.refs = steps.refs(state)
    try:
        created: JSON = reg.mutate(actor, lambda w: _create(w, state, issue), operation_id=operation_id,
                                   request={"op": "issue_fix.start", "repo": root, "title": title, "issue": issue,
                                            "test": test_command, "test_ids": ids, "report": report,
                                            "base": state.branch.base_commit, "branch": state.branch.name,
                                            "remote": remote, "provider": provider,
                                            "allow_test_changes": bool(allow_test_changes),
                                            "test_timeout": state.test_timeout})
        return created
    except BaseException:
        gitrepo.remove_worktree(root, worktree, state.branch.name)
        import shutil

        shutil.rmtree(goal_dir, ignore_errors=True)
        shutil.rmtree(worktree.parent, ignore_errors=True)
        raise


def _initial_state(root: str, common: str, goal_id: str, *, title: str, issue: str, source: str, test_command: str,
                   test_ids: list[str], report: str | None, allow_test_changes: bool, base: str | None,
                   branch: str | None, remote: str, provider: str, keep: bool, need: float) -> IssueFixState:
    """A new goal's state: its worktree, branch and base commit, the test plan and the interpreter's
    fingerprint (git asked, nothing written yet)."""
    from loopx import api

    from loopx_issue_fix import baserun, gitrepo, guard, state as states, steps, testrun

    base_commit = gitrepo.commit_of(root, base or "HEAD")
    dirty = gitrepo.dirty_paths(root)
    name = gitrepo.check_branch_name(root, branch or f"issue-fix/{_slug(title)}-{goal_id[2:8]}")
    if gitrepo.branch_exists(root, name):
        raise LoopxError("issue_fix.branch_exists", f"branch {name} already exists in {root}; name another with --branch")
    planned = testrun.plan(test_command, root)
    environment = guard.environment(planned["interpreter"]) if planned else None
    return states.IssueFixState(
        repo=root, worktree=str(steps.worktree_root() / goal_id / "worktree"),
        goal_dir=str(gitrepo.common_dir(root) / "loopx-issue-fix" / goal_id),
        git_common_dir=common,  # the git links each step follows are checked against it (gitlinks.pin)
        issue=states.Issue(title=title, text=issue, source=source), test_command=test_command, test_ids=test_ids,
        report=report, allow_test_changes=bool(allow_test_changes), test_timeout=need,
        branch=states.Branch(name=name, base_commit=base_commit, base_tree=gitrepo.tree_of(root, base_commit),
                             remote=remote),
        user_checkout=states.UserCheckout(dirty=bool(dirty), dirty_paths=dirty[:20],
                                          branch=gitrepo.current_branch(root)),
        publish=states.Publish(provider=provider, remote=remote), phase="reproduce",
        todos={step: api.ids.new("todo") for step in STEPS}, runner=planned, environment=environment,
        # Taken right after asking (a user's command: no agent of this goal runs yet); later steps ask
        # the interpreter again only when the installation's signature differs (steps.environment_problem).
        environment_signature=baserun.signature(environment), keep=bool(keep))


def _create(w: Writer, state: IssueFixState, issue: str) -> JSON:
    """In the start's transaction: the goal, its todos in order, and the capability's state."""
    from loopx import api

    from loopx_issue_fix import state as states

    description = f"Fix this issue (worktree {state.worktree}, tests: {state.test_command}).\n\n{issue}"
    if len(description.encode()) > MAX_ISSUE_BYTES:
        description = issue
    # The goal uses Issue-Fix: only goals that enable it get its steps.
    api.goals.create_in(w, title=state.issue.title, description=description, criteria=CRITERIA, parallel_runs=False,
                       goal_id=state.goal_id, capabilities=[CAPABILITY])
    after: list[str] = []
    for step in STEPS:
        api.todos.add_in(w, todo_id=state.todos[step], text=TODO_TEXT[step], priority="P1", depends_on=after)
        after = [state.todos[step]]
    with api.state.acting(w, CAPABILITY) as cw:
        api.state.put(cw, states.NAMESPACE, states.initial(state))
    shown = states.unstructure(state)
    return {"goal_id": state.goal_id, "repo": state.repo, "worktree": state.worktree, "branch": state.branch.name,
            "base_commit": state.branch.base_commit, "user_checkout": shown["user_checkout"], "todos": state.todos,
            "publish": shown["publish"], "phase": "reproduce"}


def show(reg: Registry, goal_id: str) -> JSON:
    """An Issue-Fix goal's state, its todos, the publish gate, and the next step.

    A recorded hand-off packet is read back and checked against its recorded sha256 first
    (``packet``: its text): a packet changed since is refused with ``artifact_tampered``.
    """
    from loopx import api

    from loopx_issue_fix import state as states

    api.ids.check("goal", goal_id)
    with reg.read() as tx:
        goal = api.goals.load(tx, goal_id)
        state = states.load(tx, goal_id)
        stored = api.state.get(tx, goal_id, states.NAMESPACE)
        by_id = {t.id: t for t in api.todos.list(tx, goal_id)}
        gate = api.gates.load(tx, goal_id, state.publish_gate) if state.publish_gate else None
        handoff = state.handoff
        packet = api.files.read_artifact(handoff.packet, handoff.sha256, what="the hand-off packet").decode(
            "utf-8", "replace") if handoff else None
        tests = _test_change(tx, goal_id, state.test_change_gate)
        return {
            "goal_id": goal_id,
            "title": goal.title,
            "status": goal.status,
            "criteria": [{"text": c.text, "met": c.met} for c in goal.criteria],
            **states.shown(state, stored),
            "todo_status": {step: by_id[tid].status if tid in by_id else "missing"
                            for step, tid in state.todos.items()},
            "publish_gate_status": gate.status if gate else "not requested",
            "next": next_step(state, gate.status if gate else None),
            "packet": packet,
            "test_change": tests,
        }


def _test_change(tx: ReadTx, goal_id: str, asked: TestChangeGate | None) -> JSON | None:
    """The latest test-change gate verify requested: ``{gate_id, status, files, diff}``, ``diff``
    the unified diff of those test files (base -> candidate), read only while its sha256 is the
    recorded one (``artifact_tampered``); ``None`` when no gate was requested."""
    from loopx import api

    if not asked:
        return None
    gate = api.gates.load(tx, goal_id, asked.gate_id)
    saved = asked.diff
    diff = api.files.read_artifact(saved["path"], saved["sha256"], what="the test changes' diff").decode(
        "utf-8", "replace") if saved else None
    return {"gate_id": asked.gate_id, "status": gate.status, "files": sorted(asked.files), "diff": diff,
            "diff_path": saved["path"] if saved else None, "diff_sha256": saved["sha256"] if saved else None}


def next_step(state: IssueFixState, gate_status: str | None) -> str:
    """In words, what the goal waits for."""
    phase = state.phase
    if phase == "reproduce":
        return "run the tests and see the named tests fail (loopx issue-fix reproduce)"
    if phase == "fix":
        return f"edit the code in {state.worktree}, then loopx issue-fix verify"
    if phase == "handoff":
        return "write the reviewer packet and request the publish gate (loopx issue-fix handoff)"
    if phase == "publish":
        if gate_status == "approved":
            return "publish the verified commit: loopx issue-fix publish"
        return f"a user decides the production gate {state.publish_gate} ({gate_status})"
    return "done: the verified commit is published and the goal closed"


STEP_NOTES = {
    "reproduce": "run the tests and record which tests fail (red); not a test failure (time-out, collection "
                 "error, missing module) is refused",
    "verify": "edit the code in {worktree} (do not touch the failing tests), then run this: the failing tests "
              "must pass and nothing that passed may break; LoopX commits what it verified",
    "handoff": "write the reviewer packet (add --root-cause TEXT) and request the publish gate",
    "publish": "publish exactly the verified commit (the gate is approved)",
}


def contract_actions(tx: ReadTx, goal: goals.Goal, run_id: str | None, left: JSON | None) -> list[JSON] | None:
    """The one step of the goal's current phase, with its time limit, for a ``run`` contract."""
    from loopx import api

    from loopx_issue_fix import state as states, steps

    state = states.ContractView.of(api.state.get(tx, goal.id, states.NAMESPACE))
    if state is None or not run_id:
        return None
    step = {"reproduce": "reproduce", "fix": "verify", "handoff": "handoff", "publish": "publish"}.get(state.phase)
    if step is None:
        return None
    if step == "publish":
        gate = api.gates.load(tx, goal.id, state.publish_gate) if state.publish_gate else None
        if gate is None or gate.status != "approved":
            return None
    # A contract that opens a run is built before the run row exists; its lease starts now.
    try:
        expires_in: float | None = steps.expires_in(api.runs.load(tx, run_id).expires_at)
    except LoopxError:  # run_not_found: not opened yet
        expires_in = None
    seconds, how = steps.timeout_for(state.test_timeout, (left or {}).get("wall_seconds"), expires_in)
    command = shlex.join(["loopx", "issue-fix", step, "--run-id", run_id, "--timeout", str(seconds)])
    note = STEP_NOTES[step].format(worktree=state.worktree) + f" (time limit {seconds}s: {how})"
    rejected = state.rejected
    if step == "verify" and rejected:
        note += (f"; a user rejected publishing {str(rejected.commit)[:12]} at gate {rejected.gate_id}"
                 + (f": {rejected.comment}" if rejected.comment else ""))
    # The agent works in the goal's worktree: executor providers start it there.
    return [{"command": command, "note": note, "capability": CAPABILITY, "action": step,
             "workdir": state.worktree}]


def close(reg: Registry, actor: str, goal_id: str, *, keep: bool = False, reason: str | None = None,
          operation_id: str | None = None) -> JSON:
    """Close an Issue-Fix goal (as ``actor``, a user) and remove its worktree and branch (``keep``: leave
    them). The goal's directory (packet, results) stays. A goal already closed is only cleaned."""
    import attrs

    from loopx import api

    from loopx_issue_fix import gitrepo, state as states

    api.ids.check("goal", goal_id)
    reason = api.ids.check_text(reason, what="--reason", limit="note", required=False) or "issue-fix: closed by a user"
    with reg.read() as tx:
        goal = api.goals.load(tx, goal_id)
        state = states.load(tx, goal_id)

    def work(w: Writer) -> None:
        if goal.status != "closed":
            api.goals.close_in(w, reason=reason)
        if keep != state.keep:  # `clean` leaves a kept worktree alone
            states.save(w, attrs.evolve(states.load(w.tx, goal_id), keep=bool(keep)))

    if goal.status != "closed" or keep != state.keep:
        reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                   request={"op": "issue_fix.close", "goal": goal_id, "keep": bool(keep), "reason": reason})
    removed = [] if keep else gitrepo.remove_goal_worktree(state.repo, state.worktree, state.branch.name)
    import shutil

    shutil.rmtree(Path(state.goal_dir, "bytecode"), ignore_errors=True)  # a cache: no use once closed
    return {"goal_id": goal_id, "status": "closed", "kept": bool(keep), "removed": removed,
            "worktree": state.worktree, "branch": state.branch.name}


def clean(reg: Registry, repo: str, *, unknown: bool = True) -> JSON:
    """Remove what closed (and, with ``unknown``, unregistered) Issue-Fix goals left in ``repo``: their
    worktrees, branches and test-run copies (goals started or closed with ``--keep`` keep theirs).
    Open goals are not touched."""
    import shutil

    from loopx import api

    from loopx_issue_fix import baserun, gitrepo, state as states, steps

    root = gitrepo.toplevel(repo)
    base = gitrepo.common_dir(root) / "loopx-issue-fix"
    branches = gitrepo.worktree_branches(root)
    removed, kept = [], []
    for goal_dir in sorted(base.iterdir()) if base.is_dir() else []:
        if not goal_dir.is_dir():
            continue
        state, status = None, "unknown"
        try:
            with reg.read() as tx:
                status = api.goals.load(tx, goal_dir.name).status
                state = states.load(tx, goal_dir.name)
        except LoopxError:
            pass
        if status != "closed" and not (unknown and status == "unknown"):
            continue
        shutil.rmtree(goal_dir / "runs", ignore_errors=True)
        shutil.rmtree(goal_dir / "bytecode", ignore_errors=True)
        if state and state.keep:
            kept.append(goal_dir.name)
            continue
        worktree = state.worktree if state else str(steps.worktree_root() / goal_dir.name / "worktree")
        branch = state.branch.name if state else branches.get(worktree)
        gone = gitrepo.remove_goal_worktree(root, worktree, branch)
        if gone:
            removed.append({"goal_id": goal_dir.name, "status": status, "removed": gone})
    return {"repo": root, "removed": removed, "kept": kept, "bases_removed": baserun.prune(base.parent)}
