"""How cost grows: ``simulate`` against directions, trials, replicas and outer steps (exact and
explicit inner phase), the idle-time simulation of ``comm`` against replicas, and ``check``
against the spectrum size; each point the best of ``--repeat`` runs. Each curve is one code path
(``NOLOCO_JIT``): by default the larger points would switch to the compiled loops. The simulate
sweeps are numpy; the idle simulation is swept both ways. ``python -m noloco.benchmarks.plot RESULT.json``
draws them on log-log axes (docs/img/performance.png).

    python -m benchmarks scaling [--repeat 2]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from noloco.benchmarks.timer import BenchResult, best_of, integer, jit, jit_paths
from noloco.infra.record import JsonRecord
from noloco.quadratic.sim_config import SimConfig
from noloco.quadratic.simulator import simulate
from noloco.quadratic import idle
from noloco.infra.budget import retain_freed_memory
from noloco.theory.conditions import analyse
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.theory.spectrum import Spectrum

NAME = "scaling"


@dataclass(frozen=True)
class SimSize(JsonRecord):
    """A simulate run's size: directions, trials, replicas N, outer steps."""

    dim: int
    trials: int
    replicas: int
    steps: int


#: the point every simulate sweep varies one factor of (a field of :class:`SimSize`)
BASE = SimSize(dim=1000, trials=50, replicas=8, steps=20)
SWEEPS = {"dim": (100, 1000, 10000), "trials": (50, 200, 800), "replicas": (8, 64, 512), "steps": (10, 20, 40)}


@dataclass(frozen=True)
class Scaling(JsonRecord):
    """The scaling benchmark's series, each ``[[size, seconds], ...]``: ``simulate`` by ``"<mode>_vs_<factor>"``
    from ``base``; the idle simulation against N (numpy, and compiled where numba is), ``check`` against the
    number of directions (None: not measured)."""

    NESTED = {"base": SimSize}
    OPTIONAL_KEYS = ("comm_idle_vs_replicas", "comm_idle_compiled_vs_replicas", "check_vs_directions")

    base: SimSize
    simulate: dict
    comm_idle_vs_replicas: Optional[list] = None
    comm_idle_compiled_vs_replicas: Optional[list] = None
    check_vs_directions: Optional[list] = None

    def others(self) -> list:
        """``(name, label, points)`` of the series beside ``simulate`` that were measured."""
        return [(name, label, getattr(self, name)) for name, label in OTHERS if getattr(self, name) is not None]


#: the series beside simulate's and their labels in the table
OTHERS = (("comm_idle_vs_replicas", "comm idle vs replicas"), ("comm_idle_compiled_vs_replicas", "comm idle compiled vs N"),
          ("check_vs_directions", "check vs directions"))


def scaling_of(result: dict) -> Scaling:
    """The scaling series of a scaling result, or of the ``all`` result holding one."""
    results = BenchResult.from_json(result).results
    return Scaling.from_json(results.get("scaling", results))  # edge: the "all" JSON nests each benchmark's


def add_arguments(parser) -> None:
    parser.add_argument("--repeat", type=integer("repeat", 1, 100), default=2, help="best of this many runs per point")


def _simulate_seconds(size: SimSize, mode, repeat) -> float:
    cfg = SimConfig(outer=OuterConfig(replicas=size.replicas, group_size=2), inner=InnerConfig(lr=0.01, steps=50),
                    curvatures=tuple(np.linspace(0.1, 1, size.dim)), trials=size.trials, outer_steps=size.steps,
                    inner_mode=mode)
    with jit("0"):
        return best_of(lambda: simulate(cfg), repeat)


def measure(repeat: int = 2) -> dict:
    retain_freed_memory()
    simulated, idle_series = {}, {}
    for factor, values in SWEEPS.items():
        for mode in ("exact", "explicit"):
            if mode == "explicit" and factor != "dim":
                continue
            points = []
            for value in values:
                size = replace(BASE, **{factor: value})
                if mode == "explicit":
                    size = replace(size, steps=2)
                points.append([value, _simulate_seconds(size, mode=mode, repeat=repeat)])
            simulated[f"{mode}_vs_{factor}"] = points
    for path, setting in jit_paths():
        key = "comm_idle_vs_replicas" if path == "numpy" else "comm_idle_compiled_vs_replicas"
        with jit(setting):
            idle.simulate_idle(1 << 12, steps=2, trials=2)  # loads numba and the compiled step: not timed
            idle_series[key] = [[N, best_of(lambda N=N: idle.simulate_idle(N, steps=50, trials=2), 1)]
                        for N in (10 ** 3, 10 ** 4, 10 ** 5, 10 ** 6)]
    outer, inner = OuterConfig(), InnerConfig()
    check = [[n, best_of(lambda n=n: analyse(outer, inner, Spectrum.power_law(1.0, 1.0, n)), 1)]
             for n in (10 ** 5, 10 ** 6, 10 ** 7)]
    return Scaling(base=BASE, simulate=simulated, **idle_series, check_vs_directions=check).to_json()


def slope(points) -> float:
    """Log-log slope of seconds against size between the first and the last point."""
    (x0, y0), (x1, y1) = points[0], points[-1]
    return float(np.log(y1 / y0) / np.log(x1 / x0))


def format_result(result: dict) -> str:
    r = scaling_of(result)
    rows = [(name, pts) for name, pts in r.simulate.items()] + [(label, pts) for _, label, pts in r.others()]
    return "\n".join(f"{name:<28} slope {slope(pts):5.2f}  " + "  ".join(f"{x:g}: {y:.3g} s" for x, y in pts)
                     for name, pts in rows)
