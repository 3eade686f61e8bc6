"""The outer step against the wire's floor: seconds per outer step of noloco.OuterOptimizer, of the reference
implementation's communication pattern, and of the floor, on one transformer-shaped model.

Across ``--ranks R`` gloo processes on this machine (one replica each; NCCL with ``--device cuda``, one GPU per
rank), pairs (n = 2) and DiLoCo (n = N), every mode on the same parameters in the same run, steps interleaved:

* ``toolkit``: :meth:`noloco.OuterOptimizer.sync` (one vector ``beta * progress + gamma * phi`` on the wire, in
  place); ``toolkit, bf16 wire`` the same vector sent in bfloat16; ``toolkit + observer`` with a
  :class:`noloco.Observer` attached (its hook's seconds, between two syncs of the device, are the observer's
  share); ``toolkit, overlapped`` (pairs)
  the same with ``overlap=True``: what the training loop is blocked for at a sync (the wait for the exchange
  started one sync earlier, the step, the next send), after an inner-phase stand-in of ``--inner-matmuls``
  products of two 256 x 256 float32 matrices (not timed; its median seconds are reported) that gives the
  exchange time to fly;
* ``reference pattern``: what the published code is described to do (docs/performance.md), written here from
  that description: the first rank of each group receives phi and the progress of every other member, one
  blocking message per tensor, averages both and sends both means back, tensor by tensor, then the outer step;
* ``floor P`` / ``floor 2P``: one exchange of P (2P) float32 numbers with the partner, nothing else;
  ``floor all-reduce P``: one all-reduce of P float32 numbers (DiLoCo's floor);
* ``toolkit without the exchange`` (pairs): the same step with an exchange that sends nothing, its own passes
  over the buffers alone; ``memory floor (3 copies of P)``: the 6 P numbers any outer step must read or write.

Each step starts after a barrier (not timed); a step's time is its slowest rank's; the median over the steps
is reported, with the bytes each rank sends per outer step.

In one process (``--ranks 1 --replicas N --device cpu|cuda``): the N replicas stacked (the harness's layout),
the toolkit's outer step (pairs and DiLoCo) against the memory-bandwidth floor (the bytes the step must
touch at least, ``6 N P`` numbers of the outer state's dtype: theta read and written, phi and delta read and
written, timed as three copies of N P numbers among the steps), and the observer's share of the outer step
(sampled; the exact observer's cost is ``python -m noloco.benchmarks observer``'s) and of the outer step plus
``--inner-steps`` H inner steps, each timed as AdamW's update of the N replicas alone (no forward or backward:
an upper bound of the share), and what a bfloat16 wire
does to the spread (:func:`wire_spread`). This form needs no torchrun and runs on a single GPU.

Time-boxed: steps are run until ``--seconds`` have passed (at least 3, at most ``--steps``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Optional

from noloco.benchmarks.timer import BenchResult, integer, run
from noloco.infra.record import JsonRecord

#: the model's tensors: a token embedding, ``layers`` blocks of 8 tensors, a final norm
PER_LAYER = 8
#: the one-process form's floor mode (its median is every mode's unit)
MEMORY_FLOOR = "memory floor (3 copies of N P)"
#: the one-process form's floor of an inner step: AdamW's update alone, no forward or backward
INNER_FLOOR = "inner step floor (AdamW update of N P)"


@dataclass(frozen=True)
class OuterOptions(JsonRecord):
    """The benchmark's options (:func:`measure`'s arguments), as its result document stores them; what each rank's
    process is given. The table needs ``ranks`` and ``device``; a result older than the inner-phase stand-in lacks
    ``inner_matmuls``."""

    ranks: int
    device: str
    replicas: Optional[int] = None
    width: Optional[int] = None
    layers: Optional[int] = None
    steps: Optional[int] = None
    seconds: Optional[float] = None
    spread_steps: Optional[int] = None
    inner_matmuls: Optional[int] = None
    inner_steps: Optional[int] = None


@dataclass(frozen=True)
class RankTimes(JsonRecord):
    """What one rank's process hands back (a file in a temporary folder): each mode's seconds per step and the
    observer's seconds in them, P, and the inner-phase stand-in's seconds."""

    times: dict
    observed: dict
    P: int
    inner_s: list


@dataclass(frozen=True)
class RankedMode(JsonRecord):
    """One mode across ranks: the median seconds of a step (its slowest rank's), the steps, the bytes a rank sends
    per step, the observer's median seconds and share (a mode with an observer), the median against the floor."""

    OPTIONAL_KEYS = ("observer_median_s", "observer_share")
    median_s: float
    steps: int
    bytes_sent_per_rank: float
    observer_median_s: Optional[float] = None
    x_floor_P: Optional[float] = None  # always written; after observer_median_s in the result's key order
    observer_share: Optional[float] = None


@dataclass(frozen=True)
class AcrossRanks(JsonRecord):
    """The result across ranks: P, the tensors, the ranks, each mode's :class:`RankedMode`, and the inner-phase
    stand-in's median seconds (None: a result older than the stand-in)."""

    NESTED = {"modes": (dict, RankedMode)}
    OPTIONAL_KEYS = ("inner_stand_in_median_s",)
    P: int
    tensors: int
    ranks: int
    modes: dict
    inner_stand_in_median_s: Optional[float] = None


@dataclass(frozen=True)
class BatchedMode(JsonRecord):
    """One mode in one process: the median seconds of a step, the steps, the median against the memory floor, the
    observer's median seconds and share (a mode with an observer) of the step, and of the step plus H inner steps
    timed as :data:`INNER_FLOOR` (a real inner step also runs forward and backward: an upper bound)."""

    OPTIONAL_KEYS = ("observer_median_s", "observer_share", "observer_share_with_inner")
    median_s: float
    steps: int
    x_memory_floor: float
    observer_median_s: Optional[float] = None
    observer_share: Optional[float] = None
    observer_share_with_inner: Optional[float] = None  # of the step plus H inner steps' floor (an upper bound)


@dataclass(frozen=True)
class WireRun(JsonRecord):
    """One wire's run of :func:`wire_spread`: weight_std of phi at the end, the last outer step's mean loss."""

    weight_std: float
    train_loss_last: float


@dataclass(frozen=True)
class WireSpread(JsonRecord):
    """What a bfloat16 wire does to the spread (:func:`wire_spread`): each wire's run, and the ratio of their
    weight_std."""

    NESTED = {"float32": WireRun, "bfloat16": WireRun}
    float32: WireRun
    bfloat16: WireRun
    weight_std_ratio: float


@dataclass(frozen=True)
class OneProcess(JsonRecord):
    """The result in one process: P, the tensors, the replicas, the device, the copy bandwidth and the memory
    floor of a step, each mode's :class:`BatchedMode`, and the :class:`WireSpread` (None: not run)."""

    NESTED = {"modes": (dict, BatchedMode), "wire_spread": WireSpread}
    OPTIONAL_KEYS = ("wire_spread",)
    P: int
    tensors: int
    replicas: int
    device: str
    copy_bandwidth_GBps: float
    memory_floor_s: float
    modes: dict
    wire_spread: Optional[WireSpread] = None


def shapes(width: int, layers: int, vocab: int = 256) -> dict:
    """A GPT-shaped set of parameter shapes (names and shapes only: the outer step sees no architecture)."""
    blocks = {}
    for i in range(layers):
        blocks.update({f"h{i}.ln1": (width,), f"h{i}.qkv": (width, 3 * width), f"h{i}.proj": (width, width),
                       f"h{i}.ln2": (width,), f"h{i}.fc1": (width, 4 * width), f"h{i}.fc1_b": (4 * width,),
                       f"h{i}.fc2": (4 * width, width), f"h{i}.fc2_b": (width,)})
    return {"wte": (vocab, width), **blocks, "ln_f": (width,)}


def _params(width, layers, lead, device, seed=0):
    import torch

    gen = torch.Generator().manual_seed(seed)
    return {k: torch.nn.Parameter((0.02 * torch.randn(*lead, *s, generator=gen)).to(device))
            for k, s in shapes(width, layers).items()}


def _generators(device, seed: int) -> dict:
    """A seeded generator per device type the parameters may be on (the fake inner phase draws on their device)."""
    import torch

    cuda = {"cuda": torch.Generator(device=device).manual_seed(seed)} if device.type == "cuda" else {}
    return {"cpu": torch.Generator().manual_seed(seed), **cuda}


def _move(params, gen, rank):
    """A fake inner phase: a small step of each replica's own (not timed), drawn on the parameters' device."""
    import torch

    with torch.no_grad():
        for p in params.values():
            p.add_(torch.randn(p.shape, generator=gen[p.device.type] if isinstance(gen, dict) else gen,
                               device=p.device), alpha=1e-3 * (1 + rank))


class _ObserverClock:
    """A :class:`noloco.Observer` on ``outer`` and its seconds, timed by hooks just before and just after its own,
    each after ``sync()`` (the device's): on a GPU the outer step's kernels are still queued when the observer's
    hook starts, and its own are when it returns; a timer inside the observer would count the first and miss
    the second."""

    def __init__(self, outer, sync, folder, **options):
        from noloco.training.observer import Observer

        self.sync, self.seconds, self._started = sync, 0.0, None
        outer.add_progress_hook(self._start)
        self.observer = Observer(outer, folder, outer_steps=10 ** 6, lr=1e-3, overwrite=True, **options)
        outer.add_progress_hook(self._stop)

    def _start(self, *_):
        self.sync()
        self._started = time.perf_counter()

    def _stop(self, *_):
        self.sync()
        self.seconds += time.perf_counter() - self._started

    def close(self):
        self.observer.close()


def _round(modes, gen, rank, sync, times, observed, start=None, inner=None) -> None:
    """One step of every mode, interleaved: a fake inner phase (not timed), then the step timed (and the
    observer's own seconds in it); ``start()`` (a barrier across ranks) just before each, not timed;
    ``inner[name]()`` before a mode's step, the inner-phase stand-in, not timed."""
    for name, (params, step, observer) in modes.items():
        _move(params, gen, rank)
        if inner and name in inner:
            inner[name]()
        seen = observer.seconds if observer else 0.0
        sync()
        if start is not None:
            start()
        t = time.perf_counter()
        step()
        sync()
        times[name].append(time.perf_counter() - t)
        observed[name].append((observer.seconds if observer else 0.0) - seen)


# ------------------------------------------------------------------ across ranks

def _reference_step(params, phi, delta, rule, seed, step, rank, world, device):
    """The reference implementation's pattern, from its description: per tensor, blocking messages to and
    from the group's first rank, which averages phi and the progress; the outer step per tensor."""
    import torch
    import torch.distributed as dist

    from noloco.theory.outer import outer_step
    from noloco.theory.partitions import partition

    group = next(row for row in partition(seed, step, world, 2).tolist() if rank in row)
    lead, others = group[0], group[1:]
    for k, p in params.items():
        progress = p.detach() - phi[k]
        host_phi, host_prog = phi[k].cpu(), progress.cpu()  # through host memory
        if rank == lead:
            sum_phi, sum_prog = host_phi.clone(), host_prog.clone()
            for r in others:
                got = torch.empty_like(host_phi)
                dist.recv(got, r)
                sum_phi += got
                dist.recv(got, r)
                sum_prog += got
            mean_phi, mean_prog = sum_phi / len(group), sum_prog / len(group)
            for r in others:
                dist.send(mean_phi, r)
                dist.send(mean_prog, r)
        else:
            dist.send(host_phi, lead)
            dist.send(host_prog, lead)
            mean_phi, mean_prog = torch.empty_like(host_phi), torch.empty_like(host_prog)
            dist.recv(mean_phi, lead)
            dist.recv(mean_prog, lead)
        phi[k], delta[k] = outer_step(phi[k], delta[k], mean_phi.to(device), mean_prog.to(device), **rule)
        with torch.no_grad():
            p.copy_(phi[k])


class _NoWire:
    """An exchange that sends nothing: the group sum of a group of one (what the step does beside the wire)."""

    def __init__(self, exchange):
        self.inner = exchange

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def group_sum_(self, x, wire, seed, step, group_size, stage=0, meanwhile=None):
        if meanwhile is not None:
            meanwhile()
        return x if wire is x else x.copy_(wire)


def _stand_in(matmuls: int, device, seconds: list):
    """The inner phase's stand-in: ``matmuls`` products of 256 x 256 float32 matrices, its seconds kept."""
    import torch

    a = torch.full((256, 256), 1 / 256, device=device)
    b = a.clone()

    def run():
        t = time.perf_counter()
        for _ in range(matmuls):
            torch.mm(a, b, out=b)
        float(b[0, 0])  # waited for (a GPU runs it asynchronously)
        seconds.append(time.perf_counter() - t)

    return run


def _floor(buffers, seed, step, rank, world, diloco):
    import torch.distributed as dist

    from noloco.theory.partitions import partition

    send, recv = buffers
    if diloco:
        dist.all_reduce(send)
        return
    partner = next(r for row in partition(seed, step, world, 2).tolist() if rank in row for r in row if r != rank)
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, partner), dist.P2POp(dist.irecv, recv, partner)]):
        w.wait()


