"""Random pipeline routing on a two-stage deep-linear model: the exact theory.

The model (docs/routing.md, "Theory", states its results; this module derives them). Two consecutive stages, each replicated
N times; replica i of stage 1 holds ``a_i`` and replica j of stage 2 holds ``b_j``, both in R^D with
independent coordinates. A microbatch routed through (stage-1 replica i, stage-2 replica j) sees, per
coordinate with curvature h::

    loss = 0.5 h (a_i b_j - w*)^2,     w* = a* b*,

its output gradient carries noise ``output_noise`` (backprop sends it into both stages: the
gradient of a_i is (h (a_i b_j - w*) + zeta) b_j, that of b_j is (...) a_i), and every stage
replica's gradient gets independent additive noise ``noise`` per microbatch (the toolkit's
quadratic convention). Inner SGD with learning rate eta (times ``stage_lr`` per stage), H inner
steps, then :func:`noloco.theory.outer.outer_step` per stage with its own random groups of n.

* ``fixed`` routing: j = i, so replica i of both stages is one chain. Every chain has a flat
  direction, the rescaling (c a_i, b_i / c): chains drift apart along it.
* ``random`` routing: at each inner step and for each of the B microbatch columns, an independent
  uniform permutation pi sends stage-1 replica i's microbatch to stage-2 replica pi(i) (as
  ``noloco.llm_check.routing`` does). In expectation the objective becomes the all-pairs loss
  (1/N) sum_ij 0.5 h (a_i b_j - w*)^2, whose minimum needs a_i b_j = w* for all pairs: no per-chain
  flat direction is left (only the global rescaling, common to all replicas).

The linearised model (around a*, b*) is exactly solvable: the deviations from the replica mean close
into an exchangeable second-moment recursion on a 6 x 6 matrix S over the per-replica state
(theta_a, phi_a, delta_a, theta_b, phi_b, delta_b), covariance S (x) (I - J) across replicas, through
every inner step (:func:`inner_step_operator`), the inner phase (:func:`phase_operator`) and the outer
step (:func:`outer_operator`). :func:`trajectory` and :func:`stationary` evaluate it;
:func:`noloco.quadratic.routing.simulate` is its Monte Carlo (linearised or nonlinear), and
``python -m noloco.quadratic.routing`` prints theory against simulation.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from noloco.infra.errors import ConfigError
from noloco.theory.config import InnerConfig, OuterConfig, group_kappa
from noloco.infra.checks import check_choice, check_fields, check_integer, check_positive, check_real
from noloco.theory.numeric import inner_sgd, stationary_variance
from noloco.theory.outer import outer_step

ROUTINGS = ("fixed", "random")
#: outer-step groups: an independent partition per stage (as llm_check does, stream = stage), or one
#: partition for both stages (then a fixed-routing chain averages as one model replica)
GROUPINGS = ("per-stage", "shared")
#: per-replica state of one coordinate, the order of S's rows (theta: inner weights, phi: outer
#: weights, delta: outer momentum; a: stage 1, b: stage 2)
STATE = ("theta_a", "phi_a", "delta_a", "theta_b", "phi_b", "delta_b")
#: a spectral radius this close to 1 is a marginal (non-contracting) mode, not a stable one
MARGINAL = 1e-9


@dataclass(frozen=True)
class TwoStageModel:
    """The two-stage deep-linear model and its routing (the inner learning rate, steps and additive
    noise are :class:`noloco.theory.config.InnerConfig`'s ``lr``, ``steps``, ``noise``).

    ``a_star``, ``b_star``: the solution linearised around (w* = a* b*), both > 0 (signs are a
    symmetry). ``curvatures``: h per coordinate (D = its length). ``output_noise``: std of the noise
    on the output gradient per microbatch (backprop's noise, chain-ruled into both stages).
    ``microbatches`` (B): microbatches per replica and inner step, each column with its own
    permutation; a replica's gradient is the mean over its B microbatches. ``stage_lr``: multipliers
    of the inner learning rate per stage (0 freezes a stage). ``flat_start``: std of per-replica
    offsets along the chains' flat direction at the start (zero mean over replicas).
    """

    a_star: float = 1.0
    b_star: float = 1.0
    curvatures: tuple = (1.0,) * 8
    output_noise: float = 0.0
    microbatches: int = 1
    stage_lr: tuple = (1.0, 1.0)
    routing: str = "random"
    groups: str = "per-stage"
    flat_start: float = 0.0

    def __post_init__(self):
        check_fields(self, {
            "a_star": (check_positive,),
            "b_star": (check_positive,),
            "output_noise": (check_real, "0 <= output_noise < inf", lambda v: 0 <= v < math.inf),
            "microbatches": (check_integer, "an integer >= 1", lambda v: v >= 1),
            "routing": (check_choice, ROUTINGS),
            "groups": (check_choice, GROUPINGS),
            "flat_start": (check_real, "0 <= flat_start < inf", lambda v: 0 <= v < math.inf),
        })
        curvatures = self.curvatures if isinstance(self.curvatures, (tuple, list, np.ndarray)) else (self.curvatures,)
        if len(curvatures) == 0:
            raise ConfigError("curvatures=() is empty; allowed: one curvature h > 0 per coordinate")
        object.__setattr__(self, "curvatures", tuple(check_positive("curvatures", h)
                                                     for h in curvatures))
        rates = tuple(self.stage_lr) if isinstance(self.stage_lr, (tuple, list)) else ()
        if len(rates) != 2:
            raise ConfigError(f"stage_lr={self.stage_lr!r} is not allowed; allowed: two multipliers >= 0")
        object.__setattr__(self, "stage_lr", tuple(check_real("stage_lr", s, "0 <= stage_lr < inf",
                                                              lambda v: 0 <= v < math.inf) for s in rates))

    @property
    def radius(self) -> float:
        """|(a*, b*)|: the flat direction of a chain is (a*, -b*) / radius, the stiff one (b*, a*) / radius."""
        return math.hypot(self.a_star, self.b_star)

    def stage_curvatures(self, h: float) -> tuple[float, float]:
        """(h b*^2, h a*^2): the curvature each stage's own weights see with the partner held fixed."""
        return h * self.b_star ** 2, h * self.a_star ** 2

    def stage_noise_var(self) -> tuple[float, float]:
        """Variance of one stage replica's gradient noise per microbatch: additive plus backprop's."""
        sigma2 = self.output_noise ** 2
        return sigma2 * self.b_star ** 2, sigma2 * self.a_star ** 2


# --------------------------------------------------------------------------- theory

def _vec(left, right):
    """The operator S -> left S right^T on row-major vec(S)."""
    return np.kron(left, right)


def _sym(left, right):
    """S -> left S right^T + right S left^T (the two orders of a cross term keep S symmetric)."""
    return np.kron(left, right) + np.kron(right, left)


def inner_step_operator(model: TwoStageModel, inner: InnerConfig, replicas: int, h: float):
    """(T, f): one inner SGD step of the linearised model on vec(S), S' = T vec(S) + f, in expectation
    over the step's permutations and noise, for a coordinate of curvature h.

    Own map F (each stage against a partner at the optimum), partner maps E_ab (stage 2's theta into
    stage 1's) and E_ba. Fixed routing: G = F + E_ab + E_ba acts per chain, T = G (x) G. Random
    routing: the partner term is (1/B) sum_k P_k (x) E_ab (P_k the column's permutation matrix) and
    with C = S (x) K, K = I - J: E[K P] = K J = 0 (a random partner's deviation has zero mean given
    the own state), P K P^T = K, E[P K P] = E[P^2] - J = K / (N - 1), and independent columns
    decorrelate. Hence T = F (x) F + (1/B)(E_ab (x) E_ab + E_ba (x) E_ba) + (E_ab (x) E_ba + E_ba (x)
    E_ab) / (B (N - 1)): the coupling averages out of the deviations and comes back as noise
    proportional to the partner stage's spread."""
    eta = inner.lr
    lr_a, lr_b = eta * model.stage_lr[0], eta * model.stage_lr[1]
    a, b, B = model.a_star, model.b_star, model.microbatches
    lam_a, lam_b = model.stage_curvatures(h)
    coupling = h * a * b
    own = np.eye(6)
    own[0, 0], own[3, 3] = 1 - lr_a * lam_a, 1 - lr_b * lam_b
    from_b, from_a = np.zeros((6, 6)), np.zeros((6, 6))
    from_b[0, 3] = -lr_a * coupling
    from_a[3, 0] = -lr_b * coupling
    out_a, out_b = model.stage_noise_var()
    noise = np.zeros((6, 6))
    noise[0, 0] = lr_a ** 2 * (inner.noise ** 2 + out_a) / B
    noise[3, 3] = lr_b ** 2 * (inner.noise ** 2 + out_b) / B
    if model.routing == "fixed":
        chain = own + from_b + from_a
        T = _vec(chain, chain)
        # one output-noise draw per microbatch reaches both stages of its chain
        noise[0, 3] = noise[3, 0] = lr_a * lr_b * model.output_noise ** 2 * a * b / B
    else:
        T = _vec(own, own) + (_vec(from_b, from_b) + _vec(from_a, from_a)) / B
        if replicas > 1:
            T = T + _sym(from_b, from_a) / (B * (replicas - 1))
        # the partner's output noise belongs to a random microbatch: E[P] = J projects it out
    return T, noise.reshape(-1)


def phase_operator(model: TwoStageModel, inner: InnerConfig, replicas: int, h: float):
    """(P, f): the H inner steps, S_end = P vec(S_start) + f."""
    T, f = inner_step_operator(model, inner, replicas, h)
    P, forcing = np.eye(36), np.zeros(36)
    for _ in range(inner.steps):
        P, forcing = T @ P, T @ forcing + f
    return P, forcing


def _outer_maps(outer: OuterConfig):
    """(F0, F1a, F1b): the outer step on the 6-state as a map of the own state and of each stage's
    group mean (read off :func:`noloco.theory.outer.outer_step` applied to unit vectors); theta restarts at
    the new phi."""
    rule = outer.rule()
    F0, F1 = np.zeros((6, 6)), [np.zeros((6, 6)), np.zeros((6, 6))]
    for stage in range(2):
        t, p, d = 3 * stage, 3 * stage + 1, 3 * stage + 2
        for j in range(6):
            e = np.eye(6)[j]
            phi, delta = outer_step(e[p], e[d], 0.0, 0.0, **rule)        # own state (no group terms)
            F0[[t, p, d], j] = phi, phi, delta
            phi, delta = outer_step(0.0, 0.0, e[p], e[t] - e[p], **rule)  # group means of phi, progress
            F1[stage][[t, p, d], j] = phi, phi, delta
    return F0, F1[0], F1[1]


def outer_operator(model: TwoStageModel, outer: OuterConfig) -> np.ndarray:
    """O: the outer step on vec(S), in expectation over the groups.

    With A the averaging matrix of a uniform partition, E[A] K = E[A K A] = kappa K; two independent
    partitions (per-stage groups) give E[A_a K A_b] = kappa^2 K, one shared partition kappa K. So
    S' = F0 S F0^T + kappa (F0 S F1^T + F1 S F0^T + F1a S F1a^T + F1b S F1b^T)
         + kappa_ab (F1a S F1b^T + F1b S F1a^T),  F1 = F1a + F1b."""
    F0, F1a, F1b = _outer_maps(outer)
    kappa = group_kappa(outer.replicas, outer.group_size)
    kappa_ab = kappa if model.groups == "shared" else kappa ** 2
    F1 = F1a + F1b
    return (_vec(F0, F0) + kappa * (_sym(F0, F1) + _vec(F1a, F1a) + _vec(F1b, F1b))
            + kappa_ab * _sym(F1a, F1b))


def initial_moments(model: TwoStageModel) -> np.ndarray:
    """S at t = 0: identical replicas, or offsets of std ``flat_start`` along the flat direction."""
    r = model.radius
    v = np.array([model.a_star, model.a_star, 0.0, -model.b_star, -model.b_star, 0.0]) / r
    return model.flat_start ** 2 * np.outer(v, v)


def _directions(model: TwoStageModel):
    """Unit vectors on the 6-state picking a chain's flat and stiff combinations of (phi_a, phi_b)."""
    r = model.radius
    flat, stiff = np.zeros(6), np.zeros(6)
    flat[[1, 4]] = model.a_star / r, -model.b_star / r
    stiff[[1, 4]] = model.b_star / r, model.a_star / r
    return flat, stiff


@dataclass
class Spreads:
    """Expected spreads per coordinate (averaged over coordinates), E (x_i - mean_j x_j)^2:
    ``outer`` per stage of the outer weights phi after the outer step (weight_std^2 per stage),
    ``inner`` per stage of theta at the end of the inner phase (just before the outer step),
    ``flat`` and ``stiff`` of phi along a chain's flat (a*, -b*)/r and stiff (b*, a*)/r directions.
    :func:`trajectory` gives each along the outer steps (one more axis); :func:`chain_closed_form` has no
    ``inner`` (None)."""

    outer: np.ndarray
    inner: Any  # an array, or None (the chain's closed form)
    flat: Any
    stiff: Any

    def as_dict(self) -> dict:
        return {"outer": self.outer.tolist(), "inner": self.inner.tolist(), "flat": self.flat, "stiff": self.stiff}


def _readout(model: TwoStageModel, replicas: int, post: np.ndarray, end: np.ndarray) -> Spreads:
    share = 1 - 1 / replicas
    flat, stiff = _directions(model)
    return Spreads(share * np.array([post[1, 1], post[4, 4]]), share * np.array([end[0, 0], end[3, 3]]),
                   share * float(flat @ post @ flat), share * float(stiff @ post @ stiff))


def _coordinate_maps(model, outer, inner):
    """Per distinct curvature: (count, O, P, f_phase)."""
    O = outer_operator(model, outer)
    values, counts = np.unique(np.array(model.curvatures), return_counts=True)
    return [(int(k), O, *phase_operator(model, inner, outer.replicas, float(h))) for h, k in zip(values, counts)]


def decay_factor(model: TwoStageModel, outer: OuterConfig, inner: InnerConfig) -> float:
    """Spectral radius of one outer step (inner phase, then outer step) on the second moments, worst
    coordinate: below 1 the spread settles; at 1 a direction has no restoring force (the flat
    direction of fixed routing without pull)."""
    return max(float(np.max(np.abs(np.linalg.eigvals(O @ P)))) for _, O, P, _ in _coordinate_maps(model, outer, inner))


def trajectory(model: TwoStageModel, outer: OuterConfig, inner: InnerConfig, steps: int) -> Spreads:
    """Exact expected spreads at every outer step of the linearised model, from :func:`initial_moments`:
    ``outer`` (steps + 1, 2) after outer step t (t = 0: the start), ``inner`` (steps, 2) at the end of
    phase t + 1, ``flat`` and ``stiff`` (steps + 1,). Averaged over coordinates."""
    steps = check_integer("steps", steps, "an integer >= 0", lambda v: v >= 0)
    out = Spreads(outer=np.zeros((steps + 1, 2)), inner=np.zeros((steps, 2)), flat=np.zeros(steps + 1),
                  stiff=np.zeros(steps + 1))
    N, D = outer.replicas, len(model.curvatures)
    if N == 1:
        return out
    S0 = initial_moments(model)
    for count, O, P, f in _coordinate_maps(model, outer, inner):
        post = S0.reshape(-1)
        first = _readout(model, N, S0, S0)
        out.outer[0] += count / D * first.outer
        out.flat[0] += count / D * first.flat
        out.stiff[0] += count / D * first.stiff
        for t in range(steps):
            end = P @ post + f
            post = O @ end
            s = _readout(model, N, post.reshape(6, 6), end.reshape(6, 6))
            out.inner[t] += count / D * s.inner
            out.outer[t + 1] += count / D * s.outer
            out.flat[t + 1] += count / D * s.flat
            out.stiff[t + 1] += count / D * s.stiff
    return out


def _geometric_sums(step: np.ndarray, forcing: np.ndarray, doublings: int = 18):
    """sum_{k < 2^d} step^k forcing for d = doublings - 1 and d = doublings, by doubling (sum_{k<2t} =
    sum_{k<t} + step^t sum_{k<t}), for a step with a marginal mode: what the forcing never reaches
    (a chain's flat direction under backprop noise; the deviations n = N resets; the stiff direction
    beside an unbounded flat one) has settled, to rounding, after 2^18 steps; what it reaches has
    doubled. Stable modes slower than 1 - 1e-4 per outer step would count as unbounded."""
    total, power = forcing.copy(), step.copy()
    previous = total
    for _ in range(doublings):
        previous, total = total, total + power @ total
        power = power @ power
    return previous, total


def stationary(model: TwoStageModel, outer: OuterConfig, inner: InnerConfig) -> Spreads:
    """Stationary expected spreads (the fixed point of the recursion), averaged over coordinates.
    n = N gives zero outer spread (every replica leaves each outer step with the same weights) and the
    one-phase inner spread. A quantity that a marginal mode driven by the noise reaches (the flat
    direction of fixed routing without a pull, under additive noise, and the per-stage spreads it
    enters) is inf: it grows without bound. ``flat_start`` does not matter here."""
    N, D = outer.replicas, len(model.curvatures)
    total = Spreads(np.zeros(2), np.zeros(2), 0.0, 0.0)
    if N == 1:
        return total
    for count, O, P, f in _coordinate_maps(model, outer, inner):
        step = O @ P
        if np.max(np.abs(np.linalg.eigvals(step))) < 1 - MARGINAL:
            post = np.linalg.solve(np.eye(36) - step, O @ f)
            s = _readout(model, N, post.reshape(6, 6), (P @ post + f).reshape(6, 6))
        else:
            before, post = _geometric_sums(step, O @ f)
            s, b = (_readout(model, N, x.reshape(6, 6), (P @ x + f).reshape(6, 6)) for x in (post, before))
            scale = 1e-9 * np.abs(post).max()   # rounding, against the largest moment that settled or grew

            def settled(new, old):
                return np.where(np.abs(new - old) <= scale, new, np.inf)
            s = Spreads(settled(s.outer, b.outer), settled(s.inner, b.inner), float(settled(s.flat, b.flat)),
                        float(settled(s.stiff, b.stiff)))
        total.outer += count / D * s.outer
        total.inner += count / D * s.inner
        total.flat += count / D * s.flat
        total.stiff += count / D * s.stiff
    return total


# ------------------------------------------------------------------- closed forms (limits)

def scalar_spread(outer: OuterConfig, lr: float, curvature: float, steps: int, noise_var: float) -> float:
    """Stationary spread of one direction in the toolkit's scalar model (:func:`noloco.theory.numeric.inner_sgd`,
    :func:`noloco.theory.numeric.stationary_variance`): SGD with learning rate ``lr`` on ``curvature`` with
    gradient-noise variance ``noise_var``."""
    c, s2 = inner_sgd(lr, curvature, steps, math.sqrt(noise_var))
    return float(stationary_variance(outer.alpha, outer.beta, outer.gamma, float(c), float(s2),
                                     outer.replicas, outer.group_size, outer.momentum))


def chain_closed_form(model: TwoStageModel, outer: OuterConfig, inner: InnerConfig) -> Spreads:
    """Fixed routing with shared groups, from the toolkit's one-direction closed form: a chain is two
    independent directions, stiff u = (b* x + a* y)/r with curvature h r^2 and noise sigma^2 +
    output_noise^2 r^2, and flat f = (a* x - b* y)/r with curvature 0 and noise sigma^2 (backprop's
    noise is orthogonal to it: the gradient of a rescaling symmetry's orbit vanishes). The outer step
    acts identically on a and b, so it commutes with the rotation; per stage the spread is then
    (b*^2 V_u + a*^2 V_f)/r^2 and (a*^2 V_u + b*^2 V_f)/r^2. Needs equal ``stage_lr``. Mean over
    coordinates."""
    if model.routing != "fixed" or model.groups != "shared" or model.stage_lr[0] != model.stage_lr[1]:
        raise ConfigError("chain_closed_form needs routing='fixed', groups='shared' and equal stage_lr "
                          f"(got {model.routing!r}, {model.groups!r}, {model.stage_lr!r})")
    a, b, r2 = model.a_star, model.b_star, model.radius ** 2
    lr, B, sigma2 = inner.lr * model.stage_lr[0], model.microbatches, inner.noise ** 2
    out = Spreads(outer=np.zeros(2), inner=None, flat=0.0, stiff=0.0)
    D = len(model.curvatures)
    for h in model.curvatures:
        stiff = scalar_spread(outer, lr, h * r2, inner.steps, (sigma2 + model.output_noise ** 2 * r2) / B)
        flat = scalar_spread(outer, lr, 0.0, inner.steps, sigma2 / B)
        out.stiff += stiff / D
        out.flat += flat / D
        with np.errstate(invalid="ignore"):
            out.outer += np.array([b * b * stiff + a * a * flat, a * a * stiff + b * b * flat]) / r2 / D
    return out


def stage_closed_form(model: TwoStageModel, outer: OuterConfig, inner: InnerConfig) -> np.ndarray:
    """Random routing without its routing noise (leading order in eta h): each stage is the toolkit's
    scalar model with its own curvature, h b*^2 for stage 1 and h a*^2 for stage 2 (the partner's
    deviation averages out), and its own noise sigma^2 + output_noise^2 (b*^2 resp. a*^2). The
    routing noise eta^2 h^2 a*^2 b*^2 v_other / B per inner step is dropped: relative to the gradient
    noise it is O(eta h a*^2 / 2). Per stage, mean over coordinates."""
    out = np.zeros(2)
    extra = model.stage_noise_var()
    for h in model.curvatures:
        for stage, curvature in enumerate(model.stage_curvatures(h)):
            out[stage] += scalar_spread(outer, inner.lr * model.stage_lr[stage], curvature, inner.steps,
                                  (inner.noise ** 2 + extra[stage]) / model.microbatches) / len(model.curvatures)
    return out


def flat_factor(model: TwoStageModel, outer: OuterConfig, inner: InnerConfig) -> float:
    """The predicted ratio (random routing) / (fixed routing, shared groups) of the spread along a
    chain's flat direction, at leading order: with uncorrelated stages the flat combination of random
    routing has spread (a*^2 V_a + b*^2 V_b)/r^2 from :func:`stage_closed_form`, against the flat
    direction's V_f = V(c = 0) of :func:`chain_closed_form`. 0 where V_f is unbounded."""
    fixed = chain_closed_form(dataclasses.replace(model, routing="fixed", groups="shared"), outer, inner).flat
    V = stage_closed_form(dataclasses.replace(model, routing="random"), outer, inner)
    routed = (model.a_star ** 2 * V[0] + model.b_star ** 2 * V[1]) / model.radius ** 2
    return 0.0 if math.isinf(fixed) else routed / fixed


def no_sync_closed_form(model: TwoStageModel, inner: InnerConfig, replicas: int) -> np.ndarray:
    """Random routing without synchronisation (method ``local``: phi <- theta, so only the inner steps
    act), exact per coordinate: with rho_s = 1 - eta_s lambda_s, p_s = 1 - rho_s^2, the routing noise
    q_s = eta_s^2 h^2 a*^2 b*^2 / B and the gradient noise n_s = eta_s^2 (1 - 1/N) sigma_s^2 / B, the
    stationary point of v_a' = rho_a^2 v_a + q_a v_b + n_a (and the same with a, b swapped) is
    v_a = (p_b n_a + q_a n_b) / (p_a p_b - q_a q_b); inf where p_a p_b <= q_a q_b. Mean over coordinates."""
    if model.routing != "random":
        raise ConfigError(f"no_sync_closed_form describes routing='random' (got {model.routing!r}); fixed "
                          "routing without synchronisation has an unbounded flat direction")
    B, share, out = model.microbatches, 1 - 1 / replicas, np.zeros(2)
    extra = model.stage_noise_var()
    lrs = [inner.lr * s for s in model.stage_lr]
    for h in model.curvatures:
        lam = model.stage_curvatures(h)
        p = [1 - (1 - lr * l) ** 2 for lr, l in zip(lrs, lam)]
        q = [lr ** 2 * lam[0] * lam[1] / B for lr in lrs]
        n = [lr ** 2 * share * (inner.noise ** 2 + e) / B for lr, e in zip(lrs, extra)]
        det = p[0] * p[1] - q[0] * q[1]
        if det <= 0:
            return np.full(2, math.inf)
        out += np.array([p[1] * n[0] + q[0] * n[1], p[0] * n[1] + q[1] * n[0]]) / det / len(model.curvatures)
    return out
