"""The theory layer: code generation, cold import and a 1000 x 1000 grid of closed forms."""

from __future__ import annotations

import numpy as np

from noloco.benchmarks.timer import best_of, fresh_process_seconds, integer

NAME = "theory-grid"


def add_arguments(parser) -> None:
    parser.add_argument("--points", type=integer("points", 2, 4000), default=1000,
                        help="grid points per axis (alpha x gamma; 2 to 4000: 16e6 points hold 128 MiB per array)")
    parser.add_argument("--repeat", type=integer("repeat", 1, 100), default=5, help="best of this many runs")


def measure(points: int = 1000, repeat: int = 5) -> dict:
    from noloco.theory import numeric

    alpha = np.linspace(0, 0.99, points)[:, None]
    gamma = np.linspace(0, 2, points)[None, :]
    kappa = (8 - 2) / (2 * 7)
    results = {"codegen_s": fresh_process_seconds("from noloco.theory import codegen; codegen.generate()"),
               "cold_import_numeric_s": fresh_process_seconds("from noloco.theory import numeric"),
               "grid_points": alpha.size * gamma.size}
    for momentum in ("heavy-ball", "nesterov"):
        results[f"{momentum}_variance_decay_factor_s"] = best_of(
            lambda: numeric.variance_decay_factor(alpha, 0.7, gamma, 0.5, kappa, momentum), repeat)
        results[f"{momentum}_stationary_variance_s"] = best_of(
            lambda: numeric.stationary_variance(alpha, 0.7, gamma, 0.5, 0.01, 8, 2, momentum), repeat)
        results[f"{momentum}_spread_stable_s"] = best_of(
            lambda: numeric.spread_stable(alpha, 0.7, gamma, 0.5, kappa, momentum), repeat)
    return results


def format_result(result: dict) -> str:
    from noloco.benchmarks.timer import BenchResult

    return "\n".join(f"{key:45s} {value:.3f}" if isinstance(value, float) else f"{key:45s} {value}"
                      for key, value in BenchResult.from_json(result).results.items())