def _rank(rank, world, port, opts: OuterOptions, out):
    import datetime
    import json

    import torch
    import torch.distributed as dist

    from noloco.training.outer_optimizer import OuterOptimizer

    torch.set_num_threads(1)
    cuda = opts.device == "cuda"
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=300))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gen = _generators(device, 100 + rank)
    modes, P, inner, inner_s, overlapped = {}, None, {}, [], []
    tmp = tempfile.mkdtemp()
    for method in ("noloco", "diloco"):
        tag = "pairs" if method == "noloco" else "DiLoCo"
        for name, wire in (("toolkit", None), ("toolkit, bf16 wire", torch.bfloat16)):
            params = _params(opts.width, opts.layers, (), device)
            outer = OuterOptimizer(params, method=method, inner_steps=1, wire_dtype=wire)
            modes[f"{tag}: {name}"] = (params, outer.sync, None)
        params = _params(opts.width, opts.layers, (), device)
        outer = OuterOptimizer(params, method=method, inner_steps=1)
        modes[f"{tag}: toolkit + observer"] = (params, outer.sync, _ObserverClock(outer, sync, f"{tmp}/{method}"))
        P = sum(p.numel() for p in params.values())
        if method == "noloco":
            # the exchange in flight during the stand-in inner phase; its first sync (a send only) not timed
            params = _params(opts.width, opts.layers, (), device)
            outer = OuterOptimizer(params, method=method, inner_steps=1, overlap=True)
            outer.sync()
            overlapped.append(outer)
            modes[f"{tag}: toolkit, overlapped"] = (params, outer.sync, None)
            inner[f"{tag}: toolkit, overlapped"] = _stand_in(opts.inner_matmuls, device, inner_s)
            # the step's own passes, the exchange taken out (each rank's sum is then its own vector)
            params = _params(opts.width, opts.layers, (), device)
            outer = OuterOptimizer(params, method=method, inner_steps=1)
            outer.exchange = _NoWire(outer.exchange)
            modes[f"{tag}: toolkit without the exchange"] = (params, outer.sync, None)
            P = sum(p.numel() for p in params.values())
            # the 6 P numbers the step must touch at least, as three copies of P
            a, b = torch.full((P,), 0.5, device=device), torch.full((P,), 0.5, device=device)
            modes[f"{tag}: memory floor (3 copies of P)"] = ({}, lambda a=a, b=b: [b.copy_(a) for _ in range(3)], None)
            ref = _params(opts.width, opts.layers, (), device)
            phi = {k: p.detach().clone() for k, p in ref.items()}
            delta = {k: torch.zeros_like(v) for k, v in phi.items()}
            rule = outer.config.rule()

            def reference(ref=ref, phi=phi, delta=delta, rule=rule, counter=itertools.count()):
                _reference_step(ref, phi, delta, rule, 0, next(counter), rank, world, device)

            modes[f"{tag}: reference pattern"] = (ref, reference, None)
        for numbers in ((1,) if method == "diloco" else (1, 2)):
            # written once: untouched (calloc'd) pages would all read one zero page, faster than any model
            buffers = (torch.full((numbers * P,), 0.5, device=device), torch.full((numbers * P,), 0.5, device=device))

            def floor(buffers=buffers, counter=itertools.count(), diloco=method == "diloco"):
                _floor(buffers, 0, next(counter), rank, world, diloco)

            label = "floor all-reduce P" if method == "diloco" else f"floor {'2P' if numbers == 2 else 'P'}"
            modes[f"{tag}: {label}"] = ({}, floor, None)
    times = {name: [] for name in modes}
    observed = {name: [] for name in modes}
    started, steps = time.perf_counter(), 0
    flag = torch.zeros(1, device=device)
    while True:
        _round(modes, gen, rank, sync, times, observed, start=dist.barrier, inner=inner)
        steps += 1
        # every rank must agree to stop (rank 0 decides): a tiny broadcast, not timed
        flag.fill_(float(steps >= opts.steps or (steps >= 3 and time.perf_counter() - started > opts.seconds)))
        dist.broadcast(flag, 0)
        if flag.item():
            break
    for name, (_, _, observer) in modes.items():
        if observer:
            observer.close()
    for outer in overlapped:
        outer.close()  # the last exchange waited for
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(RankTimes(times=times, observed=observed, P=P, inner_s=inner_s).to_json(), f)
    dist.destroy_process_group()
    os._exit(0)


