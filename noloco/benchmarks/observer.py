"""The observer's cost: seconds noloco.Observer spends per outer step, against the outer step it watches.

A user-style model (an MLP of ``depth`` layers of ``width``, tanh, AdamW) trained with noloco.OuterOptimizer
(paper preset, H = ``inner_steps``), N = ``replicas``: in one process (a list of modules; the observer exact,
every coordinate, and sampled, ``sample`` per tensor) or, with ``--ranks``, one replica per gloo process on
this machine (the observer's sample gathered by one all-gather per outer step). The cost is the observer's
own time (``Observer.seconds``: measuring, the gather, writing the folder, the early warnings in the first
outer steps) over the loop's time, as a share of one outer step, early steps and later ones apart.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Optional

from noloco.benchmarks.timer import BenchResult, run
from noloco.infra.record import JsonRecord

WARN = 10  # the early warnings read the folder at outer steps 2..10 (the default at H >= 10: early_warning.check_steps)


@dataclass(frozen=True)
class ModeCost(JsonRecord):
    """One mode's cost: seconds of an outer step without the observer, the observer's seconds and share of it in
    the early outer steps (1 to 11, the warnings) and later ones, the wall time added, the all-gather's part; across
    ranks the costliest rank's, with every rank's in ``ranks``."""

    OPTIONAL_KEYS = ("ranks",)

    outer_step_s: float
    observer_s_early: float
    observer_s_later: float
    share_early: float
    share_later: float
    wall_share_later: float  # the wall time added, observer and all (noisier: two runs of the loop compared)
    gather_s_later: float  # the all-gather's share (across ranks: the wait for the slowest rank included)
    ranks: Optional[list] = None


ModeCost.NESTED = {"ranks": (list, ModeCost)}  # every rank's, read back as records (the class names itself)


@dataclass(frozen=True)
class ObserverCost(JsonRecord):
    """The benchmark's result: the model's size, the threads, each mode's :class:`ModeCost`."""

    NESTED = {"modes": (dict, ModeCost)}

    n_params: int
    threads: int
    modes: dict


@dataclass(frozen=True)
class ObserverOptions(JsonRecord):
    """The benchmark's options (:func:`measure`'s arguments), as its result document stores them; what each rank's
    process is given. The table needs the first five."""

    replicas: int
    width: int
    depth: int
    inner_steps: int
    outer_steps: int
    sample: Optional[int] = None
    ranks: Optional[bool] = None
    threads: Optional[int] = None


def _model(width: int, depth: int):
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def _loop(models, outer_steps, inner_steps, width, ranks_offset=0, observer_kw=None, folder=None):
    """Seconds of each outer step (H inner steps and the outer step) and the observer's seconds at each."""
    import torch

    from noloco.training.observer import Observer
    from noloco.training.outer_optimizer import OuterOptimizer

    inner = torch.optim.AdamW([p for m in models for p in m.parameters()], lr=1e-3)
    target = models if len(models) > 1 else models[0]
    outer = OuterOptimizer(target, inner, inner_steps=inner_steps)
    obs = None if observer_kw is None else Observer(outer, folder, outer_steps=outer_steps, lr=1e-3,
                                                     overwrite=True, **observer_kw)
    steps, seen, waited = [], [], []
    g = torch.Generator().manual_seed(ranks_offset)
    for _ in range(outer_steps):
        start, before = time.perf_counter(), obs.seconds if obs else 0.0
        gathered = obs.gather_seconds if obs else 0.0
        for _ in range(inner_steps):
            inner.zero_grad()
            loss = 0.0
            for m in models:
                x = torch.randn(64, width, generator=g)
                loss = loss + ((m(x) - x[:, :1]) ** 2).mean()
            loss.backward()
            inner.step()
        steps.append(time.perf_counter() - start)
        seen.append((obs.seconds if obs else 0.0) - before)
        waited.append((obs.gather_seconds if obs else 0.0) - gathered)
    if obs:
        obs.close()
    return steps, seen, waited


def _summary(steps, seen, waited, base) -> ModeCost:
    early, late = slice(0, WARN + 1), slice(WARN + 1, None)
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return ModeCost(outer_step_s=mean(base), observer_s_early=mean(seen[early]), observer_s_later=mean(seen[late]),
                    share_early=mean(seen[early]) / mean(base), share_later=mean(seen[late]) / mean(base),
                    wall_share_later=mean(steps[late]) / mean(base[late]) - 1, gather_s_later=mean(waited[late]))


