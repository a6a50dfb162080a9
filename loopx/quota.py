"""``quota``: budgets, usage, and the turn decision (``quota should-run``).

The arithmetic lives in :mod:`loopx.usage`, the contract document in :mod:`loopx.contract`;
this module is the entry point the seed names and holds the commands' domain functions.
"""

from __future__ import annotations

from loopx.usage import effective_limits, exhausted, fingerprint, remaining, usage  # noqa: F401  (the public API)
