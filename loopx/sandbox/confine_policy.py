"""The confinement policy of a step, as a value: what its processes may read, write and reach.

One :class:`Policy` per step (as Codex's ``SandboxPolicy``): :mod:`loopx.turn.confine` builds the
agent's, :mod:`loopx.turn.private_run` a narrower one for a run LoopX makes on the step's behalf. It is
data with methods, never a dict passed around: :meth:`Policy.may_read`, :meth:`Policy.may_write`,
:meth:`Policy.denies_tcp` say what the Landlock policy grants; :meth:`Policy.to_json` is the file
the watcher (:mod:`loopx.sandbox.process_watcher`) reads with :func:`loopx.sandbox.landlock.load` and enforces just
before it starts the command; :meth:`Policy.from_json` reads that file back through the same
checks (another version, a key more or less, a value of the wrong type: :class:`PolicyError`), so
confinement fails closed on a file LoopX did not write.

Paths are real paths (symbolic links resolved): Landlock checks the file a path reaches.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import attrs

from loopx.sandbox import landlock
from loopx.sandbox.landlock import PolicyError

__all__ = ["Policy", "PolicyError", "Rule"]

Access = Literal["r", "rw"]


def under(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies beneath it (both real paths)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


@attrs.frozen
class Rule:
    """One Landlock rule: ``access`` (``"r"``: read and execute; ``"rw"``: everything) on the whole
    subtree at ``path`` (or on the file ``path``)."""

    path: str
    access: Access = attrs.field(validator=attrs.validators.in_(("r", "rw")))

    @property
    def writes(self) -> bool:
        """Whether the rule grants writing."""
        return self.access == "rw"

    def holds(self, path: str) -> bool:
        """Whether ``path`` is beneath this rule (so the rule applies to it)."""
        return under(path, self.path)


def _rules(pairs: list[tuple[str, Access]]) -> tuple[Rule, ...]:
    return tuple(Rule(path, access) for path, access in pairs)


@attrs.frozen
class Policy:
    """The Landlock policy of a step (see :mod:`loopx.sandbox.landlock` for how each field is enforced).

    ``rules`` apply where a private mount namespace can be had: ``read_only`` paths are then
    bind-mounted read-only and ``pin`` paths onto themselves first; elsewhere ``rules_unpinned``
    apply instead (:meth:`unpinned`), which leave those paths out. ``deny_tcp``: ports no process
    of the step may connect to. ``world``: the policy is enforced only inside the step's world
    (:mod:`loopx.sandbox.world`; a watcher outside it starts nothing).
    """

    #: The version of the JSON :meth:`to_json` writes and :meth:`from_json` reads.
    VERSION: ClassVar[int] = landlock.VERSION

    rules: tuple[Rule, ...]
    deny_tcp: tuple[int, ...] = ()
    read_only: tuple[str, ...] = ()
    rules_unpinned: tuple[Rule, ...] = ()
    pin: tuple[str, ...] = ()
    world: bool = False

    def reads(self) -> tuple[Rule, ...]:
        """The read-only rules: what the step may read (its writable roots aside)."""
        return tuple(r for r in self.rules if not r.writes)

    def writable_roots(self) -> tuple[str, ...]:
        """The paths the step may write beneath (``read_only`` paths inside them excepted)."""
        return tuple(r.path for r in self.rules if r.writes)

    def may_read(self, path: str) -> bool:
        """Whether a process of the step may read ``path`` (a real path)."""
        return any(r.holds(path) for r in self.rules)

    def may_write(self, path: str) -> bool:
        """Whether a process of the step may write ``path`` (a real path): beneath a writable root
        and not beneath a path kept read-only."""
        return self.writable_root_of(path) is not None and not any(under(path, p) for p in self.read_only)

    def writable_root_of(self, path: str) -> str | None:
        """The writable root ``path`` lies beneath, or ``None``."""
        return next((r.path for r in self.rules if r.writes and r.holds(path)), None)

    def writes_near(self, path: str) -> str | None:
        """A writable root (devices aside) that holds ``path`` or lies beneath it, or ``None``:
        a place the step could write into, so not one private from it."""
        return next((r.path for r in self.rules if r.writes and not r.path.startswith("/dev/")
                     and (r.holds(path) or under(r.path, path))), None)

    def denies_tcp(self, port: int) -> bool:
        """Whether a TCP connection to ``port`` is denied (Landlock ABI >= 4 enforces it)."""
        return port in self.deny_tcp

    def unpinned(self) -> Policy:
        """The policy as enforced where no mount namespace can be had (nothing mounted)."""
        if not self.pin and not self.read_only:
            return self
        return attrs.evolve(self, rules=self.rules_unpinned, rules_unpinned=(), pin=(), read_only=())

    def to_doc(self) -> landlock.PolicyDoc:
        """The policy as :func:`loopx.sandbox.landlock.enforce` takes it (what :meth:`to_json` holds)."""
        return {"version": self.VERSION, "rules": [(r.path, r.access) for r in self.rules],
                "rules_unpinned": [(r.path, r.access) for r in self.rules_unpinned], "pin": list(self.pin),
                "read_only": list(self.read_only), "deny_tcp": list(self.deny_tcp), "world": self.world}

    def to_json(self) -> str:
        """The policy file's text (versioned; :meth:`from_json` reads it back)."""
        import json

        return json.dumps(self.to_doc())

    @classmethod
    def from_doc(cls, doc: landlock.PolicyDoc) -> Policy:
        """The policy of a checked document (:func:`loopx.sandbox.landlock.parse`'s answer)."""
        return cls(rules=_rules(doc["rules"]), deny_tcp=tuple(doc["deny_tcp"]), read_only=tuple(doc["read_only"]),
                   rules_unpinned=_rules(doc["rules_unpinned"]), pin=tuple(doc["pin"]), world=doc["world"])

    @classmethod
    def from_json(cls, text: str | bytes) -> Policy:
        """The policy in ``text``; :class:`PolicyError` unless it is exactly what :meth:`to_json`
        writes (this version, these keys, these types): the checks the watcher makes."""
        return cls.from_doc(landlock.parse(text))

    @classmethod
    def load(cls, path: str) -> Policy:
        """The policy in the file ``path`` (:meth:`from_json`; ``PolicyError`` if unreadable)."""
        return cls.from_doc(landlock.load(path))

    def write(self, path: str) -> str:
        """Write the policy file ``path`` (for the watcher); returns ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())
        return path

    def enforce(self) -> int:
        """Restrict this process and all it starts to the policy (:func:`loopx.sandbox.landlock.enforce`)."""
        return landlock.enforce(self.to_doc())
