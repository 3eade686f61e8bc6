"""Monte Carlo of NoLoCo, DiLoCo, local SGD and data parallel: the shared outer step, fresh
random groups, many independent trials at once.

Every trial is an independent run with its own partitions and noise, so quantities
averaged over trials have honest standard errors.

Two ways through the inner phase (``SimConfig.inner_mode``):

* ``exact``: inner SGD with additive Gaussian noise on a quadratic. Per eigen-direction the H
  inner steps map ``y -> r y + eps`` with ``r = prod_h (1 - eta_h lambda) = 1 - c`` and
  ``eps ~ N(0, s2)`` independent of everything else (:func:`noloco.quadratic.inner.phase_coefficients`,
  any schedule). The outer step needs only each group's mean progress, ``-c (mean_G y - mean_G
  shift) + N(0, s2 / n)``, so one outer step costs one draw per group and direction instead of H
  per replica: about H times less work, and the same law for everything the run records (the
  outer weights at every outer step). Default (``auto``) wherever it is exact.
* ``explicit``: the H inner steps one by one (SGD, SGD with momentum, Adam; data gradients and
  minibatches), the only way where no closed form exists.

Work is streamed in blocks of trials x directions (:func:`plan`) that stay in cache: on the
quadratic the directions are independent in the eigenbasis, so the weights of a block are
simulated for the whole run and only per-step totals are kept (sums over directions, moments
over trials). Memory is then constant in directions and steps and 8 bytes per trial (the
windowed spread of each trial); :func:`noloco.quadratic.sim_costs.memory_estimate` states it before any work. Groups are
formed by moving every replica's state to its place in a fresh random permutation (the groups
are then consecutive blocks), which is a uniformly random partition.

``simulate(cfg, late=True)``: the one-phase-late outer step (:func:`noloco.theory.outer.late_outer_step`,
the exchange overlapped with the next inner phase) with the exact inner phase, in numpy; each replica's
own progress then matters (it is carried into its weights), so it is drawn per replica.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from noloco.quadratic import fused
from noloco.quadratic.inner import InnerOptimizer, Noise, phase_coefficients
from noloco.quadratic.objectives import build
from noloco.infra.budget import retain_freed_memory
from noloco.infra.progress import Progress
from noloco.theory.outer import late_outer_step, outer_step
from noloco.theory.partitions import group_mean, random_permutations
from noloco.quadratic.sim_config import SimConfig
from noloco.quadratic.sim_costs import KEEP_SPREAD, mean_directions, plan

#: a run is divergent when any |phi - optimum| exceeds this many times its initial scale
GROWTH_BOUND = 1e6

# ---------------------------------------------------------------- recording

class _Moments:
    """Mean and standard error over trials per step, merged block by block (Chan et al.'s
    pairwise update of the mean and the sum of squared deviations), so no step keeps its
    trials. With one block the values are the two-pass mean and ``std(ddof=1) / sqrt(n)``."""

    def __init__(self, steps: int, width: int | None = None):
        shape = (steps + 1,) if width is None else (steps + 1, width)
        self.count = np.zeros(shape)
        self._mean = np.zeros(shape)
        self._m2 = np.zeros(shape)
        self.mean = self.se = None

    def add(self, step: int, values, cols=slice(None)) -> None:
        """Merge ``values`` (trials of one block first) into step ``step`` (columns ``cols``)."""
        values = np.asarray(values, dtype=float)
        nb = values.shape[0]
        mean_b = values.mean(0)
        dev = values - mean_b
        m2_b = np.einsum("i...,i...->...", dev, dev)
        na = self.count[step, cols] if self.count.ndim > 1 else self.count[step]
        total = na + nb
        gap = mean_b - (self._mean[step, cols] if self._mean.ndim > 1 else self._mean[step])
        if self._mean.ndim > 1:
            self._mean[step, cols] += gap * (nb / total)
            self._m2[step, cols] += m2_b + gap * gap * (na * nb / total)
            self.count[step, cols] = total
        else:
            self._mean[step] += gap * (nb / total)
            self._m2[step] += m2_b + gap * gap * (na * nb / total)
            self.count[step] = total

    def finish(self, steps: int) -> None:
        """Keep steps 0..steps; the standard error of one trial is NaN."""
        count = self.count[: steps + 1]
        self.mean = self._mean[: steps + 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            self.se = np.sqrt(self._m2[: steps + 1] / (count - 1) / count)
        del self._mean, self._m2

    def as_dict(self):
        return {"mc": self.mean.tolist(), "se": self.se.tolist()}


@dataclass
class Run:
    """Raw simulation output (per step: mean over trials and its standard error)."""

    config: SimConfig
    eigvals: np.ndarray             # Hessian at the optimum, ascending
    eigvecs: np.ndarray | None      # its eigenvectors; None: the coordinates themselves (sorted)
    directions: np.ndarray          # indices of eigvals whose mean trajectory is recorded
    mean_distance: _Moments         # E[mean_i phi_i - x*] in eigen-coordinates (those directions)
    spread: _Moments                # sum over coordinates of mean_i (phi_i - phi_bar)^2
    loss_at_mean: _Moments          # global loss at the average weights
    loss_replicas: _Moments         # global loss averaged over replicas
    spread_trials: list = field(default_factory=list)           # per step: the spread of every trial (None: not kept)
    window_spread: np.ndarray | None = None                     # per trial: spread averaged over the window
    diverged_at: int | None = None
    divergence_reason: str = ""
    steps_done: int = 0
    objective: object = None


class _Trials:
    """Per-trial totals of one trial block (spread and losses summed over its direction blocks),
    merged into the run's moments step by step, or at the end of the block when several
    direction blocks each add their share."""

    def __init__(self, run: Run, first: int, count: int, staged: bool, keep):
        self.run, self.first, self.count, self.keep = run, first, count, keep
        steps = run.config.outer_steps
        self.staged = np.zeros((steps + 1, 3, count)) if staged else None
        self.window = np.zeros(count)

    def add(self, step: int, spread, loss_at_mean, loss_replicas) -> None:
        if self.staged is not None:
            self.staged[step, 0] += spread
            self.staged[step, 1] += loss_at_mean
            self.staged[step, 2] += loss_replicas
        else:
            self._merge(step, spread, loss_at_mean, loss_replicas)

    def _merge(self, step, spread, loss_at_mean, loss_replicas) -> None:
        run = self.run
        run.spread.add(step, spread)
        run.loss_at_mean.add(step, loss_at_mean)
        run.loss_replicas.add(step, loss_replicas)
        if step >= run.config.window_start:
            self.window += spread
        if self.keep is not None and step in self.keep:
            self.keep[step][self.first: self.first + self.count] = spread

    def finish(self, steps: int) -> None:
        """Merge the staged totals of steps 0..steps and the window."""
        if self.staged is not None:
            for step in range(steps + 1):
                self._merge(step, *self.staged[step])
        window = self.run.window_spread
        if window is not None:
            window[self.first: self.first + self.count] = self.window


def _overflow(loss_replicas) -> str:
    """'' when the recorded totals are finite; they overflow float64 before the weights do when
    the weights exceed about 1e154 (the noise scale sets the divergence bound)."""
    if np.isfinite(loss_replicas).all():
        return ""
    return "the spread or the loss overflows float64 (weights beyond about 1e154)"


def _divergence(phi, optimum, bound: float) -> str:
    """'' when every |phi - optimum| is finite and within ``bound``, else the reason."""
    if not np.isfinite(phi).all():
        return "NaN or inf in the weights"
    distance = float(np.abs(phi - optimum).max())
    return f"|phi - optimum| = {distance:.3g} exceeds the bound {bound:.3g}" if distance > bound else ""


class _Driver:
    """What every block shares: the run, the steps still to simulate, divergence, progress."""

    def __init__(self, cfg: SimConfig, run: Run, blocks: int, progress: bool, late: bool = False):
        self.cfg, self.run, self.late = cfg, run, late
        outer, inner = cfg.effective()
        self.outer, self.inner = outer, inner
        self.bound = GROWTH_BOUND * max(1.0, abs(cfg.start), cfg.init_spread, inner.noise)
        # one choice per run, by its whole size (noloco.quadratic.fused): every block takes the same path
        self.compiled = cfg.inner_law == "exact" and not late and fused.enabled(
            float(cfg.trials) * outer.replicas * run.eigvals.size * cfg.outer_steps)
        # a bar on a terminal, a line a minute in a log (noloco.infra.progress)
        self.bar = Progress(blocks * cfg.outer_steps, f"simulate {cfg.method}", unit="step",
                            show=None if progress else False)

    @property
    def last(self) -> int:
        """The last step to simulate: all, or the step before the earliest divergence so far."""
        d = self.run.diverged_at
        return self.cfg.outer_steps if d is None else d - 1

    def diverged(self, t: int, reason: str) -> None:
        run = self.run
        if run.diverged_at is None or t < run.diverged_at:
            run.diverged_at, run.divergence_reason = t, reason


def simulate(cfg: SimConfig, *, progress: bool = False, keep_spread=None, late: bool = False) -> Run:
    """Run ``cfg.trials`` independent trials of ``cfg.outer_steps`` outer steps; ``progress``
    shows a bar when stderr is a terminal and a line a minute when it is a log (:mod:`noloco.infra.progress`). ``keep_spread``: the steps whose per-trial
    spreads ``Run.spread_trials`` keeps (default: every step while that is at most
    :data:`KEEP_SPREAD` numbers, else none). ``late``: the one-phase-late outer step (the exact inner phase
    on the quadratic only)."""
    if late and not (cfg.inner_law == "exact" and cfg.eigenbasis):
        from noloco.infra.errors import ConfigError

        raise ConfigError("late=True is simulated with the exact inner phase of the quadratic only; give "
                          "objective='quadratic' and inner SGD (inner_mode 'auto' or 'exact')")
    retain_freed_memory()
    try:  # the matrices are small: BLAS threads only spin, and on a busy machine badly
        from threadpoolctl import threadpool_limits
    except ImportError:
        return _simulate(cfg, progress, keep_spread, late)
    with threadpool_limits(1):
        return _simulate(cfg, progress, keep_spread, late)


def _simulate(cfg: SimConfig, progress: bool, keep_spread, late: bool = False) -> Run:
    outer, inner = cfg.effective()
    trials, steps = cfg.trials, cfg.outer_steps
    obj = build(cfg, np.random.default_rng([cfg.seed, 1]))
    eigvals, eigvecs = obj.eigen()
    D = eigvals.size
    directions = mean_directions(D)
    run = Run(cfg, eigvals, eigvecs, directions, _Moments(steps, directions.size), _Moments(steps),
              _Moments(steps), _Moments(steps), objective=obj, window_spread=np.zeros(trials))
    if keep_spread is None:
        keep_spread = range(steps + 1) if trials * (steps + 1) <= KEEP_SPREAD else ()
    keep = {t: np.full(trials, np.nan) for t in keep_spread if 0 <= t <= steps}
    tb, width = plan(D, trials, outer.replicas, steps, cfg.eigenbasis)
    blocks = math.ceil(trials / tb) * math.ceil(D / width)
    driver = _Driver(cfg, run, blocks, progress, late)
    try:
        for index, first in enumerate(range(0, trials, tb)):
            count = min(tb, trials - first)
            totals = _Trials(run, first, count, staged=width < D, keep=keep)
            if cfg.eigenbasis:
                for part, low in enumerate(range(0, D, width)):
                    _eigenbasis_block(driver, totals, index, part, slice(low, min(D, low + width)))
            else:
                _coordinate_block(driver, totals, index)
            totals.finish(driver.last)
    finally:
        driver.bar.close()
    done = driver.last
    run.steps_done = steps if run.diverged_at is None else run.diverged_at
    for moments in (run.mean_distance, run.spread, run.loss_at_mean, run.loss_replicas):
        moments.finish(done)
    run.spread_trials = [keep.get(t) for t in range(done + 1)]
    if run.diverged_at is None:
        run.window_spread /= steps - cfg.window_start + 1
    else:
        run.window_spread = None
    return run


def _group_mean(blocks: np.ndarray) -> np.ndarray:
    """Mean over axis 2 (the members of each group), kept as an axis of length 1; for small
    groups as a sum of slices, which numpy does several times faster than ``mean(2)``."""
    n = blocks.shape[2]
    if n > 8:
        return blocks.mean(2, keepdims=True)
    total = blocks[:, :, :1].copy()
    for j in range(1, n):
        total += blocks[:, :, j: j + 1]
    total /= n
    return total


def _rows(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``x`` (trials, N, width) with its replicas moved to ``rows`` (flat row indices)."""
    width = x.shape[-1]
    return np.take(x.reshape(-1, width), rows, axis=0).reshape(x.shape)