def _bytes_sent(name: str, P: int, world: int) -> float:
    """Bytes one rank sends per outer step (pairs: the mean over the two members of a pair)."""
    if "without the exchange" in name or "memory floor" in name:
        return 0.0
    if "floor" in name:
        n = 2 if "2P" in name else 1
        return 4 * n * P * (2 * (world - 1) / world if "all-reduce" in name else 1)  # ring all-reduce
    if "reference" in name:
        return 4 * 2 * P  # the member sends phi and progress, the first rank both means back
    size = 2 if "bf16" in name else 4
    if name.startswith("DiLoCo"):
        return size * P * 2 * (world - 1) / world
    return size * P


def _across_ranks(ranks, opts: OuterOptions) -> AcrossRanks:
    import json

    import torch.multiprocessing as mp

    from noloco.training.exchange import free_port

    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_rank, args=(ranks, free_port(), opts, tmp), nprocs=ranks, join=True, start_method="spawn")
        per = [RankTimes.from_json(json.load(open(f"{tmp}/rank{r}.json"))) for r in range(ranks)]
    first = per[0]
    slowest = {name: [max(r.times[name][i] for r in per) for i in range(len(steps))]
               for name, steps in first.times.items()}
    median = {name: statistics.median(s) for name, s in slowest.items()}
    modes = {}
    for name, s in slowest.items():
        observer = [max(r.observed[name][i] for r in per) for i in range(len(s))]
        seen = statistics.median(observer) if any(observer) else None
        tag = name.split(":")[0]
        floor = median[f"{tag}: floor {'all-reduce P' if tag == 'DiLoCo' else 'P'}"]
        modes[name] = RankedMode(median_s=median[name], steps=len(s), bytes_sent_per_rank=_bytes_sent(name, first.P, ranks),
                                 observer_median_s=seen, x_floor_P=median[name] / floor,
                                 observer_share=None if seen is None else seen / median[name])
    inner = [max(r.inner_s[i] for r in per) for i in range(len(first.inner_s))]
    return AcrossRanks(P=first.P, tensors=len(shapes(opts.width, opts.layers)), ranks=ranks, modes=modes,
                       inner_stand_in_median_s=statistics.median(inner) if inner else 0.0)


