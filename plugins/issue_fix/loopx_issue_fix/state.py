"""Issue-Fix's own state: attrs classes, read from and written to the goal's ``issue_fix`` namespace.

The core keeps a capability's state as one JSON value per top-level key. :func:`load` structures
those keys into an :class:`IssueFixState` (cattrs); :func:`save` unstructures it again and writes
only the keys whose value changed, so the stored shape (and what ``loopx issue-fix show`` prints)
is the one the dict-based code wrote.

The shape is versioned (``state_version``). A goal written before the version existed (version
0: the plain dict of earlier releases, where some keys are absent) is brought up to
:data:`VERSION` by :func:`migrate` when it is read; the next write records the migrated values
and the version.

cattrs is imported only when state is read or written, never when this module is imported, and
never on ``quota should-run``'s path: the contract reads a :class:`ContractView` built by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import attrs

if TYPE_CHECKING:
    import cattrs
    from loopx.api import ReadTx, Writer

CAPABILITY = "issue_fix"
NAMESPACE = "issue_fix"
#: The shape this code writes; :func:`migrate` brings older shapes up to it.
VERSION = 1
VERSION_KEY = "state_version"
#: The todos a goal gets, in order (each depends on the one before).
STEPS = ("reproduce", "fix", "verify", "handoff", "publish")
TODO_TEXT = {
    "reproduce": "Reproduce the issue: run the tests and see the named tests fail",
    "fix": "Fix the issue: edit the code in the goal's worktree so that the failing tests pass",
    "verify": "Verify the fix: the failing tests pass, nothing that passed breaks, the tests are unchanged",
    "handoff": "Hand off: write the reviewer packet and request the publish gate",
    "publish": "Publish exactly the verified commit (after a user approves the production gate)",
}
CRITERIA = ["the failing tests fail before the fix and pass after it, with no test weakened or broken",
            "a reviewer packet is written",
            "exactly the verified commit is published after a user's approval"]

#: A JSON object whose keys belong to another module (a test plan, an interpreter's fingerprint, refs).
JSON = dict[str, Any]


@attrs.define
class Issue:
    """The issue as the user gave it."""

    title: str
    text: str
    source: str


@attrs.define
class Branch:
    """The goal's working branch, the commit it starts from and where it is published."""

    name: str
    base_commit: str
    base_tree: str
    remote: str


@attrs.define
class UserCheckout:
    """The user's checkout at ``start`` (never used or changed)."""

    dirty: bool
    dirty_paths: list[str]
    branch: str | None


@attrs.define
class Publish:
    """How the verified commit is published (``push``, ``gh`` or ``glab``)."""

    provider: str
    remote: str


@attrs.define
class Attempts:
    """How often each step ran."""

    reproduce: int = 0
    verify: int = 0
    publish: int = 0


@attrs.define
class LogEntry:
    """One attempt in order: a step named by its evidence, or a user's decision by its gate."""

    step: str
    outcome: str
    evidence_id: str | None = None
    gate_id: str | None = None
    detail: str | None = None


@attrs.define
class GitChange:
    """Refs that moved outside LoopX before one of its steps."""

    step: str
    remote: list[str]
    local: list[str]


@attrs.define
class Reproduction:
    """The red run: the failing tests, the files holding them, the code they failed on."""

    evidence_id: str
    run_id: str
    commit: str
    tree: str
    failing: list[str]
    files: list[str]
    passed: int = 0
    exit_code: int | None = None
    exit_status: int | None = None
    cases_total: int | None = None
    results_sha256: str | None = None
    #: ``None``: recorded before the test files were (verify then does not look for new ones).
    test_files: list[str] | None = None
    data_files: list[str] = attrs.Factory(list)
    base_key: str | None = None
    reused: JSON | None = None


@attrs.define
class Verification:
    """The green run and the commit LoopX made of the code it tested."""

    evidence_id: str
    run_id: str
    commit: str
    tree: str
    tested_tree: str
    parent: str | None = None
    passed: list[str] = attrs.Factory(list)
    ignored: list[str] = attrs.Factory(list)
    results_sha256: str | None = None
    cases_total: int | None = None
    pass_to_pass: JSON = attrs.Factory(dict)
    accepted_failing: list[str] = attrs.Factory(list)
    diff: JSON = attrs.Factory(dict)
    paths: list[str] = attrs.Factory(list)


@attrs.define
class Handoff:
    """The reviewer packet (in LoopX's data directory, its sha256) and the hand-off's evidence."""

    evidence_id: str
    run_id: str
    packet: str
    sha256: str
    root_cause: str | None = None
    warnings: list[str] = attrs.Factory(list)
    copy: str | None = None


@attrs.define
class Published:
    """What the remote holds after ``publish``."""

    evidence_id: str
    commit: str
    remote_sha: str
    remote: str
    branch: str
    provider: str
    request: str | None = None


