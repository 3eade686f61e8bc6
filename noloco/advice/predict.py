"""Predict a run's weight_std from the inputs measured inside it, with no fitted constant.

A run folder holds ``result.json`` (the config: the outer step nested under ``"outer"``, or flat
as runs of schema 1 wrote it), ``metrics.jsonl`` (``weight_std`` at every evaluation) and, for
runs made with the meter, ``inputs.jsonl`` (one line per outer step: :class:`noloco.training.measure.
SpreadMeter`'s estimates per tensor). For each tensor (group) g, the per-step inputs
(c_t, s2_t, rho_t) and the drift step the exact exchangeable recursion of
:mod:`noloco.theory.exchangeable` (``recursion(outer, c_t, s2_t, rho_t).step``, as ``varying_trajectory``)
from identical replicas, with the run's outer step (method constraints applied), and::

    predicted weight_std(T)^2 = sum_g numel_g E z_g,T^2 / sum_g numel_g.

The meter's ``c`` is the pooled regression -<p, z>/<z, z>, which the theory says converges to
``c - E[z w] / E[z^2]`` (w = d + eps, the residual) and leaves the residual variance short by
``E[z w]^2 / E[z^2]``: a residual correlated with the replica's own deviation (rho > 0, a drift)
looks like a negative restoring force. :func:`trajectory` undoes this with the recursion's own
second moments at every step (E[z w] = S_yd + rho S_y,eps_prev before the step, which depends on
earlier steps only), so the inputs are read as the theory defines them.

Nothing is fitted on a spread. The one modelling choice is how the measured residual (which
need not be an AR(1) process) becomes the theory's AR(1) noise plus a fixed drift; both are
computed, and ``noise_model`` says which one ``predicted`` is (default ``long-run``):

* ``lag1``: the theory's definition of its inputs, rho the lag-1 correlation. drift_var D = the meter's last estimate
  (set to 0 when negative or missing); s2_t = s2_t(meter) - D; rho_t = (lag1_cov_t - D) /
  sqrt((s2_t - D)(s2_t-1 - D)).
* ``long-run``: no drift; rho_t is the AR(1) coefficient whose sum over t steps has the measured
  variance: G_t(rho_t) / t = sum_var_t / (s2_1 + ... + s2_t). Where the pull is weak (gamma 0,
  c ~ 0) a replica's deviation integrates its residual, so what sets the spread is the noise's
  power at low frequency, which this matches and ``lag1`` does not when the residual's
  autocorrelation is not rho^k (in the LLM runs it falls faster and turns negative after
  4 to 7 outer steps; docs/llm_check.md).

Without ``inputs.jsonl`` (runs made before the meter) the report still gives the measured
growth per outer step and the theory's noise-free decay factor at c = 0, but ``predicted`` is
null: the level needs the measured noise.
"""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

from noloco.advice.record import read_run
from noloco.theory import conditional, exchangeable
from noloco.infra.errors import ConfigError
from noloco.infra.files import SCHEMA_VERSION
from noloco.infra.errors import DataError
from noloco.infra.record import JsonRecord

NOISE_MODELS = ("lag1", "long-run")
RHO_CAP = 0.99  # |rho| fed to the recursion (the AR(1) noise needs |rho| < 1)


def _long_run_rho(t, ratio) -> np.ndarray:
    """rho in [-RHO_CAP, RHO_CAP] with G_t(rho) / t = ratio, elementwise over arrays ``t`` and ``ratio``
    (bisection, all at once: G_t increases with rho); 0 where t < 2 or the ratio is not finite."""
    t, ratio = np.broadcast_arrays(np.asarray(t), np.asarray(ratio, float))

    def mean_factor(rho):  # G_t(rho) / t, exchangeable.ar1_sum_factor's closed form (|rho| <= RHO_CAP keeps it exact)
        return (t * (1 + rho) / (1 - rho) - 2 * rho * (1 - rho ** t) / (1 - rho) ** 2) / t

    lo, hi = np.full(t.shape, -RHO_CAP), np.full(t.shape, RHO_CAP)
    below, above = ratio <= mean_factor(lo), ratio >= mean_factor(hi)
    for _ in range(100):  # until the bracket stops moving (about 55 halvings in float64)
        mid = 0.5 * (lo + hi)
        up = mean_factor(mid) > ratio
        new_lo, new_hi = np.where(up, lo, mid), np.where(up, mid, hi)
        if np.array_equal(new_lo, lo) and np.array_equal(new_hi, hi):
            break
        lo, hi = new_lo, new_hi
    rho = np.where(below, -RHO_CAP, np.where(above, RHO_CAP, 0.5 * (lo + hi)))
    return np.where((t < 2) | ~np.isfinite(ratio), 0.0, rho)


