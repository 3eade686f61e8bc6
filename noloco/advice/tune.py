"""Which outer setting to run, from pilot runs of the real model (``noloco llm tune PILOT ...``).

The quadratic tuner (``noloco tune``) optimises a model whose units are not a GPT's, and its advice did not
transfer (docs/advice.md). This one starts from what a user can measure: short pilot runs of their own model
at a few outer settings (alpha, beta, gamma, n, H; any number of seeds each), all with the reference's model,
data and inner optimiser. For a goal it ranks the settings the pilots measured:

- ``time`` (default): wall time to the reference's validation loss, where a step costs the compute of one
  inner step (``--compute-seconds``; default: the reference's measured seconds per inner step) plus, every H
  inner steps, one synchronisation from the comm model (:mod:`noloco.theory.comm`: the faster tree
  all-reduce where n = N, one group exchange among n otherwise, for the model's bytes on the given network);
  so n and H trade against the network;
- ``loss``: validation loss of the averaged model at equal tokens.

Constraints: the run finished without diverging, the spread (RMS of weight_std over the second half) at most
``--max-spread``, and the theory's noise-free decay factor of the flattest tensor below 1 (the stability
margin, from the inputs measured in the pilot: :func:`noloco.advice.predict.predict`).

What it promises is measured pilot evidence, not a model of the loss: the loss curve, the spread and the
steps to the target of each setting are the pilots' (mean over seeds, with standard errors where there are
two or more). So it recommends only what was piloted, and says so; a setting chosen as the best of many
noisy ones is measured optimistically (the winner's curse), which the report states with the number of
settings compared. How it held on runs it was not built on: docs/advice.md, "The tuner from pilot runs, held out".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from noloco.advice.record import RunSetting
from noloco.advice.run_rows import MetricsRow
from noloco.advice.tune_rows import ForkCost, ForkRow, ForkTuneResult, NetworkSetting, SkippedPilot, TuneResult, TuneRow
from noloco.infra.errors import ConfigError, DataError
from noloco.theory.stats import finite_mean_se

#: what a pilot may change against the reference (everything else must be equal to compare their losses);
#: outer_steps may change with H at equal tokens (inner_steps x outer_steps)
TUNED = ("alpha", "beta", "gamma", "group_size", "momentum", "inner_steps", "outer_steps")
#: settings that do not change training: measurement and where it ran
NOT_TRAINING = ("seed", "val_windows", "eval_every", "ckpt_every", "device", "replica_mode")
#: evaluations averaged for a loss level (the curves are noisy: 8 validation windows in the cpu-small runs)
SMOOTH = 3
GOALS = ("time", "loss")


def rms_second_half(points, outer_steps: int) -> float:
    """Root mean square of the values of ``points``, (outer step, value) pairs, after outer step T/2 (None values
    left out): the spread a run settles at."""
    values = [v for t, v in points if t > outer_steps / 2 and v is not None]
    return math.sqrt(float(np.mean(np.square(values)))) if values else math.nan


def second_half_spread(run) -> float:
    """:func:`rms_second_half` of the run's measured weight_std."""
    return rms_second_half(((r.outer_step, r.weight_std) for r in run.metric_rows), run.setting.outer_steps)


def smoothed(values) -> np.ndarray:
    """Trailing mean over :data:`SMOOTH` evaluations (fewer at the start)."""
    v = np.asarray(values, dtype=float)
    return np.array([v[max(0, i - SMOOTH + 1):i + 1].mean() for i in range(len(v))])


def steps_to(steps, losses, target: float) -> float | None:
    """Inner steps at which the smoothed loss curve first reaches ``target`` (linear between evaluations);
    None when it never does."""
    s, L = np.asarray(steps, dtype=float), smoothed(losses)
    below = np.nonzero(L <= target * (1 + 1e-12))[0]  # (the reference reaches its own final level, rounding aside)
    if not len(below):
        return None
    i = int(below[0])
    if i == 0:
        return float(s[0])
    frac = (L[i - 1] - target) / (L[i - 1] - L[i])
    return float(s[i - 1] + frac * (s[i] - s[i - 1]))


