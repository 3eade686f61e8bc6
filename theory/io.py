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
* Validated readers (:func:`read_json`, :func:`read_jsonl`): a missing, malformed or
  wrongly shaped file is a :class:`DataError` naming the file (and the line).
* Output places checked before any work (:func:`output_dir`, :func:`output_file`,
  :func:`input_dir`), and :class:`RunLock`, the lock file that keeps a second run out of
  a run folder while the first is alive (and is taken over when its owner died).
* The exit-code contract's mapping from an error to its code and its one line
  (:func:`exit_code`, :func:`describe`, :func:`report`), shared by ``noloco`` and the
  torchrun entry ``python -m llm_check.train``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import math
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

#: version of every JSON document the toolkit writes (2: non-finite values as null + reason)
SCHEMA_VERSION = 2
#: the packages whose sources key the cache
PACKAGES = ("theory", "quadratic", "llm_check", "paper_figs", "noloco", "benchmarks")
ROOT = Path(__file__).resolve().parent.parent


class DataError(RuntimeError):
    """An environment or data fault (exit code 3): a file the toolkit reads is missing,
    unreadable or of the wrong shape, an output place cannot be written, a run folder is
    in use, a peer is gone."""


class LockedError(DataError):
    """Another live process holds a run folder's lock."""


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
        with open(tmp, "rb") as handle:  # on disk before the rename: a crash leaves the old file or the new one
            os.fsync(handle.fileno())
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


# ------------------------------------------------------------------ output places

def output_dir(path, flag: str = "--out") -> Path:
    """The folder ``path``, made if missing and checked writable before any work. An empty
    name is bad input (ConfigError, exit 2); a file in the way or a place that cannot be
    written is a DataError naming ``flag`` (exit 3)."""
    from theory.config import ConfigError

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
    from theory.config import ConfigError

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
    from theory.config import ConfigError

    if path is None or not str(path).strip():
        raise ConfigError(f"{flag} {str(path)!r} names no folder; give a path")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise DataError(f"{flag} {path} is a file, not a folder")
    return path


def _reason(err: OSError) -> str:
    return err.strerror or str(err) or type(err).__name__


# ------------------------------------------------------------------ the run-folder lock

LOCK_NAME = "run.lock"
_HELD: dict[str, int] = {}  # lock files this process holds -> nesting depth


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux), to tell a reused pid
    from the lock's owner; None where /proc is not available."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return None


def _owner_alive(info: dict) -> bool | None:
    """Whether the process of a lock's ``info`` still runs: True, False, or None when it runs on
    another host (this process cannot tell)."""
    if info.get("host") != socket.gethostname():
        return None
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    start = _process_start(pid)
    return not (start is not None and info.get("start") is not None and start != info["start"])


class _FolderGuard:
    """An exclusive flock on the folder itself while a lock file is inspected and created, so that
    two processes never both take over one stale lock (no-op where flock is missing)."""

    def __init__(self, folder: Path):
        self.folder, self.fd = folder, None

    def __enter__(self):
        try:
            import fcntl

            self.fd = os.open(self.folder, os.O_RDONLY)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except (ImportError, OSError):
            if self.fd is not None:
                os.close(self.fd)
            self.fd = None
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock


class RunLock:
    """``FOLDER/run.lock``, holding the owner's pid, host and process start time, for as long as a
    run writes into FOLDER. A second process is refused with :class:`LockedError` (exit 3) naming
    the owner; a lock whose owner died (same host, pid gone or reused) is taken over with a
    one-line warning; one from another host is left alone (its message says how to remove it).
    Re-entrant within a process (``noloco llm train`` takes every folder's lock before the first
    run; the trainer takes it again)."""

    def __init__(self, folder, name: str = LOCK_NAME):
        self.folder = Path(folder)
        self.path = self.folder / name

    def _key(self) -> str:
        return str(self.path.resolve())

    def acquire(self) -> "RunLock":
        key = self._key()
        if key in _HELD:
            _HELD[key] += 1
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        mine = {"pid": os.getpid(), "host": socket.gethostname(), "start": _process_start(os.getpid()),
                "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv)[:300]}
        with _FolderGuard(self.folder):
            while True:
                try:
                    fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    self._refuse_or_clear()
                    continue
                with os.fdopen(fd, "w") as handle:
                    handle.write(json.dumps(mine) + "\n")
                break
        _HELD[key] = 1
        return self

    def _refuse_or_clear(self) -> None:
        try:
            owner = json.loads(self.path.read_text())
        except FileNotFoundError:
            return  # released meanwhile
        except (OSError, ValueError):
            owner = None  # written under the guard, so a half-written lock's writer died
        alive = _owner_alive(owner) if isinstance(owner, dict) else False
        if alive is False:
            who = f"pid {owner.get('pid')} on {owner.get('host')}" if isinstance(owner, dict) else "an unreadable owner"
            warn(f"taking over the lock {self.path} of {who}, which is no longer running")
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            return
        since = f", since {owner.get('since')}" if owner.get("since") else ""
        where = f"pid {owner.get('pid')} on {owner.get('host')}{since}"
        hint = ("wait for it to finish or stop it" if alive else
                f"it runs on another host, so this one cannot tell whether it is alive; if that run is gone, "
                f"delete {self.path}")
        raise LockedError(f"{self.folder} is in use by another run ({where}): {hint}")

    def release(self) -> None:
        key = self._key()
        depth = _HELD.get(key, 0)
        if depth > 1:
            _HELD[key] = depth - 1
            return
        _HELD.pop(key, None)
        try:
            owner = json.loads(self.path.read_text())
            if owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
                self.path.unlink()
        except (OSError, ValueError, AttributeError):
            pass

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# ------------------------------------------------------------------ the exit-code contract

def exit_code(err: BaseException) -> int | None:
    """The contract's exit code of an error reported in one line: 2 bad input or usage
    (theory.config.ConfigError), 3 an environment or data fault (DataError, OSError,
    MemoryError); None for anything else, which is a bug and keeps its traceback."""
    from theory.config import ConfigError

    if isinstance(err, ConfigError):
        return 2
    if isinstance(err, (DataError, OSError, MemoryError)):
        return 3
    return None


def describe(err: BaseException) -> str:
    """The one line that says what failed and where."""
    if isinstance(err, OSError) and err.strerror:
        where = err.filename if err.filename is not None else ""
        return f"{where}: {err.strerror}" if where else err.strerror
    if isinstance(err, MemoryError) and not str(err):
        return "out of memory"
    return " ".join((str(err) or type(err).__name__).split())


def report(prog: str, err: BaseException) -> int:
    """Print ``PROG: error: ...`` on one line and return the error's exit code; re-raise a bug, or
    anything under ``NOLOCO_DEBUG=1`` (its traceback)."""
    code = exit_code(err)
    if code is None or os.environ.get("NOLOCO_DEBUG") == "1":
        raise err
    print(f"{prog}: error: {describe(err)}", file=sys.stderr)
    return code


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (``PROG: error: ...``) and exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")
