"""Simulation next to theory: what :mod:`theory` predicts for a :class:`SimConfig`, the
simulated values with standard errors and z-scores (:mod:`theory.stats`), cached through
:func:`theory.io.cached`.

The theory is exact for inner SGD with additive noise on a quadratic without
heterogeneity, for any learning-rate schedule (each outer step's (c, s2) comes from that
phase's rates). For ridge regression it is the same quadratic with the data's Hessian;
for logistic regression it is linearised at the optimum. Minibatch noise enters as its
covariance at the optimum. Where it stops predicting is listed in ``scope``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from quadratic.inner import phase_coefficients
from quadratic.simulator import SimConfig, simulate
from theory import io, numeric, stats
from theory.conditions import analyse
from theory.spectrum import Spectrum

#: the measured decay ratio spans at most 40 steps after a 20-step settling, so the
#: noise-free spread stays far from underflow
DECAY_NOTE = "noise-free run from independent initial offsets; per-step ratio of mean spreads between two steps"


def scope(cfg: SimConfig) -> list[str]:
    """Plain statements of where the quadratic theory does not hold exactly for ``cfg``."""
    notes = []
    if cfg.optimizer != "sgd":
        notes.append(f"inner optimizer {cfg.optimizer}: the theory models inner SGD only; the SGD "
                     "prediction at the same learning rate is shown for reference, not as a prediction")
    if cfg.zeta or cfg.split not in ("shared",):
        notes.append("heterogeneous replicas (zeta > 0 or a data split): the theory has no term for "
                     "differing optima; the spread it predicts is a lower bound, not a prediction")
    if cfg.objective == "breast-cancer":
        notes.append("logistic loss: the theory is linearised at the optimum; it predicts the spread only "
                     "while replicas stay where the Hessian is nearly constant (start near the optimum; "
                     "compare the spread to the Hessian's scale)")
    if cfg.batch_size:
        notes.append("minibatch noise: taken at its covariance at the optimum (it varies with the weights "
                     "away from it)")
    return notes


def noise_per_direction(sigma, eigvecs, noise_cov):
    """Gradient-noise variance along each eigen-direction: additive sigma^2 per coordinate
    plus the minibatch covariance projected on the direction."""
    return sigma ** 2 + np.einsum("ik,ij,jk->k", eigvecs, noise_cov, eigvecs)


def exact(cfg: SimConfig, eigvals, eigvecs, noise_cov, optimum_offset) -> dict:
    """Exact expected trajectories of the linear model: mean distance per eigen-direction
    and the total spread, one outer step at a time with that step's (c_t, s2_t)."""
    outer, inner = cfg.effective()
    noise_var = noise_per_direction(inner.noise, eigvecs, noise_cov)
    c, s2 = zip(*(phase_coefficients(rates, eigvals, 1.0) for rates in cfg.learning_rates()))
    c, s2 = np.array(c), np.array(s2) * noise_var               # (steps, d)
    M, T, f = numeric.transition(outer.alpha, outer.beta, outer.gamma, c, outer.kappa, outer.momentum)
    x = np.stack([optimum_offset @ eigvecs, np.zeros(len(eigvals))], -1)  # (d, 2): (y, delta)
    v = np.zeros((len(eigvals), 3))
    v[:, 0] = cfg.init_spread ** 2 * (1 - 1 / outer.replicas)
    means, spreads = [x[:, 0].copy()], [v[:, 0].sum()]
    for t in range(cfg.outer_steps):
        x = np.einsum("dij,dj->di", M[t], x)
        v = numeric.second_moment_step(T[t], v, s2[t], outer.replicas, outer.group_size, f[t])
        means.append(x[:, 0].copy())
        spreads.append(v[:, 0].sum())
    return {"mean_distance": np.array(means), "spread": np.array(spreads), "c": c, "s2": s2}


def stationary(cfg: SimConfig, eigvals, noise_var) -> dict:
    """Closed forms for a constant learning rate: stationary spread, decay factor, mean rate."""
    outer, inner = cfg.effective()
    c, s2 = numeric.inner_sgd(inner.lr, eigvals, inner.steps, 1.0)
    rule = (outer.alpha, outer.beta, outer.gamma)
    variance = numeric.stationary_variance(*rule, c, s2 * noise_var, outer.replicas, outer.group_size,
                                           outer.momentum)
    return {
        "stationary_variance": float(np.sum(variance)),
        "decay_factor": float(np.max(numeric.variance_decay_factor(*rule, c, outer.kappa, outer.momentum))),
        "mean_spectral_radius": float(np.max(numeric.mean_spectral_radius(*rule, c, outer.momentum))),
    }