class _Block:
    """The state of one block of trials x directions of the quadratic, in its eigenbasis: the outer
    weights ``phi``, the outer momentum ``delta``, the replicas' optima offsets ``shift`` (None without
    heterogeneity), each (trials, N, width), and the random streams."""

    def __init__(self, driver: _Driver, totals: _Trials, index: int, part: int, cols: slice):
        cfg, run = driver.cfg, driver.run
        self.dtype = np.dtype(cfg.dtype)
        N = driver.outer.replicas
        self.count = count = totals.count
        self.lam = run.eigvals[cols]
        self.shape = shape = (count, N, self.lam.size)
        rng = np.random.default_rng([cfg.seed, 2] if index == part == 0 else [cfg.seed, 2, index, part])
        # the groups of a trial block are the same in each of its direction blocks: their own generator
        # when there are several; with one, the one generator in the order of the first version
        self.partitions = rng if self.lam.size == run.eigvals.size else np.random.default_rng([cfg.seed, 3, index])
        self.noise = Noise(rng)
        self.phi = np.empty(shape, self.dtype)
        self.phi[...] = run.objective.start_in_eigenbasis(cfg.start)[cols]
        if cfg.init_spread:  # offsets with zero mean over replicas: the mean stays at the start
            offsets = cfg.init_spread * rng.standard_normal(shape)
            self.phi += offsets - offsets.mean(1, keepdims=True)
        self.shift = None
        if cfg.zeta:  # replica optima; isotropic, so drawn in the eigenbasis directly
            draw = cfg.zeta * rng.standard_normal(shape)
            self.shift = (draw - draw.mean(1, keepdims=True)).astype(self.dtype)
        self.delta = np.zeros(shape, self.dtype)
        self.base = (np.arange(count) * N)[:, None]
        self.where = np.tile(np.arange(N), (count, 1))   # replica i of a trial sits in row where[i]

    def regroup(self) -> np.ndarray:
        """A fresh uniformly random partition (consecutive blocks of a random permutation of the
        replicas, noloco.theory.partitions): the rows each replica's state moves to, per trial."""
        count, N = self.shape[:2]
        order = random_permutations(self.partitions, (count,), N)
        trial_rows = np.arange(count)[:, None]
        local_rows = self.where[trial_rows, order]
        self.where[trial_rows, order] = np.arange(N)[None, :]
        return local_rows

    def move(self, local_rows: np.ndarray) -> np.ndarray:
        """Every replica's state (phi, delta, shift) to its row in the new partition; the flat rows."""
        rows = (self.base + local_rows).ravel()
        self.phi, self.delta = _rows(self.phi, rows), _rows(self.delta, rows)
        if self.shift is not None:
            self.shift = _rows(self.shift, rows)
        return rows


