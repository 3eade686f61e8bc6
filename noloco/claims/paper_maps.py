"""Stability maps of the paper's conditions against the exact theory (paper_figs/fig_paper_maps.py)."""

from __future__ import annotations


import numpy as np

from noloco.theory import numeric
from noloco.theory import paper as P
from noloco.theory.config import group_kappa
from noloco.theory.stability import classify_codes

def _counterexample(mask, score, coords, pick) -> dict | None:
    """The grid point of ``mask`` with the extreme ``score`` (``pick`` = np.argmax or np.argmin)."""
    if not mask.any():
        return None
    index = np.unravel_index(pick(np.where(mask, score, np.nan)), mask.shape)
    return {name: float(np.broadcast_to(value, mask.shape)[index]) for name, value in coords.items()} | \
        {"spectral_radius": float(score[index])}


def compare_regions(paper, exact, score, coords) -> dict:
    """Share of the grid where the paper's region and the exact one agree, and the strongest
    counterexample each way: paper stable but exact unstable (largest spectral radius) and the reverse
    (smallest)."""
    paper, exact = np.asarray(paper, bool), np.asarray(exact, bool)
    score = np.broadcast_to(np.asarray(score, float), paper.shape)
    return {"agreement": float(np.mean(paper == exact)),
            "paper_stable_exact_unstable": _counterexample(paper & ~exact, score, coords, np.nanargmax),
            "paper_unstable_exact_stable": _counterexample(~paper & exact, score, coords, np.nanargmin)}


def window_map(c: float, replicas: int, group_size: int, alpha, gamma, beta: float,
               momentum: str = "heavy-ball") -> dict:
    """Theorem 3's window (both readings of Eq 55) against the exact spread stability on an (alpha, gamma) grid."""
    A, G = np.asarray(alpha, float)[:, None], np.asarray(gamma, float)[None, :]
    kappa = group_kappa(replicas, group_size)
    rho = numeric.variance_decay_factor(A, beta, G, c, kappa, momentum)
    codes = classify_codes(rho)  # the one classification: a marginal point (radius 1) is not stable
    exact = codes == 0
    out = {"exact": exact.astype(np.int8), "marginal": (codes == 1).astype(np.int8), "kappa": kappa}
    for power in (P.PRINTED_POWER, 1):
        paper = P.in_window(A, G, group_size, power)
        out[f"power{power}"] = {"paper": paper.astype(np.int8),
                                **compare_regions(paper, exact, rho, {"alpha": A, "gamma": G})}
    return out


def mean_map(c: float, alpha, beta, momentum: str = "heavy-ball") -> dict:
    """Theorem 2's sufficient condition beta > alpha and its test |D| < 1 against the exact mean
    stability on an (alpha, beta) grid (gamma cancels in the mean)."""
    A, B = np.asarray(alpha, float)[:, None], np.asarray(beta, float)[None, :]
    radius = numeric.mean_spectral_radius(A, B, 0.0, c, momentum)
    codes = classify_codes(radius)
    exact = codes == 0
    sufficient = P.mean_sufficient(A, B) & np.ones_like(exact)
    criterion = P.mean_criterion(1 + A - B * c)
    coords = {"alpha": A, "beta": B}
    return {"exact": exact.astype(np.int8), "marginal": (codes == 1).astype(np.int8),
            "criterion": criterion.astype(np.int8),
            "sufficient": compare_regions(sufficient, exact, radius, coords),
            "criterion_compare": compare_regions(criterion, exact, radius, coords)}
