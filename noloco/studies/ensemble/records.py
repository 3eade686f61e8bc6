"""The study's report as typed records: what ``hdee.json`` holds and what ``noloco llm ensemble`` prints.

:func:`noloco.studies.ensemble.study.run_study` builds an :class:`EnsembleReport` and writes it with ``to_json``;
the tables read its attributes. Field names are the JSON keys and a record made in code writes its fields in
their declared order, so the file is what the study wrote before it was typed. Nothing here imports torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from noloco.infra.record import JsonRecord
from noloco.llm_check.domains import DomainSize
from noloco.studies.ensemble.communication import Communication
from noloco.studies.ensemble.plan import Budget, Study
from noloco.studies.reports import Estimate


@dataclass(frozen=True)
class Summary(Estimate):
    """A loss over seeds (nats per byte) with its perplexity: every key written, null where no seed has one."""

    OPTIONAL_KEYS = ()


@dataclass(frozen=True)
class Rule(JsonRecord):
    """How the domains' difficulty is measured and how far the chains' sizes and steps spread."""

    difficulty: str
    size_spread: float
    step_spread: float


@dataclass(frozen=True)
class DomainStat(DomainSize):
    """A domain of the corpus (the domain table's row, :class:`DomainSize`), its role in the study, tier and round."""

    OPTIONAL_KEYS = ()  # the study writes every domain's difficulty, null where it was not measured

    role: Optional[str] = None
    tier: Optional[int] = None
    round: Optional[int] = None


@dataclass(frozen=True)
class SeedPosterior:
    """One seed's domain posterior of an ensemble on a domain: the cached prior, the expert with the most mean
    weight and that weight, and the weight of the expert that trained on the domain (None: none did)."""

    experts: list
    cached_prior: list
    top_expert: str
    top_weight: float
    own_weight: Optional[float]


@dataclass(frozen=True)
class SeedEvaluation:
    """One seed's losses ``{entry: {domain: nats per byte}}`` and posteriors ``{ensemble: {domain: SeedPosterior}}``."""

    losses: dict
    posterior: dict


@dataclass(frozen=True)
class Posterior(JsonRecord):
    """An ensemble's domain posterior on a domain over seeds: each seed's top expert, the mean cached prior and
    the mean weights."""

    experts: list
    top_expert: list
    cached_prior: list
    top_weight: Optional[float]
    own_weight: Optional[float]


#: a winner's keys when it has a runner-up: the margin's three are written even where its se is null (one seed)
_PAIRED_WINNER = ("best", "second", "loss", "margin", "margin_se", "clear")


@dataclass(frozen=True)
class Winner(JsonRecord):
    """A domain's primary configuration with the lowest mean loss, the runner-up (None: one configuration) and
    their paired difference over seeds; clear when it is more than 2 se from 0."""

    OPTIONAL_KEYS = ("margin", "margin_se", "clear")

    best: str
    second: Optional[str]
    loss: dict
    margin: Optional[float] = None
    margin_se: Optional[float] = None
    clear: Optional[bool] = None

    @classmethod
    def paired(cls, best: str, second: str, loss: dict, margin: float, margin_se: Optional[float],
               clear: bool) -> "Winner":
        return cls(best, second, loss, margin, margin_se, clear, order=_PAIRED_WINNER)


@dataclass(frozen=True)
class AgainstHomogeneous(JsonRecord):
    """A heterogeneous ensemble's paired loss difference to the homogeneous one mixed the same way, per domain and
    over each part of the domains; where it is lower, and lower or higher by more than 2 standard errors."""

    NESTED = {"per_domain": (dict, Estimate), "mean_over": (dict, Estimate)}

    against: str
    per_domain: dict
    lower_in: list
    lower_beyond_2se_in: list
    higher_beyond_2se_in: list
    mean_over: dict


@dataclass(frozen=True)
class WallTimes(JsonRecord):
    """Seconds: training ``{seed: {role: s}}``, the evaluation, and this invocation of the study."""

    training: dict
    evaluation: float
    this_invocation: Optional[float] = None


@dataclass(frozen=True)
class EnsembleReport(JsonRecord):
    """``hdee.json``: the domain-expert ensembles against the single-model methods at equal training FLOPs. A study
    stopped early (``unfinished``) or diverged reports its plan only: the evaluation's fields are None."""

    NESTED = {"settings": Study, "rule": Rule, "budget": Budget, "domains": (list, DomainStat),
              "per_domain": (dict, (dict, Summary)), "averages": (dict, (dict, Summary)),
              "posterior": (dict, (dict, Posterior)), "winners": (dict, Winner),
              "against_homogeneous": (dict, AgainstHomogeneous), "communication": (dict, Communication),
              "wall_s": WallTimes}
    OPTIONAL_KEYS = ("domains", "evaluated", "parts", "per_domain", "averages", "posterior", "winners",
                     "against_homogeneous", "communication", "per_seed", "corpus_sha256", "python", "torch",
                     "n_params_base", "wall_s")

    schema: str
    schema_version: int
    settings: Study
    rule: Rule
    budget: Budget
    unfinished: list
    diverged: dict
    domains: Optional[list] = None
    evaluated: Optional[list] = None
    parts: Optional[dict] = None
    per_domain: Optional[dict] = None
    averages: Optional[dict] = None
    posterior: Optional[dict] = None
    winners: Optional[dict] = None
    against_homogeneous: Optional[dict] = None
    communication: Optional[dict] = None
    per_seed: Optional[list] = None
    corpus_sha256: Optional[str] = None
    python: Optional[str] = None
    torch: Optional[str] = None
    n_params_base: Optional[int] = None
    wall_s: Optional[WallTimes] = None


@dataclass(frozen=True)
class StudyFile(JsonRecord):
    """``study.json``: the settings a study folder was started with, as written (compared on ``--resume``)."""

    schema_version: int
    settings: dict
