"""The per-registry integrity key: kept outside the registry, in the user's config directory.

Every registry has a stable id (``meta.registry_id``, made by the schema migration that keys
it). Its secret is ``<user config dir>/loopx/keys/<registry id>.key`` (directory 0700, file
0600): 32 random bytes, hex. :mod:`loopx.ledger.integrity` keys the event hash chain and the state
digests with it (HMAC-SHA256), so someone who can edit the registry and import LoopX, but
cannot read the key, cannot make edited rows verify. On PostgreSQL the key stays with the
client, never in the database. See docs/security.md ("Keyed integrity and rollback").

A registry whose key is not on this machine (another user, another computer) can still be read;
verifying it reports ``integrity_key_missing`` and writing to it is refused with that code.
"""

from __future__ import annotations

import os
from pathlib import Path

from hashlib import sha256 as _sha256

META_ID = "registry_id"
#: What the keying migration recorded (time, goals keyed, goals whose chain already failed).
META_KEYED = "integrity_keyed"
KEY_BYTES = 32


def _dir_env() -> tuple:
    """The environment :func:`key_dir` is a function of (a few microseconds per write)."""
    return os.environ.get("XDG_CONFIG_HOME"), os.environ.get("HOME"), os.environ.get("APPDATA")


def key_dir() -> Path:
    """Where keys and anchors live: ``platformdirs.user_config_dir("loopx")/keys`` (:mod:`loopx.values.userdirs`)."""
    # Asked on every write (the anchor): remembered per environment that decides it.
    env = _dir_env()
    found = _DIRS.get(env)
    if found is None:
        from loopx.values import userdirs

        found = _DIRS[env] = Path(userdirs.config_dir()) / "keys"
    return found


_DIRS: dict[tuple, Path] = {}


def key_path(registry_id: str) -> Path:
    """The key file of the registry ``registry_id``."""
    return key_dir() / f"{registry_id}.key"


def private_dir() -> Path:
    """The key directory, made (0700) if missing: where key files and the anchor are kept."""
    d = key_dir()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(d, 0o700)  # mkdir's mode is masked by umask, and an existing directory keeps its own
    return d


def create(registry_id: str, *, persist: bool = True) -> bytes:
    """Make the key of ``registry_id`` (mode 0600) unless it exists; return the key in force.

    Written to a private temporary file, then linked into place: a concurrent creator either
    wins or reads the winner's complete key, never a half-written one. ``persist=False``: the
    key of a registry that lives only in this process (an in-memory scratch registry a replay
    builds), kept in memory and never written - it would be an orphan the moment the scratch
    registry closed.
    """
    if not persist:
        if len(_EPHEMERAL) >= 256:  # a copy replays one scratch registry per goal: keep the newest
            _EPHEMERAL.clear()
        key = _EPHEMERAL[registry_id] = os.urandom(KEY_BYTES)
        return key
    d = private_dir()
    path = key_path(registry_id)
    tmp = d / f".{registry_id}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, os.urandom(KEY_BYTES).hex().encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    _CACHE.pop(registry_id, None)
    return load(registry_id)


def stage(registry_id: str) -> dict:
    """A new key for ``registry_id`` in a private temporary file (``registry rekey``), put in
    force by :func:`promote` once the registry re-keyed with it has committed."""
    d = private_dir()
    tmp = d / f".{registry_id}.{os.getpid()}.new"
    key = os.urandom(KEY_BYTES)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, key.hex().encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"path": str(tmp), "key": key}


def promote(registry_id: str, staged: dict) -> None:
    """Put a :func:`stage`-d key in force (atomically replacing the old one)."""
    os.replace(staged["path"], key_path(registry_id))
    _CACHE.pop(registry_id, None)


def discard(staged: dict) -> None:
    """Remove a staged key that was not used."""
    if staged.get("path"):
        Path(staged["path"]).unlink(missing_ok=True)


