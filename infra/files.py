"""Every file the toolkit writes or reads back goes through here.

* One :data:`SCHEMA_VERSION` for every JSON result (commands, caches, run files).
* Strict JSON: :func:`jsonable` turns numpy values, dataclasses and tuples into plain
  JSON, and a non-finite float into ``null`` with the reason beside it: in a dict, the
  key ``"<key>_nonfinite"`` holds ``"inf"``, ``"-inf"`` or ``"nan"`` for a scalar, or the
  sorted list of the kinds found in a list; a nested object carries its own ``_nonfinite``
  keys. :func:`dumps` never writes ``NaN`` or ``Infinity``; :func:`loads` refuses them.
* Atomic writes: a temporary file in the target folder, then a rename, so a reader (or
  a later run after a crash) never sees half a file.
* Validated readers (:func:`read_json`, :func:`read_jsonl`): a missing, malformed or
  wrongly shaped file is a :class:`DataError` naming the file (and the line).
* Output places checked before any work (:func:`output_dir`, :func:`output_file`,
  :func:`input_dir`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from noloco.infra.errors import ConfigError, DataError

#: version of every JSON document the toolkit writes (2: non-finite values as null + reason)
SCHEMA_VERSION = 2


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
    """Call ``write(tmp_path)`` to produce the file, then rename it onto ``path``: a reader (or a run
    after a crash, a full disk or an interrupt) sees the old file or the new one, never half of one. A
    write that fails (a full disk: an OSError, or torch's RuntimeError) is a DataError naming ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        try:
            write(tmp)
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are for everyone to read
            with open(tmp, "rb") as handle:  # on disk before the rename: a crash leaves the old file or the new one
                os.fsync(handle.fileno())
        except (OSError, RuntimeError) as err:
            if isinstance(err, DataError):
                raise
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err).splitlines()[0]
            raise DataError(f"cannot write {path} ({reason}); the previous file, if any, is unchanged") from err
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # an interrupt right after the rename: nothing to remove
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path, text: str) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def write_json(path, x, indent: int | None = 1) -> Path:
    """Strict JSON of ``x``, atomically."""
    return atomic_write_text(path, dumps(x, indent=indent) + "\n")


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise DataError(f"{path} is not text (corrupted?)") from None
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror or err}") from None


def _object(data, where: str, required: tuple, versions: tuple | None) -> dict:
    if not isinstance(data, dict):
        raise DataError(f"{where} holds a {type(data).__name__}, expected a JSON object")
    missing = [k for k in required if k not in data]
    if missing:
        raise DataError(f"{where} lacks {', '.join(missing)}")
    if versions is not None and data.get("schema_version") not in versions:
        raise DataError(f"{where} has schema_version {data.get('schema_version')!r}; this version reads "
                        f"{', '.join(map(str, versions))}")
    return data


def read_json(path, *, required: tuple = (), versions: tuple | None = None) -> dict:
    """A JSON object from ``path`` with the keys ``required`` (and, given ``versions``, a
    ``schema_version`` among them); DataError naming the file otherwise. Python's json, so
    that files written before strict JSON (which may hold NaN) stay readable."""
    path = Path(path)
    try:
        data = json.loads(_read_text(path))
    except ValueError as err:
        raise DataError(f"{path} is not valid JSON ({err})") from None
    return _object(data, str(path), required, versions)


def read_jsonl(path, *, required: tuple = (), fix: str = "") -> list[dict]:
    """The rows of a JSON-lines file, each a JSON object with the keys ``required``; a bad
    line is a DataError naming the file, the line and ``fix`` (how to recover)."""
    path = Path(path)
    rows = []
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            rows.append(_object(json.loads(line), where, required, None))
        except ValueError as err:
            raise DataError(f"{where} is not valid JSON ({err}){'; ' + fix if fix else ''}") from None
        except DataError as err:
            raise DataError(f"{err}{'; ' + fix if fix else ''}") from None
    return rows


# ------------------------------------------------------------------ output places

def output_dir(path, flag: str = "--out") -> Path:
    """The folder ``path``, made if missing and checked writable before any work. An empty
    name is bad input (ConfigError, exit 2); a file in the way or a place that cannot be
    written is a DataError naming ``flag`` (exit 3)."""
    if path is None or not str(path).strip():
        raise ConfigError(f"{flag} {str(path)!r} names no folder; give a path")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise DataError(f"{flag} {path} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise DataError(f"{flag} {path}: cannot write there ({_reason(err)})") from None
    return path


def output_file(path, flag: str = "--out") -> Path:
    """The file ``path``, whose folder is made and checked writable before any work; an empty
    name or one ending in a separator is bad input (exit 2), an existing folder of that name
    or an unwritable place a DataError (exit 3)."""
    text = "" if path is None else str(path)
    if not text.strip() or text.endswith(("/", os.sep)):
        raise ConfigError(f"{flag} {text!r} names no file; give a file name")
    path = Path(text)
    if path.is_dir():
        raise DataError(f"{flag} {path} is a folder; give a file name (inside it, if that is where it belongs)")
    output_dir(path.parent, flag)
    return path


def input_dir(path, flag: str) -> Path:
    """A folder that is read (it may be missing or read-only): an empty name is bad input
    (exit 2), a file in its place a DataError (exit 3)."""
    if path is None or not str(path).strip():
        raise ConfigError(f"{flag} {str(path)!r} names no folder; give a path")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise DataError(f"{flag} {path} is a file, not a folder")
    return path


def _reason(err: OSError) -> str:
    return err.strerror or str(err) or type(err).__name__
