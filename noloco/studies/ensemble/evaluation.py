"""Per-domain evaluation: every model's byte log-probabilities, the ensembles mixed by the domain posterior (with
the fixed prior or the prior cached from the evaluated domain's first segments) and by the uniform average."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from noloco.infra.errors import ConfigError
from noloco.llm_check import domains
from noloco.llm_check.architecture import GPTConfig
from noloco.studies.ensemble.plan import BASELINES, ENSEMBLES, Run, Study, baseline_config, chains_of
from noloco.studies.ensemble.records import DomainStat, SeedEvaluation, SeedPosterior


def log_posterior(logp: np.ndarray, log_prior: np.ndarray) -> np.ndarray:
    """log w_k(t) for experts' byte log-probabilities ``logp`` (K, S, L): the posterior of expert k's domain
    given the bytes of its segment before t, ``w_k(t) ∝ prior_k Π_{s<t} p_k(x_s)``; sums to 1 over k."""
    before = np.concatenate([np.zeros_like(logp[..., :1]), np.cumsum(logp, axis=-1)[..., :-1]], axis=-1)
    a = np.asarray(log_prior, dtype=float)[:, None, None] + before
    return a - _logsumexp(a)


def cached_log_prior(logp: np.ndarray, decay: float) -> np.ndarray:
    """log of the prior adapted to a domain from its first segments' byte log-probabilities ``logp`` (K, N, L) under
    the K experts, as HDEE and branch-train-merge cache it: starting from equal weights 1, after segment n
    (n = 0, 1, ...) the weights become ``decay**(n + 1) x weights + posterior_n``, the posterior of the
    experts given the whole segment n under the current weights as the prior; normalised at the end. The
    weights of the earlier segments fade, so the prior follows the evidence of the latest segments."""
    weights = np.zeros(logp.shape[0])  # log of the unnormalised weights
    for n in range(logp.shape[1]):
        joint = weights + logp[:, n].sum(-1)
        posterior = joint - _logsumexp(joint[:, None])[0]
        weights = np.logaddexp((n + 1) * math.log(decay) + weights, posterior)
    return weights - _logsumexp(weights[:, None])[0]


def mixture_logprob(logp: np.ndarray, log_weights: np.ndarray) -> np.ndarray:
    """log Σ_k w_k p_k of each byte, (S, L)."""
    return _logsumexp(log_weights + logp)[0]


def _logsumexp(a: np.ndarray) -> np.ndarray:
    top = a.max(axis=0, keepdims=True)
    return top + np.log(np.exp(a - top).sum(axis=0, keepdims=True))


def domain_rows() -> list[DomainStat]:
    """The domain table's rows (:func:`noloco.llm_check.domains.sizes`) as records."""
    return [DomainStat(**vars(r)) for r in domains.sizes()]


def evaluated(study: Study) -> list:
    """The domains evaluated: the study's training domains, then the held-out ones."""
    return list(study.domains) + list(domains.HELD_OUT)


def check_evaluation(study: Study) -> None:
    """A ConfigError, before any work, when a segment does not fit in an evaluated domain's validation text."""
    val = {r.name: r.val_bytes for r in domain_rows()}
    short = min(evaluated(study), key=lambda d: val[d])
    length = study.segment * study.ctx
    if val[short] < length + 2:
        raise ConfigError(f"segment x ctx = {study.segment} x {study.ctx} = {length} bytes is longer than the "
                          f"{val[short]} bytes of {short}'s validation text; lower --segment or --ctx")


def check_evaluation_memory(study: Study, models: int, max_memory=None) -> None:
    """Refuse (exit 3, before any training) an evaluation whose arrays exceed the memory budget: every evaluated
    domain's segments and, per model, their byte log-probabilities in float64 (and the logits of one chunk)."""
    from noloco.infra import budget

    count = study.segments_per_domain
    per_domain = count * (study.segment * study.ctx + 1) * (1 + 8 * models + 4 * 256)
    budget.require(per_domain * len(evaluated(study)), budget.resolve(max_memory),
                   f"the evaluation of {len(evaluated(study))} domains x {study.eval_windows} windows x {models} models",
                   "give fewer --eval-windows or a smaller --ctx")


