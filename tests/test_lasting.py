"""``loopx.values.lasting``: what lasts as long as the process is made with the cyclic collector
paused, the first time only, so a long-running process keeps a working collector."""

from __future__ import annotations

import gc

from loopx.values.lasting import lasting


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_the_first_time_pauses_and_freezes_and_later_times_leave_the_collector_alone():
    name = "tests.test_lasting:first"
    frozen = gc.get_freeze_count()
    with lasting(name):
        assert not gc.isenabled()
        made = [_Cycle() for _ in range(10)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(made)  # what existed then went to the permanent generation
    with lasting(name):  # made before: nothing paused, nothing frozen
        assert gc.isenabled()
    # The collector still collects what is made afterwards (a serve or worker process).
    garbage = _Cycle()
    del garbage
    assert gc.collect() >= 1


def test_an_imported_module_and_a_paused_collector_are_left_alone():
    with lasting("gc"):  # imported already: not a first import
        assert gc.isenabled()
    gc.disable()
    try:
        with lasting("tests.test_lasting:inside a pause"):
            assert not gc.isenabled()
        assert not gc.isenabled()  # the caller's pause is the caller's to end
    finally:
        gc.enable()
