"""Pipeline stages, random routing and stage skipping: which replica of each stage a microbatch visits.

The GPT is cut into S consecutive stages (:func:`stage_units`), each with N replicas. At inner step
``step``, microbatch ``(r, b)`` (replica r's data, position b of its batch) starts at replica r of
stage 0, which reads that replica's data, and then visits replica ``path[s, r, b]`` of every later
stage s:

* ``fixed`` routing: ``path[s, r, b] = r``, replica r of every stage forms one chain (one model);
* ``random`` routing: for every stage s >= 1 and column b, an independent uniform permutation of the
  N replicas sends the N microbatches of that column to N different replicas, as the NoLoCo
  reference does per single-sample microbatch. Every stage replica thus processes exactly B
  microbatches per step, which keeps the batched tensors rectangular.

With ``skip_prob`` p each microbatch skips each middle stage (not the first, which embeds, nor the
last, which predicts) with probability p, independently: the stage's residual blocks are then the
identity for it and it visits no replica there.

Everything is a function of ``(seed, step)`` alone (numpy streams apart from the outer step's groups,
:func:`noloco.theory.partitions.partition`), so one process and torchrun route identically and a resumed run
continues the same routes. The outer step's groups of stage s are those of
``partition(seed, step, N, n, stream=s)``: stage 0 keeps the groups of a one-stage run.

Batched form (:meth:`Route.torch`): the activations entering stage s are held in *slot* order,
``A_s[k, b]`` being the microbatch that replica k of stage s processes in column b. Moving from
stage s-1 to stage s is one ``gather`` along the replica dimension with ``source[s][k, b] =
path[s-1, who[s][k, b], b]``, ``who[s][k, b]`` being the data replica of that microbatch. Gathers are
permutations, so autograd sends each gradient back to exactly the replica that computed it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from noloco.infra.errors import ConfigError
from noloco.theory.partitions import random_permutations
from noloco.theory.routing import ROUTINGS
#: numpy seed-sequence words that keep the routing and skip draws apart from the groups' [seed, step]
_ROUTE_STREAM, _SKIP_STREAM = 0x524F555445, 0x534B4950


@functools.lru_cache(maxsize=None)  # called for every stage of every forward pass
def stage_units(layers: int, stages: int) -> tuple[tuple, ...]:
    """The units of each stage: ``"embed"``, block indices and ``"head"`` (final norm and output
    projection), split as evenly as consecutive runs allow (``numpy.array_split`` of the L + 2 units).
    Needs 1 <= stages <= layers + 2."""
    if not 1 <= stages <= layers + 2:
        raise ConfigError(f"stages={stages} must be between 1 and layers + 2 = {layers + 2} (each stage needs one "
                          f"of: the embedding, a block, the head)")
    units = ["embed", *range(layers), "head"]
    bounds = np.cumsum([0] + [len(part) for part in np.array_split(np.arange(len(units)), stages)])
    return tuple(tuple(units[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))


def param_stage(name: str, layers: int, stages: int) -> int:
    """The stage holding parameter ``name`` of :func:`noloco.llm_check.model.param_shapes`."""
    unit = "embed" if name in ("wte", "wpe") else "head" if name.split(".")[0] in ("lnf", "head") \
        else int(name.split(".")[0][1:])
    return next(s for s, units in enumerate(stage_units(layers, stages)) if unit in units)


def middle_stages(stages: int) -> list[int]:
    """The stages a microbatch may skip, and an evaluation may remove: all but the first and last."""
    return list(range(1, stages - 1))


@dataclass(frozen=True)
class Route:
    """The routes of one inner step: ``path[s, r, b]`` the replica of stage s that microbatch (r, b)
    visits, ``skip[s, r, b]`` whether it skips stage s. Shapes (S, N, B)."""

    path: np.ndarray
    skip: np.ndarray

    @property
    def who(self) -> np.ndarray:
        """``who[s, k, b]``: the data replica whose microbatch replica k of stage s processes in column b."""
        S, N, B = self.path.shape
        who = np.empty_like(self.path)
        np.put_along_axis(who, self.path, np.broadcast_to(np.arange(N)[None, :, None], self.path.shape), axis=1)
        return who

    def torch(self, device=None):
        """Index tensors for the batched forward: ``source[s]`` (N, B) for s >= 1 (None at s = 0),
        ``skip[s]`` (N, B) bool in slot order or None where nothing skips stage s, and ``targets``
        (N, B): the data replica of each slot of the last stage."""
        import torch

        S = self.path.shape[0]
        who = self.who
        source = [None] + [torch.from_numpy(np.take_along_axis(self.path[s - 1], who[s], axis=0)).to(device)
                           for s in range(1, S)]
        skip = [torch.from_numpy(np.take_along_axis(self.skip[s], who[s], axis=0)).to(device)
                if self.skip[s].any() else None for s in range(S)]
        return TorchRoute(source, skip, torch.from_numpy(who[-1]).to(device))


@dataclass(frozen=True)
class TorchRoute:
    source: list
    skip: list
    targets: object


def check_skip_prob(skip_prob, stages: int) -> float:
    if isinstance(skip_prob, bool) or not isinstance(skip_prob, (int, float)) or not 0 <= skip_prob < 1:
        raise ConfigError(f"skip_prob={skip_prob!r} is not allowed; allowed: 0 <= skip_prob < 1")
    if skip_prob > 0 and not middle_stages(stages):
        raise ConfigError(f"skip_prob={skip_prob} needs a middle stage to skip: stages >= 3 (got {stages})")
    return float(skip_prob)


def route(seed: int, step: int, stages: int, replicas: int, batch: int, routing: str = "fixed",
          skip_prob: float = 0.0) -> Route:
    """The :class:`Route` of inner step ``step``; a function of ``(seed, step)`` and the shapes only."""
    if routing not in ROUTINGS:
        raise ConfigError(f"routing={routing!r} is not allowed; allowed: {', '.join(ROUTINGS)}")
    check_skip_prob(skip_prob, stages)
    S, N, B = stages, replicas, batch
    path = np.broadcast_to(np.arange(N)[None, :, None], (S, N, B)).copy()
    if routing == "random" and S > 1:
        rng = np.random.default_rng([seed, step, _ROUTE_STREAM])
        path[1:] = random_permutations(rng, (S - 1, B), N).transpose(0, 2, 1)  # (S-1, B, N) -> (S-1, N, B)
    skip = np.zeros((S, N, B), dtype=bool)
    middle = middle_stages(S)
    if skip_prob > 0:
        rng = np.random.default_rng([seed, step, _SKIP_STREAM])
        skip[middle] = rng.random((len(middle), N, B)) < skip_prob
    return Route(path, skip)