@dataclass
class Setting:
    """One piloted setting: its runs (one per seed) and what they measured."""

    name: str
    config: RunSetting
    runs: list = field(default_factory=list)

    @property
    def outer(self):
        return self.config.outer

    def curve(self) -> tuple[np.ndarray, np.ndarray]:
        """(inner steps, mean over seeds of the averaged model's validation loss) at the evaluations every seed has."""
        per = [{r.outer_step: r.val_loss_avg_model for r in evaluated(run)} for run in self.runs]
        common = sorted(set.intersection(*(set(p) for p in per)))
        H = self.config.inner_steps
        return (np.array(common, dtype=float) * H, np.array([np.mean([p[t] for p in per]) for t in common]))

    def per_seed_curves(self):
        H = self.config.inner_steps
        return [(np.array([r.outer_step * H for r in evaluated(run)], dtype=float),
                 np.array([r.val_loss_avg_model for r in evaluated(run)])) for run in self.runs]

    def final_loss(self) -> tuple[float, float]:
        """Mean over seeds (and its standard error) of the last :data:`SMOOTH` evaluations' loss."""
        return finite_mean_se([float(np.mean([r.val_loss_avg_model for r in evaluated(run)[-SMOOTH:]]))
                               if evaluated(run) else math.nan for run in self.runs])

    def spread(self) -> tuple[float, float]:
        return finite_mean_se([second_half_spread(run) for run in self.runs])


def evaluated(run) -> list[MetricsRow]:
    """The metrics rows that hold the averaged model's validation loss (a run written by
    :class:`noloco.Observer` has a row every outer step, with the losses the user logged)."""
    return [r for r in run.metric_rows if isinstance(r.val_loss_avg_model, (int, float))]


def _key(cfg) -> tuple:
    outer = cfg.outer
    return (outer.alpha, outer.beta, outer.gamma, outer.group_size, outer.momentum, cfg.inner_steps, cfg.outer_steps)


def _shared(cfg) -> dict:
    """The training settings a pilot must share with the reference (the tokens seen: H x outer steps)."""
    shared = {k: v for k, v in cfg.training().items() if k not in TUNED + NOT_TRAINING}
    return {**shared, "tokens": cfg.inner_steps * cfg.outer_steps}


def _run_folders(paths) -> list[Path]:
    """Every run folder (one holding result.json) at or up to three levels below each path, each once however
    it is reached (resolved: a run behind two symbolic links, or named twice, is one run, not two seeds)."""
    found: dict[Path, None] = {}
    for p in map(Path, paths):
        if not p.is_dir():  # a data fault, as noloco.read_run reads a missing run folder (exit 3)
            raise DataError(f"pilot {p}: {'not a folder' if p.exists() else 'no such folder'} (give run folders "
                            "written by `noloco llm train`, or folders holding them)")
        here = [p] if (p / "result.json").exists() else sorted(
            q.parent for depth in ("*/", "*/*/", "*/*/*/") for q in p.glob(depth + "result.json"))
        if not here:
            raise DataError(f"pilot {p}: no run folder (result.json) in it or up to three levels below")
        found.update((q.resolve(), None) for q in here)
    return list(found)


def load_settings(paths, skipped: list | None = None, progress: bool | None = None) -> list[Setting]:
    """The pilots grouped by setting (all but the seed equal), each run read with
    :func:`noloco.advice.record.read_run`; unfinished or diverged runs are kept (they rule a setting out). A pilot
    that cannot be read (diverged before its first evaluation, damaged) is left out and, with ``skipped``, listed
    there as a :class:`~noloco.advice.tune_rows.SkippedPilot`; a DataError when no pilot is left."""
    from noloco.advice.record import read_run
    from noloco.infra.progress import Progress

    folders = _run_folders(paths)
    settings: dict[tuple, Setting] = {}
    with Progress(len(folders), "reading pilots", unit="run", show=progress if len(folders) > 50 else False) as bar:
        for folder in folders:
            bar.update()
            try:
                run = read_run(folder)
            except DataError as err:
                if skipped is None:
                    raise
                skipped.append(SkippedPilot(folder=str(folder), why=str(err)))
                continue
            cfg = run.setting
            key = (_key(cfg), tuple(sorted(_shared(cfg).items())), cfg.method)
            if key not in settings:
                settings[key] = Setting(_name(folder, cfg), cfg)
            settings[key].runs.append(run)
    if not settings:
        raise DataError(f"no pilot could be read ({len(folders)} run folder(s)): "
                        + "; ".join(f"{x.folder}: {x.why}" for x in (skipped or [])[:3]))
    return list(settings.values())


