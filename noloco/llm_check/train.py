"""Runs of the harness: one run per method in one process (:func:`train_methods`, ``noloco llm train``) or
one replica per rank under torchrun (:func:`train_rank`, the same command started by torchrun)::

    torchrun --nproc-per-node 4 -m noloco llm train --preset cpu-tiny --method noloco --out DIR

The training step is :class:`noloco.llm_check.trainer.Trainer`, a run's life (folder, checkpoints, resume,
interrupts) :mod:`noloco.llm_check.lifecycle`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from types import SimpleNamespace

from noloco.advice.run_rows import MetricsRow, RunResult
from noloco.infra.errors import ConfigError, DataError
from noloco.infra.files import output_dir
from noloco.llm_check.config import DEFAULT_TIMEOUT, TrainConfig, check_run_flags
from noloco.llm_check.divergence import Diverged
from noloco.llm_check.lifecycle import run_folder
from noloco.llm_check.resources import check_memory
from noloco.llm_check.trainer import Trainer, set_threads


def train_methods(configs: list[TrainConfig], out: str | Path, *, resume: bool = False,
                  stop_after: int | None = None, threads: int | None = None, progress: bool | None = None,
                  overwrite: bool = False, max_memory=None, log_every: int | None = None,
                  tensorboard: bool = False) -> dict[str, dict]:
    """Train each config into ``out``, or into ``out/METHOD`` when there are several; ``{method: result}``;
    ``log_every`` and ``tensorboard``: what each run shows (:mod:`noloco.llm_check.live`).
    Everything is checked before the first run starts: the methods, the flags, each run folder (its
    lock, then whether it holds a run) and each run's memory estimate. A run that diverges has
    ``"diverged"`` in its result; the others still run."""
    methods = [cfg.method for cfg in configs]
    twice = sorted({m for m in methods if methods.count(m) > 1})
    if twice:  # the second run would overwrite the first one's directory and result
        raise ConfigError(f"method={','.join(methods)} names {', '.join(twice)} more than once; "
                          "give each method once")
    check_run_flags(SimpleNamespace(resume=resume, overwrite=overwrite, stop_after=stop_after, threads=threads,
                                    log_every=log_every))
    check_tensorboard(tensorboard)
    output_dir(out)
    if resume:
        _check_resume_layout(Path(out), methods)
    for cfg in configs:
        check_memory(cfg, max_memory)
    with contextlib.ExitStack() as opened:
        folders = [opened.enter_context(run_folder(Path(out) / cfg.method if len(configs) > 1 else out,
                                                   resume=resume, overwrite=overwrite)) for cfg in configs]
        set_threads(threads)
        results = {}
        for cfg, folder in zip(configs, folders):
            trainer = Trainer(cfg, folder, progress=progress, max_memory=max_memory)
            results[cfg.method] = trainer.run(resume=resume, stop_after=stop_after, overwrite=overwrite,
                                              log_every=log_every, tensorboard=tensorboard)
    return results


def _check_resume_layout(out: Path, methods: list[str]) -> None:
    """``--resume`` with the methods the run folder holds: one run in OUT itself, or one per method in OUT/METHOD
    (a ConfigError naming the ``--method`` to give, not a missing checkpoint in a folder that was never made)."""
    here = out / "result.json"
    if len(methods) > 1 and here.exists():
        method = _read_method(here)
        raise ConfigError(f"--resume: {out} holds one run{f' (method {method})' if method else ''}, not one per "
                          f"method ({', '.join(methods)}, the preset's default); give --method "
                          f"{method or 'METHOD'} to resume it")
    held = sorted(p.parent.name for p in out.glob("*/result.json"))
    if len(methods) == 1 and not here.exists() and held:
        raise ConfigError(f"--resume: {out} holds the runs of {', '.join(held)} in its subfolders; give --method "
                          f"{','.join(held)} to resume them, or --out {out / held[0]} for one")


def _read_method(result: Path) -> str | None:
    """The method named in the run's result.json (None where unreadable: the message then names none)."""
    from noloco.infra.files import read_json

    try:
        return RunResult.from_json(read_json(result, required=("config",), types={"config": dict})).config.get("method")
    except DataError:
        return None


def check_tensorboard(tensorboard: bool) -> None:
    """``--tensorboard`` needs tensorboard (the tb extra): a DataError (exit 3) before any work otherwise."""
    if tensorboard:
        from noloco.infra.errors import require_extra

        require_extra("torch.utils.tensorboard", "tensorboard", "tb", "--tensorboard")


