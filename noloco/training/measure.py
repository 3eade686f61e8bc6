"""The outer theory's inputs, measured inside a run at every outer step.

:mod:`noloco.theory.exchangeable` models one coordinate of replica i at outer step t as::

    Delta_i,t = -c * y_i,t + d_i + eps_i,t,    eps AR(1): Var s2, lag-1 correlation rho,
                                                d_i fixed (variance drift_var over replicas)

with y the outer weights phi (about an unknown optimum) and Delta = theta - phi the progress of
the inner phase. Only deviations over replicas are observable (the optimum and the replica mean
cancel), so :class:`SpreadMeter` works with, per coordinate,

    z_i = phi_i - mean_j phi_j,      p_i = Delta_i - mean_j Delta_j,

which the model makes ``p = -c z + (d + eps) deviation``. Every inner product <a, b> below is a
sum over the group's coordinates and all N replicas, accumulated in float64; "theory units"
divide it by ``numel * (N - 1)``, which undoes the factor (1 - 1/N) that a deviation over
replicas takes off a per-replica variance (E z^2 = (1 - 1/N) S_yy in the theory). With
``norm = numel * (N - 1)`` and t = 1, 2, ... the outer steps this meter has seen:

==============  =====================================================================
``spread``      <z, z> / (numel * N): E z^2 per coordinate, the unit of weight_std^2
``progress_var`` <p, p> / norm
``c``           -<p, z> / <z, z> (0 while z = 0): the pooled regression of the progress on
                the replica's deviation. Consistent for c when the residual d + eps is
                uncorrelated with z (rho = 0, no drift); otherwise it measures
                c - E[z (d + eps)] / E[z^2] (tests/test_predict.py checks both statements)
``s2``          <r, r> / norm with the residual r = p + c z: the total residual variance
                (noise and drift: s2_noise + drift_var in the model)
``lag1_cov``    <r_t, r_t-1> / norm (None at t = 1)
``rho``         lag1_cov / sqrt(s2_t s2_t-1): each replica's residual correlated with its own
                residual one outer step earlier (None at t = 1); in the model
                (rho s2_noise + drift_var) / (s2_noise + drift_var)
``sum_var``     <R_t, R_t> / norm with R_t = r_1 + ... + r_t each replica's running residual sum;
                in the model t^2 drift_var + s2_noise G_t(rho_noise),
                G_t(rho) = t + 2 sum_{k<t} (t - k) rho^k (the variance of a sum of t stationary
                AR(1) terms over s2, exact, not the large-t form t (1 + rho) / (1 - rho))
``drift_var``   the D that solves sum_var = t^2 D + (v - D) G_t((a - D) / (v - D)), with v and a
                the running means of s2 and lag1_cov: the persistent per-replica part after the
                noise's own contribution to the running sum is taken out (None when no D solves
                it, and at t <= 2, where every D does: sum_var = 2 v + 2 a identically; negative
                when the residual is less persistent than an AR(1) with its lag-1 correlation)
``s2_noise``,   v - D and (a - D) / (v - D): the AR(1) noise once the drift is taken out
``rho_noise``
==============  =====================================================================

Cost per outer step: a handful of elementwise passes and two float64 buffers the size of the
stacked tensors (the last residual, for rho, and the running residual sum, for the drift); one
buffer cannot give both. The tensors are measured side by side, as the columns of one (N, M)
buffer of up to :data:`CHUNK` numbers at a time: one operation per statistic for all of them, the
per-tensor sums by one segmented sum, the drift solved for every group at once. Only the replicas
of one process are seen: in torchrun mode (one replica per rank) nothing is measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import torch

from noloco.advice.run_rows import GroupInputs
from noloco.theory.exchangeable import ar1_sum_factor

#: keys of one group's entry in :meth:`SpreadMeter.row`
ROW_KEYS = ("numel", "spread", "progress_var", "c", "s2", "lag1_cov", "rho", "sum_var", "drift_var", "s2_noise",
            "rho_noise")
#: numbers (N x the columns) measured in one pass, whole groups, a group larger than this alone: small enough that
#: a pass's float64 buffers stay in the CPU's cache (one pass over a whole 1 M-number model took twice the time)
CHUNK = 1 << 16


def segment_sums(x: torch.Tensor, starts: np.ndarray) -> np.ndarray:
    """The sums of ``x``'s last axis over the consecutive non-empty segments that begin at ``starts``, in
    float64 on the host: ``(..., M)`` to ``(..., len(starts))``. On the CPU numpy's pairwise sum, one call for
    every segment; on a device one segmented reduction, then one copy."""
    if x.device.type == "cpu":
        return np.add.reduceat(x.numpy(), starts, axis=-1)
    lengths = torch.as_tensor(np.diff(np.append(starts, x.shape[-1])), device=x.device)
    return torch.segment_reduce(x, "sum", lengths=lengths.expand(*x.shape[:-1], -1), axis=x.dim() - 1).cpu().numpy()


def offsets(sizes) -> np.ndarray:
    """Where each of consecutive segments of ``sizes`` begins: ``[0, s0, s0 + s1, ...]``."""
    return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)


def per_column(values, sizes: np.ndarray, device) -> torch.Tensor:
    """Each tensor's ``values`` (last axis, one per tensor) repeated over its ``sizes`` columns, on ``device``."""
    return torch.as_tensor(values, device=device).repeat_interleave(
        torch.as_tensor(sizes, device=device), dim=-1, output_size=int(sizes.sum()))


