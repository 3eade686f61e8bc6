"""The study run: every seed's runs trained (resumable), evaluated, and the winners per domain."""

from __future__ import annotations

import dataclasses
import math
import time
from types import SimpleNamespace
from pathlib import Path

import numpy as np

from noloco.advice.run_rows import RunResult
from noloco.infra.errors import ConfigError
from noloco.infra.files import SCHEMA_VERSION, read_json, write_json
from noloco.llm_check import domains
from noloco.studies.ensemble.communication import communication
from noloco.studies.ensemble.evaluation import (check_evaluation, check_evaluation_memory, domain_rows, eval_segments,
                                                evaluate_seed, evaluated)
from noloco.studies.ensemble.plan import (BASELINES, ENSEMBLES, SIZE_SPREAD, STEP_SPREAD, Run, Study, baseline_steps,
                                          budget_report, plan, round_domains, tiers)
from noloco.studies.ensemble.records import (AgainstHomogeneous, EnsembleReport, Posterior, Rule, SeedEvaluation,
                                             StudyFile, Summary, WallTimes, Winner)
from noloco.studies.reports import Estimate


def _summary(values: list) -> Summary:
    from noloco.theory.stats import mean_se

    values = [v for v in values if v is not None]
    if not values:
        return Summary(None, None, [], None)
    mean, se = mean_se(np.asarray(values, dtype=float))
    return Summary(mean, se if len(values) > 1 else None, values, math.exp(mean))


def _mean(values: list):
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _winners(study: Study, per_seed: list[SeedEvaluation], names: list[str]) -> dict:
    """Per domain: the primary configuration with the lowest mean loss, the runner-up, and their paired
    difference over seeds (mean, se; clear when it is more than 2 se from 0)."""
    from noloco.theory.stats import mean_se

    primary = list(study.configs)
    out = {}
    for d in names:
        loss = {c: np.mean([s.losses[c][d] for s in per_seed]) for c in primary}
        best, second = sorted(primary, key=lambda c: loss[c])[:2] if len(primary) > 1 else (primary[0], None)
        means = {c: float(v) for c, v in loss.items()}
        if second is None:
            out[d] = Winner(best, second, means)
            continue
        diff = [s.losses[second][d] - s.losses[best][d] for s in per_seed]
        mean, se = mean_se(np.asarray(diff, dtype=float))
        se = se if len(diff) > 1 else None
        out[d] = Winner.paired(best, second, means, mean, se, bool(se is not None and se > 0 and mean > 2 * se))
    return out


def _open_study(out, study: Study, resume: bool, overwrite: bool):
    """The study's folder, opened (locked); on a fresh start study.json written, on --resume compared."""
    from noloco.infra.rundir import RunFolder

    folder = RunFolder(out, own=("hdee.json", "study.json"), resume=resume, overwrite=overwrite,
                       how="continue it with --resume or replace it with --overwrite").open()
    try:
        path = Path(folder.path) / "study.json"
        if resume:
            if not path.exists():
                raise ConfigError(f"--resume: {folder.path} holds no study (no study.json)")
            saved = StudyFile.from_json(read_json(path, required=("settings",))).settings
            now = _jsonish(study.to_json())
            differ = [k for k in now if k != "seeds" and saved.get(k) != now[k]]  # seeds may be added or dropped
            if differ:
                raise ConfigError(f"--resume: the study in {folder.path} was started with other settings: "
                                  + ", ".join(f"{k}={saved.get(k)!r} (now {now[k]!r})" for k in differ)
                                  + "; resume with its settings or start a new --out")
            write_json(path, StudyFile(SCHEMA_VERSION, study.to_json()), indent=1)
        else:
            folder.clear(everything=overwrite)
            for run in plan(study):  # a fresh study: no run folder may hold a run
                where = run.folder(folder.path)
                if not overwrite and any((where / f).exists() for f in ("result.json", "ckpt.pt")):
                    raise ConfigError(f"{where} holds a run; continue the study with --resume or replace it with "
                                      f"--overwrite")
            write_json(path, StudyFile(SCHEMA_VERSION, study.to_json()), indent=1)
    except BaseException:
        folder.close()
        raise
    return folder


def _jsonish(x):
    from noloco.infra.files import loads, dumps

    return loads(dumps(x))


def _done(result: RunResult | None) -> bool:
    """Whether a run finished without diverging (None: it waits for its parent)."""
    return result is not None and bool(result.finished) and not result.diverged


