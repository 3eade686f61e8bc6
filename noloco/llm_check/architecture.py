"""The GPT's architecture without torch: its sizes and the shape of every parameter.

:mod:`noloco.llm_check.config` sizes runs (parameter counts, the memory estimate) before torch is
imported; :mod:`noloco.llm_check.model` builds the tensors from the same shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: the names of the parameters outside the blocks (a block's are ``h{i}.<name>``): the model's tensor map keys
WTE, WPE, LNF_W, LNF_B, HEAD_W = "wte", "wpe", "lnf.w", "lnf.b", "head.w"


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 256
    ctx: int = 64
    layers: int = 2
    heads: int = 4
    width: int = 64
    stages: int = 1
    mlp_hidden: int | None = None  # hidden units of each block's MLP; None: 4 x width

    @property
    def mlp(self) -> int:
        """Hidden units of each block's MLP."""
        return 4 * self.width if self.mlp_hidden is None else self.mlp_hidden

    @property
    def tied(self) -> bool:
        """Whether the output head is the token embedding (one stage only)."""
        return self.stages == 1

    def n_params(self) -> int:
        return sum(math.prod(s) for s in param_shapes(self).values())

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6 per parameter plus attention (as in nanoGPT)."""
        return 6 * self.n_params() + 12 * self.layers * self.width * self.ctx

    def forward_flops_per_token(self) -> int:
        """Matmul FLOPs (a multiply-add counts 2) of the forward pass per token, from the shapes below: in
        each block the projections qkv (C x 3C), proj (C x C), fc (C x M) and fc2 (M x C), together
        8 C^2 + 4 C M (24 C^2 at the default M = 4C), and attention's two products Q K^T and A V over the full T x T scores (the masked half
        included, as the math backend computes it), 4 T C; then the output head (C x V), 2 C V. Not
        counted: embedding lookups, biases, norms, GELU, softmax, the loss and the optimiser (elementwise
        work, O(C) per token)."""
        C, M = self.width, self.mlp
        return self.layers * (8 * C * C + 4 * C * M + 4 * self.ctx * C) + 2 * C * self.vocab

    def train_step_flops(self, batch: int) -> int:
        """Matmul FLOPs of one training step of one replica on ``batch`` windows of ``ctx`` tokens: the
        forward pass and the backward pass, which is twice the forward (each product's gradient with
        respect to both operands; no product has a constant operand, the tokens enter by lookup).
        ``torch.utils.flop_counter`` gives the same number under the math attention backend
        (tests/test_hdee.py)."""
        return 3 * batch * self.ctx * self.forward_flops_per_token()


def param_shapes(cfg: GPTConfig) -> dict[str, tuple]:
    C, M = cfg.width, cfg.mlp
    shapes = {WTE: (cfg.vocab, C), WPE: (cfg.ctx, C)}
    for i in range(cfg.layers):
        shapes.update({
            f"h{i}.ln1.w": (C,), f"h{i}.ln1.b": (C,),
            f"h{i}.qkv.w": (C, 3 * C), f"h{i}.qkv.b": (3 * C,),
            f"h{i}.proj.w": (C, C), f"h{i}.proj.b": (C,),
            f"h{i}.ln2.w": (C,), f"h{i}.ln2.b": (C,),
            f"h{i}.fc.w": (C, M), f"h{i}.fc.b": (M,),
            f"h{i}.fc2.w": (M, C), f"h{i}.fc2.b": (C,),
        })
    shapes.update({LNF_W: (C,), LNF_B: (C,)})
    if not cfg.tied:
        shapes[HEAD_W] = (cfg.vocab, C)
    return shapes
