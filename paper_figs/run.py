"""Build the figures: each ``fig_<name>.py`` gives ``params(quick, **options)``,
``compute(**params)`` (JSON-able data, cached) and ``draw(data)`` (a matplotlib figure);
``DEPENDS`` names the packages whose sources key its cache (default: theory)."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from paper_figs import cache, style

FIGURES = ("stability", "decay", "spread", "transient", "logistic", "comm", "llm", "tune")
DEFAULT_OUT = Path(__file__).resolve().parent / "out"


def module(name: str):
    return importlib.import_module(f"paper_figs.fig_{name}")


def make(name: str, *, quick: bool = False, out=DEFAULT_OUT, cache_dir=None, refresh: bool = False,
         options: dict | None = None) -> dict:
    """Compute (or load) one figure's data and write ``out/NAME.png`` and ``.pdf``."""
    m = module(name)
    start = time.perf_counter()
    params = m.params(quick, **(options or {}))
    if getattr(m, "CACHED", True):
        data, hit = cache.cached(f"{name}-{'quick' if quick else 'full'}", m.__file__, params, m.compute,
                                 directory=cache_dir, refresh=refresh,
                                 packages=getattr(m, "DEPENDS", cache.SOURCES))
    else:  # reads files that are already results (LLM runs): nothing to cache
        data, hit = cache.jsonable(m.compute(**params)), False
    files = style.save(m.draw(data), Path(out) / name)
    return {"name": name, "files": files, "cached": hit, "seconds": time.perf_counter() - start}
