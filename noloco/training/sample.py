"""A seeded sample of coordinates, the same on every rank, and the sampling error of what the meter
estimates from it.

Across torch.distributed ranks (one replica per rank) the meter's inner products are sums over replicas
and coordinates; all-reducing the weights to form them would cost a model's worth of traffic per outer
step. Instead every rank draws the same ``K`` coordinates of each tensor from a seed (uniform, with
replacement, fixed for the whole run so that lag-1 and running-sum statistics follow the same coordinates),
and one all-gather of a buffer of ``2 K`` numbers per tensor brings every replica's sampled phi and progress
to every rank. The meter (:class:`noloco.training.measure.SpreadMeter`) then runs on the (N, K) samples.

Its estimates are ratios of per-coordinate means. With, for coordinate j over the N replicas,
``b_j = sum_i z_ij^2``, ``a_j = sum_i p_ij z_ij`` and ``e_j = sum_i (p_ij + c z_ij)^2`` (z, p the deviations
of phi and progress from the replica mean), the sampled ``spread = mean(b) / N``, ``c = -mean(a) / mean(b)``
and ``s2 = mean(e) / (N - 1)`` have standard errors (iid sampling; the ratio by the delta method)::

    se(spread) = sd(b) / (N sqrt(K)),   se(c) = sd(a + c b) / (mean(b) sqrt(K)),   se(s2) = sd(e) / ((N - 1) sqrt(K))

so the relative error falls as 1 / sqrt(K) times the coefficient of variation of the per-coordinate values
(sqrt(2 / (N - 1)) for Gaussian deviations: about 0.025 at K = 1024, N = 4). A tensor with at most K
coordinates is taken whole (its error is 0). rho and the drift come from the same coordinates; their error
is of the same order and not stated per row. ``tests/test_observer.py`` checks the stated errors against
the full measurement of the same weights.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from noloco.advice.run_rows import SampleErrors
from noloco.infra.errors import ConfigError
from noloco.training.measure import Columns, per_column, segment_sums

#: coordinates sampled per tensor by default (docs/own_run.md: error; docs/performance.md: cost)
DEFAULT_SAMPLE = 1024


class CoordinateSample:
    """``K`` coordinates of each tensor, drawn from ``seed``: the same indices wherever the same names and
    shapes are given (every rank of a run). ``shapes``: ``{name: shape of one replica's tensor}``."""

    def __init__(self, shapes: dict, per_tensor: int = DEFAULT_SAMPLE, seed: int = 0):
        if isinstance(per_tensor, bool) or not isinstance(per_tensor, int) or per_tensor < 2:
            raise ConfigError(f"sample={per_tensor!r} is out of range; allowed: an integer >= 2 (coordinates per "
                             f"tensor)")
        self.per_tensor, self.seed = per_tensor, seed
        self.numel = {name: math.prod(shape) for name, shape in shapes.items()}
        self.index: dict[str, torch.Tensor | None] = {}
        self._on_device: dict = {}  # (names, their offsets, device) -> index on that device (:meth:`_device_index`)
        gen = torch.Generator().manual_seed(seed)
        for name, numel in self.numel.items():  # the names' order is the model's: the same on every rank
            self.index[name] = (None if numel <= per_tensor else
                                torch.randint(numel, (per_tensor,), generator=gen).sort().values)

    def exact(self, name: str) -> bool:
        return self.index[name] is None

    def take(self, tensors: dict, stacked: bool) -> dict:
        """The sampled coordinates of each tensor, float64: ``(K,)`` of one replica's tensor, or ``(N, K)`` of
        stacked ``(N, ...)`` ones (views of one :meth:`gather`)."""
        return self.unpack(self.gather([tensors], stacked), 1)[0][0]

    def gather(self, parts: list, stacked: bool, extra: torch.Tensor | None = None) -> torch.Tensor:
        """The sampled coordinates of every tensor of each part (dicts of tensors) in one new float64 tensor on
        their device, in order, ``extra`` (float64, the same leading shape) last: ``(N, total)`` of stacked
        ``(N, ...)`` tensors, ``(total,)`` of one replica's. One ``index_select`` per run of consecutive tensors
        that are views of one flat buffer (the outer optimizer's phi and progress are), its index kept on the
        device: on a GPU a handful of kernels, not a few per tensor. :meth:`unpack` reads it back."""
        taken = [run.index_select(-1, index).to(torch.float64)
                 for tensors in parts for run, index in self._runs(tensors, stacked)]
        taken += [extra] if extra is not None else []
        return taken[0] if len(taken) == 1 else torch.cat(taken, -1)

    def unpack(self, whole: torch.Tensor, parts: int) -> tuple[list, torch.Tensor]:
        """:meth:`gather`'s layout read back (or every rank's, stacked): ``{name: view (..., K)}`` of each of
        ``parts`` parts, and the columns after them (the ``extra``)."""
        out, at = [], 0
        for _ in range(parts):
            part = {}
            for name, k in self.sizes().items():
                part[name] = whole[..., at:at + k]
                at += k
            out.append(part)
        return out, whole[..., at:]

    def _runs(self, tensors: dict, stacked: bool) -> list:
        """``(span, index)`` pairs whose ``span.index_select(-1, index)`` give, in the names' order, the sampled
        coordinates of every tensor; consecutive tensors laid out in one storage with the same row stride share
        a span (a strided view over them), any other is its own."""
        runs = []  # [key, names, flat views]
        for name in self.index:
            t = tensors[name].detach()
            flat = t.reshape(t.shape[0], -1) if stacked else t.reshape(-1)
            key = None
            if type(flat) is torch.Tensor and flat.layout == torch.strided and flat.stride(-1) == 1:
                key = (flat.untyped_storage().data_ptr(), flat.dtype, flat.device,
                       (flat.shape[0], flat.stride(0)) if stacked else None)
            if key is not None and runs and runs[-1][0] == key:
                runs[-1][1].append(name)
                runs[-1][2].append(flat)
            else:
                runs.append([key, [name], [flat]])
        out = []
        for _, names, flats in runs:
            first = flats[0]
            if len(flats) == 1:
                out.append((first, self._device_index((names[0],), (0,), first.device)))
                continue
            offsets = [f.storage_offset() for f in flats]
            start = min(offsets)
            width = max(o + f.shape[-1] for o, f in zip(offsets, flats)) - start
            span = first.as_strided((first.shape[0], width) if stacked else (width,), first.stride(), start)
            out.append((span, self._device_index(tuple(names), tuple(o - start for o in offsets), first.device)))
        return out

    def _device_index(self, names: tuple, shifts: tuple, device: torch.device) -> torch.Tensor:
        """The columns of a span that hold the samples of ``names`` (each shifted by its offset in the span),
        made and copied to ``device`` once."""
        key = (names, shifts, device)
        index = self._on_device.get(key)
        if index is None:
            if len(self._on_device) >= 64:  # layouts seen come and go only when a caller rebuilds its buffers
                self._on_device.clear()
            index = torch.cat([(self.index[n] if self.index[n] is not None else torch.arange(self.numel[n])) + s
                               for n, s in zip(names, shifts)]).to(device)
            self._on_device[key] = index
        return index

    def sizes(self) -> dict:
        return {name: self.numel[name] if idx is None else len(idx) for name, idx in self.index.items()}


def standard_errors(columns: Columns, exact=lambda name: False) -> dict:
    """The standard errors of the meter's estimates of each tensor from its per-coordinate sums (module docstring;
    :class:`noloco.training.measure.Columns` of (N, K) samples), ``{name: SampleErrors}``; zeros where
    ``exact(name)`` (the tensor was taken whole). Every tensor at once: one pass per moment."""
    N, K = columns.replicas, columns.sizes
    device = columns.b.device
    values = torch.stack((columns.b, columns.a + per_column(columns.c, K, device) * columns.b, columns.e))
    starts = columns.starts
    mean = segment_sums(values, starts) / K
    dev = values - per_column(mean, K, device)
    with np.errstate(all="ignore"):  # one coordinate: no spread over coordinates (NaN, as torch's std)
        sd = np.sqrt(segment_sums(dev * dev, starts) / (K - 1))
        root = np.sqrt(K)
        se = (sd[0] / (N * root), np.where(mean[0] > 0, sd[1] / (mean[0] * root), 0.0), sd[2] / ((N - 1) * root))
    return {name: SampleErrors(spread=0.0, c=0.0, s2=0.0) if exact(name) else SampleErrors(spread=sp, c=cs, s2=s2)
            for name, sp, cs, s2 in zip(columns.names, *(x.tolist() for x in se))}


def update_alignment(prev_phi: torch.Tensor, prev_progress: torch.Tensor, phi: torch.Tensor) -> float | None:
    """``sum_i <phi_i,t+1 - phi_i,t, Delta_i,t> / sum_i |Delta_i,t|^2`` over the sampled coordinates of every
    tensor ((N, K) side by side): how far the outer step moved each replica along its own progress. The outer
    step's beta term contributes ``beta sum_G |sum_(i in G) Delta_i|^2 / (n sum_i |Delta_i|^2) >= 0`` exactly (a
    sum of squares over the groups), the pull gamma (mean_G phi - phi_i) lines up with a progress that restores
    (-c z) and the momentum carries earlier progress: with the right sign it is positive, with the
    pseudo-gradient's sign flipped it is negative. None where no progress was made."""
    num, den = float(((phi - prev_phi) * prev_progress).sum()), float((prev_progress * prev_progress).sum())
    return num / den if den > 0 else None