def _value(x, default=0.0) -> float:
    return default if x is None or not math.isfinite(x) else float(x)


class NoiseInputs(NamedTuple):
    """One noise model's per-step inputs to the recursion: s2_t, rho_t (None until solved) and the drift."""

    s2: np.ndarray
    rho: Optional[np.ndarray]
    drift: float


@dataclass(frozen=True)
class GroupSeries:
    """One tensor group's measured inputs over the outer steps, and both noise models' readings of them."""

    numel: int
    c: np.ndarray
    s2: np.ndarray
    measured_drift: Optional[float]
    lag1: NoiseInputs
    long_run: NoiseInputs

    def noise(self, model: str) -> NoiseInputs:
        """The inputs of noise model ``model`` (one of :data:`NOISE_MODELS`)."""
        return self.lag1 if model == "lag1" else self.long_run


def group_inputs(rows: list, name: str) -> GroupSeries:
    """Per-step arrays of one group of the inputs.jsonl rows ``rows`` (:class:`noloco.advice.run_rows.InputsRow`)
    and both models' (s2, rho, drift_var) inputs."""
    return groups_inputs(rows, [name])[name]


def groups_inputs(rows: list, names: list[str]) -> dict[str, GroupSeries]:
    """:func:`group_inputs` of several groups, their long-run rho solved in one bisection (the same values: each
    element's bisection is independent of the others'). KeyError, TypeError or ValueError where a row lacks or
    garbles a group's inputs."""
    parts, ratios = {}, []
    for name in names:
        entries = [r.groups[name] for r in rows]
        T = len(entries)
        for key, values in (("c", [e.c for e in entries]), ("s2", [e.s2 for e in entries])):
            if any(x is None for x in values):  # what every row must hold (a missing lag1_cov or sum_var reads 0)
                raise KeyError(key)
        c = np.array([_value(e.c) for e in entries])
        v = np.array([max(_value(e.s2), 0.0) for e in entries])
        a = np.array([_value(e.lag1_cov) for e in entries])
        q = np.array([_value(e.sum_var) for e in entries])
        drift = [e.drift_var for e in entries if e.drift_var is not None]
        measured_drift = drift[-1] if drift else None
        D = max(measured_drift, 0.0) if measured_drift is not None else 0.0
        s2_lag1 = np.maximum(v - D, 0.0)
        rho_lag1 = np.zeros(T)
        for t in range(1, T):
            denom = s2_lag1[t] * s2_lag1[t - 1]
            rho_lag1[t] = np.clip((a[t] - D) / math.sqrt(denom), -RHO_CAP, RHO_CAP) if denom > 0 else 0.0
        cum_v = np.cumsum(v)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append(np.where(cum_v > 0, q / np.where(cum_v > 0, cum_v, 1.0), np.nan))
        if entries and entries[-1].numel is None:
            raise KeyError("numel")
        parts[name] = GroupSeries(numel=int(entries[-1].numel), c=c, s2=v, measured_drift=measured_drift,
                                  lag1=NoiseInputs(s2_lag1, rho_lag1, D), long_run=NoiseInputs(v, None, 0.0))
    if not names:
        return parts
    rho_long = _long_run_rho(np.arange(1, len(rows) + 1), np.array(ratios))
    for name, rho in zip(names, rho_long):
        g = parts[name]
        parts[name] = dataclasses.replace(g, long_run=NoiseInputs(g.s2, rho, 0.0))
    return parts


def groups_seed(setting) -> int | None:
    """The seed of the run's groups as its folder's config records it (``seed``, written by noloco.Observer and the
    harness), or None: not recorded, or several pipeline stages (each draws its own groups)."""
    other = setting.recorded()
    seed = other.seed
    if other.stages not in (None, 1) or isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        return None
    return seed


