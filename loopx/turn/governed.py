"""A governed turn: should-run, then an executor inside the turn's confinement, then ``run finish``.

:func:`turn` is what ``loopx turn`` and the worker run; :func:`loop` repeats it; :func:`step` is
the confinement (and the broker) every child process of a turn runs inside. The executors
themselves are in :mod:`loopx.turn.executors`.
"""

from __future__ import annotations

from contextlib import contextmanager

from loopx.turn.executors import CheckedExecutor, InterruptibleExecutor, get


def turn(registry, actor: str, *, goal_id: str, executor: str = "shell", agent: str | None = None,
         ttl_seconds: float | None = None, unconfined: bool = False, run_cli=None,
         owner: dict | None = None) -> dict:
    """One governed turn: should-run, then (if ``run``) the provider, then ``run finish``.

    Returns ``{"decision", "reasons", "run_id", "outcome", "handoff", "evidence", "contract"}``;
    ``run_id`` and the rest are ``None`` when the decision was not ``run``. A provider that
    crashes still gets its run finished (``failed``, with the error as hand-off) before the
    error is raised again. A provider's ``ok`` is recorded only when the run's evidence supports
    it (see :func:`loopx.domain.runs.finish`).

    The provider runs inside the turn's confinement (:func:`step`): refused with
    ``confinement_unavailable`` before a run is opened where the machine cannot confine a step,
    unless ``unconfined`` (``--unconfined``, ``LOOPX_UNCONFINED=1``); an unconfined turn says so
    in its evidence and hand-off. ``run_cli``: the CLI in this process, for the broker's cheap path.

    The run is opened with this process as its owner (``owner``, :mod:`loopx.domain.claims`). When a
    stop was requested meanwhile (SIGTERM / SIGINT, :mod:`loopx.sandbox.interrupt`) the run is closed
    ``interrupted`` with the interruption as evidence; a stop asked for before should-run opens
    no run at all (``decision`` None, reason ``interrupted_before_start``: nothing charged).
    """
    from loopx.domain import claims, runs
    from loopx.sandbox import interrupt
    from loopx.views.should_run import should_run, default_agent
    from loopx.values.validate import check_text

    provider = get(executor)
    # A provider that cannot work (no CLI, a bad template) says so before a run is opened.
    if isinstance(provider, CheckedExecutor):
        provider.check()
    seed = getattr(provider, "seed_goal", None)
    if seed is not None:  # an agent CLI's own directory for this goal (loopx.turn.executors.homes): no charge if it fails
        seed(registry, goal_id)
    from loopx.turn import confine

    backend = confine.check(unconfined)
    agent = check_text(agent if agent is not None else default_agent(), what="--agent", limit="agent")
    if interrupt.requested():  # a stop asked for before should-run: open no run, charge nothing
        return {"decision": None, "reasons": ["interrupted_before_start"], "run_id": None, "outcome": None,
                "handoff": None, "evidence": [], "contract": None, "interrupted": interrupt.describe()}
    from loopx.ledger import step_journal

    # Runs an earlier turn could not finish for a full disk are closed first, with what it kept.
    step_journal.replay_finishes(registry, lambda reg, **kept: runs.finish(reg, actor, **kept))
    answer = should_run(registry, actor, goal_id=goal_id, agent=agent, ttl_seconds=ttl_seconds,
                              owner=owner or claims.owner_here())
    out = {"decision": answer["decision"], "reasons": answer["reasons"], "run_id": None, "outcome": None,
           "handoff": None, "evidence": [], "contract": answer}
    if answer["decision"] != "run":
        return out
    run_id = answer["interaction_contract"]["run_id"]
    claims.check_not_carried_out_elsewhere(registry, run_id)
    # Room for this turn's finish, taken now: if the disk fills during the turn, its end is kept.
    kept_finish = step_journal.intend_finish(registry, run_id=run_id, goal_id=goal_id)
    try:
        return _carry_out(registry, actor, provider, answer, out, executor=executor, agent=agent, backend=backend,
                          run_cli=run_cli, goal_id=goal_id, run_id=run_id, kept_finish=kept_finish)
    finally:
        kept_finish.release()