def eval_segments(domain: str, study: Study) -> np.ndarray:
    """(segments, segment x ctx + 1) bytes of the domain's validation text, evenly spaced through it (that
    they fit: :func:`check_evaluation`)."""
    from noloco.llm_check import data

    count = study.segments_per_domain
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
    from noloco.llm_check.trainer import Trainer

    trainer = Trainer(run.train, where, progress=False)
    Lifecycle(trainer, run_folder(where, lock=False)).load()
    return trainer.phi, trainer.model


def expert_label(final: Run) -> str:
    """A final expert by the domains of its chain, in order: ``encodings+concurrency+formats``."""
    return "+".join(r.domain for r in final.lineage if r.domain)


def seed_model(study: Study, seed: int) -> Run:
    """The medium seed model (the base model on the mixture), evaluated alone: what the rounds start from."""
    return chains_of(study, "homogeneous", seed)[0].lineage[0]


def evaluate_seed(study: Study, seed: int, out: Path, segments: dict) -> SeedEvaluation:
    """The losses and the ensembles' posteriors of one seed's runs. Entries:
    each ensemble mixed by the domain posterior with the cached prior (the ensemble's name: HDEE's rule),
    ``-fixed-prior`` (the prior: the shares of the training bytes of the experts' last domains), ``-uniform`` (the plain average
    of the experts' probabilities), ``-own`` (the expert whose chain trained on the domain; others None);
    ``seed-model`` (the medium seed model alone); ``ddp``, ``diloco``, ``noloco`` (replica-mean model) and
    ``-replicas`` (the mean of the replicas' own losses)."""
    import torch

    sizes = {r.name: r.train_bytes for r in domain_rows()}
    logps = {}  # run key -> {domain: (S, L)}: a model two ensembles share is evaluated once

    def logp_of(run: Run) -> dict:
        if run.key not in logps:
            phi, model = _load(run, run.folder(out))
            logps[run.key] = {d: byte_logprobs(phi, model, seg, study.ctx)[0] for d, seg in segments.items()}
        return logps[run.key]

    losses, posterior = {}, {}
    for config in study.configs:
        if config in ENSEMBLES:
            finals = chains_of(study, config, seed)
            labels = [expert_label(f) for f in finals]
            last = [f.domain for f in finals]
            log_fixed = np.log([sizes[e] for e in last]) - math.log(sum(sizes[e] for e in last))
            uniform = np.full((len(finals), 1, 1), -math.log(len(finals)))
            for d in segments:
                logp = np.stack([logp_of(f)[d] for f in finals])
                log_cached = cached_log_prior(logp[:, :study.prior_segments], study.prior_decay)
                log_w = log_posterior(logp, log_cached)
                owner = [k for k, f in enumerate(finals) if d in {r.domain for r in f.lineage}]
                entries = {config: log_w, f"{config}-fixed-prior": log_posterior(logp, log_fixed),
                           f"{config}-uniform": uniform}
                for name, weights in entries.items():
                    losses.setdefault(name, {})[d] = -float(mixture_logprob(logp, weights).mean())
                losses.setdefault(f"{config}-own", {})[d] = -float(logp[owner[0]].mean()) if owner else None
                mean_w = np.exp(log_w).mean(axis=(1, 2))
                posterior.setdefault(config, {})[d] = SeedPosterior(
                    labels, np.exp(log_cached).tolist(), labels[int(mean_w.argmax())], float(mean_w.max()),
                    float(mean_w[owner[0]]) if owner else None)
    run = seed_model(study, seed)
    for d in segments:
        losses.setdefault("seed-model", {})[d] = -float(logp_of(run)[d].mean())
    for config in (c for c in study.configs if c in BASELINES):
        run = Run(config, seed, baseline_config(study, config, seed), "baseline")
        phi, model = _load(run, run.folder(out))
        stacked = {k: torch.cat([v, v.double().mean(0, keepdim=True).to(v.dtype)]) for k, v in phi.items()}
        for d, seg in segments.items():
            logp = byte_logprobs(stacked, model, seg, study.ctx)
            losses.setdefault(config, {})[d] = -float(logp[-1].mean())
            losses.setdefault(f"{config}-replicas", {})[d] = -float(logp[:-1].mean(axis=(1, 2)).mean())
    return SeedEvaluation(losses, posterior)
