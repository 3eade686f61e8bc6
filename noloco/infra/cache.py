"""The result cache, under ``$NOLOCO_CACHE`` (default ``~/.cache/noloco``), never inside the
installed package, keyed by the request and by a hash of every source file of the toolkit, so
editing any of them invalidates every cached result. A read-only or missing cache folder only
costs the recomputation. Entries are data (strict JSON), validated on read: an entry must be a
regular file (a named pipe or a link is never opened), parse, carry this version's schema, its own
key, the sha256 of its data (damage) and a keyed digest of it (HMAC-SHA256 with this user's secret,
:func:`user_key`: an entry edited by hand, with its sha256 recomputed, or written by another user or
machine fails it), and pass the caller's shape check; a bad entry is rebuilt with a one-line warning
naming the file. Where no secret can be kept (a cache root that is not this user's alone) nothing is
read from the cache or written to it.

Nothing executable is read from here except numba's machine code (:mod:`noloco.infra.jit`), and that
only from a folder chain that :func:`private_folder` verifies before every use (every folder from the
cache root down a real folder, no link, owned by this user and writable by no one else), and only files
that carry this user's keyed digest (:func:`sign`, :func:`verified`), checked before anything is unpickled.

The secret (``$NOLOCO_CACHE/secret.key``, mode 0600) records the device and inode it was created on: a copy
(``cp -a``, ``tar -p``, a synchronised folder) is another inode, so a copied cache, secret and all, verifies
nothing and is rebuilt, with a new secret. A cache root that is a system folder (``/``, a folder directly
under it, ``/etc``, ``/usr``, ...) is refused (a DataError, exit 3) before anything is made there.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import importlib.util
import json
import os
import secrets
import stat
import tempfile
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from noloco.infra.errors import DataError, warn
from noloco.infra.files import (SCHEMA_VERSION, dumps, jsonable, loads, read_regular_bytes, read_regular_text,
                                write_json)
from noloco.infra.record import JsonRecord

#: the subpackages whose sources key the cache (besides the top-level modules of ``noloco``)
PACKAGES = ("infra", "theory", "quadratic", "claims", "training", "advice", "llm_check", "studies", "paper_figs",
            "benchmarks", "cli")


#: system folders: a cache root inside one of them (or the root folder, or a folder directly under it) is refused
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
                "/sys", "/usr", "/var/lib", "/var/log", "/var/run", "/System", "/Library", "/private/etc")


def system_folder(path) -> str:
    """Why ``path`` (links resolved) must not be a cache root, '' when it may: the root folder, a folder
    directly under it (``/tmp``, ``/home``, ``/root``: entries would be scattered among everyone's files) or a
    folder of the system (:data:`SYSTEM_TREES`); as root a cache there would create ``/simulate`` or
    ``/etc/numba``."""
    real = os.path.realpath(os.path.abspath(os.fspath(path)))
    parts = Path(real).parts
    tree = next((t for t in SYSTEM_TREES if real == t or real.startswith(t + os.sep)), "")
    if tree:
        return f"{path} is {'the' if real == tree else 'inside the'} system folder {tree}"
    if len(parts) <= 2:
        return f"{path} is {'the root folder' if len(parts) <= 1 else 'a folder directly under /'}"
    return ""


def _checked_root(path, name: str) -> Path:
    reason = system_folder(path)
    if reason:
        raise DataError(f"{name}={os.fspath(path)!r} cannot be a cache ({reason}); give a folder of your own, "
                        f"such as ~/.cache/noloco")
    return Path(path)


def cache_dir() -> Path:
    """The cache root: ``$NOLOCO_CACHE`` or ``~/.cache/noloco``; a system folder is a DataError (exit 3), before
    anything is made there."""
    value = os.environ.get("NOLOCO_CACHE")
    if value:
        return _checked_root(value, "NOLOCO_CACHE")
    return Path.home() / ".cache" / "noloco"


def source_folders() -> dict[str, Path]:
    """``{name: folder}`` of every source package of the toolkit, wherever it is installed (a source
    tree or site-packages); ``"noloco"`` is the top-level package's own modules."""
    spec = importlib.util.find_spec("noloco")
    assert spec is not None and spec.origin is not None  # the package this code runs from
    root = Path(spec.origin).parent
    folders = {"noloco": root}
    for name in PACKAGES:
        spec = importlib.util.find_spec(f"noloco.{name}")
        if spec is not None and spec.submodule_search_locations:
            folders[name] = Path(list(spec.submodule_search_locations)[0])
    return folders


def source_files() -> list[tuple[str, Path]]:
    """``(name, path)`` of every Python source of the toolkit, in a fixed order; ``name`` is the
    path inside the package (``theory/outer.py``), the same in a source tree and installed."""
    files: list[tuple[str, Path]] = []
    for package, folder in source_folders().items():
        paths = sorted(folder.glob("*.py")) if package == "noloco" else sorted(folder.rglob("*.py"))
        files.extend((f"{package}/{path.relative_to(folder).as_posix()}", path) for path in paths)
    return files


@functools.lru_cache(maxsize=None)
def source_hash() -> str:
    """sha256 over every Python source of the toolkit (its name and content)."""
    digest = hashlib.sha256()
    for name, path in source_files():
        digest.update(name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_key(namespace: str, request) -> str:
    digest = hashlib.sha256(namespace.encode())
    digest.update(json.dumps(jsonable(request), sort_keys=True).encode())
    digest.update(source_hash().encode())
    return digest.hexdigest()[:24]


def cache_root(directory=None, flag: str = "--cache") -> Path:
    """``directory`` (a command's ``--cache``), else :func:`cache_dir`; a system folder is a DataError (exit 3)."""
    return _checked_root(directory, flag) if directory else cache_dir()


def cache_path(namespace: str, request, directory=None) -> Path:
    return cache_root(directory) / namespace / f"{cache_key(namespace, request)}.json"


def cached(namespace: str, request, compute: Callable[[], object], *, directory=None, refresh: bool = False,
           use_cache: bool = True, valid: Callable[[object], bool] | None = None) -> tuple[object, bool]:
    """``(data, from_cache)``: the stored result of ``compute()`` for ``request`` (JSON-able),
    or a fresh one, stored atomically after the computation (an interrupted run leaves
    nothing). ``valid(data)`` checks the shape of a stored entry (it may simply use the data as its reader
    will: an exception it raises, a KeyError or a TypeError, counts as a wrong shape); a bad entry is rebuilt."""
    path = cache_path(namespace, request, directory)
    key = user_key() if use_cache else None  # none: nothing can be verified, so nothing is read or written
    if key is not None and not refresh and os.path.lexists(path):
        try:
            entry = _read_entry(path)
            if entry.sha256 != _digest(entry.data):
                raise ValueError("its data does not match its checksum (damaged or edited)")
            mac = _entry_mac(key, namespace, path.stem, entry.data)
            if not hmac.compare_digest(str(entry.hmac), mac):
                raise ValueError("its keyed digest does not match: edited, or written by another user or machine")
            if valid is not None and not _passes(valid, entry.data):
                raise ValueError("unexpected content")
            return entry.data, True
        except (OSError, ValueError) as err:
            warn(f"ignoring the cache entry {path} ({_reason(err)}); recomputing it")
    data = jsonable(compute())
    if key is not None:
        try:
            _make_private(path.parent.parent)  # the cache root, where missing: 0700 (noloco.infra.jit trusts no other)
            write_json(path, entry_document(namespace, path.stem, data, key), indent=None)
        except (OSError, DataError):
            pass  # a read-only (or full) cache only costs the computation next time
    return data, False


@dataclass(frozen=True)
class CacheEntry(JsonRecord):
    """A cache entry's file: the schema version, its key (the file's stem), the namespace, the sha256 and the keyed
    digest of its data, and the data. Only ``data`` is required to read one: the others are checked by
    :func:`cached` (an entry lacking one is refused as an entry that does not match)."""

    schema_version: Any = None
    key: Any = None
    namespace: Any = None
    sha256: Any = None
    hmac: Any = None
    data: Any = dataclasses.field(kw_only=True)


def _read_entry(path: Path) -> CacheEntry:
    """The cache entry in ``path`` (never followed if a link); a ValueError when it is not an entry of this
    version."""
    try:
        entry = CacheEntry.from_json(loads(read_regular_text(path, follow=False)))
    except DataError as err:  # not an object, or no data
        raise ValueError("not a cache entry of this version") from err
    if entry.schema_version != SCHEMA_VERSION or entry.key != path.stem:
        raise ValueError("not a cache entry of this version")
    return entry


def entry_document(namespace: str, name: str, data, key: bytes) -> dict:
    """The cache entry ``name`` (its file's stem) of ``namespace`` holding ``data``, with its checksum and keyed
    digest (``key``: :func:`user_key`), as its file holds it."""
    return CacheEntry(schema_version=SCHEMA_VERSION, key=name, namespace=namespace, sha256=_digest(data),
                      hmac=_entry_mac(key, namespace, name, data), data=data).to_json()


def _entry_mac(key: bytes, namespace: str, name: str, data) -> str:
    return sign(key, b"result", namespace.encode(), name.encode(), dumps(data).encode())


def _passes(valid: Callable[[object], bool], data) -> bool:
    """``valid(data)``, False where it raises: an entry of the right checksum but a shape its reader cannot use
    (an entry written by another version's bug, or edited with its checksum recomputed) is rebuilt."""
    try:
        return bool(valid(data))
    except Exception:  # noqa: BLE001 - a shape check that fails by raising: the entry is not of this shape
        return False


def _digest(data) -> str:
    """sha256 of ``data``'s strict JSON (a parsed entry gives back the text it was written from)."""
    return hashlib.sha256(dumps(data).encode()).hexdigest()


def _reason(err: Exception) -> str:
    return (f"{err.strerror}" if isinstance(err, OSError) and err.strerror else str(err)) or type(err).__name__


# ------------------------------------------------------------------ folders only this user can write

def _private(info: os.stat_result) -> bool:
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def untrusted_reason(path, kind: str = "folder") -> str:
    """Why ``path`` (not followed if a link) is not this user's own ``kind`` (``folder`` or ``file``)
    that no one else can write, or '' when it is."""
    try:
        info = os.lstat(path)
    except OSError as err:
        return f"{path}: {err.strerror or err}"
    if kind == "folder" and not stat.S_ISDIR(info.st_mode) or kind == "file" and not stat.S_ISREG(info.st_mode):
        return f"{path} is not a {kind} (a link or a special file)"
    if info.st_uid != os.getuid():
        return f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.getuid()})"
    if not _private(info):
        return f"{path} is writable by {'its group' if info.st_mode & stat.S_IWGRP else 'others'}"
    return ""


