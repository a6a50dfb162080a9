"""``loopx.api.gates``: a goal's gates (what waits for a person), read, requested and decided."""

from __future__ import annotations

from loopx.domain.gates import add as request, decide, list_gates as list, load_gate as load, request_in
from loopx.model.gate import Gate

__all__ = ["Gate", "decide", "list", "load", "request", "request_in"]
