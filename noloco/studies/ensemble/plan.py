"""The study's settings (:class:`Study`), its runs and their exact FLOP budget."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path


from noloco.infra.checks import check_at_least, check_choice, check_fields, check_integer, check_real
from noloco.infra.errors import ConfigError
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
