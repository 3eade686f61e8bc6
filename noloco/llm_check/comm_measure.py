"""Measure torch.distributed (gloo, 127.0.0.1) and compare with :mod:`noloco.theory.comm`.

``noloco llm study comm [--out docs/data/comm_measured.json]``

For each N in ``--ranks`` it starts N processes and times, for each payload in
``--sizes``: ``all_reduce`` of a float32 buffer, a pairwise exchange (ranks 2i and
2i+1 swap buffers with isend/irecv at the same time, an odd last rank sits out), and
for N = 2 a ping-pong. A timed repetition starts after a barrier and lasts, on the
slowest rank, until its call returns.

The model is fitted out of sample: the latency and the seconds per byte from the N = 2
ping-pong (one message = half a round trip), the reduce cost per byte from the N = 2
all-reduce (the three Hockney costs of :class:`noloco.theory.comm.Network`); the all-reduce for
N >= 3 (gloo's ring) and the pairwise exchanges are then predicted, not fitted.
Each N is also fitted on its own (time = a + b m) to show the effective latency and
per-byte cost. On a machine with fewer cores than processes the ranks share cores,
which the model does not know about; the JSON records the spread of every cell.

torch is imported inside functions only (also through :mod:`noloco.training.exchange`): it is an
optional extra, and ``--help`` stays fast.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from noloco.theory import comm
from noloco.infra.checks import check_at_least
from noloco.infra.errors import ConfigError
from noloco.infra.files import SCHEMA_VERSION, output_file, write_json
from noloco.infra.record import JsonRecord

DEFAULT_OUT = "docs/data/comm_measured.json"
DEFAULT_SIZES = tuple(1024 * 4 ** k for k in range(9))  # 1 KiB .. 64 MiB


@dataclass(frozen=True)
class Cell(JsonRecord):
    """One op at one N and payload: its timed repetitions and their quantiles; the model's time once fitted."""

    OPTIONAL_KEYS = ("model_s", "ratio", "fitted_on")

    op: str
    ranks: int
    bytes: int
    times_s: list
    median_s: float
    p10_s: float
    p90_s: float
    rel_iqr: float
    model_s: Optional[float] = None
    ratio: Optional[float] = None
    fitted_on: Optional[bool] = None


@dataclass(frozen=True)
class Fit(JsonRecord):
    """The Hockney costs fitted out of sample (and what they were fitted on)."""

    latency_s: float
    seconds_per_byte: float
    bandwidth_bits_per_s: Optional[float]
    reduce_seconds_per_byte: float
    source: str


@dataclass(frozen=True)
class EffectiveFit(JsonRecord):
    """One op at one N fitted on its own (time = a + b m), beside what the model says a and b are."""

    op: str
    ranks: int
    latency_s: float
    seconds_per_byte: float
    model_latency_s: float
    model_seconds_per_byte: float


@dataclass(frozen=True)
class CommSummary(JsonRecord):
    median_rel_iqr: float
    max_rel_iqr: float
    held_out_ratio_median: Optional[float]
    held_out_ratio_range: Optional[list]


@dataclass(frozen=True)
class Machine(JsonRecord):
    cpus: Optional[int]
    python: str
    torch: str
    platform: str
    backend: str
    address: str
    loadavg_before: list
    loadavg_after: list


@dataclass(frozen=True)
class CommSettings(JsonRecord):
    ranks: list
    sizes_bytes: list
    base_repeats: int
    dtype: str
    timing: str


@dataclass(frozen=True)
class Analysis(JsonRecord):
    """The model fitted on some cells and every cell against it."""

    NESTED = {"fit": Fit, "effective_fits": (list, EffectiveFit), "summary": CommSummary,
              "measurements": (list, Cell)}

    fit: Fit
    effective_fits: list
    summary: CommSummary
    measurements: list


@dataclass(frozen=True)
class CommReport(JsonRecord):
    """``comm_measured.json``: the machine, the sweep's settings, the fitted model and every cell."""

    NESTED = {"machine": Machine, "settings": CommSettings, **Analysis.NESTED}

    schema_version: int
    machine: Machine
    settings: CommSettings
    fit: Fit
    effective_fits: list
    summary: CommSummary
    measurements: list
    wall_seconds: float