def groups_seed_of(run, seed: int | None = None) -> int | None:
    """The run's groups seed: what its folder records (:func:`groups_seed`), else ``seed``, the caller's guess."""
    recorded = groups_seed(run.setting)
    return seed if recorded is None else recorded


def own_groups(run, steps: int, seed: int | None = None) -> tuple[list | None, str | None]:
    """The averaging matrices of the run's outer steps 1..``steps`` drawn from its groups seed (``seed`` where its
    folder records none), or ``(None, why)``: the recursion then averages over random groups."""
    seed = groups_seed_of(run, seed)
    outer = run.outer
    if seed is None:
        return None, ("the run folder records no groups seed (a folder written before it was recorded, or pipeline "
                      "stages): averaged over random groups, not the spread this run's groups give")
    if outer.replicas > conditional.MAX_REPLICAS:
        return None, (f"N = {outer.replicas} > {conditional.MAX_REPLICAS}: averaged over random groups (the recursion along the "
                      "run's own groups costs (4 N)^3 per step and tensor)")
    return conditional.partitions(seed, 0, steps, outer.replicas, outer.group_size), None


def replay(outer, c_reg, s2_reg, rho, drift_var: float = 0.0, S=None, groups=None):
    """The exchangeable recursion stepped with the per-step regression inputs ``c_reg``, ``s2_reg`` read
    through the theory (module docstring): before step t, with S the recursion's state,
    ``b = (S_yd + rho_t S_y,eps) / S_yy``, c_t = c_reg_t + b and s2_t = s2_reg_t + b^2 S_yy. From ``S``
    (default: identical replicas) it returns ``(S after the last step, E z_t^2 for t = 0..T, c_t, s2_t)``
    with the inputs as the theory reads them. With ``groups`` (each step's averaging matrix,
    :mod:`noloco.theory.conditional`) it steps along those groups instead: the state is the replicas' full
    deviation covariance, read through its moments pooled over replicas as the meter pools them."""
    S = exchangeable.initial(float(s2_reg[0]), float(rho[0]), drift_var) if S is None else S
    N = outer.replicas
    if groups is not None and len(S) == conditional.K:  # one replica's state: lifted to all N
        S = conditional.lift(S, N)
    spread, c_true, s2_true = [conditional.spread(S, N)], [], []
    for t, (c_t, s2_t, rho_t) in enumerate(zip(c_reg, s2_reg, rho)):
        P = conditional.as_pooled(S, N)
        if P[0, 0] > 0:
            zw = P[0, -1] + rho_t * P[0, 2]  # state (y, delta, eps_prev, drift)
            c_t, s2_t = c_t + zw / P[0, 0], s2_t + zw * zw / P[0, 0]
        S = conditional.advance(outer, S, None if groups is None else groups[t], float(c_t), float(s2_t),
                                float(rho_t))
        spread.append(conditional.spread(S, N))
        c_true.append(float(c_t))
        s2_true.append(float(s2_t))
    return S, np.array(spread), np.array(c_true), np.array(s2_true)


def trajectory(outer, c_reg, s2_reg, rho, drift_var: float = 0.0, groups=None):
    """``(E z_t^2 for t = 0..T, c_t)`` of :func:`replay` from identical replicas."""
    _, spread, c_true, _ = replay(outer, c_reg, s2_reg, rho, drift_var, groups=groups)
    return spread, c_true


def _growth(steps, values):
    """exp(slope) of a least-squares line through log(value^2) vs outer step, over the second half
    of the run (outer_step > last / 2, positive values); None with fewer than 2 points."""
    pts = [(s, v) for s, v in zip(steps, values) if v is not None and v > 0 and s > steps[-1] / 2]
    if len(pts) < 2:
        return None
    x, y = np.array([p[0] for p in pts], float), np.log(np.array([p[1] for p in pts], float) ** 2)
    return float(math.exp(np.polyfit(x, y, 1)[0]))


@dataclass(frozen=True)
class PredictOuter(JsonRecord):
    """The run's outer step as the report shows it."""

    replicas: int
    group_size: int
    alpha: float
    beta: float
    gamma: float
    momentum: str


@dataclass(frozen=True)
class PredictGroup(JsonRecord):
    """One tensor group's inputs over the second half of the run, as the theory reads them (``c_late``) and as
    measured."""

    numel: int
    c_late: float
    c_regression_late: float
    s2_late: float
    drift_var: Optional[float]
    rho_lag1_late: float
    rho_long_run_final: float


