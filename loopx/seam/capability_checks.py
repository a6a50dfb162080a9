"""The checks a capability declaration must pass when it is loaded (:func:`loopx.seam.capabilities.load`).

A malformed declaration is a ``plugin_error`` naming the capability and the field; two
capabilities with one name, or owning overlapping namespaces, are a ``capability_conflict``
naming both. Every name here stays importable from :mod:`loopx.seam.capabilities`.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Iterable

from loopx.values.errors import LoopxError

if TYPE_CHECKING:
    from loopx.seam.capabilities import Capability

# Patterns as strings, compiled on first use (re's cache): most commands check no name.
# Capability names become actor names (``capability:NAME``) and namespaces: keep them simple.
NAME_RE = r"[a-z][a-z0-9_]{0,39}"
# A namespace is a capability-style name, optionally dotted (``issue_fix`` or ``issue_fix.git``).
NAMESPACE_RE = r"[a-z][a-z0-9_]{0,39}(\.[a-z][a-z0-9_]{0,39}){0,3}"
#: The quota a capability may need per run, by the names the contract's ``remaining`` uses.
QUOTA_KEYS = ("turns", "tokens", "wall_seconds")


def validate(cap: Capability) -> Capability:
    """Check one declaration's fields; raises ``plugin_error`` naming the capability and the field."""
    who = f"capability {cap.name!r}"
    if not isinstance(cap.name, str) or not re.fullmatch(NAME_RE, cap.name):
        raise LoopxError("plugin_error", f"{who}: the name must be 1-40 characters of a-z, 0-9, '_', starting with a letter")
    for field in ("version", "summary"):
        value = getattr(cap, field)
        if not isinstance(value, str) or not value.strip():
            raise LoopxError("plugin_error", f"{who}: {field} must be non-empty text")
    for ns in cap.owns:
        if not isinstance(ns, str) or not re.fullmatch(NAMESPACE_RE, ns):
            raise LoopxError("plugin_error", f"{who}: {ns!r} is not a namespace (a-z, 0-9, '_', dotted)")
    for field in ("reads", "commands", "actions", "repairs"):
        for item in getattr(cap, field):
            if not isinstance(item, str) or not item.strip() or len(item) > 100:
                raise LoopxError("plugin_error", f"{who}: {field} holds {item!r}, which is not a short name")
    for item in cap.user_commands:
        words = item.split() if isinstance(item, str) else []
        if not 1 <= len(words) <= 2 or words[0] not in cap.commands:
            raise LoopxError("plugin_error", f"{who}: user_commands holds {item!r}: name one of its commands, alone"
                             " or with one subcommand ('COMMAND SUBCOMMAND')")
    if cap.repair_argv and (not cap.repairs or not all(isinstance(a, str) and a and len(a) <= 200
                                                       for a in cap.repair_argv)):
        raise LoopxError("plugin_error", f"{who}: repair_argv must be a list of short strings, and only a"
                         " capability that declares repairs offers one")
    for key in QUOTA_KEYS:
        value = getattr(cap.quota, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise LoopxError("plugin_error", f"{who}: quota need {key} must be a finite number >= 0, not {value!r}")
    if not isinstance(cap.doc, str) or not cap.doc.endswith(".md"):
        raise LoopxError("plugin_error", f"{who}: doc must be the path of a Markdown file")
    if not isinstance(cap.default_on, bool):
        raise LoopxError("plugin_error", f"{who}: default_on must be True or False, not {cap.default_on!r}")
    if not isinstance(cap.why, str):
        raise LoopxError("plugin_error", f"{who}: why must be text")
    if cap.default_on and not cap.why.strip():
        raise LoopxError("plugin_error", f"{who}: default_on=True needs a why: the reason it must serve every goal "
                                         "(its document says it too, under '## On for every goal')")
    return cap


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def check_conflicts(caps: Iterable[Capability]) -> None:
    """Refuse two capabilities with one name, or owning one namespace (``capability_conflict``)."""
    seen: dict[str, Capability] = {}
    owners: list[tuple[str, Capability]] = []
    for cap in caps:
        if cap.name in seen:
            raise LoopxError(
                "capability_conflict",
                f"capability {cap.name!r} is declared twice (plugins {seen[cap.name].plugin!r} and {cap.plugin!r})",
                capabilities=[cap.name], plugins=[seen[cap.name].plugin, cap.plugin],
            )
        seen[cap.name] = cap
        for ns in cap.owns:
            for other_ns, other in owners:
                if _overlap(ns, other_ns):
                    raise LoopxError(
                        "capability_conflict",
                        f"capabilities {other.name!r} and {cap.name!r} both own namespace "
                        f"{min(ns, other_ns, key=len)!r}; disable one (LOOPX_DISABLE_PLUGINS={cap.plugin or cap.name})",
                        capabilities=[other.name, cap.name], namespace=min(ns, other_ns, key=len),
                    )
            owners.append((ns, cap))
