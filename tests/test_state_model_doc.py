"""docs/state-interaction-model.md stays true: every event kind and who may cause it is listed."""

import re

from tests.conftest import ROOT

from loopx.ledger.events import table


def _registered():
    return table.all_kinds()


def test_every_event_kind_is_in_the_reference_table():
    doc = (ROOT / "docs" / "state-interaction-model.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("|") and "`" in line]
    for name, kind in _registered().items():
        row = next((r for r in rows if f"`{name}`" in r), None)
        assert row is not None, f"{name} is not in docs/state-interaction-model.md"
        documented = set(re.findall(r"\b(user|executor|capability|core)\b", row.rsplit("|", 2)[-2]))
        assert documented == set(kind.writers), (name, documented, set(kind.writers))


def test_no_documented_event_kind_is_missing_from_the_code():
    doc = (ROOT / "docs" / "state-interaction-model.md").read_text()
    table = doc.split("### Event kinds", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`([a-z_]+\.[a-z_]+)`", table))
    assert documented == set(_registered())
