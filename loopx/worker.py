"""``loopx worker``: one long-running process that takes turns for every goal that should run.

The worker keeps a schedule of the open goals (when each is next due, by its cadence) and
starts a governed turn - a ``loopx turn`` child process, with the goal's configured executor
(:func:`loopx.domain.supervision.executor_for`) - for each goal that is due, at most ``concurrency`` at
once. A turn's answer decides what comes next: after an ``ok`` turn the goal is looked at again
at once (its cadence applies); after a ``wait`` it is due at ``next_eligible_at``; after
``ask_user``, ``repair``, ``stop`` or a turn that did not end ``ok`` it is *parked* until its
ledger moves (a person approved the gate, added a todo, retried...). A turn that ``failed`` is
tried again ``retry_seconds`` after it ended, doubling with each failed turn in a row (at most an
hour): the back-off is worked out from the goal's runs (:func:`loopx.domain.supervision.retry_at`), so
the turn's own ledger events, a rescan or a restart never shorten it, and ``loopx status`` shows
the same next attempt. The same step failing ``stuck_after`` runs in a row makes the decision
``ask_user``, which parks the goal; a user's ``project-prompt retry`` starts the count again.

**Never two turns of one goal at once.** A worker starts a turn only after winning the goal's
lease (:func:`loopx.domain.supervision.acquire`), which raises the goal's fencing token; the turn's
should-run refuses to open a run unless that token is still current, so two workers on one
SQLite file or on one PostgreSQL registry from several machines never run one goal twice.
Leases are renewed at every heartbeat while a turn runs.

**Sleeping.** Between events the main loop sleeps until the next due time (at most a minute),
woken early by a change in the registry - SQLite's ``PRAGMA data_version`` read twice a second
on a connection of its own (a few microseconds), PostgreSQL's ``LISTEN``/``NOTIFY`` - by a turn
that ended, or by a signal. It never polls the goals: after a change it reads only the goals
whose ledger moved (events after the last one it saw).

**Heartbeats** (id, host, pid, started, last beat, current goals and turns) go to the registry
every ``beat_seconds``; ``loopx status``, ``loopx worker list`` and the dashboard show them. A
user's ``loopx worker stop`` (:func:`loopx.domain.supervision.request_stop`) is read at every heartbeat
and registry change: the worker stops as on SIGTERM and exits 0. Its log: :mod:`loopx.values.worker_log`.

**Signals.** SIGTERM or SIGINT: start no new turn, pass SIGTERM on to the running turns (each
lets its step finish within its grace period and closes its run ``interrupted``), wait for them,
record the stop, exit. A second signal is passed on too (the turns then stop their steps at once).

**Time.** Durations and the schedule run on the monotonic clock. Each pass compares the wall
clock with it; a jump (the wall clock moved more than :data:`JUMP_SECONDS` against it) is
recorded and the whole schedule recomputed, and a run opened "in the future" is not trusted as
the start of a cadence (see :func:`loopx.domain.supervision.candidates`).
"""

from __future__ import annotations

import heapq
import os
import signal
import socket
import threading
import time

from loopx.values import clock
from loopx.values.worker_log import Faults, passing_fault, shown_url, turn_end, write_fault
from loopx.turn.worker_threads import Notifier, watch_changes
from loopx.turn.worker_turns import Child, answer, start_turn

JUMP_SECONDS = 30.0
MAX_SLEEP = 60.0
POLL_SECONDS = 0.5
FAILED_START_BACKOFF = 30.0
FAULT_BACKOFF = (0.5, 30.0)  # a registry fault: first wait, doubling up to the second


