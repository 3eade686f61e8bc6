"""Every file the toolkit writes or caches goes through here.

* One :data:`SCHEMA_VERSION` for every JSON result (commands, caches, run files).
* Strict JSON: :func:`jsonable` turns numpy values, dataclasses and tuples into plain
  JSON, and a non-finite float into ``null`` with the reason beside it: in a dict, the
  key ``"<key>_nonfinite"`` holds ``"inf"``, ``"-inf"`` or ``"nan"`` for a scalar, or the
  sorted list of the kinds found in a list; a nested object carries its own ``_nonfinite``
  keys. :func:`dumps` never writes
  ``NaN`` or ``Infinity``; :func:`loads` refuses them.
* Atomic writes: a temporary file in the target folder, then a rename, so a reader (or
  a later run after a crash) never sees half a file.
* One cache, under ``$NOLOCO_CACHE`` (default ``~/.cache/noloco``), never inside the
  installed package, keyed by the request and by a hash of every source file of the
  project, so editing any of them invalidates every cached result. A read-only or
  missing cache folder only costs the recomputation. Entries are data, validated on
  read; a bad entry is rebuilt with a one-line warning naming the file.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

#: version of every JSON document the toolkit writes (2: non-finite values as null + reason)
SCHEMA_VERSION = 2
#: the packages whose sources key the cache
PACKAGES = ("theory", "quadratic", "llm_check", "paper_figs", "noloco", "benchmarks")
ROOT = Path(__file__).resolve().parent.parent


class DataError(RuntimeError):
    """A file the toolkit reads is missing, unreadable or of the wrong shape (exit code 3)."""


# ------------------------------------------------------------------ strict JSON

def _kind(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _convert(x, kinds: set):
    """Plain JSON value of ``x``; every non-finite float found is recorded in ``kinds``."""
    if isinstance(x, dict):
        return _convert_dict(x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _convert_dict(dataclasses.asdict(x))
    if isinstance(x, np.ndarray):
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        return [_convert(v, kinds) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isfinite(x):
            return x
        kinds.add(_kind(x))
        return None
    if isinstance(x, Path):
        return str(x)
    return x


def _convert_dict(d: dict) -> dict:  # a nested dict marks its own keys, so its kinds stop here
    out = {}
    for key, value in d.items():
        kinds: set = set()
        out[str(key)] = _convert(value, kinds)
        if kinds:
            scalar = isinstance(value, (float, np.floating)) or (isinstance(value, np.ndarray) and value.ndim == 0)
            out[f"{key}_nonfinite"] = kinds.pop() if scalar else sorted(kinds)
    return out


def jsonable(x):
    """``x`` as plain, strict JSON data (see the module docstring for non-finite values)."""
    kinds: set = set()
    return _convert(x, kinds)


def dumps(x, indent: int | None = None) -> str:
    return json.dumps(jsonable(x), indent=indent, allow_nan=False)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def loads(text: str):
    """json.loads that refuses NaN and Infinity."""
    return json.loads(text, parse_constant=_refuse_constant)


def print_json(x, file=None) -> None:
    print(dumps(x, indent=2), file=file or sys.stdout)


# ------------------------------------------------------------------ atomic files

def atomic_write(path, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` to produce the file, then rename it onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def atomic_write_text(path, text: str) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def write_json(path, x, indent: int | None = 1) -> Path:
    """Strict JSON of ``x``, atomically."""
    return atomic_write_text(path, dumps(x, indent=indent) + "\n")


def read_json(path, *, required: tuple = ()) -> dict:
    """A JSON object from ``path`` with the keys ``required``; DataError naming the file otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise DataError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path} holds a {type(data).__name__}, expected a JSON object")
    missing = [k for k in required if k not in data]
    if missing:
        raise DataError(f"{path} lacks {', '.join(missing)}")
    return data


# ------------------------------------------------------------------ the cache

def cache_dir() -> Path:
    return Path(os.environ.get("NOLOCO_CACHE") or Path.home() / ".cache" / "noloco")


@functools.lru_cache(maxsize=None)
def source_hash() -> str:
    """sha256 over every Python source of the project's packages (path and content)."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_key(namespace: str, request) -> str:
    digest = hashlib.sha256(namespace.encode())
    digest.update(json.dumps(jsonable(request), sort_keys=True).encode())
    digest.update(source_hash().encode())
    return digest.hexdigest()[:24]


def cache_path(namespace: str, request, directory=None) -> Path:
    return Path(directory or cache_dir()) / namespace / f"{cache_key(namespace, request)}.json"


def warn(message: str) -> None:
    print(f"noloco: warning: {message}", file=sys.stderr)


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
