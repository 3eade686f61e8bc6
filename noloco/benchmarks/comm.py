"""`noloco comm` at many replicas: the model tables alone, the idle-time simulation (numpy, and
compiled where numba is installed), and the whole command in a fresh process (its default choice),
with the default lognormal compute times and with ``--jitter gamma``.

    python -m benchmarks comm [--replicas 1000000 --steps 200 --trials 8]

The simulation runs ``--steps`` and ``--trials``; the command runs with its defaults (fewer trials
at huge N, :func:`noloco.quadratic.comm_report.default_trials`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from noloco.benchmarks.timer import BenchResult, best_of, command_seconds, integer, jit, jit_paths
from noloco.infra.record import JsonRecord
from noloco.theory import comm
from noloco.quadratic import idle
from noloco.theory import jitter
from noloco.infra.budget import retain_freed_memory

NAME = "comm"


def add_arguments(parser) -> None:
    parser.add_argument("--replicas", type=integer("replicas", 2, 100_000_000), default=1_000_000, help="replicas N (even)")
    parser.add_argument("--steps", type=integer("steps", 2, 100_000), default=200, help="outer steps simulated")
    parser.add_argument("--trials", type=integer("trials", 2, 1000), default=8, help="independent simulated runs")
    parser.add_argument("--repeat", type=integer("repeat", 1, 100), default=1, help="best of this many runs")


@dataclass(frozen=True)
class CommTiming(JsonRecord):
    """`noloco comm`'s costs: the model tables, the idle simulation per path (and per replica-step), the
    command itself (and with gamma jitter)."""

    model_tables_s: float
    idle_simulation_s: dict
    ns_per_replica_step: dict
    workers: int
    command: str
    command_s: float
    command_gamma_s: float


def measure(replicas=1_000_000, steps=200, trials=8, repeat=1) -> dict:
    retain_freed_memory()
    net = comm.INTERNET
    tables = best_of(lambda: (comm.sync_cost(net, 2e6, replicas), comm.payload_at_speedup(net, replicas, 1.0),
                              jitter.barrier_idle_fraction(jitter.Jitter(), replicas)), max(2, repeat))  # not the imports
    simulation = {}
    for path, setting in jit_paths():
        with jit(setting):
            idle.simulate_idle(1 << 12, steps=2, trials=2)  # loads numba and the compiled step: not timed
            start = time.perf_counter()
            idle.simulate_idle(replicas, steps=steps, trials=trials)
            simulation[path] = time.perf_counter() - start
    argv = ["comm", "--replicas", str(replicas)]  # issue 14's command: its own default steps and trials
    return CommTiming(model_tables_s=tables, idle_simulation_s=simulation,
                      ns_per_replica_step={path: s / (replicas * steps * trials) * 1e9 for path, s in simulation.items()},
                      workers=idle.idle_workers(replicas, trials), command="noloco " + " ".join(argv),
                      command_s=command_seconds(argv),
                      command_gamma_s=command_seconds(argv + ["--jitter", "gamma"])).to_json()


def format_result(result: dict) -> str:
    r = CommTiming.from_json(BenchResult.from_json(result).results)
    paths = "; ".join(f"{path} {seconds:.1f} s ({r.ns_per_replica_step[path]:.1f} ns per replica-step)"
                      for path, seconds in r.idle_simulation_s.items())
    return (f"model tables {r.model_tables_s * 1e3:.1f} ms; idle simulation, {r.workers} trial(s) at a time: "
            f"{paths}; `{r.command}` {r.command_s:.1f} s ({r.command_gamma_s:.1f} s with --jitter gamma)")
