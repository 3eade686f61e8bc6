"""Every claim the docs make, as a function that measures it (in the style of PEPit): the
verification layer, where a reader looks for what the toolkit has checked.

Each claim function states a formula, its assumptions and where it is made (its
docstring), computes the prediction, measures the same quantity independently (Monte
Carlo of the model, an exact enumeration, or an independent computation) and returns a
:class:`Claim`: predicted, measured, standard error, z-score and the tolerance it is
judged at. ``noloco claims``, ``tests/test_claims.py`` and the figures in ``paper_figs/``
call these functions, so the estimator behind every quoted number is defined here once.

Every function takes ``quick`` (small Monte Carlo, for tests and ``--quick``) and
``seed`` (the random stream; the same seed gives the same numbers), plus keyword
settings that default to the paper preset (``noloco.theory.methods.PRESETS["paper"]``).

Rooms: :mod:`~noloco.claims.judge` (the verdict, judged once), :mod:`~noloco.claims.spread` (mean and
spread on quadratics), :mod:`~noloco.claims.comm` (communication and idle time),
:mod:`~noloco.claims.routing` (random pipeline routing).
"""

from __future__ import annotations

import dataclasses
import time

from noloco.claims.comm import (comm_speedup_internet, comm_speedup_latency_bound, idle_barrier,
                                idle_noloco_first_step)
from noloco.claims.judge import TOLERANCE, Claim, judge, judge_path  # noqa: F401 - the claims API
from noloco.claims.routing import routing_flat_direction
from noloco.claims.spread import (decay_factor, mean_is_diloco, pure_pairing, recursion_equals_enumeration,
                                  spread_eta_linear, spread_eta_squared, stationary_spread, transient_spread)
from noloco.infra.checks import check_choice, check_seed

CLAIMS = {f.__name__: f for f in (
    mean_is_diloco, recursion_equals_enumeration, stationary_spread, decay_factor, spread_eta_squared,
    spread_eta_linear, pure_pairing, transient_spread, comm_speedup_latency_bound, comm_speedup_internet,
    idle_barrier, idle_noloco_first_step, routing_flat_direction)}


def run_all(quick: bool = True, seed: int = 0, only=None) -> list[Claim]:
    """Every claim of :data:`CLAIMS` (or those named in ``only``), each timed."""
    check_seed("seed", seed)
    names = list(CLAIMS) if not only else [check_choice("claim", name, tuple(CLAIMS)) for name in only]
    out = []
    for name in names:
        start = time.perf_counter()
        claim = CLAIMS[name](quick, seed)
        out.append(dataclasses.replace(claim, seconds=time.perf_counter() - start))
    return out
