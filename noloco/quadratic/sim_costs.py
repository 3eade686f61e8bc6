"""What a simulation costs before it runs: how its work is cut into blocks of trials x directions
(:func:`plan`), its memory (:func:`memory_estimate`) and its time (:func:`time_estimate`) on the project's
machine."""

from __future__ import annotations


import numpy as np

from noloco.quadratic import fused
from noloco.quadratic.objectives import DATA_DIMENSION_BOUND
from noloco.infra import jit

#: how the inner phase is simulated: auto is exact wherever exact is exact, else explicit
#: numbers per state array in one block (512 KiB in float64: a block's arrays stay in the
#: caches of the machine measured in docs/performance.md, and numpy's per-call cost is spread
#: over enough numbers; 2^17 measured the same)
BLOCK = 1 << 16
#: directions per block at least (rows of this many numbers move cheaply when replicas regroup)
WIDTH = 256
#: the mean trajectory is recorded for at most this many directions (evenly spaced in the
#: sorted spectrum, flattest and steepest included); the totals cover every direction
MEAN_DIRECTIONS = 1024
#: per-trial spreads are kept for every step while there are at most this many
KEEP_SPREAD = 1 << 21
#: per-trial totals of one trial block, staged while its direction blocks run
STAGE = 1 << 22

def plan(directions: int, trials: int, replicas: int, steps: int, eigenbasis: bool) -> tuple[int, int]:
    """(trials per block, directions per block). In the eigenbasis a block holds about
    :data:`BLOCK` numbers per state array, at least :data:`WIDTH` directions wide where there are
    that many; with several direction
    blocks a trial block is also small enough that its per-step totals (:data:`STAGE`) stay
    small. Otherwise a block is a set of whole trials."""
    if not eigenbasis:
        return max(1, min(trials, BLOCK // max(1, replicas * directions))), directions
    width = min(directions, max(WIDTH, BLOCK // (replicas * trials)))
    tb = max(1, min(trials, BLOCK // (replicas * width)))
    if width < directions:
        tb = max(1, min(tb, STAGE // (3 * (steps + 1))))
    return tb, width


def mean_directions(count: int) -> np.ndarray:
    """Indices (into the ascending spectrum) of the directions whose mean trajectory is recorded."""
    if count <= MEAN_DIRECTIONS:
        return np.arange(count)
    return np.unique(np.round(np.linspace(0, count - 1, MEAN_DIRECTIONS)).astype(np.int64))


def memory_estimate(directions: int, trials: int, replicas: int, outer_steps: int, *, inner_steps: int = 50,
                    objective: str = "quadratic", rotate: bool = False, eigenbasis: bool = True,
                    decay: bool = True, batch_size: int = 0) -> int:
    """Bytes that a ``noloco simulate`` run (simulation, theory and result) allocates, before any
    work: the blocks (constant), 8 bytes per trial for the windowed spreads (and 16 more for the
    noise-free decay run), the per-direction arrays of the theory and of the result, the recorded
    trajectories, the dense Hessian machinery of a rotated quadratic (D x D, several times), a data
    objective's minibatch (its rows, targets and per-row gradients for a block of trials), and
    numba's compiler where the run may compile its outer step."""
    D = directions if objective == "quadratic" else DATA_DIMENSION_BOUND
    tb, width = plan(D, trials, replicas, outer_steps, eigenbasis)
    blocks = 12 * 8 * tb * replicas * width + 64 * tb * replicas
    if width < D:
        blocks += 3 * 8 * (outer_steps + 1) * tb
    per_trial = (8 + (16 if decay else 0)) * trials + 8 * min(KEEP_SPREAD, trials * (outer_steps + 1))
    per_direction = 400 * D + 40 * inner_steps * D          # spectrum, theory (M, T, one phase's rates), JSON
    recorded = (outer_steps + 1) * (min(D, MEAN_DIRECTIONS) * 200 + 600)
    dense = 5 * 8 * D * D if objective != "quadratic" or rotate else 0
    dense += 3 * 8 * tb * replicas * batch_size * (D + 1) if objective != "quadratic" else 0
    compiler = jit.COMPILER_BYTES if objective == "quadratic" and fused.enabled(
        float(D) * trials * replicas * outer_steps) else 0
    return int(blocks + per_trial + per_direction + recorded + dense + compiler)


#: nanoseconds per unit of simulated work on the project's 2-core machine when idle, for :func:`time_estimate`:
#: ``(per replica and step, per replica, step and coordinate)``. The per-coordinate terms of the exact inner
#: phase (per outer step; numpy 6.2 ns, compiled 0.068 ns x H = 50) and of explicit inner steps (per inner
#: step, 2.69 ns) are docs/performance.md's (``python -m noloco.benchmarks simulator``). The rest was measured
#: for issue 22 with ``simulate(SimConfig(...))`` at D = 1 to 1000 and load 4.5 on the 2 cores, and divided by
#: the ratio of those runs to the benchmark's at D = 1000 (3 to 4): what a replica's step costs besides its
#: coordinates (regrouping, recording), a rotated quadratic's dense gradient (per coordinate squared), a
#: data objective's full gradient (per replica and inner step). Under that load runs took 2.7 to 4 times
#: as long as estimated.
NS_EXACT, NS_EXACT_COMPILED, NS_EXPLICIT = (15.0, 6.2), (30.0, 3.4), (0.0, 2.7)
NS_DENSE = 0.06
NS_DATA = {"diabetes": 300.0, "longley": 200.0, "breast-cancer": 3500.0}
#: what a run costs besides its steps: imports, the theory, the result (seconds)
SETUP_SECONDS = 1.0


def time_estimate(directions: int, trials: int, replicas: int, outer_steps: int, *, inner_steps: int = 50,
                  objective: str = "quadratic", rotate: bool = False, exact: bool = True, decay: bool = True) -> float:
    """Seconds a ``noloco simulate`` run takes on the project's machine when idle, from its size and the
    per-unit costs above: the simulation, plus the noise-free decay run of up to 60 outer steps that
    :func:`noloco.quadratic.compare.compare` adds for inner SGD (``decay``)."""
    D = float(directions)
    steps = outer_steps + (min(outer_steps, 60) if decay else 0)
    if objective != "quadratic":
        per_replica_step = NS_DATA.get(objective, max(NS_DATA.values())) * inner_steps
    elif exact:
        fixed, per = NS_EXACT_COMPILED if fused.enabled(D * trials * replicas * outer_steps) else NS_EXACT
        per_replica_step = fixed + per * D
    else:
        per_replica_step = (NS_EXPLICIT[0] + NS_EXPLICIT[1] * D + (NS_DENSE * D * D if rotate else 0.0)) * inner_steps
    return SETUP_SECONDS + float(trials) * replicas * steps * per_replica_step * 1e-9
