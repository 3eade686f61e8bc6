"""Benchmark of the theory layer: cold derivation time and 1000 x 1000 grid evaluation.

    python -m theory.bench            # prints a table; --json for machine-readable output
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np


def _cold_derivation_seconds() -> float:
    """A fresh process with an empty cache: import, derive both conventions, compile."""
    code = "import time; t=time.perf_counter(); from theory import numeric; numeric._compiled(); print(time.perf_counter()-t)"
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NOLOCO_CACHE=cache)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def _best_of(fn, repeats=5) -> float:
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from theory import numeric

    numeric._compiled()
    alpha = np.linspace(0, 0.99, 1000)[:, None]
    gamma = np.linspace(0, 2, 1000)[None, :]
    kappa = (8 - 2) / (2 * 7)
    results = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}",
        "cold_derivation_s": _cold_derivation_seconds(),
        "grid_points": alpha.size * gamma.size,
    }
    for momentum in ("heavy-ball", "nesterov"):
        results[f"{momentum}_variance_decay_factor_s"] = _best_of(
            lambda: numeric.variance_decay_factor(alpha, 0.7, gamma, 0.5, kappa, momentum))
        results[f"{momentum}_stationary_variance_s"] = _best_of(
            lambda: numeric.stationary_variance(alpha, 0.7, gamma, 0.5, 0.01, 8, 2, momentum))
        results[f"{momentum}_spread_stable_s"] = _best_of(
            lambda: numeric.spread_stable(alpha, 0.7, gamma, 0.5, kappa, momentum))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key:45s} {value:.3f}" if isinstance(value, float) else f"{key:45s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
