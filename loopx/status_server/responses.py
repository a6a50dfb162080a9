"""How every answer of the status server is written: the headers each carries, JSON bodies and
the one error shape (``{"error": {"code", "message"}}``) with its HTTP status."""

from __future__ import annotations

from loopx.values.jsonsafe import dumps_out

JSON_TYPE = "application/json; charset=utf-8"
ERROR_STATUS = {"goal_not_found": 404, "not_found": 404, "invalid_argument": 400, "registry_unavailable": 503,
                "schema_too_new": 503, "registry_newer": 503, "registry_corrupt": 503, "registry_invalid": 503,
                "registry_not_found": 503, "artifact_tampered": 409}
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none';"
                               " frame-ancestors 'none'; form-action 'none'",
}


def send(handler, status: int, body: bytes, content_type: str, extra: dict | None = None) -> None:
    """Answer ``status`` with ``body`` (no body for HEAD) and the security headers."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for k, v in {**SECURITY_HEADERS, **(extra or {})}.items():
        handler.send_header(k, v)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


def send_json(handler, status: int, data, extra: dict | None = None) -> None:
    """Answer ``status`` with ``data`` as compact JSON."""
    send(handler, status, dumps_out(data, separators=(",", ":")).encode(), JSON_TYPE, extra)


def send_error(handler, status: int, code: str, message: str, extra: dict | None = None) -> None:
    """Answer ``status`` with a LoopX error document."""
    send_json(handler, status, {"error": {"code": code, "message": message}}, extra)
