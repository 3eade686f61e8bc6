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
import errno
import json
import math
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from noloco.infra.entry import interrupts_held, report_printed
from noloco.infra.errors import ConfigError, DataError
from noloco.infra.record import JsonRecord

#: version of every JSON document the toolkit writes (2: non-finite values as null + reason)
SCHEMA_VERSION = 2


# ------------------------------------------------------------------ strict JSON

def _kind(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _convert(x, kinds: set):
    """Plain JSON value of ``x``; every non-finite float found is recorded in ``kinds``."""
    if isinstance(x, dict):
        return _convert_dict(x)
    if isinstance(x, JsonRecord):  # its keys, not its bookkeeping fields
        return _convert(x.to_json(), kinds)
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


def parse(text: str, strict: bool = True):
    """``json.loads`` (``strict``: refusing NaN and Infinity) whose every failure is a ValueError: a
    document nested too deeply for the parser (json raises RecursionError) included."""
    try:
        return json.loads(text, parse_constant=_refuse_constant) if strict else json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be a document this toolkit wrote") from None


def loads(text: str):
    """json.loads that refuses NaN and Infinity (a ValueError for every malformed text)."""
    return parse(text)


def print_json(x, file=None) -> None:
    """``--json``'s output, the one contract of every command: strict JSON (:func:`dumps`) whose top-level object
    carries ``schema_version`` first (added here where a report lacks it)."""
    if isinstance(x, dict) and "schema_version" not in x:
        x = {"schema_version": SCHEMA_VERSION, **x}
    text = dumps(x, indent=2)
    if file is None or file is sys.stdout:
        report_printed()  # an error after it adds no second document
    print(text, file=file or sys.stdout)


# ------------------------------------------------------------------ atomic files

def atomic_write(path, write: Callable[[str], object], previous=None) -> Path:
    """Call ``write(tmp_path)`` to produce the file, then rename it onto ``path``: a reader (or a run
    after a crash, a full disk or an interrupt) sees the old file or the new one, never half of one, and
    no temporary is left behind by an interrupt (Ctrl-C, SIGTERM) wherever it lands. A write that fails
    (a full disk: an OSError, or torch's RuntimeError) is a DataError naming ``path``. ``previous``: where
    the old file is kept (renamed just before the new one takes its place; a kill between the two renames
    leaves the old file there and none at ``path``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        with interrupts_held():
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
        try:
            write(tmp)
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are for everyone to read
            with open(tmp, "rb") as handle:  # on disk before the rename: a crash leaves the old file or the new one
                os.fsync(handle.fileno())
        except (OSError, RuntimeError) as err:
            if isinstance(err, DataError):
                raise
            reason = err.strerror if isinstance(err, OSError) and err.strerror else _write_failure(err, path.parent)
            raise DataError(f"cannot write {path} ({reason}); the previous file, if any, is unchanged") from err
        with interrupts_held():
            if previous is not None and path.exists():
                os.replace(path, previous)
            os.replace(tmp, path)
            tmp = None
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise
    return path


def _write_failure(err: BaseException, folder: Path) -> str:
    """What a writer's non-OSError failure (torch's RuntimeError: ``unexpected pos 164672 vs 164560``) means:
    a full disk where the folder has (almost) no space left, with the writer's own words after it."""
    words = (str(err).splitlines() or [type(err).__name__])[0]
    try:
        free = os.statvfs(folder)
        full = free.f_bavail * free.f_frsize < 1 << 20
    except OSError:
        full = False
    return f"No space left on device: {words}" if full else words


def atomic_write_text(path, text: str) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def write_json(path, x, indent: int | None = 1) -> Path:
    """Strict JSON of ``x``, atomically."""
    return atomic_write_text(path, dumps(x, indent=indent) + "\n")


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


class NotRegularFileError(OSError):
    """A path that should be a file the toolkit wrote is a named pipe, a device, a socket, a folder or
    (where links are not followed) a symbolic link."""


class TooLargeError(OSError):
    """A file larger than its reader's limit: refused before it is read, so that it cannot take the memory."""


