"""Strict JSON at LoopX's edges, and output that never crashes on what older versions stored.

Every JSON value that enters the registry - ``--data``, a plugin's return, a capability's
state, any event body - must be *interoperable* JSON: finite numbers only (no NaN/Infinity, no
``1e999`` that parses to infinity), strings that are valid Unicode (no lone surrogates, which
cannot be written as UTF-8), bounded nesting and size. :func:`loads` parses text that way and
:func:`check_value` checks an already-built value; both raise ``invalid_argument``.

:func:`dumps_out` renders JSON for people and browsers: when a value from an older registry
still holds a lone surrogate or a non-finite number, it is shown escaped (``"\\ud800"`` as six
characters, ``Infinity`` as the string ``"Infinity"``) instead of crashing the command.
"""

from __future__ import annotations

import json
import math
import re

from loopx.values.errors import LoopxError

MAX_DEPTH = 64
MAX_BYTES = 1 << 20
_INT_LIMIT = 2**63 - 1
_BRACKETS = None  # compiled on first use


def depth(text: str, limit: int = MAX_DEPTH) -> int:
    """The deepest bracket nesting of JSON ``text`` (strings skipped), without recursion; counting
    stops once it is past ``limit``."""
    global _BRACKETS
    if _BRACKETS is None:
        _BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)
    depth = deepest = 0
    for m in _BRACKETS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif c in "]}":
            depth -= 1
    return deepest


def _no_constant(name):
    raise ValueError(f"{name} is not allowed (JSON has no NaN or Infinity)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is too large for JSON")
    return value


def loads(text, *, what: str, max_bytes: int = MAX_BYTES):
    """Parse ``text`` (str or UTF-8 bytes) strictly; ``invalid_argument`` naming ``what`` if not."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise LoopxError("invalid_argument", f"{what} is not valid UTF-8") from None
    if not isinstance(text, str):
        raise LoopxError("invalid_argument", f"{what} must be JSON text")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise LoopxError("invalid_argument", f"{what} is not valid UTF-8") from None
    if size > max_bytes:
        raise LoopxError("invalid_argument", f"{what} is {size} bytes; the limit is {max_bytes} bytes")
    if depth(text) > MAX_DEPTH:
        raise LoopxError("invalid_argument", f"{what} nests deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
        raise LoopxError("invalid_argument", f"{what} is not valid JSON: {str(exc)[:200]}") from None
    check_value(value, what=what)
    return value


#: How many levels an event body adds around the values it carries (``{"values": {key: value}}``,
#: ``{"data": value}``): the ledger allows these on top of :data:`MAX_DEPTH`, so a value that
#: passed its own 64-level check at the edge is never refused once wrapped in its event.
ENVELOPE_DEPTH = 4


def problem(value, max_depth: int = MAX_DEPTH) -> str | None:
    """Why ``value`` is not interoperable JSON (first problem found), or None. No recursion.

    Every event body passes here (a should-run's holds its whole contract): the plain text and
    small integers inside a container are checked where they are met, not stacked one by one,
    and ASCII text (almost all of it) needs no encoding to be known valid.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        # Levels are arrays and objects, as the text parser counts brackets: [[0]] is 2 deep.
        if depth > max_depth and isinstance(item, (dict, list, tuple)):
            return f"nests deeper than {max_depth} levels"
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not -_INT_LIMIT <= item <= _INT_LIMIT:
                return "holds an integer too large to exchange (beyond 64 bits)"
            continue
        if isinstance(item, str):
            if not _utf8(item):
                return "holds a lone surrogate (text that is not valid Unicode)"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"holds the number {item} (JSON has no NaN or Infinity)"
        elif isinstance(item, (dict, list, tuple)):
            if isinstance(item, dict):
                for k in item:
                    if not isinstance(k, str):
                        return f"has a non-text key {k!r}"
                    if not k.isascii() and not _utf8(k):
                        return "holds a lone surrogate in a key"
                values = item.values()
            else:
                values = item
            # Plain values are checked here in place (the common case, on every event body);
            # only containers and unusual values go on the stack.
            for v in values:
                kind = type(v)
                if kind is str:
                    if not v.isascii() and not _utf8(v):
                        return "holds a lone surrogate (text that is not valid Unicode)"
                elif kind is int and -_INT_LIMIT <= v <= _INT_LIMIT or v is None or kind is bool:
                    pass
                else:
                    stack.append((v, depth + 1))
        else:
            return f"holds a {type(item).__name__}, which is not JSON"
    return None


def check_value(value, *, what: str):
    """Raise ``invalid_argument`` unless ``value`` is interoperable JSON; returns it."""
    found = problem(value)
    if found:
        raise LoopxError("invalid_argument", f"{what} {found}")
    return value


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def escaped(value):
    """``value`` made interoperable: lone surrogates become their ``\\uXXXX`` text, non-finite
    numbers their name as a string. Used to show, and to repair, values older versions stored."""
    if isinstance(value, str):
        return value if _utf8(value) else value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {escaped(k): escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escaped(v) for v in value]
    return value


def dumps_out(value, **kwargs) -> str:
    """JSON text for output (``ensure_ascii=False``) that is always valid UTF-8 JSON."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, **kwargs)
        text.encode("utf-8")
        return text
    except (ValueError, UnicodeEncodeError, RecursionError):
        return json.dumps(escaped(value), ensure_ascii=False, allow_nan=False, **kwargs)



def _encoder(sort_keys: bool, item_sep: str, key_sep: str):
    """``json.dumps(value, sort_keys=sort_keys, separators=(item_sep, key_sep))``, the same text,
    with one C encoder made once instead of an encoder object built per call (every write encodes
    its event body, the event's hash input and more: the building was a good part of each call).

    Without the circular-reference check (``check_circular=False``): what is encoded here is an
    event body already held to :data:`MAX_DEPTH` by :func:`problem`, or values of LoopX's own."""
    from json import encoder

    if encoder.c_make_encoder is None:  # pragma: no cover - Pythons without the C accelerator
        return lambda value: json.dumps(value, sort_keys=sort_keys, separators=(item_sep, key_sep))
    encode_str = encoder.encode_basestring_ascii
    fast = encoder.c_make_encoder(None, json.JSONEncoder().default, encode_str, None, key_sep, item_sep, sort_keys,
                                  False, True)

    def dumps(value) -> str:
        if isinstance(value, str):  # (json.dumps's own shortcut for a lone string)
            return encode_str(value)
        return "".join(fast(value, 0))

    return dumps


#: ``json.dumps(value, sort_keys=True, separators=(",", ":"))``: event bodies, contracts, fingerprints.
canonical = _encoder(True, ",", ":")
#: ``json.dumps(value, separators=(",", ":"))``: hash inputs.
compact = _encoder(False, ",", ":")
#: ``json.dumps(value)`` and ``json.dumps(value, sort_keys=True)``: columns written that way.
plain = _encoder(False, ", ", ": ")
plain_sorted = _encoder(True, ", ", ": ")
