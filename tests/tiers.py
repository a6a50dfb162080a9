"""The quick tier: what ``scripts/test.sh --quick`` leaves out, and how it keeps its promise.

The quick tier runs every test not marked ``postgres``, ``browser``, ``agents`` or ``slow``
(``pytest -m "not postgres and not browser and not agents and not slow"``), with
``LOOPX_TEST_QUICK=1``. A test that reaches for PostgreSQL, Chromium or a real agent CLI without
its marker then fails, naming the marker, instead of quietly making the quick tier slow or
skipping there (CONTRIBUTING.md, "Tests").
"""

from __future__ import annotations

import os

import pytest

QUICK_ENV = "LOOPX_TEST_QUICK"
QUICK_MARKERS = ("postgres", "browser", "agents", "slow")


def refuse_in_quick_tier(marker: str, what: str) -> None:
    """Fail the running test if this is the quick tier: it needs ``what`` and lacks ``marker``."""
    if os.environ.get(QUICK_ENV) == "1":
        pytest.fail(f"this test needs {what} but is not marked @pytest.mark.{marker}: the quick tier "
                    f"(scripts/test.sh --quick) runs none", pytrace=False)