def _name(folder: Path, cfg) -> str:
    """The setting's folder name when runs sit in ``NAME/sSEED`` (the studies' layout), else its values."""
    if folder.name.startswith("s") and folder.name[1:].isdigit():
        return folder.parent.name
    o = cfg.outer
    return f"a{o.alpha:g}_b{o.beta:g}_g{o.gamma:g}_n{o.group_size}_H{cfg.inner_steps}"


def sync_seconds(setting: Setting, net, bytes_per_value: float) -> float:
    """One synchronisation of this setting on ``net`` (:func:`outer_sync_seconds`)."""
    return outer_sync_seconds(setting.outer, setting.runs[0].result_record.n_params, net, bytes_per_value)


def outer_sync_seconds(o, n_params: int, net, bytes_per_value: float) -> float:
    """One synchronisation of outer step ``o`` on ``net`` (:mod:`noloco.theory.comm`): the faster tree all-reduce
    of the progress where n = N, one group exchange among n otherwise (0 without any: n = 1)."""
    from noloco.theory.comm import sync_cost

    if o.group_size == 1:
        return 0.0
    cost = sync_cost(net, n_params * bytes_per_value, o.replicas, o.group_size)
    return cost.tree_seconds if o.group_size == o.replicas else cost.group_exchange_seconds


@dataclass(frozen=True)
class TimeTo:
    """The cost model of the time goal: ``sync`` (seconds of one synchronisation), ``per_inner_step`` (compute
    plus sync / H), ``steps`` to the target on the seed-mean curve and ``seconds`` to it (None: never reached)."""

    sync: float
    per_inner_step: float
    steps: float | None
    seconds: float | None


def time_to(setting: Setting, target: float, net, compute_seconds: float, bytes_per_value: float) -> TimeTo:
    """:class:`TimeTo` ``target`` for ``setting``."""
    sync = sync_seconds(setting, net, bytes_per_value)
    per_step = compute_seconds + sync / setting.config.inner_steps
    steps = steps_to(*setting.curve(), target)
    return TimeTo(sync=sync, per_inner_step=per_step, steps=steps, seconds=None if steps is None else steps * per_step)


def _margin(setting: Setting) -> float | None:
    """1 - the theory's noise-free decay factor per outer step of the flattest tensor, with the inputs
    measured in the setting's first pilot (None when the run has no inputs)."""
    from noloco.advice.predict import predict

    if setting.runs[0].inputs is None:  # predict's decay factor would be at c = 0, not a measured one
        return None
    try:
        factor = predict(setting.runs[0].folder).decay_factor
    except (DataError, KeyError):
        return None
    return None if factor is None else 1.0 - float(factor)


