"""Random pipeline routing on a two-stage deep-linear model: the Monte Carlo, and its comparison with the
exact theory of :mod:`noloco.theory.routing` (docs/routing.md). ``python -m noloco.quadratic.routing``
prints theory against simulation and exits 1 when they disagree by more than 4 standard errors.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from noloco.infra.checks import check_integer, check_seed
from noloco.infra.errors import ConfigError
from noloco.quadratic.inner import Noise
from noloco.theory import stats
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.theory.methods import constrain
from noloco.theory.numeric import inner_sgd
from noloco.theory.outer import outer_step
from noloco.theory.partitions import group_mean, random_permutations
from noloco.theory.routing import ROUTINGS, Spreads, TwoStageModel, flat_factor, stationary, trajectory


# --------------------------------------------------------------------------- simulation

@dataclass
class RoutingRun:
    """Per-trial spreads of a simulation (the same definitions as :class:`Spreads`, each the mean over
    coordinates of the variance over replicas): ``outer`` (steps + 1, 2, trials), ``inner`` (steps, 2,
    trials), ``flat`` (steps + 1, trials). ``diverged_at``: the first outer step with a non-finite
    weight (None: none)."""

    outer: np.ndarray
    inner: np.ndarray
    flat: np.ndarray
    diverged_at: int | None = None

    def window(self, start: int, stop: int | None = None) -> Spreads:
        """Mean over outer steps start..stop (inclusive, of the ``outer`` index; ``inner`` over the
        phases ending at those steps) and standard error over trials, from :func:`noloco.theory.stats.mean_se`:
        ``outer`` and ``inner`` a (mean, se) per stage, ``flat`` one (mean, se), no ``stiff``."""
        stop = self.outer.shape[0] - 1 if stop is None else stop
        if not 1 <= start <= stop <= self.outer.shape[0] - 1:
            raise ConfigError(f"window {start}..{stop} is out of range; allowed: 1 <= start <= stop <= "
                              f"{self.outer.shape[0] - 1}")
        outer = self.outer[start:stop + 1].mean(0)
        inner = self.inner[start - 1:stop].mean(0)
        return Spreads(outer=[stats.mean_se(outer[s]) for s in range(2)],
                       inner=[stats.mean_se(inner[s]) for s in range(2)],
                       flat=stats.mean_se(self.flat[start:stop + 1].mean(0)), stiff=None)


def _spread(x):
    """Mean over coordinates of the variance over replicas, per trial: x (trials, N, D) -> (trials,)."""
    return x.var(axis=1).mean(axis=-1)


class _Stages:
    """The weights of both stages for all trials at once: theta, phi, delta, each (trials, N, D)."""

    def __init__(self, model: TwoStageModel, trials: int, replicas: int, noise: Noise):
        D = len(model.curvatures)
        offsets = np.zeros((trials, replicas, D))
        if model.flat_start:
            noise.fill(offsets, model.flat_start)
            offsets -= offsets.mean(axis=1, keepdims=True)  # zero mean: the replica mean starts at the solution
        r = model.radius
        self.phi = [model.a_star + model.a_star / r * offsets, model.b_star - model.b_star / r * offsets]
        self.delta = [np.zeros_like(self.phi[0]), np.zeros_like(self.phi[1])]
        self.theta = [p.copy() for p in self.phi]


def _gradients(theta_a, theta_b, route, model: TwoStageModel, inner: InnerConfig, h, noise: Noise, linear: bool):
    """Each stage replica's gradient, the mean over its B microbatches, with additive and output noise.
    ``route``: None (fixed: partner = own index) or (perm, inverse), (trials, B, N) each: microbatch
    column k of stage-1 replica i goes to stage-2 replica perm[k, i]."""
    a_star, b_star, B = model.a_star, model.b_star, model.microbatches
    trials, N, D = theta_a.shape
    own_a = theta_a[:, None]                                     # (trials, 1, N, D)
    if route is None:
        partner_b = theta_b[:, None]
    else:
        perm, _ = route
        partner_b = theta_b[np.arange(trials)[:, None, None], perm]   # (trials, B, N, D)
    if linear:  # the loss linearised around (a*, b*): 0.5 h (b* x_i + a* y_j)^2
        residual = h * (b_star * (own_a - a_star) + a_star * (partner_b - b_star))
        weight_a, weight_b = b_star, a_star
    else:
        residual = h * (own_a * partner_b - a_star * b_star)
        weight_a, weight_b = partner_b, own_a
    if model.output_noise:  # one draw per microbatch, chain-ruled into both stages
        residual = residual + noise.fill(np.empty((trials, B, N, D)), model.output_noise)
    grad_a = (residual * weight_a).mean(axis=1)
    to_b = residual * weight_b                                   # by the stage-1 replica that sent it
    if route is not None:  # stage-2 replica j receives the microbatch of stage-1 replica inverse[k, j]
        to_b = to_b[np.arange(trials)[:, None, None], np.arange(B)[None, :, None], route[1]]
    grad_b = to_b.mean(axis=1)
    if inner.noise:
        per_replica = inner.noise / math.sqrt(B)    # the mean of B independent per-microbatch draws
        grad_a = grad_a + noise.fill(np.empty_like(grad_a), per_replica)
        grad_b = grad_b + noise.fill(np.empty_like(grad_b), per_replica)
    return grad_a, grad_b


def simulate(model: TwoStageModel, outer: OuterConfig, inner: InnerConfig, *, trials: int, outer_steps: int,
             seed: int = 0, linear: bool = True) -> RoutingRun:
    """Monte Carlo of ``trials`` independent runs of ``outer_steps`` outer steps, linearised (``linear``)
    or nonlinear, vectorised over trials, replicas, microbatches and coordinates. The outer step is
    :func:`noloco.theory.outer.outer_step` per stage with :func:`noloco.theory.partitions.group_mean` over fresh
    random groups (per stage, or shared); routes are fresh uniform permutations per inner step and
    microbatch column."""
    trials = check_integer("trials", trials, "an integer >= 2", lambda v: v >= 2)
    outer_steps = check_integer("outer_steps", outer_steps, "an integer >= 1", lambda v: v >= 1)
    seed = check_seed("seed", seed)
    rng = np.random.default_rng(seed)
    noise = Noise(rng)
    N, n, B = outer.replicas, outer.group_size, model.microbatches
    rule = outer.rule()
    h = np.array(model.curvatures)
    lrs = [inner.lr * s for s in model.stage_lr]
    w = _Stages(model, trials, N, noise)
    r = model.radius
    record_outer = np.zeros((outer_steps + 1, 2, trials))
    record_inner = np.zeros((outer_steps, 2, trials))
    record_flat = np.zeros((outer_steps + 1, trials))

    def record_phi(t):
        record_outer[t] = [_spread(p) for p in w.phi]
        record_flat[t] = _spread((model.a_star * w.phi[0] - model.b_star * w.phi[1]) / r)

    record_phi(0)
    diverged_at = None
    for t in range(outer_steps):
        for _ in range(inner.steps):
            route = None
            if model.routing == "random":
                perm = random_permutations(rng, (trials, B), N)
                route = (perm, perm.argsort(axis=-1))
            grads = _gradients(w.theta[0], w.theta[1], route, model, inner, h, noise, linear)
            for stage in range(2):
                if lrs[stage]:
                    w.theta[stage] -= lrs[stage] * grads[stage]
        record_inner[t] = [_spread(x) for x in w.theta]
        groups = random_permutations(rng, (trials,), N)
        for stage in range(2):
            if stage == 1 and model.groups == "per-stage":
                groups = random_permutations(rng, (trials,), N)
            phi, delta = w.phi[stage], w.delta[stage]
            w.phi[stage], w.delta[stage] = outer_step(phi, delta, group_mean(phi, groups, n),
                                                      group_mean(w.theta[stage] - phi, groups, n), **rule)
            w.theta[stage] = w.phi[stage].copy()
        record_phi(t + 1)
        if diverged_at is None and not all(np.isfinite(p).all() for p in w.phi):
            diverged_at = t + 1
            break
    return RoutingRun(record_outer, record_inner, record_flat, diverged_at)


# --------------------------------------------------------------------------- comparison

#: a spread the theory says is exactly zero (n = N: every replica leaves the outer step with the group
#: mean) is compared by magnitude: the simulation's group means sum in a permuted order, ~1e-32
ROUNDING = 1e-24


@dataclass
class Row:
    """One quantity of one setting: theory (exact, over the same window), the stationary value, the
    simulation's mean and standard error over trials, and the z-score (None: no finite prediction)."""

    method: str
    routing: str
    quantity: str        # "outer" (phi after the outer step), "inner" (theta before it), "flat" (phi, chain)
    stage: int | None    # 0, 1; None for "flat" (a combination of both stages)
    theory: float
    stationary: float
    mc: float
    se: float
    z: float | None


