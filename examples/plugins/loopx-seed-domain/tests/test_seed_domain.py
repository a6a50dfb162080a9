"""Tests an outside author writes with LoopX's pytest fixtures (``loopx_registry``, ``loopx_plugin``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from loopx.values.errors import LoopxError

import loopx_seed_domain.plugin as plugin
from loopx_seed_domain import models, pdf, work


@pytest.fixture
def goal(loopx_registry, loopx_plugin):
    from loopx.domain import goals as project_prompt

    loopx_plugin(plugin, name="seed_domain_test")
    return project_prompt.create(loopx_registry, "user", title="Investigate Quarterly Revenue Spike",
                                 description="Analyze data, run models, and produce a report.",
                                 capabilities=["seed_domain"])["id"]


def test_the_forecast_finds_the_spike_and_a_flat_series_has_none(tmp_path):
    series, source, _ = models.load_series()
    out = models.run("revenue-forecast", series)
    assert out["latest_quarter"] == "2025-Q2" and out["spike"] is True and out["residual_z"] > 3
    flat = tmp_path / "flat.csv"
    flat.write_text("quarter,revenue\n" + "".join(f"Q{i},{1000 + 10 * i + (i % 4)}\n" for i in range(12)))
    series, _, _ = models.load_series(str(flat))
    out = models.run("revenue-forecast", series)
    assert out["spike"] is False and abs(out["residual"]) < 5
    assert out["next_quarter_forecast"] == pytest.approx(1000 + 10 * 12, abs=5)
    with pytest.raises(models.ModelError):
        models.run("no-such-model", series)


def test_the_pdf_has_a_valid_cross_reference_table():
    data = pdf.render([f"line {i} (with parens)" for i in range(130)], title="T")
    start = int(data.rsplit(b"startxref", 1)[1].split()[0])
    rows = data[start:].split(b"\n")
    count = int(rows[1].split()[1])
    for n in range(1, count):
        offset = int(rows[2 + n][:10])
        assert data[offset:].startswith(b"%d 0 obj" % n)
    assert data.count(b"/Type /Page ") == 3  # 130 lines, 60 a page


def test_contracts_offer_the_model_then_the_report(loopx_registry, goal):
    from loopx.views.should_run import should_run

    doc = should_run(loopx_registry, "user", goal_id=goal)
    run_id = doc["interaction_contract"]["run_id"]
    actions = doc["interaction_contract"]["cli_channel"]["next_cli_actions"]
    # Each is a do step: `loopx exec --run-id R --agent A -- <the plugin's argv>`, which records its result.
    model = actions.index(f"loopx exec --run-id {run_id} --agent agent -- "
                          f"loopx run-model --model revenue-forecast --run-id {run_id}")
    report = actions.index(f"loopx exec --run-id {run_id} --agent agent -- "
                           f"loopx generate-report --format pdf --run-id {run_id}")
    assert model < report


def _cli(*args):
    from click.testing import CliRunner

    from loopx.cli import cli

    r = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_an_unrelated_goal_runs_its_own_action_and_its_turn_is_ok(loopx_registry, goal, tmp_path):
    """Installed, the plugin adds nothing to a goal that does not enable it: that goal's turn runs
    its one action and is recorded ok (it used to be failed: the plugin's two steps were left)."""
    from loopx.domain import actions
    from loopx.domain import goals as project_prompt
    from loopx.views.should_run import should_run

    other = project_prompt.create(loopx_registry, "user", title="Count the lines")["id"]
    # In the directory the step runs in (exec by hand: the current one, which loopx_registry made
    # the test's own): a step's world shows it that, not the rest of the test's /tmp.
    data = Path.cwd() / "data.csv"
    data.write_text("a\nb\n")
    actions.add(loopx_registry, "user", goal_id=other, name="count", argv=["wc", "-l", str(data)])
    doc = should_run(loopx_registry, "user", goal_id=other)
    contract = doc["interaction_contract"]
    assert "run-model" not in json.dumps(contract) and "generate-report" not in json.dumps(contract)
    assert "seed_domain" not in json.dumps(contract)
    _cli("exec", "--run-id", contract["run_id"], "--action", "count")
    assert _cli("run", "finish", "--run-id", contract["run_id"])["outcome"] == "ok"


def test_enabling_and_disabling_the_capability_moves_its_steps(loopx_registry, goal):
    from loopx.domain import goals as project_prompt
    from loopx.domain import runs
    from loopx.views.should_run import should_run

    other = project_prompt.create(loopx_registry, "user", title="Not yet")["id"]

    def offered(goal_id):
        doc = should_run(loopx_registry, "user", goal_id=goal_id)
        run_id = doc["interaction_contract"]["run_id"]
        runs.finish(loopx_registry, "user", run_id=run_id, outcome="partial")
        return [a for a in doc["interaction_contract"]["cli_channel"]["next_cli_actions"] if "seed_domain" in a
                or "run-model" in a or "generate-report" in a]

    assert offered(other) == []
    assert project_prompt.set_capabilities(loopx_registry, "user", other, enable=["seed_domain"])["capabilities"] \
        == ["seed_domain"]
    assert len(offered(other)) == 2
    project_prompt.set_capabilities(loopx_registry, "user", other, disable=["seed_domain"])
    assert offered(other) == []
    assert project_prompt.show(loopx_registry, goal)["capabilities"] == ["seed_domain"]


def test_run_model_asks_for_a_contract_and_records_evidence(loopx_registry, goal, tmp_path, monkeypatch):
    from loopx.domain import evidence, runs

    out = work.run_model(loopx_registry, "user", model="revenue-forecast")
    assert out["goal_id"] == goal and out["spike"] is True
    with loopx_registry.read() as tx:
        assert runs.load_run(tx, out["run_id"]).status == "open"
    [ev] = evidence.list_for(loopx_registry, goal_id=goal, kind="model")
    assert ev["run_id"] == out["run_id"] and ev["data"]["residual_z"] == out["residual_z"]

    monkeypatch.setenv("LOOPX_REPORT_DIR", str(tmp_path))
    rep = work.generate_report(loopx_registry, "user", fmt="pdf", run_id=out["run_id"])
    body = Path(rep["path"]).read_bytes()
    assert rep["sha256"] == "sha256:" + hashlib.sha256(body).hexdigest() and rep["models"] == 1


def test_a_finished_run_is_refused_and_a_closed_goal_gets_no_run(loopx_registry, goal):
    from loopx.domain import runs
    from loopx.domain import goals as project_prompt

    out = work.run_model(loopx_registry, "user", model="revenue-trend")
    runs.finish(loopx_registry, "user", run_id=out["run_id"])
    with pytest.raises(LoopxError) as err:
        work.run_model(loopx_registry, "user", model="revenue-trend", run_id=out["run_id"])
    assert err.value.code == "run_not_open"
    project_prompt.transition(loopx_registry, "user", "close", goal)
    with pytest.raises(LoopxError) as err:
        work.run_model(loopx_registry, "user", model="revenue-trend", goal_id=goal)
    assert err.value.code == "action_not_allowed"


def test_the_capability_document_agrees_with_the_declaration(loopx_plugin):
    from loopx.seam import capabilities

    loopx_plugin(plugin, name="seed_domain_test")
    cap = capabilities.get("seed_domain")
    doc = Path(__file__).resolve().parent.parent / cap.doc
    assert capabilities.check_doc(cap, doc.read_text()) == []
