"""The exchangeable second-moment recursion for any linear per-replica state: correlated
progress noise (the state an inner optimizer carries) and heterogeneous data (a
per-replica drift), on top of the same outer step.

Model, per eigen-direction and replica i (c, s2 as in :mod:`noloco.theory.symbolic`)::

    eps_i,t = rho * eps_i,t-1 + sqrt(1 - rho^2) * sqrt(s2) * xi_i,t     (AR(1), stationary Var = s2)
    Delta_i = -c * y_i + d_i + eps_i,t
    (y_i, delta_i) <- outer_step(y_i, delta_i, mean_G(y), mean_G(Delta))

``rho`` is the correlation of a replica's progress noise with its own noise one outer step
earlier; ``d_i`` is a fixed per-replica drift with zero mean over replicas (for a quadratic
whose replica optima are offset by b_i, ``d_i = c * b_i``; in a flat direction it is the
persistent bias of a replica's own data). With the state w_i = (y_i, delta_i, eps_i,t-1, d_i)
one outer step is linear::

    w_i' = F0 w_i + F1 mean_G(w) + g0 xi_i + g1 mean_G(xi),

and, exactly as for the i.i.d. model, for exchangeable replicas and fresh uniform
partitions the deviation covariance is S (x) (I - J) with::

    S' = (1 - kappa) F0 S F0^T + kappa M S M^T + (1 - kappa) g0 g0^T + kappa g g^T,
    M = F0 + F1,  g = g0 + g1,  kappa = (N - n) / (n (N - 1)).

(E[A](I-J) = E[A(I-J)A] = kappa (I-J) for the averaging matrix A, and A^2 = A for the
noise term.) The per-coordinate replica variance is E z^2 = (1 - 1/N) S_yy. The drift block
S_dd is constant, so the stationary S solves the linear system on the other entries; it is
finite when the spectral radius of that block's transition is below 1. With rho = 0 and no
drift this is the three-moment recursion of :mod:`noloco.theory.numeric`.

More generally the inner phase may carry any linear state s (a momentum buffer, Adam's first
moment at small learning rates): :class:`InnerPhase` describes one phase as
``Delta = -c y + d + k.s + noise`` and ``s' = b y + Q s + noise``; the AR(1) noise is the case
s = eps_prev, and :meth:`InnerPhase.momentum` / :meth:`InnerPhase.adam` give the exact phase
of H steps of heavy-ball SGD or of linearised Adam on one direction of a quadratic, with the
buffer carried from one phase into the next. :meth:`InnerPhase.ar1_inputs` reduces any phase
to the (c, s2, rho) of the AR(1) model.

Everything here is numeric (numpy), built by applying :func:`noloco.theory.outer.outer_step` to
unit vectors; :func:`symbolic_maps` gives the same maps with sympy (a test compares them).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from noloco.infra.errors import ConfigError
from noloco.theory.config import OuterConfig, group_kappa
from noloco.infra.checks import check_choice, check_fields, check_real, check_scale
from noloco.theory.numeric import inner_sgd
from noloco.theory.outer import outer_step


@dataclass(frozen=True)
class InnerPhase:
    """One inner phase as a linear map of the distance y, the carried state s (p entries) and
    standard normal innovations xi (q entries), independent over replicas and outer steps::

        Delta = -c y + d + k.s + L[0].xi          (d: the replica's fixed drift)
        s'    =  b y + Q s     + L[1:] xi
    """

    c: float
    k: np.ndarray      # (p,)
    b: np.ndarray      # (p,)
    Q: np.ndarray      # (p, p)
    L: np.ndarray      # (1 + p, q)

    @property
    def p(self) -> int:
        return len(self.k)

    @staticmethod
    def ar1(c: float, s2: float, rho: float = 0.0) -> "InnerPhase":
        """Progress noise eps_t = rho eps_t-1 + sqrt(1 - rho^2) sqrt(s2) xi_t: s = eps_prev."""
        if not -1 < rho < 1:
            raise ConfigError(f"rho={rho!r} is out of range; allowed: -1 < rho < 1")
        scale = math.sqrt((1 - rho * rho) * s2)
        return InnerPhase(float(c), np.array([rho]), np.zeros(1), np.array([[rho]]), np.array([[scale], [scale]]))

    @staticmethod
    def momentum(lr: float, curvature: float, steps: int, noise: float, momentum: float,
                 gradient_weight: float = 1.0) -> "InnerPhase":
        """H steps of m <- mu m + w g, theta <- theta - lr m on one direction of a quadratic
        (g = curvature (theta - optimum) + noise xi), the buffer m carried across phases:
        torch's SGD(momentum=mu) is w = 1; an EMA (Adam's first moment) is w = 1 - mu."""
        mu, w = float(momentum), float(gradient_weight)
        step = np.array([[1 - lr * w * curvature, -lr * mu], [w * curvature, mu]])   # on (y, m)
        shock = w * noise * np.array([-lr, 1.0])
        phi, cov = np.eye(2), np.zeros((2, 2))
        for _ in range(steps):
            phi = step @ phi
            cov = step @ cov @ step.T + np.outer(shock, shock)
        values, vectors = np.linalg.eigh(cov)
        root = vectors * np.sqrt(np.clip(values, 0, None))   # cov = root root^T
        # progress = y_H - y_0: the noise rows are (y_H, m_H)'s; y_0's own row is the identity
        return InnerPhase(1 - phi[0, 0], np.array([phi[0, 1]]), np.array([phi[1, 0]]), np.array([[phi[1, 1]]]), root)

    @staticmethod
    def adam(lr: float, curvature: float, steps: int, noise: float, beta1: float = 0.9,
             scale: float | None = None) -> "InnerPhase":
        """Adam linearised where its second moment has settled: per coordinate the update is
        lr m / sqrt(v) with v ~ E g^2 = ``scale``^2 (default ``noise``: gradients dominated by the
        noise near the optimum), so Adam is the EMA-momentum SGD of :meth:`momentum` with
        learning rate lr / scale, momentum beta1 and gradient weight 1 - beta1, its first moment
        carried across phases (bias corrections -> 1 after the first few hundred steps)."""
        scale = noise if scale is None else scale
        if not scale > 0:
            raise ConfigError(f"noise={noise!r} is out of range for inner_optimizer='adam'; allowed: noise > 0 (the "
                              "theory linearises Adam where its second moment has settled at noise^2)")
        return InnerPhase.momentum(lr / scale, curvature, steps, noise, beta1, 1 - beta1)

    def stationary_state(self) -> np.ndarray:
        """Covariance of s at a replica that sits at the optimum (y = 0): Q S Q^T + L_s L_s^T = S."""
        p = self.p
        Ls = self.L[1:]
        A = np.eye(p * p) - np.kron(self.Q, self.Q)
        return np.linalg.solve(A, (Ls @ Ls.T).reshape(-1)).reshape(p, p)

    def ar1_inputs(self) -> tuple[float, float, float]:
        """(c, s2, rho) of the AR(1) model with the same c and the same stationary variance and
        lag-1 correlation of the progress noise n = Delta + c y at the optimum (the feedback of y
        on the carried state, b, is what the reduction drops)."""
        S = self.stationary_state()
        L0, Ls = self.L[0], self.L[1:]
        s2 = float(self.k @ S @ self.k + L0 @ L0)
        lag1 = float(self.k @ (self.Q @ S @ self.k + Ls @ L0))
        return self.c, s2, (lag1 / s2 if s2 > 0 else 0.0)


def spectral_radius(matrix: np.ndarray) -> float:
    """The largest |eigenvalue| of ``matrix``; inf when an entry is not finite (a phase whose map overflows
    float64, e.g. inner Adam or momentum at a learning rate of 1e300, amplifies without bound: unstable)."""
    if not np.all(np.isfinite(matrix)):
        return math.inf
    return float(np.max(np.abs(np.linalg.eigvals(matrix))))


def ar1_sum_factor(t: int, rho) -> np.ndarray:
    """G_t(rho) = Var(e_1 + ... + e_t) / s2 for a stationary AR(1) e with lag-1 correlation rho:
    t + 2 sum_{k=1}^{t-1} (t - k) rho^k (exact; vectorised over rho)."""
    rho = np.asarray(rho, dtype=float)
    if t <= 1:
        return np.full_like(rho, float(t))
    k = np.arange(1, t)
    if np.all((1 - rho) ** 2 * t > 1e-5):  # closed form; relative rounding ~ 1e-16 / ((1 - rho)^2 t)
        return t * (1 + rho) / (1 - rho) - 2 * rho * (1 - rho ** t) / (1 - rho) ** 2
    return t + 2 * np.sum((t - k) * np.power.outer(rho, k), axis=-1)


def _phase(c, s2, rho, phase):
    return phase if phase is not None else InnerPhase.ar1(c, s2, rho)


def step_maps(outer: OuterConfig, c: float = 0.0, rho: float = 0.0, s2: float = 1.0, phase: InnerPhase | None = None):
    """(F0, F1, g0, g1) of one outer step on w = (y, delta, s_1..s_p, drift): (k, k) maps of the
    own state and of the group mean, (k, q) maps of the own and the group-mean innovations."""
    ph = _phase(c, s2, rho, phase)
    rule, p = outer.rule(), ph.p
    size, q = 3 + p, ph.L.shape[1]
    drift = size - 1

    def apply(own, mean, xi_own, xi_mean):
        progress_mean = -ph.c * mean[0] + mean[drift] + ph.k @ mean[2:2 + p] + ph.L[0] @ xi_mean
        y, delta = outer_step(own[0], own[1], mean[0], progress_mean, **rule)
        state = ph.b * own[0] + ph.Q @ own[2:2 + p] + ph.L[1:] @ xi_own
        return np.concatenate([[y, delta], state, [own[drift]]])

    zw, zx, ew, ex = np.zeros(size), np.zeros(q), np.eye(size), np.eye(q)
    F0 = np.column_stack([apply(ew[j], zw, zx, zx) for j in range(size)])
    F1 = np.column_stack([apply(zw, ew[j], zx, zx) for j in range(size)])
    g0 = np.column_stack([apply(zw, zw, ex[j], zx) for j in range(q)])
    g1 = np.column_stack([apply(zw, zw, zx, ex[j]) for j in range(q)])
    return F0, F1, g0, g1


def symbolic_maps(momentum: str = "heavy-ball"):
    """(F0, F1, g0, g1) of the AR(1) model as sympy matrices in alpha, beta, gamma, c, rho, s2."""
    import sympy as sp

    from noloco.theory.symbolic import alpha, beta, c, gamma, s2

    rho = sp.Symbol("rho", real=True)
    own = sp.symbols("y delta e b")
    mean = sp.symbols("gy gdelta ge gb")
    xi, gxi = sp.symbols("xi gxi")
    scale = sp.sqrt((1 - rho ** 2) * s2)
    progress_mean = -c * mean[0] + mean[3] + rho * mean[2] + scale * gxi
    y, delta = outer_step(own[0], own[1], mean[0], progress_mean, alpha=alpha, beta=beta, gamma=gamma,
                          momentum=momentum)
    w = sp.Matrix([y, delta, rho * own[2] + scale * xi, own[3]])
    return (w.jacobian(sp.Matrix(own)), w.jacobian(sp.Matrix(mean)), w.jacobian(sp.Matrix([xi])),
            w.jacobian(sp.Matrix([gxi])))


@dataclass(frozen=True)
class Recursion:
    """S' = T S + forcing on vec(S) (size x size, row-major), for one setting and direction;
    state order (y, delta, s_1..s_p, drift)."""

    T: np.ndarray          # (size^2, size^2)
    forcing: np.ndarray    # (size^2,)
    replicas: int
    size: int

    def _indices(self, with_drift: bool) -> np.ndarray:
        """Entries of vec(S) that evolve: without drift, none that involve it; with drift, all
        but the constant S_dd (the cross moments with the drift then carry it in)."""
        d = self.size - 1
        pairs = [divmod(k, self.size) for k in range(self.size ** 2)]
        if with_drift:
            return np.array([k for k, pair in enumerate(pairs) if pair != (d, d)])
        return np.array([k for k, pair in enumerate(pairs) if d not in pair])

    def factor(self, with_drift: bool = False) -> float:
        """Spectral radius of the transition of the evolving moments. Without drift: the decay
        factor of the noise-free spread (= ``numeric.variance_decay_factor`` at rho = 0); with
        drift it also holds the cross moments, which relax like the mean deviation itself
        ((1 - kappa) F0 + kappa M); at or above 1 the drift drives the spread without bound."""
        idx = self._indices(with_drift)
        return spectral_radius(self.T[np.ix_(idx, idx)])

    def step(self, S: np.ndarray) -> np.ndarray:
        return (self.T @ S.reshape(-1) + self.forcing).reshape(self.size, self.size)

    def stationary(self, drift_var: float = 0.0) -> np.ndarray | None:
        """The fixed point S with S_dd = drift_var, or None when it is unstable."""
        with_drift = drift_var > 0
        if self.factor(with_drift) >= 1:
            return None
        idx, dd = self._indices(with_drift), self.size ** 2 - 1
        A = np.eye(len(idx)) - self.T[np.ix_(idx, idx)]
        S = np.zeros(self.size ** 2)
        S[idx] = np.linalg.solve(A, self.forcing[idx] + self.T[idx, dd] * drift_var)
        S[dd] = drift_var
        return S.reshape(self.size, self.size)

    def spread(self, S: np.ndarray) -> float:
        """E z^2 per coordinate: (1 - 1/N) S_yy."""
        return (1 - 1 / self.replicas) * float(S[0, 0])


def recursion(outer: OuterConfig, c: float = 0.0, s2: float = 1.0, rho: float = 0.0,
              phase: InnerPhase | None = None) -> Recursion:
    F0, F1, g0, g1 = step_maps(outer, c, rho, s2, phase)
    kappa = group_kappa(outer.replicas, outer.group_size)
    M, g = F0 + F1, g0 + g1
    T = (1 - kappa) * np.kron(F0, F0) + kappa * np.kron(M, M)
    forcing = (1 - kappa) * g0 @ g0.T + kappa * g @ g.T
    return Recursion(T, forcing.reshape(-1), outer.replicas, F0.shape[0])


class Stepper:
    """:func:`recursion`'s step for one outer setting at any (c, s2, rho) of the AR(1) model, without
    rebuilding its maps: F0 and F1 are affine in c and rho (the progress and the carried noise are), and the
    innovation maps are proportional to sqrt((1 - rho^2) s2), so three evaluations of :func:`step_maps`
    give them all. ``stepper(S, c, s2, rho)`` equals ``recursion(outer, c, s2, rho).step(S)``; it runs the
    long per-step recursions of a measured run (:mod:`noloco.advice.predict`, the forecasts) without a
    Kronecker product per step."""

    def __init__(self, outer: OuterConfig):
        F0, F1, g0, g1 = step_maps(outer, 0.0, 0.0, 1.0)
        c0, c1 = step_maps(outer, 1.0, 0.0, 1.0)[:2]
        r0, r1 = step_maps(outer, 0.0, 0.5, 1.0 / 0.75)[:2]  # scale (1 - 0.25) s2 = 1, as at rho = 0
        self.F0, self.F1 = F0, F1
        self.F0c, self.F1c, self.F0r, self.F1r = c0 - F0, c1 - F1, (r0 - F0) / 0.5, (r1 - F1) / 0.5
        self.g0, self.g = g0[:, 0], (g0 + g1)[:, 0]
        self.kappa = group_kappa(outer.replicas, outer.group_size)
        self.replicas = outer.replicas

    def __call__(self, S: np.ndarray, c: float, s2: float, rho: float = 0.0) -> np.ndarray:
        F0 = self.F0 + c * self.F0c + rho * self.F0r
        M = F0 + self.F1 + c * self.F1c + rho * self.F1r
        k, scale = self.kappa, (1 - rho * rho) * s2
        return ((1 - k) * (F0 @ S @ F0.T) + k * (M @ S @ M.T)
                + scale * ((1 - k) * np.outer(self.g0, self.g0) + k * np.outer(self.g, self.g)))


@functools.lru_cache(maxsize=64)
def stepper(outer: OuterConfig) -> Stepper:
    """The :class:`Stepper` of ``outer``, built once (a measured run replays one setting per tensor and noise
    model, and the observer's early warnings replay it again at every check)."""
    return Stepper(outer)


def initial(s2: float = 1.0, rho: float = 0.0, drift_var: float = 0.0, spread0: float = 0.0,
            phase: InnerPhase | None = None, stationary_state: bool = True) -> np.ndarray:
    """S at t = 0: replicas at ``spread0`` (variance of y deviations per coordinate, S units), the
    carried inner state at its stationary covariance (for AR(1) noise: Var s2) or, without
    ``stationary_state``, identical across replicas (a buffer that starts at zero), the drift at
    ``drift_var``."""
    ph = _phase(0.0, s2, rho, phase)
    size = 3 + ph.p
    S = np.zeros((size, size))
    S[0, 0] = spread0
    if stationary_state:
        S[2:2 + ph.p, 2:2 + ph.p] = ph.stationary_state()
    S[-1, -1] = drift_var
    return S


def stationary_spread(outer: OuterConfig, c: float = 0.0, s2: float = 1.0, rho: float = 0.0,
                      drift_var: float = 0.0, phase: InnerPhase | None = None) -> float:
    """Stationary E[(phi_i - mean_j phi_j)^2] per coordinate; inf where unstable; 0 for n = N or N = 1."""
    if outer.group_size == outer.replicas:
        return 0.0
    rec = recursion(outer, c, s2, rho, phase)
    S = rec.stationary(drift_var)
    return math.inf if S is None else rec.spread(S)


def spread_trajectory(outer: OuterConfig, c: float = 0.0, s2: float = 1.0, steps: int = 0, rho: float = 0.0,
                      drift_var: float = 0.0, spread0: float = 0.0, phase: InnerPhase | None = None,
                      stationary_state: bool = True) -> np.ndarray:
    """Exact E z_t^2 per coordinate for t = 0..steps."""
    rec = recursion(outer, c, s2, rho, phase)
    S = initial(s2, rho, drift_var, spread0, phase, stationary_state)
    out = [rec.spread(S)]
    for _ in range(steps):
        S = rec.step(S)
        out.append(rec.spread(S))
    return np.array(out)


def varying_trajectory(outer: OuterConfig, c, s2, rho, drift_var: float = 0.0, spread0: float = 0.0,
                       S0: np.ndarray | None = None) -> np.ndarray:
    """E z_t^2 per coordinate for t = 0..len(c) when outer step t has its own AR(1) inputs (c[t],
    s2[t], rho[t]) (e.g. measured in a real run, or a learning-rate schedule). ``S0`` overrides the start."""
    c, s2, rho = (np.broadcast_to(np.asarray(x, dtype=float), np.shape(c)) for x in (c, s2, rho))
    S = initial(float(s2[0]) if len(s2) else 0.0, float(rho[0]) if len(rho) else 0.0, drift_var, spread0) \
        if S0 is None else np.asarray(S0, dtype=float)
    out = [(1 - 1 / outer.replicas) * float(S[0, 0])]
    for c_t, s2_t, rho_t in zip(c, s2, rho):
        S = recursion(outer, float(c_t), float(s2_t), float(rho_t)).step(S)
        out.append((1 - 1 / outer.replicas) * float(S[0, 0]))
    return np.array(out)


def decay_factor(outer: OuterConfig, c: float = 0.0, rho: float = 0.0, with_drift: bool = False,
                 phase: InnerPhase | None = None) -> float:
    """Noise-free decay factor per outer step of the second moments (the carried state's own
    relaxation included); see :meth:`Recursion.factor` for ``with_drift``."""
    return recursion(outer, c, 1.0, rho, phase).factor(with_drift)


def mean_radius(outer: OuterConfig, phase: InnerPhase) -> float:
    """Spectral radius of the replica mean's transition (y, delta, s) with the carried state: the
    pull cancels in the mean, so this is DiLoCo's outer step around the given inner phase."""
    F0, F1, _, _ = step_maps(outer, phase=phase)
    # the drift has zero mean, and a state that y does not drive (AR(1) noise) has zero mean too:
    # neither moves the expected mean
    keep = 2 + (phase.p if np.any(phase.b != 0) else 0)
    M = (F0 + F1)[:keep, :keep]
    return spectral_radius(M)


def mean_trajectory(outer: OuterConfig, phase: InnerPhase, start: float, steps: int) -> np.ndarray:
    """Expected replica-mean distance y_t for t = 0..steps from y_0 = ``start``, zero momentum and
    zero carried state (the pull and the drift cancel in the mean)."""
    F0, F1, _, _ = step_maps(outer, phase=phase)
    M = F0 + F1
    x = np.zeros(M.shape[0])
    x[0] = start
    out = [start]
    for _ in range(steps):
        x = M @ x
        out.append(float(x[0]))
    return np.array(out)


@dataclass(frozen=True)
class Summary:
    """The stationary spread (inf where unstable), the mean's rate and the spread's decay factor."""

    stationary_variance: float
    mean_spectral_radius: float
    variance_decay_factor: float


def summary(outer: OuterConfig, phase: InnerPhase, drift_var: float = 0.0) -> Summary:
    """Per direction: the mean's rate, the spread's decay factor (with the drift's cross moments
    when there is drift) and the stationary spread (inf where unstable)."""
    return Summary(mean_spectral_radius=mean_radius(outer, phase),
                   variance_decay_factor=decay_factor(outer, phase=phase, with_drift=drift_var > 0),
                   stationary_variance=stationary_spread(outer, phase=phase, drift_var=drift_var))


@dataclass(frozen=True)
class InnerModel:
    """What the inner phase is beyond i.i.d. SGD noise, for ``noloco check`` and ``simulate``:
    the inner optimizer (``sgd``, heavy-ball ``momentum`` with ``momentum`` mu, or ``adam`` with
    beta1 = :data:`ADAM_BETA1`, its state carried across outer steps), an AR(1) ``correlation`` of
    the SGD progress noise over outer steps, and ``zeta``, the std of the replicas' optima offsets
    (heterogeneous data: drift d_i = c b_i, SGD only)."""

    optimizer: str = "sgd"
    momentum: float = 0.9
    correlation: float = 0.0
    zeta: float = 0.0

    def __post_init__(self):
        check_fields(self, {
            "optimizer": (check_choice, ("sgd", "momentum", "adam")),
            "momentum": (check_real, "0 <= inner_momentum < 1", lambda v: 0 <= v < 1),
            "correlation": (check_real, "-1 < noise_correlation < 1", lambda v: -1 < v < 1),
            "zeta": (check_scale,),
        }, names={"momentum": "inner_momentum", "correlation": "noise_correlation"})
        if self.optimizer != "sgd" and (self.correlation or self.zeta):
            raise ConfigError(f"noise_correlation and zeta model inner SGD; with inner_optimizer={self.optimizer!r} "
                              "the correlation comes from the carried state itself (and drift is not modelled)")

    @property
    def plain(self) -> bool:
        """i.i.d. SGD noise, shared optimum: the closed forms of :mod:`noloco.theory.numeric` apply."""
        return self.optimizer == "sgd" and not self.correlation and not self.zeta

    def phase(self, lr: float, curvature: float, steps: int, noise: float) -> InnerPhase:
        if self.optimizer == "momentum":
            return InnerPhase.momentum(lr, curvature, steps, noise, self.momentum)
        if self.optimizer == "adam":
            return InnerPhase.adam(lr, curvature, steps, noise, ADAM_BETA1)
        c, s2 = (float(x) for x in inner_sgd(lr, curvature, steps, noise))
        return InnerPhase.ar1(c, s2, self.correlation)

    def drift_var(self, phase: InnerPhase) -> float:
        drift = phase.c * self.zeta  # IEEE arithmetic: a diverging phase's huge c gives inf, reported as not finite
        return drift * drift


#: Adam's beta1 in the inner model (the simulator's Adam uses betas (0.9, 0.999))
ADAM_BETA1 = 0.9


def inner_radius(phase: InnerPhase) -> float:
    """Spectral radius of one inner phase's own map on (y, s): below 1 the inner phase contracts."""
    top = np.concatenate([[1 - phase.c], phase.k])
    rest = np.column_stack([phase.b, phase.Q])
    return spectral_radius(np.vstack([top, rest]))