def compare(model: TwoStageModel, outer: OuterConfig, inner: InnerConfig, *, trials: int, outer_steps: int,
            start: int, seed: int = 0, linear: bool = True, method: str = "") -> list[Row]:
    """Simulation against the exact theory: per stage, the outer and the inner spread, and the spread
    along the chains' flat direction, averaged over outer steps ``start..outer_steps``; the theory is
    its exact trajectory averaged over the same steps (so no burn-in is assumed)."""
    run = simulate(model, outer, inner, trials=trials, outer_steps=outer_steps, seed=seed, linear=linear)
    if run.diverged_at is not None:
        raise FloatingPointError(f"the simulation diverged at outer step {run.diverged_at}")
    exact = trajectory(model, outer, inner, outer_steps)
    fixed_point = stationary(model, outer, inner)
    measured = run.window(start)
    cases = [("outer", s, exact.outer[start:, s].mean(), fixed_point.outer[s], measured.outer[s]) for s in range(2)]
    cases += [("inner", s, exact.inner[start - 1:, s].mean(), fixed_point.inner[s], measured.inner[s])
              for s in range(2)]
    cases.append(("flat", None, exact.flat[start:].mean(), fixed_point.flat, measured.flat))
    rows = []
    for quantity, stage, theory, settled, (mc, se) in cases:
        if theory == 0:
            z = 0.0 if abs(mc) <= ROUNDING else math.inf
        else:
            z = stats.z_score(mc, se, float(theory))
        rows.append(Row(method, model.routing, quantity, stage, float(theory), float(settled), mc, se, z))
    return rows


