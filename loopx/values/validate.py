"""Input checks shared by every entry point: ids, names, free text, numbers.

Each check raises ``LoopxError("invalid_argument", ...)`` (or the not-found code for an id of
the right form that names nothing) *before* any transaction starts, so bad input never writes.
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, overload

from loopx.values.errors import LoopxError

# Ids are a one-letter kind, a dash and 12 lowercase hex digits: short enough to type, long
# enough (48 random bits) that independent machines sharing a PostgreSQL registry never collide.
ID_KINDS = {
    "goal": "g",
    "gate": "x",
    "todo": "t",
    "run": "r",
    "contract": "c",
    "evidence": "e",
    "reward": "w",
}
_HEX = frozenset("0123456789abcdef")
_NAME_RE = None  # compiled on first use: most commands never check a name

# Limits on free text, in UTF-8 bytes. A goal's description is a brief, not a data dump:
# 64 KiB holds a long issue text; bigger material belongs in evidence files (stored by sha256).
LIMITS = {
    "title": 200,
    "description": 64 * 1024,
    "text": 8 * 1024,
    "comment": 8 * 1024,
    "note": 8 * 1024,
    "summary": 8 * 1024,
    "agent": 100,
}


def id_pattern(kind: str) -> str:
    """The regular expression (anchored) of a whole id of ``kind``: what :func:`check_id` accepts,
    as the MCP tools' JSON schemas spell it (:mod:`loopx.operations`)."""
    return f"^{ID_KINDS[kind]}-[0-9a-f]{{12}}$"


def new_id(kind: str) -> str:
    """A fresh random id of the given kind (``goal``, ``gate``, ``todo``, ``run``, ...)."""
    return f"{ID_KINDS[kind]}-{os.urandom(6).hex()}"


def check_id(kind: str, value, *, option: str | None = None) -> str:
    """Return ``value`` if it is a well-formed id of ``kind``, else raise invalid_argument."""
    label = option or f"--{kind}-id"
    # A plain character check, not a regex: compiling one pattern per id kind at import cost
    # about a millisecond on every command.
    if not (isinstance(value, str) and len(value) == 14 and value[0] == ID_KINDS[kind] and value[1] == "-"
            and _HEX.issuperset(value[2:])):
        shown = _show(value)
        raise LoopxError(
            "invalid_argument",
            f"{label}: {shown} is not a {kind} id (expected {ID_KINDS[kind]}- and 12 hex digits)",
        )
    return value


def check_name(value, *, what: str = "name") -> str:
    """A short machine name (actions, capabilities): lowercase letters, digits, ``_.-``."""
    global _NAME_RE
    if _NAME_RE is None:
        _NAME_RE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise LoopxError(
            "invalid_argument",
            f"{what}: {_show(value)} must be 1-64 characters of a-z, 0-9, '_', '.', '-', starting with a letter",
        )
    return value


if TYPE_CHECKING:
    from typing import Literal


@overload
def check_text(value: object, *, what: str, limit: str | None = None, required: Literal[True] = True) -> str: ...
@overload
def check_text(value: object, *, what: str, limit: str | None = None, required: bool) -> str | None: ...
def check_text(value: object, *, what: str, limit: str | None = None, required: bool = True) -> str | None:
    """Free text: valid UTF-8, no NUL, within its byte limit; stripped of outer white space."""
    if value is None:
        if required:
            raise LoopxError("invalid_argument", f"{what} is required")
        return None
    if not isinstance(value, str):
        raise LoopxError("invalid_argument", f"{what} must be text")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        # click hands undecodable argv bytes over as lone surrogates (surrogateescape).
        raise LoopxError("invalid_argument", f"{what} is not valid UTF-8") from None
    if "\x00" in value:
        raise LoopxError("invalid_argument", f"{what} contains a NUL character")
    value = value.strip()
    if required and not value:
        raise LoopxError("invalid_argument", f"{what} must not be empty")
    cap = LIMITS.get(limit or what, LIMITS["text"])
    if size > cap:
        raise LoopxError("invalid_argument", f"{what} is {size} bytes; the limit is {cap} bytes")
    return value


def check_number(value, *, what: str, minimum=None, maximum=None, integer: bool = False):
    """A finite number within bounds (NaN and infinities are refused)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LoopxError("invalid_argument", f"{what} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise LoopxError("invalid_argument", f"{what} must be a finite number, not {value}")
    if integer and not float(value).is_integer():
        raise LoopxError("invalid_argument", f"{what} must be a whole number")
    if minimum is not None and value < minimum:
        raise LoopxError("invalid_argument", f"{what} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise LoopxError("invalid_argument", f"{what} must be at most {maximum}")
    return int(value) if integer else value


def ascii_whole(text, *, digits: int = 18) -> int | None:
    """``text`` as a whole number when it is 1 to ``digits`` ASCII digits, else ``None``.

    Every number LoopX reads as text goes through here: ``str.isdigit()`` also accepts "²", "①"
    and other scripts' digits, which ``int()`` refuses (a ValueError where a clear error was
    due) or reads as numbers nobody typed ("١٢" is 12).
    """
    if not isinstance(text, str) or not 0 < len(text) <= digits or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
