"""Big outputs stream (issue 25): ``history`` and ``evidence list`` page with ``--limit`` and
``--after`` and print JSON Lines as they read, so a long ledger is printed in bounded memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from loopx import api
from loopx.ledger.registry import Registry
from tests.conftest import loopx_env
from tests.factories import make_goal

BLOB = "x" * 1000


def _filled(url: str, n: int) -> str:
    """A goal with ``n`` evidence events of ~1 KB each (one transaction: the fill is not what is measured)."""
    with Registry.open(url) as reg:
        g = make_goal(reg, title="long history")["goal"]

        def work(w):
            for i in range(n):
                api.evidence.add_in(w, kind="note", summary=f"observation {i}", data={"blob": BLOB, "i": i})

        reg.mutate("user", work, goal_id=g)
    return g


def _peak_rss_kb(url: str, *args) -> int:
    """Peak RSS (KiB) of one ``loopx`` process, its output thrown away: measured by a parent of
    its own, so no other child of the test process counts."""
    code = ("import resource, subprocess, sys\n"
            "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
            "assert p.returncode == 0, p.stderr\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "loopx", *args], env=loopx_env(url),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.slow
def test_history_of_a_50000_event_goal_prints_in_bounded_memory(sqlite_url):
    big = _filled(sqlite_url, 50_000)
    small = _filled(sqlite_url, 50)
    for fmt in ("jsonl", "json"):
        base = _peak_rss_kb(sqlite_url, "history", "--goal-id", small, "--format", fmt)
        peak = _peak_rss_kb(sqlite_url, "history", "--goal-id", big, "--format", fmt)
        # The whole ledger is ~55 MB of JSON; printing it costs a page at a time.
        assert peak - base < 15_000, (fmt, base, peak)
    lines = subprocess.run([sys.executable, "-m", "loopx", "history", "--goal-id", big, "--format", "jsonl"],
                           env=loopx_env(sqlite_url), capture_output=True, text=True, timeout=300).stdout.splitlines()
    assert len(lines) == 50_001 and [json.loads(x)["seq"] for x in lines[-2:]] == [50_000, 50_001]


def test_history_pages_and_formats_agree(loopx):
    g = make_goal(loopx, title="paged")["goal"]
    for i in range(7):
        assert loopx("todo", "add", "--goal-id", g, "--text", f"t{i}").code == 0
    whole = loopx("history", "--goal-id", g, "--json").json
    lines = [json.loads(x) for x in loopx("history", "--goal-id", g, "--format", "jsonl").out.splitlines()]
    assert lines == whole and len(whole) == 8
    pages, after = [], 0
    while True:
        page = loopx("history", "--goal-id", g, "--after", str(after), "--limit", "3", "--json").json
        if not page:
            break
        pages += page
        after = page[-1]["seq"]
    assert pages == whole
    assert loopx("history", "--goal-id", g, "--after", "99", "--json").json == []


def test_evidence_list_pages_with_a_cursor(loopx):
    g = make_goal(loopx, title="observed")["goal"]
    made = [loopx("evidence", "add", "--goal-id", g, "--kind", "note", "--summary", f"n{i}", "--json").json["id"]
            for i in range(5)]
    first = loopx("evidence", "list", "--goal-id", g, "--limit", "2", "--json").json
    assert [e["id"] for e in first] == made[:2]
    rest = loopx("evidence", "list", "--goal-id", g, "--after", first[-1]["id"], "--format", "jsonl").out.splitlines()
    assert [json.loads(x)["id"] for x in rest] == made[2:]
    r = loopx("evidence", "list", "--goal-id", g, "--after", "e-000000000000", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "not_found"


def test_a_bad_goal_fails_before_any_output_in_every_format(loopx):
    for fmt in ("jsonl", "json"):
        r = loopx("history", "--goal-id", "g-000000000000", "--format", fmt)
        assert r.code == 2 and json.loads(r.out) == {"error": {"code": "goal_not_found",
                                                                "message": "no goal g-000000000000"}}
