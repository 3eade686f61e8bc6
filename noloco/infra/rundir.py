"""A run folder: checked, locked and cleared once, then handed to the work that writes into it.

* :class:`RunLock`: ``FOLDER/run.lock``, which keeps a second run out while the first is alive.
* :class:`RunFolder`: the folder as one object: writable (checked before any work), locked for the
  life of the run, holding no run unless resuming or overwriting, and knowing which of its files
  are the run's own (``--overwrite`` removes those and nothing else).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from noloco.infra.errors import ConfigError, DataError, LockedError, warn
from noloco.infra.files import output_dir, read_regular_text
from noloco.infra.record import JsonRecord


LOCK_NAME = "run.lock"
#: a lock file holds one small JSON object (its owner); anything larger was not written by the toolkit
LOCK_BYTES = 2**16
_HELD: dict[str, int] = {}  # lock files this process holds -> nesting depth


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux), to tell a reused pid
    from the lock's owner; None where /proc is not available."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class LockOwner(JsonRecord):
    """What a lock file holds: its owner's pid, host, process start (:func:`_process_start`), when it took the lock
    and its command line. Any may be missing from a file another program wrote (None)."""

    pid: Any = None
    host: Any = None
    start: Any = None
    since: Any = None
    command: Any = None


def _read_owner(path: Path) -> LockOwner | None:
    """The owner in the lock file ``path`` (never followed if a link); None when it holds no JSON object."""
    owner = json.loads(read_regular_text(path, follow=False, limit=LOCK_BYTES))
    return LockOwner.from_json(owner) if isinstance(owner, dict) else None


def _owner_alive(info: LockOwner) -> bool | None:
    """Whether the process of a lock's ``info`` still runs: True, False, or None when it runs on
    another host (this process cannot tell)."""
    if info.host != socket.gethostname():
        return None
    pid = info.pid
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 31:
        return False  # no process has it (a pid is a positive C int)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    start = _process_start(pid)
    return not (start is not None and info.start is not None and start != info.start)


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
        mine = LockOwner(pid=os.getpid(), host=socket.gethostname(), start=_process_start(os.getpid()),
                         since=time.strftime("%Y-%m-%dT%H:%M:%S%z"), command=" ".join(sys.argv)[:300])
        with _FolderGuard(self.folder):
            while True:
                try:
                    fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    self._refuse_or_clear()
                    continue
                try:
                    with os.fdopen(fd, "w") as handle:
                        handle.write(json.dumps(mine.to_json()) + "\n")
                except OSError as err:  # a full disk: no empty lock left behind, and the file named
                    with contextlib.suppress(OSError):
                        os.unlink(self.path)
                    raise DataError(f"cannot write the lock {self.path} ({err.strerror or err}); free some space "
                                    f"there or give another folder") from None
                break
        _HELD[key] = 1
        return self

    def _refuse_or_clear(self) -> None:
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            return  # released meanwhile
        if not stat.S_ISREG(mode):  # never follow a link or open a pipe: a lock is a plain file we wrote
            raise DataError(f"{self.path} is not a lock file this toolkit wrote (a "
                            f"{'symbolic link' if stat.S_ISLNK(mode) else 'special file'}); remove it and run again")
        try:
            owner = _read_owner(self.path)
        except FileNotFoundError:
            return  # released meanwhile
        except (OSError, ValueError, RecursionError):
            owner = None  # written under the guard, so a half-written lock's writer died
        alive = _owner_alive(owner) if owner is not None else False
        if owner is None or alive is False:
            who = f"pid {owner.pid} on {owner.host}" if owner is not None else "an unreadable owner"
            warn(f"taking over the lock {self.path} of {who}, which is no longer running")
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            return
        since = f", since {owner.since}" if owner.since else ""
        where = f"pid {owner.pid} on {owner.host}{since}"
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
            if stat.S_ISREG(os.lstat(self.path).st_mode):
                owner = _read_owner(self.path)
                if owner is not None and owner.pid == os.getpid() and owner.host == socket.gethostname():
                    self.path.unlink()
        except (OSError, ValueError, RecursionError):
            pass

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class RunFolder:
    """A run's folder, validated and locked once (:meth:`open`), for the life of the run.

    ``own``: the names of the run's own files; each is a file name or a regular expression in
    ``re:...`` form (``re:ckpt(-rank\\d+)?\\.pt``). Opening checks the folder before any work (an
    empty name is bad input, exit 2; a file in the way or an unwritable place a DataError, exit 3),
    takes its lock, and refuses a folder that holds a run unless ``resume`` or ``overwrite``
    (ConfigError naming what it holds, ``describe(folder)`` saying how far it got, and how to go
    on: ``how``, or resume / overwrite). :meth:`clear` removes the run's own files and the temporaries a killed writer left, and
    nothing else of the user's. ``lock=False``: a torchrun rank other than 0, which shares rank 0's
    folder and lock."""

    def __init__(self, path, *, own: tuple = (), resume: bool = False, overwrite: bool = False,
                 describe: Callable[[Path], str] | None = None, flag: str = "--out", lock: bool = True,
                 how: str | None = None):
        if resume and overwrite:
            raise ConfigError("--resume continues the run in OUT and --overwrite replaces it; give one of them")
        self.path, self.own, self.resume, self.overwrite = path, tuple(own), resume, overwrite
        self.describe, self.flag, self.locking, self.how = describe, flag, lock, how
        self.lock: RunLock | None = None

    def _is_own(self, name: str) -> bool:
        return any(re.fullmatch(pattern[3:], name) if pattern.startswith("re:") else name == pattern
                   for pattern in self.own)

    def own_files(self) -> list[Path]:
        """The run's own files present in the folder, sorted."""
        folder = Path(self.path)
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir() if self._is_own(p.name) and not p.is_dir())

    def open(self, accept_existing: bool = False) -> "RunFolder":
        """Check and lock the folder; ``accept_existing``: the caller keeps the run it holds (a finished run
        that a sweep reuses), so holding one is not refused."""
        self.path = output_dir(self.path, self.flag)
        if self.locking:
            self.lock = RunLock(self.path).acquire()
        try:
            found = self.own_files()
            if found and not (self.resume or self.overwrite or accept_existing):
                state = f", {self.describe(self.path)}" if self.describe else ""
                resumable = any(p.suffix == ".pt" for p in found)
                how = self.how or ("continue it with --resume or replace it with --overwrite" if resumable else
                                   "it has no checkpoint to resume from: replace it with --overwrite")
                raise ConfigError(f"{self.path} holds a run ({', '.join(p.name for p in found)}{state}); {how}")
        except BaseException:
            self.close()
            raise
        return self

    def clear(self, everything: bool) -> None:
        """Remove the temporaries a writer killed before its rename left (``.NAME.*.tmp`` of an own file)
        and, with ``everything``, the run's own files too; other files stay."""
        for p in Path(self.path).iterdir():
            temporary = p.name.startswith(".") and p.name.endswith(".tmp") and self._is_own(
                p.name[1:].rsplit(".", 2)[0])
            if temporary or (everything and self._is_own(p.name) and not p.is_dir()):
                p.unlink(missing_ok=True)

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> "RunFolder":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