def _repeats(nbytes: int, base: int) -> int:
    """Fewer repetitions for large payloads, so that the sweep stays within minutes."""
    return max(3, base // max(1, int(math.log(max(nbytes, 1) / 1024, 4))))


def _worker(rank: int, world: int, port: int, sizes, base_repeats: int, queue) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    partner = rank ^ 1 if (rank ^ 1) < world else None

    def pair_exchange(send, recv):
        if partner is not None:
            for req in (dist.isend(send, partner), dist.irecv(recv, partner)):
                req.wait()

    def ping_pong(send, recv):
        if rank == 0:
            dist.send(send, 1)
            dist.recv(recv, 1)
        elif rank == 1:
            dist.recv(recv, 0)
            dist.send(send, 0)

    ops = [("allreduce", lambda send, recv: dist.all_reduce(send)), ("pair_exchange", pair_exchange)]
    ops += [("pingpong", ping_pong)] if world == 2 else []  # ping-pong needs exactly two ranks
    out = []
    try:
        for nbytes in sizes:
            send = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
            recv = torch.empty_like(send)
            for op, fn in ops:
                times = []
                for rep in range(_repeats(nbytes, base_repeats) + 1):  # the first one warms up
                    dist.barrier()
                    t0 = time.perf_counter()
                    fn(send, recv)
                    if rep:
                        times.append(time.perf_counter() - t0)
                out.append((op, nbytes, times))
        queue.put((rank, out))
    finally:
        dist.destroy_process_group()


def run_world(world: int, sizes, base_repeats: int) -> list[Cell]:
    """Start ``world`` processes, time every op and size; a repetition's time is the
    slowest rank's."""
    import multiprocessing as mp

    from noloco.training.exchange import free_port

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, tuple(sizes), base_repeats, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=900) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise RuntimeError(f"rank process exited with {p.exitcode}")
    cells = []
    for k, (op, nbytes, _) in enumerate(results[0]):
        times = np.max([results[r][k][2] for r in range(world)], axis=0)
        if op == "pingpong":
            times = times / 2  # one message is half a round trip
        q10, q25, q50, q75, q90 = np.quantile(times, [0.1, 0.25, 0.5, 0.75, 0.9])
        cells.append(Cell(op=op, ranks=world, bytes=int(4 * max(1, nbytes // 4)), times_s=times.tolist(),
                          median_s=q50, p10_s=q10, p90_s=q90, rel_iqr=(q75 - q25) / q50))
    return cells


def _fit_line(m, t) -> tuple[float, float]:
    """t ~ a + b m with a, b >= 0, fitted on relative residuals (sizes span 5 decades)
    with a soft-L1 loss: on loopback a few mid-size payloads stall for milliseconds
    (see docs/data/comm_measured.json), and a least-squares line would bend towards them."""
    from scipy.optimize import least_squares

    m, t = np.asarray(m, float), np.asarray(t, float)
    A = np.stack([np.ones_like(m), m], axis=1) / t[:, None]
    (a0, b0), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    scale = np.array([t.min(), t.max() / max(m.max(), 1.0)])  # a in seconds, b in seconds per byte
    start = np.clip([a0, b0], 0, None) / scale + 1e-6
    fit = least_squares(lambda x: (A @ (x * scale)) - 1, start, bounds=(0, np.inf), loss="soft_l1", f_scale=0.1)
    a, b = fit.x * scale
    return float(a), float(b)


def _predict(net: comm.Network, cell: Cell) -> float:
    if cell.op == "allreduce":
        return comm.ring_allreduce(net, cell.bytes, cell.ranks)
    return net.message(cell.bytes)  # ping-pong: one message; pairs: one swap, nothing summed


def analyse(cells: list[Cell]) -> Analysis:
    """Fit the latency and the seconds per byte (N = 2 ping-pong) and the reduce cost per
    byte (N = 2 all-reduce), predict the rest."""
    ping = [c for c in cells if c.op == "pingpong"]
    latency, per_byte = _fit_line([c.bytes for c in ping], [c.median_s for c in ping])
    # Ring with p = 2: 2 L + m b + m/2 r, so the reduce cost r from the residual.
    ar2 = [c for c in cells if c.op == "allreduce" and c.ranks == 2]
    m = np.array([c.bytes for c in ar2], float)
    resid = np.array([c.median_s for c in ar2]) - 2 * latency - m * per_byte
    big = m >= 2 ** 20  # the reduce cost only shows at large payloads
    reduce_cost = max(0.0, float(np.median(resid[big] / (m[big] / 2)))) if big.any() else 0.0
    net = comm.Network(latency, per_byte, reduce_cost)
    cells = [dataclasses.replace(c, model_s=_predict(net, c), ratio=c.median_s / _predict(net, c),
                                 fitted_on=c.op == "pingpong" or (c.op == "allreduce" and c.ranks == 2))
             for c in cells]
    effective = []
    for op in ("allreduce", "pair_exchange"):
        for world in sorted({c.ranks for c in cells if c.op == op}):
            sel = [c for c in cells if c.op == op and c.ranks == world]
            a, b = _fit_line([c.bytes for c in sel], [c.median_s for c in sel])
            if op == "allreduce":
                model_a, model_b = 2 * (world - 1) * latency, (world - 1) / world * (2 * per_byte + reduce_cost)
            else:
                model_a, model_b = latency, per_byte
            effective.append(EffectiveFit(op=op, ranks=world, latency_s=a, seconds_per_byte=b,
                                          model_latency_s=model_a, model_seconds_per_byte=model_b))
    held_out = [c.ratio for c in cells if not c.fitted_on]
    fit = Fit(latency_s=latency, seconds_per_byte=per_byte,
              bandwidth_bits_per_s=8 / per_byte if per_byte else None, reduce_seconds_per_byte=reduce_cost,
              source="latency, seconds per byte: N=2 ping-pong medians (robust fit); reduce seconds per "
                     "byte: N=2 all-reduce medians >= 1 MiB")
    summary = CommSummary(
        median_rel_iqr=float(np.median([c.rel_iqr for c in cells])),
        max_rel_iqr=float(np.max([c.rel_iqr for c in cells])),
        held_out_ratio_median=float(np.median(held_out)) if held_out else None,
        held_out_ratio_range=[float(np.min(held_out)), float(np.max(held_out))] if held_out else None)
    return Analysis(fit=fit, effective_fits=effective, summary=summary, measurements=cells)


def measure(ranks=range(2, 9), sizes=DEFAULT_SIZES, base_repeats: int = 20, progress: bool = True) -> CommReport:
    import torch
    from tqdm.auto import tqdm

    if 2 not in ranks:
        raise ValueError(f"ranks={list(ranks)!r} must include 2: the model is fitted on N = 2")
    start, load_before = time.perf_counter(), os.getloadavg()
    cells = []
    for world in tqdm(list(ranks), desc="N", disable=not progress):
        cells += run_world(world, sizes, base_repeats)
    machine = Machine(cpus=os.cpu_count(), python=platform.python_version(), torch=torch.__version__,
                      platform=platform.platform(), backend="gloo", address="127.0.0.1",
                      loadavg_before=list(load_before), loadavg_after=list(os.getloadavg()))
    settings = CommSettings(ranks=list(ranks), sizes_bytes=list(sizes), base_repeats=base_repeats, dtype="float32",
                            timing="barrier, then slowest rank's time.perf_counter")
    found = analyse(cells)
    return CommReport(schema_version=SCHEMA_VERSION, machine=machine, settings=settings, fit=found.fit,
                      effective_fits=found.effective_fits, summary=found.summary, measurements=found.measurements,
                      wall_seconds=time.perf_counter() - start)


def format_table(data: CommReport) -> str:
    fit = data.fit
    lines = [f"fit: latency {fit.latency_s * 1e6:.1f} us, {fit.seconds_per_byte * 1e9:.3f} ns/B "
             f"({(fit.bandwidth_bits_per_s or math.inf) / 8e9:.2f} GB/s), reduce "
             f"{fit.reduce_seconds_per_byte * 1e9:.3f} ns/B  ({fit.source})",
             f"{'op':<14}{'N':>3}{'bytes':>10}{'median s':>12}{'p10':>11}{'p90':>11}{'model s':>11}{'meas/model':>11}"]
    for c in data.measurements:
        lines.append(f"{c.op:<14}{c.ranks:>3}{c.bytes:>10}{c.median_s:>12.3e}{c.p10_s:>11.2e}"
                     f"{c.p90_s:>11.2e}{c.model_s:>11.2e}{c.ratio:>11.2f}{' (fit)' if c.fitted_on else ''}")
    s = data.summary
    lines.append(f"median IQR/median {s.median_rel_iqr:.2f}, max {s.max_rel_iqr:.2f}; held-out measured/model: "
                 f"median {s.held_out_ratio_median}, range {s.held_out_ratio_range}; "
                 f"wall {data.wall_seconds:.0f} s")
    return "\n".join(lines)


def _integers(flag: str, text: str, low: int) -> list[int]:
    """Comma-separated integers >= ``low`` (ConfigError naming ``flag`` otherwise)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag} {text!r} is not a comma-separated list of integers") from None
    for value in values:
        check_at_least(flag, value, low)
    return values


def measure_to_file(out, ranks: str, sizes: str, repeats: int):
    """``(data, path)``: the timings of :func:`measure` for the comma-separated ``ranks`` and ``sizes``, written to
    ``out`` (checked writable before minutes of timing)."""
    ranks, sizes = _integers("--ranks", ranks, 2), _integers("--sizes", sizes, 4)
    check_at_least("--repeats", repeats, 3)
    path = output_file(out)
    data = measure(ranks, sizes, repeats, progress=sys.stderr.isatty())
    write_json(path, data)
    return data, path
