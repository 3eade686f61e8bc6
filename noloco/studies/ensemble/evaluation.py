"""Per-domain evaluation: every model's byte log-probabilities, the ensembles mixed by the domain posterior
and uniformly."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from noloco.infra.errors import ConfigError
from noloco.llm_check import domains
from noloco.llm_check.architecture import GPTConfig
from noloco.studies.ensemble.plan import ENSEMBLES, Run, Study


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


def check_evaluation_memory(study: Study, models: int, max_memory=None) -> None:
    """Refuse (exit 3, before any training) an evaluation whose arrays exceed the memory budget: every evaluated
    domain's segments and, per model, their byte log-probabilities in float64 (and the logits of one chunk)."""
    from noloco.infra import budget

    count = max(1, study.eval_windows // study.segment)
    per_domain = count * (study.segment * study.ctx + 1) * (1 + 8 * models + 4 * 256)
    budget.require(per_domain * len(evaluated(study)), budget.resolve(max_memory),
                   f"the evaluation of {len(evaluated(study))} domains x {study.eval_windows} windows x {models} models",
                   "give fewer --eval-windows or a smaller --ctx")


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
    from noloco.llm_check.trainer import Trainer

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
