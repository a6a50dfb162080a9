"""The status server's URL table: which path answers with which view (see the package's
docstring for the list). Every route only reads."""

from __future__ import annotations

from loopx.views import status as projection
from loopx.values.errors import LoopxError
from loopx.status_server.responses import send_error, send_json
from loopx.status_server.stream import serve_stream
from loopx.values.validate import ascii_whole, check_id
from loopx.status_server.views import goal_revision, send_asset, send_view


def route(handler, path: str, q: dict) -> None:
    """Answer a GET (or HEAD) of ``path`` with query ``q`` (one value a name)."""
    if path == "/" or path == "/index.html":
        return send_asset(handler, "index.html")
    if path.startswith("/assets/"):
        return send_asset(handler, path[len("/assets/"):])
    if path == "/healthz":
        rev = handler.server.pool.run(projection.revision)
        return send_json(handler, 200, {"ok": True, "schema": projection.SCHEMA, "revision": rev, "readonly": True})
    if path in ("/api/status", "/api/goals"):
        return _overview(handler, path, q)
    if path == "/api/stream":
        return serve_stream(handler)
    if path == "/api/pages":
        return _pages(handler)
    segments = path.split("/")
    # "/api/goals/ID" -> ["", "api", "goals", ID]; "/api/goals/ID/events" adds "events".
    if len(segments) in (4, 5) and segments[1:3] == ["api", "goals"]:
        goal_id = check_id("goal", segments[3], option="goal id")
        if len(segments) == 4:
            return send_view(handler, ("goal", goal_id), lambda tx: projection.goal_view_tx(tx, goal_id),
                             version=goal_revision(goal_id))
        if segments[4] == "events":
            after = _int(q, "after", 0)
            limit = _int(q, "limit", 200)
            if after < 0 or not 1 <= limit <= projection.MAX_EVENTS:
                raise LoopxError("invalid_argument", f"after must be >= 0 and limit 1-{projection.MAX_EVENTS}")
            return send_view(handler, ("events", goal_id, after, limit),
                             lambda tx: projection.goal_events_tx(tx, goal_id, after=after, limit=limit),
                             version=goal_revision(goal_id))
    if len(segments) == 6 and segments[1:3] == ["api", "goals"] and segments[4] == "artifacts":
        return _artifact(handler, check_id("goal", segments[3], option="goal id"), segments[5])
    send_error(handler, 404, "not_found", "no such page")


def _artifact(handler, goal_id: str, name: str) -> None:
    """One artifact of the goal (a reviewer packet, a diff), as plain text, only while it has the
    sha256 its evidence recorded (``artifact_tampered``, 409, otherwise): nothing of it is shown."""
    from loopx.ledger import artifacts
    from loopx.status_server.responses import send

    data = handler.server.pool.run(lambda tx: artifacts.read_named(tx, goal_id, name))
    send(handler, 200, data, "text/plain; charset=utf-8", {"Content-Disposition": "inline",
                                                            "Content-Security-Policy": "default-src 'none'; sandbox"})


def _overview(handler, path: str, q: dict) -> None:
    limit = _int(q, "limit", 50)
    part, after = projection.parse_cursor(q.get("cursor") or None)
    include_closed = _flag(q, "all")
    if not 1 <= limit <= projection.MAX_LIMIT:
        raise LoopxError("invalid_argument", f"limit must be 1-{projection.MAX_LIMIT}")

    def overview(tx):
        view = projection.overview_tx(tx, limit=limit, part=part, after=after, include_closed=include_closed)
        if path == "/api/goals":
            view = {k: view[k] for k in ("schema", "generated_at", "revision", "goals", "page")}
            view["view"] = "goals"
        return view

    send_view(handler, (path, limit, part, after, include_closed), overview)


def _pages(handler) -> None:
    """The pages capabilities serve for this registry (:mod:`loopx.ledger.served_pages`): read from files
    their servers wrote, so the dashboard can link to them without writing anything itself."""
    from loopx.ledger import served_pages

    registry = handler.server.pool.run(served_pages.registry_id)
    send_json(handler, 200, {"pages": served_pages.live(registry)})


def _int(q: dict, name: str, default: int) -> int:
    value = q.get(name)
    if value is None or value == "":
        return default
    number = ascii_whole(value)
    if number is None:
        raise LoopxError("invalid_argument", f"{name} must be a whole number (ASCII digits)")
    return number


def _flag(q: dict, name: str) -> bool:
    value = q.get(name, "")
    if value not in _FLAGS:
        raise LoopxError("invalid_argument", f"{name} must be one of {', '.join(repr(v) for v in _FLAGS)}")
    return _FLAGS[value]


_FLAGS = {"": False, "0": False, "false": False, "no": False, "1": True, "true": True, "yes": True}
