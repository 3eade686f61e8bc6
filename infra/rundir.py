"""A run folder: the lock that keeps a second run out while the first is alive.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from noloco.infra.errors import LockedError, warn


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
