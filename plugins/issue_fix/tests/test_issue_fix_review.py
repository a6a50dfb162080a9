"""What a human decides on is shown where they decide, generically: the reviewer packet's path and
sha256 in ``status G`` (text and JSON), ``handoff show``, ``issue-fix show`` and the dashboard's
goal view with a read-only link; a test-change gate's diff in ``gate show``, the goal view and the
approvals page, escaped. Real git repository, real CLI, the real status server over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from issue_fix_helpers import git, make_project
from test_issue_fix import state, to_publish
from test_issue_fix_attacks import refused, reproduced


@pytest.fixture
def server(loopx_status_server):
    return loopx_status_server


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


@pytest.mark.slow
def test_the_packet_path_and_sha256_are_everywhere_a_human_looks(cli, project, server):
    out, s = to_publish(cli, project)
    g = out["goal_id"]
    path, sha = s["handoff"]["packet"], s["handoff"]["sha256"]
    line = f"artifact handoff.md: {path} sha256 {sha}"

    view = cli("status", g, "--json").json
    [art] = [a for a in view["artifacts"] if a["name"] == "handoff.md"]
    assert (art["path"], art["sha256"], art["ok"]) == (path, sha, True)
    assert line in cli("status", g).out
    shown = cli("handoff", "show", "--goal-id", g, "--json").json
    assert [(a["path"], a["sha256"]) for a in shown["artifacts"] if a["name"] == "handoff.md"] == [(path, sha)]
    assert line in cli("handoff", "show", "--goal-id", g).out
    assert f"packet {path} (sha256 verified): sha256 {sha}" in cli("issue-fix", "show", "--goal-id", g).out

    # The dashboard's goal view carries it, and the status server shows it read-only, as text.
    code, _, body = _get(f"{server}/api/goals/{g}")
    assert code == 200 and any(a["sha256"] == sha for a in json.loads(body)["artifacts"])
    code, headers, body = _get(f"{server}/api/goals/{g}/artifacts/handoff.md")
    assert code == 200 and body == Path(path).read_bytes()
    assert headers["Content-Type"] == "text/plain; charset=utf-8" and headers["X-Content-Type-Options"] == "nosniff"

    # Changed behind LoopX's back: flagged everywhere, and never served.
    Path(path).write_text("# all good, approve\n")
    [art] = [a for a in cli("status", g, "--json").json["artifacts"] if a["name"] == "handoff.md"]
    assert art["ok"] is False and "TAMPERED" in art["problem"]
    assert "TAMPERED" in cli("status", g).out
    code, _, body = _get(f"{server}/api/goals/{g}/artifacts/handoff.md")
    assert code == 409 and json.loads(body)["error"]["code"] == "artifact_tampered"
    assert b"all good" not in body
    code, _, _ = _get(f"{server}/api/goals/{g}/artifacts/nothing.md")
    assert code == 404


HOSTILE = "# \x1b]0;pwned\x07 <script>alert(1)</script>\nimport calc\ncalc.add = lambda a, b: 5\n"


@pytest.mark.slow
def test_a_test_change_gate_shows_its_diff_in_the_cli_the_goal_view_and_the_approvals_page(cli, tmp_path, server,
                                                                                             loopx_registry):
    repo = make_project(tmp_path)
    g, wt = reproduced(cli, repo)
    (wt / "conftest.py").write_text(HOSTILE)
    (wt / "tests").mkdir()
    (wt / "tests" / "conftest.py").write_text("# second\n")
    refused(cli, g, "issue_fix.tests_changed")
    [gate] = cli("gate", "list", "--goal-id", g, "--json").json  # two changed files, one gate
    tc = state(cli, g)["test_change"]

    shown = cli("gate", "show", "--goal-id", g, "--gate-id", gate["id"], "--json").json
    [art] = shown["artifacts"]
    assert art["name"] == f"test-changes-{gate['id']}.diff" and art["sha256"] == tc["diff_sha256"]
    assert "+calc.add = lambda a, b: 5" in art["text"] and "+++ b/tests/conftest.py" in art["text"]
    text = cli("gate", "show", "--goal-id", g, "--gate-id", gate["id"]).out
    assert "+calc.add = lambda a, b: 5" in text and f"sha256 {tc['diff_sha256']}" in text
    assert "\x1b" not in text and "\\x1b]0;pwned" in text  # the terminal sees the escape, escaped

    view = json.loads(_get(f"{server}/api/goals/{g}")[2])
    assert [a["gate_id"] for a in view["artifacts"] if a["name"] == art["name"]] == [gate["id"]]
    code, headers, body = _get(f"{server}/api/goals/{g}/artifacts/{art['name']}")
    assert code == 200 and b"<script>alert(1)</script>" in body and headers["Content-Type"].startswith("text/plain")
    assert "sandbox" in headers["Content-Security-Policy"]

    from loopx_approvals import page

    html = page.render(page.gather(loopx_registry), "csrf")
    assert "+calc.add = lambda a, b: 5" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html

    # Changed behind LoopX's back: gate show refuses to show it, the page says TAMPERED.
    Path(tc["diff_path"]).write_text("+harmless\n")
    shown = cli("gate", "show", "--goal-id", g, "--gate-id", gate["id"], "--json").json
    assert shown["artifacts"][0]["ok"] is False and shown["artifacts"][0]["text"] is None
    html = page.render(page.gather(loopx_registry), "csrf")
    assert "TAMPERED" in html and "+harmless" not in html
