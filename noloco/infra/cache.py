"""The result cache, under ``$NOLOCO_CACHE`` (default ``~/.cache/noloco``), never inside the
installed package, keyed by the request and by a hash of every source file of the toolkit, so
editing any of them invalidates every cached result. A read-only or missing cache folder only
costs the recomputation. Entries are data (strict JSON), validated on read: an entry must be a
regular file (a named pipe or a link is never opened), parse, carry this version's schema, its own
key and the sha256 of its data (a damaged or hand-edited entry of the right JSON but another
content fails it), and pass the caller's shape check; a bad entry is rebuilt with a one-line
warning naming the file.

Nothing executable is read from here except numba's machine code (:mod:`noloco.infra.jit`), and that
only from a folder chain that :func:`private_folder` verifies before every use: every folder from the
cache root down a real folder (no link), owned by this user and writable by no one else.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import stat
from pathlib import Path
from typing import Callable

from noloco.infra.errors import DataError, warn
from noloco.infra.files import SCHEMA_VERSION, dumps, jsonable, loads, read_regular_text, write_json

#: the subpackages whose sources key the cache (besides the top-level modules of ``noloco``)
PACKAGES = ("infra", "theory", "quadratic", "claims", "training", "advice", "llm_check", "studies", "paper_figs",
            "benchmarks", "cli")


def cache_dir() -> Path:
    return Path(os.environ.get("NOLOCO_CACHE") or Path.home() / ".cache" / "noloco")


def source_folders() -> dict[str, Path]:
    """``{name: folder}`` of every source package of the toolkit, wherever it is installed (a source
    tree or site-packages); ``"noloco"`` is the top-level package's own modules."""
    root = Path(importlib.util.find_spec("noloco").origin).parent
    folders = {"noloco": root}
    for name in PACKAGES:
        spec = importlib.util.find_spec(f"noloco.{name}")
        if spec is not None and spec.submodule_search_locations:
            folders[name] = Path(list(spec.submodule_search_locations)[0])
    return folders


def source_files() -> list[tuple[str, Path]]:
    """``(name, path)`` of every Python source of the toolkit, in a fixed order; ``name`` is the
    path inside the package (``theory/outer.py``), the same in a source tree and installed."""
    files = []
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


def cache_path(namespace: str, request, directory=None) -> Path:
    return Path(directory or cache_dir()) / namespace / f"{cache_key(namespace, request)}.json"


def cached(namespace: str, request, compute: Callable[[], object], *, directory=None, refresh: bool = False,
           use_cache: bool = True, valid: Callable[[object], bool] | None = None) -> tuple[object, bool]:
    """``(data, from_cache)``: the stored result of ``compute()`` for ``request`` (JSON-able),
    or a fresh one, stored atomically after the computation (an interrupted run leaves
    nothing). ``valid(data)`` checks the shape of a stored entry (it may simply use the data as its reader
    will: an exception it raises, a KeyError or a TypeError, counts as a wrong shape); a bad entry is rebuilt."""
    path = cache_path(namespace, request, directory)
    if use_cache and not refresh and os.path.lexists(path):
        try:
            entry = loads(read_regular_text(path, follow=False))
            if not (isinstance(entry, dict) and entry.get("schema_version") == SCHEMA_VERSION
                    and entry.get("key") == path.stem and "data" in entry):
                raise ValueError("not a cache entry of this version")
            if entry.get("sha256") != _digest(entry["data"]):
                raise ValueError("its data does not match its checksum (damaged or edited)")
            if valid is not None and not _passes(valid, entry["data"]):
                raise ValueError("unexpected content")
            return entry["data"], True
        except (OSError, ValueError) as err:
            warn(f"ignoring the cache entry {path} ({_reason(err)}); recomputing it")
    data = jsonable(compute())
    if use_cache:
        try:
            _make_private(path.parent.parent)  # the cache root, where missing: 0700 (noloco.infra.jit trusts no other)
            write_json(path, {"schema_version": SCHEMA_VERSION, "key": path.stem, "namespace": namespace,
                              "sha256": _digest(data), "data": data}, indent=None)
        except (OSError, DataError):
            pass  # a read-only (or full) cache only costs the computation next time
    return data, False


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