def _finish_or_keep(registry, actor: str, kept_finish, **fields) -> dict:
    """``runs.finish`` and, when the disk is full, the finish kept in the step journal (replayed
    by the next turn or worker round) before ``disk_full`` is raised."""
    from loopx.domain import runs
    from loopx.values.errors import LoopxError

    try:
        finished = runs.finish(registry, actor, **fields)
    except LoopxError as err:
        if err.code == "disk_full" and kept_finish.keep(**{k: v for k, v in fields.items() if k != "run_id"}):
            raise LoopxError("disk_full", f"{err.message}; the run's end is kept in the step journal and recorded"
                                          " by the next turn once there is space") from None
        raise
    kept_finish.done()
    return finished


def _carry_out(registry, actor, provider, answer, out, *, executor, agent, backend, run_cli, goal_id, run_id,
               kept_finish) -> dict:
    """The run's part of :func:`turn`: the provider inside the step, then the run's finish."""
    from loopx.domain import claims
    from loopx.sandbox import interrupt
    from loopx.store.queries.evidence import run_evidence_brief

    try:
        # The goal's workspace (loopx.domain.workspace), made on demand: the step runs there, never in
        # the user's checkout (this directory, the goal's project), unless a capability gave its own.
        from loopx.domain import workspace

        made = workspace.for_turn(registry, actor, goal_id, answer)
        with step(registry, run_id=run_id, goal_id=goal_id, agent=agent,
                  workdir=answer["interaction_contract"]["agent_channel"].get("workdir"), backend=backend,
                  run_cli=run_cli, limits=answer["interaction_contract"]["agent_channel"].get("limits"),
                  home_read=declared_home(provider)), _inside(made):
            # How the core asks an executor to stop (SIGTERM / Ctrl-C): its interrupt(), if it has
            # one; then, after the grace period, the process groups of every child it started.
            with interrupt.on_stop(provider.interrupt if isinstance(provider, InterruptibleExecutor) else None):
                result = provider.run_turn(registry, answer, agent=agent)
    except Exception as exc:
        if interrupt.requested():
            result = {}
        else:
            _finish_or_keep(registry, actor, kept_finish, run_id=run_id, outcome="failed",
                            handoff=f"executor {executor} crashed: {type(exc).__name__}: {exc}"[:2000])
            raise
    if interrupt.requested():  # --- interrupted: record it, close the run at once ---
        finished = claims.close_interrupted(registry, actor, run_id=run_id, executor=executor, agent=agent,
                                            info=interrupt.describe(), result=result)
        kept_finish.done()
        with registry.read() as tx:
            rows = run_evidence_brief(tx, run_id)
        out.update(run_id=run_id, outcome=finished["outcome"], handoff=finished["handoff"], evidence=rows)
        return out
    if backend is None:
        result = {**result, "handoff": "[unconfined] " + (result.get("handoff") or "")}
    # A provider may report failed or partial; "ok" (or nothing) is only recorded when the
    # run's own evidence supports it, so the core derives it.
    outcome = result.get("outcome")
    finished = _finish_or_keep(registry, actor, kept_finish, run_id=run_id,
                               outcome=None if outcome in (None, "ok") else outcome,
                               tokens=result.get("tokens", 0), cost=result.get("cost", 0.0),
                               handoff=result.get("handoff"), agent=agent)
    with registry.read() as tx:
        rows = run_evidence_brief(tx, run_id)
    out.update(run_id=run_id, outcome=finished["outcome"], handoff=finished["handoff"], evidence=rows)
    if finished.get("reason"):
        out["reason"] = finished["reason"]
    return out


