"""The simulator: replica-coordinate updates per second (one inner step of one coordinate of one
replica; outer steps, partitions and recording included) for

* the explicit inner phase (every inner SGD step; float64 and float32),
* the exact inner phase (one draw per group and direction per outer step; counted as the H
  inner steps it replaces), with numpy and, where numba is installed, with its outer step compiled
  (``noloco.quadratic.fused``),
* a straightforward per-replica Python loop doing the explicit arithmetic on one replica's
  d-vector at a time (numpy for the d coordinates),
* two floors over the same (trials, N, d) weights, per inner step: the bandwidth floor (one
  read and one write of the weights, nothing else) and the noise floor (drawing one Gaussian
  per weight with the simulator's generator, then that read and write); the bits floor (only the
  32 random bits of one draw per weight from that generator, and the pass: what any numpy-drawn
  noise costs before it is shaped into a Gaussian); and the memory floor, the bandwidth floor's
  pass over a state larger than the caches,
* optionally the same ``noloco simulate`` command at an older commit (``--baseline DIR``, a
  git worktree) next to this one, each in a fresh process.

    python -m benchmarks simulator [--trials 200 --replicas 8 --dim 1000 --inner-steps 50]
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from noloco.benchmarks.timer import BenchResult, best_of, command_seconds, integer, jit
from noloco.infra.record import JsonRecord
from noloco.quadratic.sim_config import SimConfig
from noloco.quadratic.simulator import simulate
from noloco.infra.budget import retain_freed_memory
from noloco.infra.errors import ConfigError
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.theory.draws import fast_normal
from noloco.theory.outer import outer_step
from noloco.theory.partitions import partition

NAME = "simulator"
#: numbers of the memory floor's state: 128 MiB in float64, four times the 32 MiB L3 of the
#: machine in docs/performance.md
MEMORY_FLOOR_NUMBERS, MEMORY_FLOOR_PASSES = 1 << 24, 10
ROOT = Path(__file__).resolve().parents[2]
#: the command of issue 14, timed here and at the baseline commit
COMMAND = ["simulate", "--preset", "paper", "--spectrum", "uniform:0.1:1:1000", "--trials", "200",
           "--outer-steps", "100", "--json", "--no-cache"]


def loop(cfg: SimConfig, lam: np.ndarray) -> None:
    """The same run written replica by replica."""
    rng = np.random.default_rng(cfg.seed)
    o, i = cfg.outer, cfg.inner
    for trial in range(cfg.trials):
        phi = [np.full(lam.size, cfg.start) for _ in range(o.replicas)]
        delta = [np.zeros(lam.size) for _ in range(o.replicas)]
        for t in range(cfg.outer_steps):
            progress = []
            for r in range(o.replicas):
                theta = phi[r].copy()
                for _ in range(i.steps):
                    theta -= i.lr * (lam * theta + i.noise * rng.standard_normal(lam.size))
                progress.append(theta - phi[r])
            new_phi, new_delta = list(phi), list(delta)
            for group in partition(cfg.seed + trial, t, o.replicas, o.group_size):
                mean_phi = sum(phi[r] for r in group) / len(group)
                mean_progress = sum(progress[r] for r in group) / len(group)
                for r in group:
                    new_phi[r], new_delta[r] = outer_step(phi[r], delta[r], mean_phi, mean_progress, **o.rule())
            phi, delta = new_phi, new_delta


def _passes(theta: np.ndarray, passes: int) -> None:
    """``passes`` in-place passes over ``theta``: one read and one write of each number, nothing else."""
    for _ in range(passes):
        np.add(theta, 1.0, out=theta)


def bandwidth_floor(cfg: SimConfig, dim: int, dtype=np.float64) -> None:
    """Per inner step one read and one write of the weights (in place), nothing else."""
    _passes(np.zeros((cfg.trials, cfg.outer.replicas, dim), dtype), cfg.outer_steps * cfg.inner.steps)


def memory_floor() -> None:
    """The bandwidth floor's pass over a state too large for the caches (main-memory bandwidth)."""
    _passes(np.zeros(MEMORY_FLOOR_NUMBERS), MEMORY_FLOOR_PASSES)


