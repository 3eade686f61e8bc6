"""Heterogeneous domain-expert ensembles (HDEE: Ersoy, Kolehmainen & Passamani Andrade 2025, arXiv
2502.19385) next to ddp, diloco and noloco: the zero-communication end of the axis.

``noloco llm ensemble --out DIR`` trains, for every seed, at one budget of training FLOPs:

* ``homogeneous``: one expert per training domain (:mod:`noloco.llm_check.domains`), every expert the
  base model trained for the same number of steps;
* ``heterogeneous``: the same experts sized and trained by the rule :data:`WIDTH_FACTOR` /
  :data:`COMPUTE_FACTOR`: the training domains are ranked by difficulty (the zlib bits per byte of
  their training text, measured before training) and cut into thirds, easy, medium and hard; an
  expert of group g has ``WIDTH_FACTOR[g]`` times the base width and ``COMPUTE_FACTOR[g]`` times the
  homogeneous expert's FLOPs (the factors average to 1 over the groups, so the ensemble's budget is the
  homogeneous one's), its steps whatever that buys at its size;
* ``ddp``, ``diloco``, ``noloco``: ``replicas`` replicas of the base model on the mixture of the same
  training domains, the existing trainer with the steps the same budget buys.

An expert is a one-replica run of :class:`noloco.llm_check.train.Trainer` on its domain's text
(``TrainConfig.domain``), with method ``ddp`` at N = 1: plain training, no outer step, nothing sent
to anyone. Experts of one size start from the same initialisation (the seed's); there is no seed
phase (branch-train-merge's first step), since nothing here is trained before the experts.

The budget is counted exactly in matmul FLOPs (:meth:`noloco.llm_check.architecture.GPTConfig.train_step_flops`,
forward and backward, attention included; elementwise work excluded): B = K x ``expert_steps`` x F(base),
K the number of training domains. Every configuration spends at most B and less than one more step
(of its cheapest unit) below it: experts' steps come in units of :data:`EXPERT_UNIT`, filled greedily;
the baselines' in outer steps of ``inner_steps``.

Evaluation (as HDEE and branch-train-merge do it): for every domain, training and held out, ``eval_windows``
windows of ``ctx`` bytes from its validation text, taken as segments of ``segment`` consecutive windows.
Each model predicts each window from that window's bytes alone (its context); the ensemble mixes its
experts with the domain posterior ``w_k(t) ∝ prior_k · Π_{s<t} p_k(x_s)`` over the bytes of the segment
before t (the experts' own likelihoods; the prior from the training domains' sizes), and, as the
baseline, uniformly. The baselines are evaluated as their replica-mean model (and, for the record, each
replica on its own). Loss in nats per byte; perplexity its exp.

Communication: bytes each replica sends during training (it receives as many), float32 values; see
:func:`communication`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from types import SimpleNamespace
from pathlib import Path

import numpy as np

from noloco.infra.checks import check_at_least, check_choice, check_fields, check_integer, check_real
from noloco.infra.errors import ConfigError
from noloco.infra.files import SCHEMA_VERSION, read_json, write_json
from noloco.llm_check import domains
from noloco.llm_check.architecture import GPTConfig
from noloco.llm_check.config import TrainConfig, build

CONFIGS = ("homogeneous", "heterogeneous", "ddp", "diloco", "noloco")
ENSEMBLES = CONFIGS[:2]
BASELINES = CONFIGS[2:]
GROUPS = ("easy", "medium", "hard")
#: the heterogeneous rule: per difficulty group, an expert's width and its FLOPs, relative to the homogeneous expert's
WIDTH_FACTOR = {"easy": 0.5, "medium": 1.0, "hard": 1.5}
COMPUTE_FACTOR = {"easy": 0.5, "medium": 1.0, "hard": 1.5}
#: an expert's inner steps per outer step: its step counts are multiples of it (checkpoints, --stop-after)
EXPERT_UNIT = 5
#: validation windows of each run's own evaluations (metrics.jsonl)
RUN_VAL_WINDOWS = 32
BYTES_PER_VALUE = 4  # float32 on the wire
QUICK = dict(width=16, layers=1, heads=2, ctx=16, batch=2, expert_steps=10, replicas=2, inner_steps=5,
             eval_windows=8, segment=2, seeds=(0,))


def _names(name: str, value, allowed: tuple, at_least: int = 1) -> tuple:
    """A tuple of different names from ``allowed`` (a comma-separated string or a sequence)."""
    items = tuple(s.strip() for s in value.split(",")) if isinstance(value, str) else tuple(value)
    wrong = [v for v in items if v not in allowed]
    if wrong or len(set(items)) != len(items) or len(items) < at_least:
        why = (f"unknown {', '.join(map(repr, wrong))}" if wrong else "a name given twice" if len(set(items)) != len(items)
               else f"give at least {at_least}")
        raise ConfigError(f"{name}={value!r} is not allowed ({why}); allowed: {', '.join(allowed)}")
    return items


def _seeds(name: str, value) -> tuple:
    items = value
    if isinstance(value, str):
        try:
            items = tuple(int(s) for s in value.split(","))
        except ValueError:
            items = None
    if not isinstance(items, (tuple, list)) or not items \
            or len(set(items)) != len(items) or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in items):
        raise ConfigError(f"{name}={value!r} is not allowed; allowed: different integers >= 0, e.g. 0,1,2")
    return tuple(items)


@dataclass(frozen=True)
class Study:
    """The settings of one study (every field validated at construction, ConfigError naming it)."""

    configs: tuple = CONFIGS
    domains: tuple = domains.TRAINING   # training domains: one expert each, and the baselines' mixture
    seeds: tuple = (0, 1, 2)
    expert_steps: int = 800             # steps of a homogeneous expert: the budget is K * expert_steps * F(base)
    width: int = 64
    layers: int = 2
    heads: int = 4
    ctx: int = 64
    batch: int = 8                      # windows per replica per step, every run
    lr: float = 3e-3
    replicas: int = 4                   # N of ddp, diloco, noloco
    inner_steps: int = 25               # H of diloco and noloco (ddp: steps between evaluations)
    eval_windows: int = 128             # validation windows per domain
    segment: int = 4                    # windows per segment: the posterior's context

    def __post_init__(self):
        check_fields(self, {
            "configs": (_names, CONFIGS), "domains": (_names, domains.TRAINING, 2), "seeds": (_seeds,),
            "expert_steps": (check_integer, f"a multiple of {EXPERT_UNIT}, >= {EXPERT_UNIT}",
                             lambda v: v >= EXPERT_UNIT and v % EXPERT_UNIT == 0),
            "layers": (check_at_least, 1), "heads": (check_at_least, 1), "ctx": (check_at_least, 2),
            "batch": (check_at_least, 1), "lr": (check_real, "0 < lr < inf", lambda v: 0 < v < math.inf),
            "replicas": (check_integer, "an even integer >= 2 (noloco's pairs)", lambda v: v >= 2 and v % 2 == 0),
            "inner_steps": (check_at_least, 1), "eval_windows": (check_at_least, 1), "segment": (check_at_least, 1),
        })
        check_integer("width", self.width, f"an integer >= heads = {self.heads} divisible by it",
                      lambda v: v >= self.heads and v % self.heads == 0)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def mixture(self) -> str:
        """The baselines' domain spec."""
        return domains.ALL_TRAINING if self.domains == domains.TRAINING else ",".join(self.domains)

    def model(self, width: int | None = None) -> GPTConfig:
        return GPTConfig(ctx=self.ctx, layers=self.layers, heads=self.heads, width=width or self.width)

    def step_flops(self, width: int | None = None) -> int:
        """Matmul FLOPs of one step of one replica of the model of ``width`` (default the base)."""
        return self.model(width).train_step_flops(self.batch)

    @property
    def budget(self) -> int:
        """B = K x expert_steps x F(base): every configuration's training FLOPs."""
        return len(self.domains) * self.expert_steps * self.step_flops()


