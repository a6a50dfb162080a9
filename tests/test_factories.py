"""The goal factory (tests/factories.py) makes the same goal through the API and the CLI."""

from __future__ import annotations

from loopx.views import status
from loopx.ledger.registry import Registry
from tests.factories import make_goal

EVERYTHING = dict(title="Quarterly revenue", description="Why did it spike?", criteria=("names three drivers",),
                  todo_texts=("pull the numbers", "compare"), todo_priority="P1", acts={"test": ["true"]},
                  gates=({"title": "Publish?", "scope": "production", "blocks": "action:test"},),
                  limits={"max_turns": 5, "cadence_seconds": 60}, parallel=True)


def _shape(url: str, made: dict) -> dict:
    """The goal as the user sees it (loopx status), without what differs between any two goals."""
    with Registry.open(url) as reg:
        view = status.goal_view(reg, made["goal"])
    doc = {k: view["goal"][k] for k in ("title", "description", "criteria", "parallel_runs", "limits")}
    doc["todos"] = [(t["text"], t["priority"]) for t in view["todos"]["items"]]
    doc["gates"] = [(g["title"], g["scope"], g["blocks"]) for g in view["gates"]["pending"]]
    doc["actions"] = sorted((a["name"], a["argv"]) for a in view["actions"])
    return doc


def test_the_api_path_and_the_cli_path_make_the_same_goal(registry_url, loopx, loopx_proc):
    with Registry.open(registry_url) as reg:
        through_api = make_goal(reg, **EVERYTHING)
    through_cli = make_goal(loopx, **EVERYTHING)
    through_process = make_goal(registry_url, **EVERYTHING)
    assert len(through_api["todos"]) == 2 and len(through_api["gates"]) == 1
    shape = _shape(registry_url, through_api)
    assert shape["limits"]["max_turns"] == 5 and shape["limits"]["cadence_seconds"] == 60
    assert shape["parallel_runs"] is True and shape["actions"] == [("test", ["true"])]
    assert shape["todos"] == [("pull the numbers", "P1"), ("compare", "P1")]
    assert shape["gates"] == [("Publish?", "production", "action:test")]
    assert _shape(registry_url, through_cli) == shape
    assert _shape(registry_url, through_process) == shape
