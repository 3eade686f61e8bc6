"""The result cache, under ``$NOLOCO_CACHE`` (default ``~/.cache/noloco``), never inside the
installed package, keyed by the request and by a hash of every source file of the toolkit, so
editing any of them invalidates every cached result. A read-only or missing cache folder only
costs the recomputation. Entries are data (strict JSON), validated on read; a bad entry is
rebuilt with a one-line warning naming the file.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Callable

from noloco.infra.errors import warn
from noloco.infra.files import SCHEMA_VERSION, jsonable, loads, write_json

#: the subpackages whose sources key the cache (besides the command line's own modules)
PACKAGES = ("infra", "theory", "quadratic", "claims", "llm_check", "paper_figs", "benchmarks")


def cache_dir() -> Path:
    return Path(os.environ.get("NOLOCO_CACHE") or Path.home() / ".cache" / "noloco")


def source_folders() -> dict[str, Path]:
    """``{name: folder}`` of every source package of the toolkit, wherever it is installed (the
    folders of a source tree, or ``noloco/`` in site-packages); ``"noloco"`` is the command line."""
    root = Path(importlib.util.find_spec("noloco").origin).parent
    folders = {"noloco": root}
    for name in PACKAGES:
        spec = importlib.util.find_spec(f"noloco.{name}")
        if spec is not None and spec.submodule_search_locations:
            folders[name] = Path(list(spec.submodule_search_locations)[0])
    return folders


def source_files() -> list[tuple[str, Path]]:
    """``(name, path)`` of every Python source of the toolkit, in a fixed order; ``name`` is the
    path from the repository root (``theory/outer.py``), the same in a source tree and installed."""
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
    nothing). ``valid(data)`` checks the shape of a stored entry; a bad entry is rebuilt."""
    path = cache_path(namespace, request, directory)
    if use_cache and not refresh and path.exists():
        try:
            entry = loads(path.read_text())
            if not (isinstance(entry, dict) and entry.get("schema_version") == SCHEMA_VERSION
                    and entry.get("key") == path.stem and "data" in entry):
                raise ValueError("not a cache entry of this version")
            if valid is not None and not valid(entry["data"]):
                raise ValueError("unexpected content")
            return entry["data"], True
        except (OSError, ValueError) as err:
            warn(f"ignoring the cache entry {path} ({err}); recomputing it")
    data = jsonable(compute())
    if use_cache:
        try:
            write_json(path, {"schema_version": SCHEMA_VERSION, "key": path.stem, "namespace": namespace,
                              "data": data}, indent=None)
        except OSError:
            pass  # a read-only cache only costs the computation next time
    return data, False
