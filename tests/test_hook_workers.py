"""A contract hook's deadline is kept by reused worker threads, not a thread per call (issue 25).

Every should-run asks the contract hooks under a deadline (``LOOPX_HOOK_TIMEOUT``); starting a
thread for each implementation on each call cost a turn about as much as the hook itself. The
implementations now run on long-lived workers; what a hook that hangs costs is unchanged: it is
named and skipped (a veto fails closed), and the worker stuck in it never serves again.
"""

from __future__ import annotations

import threading

from loopx import hookimpl
from loopx.ledger.registry import Registry
from loopx.views.should_run import should_run
from tests.factories import make_goal


class Recorder:
    """Records the OS thread each call of its hooks ran on; ``hang`` makes the next calls block."""

    def __init__(self):
        self.veto_threads: list[int] = []
        self.action_threads: list[int] = []
        self.hang_veto = self.hang_actions = None  # an Event to block on until set

    @hookimpl
    def loopx_contract_veto(self, tx, goal):
        self.veto_threads.append(threading.get_native_id())
        if self.hang_veto is not None:
            self.hang_veto.wait(60)
        return None

    @hookimpl
    def loopx_contract_actions(self, tx, goal, run_id, remaining):
        self.action_threads.append(threading.get_native_id())
        if self.hang_actions is not None:
            self.hang_actions.wait(60)
        return []


def _decide(reg, g):
    return should_run(reg, "user", goal_id=g, agent="a1")


def test_a_hundred_turns_start_no_thread_per_hook_call(sqlite_url, loopx_plugin, monkeypatch):
    monkeypatch.setenv("LOOPX_HOOK_TIMEOUT", "60")  # a loaded machine must not turn a slow call into a fault
    rec = loopx_plugin(Recorder(), name="recorder")
    with Registry.open(sqlite_url) as reg:
        g = make_goal(reg, title="busy", todo_texts=("build",))["goal"]
        assert _decide(reg, g)["decision"] == "run"
        before = threading.active_count()
        for _ in range(100):  # the agent's open run handed back: both hooks asked each time
            assert _decide(reg, g)["decision"] == "run"
        assert threading.active_count() <= before
    calls = rec.veto_threads[1:] + rec.action_threads[1:]
    assert len(rec.veto_threads) == 101 and len(rec.action_threads) >= 100
    # Not inline (the deadline still has a thread to abandon), and the same thread every time.
    assert threading.get_native_id() not in calls
    assert len(set(calls)) == 1, f"{len(set(calls))} threads ran 200 hook calls"


def test_a_hung_veto_is_named_and_fails_closed_and_its_worker_is_never_reused(sqlite_url, loopx_plugin, monkeypatch,
                                                                               capfd):
    monkeypatch.setenv("LOOPX_HOOK_TIMEOUT", "0.3")
    rec = loopx_plugin(Recorder(), name="recorder")
    release = threading.Event()
    with Registry.open(sqlite_url) as reg:
        g = make_goal(reg, title="stuck", todo_texts=("build",))["goal"]
        assert _decide(reg, g)["decision"] == "run"
        rec.hang_veto = release
        try:
            doc = _decide(reg, g)
            assert (doc["decision"], doc["reasons"]) == ("repair", ["plugin_failed"])
            err = capfd.readouterr().err
            assert "'recorder'" in err and "loopx_contract_veto" in err and "timed out" in err
            hung = rec.veto_threads[-1]
            rec.hang_veto = None
            # The next turn runs at once, on a worker other than the one still stuck in the hook.
            assert _decide(reg, g)["decision"] == "run"
            assert rec.veto_threads[-1] != hung and rec.action_threads[-1] != hung
        finally:
            release.set()


def test_a_hung_actions_hook_is_named_and_skipped_and_the_turn_goes_on(sqlite_url, loopx_plugin, monkeypatch, capfd):
    monkeypatch.setenv("LOOPX_HOOK_TIMEOUT", "0.3")
    rec = loopx_plugin(Recorder(), name="recorder")
    release = threading.Event()
    with Registry.open(sqlite_url) as reg:
        g = make_goal(reg, title="slow actions", todo_texts=("build",))["goal"]
        rec.hang_actions = release
        try:
            doc = _decide(reg, g)
            assert doc["decision"] == "run"
            err = capfd.readouterr().err
            assert "'recorder'" in err and "loopx_contract_actions" in err and "timed out" in err and "skipped" in err
            hung = rec.action_threads[-1]
            rec.hang_actions = None
            assert _decide(reg, g)["decision"] == "run"
            assert rec.action_threads[-1] != hung
            assert not capfd.readouterr().err
        finally:
            release.set()
