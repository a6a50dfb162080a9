"""``loopx.api.testing``: the checks a plugin's own tests run (its fixtures are in ``loopx.testing``)."""

from __future__ import annotations

from loopx.testing import ALLOWED_IMPORTS, CliResult, capability_doc_problems, check_plugin_imports

__all__ = ["ALLOWED_IMPORTS", "CliResult", "capability_doc_problems", "check_plugin_imports"]