def tune(paths, reference: str | None = None, goal: str = "time", target_loss: float | None = None,
         latency: float = 0.05, bandwidth: float = 1e9, compute_seconds: float | None = None,
         bytes_per_value: float = 2.0, max_spread: float | None = None) -> TuneResult:
    """Rank the piloted settings for ``goal`` and recommend the best that meets the constraints (module
    docstring). ``reference``: the setting (its name, or a run folder of it) whose loss is the target and
    against which the speed-up is stated; default: the setting of the first pilot given."""
    from noloco.infra.checks import check_choice
    from noloco.theory.comm import Network

    check_choice("goal", goal, GOALS)
    for name, value in (("target_loss", target_loss), ("compute_seconds", compute_seconds),
                        ("max_spread", max_spread), ("bytes_per_value", bytes_per_value), ("bandwidth", bandwidth)):
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ConfigError(f"{name}={value!r} is out of range; allowed: a finite number > 0")
    if not (isinstance(latency, (int, float)) and math.isfinite(latency) and latency >= 0):
        raise ConfigError(f"latency={latency!r} is out of range; allowed: a finite number >= 0 (seconds)")
    net = Network.from_bandwidth(latency, bandwidth)
    skipped: list[SkippedPilot] = []
    settings = load_settings(paths, skipped)
    ref = _pick_reference(settings, reference)
    shared = _shared(ref.config)
    if compute_seconds is None:
        walls = [r.wall_s / (ref.config.inner_steps * ref.config.outer_steps) for r in ref.runs
                 if isinstance(r.wall_s, (int, float)) and r.finished]
        if not walls:
            raise DataError(f"the reference {ref.name} has no finished run with a wall time; give --compute-seconds")
        compute_seconds = float(np.median(walls))
    target = target_loss if target_loss is not None else ref.final_loss()[0]

    rows = []
    for s in settings:
        excluded = []
        differs = sorted(k for k, v in _shared(s.config).items() if shared.get(k) != v)
        if differs:
            excluded.append("differs from the reference in " + ", ".join(differs))
        if not all(r.finished for r in s.runs):
            excluded.append("a run did not finish" + (" (diverged)" if any(r.diverged for r in s.runs) else ""))
        loss, loss_se = s.final_loss()
        spread, spread_se = s.spread()
        cost = time_to(s, target, net, compute_seconds, bytes_per_value)
        reach = cost.steps
        seed_times = [steps_to(st, lo, target) for st, lo in s.per_seed_curves()]
        margin = _margin(s)
        if not math.isfinite(loss):
            excluded.append("no evaluation")
        if max_spread is not None and spread > max_spread:
            excluded.append(f"spread {spread:.3g} above --max-spread {max_spread:g}")
        if margin is not None and margin <= 0:
            excluded.append(f"unstable: decay factor {1 - margin:.3f} >= 1")
        if goal == "time" and reach is None:
            excluded.append(f"does not reach the target loss {target:.4f}")
        rows.append(TuneRow(
            setting=s.name, seeds=len(s.runs), method=s.config.method, alpha=s.outer.alpha, beta=s.outer.beta,
            gamma=s.outer.gamma, n=s.outer.group_size, H=s.config.inner_steps, outer_steps=s.config.outer_steps,
            excluded=excluded, loss=loss, loss_se=loss_se, spread=spread, spread_se=spread_se,
            stability_margin=margin, sync_seconds=cost.sync,
            seconds_per_outer_step=cost.per_inner_step * s.config.inner_steps, steps_to_target=reach,
            time_to_target=cost.seconds, seeds_reaching_target=sum(t is not None for t in seed_times)))

    objective = (lambda r: r.time_to_target) if goal == "time" else (lambda r: r.loss)
    eligible = sorted((r for r in rows if not r.excluded), key=objective)
    ref_row = next(r for r in rows if r.setting == ref.name)
    best = eligible[0] if eligible else None
    speedup = change = None
    if best is not None:
        if goal == "time" and ref_row.time_to_target:
            speedup = ref_row.time_to_target / best.time_to_target
        change = best.loss - ref_row.loss
    return TuneResult(
        goal=goal, reference=ref.name, target_loss=target, compute_seconds_per_inner_step=compute_seconds,
        network=NetworkSetting(latency=latency, bandwidth=bandwidth, bytes_per_value=bytes_per_value),
        max_spread=max_spread, settings_compared=len(eligible), recommendation=best,
        skipped_pilots=skipped,
        rows=sorted(rows, key=lambda r: (bool(r.excluded), objective(r) if objective(r) is not None else math.inf)),
        promised_speedup=speedup, promised_loss_change=change, not_sure=_doubts(len(eligible), best, ref_row))


