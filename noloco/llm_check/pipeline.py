"""One inner step and one evaluation of a pipelined model under torchrun: S x N ranks, rank
``s * N + k`` holding replica k of stage s (:class:`noloco.training.exchange.DistExchange`).

Every rank derives the whole step's routes from ``(seed, step)`` (:func:`noloco.llm_check.routing.route`),
so each knows, without a message, which microbatches it computes, where each comes from and
where it goes. Activations travel forward point-to-point to the next stage replica a microbatch
visits (past the stages it skips), gradients travel back the same way, each message one
microbatch tagged by its batch position. A stage waits for all its inputs, computes them as one
batch, and sends; sends complete at the end of the step, and every receive waits at most the
exchange's timeout, so a dead peer is a :class:`noloco.training.exchange.PeerError`, not a hang.

The arithmetic per microbatch is that of the batched form (:func:`noloco.llm_check.model.forward` with a
route); only the batches in which the stages compute differ (a skipped microbatch is not computed
here at all), so the two agree to rounding (tests/test_routing.py compares them to 1e-5).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from noloco.llm_check import data
from noloco.llm_check.model import run_stage
from noloco.llm_check.routing import route


class Pipeline:
    def __init__(self, cfg, ex, model, shards: list):
        self.cfg, self.ex, self.model, self.shards = cfg, ex, model, shards
        self.S, self.N = cfg.stages, cfg.replicas
        self.stage, self.replica = ex.stage, ex.replicas[0]

    def _windows(self, replica: int, step: int) -> np.ndarray:
        return data.batch(self.shards[replica], self.cfg.seed, replica, step, self.cfg.batch, self.cfg.ctx)

    def _neighbours(self, rt):
        """This rank's slots ``[(b, r)]`` (batch position, data replica) and, per slot, the rank its
        input comes from and the rank its output goes to (None at the first and last stage)."""
        s, k = self.stage, self.replica
        slots, sources, targets = [], [], []
        for b in range(self.cfg.batch):
            r = int(rt.who[s, k, b])
            if rt.skip[s, r, b]:
                continue
            visited = [t for t in range(self.S) if not rt.skip[t, r, b]]
            i = visited.index(s)
            rank = lambda t: self.ex.rank_of(t, int(rt.path[t, r, b]))
            slots.append((b, r))
            sources.append(rank(visited[i - 1]) if i > 0 else None)
            targets.append(rank(visited[i + 1]) if i + 1 < len(visited) else None)
        return slots, sources, targets

    def train_step(self, params: dict, step: int) -> torch.Tensor:
        """Forward and backward of inner step ``step``; gradients accumulate in ``params``. The loss of
        this replica (the last stage's; 0 on the other stages), shape (1,)."""
        cfg, ex = self.cfg, self.ex
        rt = route(cfg.seed, step, self.S, self.N, cfg.batch, cfg.routing, cfg.skip_prob)
        slots, sources, targets = self._neighbours(rt)
        T, C = cfg.ctx, cfg.width
        device = next(iter(params.values())).device
        dtype = next(iter(params.values())).dtype
        if not slots:  # every microbatch skipped this middle-stage replica: a zero gradient, as in the batched form
            for p in params.values():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            return torch.zeros(1, device=device)
        if self.stage == 0:
            x = torch.from_numpy(self._windows(self.replica, step)[:, :-1]).long().to(device)[None]
        else:
            inputs = ex.receive([(src, b) for (b, _), src in zip(slots, sources)], (T, C), dtype,
                                f"activations of inner step {step}")
            x = torch.stack(inputs)[None].requires_grad_(True)
        y = run_stage(params, self.stage, x, self.model)
        pending = []
        if self.stage == self.S - 1:
            rows = np.stack([self._windows(r, step)[b, 1:] for b, r in slots])
            target = torch.from_numpy(rows).long().to(device)
            loss = F.cross_entropy(y[0].reshape(-1, y.shape[-1]), target.reshape(-1))
            loss.backward()
            loss = loss.detach().reshape(1)
        else:
            pending += ex.send([(dst, b, y[0, i].detach()) for i, ((b, _), dst) in enumerate(zip(slots, targets))],
                               f"activations of inner step {step}")
            grads = ex.receive([(dst, b) for (b, _), dst in zip(slots, targets)], (T, C), dtype,
                               f"gradients of inner step {step}")
            y.backward(torch.stack(grads)[None])
            loss = torch.zeros(1, device=device)
        if self.stage > 0:
            pending += ex.send([(src, b, x.grad[0, i]) for i, ((b, _), src) in enumerate(zip(slots, sources))],
                               f"gradients of inner step {step}")
        ex.wait(pending, f"sends of inner step {step}")
        return loss

    @torch.no_grad()
    def evaluate(self, params: dict, windows: torch.Tensor, chunk: int) -> float:
        """Mean loss of the chain through replica k of every stage (a fixed path) on ``windows``
        (V, T + 1); meaningful on the last stage, NaN on the others."""
        ex, total = self.ex, 0.0
        k = self.replica
        for part in windows.split(chunk):
            if self.stage == 0:
                x = part[None, :, :-1]
            else:
                x = ex.receive([(ex.rank_of(self.stage - 1, k), 0)], (len(part), self.cfg.ctx, self.cfg.width),
                               next(iter(params.values())).dtype, "evaluation activations")[0][None]
            y = run_stage(params, self.stage, x, self.model)
            if self.stage < self.S - 1:
                ex.wait(ex.send([(ex.rank_of(self.stage + 1, k), 0, y[0])], "evaluation activations"),
                        "evaluation activations")
            else:
                total += F.cross_entropy(y[0].reshape(-1, y.shape[-1]), part[:, 1:].reshape(-1)).item() * len(part)
        return total / len(windows) if self.stage == self.S - 1 else float("nan")
