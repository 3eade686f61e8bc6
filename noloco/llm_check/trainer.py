"""Training of ddp / diloco / noloco / local, batched in one process or one replica per rank under
torchrun: :class:`Trainer` is the training step (the inner step, the outer step, the evaluation, its
state); the run's life (folder, files, checkpoints, resume, interrupts) is
:mod:`noloco.llm_check.lifecycle` and divergence tracking :mod:`noloco.llm_check.divergence`.

The two modes share everything except how replicas talk (:mod:`noloco.training.exchange`): in one
process the R replicas are the leading dimension of every tensor and a group mean is an index shuffle;
under torchrun each rank holds R = 1 and exchanges with its group by point-to-point messages. The
outer step is the public :class:`noloco.training.outer_optimizer.OuterOptimizer`'s (which applies
:func:`noloco.theory.outer.outer_step` tensor by tensor): one outer-step path for the harness and a user's loop.

Inner optimiser: AdamW on the stacked parameters. Adam is elementwise, so one AdamW over (R, ...)
tensors is exactly R independent AdamWs; only clipping couples coordinates, and it is done per
replica. The inner AdamW state carries over outer steps (as in DiLoCo); ``inner_optimizer="sgd"`` is
plain SGD instead. A synchronous method (``ddp``) averages the gradients every step and skips the
outer step. Every outer step in one process also measures the outer theory's inputs
(:class:`noloco.training.measure.SpreadMeter`, ``inputs.jsonl``); under torchrun the public observer measures
them from a coordinate sample (:class:`noloco.training.observer.Observer`: one all-gather of a small buffer per
outer step, collected when it has arrived; a resumed torchrun run keeps the rows saved and measures no more).

Under torchrun::

    torchrun --nproc-per-node 4 -m noloco llm train --size cpu-tiny --method noloco --out DIR
"""

from __future__ import annotations

import math
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from noloco.advice.run_rows import MetricsRow
from noloco.infra.errors import ConfigError, DataError
from noloco.infra.rundir import RunFolder
from noloco.llm_check import data, domains
from noloco.llm_check.config import EVAL_CHUNK, TrainConfig, check_threads
from noloco.llm_check.resources import check_memory
from noloco.training.exchange import Exchange, LocalExchange
from noloco.training.outer_optimizer import OuterOptimizer
from noloco.llm_check.lifecycle import Lifecycle, run_folder
from noloco.training.measure import SpreadMeter
from noloco.llm_check.model import init_params, losses, param_shapes
from noloco.llm_check.routing import param_stage, route


def weight_std(phi: dict) -> float:
    """sqrt of the mean over all parameters and replicas of (p - replica-mean of p)^2,
    for stacked tensors (R, ...) in one process. float64, so that identical replicas
    give exactly 0 (a float32 mean of equal numbers is not always equal to them)."""
    total = sum(((p.double() - p.double().mean(0, keepdim=True)) ** 2).sum().item() for p in phi.values())
    return math.sqrt(total / sum(p.numel() for p in phi.values()))


def set_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(check_threads(threads))


def _allocation(err: RuntimeError) -> bool:
    oom = getattr(torch, "OutOfMemoryError", ())
    return (oom and isinstance(err, oom)) or "can't allocate memory" in str(err) or "out of memory" in str(err)