def noise_floor(cfg: SimConfig, dim: int, dtype=np.float64) -> None:
    """Per inner step one Gaussian per weight (the simulator's generator) and one in-place pass."""
    rng = np.random.default_rng(cfg.seed)
    theta = np.zeros((cfg.trials, cfg.outer.replicas, dim), dtype)
    noise = np.empty_like(theta)
    scratch = np.empty((noise.size + 1) // 2, np.float32)
    for _ in range(cfg.outer_steps * cfg.inner.steps):
        fast_normal(rng, noise, 0.01, scratch)
        theta += noise


def bits_floor(cfg: SimConfig, dim: int, dtype=np.float64) -> None:
    """Per inner step the 32 raw random bits of one draw per weight from the simulator's generator
    (nothing shaped into a Gaussian) and one in-place pass."""
    bits = np.random.default_rng(cfg.seed).bit_generator
    theta = np.zeros((cfg.trials, cfg.outer.replicas, dim), dtype)
    for _ in range(cfg.outer_steps * cfg.inner.steps):
        bits.random_raw((theta.size + 1) // 2)
        _passes(theta, 1)


def baseline_checkout(text: str) -> str:
    """``--baseline``: a folder holding an older checkout of the toolkit (its ``noloco`` package), checked
    before any work (exit 2 for an empty name, 3 for a folder that is not one)."""
    from noloco.infra.errors import ConfigError, DataError

    if not text.strip():
        raise ConfigError("--baseline '' names no folder; give an older checkout of the toolkit")
    if not (Path(text) / "noloco" / "__init__.py").is_file():
        raise DataError(f"--baseline {text}: no checkout of the toolkit there (no noloco/__init__.py)")
    return text


def add_arguments(parser) -> None:
    from noloco.infra.entry import argument_type

    parser.add_argument("--trials", type=integer("trials", 2, 100_000), default=200, help="independent trials")
    parser.add_argument("--replicas", type=integer("replicas", 2, 4096), default=8, help="replicas N (pairs)")
    parser.add_argument("--dim", type=integer("dim", 1, 1_000_000), default=1000, help="directions of the quadratic")
    parser.add_argument("--inner-steps", type=integer("inner_steps", 1, 10_000), default=50, help="inner steps H")
    parser.add_argument("--outer-steps", type=integer("outer_steps", 1, 10_000), default=10,
                        help="outer steps of the explicit runs "
                                                                    "(the exact runs take ten times as many)")
    parser.add_argument("--noise", type=float, default=1.0, help="gradient noise std")
    parser.add_argument("--repeat", type=integer("repeat", 1, 100), default=3, help="best of this many runs")
    parser.add_argument("--loop-trials", type=integer("loop_trials", 2, 10_000), default=2,
                        help="trials of the (slow) per-replica loop")
    parser.add_argument("--baseline", type=argument_type(str, baseline_checkout),
                        help="a checkout of an older commit: time the same simulate command there")


@dataclass(frozen=True)
class UpdateRates(JsonRecord):
    """Replica-coordinate updates per second of each path (numpy unless compiled; the compiled ones only where
    numba is) and of the floors a step cannot beat."""

    OPTIONAL_KEYS = ("exact_compiled", "exact_compiled_float32")

    explicit: float
    explicit_float32: float
    exact: float
    exact_float32: float
    exact_compiled: Optional[float] = None
    exact_compiled_float32: Optional[float] = None
    python_loop: Optional[float] = None
    bandwidth_floor: Optional[float] = None
    memory_floor: Optional[float] = None
    bits_floor: Optional[float] = None
    noise_floor: Optional[float] = None


@dataclass(frozen=True)
class AgainstBaseline(JsonRecord):
    """`noloco simulate`'s command timed on a baseline checkout and on this one (default and explicit inner)."""

    command: str
    baseline_s: float
    this_default_s: float
    this_explicit_s: float
    speedup_default: float
    speedup_explicit: float


@dataclass(frozen=True)
class SimulatorBench(JsonRecord):
    """The simulator benchmark's result: the rates, their ratios, the state's bytes, the command's timings."""

    NESTED = {"updates_per_second": UpdateRates, "commands": AgainstBaseline}
    OPTIONAL_KEYS = ("commands",)

    updates_per_second: UpdateRates
    exact_over_explicit: float
    explicit_over_loop: float
    bandwidth_floor_over_explicit: float
    memory_floor_over_explicit: float
    noise_floor_over_explicit: float
    bandwidth_floor_over_bits_floor: float
    exact_compiled_over_explicit: Optional[float]
    state_bytes: int
    commands: Optional[AgainstBaseline] = None


def measure(trials=200, replicas=8, dim=1000, inner_steps=50, outer_steps=10, noise=1.0, repeat=3,
            loop_trials=2, baseline=None) -> dict:
    if loop_trials < 2:
        raise ConfigError(f"--loop-trials={loop_trials} is out of range; allowed: an integer >= 2 (a simulation's "
                          f"least number of trials)")
    retain_freed_memory()
    lam = tuple(np.linspace(0.1, 1.0, dim))
    outer = OuterConfig(replicas=replicas, group_size=2)
    inner = InnerConfig(lr=0.01, steps=inner_steps, noise=noise)
    per_step = trials * replicas * dim * inner_steps

    def rate(cfg):
        return per_step * cfg.outer_steps / best_of(lambda: simulate(cfg), repeat)

    explicit = SimConfig(outer=outer, inner=inner, curvatures=lam, trials=trials, outer_steps=outer_steps,
                         inner_mode="explicit")
    exact = SimConfig(outer=outer, inner=inner, curvatures=lam, trials=trials, outer_steps=10 * outer_steps,
                      inner_mode="exact")
    small = SimConfig(outer=outer, inner=inner, curvatures=lam, trials=loop_trials, outer_steps=1)
    with jit("0"):  # numpy throughout
        numpy_rates = (rate(explicit), rate(dataclasses.replace(explicit, dtype="float32")), rate(exact),
                       rate(dataclasses.replace(exact, dtype="float32")))
    compiled = (None, None)
    if importlib.util.find_spec("numba"):  # the compiled outer step; the best of the repeats leaves compiling out
        with jit("1"):
            compiled = (rate(exact), rate(dataclasses.replace(exact, dtype="float32")))
    r = UpdateRates(
        *numpy_rates, *compiled,
        python_loop=per_step * loop_trials / trials / best_of(lambda: loop(small, np.asarray(lam)), 1),
        bandwidth_floor=per_step * outer_steps / best_of(lambda: bandwidth_floor(explicit, dim), repeat),
        memory_floor=MEMORY_FLOOR_NUMBERS * MEMORY_FLOOR_PASSES / best_of(memory_floor, repeat),
        bits_floor=per_step * outer_steps / best_of(lambda: bits_floor(explicit, dim), repeat),
        noise_floor=per_step * outer_steps / best_of(lambda: noise_floor(explicit, dim), repeat))
    commands = None
    if baseline:
        base, default, explicit_s = (command_seconds(COMMAND, Path(baseline)), command_seconds(COMMAND),
                                     command_seconds(COMMAND + ["--inner", "explicit"]))
        commands = AgainstBaseline(command="noloco " + " ".join(COMMAND), baseline_s=base, this_default_s=default,
                                   this_explicit_s=explicit_s, speedup_default=base / default,
                                   speedup_explicit=base / explicit_s)
    return SimulatorBench(
        updates_per_second=r, exact_over_explicit=r.exact / r.explicit, explicit_over_loop=r.explicit / r.python_loop,
        bandwidth_floor_over_explicit=r.bandwidth_floor / r.explicit, memory_floor_over_explicit=r.memory_floor / r.explicit,
        noise_floor_over_explicit=r.noise_floor / r.explicit,
        bandwidth_floor_over_bits_floor=r.bandwidth_floor / r.bits_floor,
        exact_compiled_over_explicit=r.exact_compiled / r.explicit if r.exact_compiled is not None else None,
        state_bytes=trials * replicas * dim * 8, commands=commands).to_json()


def format_result(result: dict) -> str:
    r = SimulatorBench.from_json(BenchResult.from_json(result).results)
    lines = [f"{name:<22} {rate:12.4g} replica-coordinate updates / s"
             for name, rate in r.updates_per_second.to_json().items()]  # every path measured, by name
    lines += [f"exact / explicit            = {r.exact_over_explicit:.1f}x",
              f"explicit / loop             = {r.explicit_over_loop:.1f}x",
              f"bandwidth floor / explicit  = {r.bandwidth_floor_over_explicit:.1f}x",
              f"memory floor / explicit     = {r.memory_floor_over_explicit:.1f}x",
              f"noise floor / explicit      = {r.noise_floor_over_explicit:.2f}x",
              f"bandwidth floor / bits floor = {r.bandwidth_floor_over_bits_floor:.1f}x"]
    if r.exact_compiled_over_explicit:
        lines.append(f"exact compiled / explicit   = {r.exact_compiled_over_explicit:.1f}x")
    c = r.commands
    if c:
        lines += [f"{c.command}:",
                  f"  baseline {c.baseline_s:.1f} s, now {c.this_default_s:.1f} s (exact, "
                  f"{c.speedup_default:.1f}x), {c.this_explicit_s:.1f} s with --inner explicit "
                  f"({c.speedup_explicit:.1f}x)"]
    return "\n".join(lines)
