"""Cached figure data: JSON keyed by a hash of the parameters and of the code that
computes it, written atomically, so figures redraw from cache without recomputing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from theory.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "paper_figs" / "cache"
# the code a figure's numbers come from: its own script plus the packages it calls
SOURCES = ("theory",)


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return float(x) if np.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def key(script: Path, params: dict, packages=SOURCES) -> str:
    digest = hashlib.sha256(json.dumps(jsonable(params), sort_keys=True).encode())
    digest.update(Path(script).read_bytes())
    for package in packages:
        for path in sorted((ROOT / package).glob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def cached(name: str, script, params: dict, compute, *, directory=None, refresh: bool = False,
           packages=SOURCES) -> tuple[dict, bool]:
    """(data, from_cache): ``compute(**params)`` or its stored result. None stands for inf/NaN."""
    path = Path(directory or DEFAULT_DIR) / f"{name}-{key(script, params, packages)}.json"
    if not refresh:
        try:
            return json.loads(path.read_text()), True
        except (OSError, ValueError):
            pass
    data = jsonable(compute(**params))
    atomic_write_text(path, json.dumps(data))
    return data, False


def array(values) -> np.ndarray:
    """A cached list back as a float array (None -> NaN)."""
    return np.array(values, dtype=float)
