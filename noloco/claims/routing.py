"""Claims about random pipeline routing: the two-stage theory against its Monte Carlo (docs/routing.md)."""

from __future__ import annotations

import dataclasses

from noloco.claims.judge import Claim, judge


def routing_flat_direction(quick: bool = True, seed: int = 0, *, trials: int | None = None,
                           outer_steps: int = 60, start: int = 30) -> Claim:
    """Random pipeline routing: on two stages of a deep-linear model (a_i b_j = w*), the replicas' spread
    along a chain's flat direction (the rescaling (c a, b / c)) follows the exact second-moment
    recursion over routes and groups (``noloco.theory.routing.trajectory``): routing gives that direction
    the curvature each stage has with its partner held fixed: 0.56 of fixed routing's stationary
    spread here (per-stage groups; 0.376 with one partition for both stages).

    Assumptions: the linearised model around a* = b* = 1, additive gradient noise, inner SGD (lr 0.01,
    H 50, unit curvature), NoLoCo's outer step per stage with independent groups, N 8. Measured:
    ``noloco.quadratic.routing.simulate`` (linearised; real permutations and groups), mean over outer steps
    ``start..outer_steps`` against the recursion's mean over the same steps. Reference: docs/routing.md
    "Theory".
    """
    from noloco.quadratic import routing
    from noloco.theory.routing import stationary

    model = dataclasses.replace(routing.TABLE_MODEL, routing="random")
    rows = routing.compare(model, routing.TABLE_OUTER, routing.TABLE_INNER, trials=trials or (100 if quick else 400),
                           outer_steps=outer_steps, start=start, seed=seed, method="noloco")
    flat = next(r for r in rows if r.quantity == "flat")
    fixed = stationary(dataclasses.replace(model, routing="fixed"), routing.TABLE_OUTER, routing.TABLE_INNER)
    return judge("routing_flat_direction", "random routing: flat-direction spread follows the two-stage recursion",
                 "docs/routing.md Theory", flat.theory, flat.mc, flat.se,
                 details={"fixed_routing_stationary": float(fixed.flat), "window": [start, outer_steps]})