# ----------------------------------------------------------------- the plan

def difficulty_groups(names) -> dict:
    """``{domain: group}``: the domains ranked by difficulty (zlib bits per byte of their training text,
    ties by name) and cut into thirds (the first ``floor(3 i / K)``)."""
    stats = {r["name"]: r["zlib_bits_per_byte"] for r in domains.statistics()}
    ranked = sorted(names, key=lambda n: (stats[n], n))
    return {n: GROUPS[3 * i // len(ranked)] for i, n in enumerate(ranked)}


def _rounded_width(study: Study, factor: float) -> int:
    """``factor`` x the base width, rounded to a multiple of the heads (at least one per head)."""
    return study.heads * max(1, round(factor * study.width / study.heads))


def allocation(study: Study, kind: str) -> list[dict]:
    """The experts of an ensemble: ``[{domain, group, width, steps, flops}]``. Homogeneous: the base model,
    ``expert_steps`` each. Heterogeneous: the rule's width, and the steps that ``COMPUTE_FACTOR[g] / mean``
    of B / K buys, in units of :data:`EXPERT_UNIT` rounded down, then units added greedily (largest
    remainder first) while the total stays within B."""
    check_choice("kind", kind, ENSEMBLES)
    if kind == "homogeneous":
        return [{"domain": d, "group": None, "width": study.width, "steps": study.expert_steps,
                 "flops": study.expert_steps * study.step_flops()} for d in study.domains]
    groups = difficulty_groups(study.domains)
    share = {d: COMPUTE_FACTOR[g] for d, g in groups.items()}
    total_share = sum(share.values())
    rows = []
    for d in study.domains:
        width = _rounded_width(study, WIDTH_FACTOR[groups[d]])
        unit = EXPERT_UNIT * study.step_flops(width)
        units = study.budget * share[d] / total_share / unit
        rows.append({"domain": d, "group": groups[d], "width": width, "units": max(1, int(units)),
                     "rest": units - int(units), "unit": unit})
    spent = sum(r["units"] * r["unit"] for r in rows)
    order = sorted(rows, key=lambda r: (-r["rest"], r["domain"]))
    while spent <= study.budget - min(r["unit"] for r in rows):  # a unit still fits: largest remainder first
        fits = next(r for r in order if spent + r["unit"] <= study.budget)
        fits["units"], spent = fits["units"] + 1, spent + fits["unit"]
        order.remove(fits)
        order.append(fits)
    if spent > study.budget:
        raise ConfigError(f"expert_steps={study.expert_steps}: the budget {study.budget:.3g} FLOPs does not buy "
                          f"{EXPERT_UNIT} steps of every heterogeneous expert; raise --expert-steps")
    return [{"domain": r["domain"], "group": r["group"], "width": r["width"], "steps": r["units"] * EXPERT_UNIT,
             "flops": r["units"] * r["unit"]} for r in rows]


def baseline_steps(study: Study) -> int:
    """Steps of each replica of ddp / diloco / noloco: whole outer steps of ``inner_steps`` within B."""
    per_outer = study.replicas * study.inner_steps * study.step_flops()
    outer = study.budget // per_outer
    if outer < 1:
        raise ConfigError(f"expert_steps={study.expert_steps}: the budget {study.budget:.3g} FLOPs buys no outer step "
                          f"of {study.replicas} replicas x {study.inner_steps} steps; raise --expert-steps or lower "
                          f"--replicas or --inner-steps")
    return outer * study.inner_steps


def _warmup(steps: int) -> int:
    return max(1, steps // 10)


@dataclass(frozen=True)
class Run:
    """One training run of the study: an expert (``domain`` its domain) or a baseline (``domain`` None)."""

    config: str
    seed: int
    train: TrainConfig
    domain: str | None = None
    group: str | None = None

    @property
    def flops(self) -> int:
        t = self.train
        return t.model().train_step_flops(t.batch) * t.replicas * t.total_inner_steps

    def folder(self, out: Path) -> Path:
        where = Path(out) / f"seed{self.seed}" / self.config
        return where / self.domain if self.domain else where

    @property
    def name(self) -> str:
        return f"seed {self.seed} {self.config}" + (f" {self.domain}" if self.domain else "")


def expert_config(study: Study, domain: str, width: int, steps: int, seed: int) -> TrainConfig:
    outer = steps // EXPERT_UNIT
    return build(None, "ddp", replicas=1, domain=domain, width=width, layers=study.layers, heads=study.heads,
                 ctx=study.ctx, batch=study.batch, lr=study.lr, inner_steps=EXPERT_UNIT, outer_steps=outer,
                 warmup=_warmup(steps), eval_every=max(1, outer // 4), val_windows=RUN_VAL_WINDOWS, seed=seed)


def baseline_config(study: Study, method: str, seed: int) -> TrainConfig:
    steps = baseline_steps(study)
    outer = steps // study.inner_steps
    return build(None, method, replicas=study.replicas, domain=study.mixture, width=study.width,
                 layers=study.layers, heads=study.heads, ctx=study.ctx, batch=study.batch, lr=study.lr,
                 inner_steps=study.inner_steps, outer_steps=outer, warmup=_warmup(steps),
                 eval_every=max(1, outer // 4), val_windows=RUN_VAL_WINDOWS, seed=seed)


def plan(study: Study) -> list[Run]:
    """Every run of the study, seed by seed, in the order they are trained (all validated first)."""
    allocations = {kind: allocation(study, kind) for kind in ENSEMBLES if kind in study.configs}
    runs = []
    for seed in study.seeds:
        for config in study.configs:
            if config in ENSEMBLES:
                runs += [Run(config, seed, expert_config(study, a["domain"], a["width"], a["steps"], seed), a["domain"],
                             a["group"]) for a in allocations[config]]
            else:
                runs.append(Run(config, seed, baseline_config(study, config, seed)))
    return runs


def budget_report(study: Study) -> dict:
    """The budget, each configuration's FLOPs (one seed) and the allocation of each ensemble."""
    flops = {}
    for config in study.configs:
        flops[config] = sum(r.flops for r in plan(dataclasses.replace(study, seeds=(0,))) if r.config == config)
    return {"flops": study.budget, "step_flops_base": study.step_flops(),
            "counting": "matmul FLOPs of forward and backward (3 x forward), attention included, elementwise work "
                        "excluded: GPTConfig.train_step_flops",
            "per_config": {c: {"flops": f, "relative_to_budget": f / study.budget - 1} for c, f in flops.items()},
            "allocation": {kind: [{**a, "n_params": study.model(a["width"]).n_params()}
                                  for a in allocation(study, kind)] for kind in ENSEMBLES if kind in study.configs},
            "baseline_steps": baseline_steps(study) if set(BASELINES) & set(study.configs) else None}


# ----------------------------------------------------------------- communication

def communication(config: str, n_params: int, replicas: int, steps: int, inner_steps: int, group_size: int = 2) -> dict:
    """Bytes each replica sends during a run (it receives as many) and the seconds it spends on it on the
    default network of ``noloco comm`` (:data:`noloco.theory.comm.INTERNET`), for a run of ``steps`` inner
    steps; m = n_params x 4 bytes.

    * ddp: a ring all-reduce of the gradients at every step; the bytes a rank sends in a ring
      all-reduce, 2 (N-1)/N m, are the bandwidth term of :func:`noloco.theory.comm.ring_allreduce`
      on a network of 1 second per byte without latency;
    * diloco: the same all-reduce of the progress at every outer step (every ``inner_steps``);
    * noloco: the reference's root exchange at every outer step: each member sends its weights and
      its progress (two vectors) to the group's root, which sends the two means back to each member,
      so a group of n sends 2 x 2 (n-1) vectors, 2 m per replica for a pair (the seconds are
      :func:`noloco.theory.comm.root_group_exchange`'s);
    * ensembles: 0 (an expert exchanges nothing while it trains).
    """
    from noloco.theory.comm import INTERNET, Network, ring_allreduce, root_group_exchange

    m = n_params * BYTES_PER_VALUE
    if config in ENSEMBLES:
        return {"scheme": "none: every expert trains alone", "events": 0, "bytes_per_event": 0, "bytes_per_replica": 0,
                "seconds_internet": 0.0}
    if config == "noloco":
        events, sent = steps // inner_steps, 2 * 2 * (group_size - 1) / group_size * m
        seconds, scheme = root_group_exchange(INTERNET, m, group_size), "root exchange of (phi, progress) in pairs"
    else:
        events = steps if config == "ddp" else steps // inner_steps
        sent = ring_allreduce(Network(latency=0.0, seconds_per_byte=1.0), m, replicas)
        seconds = ring_allreduce(INTERNET, m, replicas)
        scheme = ("ring all-reduce of the gradients every step" if config == "ddp"
                  else "ring all-reduce of the progress every outer step")
    return {"scheme": scheme, "events": events, "bytes_per_event": sent, "bytes_per_replica": events * sent,
            "seconds_internet": events * seconds}


# ----------------------------------------------------------------- evaluation

def log_posterior(logp: np.ndarray, log_prior: np.ndarray) -> np.ndarray:
    """log w_k(t) for experts' byte log-probabilities ``logp`` (K, S, L): the posterior of expert k's domain
    given the bytes of its segment before t, ``w_k(t) ∝ prior_k Π_{s<t} p_k(x_s)``; sums to 1 over k."""
    before = np.concatenate([np.zeros_like(logp[..., :1]), np.cumsum(logp, axis=-1)[..., :-1]], axis=-1)
    a = np.asarray(log_prior, dtype=float)[:, None, None] + before
    return a - _logsumexp(a)


def mixture_logprob(logp: np.ndarray, log_weights: np.ndarray) -> np.ndarray:
    """log Σ_k w_k p_k of each byte, (S, L)."""
    return _logsumexp(log_weights + logp)[0]


def _logsumexp(a: np.ndarray) -> np.ndarray:
    top = a.max(axis=0, keepdims=True)
    return top + np.log(np.exp(a - top).sum(axis=0, keepdims=True))


def evaluated(study: Study) -> list:
    """The domains evaluated: the study's training domains, then the held-out ones."""
    return list(study.domains) + list(domains.HELD_OUT)


def check_evaluation(study: Study) -> None:
    """A ConfigError, before any work, when a segment does not fit in an evaluated domain's validation text."""
    val = {r["name"]: r["val_bytes"] for r in domains.statistics()}
    short = min(evaluated(study), key=lambda d: val[d])
    length = study.segment * study.ctx
    if val[short] < length + 2:
        raise ConfigError(f"segment x ctx = {study.segment} x {study.ctx} = {length} bytes is longer than the "
                          f"{val[short]} bytes of {short}'s validation text; lower --segment or --ctx")


def eval_segments(domain: str, study: Study) -> np.ndarray:
    """(segments, segment x ctx + 1) bytes of the domain's validation text, evenly spaced through it (that
    they fit: :func:`check_evaluation`)."""
    from noloco.llm_check import data

    count = max(1, study.eval_windows // study.segment)
    return data.val_windows(domains.corpus(domain), 0, count, study.segment * study.ctx)


def byte_logprobs(params: dict, model: GPTConfig, segments: np.ndarray, ctx: int):
    """log p of every predicted byte of every segment under each of the R models in ``params`` (R, ...):
    (R, S, L) float64, every window of ``ctx`` bytes predicted from its own bytes."""
    import torch

    from noloco.llm_check.config import EVAL_CHUNK
    from noloco.llm_check.model import forward

    x = torch.from_numpy(np.ascontiguousarray(segments)).long()
    S, n = x.shape[0], (x.shape[1] - 1) // ctx
    windows = torch.stack([x[:, w * ctx:(w + 1) * ctx + 1] for w in range(n)], 1).reshape(S * n, ctx + 1)
    R = next(iter(params.values())).shape[0]
    out = []
    with torch.no_grad():
        for chunk in windows.split(EVAL_CHUNK):
            idx, target = chunk[:, :-1].expand(R, -1, -1), chunk[:, 1:].expand(R, -1, -1)
            logits = forward(params, idx, model).double()
            out.append(torch.log_softmax(logits, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1))
    return torch.cat(out, 1).reshape(R, S, n * ctx).numpy()


def _load(run: Run, where: Path):
    """(phi, model) of a finished run's checkpoint, validated against its settings."""
    from noloco.llm_check.lifecycle import Lifecycle, run_folder
    from noloco.llm_check.train import Trainer

    trainer = Trainer(run.train, where, progress=False)
    Lifecycle(trainer, run_folder(where, lock=False)).load()
    return trainer.phi, trainer.model


def evaluate_seed(study: Study, runs: list[Run], out: Path, segments: dict) -> dict:
    """``{entry: {domain: loss}}`` and ``{ensemble: {domain: posterior summary}}`` of one seed's runs.
    Entries: ``homogeneous`` / ``heterogeneous`` (posterior mixing), ``-uniform``, ``-own`` (the domain's
    own expert, training domains only); ``ddp``, ``diloco``, ``noloco`` (replica-mean model) and
    ``-replicas`` (the mean of the replicas' own losses)."""
    import torch

    sizes = {r["name"]: r["train_bytes"] for r in domains.statistics()}
    losses, posterior = {}, {}
    for config in study.configs:
        mine = [r for r in runs if r.config == config]
        if config in ENSEMBLES:
            logps = {}
            for r in mine:
                phi, model = _load(r, r.folder(out))
                logps[r.domain] = {d: byte_logprobs(phi, model, seg, study.ctx)[0] for d, seg in segments.items()}
            experts = [r.domain for r in mine]
            log_prior = np.log([sizes[e] for e in experts]) - math.log(sum(sizes[e] for e in experts))
            for d in segments:
                logp = np.stack([logps[e][d] for e in experts])
                log_w = log_posterior(logp, log_prior)
                uniform = np.full((len(experts), 1, 1), -math.log(len(experts)))
                losses.setdefault(config, {})[d] = -float(mixture_logprob(logp, log_w).mean())
                losses.setdefault(f"{config}-uniform", {})[d] = -float(mixture_logprob(logp, uniform).mean())
                losses.setdefault(f"{config}-own", {})[d] = -float(logps[d][d].mean()) if d in logps else None
                mean_w = np.exp(log_w).mean(axis=(1, 2))
                posterior.setdefault(config, {})[d] = {
                    "top_expert": experts[int(mean_w.argmax())], "top_weight": float(mean_w.max()),
                    "own_weight": float(mean_w[experts.index(d)]) if d in experts else None,
                    "own_weight_last_byte": float(np.exp(log_w[experts.index(d), :, -1]).mean()) if d in experts else None}
        else:
            (r,) = mine
            phi, model = _load(r, r.folder(out))
            stacked = {k: torch.cat([v, v.double().mean(0, keepdim=True).to(v.dtype)]) for k, v in phi.items()}
            for d, seg in segments.items():
                logp = byte_logprobs(stacked, model, seg, study.ctx)
                losses.setdefault(config, {})[d] = -float(logp[-1].mean())
                losses.setdefault(f"{config}-replicas", {})[d] = -float(logp[:-1].mean(axis=(1, 2)).mean())
    return {"losses": losses, "posterior": posterior}


# ----------------------------------------------------------------- the study

def _summary(values: list) -> dict:
    from noloco.theory.stats import mean_se

    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "se": None, "values": [], "perplexity": None}
    mean, se = mean_se(np.asarray(values, dtype=float))
    return {"mean": mean, "se": se if len(values) > 1 else None, "values": values, "perplexity": math.exp(mean)}


def _mean(values: list):
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _winners(study: Study, per_seed: list[dict], names: list[str]) -> dict:
    """Per domain: the primary configuration with the lowest mean loss, the runner-up, and their paired
    difference over seeds (mean, se; clear when it is more than 2 se from 0)."""
    from noloco.theory.stats import mean_se

    primary = list(study.configs)
    out = {}
    for d in names:
        loss = {c: np.mean([s["losses"][c][d] for s in per_seed]) for c in primary}
        best, second = sorted(primary, key=lambda c: loss[c])[:2] if len(primary) > 1 else (primary[0], None)
        row = {"best": best, "second": second, "loss": {c: float(v) for c, v in loss.items()}}
        if second is not None:
            diff = [s["losses"][second][d] - s["losses"][best][d] for s in per_seed]
            mean, se = mean_se(np.asarray(diff, dtype=float))
            se = se if len(diff) > 1 else None
            row.update(margin=mean, margin_se=se, clear=bool(se is not None and se > 0 and mean > 2 * se))
        out[d] = row
    return out


def _open_study(out, study: Study, resume: bool, overwrite: bool):
    """The study's folder, opened (locked); on a fresh start study.json written, on --resume compared."""
    from noloco.infra.rundir import RunFolder

    folder = RunFolder(out, own=("hdee.json", "study.json"), resume=resume, overwrite=overwrite,
                       how="continue it with --resume or replace it with --overwrite").open()
    try:
        path = Path(folder.path) / "study.json"
        if resume:
            if not path.exists():
                raise ConfigError(f"--resume: {folder.path} holds no study (no study.json)")
            saved = read_json(path, required=("settings",))["settings"]
            now = _jsonish(study.as_dict())
            differ = [k for k in now if k != "seeds" and saved.get(k) != now[k]]  # seeds may be added or dropped
            if differ:
                raise ConfigError(f"--resume: the study in {folder.path} was started with other settings: "
                                  + ", ".join(f"{k}={saved.get(k)!r} (now {now[k]!r})" for k in differ)
                                  + "; resume with its settings or start a new --out")
            write_json(path, {"schema_version": SCHEMA_VERSION, "settings": study.as_dict()}, indent=1)
        else:
            folder.clear(everything=overwrite)
            for run in plan(study):  # a fresh study: no run folder may hold a run
                where = run.folder(folder.path)
                if not overwrite and any((where / f).exists() for f in ("result.json", "ckpt.pt")):
                    raise ConfigError(f"{where} holds a run; continue the study with --resume or replace it with "
                                      f"--overwrite")
            write_json(path, {"schema_version": SCHEMA_VERSION, "settings": study.as_dict()}, indent=1)
    except BaseException:
        folder.close()
        raise
    return folder


def _jsonish(x):
    from noloco.infra.files import loads, dumps

    return loads(dumps(x))


def _train(run: Run, where: Path, resume: bool, overwrite: bool, stop_after: int | None) -> dict:
    from noloco.llm_check.lifecycle import finished_run
    from noloco.llm_check.train import Trainer

    done = finished_run(where, run.train)
    if done is not None and not overwrite:
        return done
    again = resume and (where / "ckpt.pt").exists()
    return Trainer(run.train, where, progress=False).run(resume=again, stop_after=stop_after, overwrite=not again)


def run_study(study: Study, out, *, resume: bool = False, overwrite: bool = False, stop_after: int | None = None,
              threads: int | None = None, progress: bool | None = None) -> dict:
    """Train (or reuse, or resume) every run of ``study`` under ``out``, evaluate them per domain and write
    ``out/hdee.json``; the report. With ``stop_after`` every run stops after that many of its outer steps
    (with a checkpoint) and nothing is evaluated: ``report["unfinished"]`` lists the runs, which
    ``--resume`` continues."""
    from noloco.infra.entry import interrupted
    from noloco.infra.progress import Progress
    from noloco.llm_check.config import check_run_flags
    from noloco.llm_check.train import set_threads

    check_run_flags(SimpleNamespace(resume=resume, overwrite=overwrite, stop_after=stop_after, threads=threads))
    runs = plan(study)
    budget = budget_report(study)
    check_evaluation(study)
    started = time.perf_counter()
    folder = _open_study(out, study, resume, overwrite)
    out = Path(folder.path)
    try:
        set_threads(threads)
        results = {}
        with Progress(len(runs), "hdee study", unit="run", show=progress) as bar:
            for run in runs:
                result = _train(run, run.folder(out), resume, overwrite, stop_after)
                results[run.name] = result
                bar.update(1)
                final = result.get("final") or {}
                bar.note(f"{run.name}: val {final.get('val_loss_avg_model', float('nan')):.3f}")
        unfinished = [n for n, r in results.items() if not r.get("finished") and not r.get("diverged")]
        diverged = {n: r["diverged"]["message"] for n, r in results.items() if r.get("diverged")}
        report = {"schema": "hdee-study", "schema_version": SCHEMA_VERSION, "settings": study.as_dict(),
                  "rule": {"difficulty": "zlib (level 9) bits per byte of the training text; thirds by rank",
                           "width_factor": WIDTH_FACTOR, "compute_factor": COMPUTE_FACTOR}, "budget": budget, "unfinished": unfinished, "diverged": diverged}
        if unfinished or diverged:
            return report
        report.update(_evaluate(study, runs, results, out))
        report["wall_s"]["this_invocation"] = time.perf_counter() - started
        write_json(out / "hdee.json", report, indent=1)
        return report
    except KeyboardInterrupt as err:
        raise interrupted(err, "finished runs are kept; continue the study with --resume") from None
    finally:
        folder.close()


def _evaluate(study: Study, runs: list[Run], results: dict, out: Path) -> dict:
    import torch

    clock = time.perf_counter()
    names = evaluated(study)
    segments = {d: eval_segments(d, study) for d in names}
    per_seed = [evaluate_seed(study, [r for r in runs if r.seed == seed], out, segments) for seed in study.seeds]
    entries = list(per_seed[0]["losses"])
    per_domain = {e: {d: _summary([s["losses"][e][d] for s in per_seed]) for d in names} for e in entries}
    averages = {}
    for e in entries:
        for part, members in (("in_domain", study.domains), ("held_out", domains.HELD_OUT)):
            values = [np.mean([s["losses"][e][d] for d in members]) if all(s["losses"][e][d] is not None
                                                                           for d in members) else None
                      for s in per_seed]
            averages.setdefault(e, {})[part] = _summary(values)
    posterior = {c: {d: {"top_expert": [s["posterior"][c][d]["top_expert"] for s in per_seed],
                         **{k: _mean([s["posterior"][c][d][k] for s in per_seed])
                            for k in ("top_weight", "own_weight", "own_weight_last_byte")}} for d in names}
                 for c in per_seed[0]["posterior"]}
    first = next(iter(results.values()))
    base_params = study.model().n_params()
    comm = {c: communication(c, base_params, study.replicas, baseline_steps(study) if c in BASELINES else 0,
                             study.inner_steps) for c in study.configs}
    wall = {c: {str(seed): sum(results[r.name]["wall_s"] for r in runs if r.config == c and r.seed == seed)
                for seed in study.seeds} for c in study.configs}
    stats = [dict(r, role="held out" if r["held_out"] else ("train" if r["name"] in study.domains else "unused"))
             for r in domains.statistics()]
    groups = difficulty_groups(study.domains)
    for r in stats:
        r["group"] = groups.get(r["name"])
    return {"domains": stats, "evaluated": names, "per_domain": per_domain, "averages": averages,
            "posterior": posterior, "winners": _winners(study, per_seed, names), "communication": comm,
            "per_seed": [s["losses"] for s in per_seed],
            "corpus_sha256": first["corpus_sha256"], "python": first["python"], "torch": torch.__version__,
            "n_params_base": base_params, "wall_s": {"training": wall, "evaluation": time.perf_counter() - clock}}


# ----------------------------------------------------------------- text

LABELS = {"homogeneous": "homog.", "heterogeneous": "heterog.", "ddp": "ddp", "diloco": "diloco", "noloco": "noloco"}


def format_report(rep: dict) -> str:
    """The tables of docs/hdee.md from a report of :func:`run_study`."""
    s, b = rep["settings"], rep["budget"]
    lines = [f"budget {b['flops']:.4g} matmul FLOPs per configuration (K = {len(s['domains'])} experts x "
             f"{s['expert_steps']} steps x {b['step_flops_base']:.4g} FLOPs/step of the base model, width {s['width']}, "
             f"{s['layers']} layers, ctx {s['ctx']}, batch {s['batch']}); seeds {s['seeds']}",
             "  " + ", ".join(f"{c} {v['flops']:.6g} ({v['relative_to_budget']:+.2e})" for c, v in b["per_config"].items())]
    if "heterogeneous" in b["allocation"]:
        lines.append("heterogeneous experts: " + ", ".join(f"{a['domain']} ({a['group']}, width {a['width']}, "
                                                            f"{a['steps']} steps)" for a in b["allocation"]["heterogeneous"]))
    if b.get("baseline_steps"):
        lines.append(f"ddp / diloco / noloco: N = {s['replicas']}, {b['baseline_steps']} steps each, H = {s['inner_steps']}")
    if rep.get("unfinished"):
        return "\n".join(lines + [f"stopped: {len(rep['unfinished'])} runs unfinished (first: {rep['unfinished'][0]}); "
                                  f"continue with --resume"])
    if rep.get("diverged"):
        return "\n".join(lines + [f"diverged: {n}: {m}" for n, m in rep["diverged"].items()])
    configs = s["configs"]
    cols = [c for c in configs] + [f"{c}-uniform" for c in configs if c in ENSEMBLES]
    head = f"{'domain':<18}" + "".join(f"{(LABELS.get(c) or LABELS[c.split('-')[0]] + ' unif.'):>15}" for c in cols)
    lines += ["", "validation perplexity per byte (exp of the mean loss over seeds; ensembles: domain posterior)", head]
    for d in rep["evaluated"]:
        held = d in {r["name"] for r in rep["domains"] if r["held_out"]}
        win = rep["winners"][d]["best"]
        cells = "".join(f"{rep['per_domain'][c][d]['perplexity']:>14.3f}{'*' if c == win else ' '}" for c in cols)
        lines.append(f"{d + (' (held out)' if held else ''):<18}" + cells)
    for part in ("in_domain", "held_out"):
        lines.append(f"{part.replace('_', '-') + ' mean':<18}" + "".join(
            f"{math.exp(rep['averages'][c][part]['mean']):>14.3f} " for c in cols))
    lines += ["", "bytes sent per replica during training"]
    for c, v in rep["communication"].items():
        lines.append(f"  {c:<14} {v['bytes_per_replica']:>14.4g} B  ({v['events']} x {v['bytes_per_event']:.4g} B: "
                     f"{v['scheme']}; {v['seconds_internet']:.3g} s on the internet network of noloco comm)")
    wins = {}
    for d, w in rep["winners"].items():
        wins.setdefault(w["best"], []).append(d + ("" if w.get("clear") else "?"))
    lines += ["", "lowest perplexity (? : the margin to the runner-up is within 2 standard errors)"]
    lines += [f"  {c:<14} {', '.join(ds)}" for c, ds in wins.items()]
    return "\n".join(lines)


# ----------------------------------------------------------------- flags

_FLAGS = {
    "configs": (str, "what to train, comma-separated: " + ", ".join(CONFIGS) + " (default all)"),
    "domains": (str, "training domains, one expert each (default every training domain: "
                     + ", ".join(domains.TRAINING) + ")"),
    "seeds": (str, "seeds, comma-separated (default 0,1,2)"),
    "expert_steps": (int, f"steps of a homogeneous expert, a multiple of {EXPERT_UNIT}; sets the FLOP budget of every "
                          "configuration (default 800)"),
    "width": (int, "width of the base model (homogeneous experts and the baselines; default 64)"),
    "layers": (int, "transformer blocks (default 2)"), "heads": (int, "attention heads (default 4)"),
    "ctx": (int, "context length in bytes (default 64)"), "batch": (int, "windows per replica per step (default 8)"),
    "lr": (float, "peak learning rate of every run (cosine, warm-up over a tenth of the steps; default 3e-3)"),
    "replicas": (int, "replicas N of ddp, diloco and noloco (even; default 4)"),
    "inner_steps": (int, "inner steps H of diloco and noloco (default 25)"),
    "eval_windows": (int, "validation windows per domain (default 128)"),
    "segment": (int, "windows per evaluation segment: the bytes the domain posterior sees (default 4)"),
}


def add_arguments(parser) -> None:
    for name, (kind, text) in _FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help=text)
    parser.add_argument("--quick", action="store_true",
                        help="a tiny study (width 16, 10 expert steps, one seed): a smoke test; flags override it")
    parser.add_argument("--out", required=True, help="study folder: one run folder per run (seedS/CONFIG[/DOMAIN]), "
                                                     "study.json, hdee.json; one that holds a study needs --resume or "
                                                     "--overwrite")
    parser.add_argument("--resume", action="store_true", help="continue the study in OUT: finished runs are reused, "
                                                              "unfinished ones continue from their checkpoints; "
                                                              "--seeds may differ (seeds added or dropped)")
    parser.add_argument("--overwrite", action="store_true", help="replace the study in OUT")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop every run after this many of its outer steps, with a checkpoint (then --resume)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 on a shared CPU)")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the tables")


def study_from_args(args) -> Study:
    values = {**(QUICK if args.quick else {}),
              **{k: getattr(args, k) for k in _FLAGS if getattr(args, k, None) is not None}}
    return Study(**values)
