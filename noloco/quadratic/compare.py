"""Simulation next to theory: what :mod:`theory` predicts for a :class:`SimConfig`, the
simulated values with standard errors and z-scores (:mod:`noloco.theory.stats`), cached through
:func:`noloco.infra.cache.cached`.

The theory is exact for inner SGD with additive noise on a quadratic without
heterogeneity, for any learning-rate schedule (each outer step's (c, s2) comes from that
phase's rates). For ridge regression it is the same quadratic with the data's Hessian;
for logistic regression it is linearised at the optimum. Minibatch noise enters as its
covariance at the optimum. Where it stops predicting is listed in ``scope``.
"""

from __future__ import annotations

import dataclasses
import io
import sys
import warnings
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from noloco.quadratic.inner import phase_coefficients
from noloco.quadratic.sim_config import SimConfig
from noloco.quadratic import simulator
from noloco.infra.cache import cached
from noloco.infra.files import SCHEMA_VERSION, jsonable
from noloco.infra.record import JsonRecord
from noloco.theory import numeric, stats
from noloco.theory.conditions import analyse
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.theory.spectrum import Spectrum

#: the measured decay ratio spans at most 40 steps after a 20-step settling, so the
#: noise-free spread stays far from underflow
DECAY_NOTE = "noise-free run from independent initial offsets; per-step ratio of mean spreads between two steps"


def inner_model(cfg: SimConfig):
    """The :class:`noloco.theory.exchangeable.InnerModel` that predicts ``cfg`` beyond i.i.d. SGD noise
    (inner momentum or Adam with carried state, offset optima), or None where it does not apply:
    only on the quadratic, constant learning rate, additive noise; Adam's per-coordinate
    preconditioner needs an unrotated eigenbasis; optima offsets with inner SGD only."""
    from noloco.theory.exchangeable import InnerModel

    if cfg.objective != "quadratic" or cfg.schedule != "constant" or cfg.batch_size or (cfg.optimizer == "sgd"
                                                                                       and not cfg.zeta):
        return None
    if (cfg.optimizer == "adam" and (cfg.rotate or not cfg.inner.noise)) or (cfg.optimizer != "sgd" and cfg.zeta):
        return None
    return InnerModel(cfg.optimizer, cfg.inner_momentum, 0.0, cfg.zeta)


def scope(cfg: SimConfig) -> list[str]:
    """Plain statements of where the quadratic theory does not hold exactly for ``cfg``."""
    notes = []
    model = inner_model(cfg)
    if model is not None:
        notes.append(f"inner {cfg.optimizer}{' with optima offsets zeta' if cfg.zeta else ''}: predicted by the "
                     "exchangeable model of noloco.theory.exchangeable (carried inner state"
                     f"{', Adam linearised with v = sigma^2: near the optimum, where the noise dominates the gradient' if cfg.optimizer == 'adam' else ''}"
                     f"{', drift c zeta per replica' if cfg.zeta else ''})")
    elif cfg.optimizer != "sgd":
        notes.append(f"inner optimizer {cfg.optimizer}: outside the carried-state model here (data objective, "
                     "schedule, minibatch or rotated Adam); the SGD prediction at the same learning rate is shown "
                     "for reference, not as a prediction")
    if (cfg.zeta and model is None) or cfg.split not in ("shared",):
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
    plus the minibatch covariance projected on the direction (``noise_cov`` None: none, and
    the result is the scalar sigma^2)."""
    with np.errstate(over="ignore"):  # a noise of 1e300 overflows to inf: reported, not raised
        variance = np.square(np.float64(sigma))
    if noise_cov is None:
        return variance
    return variance + np.einsum("ik,ij,jk->k", eigvecs, noise_cov, eigvecs)


@dataclass(frozen=True)
class Expected:
    """The theory's expected trajectories: the mean distance per step and direction, the total spread per step."""

    mean_distance: np.ndarray
    spread: np.ndarray


@dataclass(frozen=True)
class ClosedForms:
    """The closed forms for a constant learning rate (None where the schedule has none)."""

    stationary_variance: Optional[float] = None
    decay_factor: Optional[float] = None
    mean_spectral_radius: Optional[float] = None


