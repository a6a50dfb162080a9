"""Opening a file a step names, without check-then-use.

LoopX reads and writes some files *for* a step, outside its confinement (``evidence add
--file``, Issue-Fix's ``handoff --output``, any ``click.Path`` option a command declares). A path
checked once (``realpath``, then compare) and opened later lets the agent swap a symbolic link in
between: LoopX would then hash the key file or write the user's ``site-packages``. Here the check
*is* the open:

* the path is made absolute lexically (never ``realpath``) and must lie beneath one of the
  allowed roots (a step's writable roots);
* the root is opened, then every component beneath it is resolved with no symbolic link followed
  and no ``..`` leaving it: ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` where the kernel
  has it (Linux >= 5.6), else ``O_NOFOLLOW`` component by component from the held directory
  descriptor. A swap of an intermediate directory after that changes nothing: LoopX holds the
  directory it resolved (:class:`Place`) and works relative to that descriptor;
* reads take the file's own descriptor (a regular file with one link: a hard link to a file
  outside the root cannot be told apart by its path, so it is refused);
* writes create a temporary file beneath the held directory (``O_CREAT | O_EXCL | O_NOFOLLOW``)
  and rename it over the name relative to the same descriptor (``renameat``): an existing name,
  a symbolic link included, is replaced, never written through.

A turn's broker resolves a request's paths once (:func:`place`), keeps them in :data:`HELD` while
the command runs in its process, and the command opens them through :func:`step_place` - the same
descriptors. A command run elsewhere (a child of the broker) resolves them again the same way.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import os
import posixpath
import secrets

from loopx.values.errors import LoopxError

RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
#: ``openat2``'s number on x86_64 and aarch64 (the unified syscall table of every 64-bit Linux).
SYS_OPENAT2 = 437
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

#: The places a turn's broker resolved for the request now served in this thread: given path ->
#: :class:`Place` (set by :func:`holding`; ``None`` outside a request).
HELD: contextvars.ContextVar = contextvars.ContextVar("loopx_held_paths", default=None)

_openat2_state: list = []  # [] unknown, [fn] available, [None] not available


def _openat2():
    """The ``openat2`` call through ctypes, or ``None`` where the kernel or libc lacks it."""
    if _openat2_state:
        return _openat2_state[0]
    fn = None
    import platform
    import sys

    if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64", "arm64"):
        try:
            import ctypes

            class OpenHow(ctypes.Structure):
                _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

            libc = ctypes.CDLL(None, use_errno=True)
            syscall = libc.syscall
            syscall.restype = ctypes.c_long

            def call(dir_fd: int, path: str, flags: int, mode: int, resolve: int) -> int:
                how = OpenHow(flags, mode, resolve)
                fd = syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dir_fd), ctypes.c_char_p(os.fsencode(path)),
                             ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
                if fd < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err), path)
                return int(fd)

            probe = call(-100, ".", os.O_RDONLY | _DIRECTORY | _CLOEXEC, 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
            os.close(probe)
            fn = call
        except (OSError, AttributeError):  # ENOSYS (older kernel), EPERM (a seccomp filter): walk instead
            fn = None
    _openat2_state.append(fn)
    return fn


def _components(rel: str) -> list[str]:
    """``rel``'s components, lexically normalised; one leaving its root is refused (EXDEV)."""
    rel = posixpath.normpath(rel) if rel else "."
    if rel.startswith("/") or rel == ".." or rel.startswith("../"):
        raise OSError(errno.EXDEV, "leaves the directory it must stay beneath", rel)
    return [] if rel == "." else rel.split("/")


