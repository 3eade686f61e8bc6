"""The GPT's architecture without torch: its sizes and the shape of every parameter.

:mod:`noloco.llm_check.config` sizes runs (parameter counts, the memory estimate) before torch is
imported; :mod:`noloco.llm_check.model` builds the tensors from the same shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 256
    ctx: int = 64
    layers: int = 2
    heads: int = 4
    width: int = 64
    stages: int = 1

    @property
    def tied(self) -> bool:
        """Whether the output head is the token embedding (one stage only)."""
        return self.stages == 1

    def n_params(self) -> int:
        return sum(math.prod(s) for s in param_shapes(self).values())

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6 per parameter plus attention (as in nanoGPT)."""
        return 6 * self.n_params() + 12 * self.layers * self.width * self.ctx


def param_shapes(cfg: GPTConfig) -> dict[str, tuple]:
    C = cfg.width
    shapes = {"wte": (cfg.vocab, C), "wpe": (cfg.ctx, C)}
    for i in range(cfg.layers):
        shapes.update({
            f"h{i}.ln1.w": (C,), f"h{i}.ln1.b": (C,),
            f"h{i}.qkv.w": (C, 3 * C), f"h{i}.qkv.b": (3 * C,),
            f"h{i}.proj.w": (C, C), f"h{i}.proj.b": (C,),
            f"h{i}.ln2.w": (C,), f"h{i}.ln2.b": (C,),
            f"h{i}.fc.w": (C, 4 * C), f"h{i}.fc.b": (4 * C,),
            f"h{i}.fc2.w": (4 * C, C), f"h{i}.fc2.b": (C,),
        })
    shapes.update({"lnf.w": (C,), "lnf.b": (C,)})
    if not cfg.tied:
        shapes["head.w"] = (cfg.vocab, C)
    return shapes