def exact(cfg: SimConfig, eigvals, noise_var, start, directions=None) -> Expected:
    """Exact expected trajectories of the linear model, one outer step at a time with that
    step's (c_t, s2_t): the mean distance of the eigen-directions ``directions`` (default all)
    from ``start`` (the initial distance per direction) and the total spread over all of them.
    Memory is per direction, not per direction and step (a constant schedule's transition is
    computed once)."""
    outer, inner = cfg.effective()
    directions = np.arange(len(eigvals)) if directions is None else directions
    lrs = cfg.learning_rates()
    constant = bool(np.all(lrs == lrs[0]))
    x = np.stack([np.asarray(start, dtype=float)[directions], np.zeros(len(directions))], -1)  # (y, delta)
    v = np.zeros((len(eigvals), 3))
    v[:, 0] = cfg.init_spread ** 2 * (1 - 1 / outer.replicas)
    means, spreads = [x[:, 0].copy()], [v[:, 0].sum()]
    for t in range(cfg.outer_steps):
        if t == 0 or not constant:
            c, s2 = phase_coefficients(lrs[t], eigvals, 1.0)
            M, T, f = numeric.transition(outer.alpha, outer.beta, outer.gamma, c, outer.kappa, outer.momentum)
            M, s2 = M[directions], s2 * noise_var
        x = np.einsum("dij,dj->di", M, x)
        v = numeric.second_moment_step(T, v, s2, outer.replicas, outer.group_size, f)
        means.append(x[:, 0].copy())
        spreads.append(v[:, 0].sum())
    return Expected(mean_distance=np.array(means), spread=np.array(spreads))


def stationary(cfg: SimConfig, eigvals, noise_var) -> ClosedForms:
    """Closed forms for a constant learning rate: stationary spread, decay factor, mean rate."""
    outer, inner = cfg.effective()
    c, s2 = numeric.inner_sgd(inner.lr, eigvals, inner.steps, 1.0)
    rule = (outer.alpha, outer.beta, outer.gamma)
    variance = numeric.stationary_variance(*rule, c, s2 * noise_var, outer.replicas, outer.group_size,
                                           outer.momentum)
    return ClosedForms(
        stationary_variance=float(np.sum(variance)),
        decay_factor=float(np.max(numeric.variance_decay_factor(*rule, c, outer.kappa, outer.momentum))),
        mean_spectral_radius=float(np.max(numeric.mean_spectral_radius(*rule, c, outer.momentum))),
    )


def extended(cfg: SimConfig, model, analysis, eigvals, noise_var, start,
             directions) -> tuple[Expected, ClosedForms]:
    """Expected trajectories and closed forms of the carried-state / drift model, per direction
    (replicas identical at the start, buffers at zero), summed like :func:`exact`."""
    from noloco.theory import exchangeable as X

    outer, inner = cfg.effective()
    steps = cfg.outer_steps
    noise = np.sqrt(np.broadcast_to(noise_var, eigvals.shape))
    phases = [model.phase(inner.lr, float(lam), inner.steps, float(sigma)) for lam, sigma in zip(eigvals, noise)]
    spread = sum(X.spread_trajectory(outer, steps=steps, drift_var=model.drift_var(phase),
                                     spread0=cfg.init_spread ** 2, phase=phase, stationary_state=False)
                 for phase in phases)
    means = np.stack([X.mean_trajectory(outer, phases[k], float(start[k]), steps) for k in directions], axis=-1)
    closed = ClosedForms(stationary_variance=analysis.stationary_variance, decay_factor=analysis.variance_decay_factor,
                         mean_spectral_radius=analysis.mean_spectral_radius)
    return Expected(mean_distance=means, spread=spread), closed


@dataclass(frozen=True)
class Series(JsonRecord):
    """A simulated trajectory: the Monte Carlo mean and its standard error per step, and (for the mean distance
    and the spread) the theory's expectation; ``mean_distance`` also names its ``directions``."""

    OPTIONAL_KEYS = ("theory", "directions")

    mc: list
    se: list
    theory: Optional[list] = None
    directions: Optional[list] = None