def open_beneath(dir_fd: int, rel: str, flags: int, mode: int = 0o600) -> int:
    """Open ``rel`` beneath the directory ``dir_fd`` with no symbolic link followed on the way or at
    the end and no ``..`` leaving it; a descriptor (``O_CLOEXEC``) or ``OSError`` (``ELOOP`` for a
    link, ``EXDEV`` for an escape)."""
    parts = _components(rel)
    flags |= _CLOEXEC
    fn = _openat2()
    if fn is not None:
        for _ in range(8):
            try:
                return fn(dir_fd, "/".join(parts) or ".", flags, mode if flags & os.O_CREAT else 0,
                          RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:  # EAGAIN: a rename raced the walk; the kernel asks to retry
                    raise
        raise OSError(errno.EAGAIN, "the path kept changing while it was resolved", rel)
    if not parts:
        return os.open(".", flags, mode, dir_fd=dir_fd)
    current = dir_fd
    try:
        for name in parts[:-1]:
            nxt = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=current)
            if current != dir_fd:
                os.close(current)
            current = nxt
        return os.open(parts[-1], flags | _NOFOLLOW, mode, dir_fd=current)
    finally:
        if current != dir_fd:
            os.close(current)


def openat2_available() -> bool:
    """Whether :func:`open_beneath` uses ``openat2`` here (else the component walk)."""
    return _openat2() is not None


def _absolute(path: str, cwd: str | None) -> str:
    return posixpath.normpath(posixpath.join(cwd or os.getcwd(), path))


def _refused(path: str, why: str) -> LoopxError:
    return LoopxError("actor_forbidden", f"{path} is outside what this step may touch ({why})")


def _why(exc: OSError) -> str:
    return {errno.ELOOP: "a symbolic link on the way", errno.EXDEV: "it leaves the allowed directory",
            errno.ENOTDIR: "a symbolic link or a file on the way", errno.ENOENT: "a directory on the way is missing",
            }.get(exc.errno, exc.strerror or str(exc))


