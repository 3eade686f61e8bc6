"""A run's own luck: how far the spread of one setting moves when only the data order changes, the floor under
any prediction of a run nobody has trained (``noloco llm study luck``).

Along H and alpha up, ``--as``'s log error has sd 0.07 to 0.08 over the fresh seeds, twice that along beta, gamma
and alpha down (0.035 to 0.046; docs/data/transfers_track.json), and about 1 claimed H transfer in 14 misses 15 %.
The question: is that the prediction's error, or the target run's own luck, which no prediction from another run
can know? The rule, written and committed before any of these runs was read:

* the runs: cpu-tiny and the Llama-style config (the one-pilot study's folder layout), the pilot (N 4, pairs,
  alpha 0.5, beta 0.7, gamma 0.7, H 10) and four targets: H 20 and H 5 at equal tokens (``H up``, ``H down``),
  alpha 0.7 (``alpha up``) and beta 0.9 (``beta up``, an axis whose transfers are tight), each trained whole with
  the data orders :data:`DATA_SEEDS` (the seed the training loop takes: initial weights, shards, batches,
  validation windows) and one groups seed, :data:`GROUPS_SEED` (the outer optimizer's, which the folder records);
* a run's measure: its RMS weight_std over the second half, as the transfers are judged;
* a setting's luck: over its data orders, the deviation of a run's log measure from the mean of the other five
  (the best any prediction that does not know the data order can do: the *oracle*); its RMS over both families
  (12 runs) is the floor;
* an axis's transfer error: ``--as`` from the pilot of data order d to the target of the same d (as the fresh
  seeds judge: pilot and target share their seed), the log of predicted / measured, its RMS over the 12;
* the verdict per axis: the transfer's error is *beyond luck* if its mean square exceeds the oracle's by more than
  the 95 % point of F(12, 10) (:data:`F_LIMIT`), else *within luck*; reported beside it, the share of the oracle's
  12 outside 15 % and the share a normal error of the floor's RMS puts outside 15 %.

Expected if the luck is the cause: along H and alpha up *within luck*, the floor's RMS near 0.07.

The forecast's floor (a second rule, written and committed before any of its runs was read): a forecast from outer
step K predicts the rest of the same run, so its floor is the luck of that rest. The runs: cpu-tiny and the
Llama-style config, the pilot's setting at H 10, 20 and 5 (equal tokens: 32, 16 and 64 outer steps; groups and data
seed 18) trained whole, and from its state at K = T / 2 and K = 3T / 4 six continuations to the end
(:data:`CONTINUATIONS`, :func:`noloco.studies.families.train_hf`'s forks with their own data order; the groups go on
as drawn). A continuation's measure: the RMS of its weight_std over the steps a forecast from K is judged on (after
K, in the run's second half); its oracle error: the log deviation from the mean of the other five. Per share (1/2,
3/4), the floor is the RMS of the 36 oracle errors; the seen forecasts from that share (the track record's,
:func:`noloco.studies.forecasts.read_track_rows`) are *within luck* if their mean-square log error exceeds the
floor's by at most the 95 % point of F(n seen, 30), else *beyond luck*. Reported beside it: the shares outside 15 %
of the seen forecasts, of the oracle's errors, and of a normal error of the floor's RMS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
from scipy.stats import norm

from noloco.infra.errors import DataError
from noloco.infra.files import write_json
from noloco.infra.record import JsonRecord
from noloco.studies import families as F
from noloco.studies import one_pilot
from noloco.studies.forecasts import _rms
from noloco.studies.transfers import AsRow, as_row

FAMILIES = one_pilot.FAMILIES
PILOT = one_pilot.PILOT
#: the four targets and their axis labels (noloco.studies.one_pilot.TRANSFERS' names)
TARGETS = (("a0.5_b0.7_H20", "H up"), ("a0.5_b0.7_H5", "H down"), ("a0.7_b0.7_H10", "alpha up"),
           ("a0.5_b0.9_H10", "beta up"))
SPREAD_RULE = one_pilot.SPREAD_RULE
NAMES = (PILOT, *(t for t, _ in TARGETS))
DATA_SEEDS = (1001, 1002, 1003, 1004, 1005, 1006)
GROUPS_SEED = 18
#: the forecast's floor: the H of the pilot's setting (equal tokens), the shares of the run its continuations start
#: from, and their data orders
FORECAST_NAMES = (PILOT, "a0.5_b0.7_H20", "a0.5_b0.7_H5")
SHARES = (1 / 2, 3 / 4)
CONTINUATIONS = (2001, 2002, 2003, 2004, 2005, 2006)
#: the 95 % point of F(12, 10): mean squares of 12 transfers against 12 leave-one-out deviations of 6 runs in each
#: of 2 families (10 degrees of freedom)
F_LIMIT = 2.91


def groups_folder(out, groups_seed: int) -> Path:
    """Where a study's runs of one groups seed live (the one-pilot study's layout below it)."""
    return Path(out) / f"g{groups_seed}"


def folder_study(out, train: bool, train_missing, evaluate, name: str, indent: int = 1):
    """A study of the runs in ``out``: ``train_missing(out)`` (where ``train``), ``evaluate(out)``, its report
    written to ``out/name``; a file in the folder's place is one line (exit 3) before any work."""
    from noloco.infra.files import input_dir

    out = input_dir(out, "--out")
    if train:
        train_missing(out)
    rep = evaluate(out)
    write_json(Path(out) / name, rep, indent=indent)
    return rep


