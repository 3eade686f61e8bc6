"""The observer: the theory's inputs and the spread measured in any run, written to a run folder the advice reads.

Attached to a :class:`noloco.training.outer_optimizer.OuterOptimizer` (its progress hook, before every
exchange), it sees each outer step's outer weights phi and progress theta - phi and measures what
:class:`noloco.training.measure.SpreadMeter` measures (c, s2, rho, the drift, per tensor) and the spread
``weight_std``:

* N replicas in one process (stacked tensors or a list of modules): exactly, from every coordinate;
* one replica per torch.distributed rank: from a seeded sample of ``sample`` coordinates of each tensor, the
  same on every rank (:class:`noloco.training.sample.CoordinateSample`), gathered by one all-gather of a small
  buffer per outer step; the parameters are never all-reduced. Each row states its sampling error.

Rank 0 writes the run folder (docs/run_folder.md, format ``noloco-run`` version :data:`FORMAT_VERSION`), every
file atomically: ``result.json`` (the setting the advice reads, how far the run got, the flags),
``metrics.jsonl`` (a row per outer step: ``weight_std`` of phi after it and what :meth:`Observer.log` was
given) and ``inputs.jsonl`` (the meter's row per outer step). ``noloco llm predict RUN`` (``--forecast``,
``--as``) and ``noloco llm tune`` read it; its early warnings are :mod:`noloco.training.early_warning`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import time
import weakref
from pathlib import Path

import torch

from noloco.advice.record import RunRecord, RunSetting
from noloco.advice.run_rows import GroupInputs, InputsRow
from noloco.infra.errors import ConfigError, DataError
from noloco.infra.checks import check_flag, check_integer
from noloco.infra.files import SCHEMA_VERSION, atomic_write_text, dumps, output_dir
from noloco.infra.rundir import RunLock
from noloco.training import early_warning
from noloco.training.exchange import LocalExchange
from noloco.training.measure import SpreadMeter
from noloco.training.sample import DEFAULT_SAMPLE, CoordinateSample, standard_errors, update_alignment

FORMAT = "noloco-run"
#: the version of the run-folder format this observer writes (docs/run_folder.md)
FORMAT_VERSION = 1
#: across ranks, the outer steps whose samples' all-gather may still be in flight before the observer waits
IN_FLIGHT = 4


#: folder -> the open Observer writing it, in this process (a second one would overwrite its files)
_WRITING: "weakref.WeakValueDictionary[str, Observer]" = weakref.WeakValueDictionary()


def _hold_folder(observer) -> RunLock:
    """The folder's run lock (another process is refused, LockedError) and this process's claim on it (a second open
    Observer is refused, ConfigError); the lock is released at close, or found stale after the process ends."""
    key = str(observer.folder.resolve())
    other = _WRITING.get(key)
    if other is not None and other._handle is not None:
        raise ConfigError(f"{observer.folder} is written by another open Observer in this process; close() it "
                          "first, or give another folder")
    lock = RunLock(observer.folder).acquire()
    _WRITING[key] = observer
    return lock


def _release_folder(observer) -> None:
    if observer._lock is not None:
        _WRITING.pop(str(observer.folder.resolve()), None)
        observer._lock.release()
        observer._lock = None


class Observer:
    """The theory's inputs and the spread of any run, measured every outer step into a run folder.

    Attached to ``outer`` (an :class:`noloco.OuterOptimizer`, or a :class:`noloco.Watch` on another
    framework's outer step), it measures at every outer step the inputs the theory needs (the per-group
    contraction c and noise s2 of the inner phase, from the progress) and the replicas' spread, and writes
    the folder ``noloco llm predict`` and :func:`noloco.read_run` read (format ``noloco-run``; rank 0
    writes it). Under torch.distributed it measures a coordinate sample gathered without a wait. Early
    warnings (``flags``) say when the measured or forecast spread grows or crosses ``spread_budget``.

    Args:
        outer: the outer step observed.
        folder: the run folder to write (None: measure only, into ``inputs`` and the rows, for a caller
            that writes its own files).
        outer_steps: outer steps planned. lr: the inner peak learning rate.
        schedule: ``"constant"``, ``"cosine"`` or ``"inverse"``; warmup: inner steps; min_lr_frac: the
            cosine floor (the advice needs the run's schedule).
        inner_optimizer: ``"adamw"`` or ``"sgd"``; adam_beta2: AdamW's second-moment decay.
        sample: coordinates per tensor sampled (default across ranks:
            :data:`~noloco.training.sample.DEFAULT_SAMPLE`; None in one process: every coordinate).
        seed: of the sample (the config's ``seed`` is the outer optimizer's, of the groups).
        spread_budget: a weight_std the run should stay below (a flag when it is crossed or forecast to be).
        write_every: outer steps between writes of the folder (also at a warning and at :meth:`close`).
        warn_steps: the last outer step at which the warnings that replay the run run (0: never; default: the
            fourth unstable check's, :func:`noloco.training.early_warning.check_steps`: 10 at H >= 10, 14 at H 5).
        overwrite: replace a run folder already there.
        **fields: the user's own settings kept in the folder's config (a model name, a seed...).

    Returns:
        The observer; ``inputs`` and ``rows`` hold what it measured, ``flags`` its warnings; :meth:`log`
        adds the user's evaluations, :meth:`close` writes the folder a last time.

    Raises:
        ConfigError: ``outer`` is no outer step, a value out of range, fewer than 2 replicas, a folder that
            already holds a run (without ``overwrite``) or is written by another open observer.
        LockedError: another process writes the folder.

    Examples:
        4 replicas of a small regression in one process, 12 outer steps:

        >>> import tempfile, torch, noloco
        >>> _ = torch.manual_seed(0)
        >>> models = [torch.nn.Linear(4, 1) for _ in range(4)]
        >>> for m in models[1:]:
        ...     _ = m.load_state_dict(models[0].state_dict())    # replicas start equal
        >>> inner = torch.optim.SGD([p for m in models for p in m.parameters()], lr=0.05)
        >>> outer = noloco.OuterOptimizer(models, inner, inner_steps=5)
        >>> folder = tempfile.mkdtemp()
        >>> observer = noloco.Observer(outer, folder, outer_steps=12, lr=0.05, inner_optimizer="sgd")
        >>> for step in range(60):
        ...     inner.zero_grad()
        ...     x = torch.randn(4, 16, 4)
        ...     sum(((m(x[i]) - x[i].sum(1, keepdim=True)) ** 2).mean() for i, m in enumerate(models)).backward()
        ...     inner.step()
        >>> observer.close()
        >>> noloco.read_run(folder).metrics[-1]["outer_step"], observer.flags
        (12, [])
    """

    def __init__(self, outer, folder, *, outer_steps: int, lr: float, schedule: str = "constant", warmup: int = 0,
                 min_lr_frac: float = 0.0, inner_optimizer: str = "adamw", adam_beta2: float = 0.95,
                 sample: int | None = None, seed: int = 0, spread_budget: float | None = None,
                 write_every: int = 10, warn_steps: int | None = None, overwrite: bool = False,
                 **fields):
        if not hasattr(outer, "add_progress_hook"):  # named here, not as an AttributeError further down
            raise ConfigError(f"outer={type(outer).__name__} is not a noloco.OuterOptimizer; give the one whose run "
                              "this observes")
        self.outer = outer
        if folder is not None and (not isinstance(folder, (str, os.PathLike)) or not str(folder).strip()):
            # '' was Path('.'): the run written into the working folder; 5 a TypeError
            raise ConfigError(f"folder={folder!r} names no folder; give a path, or None (nothing written)")
        self.folder = None if folder is None else Path(folder)
        self.config = {"method": outer.method, "outer": dataclasses.asdict(outer.config),
                       "inner_steps": outer.inner_steps, "outer_steps": outer_steps, "lr": lr, "schedule": schedule,
                       "warmup": warmup, "min_lr_frac": min_lr_frac, "inner_optimizer": inner_optimizer,
                       "adam_beta2": adam_beta2,
                       # what fixes every outer step's groups (with N and n above), the forecast steps along them: the
                       # seed of the groups under the harness's name (not a training setting: seeds pool in the tuner)
                       "seed": outer.seed, **({"stages": len(outer.stages)} if len(outer.stages) > 1 else {}),
                       **fields}
        own = sorted(set(fields) & {"method", "inner_steps", "stages"})
        if own:  # a field of that name replaced the watched run's own setting in the folder: the advice read a wrong H
            raise ConfigError(f"{own[0]}= is the run's own setting, read from the optimizer; keep your value under "
                              f"another name")
        self.setting = RunSetting.from_config(self.config)  # a bad value: ConfigError naming the field, before any work
        if spread_budget is not None and not (isinstance(spread_budget, (int, float)) and 0 < spread_budget < math.inf):
            raise ConfigError(f"spread_budget={spread_budget!r} is out of range; allowed: a number > 0 (a weight_std)")
        self.budget = spread_budget
        if isinstance(write_every, bool) or not isinstance(write_every, int) or write_every < 1:
            raise ConfigError(f"write_every={write_every!r} is out of range; allowed: an integer >= 1 (outer steps)")
        self.write_every = write_every
        if warn_steps is not None and (isinstance(warn_steps, bool) or not isinstance(warn_steps, int) or warn_steps < 0):
            raise ConfigError(f"warn_steps={warn_steps!r} is out of range; allowed: an integer >= 0 (outer steps) or "
                              f"None (the default checks)")
        self.warn_steps = early_warning.check_steps(outer.inner_steps)[-1] if warn_steps is None else warn_steps
        check_flag("overwrite", overwrite)
        check_integer("seed", seed, "an integer >= 0 (the sample's)", lambda v: v >= 0)
        for key, value in fields.items():  # kept in config.json: refused now, not when the folder is first written
            try:
                dumps(value)  # as config.json is written (jsonable: numpy numbers and records too)
            except (TypeError, ValueError):
                raise ConfigError(f"{key}={value!r} cannot be kept in the folder's config (JSON); give a number, a "
                                  f"string, a list or a dict of them") from None
        self._unstable_at = set(early_warning.check_steps(outer.inner_steps, self.warn_steps))
        ex = outer.exchange
        self.batched = isinstance(ex, LocalExchange)
        if not self.batched and len(outer.stages) > 1:
            raise ConfigError("the observer measures one stage per run across ranks; give stages=None")
        self.N, self.main = outer.replicas, ex.is_main
        if self.N < 2:
            raise ConfigError(f"replicas={self.N}: a spread needs at least 2 replicas")
        one = {k: (t.shape[1:] if self.batched else t.shape) for k, t in outer.phi.items()}
        self.numel = {k: math.prod(s) for k, s in one.items()}
        self.sampled = sample is not None or not self.batched
        self.sample = CoordinateSample(one, DEFAULT_SAMPLE if sample is None else sample, seed)
        self.meter = SpreadMeter(self.N)
        # what the folder's files get, as JSON: metrics.jsonl's rows (the user's own keys among them), inputs.jsonl's,
        # result.json's flags
        self.rows: dict[int, dict] = {}  # outer step -> metrics row
        self.inputs: list[dict] = []
        self.alignments: list = []
        self.flags: list[dict] = []
        self._kinds: set[str] = set()  # the kinds of flag raised
        self.seconds = 0.0  # spent observing (the benchmark's cost)
        self.gather_seconds = 0.0  # of which in the all-gather (the wait for the slowest rank included)
        self._prev = None  # (phi, progress) samples of the last outer step
        self._pending = []  # across ranks: (outer step, its all-gather in flight), oldest first
        self._writer = self._written = None  # the folder's writing thread and its last write
        self._input_lines = []  # (row, its text) of inputs.jsonl, made by the writing thread
        self._unstable = []  # outer steps whose stability check found a decay factor >= 1
        self._started = time.perf_counter()
        self._lock = None
        if self.main and self.folder is not None:
            output_dir(self.folder, "folder")  # a file in its place, or a place that cannot be written: a DataError
            self._lock = _hold_folder(self)
            if (self.folder / "result.json").exists() and not overwrite:
                raise ConfigError(f"{self.folder} already holds a run (result.json); give another folder or "
                                  f"overwrite=True")
            for name in ("metrics.jsonl", "inputs.jsonl"):
                (self.folder / name).unlink(missing_ok=True)
        if self.main and self.warn_steps:
            early_warning.prepare(spread_budget is not None)
        self._handle = outer.add_progress_hook(self.observe)

    # ------------------------------------------------------------------ measuring

    def _gather(self, *parts: dict) -> list[dict]:
        """Every replica's samples of ``parts`` (dicts of this process's tensors): ``{name: (N, K)}`` each."""
        return self.sample.unpack(self._collect(self._start(*parts)), len(parts))[0]

    def _start(self, *parts: dict, extra: torch.Tensor | None = None):
        """Take this process's samples of ``parts`` into one buffer on the device (``extra``, float64, last) and,
        across ranks, start its all-gather: what :meth:`_collect` finishes."""
        flat = self.sample.gather(list(parts), self.batched, extra)
        if self.batched:
            return flat, None, None, len(parts)
        import torch.distributed as dist

        out = [torch.empty_like(flat) for _ in range(self.N)]
        with self.outer.exchange._talking("observer all-gather", "all"):
            work = dist.all_gather(out, flat, async_op=True)
        return None, work, out, len(parts)

    def _collect(self, pending) -> torch.Tensor:
        """Wait for a gather :meth:`_start` began; every replica's samples, ``(N, total)`` on the host in
        :meth:`CoordinateSample.gather`'s layout: one copy from the device, and every measurement after it on the
        CPU (on a GPU, a sync and a few kernels per tensor would cost more than the outer step)."""
        flat, work, out, parts = pending
        if work is None:
            return flat.cpu()
        from datetime import timedelta

        start = time.perf_counter()
        with self.outer.exchange._talking("observer all-gather", "all"):
            work.wait(timeout=timedelta(seconds=self.outer.exchange.timeout))
            whole = torch.stack(out).cpu()  # (N, total); on a GPU the wait for the gather ends here
        self.gather_seconds += time.perf_counter() - start
        return whole

    def _checksums(self, phi: dict) -> torch.Tensor:
        """(sum, sum of squares) in float64 of each whole tensor of each replica, stacked on the device: ``(N, 2T)``
        of stacked tensors, ``(2T,)`` of one replica's. Where the sample sees K coordinates, a difference anywhere
        in a tensor still shows (the first outer step only)."""
        if self.batched:
            sums = [s for t in phi.values() for s in (t.double().flatten(1).sum(1), t.double().pow(2).flatten(1).sum(1))]
            return torch.stack(sums, 1)
        return torch.stack([s for t in phi.values() for s in (t.double().sum(), t.double().pow(2).sum())])

    @staticmethod
    def _checksums_differ(names: list, sums: torch.Tensor) -> list[str]:
        """The tensors whose checksums differ between replicas; ``sums``: every replica's :meth:`_checksums`, (N, 2T)."""
        same = (sums == sums[0]).all(0).reshape(-1, 2).all(1).tolist()
        return [k for k, s in zip(names, same) if not s]

    def _spread(self, groups: dict[str, GroupInputs]) -> tuple[float, float]:
        """``(weight_std, its standard error)`` pooled over the tensors, numel-weighted."""
        total = sum(self.numel.values())
        sq = sum(self.numel[k] * g.spread for k, g in groups.items()) / total
        var = sum((self.numel[k] * (g.se.spread if g.se and g.se.spread is not None else 0.0)) ** 2
                  for k, g in groups.items()) / total ** 2
        ws = math.sqrt(max(sq, 0.0))
        return ws, (math.sqrt(var) / (2 * ws) if ws > 0 else 0.0)

    @torch.no_grad()
    def observe(self, phi: dict, progress: dict, step: int) -> None:
        """The progress hook: outer step ``step + 1``'s phi and progress theta - phi, before the exchange (the
        optimizer calls it on every rank). Across ranks the samples' all-gather started here is measured once
        it has arrived, at a later outer step (at most :data:`IN_FLIGHT` outer steps later, or at
        :meth:`close`): no rank waits for the slowest one, and each row is written a step or two late."""
        start = time.perf_counter()
        check = step == 0 and self.sampled  # the whole tensors' checksums, at the first outer step
        pending = self._start(phi, progress, extra=self._checksums(phi) if check else None)
        if self.batched:
            self._measure(step, phi, progress, self._collect(pending))
        else:
            self._pending.append((step, pending))
            self._catch_up(keep=IN_FLIGHT)
        self.seconds += time.perf_counter() - start

    def collect(self) -> None:
        """Measure now every outer step whose all-gather is still in flight (waits for them; no new
        collective, so ranks may call it at different times): ``inputs`` and the rows are then complete."""
        start = time.perf_counter()
        self._catch_up()
        self.seconds += time.perf_counter() - start

    def _catch_up(self, keep: int = 0) -> None:
        """Measure, in order, the outer steps whose all-gather has arrived, and wait for the oldest ones while
        more than ``keep`` are in flight (across ranks)."""
        while self._pending and (len(self._pending) > keep or self._pending[0][1][1].is_completed()):
            step, pending = self._pending.pop(0)
            self._measure(step, None, None, self._collect(pending))

    def _measure(self, step: int, phi, progress, whole: torch.Tensor) -> None:
        """One outer step's row from every replica's samples ``whole`` (:meth:`_collect`; exact in one process,
        from ``phi`` and ``progress``). Every tensor at once: the meter's passes and the errors' over all of them."""
        (phi_s, prog_s), sums = self.sample.unpack(whole, 2)
        differ = self._checksums_differ(list(phi_s), sums) if sums.numel() else None
        if self.sampled:
            groups = self.meter.measure(phi_s, prog_s, columns=True)
            errors = standard_errors(self.meter.columns, self.sample.exact)
            groups = {k: dataclasses.replace(g, sampled=g.numel, numel=self.numel[k], se=errors[k])
                      for k, g in groups.items()}
        else:
            early = step <= self.warn_steps  # c's standard error over the coordinates: what the warnings test against
            groups = self.meter.measure(phi, progress, columns=early)
            if early:
                errors = standard_errors(self.meter.columns)
                groups = {k: dataclasses.replace(g, c_se=0.0 if self.numel[k] < 2 else errors[k].c)
                          for k, g in groups.items()}
        ws, se = self._spread(groups)
        self._metric(step, ws, se)
        self.inputs.append(InputsRow(outer_step=step + 1, steps=self.meter.steps, replicas=self.meter.replicas,
                                     groups=groups).to_json())
        width = whole.shape[-1] - sums.shape[-1]  # phi's samples, then the progress's, side by side
        phi_flat = whole[..., :width // 2]
        if self._prev is not None:
            self.alignments.append(update_alignment(*self._prev, phi_flat))
        self._prev = (phi_flat, whole[..., width // 2:width])
        if self.main and step == 0:  # the weights' RMS: the scale of a spread at the first outer step
            rms = math.sqrt(sum(float((t * t).mean()) * self.numel[k] for k, t in phi_s.items()) / sum(self.numel.values()))
            self._raise(early_warning.unequal_start(ws, rms, step, differ))
        if self.main:
            self._raise(early_warning.wrong_sign(self.alignments, step) if self.alignments else None)
            early = step <= self.warn_steps
            flagged = len(self.flags)
            if early and step >= 2 and step % 2 == 0:  # the run so far, held in memory; every other step (cost)
                self._checks(step, ws)
            if (step + 1) % self.write_every == 0 or len(self.flags) > flagged:  # 3 fsyncs: not every step
                self._write(finished=False)

    def _checks(self, step: int, ws: float) -> None:
        """The warnings that replay the run so far through the advice. A warning never stops training: where
        the advice cannot read the run yet (DataError, ConfigError) there is no flag at this step."""
        try:
            run = self._record()
            if step in self._unstable_at:  # c is 0 at the first step and moves through the first tens of inner steps
                self._raise(early_warning.unstable(run, self.outer.config, step, self._unstable))
            if self.budget is not None:
                self._raise(early_warning.spread_budget(run, self.outer.config, self.budget, ws, step,
                                                        self.setting.outer_steps))
        except (ConfigError, DataError):
            pass

    def _record(self) -> RunRecord:
        """The run so far as the advice reads a folder (:func:`noloco.advice.record.read_run`), from memory."""
        return RunRecord(folder=self.folder, setting=self.setting, metrics=self._metric_rows(),
                         inputs=list(self.inputs), world_size=self._world_size(), result=self.result(finished=False))

    def _metric_rows(self) -> list[dict]:
        """metrics.jsonl's rows: the outer steps whose spread is measured, in order."""
        return [r for _, r in sorted(self.rows.items()) if "weight_std" in r]

    def _metric(self, step: int, ws: float, se: float) -> None:
        row = self.rows.setdefault(step, {"outer_step": step})
        row["weight_std"] = ws  # edge: metrics.jsonl's row in the file's form, the user's own keys in their order
        if self.sampled:
            row["weight_std_se"] = se  # edge: as above

    def _raise(self, flag: early_warning.Flag | None) -> None:
        if flag is not None and flag.flag not in self._kinds:  # the first of each kind
            self._kinds.add(flag.flag)
            self.flags.append(flag.to_json())

    def log(self, step: int, **metrics) -> None:
        """Your own numbers at outer step ``step`` (``outer.outer_done`` after it), e.g. ``train_loss``, and
        ``val_loss_avg_model`` (the loss of the replicas' average) and ``val_loss_replicas_mean`` (the mean of
        each replica's loss) for ``noloco llm tune`` and the loss gap. Numbers only; rank 0's are written."""
        if self._handle is None:  # after close() a number was kept in memory and never written
            raise ConfigError("log() after close(): the folder is written; log before closing the observer")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigError(f"step={step!r} is out of range; allowed: an outer step >= 0")
        for name, value in metrics.items():
            if name in ("outer_step", "weight_std", "weight_std_se"):
                raise ConfigError(f"{name} is the observer's own; log your number under another name")
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            # numpy's float32 is a number too (it is a numbers.Real, not a float)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ConfigError(f"{name}={value!r} is not a number")
            self.rows.setdefault(step, {"outer_step": step})[name] = float(value)

    @torch.no_grad()
    def close(self) -> None:
        """The spread after the last outer step done, the folder's final write (``finished`` when the planned
        outer steps are done), and detach from the optimizer. Under torch.distributed every rank calls it."""
        if self._handle is None:
            return
        start = time.perf_counter()
        self._catch_up()
        self.outer.settle()  # a watched framework's last synchronisation: its phi and count
        step = self.outer.outer_done
        if step not in self.rows or "weight_std" not in self.rows[step]:  # the same on every rank
            if self.sampled:
                (phi_s,) = self._gather(self.outer.phi)
                meter = SpreadMeter(self.N)  # phi's spread and its error, as at any step (no progress: c = 0)
                spread = meter.measure(phi_s, {k: torch.zeros_like(t) for k, t in phi_s.items()}, columns=True)
                errors = standard_errors(meter.columns, self.sample.exact)
                groups = {k: GroupInputs(spread=g.spread, se=errors[k]) for k, g in spread.items()}
            else:  # every coordinate, float64 (equal replicas give exactly 0)
                groups = {k: GroupInputs(spread=float(((p.double() - p.double().mean(0)) ** 2).sum()) /
                                         (self.numel[k] * self.N)) for k, p in self.outer.phi.items()}
            self._metric(step, *self._spread(groups))
        self.second_moment = self._second_moment(step)
        self.seconds += time.perf_counter() - start
        if self.main:
            self._write(finished=step >= self.setting.outer_steps, wait=True)
        self._handle.remove()
        self._handle = None
        _release_folder(self)

    def detach(self) -> None:
        """Stop observing: no final measurement, nothing more written (a caller that resumes a run it cannot
        measure further)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._pending = []
        _release_folder(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ the run folder

    def _second_moment(self, step: int) -> dict | None:
        """What ``noloco llm predict --gap`` needs of an inner Adam: sum over the weights of the replica-mean
        sqrt(vhat) (bias-corrected), summed over this process's replicas and, across ranks, over every rank's;
        None without an inner optimizer that keeps ``exp_avg_sq``."""
        optimizer = getattr(self.outer, "inner_optimizer", None)
        states = [st for st in (optimizer.state.values() if optimizer is not None else ()) if "exp_avg_sq" in st]
        if not states or self.setting.inner_optimizer != "adamw":
            return None
        beta2 = self.setting.adam_beta2
        root = torch.tensor(sum(float((st["exp_avg_sq"].double() / (1 - beta2 ** float(st["step"]))).sqrt().sum())  # edge: torch's Adam state
                                for st in states), dtype=torch.float64)
        if not self.batched:
            import torch.distributed as dist

            dist.all_reduce(root)
        return {"outer_step": step, "sum_sqrt_v": float(root) / self.N}

    def result(self, finished: bool) -> dict:
        """result.json's content (docs/run_folder.md)."""
        sampled = None if not self.sampled else {
            "per_tensor": self.sample.per_tensor, "seed": self.sample.seed, "tensors": len(self.numel),
            "coordinates": sum(self.sample.sizes().values()), "of": sum(self.numel.values())}
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "schema_version": SCHEMA_VERSION,
                "config": self.config, "world_size": self._world_size(), "replicas": self.N,
                "n_params": sum(self.numel.values()), "outer_steps_done": self.outer.outer_done,
                "finished": finished, "wall_s": time.perf_counter() - self._started,
                "observer_s": self.seconds, "sampled": sampled, "flags": self.flags, "torch": torch.__version__,
                "adam_second_moment": getattr(self, "second_moment", None)}

    def _world_size(self) -> int:
        return 1 if self.batched else self.N

    def _write(self, finished: bool, wait: bool = False) -> None:
        """The folder's three files, written (each atomically, fsynced) by one background thread in order, so that
        neither the disk's time nor the JSON's is the training loop's: shallow copies of the rows are taken now, the
        texts made in the thread, and each row of inputs.jsonl (never changed once measured) is made into text once,
        so a write costs the same at outer step 10 and at 10,000. ``wait``: until they are written (at
        :meth:`close`). A failed write raises at the next one."""
        if self.folder is None:  # measuring for a caller that writes its own files (the harness)
            return
        metrics = [dict(r) for r in self._metric_rows()]  # log() may add to a row while the thread writes
        inputs = list(self.inputs)
        result = {**self.result(finished), "flags": list(self.flags)}
        if self._written is not None and self._written.done():
            self._written.result()
        if self._writer is None:
            from concurrent.futures import ThreadPoolExecutor

            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="noloco-observer")

        def write():
            lines = self._input_lines  # (row, its text) of the rows made into text so far; only this thread's
            if len(lines) > len(inputs) or any(a is not b for (a, _), b in zip(lines, inputs)):
                lines.clear()  # the caller replaced rows: made again
            lines.extend((row, dumps(row) + "\n") for row in inputs[len(lines):])
            for path, text in ((self.folder / "metrics.jsonl", "".join(dumps(r) + "\n" for r in metrics)),
                               (self.folder / "inputs.jsonl", "".join(line for _, line in lines)),
                               (self.folder / "result.json", dumps(result, indent=2) + "\n")):
                if text or path.name != "inputs.jsonl":  # closed before an outer step: an empty one was unreadable
                    atomic_write_text(path, text)

        self._written = self._writer.submit(write)
        if wait:
            self._writer.shutdown(wait=True)
            self._writer, written, self._written = None, self._written, None
            written.result()