def _train(run: Run, out: Path, resume: bool, overwrite: bool, stop_after: int | None,
           parent: RunResult | None) -> RunResult | None:
    """The run's result (result.json): reused when finished, resumed, or trained (an expert from its parent's final
    weights); None, not started, while its parent (``parent``: its result) is unfinished or diverged."""
    from noloco.llm_check.lifecycle import finished_run
    from noloco.llm_check.trainer import Trainer

    if run.parent is not None and not _done(parent):
        return None
    where = run.folder(out)
    done = finished_run(where, run.train)
    if done is not None and not overwrite:
        return RunResult.from_json(done)
    again = resume and (where / "ckpt.pt").exists()
    trainer = Trainer(run.train, where, progress=False)
    if run.parent is not None and not again:  # branch: start from the parent's final weights (a fresh optimiser)
        _start_from(trainer, run.parent.folder(out))
    return RunResult.from_json(trainer.run(resume=again, stop_after=stop_after, overwrite=not again))


def _start_from(trainer, parent: Path) -> None:
    """The trainer's weights set to the final weights of the finished run in ``parent``."""
    import torch

    from noloco.infra.errors import DataError
    from noloco.infra.files import open_run_file

    path = parent / "ckpt.pt"
    try:
        with open_run_file(path, "train the parent run again") as handle:  # a regular file of a loadable size
            phi = torch.load(handle, map_location="cpu", weights_only=True)["phi"]  # edge: the checkpoint file as torch reads it
        with torch.no_grad():
            for k, p in trainer.params.items():
                p.copy_(phi[k])
                trainer.phi[k].copy_(phi[k])
    except (OSError, KeyError, RuntimeError) as err:
        raise DataError(f"{path}: the parent run's weights cannot start its expert ({str(err).splitlines()[0]}); "
                        f"train the study again with --overwrite") from None


def run_study(study: Study, out, *, resume: bool = False, overwrite: bool = False, stop_after: int | None = None,
              threads: int | None = None, progress: bool | None = None) -> EnsembleReport:
    """Train (or reuse, or resume) every run of ``study`` under ``out``, evaluate them per domain and write
    ``out/hdee.json``; the report. With ``stop_after`` every run stops after that many of its outer steps
    (with a checkpoint) and nothing is evaluated: ``report.unfinished`` lists the runs, which
    ``--resume`` continues."""
    from noloco.infra.entry import interrupted
    from noloco.infra.progress import Progress
    from noloco.llm_check.config import check_run_flags
    from noloco.llm_check.divergence import Diverged
    from noloco.llm_check.trainer import set_threads

    check_run_flags(SimpleNamespace(resume=resume, overwrite=overwrite, stop_after=stop_after, threads=threads))
    runs = plan(study)
    budget = budget_report(study)
    check_evaluation(study)
    check_evaluation_memory(study, models=len(runs) + study.replicas)  # at most every run's models at once
    started = time.perf_counter()
    folder = _open_study(out, study, resume, overwrite)
    out = Path(folder.path)
    try:
        set_threads(threads)
        results = {}
        with Progress(len(runs), "hdee study", unit="run", show=progress) as bar:
            for run in runs:
                result = _train(run, out, resume, overwrite, stop_after, results[run.parent.name] if run.parent else None)
                results[run.name] = result
                bar.update(1)
                val = result.final.val_loss_avg_model if result is not None and result.final else None
                bar.note(f"{run.name}: val {float('nan') if val is None else val:.3f}"
                         if result is not None else f"{run.name}: waits for {run.parent.name}")
        unfinished = [n for n, r in results.items() if r is None or (not r.finished and not r.diverged)]
        diverged = {n: Diverged.from_json(r.diverged).message for n, r in results.items() if r is not None and r.diverged}
        report = EnsembleReport(
            schema="hdee-study", schema_version=SCHEMA_VERSION, settings=study,
            rule=Rule("zlib (level 9) bits per byte of the training text; tiers by rank", SIZE_SPREAD, STEP_SPREAD),
            budget=budget, unfinished=unfinished, diverged=diverged)
        if unfinished or diverged:
            return report
        report = _evaluate(study, runs, results, out, report)
        report = dataclasses.replace(report, wall_s=dataclasses.replace(
            report.wall_s, this_invocation=time.perf_counter() - started))
        write_json(out / "hdee.json", report, indent=1)
        return report
    except KeyboardInterrupt as err:
        raise interrupted(err, "finished runs are kept; continue the study with --resume") from None
    finally:
        folder.close()


def _parts(study: Study) -> dict:
    """The evaluated domains in three parts: those an expert trained on (the rounds' domains), the training domains
    only the seed models and the baselines saw (the mixture), and the held-out ones, which nothing saw."""
    rounds = [d for r in round_domains(study) for d in r]
    return {"expert_domains": rounds, "mixture_domains": [d for d in study.domains if d not in rounds],
            "held_out": list(domains.HELD_OUT)}