#: the most bytes a text or JSON file of the toolkit (a result, a metrics log, a cache entry) may hold: far above
#: any the toolkit writes (a metrics log of 100,000 evaluations is about 60 MB), far below a memory blow-up
MAX_READ_BYTES = 256 * 2**20


def _too_large(path, size: int, limit: int) -> TooLargeError:
    return TooLargeError(errno.EFBIG, f"{size:,} bytes or more, above the limit of {limit:,} bytes for this file",
                         str(path))


def _open_regular(path, follow: bool, limit: int | None = None):
    """``path`` opened for binary reading, refused unless it is a regular file: a named pipe (which would block),
    a device, a socket or a folder is refused before it is opened and again on the opened descriptor (nothing can
    swap it in between; O_NONBLOCK, so that even a pipe swapped in never blocks the open); without ``follow`` a
    symbolic link is refused too. :class:`NotRegularFileError` (an OSError) or the open's own OSError."""
    path = Path(path)
    mode = (os.stat if follow else os.lstat)(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(errno.EINVAL, f"{_kind_of(mode)}, not a regular file", str(path))
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP and not follow:  # swapped for a link since the lstat
            raise NotRegularFileError(errno.EINVAL, "a symbolic link, not a regular file", str(path)) from None
        raise
    handle = os.fdopen(fd, "rb")
    info = os.fstat(handle.fileno())
    if not stat.S_ISREG(info.st_mode):
        handle.close()
        raise NotRegularFileError(errno.EINVAL, f"{_kind_of(info.st_mode)}, not a regular file", str(path))
    if limit is not None and info.st_size > limit:
        handle.close()
        raise _too_large(path, info.st_size, limit)
    return handle


def read_regular_bytes(path, *, follow: bool = True, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes (:func:`_open_regular`;
    :class:`TooLargeError` otherwise, checked before reading and again while reading, for a file that grows);
    every failure an OSError."""
    with _open_regular(path, follow, limit) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise _too_large(path, len(data), limit)
    return data


def read_regular_text(path, *, follow: bool = True, limit: int = MAX_READ_BYTES) -> str:
    """The text of ``path``, which must be a regular file: a named pipe (which would block), a device,
    a socket or a folder is refused before it is opened and again on the opened descriptor (nothing
    can swap it in between); without ``follow`` a symbolic link is refused too. Every failure is an
    OSError (:class:`NotRegularFileError`, :class:`TooLargeError` above ``limit`` bytes; ``FileNotFoundError`` for
    a missing file) or a ``ValueError`` (not text)."""
    return read_regular_bytes(path, follow=follow, limit=limit).decode()


def open_run_file(path, fix: str = ""):
    """``path``, a file of a run folder (a checkpoint), opened for binary reading (``torch.load`` takes the handle),
    where it is a regular file no larger than the memory available: a named pipe, a device, a socket, a folder, a
    symbolic link or a file too large to load is a DataError (exit 3, one line: what it is, then ``fix``) at once,
    never opened in a way that blocks. A missing file stays a
    ``FileNotFoundError`` (the callers say what it means)."""
    from noloco.infra.budget import available_bytes, human

    try:
        handle = _open_regular(path, follow=False)
    except NotRegularFileError as err:
        raise DataError(f"{path} is {err.strerror}{'; ' + fix if fix else ''}") from None
    size, free = os.fstat(handle.fileno()).st_size, available_bytes()
    if free is not None and size > free:  # torch.load would take at least its size: refused before it is read
        handle.close()
        raise DataError(f"{path} holds {human(size)}, more than the {human(free)} of memory available"
                        f"{'; ' + fix if fix else ''}")
    return handle


def _read_text(path: Path) -> str:
    try:
        return read_regular_text(path)
    except UnicodeDecodeError:
        raise DataError(f"{path} is not text (corrupted?)") from None
    except OSError as err:
        if isinstance(err, NotRegularFileError):  # a pipe, a device, a socket, a folder
            raise DataError(f"{path} is {err.strerror}; give the file the toolkit wrote") from None
        if isinstance(err, TooLargeError):
            raise DataError(f"{path} holds {err.strerror}; it is not a file the toolkit wrote") from None
        raise DataError(f"cannot read {path}: {err.strerror or err}") from None


def _type_names(kinds) -> str:
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string", dict: "an object",
             list: "a list", type(None): "null"}
    return " or ".join(names.get(k, k.__name__) for k in (kinds if isinstance(kinds, tuple) else (kinds,)))


def _has_type(value, kinds) -> bool:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True  # JSON writes 2.0 as 2 where the value happens to be whole
    return isinstance(value, kinds)


def shape_error(value, spec, name: str = "") -> str:
    """'' when ``value`` has the shape ``spec``, else what differs (``curves.noloco.mean[3]='x'; expected a number``).
    ``spec``: a type or a tuple of types (:data:`NUMBER`: a number or null); a dict of key to spec (every key
    present; the key ``...`` is the spec of every value of a dict whose keys are free); a one-element list: a
    list whose every element has that spec."""
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{name or 'the document'} is {_type_names(type(value))}; expected {_type_names(dict)}"
        for key, sub in spec.items():
            items = value.items() if key is ... else [(key, value[key])] if key in value else None
            if items is None:
                return f"{name + '.' if name else ''}{key} is missing"
            for k, v in items:
                error = shape_error(v, sub, f"{name}.{k}" if name else str(k))
                if error:
                    return error
        return ""
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{name} is {_type_names(type(value))}; expected {_type_names(list)}"
        for i, v in enumerate(value):
            error = shape_error(v, spec[0], f"{name}[{i}]")
            if error:
                return error
        return ""
    if _has_type(value, spec):
        return ""
    shown = repr(value)
    return f"{name}={shown if len(shown) <= 40 else shown[:37] + '...'}; expected {_type_names(spec)}"


def _object(data, where: str, required: tuple, versions: tuple | None, types: dict | None = None) -> dict:
    if not isinstance(data, dict):
        raise DataError(f"{where} holds a {type(data).__name__}, expected a JSON object")
    missing = [k for k in required if k not in data]
    if missing:
        raise DataError(f"{where} lacks {', '.join(missing)}")
    version = data.get("schema_version")  # edge: the object just parsed, checked before any record reads it
    if versions is not None and version not in versions:
        raise DataError(f"{where} has schema_version {version!r}; this version reads "
                        f"{', '.join(map(str, versions))}")
    for key, spec in (types or {}).items():
        error = shape_error(data[key], spec, key) if key in data else ""
        if error:
            raise DataError(f"{where} has {error}")
    return data


#: ``types`` of the readers: the JSON value of a number that may be non-finite (strict JSON writes null)
NUMBER = (float, type(None))


def read_json(path, *, required: tuple = (), versions: tuple | None = None, types: dict | None = None) -> dict:
    """A JSON object from ``path`` with the keys ``required`` (and, given ``versions``, a
    ``schema_version`` among them; given ``types``, ``{key: type or tuple of types}``, those of the keys
    present); DataError naming the file otherwise, also for a file that is not a regular file (a named
    pipe, a device). Python's json, so that files written before strict JSON (which may hold NaN) stay
    readable."""
    path = Path(path)
    try:
        data = parse(_read_text(path), strict=False)
    except ValueError as err:
        raise DataError(f"{path} is not valid JSON ({err})") from None
    return _object(data, str(path), required, versions, types)


def read_jsonl(path, *, required: tuple = (), fix: str = "", types: dict | None = None) -> list[dict]:
    """The rows of a JSON-lines file, each a JSON object with the keys ``required`` (and the ``types`` of
    :func:`read_json`); a bad line is a DataError naming the file, the line and ``fix`` (how to recover)."""
    path = Path(path)
    rows = []
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            rows.append(_object(parse(line, strict=False), where, required, None, types))
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
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"{flag} {path!r} is {type(path).__name__}; give a path (a string or a pathlib.Path)")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise DataError(f"{flag} {path} is a file, not a folder")
    return path


def _reason(err: OSError) -> str:
    return err.strerror or str(err) or type(err).__name__