def _pick_reference(settings: list[Setting], reference: str | None) -> Setting:
    if reference is None:
        return settings[0]
    for s in settings:
        if s.name == reference or any(Path(reference).resolve() == Path(r.folder).resolve() for r in s.runs):
            return s
    raise ConfigError(f"--reference {reference!r} names no piloted setting; the settings are: "
                      + ", ".join(s.name for s in settings))


def _doubts(compared: int, best: TuneRow | None, ref: TuneRow) -> list[str]:
    out = []
    if best is None:
        return ["no piloted setting meets the goal and the constraints"]
    if compared > 1:
        out.append(f"chosen as the best of {compared} measured settings: its pilot numbers are "
                   "optimistic (the winner's curse); expect the realised gain to be smaller")
    if best.seeds < 2:
        out.append("one seed behind the recommendation: no standard error; pilot with 2 or more seeds")
    if best.loss_se == best.loss_se and ref.loss_se == ref.loss_se:
        diff, se = best.loss - ref.loss, math.hypot(best.loss_se, ref.loss_se)
        if abs(diff) < 2 * se:
            out.append(f"its loss differs from the reference's by {diff:+.4f} +- {se:.4f}: within 2 standard errors")
    if best.stability_margin is None:
        out.append("no inputs measured in its pilot: stability margin unknown")
    out.append("only piloted settings are ranked: a setting between them is not predicted (noloco llm predict --as "
               "predicts its spread, not its loss)")
    return out


def format_tune(report: TuneResult) -> str:
    unit = "time to target" if report.goal == "time" else "final loss"
    net = report.network
    name = max([14, *(len(r.setting) + 2 for r in report.rows)])  # a long setting name keeps the columns
    lines = [f"goal: {report.goal} ({unit}); reference {report.reference}, target loss "
             f"{report.target_loss:.4f}; compute {report.compute_seconds_per_inner_step:.4g} s per inner step; "
             f"network {net.latency * 1e3:g} ms, {net.bandwidth:.3g} bit/s, {net.bytes_per_value:g} bytes a value",
             f"{'setting':<{name}}{'seeds':>6}{'alpha':>6}{'beta':>6}{'gamma':>6}{'n':>3}{'H':>4}{f'val loss (last {SMOOTH})':>18}"
             f"{'spread':>11}{'margin':>8}{'s/outer':>9}{'to target':>11}  excluded"]
    for r in report.rows:
        loss = f"{r.loss:.4f}" + (f" +- {r.loss_se:.4f}" if r.loss_se == r.loss_se else "")
        margin = "-" if r.stability_margin is None else f"{r.stability_margin:.3f}"
        reach = "-" if r.time_to_target is None else f"{r.time_to_target:.1f} s"
        lines.append(f"{r.setting:<{name}}{r.seeds:>6}{r.alpha:>6g}{r.beta:>6g}{r.gamma:>6g}{r.n:>3}"
                     f"{r.H:>4}{loss:>18}{r.spread:>11.3e}{margin:>8}{r.seconds_per_outer_step:>9.3f}"
                     f"{reach:>11}  {'; '.join(r.excluded)}")
    best = report.recommendation
    if best is None:
        lines.append("recommendation: none")
    else:
        lines.append(_flags_line(best))
        if report.promised_speedup is not None:
            lines.append(f"promised: {report.promised_speedup:.2f}x faster to the target than {report.reference}, "
                         f"spread {best.spread:.3e}, final loss {report.promised_loss_change:+.4f} nats")
        else:
            lines.append(f"promised: final loss {report.promised_loss_change:+.4f} nats against "
                         f"{report.reference}, spread {best.spread:.3e}")
    lines += [f"left out: {x.folder}: {x.why}" for x in report.skipped_pilots or []]
    lines += [f"not sure: {d}" for d in report.not_sure]
    return "\n".join(lines)


def _flags_line(best: TuneRow | ForkRow) -> str:
    """The recommendation as the flags of ``noloco llm train``."""
    return (f"recommendation: {best.setting}: --alpha {best.alpha:g} --beta {best.beta:g} --gamma "
            f"{best.gamma:g} --group-size {best.n} --inner-steps {best.H} --outer-steps {best.outer_steps}")