def _sum_factors(t: int, rho: np.ndarray, check: bool = True) -> np.ndarray:
    """:func:`ar1_sum_factor` of each rho: the closed form where it is accurate, the exact sum elsewhere (under
    the caller's ``np.errstate``; ``check=False``: no rho is near 1)."""
    off = 1 - rho
    closed = t * (1 + rho) / off - 2 * rho * (1 - rho ** t) / (off * off)
    if check:
        near = ~(off * off * t > 1e-5)
        if near.any():
            closed[near] = ar1_sum_factor(t, rho[near])
    return closed


def solve_drifts(t: int, v, a, q, iterations: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`solve_drift` for arrays ``v``, ``a`` and ``q`` (one entry per group) at once: one bisection, each
    entry stopped where it has converged (so each is what the scalar form gives); NaN where no D solves it."""
    v, a, q = (np.array(x, dtype=float, ndmin=1) for x in (v, a, q))
    out = [np.full(v.shape, np.nan) for _ in range(3)]
    ok = np.isfinite(v) & np.isfinite(a) & np.isfinite(q) & (v > 0) & (a < v)
    if t < 3 or not ok.any():  # at t = 2 every D solves it: the root found was the rounding's
        return tuple(out)
    v, a, q = v[ok], a[ok], q[ok]
    with np.errstate(all="ignore"):
        highest = (a + v) / (2 * v)  # rho at D = -v; it falls as D grows
        check = not ((1 - highest) ** 2 * t > 1e-5).all()

        def excess(D):
            u = v - D
            return t * t * D + u * _sum_factors(t, (a - D) / u, check) - q

        lo, hi = -v, (a + v) / 2 - 1e-12 * v
        solved = (excess(lo) <= 0) & (0 <= excess(hi))
        active, tol = solved.copy(), 1e-14 * v
        for _ in range(iterations):
            if not active.any():
                break
            mid = 0.5 * (lo + hi)
            up = excess(mid) > 0
            hi = np.where(active & up, mid, hi)
            lo = np.where(active & ~up, mid, lo)
            active &= hi - lo > tol
        D = np.where(solved, 0.5 * (lo + hi), np.nan)
        for full, part in zip(out, (D, v - D, (a - D) / (v - D))):
            full[ok] = part
    return tuple(out)


def solve_drift(t: int, v: float, a: float, q: float, iterations: int = 200):
    """``(drift_var, s2_noise, rho_noise)`` from the running means ``v`` (residual variance) and
    ``a`` (lag-1 covariance) and the running-sum second moment ``q`` after ``t`` steps, all in
    theory units: the root D of ``t^2 D + (v - D) G_t((a - D) / (v - D)) = q`` on
    ``-v <= D < (a + v) / 2`` (rho_noise > -1). ``(None, None, None)`` when there is none, or t <= 2."""
    D, s2n, rhon = (float(x[0]) for x in solve_drifts(t, v, a, q, iterations))
    return (None, None, None) if math.isnan(D) else (D, s2n, rhon)


@dataclass(frozen=True)
class Columns:
    """Per coordinate (summed over the N replicas) what the sampling errors read
    (:func:`noloco.training.sample.standard_errors`): ``b = sum_i z^2``, ``a = sum_i p z`` and ``e = sum_i r^2``
    with ``r = p + c z``, of each tensor in ``names``, their ``sizes`` columns side by side; ``c`` the c of each
    tensor's group."""

    names: list
    sizes: np.ndarray
    c: np.ndarray
    b: torch.Tensor
    a: torch.Tensor
    e: torch.Tensor
    replicas: int

    @property
    def starts(self) -> np.ndarray:
        return offsets(self.sizes)


class _Group:
    """Running state of one group of tensors."""

    def __init__(self):
        self.prev: dict[str, torch.Tensor] = {}   # last residual per tensor
        self.total: dict[str, torch.Tensor] = {}  # running residual sum per tensor
        self.steps = 0
        self.last_rr = 0.0
        self.sum_v = 0.0
        self.sum_a = 0.0
        self.count_a = 0
        self.row: GroupInputs | None = None  # the last step's estimates


class SpreadMeter:
    """Measures c, s2, rho and the drift per group of tensors, once per outer step.

    ``update(phi, progress)`` takes the stacked (N, ...) outer weights and the progress
    theta - phi of one process holding all N replicas, before the outer step. ``group_of``
    maps a tensor name to its group (default: every tensor is its own group).
    """

    def __init__(self, replicas: int, group_of: Callable[[str], str] | None = None,
                 buffer_dtype: torch.dtype = torch.float64):
        if replicas < 2:
            raise ValueError(f"replicas={replicas!r}: a spread needs at least 2 replicas in this process")
        self.replicas = replicas
        self.group_of = group_of or (lambda name: name)
        self.buffer_dtype = buffer_dtype
        self.groups: dict[str, _Group] = {}
        self.steps = 0
        self.columns: Columns | None = None  # the last step's, where :meth:`measure` was asked for them
        self._buffers: dict = {}  # a chunk's names -> its (prev, total) (N, M) buffers, the groups' tensors views

    @torch.no_grad()
    def update(self, phi: Mapping[str, torch.Tensor], progress: Mapping[str, torch.Tensor]) -> dict:
        """:meth:`measure`, and the step's :meth:`row`."""
        self.measure(phi, progress)
        return self.row()

    @torch.no_grad()
    def measure(self, phi: Mapping[str, torch.Tensor], progress: Mapping[str, torch.Tensor],
                columns: bool = False) -> dict[str, GroupInputs]:
        """The estimates of each group (:meth:`latest`) after this outer step's stacked phi and progress;
        ``columns``: also every coordinate's sums, in ``self.columns`` (what the sampling errors read)."""
        N = self.replicas
        members: dict[str, list[str]] = {}
        width: dict[str, int] = {}
        for name in phi:
            if phi[name].shape[0] != N or progress[name].shape != phi[name].shape:
                raise ValueError(f"{name}: expected stacked ({N}, ...) phi and progress of one shape, got "
                                 f"{tuple(phi[name].shape)} and {tuple(progress[name].shape)}")
            gname = self.group_of(name)
            members.setdefault(gname, []).append(name)
            width[gname] = width.get(gname, 0) + phi[name].numel() // N
        chunks, size = [[]], 0
        for gname in members:  # whole groups, in order, a chunk closed once it holds CHUNK numbers
            chunks[-1].append(gname)
            size += width[gname]
            if N * size >= CHUNK:
                chunks.append([])
                size = 0
        buffers, self._buffers = self._buffers, {}
        parts = [self._measure(chunk, members, phi, progress, columns, buffers) for chunk in chunks if chunk]
        self._estimate(*([x for stats, _ in parts for x in stats[k]] for k in range(9)))  # the drift: one solve
        cols = [c for _, c in parts]
        self.columns = None if not columns else cols[0] if len(cols) == 1 else Columns(
            [n for c in cols for n in c.names], np.concatenate([c.sizes for c in cols]),
            np.concatenate([c.c for c in cols]), *(torch.cat([getattr(c, k) for c in cols]) for k in "bae"), N)
        self.steps += 1
        return self.latest()

    def _measure(self, gnames: list, members: dict, phi, progress, columns: bool, buffers: dict) -> tuple:
        """One chunk of whole groups: its tensors as the columns of (N, M) float64 buffers, one pass each; what
        :meth:`_estimate` reads of its groups (lists), and its :class:`Columns` (or None)."""
        N = self.replicas
        names = [n for g in gnames for n in members[g]]
        counts = [len(members[g]) for g in gnames]
        sizes = np.array([phi[n].numel() // N for n in names], dtype=np.int64)
        starts, first = offsets(sizes), offsets(counts)  # each tensor's first column, each group's first tensor
        M, device = int(sizes.sum()), phi[names[0]].device

        def joined(tensors):  # the replica deviations, (N, M) float64: one copy in, centred in place
            x = torch.cat([tensors[n].detach().reshape(N, -1) for n in names], 1,
                          out=torch.empty(N, M, dtype=torch.float64, device=device))
            return x.sub_(x.mean(0, keepdim=True))

        z, p = joined(phi), joined(progress)
        b, a = (z * z).sum(0), (p * z).sum(0)
        zz, pz, pp = np.add.reduceat(segment_sums(torch.stack((b, a, (p * p).sum(0))), starts), first, axis=1)
        with np.errstate(all="ignore"):
            c = np.where(zz > 0, -pz / zz, 0.0)
        rr = np.maximum(pp + 2 * c * pz + c * c * zz, 0.0)  # <p + c z, p + c z>
        c_of = np.repeat(c, counts)  # each tensor's group's c
        r = p.add_(z * per_column(c_of, sizes, device))  # the residual p + c z, in p's place
        groups = [self.groups.setdefault(g, _Group()) for g in gnames]
        key = tuple(names)
        prev, total = self._buffers[key] = buffers.get(key) or self._join_state(names, groups, counts, phi, M, device)
        ra_c = (r * prev.to(torch.float64)).sum(0)  # 0 at a group's first step (its buffers start at 0)
        total += r.to(self.buffer_dtype)
        prev.copy_(r)
        whole = total.to(torch.float64)
        ra, qq = np.add.reduceat(segment_sums(torch.stack((ra_c, (whole * whole).sum(0))), starts), first, axis=1)
        stats = (groups, np.add.reduceat(sizes, first).tolist(), *(x.tolist() for x in (zz, pz, pp, c, rr, ra, qq)))
        return stats, Columns(names, sizes, c_of, b, a, (r * r).sum(0), N) if columns else None

    def _join_state(self, names, groups, counts, phi, M, device) -> tuple:
        """A chunk's (prev, total) buffers: the groups' own tensors (zeros where a group starts), copied in,
        and the groups' tensors made views of them (a checkpoint saves each storage once)."""
        N, at = self.replicas, 0
        prev, total = (torch.zeros(N, M, dtype=self.buffer_dtype, device=device) for _ in range(2))
        owners = [g for g, k in zip(groups, counts) for _ in range(k)]
        for name, g in zip(names, owners):
            k = phi[name].numel() // N
            for buf, own in ((prev, g.prev), (total, g.total)):
                view = buf[:, at:at + k]
                if name in own:
                    view.copy_(own[name].reshape(N, -1))
                own[name] = view.view(phi[name].shape)
            at += k
        return prev, total

    def _estimate(self, groups: list, numel, zz, pz, pp, c, rr, ra, qq) -> None:
        """Each group's running sums and its row from this step's inner products (floats, one per group)."""
        N, rows, solve = self.replicas, [], {}
        for i, g in enumerate(groups):
            g.steps += 1
            t, norm = g.steps, numel[i] * (N - 1)
            v_t = rr[i] / norm
            g.sum_v += v_t
            lag1 = rho = None
            if t > 1:
                lag1 = ra[i] / norm
                g.sum_a += lag1
                g.count_a += 1
                rho = ra[i] / math.sqrt(rr[i] * g.last_rr) if rr[i] > 0 and g.last_rr > 0 else None
            g.last_rr = rr[i]
            q = qq[i] / norm
            if g.count_a:
                solve.setdefault(t, []).append((i, g.sum_v / t, g.sum_a / g.count_a, q))
            rows.append(dict(numel=numel[i], spread=zz[i] / (numel[i] * N), progress_var=pp[i] / norm, c=c[i],
                             s2=v_t, lag1_cov=lag1, rho=rho, sum_var=q))
        for t, found in solve.items():  # the drift of every group at once (one t, unless groups started apart)
            drift = solve_drifts(t, *np.array([f[1:] for f in found]).T)
            for (i, *_), (D, s2n, rhon) in zip(found, zip(*(x.tolist() for x in drift))):
                if not math.isnan(D):
                    rows[i].update(drift_var=D, s2_noise=s2n, rho_noise=rhon)
        for g, row in zip(groups, rows):
            g.row = GroupInputs(**row)

    def latest(self) -> dict[str, GroupInputs]:
        """The last step's estimates of each group."""
        return {name: g.row for name, g in self.groups.items()}

    def row(self) -> dict:
        """The last step's estimates as an inputs.jsonl row lacks only its ``outer_step``:
        ``{"steps", "replicas", "groups": {name: {...ROW_KEYS}}}``."""
        return {"steps": self.steps, "replicas": self.replicas,
                "groups": {name: row.to_json() for name, row in self.latest().items()}}

    # ------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict:
        """Tensors and plain numbers only (``torch.load(weights_only=True)`` reads it)."""
        return {"replicas": self.replicas, "steps": self.steps,
                "groups": {name: {"prev": g.prev, "total": g.total, "steps": g.steps, "last_rr": g.last_rr,
                                  "sum_v": g.sum_v, "sum_a": g.sum_a, "count_a": g.count_a,
                                  "row": g.row.to_json()}
                           for name, g in self.groups.items()}}

    def load_state_dict(self, state: dict) -> None:
        if state["replicas"] != self.replicas:
            raise ValueError(f"meter state for {state['replicas']} replicas, this meter has {self.replicas}")
        self.steps = state["steps"]
        self.groups, self._buffers = {}, {}
        for name, s in state["groups"].items():
            g = _Group()
            g.prev = {k: v.to(self.buffer_dtype) for k, v in s["prev"].items()}
            g.total = {k: v.to(self.buffer_dtype) for k, v in s["total"].items()}
            g.steps, g.last_rr, g.sum_v = s["steps"], s["last_rr"], s["sum_v"]
            g.sum_a, g.count_a, g.row = s["sum_a"], s["count_a"], GroupInputs.from_json(s["row"])
            self.groups[name] = g
