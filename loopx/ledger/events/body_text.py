"""The canonical text of the event being appended now, so that an apply function can cut one
member out of it (:func:`member_text`) instead of encoding it a second time."""

from __future__ import annotations

from loopx.values import jsonsafe

#: ``(body, its canonical text)`` of the event :func:`loopx.ledger.log.append_chained` is applying, else None.
_held: tuple | None = None


def hold(body: dict, text: str) -> None:
    """Note that ``body``, whose canonical text is ``text``, is being applied now (until :func:`release`)."""
    global _held
    _held = (body, text)


def release() -> None:
    """Forget what :func:`hold` noted."""
    global _held
    _held = None


def member_text(event, key: str) -> str:
    """``jsonsafe.canonical(event.body[key])``, cut from the body's canonical text when the event
    is being appended now (a run's contract, a few KB, is otherwise encoded a second time for its
    own column). The cut is exact: a canonical object is ``{`` + ``"key":value`` items in key
    order joined by ``,`` + ``}``, and the items around ``key`` are encoded again to find it."""
    body, held = event.body, _held
    if held is None or held[0] is not body:
        return jsonsafe.canonical(body[key])
    names = sorted(body)
    at = names.index(key)
    item = lambda k: jsonsafe.canonical(k) + ":" + jsonsafe.canonical(body[k])  # noqa: E731
    prefix = "{" + "".join(item(k) + "," for k in names[:at]) + jsonsafe.canonical(key) + ":"
    suffix = "".join("," + item(k) for k in names[at + 1:]) + "}"
    text = held[1]
    if len(text) > len(prefix) + len(suffix) and text.startswith(prefix) and text.endswith(suffix):
        return text[len(prefix):len(text) - len(suffix)]
    return jsonsafe.canonical(body[key])