@dataclass(frozen=True)
class Trajectories(JsonRecord):
    NESTED = {"mean_distance": Series, "spread": Series, "loss_at_mean": Series, "loss_replicas": Series}

    step: list
    mean_distance: Series
    spread: Series
    loss_at_mean: Series
    loss_replicas: Series


@dataclass(frozen=True)
class Effective(JsonRecord):
    """The setting after the method's constraints: the outer step and the inner phase as their fields."""

    outer: dict
    inner: dict
    inner_mode: str
    dtype: str

    def configs(self) -> tuple[OuterConfig, InnerConfig]:
        """The outer and inner configs these fields were written from."""
        return OuterConfig(**self.outer), InnerConfig(**self.inner)


@dataclass(frozen=True)
class Divergence(JsonRecord):
    step: int
    reason: str
    violated_conditions: list


@dataclass(frozen=True)
class DecayCheck(JsonRecord):
    """The variance decay per outer step: simulated (``ratio_mc`` +- ``ratio_se``) over ``steps`` and the exact
    ratio; only ``diverged_at`` when the noise-free run diverged; ``note`` says what is compared."""

    OPTIONAL_KEYS = ("diverged_at", "ratio_mc", "ratio_se", "steps", "ratio_theory", "z_score", "note")

    diverged_at: Optional[int] = None
    ratio_mc: Optional[float] = None
    ratio_se: Optional[float] = None
    steps: Optional[list] = None
    ratio_theory: Optional[float] = None
    z_score: Optional[float] = None
    note: Optional[str] = None


@dataclass(frozen=True)
class Summary(JsonRecord):
    """The comparison's numbers: the stationary spread simulated (+- se, over ``window``) and its theory (the
    window's exact expectation and the closed form), the decay factor and mean rate of theory, the final loss.
    A diverged run has no window and None for the simulated spread."""

    OPTIONAL_KEYS = ("window", "stationary_variance_window_theory")

    stationary_variance_theory: Optional[float]
    variance_decay_factor_theory: Optional[float]
    mean_spectral_radius_theory: Optional[float]
    final_loss_at_mean: float
    final_loss_at_mean_se: float
    final_loss_replicas: float
    inner_steps_total: int
    stationary_variance_mc: Optional[float] = None
    stationary_variance_se: Optional[float] = None
    window: Optional[list] = None
    stationary_variance_window_theory: Optional[float] = None
    z_score: Optional[float] = None


@dataclass(frozen=True)
class SimulateReport(JsonRecord):
    """What ``noloco simulate --json`` prints: :func:`compare`'s result (``Simulation.result`` holds its JSON)."""

    NESTED = {"effective": Effective, "diverged": Divergence, "trajectories": Trajectories, "decay": DecayCheck,
              "summary": Summary}
    OPTIONAL_KEYS = ("decay",)

    schema_version: int
    config: dict
    effective: Effective
    hessian_eigenvalues: list
    scope: list
    conditions: list
    diverged: Optional[Divergence]
    trajectories: Trajectories
    decay: Optional[DecayCheck] = field(default=None, kw_only=True)  # before the summary in the JSON
    summary: Summary