def loop(registry, actor: str, *, goal_id: str, executor: str = "shell", agent: str | None = None,
         max_turns: int = 10, ttl_seconds: float | None = None, unconfined: bool = False, run_cli=None) -> dict:
    """Governed turns until the decision is not ``run`` or ``max_turns`` turns were taken."""
    from loopx.values.validate import check_number

    max_turns = check_number(max_turns, what="--max-turns", minimum=1, maximum=10_000, integer=True)
    from loopx.sandbox import interrupt

    turns = []
    while True:
        if interrupt.requested():  # start no new turn
            return {"turns": turns, "stopped": "interrupted", "decision": None, "reasons": [],
                    "interrupted": interrupt.describe()}
        if len(turns) == max_turns:
            return {"turns": turns, "stopped": "max_turns", "decision": None, "reasons": []}
        t = turn(registry, actor, goal_id=goal_id, executor=executor, agent=agent, ttl_seconds=ttl_seconds,
                 unconfined=unconfined, run_cli=run_cli)
        if t["contract"] is None:  # stopped before its should-run
            return {"turns": turns, "stopped": "interrupted", "decision": None, "reasons": [],
                    "interrupted": t["interrupted"]}
        if t["decision"] != "run":
            return {"turns": turns, "stopped": "decision", "decision": t["decision"], "reasons": t["reasons"],
                    "contract": t["contract"]}
        t.pop("contract")
        turns.append(t)


def declared_home(provider) -> list[str]:
    """What of ``$HOME`` the executor ``provider`` declares it reads (its ``home_paths()``, if it
    has one): shown read-only in the step's world (:mod:`loopx.sandbox.world`), nothing else of ``$HOME``."""
    paths = getattr(provider, "home_paths", None)
    return [str(p) for p in paths()] if callable(paths) else []


@contextmanager
def _inside(directory: str | None):
    """This process in ``directory`` (if any) for the step: executors start the agent where they are."""
    import os

    if directory is None:
        yield
        return
    before = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


@contextmanager
def step(registry, *, run_id: str, goal_id: str, agent: str, workdir: str | None, backend: str | None,
         run_cli=None, limits: dict | None = None, home_read: list[str] = ()):
    """The confinement of one turn: its :class:`loopx.turn.confine.Step` and :class:`loopx.turn.broker.Broker`,
    active (:data:`loopx.sandbox.process.STEP`) for everything started in this context until it ends.

    An unconfined step (``backend`` ``None``, the user's choice) is recorded on the run as
    evidence (kind ``unconfined``) before anything runs. ``limits``: the contract's
    ``agent_channel.limits``; every command of the step runs within them (:mod:`loopx.sandbox.limits`),
    its output streamed to a file in LoopX's private place for the turn (the tail is kept).
    """
    import os

    from loopx.turn import broker as brokers, confine
    from loopx.domain import evidence
    from loopx.sandbox import process

    workdir = workdir or os.getcwd()
    if backend is None:
        evidence.record(registry, "core", run_id=run_id, kind="unconfined",
                        summary="ran UNCONFINED: the agent could reach the registry, the key and the "
                                "repository's hooks (--unconfined / LOOPX_UNCONFINED)",
                        data={"confinement": "unconfined", "workdir": workdir})
    from loopx.turn import private_run
    from loopx.domain import supervision
    from loopx.turn.executors import homes

    with registry.read() as tx:
        grants = supervision.world_grants(supervision.settings(tx), goal_id)
    s = confine.Step(registry_url=registry.store.url, workdir=workdir, backend=backend,
                     agent_homes=homes.homes(registry, goal_id), agent_homes_root=homes.root(),
                     home_read=home_read, grants=grants)
    s.limits = {k: limits.get(k) for k in ("memory_mb", "processes", "cpu_seconds")} if limits else None
    output = private_run.private_dir("output")
    try:
        s.output_dir = output.__enter__()
    except OSError:
        output, s.output_dir = None, None  # no private place: the tail alone is kept
    try:
        b = brokers.Broker(registry_url=registry.store.url, run_id=run_id, goal_id=goal_id,
                           agent=agent, directory=s.dir, step=s, run_cli=run_cli)
        s.broker, s.broker_env = b, b.env()
        token = process.STEP.set(s)
        try:
            yield s
        finally:
            process.STEP.reset(token)
            b.close()
    finally:
        if output is not None:
            output.__exit__(None, None, None)
        s.close()
