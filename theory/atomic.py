"""Atomic file writes: a temporary file in the target folder, then a rename, so a
reader (or a later run after a crash) never sees half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


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
