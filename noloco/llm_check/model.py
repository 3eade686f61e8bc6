"""A compact GPT written with a leading replica dimension.

Every parameter has shape ``(R, ...)``: R replicas of the same architecture are one
set of tensors, and a forward pass on tokens of shape ``(R, B, T)`` runs all of them
with batched matrix products. Attention folds R into the batch of one
``scaled_dot_product_attention`` call, which is why this form beats ``vmap`` over an
``nn.Module`` on CPU (SDPA has no batching rule there). Slicing the parameters
``p[r:r+1]`` gives the same model for one replica, which is how the per-replica loop
and the distributed mode (one replica per rank) run the same code.

Pre-LayerNorm blocks, causal self-attention, GELU MLP, learned positions, output
head tied to the token embedding. Cut into ``stages`` > 1 pipeline stages
(:mod:`noloco.llm_check.routing`), the head gets its own matrix ``head.w`` (initialised equal to
``wte``, so the untrained model is the same function): the embedding lives in the first
stage and the head in the last, and under random routing they belong to different replicas.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from noloco.llm_check.architecture import HEAD_W, LNF_B, LNF_W, WPE, WTE, GPTConfig, param_shapes  # noqa: F401 - the model's names


def init_params(cfg: GPTConfig, replicas: int, seed: int, dtype=torch.float32, device="cpu") -> dict:
    """GPT-2 initialisation, identical for every replica (drawn once, then repeated)."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in param_shapes(cfg).items():
        if name == HEAD_W:  # untied head: the embedding's values, no new draw
            params[name] = params[WTE].clone()
            continue
        if name.endswith(".b"):
            p = torch.zeros(shape, dtype=torch.float64)
        elif name.endswith("ln1.w") or name.endswith("ln2.w") or name == LNF_W:
            p = torch.ones(shape, dtype=torch.float64)
        else:
            std = 0.02 / math.sqrt(2 * cfg.layers) if name.endswith(("proj.w", "fc2.w")) else 0.02
            p = torch.randn(shape, generator=gen, dtype=torch.float64) * std
        params[name] = p.to(dtype).unsqueeze(0).repeat(replicas, *([1] * len(shape))).to(device)
    return params


def _layer_norm(x, w, b):
    # per-replica affine: w, b are (R, C); x is (R, B, T, C)
    return F.layer_norm(x, x.shape[-1:]) * w[:, None, None] + b[:, None, None]


def _linear(x, w, b):
    R, B, T, C = x.shape
    return torch.baddbmm(b[:, None], x.reshape(R, B * T, C), w).view(R, B, T, -1)


def _embed(params: dict, idx: torch.Tensor, cfg: GPTConfig) -> torch.Tensor:
    R, B, T = idx.shape
    x = torch.gather(params[WTE], 1, idx.reshape(R, B * T, 1).expand(R, B * T, cfg.width)).view(R, B, T, cfg.width)
    return x + params[WPE][:, None, :T]


def _block(params: dict, i: int, x: torch.Tensor, cfg: GPTConfig) -> torch.Tensor:
    R, B, T, C = x.shape
    H = cfg.heads
    p = lambda k: params[f"h{i}.{k}"]
    q, k, v = _linear(_layer_norm(x, p("ln1.w"), p("ln1.b")), p("qkv.w"), p("qkv.b")).split(C, dim=-1)
    heads = lambda t: t.reshape(R * B, T, H, C // H).transpose(1, 2)
    y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
    x = x + _linear(y.transpose(1, 2).reshape(R, B, T, C), p("proj.w"), p("proj.b"))
    h = F.gelu(_linear(_layer_norm(x, p("ln2.w"), p("ln2.b")), p("fc.w"), p("fc.b")))
    return x + _linear(h, p("fc2.w"), p("fc2.b"))


def _head(params: dict, x: torch.Tensor, cfg: GPTConfig) -> torch.Tensor:
    R, B, T, C = x.shape
    x = _layer_norm(x, params[LNF_W], params[LNF_B])
    w = params[WTE if cfg.tied else HEAD_W]
    return torch.bmm(x.reshape(R, B * T, C), w.transpose(1, 2)).view(R, B, T, -1)


def run_stage(params: dict, stage: int, x: torch.Tensor, cfg: GPTConfig) -> torch.Tensor:
    """Stage ``stage`` of the model on its input (tokens for stage 0, activations after)."""
    from noloco.llm_check.routing import stage_units

    for unit in stage_units(cfg.layers, cfg.stages)[stage]:
        x = (_embed(params, x, cfg) if unit == "embed" else _head(params, x, cfg) if unit == "head"
             else _block(params, unit, x, cfg))
    return x


def forward(params: dict, idx: torch.Tensor, cfg: GPTConfig, route=None, removed=()) -> torch.Tensor:
    """Logits (R, B, T, vocab) for tokens ``idx`` (R, B, T).

    ``route`` (a :class:`noloco.llm_check.routing.TorchRoute`): before each stage s >= 1 the activations
    are gathered along the replica dimension into that stage's slot order, and a microbatch that
    skips stage s keeps its input there; the logits are then in the last stage's slot order.
    Without it replica r of every stage forms one chain. ``removed``: middle stages left out (an
    evaluation of a model run with fewer stages)."""
    x = idx
    for s in range(cfg.stages):
        if s in removed:
            continue
        if route is not None and s > 0:
            index = route.source[s].view(*route.source[s].shape, *([1] * (x.dim() - 2))).expand_as(x)
            x = torch.gather(x, 0, index)
        y = run_stage(params, s, x, cfg)
        if route is not None and route.skip[s] is not None:
            y = torch.where(route.skip[s][:, :, None, None], x, y)
        x = y
    return x


def losses(params: dict, windows: torch.Tensor, cfg: GPTConfig, route=None, removed=()) -> torch.Tensor:
    """Mean next-byte cross-entropy (nats) of each replica, shape (R,), for windows (R, B, T + 1);
    with ``route``, of each replica of the last stage over the microbatches it predicted."""
    idx, target = windows[..., :-1], windows[..., 1:]
    logits = forward(params, idx, cfg, route, removed)
    if route is not None:
        target = torch.gather(target, 0, route.targets[:, :, None].expand_as(target))
    R = idx.shape[0]
    return F.cross_entropy(logits.reshape(-1, cfg.vocab), target.reshape(-1), reduction="none").view(R, -1).mean(1)