def private_folder(root, *parts: str, create: bool = True) -> str:
    """Make (mode 0700) and verify the folder chain ``root/parts[0]/parts[1]/...``: every folder from ``root``
    down must be a real folder (a symbolic link is refused), owned by this user and not writable by its
    group or others. '' when it is, else why not (nothing is made below the first folder that fails)."""
    folder = Path(root)
    if create and not os.path.lexists(folder):
        try:
            _make_private(folder)
        except OSError as err:
            return f"{folder}: {err.strerror or err}"
    reason = untrusted_reason(folder)
    for part in parts:
        if reason:
            return reason
        folder = folder / part
        if create and not os.path.lexists(folder):
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass  # made meanwhile by another process: verified below like any other
            except OSError as err:
                return f"{folder}: {err.strerror or err}"
        reason = untrusted_reason(folder)
    return reason


def _make_private(folder: Path) -> None:
    """``folder`` and its missing parents, each made with mode 0700."""
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass


# ------------------------------------------------------------------ this user's secret and keyed digests

#: the secret's file in the cache root, and the first word of its one line
KEY_NAME, KEY_FORMAT = "secret.key", "noloco-secret-1"


def user_key() -> bytes | None:
    """This user's secret for the cache's keyed digests, made (mode 0600) where missing; None where none can be
    kept: the cache root is not this user's alone (:func:`private_folder`) or cannot be written. A secret that is
    not the file made here (another inode: a copy; another owner; readable by others; not one line of ours) is
    replaced by a new one, so nothing signed with the old one verifies."""
    root = cache_dir()
    if private_folder(root):
        return None
    path = root / KEY_NAME
    key = _read_key(path)
    if key is None:
        _new_key(path)
        key = _read_key(path)
    return key


