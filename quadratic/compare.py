"""Simulation next to theory: what :mod:`theory` predicts for a :class:`SimConfig`, the
simulated values with standard errors, z-scores, and a cache of the results.

The theory is exact for inner SGD with additive noise on a quadratic without
heterogeneity, for any learning-rate schedule (each outer step's (c, s2) comes from that
phase's rates). For ridge regression it is the same quadratic with the data's Hessian;
for logistic regression it is linearised at the optimum. Minibatch noise enters as its
covariance at the optimum. Where it stops predicting is listed in ``scope``.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from quadratic.inner import learning_rates, phase_coefficients
from quadratic.simulator import SCHEMA_VERSION, SimConfig, simulate
from theory import numeric
from theory.atomic import atomic_write_text
from theory.conditions import analyse, finite_or_none
from theory.config import group_kappa
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
    H, steps = inner.steps, cfg.outer_steps
    lrs = learning_rates(cfg.schedule, inner.lr, steps * H, warmup=cfg.warmup,
                         decay_time=cfg.decay_time).reshape(steps, H)
    noise_var = noise_per_direction(inner.noise, eigvecs, noise_cov)
    c, s2 = zip(*(phase_coefficients(rates, eigvals, 1.0) for rates in lrs))
    c, s2 = np.array(c), np.array(s2) * noise_var               # (steps, d)
    kappa = group_kappa(outer.replicas, outer.group_size)
    M, Tm, f = numeric.transition(outer.alpha, outer.beta, outer.gamma, c, kappa, outer.momentum)
    share = 1.0 / outer.group_size - 1.0 / outer.replicas
    x = np.stack([optimum_offset @ eigvecs, np.zeros(len(eigvals))], -1)  # (d, 2): (y, delta)
    v = np.zeros((len(eigvals), 3))
    v[:, 0] = cfg.init_spread ** 2 * (1 - 1 / outer.replicas)
    means, spreads = [x[:, 0].copy()], [v[:, 0].sum()]
    for t in range(steps):
        x = np.einsum("dij,dj->di", M[t], x)
        v = np.einsum("dij,dj->di", Tm[t], v) + (s2[t] * share)[:, None] * f[t]
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


def _z(mc, se, theory):
    if theory is None or not np.isfinite(theory):
        return None
    if se <= 1e-12 * abs(theory):  # a deterministic quantity (e.g. DiLoCo): compare to rounding
        return 0.0 if np.isclose(mc, theory, rtol=1e-9, atol=1e-300) else float("inf")
    return float((mc - theory) / se)


def measure_decay(cfg: SimConfig, *, progress: bool = False) -> dict:
    """Variance decay per outer step: a noise-free run from independent initial offsets,
    per-step ratio of mean spreads between two steps (delta method for its SE), next to
    the exact ratio and the asymptotic decay factor of theory."""
    t1 = min(cfg.outer_steps // 4, 20)
    t2 = min(cfg.outer_steps, t1 + 40)
    quiet = dataclasses.replace(cfg, inner=dataclasses.replace(cfg.inner, noise=0.0), batch_size=0,
                                init_spread=1.0, start=0.0, outer_steps=t2, burn_in=None)
    run = simulate(quiet, progress=progress)
    if run.diverged_at is not None:
        return {"diverged_at": run.diverged_at}
    m1, m2 = run.spread.mean[t1], run.spread.mean[t2]
    if m1 <= 0 or m2 <= 0:
        return {"ratio_mc": 0.0, "ratio_se": 0.0, "steps": [t1, t2], "note": "spread is exactly zero"}
    obj = run.objective
    theory = exact(quiet, run.eigvals, run.eigvecs, obj.noise_cov(0), np.zeros(obj.dim))["spread"]
    k = t2 - t1
    ratio = (m2 / m1) ** (1 / k)
    # delta method on log(m2) - log(m1), with the per-trial covariance of the two spreads
    a, b = run.spread_trials[t1] / m1, run.spread_trials[t2] / m2
    rel = np.sqrt(np.var(b - a, ddof=1) / len(a))
    return {"ratio_mc": float(ratio), "ratio_se": float(ratio * rel / k), "steps": [t1, t2],
            "ratio_theory": float((theory[t2] / theory[t1]) ** (1 / k)), "note": DECAY_NOTE}


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
        "schema_version": SCHEMA_VERSION,
        "config": cfg.as_dict(),
        "effective": {"outer": dataclasses.asdict(outer), "inner": dataclasses.asdict(inner)},
        "hessian_eigenvalues": run.eigvals.tolist(),
        "scope": scope(cfg),
        "conditions": [dict(dataclasses.asdict(c), value=finite_or_none(c.value)) for c in analysis.conditions],
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
        "stationary_variance_theory": finite_or_none(closed["stationary_variance"]) if closed else None,
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
        mc, se = float(window.mean()), float(window.std(ddof=1) / np.sqrt(len(window)))
        expected = float(theory["spread"][cfg.window_start:].mean())
        summary.update(
            stationary_variance_mc=mc, stationary_variance_se=se,
            window=[cfg.window_start, cfg.outer_steps],
            # exact expectation of the windowed average: equals the stationary value once the
            # transient has died out, and stays exact for decaying schedules
            stationary_variance_window_theory=expected,
            z_score=_z(mc, se, expected),
        )
        # with differing optima a noise-free spread settles at a floor instead of decaying
        if decay and cfg.optimizer == "sgd" and not cfg.zeta and cfg.split == "shared":
            d = measure_decay(cfg)
            if "ratio_mc" in d and "ratio_theory" in d:
                d["z_score"] = _z(d["ratio_mc"], d["ratio_se"], d["ratio_theory"])
            result["decay"] = d
    result["summary"] = summary
    return result


def cached_compare(cfg: SimConfig, *, progress: bool = False, use_cache: bool = True) -> tuple[dict, bool]:
    """:func:`compare` through an on-disk cache keyed by the hash of ``cfg`` and the code.
    The entry is written atomically after the run, so an interrupted run leaves nothing."""
    path = numeric.cache_dir() / "simulate" / f"{cfg.key()}.json"
    if use_cache:
        try:
            return json.loads(path.read_text()), True
        except (OSError, ValueError):
            pass
    result = compare(cfg, progress=progress)
    try:
        atomic_write_text(path, json.dumps(result, default=_jsonable))
    except OSError:
        pass  # a read-only cache only costs the run next time
    return result, False


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
