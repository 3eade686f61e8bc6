"""`noloco comm` as a library: the synchronisation cost model (:mod:`noloco.theory.comm`), the closed
forms of idle time (:mod:`noloco.theory.jitter`) and the event simulation (:mod:`noloco.quadratic.idle`)
in one document, and its text. Every input is validated and the simulation's memory is checked
against the budget before any work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from noloco.infra import budget
from noloco.infra.checks import check_at_least, check_choice, check_seed, check_nonnegative, check_positive, check_real
from noloco.infra.files import SCHEMA_VERSION
from noloco.infra.errors import ConfigError, DataError
from noloco.infra.record import JsonRecord
from noloco.quadratic.idle import (SYNC_MAX, check_idle_inputs, idle_compiled, idle_memory_estimate, idle_time_estimate,
                                   idle_workers, simulate_idle)
from noloco.theory.comm import (ALLREDUCE, EXCHANGES, Network, check_replicas, group_exchange, payload_at_speedup,
                                sync_cost)
from noloco.theory.jitter import Hardware, Jitter, barrier_idle_fraction, group_first_step_idle_fraction


#: replica-steps of the idle simulation above which the default trial count shrinks (at least 2):
#: each trial already averages over N replicas, so a large N needs fewer of them for a small SE
IDLE_REPLICA_STEPS = 8e8


@dataclass(frozen=True)
class CommInputs(JsonRecord):
    """The inputs `noloco comm` used, validated (``bandwidth_bits_per_s``: bits per second; ``hardware``:
    ``[share, slowdown]`` per class; ``algorithm``: the all-reduce the barrier pays)."""

    params: float
    bytes_per_value: float
    payload_bytes: float
    replicas: int
    group_size: int
    latency_s: float
    bandwidth_bits_per_s: float
    reduce_seconds_per_byte: float
    exchange: str
    algorithm: str
    jitter: str
    jitter_cv: float
    hardware: list
    compute_seconds: float
    steps: int
    trials: int
    seed: int


@dataclass(frozen=True)
class LatencyShare(JsonRecord):
    """Of the NoLoCo exchange's and the tree all-reduce's seconds, the share latency alone accounts for."""

    group_exchange: float
    tree: float


@dataclass(frozen=True)
class IdleReport(JsonRecord):
    """The idle fractions' closed forms and the simulation (an :class:`~noloco.quadratic.idle.IdleResult` when
    made, its JSON object when read back). ``noloco_first_step_closed_form`` is None on mixed hardware."""

    barrier_closed_form: float
    noloco_first_step_closed_form: Optional[float]
    simulation: object


@dataclass(frozen=True)
class Crossings:
    """The payloads (bytes; None: never) where the speed-up vs a tree falls to log2(N)/2 and to 1: the JSON
    object ``{"half_log2N": ..., "1": ...}`` (a key that is no field name, hence its own to_json)."""

    half_log2N: float | None  # the JSON key
    one: float | None

    def to_json(self) -> dict:
        return {"half_log2N": self.half_log2N, "1": self.one}

    @classmethod
    def from_json(cls, obj) -> "Crossings":
        if not isinstance(obj, dict) or not {"half_log2N", "1"} <= set(obj):
            raise DataError(f"Crossings: expected a JSON object with half_log2N and 1, got {obj!r}")
        return cls(half_log2N=obj["half_log2N"], one=obj["1"])


@dataclass(frozen=True)
class CommReport(JsonRecord):
    """Everything `noloco comm` prints (its JSON: ``to_json``; its table: :func:`format_report`)."""

    NESTED = {"inputs": CommInputs, "latency_share": LatencyShare, "idle": IdleReport,
              "payload_bytes_where_speedup_vs_tree": Crossings}

    schema_version: int
    inputs: CommInputs
    allreduce_seconds: dict
    tree_seconds: float
    group_exchange_seconds: float
    group_exchange_seconds_by_kind: dict
    speedup_vs_tree: float
    speedup_vs_ring: float
    speedup_vs_best: float
    log2_replicas: float
    bandwidth_delay_bytes: float
    latency_share: LatencyShare
    payload_bytes_where_speedup_vs_tree: Crossings
    idle_fraction_barrier: float
    idle_fraction_noloco: float
    idle: IdleReport


def default_trials(replicas: int, steps: int, most: int = 8) -> int:
    """Trials of the idle simulation when none are asked for: ``most``, fewer for a huge N."""
    return int(max(2, min(most, IDLE_REPLICA_STEPS // max(replicas * steps, 1))))


def report(*, params: float = 1e6, bytes_per_value: float = 2.0, replicas: int = 256, group_size: int = 2,
           latency: float = 0.05, bandwidth: float = 1e9, reduce_seconds_per_byte: float = 0.0,
           algorithm: str = "best", exchange: str = "root", jitter: str = "lognormal", jitter_cv: float = 0.1,
           hardware: str = "1:1", compute_seconds: float = 30.0, steps: int = 200, trials: int | None = None,
           seed: int = 0, progress: bool = False, max_memory=None, max_time=None) -> CommReport:
    """Everything `noloco comm` prints, as data: seconds per synchronisation for every all-reduce
    and the NoLoCo exchange, the speed-ups, where the speed-up falls with the payload, and the
    idle fractions (closed forms and :func:`simulate_idle`). ``bandwidth`` is in bits per second,
    ``hardware`` the text of :meth:`Hardware.parse`, ``algorithm`` the all-reduce the barrier pays
    (``best``: the fastest); ``trials`` None: :func:`default_trials`. Every input is validated
    before any work (ConfigError), and the simulation's memory and time against ``max_memory`` and
    ``max_time`` (:mod:`noloco.infra.budget`: exit 3)."""
    params = check_nonnegative("params", params)
    seed = check_seed("seed", seed)
    steps = check_at_least("steps", steps, 2)
    trials = default_trials(check_replicas(replicas), steps) if trials is None else check_at_least("trials", trials, 2)
    width = check_real("bytes_per_value", bytes_per_value, "0 < bytes_per_value <= 16", lambda v: 0 < v <= 16)
    net = Network.from_bandwidth(latency, bandwidth, reduce_seconds_per_byte)
    compute = check_positive("compute_seconds", compute_seconds)
    check_choice("algorithm", algorithm, ("best",) + tuple(ALLREDUCE))
    payload = params * width
    cost = sync_cost(net, payload, replicas, group_size, exchange)
    latency_only = sync_cost(Network(net.latency, 0.0), payload, replicas, group_size, exchange)
    jitter_model, machines = Jitter(jitter, jitter_cv), Hardware.parse(hardware)
    name = min(cost.allreduce_seconds, key=cost.allreduce_seconds.get) if algorithm == "best" else algorithm
    barrier_sync, group_sync = cost.allreduce_seconds[name], cost.group_exchange_seconds
    check_idle_inputs(machines)  # a slowdown that overflows the simulation (1e308: an internal error)
    for what_sync, seconds in ((f"all-reduce {name}", barrier_sync), ("NoLoCo exchange", group_sync)):
        if not seconds / compute <= SYNC_MAX:  # NaN or inf too: the idle simulation's times would overflow
            raise ConfigError(
                f"one {what_sync} takes {seconds:.3g} s, {seconds / compute:.3g} times --compute-seconds={compute:g}; "
                f"allowed: at most {SYNC_MAX:g} times (the idle simulation's times would overflow): a smaller "
                f"--latency or --params, a larger --bandwidth or --compute-seconds")
    workers, compiled = idle_workers(replicas, trials), idle_compiled(replicas, steps, trials)
    what = f"the idle-time simulation of {replicas} replicas x {steps} steps x {trials} trials"
    budget.require(idle_memory_estimate(replicas, workers, compiled, steps, trials), budget.resolve(max_memory),
                   what, "fewer --replicas, --steps or --trials (the model tables need no memory)")
    budget.require_time(idle_time_estimate(replicas, steps, trials, compiled, jitter == "gamma"), max_time,
                        what, "fewer --replicas, --steps or --trials", "at the ns per replica-step measured in noloco.quadratic.idle")
    budget.retain_freed_memory()

    sim = simulate_idle(replicas, group_size, jitter_model, machines, steps=steps, trials=trials,
                        barrier_sync=barrier_sync / compute, group_sync=group_sync / compute, seed=seed,
                        progress=progress)
    log2n = math.log2(replicas)

    def share(part: float, whole: float) -> float:  # of a time, what latency alone accounts for
        return part / whole if whole else 1.0

    return CommReport(
        schema_version=SCHEMA_VERSION,
        inputs=CommInputs(
            params=params, bytes_per_value=width, payload_bytes=payload, replicas=replicas, group_size=group_size,
            latency_s=net.latency, bandwidth_bits_per_s=float(bandwidth),
            reduce_seconds_per_byte=net.reduce_seconds_per_byte, exchange=exchange, algorithm=name, jitter=jitter,
            jitter_cv=jitter_model.cv, hardware=[list(c) for c in machines.classes], compute_seconds=compute,
            steps=steps, trials=trials, seed=seed),
        allreduce_seconds=cost.allreduce_seconds,
        tree_seconds=cost.tree_seconds,
        group_exchange_seconds=cost.group_exchange_seconds,
        group_exchange_seconds_by_kind={kind: group_exchange(net, payload, group_size, kind) for kind in EXCHANGES},
        speedup_vs_tree=cost.speedup_vs_tree,
        speedup_vs_ring=cost.speedup_vs_ring,
        speedup_vs_best=cost.speedup_vs_best,
        log2_replicas=log2n,
        bandwidth_delay_bytes=net.bandwidth_delaycheck_payload(),
        latency_share=LatencyShare(
            group_exchange=share(latency_only.group_exchange_seconds, cost.group_exchange_seconds),
            tree=share(latency_only.tree_seconds, cost.tree_seconds)),
        payload_bytes_where_speedup_vs_tree=Crossings(
            half_log2N=payload_at_speedup(net, replicas, log2n / 2, group_size, exchange),
            one=payload_at_speedup(net, replicas, 1.0, group_size, exchange)),
        idle_fraction_barrier=sim.barrier_idle_fraction,
        idle_fraction_noloco=sim.noloco_idle_fraction,
        idle=IdleReport(
            barrier_closed_form=barrier_idle_fraction(jitter_model, replicas, machines, barrier_sync, compute),
            noloco_first_step_closed_form=group_first_step_idle_fraction(  # one class: its compute time
                jitter_model, group_size, group_sync, compute * machines.classes[0][1])
            if machines.homogeneous else None,
            simulation=sim),
    )


def _humancheck_payload(x) -> str:
    if x is None:
        return "never"
    if math.isinf(x):
        return "inf"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(x) < 1000 or unit == "TB":
            return f"{x:.3g} {unit}"
        x /= 1000


def format_report(r: CommReport) -> str:
    """The table ``noloco comm`` prints for a :func:`report`."""
    i, idle = r.inputs, r.idle
    lines = [
        f"N={i.replicas} replicas, groups of n={i.group_size}, payload {_humancheck_payload(i.payload_bytes)} "
        f"({i.params:.3g} params x {i.bytes_per_value:g} B)",
        f"network: latency {i.latency_s * 1e3:g} ms/message, {i.bandwidth_bits_per_s / 1e9:g} Gbit/s, "
        f"bandwidth-delay product {_humancheck_payload(r.bandwidth_delay_bytes)}",
        "",
        f"{'synchronisation':<28}{'seconds':>12}{'NoLoCo speed-up':>18}",
    ]
    g = r.group_exchange_seconds
    for name, sec in r.allreduce_seconds.items():
        lines.append(f"{'all-reduce ' + name:<28}{sec:>12.4g}{(sec / g if g else math.inf):>18.3g}")
    for kind, sec in r.group_exchange_seconds_by_kind.items():
        lines.append(f"{'NoLoCo exchange ' + kind + (' *' if kind == i.exchange else ''):<28}{sec:>12.4g}")
    share, cross = r.latency_share.group_exchange, r.payload_bytes_where_speedup_vs_tree
    sim, first = idle.simulation, idle.noloco_first_step_closed_form
    lines += [
        "",
        f"speed-up vs tree {r.speedup_vs_tree:.3g} (log2 N = {r.log2_replicas:.3g}), vs ring "
        f"{r.speedup_vs_ring:.3g}, vs fastest all-reduce {r.speedup_vs_best:.3g}",
        f"exchange is {'latency' if share >= 0.5 else 'bandwidth'}-bound ({share:.0%} of it is latency); "
        f"speed-up vs tree falls to log2(N)/2 at {_humancheck_payload(cross.half_log2N)}, to 1 at {_humancheck_payload(cross.one)}",
        "",
        f"idle fraction ({i.compute_seconds:g} s compute/outer step, {i.jitter} cv {i.jitter_cv:g}, "
        f"barrier pays {i.algorithm}):",
        f"  barrier (DiLoCo)  {r.idle_fraction_barrier:.4f} +- {sim.barrier_idle_se:.1e}"
        f"   closed form {idle.barrier_closed_form:.4f}",
        f"  NoLoCo groups     {r.idle_fraction_noloco:.4f} +- {sim.noloco_idle_se:.1e}"
        + (f"   first step, closed form {first:.4f}" if first is not None else ""),
        f"  (the NoLoCo SE is over {i.trials} trials; the barrier's over every step of them)",
    ]
    return "\n".join(lines)