@dataclass(frozen=True)
class PredictRow(JsonRecord):
    """One evaluation: the measured weight_std, the chosen noise model's prediction, their ratio, and both models'."""

    outer_step: int
    measured: Optional[float]
    predicted: Optional[float]
    ratio: Optional[float]
    predicted_lag1: Optional[float]
    predicted_long_run: Optional[float]


@dataclass(frozen=True, kw_only=True)
class Prediction(JsonRecord):
    """:func:`predict`'s report (``noloco llm predict --json``); ``groups_along`` only where inputs were measured."""

    NESTED = {"outer": PredictOuter, "groups": (dict, PredictGroup), "rows": (list, PredictRow)}
    OPTIONAL_KEYS = ("groups_along",)

    schema_version: int
    run: str
    method: str
    outer: PredictOuter
    noise_model: str
    fitted_constants: int
    inputs_logged: bool
    measured_growth: Optional[float]
    notes: list
    decay_factor: Optional[float]
    flattest_group: Optional[str]
    flattest_c: Optional[float]
    groups: dict
    groups_along: Optional[str] = None
    rows: list
    predicted_growth: Optional[float]


def input_rows(run) -> list:
    """The run's inputs.jsonl rows as records; DataError naming the file where a row is not one."""
    try:
        return run.input_rows
    except DataError as err:
        raise DataError(f"{run.folder / 'inputs.jsonl'}: {err}") from None