def measure_decay(cfg: SimConfig, *, progress: bool = False) -> dict:
    """Variance decay per outer step: a noise-free run from independent initial offsets,
    per-step ratio of mean spreads between two steps (:func:`theory.stats.decay_ratio`),
    next to the exact ratio and the asymptotic decay factor of theory."""
    t1 = min(cfg.outer_steps // 4, 20)
    t2 = min(cfg.outer_steps, t1 + 40)
    quiet = dataclasses.replace(cfg, inner=dataclasses.replace(cfg.inner, noise=0.0), batch_size=0,
                                init_spread=1.0, start=0.0, outer_steps=t2, burn_in=None)
    run = simulate(quiet, progress=progress)
    if run.diverged_at is not None:
        return {"diverged_at": run.diverged_at}
    early, late = run.spread_trials[t1], run.spread_trials[t2]
    if not (early.mean() > 0 and late.mean() > 0):
        return {"ratio_mc": 0.0, "ratio_se": 0.0, "steps": [t1, t2], "note": "spread is exactly zero"}
    obj = run.objective
    theory = exact(quiet, run.eigvals, run.eigvecs, obj.noise_cov(0), np.zeros(obj.dim))["spread"]
    ratio, se = stats.decay_ratio(early, late, t2 - t1)
    expected = float((theory[t2] / theory[t1]) ** (1 / (t2 - t1)))
    return {"ratio_mc": ratio, "ratio_se": se, "steps": [t1, t2], "ratio_theory": expected,
            "z_score": stats.z_score(ratio, se, expected), "note": DECAY_NOTE}


def compare(cfg: SimConfig, *, progress: bool = False, decay: bool = True) -> dict:
    """Simulate ``cfg`` and put every simulated quantity next to the theory (JSON-ready)."""
    run = simulate(cfg, progress=progress)
    outer, inner = cfg.effective()
    obj = run.objective
    noise_cov = obj.noise_cov(cfg.batch_size)
    noise_var = noise_per_direction(inner.noise, run.eigvecs, noise_cov)
    spectrum = Spectrum(tuple(np.maximum(run.eigvals, 1e-300)))
    analysis = analyse(outer, inner, spectrum)
    theory = exact(cfg, run.eigvals, run.eigvecs, noise_cov, np.full(obj.dim, cfg.start))
    closed = stationary(cfg, run.eigvals, noise_var) if cfg.schedule == "constant" else {}
    steps = run.steps_done if run.diverged_at is None else run.diverged_at - 1

    result = {
        "schema_version": io.SCHEMA_VERSION,
        "config": cfg.as_dict(),
        "effective": {"outer": dataclasses.asdict(outer), "inner": dataclasses.asdict(inner)},
        "hessian_eigenvalues": run.eigvals.tolist(),
        "scope": scope(cfg),
        "conditions": analysis.conditions,
        "diverged": None,
        "trajectories": {
            "step": list(range(steps + 1)),
            "mean_distance": dict(run.mean_distance.as_dict(), theory=theory["mean_distance"][: steps + 1].tolist()),
            "spread": dict(run.spread.as_dict(), theory=theory["spread"][: steps + 1].tolist()),
            "loss_at_mean": run.loss_at_mean.as_dict(),
            "loss_replicas": run.loss_replicas.as_dict(),
        },
    }
    summary = {
        "stationary_variance_theory": closed.get("stationary_variance"),
        "variance_decay_factor_theory": closed.get("decay_factor"),
        "mean_spectral_radius_theory": closed.get("mean_spectral_radius"),
        "final_loss_at_mean": float(run.loss_at_mean.mean[-1]),
        "final_loss_at_mean_se": float(run.loss_at_mean.se[-1]),
        "final_loss_replicas": float(run.loss_replicas.mean[-1]),
        "inner_steps_total": steps * inner.steps,
    }
    if run.diverged_at is not None:
        failing = [c.name for c in analysis.conditions if not c.holds]
        result["diverged"] = {"step": run.diverged_at, "reason": run.divergence_reason,
                              "violated_conditions": failing}
        summary.update(stationary_variance_mc=None, stationary_variance_se=None, z_score=None)
    else:
        window = run.window_spread
        mc, se = stats.mean_se(window)
        expected = float(theory["spread"][cfg.window_start:].mean())
        summary.update(
            stationary_variance_mc=mc, stationary_variance_se=se,
            window=[cfg.window_start, cfg.outer_steps],
            # exact expectation of the windowed average: equals the stationary value once the
            # transient has died out, and stays exact for decaying schedules
            stationary_variance_window_theory=expected,
            z_score=stats.z_score(mc, se, expected),
        )
        # with differing optima a noise-free spread settles at a floor instead of decaying
        if decay and cfg.optimizer == "sgd" and not cfg.zeta and cfg.split == "shared":
            result["decay"] = measure_decay(cfg)
    result["summary"] = summary
    return io.jsonable(result)  # non-finite values as null with the reason beside them


def _is_result(data) -> bool:
    return isinstance(data, dict) and isinstance(data.get("summary"), dict) and isinstance(data.get("trajectories"), dict)


def cached_compare(cfg: SimConfig, *, progress: bool = False, use_cache: bool = True, refresh: bool = False,
                   directory=None) -> tuple[dict, bool]:
    """``(result, from_cache)``: :func:`compare` through :func:`theory.io.cached` (namespace
    ``simulate``), keyed by ``cfg`` and the project's sources. ``refresh`` recomputes and
    stores; ``use_cache=False`` neither reads nor writes; an interrupted run leaves nothing."""
    return io.cached("simulate", cfg.as_dict(), lambda: compare(cfg, progress=progress), directory=directory,
                     refresh=refresh, use_cache=use_cache, valid=_is_result)
