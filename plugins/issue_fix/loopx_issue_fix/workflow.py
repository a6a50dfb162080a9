"""Issue-Fix goals: starting one, reading its state, and the next action of its current phase.

An Issue-Fix goal is an ordinary LoopX goal (todos, actions, a gate, evidence) plus the state
this capability owns in the ``issue_fix`` namespace. The phases, in order:

``reproduce``  the test command must be seen failing (red) -> ``fix``
``fix``        the agent edits; ``verify`` must see the test pass on changed code -> ``handoff``
``handoff``    a reviewer-ready packet is written -> ``publish``
``publish``    behind a ``production`` gate: a user approves, then the branch is pushed -> ``published``
"""

from __future__ import annotations

import re
import shlex
import sys

from loopx.api import LoopxError

CAPABILITY = "issue_fix"
NAMESPACE = "issue_fix"
PHASES = ("reproduce", "fix", "handoff", "publish", "published")
STEPS = ("reproduce", "fix", "verify", "handoff", "publish")
TODO_TEXT = {
    "reproduce": "Reproduce the issue: run the test command and see it fail",
    "fix": "Fix the issue: edit the code so that the failing test passes",
    "verify": "Verify the fix: run the test command again and see it pass on the changed code",
    "handoff": "Hand off: write the reviewer packet (issue, root cause, diff stat, test evidence)",
    "publish": "Publish: push the branch for a pull request (after a user approves the production gate)",
}
MAX_ISSUE_BYTES = 64 * 1024


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-")
    return slug or "issue"


def _read_issue(issue_text: str | None, issue_file: str | None) -> tuple[str, str]:
    from loopx.api import check_text

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
    return check_text(issue_text, what="the issue text", limit="description"), source


def publish_argv() -> list[str]:
    """The command of the goal's ``publish`` action: this LoopX, run by ``loopx exec``."""
    return [sys.executable, "-m", "loopx", "issue-fix", "publish"]


def start(reg, actor: str, *, repo: str, title: str, test_command: str, issue_text: str | None = None,
          issue_file: str | None = None, branch: str | None = None, remote: str = "origin",
          operation_id: str | None = None) -> dict:
    """Create an Issue-Fix goal for ``repo`` and check out its working branch.

    One transaction writes the goal, the todos reproduce -> fix -> verify -> hand-off ->
    publish, the allowed ``test`` action, the ``publish`` action, the ``production`` gate that
    holds both the publish todo and the publish action, and the capability's state. Git is
    checked before anything is written; the new branch is
    removed again if the registry refuses.
    """
    from loopx.api import (acting, check_text, new_id, put_state, writer_add_action, writer_add_todo,
                           writer_create_goal, writer_request_gate)

    from loopx_issue_fix import gitrepo

    title = check_text(title, what="--title", limit="title")
    test_command = check_text(test_command, what="--test-command", limit="text")
    issue, source = _read_issue(issue_text, issue_file)
    remote = check_text(remote, what="--remote", limit="agent")
    if remote.startswith("-") or any(c.isspace() for c in remote):
        raise LoopxError("invalid_argument", f"--remote: {remote!r} is not a git remote name")
    root = gitrepo.toplevel(repo)
    base = gitrepo.head(root)
    previous = gitrepo.current_branch(root)
    goal_id = new_id("goal")
    branch = gitrepo.check_branch_name(root, branch or f"issue-fix/{_slug(title)}-{goal_id[2:8]}")
    if gitrepo.branch_exists(root, branch):
        raise LoopxError("issue_fix_error", f"branch {branch} already exists in {root}; name another with --branch")
    todo_ids = {step: new_id("todo") for step in STEPS}
    gate_id = new_id("gate")
    description = f"Fix this issue in {root} (test: {test_command}).\n\n{issue}"
    if len(description.encode()) > MAX_ISSUE_BYTES:
        description = issue
    state = {
        "repo": root,
        "issue": {"title": title, "text": issue, "source": source},
        "test_command": test_command,
        "branch": {"name": branch, "base_commit": base, "previous": previous, "remote": remote},
        "phase": "reproduce",
        "attempts": {"reproduce": 0, "verify": 0},
        "todos": todo_ids,
        "publish_gate": gate_id,
    }

    def work(w):
        writer_create_goal(w, title=title, description=description, goal_id=goal_id, parallel_runs=False,
                           criteria=["the test command fails before the fix and passes after it",
                                     "a reviewer packet is written"])
        after: list[str] = []
        for step in STEPS:
            writer_add_todo(w, todo_id=todo_ids[step], text=TODO_TEXT[step], priority="P1", depends_on=after)
            after = [todo_ids[step]]
        writer_add_action(w, name="test", argv=["sh", "-c", f"cd {shlex.quote(root)} && {test_command}"],
                          source=f"capability:{CAPABILITY}")
        # One production gate holds both the publish todo (so the goal asks the user once the
        # hand-off is written) and the publish action (so no contract offers it before approval).
        writer_request_gate(w, gate_id=gate_id, scope="production", blocks=f"todo:{todo_ids['publish']}",
                            title=f"Publish the fix: push {branch} to {remote} for a pull request")
        writer_add_action(w, name="publish", argv=publish_argv(), gate_id=gate_id, source=f"capability:{CAPABILITY}")
        with acting(w, CAPABILITY) as cw:
            put_state(cw, NAMESPACE, state)
        return {"goal_id": goal_id, "repo": root, "branch": branch, "base_commit": base,
                "todos": todo_ids, "publish_gate": gate_id, "phase": "reproduce"}

    gitrepo.switch_new_branch(root, branch)
    try:
        return reg.mutate(actor, work, operation_id=operation_id,
                          request={"op": "issue_fix.start", "repo": root, "title": title, "issue": issue,
                                   "test": test_command, "branch": branch, "remote": remote})
    except BaseException:
        gitrepo.undo_new_branch(root, branch, previous, base)
        raise


