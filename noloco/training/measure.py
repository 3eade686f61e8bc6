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
                it, e.g. at t = 1; negative when the residual is less persistent than an AR(1)
                with its lag-1 correlation)
``s2_noise``,   v - D and (a - D) / (v - D): the AR(1) noise once the drift is taken out
``rho_noise``
==============  =====================================================================

Cost per outer step and tensor: a handful of elementwise passes and two float64 buffers the
size of the stacked tensor (the last residual, for rho, and the running residual sum, for the
drift); one buffer cannot give both. Only the replicas of one process are seen: in torchrun mode
(one replica per rank) nothing is measured.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

import torch

from noloco.advice.run_rows import GroupInputs
from noloco.theory.exchangeable import ar1_sum_factor  # noqa: F401 (defined with the AR(1) noise model)

#: keys of one group's entry in :meth:`SpreadMeter.row`
ROW_KEYS = ("numel", "spread", "progress_var", "c", "s2", "lag1_cov", "rho", "sum_var", "drift_var", "s2_noise",
            "rho_noise")


def _sum_factor(t: int, rho: float) -> float:
    """:func:`ar1_sum_factor` for one float rho, without numpy (the drift solver calls it ~50 times)."""
    if t > 1 and (1 - rho) ** 2 * t > 1e-5:
        return t * (1 + rho) / (1 - rho) - 2 * rho * (1 - rho ** t) / (1 - rho) ** 2
    return float(ar1_sum_factor(t, rho))


def solve_drift(t: int, v: float, a: float, q: float, iterations: int = 200):
    """``(drift_var, s2_noise, rho_noise)`` from the running means ``v`` (residual variance) and
    ``a`` (lag-1 covariance) and the running-sum second moment ``q`` after ``t`` steps, all in
    theory units: the root D of ``t^2 D + (v - D) G_t((a - D) / (v - D)) = q`` on
    ``-v <= D < (a + v) / 2`` (rho_noise > -1). ``(None, None, None)`` when there is none."""
    if t < 2 or not all(map(math.isfinite, (v, a, q))) or v <= 0 or a >= v:
        return None, None, None

    def excess(D):
        return t * t * D + (v - D) * _sum_factor(t, (a - D) / (v - D)) - q

    lo, hi = -v, (a + v) / 2 - 1e-12 * v
    f_lo, f_hi = excess(lo), excess(hi)
    if not (f_lo <= 0 <= f_hi):
        return None, None, None
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if excess(mid) > 0:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-14 * v:
            break
    D = 0.5 * (lo + hi)
    return D, v - D, (a - D) / (v - D)


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

    @torch.no_grad()
    def update(self, phi: Mapping[str, torch.Tensor], progress: Mapping[str, torch.Tensor],
               keep: bool = False) -> dict:
        """``keep``: leave the centred float64 (N, numel) phi and progress of each tensor in ``self.centred``
        (the observer's coordinate errors read them instead of converting and centring the tensors again)."""
        N = self.replicas
        self.centred = {}
        members: dict[str, list[str]] = {}
        for name in phi:
            if phi[name].shape[0] != N or progress[name].shape != phi[name].shape:
                raise ValueError(f"{name}: expected stacked ({N}, ...) phi and progress of one shape, got "
                                 f"{tuple(phi[name].shape)} and {tuple(progress[name].shape)}")
            members.setdefault(self.group_of(name), []).append(name)
        for gname, names in members.items():
            g = self.groups.setdefault(gname, _Group())
            z, p = {}, {}
            zz = pz = pp = 0.0
            numel = 0
            for name in names:
                x = phi[name].detach().to(torch.float64)
                y = progress[name].detach().to(torch.float64)
                z[name] = x - x.mean(0, keepdim=True)
                p[name] = y - y.mean(0, keepdim=True)
                if keep:
                    self.centred[name] = (z[name].reshape(N, -1), p[name].reshape(N, -1))
                zz += float((z[name] * z[name]).sum())
                pz += float((p[name] * z[name]).sum())
                pp += float((p[name] * p[name]).sum())
                numel += x[0].numel()
            c = -pz / zz if zz > 0 else 0.0
            rr = max(pp + 2 * c * pz + c * c * zz, 0.0)  # <p + c z, p + c z>
            ra = qq = 0.0
            for name in names:
                r = p[name] + c * z[name]
                if g.steps:
                    ra += float((r * g.prev[name].to(torch.float64)).sum())
                    g.total[name] += r.to(self.buffer_dtype)
                    g.prev[name].copy_(r)
                else:
                    g.prev[name] = r.to(self.buffer_dtype)
                    g.total[name] = r.to(self.buffer_dtype).clone()
                qq += float((g.total[name].to(torch.float64) ** 2).sum())
            g.steps += 1
            t, norm = g.steps, numel * (N - 1)
            v_t = rr / norm
            g.sum_v += v_t
            lag1 = rho = None
            if t > 1:
                lag1 = ra / norm
                g.sum_a += lag1
                g.count_a += 1
                rho = ra / math.sqrt(rr * g.last_rr) if rr > 0 and g.last_rr > 0 else None
            g.last_rr = rr
            q = qq / norm
            D, s2n, rhon = solve_drift(t, g.sum_v / t, g.sum_a / g.count_a, q) if g.count_a else (None,) * 3
            g.row = GroupInputs(numel=numel, spread=zz / (numel * N), progress_var=pp / norm, c=c, s2=v_t,
                                lag1_cov=lag1, rho=rho, sum_var=q, drift_var=D, s2_noise=s2n, rho_noise=rhon)
        self.steps += 1
        return self.row()

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
        self.groups = {}
        for name, s in state["groups"].items():
            g = _Group()
            g.prev = {k: v.to(self.buffer_dtype) for k, v in s["prev"].items()}
            g.total = {k: v.to(self.buffer_dtype) for k, v in s["total"].items()}
            g.steps, g.last_rr, g.sum_v = s["steps"], s["last_rr"], s["sum_v"]
            g.sum_a, g.count_a, g.row = s["sum_a"], s["count_a"], GroupInputs.from_json(s["row"])
            self.groups[name] = g
