"""The exact inner phase's outer step as one compiled loop (numba), where numba is installed.

Per outer step the numpy path makes about fifteen passes over a block of the simulator's state:
moving each replica's rows to its new group, the group means, the outer step's temporaries and
the spread's sums. :func:`exact_outer_step` makes one, calling :func:`noloco.theory.outer.outer_arithmetic`
(the one outer step, compiled) on each number. It does the same arithmetic in the same order on the
same draws, so the weights are bit for bit those of the numpy path; only the spread's sums, which
numpy may add in another order, can differ by rounding (``tests/test_fused.py``).

``noloco.quadratic.simulator`` uses it for the exact inner phase of large runs when numba is installed
(``pip install 'noloco-toolkit[fast]'``; ``NOLOCO_JIT`` overrides the choice, :mod:`noloco.infra.jit`).
The explicit path stays numpy: it is bound by its Gaussian draws, not by passes over the state.
"""

from __future__ import annotations

import numpy as np

from noloco.infra import jit
from noloco.theory.outer import outer_arithmetic

#: replica-coordinate outer steps from which a run compiles by default (``NOLOCO_JIT=auto``): below,
#: numpy is quicker than loading numba and the compiled code (:mod:`noloco.infra.jit`)
MIN_UPDATES = 200_000_000


def enabled(updates: float) -> bool:
    """Whether a run of ``updates`` replica-coordinate outer steps uses the compiled loop."""
    return jit.enabled(updates, MIN_UPDATES)


def exact_outer_step(phi, delta, shift, rows, noise, c, sd, n, alpha, beta, gamma, nesterov,
                     new_phi, new_delta, new_shift, sums) -> None:
    """One outer step of a block with the exact inner phase, into ``new_*``.

    ``phi``, ``delta`` (and ``shift``, the replicas' optima, or an empty array) are (trials, N, width);
    ``rows[t, k]`` is the row of trial t whose replica takes place k (groups are consecutive runs of
    ``n`` places); ``noise`` is (trials, N / n, width) standard normal draws, or empty when noise-free;
    ``c``, ``sd`` are the phase's contraction and a group mean's noise std per direction. ``alpha``,
    ``beta``, ``gamma`` and ``n`` have the state's dtype, so float32 stays float32 as in numpy.
    ``sums[0]``, ``sums[1]`` (trials, width) get the sums over replicas of ``new_phi - new_phi[:, :1]``
    and of its square (float64), what the simulator's record needs."""
    global _compiled_step
    if _compiled_step is None:
        _compiled_step = jit.compile_with_cache(_compile_with)
    _compiled_step(phi, delta, shift, rows, noise, c, sd, n, alpha, beta, gamma, nesterov,
                   new_phi, new_delta, new_shift, sums)


# numba's compiled forms, made on first use: _exact_step calls the other two by these names
_compiled_step = _outer = _mean_of_rows = None


def _compile_with(compile_one):
    global _outer, _mean_of_rows
    _outer, _mean_of_rows = compile_one(outer_arithmetic), compile_one(_mean_of_rows_py)
    return compile_one(_exact_step)


def _mean_of_rows_py(x, members, n, out):
    """The mean of rows ``members`` of ``x`` into ``out`` in the numpy path's order: the first,
    plus each other, then / n (1-d loops: LLVM vectorises them, not 3-d indexing in a loop)."""
    first = x[members[0]]
    for d in range(out.size):
        out[d] = first[d]
    for j in range(1, members.size):
        row = x[members[j]]
        for d in range(out.size):
            out[d] += row[d]
    for d in range(out.size):
        out[d] /= n


def _exact_step(phi, delta, shift, rows, noise, c, sd, n, alpha, beta, gamma, nesterov,
                new_phi, new_delta, new_shift, sums):
    """:func:`exact_outer_step`'s loop, compiled by numba. It works on one row (1-d view) at a time:
    indexing the 3-d arrays inside the loops ran 2.6 times slower."""
    trials, replicas, width = phi.shape
    size = int(n)
    has_shift, noisy = shift.size > 0, noise.size > 0
    mean, mean_shift, progress = np.empty(width, phi.dtype), np.empty(width, phi.dtype), np.empty(width, phi.dtype)
    for t in range(trials):
        for first in range(0, replicas, size):
            _mean_of_rows(phi[t], rows[t, first: first + size], n, mean)
            if has_shift:
                _mean_of_rows(shift[t], rows[t, first: first + size], n, mean_shift)
                for d in range(width):
                    progress[d] = (mean[d] - mean_shift[d]) * -c[d]
            else:
                for d in range(width):
                    progress[d] = mean[d] * -c[d]
            if noisy:   # a group's mean progress: -c (mean gap) + sd z
                z = noise[t, first // size]
                for d in range(width):
                    progress[d] += z[d] * sd[d]
            for place in range(first, first + size):
                old_phi, old_delta = phi[t, rows[t, place]], delta[t, rows[t, place]]
                out_phi, out_delta = new_phi[t, place], new_delta[t, place]
                for d in range(width):
                    out_phi[d], out_delta[d] = _outer(old_phi[d], old_delta[d], mean[d], progress[d],
                                                      alpha, beta, gamma, nesterov)
                if has_shift:
                    new_shift[t, place] = shift[t, rows[t, place]]
        # the spread's sums, from replica 0 as in the numpy path
        total, square, first_row = sums[0, t], sums[1, t], new_phi[t, 0]
        total[:] = 0.0
        square[:] = 0.0
        for place in range(1, replicas):
            row = new_phi[t, place]
            for d in range(width):
                x = np.float64(row[d] - first_row[d])
                total[d] += x
                square[d] += x * x