class Place:
    """A file's place beneath an allowed root: its directory, held open, and its final name."""

    def __init__(self, shown: str, dir_fd: int, name: str):
        self.shown, self.dir_fd, self.name = shown, dir_fd, name

    def close(self) -> None:
        """Let the held directory go."""
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def open_read(self) -> int:
        """A descriptor of the file for reading: a regular file with one link, no link followed."""
        try:
            fd = open_beneath(self.dir_fd, self.name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise _refused(self.shown, _why(exc)) if exc.errno in (errno.ELOOP, errno.EXDEV) else \
                LoopxError("invalid_argument", f"{self.shown}: cannot read it ({exc.strerror})") from None
        st = os.fstat(fd)
        import stat

        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise LoopxError("invalid_argument", f"{self.shown} is not a regular file")
        if st.st_nlink > 1:
            os.close(fd)
            raise _refused(self.shown, f"it has {st.st_nlink} hard links: another name may lie outside")
        return fd

    def write_bytes(self, data: bytes, *, mode: int = 0o644) -> None:
        """Replace the file with ``data``: a temporary file beside it, renamed over the name."""
        tmp = f".{self.name[:100]}.loopx-{os.getpid()}-{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=self.dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.dir_fd)
            raise


def place(path: str, *, roots: list[str], cwd: str | None = None) -> Place:
    """Resolve ``path`` (relative to ``cwd``) beneath the one of ``roots`` it lies in, following no
    symbolic link: its directory is opened and held. Refused with ``actor_forbidden`` when it lies
    beneath none of them, or a link or ``..`` would take it out."""
    full = _absolute(os.fsdecode(path), cwd)
    for root in sorted(roots, key=len, reverse=True):
        root = posixpath.normpath(root)
        if full == root or not full.startswith(root.rstrip("/") + "/"):
            continue
        try:
            root_fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        except OSError:
            continue  # a root that is a file (a device) or gone holds nothing beneath it
        rel = full[len(root.rstrip("/")) + 1:]
        parent, name = posixpath.split(rel)
        try:
            dir_fd = open_beneath(root_fd, parent or ".", os.O_RDONLY | _DIRECTORY)
        except OSError as exc:
            if exc.errno == errno.ENOENT:  # nothing to escape through: the command says it is missing
                raise LoopxError("invalid_argument", f"{path}: a directory on the way does not exist") from None
            raise _refused(path, _why(exc)) from None
        finally:
            os.close(root_fd)
        return Place(full, dir_fd, name)
    raise _refused(path, "beneath none of its directories")


def step_roots() -> list[str] | None:
    """The roots a step may name files beneath: the writable roots of the step this process serves
    (a broker's request) or of ``LOOPX_STEP``; ``None`` when no step is being served."""
    from loopx.sandbox import process

    step = process.STEP.get()
    if step is not None:
        return list(step.writable())
    raw = os.environ.get(process.ENV_STEP)
    if not raw:
        return None
    import json

    try:
        roots = json.loads(raw).get("roots")
    except (ValueError, AttributeError):
        roots = None
    # A step whose roots are unknown names nothing: refused rather than opened unchecked.
    return [r for r in roots if isinstance(r, str)] if isinstance(roots, list) else []


@contextlib.contextmanager
def holding():
    """A fresh :data:`HELD` for one request; its places are closed when it ends."""
    held: dict = {}
    token = HELD.set(held)
    try:
        yield held
    finally:
        HELD.reset(token)
        for p in held.values():
            p.close()


@contextlib.contextmanager
def step_place(path: str):
    """The :class:`Place` of ``path`` for the step being served: the one its broker resolved, else
    resolved now beneath the step's roots (see :func:`place`)."""
    held = HELD.get()
    if held is not None and path in held:
        yield held[path]
        return
    found = place(path, roots=step_roots() or [])
    try:
        yield found
    finally:
        found.close()


def read_file(path: str, *, limit: int | None = None) -> tuple[str, bytes]:
    """``(absolute path, bytes)`` of a file a command was given; on a step's behalf opened as
    :class:`Place` says (beneath the step's roots, no links, one hard link), else the user's own
    path, opened once. ``limit``: read at most that many bytes."""
    with open_file(path) as (full, fh):
        return full, fh.read(-1 if limit is None else limit)


def hash_file(path: str) -> tuple[str, str]:
    """``(absolute path, "sha256:...")`` of a file a command was given (opened as :func:`read_file`)."""
    digest = hashlib.sha256()
    with open_file(path) as (full, fh):
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return full, "sha256:" + digest.hexdigest()


@contextlib.contextmanager
def open_file(path: str):
    """``(absolute path, binary file)`` open for reading, as :func:`read_file` opens it."""
    if step_roots() is not None:
        with step_place(path) as p:
            fd = p.open_read()
            full = p.shown
    else:
        full = os.path.abspath(path)
        try:
            fd = os.open(full, os.O_RDONLY | _CLOEXEC | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise LoopxError("invalid_argument", f"{path}: cannot read it ({exc.strerror})") from None
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise LoopxError("invalid_argument", f"{path} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        yield full, fh


def write_file(path: str, data: bytes) -> str:
    """Write ``data`` to a path a command was given; its absolute path. On a step's behalf only
    beneath the step's roots, as :meth:`Place.write_bytes` writes; else where the user said."""
    if step_roots() is not None:
        with step_place(path) as p:
            try:
                p.write_bytes(data)
            except OSError as exc:
                raise LoopxError("invalid_argument", f"cannot write {path}: {exc.strerror}") from None
            return p.shown
    full = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise LoopxError("invalid_argument", f"cannot write {path}: {exc.strerror}") from None
    return full


def write_beneath(root: str, rel: str, data: bytes, *, mode: int = 0o644) -> str:
    """Write ``data`` to ``rel`` beneath LoopX's own directory ``root`` (made if missing, with the
    directories on the way), following no link beneath it; the file's path."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    root_fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        parts = _components(rel)
        current = root_fd
        for name in parts[:-1]:
            try:
                os.mkdir(name, 0o700, dir_fd=current)
            except FileExistsError:
                pass
            nxt = open_beneath(current, name, os.O_RDONLY | _DIRECTORY)
            if current != root_fd:
                os.close(current)
            current = nxt
        try:
            Place(posixpath.join(root, *parts), current, parts[-1]).write_bytes(data, mode=mode)
        finally:
            if current != root_fd:
                os.close(current)
    finally:
        os.close(root_fd)
    return posixpath.join(root, *parts)


def read_beneath(root: str, rel: str) -> bytes:
    """The bytes of ``rel`` beneath ``root``, following no link beneath it (``OSError`` if it cannot)."""
    root_fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        fd = open_beneath(root_fd, rel, os.O_RDONLY)
    finally:
        os.close(root_fd)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()
