"""Training loop for ddp / diloco / noloco / local, batched in one process or one
replica per rank under torchrun.

The two modes share everything except how replicas talk (:mod:`llm_check.exchange`):
in one process the R replicas are the leading dimension of every tensor and a group
mean is an index shuffle; under torchrun each rank holds R = 1 and exchanges with its
group by point-to-point messages. The outer step itself is
:func:`theory.outer.outer_step`, applied tensor by tensor.

Inner optimiser: AdamW on the stacked parameters. Adam is elementwise, so one AdamW
over (R, ...) tensors is exactly R independent AdamWs; only clipping couples
coordinates, and it is done per replica. The inner AdamW state carries over outer
steps (as in DiLoCo). ``ddp`` averages the gradients every step and skips the outer
step. The methods and the learning-rate schedule are :mod:`theory.methods` and
:mod:`theory.schedules`; every file is written through :mod:`theory.io` (strict JSON).

Under torchrun::

    torchrun --nproc-per-node 4 -m llm_check.train --preset cpu-tiny --method noloco --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from llm_check import data
from llm_check.config import TrainConfig, add_train_arguments, config_from_args
from llm_check.exchange import Exchange, LocalExchange, PeerError
from llm_check.model import init_params, losses
from theory.config import ConfigError, check_integer
from theory.io import SCHEMA_VERSION, DataError, atomic_write, atomic_write_text, dumps, write_json
from theory.outer import outer_step

#: settings a resumed run may change: they do not change what is computed
RESUMABLE_CHANGES = ("outer_steps", "device", "replica_mode")


def weight_std(phi: dict) -> float:
    """sqrt of the mean over all parameters and replicas of (p - replica-mean of p)^2,
    for stacked tensors (R, ...) in one process. float64, so that identical replicas
    give exactly 0 (a float32 mean of equal numbers is not always equal to them)."""
    total = sum(((p.double() - p.double().mean(0, keepdim=True)) ** 2).sum().item() for p in phi.values())
    return math.sqrt(total / sum(p.numel() for p in phi.values()))


def set_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(check_integer("threads", threads, "an integer >= 1", lambda v: v >= 1))


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a metrics.jsonl (Python's json: rows of runs made before strict JSON may hold NaN)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return out


class Trainer:
    """One run; ``exchange`` decides which replicas live here (all, or one per rank)."""

    def __init__(self, cfg: TrainConfig, out: str | Path, exchange: Exchange | None = None,
                 progress: bool | None = None):
        self.cfg = cfg
        self.out = Path(out)
        self.ex = exchange or LocalExchange(cfg.replicas)
        self.progress = sys.stderr.isatty() if progress is None else progress  # a bar only on a terminal
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device=cuda but torch sees no GPU")
        self.dtype = getattr(torch, cfg.dtype)
        self.model = cfg.model()
        self.corpus = data.load_corpus()
        all_shards = data.shards(self.corpus, cfg.replicas, cfg.seed, cfg.noniid)
        self.shards = [all_shards[r] for r in self.ex.replicas]
        self.val = torch.from_numpy(data.val_windows(self.corpus, cfg.seed, cfg.val_windows, cfg.ctx)).long()
        R = len(self.ex.replicas)
        self.params = init_params(self.model, R, cfg.seed, self.dtype, self.device)
        for p in self.params.values():
            p.requires_grad_(True)
        self.phi = {k: v.detach().clone() for k, v in self.params.items()}
        self.delta = {k: torch.zeros_like(v) for k, v in self.phi.items()}
        decay = [p for k, p in self.params.items() if p.dim() >= 3]  # matrices; not biases, norms
        rest = [p for k, p in self.params.items() if p.dim() < 3]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": rest, "weight_decay": 0.0}],
                                     lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)
        self.batched = cfg.replica_mode in ("auto", "batched")
        self.outer_done = 0

    # ------------------------------------------------------------- inner phase

    def _windows(self, step: int) -> torch.Tensor:
        rows = [data.batch(s, self.cfg.seed, r, step, self.cfg.batch, self.cfg.ctx)
                for r, s in zip(self.ex.replicas, self.shards)]
        return torch.from_numpy(np.stack(rows)).long().to(self.device)

    def _backward(self, windows: torch.Tensor) -> torch.Tensor:
        if self.batched:
            loss = losses(self.params, windows, self.model)
            loss.sum().backward()  # replicas are independent: each gets its own gradient
            return loss.detach()
        out = []
        for r in range(windows.shape[0]):
            loss = losses({k: v[r:r + 1] for k, v in self.params.items()}, windows[r:r + 1], self.model)
            loss.sum().backward()
            out.append(loss.detach())
        return torch.cat(out)

    def _clip(self) -> None:
        grads = [p.grad for p in self.params.values()]
        sq = sum(g.float().pow(2).flatten(1).sum(1) for g in grads)
        coef = (self.cfg.clip / (sq.sqrt() + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype).view(-1, *([1] * (g.dim() - 1))))

    def inner_step(self, step: int) -> torch.Tensor:
        lr = self.cfg.inner_lr(step)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=False)
        loss = self._backward(self._windows(step))
        if self.cfg.method == "ddp":
            self.ex.average_grads([p.grad for p in self.params.values()])
        if self.cfg.clip > 0:
            self._clip()
        self.opt.step()
        return loss

    # ------------------------------------------------------------- outer step

    @torch.no_grad()
    def outer_update(self, t: int) -> None:
        if self.cfg.method == "ddp":  # every step was synchronous: nothing to average
            for k in self.phi:
                self.phi[k].copy_(self.params[k])
            return
        keys = list(self.phi)
        progress_delta = [self.params[k] - self.phi[k] for k in keys]  # theta - phi
        means_phi, means_prog = self.ex.group_means([self.phi[k] for k in keys], progress_delta,
                                                    self.cfg.seed, t, self.cfg.outer.group_size)
        rule = self.cfg.outer.rule()
        for k, mphi, mprog in zip(keys, means_phi, means_prog):
            self.phi[k], self.delta[k] = outer_step(self.phi[k], self.delta[k], mphi, mprog, **rule)
            self.params[k].copy_(self.phi[k])

    # ------------------------------------------------------------- evaluation

    @torch.no_grad()
    def evaluate(self) -> dict:
        val = self.val.to(self.device)
        R = len(self.ex.replicas)
        per = []
        for chunk in val.split(32):
            per.append(losses(self.phi, chunk.unsqueeze(0).expand(R, -1, -1), self.model) * len(chunk))
        val_per = (torch.stack(per).sum(0) / len(val)).tolist()
        mean_phi = self.ex.replica_mean(list(self.phi.values()))  # float64: see weight_std
        avg = {k: m.to(self.dtype) for k, m in zip(self.phi, mean_phi)}
        avg_loss = sum((losses(avg, c.unsqueeze(0), self.model) * len(c)).item() for c in val.split(32)) / len(val)
        sq = sum(((p.double() - m) ** 2).sum() for p, m in zip(self.phi.values(), mean_phi))
        count = sum(p[0].numel() for p in self.phi.values())
        total_sq = self.ex.sum_scalar(float(sq))
        return {"val_loss_avg_model": avg_loss, "val_loss_per_replica": self.ex.gather_floats(val_per),
                "weight_std": math.sqrt(total_sq / (count * self.cfg.replicas))}

    # ------------------------------------------------------------- checkpoints

    def _ckpt_path(self) -> Path:
        return self.out / (self.ex.ckpt_name())

    def save(self) -> None:
        state = {"schema_version": SCHEMA_VERSION, "config": self.cfg.as_dict(), "outer_step": self.outer_done,
                 "replicas": list(self.ex.replicas), "phi": self.phi, "delta": self.delta,
                 "opt": self.opt.state_dict(), "torch_rng": torch.get_rng_state(),
                 "data_rng": "numpy default_rng([seed, replica, inner_step]); groups from (seed, outer_step)"}
        atomic_write(self._ckpt_path(), lambda tmp: torch.save(state, tmp))

    def load(self) -> None:
        import pickle

        try:  # tensors and plain data only: unpickling arbitrary objects would run code from the file
            state = torch.load(self._ckpt_path(), map_location=self.device, weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
            raise DataError(f"cannot read checkpoint {self._ckpt_path()}: {str(err).splitlines()[0]}") from None
        try:  # a nested config, or the flat one of checkpoints written before the outer step was nested
            saved = _flat(TrainConfig.from_dict(state["config"]).as_dict())
        except (ConfigError, TypeError, KeyError) as err:
            raise ConfigError(f"checkpoint {self._ckpt_path()} holds settings this version cannot read ({err}); "
                              f"resume with the version that wrote it, or start a new --out") from None
        now = _flat(self.cfg.as_dict())
        differ = [k for k in now if k.split(".")[0] not in RESUMABLE_CHANGES and saved.get(k) != now[k]]
        if differ:
            raise ConfigError(f"checkpoint in {self.out} was written with different settings: "
                              + ", ".join(f"{k}={saved.get(k)!r} (now {now[k]!r})" for k in differ))
        with torch.no_grad():
            for k in self.phi:
                self.phi[k] = state["phi"][k].to(self.device)
                self.delta[k] = state["delta"][k].to(self.device)
                self.params[k].copy_(self.phi[k])
        self.opt.load_state_dict(state["opt"])
        torch.set_rng_state(state["torch_rng"])
        self.outer_done = state["outer_step"]

    # ------------------------------------------------------------- the run

    def run(self, resume: bool = False, stop_after: int | None = None) -> dict:
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        metrics_path = self.out / "metrics.jsonl"
        rows = []
        if resume:
            if not self._ckpt_path().exists():
                raise ConfigError(f"--resume: no checkpoint {self._ckpt_path()}")
            self.load()
            if self.ex.is_main and metrics_path.exists():
                rows = [r for r in read_metrics(metrics_path) if r["outer_step"] <= self.outer_done]
        if self.ex.is_main:
            atomic_write_text(metrics_path, "".join(dumps(r) + "\n" for r in rows))
        last = stop_after if stop_after is not None else cfg.outer_steps
        last = min(last, cfg.outer_steps)
        tokens_step = cfg.tokens_per_inner_step()
        train_sum = torch.zeros(len(self.ex.replicas), dtype=torch.float64)
        train_count, clock, started = 0, time.perf_counter(), time.perf_counter()
        bar = None
        if self.progress and self.ex.is_main:
            from tqdm import tqdm

            bar = tqdm(total=cfg.outer_steps, initial=self.outer_done, desc=f"{cfg.method} N={cfg.replicas}",
                       unit="outer", leave=False, dynamic_ncols=True)
        while self.outer_done < last:
            t = self.outer_done
            for h in range(cfg.inner_steps):
                train_sum += self.inner_step(t * cfg.inner_steps + h).double().cpu()
                train_count += 1
            self.outer_update(t)
            self.outer_done = t + 1
            if bar is not None:
                bar.update(1)
            if self.outer_done % cfg.eval_every == 0 or self.outer_done == cfg.outer_steps:
                elapsed = time.perf_counter() - clock
                step = self.outer_done * cfg.inner_steps
                train_per = self.ex.gather_floats((train_sum / train_count).tolist())
                row = {"step": step, "outer_step": self.outer_done, "tokens": step * tokens_step,
                       "train_loss": float(np.mean(train_per)), "train_loss_per_replica": train_per,
                       **self.evaluate(), "tokens_per_s": train_count * tokens_step / elapsed,
                       "lr": cfg.inner_lr(step - 1)}
                if self.ex.is_main:
                    with metrics_path.open("a") as fh:
                        fh.write(dumps(row) + "\n")
                    if bar is not None:
                        bar.set_postfix(val=f"{row['val_loss_avg_model']:.3f}", std=f"{row['weight_std']:.2e}")
                rows.append(row)
                self.save()
                train_sum.zero_()
                train_count, clock = 0, time.perf_counter()
        if bar is not None:
            bar.close()
        result = {"schema_version": SCHEMA_VERSION, "config": cfg.as_dict(), **self.corpus.info(),
                  "unigram_entropy": self.corpus.unigram_entropy(), "torch": torch.__version__,
                  "n_params": self.model.n_params(), "outer_steps_done": self.outer_done,
                  "finished": self.outer_done == cfg.outer_steps, "wall_s": time.perf_counter() - started,
                  "world_size": self.ex.world_size, "final": rows[-1] if rows else None}
        if self.ex.is_main:
            write_json(self.out / "result.json", result, indent=2)
        return result


# ----------------------------------------------------------------- several methods

def train_methods(configs: list[TrainConfig], out: str | Path, *, resume: bool = False,
                  stop_after: int | None = None, threads: int | None = None,
                  progress: bool | None = None) -> dict[str, dict]:
    """Train each config into ``out``, or into ``out/METHOD`` when there are several; ``{method: result}``.
    Everything is checked before the first run starts."""
    methods = [cfg.method for cfg in configs]
    twice = sorted({m for m in methods if methods.count(m) > 1})
    if twice:  # the second run would overwrite the first one's directory and result
        raise ConfigError(f"method={','.join(methods)} names {', '.join(twice)} more than once; "
                          "give each method once")
    if stop_after is not None:
        check_integer("stop_after", stop_after, "an integer >= 1", lambda v: v >= 1)
    set_threads(threads)
    results = {}
    for cfg in configs:
        where = Path(out) / cfg.method if len(configs) > 1 else Path(out)
        results[cfg.method] = Trainer(cfg, where, progress=progress).run(resume=resume, stop_after=stop_after)
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
        f = r["final"] or {}
        lines.append(f"{method:<8} {f.get('step', 0):>6} {f.get('train_loss', nan):>7.3f} "
                     f"{f.get('val_loss_avg_model', nan):>15.3f} {f.get('weight_std', nan):>11.3e} "
                     f"{f.get('tokens_per_s', nan):>8.0f} {r['wall_s']:>7.1f}")
    return "\n".join(lines)


# ----------------------------------------------------------------- torchrun

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_check.train",
                                     description="One NoLoCo/DiLoCo/DDP run; under torchrun one replica per rank.")
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    try:
        cfg = config_from_args(args)
        set_threads(args.threads)
        if "WORLD_SIZE" in os.environ:
            from llm_check.exchange import DistExchange

            ex = DistExchange.init(cfg, args.timeout)
            cfg = dataclasses.replace(cfg, device=str(ex.device))  # the rank's device: exchange.rank_device
            try:
                Trainer(cfg, args.out, ex).run(resume=args.resume, stop_after=args.stop_after)
            finally:
                ex.close()
        else:
            Trainer(cfg, args.out).run(resume=args.resume, stop_after=args.stop_after)
    except ConfigError as err:
        print(f"llm_check.train: error: {err}", file=sys.stderr)
        return 2
    except (PeerError, DataError, OSError) as err:  # a dead peer, an unreadable or unwritable file
        print(f"llm_check.train: error: {err}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