def _number(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _nan(value):
    """A final row's value as the table prints it: NaN where it is null (strict JSON: null for non-finite)."""
    return float("nan") if value is None else value


def format_results(results: dict[str, dict]) -> str:
    """The closing table of :func:`train_methods`' (or a torchrun run's) results, with the corpus it was measured
    on. Every column is the whole run's (steps, tokens/s and wall time over all its parts; ``-`` where a part
    before a resume did not record its time); a resumed run gets a line saying what this part did."""
    runs = {method: RunResult.from_json(r) for method, r in results.items()}
    first = next(iter(runs.values()))
    ranks = f", {first.world_size} torchrun ranks" if (first.world_size or 1) > 1 else ""
    lines = [f"corpus sha256 {first.corpus_sha256[:16]}, Python {first.python}, {first.n_params} "
             f"parameters, unigram entropy {first.unigram_entropy:.3f} nats/byte{ranks}",
             f"{'method':<8} {'steps':>6} {'train':>7} {'val(avg model)':>15} {'weight_std':>11} {'tok/s':>8} "
             f"{'wall s':>7}"]
    for method, r in runs.items():
        f = r.final or MetricsRow(outer_step=0)
        whole = r.run
        lines.append(f"{method:<8} {whole.inner_steps:>6} {_nan(f.train_loss):>7.3f} "
                     f"{_nan(f.val_loss_avg_model):>15.3f} {_nan(f.weight_std):>11.3e} "
                     f"{_number(whole.tokens_per_s, '>8.0f'):>8} {_number(whole.wall_s, '>7.1f'):>7}"
                     + ("  DIVERGED" if r.diverged else ""))
    for method, r in runs.items():
        part = r.part
        if part.resumed:
            rate = f", {part.tokens_per_s:,.0f} tokens/s" if part.tokens_per_s else ""
            earlier = ("" if r.run.wall_s is not None else
                       "; the whole run's time is not known (its checkpoint predates that record)")
            lines.append(f"{method}: resumed at inner step {part.from_step}: this part trained "
                         f"{part.inner_steps} inner steps ({part.tokens:,} tokens) in {part.wall_s:.1f} s"
                         f"{rate}; the table counts the whole run{earlier}")
        if r.diverged:
            lines.append(f"{method}: {Diverged.from_json(r.diverged).message}")
        elif not r.finished:
            lines.append(f"{method}: stopped at outer step {r.outer_steps_done} of "
                         f"{TrainConfig.from_dict(r.config).outer_steps}; "
                         f"the same command with --resume continues it")
    return "\n".join(lines)


def train_or_reuse(cfg: TrainConfig, where: Path, threads: int | None = None) -> dict:
    """The finished run of ``cfg`` in ``where``: reused when the folder holds it (the studies' runs are
    reused by the same command), trained otherwise."""
    from noloco.llm_check.lifecycle import finished_run

    done = finished_run(where, cfg)
    if done is not None:
        return done
    set_threads(threads)
    output_dir(where)
    return Trainer(cfg, where, progress=False).run(overwrite=True)


# ----------------------------------------------------------------- torchrun

def _env_integer(name: str, low: int, high: int | None, default: str | None = None) -> int:
    """The integer environment variable ``name`` (set by torchrun), low <= value (< high); ConfigError otherwise."""
    text = os.environ.get(name, default)
    if text is None:
        raise ConfigError(f"{name} is not set: WORLD_SIZE is, so this looks like a torchrun run, and torchrun sets "
                          f"both (start it with torchrun, or unset WORLD_SIZE for a single process)")
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value >= high) or value >= 1 << 31:
        allowed = f"an integer {low} <= {name} < {high}" if high is not None else f"an integer >= {low}"
        raise ConfigError(f"{name}={text!r} is out of range; allowed: {allowed} (it is set by torchrun)")
    return value


def torchrun_world_size() -> int | None:
    """torchrun's WORLD_SIZE (None outside torchrun); ConfigError when it, or another variable torchrun sets
    (RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), is missing or not an integer in range."""
    text = os.environ.get("WORLD_SIZE")
    if text is None:
        return None
    try:
        world = int(text)
    except ValueError:
        world = 0
    if not 1 <= world < 1 << 31:
        raise ConfigError(f"WORLD_SIZE={text!r} is not a positive integer (it is set by torchrun)")
    _env_integer("RANK", 0, world)
    _env_integer("LOCAL_WORLD_SIZE", 1, world + 1, "1")
    _env_integer("LOCAL_RANK", 0, world, "0")
    if world > 1:
        _env_integer("MASTER_PORT", 1, 65536)
        if not os.environ.get("MASTER_ADDR"):
            raise ConfigError("MASTER_ADDR is not set: WORLD_SIZE is, so this looks like a torchrun run, and torchrun "
                              "sets both (start it with torchrun, or unset WORLD_SIZE for a single process)")
    return world


def train_rank(cfg: TrainConfig, out: str | Path, *, resume: bool = False, stop_after: int | None = None,
               threads: int | None = None, overwrite: bool = False, timeout: float = DEFAULT_TIMEOUT,
               max_memory=None, log_every: int | None = None, tensorboard: bool = False) -> dict:
    """One replica of a torchrun run on this rank (``torchrun ... -m noloco llm train``); its result. Rank 0
    checks and locks the folder once every rank has started, so that all of them learn whether it could
    (:meth:`noloco.llm_check.lifecycle.Lifecycle.start`)."""
    from noloco.training.exchange import DistExchange

    check_run_flags(SimpleNamespace(resume=resume, overwrite=overwrite, stop_after=stop_after, threads=threads,
                                    timeout=timeout, log_every=log_every))
    check_tensorboard(tensorboard)
    set_threads(threads)
    ex = DistExchange.init(cfg, timeout)
    cfg = dataclasses.replace(cfg, device=str(ex.device))  # the rank's device: exchange.rank_device
    try:
        return Trainer(cfg, out, ex, max_memory=max_memory).run(resume=resume, stop_after=stop_after,
                                                                overwrite=overwrite, log_every=log_every,
                                                                tensorboard=tensorboard)
    finally:
        ex.close()
