"""Build the figures: each ``fig_<name>.py`` gives ``params(quick, **options)``,
``compute(**params)`` (JSON-able data) and ``draw(data)`` (a matplotlib figure).

The data is cached through :func:`noloco.infra.cache.cached` (namespace ``figure-NAME``, keyed by
the parameters and by every project source), under ``$NOLOCO_CACHE`` or ``cache_dir``,
never inside the source tree; a figure with ``CACHED = False`` reads results that are
already on disk (the LLM runs) and is not cached."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from noloco.paper_figs import style
from noloco.infra.cache import cached
from noloco.infra.files import jsonable

FIGURES = ("stability", "decay", "spread", "transient", "logistic", "comm", "llm", "tune", "routing", "paper_maps",
           "paper_comm")
DEFAULT_OUT = Path(__file__).resolve().parent / "out"


def module(name: str):
    return importlib.import_module(f"noloco.paper_figs.fig_{name}")


def _is_data(data) -> bool:  # every figure's data is a JSON object
    return isinstance(data, dict)


def make(name: str, *, quick: bool = False, out=DEFAULT_OUT, cache_dir=None, refresh: bool = False,
         options: dict | None = None) -> dict:
    """Compute (or load) one figure's data and write ``out/NAME.png`` and ``.pdf``."""
    m = module(name)
    start = time.perf_counter()
    params = m.params(quick, **(options or {}))
    compute = lambda: m.compute(**params)
    if getattr(m, "CACHED", True):
        data, hit = cached(f"figure-{name}", params, compute, directory=cache_dir, refresh=refresh,
                              valid=_is_data)
    else:
        data, hit = jsonable(compute()), False
    files = style.save(m.draw(data), Path(out) / name)
    return {"name": name, "files": files, "cached": hit, "seconds": time.perf_counter() - start}
