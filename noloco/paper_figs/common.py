"""The paper setting as the figure scripts use it (their Monte Carlo comes from
:mod:`noloco.claims`, its statistics from :mod:`noloco.theory.stats`)."""

from __future__ import annotations

import dataclasses

from noloco.theory import numeric
from noloco.theory.methods import PAPER_PRESET as PAPER  # pairs, alpha 0.5, beta = gamma = 0.7, H 50, N 8

CURVATURE = 1.0


def paper_c_s2(lr: float = PAPER.inner.lr, steps: int = PAPER.inner.steps, curvature: float = CURVATURE):
    """(c, s2) of the paper's inner phase on one direction of curvature ``curvature``."""
    c, s2 = numeric.inner_sgd(lr, curvature, steps, PAPER.inner.noise)
    return float(c), float(s2)


def outer(**changes):
    return dataclasses.replace(PAPER.outer, **changes)