#: the table's setting: the toolkit's model problem (unit curvature, SGD lr 0.01, noise 1) on a
#: balanced solution a* = b* = 1, N = 8, H = 50 (the paper's H)
TABLE_MODEL = TwoStageModel(a_star=1.0, b_star=1.0, curvatures=(1.0,) * 8)
TABLE_INNER = InnerConfig(lr=0.01, steps=50, noise=1.0)
TABLE_OUTER = OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=0.7)
TABLE_METHODS = ("noloco", "diloco", "local")
#: inner learning rates at which the flat direction's factor is listed (H = 50, h = 1)
FACTOR_LRS = (0.0002, 0.001, 0.01, 0.05)
#: the nonlinear scan: noise levels, and its run (NoLoCo's outer step, SGD lr 0.02, H 20)
SCAN_NOISE = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0)
SCAN_INNER = InnerConfig(lr=0.02, steps=20, noise=1.0)


def table(trials: int = 200, outer_steps: int = 80, start: int = 40, seed: int = 0) -> list[Row]:
    """Rows of ``python -m noloco.quadratic.routing``: noloco (the paper's outer step, n = 2), diloco (n = N)
    and local (no synchronisation, n = 1: routing only), each with fixed and random routing."""
    rows = []
    for k, method in enumerate(TABLE_METHODS):
        outer, inner = constrain(method, TABLE_OUTER, TABLE_INNER)
        for j, routing in enumerate(ROUTINGS):
            model = dataclasses.replace(TABLE_MODEL, routing=routing)
            rows += compare(model, outer, inner, trials=trials, outer_steps=outer_steps, start=start,
                            seed=seed + 2 * k + j, method=method)
    return rows


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4g}"