def _fork_folders(path) -> list[Path]:
    """The fork run folders (config with ``fork_of``) at or below ``path`` (up to three levels)."""
    return [f for f in _run_folders([path]) if "fork_of" in _read_config(f)]


def _read_config(folder: Path) -> dict:
    """result.json's config, {} where it has none (a folder that is then no fork, not an error)."""
    from noloco.infra.files import read_json

    return read_json(folder / "result.json").get("config", {})


def tune_forks(path, latency: float = 0.05, bandwidth: float = 1e9, compute_seconds: float | None = None,
               bytes_per_value: float = 2.0, max_spread: float | None = None) -> ForkTuneResult:
    """Rank the settings of one pilot's forks (folders under ``path``, :mod:`noloco.advice.fork`) and the pilot's own
    by their predicted final loss at equal tokens, each with its 80 % interval, predicted spread (RMS of weight_std
    over the second half, ``--as`` from the pilot, with its flags) and wall time (compute plus the comm model's synchronisations); recommend the lowest
    predicted loss among those without a flag and within ``max_spread``; say how sure (the settings whose
    interval reaches below the pick's upper end are not told apart from it) and what the forks cost against
    training every setting whole."""
    from noloco.advice import fork as forks_
    from noloco.advice.forecast import transfer
    from noloco.advice.record import read_run
    from noloco.theory.comm import Network

    for name, value in (("compute_seconds", compute_seconds), ("max_spread", max_spread),
                        ("bytes_per_value", bytes_per_value), ("bandwidth", bandwidth)):
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ConfigError(f"{name}={value!r} is out of range; allowed: a finite number > 0")
    if not (isinstance(latency, (int, float)) and math.isfinite(latency) and latency >= 0):
        raise ConfigError(f"latency={latency!r} is out of range; allowed: a finite number >= 0 (seconds)")
    net = Network.from_bandwidth(latency, bandwidth)
    folders = _fork_folders(path)
    if not folders:
        raise DataError(f"{path}: no fork (a run folder whose config names fork_of) in it or up to three levels below")
    pilots = {str(forks_.fork_origin(read_run(f)).fork_of) for f in folders}
    if len(pilots) > 1:
        raise DataError(f"{path}: forks of {len(pilots)} pilots ({', '.join(sorted(pilots))}); give one pilot's forks")
    pilot = read_run(pilots.pop())
    n_params = pilot.result_record.n_params
    tokens = pilot.setting.inner_steps * pilot.setting.outer_steps
    if compute_seconds is None:
        if not isinstance(pilot.wall_s, (int, float)) or not pilot.finished:
            raise DataError(f"the pilot {pilot.folder} has no finished wall time; give --compute-seconds")
        compute_seconds = float(pilot.wall_s) / tokens
    rows = []

    def row(run, loss, spread: float, flags: list[str], fork: str | None) -> ForkRow:
        o, H = run.outer, run.setting.inner_steps
        sync = outer_sync_seconds(o, n_params, net, bytes_per_value)
        excluded = [] if max_spread is None else (  # the spread matters only under a spread limit
            [f"spread not trusted ({flags[0].split(':')[0]})"] if flags else
            [f"spread {spread:.3g} above --max-spread {max_spread:g}"] if spread > max_spread else [])
        name = Path(fork).name if fork else _name(run.folder, run.setting)  # a fork: its folder's name
        return ForkRow(setting=name, fork=fork, alpha=o.alpha, beta=o.beta, gamma=o.gamma, n=o.group_size, H=H,
                       outer_steps=run.setting.outer_steps, predicted=loss.predicted, low=loss.low, high=loss.high,
                       fork_lead=loss.fork_lead, spread=spread, spread_flags=list(flags),
                       seconds=tokens * (compute_seconds + sync / H), excluded=excluded)

    own = forks_._final_loss(pilot)
    low, high = forks_.loss_interval(pilot, own)
    rows.append(row(pilot, forks_.ForkLoss(predicted=own, low=low, high=high, fork_lead=0.0),
                    second_half_spread(pilot), [], None))
    fork_tokens = 0
    for f in folders:
        run = read_run(f)
        if run.outer.replicas != pilot.outer.replicas:  # forks keep N; a fork of another N is not ranked
            continue
        # the spread from the pilot's inputs (--as): in the one-pilot study it held where the fork's did not
        changes = {k: getattr(run.setting, k) for k in ("inner_steps", "outer_steps")}
        changes.update({k: getattr(run.outer, k) for k in ("alpha", "beta", "gamma", "group_size", "momentum")})
        loss, spread = forks_.fork_loss(f), transfer(pilot.folder, **changes)
        fork_tokens += int(forks_.fork_origin(run).fork_len)
        rows.append(row(run, loss, spread.second_half_rms, spread.flags, str(f)))
    rows.sort(key=lambda r: (bool(r.excluded), r.predicted))
    eligible = [r for r in rows if not r.excluded]
    best = eligible[0] if eligible else None
    contenders = [r.setting for r in eligible[1:] if best is not None and r.low < best.high]
    return ForkTuneResult(
        pilot=str(pilot.folder), goal="loss", compute_seconds_per_inner_step=compute_seconds,
        pilot_drop=forks_.last_quarter_drop(pilot),
        network=NetworkSetting(latency=latency, bandwidth=bandwidth, bytes_per_value=bytes_per_value),
        max_spread=max_spread, settings_ranked=len(eligible), recommendation=best, rows=rows,
        not_told_apart=contenders,
        cost=ForkCost(pilot_runs=1 + fork_tokens / tokens, grid_runs_per_seed=len(rows), forks=len(folders),
                      interval="80 % for a new seed, scaled by the pilot's last-quarter loss drop"))