# ------------------------------------------------------------------ in one process

def _one_process(replicas, opts: OuterOptions) -> OneProcess:
    import torch

    from noloco.training.outer_optimizer import OuterOptimizer

    device = torch.device(opts.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        from noloco.infra.errors import ConfigError

        raise ConfigError("device=cuda but torch sees no GPU")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gen = _generators(device, 1)
    tmp = tempfile.mkdtemp()
    modes = {}
    for method in ("noloco", "diloco"):
        tag = "pairs" if method == "noloco" else "DiLoCo"
        for label, observe in (("toolkit", None), ("toolkit + observer (sampled 1024)", {"sample": 1024})):
            params = _params(opts.width, opts.layers, (replicas,), device)
            outer = OuterOptimizer(params, method=method, replicas=replicas, inner_steps=1)
            obs = None if observe is None else _ObserverClock(outer, sync, f"{tmp}/{method}{len(modes)}", **observe)
            modes[f"{tag}: {label}"] = (params, outer.sync, obs)
    P = sum(p[0].numel() for p in next(iter(modes.values()))[0].values())
    # the floor: the 6 N P numbers the step must touch, moved by three copies of N P (timed among the steps)
    # written once: untouched (calloc'd) pages would all read one zero page, faster than any model
    a, b = torch.full((replicas * P,), 0.5, device=device), torch.full((replicas * P,), 0.5, device=device)
    modes[MEMORY_FLOOR] = ({}, lambda: [b.copy_(a) for _ in range(3)], None)
    if opts.inner_steps:
        params = _params(opts.width, opts.layers, (replicas,), device)
        for p in params.values():
            p.grad = torch.full_like(p, 1e-3)
        adam = torch.optim.AdamW(params.values(), lr=1e-3)
        modes[INNER_FLOOR] = (params, adam.step, None)
    times = {name: [] for name in modes}
    observed = {name: [] for name in modes}
    started, steps = time.perf_counter(), 0
    while steps < opts.steps and (steps < 3 or time.perf_counter() - started < opts.seconds):
        _round(modes, gen, 0, sync, times, observed)
        steps += 1
    for _, _, obs in modes.values():
        if obs:
            obs.close()
    floor = statistics.median(times[MEMORY_FLOOR])
    inner = opts.inner_steps * statistics.median(times[INNER_FLOOR]) if opts.inner_steps else None
    out = {}
    for name in modes:
        median = statistics.median(times[name])
        seen = statistics.median(observed[name]) if any(observed[name]) else None
        out[name] = BatchedMode(median_s=median, steps=len(times[name]), x_memory_floor=median / floor,
                                observer_median_s=seen, observer_share=None if seen is None else seen / median,
                                observer_share_with_inner=None if seen is None or inner is None else
                                seen / (median + inner))
    return OneProcess(P=P, tensors=len(shapes(opts.width, opts.layers)), replicas=replicas,
                      device=str(device) if not cuda else torch.cuda.get_device_name(device),
                      copy_bandwidth_GBps=3 * 2 * 4 * replicas * P / floor / 1e9, memory_floor_s=floor, modes=out)


def wire_spread(device: str = "cpu", replicas: int = 4, inner_steps: int = 5, outer_steps: int = 20) -> WireSpread:
    """What a bfloat16 wire does to the spread: the same small regression (an MLP 8-32-1 per replica, each its own
    data, AdamW, the paper preset) trained with the float32 wire and with the bfloat16 one; weight_std of phi
    after the last outer step, and the replicas' mean training loss over the last outer step."""
    import torch

    f32, bf16 = (_wire_run(device, wire, replicas, inner_steps, outer_steps) for wire in (None, torch.bfloat16))
    return WireSpread(float32=f32, bfloat16=bf16, weight_std_ratio=bf16.weight_std / f32.weight_std)


def _wire_run(device, wire, replicas: int, inner_steps: int, outer_steps: int) -> WireRun:
    """One run of :func:`wire_spread` with the wire's dtype ``wire`` (None: float32)."""
    import torch

    from noloco.llm_check.trainer import weight_std
    from noloco.training.outer_optimizer import OuterOptimizer

    torch.manual_seed(0)
    first = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(device)
    models = [first] + [torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(),
                                            torch.nn.Linear(32, 1)).to(device) for _ in range(replicas - 1)]
    for m in models[1:]:
        m.load_state_dict(first.state_dict())
    inner = torch.optim.AdamW([p for m in models for p in m.parameters()], lr=1e-2)
    outer = OuterOptimizer(models, inner, inner_steps=inner_steps, wire_dtype=wire)
    losses = []
    for step in range(outer_steps * inner_steps):
        inner.zero_grad()
        loss = 0.0
        for i, m in enumerate(models):
            x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1000 * i + step)).to(device)
            loss = loss + ((m(x) - torch.sin(x.sum(1, keepdim=True))) ** 2).mean()
        loss.backward()
        inner.step()
        losses.append(float(loss.detach()) / replicas)
    return WireRun(weight_std=weight_std(outer.phi), train_loss_last=sum(losses[-inner_steps:]) / inner_steps)


