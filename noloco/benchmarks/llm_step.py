"""Tokens per second of one training step (forward, backward, clipping, AdamW) for
N replicas, four ways:

- batched: the replica-dimension model, all N replicas in one set of kernels;
- loop: the same model sliced to one replica at a time (what N separate models cost);
- vmap: ``torch.func.vmap`` of the one-replica gradient over the replicas;
- one model, N-times batch: the same FLOPs with no replica dimension (the limit).

``python -m benchmarks llm-step --replicas 8 --size cpu-small`` or ``noloco llm bench`` (the same flags).
On a GPU it also reports the model FLOPs utilisation against the bf16 dense peak.
torch is imported inside the functions, so that building the command line stays fast.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from typing import Optional

from noloco.benchmarks.timer import BenchResult, best_of, run
from noloco.llm_check.config import build
from noloco.llm_check.resources import peak_flops
from noloco.infra.checks import check_integer
from noloco.infra.record import JsonRecord

SIZES = ("cpu-tiny", "cpu-small", "gpu", "gpu-large")
#: the modes every other mode's rate is set against: N separate models, and one model of the same FLOPs
LOOP, ONE_MODEL = "loop", "one model, N x batch"


@dataclass(frozen=True)
class StepOptions(JsonRecord):
    """The benchmark's options as its result stores them (:func:`measure`'s arguments): the table heads with the
    first three."""

    OPTIONAL_KEYS = ("steps", "threads", "compiled")
    replicas: int
    size: str
    device: str
    steps: Optional[int] = None
    threads: Optional[int] = None
    compiled: Optional[bool] = None


@dataclass(frozen=True)
class ModeRate(JsonRecord):
    """One mode's step: tokens per second, seconds per step and of the warm-up, the MFU (on a GPU), the rate
    against the loop and against one model; or the error that stopped it (its first line), alone."""

    OPTIONAL_KEYS = ("tokens_per_s", "step_s", "warmup_s", "mfu", "vs_loop", "vs_one_model", "error")

    tokens_per_s: Optional[float] = None
    step_s: Optional[float] = None
    warmup_s: Optional[float] = None
    mfu: Optional[float] = None
    vs_loop: Optional[float] = None
    vs_one_model: Optional[float] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class StepRates(JsonRecord):
    """The benchmark's result: the threads, the model's parameters, each mode's :class:`ModeRate`."""

    NESTED = {"modes": (dict, ModeRate)}

    threads: int
    n_params: int
    modes: dict


def _trainer(size: str, replicas: int, batch_scale: int, mode: str, device: str, compiled: bool = False,
             foreach: bool = False):
    """The size's trainer; ``foreach``: AdamW's multi-tensor kernels instead of the fused one a GPU run uses
    (what the fused kernel gains)."""
    import torch

    from noloco.llm_check.trainer import Trainer

    cfg = build(size, "noloco", replicas=replicas, group_size=1, device=device, replica_mode=mode,
                batch=build(size).batch * batch_scale, compile=compiled)
    tr = Trainer(cfg, "/tmp/llm-bench-unused", progress=False)
    if foreach and isinstance(tr.opt, torch.optim.AdamW):
        # fresh groups: the trainer's carry its own fused=True, which a group passed whole would keep
        groups = [{"params": g["params"], "weight_decay": g["weight_decay"]}  # edge: torch's param groups
                  for g in tr.opt.param_groups]
        tr.opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.adam_beta2), eps=1e-8, foreach=True)
    return tr


def _modes(replicas: int, device: str, compiled: bool) -> list[tuple]:
    """(name, batch scale, replica mode, replicas, compiled, foreach AdamW) of each timed mode."""
    modes = [("batched", 1, "batched", replicas, False, False), (LOOP, 1, "loop", replicas, False, False),
             ("vmap", 1, "batched", replicas, False, False), (ONE_MODEL, replicas, "batched", 1, False, False)]
    if device.startswith("cuda"):
        modes.insert(1, ("batched, foreach AdamW", 1, "batched", replicas, False, True))
    if compiled:
        modes += [("batched, compiled", 1, "batched", replicas, True, False),
                  ("one model, compiled", replicas, "batched", 1, True, False)]
    return modes


def _vmap_step(tr) -> None:
    from torch.func import grad_and_value, vmap

    from noloco.llm_check.model import losses

    def one(p, w):
        loss = losses({k: v.unsqueeze(0) for k, v in p.items()}, w.unsqueeze(0), tr.model)
        return loss.sum()

    detached = {k: v.detach() for k, v in tr.params.items()}
    grads, _ = vmap(grad_and_value(one))(detached, tr._windows(0))
    for k, p in tr.params.items():
        p.grad = grads[k].to(p.dtype).contiguous()  # the fused AdamW a GPU run uses takes gradients like its weights
    tr._clip()
    tr.opt.step()


def _seconds_per_step(fn, device: str, steps: int) -> tuple[float, float]:
    """Mean seconds of one of ``steps`` consecutive steps, after two warm-up steps (allocator, kernels, a
    compilation), and the warm-up's seconds."""
    import time

    import torch

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    start = time.perf_counter()
    fn(0)
    fn(1)
    sync()
    warmup = time.perf_counter() - start

    def all_steps():
        for s in range(steps):
            fn(s)
        sync()

    return best_of(all_steps, 1) / steps, warmup