class Trainer:
    """One run's training step; ``exchange`` decides which replicas live here (all, or one per rank);
    ``out``: the run folder (a path, or a RunFolder the caller opened)."""

    def __init__(self, cfg: TrainConfig, out: str | Path | RunFolder, exchange: Exchange | None = None,
                 progress: bool | None = None, max_memory=None):
        self.cfg = cfg
        self.folder = out if isinstance(out, RunFolder) else None  # opened by the caller, who holds its lock
        self.out = Path(out.path if isinstance(out, RunFolder) else out)
        self._out_given = out  # as given: an empty name is refused when the folder is opened
        self.ex = exchange or LocalExchange(cfg.replicas)
        self.progress = progress  # None: a bar on a terminal, a line per evaluation in a log; False: silent
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device=cuda but torch sees no GPU")
        share = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if self.ex.world_size > 1 else 1
        self.memory = check_memory(cfg, max_memory, len(self.ex.replicas), share)  # before anything is allocated
        self.dtype = getattr(torch, cfg.dtype)
        self.model = cfg.model()
        self.corpus = data.load_corpus() if cfg.domain is None else domains.corpus(cfg.domain)
        all_shards = data.shards(self.corpus, cfg.replicas, cfg.seed, cfg.noniid)
        data.check_fits([len(s) for s in all_shards], len(self.corpus.val), cfg.ctx, cfg.noniid)
        self.shards = [all_shards[r] for r in self.ex.replicas]
        self.val = torch.from_numpy(data.val_windows(self.corpus, cfg.seed, cfg.val_windows, cfg.ctx)).long()
        R = len(self.ex.replicas)
        self.params = init_params(self.model, R, cfg.seed, self.dtype, self.device)
        if self.ex.stage is not None:  # a torchrun rank holds one stage
            self.params = {k: v for k, v in self.params.items()
                           if param_stage(k, cfg.layers, cfg.stages) == self.ex.stage}
        for p in self.params.values():
            p.requires_grad_(True)
        decay = [p for k, p in self.params.items() if p.dim() >= 3]  # matrices; not biases, norms
        rest = [p for k, p in self.params.items() if p.dim() < 3]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
        # on a GPU AdamW's fused kernel: one launch per group instead of a dozen per tensor (docs/llm_check.md)
        fused = {"fused": True} if self.device.type == "cuda" else {}
        self.opt = (torch.optim.SGD(groups, lr=cfg.lr) if cfg.inner_optimizer == "sgd" else
                    torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.adam_beta2), eps=1e-8, **fused))
        # the training step's losses, compiled (forward and backward) with --compile; evaluation stays eager
        self._train_losses = losses
        if cfg.compile:
            # the model's stage table is a pure cached function; dynamo traces through the cache and says so
            warnings.filterwarnings("ignore", message="Dynamo detected a call to a `functools.lru_cache`")
            # static shapes: the bench's batched and one-model steps share this function, and a second shape
            # would otherwise make dynamo recompile it with symbolic (slower) sizes
            self._train_losses = torch.compile(losses, dynamic=False)
        self.batched = cfg.replica_mode in ("auto", "batched")
        # the parameters of each pipeline stage (one stage: all of them)
        self.stage_keys = [[k for k in self.params if param_stage(k, cfg.layers, cfg.stages) == s]
                           for s in range(cfg.stages)]
        self.outer_dtype = self.dtype if cfg.outer_dtype == "same" else getattr(torch, cfg.outer_dtype)
        # the outer step is the public outer optimizer's (one path in the project); phi and delta are its state.
        # ddp averages gradients instead and has none: its phi is a copy of the weights at each evaluation
        # TrainConfig checked cfg.outer against the method: it is passed whole
        self.outer = None if cfg.synchronous else OuterOptimizer._placed(
            self.ex, self.params, config=cfg.outer, method=cfg.method, inner_steps=cfg.inner_steps, seed=cfg.seed,
            outer_dtype=self.outer_dtype, stages=self.stage_keys)
        if self.outer is not None:
            self.phi, self.delta = self.outer.phi, self.outer.delta
        else:
            self.phi = {k: v.detach().to(self.outer_dtype, copy=True) for k, v in self.params.items()}
            self.delta = {k: torch.zeros_like(v) for k, v in self.phi.items()}
        self.pipe = None  # torchrun with stages: noloco.llm_check.pipeline moves the activations between ranks
        if self.ex.stage is not None and cfg.stages > 1:
            from noloco.llm_check.pipeline import Pipeline

            self.pipe = Pipeline(cfg, self.ex, self.model, all_shards)
        self.outer_done = 0
        self.inner_done = 0       # inner steps of the current phase done (a checkpoint taken by an interrupt)
        self.train_sum = torch.zeros(R, dtype=torch.float64)  # training loss since the last evaluation
        self.train_count = 0
        # the theory's inputs at every outer step (inputs.jsonl): only where one process holds every
        # replica (the replica means would cost a collective per outer step under torchrun) and
        # there is an outer step (not ddp)
        self.meter = SpreadMeter(R) if self.ex.world_size == 1 and R >= 2 and not cfg.synchronous else None
        self.inputs: list[dict] = []
        if self.outer is not None:
            self.outer.add_progress_hook(self._measure_inputs)
        # under torchrun (one replica per rank, one stage) the public observer measures them from its coordinate
        # sample, gathered without a wait (the same path as a user's run); it writes no folder: the rows are ours
        self.observer = None
        if self.outer is not None and self.ex.world_size > 1 and cfg.stages == 1 and self.ex.N >= 2:
            from noloco.training.observer import Observer

            self.observer = Observer(self.outer, None, outer_steps=cfg.outer_steps, lr=cfg.lr, schedule=cfg.schedule,
                                     warmup=cfg.warmup, min_lr_frac=cfg.min_lr_frac,
                                     inner_optimizer=cfg.inner_optimizer, adam_beta2=cfg.adam_beta2, seed=cfg.seed,
                                     warn_steps=0)
            self.inputs = self.observer.inputs
        self.theta_spread: dict = {}  # outer_update(measure=True): the inner weights' spread before the outer step


    # ------------------------------------------------------------- inner phase

    def _windows(self, step: int) -> torch.Tensor:
        rows = [data.batch(s, self.cfg.seed, r, step, self.cfg.batch, self.cfg.ctx)
                for r, s in zip(self.ex.replicas, self.shards)]
        windows = torch.from_numpy(np.stack(rows)).long()
        if self.device.type == "cuda":  # from pinned memory the copy does not make the host wait for the GPU
            return windows.pin_memory().to(self.device, non_blocking=True)
        return windows

    def _route(self, step: int):
        """The index tensors of inner step ``step``'s routes (:mod:`noloco.llm_check.routing`), or None where
        replica r of every stage is one chain and nothing skips."""
        cfg = self.cfg
        if cfg.stages == 1 or (cfg.routing == "fixed" and cfg.skip_prob == 0):
            return None
        return route(cfg.seed, step, cfg.stages, cfg.replicas, cfg.batch, cfg.routing, cfg.skip_prob).torch(self.device)

    def _backward(self, windows: torch.Tensor, step: int) -> torch.Tensor:
        if self.pipe is not None:
            return self.pipe.train_step(self.params, step)
        if self.batched:
            loss = self._train_losses(self.params, windows, self.model, self._route(step))
            loss.sum().backward()  # replicas are independent: each gets its own gradient
            return loss.detach()
        out = []
        for r in range(windows.shape[0]):
            loss = self._train_losses({k: v[r:r + 1] for k, v in self.params.items()}, windows[r:r + 1], self.model)
            loss.sum().backward()
            out.append(loss.detach())
        return torch.cat(out)

    def _clip(self) -> None:
        # per replica of each stage: a pipeline stage sees only its own gradients
        for keys in filter(None, self.stage_keys):  # (a torchrun rank holds one stage's keys)
            grads = [self.params[k].grad for k in keys]
            sq = sum(g.float().pow(2).flatten(1).sum(1) for g in grads)
            coef = (self.cfg.clip / (sq.sqrt() + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.mul_(coef.to(g.dtype).view(-1, *([1] * (g.dim() - 1))))

    def inner_step(self, step: int) -> torch.Tensor:
        lr = self.cfg.inner_lr(step)
        for group in self.opt.param_groups:
            group["lr"] = lr  # edge: torch's param_groups are dicts
        self.opt.zero_grad(set_to_none=False)
        loss = self._backward(None if self.pipe else self._windows(step), step)
        if self.cfg.synchronous:
            self.ex.average_grads([p.grad for p in self.params.values()])
        if self.cfg.clip > 0:
            self._clip()
        self.opt.step()
        return loss

    def record_loss(self, loss: torch.Tensor) -> None:
        """One inner step's training losses into the sums of the next metrics row."""
        self.train_sum += loss
        self.train_count += 1

    # ------------------------------------------------------------- outer step

    @torch.no_grad()
    def outer_update(self, t: int, measure: bool = False) -> None:
        """The outer step after outer step ``t``'s inner phase; with ``measure``, the spread of the
        inner weights theta before it is kept for the next metrics row (``theta_std``: what a full
        average removes, so diloco's weight_std, measured after it, is 0)."""
        if measure:
            self.theta_spread = self._spread({k: p.detach() for k, p in self.params.items()}, None, "theta_std")
        if self.cfg.synchronous:  # every step averaged the gradients: nothing to average
            for k in self.phi:
                self.phi[k].copy_(self.params[k])
            return
        if self.outer.outer_done != t:  # the groups of step t are drawn from (seed, t) on every rank
            raise RuntimeError(f"outer step {t} run by an optimizer at outer step {self.outer.outer_done}")
        self.outer.sync()

    def collect_inputs(self) -> None:
        """Every outer step's inputs measured so far (under torchrun: the observer's gathers in flight)."""
        if self.observer is not None:
            self.observer.collect()

    def _measure_inputs(self, phi: dict, progress: dict, t: int) -> None:
        """The theory's inputs, from the progress the outer step is about to use (a hook of the optimizer)."""
        if self.meter is not None:
            self.inputs.append({"outer_step": t + 1, **self.meter.update(phi, progress)})

    # ------------------------------------------------------------- evaluation

    @torch.no_grad()
    def evaluate(self, removed=()) -> dict:
        """Validation losses (fixed paths) and the weight spread; ``removed``: middle stages left out of
        every path (:func:`evaluate_run`)."""
        val = self.val.to(self.device)
        R = len(self.ex.replicas)
        mean_phi = dict(zip(self.phi, self.ex.replica_mean(list(self.phi.values()))))  # float64: see weight_std
        avg = {k: m.to(self.dtype) for k, m in mean_phi.items()}
        if self.pipe is not None:  # the chain through replica k of every stage, then the replica-mean model
            val_per = [self.pipe.evaluate(self.phi, val, EVAL_CHUNK)]
            avg_loss = self.pipe.evaluate(avg, val, EVAL_CHUNK)
            avg_loss = self.ex.gather_floats([avg_loss])[-1]  # the last stage's, on every rank
        else:
            per = []
            for chunk in val.split(EVAL_CHUNK):
                per.append(losses(self.phi, chunk.unsqueeze(0).expand(R, -1, -1), self.model, None, removed)
                           * len(chunk))
            val_per = (torch.stack(per).sum(0) / len(val)).tolist()
            avg_loss = sum((losses(avg, c.unsqueeze(0), self.model, None, removed) * len(c)).item()
                           for c in val.split(EVAL_CHUNK)) / len(val)

        val_per = self._last_stage(val_per)
        mean_own = float(np.mean(val_per))  # the reference's metric: no averaged model there
        return {"val_loss_avg_model": avg_loss, "val_loss_per_replica": val_per, "val_loss_replicas_mean": mean_own,
                "perplexity": math.exp(mean_own) if mean_own < 700 else math.inf,
                **self._spread(self.phi, mean_phi, "weight_std"), **self.theta_spread}

    def _spread(self, tensors: dict, means: dict | None, name: str) -> dict:
        """``{name: spread}`` (:func:`weight_std` over every rank's replicas) and, with stages,
        ``{name + "_per_stage": [spread of each stage]}``."""
        if means is None:
            means = dict(zip(tensors, self.ex.replica_mean(list(tensors.values()))))
        # sum of squared deviations and of numbers of values, per stage, over every rank's replicas
        parts = [(sum(((tensors[k].double() - means[k]) ** 2).sum().item() for k in keys),
                  sum(tensors[k].numel() for k in keys)) for keys in self.stage_keys]
        totals = self.ex.sum_floats([v for part in parts for v in part])
        sq, count = totals[0::2], totals[1::2]
        row = {name: math.sqrt(sum(sq) / sum(count))}
        if self.cfg.stages > 1:
            row[name + "_per_stage"] = [math.sqrt(a / b) for a, b in zip(sq, count)]
        return row

    def _last_stage(self, values: list) -> list:
        """Every replica's value, in replica order: under torchrun with stages, those of the last stage's ranks."""
        return self.ex.gather_floats(values)[-self.cfg.replicas:]

    def metrics_row(self, since: float) -> MetricsRow:
        """The metrics row after an outer step (evaluation included; tokens/s over the work since ``since``,
        a perf_counter time); the training-loss sums restart."""
        cfg = self.cfg
        step = self.outer_done * cfg.inner_steps
        train_per = self._last_stage((self.train_sum / max(self.train_count, 1)).tolist())
        row = {"step": step, "outer_step": self.outer_done, "tokens": step * cfg.tokens_per_inner_step(),
               "train_loss": float(np.mean(train_per)), "train_loss_per_replica": train_per, **self.evaluate(),
               "tokens_per_s": self.train_count * cfg.tokens_per_inner_step() / (time.perf_counter() - since),
               "lr": cfg.inner_lr(step - 1)}
        self.train_sum.zero_()
        self.train_count = 0
        return MetricsRow.from_json(row)  # from the dict: the file's key order, and evaluate's extra keys kept

    # ------------------------------------------------------------- state

    def tensor_names(self) -> list[str]:
        """Every parameter's name, whatever stage this rank holds."""
        return list(param_shapes(self.model))

    def state_tensors(self, optimizer: bool = False):
        """``(quantity, {name: tensor})`` in the order a divergence is looked for: weights, outer momentum
        and, with ``optimizer``, the inner optimizer's state."""
        parts = [("weights", self.phi), ("outer momentum", self.delta)]
        if optimizer:
            names = {id(p): k for k, p in self.params.items()}
            parts.append(("optimizer state", {f"{names.get(id(p), '?')}.{key}": v
                                              for p, st in self.opt.state.items() for key, v in st.items()
                                              if isinstance(v, torch.Tensor) and v.dim() > 0}))
        return parts

    def state_dict(self) -> dict:
        """Everything a resumed run needs (data and groups are functions of the seed and the step). Mid-phase
        (``inner_step`` > 0, an interrupt) the inner weights ``theta`` too."""
        state = {"outer_step": self.outer_done, "inner_step": self.inner_done, "phi": self.phi, "delta": self.delta,
                 "opt": self.opt.state_dict(), "torch_rng": torch.get_rng_state(), "train_sum": self.train_sum,
                 "train_count": self.train_count, "meter": None if self.meter is None else self.meter.state_dict()}
        if self.inner_done:
            state["theta"] = {k: p.detach() for k, p in self.params.items()}
        return state

    def load_state_dict(self, state: dict, path: Path, recover: str) -> None:
        """A validated checkpoint's state (DataError naming ``path`` and how to ``recover`` when it does not fit)."""
        self.inner_done = state.get("inner_step", 0)
        parts = ("phi", "delta") + (("theta",) if self.inner_done else ())
        for part in parts:
            saved = state.get(part)
            for k, mine in (self.params if part == "theta" else getattr(self, part)).items():
                got = saved.get(k) if isinstance(saved, dict) else None
                if not isinstance(got, torch.Tensor) or got.shape != mine.shape:
                    shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                    raise DataError(f"checkpoint {path} holds {part}[{k!r}] of shape {shape}, expected "
                                    f"{tuple(mine.shape)}; {recover}")
        try:
            with torch.no_grad():
                for k in self.phi:
                    self.phi[k] = state["phi"][k].to(self.device, self.outer_dtype)
                    self.delta[k] = state["delta"][k].to(self.device, self.outer_dtype)
                    self.params[k].copy_(state["theta"][k] if self.inner_done else self.phi[k])
            self.opt.load_state_dict(state["opt"])
            torch.set_rng_state(state["torch_rng"].cpu())  # the CPU generator's: the checkpoint was read onto the device
        except (ValueError, KeyError, TypeError, RuntimeError) as err:
            raise DataError(f"checkpoint {path} does not fit this run ({str(err).splitlines()[0]}); "
                            f"{recover}") from None
        self.outer_done = state["outer_step"]
        if self.outer is not None:  # phi and delta were restored above; its counters follow
            self.outer.start_at(self.outer_done)
        if self.observer is not None and self.outer_done > 0:  # its statistics run from outer step 0: a resumed
            self.observer.detach()                              # torchrun run keeps the rows saved, no more
            self.observer = None
        if isinstance(state.get("train_sum"), torch.Tensor) and state["train_sum"].shape == self.train_sum.shape:
            self.train_sum = state["train_sum"].double().cpu()
            self.train_count = int(state.get("train_count", 0))
        if self.meter is not None:  # a checkpoint written before the meter has none: stop measuring
            if isinstance(state.get("meter"), dict) and state["meter"].get("steps") == self.outer_done:
                self.meter.load_state_dict(state["meter"])
            else:
                self.meter = None

    # ------------------------------------------------------------- the run

    def run(self, resume: bool = False, stop_after: int | None = None, overwrite: bool = False,
            log_every: int | None = None, tensorboard: bool = False) -> dict:
        """Train to ``outer_steps`` (or ``stop_after``); the result, as written to result.json; a live line every
        ``log_every`` inner steps, and TensorBoard events with ``tensorboard`` (:mod:`noloco.llm_check.live`). A divergence
        ends the run early with ``result["diverged"]``; Ctrl-C or SIGTERM checkpoint and raise
        :class:`noloco.infra.entry.Interrupted` (:mod:`noloco.llm_check.lifecycle`). The folder is the
        caller's opened RunFolder, or one the lifecycle opens (under torchrun rank 0, the ranks agreeing)."""
        folder = self.folder or run_folder(self._out_given, resume=resume, overwrite=overwrite, lock=self.ex.is_main)
        try:
            return Lifecycle(self, folder, log_every, tensorboard).execute(resume, stop_after, overwrite, self.progress,
                                                   open_folder=self.folder is None)
        except RuntimeError as err:
            if _allocation(err):
                raise MemoryError(f"{self.cfg.method}: {str(err).splitlines()[0]} (the estimate was "
                                  f"{self.memory.total / 1e9:.3g} GB); lower --batch, --ctx or --replicas, "
                                  f"or lower --max-memory so the estimate refuses it") from err
            raise