def measure(ranks: int = 4, replicas: int = 8, device: str = "cpu", width: int = 160, layers: int = 6,
            steps: int = 200, seconds: float = 5.0, spread_steps: int = 20, inner_matmuls: int = 40,
            inner_steps: int = 50) -> dict:
    """The benchmark's ``results`` (:func:`noloco.benchmarks.timer.run`): an :class:`AcrossRanks`' JSON with
    ``ranks > 1``, else a :class:`OneProcess`'s."""
    import torch

    opts = OuterOptions(ranks=ranks, replicas=replicas, device=device, width=width, layers=layers, steps=steps,
                        seconds=seconds, spread_steps=spread_steps, inner_matmuls=inner_matmuls,
                        inner_steps=inner_steps if ranks == 1 else None)
    if ranks > 1:
        if device == "cuda" and torch.cuda.device_count() < ranks:
            from noloco.infra.errors import ConfigError

            raise ConfigError(f"--ranks {ranks} --device cuda needs {ranks} GPUs, torch sees "
                                   f"{torch.cuda.device_count()}; give --ranks 1 --replicas N for one GPU")
        return _across_ranks(ranks, opts).to_json()
    torch.set_num_threads(1)  # as each rank has: on a shared machine, a second thread per op mostly waits for a core
    out = _one_process(replicas, opts)
    return replace(out, wire_spread=wire_spread(device, outer_steps=spread_steps) if spread_steps else None).to_json()