# registry id -> (the environment that decides the key's directory (:func:`_dir_env`), key):
# asked by every transaction, so the key's path is not rebuilt to find a key already read.
_CACHE: dict[str, tuple[tuple, bytes]] = {}


#: registry id -> key, of the in-memory registries of this process (:func:`create`'s ``persist``).
_EPHEMERAL: dict[str, bytes] = {}


def load(registry_id: str) -> bytes | None:
    """The key of ``registry_id``, or None when this user has none (another machine or user)."""
    if _EPHEMERAL and registry_id in _EPHEMERAL:
        return _EPHEMERAL[registry_id]
    env = _dir_env()
    cached = _CACHE.get(registry_id)
    if cached is not None and cached[0] == env:
        return cached[1]
    path = key_path(registry_id)
    try:
        text = path.read_text().strip()
        key = bytes.fromhex(text)
    except (OSError, ValueError):
        return None
    if len(key) != KEY_BYTES:
        return None
    _CACHE[registry_id] = (env, key)
    return key


def sqlite_location(path) -> str:
    """:func:`location` of the SQLite registry file ``path``."""
    from loopx.store.dialect import sqlite_location as of_file

    return of_file(path)


def location(tx) -> str:
    """Where the registry ``tx`` reads lives: its SQLite file (resolved), or the PostgreSQL
    server, database and schema."""
    from loopx.store.dialect import of as dialect_of

    return dialect_of(tx).location(tx)


def forget(registry_id: str, loc: str) -> None:
    """Remove the key, rollback anchor and location record of a registry that is gone for good
    (``loopx demo``'s temporary registry): a deleted registry leaves no secret behind."""
    anchor = key_dir() / f"{registry_id}.anchor"
    for f in (key_path(registry_id), anchor, anchor.with_name(anchor.name + "-wal"),
              anchor.with_name(anchor.name + "-shm"), anchor.with_name(anchor.name + "-lock"), _location_file(loc)):
        try:
            f.unlink()
        except FileNotFoundError:
            pass
    _CACHE.pop(registry_id, None)


def _location_file(loc: str) -> Path:
    return key_dir() / f"{_sha256(loc.encode()).hexdigest()[:32]}.location"


def remember(tx, registry_id: str) -> None:
    """Record that the registry where ``tx`` reads is keyed as ``registry_id``: a registry found
    there later without an id was stripped of it or replaced by an older, unkeyed copy."""
    remember_location(location(tx), registry_id)


_REMEMBERED: set = set()


def remember_location(loc: str, registry_id: str, *, once: bool = False) -> None:
    """:func:`remember` for a known location (``once``: unless this process or an earlier one
    already recorded it - what every write of an SQLite registry asks, after its commit)."""
    if loc.endswith(":memory:") or once and (loc, registry_id) in _REMEMBERED:
        return
    _REMEMBERED.add((loc, registry_id))
    if once and _location_file(loc).exists():
        return
    d = private_dir()
    tmp = d / f".{os.getpid()}.location.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, f"{registry_id}\n{loc}\n".encode())
    finally:
        os.close(fd)
    os.replace(tmp, _location_file(loc))


def remembered(tx) -> str | None:
    """The id this user's LoopX keyed the registry at ``tx``'s location with, or None."""
    try:
        return _location_file(location(tx)).read_text().split("\n", 1)[0].strip() or None
    except OSError:
        return None