def measure(replicas: int = 8, size: str = "cpu-small", device: str = "cpu", steps: int = 10,
            threads: int | None = None, compiled: bool = False) -> dict:
    """Tokens per second of each mode (the ``results`` of :func:`noloco.benchmarks.timer.run`); with
    ``compiled`` also the batched and the one-model step under ``torch.compile`` (its compilation in the
    warm-up steps, reported as ``warmup_s``)."""
    import torch

    from noloco.llm_check.trainer import set_threads

    check_integer("replicas", replicas, "an integer >= 1", lambda v: v >= 1)
    check_integer("steps", steps, "an integer >= 1", lambda v: v >= 1)
    set_threads(threads)
    modes = {}
    for name, scale, mode, n, compiled_mode, foreach in _modes(replicas, device, compiled):
        tr = _trainer(size, n, scale, mode, device, compiled_mode, foreach)
        fn = (lambda s: _vmap_step(tr)) if name == "vmap" else tr.inner_step
        try:
            seconds, warmup = _seconds_per_step(fn, device, steps)
        except RuntimeError as err:  # vmap lacks batching rules on some devices
            modes[name] = ModeRate(error=str(err).splitlines()[0])
            continue
        finally:
            if device.startswith("cuda"):  # the last mode's cached blocks would crowd the next one
                torch.cuda.empty_cache()
        tokens = tr.cfg.tokens_per_inner_step()
        peak = peak_flops(device)
        modes[name] = ModeRate(tokens_per_s=tokens / seconds, step_s=seconds, warmup_s=warmup,
                               mfu=tr.model.flops_per_token() * tokens / seconds / peak if peak else None)
    loop, limit = modes[LOOP].tokens_per_s, modes[ONE_MODEL].tokens_per_s
    modes = {name: r if r.tokens_per_s is None else
             replace(r, vs_loop=r.tokens_per_s / loop, vs_one_model=r.tokens_per_s / limit) for name, r in modes.items()}
    return StepRates(threads=torch.get_num_threads(), n_params=tr.cfg.model().n_params(), modes=modes).to_json()


def bench(replicas: int = 8, size: str = "cpu-small", device: str = "cpu", steps: int = 10,
          threads: int | None = None, compiled: bool = False) -> dict:
    """The benchmark as one result document of :mod:`noloco.benchmarks.timer` (machine, versions, load)."""
    return run("llm-step", measure, replicas=replicas, size=size, device=device, steps=steps, threads=threads,
               compiled=compiled)


def format_result(result: dict) -> str:
    doc = BenchResult.from_json(result)
    options, res = StepOptions.from_json(doc.options), StepRates.from_json(doc.results)
    lines = [f"N={options.replicas} replicas, {options.size} model ({res.n_params} parameters), "
             f"{options.device}, {res.threads} thread(s), torch {doc.machine.torch if doc.machine else None}",
             f"{'mode':<22} {'tokens/s':>10} {'vs loop':>8} {'vs one model':>12}"]
    for name, r in res.modes.items():
        if r.error is not None:
            lines.append(f"{name:<22} failed: {r.error}")
            continue
        mfu = f"  MFU {r.mfu:.1%}" if r.mfu is not None else ""
        lines.append(f"{name:<22} {r.tokens_per_s:>10.0f} {r.vs_loop:>8.2f} {r.vs_one_model:>12.2f}{mfu}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of :func:`measure` (the interface of a ``python -m benchmarks`` suite)."""
    from noloco.benchmarks.timer import integer

    parser.add_argument("--replicas", type=integer("replicas", 1, 1_000_000), default=8, help="replicas N (default 8)")
    parser.add_argument("--size", choices=SIZES, default="cpu-small",
                        help="model size: the llm preset of that name (default cpu-small)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:K (default cpu)")
    parser.add_argument("--steps", type=integer("steps", 1, 100_000), default=10,
                        help="timed inner steps per mode, after 2 warm-up steps")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default torch's; 1 is much faster on a shared, busy CPU)")
    parser.add_argument("--compile", action="store_true", dest="compiled",
                        help="also time the batched and the one-model step under torch.compile (each compiles "
                             "in its warm-up: about a minute)")


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of ``noloco llm bench``: those of ``python -m benchmarks llm-step``."""
    from noloco.benchmarks.timer import add_output_arguments

    add_arguments(parser)
    add_output_arguments(parser)


def bench_from_args(args) -> dict:
    return bench(args.replicas, args.size, args.device, args.steps, args.threads, args.compiled)


def bench_command(args) -> None:
    """``noloco llm bench``: the output place checked before the benchmark, then the result printed (and
    stored with ``--out``) as ``python -m noloco.benchmarks llm-step`` does."""
    import warnings

    from noloco.benchmarks.timer import emit
    from noloco.infra.files import output_file

    if args.out is not None:
        output_file(args.out)  # before the benchmark, not after it
    with warnings.catch_warnings():  # torch.func's note that vmap falls back to a loop for attention
        warnings.filterwarnings("ignore", message=r"There is a performance drop because we have not yet implemented")
        emit(bench_from_args(args), args, format_result)
