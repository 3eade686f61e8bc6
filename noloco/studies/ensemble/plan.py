"""The study's settings (:class:`Study`), its runs (seed models, chains of experts, baselines) and their exact
FLOP budget."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


from noloco.infra.checks import check_at_least, check_choice, check_fields, check_integer, check_real
from noloco.infra.errors import ConfigError
from noloco.infra.record import JsonRecord
from noloco.llm_check import domains
from noloco.llm_check.architecture import GPTConfig
from noloco.llm_check.config import TrainConfig, build


#: the ensembles: HDEE's two forms and the homogeneous ensemble they are compared with, then the project's
#: extension (not one of HDEE's forms: size by domain with every expert given the same FLOPs, so the
#: smaller experts of the easier domains train longer and the larger ones of the harder domains shorter)
ENSEMBLES = ("homogeneous", "size-heterogeneous", "step-heterogeneous", "combined")
BASELINES = ("ddp", "diloco", "noloco")
CONFIGS = ENSEMBLES + BASELINES
#: how far the smallest and the largest chain differ from the medium one, as a fraction: the MLP's hidden
#: units of size-heterogeneous experts (3C, 4C, 5C) and the steps of step-heterogeneous ones (0.75, 1, 1.25 x)
SIZE_SPREAD = 0.25
STEP_SPREAD = 0.25
#: an expert's inner steps per outer step: its step counts are multiples of it (checkpoints, --stop-after)
EXPERT_UNIT = 5
#: the experts' cosine ends at this fraction of their peak learning rate (a continued training, not a fresh one)
EXPERT_MIN_LR_FRAC = 0.5
#: validation windows of each run's own evaluations (metrics.jsonl)
RUN_VAL_WINDOWS = 32
BYTES_PER_VALUE = 4  # float32 on the wire
#: --quick: three training domains, one round, a tiny model, two evaluation segments per domain
QUICK = dict(domains=("encodings", "docs", "web"), rounds=1, width=16, layers=1, heads=2, ctx=16, batch=2,
             seed_steps=10, expert_steps=20, replicas=2, inner_steps=5, eval_windows=4, segment=2, prior_segments=1,
             seeds=(0,))


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


def _steps(name: str, value) -> int:
    return check_integer(name, value, f"a multiple of {EXPERT_UNIT}, >= {EXPERT_UNIT}",
                         lambda v: v >= EXPERT_UNIT and v % EXPERT_UNIT == 0)


@dataclass(frozen=True)
class Study(JsonRecord):
    """The settings of one study (every field validated at construction, ConfigError naming it); its JSON is the
    report's and study.json's ``settings``."""

    configs: tuple = CONFIGS
    domains: tuple = domains.TRAINING   # the training mixture (seed phase, baselines); the rounds draw from it
    seeds: tuple = (0, 1, 2)
    rounds: int = 3                     # branch-train-merge rounds: each chain trains on a new domain per round
    experts: int = 3                    # chains, one per difficulty tier: the final ensemble's experts
    seed_steps: int = 600               # steps of each seed model on the training mixture
    expert_steps: int = 200             # steps of a medium expert per round
    width: int = 64
    layers: int = 2
    heads: int = 4
    ctx: int = 64
    batch: int = 8                      # windows per replica per step, every run
    lr: float = 3e-3                    # peak learning rate of the seed models and the baselines
    expert_lr: float = 1e-3             # peak learning rate of the experts (continued from their parent)
    replicas: int = 4                   # N of ddp, diloco, noloco
    inner_steps: int = 25               # H of diloco and noloco (ddp: steps between evaluations)
    eval_windows: int = 128             # validation windows per domain
    segment: int = 4                    # windows per segment: the posterior's context
    prior_segments: int = 8             # first segments of an evaluated domain that the cached prior is taken from
    prior_decay: float = 0.3            # the cached prior's decay

    def __post_init__(self):
        check_fields(self, {
            "configs": (_names, CONFIGS), "domains": (_names, domains.TRAINING, 2), "seeds": (_seeds,),
            "rounds": (check_at_least, 1), "experts": (check_at_least, 1),
            "seed_steps": (_steps,), "expert_steps": (_steps,),
            "layers": (check_at_least, 1), "heads": (check_at_least, 1), "ctx": (check_at_least, 2),
            "batch": (check_at_least, 1), "lr": (check_real, "0 < lr < inf", lambda v: 0 < v < math.inf),
            "expert_lr": (check_real, "0 < expert_lr < inf", lambda v: 0 < v < math.inf),
            "replicas": (check_integer, "an even integer >= 2 (noloco's pairs)", lambda v: v >= 2 and v % 2 == 0),
            "inner_steps": (check_at_least, 1), "eval_windows": (check_at_least, 1), "segment": (check_at_least, 1),
            "prior_segments": (check_at_least, 1),
            "prior_decay": (check_real, "0 < prior_decay < 1", lambda v: 0 < v < 1),
        })
        check_integer("width", self.width, f"an integer >= heads = {self.heads} divisible by it",
                      lambda v: v >= self.heads and v % self.heads == 0)
        if self.rounds * self.experts > len(self.domains):
            raise ConfigError(f"rounds x experts = {self.rounds} x {self.experts} needs as many training domains; "
                              f"{len(self.domains)} given (--domains); lower --rounds or --experts")
        if self.prior_segments > self.segments_per_domain:
            raise ConfigError(f"prior_segments={self.prior_segments} is more than the {self.segments_per_domain} "
                              f"segments evaluated per domain (eval_windows / segment); lower it")

    @property
    def segments_per_domain(self) -> int:
        return max(1, self.eval_windows // self.segment)

    @property
    def mixture(self) -> str:
        """The training mixture's domain spec (the seed models and the baselines train on it)."""
        return domains.ALL_TRAINING if self.domains == domains.TRAINING else ",".join(self.domains)

    def model(self, mlp_hidden: int | None = None) -> GPTConfig:
        return GPTConfig(ctx=self.ctx, layers=self.layers, heads=self.heads, width=self.width,
                         mlp_hidden=mlp_hidden or 4 * self.width)

    def step_flops(self, mlp_hidden: int | None = None) -> int:
        """Matmul FLOPs of one step of one replica of the model with ``mlp_hidden`` (default the base's 4C)."""
        return self.model(mlp_hidden).train_step_flops(self.batch)

    @property
    def chain_steps(self) -> int:
        """Steps of a medium chain: its seed model's and its experts' (in base-model steps)."""
        return self.seed_steps + self.rounds * self.expert_steps

    @property
    def budget(self) -> int:
        """B = experts x (seed_steps + rounds x expert_steps) x F(base): every configuration's training FLOPs,
        each chain charged the seed model it starts from."""
        return self.experts * self.chain_steps * self.step_flops()