class Worker:
    """One worker process over one registry (see the module's docstring)."""

    def __init__(self, url: str, *, concurrency: int = 1, executor: str = "shell", agent: str | None = None,
                 lease_seconds: float = 60.0, beat_seconds: float = 10.0, grace_seconds: float = 30.0,
                 exit_when_idle: bool = False, poll_seconds: float = POLL_SECONDS, notify: bool = True,
                 retry_seconds: float = 30.0, workdir: str | None = None, log_format: str = "text"):
        import secrets

        from loopx.ledger.registry import resolve_url

        self.url = resolve_url(url)
        if "://" not in self.url and self.url != ":memory:":
            self.url = os.path.abspath(self.url)  # its turns run elsewhere (loopx.sandbox.selfrun.CWD)
        # Where the goals' agents work: passed to each turn, which runs in LoopX's own directory.
        self.workdir = os.path.abspath(workdir or os.getcwd())
        self.concurrency, self.executor = concurrency, executor
        self.id = "w-" + secrets.token_hex(6)
        self.agent = agent or f"worker:{self.id}"
        from loopx.values.worker_log import WorkerLog

        self.log = WorkerLog(self.id, log_format)
        self.stop_request: dict | None = None
        self.lease_seconds, self.beat_seconds, self.grace_seconds = lease_seconds, beat_seconds, grace_seconds
        self.exit_when_idle, self.poll_seconds, self.notify = exit_when_idle, poll_seconds, notify
        self.retry_seconds = retry_seconds
        self.wake = threading.Event()
        self.changed = threading.Event()
        self.stop_signal: int | None = None
        self.children: dict[str, Child] = {}
        self.heap: list = []  # (due monotonic, generation, goal id)
        self.gen: dict[str, int] = {}
        self.parked: dict[str, int] = {}  # goal -> revision it is parked at
        self.last_event = 0
        self.stats = {"turns": 0, "turn_processes": 0, "busy_seconds": 0.0, "clock_jumps": 0, "started_at": None, "lease_refused": 0}
        self._skew: float | None = None
        self._active = (float("inf"), float("-inf"))  # first turn's start, last turn's end
        self.faults = Faults(self.log, *FAULT_BACKOFF, record=lambda state: write_fault(
            self.id, state and {**state, "worker": self.id, "registry": shown_url(self.url)}))

    # ------------------------------------------------------------------ schedule

    def _push(self, goal_id: str, due: float) -> None:
        g = self.gen.get(goal_id, 0) + 1
        self.gen[goal_id] = g
        heapq.heappush(self.heap, (due, g, goal_id))

    def _drop(self, goal_id: str) -> None:
        self.gen[goal_id] = self.gen.get(goal_id, 0) + 1  # invalidates its heap entries

    def _plan(self, rows: list[dict], values: dict) -> None:
        from loopx.domain.supervision import executor_for, retry_at

        mono, wall = time.monotonic(), clock.epoch()
        for row in rows:
            g = row["id"]
            if g in self.children:
                continue
            if g in self.parked:
                if self.parked[g] == row["revision"]:
                    continue
                del self.parked[g]
            if executor_for(values, g, self.executor) is None or "budget_exhausted" in row["attention"]:
                self._drop(g)
                self.parked[g] = row["revision"]
                continue
            delay = 0.0
            if row["cadence"] and row["last_opened"]:
                delay = max(0.0, clock.epoch(row["last_opened"]) + float(row["cadence"]) - wall)
            again = retry_at(row.get("failed_streak") or 0, row.get("last_failed_at"), self.retry_seconds)
            if again is not None:  # failed turns in a row: back off
                delay = max(delay, clock.epoch(again) - wall)
            self._push(g, mono + delay)

    def _scan(self, reg, goal_ids: list[str] | None = None) -> None:
        from loopx.store.queries.supervision import newest_event_row
        from loopx.domain.supervision import candidates, settings

        with reg.read() as tx:
            values = settings(tx)
            if goal_ids is None:
                self.last_event = int(newest_event_row(tx))
                self.heap, self.gen, self.parked = [], {}, {}
            rows = candidates(tx, clock.now(), goal_ids)
            if goal_ids is not None:  # closed or paused since: off the schedule
                found = {r["id"] for r in rows}
                for g in goal_ids:
                    if g not in found:
                        self._drop(g)
                        self.parked.pop(g, None)
        self._plan(rows, values)

    def _due(self, now: float) -> list[str]:
        out = []
        while self.heap and self.heap[0][0] <= now and len(out) + len(self.children) < self.concurrency:
            due, g, goal_id = heapq.heappop(self.heap)
            if self.gen.get(goal_id) != g or goal_id in self.children or goal_id in self.parked:
                continue
            out.append(goal_id)
        return out

    def _next_due(self) -> float | None:
        while self.heap:
            due, g, goal_id = self.heap[0]
            if self.gen.get(goal_id) == g and goal_id not in self.parked and goal_id not in self.children:
                return due
            heapq.heappop(self.heap)
        return None

    # ------------------------------------------------------------------ turns

    def _start(self, reg, goal_id: str) -> None:
        from loopx.domain.supervision import acquire, executor_for, settings

        token = acquire(reg, goal_id, self.id, self.lease_seconds)
        if token is None:  # another worker has it: look again when its lease may have ended
            self.stats["lease_refused"] += 1
            self.log("lease_refused", goal=goal_id)
            self._push(goal_id, time.monotonic() + min(self.lease_seconds, MAX_SLEEP))
            return
        self.log("lease_taken", goal=goal_id, token=token)
        with reg.read() as tx:
            executor = executor_for(settings(tx), goal_id, self.executor) or self.executor
        child = start_turn(goal_id, token, executor, worker_id=self.id, agent=self.agent, url=self.url,
                           workdir=self.workdir, grace_seconds=self.grace_seconds, log=self.log, wake=self.wake)
        self.children[goal_id] = child
        self.log("turn_start", goal=goal_id, executor=executor, pid=child.proc.pid)

    def _reap(self, reg) -> None:
        from loopx.domain.supervision import release

        for goal_id, child in list(self.children.items()):
            if not child.done:
                continue
            release(reg, goal_id, self.id, child.token)  # first: a fault here is retried at the next pass
            del self.children[goal_id]
            self.stats["turn_processes"] += 1
            end = time.monotonic()
            self.stats["busy_seconds"] += end - child.started
            self._active = (min(self._active[0], child.started), max(self._active[1], end))
            self._log_end(reg, child, end - child.started)
            self._after(reg, goal_id, child)

    def _log_end(self, reg, child: Child, seconds: float) -> None:
        """The turn_end line (:func:`loopx.values.worker_log.turn_end`), with its run's tokens and cost."""
        out, run = answer(child), None
        if out.get("run_id"):
            from loopx.store.queries.supervision import run_spent

            with reg.read() as tx:
                run = run_spent(tx, out["run_id"])
        turn_end(self.log, child.goal_id, child.executor, out, run, seconds, child.proc.returncode,
                 child.out + child.err)

    def _after(self, reg, goal_id: str, child: Child) -> None:
        out = answer(child)
        decision, outcome = out.get("decision"), out.get("outcome")
        if decision == "run":
            self.stats["turns"] += 1
        if decision == "run" and outcome == "ok":
            self._scan(reg, [goal_id])  # at once, or when its cadence says
            return
        if decision == "wait":
            eligible = (out.get("contract") or {}).get("interaction_contract", {}).get("next_eligible_at")
            if eligible:
                delay = max(0.0, clock.epoch(eligible) - clock.epoch())
                self._push(goal_id, time.monotonic() + min(delay, 24 * 3600.0))
                return
        if not out:  # it did not even answer (refused, crashed): try again later
            self._push(goal_id, time.monotonic() + FAILED_START_BACKOFF)
            return
        if decision == "run" and outcome == "failed":
            # Again after a back-off that doubles (a flaky step gets its retries), worked out from
            # its runs by _plan; the same step failing run after run turns the decision into
            # ask_user, which parks the goal.
            self._scan(reg, [goal_id])
            return
        from loopx.store.queries.status import goal_revision

        with reg.read() as tx:  # parked until a person (or anything) changes the goal
            revision = goal_revision(tx, goal_id)
        if revision is not None:
            self._drop(goal_id)
            self.parked[goal_id] = int(revision)

    # ------------------------------------------------------------------ time, signals, changes

    def _check_clock(self, reg) -> None:
        from loopx.domain.supervision import record_jump

        skew = clock.epoch() - time.monotonic()
        if self._skew is None:
            self._skew = skew
            return
        jump = skew - self._skew
        if abs(jump) > JUMP_SECONDS:
            self._skew = skew
            self.stats["clock_jumps"] += 1
            record_jump(reg, self.id, jump, {"wall_now": clock.now(), "direction": "ahead" if jump > 0 else "back"})
            self._scan(reg)  # every due time derived from wall-clock stamps is recomputed

    def _stop_asked(self, asked: dict | None) -> None:
        """A user's ``loopx worker stop``: stop as on SIGTERM (the turns get theirs), exit 0."""
        if asked and self.stop_request is None:
            self.stop_request = asked
            self.log("stop_requested", by=asked.get("by"), requested_at=asked.get("at"))
            self._on_signal(signal.SIGTERM, None)

    def _on_signal(self, signum, frame):
        self.stop_signal = signum
        for child in list(self.children.values()):  # a second signal: the turns stop their steps at once
            try:
                child.proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
        self.wake.set()

    def _watch(self) -> None:
        """Wake the main loop when another connection commits (runs in a thread of its own)."""
        watch_changes(self.url, self.poll_seconds, lambda: self.stop_signal is not None or self._closing,
                      self.changed, self.wake)

    def _fault(self, reg, exc):
        """Wait out a registry fault (:class:`loopx.values.worker_log.Faults`; any other error is raised), then
        reconnect (the old connection may be gone for good); the registry to go on with."""
        from loopx.ledger.registry import Registry

        self.faults.wait(exc, lambda: self.stop_signal is not None, self.wake)
        try:
            fresh = Registry.open(self.url)
        except Exception as again:
            if passing_fault(again) is None:
                raise
            return reg
        try:
            if reg is not None:
                reg.close()
        except Exception:
            pass
        return fresh

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict:
        """Run until a signal (or, with ``exit_when_idle``, until nothing is due or running)."""
        from loopx.domain.claims import owner_here

        self._closing = False
        started_at = clock.now()
        self.stats["started_at"] = started_at
        self._me = {"host": socket.gethostname(), "pid": os.getpid(), "started_at": started_at}
        main = threading.current_thread() is threading.main_thread()
        before = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
        mono0 = time.monotonic()
        self._reg = None  # a database down at start is waited out like any fault (_connect)
        notifier = None
        try:
            # Who it is, as a process (host, boot, pid, start time): a lease it holds is freed once
            # that process is gone, even if its pid was taken by another (supervision._owner_alive).
            info = {"concurrency": self.concurrency, "beat_seconds": self.beat_seconds, "executor": self.executor,
                    "retry_seconds": self.retry_seconds, "owner": owner_here()}
            self.log("worker_start", host=self._me["host"], pid=self._me["pid"], registry=shown_url(self.url),
                     concurrency=self.concurrency, executor=self.executor, workdir=self.workdir)
            if not self._connect(info):  # stopped before the registry could be reached: nothing to record
                return self._finish(mono0)
            self.faults.cleared()
            watcher = threading.Thread(target=self._watch, daemon=True)
            watcher.start()
            self._check_clock(self._reg)
            notifier = Notifier(self.url, self.log) if self.notify else None
            if notifier:  # the goals that already wait for someone, once at start
                from loopx.store.queries.attention import attention_lane_goals

                with self._reg.read() as tx:
                    notifier.check(attention_lane_goals(tx))
            self._loop(info, notifier, watcher)
        except BaseException as exc:
            if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
                self.log("fault", what="worker", error=getattr(exc, "code", type(exc).__name__), message=str(exc)[:300])
            raise
        finally:
            self._close(notifier, before)
        return self._finish(mono0)

    def _connect(self, info: dict) -> bool:
        """Open the registry, record the first heartbeat and scan the goals, waiting out faults
        (a full disk, a database away at start); False if stopped before that succeeded."""
        from loopx.ledger.registry import Registry
        from loopx.domain.supervision import beat

        while self.stop_signal is None:
            try:
                if self._reg is None:
                    self._reg = Registry.open(self.url)
                self._stop_asked(beat(self._reg, self.id, **self._me, goals=[], info=info))
                self._scan(self._reg)
                return True
            except Exception as exc:
                self._reg = self._fault(self._reg, exc)
        return False

    def _loop(self, info: dict, notifier, watcher: threading.Thread) -> None:
        """The main loop: reap ended turns, read what changed, start what is due, beat, sleep."""
        from loopx.domain.supervision import changed_goals

        next_beat = time.monotonic() + self.beat_seconds
        signalled = False
        while True:
            self.wake.clear()
            reg = self._reg
            try:
                self._reap(reg)
                self._check_clock(reg)
                self._read_changes(reg, notifier)
                if self.stop_signal is not None:
                    if not signalled:
                        signalled = True
                        self.log("stopping", signal=None if self.stop_request else signal.Signals(self.stop_signal).name,
                                 requested=bool(self.stop_request), turns_running=len(self.children))
                    if not self.children:
                        break
                else:
                    for goal_id in self._due(time.monotonic()):
                        self._start(reg, goal_id)
                now = time.monotonic()
                if now >= next_beat:
                    self._beat(reg, info, notifier)
                    next_beat = now + self.beat_seconds
                due = self._next_due()
                if due is not None and len(self.children) >= self.concurrency:
                    due = None  # every slot is taken: a turn's end wakes the loop, not the due time
                if self.exit_when_idle and not self.children and (due is None or due > now) \
                        and not self.changed.is_set():
                    with reg.read() as tx:  # the watcher may not have seen the last commits yet
                        if changed_goals(tx, self.last_event)[1] == self.last_event:
                            break
                    self.changed.set()
                    continue
                timeout = min(MAX_SLEEP, next_beat - now, *([due - now] if due is not None else []))
                if self.children or self.stop_signal is not None:
                    timeout = min(timeout, 1.0)  # a turn's end sets wake too; this is only a backstop
                self.wake.wait(max(0.0, timeout))
                if self.faults.cleared():  # rebuild what a fault cut short, read what changed meanwhile
                    self._scan(reg)
                    self.changed.set()
                    if not watcher.is_alive():  # it ends when its connection fails
                        watcher = threading.Thread(target=self._watch, daemon=True)
                        watcher.start()
            except Exception as exc:
                self._reg = self._fault(reg, exc)

    def _read_changes(self, reg, notifier) -> None:
        """After a commit elsewhere: read the goals whose ledger moved (and a user's stop request)."""
        from loopx.domain.supervision import changed_goals, stop_requested

        if not self.changed.is_set():
            return
        self.changed.clear()
        with reg.read() as tx:
            goals, self.last_event = changed_goals(tx, self.last_event)
            asked = stop_requested(tx, self.id)
        self._stop_asked(asked)
        if goals:
            self._scan(reg, goals)
            if notifier:
                notifier.check(goals)

    def _beat(self, reg, info: dict, notifier) -> None:
        """A heartbeat: renew the leases of the running turns (stopping those lost), record the beat."""
        from loopx.domain.supervision import beat, renew

        lost = renew(reg, {g: c.token for g, c in self.children.items()}, self.id, self.lease_seconds)
        for g in lost:  # another worker holds it now: stop this turn
            self.log("lease_lost", goal=g, token=self.children[g].token)
            self.children[g].proc.send_signal(signal.SIGTERM)
        info["clock_jumps"] = self.stats["clock_jumps"]
        info["last_fault"] = self.faults.last
        info["turns"] = [{"goal": c.goal_id, "executor": c.executor, "started_at": c.started_at,
                          "pid": c.proc.pid} for c in self.children.values()]
        self._stop_asked(beat(reg, self.id, **self._me, goals=list(self.children), info=info))
        if notifier:
            notifier.check_workers()

    def _close(self, notifier, before: dict) -> None:
        """On the way out, whatever happened: stop the notifier and any turn left, record the stop,
        close the registry, give the signals back their handlers."""
        from loopx.domain.supervision import beat

        self._closing = True
        write_fault(self.id, None)
        if notifier:
            notifier.close()
        for child in self.children.values():  # an exception above: never leave turns behind
            try:
                child.proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
        reg = self._reg
        try:
            if reg is not None:
                beat(reg, self.id, **self._me, goals=[], info={
                    "concurrency": self.concurrency, "beat_seconds": self.beat_seconds,
                    "clock_jumps": self.stats["clock_jumps"], "retry_seconds": self.retry_seconds,
                    "last_fault": self.faults.last}, stopped=True)
        except Exception as exc:  # stopping on a full disk: the stop is not recorded, the exit is clean
            self.log("fault", what="registry", error=passing_fault(exc) or type(exc).__name__, message=str(exc)[:300])
        finally:
            if reg is not None:
                reg.close()
            for s, h in before.items():
                signal.signal(s, h)

    def _finish(self, mono0: float) -> dict:
        """The run's figures (and its ``worker_stop`` line)."""
        self.stats["wall_seconds"] = round(time.monotonic() - mono0, 3)
        self.stats["active_seconds"] = round(max(0.0, self._active[1] - self._active[0]), 3)
        self.stats["busy_seconds"] = round(self.stats["busy_seconds"], 3)
        self.stats["worker_id"] = self.id
        if self.stop_request:
            self.stats["stopped_by"] = "request"
        else:
            self.stats["stopped_by"] = signal.Signals(self.stop_signal).name if self.stop_signal else None
        self.log("worker_stop", stopped_by=self.stats["stopped_by"] or "idle", turns=self.stats["turns"],
                 wall_seconds=self.stats["wall_seconds"])
        return self.stats