@attrs.define
class Rejected:
    """A rejected publish gate and the hand-off it rejected (reopening the gate restores it)."""

    gate_id: str
    publish_todo: str
    comment: str | None = None
    commit: str | None = None
    verification: Verification | None = None
    handoff: Handoff | None = None


@attrs.define
class TestChangeGate:
    """The gate verify requested for changed test files: ``{path: blob id}`` and the saved diff."""

    gate_id: str
    #: ``{path: blob id}`` (``None``: the change deletes the file).
    files: dict[str, str | None]
    diff: JSON | None = None


@attrs.define
class AcceptFailingGate:
    """The gate verify requested for tests that still fail (they failed at the base too)."""

    gate_id: str
    tests: list[str]


@attrs.define
class IssueFixState:
    """Everything Issue-Fix keeps about one goal (``docs/capabilities/issue_fix.md``)."""

    repo: str
    worktree: str
    goal_dir: str
    issue: Issue
    test_command: str
    branch: Branch
    user_checkout: UserCheckout
    publish: Publish
    phase: str
    todos: dict[str, str]
    test_ids: list[str] = attrs.Factory(list)
    report: str | None = None
    allow_test_changes: bool = False
    test_timeout: float = 60.0
    attempts: Attempts = attrs.Factory(Attempts)
    git_common_dir: str | None = None
    log: list[LogEntry] = attrs.Factory(list)
    outputs: list[str] = attrs.Factory(list)
    #: The test plan fixed at ``start`` (``None``: a command run under ``sh -c``).
    runner: JSON | None = None
    #: ``False`` for a goal started before the plan was fixed at start: it is made at each step.
    runner_fixed: bool = True
    environment: JSON | None = None
    environment_signature: str | None = None
    keep: bool = False
    refs: JSON | None = None
    git_changes: list[GitChange] = attrs.Factory(list)
    reproduction: Reproduction | None = None
    verification: Verification | None = None
    handoff: Handoff | None = None
    publish_gate: str | None = None
    publish_gate_commit: str | None = None
    published: Published | None = None
    rejected: Rejected | None = None
    test_change_gate: TestChangeGate | None = None
    accept_failing_gate: AcceptFailingGate | None = None
    accepted_failing: list[str] = attrs.Factory(list)
    approved_test_changes: list[str] = attrs.Factory(list)
    flaky: list[str] = attrs.Factory(list)
    state_version: int = VERSION

    @property
    def goal_id(self) -> str:
        """The goal this state belongs to (its directory's name)."""
        return Path(self.goal_dir).name

    def plan(self) -> JSON | None:
        """How the tests run: the plan fixed at ``start`` (interpreter, pytest arguments), or ``None``
        for a command LoopX runs under ``sh -c``."""
        if self.runner_fixed:
            return self.runner
        from loopx_issue_fix import testrun

        return testrun.plan(self.test_command, self.repo)


def migrate(raw: JSON) -> JSON:
    """``raw`` (a stored ``issue_fix`` namespace, of any version) in the shape of :data:`VERSION`.

    Version 0 is the dict earlier releases wrote: keys added over time may be absent, and a
    missing ``runner`` meant "plan the run at each step".
    """
    out = dict(raw)
    if int(out.get(VERSION_KEY) or 0) < 1:
        if "runner" not in out:
            out["runner_fixed"] = False
        attempts = out.get("attempts") or {}
        out["attempts"] = {"reproduce": 0, "verify": 0, "publish": 0, **attempts}
        for key in ("verification",):
            if out.get(key):
                out[key] = _verification_v1(out[key])
        if out.get("rejected") and out["rejected"].get("verification"):
            out["rejected"] = {**out["rejected"], "verification": _verification_v1(out["rejected"]["verification"])}
        out[VERSION_KEY] = 1
    return out


def _verification_v1(ver: JSON) -> JSON:
    # A verification recorded before it kept the tree it tested apart from the commit's.
    return {"tested_tree": ver["tree"], **ver}


_CONVERTER: cattrs.Converter | None = None


def converter() -> cattrs.Converter:
    """The converter for the state classes, made on first use (cattrs stays off should-run's imports)."""
    global _CONVERTER
    if _CONVERTER is None:
        import cattrs
        from cattrs.gen import make_dict_unstructure_fn

        conv = cattrs.Converter()
        # A log entry keeps only the keys it has: a step's names its evidence, a decision its gate.
        conv.register_unstructure_hook(LogEntry, make_dict_unstructure_fn(LogEntry, conv,
                                                                          _cattrs_omit_if_default=True))
        _CONVERTER = conv
    return _CONVERTER


def structure(raw: JSON) -> IssueFixState:
    """A stored namespace (any version) as an :class:`IssueFixState`."""
    return converter().structure(migrate(raw), IssueFixState)


def unstructure(state: IssueFixState) -> JSON:
    """``state`` as the namespace's keys and JSON values."""
    out: JSON = converter().unstructure(state)
    return out