# ----------------------------------------------------------------- the plan

def _symmetric(spread: float, k: int, count: int, unit: int) -> int:
    """Chain k's offset from the medium one: ``spread`` x (2k / (count - 1) - 1) in multiples of ``unit``,
    rounded half away from zero, so chain k's and chain count-1-k's offsets cancel exactly."""
    if 2 * k > count - 1:  # the upper half mirrors the lower one, so rounding cannot break the symmetry
        return -_symmetric(spread, count - 1 - k, count, unit)
    if 2 * k == count - 1:
        return 0
    return -math.floor(spread * (1 - 2 * k / (count - 1)) / unit + 0.5) * unit


def tiers(study: Study) -> list[list[str]]:
    """The training domains ranked by difficulty (zlib bits per byte of their training text, ties by name) and cut
    into ``experts`` tiers, easiest first; within a tier the order of ``study.domains``."""
    ranked = sorted(study.domains, key=lambda n: (domains.difficulty(n), n))
    tier_of = {n: study.experts * i // len(ranked) for i, n in enumerate(ranked)}
    return [[d for d in study.domains if tier_of[d] == k] for k in range(study.experts)]


def round_domains(study: Study) -> list[list[str]]:
    """``[round][chain]``: the domain chain k trains on in round r, the r-th of tier k."""
    groups = tiers(study)
    if min(len(g) for g in groups) < study.rounds:
        raise ConfigError(f"rounds={study.rounds}: a difficulty tier holds {min(len(g) for g in groups)} domains "
                          f"(training domains {len(study.domains)} in {study.experts} tiers); lower --rounds or "
                          f"--experts, or give more --domains")
    return [[groups[k][r] for k in range(study.experts)] for r in range(study.rounds)]


def chain_sizes(study: Study, kind: str) -> list[int]:
    """Hidden units of the MLP of each chain (easiest tier first): the base's 4C, or for the size-heterogeneous
    ensemble and the extension 4C (1 + SIZE_SPREAD (2k / (E - 1) - 1)), rounded symmetrically."""
    base = 4 * study.width
    if kind not in ("size-heterogeneous", "combined"):
        return [base] * study.experts
    return [base + _symmetric(SIZE_SPREAD * base, k, study.experts, 1) for k in range(study.experts)]


@dataclass(frozen=True)
class ChainRound(JsonRecord):
    """One round of a chain: the domain its expert trains on and its steps."""

    domain: str
    steps: int


@dataclass(frozen=True)
class Chain(JsonRecord):
    """One chain of an ensemble: its MLP, its seed model's steps, its rounds and its FLOPs (the seed model's and
    the experts'); the budget's allocation adds the model's parameters."""

    NESTED = {"rounds": (list, ChainRound)}
    OPTIONAL_KEYS = ("n_params",)

    chain: int
    mlp_hidden: int
    seed_steps: int
    rounds: list
    flops: int
    n_params: Optional[int] = None


def allocation(study: Study, kind: str) -> list[Chain]:
    """The chains of an ensemble, easiest tier first (flops: the chain's seed model and experts).

    * homogeneous: every expert the base model, ``expert_steps`` per round;
    * size-heterogeneous: the MLP by tier (:func:`chain_sizes`), ``expert_steps`` per round;
    * step-heterogeneous: the base model, ``expert_steps`` (1 + STEP_SPREAD (2k / (E - 1) - 1)) per round, the
      harder tiers more;
    * combined (the extension): the MLP by tier, and per round the steps the medium expert's FLOPs buy at that
      size (fewer for the larger experts), in units of EXPERT_UNIT rounded down, then units added greedily
      (largest remainder first) while the ensemble stays within B.

    Seed models: every chain's has ``seed_steps`` at its chain's size. The two published forms and the
    homogeneous ensemble spend exactly B (their offsets cancel); the extension at most B and less than one
    unit of its cheapest expert below."""
    check_choice("kind", kind, ENSEMBLES)
    sizes = chain_sizes(study, kind)
    plan_domains = round_domains(study)
    steps = []  # [chain][round]
    for k, mlp in enumerate(sizes):
        if kind == "step-heterogeneous":
            one = study.expert_steps + _symmetric(STEP_SPREAD * study.expert_steps, k, study.experts, EXPERT_UNIT)
        elif kind == "combined":
            one = study.expert_steps * study.step_flops() / study.step_flops(mlp)
        else:
            one = study.expert_steps
        steps.append([one] * study.rounds)
    if kind == "combined":
        steps = _fill(study, sizes, steps)
    chains = [Chain(chain=k, mlp_hidden=mlp, seed_steps=study.seed_steps,
                    rounds=[ChainRound(plan_domains[r][k], s) for r, s in enumerate(steps[k])],
                    flops=(study.seed_steps + sum(steps[k])) * study.step_flops(mlp)) for k, mlp in enumerate(sizes)]
    spent = sum(c.flops for c in chains)
    if spent > study.budget or (kind != "combined" and spent != study.budget):
        raise ConfigError(f"the {kind} ensemble's {spent:.6g} FLOPs miss the budget {study.budget:.6g} "
                          f"(--expert-steps {study.expert_steps} buys no step of an expert?); raise --expert-steps")
    return chains


@dataclass
class _Cell:
    """One expert's steps while :func:`_fill` adds units: whole units, the remainder rounded off, a unit's FLOPs."""

    units: int
    rest: float
    unit: int


def _fill(study: Study, sizes: list[int], steps: list[list[float]]) -> list[list[int]]:
    """The extension's steps (``[chain][round]``): each round's real-valued steps rounded down to units, then
    units added greedily, largest remainder first, while the ensemble's FLOPs stay within B."""
    cells = []
    for mlp, row in zip(sizes, steps):
        unit = EXPERT_UNIT * study.step_flops(mlp)
        cells.append([_Cell(max(1, int(s / EXPERT_UNIT)), s / EXPERT_UNIT - int(s / EXPERT_UNIT), unit) for s in row])
    flat = [x for row in cells for x in row]
    spent = sum(study.seed_steps * study.step_flops(mlp) for mlp in sizes) + sum(x.units * x.unit for x in flat)
    order = sorted(flat, key=lambda x: -x.rest)
    while spent <= study.budget - min(x.unit for x in flat):  # a unit still fits: largest remainder first
        fits = next(x for x in order if spent + x.unit <= study.budget)
        fits.units, spent = fits.units + 1, spent + fits.unit
        order.remove(fits)
        order.append(fits)
    return [[x.units * EXPERT_UNIT for x in row] for row in cells]


def baseline_steps(study: Study) -> int:
    """Steps of each replica of ddp / diloco / noloco: whole outer steps of ``inner_steps`` within B."""
    per_outer = study.replicas * study.inner_steps * study.step_flops()
    outer = study.budget // per_outer
    if outer < 1:
        raise ConfigError(f"the budget {study.budget:.3g} FLOPs buys no outer step of {study.replicas} replicas x "
                          f"{study.inner_steps} steps; raise --expert-steps or --seed-steps, or lower --replicas "
                          f"or --inner-steps")
    return outer * study.inner_steps


def _warmup(steps: int) -> int:
    return max(1, steps // 10)


@dataclass(frozen=True)
class Run:
    """One training run: a seed model (``role`` "seed"), an expert continued from ``parent`` on ``domain``
    ("expert"), or a baseline ("baseline"). ``key`` is its folder under the seed's: an expert's key spells its
    whole lineage, so a run two ensembles share (the medium chain) is one folder, trained once."""

    key: str
    seed: int
    train: TrainConfig
    role: str
    domain: str | None = None
    parent: "Run | None" = None

    @property
    def flops(self) -> int:
        t = self.train
        return t.model().train_step_flops(t.batch) * t.replicas * t.total_inner_steps

    def folder(self, out: Path) -> Path:
        return Path(out) / f"seed{self.seed}" / self.key

    @property
    def name(self) -> str:
        return f"seed {self.seed} {self.key}"

    @property
    def lineage(self) -> list:
        """The runs from the seed model to this one."""
        return (self.parent.lineage if self.parent else []) + [self]


def _one_replica(study: Study, domain: str, mlp: int, steps: int, seed: int, expert: bool) -> TrainConfig:
    """A seed model's (``expert`` False: the mixture, peak ``lr``) or an expert's run: one replica, no outer step."""
    outer = steps // EXPERT_UNIT
    return build(None, "ddp", replicas=1, domain=domain, width=study.width, mlp_hidden=mlp, layers=study.layers,
                 heads=study.heads, ctx=study.ctx, batch=study.batch, lr=study.expert_lr if expert else study.lr,
                 min_lr_frac=EXPERT_MIN_LR_FRAC if expert else 0.1, inner_steps=EXPERT_UNIT, outer_steps=outer, warmup=_warmup(steps),
                 eval_every=max(1, outer // 4), val_windows=RUN_VAL_WINDOWS, seed=seed)


def baseline_config(study: Study, method: str, seed: int) -> TrainConfig:
    steps = baseline_steps(study)
    outer = steps // study.inner_steps
    return build(None, method, replicas=study.replicas, domain=study.mixture, width=study.width,
                 layers=study.layers, heads=study.heads, ctx=study.ctx, batch=study.batch, lr=study.lr,
                 inner_steps=study.inner_steps, outer_steps=outer, warmup=_warmup(steps),
                 eval_every=max(1, outer // 4), val_windows=RUN_VAL_WINDOWS, seed=seed)


def chains_of(study: Study, kind: str, seed: int) -> list[Run]:
    """The final expert of each chain of the ensemble ``kind`` for ``seed`` (their lineages: the seed model, then
    one expert per round, each continued from the one before)."""
    finals = []
    for c in allocation(study, kind):
        key = f"experts/mlp{c.mlp_hidden}_mixture{c.seed_steps}"
        run = Run(key, seed, _one_replica(study, study.mixture, c.mlp_hidden, c.seed_steps, seed, False), "seed")
        for r in c.rounds:
            key += f"_{r.domain}{r.steps}"
            run = Run(key, seed, _one_replica(study, r.domain, c.mlp_hidden, r.steps, seed, True),
                      "expert", r.domain, run)
        finals.append(run)
    return finals


def plan(study: Study) -> list[Run]:
    """Every run of the study once, seed by seed, each after its parent (all validated first)."""
    runs = {}
    for seed in study.seeds:
        for config in study.configs:
            if config in ENSEMBLES:
                for final in chains_of(study, config, seed):
                    for run in final.lineage:
                        runs.setdefault((seed, run.key), run)
            else:
                runs[(seed, config)] = Run(config, seed, baseline_config(study, config, seed), "baseline")
    return list(runs.values())


def ensemble_flops(study: Study, kind: str) -> int:
    """An ensemble's training FLOPs counted from the runs it trains: every chain's lineage, a seed model that
    several chains start from charged to each of them."""
    return sum(run.flops for final in chains_of(study, kind, study.seeds[0]) for run in final.lineage)


@dataclass(frozen=True)
class ConfigFlops(JsonRecord):
    """A configuration's training FLOPs (one seed) and how far they are from the budget, as a fraction."""

    flops: int
    relative_to_budget: float


@dataclass(frozen=True)
class Budget(JsonRecord):
    """The budget B, each configuration's FLOPs, the tiers and rounds, each ensemble's chains and the baselines'
    steps (None without a baseline)."""

    NESTED = {"per_config": (dict, ConfigFlops), "allocation": (dict, (list, Chain))}

    flops: int
    step_flops_base: int
    counting: str
    per_config: dict
    tiers: list
    rounds: list
    allocation: dict
    baseline_steps: Optional[int]


def budget_report(study: Study) -> Budget:
    """The budget, each configuration's FLOPs (one seed) and the allocation of each ensemble."""
    flops = {c: ensemble_flops(study, c) if c in ENSEMBLES else study.replicas * baseline_steps(study)
             * study.step_flops() for c in study.configs}
    return Budget(
        flops=study.budget, step_flops_base=study.step_flops(),
        counting="matmul FLOPs of forward and backward (3 x forward), attention included, elementwise work "
                 "excluded: GPTConfig.train_step_flops; an ensemble: each chain's seed model and experts",
        per_config={c: ConfigFlops(f, f / study.budget - 1) for c, f in flops.items()},
        tiers=tiers(study), rounds=round_domains(study),
        allocation={kind: [dataclasses.replace(c, n_params=study.model(c.mlp_hidden).n_params())
                           for c in allocation(study, kind)] for kind in ENSEMBLES if kind in study.configs},
        baseline_steps=baseline_steps(study) if set(BASELINES) & set(study.configs) else None)
