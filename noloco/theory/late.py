"""The exact theory of the one-phase-late outer step (:func:`noloco.theory.outer.late_outer_step`: the exchange
overlapped with the next inner phase) on a quadratic.

Per eigen-direction, with y the distance of phi from the optimum, an inner phase of
:class:`noloco.theory.exchangeable.InnerPhase` (``Delta = -c x + k.s + L0 xi``, ``s' = b x + Q s + Ls xi`` from
a start x) and P the progress sent at the last sync and not yet applied, one outer step is::

    (y, delta)' = outer_step(y, delta, mean_G(y), mean_G(P))       the unchanged rule, on what is pending
    P'          = -c (y + P) + k.s + L0 xi                          the next phase began at y + P
    s'          =  b (y + P) + Q s + Ls xi

which is an inner phase itself: progress ``k~.s~`` with ``s~ = (P, s)``, no contraction of its own (c~ = 0),
``b~ = (-c, b)``, ``Q~ = [[-c, k], [b, Q]]`` and the noise in the carried rows only (:func:`late_phase`). So the
exchangeable recursion of :mod:`noloco.theory.exchangeable` (its fixed point, its rates) applies unchanged, and
what the delay costs is the same machinery run twice (:func:`delay_cost`). The spread is phi's; the weights a
replica trains from are phi + P. Heterogeneous optima (a drift entering P) are not modelled.

    python -m noloco.theory.late      # what the delay costs at the paper preset, as noloco check reads it
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import numpy as np

from noloco.infra.errors import ConfigError
from noloco.theory import exchangeable as X
from noloco.theory.config import InnerConfig, OuterConfig


def late_phase(phase: X.InnerPhase) -> X.InnerPhase:
    """The one-phase-late form of ``phase``: the pending progress P carried as the first entry of the state."""
    p, q = phase.p, phase.L.shape[1]
    k = np.concatenate([[1.0], np.zeros(p)])
    b = np.concatenate([[-phase.c], phase.b])
    Q = np.block([[np.array([[-phase.c]]), phase.k[None, :]], [phase.b[:, None], phase.Q]])
    L = np.vstack([np.zeros((1, q)), phase.L])
    return X.InnerPhase(0.0, k, b, Q, L)


@dataclass(frozen=True)
class DelayCost:
    """:func:`delay_cost`: each step applied at its own sync, one phase late, and late / prompt."""

    prompt: X.Summary
    late: X.Summary
    ratio: X.Summary


def delay_cost(outer: OuterConfig, inner: InnerConfig, curvatures, model=None) -> DelayCost:
    """``prompt`` (each step applied at its own sync) against ``late`` (one phase late), in the directions
    ``curvatures``: the stationary spread of phi per coordinate (summed), the mean's spectral radius and the
    spread's decay factor (the worst direction), and the ratios late / prompt.

    Examples:
        >>> import noloco
        >>> _, outer, inner = noloco.resolve("paper")
        >>> cost = delay_cost(outer, inner, [1.0])
        >>> round(cost.prompt.mean_spectral_radius, 6)   # noloco check's value
        0.707107
    """
    model = model or X.InnerModel()
    if model.zeta:
        raise ConfigError("zeta > 0: the one-phase-late theory does not model heterogeneous optima (a drift in the "
                          "pending progress); give zeta=0")
    out = []
    for form in (lambda ph: ph, late_phase):
        rows = [X.summary(outer, form(model.phase(inner.lr, float(lam), inner.steps, inner.noise)))
                for lam in np.atleast_1d(np.asarray(curvatures, dtype=float))]
        out.append(X.Summary(stationary_variance=float(sum(r.stationary_variance for r in rows)),
                             mean_spectral_radius=max(r.mean_spectral_radius for r in rows),
                             variance_decay_factor=max(r.variance_decay_factor for r in rows)))
    prompt, late = out
    return DelayCost(prompt, late, X.Summary(*(b / a for a, b in zip(astuple(prompt), astuple(late)))))


def table() -> str:
    """The paper preset at ``noloco check``'s default curvature: prompt against one phase late."""
    from noloco.theory.methods import resolve
    from noloco.theory.spectrum import DEFAULT_CURVATURE

    _, outer, inner = resolve("paper")
    cost = delay_cost(outer, inner, [DEFAULT_CURVATURE])
    rows = ["| the paper preset, curvature 1 | prompt | one phase late | late / prompt |", "|---|---|---|---|"]
    names = ("stationary spread of phi per coordinate", "the mean's spectral radius", "the spread's decay factor")
    for name, prompt, late, ratio in zip(names, astuple(cost.prompt), astuple(cost.late), astuple(cost.ratio)):
        rows.append(f"| {name} | {prompt:.6g} | {late:.6g} | {ratio:.4f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    from noloco.infra.entry import print_main

    raise SystemExit(print_main("python -m noloco.theory.late", __doc__, table))