def _rank(rank, world, port, opts, out):
    import datetime
    import json

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    args = (opts.outer_steps, opts.inner_steps, opts.width, rank)
    base, _, _ = _loop([_model(opts.width, opts.depth)], *args)
    steps, seen, waited = _loop([_model(opts.width, opts.depth)], *args, {"sample": opts.sample}, f"{out}/run")
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(_summary(steps, seen, waited, base).to_json(), f)
    dist.destroy_process_group()
    os._exit(0)


def measure(replicas: int = 4, width: int = 256, depth: int = 4, inner_steps: int = 20, outer_steps: int = 20,
            sample: int = 1024, ranks: bool = False, threads: int | None = 1) -> dict:
    import torch

    if threads:
        torch.set_num_threads(threads)
    n_params = sum(p.numel() for p in _model(width, depth).parameters())
    cost = ObserverCost(n_params=n_params, threads=torch.get_num_threads(), modes={})
    if ranks:
        import json

        import torch.multiprocessing as mp

        from noloco.training.exchange import free_port

        with tempfile.TemporaryDirectory() as tmp:
            opts = ObserverOptions(replicas=replicas, width=width, depth=depth, inner_steps=inner_steps,
                                   outer_steps=outer_steps, sample=sample, ranks=ranks, threads=threads)
            mp.start_processes(_rank, args=(replicas, free_port(), opts, tmp), nprocs=replicas, join=True,
                               start_method="spawn")
            per = [ModeCost.from_json(json.load(open(f"{tmp}/rank{r}.json"))) for r in range(replicas)]
        # the costliest rank: a rank that waits in the all-gather for a slower one counts the wait
        worst = max(per, key=lambda r: r.share_later)
        cost.modes[f"{replicas} gloo ranks, sampled {sample}"] = replace(worst, ranks=per)
        return cost.to_json()
    base, _, _ = _loop([_model(width, depth) for _ in range(replicas)], outer_steps, inner_steps, width)
    with tempfile.TemporaryDirectory() as tmp:
        for name, kw in (("one process, exact", {}), (f"one process, sampled {sample}", {"sample": sample})):
            steps, seen, waited = _loop([_model(width, depth) for _ in range(replicas)], outer_steps, inner_steps, width,
                                        observer_kw=kw, folder=f"{tmp}/{len(cost.modes)}")
            cost.modes[name] = _summary(steps, seen, waited, base)
    return cost.to_json()


def bench(**options) -> dict:
    return run("observer", measure, **options)


def format_result(result: dict) -> str:
    doc = BenchResult.from_json(result)
    o, res = ObserverOptions.from_json(doc.options), ObserverCost.from_json(doc.results)
    lines = [f"N={o.replicas}, MLP {o.depth}x{o.width} ({res.n_params} parameters per replica), "
             f"H={o.inner_steps}, {o.outer_steps} outer steps, {res.threads} thread(s)",
             f"{'mode':<32}{'outer step s':>13}{'observer s (1-11)':>19}{'share':>8}{'observer s (later)':>20}"
             f"{'share':>8}{'of it, gather':>14}{'wall +':>8}"]
    for name, r in res.modes.items():
        lines.append(f"{name:<32}{r.outer_step_s:>13.4f}{r.observer_s_early:>19.5f}{r.share_early:>8.2%}"
                     f"{r.observer_s_later:>20.5f}{r.share_later:>8.2%}{r.gather_s_later:>14.5f}"
                     f"{r.wall_share_later:>8.1%}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from noloco.benchmarks.timer import integer

    parser.add_argument("--replicas", type=integer("replicas", 2, 64), default=4, help="replicas N (default 4)")
    parser.add_argument("--width", type=integer("width", 2, 8192), default=256, help="MLP width (default 256)")
    parser.add_argument("--depth", type=integer("depth", 1, 64), default=4, help="MLP hidden layers (default 4)")
    parser.add_argument("--inner-steps", type=integer("inner_steps", 1, 10_000), default=20, help="H (default 20)")
    parser.add_argument("--outer-steps", type=integer("outer_steps", 12, 10_000), default=20,
                        help="outer steps timed (default 20; the first 11 carry the early warnings)")
    parser.add_argument("--sample", type=integer("sample", 2, 10_000_000), default=1024,
                        help="coordinates sampled per tensor (default 1024)")
    parser.add_argument("--ranks", action="store_true", help="one replica per gloo process instead of one process")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per process (default 1)")