def is_issue_fix(raw: JSON) -> bool:
    """Whether a stored namespace is an Issue-Fix goal's state."""
    return bool(raw.get("phase")) and "worktree" in raw


def load(tx: ReadTx, goal_id: str) -> IssueFixState:
    """The goal's Issue-Fix state (``issue_fix.not_an_issue_fix_goal`` if it is not one)."""
    from loopx.api import LoopxError
    from loopx import api

    raw = api.state.get(tx, goal_id, NAMESPACE)
    if not is_issue_fix(raw):
        raise LoopxError("issue_fix.not_an_issue_fix_goal", f"goal {goal_id} is not an Issue-Fix goal (no issue_fix state)")
    return structure(raw)


def find(tx: ReadTx, goal_id: str) -> IssueFixState | None:
    """The goal's Issue-Fix state, or ``None`` when it has none."""
    from loopx import api

    raw = api.state.get(tx, goal_id, NAMESPACE)
    return structure(raw) if is_issue_fix(raw) else None


#: The keys a goal's state gets only when a step sets them (``start`` writes every other one).
LATER = frozenset({"runner_fixed", "git_changes", "reproduction", "verification", "handoff", "publish_gate_commit",
                   "published", "rejected", "test_change_gate", "accept_failing_gate", "accepted_failing",
                   "approved_test_changes", "flaky"})


def initial(state: IssueFixState) -> JSON:
    """What ``start`` writes: every key but the :data:`LATER` ones, with the version."""
    return {k: v for k, v in unstructure(state).items() if k not in LATER}


@attrs.frozen
class ContractView:
    """What a ``run`` contract needs of the state (:func:`workflow.contract_actions`).

    Built by hand from the stored keys, not through cattrs: ``quota should-run`` builds the
    contract before every agent turn, and importing cattrs and generating its code for these
    classes would cost that path more than the rest of the hook (as ``loopx.domain.goals`` does for a
    goal). The keys are read after :func:`migrate`, so the view follows the same versions.
    """

    phase: str
    worktree: str
    test_timeout: float
    publish_gate: str | None
    rejected: Rejected | None

    @classmethod
    def of(cls, raw: JSON) -> ContractView | None:
        """The view of a stored namespace, or ``None`` when it is not an Issue-Fix goal's."""
        if not is_issue_fix(raw):
            return None
        now = migrate(raw)
        back = now.get("rejected")
        return cls(phase=now["phase"], worktree=now["worktree"], test_timeout=float(now.get("test_timeout", 60.0)),
                   publish_gate=now.get("publish_gate"),
                   rejected=Rejected(gate_id=back["gate_id"], publish_todo=back["publish_todo"],
                                     comment=back.get("comment"), commit=back.get("commit")) if back else None)


def changes(before: JSON, after: IssueFixState, also: Iterable[str] = ()) -> JSON:
    """The keys of ``after`` whose value is not what ``before`` (the stored namespace) holds; a key
    ``before`` lacks counts as holding its default, except the keys named in ``also`` (a step that
    clears a key, such as a failed verify's ``verification``, writes it: ``show`` prints it then)."""
    now = unstructure(after)
    defaults = _defaults()
    out = {k: v for k, v in now.items()
           if before.get(k, _ABSENT if k in also else defaults.get(k, _ABSENT)) != v}
    if before.get(VERSION_KEY) != VERSION:
        out[VERSION_KEY] = VERSION
    return out


def save(w: Writer, state: IssueFixState, also: Iterable[str] = ()) -> None:
    """Inside a mutation of the goal: write the keys of ``state`` that changed (and those in
    ``also``, see :func:`changes`), as the capability."""
    from loopx import api

    assert w.goal_id is not None  # a goal's mutation: the one its state is saved in
    values = changes(api.state.get(w.tx, w.goal_id, NAMESPACE), state, also)
    if values:
        with api.state.acting(w, CAPABILITY) as cw:
            api.state.put(cw, NAMESPACE, values)


def shown(state: IssueFixState, before: JSON) -> JSON:
    """The state as ``show`` prints it: the keys the goal's namespace holds (sorted, as stored),
    those set since, never the version."""
    import json

    now = unstructure(state)
    defaults = _defaults()
    keep = {k: v for k, v in now.items() if k != VERSION_KEY and k != "runner_fixed"
            and (k in before or v != defaults.get(k, _ABSENT))}
    out: JSON = json.loads(json.dumps(keep, sort_keys=True))
    return out


_ABSENT = object()


def _defaults() -> JSON:
    """The unstructured default of every field that has one (the version excepted)."""
    out: JSON = {}
    for field in attrs.fields(IssueFixState):
        if field.default is attrs.NOTHING or field.name == VERSION_KEY:
            continue
        factory = getattr(field.default, "factory", None)  # an attrs.Factory
        default = factory() if callable(factory) else field.default
        out[field.name] = converter().unstructure(default)
    return out
