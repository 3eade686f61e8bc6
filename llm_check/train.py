"""Training loop for ddp / diloco / noloco / local, batched in one process or one
replica per rank under torchrun.

The two modes share everything except how replicas talk (:mod:`noloco.llm_check.exchange`):
in one process the R replicas are the leading dimension of every tensor and a group
mean is an index shuffle; under torchrun each rank holds R = 1 and exchanges with its
group by point-to-point messages. The outer step itself is
:func:`noloco.theory.outer.outer_step`, applied tensor by tensor.

Inner optimiser: AdamW on the stacked parameters. Adam is elementwise, so one AdamW
over (R, ...) tensors is exactly R independent AdamWs; only clipping couples
coordinates, and it is done per replica. The inner AdamW state carries over outer
steps (as in DiLoCo); ``inner_optimizer="sgd"`` is plain SGD instead. ``ddp``
averages the gradients every step and skips the outer step. The methods and the learning-rate schedule are :mod:`noloco.theory.methods` and
:mod:`noloco.theory.schedules`; every file is written through :mod:`noloco.infra.files` (strict JSON).

Every outer step in one process (batched or loop mode) also logs the outer theory's inputs,
measured per tensor by :class:`noloco.llm_check.measure.SpreadMeter`, to ``inputs.jsonl`` (written
with metrics.jsonl and at every checkpoint; the meter's state is in the checkpoint, so a
resumed run continues it). Under torchrun nothing is measured: a rank holds one replica, and
the replica means would cost a collective per outer step. ``noloco llm predict`` reads it.

Runs are never lost by accident: a folder that holds a run needs ``resume`` or ``overwrite``,
and :class:`noloco.infra.rundir.RunLock` keeps a second process out of it while the first is alive (under
torchrun rank 0 holds it). ``result.json`` says ``finished: false`` from the start and at every
checkpoint until the last step. Checkpoints come every ``ckpt_every`` outer steps, at the end and
at ``stop_after``. The first non-finite training loss, weight, outer momentum or validation loss
stops the run (:data:`QUANTITIES`): the last finite checkpoint is kept, and ``result.json``
records the divergence (outer step, replica, quantity); the command exits 1. Under torchrun the
ranks learn of a divergence at the next evaluation or checkpoint (one small all-gather), so that
they stop together instead of waiting for a peer that left.

Under torchrun::

    torchrun --nproc-per-node 4 -m noloco.llm_check.train --preset cpu-tiny --method noloco --out DIR
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from noloco.llm_check import data
from noloco.llm_check.config import (EVAL_CHUNK, TrainConfig, add_train_arguments, check_memory, check_run_flags,
                                     check_threads, config_from_args)
from noloco.llm_check.exchange import Exchange, LocalExchange, PeerError
from noloco.llm_check.measure import SpreadMeter
from noloco.llm_check.model import init_params, losses, param_shapes
from noloco.llm_check.routing import param_stage, route
from noloco.infra.errors import ConfigError
from noloco.infra.files import (SCHEMA_VERSION, atomic_write, atomic_write_text, dumps, output_dir, read_json,
                                read_jsonl, write_json)
from noloco.infra.errors import DataError
from noloco.infra.entry import OneLineParser, report
from noloco.infra.rundir import RunLock
from noloco.theory.outer import outer_step

#: settings a resumed run may change: they do not change what is computed (outer_steps too, under a
#: constant schedule; under cosine it sets the schedule's length, so it must stay)
RESUMABLE_CHANGES = ("device", "replica_mode", "ckpt_every")
#: the files of a run besides its checkpoints (ckpt.pt, or ckpt-rankR.pt under torchrun)
RUN_FILES = ("metrics.jsonl", "inputs.jsonl", "result.json")
#: checkpoint schema versions this version reads (1: written before strict JSON; same content)
CKPT_VERSIONS = (1, SCHEMA_VERSION)
#: what a divergence can be found in, in the order it is checked
QUANTITIES = ("training loss", "weights", "outer momentum", "optimizer state", "validation loss")


def weight_std(phi: dict) -> float:
    """sqrt of the mean over all parameters and replicas of (p - replica-mean of p)^2,
    for stacked tensors (R, ...) in one process. float64, so that identical replicas
    give exactly 0 (a float32 mean of equal numbers is not always equal to them)."""
    total = sum(((p.double() - p.double().mean(0, keepdim=True)) ** 2).sum().item() for p in phi.values())
    return math.sqrt(total / sum(p.numel() for p in phi.values()))


def set_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(check_threads(threads))


def read_metrics(path: str | Path, fix: str = "") -> list[dict]:
    """The rows of a metrics.jsonl, each an object with ``outer_step`` and ``weight_std``
    (Python's json: rows of runs made before strict JSON may hold NaN); a DataError naming the
    file, the line and ``fix`` otherwise."""
    rows = read_jsonl(path, required=("outer_step", "weight_std"), fix=fix)
    for number, row in enumerate(rows, 1):
        if isinstance(row["outer_step"], bool) or not isinstance(row["outer_step"], int):
            raise DataError(f"{path} row {number}: outer_step={row['outer_step']!r} is not an integer"
                            + (f"; {fix}" if fix else ""))
    return rows


def run_files(out: str | Path) -> list[Path]:
    """The files of a run in ``out`` (metrics, result, checkpoints), those that exist."""
    out = Path(out)
    return [out / name for name in RUN_FILES if (out / name).exists()] + sorted(out.glob("ckpt*.pt"))


def check_run_dir(out: str | Path, *, resume: bool = False, overwrite: bool = False, how: str | None = None) -> Path:
    """``out`` as a run folder, checked before any work: a writable folder (``--out ''`` exit 2, a
    file or an unwritable place exit 3) that holds no run unless ``resume`` or ``overwrite``
    (ConfigError naming what it holds, and ``how`` to go on)."""
    check_run_flags(SimpleNamespace(resume=resume, overwrite=overwrite))
    out = output_dir(out)
    found = run_files(out)
    if found and not (resume or overwrite):
        state = ""
        with contextlib.suppress(DataError):
            done = read_json(out / "result.json")
            total = (done.get("config") or {}).get("outer_steps", "?")
            state = (f", {'finished' if done.get('finished') else 'unfinished'} at outer step "
                     f"{done.get('outer_steps_done', '?')} of {total}")
        how = how or ("continue it with --resume or replace it with --overwrite" if any(p.suffix == ".pt" for p in found)
                      else "it has no checkpoint to resume from: replace it with --overwrite")
        raise ConfigError(f"{out} holds a run ({', '.join(p.name for p in found)}{state}); {how}")
    return out


def finished_run(out: str | Path, cfg: TrainConfig) -> dict | None:
    """The result of the finished run of ``cfg`` that ``out`` holds, or None (no run, unfinished, diverged,
    other settings, or an unreadable result.json). Settings are compared through
    :meth:`TrainConfig.from_dict`, so a field added since the run was made takes its default."""
    try:
        result = read_json(Path(out) / "result.json", required=("config", "finished"))
        same = TrainConfig.from_dict(result["config"]) == cfg
    except (DataError, ConfigError, TypeError, KeyError, ValueError, AttributeError):
        return None
    return result if same and result["finished"] and not result.get("diverged") else None


def divergence_message(d: dict) -> str:
    """One line: where the run diverged and which checkpoint is kept."""
    inner = f" (inner step {d['inner_step']})" if d.get("inner_step") is not None else ""
    tensor = f" {d['tensor']}" if d.get("tensor") else ""
    who = f"replica {d['replica']}'s" if d.get("replica") is not None else "the averaged model's"
    kept = (f"the last finite checkpoint (outer step {d['checkpoint_outer_step']}) is kept in {d['checkpoint']}"
            if d.get("checkpoint_outer_step") is not None else "no checkpoint had been written")
    return (f"diverged at outer step {d['outer_step']}{inner}: {who} {d['quantity']}{tensor} is not finite "
            f"({d.get('value', 'nan')}); {kept}")


def _first_bad(x: torch.Tensor) -> int | None:
    """Index along dimension 0 of the first slice of ``x`` holding a non-finite value, or None."""
    if x.dim() == 0:
        return None if bool(torch.isfinite(x)) else 0
    bad = ~torch.isfinite(x.reshape(x.shape[0], -1)).all(1)
    return int(bad.nonzero()[0, 0]) if bool(bad.any()) else None


def _allocation(err: RuntimeError) -> bool:
    oom = getattr(torch, "OutOfMemoryError", ())
    return (oom and isinstance(err, oom)) or "can't allocate memory" in str(err) or "out of memory" in str(err)


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return out


class Trainer:
    """One run; ``exchange`` decides which replicas live here (all, or one per rank)."""

    def __init__(self, cfg: TrainConfig, out: str | Path, exchange: Exchange | None = None,
                 progress: bool | None = None, max_memory=None):
        self.cfg = cfg
        self.out = Path(out)
        self.ex = exchange or LocalExchange(cfg.replicas)
        self.progress = sys.stderr.isatty() if progress is None else progress  # a bar only on a terminal
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device=cuda but torch sees no GPU")
        share = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if self.ex.world_size > 1 else 1
        self.memory = check_memory(cfg, max_memory, len(self.ex.replicas), share)  # before anything is allocated
        self.dtype = getattr(torch, cfg.dtype)
        self.model = cfg.model()
        self.corpus = data.load_corpus()
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
        self.outer_dtype = self.dtype if cfg.outer_dtype == "same" else getattr(torch, cfg.outer_dtype)
        self.phi = {k: v.detach().to(self.outer_dtype, copy=True) for k, v in self.params.items()}
        self.delta = {k: torch.zeros_like(v) for k, v in self.phi.items()}
        decay = [p for k, p in self.params.items() if p.dim() >= 3]  # matrices; not biases, norms
        rest = [p for k, p in self.params.items() if p.dim() < 3]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
        self.opt = (torch.optim.SGD(groups, lr=cfg.lr) if cfg.inner_optimizer == "sgd" else
                    torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.adam_beta2), eps=1e-8))
        self.batched = cfg.replica_mode in ("auto", "batched")
        # the parameters of each pipeline stage (one stage: all of them)
        self.stage_keys = [[k for k in self.params if param_stage(k, cfg.layers, cfg.stages) == s]
                           for s in range(cfg.stages)]
        self.pipe = None  # torchrun with stages: noloco.llm_check.pipeline moves the activations between ranks
        if self.ex.stage is not None and cfg.stages > 1:
            from noloco.llm_check.pipeline import Pipeline

            self.pipe = Pipeline(cfg, self.ex, self.model, all_shards)
        self.outer_done = 0
        self.saved_at = None      # outer step of the checkpoint on disk (None: none yet)
        self.diverged = None      # the first divergence seen here (a dict), or None
        self.train_sum = torch.zeros(R, dtype=torch.float64)  # training loss since the last evaluation
        self.train_count = 0
        # the theory's inputs at every outer step (inputs.jsonl): only where one process holds every
        # replica (the replica means would cost a collective per outer step under torchrun) and
        # there is an outer step (not ddp)
        self.meter = SpreadMeter(R) if self.ex.world_size == 1 and R >= 2 and cfg.method != "ddp" else None
        self.inputs: list[dict] = []
        self.theta_spread: dict = {}  # outer_update(measure=True): the inner weights' spread before the outer step

    # ------------------------------------------------------------- inner phase

    def _windows(self, step: int) -> torch.Tensor:
        rows = [data.batch(s, self.cfg.seed, r, step, self.cfg.batch, self.cfg.ctx)
                for r, s in zip(self.ex.replicas, self.shards)]
        return torch.from_numpy(np.stack(rows)).long().to(self.device)

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
            loss = losses(self.params, windows, self.model, self._route(step))
            loss.sum().backward()  # replicas are independent: each gets its own gradient
            return loss.detach()
        out = []
        for r in range(windows.shape[0]):
            loss = losses({k: v[r:r + 1] for k, v in self.params.items()}, windows[r:r + 1], self.model)
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
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=False)
        loss = self._backward(None if self.pipe else self._windows(step), step)
        if self.cfg.method == "ddp":
            self.ex.average_grads([p.grad for p in self.params.values()])
        if self.cfg.clip > 0:
            self._clip()
        self.opt.step()
        return loss

    # ------------------------------------------------------------- outer step

    @torch.no_grad()
    def outer_update(self, t: int, measure: bool = False) -> None:
        """The outer step after outer step ``t``'s inner phase; with ``measure``, the spread of the
        inner weights theta before it is kept for the next metrics row (``theta_std``: what a full
        average removes, so diloco's weight_std, measured after it, is 0)."""
        if measure:
            self.theta_spread = self._spread({k: p.detach() for k, p in self.params.items()}, None, "theta_std")
        if self.cfg.method == "ddp":  # every step was synchronous: nothing to average
            for k in self.phi:
                self.phi[k].copy_(self.params[k])
            return
        progress = {k: self.params[k] - self.phi[k] for k in self.phi}  # theta - phi
        if self.meter is not None:
            row = self.meter.update(self.phi, progress)
            self.inputs.append({"outer_step": t + 1, **row})
        rule = self.cfg.outer.rule()
        for stage, keys in enumerate(self.stage_keys):  # each stage's replicas form their own groups
            means_phi, means_prog = self.ex.group_means([self.phi[k] for k in keys], [progress[k] for k in keys],
                                                        self.cfg.seed, t, self.cfg.outer.group_size, stage)
            for k, mphi, mprog in zip(keys, means_phi, means_prog):
                phi, delta = outer_step(self.phi[k], self.delta[k], mphi, mprog, **rule)
                self.phi[k], self.delta[k] = phi.to(self.outer_dtype), delta.to(self.outer_dtype)
                self.params[k].copy_(self.phi[k])

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

    # ------------------------------------------------------------- checkpoints

    def _ckpt_path(self) -> Path:
        return self.out / (self.ex.ckpt_name())

    def save(self) -> None:
        state = {"schema_version": SCHEMA_VERSION, "config": self.cfg.as_dict(), "outer_step": self.outer_done,
                 "replicas": list(self.ex.replicas), "phi": self.phi, "delta": self.delta,
                 "opt": self.opt.state_dict(), "torch_rng": torch.get_rng_state(),
                 "train_sum": self.train_sum, "train_count": self.train_count,
                 "meter": None if self.meter is None else self.meter.state_dict(),
                 "data_rng": "numpy default_rng([seed, replica, inner_step]); groups from (seed, outer_step)"}
        atomic_write(self._ckpt_path(), lambda tmp: torch.save(state, tmp))
        self.saved_at = self.outer_done

    def _recover(self) -> str:
        return (f"start the run again with --overwrite (it deletes the run in {self.out}), or put back a good "
                f"copy of {self._ckpt_path().name}")

    def _read_checkpoint(self) -> dict:
        path = self._ckpt_path()
        try:  # tensors and plain data only: unpickling arbitrary objects would run code from the file
            state = torch.load(path, map_location=self.device, weights_only=True)
        except Exception as err:  # damaged bytes make torch's unpickler raise almost anything (IndexError too)
            first = (str(err).splitlines() or [type(err).__name__])[0]
            raise DataError(f"checkpoint {path} is unreadable (truncated or corrupted: {first}); "
                            f"{self._recover()}") from None
        if not isinstance(state, dict):
            raise DataError(f"checkpoint {path} holds a {type(state).__name__}, not a checkpoint; {self._recover()}")
        missing = [k for k in ("config", "outer_step", "phi", "delta", "opt", "torch_rng") if k not in state]
        if missing or state.get("schema_version", 1) not in CKPT_VERSIONS:
            what = (f"lacks {', '.join(missing)}" if missing else
                    f"has schema_version {state.get('schema_version')!r} (this version reads "
                    f"{', '.join(map(str, CKPT_VERSIONS))})")
            raise DataError(f"checkpoint {path} {what}; {self._recover()}")
        return state

    def _check_resume_settings(self, state: dict) -> None:
        path = self._ckpt_path()
        try:  # a nested config, or the flat one of checkpoints written before the outer step was nested
            saved_cfg = TrainConfig.from_dict(state["config"])
        except (ConfigError, TypeError, KeyError, AttributeError) as err:
            raise ConfigError(f"checkpoint {path} holds settings this version cannot read ({err}); "
                              f"resume with the version that wrote it, or start a new --out") from None
        saved, now = _flat(saved_cfg.as_dict()), _flat(self.cfg.as_dict())
        free = RESUMABLE_CHANGES + (("outer_steps",) if now["schedule"] == saved.get("schedule") == "constant" else ())
        differ = [k for k in now if k.split(".")[0] not in free and saved.get(k) != now[k]]
        if differ:
            why = ("; outer_steps sets the length of the cosine learning-rate schedule (outer_steps * inner_steps "
                   "inner steps), so another value reshapes it" if "outer_steps" in differ else "")
            raise ConfigError(f"--resume: the checkpoint in {self.out} was written with other settings: "
                              + ", ".join(f"{k}={saved.get(k)!r} (now {now[k]!r})" for k in differ)
                              + f"{why}; resume with the checkpoint's values or start a new --out")
        done = state["outer_step"]
        if isinstance(done, bool) or not isinstance(done, int) or done < 0:
            raise DataError(f"checkpoint {path} has outer_step={done!r}; {self._recover()}")
        if done > self.cfg.outer_steps:
            raise ConfigError(f"--resume: the checkpoint in {self.out} is at outer step {done}, beyond "
                              f"outer_steps={self.cfg.outer_steps}")

    def load(self) -> None:
        path = self._ckpt_path()
        state = self._read_checkpoint()
        self._check_resume_settings(state)
        for part in ("phi", "delta"):
            saved = state[part]
            for k, mine in getattr(self, part).items():
                got = saved.get(k) if isinstance(saved, dict) else None
                if not isinstance(got, torch.Tensor) or got.shape != mine.shape:
                    shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                    raise DataError(f"checkpoint {path} holds {part}[{k!r}] of shape {shape}, expected "
                                    f"{tuple(mine.shape)}; {self._recover()}")
        try:
            with torch.no_grad():
                for k in self.phi:
                    self.phi[k] = state["phi"][k].to(self.device, self.outer_dtype)
                    self.delta[k] = state["delta"][k].to(self.device, self.outer_dtype)
                    self.params[k].copy_(self.phi[k])
            self.opt.load_state_dict(state["opt"])
            torch.set_rng_state(state["torch_rng"])
        except (ValueError, KeyError, TypeError, RuntimeError) as err:
            raise DataError(f"checkpoint {path} does not fit this run ({str(err).splitlines()[0]}); "
                            f"{self._recover()}") from None
        self.outer_done = self.saved_at = state["outer_step"]
        if isinstance(state.get("train_sum"), torch.Tensor) and state["train_sum"].shape == self.train_sum.shape:
            self.train_sum = state["train_sum"].double().cpu()
            self.train_count = int(state.get("train_count", 0))
        if self.meter is not None:  # a checkpoint written before the meter has none: stop measuring
            if isinstance(state.get("meter"), dict) and state["meter"].get("steps") == self.outer_done:
                self.meter.load_state_dict(state["meter"])
            else:
                self.meter = None

    # ------------------------------------------------------------- divergence

    def _diverge(self, outer_step: int, inner_step: int | None, replica: int | None, quantity: str,
                 tensor: str | None = None, value=float("nan")) -> None:
        """Record the first divergence seen here (``replica`` indexes this process's replicas)."""
        if self.diverged is None:
            self.diverged = {"outer_step": outer_step, "inner_step": inner_step,
                             "replica": None if replica is None else self.ex.replicas[replica],
                             "quantity": quantity, "tensor": tensor, "value": str(float(value))}

    def _check_state(self, outer_step: int, optimizer: bool = False) -> None:
        """A non-finite weight or outer momentum (and, with ``optimizer``, AdamW state) is a divergence."""
        parts = [("weights", self.phi), ("outer momentum", self.delta)]
        if optimizer:
            names = {id(p): k for k, p in self.params.items()}
            parts.append(("optimizer state", {f"{names.get(id(p), '?')}.{key}": v
                                              for p, st in self.opt.state.items() for key, v in st.items()
                                              if isinstance(v, torch.Tensor) and v.dim() > 0}))
        for quantity, tensors in parts:
            for name, x in tensors.items():
                r = _first_bad(x)
                if r is not None:
                    bad = x[r][~torch.isfinite(x[r])].flatten()[0].item()
                    return self._diverge(outer_step, None, r, quantity, name, bad)

    def _sync_divergence(self) -> bool:
        """Whether any replica has diverged; under torchrun every rank learns the earliest divergence of
        any rank (one all-gather), so that all stop at the same outer step."""
        if self.ex.world_size > 1:
            d = self.diverged
            keys = list(param_shapes(self.model))  # every rank's names, whatever stage it holds
            mine = ([1.0, d["outer_step"], -1 if d["inner_step"] is None else d["inner_step"],
                     -1 if d["replica"] is None else d["replica"], QUANTITIES.index(d["quantity"]),
                     keys.index(d["tensor"]) if d["tensor"] in keys else -1] if d else [0.0] * 6)
            every = self.ex.agree(mine)
            seen = [every[i:i + 6] for i in range(0, len(every), 6) if every[i] > 0]
            if seen:
                flag, outer, inner, replica, quantity, tensor = min(seen, key=lambda v: (v[1], v[2]))
                first = {"outer_step": int(outer), "inner_step": None if inner < 0 else int(inner),
                         "replica": None if replica < 0 else int(replica), "quantity": QUANTITIES[int(quantity)],
                         "tensor": keys[int(tensor)] if tensor >= 0 else None}
                self.diverged = {**first, "value": d["value"] if d and d["replica"] == first["replica"] else "nan"}
        return self.diverged is not None

    # ------------------------------------------------------------- the run

    def _result(self, rows: list, started: float) -> dict:
        cfg = self.cfg
        result = {"schema_version": SCHEMA_VERSION, "config": cfg.as_dict(), **self.corpus.info(),
                  "unigram_entropy": self._entropy, "torch": torch.__version__,
                  "n_params": self.model.n_params(), "outer_steps_done": self.outer_done,
                  "finished": self.outer_done == cfg.outer_steps and self.diverged is None,
                  "checkpoint_outer_step": self.saved_at, "wall_s": time.perf_counter() - started,
                  "world_size": self.ex.world_size, "final": rows[-1] if rows else None}
        if self.diverged is not None:
            result["diverged"] = {**self.diverged, "message": divergence_message(self._divergence_report())}
        return result

    def _divergence_report(self) -> dict:
        return {**self.diverged, "checkpoint_outer_step": self.saved_at, "checkpoint": str(self._ckpt_path())}

    def _start(self, resume: bool, overwrite: bool) -> list:
        """Checks and files before the first step: the lock and the folder (rank 0), the checkpoint
        (every rank), then metrics.jsonl and result.json saying ``finished: false``; the metrics rows
        kept. Under torchrun every rank learns whether all of them could start."""
        failure, rows = None, []
        try:
            if self.ex.is_main:
                output_dir(self.out)
                self._lock.acquire()
                check_run_dir(self.out, resume=resume, overwrite=overwrite)
            if resume:
                if not self._ckpt_path().exists():
                    raise ConfigError(f"--resume: no checkpoint {self._ckpt_path()}")
                self.load()
            if self.ex.is_main:
                for stale in [p for n in RUN_FILES + ("ckpt*.pt",) for p in self.out.glob(f".{n}.*.tmp")]:
                    stale.unlink()  # a writer killed before its rename (noloco.infra.files.atomic_write) left it
                metrics = self.out / "metrics.jsonl"
                if overwrite:
                    for path in run_files(self.out):
                        path.unlink()
                elif resume and metrics.exists():
                    fix = (f"delete that line (rows after the checkpoint's outer step {self.outer_done} are "
                           f"recomputed), or start again with --overwrite")
                    rows = [r for r in read_metrics(metrics, fix) if r["outer_step"] <= self.outer_done]
                if resume:
                    self._resume_inputs()
        except (ConfigError, DataError, OSError, MemoryError) as err:
            failure = err
        if self.ex.world_size > 1:  # every rank prepared, from checkpoints of the same outer step?
            every = self.ex.agree([0.0 if failure is None else 1.0, float(self.outer_done)])
            ranks_failed = [r for r in range(self.ex.world_size) if every[2 * r] > 0]
            steps = sorted({every[2 * r + 1] for r in range(self.ex.world_size)})
            if failure is None and ranks_failed:
                failure = PeerError(f"rank(s) {ranks_failed} could not start the run (see their error); "
                                    f"nothing was trained")
            elif failure is None and len(steps) > 1:
                failure = DataError(f"the checkpoints in {self.out} are at different outer steps "
                                    f"({', '.join(str(int(s)) for s in steps)}): a rank was stopped while they "
                                    f"were written; start the run again with --overwrite")
        if failure is not None:
            raise failure
        return rows

    def _resume_inputs(self) -> None:
        """The inputs.jsonl rows up to the checkpoint. The meter continues only from a checkpoint that
        holds its state and a file that holds every outer step up to it; otherwise the rows kept end
        there (``noloco llm predict`` then predicts the evaluations up to that step)."""
        path = self.out / "inputs.jsonl"
        fix = "delete inputs.jsonl (the run then goes on without it) or start again with --overwrite"
        kept = ([r for r in read_jsonl(path, required=("outer_step", "groups"), fix=fix)
                 if r["outer_step"] <= self.outer_done] if path.exists() else [])
        if [r["outer_step"] for r in kept] != list(range(1, self.outer_done + 1)):
            self.meter = None
        self.inputs = kept

    def _write_rows(self, rows: list) -> None:
        if self.ex.is_main:  # the whole file, atomically: a crash never leaves half a line
            atomic_write_text(self.out / "metrics.jsonl", "".join(dumps(r) + "\n" for r in rows))
        self._write_inputs()

    def _write_inputs(self) -> None:
        if self.ex.is_main and (self.meter is not None or self.inputs):
            atomic_write_text(self.out / "inputs.jsonl", "".join(dumps(r) + "\n" for r in self.inputs))

    def _write_result(self, rows: list, started: float) -> dict:
        result = self._result(rows, started)
        if self.ex.is_main:
            write_json(self.out / "result.json", result, indent=2)
        return result

    def run(self, resume: bool = False, stop_after: int | None = None, overwrite: bool = False) -> dict:
        """Train to ``outer_steps`` (or ``stop_after``); the result, as written to result.json. A
        divergence ends the run early with ``result["diverged"]`` (see :func:`divergence_message`)."""
        self._lock = RunLock(self.out)
        try:
            return self._run(resume, stop_after, overwrite)
        except RuntimeError as err:
            if _allocation(err):
                raise MemoryError(f"{self.cfg.method}: {str(err).splitlines()[0]} (the estimate was "
                                  f"{self.memory['total'] / 1e9:.3g} GB); lower --batch, --ctx or --replicas, "
                                  f"or lower --max-memory so the estimate refuses it") from err
            raise
        finally:
            if self.ex.is_main:
                self._lock.release()

    def _run(self, resume: bool, stop_after: int | None, overwrite: bool) -> dict:
        cfg = self.cfg
        started = time.perf_counter()
        self._entropy = self.corpus.unigram_entropy()
        rows = self._start(resume, overwrite)
        self._write_rows(rows)
        self._write_result(rows, started)
        last = min(cfg.outer_steps if stop_after is None else stop_after, cfg.outer_steps)
        tokens_step = cfg.tokens_per_inner_step()
        clock = time.perf_counter()
        single = self.ex.world_size == 1
        bar = None
        if self.progress and self.ex.is_main:
            from tqdm import tqdm

            bar = tqdm(total=cfg.total_inner_steps, initial=self.outer_done * cfg.inner_steps,
                       desc=f"{cfg.method} N={cfg.replicas}", unit="step", leave=False, dynamic_ncols=True)
        while self.outer_done < last:
            t = self.outer_done
            for h in range(cfg.inner_steps):
                loss = self.inner_step(t * cfg.inner_steps + h).double().cpu()
                r = _first_bad(loss)
                if r is not None:
                    self._diverge(t + 1, t * cfg.inner_steps + h + 1, r, "training loss", None, loss[r].item())
                    if single:
                        break
                self.train_sum += loss
                self.train_count += 1
                if bar is not None:
                    bar.update(1)
            if single and self.diverged:
                break
            evaluate = (t + 1) % cfg.eval_every == 0 or t + 1 == cfg.outer_steps
            self.outer_update(t, measure=evaluate)
            self.outer_done = t + 1
            save = self.outer_done % cfg.ckpt_every == 0 or self.outer_done == last
            self._check_state(self.outer_done, optimizer=save)
            if (single or evaluate or save) and self._sync_divergence():
                break
            if evaluate:
                step = self.outer_done * cfg.inner_steps
                train_per = self._last_stage((self.train_sum / max(self.train_count, 1)).tolist())
                row = {"step": step, "outer_step": self.outer_done, "tokens": step * tokens_step,
                       "train_loss": float(np.mean(train_per)), "train_loss_per_replica": train_per,
                       **self.evaluate(), "tokens_per_s": self.train_count * tokens_step / (time.perf_counter() - clock),
                       "lr": cfg.inner_lr(step - 1)}
                bad = [i for i, v in enumerate(row["val_loss_per_replica"]) if not math.isfinite(v)]
                if bad or not math.isfinite(row["val_loss_avg_model"]):  # every rank sees the same row
                    self.diverged = {"outer_step": self.outer_done, "inner_step": None,
                                     "replica": bad[0] if bad else None, "quantity": "validation loss",
                                     "tensor": None,
                                     "value": str(row["val_loss_per_replica"][bad[0]] if bad else row["val_loss_avg_model"])}
                    break
                rows.append(row)
                self._write_rows(rows)
                if bar is not None:
                    bar.set_postfix(val=f"{row['val_loss_avg_model']:.3f}", std=f"{row['weight_std']:.2e}")
                self.train_sum.zero_()
                self.train_count, clock = 0, time.perf_counter()
            if save:
                self.save()
                self._write_inputs()
                self._write_result(rows, started)
        if bar is not None:
            bar.close()
        self._write_inputs()
        return self._write_result(rows, started)


# ----------------------------------------------------------------- stages removed

def evaluate_run(out: str | Path, removed=(), threads: int | None = None) -> dict:
    """The validation losses of the model in ``out``'s checkpoint (a one-process run) with the middle
    stages ``removed`` left out of every path: ``{"removed", "stages", "val_loss_avg_model",
    "val_loss_per_replica", "weight_std"}``. A ConfigError for a stage that is not a middle stage."""
    from noloco.llm_check.routing import middle_stages

    out = Path(out)
    result = read_json(out / "result.json", required=("config",))
    try:
        cfg = TrainConfig.from_dict(result["config"])
    except (ConfigError, TypeError, KeyError, AttributeError) as err:
        raise DataError(f"{out / 'result.json'} holds settings this version cannot read ({err})") from None
    middle = middle_stages(cfg.stages)
    removed = sorted(set(removed))
    wrong = [s for s in removed if s not in middle]
    if wrong:
        raise ConfigError(f"stages {wrong} cannot be removed: the run has {cfg.stages} stages and only the middle "
                          f"ones ({', '.join(map(str, middle)) or 'none'}) hold nothing but residual blocks")
    if not (out / "ckpt.pt").exists():
        raise DataError(f"{out} has no ckpt.pt (a torchrun run keeps one checkpoint per rank: evaluate a "
                        f"one-process run)")
    set_threads(threads)
    trainer = Trainer(cfg, out, progress=False)
    trainer.load()
    row = trainer.evaluate(removed=tuple(removed))
    return {"removed": removed, "stages": cfg.stages, "outer_step": trainer.outer_done,
            **{k: row[k] for k in ("val_loss_avg_model", "val_loss_per_replica", "weight_std")}}


# ----------------------------------------------------------------- several methods

def train_methods(configs: list[TrainConfig], out: str | Path, *, resume: bool = False,
                  stop_after: int | None = None, threads: int | None = None, progress: bool | None = None,
                  overwrite: bool = False, max_memory=None) -> dict[str, dict]:
    """Train each config into ``out``, or into ``out/METHOD`` when there are several; ``{method: result}``.
    Everything is checked before the first run starts: the methods, the flags, each run folder (its
    lock, then whether it holds a run) and each run's memory estimate. A run that diverges has
    ``"diverged"`` in its result; the others still run."""
    methods = [cfg.method for cfg in configs]
    twice = sorted({m for m in methods if methods.count(m) > 1})
    if twice:  # the second run would overwrite the first one's directory and result
        raise ConfigError(f"method={','.join(methods)} names {', '.join(twice)} more than once; "
                          "give each method once")
    check_run_flags(SimpleNamespace(resume=resume, overwrite=overwrite, stop_after=stop_after, threads=threads))
    folders = [Path(out) / cfg.method if len(configs) > 1 else Path(out) for cfg in configs]
    output_dir(out)
    for cfg in configs:
        check_memory(cfg, max_memory)
    with contextlib.ExitStack() as locks:
        for where in folders:
            output_dir(where)
            locks.enter_context(RunLock(where))
            check_run_dir(where, resume=resume, overwrite=overwrite)
        set_threads(threads)
        results = {}
        for cfg, where in zip(configs, folders):
            trainer = Trainer(cfg, where, progress=progress, max_memory=max_memory)
            results[cfg.method] = trainer.run(resume=resume, stop_after=stop_after, overwrite=overwrite)
    return results


def format_results(results: dict[str, dict]) -> str:
    """The comparison table of :func:`train_methods`' results, with the corpus it was measured on."""
    first = next(iter(results.values()))
    lines = [f"corpus sha256 {first['corpus_sha256'][:16]}, Python {first['python']}, {first['n_params']} "
             f"parameters, unigram entropy {first['unigram_entropy']:.3f} nats/byte",
             f"{'method':<8} {'steps':>6} {'train':>7} {'val(avg model)':>15} {'weight_std':>11} {'tok/s':>8} "
             f"{'wall s':>7}"]
    nan = float("nan")
    for method, r in results.items():
        f = {k: nan if v is None else v for k, v in (r["final"] or {}).items()}  # strict JSON: null for non-finite
        lines.append(f"{method:<8} {f.get('step', 0):>6} {f.get('train_loss', nan):>7.3f} "
                     f"{f.get('val_loss_avg_model', nan):>15.3f} {f.get('weight_std', nan):>11.3e} "
                     f"{f.get('tokens_per_s', nan):>8.0f} {r['wall_s']:>7.1f}"
                     + ("  DIVERGED" if r.get("diverged") else ""))
    for method, r in results.items():
        if r.get("diverged"):
            lines.append(f"{method}: {r['diverged']['message']}")
    return "\n".join(lines)


# ----------------------------------------------------------------- torchrun

PROG = "python -m noloco.llm_check.train"


def main(argv: list[str] | None = None) -> int:
    """The torchrun entry, under the exit-code contract of ``noloco`` (:func:`noloco.infra.entry.report`): 0 done,
    1 diverged, 2 bad input, 3 an environment or data fault (a dead peer, a corrupted checkpoint, a
    folder in use, the memory budget), 130 interrupted; one line on stderr."""
    parser = OneLineParser(prog=PROG, description="One NoLoCo/DiLoCo/DDP run; under torchrun one replica per rank.")
    add_train_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help (0) or a usage error (2, printed on one line)
        return stop.code if isinstance(stop.code, int) else 0
    try:
        cfg = config_from_args(args)
        set_threads(args.threads)
        ex = None
        if "WORLD_SIZE" in os.environ:
            from noloco.llm_check.exchange import DistExchange

            ex = DistExchange.init(cfg, args.timeout)
            cfg = dataclasses.replace(cfg, device=str(ex.device))  # the rank's device: exchange.rank_device
        else:
            check_run_dir(args.out, resume=args.resume, overwrite=args.overwrite)
        try:
            result = Trainer(cfg, args.out, ex, max_memory=args.max_memory).run(
                resume=args.resume, stop_after=args.stop_after, overwrite=args.overwrite)
        finally:
            if ex is not None:
                ex.close()
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - report re-raises what is not in the contract (a bug)
        return report(PROG, err)
    if result.get("diverged"):
        print(f"{PROG}: {result['diverged']['message']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