def load_state(tx, goal_id: str) -> dict:
    """The goal's ``issue_fix`` state (``issue_fix_error`` if it is not an Issue-Fix goal)."""
    from loopx.api import get_state

    state = get_state(tx, goal_id, NAMESPACE)
    if not state.get("phase"):
        raise LoopxError("issue_fix_error", f"goal {goal_id} is not an Issue-Fix goal (no issue_fix state)")
    return state


def show(reg, goal_id: str) -> dict:
    """An Issue-Fix goal's state, its todos, the publish gate, and the next step."""
    from loopx.api import check_id, list_todos, load_gate, load_goal

    check_id("goal", goal_id)
    with reg.read() as tx:
        goal = load_goal(tx, goal_id)
        state = load_state(tx, goal_id)
        by_id = {t.id: t for t in list_todos(tx, goal_id)}
        gate = load_gate(tx, goal_id, state["publish_gate"])
        return {
            "goal_id": goal_id,
            "title": goal.title,
            "status": goal.status,
            **state,
            "todo_status": {step: by_id[tid].status if tid in by_id else "missing"
                            for step, tid in state["todos"].items()},
            "publish_gate_status": gate.status,
            "next": next_step(state, gate.status),
        }


def next_step(state: dict, gate_status: str) -> str:
    """In words, what the goal waits for."""
    phase = state["phase"]
    if phase == "reproduce":
        return "run the test command and see it fail (loopx issue-fix reproduce)"
    if phase == "fix":
        return "edit the code until the test passes, then loopx issue-fix verify"
    if phase == "handoff":
        return "write the reviewer packet (loopx issue-fix handoff)"
    if phase == "publish":
        if gate_status == "approved":
            return "publish: loopx exec --run-id R --action publish"
        return f"a user decides the production gate {state['publish_gate']} ({gate_status})"
    return "done: the branch is published"


def contract_actions(tx, goal, run_id: str | None) -> list[dict] | None:
    """The next action of the goal's current phase, for a ``run`` contract (or ``None``)."""
    from loopx.api import get_state

    state = get_state(tx, goal.id, NAMESPACE)
    phase = state.get("phase")
    if not phase or not run_id:
        return None
    repo = state.get("repo", "the repository")
    if phase == "reproduce":
        step, note = "reproduce", "run the test command and record the failure it shows (red)"
    elif phase == "fix":
        step, note = "verify", (f"edit the code in {repo} to fix the issue, then run this to see the test "
                                "pass on the changed code (green)")
    elif phase == "handoff":
        step, note = "handoff", "write the reviewer packet (add --root-cause TEXT to explain the cause)"
    else:
        return None
    command = shlex.join(["loopx", "issue-fix", step, "--run-id", run_id])
    return [{"command": command, "note": note, "capability": CAPABILITY, "action": step}]