def format_table(rows: list[Row]) -> str:
    """The rows as a Markdown table, with the ratio random / fixed (theory over the window, and
    simulated) next to each random-routing row."""
    by_key = {(r.method, r.routing, r.quantity, r.stage): r for r in rows}
    lines = ["| method | quantity | stage | routing | theory (window) | simulated ± se | z | stationary "
             "| random/fixed theory | random/fixed simulated |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio_theory = ratio_mc = ""
        fixed = by_key.get((r.method, "fixed", r.quantity, r.stage))
        if r.routing == "random" and fixed is not None and fixed.theory > 0 and fixed.mc > ROUNDING:
            ratio_theory, ratio_mc = f"{r.theory / fixed.theory:.3f}", f"{r.mc / fixed.mc:.3f}"
        z = "—" if r.z is None else f"{r.z:+.2f}"
        stage = "1+2" if r.stage is None else r.stage + 1
        lines.append(f"| {r.method} | {r.quantity} | {stage} | {r.routing} | {_fmt(r.theory)} | "
                     f"{r.mc:.4g} ± {r.se:.2g} | {z} | {_fmt(r.stationary)} | {ratio_theory} | {ratio_mc} |")
    return "\n".join(lines)


def findings() -> list[tuple[str, float, float]]:
    """Theory-only lines for the table's setting: (what, fixed routing, random routing), spreads per
    coordinate of the outer weights; for the leading-order factor the random entry is the factor."""
    out = []
    for method in ("noloco", "local"):
        outer, inner = constrain(method, TABLE_OUTER, TABLE_INNER)
        shared = dataclasses.replace(TABLE_MODEL, groups="shared")
        fixed, routed = (stationary(dataclasses.replace(shared, routing=r), outer, inner) for r in ROUTINGS)
        out.append((f"{method}: flat direction, shared groups (exact)", fixed.flat, routed.flat))
        out.append((f"{method}: stiff direction, shared groups (exact)", fixed.stiff, routed.stiff))
        if method == "noloco":  # the factor against the stage's contraction per phase c = 1 - (1 - eta h)^H
            for lr in FACTOR_LRS:
                scaled = dataclasses.replace(inner, lr=lr)
                c = float(inner_sgd(lr, TABLE_MODEL.stage_curvatures(1.0)[0], inner.steps, 1.0)[0])
                out.append((f"{method}: flat direction, leading-order factor flat_factor at lr {lr:g} "
                            f"(c_stage {c:.3g})",
                            math.nan, flat_factor(shared, outer, scaled)))
        backprop = dataclasses.replace(TABLE_MODEL, output_noise=TABLE_INNER.noise)
        no_additive = dataclasses.replace(inner, noise=0.0)
        fixed, routed = (stationary(dataclasses.replace(backprop, routing=r), outer, no_additive) for r in ROUTINGS)
        out.append((f"{method}: per stage, backprop (output) noise only", float(fixed.outer[0]),
                    float(routed.outer[0])))
    return out


def format_findings() -> str:
    lines = ["| theory only | fixed | random | random/fixed |", "|---|---|---|---|"]
    for what, fixed, routed in findings():
        if math.isnan(fixed):
            lines.append(f"| {what} | — | — | {routed:.3f} |")
            continue
        ratio = 0.0 if math.isinf(fixed) else routed / fixed
        lines.append(f"| {what} | {_fmt(fixed)} | {_fmt(routed)} | {ratio:.3f} |")
    return "\n".join(lines)


def nonlinear_scan(trials: int = 150, outer_steps: int = 40, start: int = 20, seed: int = 1) -> list[tuple]:
    """The nonlinear model against the linearised theory as the noise grows (NoLoCo, per-stage groups):
    per (routing, noise) the stage-1 outer spread and the flat spread as (theory, mc, se, z)."""
    out = []
    for routing in ROUTINGS:
        model = dataclasses.replace(TABLE_MODEL, routing=routing)
        for noise in SCAN_NOISE:
            rows = compare(model, TABLE_OUTER, dataclasses.replace(SCAN_INNER, noise=noise), trials=trials,
                           outer_steps=outer_steps, start=start, seed=seed, linear=False)
            pick = [r for r in rows if (r.quantity, r.stage) in (("outer", 0), ("flat", None))]
            out.append((routing, noise, *[(r.theory, r.mc, r.se, r.z) for r in pick]))
    return out


def format_scan(scan) -> str:
    lines = ["| routing | noise | stage-1 spread, linear theory | nonlinear ± se | ratio (z) "
             "| flat, linear theory | nonlinear ± se | ratio (z) |", "|---|---|---|---|---|---|---|---|"]
    for routing, noise, *cells in scan:
        text = " | ".join(f"{t:.4g} | {mc:.4g} ± {se:.2g} | {mc / t:.3f} ({z:+.1f})" for t, mc, se, z in cells)
        lines.append(f"| {routing} | {noise:g} | {text} |")
    return "\n".join(lines)


def report() -> tuple[str, int]:
    """The tables of ``python -m noloco.quadratic.routing`` and its exit code (1 when a comparison misses by
    more than 4 standard errors)."""
    rows = table()
    lines = [f"two-stage deep-linear model, a* = b* = 1, h = 1, D = {len(TABLE_MODEL.curvatures)}, N = "
             f"{TABLE_OUTER.replicas}, SGD lr {TABLE_INNER.lr}, H {TABLE_INNER.steps}, noise {TABLE_INNER.noise}, "
             "per-stage groups; spreads per coordinate averaged over outer steps 40..80, 200 trials; "
             "n = N's zero outer spread is compared by magnitude (z 0: below 1e-24)",
             format_table(rows), "", format_findings(), "",
             f"nonlinear model against the linearised theory (NoLoCo, SGD lr {SCAN_INNER.lr}, H {SCAN_INNER.steps}, "
             "150 trials, outer steps 20..40; a* = b* = 1, so the spread is relative to a*^2):",
             format_scan(nonlinear_scan())]
    bad = [r for r in rows if not stats.holds(r.z, 4.0)]
    lines += [f"disagrees: {r.method} {r.routing} {r.quantity} stage {r.stage}: z = {r.z}" for r in bad]
    return "\n".join(lines), 1 if bad else 0


def main(argv=None) -> int:
    from noloco.infra.entry import OneLineParser, run

    prog = "python -m noloco.quadratic.routing"

    def work(args) -> int:
        text, code = report()
        print(text)
        return code

    return run(prog, OneLineParser(prog=prog, description=__doc__.split("\n\n")[0]), work, argv)


if __name__ == "__main__":
    raise SystemExit(main())
