"""Stored text reaches a terminal shown, never obeyed: escape sequences an agent wrote into
titles, evidence, summaries and hand-offs are printed escaped by every text view, and the JSON
output is unchanged."""

from __future__ import annotations

import json

import pytest

from loopx.domain import evidence, gates, runs
from loopx.views.should_run import should_run
from loopx.values.terminal import safe
from tests.test_turn_helpers import make_goal

# Clear the screen, set the clipboard (OSC 52, BEL-terminated), rewrite the line (CR), a C1 CSI.
HOSTILE = "ok\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\rfake line\x9b31m\u202eevil"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


def test_safe_escapes_every_control_but_newline_and_tab():
    assert safe(HOSTILE) == "ok\\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07\\rfake line\\x9b31m\\u202eevil"
    assert safe("a\n\tb é ✓") == "a\n\tb é ✓"
    assert safe("\x00\x7f\x85") == "\\x00\\x7f\\x85"


@pytest.fixture
def stored(reg):
    """A goal whose title, gate, evidence, hand-off and todo carry the hostile text."""
    made = make_goal(reg, title="Goal " + HOSTILE, todo_texts=("todo " + HOSTILE,))
    g = made["goal"]
    run = should_run(reg, "user", goal_id=g)["interaction_contract"]["run_id"]
    evidence.record(reg, "executor", run_id=run, kind="note", summary="saw " + HOSTILE)
    runs.finish(reg, "executor", run_id=run, outcome="partial", handoff="next " + HOSTILE)
    gates.add(reg, "executor", goal_id=g, title="gate " + HOSTILE, scope="other", blocks="all")
    return {"goal": g, "run": run}


VIEWS = [("status",), ("status", "{g}"), ("history", "{g}"), ("handoff", "show", "{g}"), ("summary-all", "{g}"),
         ("evidence", "list", "{g}"), ("gate", "list", "{g}"), ("run", "show", "--run-id", "{r}"),
         ("todo", "list", "{g}"), ("project-prompt", "list"), ("project-prompt", "show", "{g}")]


@pytest.mark.parametrize("view", VIEWS, ids=[" ".join(v) for v in VIEWS])
def test_every_text_view_shows_stored_escapes_escaped_and_json_keeps_them(loopx, stored, view):
    args = [a.format(g=stored["goal"], r=stored["run"]) for a in view]
    text = loopx(*args)
    assert text.code == 0, text.err
    assert not [c for c in RAW if c in text.out], repr(text.out)
    assert "52;c;cm0gLXJmIH4=" in text.out  # shown, escaped (\\x1b, or \\u001b inside JSON bodies)
    as_json = loopx(*args, "--json")
    assert as_json.code == 0
    assert any(HOSTILE in s for s in _strings(json.loads(as_json.out)))


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_an_error_line_quoting_stored_text_is_escaped_too(loopx, stored):
    out = loopx("gate", "approve", stored["goal"], "--gate-id", "x\x1b[2J")
    assert out.code == 2
    assert "\x1b" not in out.err and "\\x1b" in out.err


def test_status_watch_frames_show_stored_escapes_escaped(registry_url, stored):
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import loopx_env

    p = subprocess.Popen([sys.executable, "-m", "loopx", "status", "--watch", "--interval", "0.05"],
                         env=loopx_env(registry_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"52;c;cm0g" not in seen and time.monotonic() < deadline:
            seen += p.stdout.read1(65536)
    finally:
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=30)
    frame = (seen + rest).decode()
    assert "52;c;cm0g" in frame
    assert not [c for c in RAW if c in frame], repr(frame[:500])