def predict(run_dir, noise_model: str = "long-run", along: str = "average", seed: int | None = None) -> Prediction:
    """The report of one run (see the module docstring); ``noise_model`` chooses ``predicted``; ``along``:
    ``"average"`` the exchangeable recursion (averaged over groups), ``"own"`` the run's own groups
    (:mod:`noloco.theory.conditional`, from the groups seed its folder records, or ``seed`` where it records none;
    averaged, with a note, without either)."""
    if noise_model not in NOISE_MODELS:
        raise ConfigError(f"noise_model={noise_model!r} is not allowed; allowed: {', '.join(NOISE_MODELS)}")
    if along not in ("own", "average"):
        raise ConfigError(f"along={along!r} is not allowed; allowed: own, average")
    run = read_run(run_dir)
    outer, method, metrics = run.outer, run.method, run.metric_rows
    steps = [int(r.outer_step) for r in metrics]
    measured = [r.weight_std for r in metrics]
    notes: list[str] = []
    predictions: dict[str, list] = {m: [None] * len(steps) for m in NOISE_MODELS}
    decay_factor = flattest_c = flattest_group = groups_along = None
    groups: dict[str, PredictGroup] = {}
    if outer.group_size == outer.replicas:
        notes.append(f"method {method}: n = N, every outer step leaves the replicas identical; predicted 0")
        for m in NOISE_MODELS:
            predictions[m] = [0.0] * len(steps)
    elif run.inputs is None:
        decay_factor, flattest_c = exchangeable.decay_factor(outer, 0.0), 0.0
        why = (f"a torchrun run ({run.world_size} ranks, one replica per rank) measures no inputs in `noloco llm "
               "train`; noloco.Observer measures them across ranks, docs/own_run.md"
               if run.world_size > 1 else "a run made before the meter")
        notes.append(f"no inputs.jsonl ({why}): measured_growth and the decay factor at "
                     "c = 0 are given; the level of weight_std needs the measured noise, so predicted is null")
    else:
        inputs = input_rows(run)
        known = [int(r.outer_step) for r in inputs]
        if known != list(range(1, len(known) + 1)):
            raise DataError(f"{run.folder / 'inputs.jsonl'}: outer steps are not 1, 2, ..., {len(known)}")
        names = list(inputs[0].groups)
        mats, why = own_groups(run, len(inputs), seed) if along == "own" else (None, None)
        if why:
            notes.append(why)
        groups_along = "own" if mats is not None else "average"
        total = 0
        level = {m: np.zeros(len(inputs) + 1) for m in NOISE_MODELS}
        flattest = (math.inf, None)
        for name in names:
            try:
                g = group_inputs(inputs, name)
            except (KeyError, TypeError, ValueError, AttributeError) as err:  # a hand-edited or foreign file
                raise DataError(f"{run.folder / 'inputs.jsonl'}: tensor {name!r} lacks or garbles {err} "
                                f"in some row") from None
            total += g.numel
            c_model = {}
            for m in NOISE_MODELS:
                s2, rho, D = g.noise(m)
                spread, c_model[m] = trajectory(outer, g.c, s2, rho, D, mats)
                level[m] += g.numel * spread
            late = slice(len(inputs) // 2, None)  # the second half of the run
            c_late = float(c_model[noise_model][late].mean())
            flattest = min(flattest, (c_late, name))
            groups[name] = PredictGroup(numel=g.numel, c_late=c_late, c_regression_late=float(g.c[late].mean()),
                                        s2_late=float(g.s2[late].mean()), drift_var=g.measured_drift,
                                        rho_lag1_late=float(g.lag1.rho[late].mean()),
                                        rho_long_run_final=float(g.long_run.rho[-1]))
        flattest_c, flattest_group = flattest
        decay_factor = exchangeable.decay_factor(outer, flattest[0])
        for m in NOISE_MODELS:
            std = np.sqrt(np.maximum(level[m], 0.0) / total)
            predictions[m] = [float(std[s]) if s <= len(inputs) else None for s in steps]
        if any(s > len(inputs) for s in steps):
            notes.append(f"inputs.jsonl ends at outer step {len(inputs)}: later evaluations are not predicted")
        negative = [n for n, g in groups.items() if g.drift_var is not None and g.drift_var < 0]
        if negative:
            notes.append(f"drift_var < 0 in {len(negative)} of {len(names)} groups (residual less persistent than "
                         f"an AR(1) with its lag-1 correlation): lag1 uses drift 0 there")
    rows = []
    lag1, long_run = (predictions[m] for m in NOISE_MODELS)
    for i, s in enumerate(steps):
        pred = predictions[noise_model][i]
        meas = measured[i]
        rows.append(PredictRow(outer_step=s, measured=meas, predicted=pred,
                               ratio=meas / pred if meas is not None and pred else None,
                               predicted_lag1=lag1[i], predicted_long_run=long_run[i]))
    return Prediction(schema_version=SCHEMA_VERSION, run=str(run.folder), method=method,
                      outer=PredictOuter(replicas=outer.replicas, group_size=outer.group_size, alpha=outer.alpha,
                                         beta=outer.beta, gamma=outer.gamma, momentum=outer.momentum),
                      noise_model=noise_model, fitted_constants=0, inputs_logged=run.inputs is not None,
                      measured_growth=_growth(steps, measured) if steps else None, notes=notes,
                      decay_factor=decay_factor, flattest_group=flattest_group, flattest_c=flattest_c, groups=groups,
                      groups_along=groups_along, rows=rows,
                      predicted_growth=_growth(steps, predictions[noise_model]) if steps else None)


def format_predict(report: Prediction) -> str:
    """The report as a table (measured / predicted = ratio)."""
    o = report.outer
    fmt = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
    lines = [f"{report.run}: {report.method} N={o.replicas} n={o.group_size} alpha={o.alpha} "
             f"beta={o.beta} gamma={o.gamma} {o.momentum}; inputs logged: "
             f"{'yes' if report.inputs_logged else 'no'}; noise model {report.noise_model}; "
             f"fitted constants {report.fitted_constants}",
             f"{'outer':>6} {'measured':>11} {'predicted':>11} {'ratio':>6} {'lag1':>11} {'long-run':>11}"]
    for r in report.rows:
        lines.append(f"{r.outer_step:>6} {fmt(r.measured, '11.4e')} {fmt(r.predicted, '11.4e')} "
                     f"{fmt(r.ratio, '6.3f')} {fmt(r.predicted_lag1, '11.4e')} "
                     f"{fmt(r.predicted_long_run, '11.4e')}")
    where = f" (flattest group {report.flattest_group}, c {report.flattest_c:.4g})" \
        if report.flattest_group else (" (c = 0)" if report.flattest_c == 0.0 else "")
    lines.append(f"decay factor (theory, noise-free, per outer step){where}: {fmt(report.decay_factor, '.4f')}")
    lines.append(f"variance growth per outer step, second half: measured {fmt(report.measured_growth, '.4f')}, "
                 f"predicted {fmt(report.predicted_growth, '.4f')}")
    lines.extend(f"note: {n}" for n in report.notes)
    return "\n".join(lines)