def _read_key(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None  # missing, a link (ELOOP), unreadable: made anew
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        words = handle.read(512).decode("ascii", "replace").split()
    # the device and inode recorded when it was made: a copy of the file (cp -a, tar -p) is another inode
    if len(words) != 4 or words[0] != KEY_FORMAT or words[2:] != [str(info.st_dev), str(info.st_ino)]:
        return None
    try:
        key = bytes.fromhex(words[1])
    except ValueError:
        return None
    return key if len(key) == 32 else None


def _new_key(path: Path) -> None:
    """Write a new secret to ``path``: a temporary file of mode 0600 in the same folder, which records its own
    device and inode, then linked into place where there is none (two processes making one: the first wins) or
    renamed over one that failed :func:`_read_key` (the rename keeps the inode). Failures leave it missing."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            info = os.fstat(handle.fileno())
            handle.write(f"{KEY_FORMAT} {secrets.token_hex(32)} {info.st_dev} {info.st_ino}\n")
            handle.flush()
            os.fsync(handle.fileno())
        if os.path.lexists(path):
            os.replace(tmp, path)
            tmp = None
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # made meanwhile by another process: read below
    except OSError:
        pass  # a read-only or full cache: no secret, so no cache
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def sign(key: bytes, *parts: bytes) -> str:
    """HMAC-SHA256 with ``key`` over ``parts``, each length-prefixed (no two lists of parts give one message)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    return mac.hexdigest()


#: how a signed file of numba's cache starts: this line, then its keyed digest and a newline, then numba's bytes
SIGNED_MAGIC = b"noloco-signed-1\n"


def signed_bytes(key: bytes, name: str, payload: bytes) -> bytes:
    """The file ``name`` (its path under the cache root) holding ``payload``, with its keyed digest in front."""
    return SIGNED_MAGIC + sign(key, b"file", name.encode(), payload).encode() + b"\n" + payload


def verified(key: bytes, name: str, path) -> bytes | None:
    """The payload of the signed file ``path`` (named ``name`` under the cache root), read once, where it is a
    regular file (no link, no pipe: never blocks) whose keyed digest matches; None otherwise (missing, damaged,
    planted, copied from another cache or machine): nothing of it is unpickled."""
    try:
        blob = read_regular_bytes(path, follow=False)
    except OSError:
        return None
    start = len(SIGNED_MAGIC)
    if not blob.startswith(SIGNED_MAGIC) or blob[start + 64:start + 65] != b"\n":
        return None
    payload = blob[start + 65:]
    ok = hmac.compare_digest(blob[start:start + 64], sign(key, b"file", name.encode(), payload).encode())
    return payload if ok else None