class Keyring:
    """How one registry's integrity values are computed: keyed (HMAC-SHA256), or the unkeyed
    sha256 of registries made before keying (``registry_id`` None), or missing (a keyed
    registry whose key this user does not have: nothing can be verified or written)."""

    __slots__ = ("registry_id", "key", "stripped", "_inner", "_outer")

    def __init__(self, registry_id: str | None, key: bytes | None, *, stripped: bool = False):
        self.registry_id, self.key, self.stripped = registry_id, key, stripped
        self._inner = self._outer = None
        if key is not None:
            block = key.ljust(64, b"\0")  # HMAC (RFC 2104) over sha256's 64-byte block
            self._inner = _sha256(bytes(b ^ 0x36 for b in block))
            self._outer = _sha256(bytes(b ^ 0x5C for b in block))

    @property
    def state(self) -> str:
        """``keyed``, ``legacy`` (a registry not keyed yet), ``missing`` (no key here) or
        ``stripped`` (a registry this user keyed, found without its id: see :func:`remember`)."""
        if self.stripped:
            return "stripped"
        if self.registry_id is None:
            return "legacy"
        return "keyed" if self.key is not None else "missing"

    def hasher(self):
        """A fresh hash object (``update``, ``hexdigest``): HMAC-SHA256 when keyed, else sha256."""
        if self._inner is None:
            return _sha256()
        return _Hmac(self._inner.copy(), self._outer)

    def digest(self, data: bytes) -> str:
        """:meth:`hasher` over ``data``, hex."""
        h = self.hasher()
        h.update(data)
        return h.hexdigest()

    def stripped_message(self) -> str:
        """Why a registry found without its id is not trusted."""
        return (f"this registry was keyed (id {self.registry_id}) but has no id any more: its id was removed or it"
                " was replaced by an older, unkeyed copy; restore the newest copy (or, to start over from this"
                f" copy on purpose, delete {key_dir()}/*.location naming it)")

    def missing_message(self) -> str:
        """One line saying why nothing can be verified or written, and what to do."""
        return (f"the integrity key of this registry ({self.registry_id}) is not on this machine: expected"
                f" {key_path(self.registry_id)} (mode 0600). Copy it from the machine and user that made the"
                " registry, or, if it is lost, `loopx registry rekey --adopt` trusts the registry as it stands")


class _Hmac:
    __slots__ = ("_inner", "_outer")

    def __init__(self, inner, outer):
        self._inner, self._outer = inner, outer

    def update(self, data: bytes) -> None:
        self._inner.update(data)

    def hexdigest(self) -> str:
        o = self._outer.copy()
        o.update(self._inner.digest())
        return o.hexdigest()


def stored_id(tx) -> str | None:
    """The registry's id (``meta.registry_id``), or None for a registry not keyed yet."""
    seen = getattr(tx, "_loopx_locked_id", None)
    if seen is not None:
        return seen[0]  # read with the goal's row, in this transaction (SqliteTx/PostgresTx.lock_goal)
    from loopx.store.queries.ledger import meta_value  # (loaded by every write and read before this)

    row = meta_value(tx, META_ID)
    return row["value"] if row else None


def keyring(tx) -> Keyring:
    """The :class:`Keyring` of the registry ``tx`` reads (read once per transaction)."""
    ring = getattr(tx, "_loopx_keyring", None)
    if ring is None:
        rid = stored_id(tx)
        if rid is not None:
            ring = _ring(rid, load(rid))
        else:
            # No id: a registry never keyed - unless this user keyed one right here before.
            was = remembered(tx)
            ring = Keyring(was, None, stripped=True) if was else Keyring(None, None)
        set_keyring(tx, ring)
    return ring


_RINGS: dict[tuple, Keyring] = {}


def _ring(registry_id: str, key: bytes | None) -> Keyring:
    """The :class:`Keyring` of ``registry_id`` with ``key``, made once per process: every
    transaction asks for it, and making one prepares the key's HMAC pads (and the same object
    each time lets :mod:`loopx.ledger.integrity` remember what it already hashed with it)."""
    found = _RINGS.get((registry_id, key))
    if found is None:
        if len(_RINGS) >= 64:  # a process walking many registries keeps the newest few
            _RINGS.clear()
        found = _RINGS[(registry_id, key)] = Keyring(registry_id, key)
    return found


def set_keyring(tx, ring: Keyring) -> None:
    """Use ``ring`` for the rest of ``tx`` (the keying migration, ``registry rekey``)."""
    try:
        tx._loopx_keyring = ring
    except AttributeError:  # a transaction object that takes no attributes: looked up each time
        pass
