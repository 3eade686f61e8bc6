"""The study run: every seed's runs trained (resumable), evaluated, and the winners per domain."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace
from pathlib import Path

import numpy as np

from noloco.infra.errors import ConfigError
from noloco.infra.files import SCHEMA_VERSION, read_json, write_json
from noloco.llm_check import domains
from noloco.studies.ensemble.communication import communication
from noloco.studies.ensemble.evaluation import (check_evaluation, check_evaluation_memory, eval_segments, evaluate_seed,
                                                evaluated)
from noloco.studies.ensemble.plan import (BASELINES, COMPUTE_FACTOR, WIDTH_FACTOR, Run, Study, baseline_steps,
                                          budget_report, difficulty_groups, plan)


def _summary(values: list) -> dict:
    from noloco.theory.stats import mean_se

    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "se": None, "values": [], "perplexity": None}
    mean, se = mean_se(np.asarray(values, dtype=float))
    return {"mean": mean, "se": se if len(values) > 1 else None, "values": values, "perplexity": math.exp(mean)}


def _mean(values: list):
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _winners(study: Study, per_seed: list[dict], names: list[str]) -> dict:
    """Per domain: the primary configuration with the lowest mean loss, the runner-up, and their paired
    difference over seeds (mean, se; clear when it is more than 2 se from 0)."""
    from noloco.theory.stats import mean_se

    primary = list(study.configs)
    out = {}
    for d in names:
        loss = {c: np.mean([s["losses"][c][d] for s in per_seed]) for c in primary}
        best, second = sorted(primary, key=lambda c: loss[c])[:2] if len(primary) > 1 else (primary[0], None)
        row = {"best": best, "second": second, "loss": {c: float(v) for c, v in loss.items()}}
        if second is not None:
            diff = [s["losses"][second][d] - s["losses"][best][d] for s in per_seed]
            mean, se = mean_se(np.asarray(diff, dtype=float))
            se = se if len(diff) > 1 else None
            row.update(margin=mean, margin_se=se, clear=bool(se is not None and se > 0 and mean > 2 * se))
        out[d] = row
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
            saved = read_json(path, required=("settings",))["settings"]
            now = _jsonish(study.as_dict())
            differ = [k for k in now if k != "seeds" and saved.get(k) != now[k]]  # seeds may be added or dropped
            if differ:
                raise ConfigError(f"--resume: the study in {folder.path} was started with other settings: "
                                  + ", ".join(f"{k}={saved.get(k)!r} (now {now[k]!r})" for k in differ)
                                  + "; resume with its settings or start a new --out")
            write_json(path, {"schema_version": SCHEMA_VERSION, "settings": study.as_dict()}, indent=1)
        else:
            folder.clear(everything=overwrite)
            for run in plan(study):  # a fresh study: no run folder may hold a run
                where = run.folder(folder.path)
                if not overwrite and any((where / f).exists() for f in ("result.json", "ckpt.pt")):
                    raise ConfigError(f"{where} holds a run; continue the study with --resume or replace it with "
                                      f"--overwrite")
            write_json(path, {"schema_version": SCHEMA_VERSION, "settings": study.as_dict()}, indent=1)
    except BaseException:
        folder.close()
        raise
    return folder


def _jsonish(x):
    from noloco.infra.files import loads, dumps

    return loads(dumps(x))


def _train(run: Run, where: Path, resume: bool, overwrite: bool, stop_after: int | None) -> dict:
    from noloco.llm_check.lifecycle import finished_run
    from noloco.llm_check.trainer import Trainer

    done = finished_run(where, run.train)
    if done is not None and not overwrite:
        return done
    again = resume and (where / "ckpt.pt").exists()
    return Trainer(run.train, where, progress=False).run(resume=again, stop_after=stop_after, overwrite=not again)


def run_study(study: Study, out, *, resume: bool = False, overwrite: bool = False, stop_after: int | None = None,
              threads: int | None = None, progress: bool | None = None) -> dict:
    """Train (or reuse, or resume) every run of ``study`` under ``out``, evaluate them per domain and write
    ``out/hdee.json``; the report. With ``stop_after`` every run stops after that many of its outer steps
    (with a checkpoint) and nothing is evaluated: ``report["unfinished"]`` lists the runs, which
    ``--resume`` continues."""
    from noloco.infra.entry import interrupted
    from noloco.infra.progress import Progress
    from noloco.llm_check.config import check_run_flags
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
                result = _train(run, run.folder(out), resume, overwrite, stop_after)
                results[run.name] = result
                bar.update(1)
                final = result.get("final") or {}
                bar.note(f"{run.name}: val {final.get('val_loss_avg_model', float('nan')):.3f}")
        unfinished = [n for n, r in results.items() if not r.get("finished") and not r.get("diverged")]
        diverged = {n: r["diverged"]["message"] for n, r in results.items() if r.get("diverged")}
        report = {"schema": "hdee-study", "schema_version": SCHEMA_VERSION, "settings": study.as_dict(),
                  "rule": {"difficulty": "zlib (level 9) bits per byte of the training text; thirds by rank",
                           "width_factor": WIDTH_FACTOR, "compute_factor": COMPUTE_FACTOR}, "budget": budget, "unfinished": unfinished, "diverged": diverged}
        if unfinished or diverged:
            return report
        report.update(_evaluate(study, runs, results, out))
        report["wall_s"]["this_invocation"] = time.perf_counter() - started
        write_json(out / "hdee.json", report, indent=1)
        return report
    except KeyboardInterrupt as err:
        raise interrupted(err, "finished runs are kept; continue the study with --resume") from None
    finally:
        folder.close()


def _evaluate(study: Study, runs: list[Run], results: dict, out: Path) -> dict:
    import torch

    clock = time.perf_counter()
    names = evaluated(study)
    segments = {d: eval_segments(d, study) for d in names}
    per_seed = [evaluate_seed(study, [r for r in runs if r.seed == seed], out, segments) for seed in study.seeds]
    entries = list(per_seed[0]["losses"])
    per_domain = {e: {d: _summary([s["losses"][e][d] for s in per_seed]) for d in names} for e in entries}
    averages = {}
    for e in entries:
        for part, members in (("in_domain", study.domains), ("held_out", domains.HELD_OUT)):
            values = [np.mean([s["losses"][e][d] for d in members]) if all(s["losses"][e][d] is not None
                                                                           for d in members) else None
                      for s in per_seed]
            averages.setdefault(e, {})[part] = _summary(values)
    posterior = {c: {d: {"top_expert": [s["posterior"][c][d]["top_expert"] for s in per_seed],
                         **{k: _mean([s["posterior"][c][d][k] for s in per_seed])
                            for k in ("top_weight", "own_weight", "own_weight_last_byte")}} for d in names}
                 for c in per_seed[0]["posterior"]}
    first = next(iter(results.values()))
    base_params = study.model().n_params()
    comm = {c: communication(c, base_params, study.replicas, baseline_steps(study) if c in BASELINES else 0,
                             study.inner_steps) for c in study.configs}
    wall = {c: {str(seed): sum(results[r.name]["wall_s"] for r in runs if r.config == c and r.seed == seed)
                for seed in study.seeds} for c in study.configs}
    stats = [dict(r, role="held out" if r["held_out"] else ("train" if r["name"] in study.domains else "unused"))
             for r in domains.statistics()]
    groups = difficulty_groups(study.domains)
    for r in stats:
        r["group"] = groups.get(r["name"])
    return {"domains": stats, "evaluated": names, "per_domain": per_domain, "averages": averages,
            "posterior": posterior, "winners": _winners(study, per_seed, names), "communication": comm,
            "per_seed": [s["losses"] for s in per_seed],
            "corpus_sha256": first["corpus_sha256"], "python": first["python"], "torch": torch.__version__,
            "n_params_base": base_params, "wall_s": {"training": wall, "evaluation": time.perf_counter() - clock}}
