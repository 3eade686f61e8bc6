"""Build the figures: each ``fig_<name>.py`` gives ``params(quick, **options)``,
``compute(**params)`` (JSON-able data) and ``draw(data)`` (a matplotlib figure).

The data is cached through :func:`noloco.infra.cache.cached` (namespace ``figure-NAME``, keyed by
the parameters and by every project source), under ``$NOLOCO_CACHE`` or ``cache_dir``,
never inside the source tree; a figure with ``CACHED = False`` reads results that are
already on disk (the LLM runs) and is not cached."""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from pathlib import Path

from noloco.paper_figs import style
from noloco.infra.cache import cached
from noloco.infra.files import jsonable

FIGURES = ("stability", "decay", "spread", "transient", "logistic", "comm", "llm", "tune", "routing", "paper_maps",
           "paper_comm", "paper_gpt", "hdee")
DEFAULT_OUT = Path(__file__).resolve().parent / "out"


def module(name: str):
    return importlib.import_module(f"noloco.paper_figs.fig_{name}")


def _is_data(data) -> bool:  # every figure's data is a JSON object
    return isinstance(data, dict)


#: seconds each figure took from an empty cache, ``(--quick, full)``, measured for issue 22 with ``noloco figs``
#: on the project's 2 cores at load 4 to 5 (both runs about 60 s and 160 s in all); a figure not listed counts
#: :data:`UNLISTED_SECONDS`. Only what is not cached is counted.
SECONDS = {"stability": (6.5, 23.9), "decay": (2.6, 17.9), "spread": (6.6, 27.3), "transient": (2.2, 2.6),
           "logistic": (8.4, 17.0), "comm": (2.9, 7.9), "llm": (1.2, 0.8), "tune": (6.3, 5.7), "routing": (2.5, 3.2),
           "paper_maps": (3.7, 13.4), "paper_comm": (6.1, 31.9), "paper_gpt": (0.7, 0.5), "hdee": (1.0, 1.0)}
UNLISTED_SECONDS = 30.0


def require_time(names, *, quick: bool = False, cache_dir=None, refresh: bool = False, options: dict | None = None,
                 max_time=None) -> float:
    """Before ``noloco figs``: the seconds its figures will take (those whose data is cached cost nothing), printed
    when above a minute and refused above ``max_time`` (:func:`noloco.infra.budget.require_time`, exit 3)."""
    from noloco.infra import budget
    from noloco.infra.cache import cache_path

    todo = []
    for name in names:
        m = module(name)
        cached_already = getattr(m, "CACHED", True) and not refresh and cache_path(
            f"figure-{name}", m.params(quick, **((options or {}).get(name) or {})), cache_dir).exists()
        if not cached_already:
            todo.append(name)
    seconds = sum(SECONDS.get(name, (UNLISTED_SECONDS,) * 2)[0 if quick else 1] for name in todo)
    budget.require_time(seconds, max_time, f"figs: {len(todo)} figure(s) to compute", "--quick or fewer --only figures",
                        "their measured seconds, 2 busy cores")
    return seconds


@dataclass(frozen=True)
class MadeFigure:
    """One figure drawn: its name, the seconds it took, whether its data came from the cache, its files."""

    name: str
    seconds: float
    cached: bool
    files: list

    def to_json(self) -> dict:
        """The figure as ``noloco figs --json`` reports it."""
        return {"name": self.name, "seconds": self.seconds, "cached": self.cached, "files": [str(f) for f in self.files]}


def make(name: str, *, quick: bool = False, out=DEFAULT_OUT, cache_dir=None, refresh: bool = False,
         options: dict | None = None) -> MadeFigure:
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
    return MadeFigure(name=name, seconds=time.perf_counter() - start, cached=hit, files=files)