def bench(**options) -> dict:
    return run("outer", measure, **options)


def _share(mode) -> str:
    """The observer's share of a mode's step, or nothing (a mode without an observer)."""
    return f"{mode.observer_share:.1%}" if mode.observer_share is not None else ""


def format_result(result: dict) -> str:
    doc = BenchResult.from_json(result)
    o = OuterOptions.from_json(doc.options)
    if o.ranks > 1:
        res = AcrossRanks.from_json(doc.results)
        lines = [f"{res.ranks} ranks ({o.device}): P = {res.P:,} parameters in {res.tensors} tensors",
                 f"inner-phase stand-in before the overlapped step: {o.inner_matmuls} products of "
                 f"256 x 256, median {(res.inner_stand_in_median_s or 0) * 1e3:.1f} ms (slowest rank)",
                 f"{'mode':<38}{'median ms':>10}{'x floor P':>10}{'MB sent':>9}{'observer':>10}"]
        for name, m in res.modes.items():
            lines.append(f"{name:<38}{m.median_s * 1e3:>10.2f}{m.x_floor_P:>10.2f}"
                         f"{m.bytes_sent_per_rank / 1e6:>9.2f}{_share(m):>10}")
        return "\n".join(lines)
    one = OneProcess.from_json(doc.results)
    lines = [f"one process, {one.replicas} replicas on {one.device}: P = {one.P:,} parameters in {one.tensors} tensors",
             f"copy bandwidth {one.copy_bandwidth_GBps:.1f} GB/s; memory floor of one outer step "
             f"{one.memory_floor_s * 1e3:.3f} ms",
             f"{'mode':<42}{'median ms':>10}{'x floor':>9}{'observer':>10}"
             f"{f'with H = {o.inner_steps} inner' if o.inner_steps else '':>20}"]
    for name, b in one.modes.items():
        with_inner = f"{b.observer_share_with_inner:.1%}" if b.observer_share_with_inner is not None else ""
        lines.append(f"{name:<42}{b.median_s * 1e3:>10.3f}{b.x_memory_floor:>9.2f}{_share(b):>10}{with_inner:>20}")
    w = one.wire_spread
    if w is not None:
        lines.append(f"the wire's dtype on a small regression (4 replicas, pairs): weight_std float32 "
                     f"{w.float32.weight_std:.4e}, bfloat16 {w.bfloat16.weight_std:.4e} "
                     f"(x{w.weight_std_ratio:.3f}); train loss {w.float32.train_loss_last:.4f} vs "
                     f"{w.bfloat16.train_loss_last:.4f}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from noloco.infra.checks import check_real
    from noloco.infra.entry import argument_type

    parser.add_argument("--ranks", type=integer("ranks", 1, 64), default=4,
                        help="processes, one replica each (default 4; 1: the replicas batched in this process)")
    parser.add_argument("--replicas", type=integer("replicas", 2, 1024), default=8,
                        help="replicas in one process with --ranks 1 (default 8)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu (gloo) or cuda (NCCL across ranks; one GPU with --ranks 1)")
    parser.add_argument("--width", type=integer("width", 8, 8192), default=160,
                        help="model width (default 160: 1.9 M parameters with 6 layers)")
    parser.add_argument("--layers", type=integer("layers", 1, 256), default=6, help="blocks of 8 tensors (default 6)")
    parser.add_argument("--steps", type=integer("steps", 3, 100_000), default=200, help="at most this many steps")
    parser.add_argument("--seconds", type=argument_type(float, lambda v: check_real(
        "seconds", v, "0 < seconds <= 3600", lambda x: 0 < x <= 3600)), default=5.0,
        help="time box: steps stop after this many seconds (at least 3 steps; default 5)")
    parser.add_argument("--inner-matmuls", type=integer("inner_matmuls", 0, 100_000), default=40,
                        help="the inner-phase stand-in before the overlapped step across ranks: products of two "
                             "256 x 256 float32 matrices (default 40)")
    parser.add_argument("--inner-steps", type=integer("inner_steps", 0, 100_000), default=50,
                        help="H for the observer's share of an outer step plus H inner steps in one process, each "
                             "timed as AdamW's update of the N replicas alone (an upper bound; default 50; 0: none)")
    parser.add_argument("--spread-steps", type=integer("spread_steps", 0, 10_000), default=20,
                        help="outer steps of the bfloat16 wire's spread check in one process (default 20; 0: none)")