class _ExactLaw:
    """The exact inner phase's law per phase: contraction c and the std of a group's mean noise."""

    def __init__(self, driver: _Driver, block: _Block):
        cfg, n = driver.cfg, driver.outer.group_size
        lrs = cfg.learning_rates()
        self.constant = bool(np.all(lrs == lrs[0]))
        law = [phase_coefficients(rates, block.lam, driver.inner.noise) for rates in (lrs[:1] if self.constant else lrs)]
        self.c = [c.astype(block.dtype) for c, _ in law]
        self.sd = [np.sqrt(s2 / n).astype(block.dtype) for _, s2 in law]
        self.noisy = driver.inner.noise > 0
        count, N, width = block.shape
        self.group_noise = np.empty((count, N // n, 1, width), block.dtype)

    def phase(self, t: int) -> int:
        return 0 if self.constant else t - 1


class _ExactStep:
    """One outer step with the inner phase drawn from its exact law (numpy)."""

    def __init__(self, driver: _Driver, block: _Block):
        self.block, self.law, self.rule, self.n = block, _ExactLaw(driver, block), driver.outer.rule(), \
            driver.outer.group_size

    def __call__(self, t: int, local_rows: np.ndarray):
        b, law = self.block, self.law
        b.move(local_rows)
        count, N, width = b.shape
        blocks = b.phi.reshape(count, N // self.n, self.n, width)
        mean_phi = _group_mean(blocks)
        gap = mean_phi if b.shift is None else mean_phi - _group_mean(b.shift.reshape(blocks.shape))
        progress = np.multiply(gap, -law.c[law.phase(t)])
        if law.noisy:
            b.noise.fill(law.group_noise)
            law.group_noise *= law.sd[law.phase(t)]
            progress += law.group_noise
        phi, delta = outer_step(blocks, b.delta.reshape(blocks.shape), mean_phi, progress, **self.rule)
        b.phi, b.delta = phi.reshape(b.shape), delta.reshape(b.shape)
        return None


class _LateExactStep:
    """The one-phase-late step with the exact inner phase (numpy): the state is (phi, delta, the weights x); the
    phase from x ends at (1 - c) x + c shift + eps per replica, and the step applies the group means of phi and
    of the progress pending (x - phi) with :func:`late_outer_step`. Before step 1 the first phase has run from
    phi_0 (its progress pending), so step t gives phi_t as the optimizer's t-th applied outer step does."""

    def __init__(self, driver: _Driver, block: _Block):
        self.block, self.law, self.rule, self.n = block, _ExactLaw(driver, block), driver.outer.rule(), \
            driver.outer.group_size
        self.draws = np.empty(block.shape, block.dtype)
        self.x = self._phase(block.phi, 1)

    def _phase(self, x: np.ndarray, t: int) -> np.ndarray:
        """Where an inner phase (the t-th) from ``x`` ends, every replica its own noise."""
        b, law = self.block, self.law
        k = min(law.phase(t), len(law.c) - 1)  # the phase after the run's last (its progress stays pending)
        end = np.multiply(x if b.shift is None else x - b.shift, -law.c[k])
        end += x
        if law.noisy:
            end += b.noise.fill(self.draws, 1.0) * (law.sd[k] * np.sqrt(self.n))
        return end

    def __call__(self, t: int, local_rows: np.ndarray):
        b = self.block
        rows = b.move(local_rows)
        self.x = _rows(self.x, rows)
        count, N, width = b.shape
        shape = (count, N // self.n, self.n, width)
        mean_phi = _group_mean(b.phi.reshape(shape))
        mean_progress = _group_mean((self.x - b.phi).reshape(shape))
        end = self._phase(self.x, t + 1)
        phi, delta, x = late_outer_step(b.phi.reshape(shape), b.delta.reshape(shape), end.reshape(shape),
                                        self.x.reshape(shape), mean_phi, mean_progress, **self.rule)
        b.phi, b.delta, self.x = phi.reshape(b.shape), delta.reshape(b.shape), x.reshape(b.shape)
        return None


class _CompiledExactStep:
    """The same step in one compiled loop (noloco.quadratic.fused), writing into a second set of arrays (the
    two swap every step); it also returns the sums of the deviations and their squares that the
    recorder needs, computed in the same loop."""

    def __init__(self, driver: _Driver, block: _Block):
        self.block, self.law = block, _ExactLaw(driver, block)
        o, dtype = driver.outer, block.dtype
        self.constants = (dtype.type(o.group_size), *(dtype.type(v) for v in (o.alpha, o.beta, o.gamma)),
                          o.momentum == "nesterov")
        self.empty = np.empty((0, 0, 0), dtype)
        self.spare = [np.empty(block.shape, dtype), np.empty(block.shape, dtype),
                      self.empty if block.shift is None else np.empty(block.shape, dtype)]
        self.sums = np.empty((2, block.count, block.lam.size))

    def __call__(self, t: int, local_rows: np.ndarray):
        b, law, k = self.block, self.law, self.law.phase(t)
        if law.noisy:
            b.noise.fill(law.group_noise)
        current = [b.phi, b.delta, self.empty if b.shift is None else b.shift]
        count, G, _, width = law.group_noise.shape
        draws = law.group_noise.reshape(count, G, width) if law.noisy else self.empty
        fused.exact_outer_step(*current, local_rows, draws, law.c[k], law.sd[k], *self.constants, *self.spare,
                               self.sums)
        (b.phi, b.delta, moved), self.spare = self.spare, current
        b.shift = moved if moved.size else None
        return self.sums


class _ExplicitStep:
    """One outer step with every inner step simulated (any inner optimizer)."""

    def __init__(self, driver: _Driver, block: _Block):
        cfg = driver.cfg
        self.block, self.cfg, self.inner, self.rule, self.n = block, cfg, driver.inner, driver.outer.rule(), \
            driver.outer.group_size
        self.optimizer = InnerOptimizer(cfg.optimizer, block.shape, momentum=cfg.inner_momentum, dtype=block.dtype)
        self.theta, self.scratch = np.empty(block.shape, block.dtype), np.empty(block.shape, block.dtype)
        self.lam, self.lrs = block.lam.astype(block.dtype), cfg.learning_rates()

    def __call__(self, t: int, local_rows: np.ndarray):
        b, theta = self.block, self.theta
        rows = b.move(local_rows)
        count, N, width = b.shape
        blocks = b.phi.reshape(count, N // self.n, self.n, width)
        mean_phi = _group_mean(blocks)
        self.optimizer.permute(lambda x: _rows(x, rows))
        theta[...] = b.phi
        _inner_phase(self.cfg, self.inner, self.optimizer, b.noise, theta, self.scratch, self.lam, b.shift,
                     self.lrs[t - 1])
        np.subtract(theta, b.phi, out=theta)
        progress = _group_mean(theta.reshape(blocks.shape))
        phi, delta = outer_step(blocks, b.delta.reshape(blocks.shape), mean_phi, progress, **self.rule)
        b.phi, b.delta = phi.reshape(b.shape), delta.reshape(b.shape)
        return None


class _Recorder:
    """What every step records of a block: the mean's distance along the listed directions, the spread,
    the losses; and whether the weights left the bound (a divergence reason, or "")."""

    def __init__(self, driver: _Driver, totals: _Trials, block: _Block, cols: slice):
        run = driver.run
        self.driver, self.totals, self.block = driver, totals, block
        self.sel = slice(*np.searchsorted(run.directions, [cols.start, cols.stop]))
        self.local = run.directions[self.sel] - cols.start
        self.lam64 = block.lam.astype(float)
        self.dev = np.empty(block.shape, block.dtype)

    def __call__(self, t: int, sums=None) -> str:
        phi, N, run = self.block.phi, self.block.shape[1], self.driver.run
        if sums is None:  # else the compiled step's sums of the same deviations and their squares
            np.subtract(phi, phi[:, :1], out=self.dev)   # from replica 0: identical replicas give exactly 0
            sums = np.add.reduce(self.dev, axis=1, dtype=float), np.einsum("tnd,tnd->td", self.dev, self.dev).astype(float)
        dev_mean, sq = sums[0] / N, sums[1] / N
        mean = phi[:, 0] + dev_mean
        spread_d = sq - dev_mean * dev_mean                     # per direction: mean_i (phi_i - mean)^2
        run.mean_distance.add(t, mean[:, self.local], self.sel)
        loss_at_mean = 0.5 * (mean * mean) @ self.lam64
        loss_replicas = loss_at_mean + 0.5 * spread_d @ self.lam64   # mean_i phi_i^2 = mean^2 + spread
        self.totals.add(t, spread_d.sum(1), loss_at_mean, loss_replicas)
        # |phi_i| <= |phi_0| + |phi_i - phi_0|: a cheap bound first, the exact maximum only when it fails
        screen = float(np.abs(phi[:, 0]).max()) + math.sqrt(float(sq.max()) * N)
        if not (screen <= self.driver.bound):
            return _divergence(phi, 0.0, self.driver.bound) or _overflow(loss_replicas)
        return _overflow(loss_replicas)


def _eigenbasis_block(driver: _Driver, totals: _Trials, index: int, part: int, cols: slice) -> None:
    """One block of trials x directions of the quadratic, in its eigenbasis, for the whole run: a fresh
    partition each step, then one step of the run's path (compiled exact, exact or explicit inner phase),
    then the recorder."""
    block = _Block(driver, totals, index, part, cols)
    step = (_LateExactStep if driver.late else _CompiledExactStep if driver.compiled
            else _ExactStep if driver.cfg.inner_law == "exact" else _ExplicitStep)(driver, block)
    record = _Recorder(driver, totals, block, cols)
    record(0)
    for t in range(1, driver.last + 1):
        sums = step(t, block.regroup())
        driver.bar.update()
        reason = record(t, sums)
        if reason:
            driver.diverged(t, reason)
            break


def _inner_phase(cfg, inner, optimizer, noise, theta, scratch, lam, shift, rates) -> None:
    """The H inner steps on the diagonal quadratic (gradient lam (theta - shift) + sigma z)."""
    sigma = inner.noise
    draws = np.empty_like(theta) if cfg.optimizer != "sgd" and sigma else None
    for lr in rates:
        if cfg.optimizer == "sgd":  # theta <- (1 - lr lam) theta + lr lam shift - lr sigma z
            theta *= (1 - lr * lam).astype(theta.dtype)
            if shift is not None:
                np.multiply(shift, lam * lr, out=scratch)
                theta += scratch
            if sigma:
                theta -= noise.fill(scratch, lr * sigma)
            continue
        grad = np.multiply(theta if shift is None else theta - shift, lam, out=scratch)
        if sigma:
            grad += noise.fill(draws, sigma)
        optimizer.step(theta, grad, lr)


def _coordinate_block(driver: _Driver, totals: _Trials, index: int) -> None:
    """One block of whole trials in the objective's own coordinates (data objectives, a rotated
    quadratic simulated explicitly): real gradients, any inner optimizer."""
    cfg, run, outer, inner = driver.cfg, driver.run, driver.outer, driver.inner
    obj = run.objective
    N, count = outer.replicas, totals.count
    rng = np.random.default_rng([cfg.seed, 2] if index == 0 else [cfg.seed, 2, index])
    noise_source = Noise(rng)
    phi = np.broadcast_to(obj.optimum + cfg.start, (count, N, obj.dim)).copy()
    if cfg.init_spread:
        offsets = cfg.init_spread * rng.standard_normal(phi.shape)
        phi += offsets - offsets.mean(1, keepdims=True)
    shift = obj.draw_shift(rng, count, N, cfg.zeta)
    outer_momentum = np.zeros_like(phi)
    theta, grad, noise = (np.empty_like(phi) for _ in range(3))
    optimizer = InnerOptimizer(cfg.optimizer, phi.shape, momentum=cfg.inner_momentum)
    lrs = cfg.learning_rates()
    basis = np.eye(obj.dim)[:, run.directions] if run.eigvecs is None else run.eigvecs[:, run.directions]

    def record(t):
        mean = phi.mean(1)
        dev = phi - phi[:, :1]  # from replica 0, not from the rounded mean: identical replicas give exactly 0
        dev_mean = dev.mean(1)
        spread = np.einsum("tnd,tnd->t", dev, dev) / N - np.einsum("td,td->t", dev_mean, dev_mean)
        loss_replicas = obj.loss(phi).mean(1)
        reason = _overflow(loss_replicas) or _overflow(spread)
        if not reason:
            run.mean_distance.add(t, (mean - obj.optimum) @ basis)
            totals.add(t, spread, obj.loss(mean), loss_replicas)
        return reason

    record(0)
    for t in range(1, driver.last + 1):
        theta[...] = phi
        for lr in lrs[t - 1]:
            obj.grad(theta, rng, out=grad, shift=shift)
            if inner.noise:
                grad += noise_source.fill(noise, inner.noise)
            optimizer.step(theta, grad, lr)
        delta_theta = np.subtract(theta, phi, out=theta)  # theta is rebuilt from phi next step
        perm = random_permutations(rng, (count,), N)
        phi, outer_momentum = outer_step(phi, outer_momentum, group_mean(phi, perm, outer.group_size),
                                         group_mean(delta_theta, perm, outer.group_size), **outer.rule())
        driver.bar.update()
        reason = _divergence(phi, obj.optimum, driver.bound) or record(t)
        if reason:
            driver.diverged(t, reason)
            break