def _paired(per_seed: list[SeedEvaluation], a: str, b: str, members: list) -> Estimate:
    """Loss of ``a`` minus loss of ``b`` (nats per byte), the mean over ``members``, paired over seeds."""
    from noloco.theory.stats import mean_se

    diff = [float(np.mean([s.losses[a][d] - s.losses[b][d] for d in members])) for s in per_seed]
    mean, se = mean_se(np.asarray(diff, dtype=float))
    return Estimate(mean, se if len(diff) > 1 else None, diff)


def _against_homogeneous(study: Study, per_seed: list[SeedEvaluation], names: list) -> dict:
    """HDEE's comparison: for each heterogeneous ensemble and mixing rule, the paired loss difference to the
    homogeneous ensemble mixed the same way, per domain and over each part of the domains; the domains where it
    is lower (its mean over seeds), and where lower or higher by more than 2 standard errors."""
    out = {}
    for config in (c for c in study.configs if c in ENSEMBLES and c != "homogeneous"):
        if "homogeneous" not in study.configs:
            break
        for suffix in ("", "-fixed-prior", "-uniform"):
            rows = {d: _paired(per_seed, config + suffix, "homogeneous" + suffix, [d]) for d in names}
            out[config + suffix] = AgainstHomogeneous(
                against="homogeneous" + suffix, per_domain=rows,
                lower_in=[d for d in names if rows[d].mean < 0],
                lower_beyond_2se_in=[d for d in names if rows[d].se is not None and rows[d].mean < -2 * rows[d].se],
                higher_beyond_2se_in=[d for d in names if rows[d].se is not None and rows[d].mean > 2 * rows[d].se],
                mean_over={part: _paired(per_seed, config + suffix, "homogeneous" + suffix, members)
                           for part, members in _parts(study).items() if members})
    return out


def _evaluate(study: Study, runs: list[Run], results: dict, out: Path, head: EnsembleReport) -> EnsembleReport:
    """``head`` (the plan's report) with every seed's runs evaluated per domain."""
    import torch

    clock = time.perf_counter()
    names = evaluated(study)
    segments = {d: eval_segments(d, study) for d in names}
    per_seed = [evaluate_seed(study, seed, out, segments) for seed in study.seeds]
    entries = list(per_seed[0].losses)
    per_domain = {e: {d: _summary([s.losses[e][d] for s in per_seed]) for d in names} for e in entries}
    parts = _parts(study)
    averages = {}
    for e in entries:
        for part, members in parts.items():
            values = [np.mean([s.losses[e][d] for d in members]) if members and all(
                s.losses[e][d] is not None for d in members) else None for s in per_seed]
            averages.setdefault(e, {})[part] = _summary(values)
    posterior = {c: {d: Posterior(experts=per_seed[0].posterior[c][d].experts,
                                  top_expert=[s.posterior[c][d].top_expert for s in per_seed],
                                  cached_prior=np.mean([s.posterior[c][d].cached_prior for s in per_seed], 0).tolist(),
                                  top_weight=_mean([s.posterior[c][d].top_weight for s in per_seed]),
                                  own_weight=_mean([s.posterior[c][d].own_weight for s in per_seed]))
                     for d in names} for c in per_seed[0].posterior}
    first = next(iter(results.values()))
    base_params = study.model().n_params()
    comm = {c: communication(c, base_params, study.replicas, baseline_steps(study) if c in BASELINES else 0,
                             study.inner_steps) for c in study.configs}
    wall = {str(seed): {role: sum(results[r.name].wall_s for r in runs if r.seed == seed and r.role == role)
                        for role in ("seed", "expert", "baseline")} for seed in study.seeds}
    tier_of = {d: k for k, tier in enumerate(tiers(study)) for d in tier}
    round_of = {d: r for r, row in enumerate(round_domains(study)) for d in row}
    stats = [dataclasses.replace(
        r, role="held out" if r.held_out else ("train" if r.name in study.domains else "unused"),
        zlib_bits_per_byte=domains.difficulty(r.name) if r.name in names else None,
        tier=tier_of.get(r.name), round=round_of.get(r.name), order=()) for r in domain_rows()]
    return dataclasses.replace(
        head, domains=stats, evaluated=names, parts=parts, per_domain=per_domain, averages=averages,
        posterior=posterior, winners=_winners(study, per_seed, names),
        against_homogeneous=_against_homogeneous(study, per_seed, names), communication=comm,
        per_seed=[s.losses for s in per_seed], corpus_sha256=first.corpus_sha256, python=first.python,
        torch=torch.__version__, n_params_base=base_params,
        wall_s=WallTimes(training=wall, evaluation=time.perf_counter() - clock))