def format_tune_forks(report: ForkTuneResult) -> str:
    from noloco.advice.fork import LOSS_ERROR_PER_DROP

    band = lambda r: f"[{r.low:.4f}, {r.high:.4f}]"  # noqa: E731
    lines = [f"one pilot: {report.pilot}; final loss at equal tokens predicted from its forks (80 % interval: "
             f"its loss drop over its last quarter, {report.pilot_drop:.4f}, times {LOSS_ERROR_PER_DROP[0]:+g} to "
             f"{LOSS_ERROR_PER_DROP[1]:+g}); "
             f"compute {report.compute_seconds_per_inner_step:.4g} s per inner step",
             f"{'setting':<16}{'alpha':>6}{'beta':>6}{'gamma':>6}{'n':>3}{'H':>4}{'predicted loss':>16}"
             f"{'80 % interval':>20}{'spread':>11}{'wall s':>9}  excluded"]
    for r in report.rows:
        lines.append(f"{r.setting:<16}{r.alpha:>6g}{r.beta:>6g}{r.gamma:>6g}{r.n:>3}{r.H:>4}"
                     f"{r.predicted:>16.4f}{band(r):>20}"
                     f"{r.spread:>11.3e}{'!' if r.spread_flags else ' '}{r.seconds:>8.1f}  "
                     f"{'; '.join(r.excluded)}")
    if any(r.spread_flags for r in report.rows):
        lines.append("!: the spread carries a flag of noloco llm predict PILOT --as (--json lists them)")
    best, cost = report.recommendation, report.cost
    if best is None:
        lines.append("recommendation: none (every setting is flagged or above --max-spread)")
    else:
        lines.append(f"{_flags_line(best)}; final loss {best.predicted:.4f} (80 %: {best.low:.4f} to "
                     f"{best.high:.4f})")
        told = report.not_told_apart
        lines.append(f"how sure: {len(told)} other setting(s) have intervals reaching below its upper end"
                     + (f" ({', '.join(told[:6])}{', ...' if len(told) > 6 else ''})" if told else "")
                     + "; among those the ranking is not claimed")
    lines.append(f"cost: the pilot and {cost.forks} forks = {cost.pilot_runs:.2f} pilot runs of compute; "
                 f"training every setting whole: {cost.grid_runs_per_seed} runs per seed")
    return "\n".join(lines)