def measure_decay(cfg: SimConfig, *, progress: bool = False) -> DecayCheck:
    """Variance decay per outer step: a noise-free run from independent initial offsets,
    per-step ratio of mean spreads between two steps (:func:`noloco.theory.stats.decay_ratio`),
    next to the exact ratio and the asymptotic decay factor of theory."""
    t1 = min(cfg.outer_steps // 4, 20)
    t2 = min(cfg.outer_steps, t1 + 40)
    quiet = dataclasses.replace(cfg, inner=dataclasses.replace(cfg.inner, noise=0.0), batch_size=0,
                                init_spread=1.0, start=0.0, outer_steps=t2, burn_in=None)
    run = simulator.simulate(quiet, progress=progress, keep_spread=(t1, t2))
    if run.diverged_at is not None:
        return DecayCheck(diverged_at=run.diverged_at)
    early, late = run.spread_trials[t1], run.spread_trials[t2]
    if not (early.mean() > 0 and late.mean() > 0):
        return DecayCheck(ratio_mc=0.0, ratio_se=0.0, steps=[t1, t2], note="spread is exactly zero")
    theory = exact(quiet, run.eigvals, 0.0, np.zeros(run.eigvals.size), np.arange(0)).spread
    ratio, se = stats.decay_ratio(early, late, t2 - t1)
    expected = float((theory[t2] / theory[t1]) ** (1 / (t2 - t1)))
    return DecayCheck(ratio_mc=ratio, ratio_se=se, steps=[t1, t2], ratio_theory=expected,
                      z_score=stats.z_score(ratio, se, expected), note=DECAY_NOTE)


def compare(cfg: SimConfig, *, progress: bool = False, decay: bool = True) -> dict:
    """Simulate ``cfg`` and put every simulated quantity next to the theory (JSON-ready)."""
    run = simulator.simulate(cfg, progress=progress)
    outer, inner = cfg.effective()
    obj = run.objective
    noise_var = noise_per_direction(inner.noise, run.eigvecs, obj.noise_cov(cfg.batch_size))
    spectrum = Spectrum(tuple(np.maximum(run.eigvals, 1e-300)))
    model = inner_model(cfg)
    analysis = analyse(outer, inner, spectrum, model)
    start = (obj.start_in_eigenbasis(cfg.start) if cfg.objective == "quadratic"
             else np.full(obj.dim, cfg.start) @ run.eigvecs)
    if model is not None:
        theory, closed = extended(cfg, model, analysis, run.eigvals, noise_var, start, run.directions)
    else:
        theory = exact(cfg, run.eigvals, noise_var, start, run.directions)
        closed = stationary(cfg, run.eigvals, noise_var) if cfg.schedule == "constant" else ClosedForms()
    steps = run.steps_done if run.diverged_at is None else run.diverged_at - 1

    series = lambda stat, **more: Series(mc=stat.mean.tolist(), se=stat.se.tolist(), **more)  # noqa: E731
    trajectories = Trajectories(
        step=list(range(steps + 1)),
        mean_distance=series(run.mean_distance, theory=theory.mean_distance[: steps + 1].tolist(),
                             directions=run.directions.tolist()),
        spread=series(run.spread, theory=theory.spread[: steps + 1].tolist()),
        loss_at_mean=series(run.loss_at_mean), loss_replicas=series(run.loss_replicas))
    summary = Summary(
        stationary_variance_theory=closed.stationary_variance,
        variance_decay_factor_theory=closed.decay_factor,
        mean_spectral_radius_theory=closed.mean_spectral_radius,
        final_loss_at_mean=float(run.loss_at_mean.mean[-1]), final_loss_at_mean_se=float(run.loss_at_mean.se[-1]),
        final_loss_replicas=float(run.loss_replicas.mean[-1]), inner_steps_total=steps * inner.steps)
    diverged = check = None
    if run.diverged_at is not None:
        diverged = Divergence(step=run.diverged_at, reason=run.divergence_reason,
                              violated_conditions=[c.name for c in analysis.conditions if not c.holds])
    else:
        mc, se = stats.mean_se(run.window_spread)
        expected = float(theory.spread[cfg.window_start:].mean())
        # the window's exact expectation: the stationary value once the transient has died out, and exact for
        # decaying schedules
        summary = dataclasses.replace(summary, stationary_variance_mc=mc, stationary_variance_se=se,
                                      window=[cfg.window_start, cfg.outer_steps],
                                      stationary_variance_window_theory=expected,
                                      z_score=stats.z_score(mc, se, expected))
        # with differing optima a noise-free spread settles at a floor instead of decaying
        if decay and cfg.optimizer == "sgd" and not cfg.zeta and cfg.split == "shared":
            check = measure_decay(cfg)
    report = SimulateReport(
        schema_version=SCHEMA_VERSION, config=cfg.as_dict(),
        effective=Effective(outer=dataclasses.asdict(outer), inner=dataclasses.asdict(inner),
                            inner_mode=cfg.inner_law, dtype=cfg.dtype),
        hessian_eigenvalues=run.eigvals.tolist(), scope=scope(cfg), conditions=analysis.conditions,
        diverged=diverged, trajectories=trajectories, decay=check, summary=summary)
    return jsonable(report.to_json())  # non-finite values as null with the reason beside them


def _is_result(data) -> bool:
    if not isinstance(data, dict):
        return False
    parts = data.get("summary"), data.get("trajectories")  # edge: a cached entry's JSON, before format_text reads it
    return all(isinstance(part, dict) for part in parts)


def _readable(cfg: SimConfig):
    """The shape check of a cached comparison: it has the keys and types :func:`format_text` reads (which raises
    a KeyError or a TypeError on any other shape: the cache then rebuilds the entry instead of the command failing)."""
    return lambda data: _is_result(data) and isinstance(format_text(data, cfg), str)


def cached_compare(cfg: SimConfig, *, progress: bool = False, use_cache: bool = True, refresh: bool = False,
                   directory=None) -> tuple[dict, bool]:
    """``(result, from_cache)``: :func:`compare` through :func:`noloco.infra.cache.cached` (namespace
    ``simulate``), keyed by ``cfg`` and the project's sources. ``refresh`` recomputes and
    stores; ``use_cache=False`` neither reads nor writes; an interrupted run leaves nothing."""
    return cached("simulate", cfg.as_dict(), lambda: compare(cfg, progress=progress), directory=directory,
                     refresh=refresh, use_cache=use_cache, valid=_readable(cfg))


@dataclass(frozen=True)
class Simulation:
    """One simulated setting next to the theory, as :func:`simulate` returns it.

    Attributes:
        config: the validated :class:`noloco.SimConfig` that ran.
        result: the comparison as plain data (``noloco simulate --json`` prints it): ``summary`` (stationary
            spread simulated, its standard error, the theory, the z-score; the final loss), ``trajectories``,
            ``scope`` (where the theory stops predicting), ``effective`` (the setting after the method's
            constraints), ``diverged`` (None, or the outer step and the reason).
        text: the table ``noloco simulate`` prints.
        cached: whether the result came from the cache.

    Returns:
        Made by :func:`simulate` (frozen); ``diverged`` is ``result["diverged"]``.

    Raises:
        Nothing: it holds what :func:`simulate` computed.

    Examples:
        >>> import noloco
        >>> _, outer, inner = noloco.resolve("paper", replicas=4, steps=5)
        >>> sim = noloco.simulate("noloco", outer, inner, noloco.Spectrum((1.0,)), trials=4, outer_steps=10,
        ...                       progress=False, use_cache=False)
        >>> isinstance(sim, noloco.Simulation), sim.cached, sim.text.splitlines()[0][:31]
        (True, False, 'noloco on quadratic: N=4 n=2 al')
    """

    config: SimConfig
    result: dict
    text: str
    cached: bool

    @property
    def diverged(self) -> dict | None:
        """None, or where and why the run diverged (``step``, ``reason``, ``violated_conditions``)."""
        diverged = SimulateReport.from_json(self.result).diverged
        return None if diverged is None else diverged.to_json()


def simulate(method: str, outer, inner, spectrum, *, objective: str = "quadratic", rotate: bool = False,
             trials: int = 200, outer_steps: int = 200, inner_mode: str = "auto", max_memory=None,
             max_time=None, progress: bool | None = None, use_cache: bool = True,
             optimizer: str = SimConfig.optimizer, zeta: float = SimConfig.zeta, split: str = SimConfig.split,
             batch_size: int = SimConfig.batch_size, **fields) -> Simulation:
    """``noloco simulate`` as a library: a setting run by Monte Carlo with real inner steps, next to the theory.

    ``trials`` independent runs of N replicas for ``outer_steps`` outer steps, each with its own groups and
    noise, so every simulated mean has an honest standard error; the theory's prediction
    (:func:`noloco.analyse`) beside it, with the z-score (simulated - theory) / se. The memory and time are
    checked against their budgets before the spectrum is materialised (a refusal costs nothing). The result
    is cached under a hash of the whole configuration and the project's sources.

    Args:
        method: ``"noloco"``, ``"diloco"``, ``"local"`` or ``"ddp"``; its constraints apply.
        outer: the :class:`noloco.OuterConfig`.
        inner: the :class:`noloco.InnerConfig` (inner SGD lr, H, gradient noise).
        spectrum: the quadratic's curvatures (:class:`noloco.Spectrum`), or None for a data objective.
        objective: ``"quadratic"`` or a convex problem on packaged data (``noloco simulate --help``).
        rotate: a random rotation of the quadratic's eigenbasis.
        trials: independent trials (at least 2).
        outer_steps: outer steps per trial.
        inner_mode: ``"auto"``, ``"exact"`` or ``"explicit"`` (how the inner phase is simulated).
        max_memory: memory budget (bytes or a text such as ``"2G"``; None: half the memory available).
        max_time: time budget in seconds (None: none).
        progress: a bar on a terminal, a line a minute in a log (None: on).
        use_cache: read and write the cache.
        optimizer, zeta, split, batch_size: the :class:`noloco.SimConfig` fields the time and memory
            estimates read, named here so they are read before the configuration is built.
        **fields: the other :class:`noloco.SimConfig` fields (``seed``, ``split``, ``batch_size``, ...).

    Returns:
        A :class:`Simulation`: the config, the result as data, the printed table, whether it was cached.

    Raises:
        ConfigError: a value out of range or a conflict with the method (exit 2 on the command line).
        BudgetError: the estimated memory is above ``max_memory`` (a ``MemoryError``, exit 3).
        TimeBudgetError: the estimated time is above ``max_time`` (exit 3).

    Examples:
        >>> import noloco
        >>> _, outer, inner = noloco.resolve("paper", replicas=4, steps=5)
        >>> sim = noloco.simulate("noloco", outer, inner, noloco.Spectrum((1.0,)), trials=8, outer_steps=20,
        ...                       progress=False, use_cache=False)
        >>> sim.diverged is None, sim.config.trials, sorted(sim.result["summary"])[:2]
        (True, 8, ['final_loss_at_mean', 'final_loss_at_mean_se'])
    """
    from noloco.infra import budget
    from noloco.infra.checks import check_choice, check_flag, check_integer
    from noloco.quadratic.sim_costs import memory_estimate, time_estimate
    from noloco.theory.conditions import check_arguments
    from noloco.theory.methods import METHODS, constrain

    check_choice("method", method, tuple(METHODS))
    check_flag("use_cache", use_cache)  # "no" is truthy: the cache would be read
    check_arguments(outer, inner, spectrum, spectrum_optional=True)

    count = 1 if spectrum is None else spectrum.count
    fixed_outer, fixed_inner = constrain(method, outer, inner)
    N, H = fixed_outer.replicas, fixed_inner.steps
    # named here: the estimates below would fail on trials='4' with a TypeError before SimConfig sees it
    rows = check_integer("trials", trials, "an integer >= 2", lambda v: v >= 2)
    steps = check_integer("outer_steps", outer_steps, "an integer >= 1", lambda v: v >= 1)
    eigenbasis = (not rotate and objective == "quadratic") or inner_mode == "exact"
    size = f"{count} direction(s) x {rows} trials x {N} replicas x {steps} outer steps"
    batch = batch_size if isinstance(batch_size, int) and batch_size > 0 else 0  # SimConfig names a bad value
    budget.require(memory_estimate(count, rows, N, steps, inner_steps=inner.steps, objective=objective,
                                   rotate=rotate, eigenbasis=eigenbasis, batch_size=batch),
                   budget.resolve(max_memory),
                   f"simulate with {size}" + (f" x {batch:,} rows a minibatch" if batch else ""),
                   "fewer --trials, --outer-steps or directions" + (" or a smaller --batch-size" if batch else ""))
    sgd = optimizer == "sgd"
    exact = objective == "quadratic" and sgd and inner_mode != "explicit"
    decay = sgd and not zeta and split == "shared"
    estimate = io.StringIO()  # its line is printed once the configuration is valid: a refusal stays one line
    budget.require_time(time_estimate(count, rows, N, steps, inner_steps=H, objective=objective, rotate=rotate,
                                      exact=exact, decay=decay),
                        max_time, f"simulate with {size}", "fewer --trials, --outer-steps or directions",
                        "at docs/performance.md's costs per replica step, idle machine", stream=estimate)
    cfg = SimConfig(outer=outer, inner=inner, objective=objective, rotate=rotate, method=method, trials=trials,
                    outer_steps=outer_steps, inner_mode=inner_mode,
                    curvatures=None if spectrum is None else spectrum.values(), optimizer=optimizer, zeta=zeta,
                    split=split, batch_size=batch_size, **fields)
    print(estimate.getvalue(), end="", file=sys.stderr, flush=True)
    # progress: a bar on a terminal, a line a minute in a log (noloco.infra.progress)
    result, hit = cached_compare(cfg, progress=True if progress is None else progress, use_cache=use_cache)
    return Simulation(cfg, result, format_text(result, cfg, hit), hit)


def simulate_setting(*args, **kwargs) -> tuple[dict, str]:
    """Deprecated: :func:`simulate`, whose typed result holds ``(result, text)`` as ``.result`` and ``.text``."""
    warnings.warn("noloco.simulate_setting is deprecated; use noloco.simulate, which returns a Simulation "
                  "(.result, .text)", DeprecationWarning, stacklevel=2)
    sim = simulate(*args, **kwargs)
    return sim.result, sim.text


def _fmt(x):
    return "-" if x is None else f"{x:.6g}"


def format_text(result: dict, cfg: SimConfig, hit: bool = False) -> str:
    """The table ``noloco simulate`` prints: simulated +- se next to the theory, with z (``result``: the JSON of a
    :class:`SimulateReport`, as :func:`compare` or the cache gives it)."""
    r = SimulateReport.from_json(result)
    lines = []
    o, i = r.effective.configs()
    s = r.summary
    lines.append(f"{cfg.method} on {cfg.objective}: N={o.replicas} n={o.group_size} alpha={o.alpha:g} "
          f"beta={o.beta:g} gamma={o.gamma:g} {o.momentum} | inner {cfg.optimizer} lr={i.lr:g} "
          f"({cfg.schedule}) H={i.steps} sigma={i.noise:g} | {cfg.trials} trials x {cfg.outer_steps} "
          f"outer steps{' (cached)' if hit else ''}")
    for note in r.scope:
        lines.append(f"note: {note}")
    if r.diverged:
        d = r.diverged
        lines.append(f"DIVERGED at outer step {d.step}: {d.reason}")
        lines.append("violated theory conditions: " + (", ".join(d.violated_conditions) or
                                                       "none (the theory predicted stability)"))
        return "\n".join(lines)
    lines.append(f"{'quantity':<42} {'simulated':>12} {'+- se':>10} {'theory':>12} {'z':>7}")
    lines.append(f"{'stationary spread (sum over coordinates)':<42} {_fmt(s.stationary_variance_mc):>12} "
          f"{_fmt(s.stationary_variance_se):>10} {_fmt(s.stationary_variance_window_theory):>12} "
          f"{_fmt(s.z_score):>7}")
    lines.append(f"{'  closed-form stationary value':<42} {'':>12} {'':>10} {_fmt(s.stationary_variance_theory):>12}")
    d = r.decay
    if d and d.diverged_at is None:  # measured, not diverged
        lines.append(f"{'variance decay per outer step':<42} {_fmt(d.ratio_mc):>12} {_fmt(d.ratio_se):>10} "
              f"{_fmt(d.ratio_theory):>12} {_fmt(d.z_score):>7}")
        lines.append(f"{'  asymptotic decay factor (theory)':<42} {'':>12} {'':>10} "
              f"{_fmt(s.variance_decay_factor_theory):>12}")
    tr = r.trajectories
    for step in sorted({1, min(10, len(tr.step) - 1), len(tr.step) - 1}):
        m = tr.mean_distance
        mc, se, th = (series[step][0] for series in (m.mc, m.se, m.theory))
        lines.append(f"{f'mean distance, flattest direction, step {step}':<42} {mc:>12.6g} {se:>10.3g} {th:>12.6g}")
    lines.append(f"{'final loss at the average weights':<42} {s.final_loss_at_mean:>12.6g} "
          f"{s.final_loss_at_mean_se:>10.3g}")
    return "\n".join(lines)