def train_runs(out, families, names, runs, progress: bool | None = None) -> None:
    """:func:`train_data_orders` for each (groups seed, data order) of ``runs``, in ``out``'s groups-seed layout
    (:func:`groups_folder`)."""
    for groups_seed, data_seed in runs:
        train_data_orders(groups_folder(out, groups_seed), families, names, (data_seed,), groups_seed,
                          progress=progress)


def train_data_orders(out, families, names, data_seeds, groups_seed: int, progress: bool | None = None) -> None:
    """Train every run of ``names`` x ``data_seeds`` not finished in ``out`` (one process, the replicas as a list),
    each with its data order and the one ``groups_seed``."""
    from tqdm import tqdm

    from noloco.studies.families import train_hf
    from noloco.training.outer_optimizer import OuterOptimizer

    class OneGroupsSeed(OuterOptimizer):
        """The outer optimizer with the study's groups seed, whatever the data order."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "seed": groups_seed})

    todo = [(f, n, d) for f in families for d in data_seeds for n in names
            if not one_pilot.finished(one_pilot.folder(out, f, n, d))]
    for family, name, seed in tqdm(todo, desc=f"runs of groups seed {groups_seed}", disable=progress is False):
        train_hf(one_pilot._hf_family(family), one_pilot.setting(name), seed, one_pilot.folder(out, family, name, seed),
                 outer_class=OneGroupsSeed)


def train_missing(out, families=FAMILIES, progress: bool | None = None) -> None:
    """Train every run of the study not finished in ``out`` (one process, the replicas as a list)."""
    from tqdm import tqdm

    from noloco.studies.families import train_hf

    train_data_orders(out, families, NAMES, DATA_SEEDS, GROUPS_SEED, progress=progress)
    todo = [(f, n, share) for f in families for n in FORECAST_NAMES for share in SHARES
            if not all(one_pilot.finished(c) for c in continuations(out, f, n, share))]
    # the pilot is trained again for each share: its state at K is what that share's continuations start from
    for family, name, share in tqdm(todo, desc="continuations", disable=progress is False):
        s = one_pilot.setting(name)
        K = from_step(s.outer_steps, share)
        length = (s.outer_steps - K) * s.inner_steps
        train_hf(one_pilot._hf_family(family), s, GROUPS_SEED, one_pilot.folder(out, family, name, GROUPS_SEED),
                 forks=[(s, c, length, d) for c, d in zip(continuations(out, family, name, share), CONTINUATIONS)],
                 fork_at=K * s.inner_steps)


def from_step(outer_steps: int, share: float) -> int:
    """The outer step a continuation from ``share`` of a run of ``outer_steps`` starts at."""
    return round(outer_steps * share)


def continuations(out, family: str, name: str, share: float) -> list[Path]:
    """The folders of the continuations of ``name`` from ``share`` of its run, one per data order."""
    K = from_step(one_pilot.setting(name).outer_steps, share)
    return [Path(out) / family / name / f"from{K}-d{d}" for d in CONTINUATIONS]


@dataclass(frozen=True)
class LuckRun(JsonRecord):
    """One run: its second-half RMS weight_std and its log deviation from the mean of its setting's other data
    orders (the oracle's error); its averaged model's final validation loss (the windows move with the data order)."""

    OPTIONAL_KEYS = ("final_loss",)

    family: str
    setting: str
    data_seed: int
    measured: float
    oracle_log_error: float
    final_loss: Optional[float] = None


@dataclass(frozen=True)
class AxisLuck(JsonRecord):
    """Along one axis: the RMS log error of ``--as`` (pilot and target of the same data order) and of the target's
    oracle, the mean-square ratio and the verdict (:data:`F_LIMIT`); of the 12, the transfers and the oracle outside
    15 %, and the share a normal error of the oracle's RMS puts there."""

    axis: str
    target: str
    transfers: int
    transfer_rms: float
    oracle_rms: float
    ms_ratio: float
    verdict: str
    transfers_outside: int
    oracle_outside: int
    normal_outside: float
    flagged: int


@dataclass(frozen=True)
class Continuation(JsonRecord):
    """One continuation of the pilot's setting ``setting`` from outer step ``from_step`` with data order
    ``data_seed``: the RMS weight_std over the steps a forecast from there is judged on, and its oracle's error."""

    family: str
    setting: str
    from_step: int
    outer_steps: int
    data_seed: int
    measured: float
    oracle_log_error: float


@dataclass(frozen=True)
class ShareLuck(JsonRecord):
    """From ``share`` of a run: the seen forecasts' RMS log error against the continuations' oracle (the floor),
    the mean-square ratio, the F limit and the verdict; outside 15 %: the seen forecasts, the oracle's errors and a
    normal error of the floor's RMS."""

    share: float
    seen: int
    seen_rms: float
    continuations: int
    floor_rms: float
    ms_ratio: float
    f_limit: float
    verdict: str
    seen_outside: int
    oracle_outside: int
    normal_outside: float


@dataclass(frozen=True)
class LuckReport(JsonRecord):
    """``luck.json``: every run, every transfer and the verdict per axis; every continuation and the forecast's
    verdict per share."""

    NESTED = {"runs": (list, LuckRun), "transfers": (list, AsRow), "axes": (list, AxisLuck),
              "continuations": (list, Continuation), "shares": (list, ShareLuck)}
    OPTIONAL_KEYS = ("loss_sd", "continuations", "shares")

    schema: str
    groups_seed: int
    data_seeds: list
    runs: list
    transfers: list
    axes: list
    luck_rms: dict  # setting -> the oracle's RMS log error over both families
    loss_sd: Optional[dict] = None  # setting -> the final loss's sd over data orders, pooled over the families
    continuations: Optional[list] = None
    shares: Optional[list] = None


def _outside(log_errors) -> int:
    return int(sum(not F.within(math.exp(e), SPREAD_RULE, relative=True) for e in log_errors))


def _normal_outside(sigma: float) -> float:
    """The share outside the rule of a normal log error with mean 0 and sd ``sigma``."""
    return float(norm.sf(math.log1p(SPREAD_RULE) / sigma) + norm.cdf(math.log1p(-SPREAD_RULE) / sigma))


def _leave_one_out(logs: dict) -> dict:
    """``{data seed: log measure}`` -> each one's deviation from the mean of the others (the oracle's error)."""
    return {d: v - float(np.mean([w for e, w in logs.items() if e != d])) for d, v in logs.items()}


def oracle_runs(measured: dict, losses: dict | None = None) -> list[LuckRun]:
    """``measured``: ``{(family, setting): {data seed: second-half RMS}}`` (``losses``: the same of the final
    validation loss); each run with its oracle's error."""
    runs = []
    for (family, name), by_seed in measured.items():
        errors = _leave_one_out({d: math.log(v) for d, v in by_seed.items()})
        runs += [LuckRun(family=family, setting=name, data_seed=d, measured=v, oracle_log_error=errors[d],
                         final_loss=None if losses is None else losses[family, name][d]) for d, v in by_seed.items()]
    return runs


def loss_luck(runs: list[LuckRun]) -> dict:
    """Per setting, the final loss's sd over the data orders, pooled over the families (the root mean of each
    family's variance)."""
    out = {}
    for name in dict.fromkeys(r.setting for r in runs):
        variances = [float(np.var([r.final_loss for r in runs if (r.family, r.setting) == (family, name)], ddof=1))
                     for family in dict.fromkeys(r.family for r in runs if r.setting == name)]
        out[name] = math.sqrt(float(np.mean(variances)))
    return out


def judge(runs: list[LuckRun], transfers: list[AsRow]) -> tuple[dict, list[AxisLuck]]:
    """The luck per setting (the oracle's RMS log error over the families) and the verdict along each axis of
    :data:`TARGETS` with a transfer (the rule in the module docstring)."""
    luck = {name: _rms([r.oracle_log_error for r in runs if r.setting == name]) for name in NAMES}
    axes = []
    for target, axis in TARGETS:
        rows = [r for r in transfers if r.target == target]
        if not rows:
            continue
        errors = [math.log(r.as_ratio) for r in rows]
        oracle = [r.oracle_log_error for r in runs if r.setting == target]
        ratio = _rms(errors) ** 2 / luck[target] ** 2
        axes.append(AxisLuck(axis=axis, target=target, transfers=len(rows), transfer_rms=_rms(errors),
                             oracle_rms=luck[target], ms_ratio=ratio,
                             verdict="beyond luck" if ratio > F_LIMIT else "within luck",
                             transfers_outside=_outside(errors), oracle_outside=_outside(oracle),
                             normal_outside=_normal_outside(luck[target]),
                             flagged=sum(bool(r.as_flags) for r in rows)))
    return luck, axes


def evaluate(out, families=FAMILIES) -> LuckReport:
    """The report of the finished runs in ``out`` (every one must exist: :func:`train_missing`)."""
    measured: dict = {}
    losses: dict = {}
    for family in families:
        for name in NAMES:
            measured[family, name], losses[family, name] = {}, {}
            for d in DATA_SEEDS:
                path = one_pilot.folder(out, family, name, d)
                if not one_pilot.finished(path):
                    raise DataError(f"{path}: not a finished run (train it: noloco llm study luck --out {out})")
                losses[family, name][d], measured[family, name][d] = one_pilot._measured(path)
    runs = oracle_runs(measured, losses)
    transfers = [r for target, axis in TARGETS for family in families for d in DATA_SEEDS
                 if (r := as_row(out, family, d, PILOT, target, axis)) is not None]  # all finished: checked above
    luck, axes = judge(runs, transfers)
    conts = []
    for family in families:
        for name in FORECAST_NAMES:
            for share in SHARES:
                conts += continuation_rows(out, family, name, share)
    return LuckReport(schema="noloco.luck/1", groups_seed=GROUPS_SEED, data_seeds=list(DATA_SEEDS), runs=runs,
                      transfers=transfers, axes=axes, luck_rms=luck, loss_sd=loss_luck(runs), continuations=conts,
                      shares=judge_forecasts(conts))


def continuation_rows(out, family: str, name: str, share: float) -> list[Continuation]:
    """The continuations of ``name`` from ``share`` (every one finished), each with its oracle's error."""
    from noloco.advice.record import read_run

    T = one_pilot.setting(name).outer_steps
    K = from_step(T, share)
    measured = {}
    for d, folder in zip(CONTINUATIONS, continuations(out, family, name, share)):
        if not one_pilot.finished(folder):
            raise DataError(f"{folder}: not a finished continuation (train it: noloco llm study luck --out {out})")
        ws = [m.weight_std for m in read_run(folder).metric_rows if m.outer_step > max(K, T / 2) and m.weight_std]
        if len(ws) != T - max(K, T // 2):
            raise DataError(f"{folder}: {len(ws)} measured steps after outer step {K}, expected {T - max(K, T // 2)}")
        measured[d] = _rms(ws)
    errors = _leave_one_out({d: math.log(v) for d, v in measured.items()})
    return [Continuation(family=family, setting=name, from_step=K, outer_steps=T, data_seed=d, measured=v,
                         oracle_log_error=errors[d]) for d, v in measured.items()]


def judge_forecasts(conts: list[Continuation], seen: list | None = None) -> list[ShareLuck]:
    """The forecast's rule (module docstring) per share: the seen forecasts (``seen``: SeenForecast rows, by default
    the track record's) from that share against the continuations' oracle."""
    from scipy.stats import f

    from noloco.studies.forecasts import read_track_rows

    seen = read_track_rows() if seen is None else seen
    out = []
    for share in SHARES:
        oracle = [c.oracle_log_error for c in conts if math.isclose(c.from_step / c.outer_steps, share)]
        errors = [math.log(r.ratio) for r in seen if math.isclose(r.share, share) and r.ratio > 0]
        if not oracle or not errors:
            continue
        floor = _rms(oracle)
        ratio = _rms(errors) ** 2 / floor ** 2
        dof = len(oracle) * (len(CONTINUATIONS) - 1) // len(CONTINUATIONS)  # one mean per run of six
        limit = float(f.ppf(0.95, len(errors), dof))
        out.append(ShareLuck(share=share, seen=len(errors), seen_rms=_rms(errors), continuations=len(oracle),
                             floor_rms=floor, ms_ratio=ratio, f_limit=limit,
                             verdict="beyond luck" if ratio > limit else "within luck", seen_outside=_outside(errors),
                             oracle_outside=_outside(oracle), normal_outside=_normal_outside(floor)))
    return out


def run_study(out, train: bool = True) -> LuckReport:
    """Train what is missing (``train``), evaluate, and write ``out/luck.json``."""
    return folder_study(out, train, train_missing, evaluate, "luck.json")


def format_report(rep: LuckReport) -> str:
    lines = [f"a run's luck: {len(rep.data_seeds)} data orders at groups seed {rep.groups_seed}, second-half RMS "
             "weight_std; the oracle: each run's log deviation from the mean of its setting's other data orders",
             "luck (the oracle's RMS log error, both families): "
             + ", ".join(f"{name} {v:.3f}" for name, v in rep.luck_rms.items()),
             "the final loss's sd over the data orders (nats, pooled over the families): "
             + ", ".join(f"{name} {v:.3f}" for name, v in (rep.loss_sd or {}).items()),
             f"{'axis':9s} {'target':14s} {'--as RMS':>8s} {'oracle':>7s} {'MS ratio':>8s}  {'verdict':11s} "
             f"{'--as out':>8s} {'oracle out':>10s} {'normal out':>10s} {'flagged':>7s}"]
    for a in rep.axes:
        lines.append(f"{a.axis:9s} {a.target:14s} {a.transfer_rms:8.3f} {a.oracle_rms:7.3f} {a.ms_ratio:8.2f}  "
                     f"{a.verdict:11s} {a.transfers_outside:>5d}/{a.transfers:<2d} {a.oracle_outside:>7d}/{a.transfers:<2d}"
                     f" {a.normal_outside:10.1%} {a.flagged:>7d}")
    lines.append(f"beyond luck: the mean-square ratio above {F_LIMIT} (the 95 % point of F(12, 10)); out: outside "
                 f"{SPREAD_RULE:.0%}")
    if rep.shares:
        lines.append("the forecast's floor: continuations with their own data order from a share of the run, against "
                     "the seen forecasts from that share")
        lines.append(f"{'share':>5s} {'seen':>5s} {'seen RMS':>8s} {'floor':>6s} {'MS ratio':>8s} {'F limit':>7s}  "
                     f"{'verdict':11s} {'seen out':>9s} {'oracle out':>10s} {'normal out':>10s}")
        for x in rep.shares:
            lines.append(f"{x.share:5.3g} {x.seen:5d} {x.seen_rms:8.3f} {x.floor_rms:6.3f} {x.ms_ratio:8.2f} "
                         f"{x.f_limit:7.2f}  {x.verdict:11s} {x.seen_outside / x.seen:9.1%} "
                         f"{x.oracle_outside:>6d}/{x.continuations:<3d} {x.normal_outside:10.1%}")
    return "\n".join(lines)
