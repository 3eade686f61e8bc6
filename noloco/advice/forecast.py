"""Advice from measured runs: a run's spread forecast to the end of its schedule from its first outer steps,
and the spread of another outer setting predicted from a pilot run's measured inputs.

Both start where :mod:`noloco.advice.predict` does: per tensor g, the meter's inputs (c, s2, rho) read
through the exact exchangeable recursion (:func:`noloco.advice.predict.replay`, the long-run noise model),
which gives the inputs as the theory defines them, ``c_t`` and ``s2_t``, for every measured outer step t.

**Forecast** (:func:`forecast`). From the steps measured so far (``from_step``, default all of them: a run that is
still going is forecast from its files) to the run's last outer step T. The inputs are normalised per step
by the schedule's functionals of that step's phase (lr_k the inner learning rate of inner step k):
``L1_t = sum_k lr_k``, ``L2_t = sum_k lr_k^2`` (:func:`phase_functionals`), and by the noise's growth over the
run, ``G_t = exp(h(t / T))``, h piecewise linear (:data:`NOISE_SHAPE`, :func:`noise_base`). Over a window of the last :data:`WINDOW` measured steps
the medians of ``c_t`` and ``s2_t / (L2_t G_t)`` are held, and the future is::

    c_t  = c_hat                (the restoring coefficient of a phase: held, whatever the rate)
    s2_t = s_hat L2_t G_t       (the noise of a phase: per unit of the rate's square summed over it, growing
                                 with the share of the run done)

with rho held at its last long-run value. Both the replay and the future steps go along the run's own groups
(:mod:`noloco.theory.conditional`, drawn from the groups seed the folder records) where it is known and N <= 16;
elsewhere averaged over groups, and the report says which (``groups``). Why c is held: on the model families' cosine
runs (docs/advice.md) the pooled c barely moves with the rate after the early transient (log c on log rate: slope
0.23, per-run intercepts). Why the noise grows: with c held and s2 per unit of L2 held, the forecast along the run's
own groups ran low on every development seed (median 0.83 to 0.91), and the same forecast with the run's own later
s2 in place of the held one came back to about 1: s2 / L2 rises through the run (a reading, not measured: the
noise's share of Adam's normalised update grows as the gradient's signal falls), slowly over the first half and
fastest in the third quarter: h is the piecewise-linear fit the sixth round of :mod:`noloco.studies.forecasts` chose
by cross-validation over a straight line, a quadratic and the schedule's rate. The forecast is stepped from the
recursion's own state at the last measured step, so the spread already built carries over.

**Another setting** (:func:`transfer`). The pilot's per-step inputs, mapped onto the other setting's steps
by the fraction of training done, step the other setting's outer recursion: c unchanged, s2 and rho carried by
:func:`noise_transfer` (a part white over inner steps, per unit of ``L2``, the rate's square summed over a phase,
and a part carried by Adam's first moment, per unit of ``EMA``, split by the pilot's rho; with H kept: s2 by the
L2 ratio, rho unchanged); the result times tilt ** :data:`TILT_EXPONENT` and divided by the pilot's
own replayed / measured spread (the theory's error on this model, which the transfer shares). Where the groups seed
is known both go along groups: the pilot replayed along its own, the target along those its N and n draw from the
same seed. A run's own groups move its spread at N 4 and 8 (:data:`GROUP_LUCK`) and a change of N or n does not
carry that over: without the seed such a change is flagged (``group change``). Measured on the cpu-small GPT, this
holds for changes that scale the amplification of flat and stiff directions alike; the report flags a change that
amplifies flat directions more (:func:`amplification_tilt` above :data:`TILT_LIMIT`: gamma 0), a pilot or
target near the stability edge (decay factor above :data:`EDGE_LIMIT`), a change of H from a pilot's phase shorter
than Adam's first-moment memory (:func:`short_phase`), a target of few outer steps (:data:`SHORT_RUN`) or of
more tokens than the pilot (:data:`TOKENS_LIMIT`), a pilot the theory does not reproduce (:data:`REPLAY_LIMIT`), a
pilot on non-IID shards, and a setting whose exact recursion is unstable at the pilot's flattest c.

Both report what they rest on (``flags``). A forecast is withdrawn (``unsure``) where its error model
(:data:`ERROR_MODEL`, :func:`error_band`: log(forecast / measured) = mu + sigma e, mu and log sigma linear in how far
it extrapolates, its window's noise scatter (:func:`noise_scatter`), the decay factor at the flattest c, H, T and the
window's pooled c and its rise) puts its printed 80 % band (:data:`CLAIM_Z`) beyond 15 %, or with too few measured
steps; a transfer with an unstable target. A forecast also carries its track record (:func:`track_record`): how many
of the seen forecasts from its H and share of the run held within 15 %, and the range by seed; a transfer along one
axis its axis's (:data:`AS_TRACK`). The interval: the forecast divided by the error model's band at 80 %
(:data:`INTERVAL_Z`), and for a transfer along one axis the 10 % and 90 % quantiles of predicted / measured over its
axis's track record (:data:`AS_INTERVAL`), along several over the development sweep (:data:`TRANSFER_ERROR`);
within-run resampling was tried and covers far fewer runs than it claims (docs/advice.md).

**The groups' luck** (:func:`groups_luck`). Both the forecast and the transfer hold to the groups the run's seed
draws. How far other seeds' groups move a finished run's spread: its measured inputs replayed along
:data:`GROUPS_DRAWS` group sequences of other seeds (validated in :mod:`noloco.studies.groups_luck`); for a transfer,
``groups_draws`` steps the target along them, with the transfer's own error (:func:`with_transfer_error`; on fresh
seeds too wide, on others too narrow: :data:`GROUPS_RANGE_HELD`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple, Optional

import numpy as np

from noloco.infra.checks import did_you_mean
from noloco.infra.record import JsonRecord
from noloco.infra.errors import ConfigError, DataError
from noloco.advice.predict import groups_seed, groups_seed_of, own_groups
from noloco.theory import conditional, exchangeable
from noloco.theory.exchangeable import ADAM_BETA1
from noloco.theory.config import OUTER_FIELDS, OuterConfig

#: outer steps of the window whose inputs are held (never the first step, where c is 0 by definition)
WINDOW = 5
#: s2 per unit of L2 grows as exp(h(t / T)) through a run, h piecewise linear: (knot, change of slope there) pairs.
#: Least squares of log(pooled s2 / L2) with per-run intercepts over outer steps 3 to T of the 484 seen runs (seeds
#: 0 to 4, 6, 9 to 17, 21, 22; noloco.studies.forecasts, the sixth round): slopes 0.24, 0.75, 1.78, 0.64 per quarter
NOISE_SHAPE = ((0.0, 0.2368), (0.25, 0.5117), (0.5, 1.0330), (0.75, -1.1374))
#: a transfer extrapolates when the target's outer step amplifies the flattest directions more than this factor,
#: relative to the stiff ones (c = 1), than the pilot's does (:func:`amplification_tilt`)
TILT_LIMIT = 1.5
#: a transfer is divided by its pilot's own replayed / measured spread (second half): the theory's error on this
#: model, which the transfer shares (one-pilot study, development seed: of the 100 one-axis transfers between its
#: H 10 and H 20 runs whose pilot replayed within a factor 1.5, 77 were within 15 % so, 47 without). Flagged beyond
#: this factor: there the pilots near the stability edge (replay 1.38 to 1.44) ran 0.71 to 1.09 calibrated
REPLAY_LIMIT = 1.3
#: a transfer is flagged near the stability edge when the pilot's or the target's decay factor per outer step at the
#: pilot's flattest c exceeds this: there a tensor's pooled inputs move with the setting, either way. Set on the
#: development seed: every alpha 0.7 setting (0.82 to 0.83) against 0.70 and less for the rest; from alpha 0.3 to
#: 0.7 five of six transfers missed, at alpha 0.7 five of six changes of H missed
EDGE_LIMIT = 0.75
#: a transfer is flagged when the target runs fewer outer steps than this: over so short a second half its spread
#: follows the run's own luck, which the pilot's inputs do not carry (groups-luck study, sixth rule: the sd of log
#: predicted / measured was 0.19 at H 20 and 0.23 at H 10 over 16 outer steps, 0.04 and 0.08 over 32)
SHORT_RUN = 24
#: a target trained longer than its pilot is multiplied by the tokens' ratio (its inner steps over the pilot's) to
#: this power: the pilot's inputs are mapped onto the target by the share of its schedule done, while the noise grows
#: with the training done. Groups-luck study: uncorrected, predicted / measured's median ran 0.91 at 1.5 times the
#: tokens and 0.85 and 0.84 at twice (seventh rule; the power fitted there, 0.27 on cpu-tiny, 0.21 on Llama);
#: corrected, 0.96 to 1.01 at 1.25 to 3 times on fresh runs (eighth rule)
TOKENS_EXPONENT = 0.24
#: a transfer is flagged beyond this tokens' ratio, the largest the correction was judged at
TOKENS_LIMIT = 3.0
#: a transfer is multiplied by tilt ** TILT_EXPONENT (:func:`amplification_tilt`): a tensor's pooled c mixes
#: directions of different curvature, and the target's spread leans toward those its outer step amplifies more. Fitted
#: (least squares through 0 of log predicted / measured on log tilt) on the 36 transfers along N and n of the one-pilot
#: study's seeds 0 to 4 (both families, along their own groups): 0.18, residual sd of the log ratio 0.11 -> 0.058
TILT_EXPONENT = 0.18
#: the range of a pilot's replayed / measured spread averaged over groups over the same runs (N 4 and 8, pairs and
#: groups of 4): how much a run's own groups move its spread, which a change of N or n does not carry over
GROUP_LUCK = (0.88, 1.25)
#: the flattest c the tilt is evaluated at, when the pilot's flattest tensor is flatter (c ~ 0 is where every
#: outer step's amplification diverges together)
TILT_FLAT_C = 0.02
#: forecast / measured RMS weight_std over the second half: 10 % and 90 % quantiles over the claimed development
#: forecasts of the third round (noloco.studies.forecasts: 418 of 810; 0.909, 1.081): the held-out study's interval
#: (noloco.studies.advice); the forecast's own is its error model's (ERROR_MODEL)
FORECAST_ERROR = (0.91, 1.08)
#: the same for the unflagged transfers of the development sweep (docs/data/advice_development.json): the interval
#: of a transfer that changes several axes at once (one axis: AS_INTERVAL)
TRANSFER_ERROR = (0.94, 1.09)


#: a forecast holds when the RMS of its weight_std over the run's second half is within this share of the measured
CLAIM_TOLERANCE = 0.15
#: what the fourth round's error model may read of a forecast (:func:`error_features`): how far it extrapolates
#: (log T / K), its window's noise scatter (log), the decay factor at the flattest c, log H / 10, the window's pooled
#: c and its rise (clipped: a c near 0 makes the rise unbounded) and log T / 32
ERROR_READINGS = ("horizon", "noise", "edge", "H", "c", "rise", "T")
#: E log|e| of a standard normal e: log sigma is fitted as the mean of log|residual| plus this
LOG_ABS_NORMAL = 0.6352
@dataclass(frozen=True)
class ErrorModel:
    """The readings an error model reads, its coefficients of mu and log sigma (the constant first), and the
    claim's z."""

    readings: tuple
    mean: tuple
    log_sd: tuple
    z: float


#: the error model (docs/advice.md, "A forecast that answers"; docs/data/forecasts_dev6.json): log(forecast /
#: measured second-half RMS) = mu + sigma e, mu and log sigma linear in :func:`error_features` of these readings
#: (coefficients: the constant first), refitted by the sixth round on the 2,277 seen forecasts from at least WINDOW + 1
#: steps (seeds 0 to 4, 6, 9 to 17, 21, 22) with the noise shaped by NOISE_SHAPE; a forecast is claimed when mu +- z
#: sigma lies within CLAIM_TOLERANCE. The readings and z chosen by leave-one-seed-out cross-validation (the most
#: claims with at most 0.5 % outside 15 %; noloco.studies.forecasts)
ERROR_MODEL = ErrorModel(readings=("horizon", "noise", "edge", "H", "c", "rise", "T"),
                         mean=(0.2620, 0.0801, 0.0293, -0.2314, 0.0202, -0.6376, -0.0130, -0.0202),
                         log_sd=(-3.0760, 0.7885, 0.0735, 0.1686, -0.1254, 0.9732, 0.0215, 0.1254), z=2.5)
#: the printed interval: the error model's band at 80 % (a standard normal's 90 % quantile, in sigmas)
INTERVAL_Z = 1.2816
#: a forecast is claimed when its printed 80 % interval lies within CLAIM_TOLERANCE (the forecasts study's eighth
#: round); before, when mu +- ERROR_MODEL.z sigma did (the fourth round's, for at most 0.5 % outside)
CLAIM_Z = INTERVAL_Z
#: the track record's bins: H up to 7, 8 to 14, 15 or more inner steps; the share of the run forecast from, around
#: 1/4, 3/8, 1/2, 5/8 and 3/4 (upper edges)
TRACK_H = (7, 14, math.inf)
TRACK_SHARES = (5 / 16, 7 / 16, 9 / 16, 11 / 16, 1.0)
#: per bin (H's upper edge, the share's upper edge): the seen forecasts that held within CLAIM_TOLERANCE, of how many,
#: and the least and the most share held by one seed (seeds with at least 10 forecasts in the bin). Seen: the seventh
#: round of noloco.studies.forecasts and seed 26 (noloco.studies.forecasts.read_track_rows: 3,724 forecasts of 790 runs,
#: seeds 0 to 4, 6, 9 to 26, five families, along their own groups, from at least WINDOW + 1 steps); what a forecast
#: the error model does not claim can still say of itself (:func:`track_record`)
TRACK_RECORD = {(7, 5 / 16): (128, 226, 0.333, 0.944), (7, 7 / 16): (174, 226, 0.667, 0.944),
                (7, 9 / 16): (210, 226, 0.722, 1.0), (7, 11 / 16): (219, 226, 0.889, 1.0),
                (7, 1.0): (208, 226, 0.722, 1.0), (14, 5 / 16): (122, 338, 0.045, 1.0),
                (14, 7 / 16): (272, 338, 0.5, 1.0), (14, 9 / 16): (320, 338, 0.733, 1.0),
                (14, 11 / 16): (327, 338, 0.727, 1.0), (14, 1.0): (331, 338, 0.864, 1.0),
                (math.inf, 7 / 16): (102, 226, 0.111, 0.611), (math.inf, 9 / 16): (197, 226, 0.389, 1.0),
                (math.inf, 11 / 16): (212, 226, 0.778, 1.0), (math.inf, 1.0): (220, 226, 0.889, 1.0)}


@dataclass(frozen=True)
class TrackRecord(JsonRecord):
    """Of the ``of`` seen forecasts at H ``h_from`` to ``h_to`` (None: no limit) made from ``share_from`` to
    ``share_to`` of their run, ``held`` were within CLAIM_TOLERANCE of the measured; by seed, from ``seed_low`` to
    ``seed_high`` of them (:data:`TRACK_RECORD`)."""

    h_from: int
    h_to: Optional[int]
    share_from: float
    share_to: float
    held: int
    of: int
    seed_low: float
    seed_high: float

    def text(self) -> str:
        def share(x):
            return str(Fraction(x).limit_denominator(16))

        h = f"H {self.h_from} or more" if self.h_to is None else f"H {self.h_from} to {self.h_to}"
        return (f"of {self.of:,} seen forecasts at {h} from {share(self.share_from)} to {share(self.share_to)} of their "
                f"run, {self.held:,} ({self.held / self.of:.1%}) held within {CLAIM_TOLERANCE:.0%}, by seed "
                f"{self.seed_low:.0%} to {self.seed_high:.0%}")


def track_bin(from_step: int, outer_steps: int, inner_steps: int) -> tuple[float, float]:
    """The :data:`TRACK_RECORD` bin (H's upper edge, the share's upper edge) of a forecast from outer step
    ``from_step`` of ``outer_steps`` at H ``inner_steps``: half-open bins, an edge in the bin above, the run's end in
    the last."""
    h = next(e for e in TRACK_H if inner_steps <= e)
    share = from_step / outer_steps
    return h, next((e for e in TRACK_SHARES if share < e), TRACK_SHARES[-1])


def track_record(from_step: int, outer_steps: int, inner_steps: int) -> TrackRecord | None:
    """The seen forecasts of a forecast's bin (:data:`TRACK_RECORD`); None from fewer than WINDOW + 1 steps and in a
    bin no seen forecast fell in."""
    if from_step < WINDOW + 1:
        return None
    h, share = track_bin(from_step, outer_steps, inner_steps)
    if (h, share) not in TRACK_RECORD:
        return None
    held, of, low, high = TRACK_RECORD[h, share]
    i, j = TRACK_H.index(h), TRACK_SHARES.index(share)
    return TrackRecord(h_from=TRACK_H[i - 1] + 1 if i else 1, h_to=None if h == math.inf else int(h),
                       share_from=TRACK_SHARES[j - 1] if j else 0.0, share_to=share, held=held, of=of, seed_low=low,
                       seed_high=high)


#: the outer axes a transfer changes one at a time (:func:`transfer_axis`): a setting's field and the axis's name
AS_AXES = (("alpha", "alpha"), ("beta", "beta"), ("gamma", "gamma"), ("inner_steps", "H"), ("replicas", "N"),
           ("group_size", "n"))
#: the transfers' track record along each axis: (claimed, of them within CLAIM_TOLERANCE, flagged, of them within)
#: over the fresh judgements of cpu-tiny, Llama and the wider Llama (alpha to H: seeds 6, 9 to 19, 21 to 27, re-run
#: with the code as it is; N and n: seeds 7, 8, 18, 19, 25 to 27), of the held-out GPT-NeoX and GPT-2 (groups seeds
#: 170 to 175, every axis both ways) and of the short-phase study (H 10 to 5 and back, four families, groups seeds
#: 190 to 197) as --as flags them today, noloco.studies.transfers.track_table of read_track_rows
AS_TRACK = {"alpha": (60, 60, 60, 56), "beta": (120, 119, 0, 0), "gamma": (120, 120, 0, 0), "H": (112, 108, 112, 102),
            "N": (52, 52, 0, 0), "n": (26, 26, 26, 24)}
#: the 80 % interval of predicted / measured along one axis, claimed (True) or flagged (False): the 10 % and 90 %
#: quantiles over every judged transfer (noloco.studies.transfers.read_interval_rows: the track record's, the
#: setting-mean study's single runs and the groups-luck study's same-seed transfers; interval_table). Before the
#: groups-luck study's fourth rule, over the track record's alone (along alpha claimed 0.958 to 1.057, H 0.919 to
#: 1.092): on fresh groups seeds it held 188 of 288 and 108 of 160 (docs/advice.md, "The floor"). H down counted
#: flagged, as when it was derived; claimed since the short-phase study, it prints H's claimed interval (22 of that
#: study's 32 inside)
AS_INTERVAL = {("alpha", True): (0.893, 1.045), ("alpha", False): (0.934, 1.161), ("beta", True): (0.945, 1.066),
               ("gamma", True): (0.946, 1.07), ("H", True): (0.931, 1.096), ("H", False): (0.904, 1.095),
               ("N", True): (0.927, 1.06), ("n", True): (0.901, 1.029), ("n", False): (0.902, 1.034)}


@dataclass(frozen=True)
class AxisRecord(JsonRecord):
    """Along ``axis``, of ``claimed`` fresh transfers claimed ``held`` were within CLAIM_TOLERANCE of the measured,
    and of ``flagged`` flagged ``flagged_held`` (:data:`AS_TRACK`); ``flagged_now``: whether this transfer is."""

    axis: str
    claimed: int
    held: int
    flagged: int
    flagged_held: int
    flagged_now: bool

    def text(self) -> str:
        n, held, kind = ((self.flagged, self.flagged_held, "flagged") if self.flagged_now else
                         (self.claimed, self.held, "claimed"))
        if not n:
            return f"along {self.axis}: none for a {kind} transfer (no transfer on fresh seeds was {kind})"
        return (f"along {self.axis}: of {n} {kind} transfers on fresh seeds, {held} ({held / n:.0%}) held within "
                f"{CLAIM_TOLERANCE:.0%}")


def transfer_axis(pilot_cfg, target_cfg) -> str | None:
    """The one outer axis of :data:`AS_AXES` a transfer changes (H with or without the outer steps), None when it
    changes none or more than one."""
    def value(cfg, name):
        return getattr(cfg, name) if name == "inner_steps" else getattr(cfg.outer, name)

    moved = [axis for name, axis in AS_AXES if value(pilot_cfg, name) != value(target_cfg, name)]
    return moved[0] if len(moved) == 1 else None


def error_claimed(mu, sigma, z: float):
    """Whether the band ``mu`` +- ``z`` ``sigma`` of log(forecast / measured) lies within CLAIM_TOLERANCE (arrays or
    numbers)."""
    return (mu - z * sigma >= math.log(1 - CLAIM_TOLERANCE)) & (mu + z * sigma <= math.log(1 + CLAIM_TOLERANCE))


def error_features(K, T, H, noise, decay, c_level, rise, names=ERROR_READINGS) -> np.ndarray:
    """The readings ``names`` of a forecast from outer step ``K`` of ``T`` (H inner steps, its window's noise scatter,
    decay factor at the flattest c, pooled c and its rise), a constant 1 first: the error model's regressors."""
    def finite(x, default):
        return default if x is None or not math.isfinite(x) else float(x)

    every = {"horizon": math.log(T / K), "noise": math.log(max(finite(noise, 1.0), 0.01)),
             "edge": finite(decay, 1.0), "H": math.log(H / 10), "c": min(max(finite(c_level, 0.0), -0.2), 0.5),
             "rise": min(max(finite(rise, 3.0), -1.0), 3.0), "T": math.log(T / 32)}
    return np.array([1.0] + [every[n] for n in names])

#: the groups a forecast steps along: the run's own (drawn from its groups seed) or averaged over random groups
ALONG = ("own", "average")

#: bytes a forecast or transfer holds per outer step and tensor (its inputs and trajectories, float64) and per
#: inner step (the learning-rate schedule and its functionals), and per reported row (a small dict)
_BYTES_PER_STEP_TENSOR, _BYTES_PER_INNER_STEP, _BYTES_PER_ROW = 8 * 24, 8 * 8, 600


def require_memory(setting, tensors: int, what: str) -> None:
    """Refuse (exit 3, before any work) a forecast or transfer of ``setting`` whose arrays would exceed the memory
    budget (half the memory available): the steps of a tampered or mistyped setting (``outer-steps=100000000``)."""
    from noloco.infra import budget

    estimate = (setting.outer_steps * (tensors * _BYTES_PER_STEP_TENSOR + _BYTES_PER_ROW)
                + setting.outer_steps * setting.inner_steps * _BYTES_PER_INNER_STEP)
    budget.require(estimate, budget.resolve(), f"{what} over {setting.outer_steps} outer steps of "
                   f"{setting.inner_steps} inner steps", "give fewer outer-steps or inner-steps")


class Phases(NamedTuple):
    """Per outer step (index t - 1) of a schedule: the sum of its inner learning rates, of their squares, and the
    exponential average's variance (:func:`phase_functionals`)."""

    L1: np.ndarray
    L2: np.ndarray
    EMA: np.ndarray

    def at(self, steps) -> "Phases":
        """The functionals of the outer steps ``steps`` (indices or a slice)."""
        return Phases(*(x[steps] for x in self))


def same_fraction(pilot_steps: int, target_steps: int, measured: int) -> np.ndarray:
    """For each of ``target_steps`` outer steps, the pilot's step (0-based) covering the same fraction of training,
    within the ``measured`` ones: how the pilot's inputs map onto another setting's steps."""
    return np.minimum(np.ceil((np.arange(target_steps) + 1) * pilot_steps / target_steps).astype(int) - 1,
                      measured - 1)


def phase_functionals(lrs: np.ndarray, inner_steps: int, beta1: float = ADAM_BETA1) -> Phases:
    """Per outer step (index t - 1) of the learning rates ``lrs`` of every inner step: ``L1`` (sum of the phase's
    rates), ``L2`` (sum of their squares) and ``EMA`` = Var(sum_k lr_k m_k) / sigma^2, m an exponential average
    (decay beta1) of white noise of variance sigma^2 in its stationary state, Cov(m_j, m_k) = (1 - b)/(1 + b)
    b^|j - k|."""
    T = len(lrs) // inner_steps
    P = np.asarray(lrs[: T * inner_steps], dtype=float).reshape(T, inner_steps)
    k = np.arange(inner_steps)
    C = (1 - beta1) / (1 + beta1) * beta1 ** np.abs(k[:, None] - k[None, :])
    return Phases(L1=P.sum(1), L2=(P * P).sum(1), EMA=np.einsum("tj,jk,tk->t", P, C, P))


def schedule_functionals(cfg, beta1: float = ADAM_BETA1) -> Phases:
    """:func:`phase_functionals` of every outer step of the run configured by ``cfg`` (its whole schedule)."""
    lrs = np.asarray(cfg.inner_lr(np.arange(cfg.outer_steps * cfg.inner_steps)), dtype=float)
    return phase_functionals(lrs, cfg.inner_steps, beta1)


def noise_transfer(rho: float, pilot: Phases, target: Phases) -> tuple[np.ndarray, float]:
    """How a tensor's progress noise carries from the ``pilot``'s phases to the ``target``'s (each target step beside
    the pilot's phase it maps to): ``(the factor on s2 per step, the target's long-run rho)``. The noise has two
    parts: one white over inner steps (phase variance and long-run variance both per unit of L2) and one carried by
    the inner optimiser's first moment, an exponential average of white noise (phase variance per unit of EMA,
    long-run variance per unit of L2: the average's weights sum to 1). The pilot's long-run rho gives the carried
    part's share of its phase variance: Q = (1 + rho) / (1 - rho), the long-run over the phase variance, is
    (w + e) L2 / (w L2 + e EMA), so that share is phi = (Q - 1) EMA / (L2 - EMA) (within [0, 1]). With no first
    moment (EMA = L2) or rho <= 0 this is the L2 ratio with rho kept."""
    Q = (1 + rho) / (1 - rho)
    gap = pilot.L2 - pilot.EMA
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.clip(np.where(gap > 0, (Q - 1) * pilot.EMA / gap, 0.0), 0.0, 1.0)
    scale = (1 - phi) * target.L2 / pilot.L2 + phi * target.EMA / pilot.EMA
    Qb = Q * (target.L2 / pilot.L2) / scale
    return scale, float(np.median((Qb - 1) / (Qb + 1))) if Qb.size else float(rho)


def noise_log_growth(u) -> np.ndarray:
    """h(u), the log of the noise's growth per unit of L2 at the share ``u`` = t / T of a run done
    (:data:`NOISE_SHAPE`)."""
    u = np.asarray(u, dtype=float)
    return sum((change * np.maximum(u - knot, 0.0) for knot, change in NOISE_SHAPE), np.zeros_like(u))


def noise_shape_text() -> str:
    """NOISE_SHAPE as the report's recipe states it: h's slope from each knot on."""
    slopes = np.cumsum([change for _, change in NOISE_SHAPE])
    return ", ".join(f"{s:.3g} from {k:g}" for (k, _), s in zip(NOISE_SHAPE, slopes)) or "0"


def noise_base(cfg) -> np.ndarray:
    """Per outer step (index t - 1): what the forecast's noise is per unit of, ``L2_t exp(h(t / T))``."""
    T = cfg.outer_steps
    return schedule_functionals(cfg).L2 * np.exp(noise_log_growth(np.arange(1, T + 1) / T))


def _measured(run_dir, from_step: int | None, finished_from_quarter: bool = False):
    """The run, its per-tensor inputs and the measured outer steps used (1..t0: ``from_step``, by default every
    measured step or, with ``finished_from_quarter``, the first quarter of a finished run)."""
    from noloco.advice.predict import group_inputs, input_rows
    from noloco.advice.record import read_run

    run = read_run(run_dir)
    inputs = None if run.inputs is None else input_rows(run)
    if run.outer.group_size == run.outer.replicas:
        raise DataError(f"{run.folder}: method {run.method} leaves the replicas identical (n = N): its spread is 0 "
                        "at every step, there is nothing to forecast or transfer")
    if inputs is None:
        raise DataError(f"{run.folder} has no inputs.jsonl (a run made before the meter, or a torchrun run of `noloco llm "
                        "train`): a forecast or a transfer (--as) needs the measured inputs; train it with `noloco llm train` (batched "
                        "replicas), or in your own loop with noloco.Observer (docs/own_run.md), which measures them "
                        "across ranks too")
    T = run.setting.outer_steps
    if from_step is not None:
        t0 = from_step
    elif len(inputs) < T or not finished_from_quarter:  # a run still going: everything measured so far
        t0 = len(inputs)
    else:  # a finished run: nothing is left to forecast from its end, so from its first quarter (docs/advice.md)
        t0 = min(max(T // 4, 3), len(inputs))
    if not 1 <= t0 <= len(inputs):
        raise ConfigError(f"from_step={from_step!r} is out of range; allowed: 1 <= from_step <= {len(inputs)} "
                          "(the measured outer steps)")
    names = list(inputs[0].groups)
    try:
        groups = {name: group_inputs(inputs[:t0], name) for name in names}
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise DataError(f"{run.folder / 'inputs.jsonl'}: a tensor lacks or garbles {err} in some row") from None
    return run, groups, t0


@dataclass(frozen=True)
class ReplayedTensor:
    """One tensor replayed over the measured steps: the recursion's state after them, the inputs as the theory
    reads them (c_t, s2_t) and the last long-run rho."""

    numel: int
    S: np.ndarray
    c: np.ndarray
    s2: np.ndarray
    rho: float


def replayed_tensors(outer, groups: dict, along=None) -> dict[str, ReplayedTensor]:
    """Per tensor of ``groups`` (:func:`noloco.advice.predict.group_inputs`): its :class:`ReplayedTensor`;
    ``along``: the measured steps' averaging matrices (the run's own groups), else averaged over groups."""
    from noloco.advice.predict import replay

    out = {}
    for name, g in groups.items():
        s2, rho, _ = g.long_run
        S, _, c_true, s2_true = replay(outer, g.c, s2, rho, groups=along)
        out[name] = ReplayedTensor(numel=g.numel, S=S, c=c_true, s2=s2_true, rho=float(rho[-1]))
    return out


def _step_forward(outer, S, c, s2, rho, along=None) -> np.ndarray:
    """E z^2 after each of the given steps (inputs as the theory reads them: no correction); ``along``: the
    steps' averaging matrices (S then the replicas' full deviation covariance), else averaged over groups."""
    out = np.empty(len(c))
    for i, (c_t, s2_t) in enumerate(zip(c, s2)):
        S = conditional.advance(outer, S, None if along is None else along[i], float(c_t), float(s2_t), rho)
        out[i] = conditional.spread(S, outer.replicas)
    return out


def _weight_std(per_tensor: list[tuple[int, np.ndarray]]) -> np.ndarray:
    total = sum(n for n, _ in per_tensor)
    return np.sqrt(np.maximum(sum(n * v for n, v in per_tensor), 0.0) / total)


def _pooled(tensors: dict[str, ReplayedTensor], series, idx) -> np.ndarray:
    """``series(tensor)`` (an input per step, e.g. ``lambda t: t.c``) at steps ``idx``, weighted by the tensors' sizes."""
    total = sum(t.numel for t in tensors.values())
    return sum(t.numel * series(t)[idx] for t in tensors.values()) / total


def noise_scatter(tensors: dict[str, ReplayedTensor], base: np.ndarray, window: np.ndarray) -> float:
    """The standard deviation of log(pooled s2 / (L2 G)) over the ``window``'s steps: how far the noise the forecast
    holds moves within it (0 when it follows the model's growth exactly)."""
    return float(np.std(np.log(np.maximum(_pooled(tensors, lambda t: t.s2, window) / base[window], 1e-300))))


def flattest_c(tensors: dict[str, ReplayedTensor], t0: int) -> float:
    """The flattest tensor's c: the least of the tensors' medians over the second half of the ``t0`` measured steps
    (where a run is nearest its stability edge, ``near the edge``)."""
    return min(float(np.median(t.c[max(t0 // 2, 1):t0])) for t in tensors.values())


def amplification_tilt(pilot, target, c_flat: float, rho: float = 0.0) -> float:
    """How much more the ``target`` outer step amplifies a direction of restoring coefficient ``c_flat`` than a
    stiff one (c = 1), relative to the ``pilot``'s: [R_B(c_flat) / R_A(c_flat)] / [R_B(1) / R_A(1)], R the exact
    stationary spread per unit noise. 1 when a change scales every direction alike (then the pilot's pooled
    inputs carry over); inf when the target is unstable at ``c_flat``. A target that leaves the replicas identical
    (n = N, or beta 0: no spread at any c) scales every direction alike, to 0: 1."""
    R = exchangeable.stationary_spread
    stiff = R(target, 1.0, 1.0, rho) / R(pilot, 1.0, 1.0, rho)
    flat = R(target, c_flat, 1.0, rho) / R(pilot, c_flat, 1.0, rho)
    if stiff == 0:
        return 1.0 if flat == 0 else math.inf
    return flat / stiff


def interval_bounds(values: np.ndarray, error: tuple[float, float]) -> tuple[list, list]:
    """The 80 % interval's low and high ends about ``values``, from the (low, high) quantiles of predicted /
    measured ``error``."""
    lo, hi = error
    return (values / hi).tolist(), (values / lo).tolist()


@dataclass(frozen=True)
class StepGroups(JsonRecord):
    """The groups a forecast or transfer stepped along: ``"own"`` (the run's groups seed; a transfer's target draws
    from the pilot's) or ``"average"`` (over random groups, and why)."""

    along: str
    seed: Optional[int]
    why: Optional[str]


@dataclass(frozen=True)
class ForecastStep(JsonRecord):
    """The forecast weight_std after one future outer step, its 80 % interval, and what the run measured there
    (None where it has no evaluation)."""

    outer_step: int
    forecast: float
    low: float
    high: float
    measured: Optional[float]


@dataclass(frozen=True)
class ErrorBand(JsonRecord):
    """The error model's log(forecast / measured) for one forecast: ``mu`` +- ``sigma`` (:data:`ERROR_MODEL`)."""

    mu: float
    sigma: float

    def band(self, z: float) -> tuple[float, float]:
        """forecast / measured at mu -+ z sigma."""
        return math.exp(self.mu - z * self.sigma), math.exp(self.mu + z * self.sigma)


def error_band(K, T, H, noise, decay, c_level, rise) -> ErrorBand:
    """:data:`ERROR_MODEL`'s mu and sigma for a forecast from outer step ``K`` of ``T`` with these readings."""
    x = error_features(K, T, H, noise, decay, c_level, rise, ERROR_MODEL.readings)
    return ErrorBand(mu=float(x @ ERROR_MODEL.mean), sigma=float(math.exp(x @ ERROR_MODEL.log_sd)))


@dataclass(frozen=True)
class ForecastRecipe(JsonRecord):
    """What the forecast held: its window's length, and how c and s2 go on past it."""

    window: int
    c_scaling: str
    s2_scaling: str


@dataclass(frozen=True)
class Forecast(JsonRecord):
    """:func:`forecast`'s report (``noloco llm predict --forecast --json``)."""

    NESTED = {"groups": StepGroups, "rows": (list, ForecastStep), "recipe": ForecastRecipe, "error": ErrorBand,
              "track_record": TrackRecord}
    OPTIONAL_KEYS = ("error", "track_record")

    run: str
    method: str
    from_step: int
    outer_steps: int
    window: list  # [first, last]: the outer steps whose inputs are held
    c_rise: float
    c_level: float
    noise_scatter: float  # the window's, :func:`noise_scatter`
    decay_factor: float  # per outer step at the flattest c (:func:`flattest_c`), as ``--as`` reads the edge
    flags: list
    groups: StepGroups
    rows: list
    interval: dict  # {"quantiles", "from"}: where the interval was measured
    recipe: ForecastRecipe
    error: Optional[ErrorBand] = field(default=None, kw_only=True)  # absent from reports written before it
    track_record: Optional[TrackRecord] = field(default=None, kw_only=True)  # None from too few steps

    def second_half(self) -> list:
        """The forecast steps of the run's second half that it measured."""
        return [r for r in self.rows if r.outer_step > self.outer_steps / 2 and r.measured is not None]


def _measured_rows(run) -> dict:
    return {int(m.outer_step): m.weight_std for m in run.metric_rows}


def forecast(run_dir, from_step: int | None = None, along: str = "own", seed: int | None = None,
             measured_later: str | None = None) -> Forecast:
    """The spread of a run forecast from its measured outer steps 1..``from_step`` to its last outer step (module
    docstring). ``from_step`` defaults to every step measured in a run still going and, in a finished run, to its
    first quarter (at least 3 steps), the point the held-out evaluation validated. Rows for every future step,
    with the measured weight_std where the run has it. ``along``: ``"own"`` steps the recursion along the run's
    own groups (:mod:`noloco.theory.conditional`, drawn from the groups seed its folder records, or ``seed``
    where it records none), ``"average"`` the exchangeable recursion averaged over groups (also where no seed is
    known: the report says which). ``measured_later`` (``"c"`` or ``"s2"``, a diagnostic of a finished run): that
    input of the future steps taken from the replay of every measured step instead of held."""
    if measured_later not in (None, "c", "s2"):
        raise ConfigError(f"measured_later={measured_later!r} is not allowed; allowed: c, s2")
    if along not in ALONG:
        raise ConfigError(f"along={along!r} is not allowed; allowed: {', '.join(ALONG)}")
    run, groups, t0 = _measured(run_dir, from_step, finished_from_quarter=True)
    cfg, outer = run.setting, run.outer
    require_memory(cfg, len(groups), "the forecast")
    T = cfg.outer_steps
    if t0 < 3 and from_step is not None and len(run.inputs) >= 3:  # the caller's value, not the run's fault
        raise ConfigError(f"from_step={from_step} is out of range; allowed: 3 <= from_step <= {len(run.inputs)} (a "
                          "forecast needs 3 measured outer steps: the first step's c is 0 by definition)")
    if t0 < 3:
        raise DataError(f"{run.folder}: {t0} measured outer step(s); a forecast needs at least 3 (the first step's c "
                        "is 0 by definition)")
    mats, why = own_groups(run, T, seed) if along == "own" else (None, "asked")
    own = mats is not None
    tensors = replayed_tensors(outer, groups, mats[:t0] if own else None)
    base = noise_base(cfg)
    window = np.arange(max(t0 - WINDOW, 1), t0)  # 0-based steps, never the first
    future = np.arange(t0, T)
    flags = []
    c_pooled = _pooled(tensors, lambda t: t.c, window)
    rise = (c_pooled[-2:].mean() - c_pooled[:2].mean()) / abs(c_pooled.mean()) if c_pooled.mean() else math.inf
    c_level = float(np.median(c_pooled))
    scatter = noise_scatter(tensors, base, window)
    # the decay factor at the flattest c, as `--as` reads the stability edge (EDGE_LIMIT): a reading of the error model
    edge = exchangeable.decay_factor(outer, max(flattest_c(tensors, t0), 0.0))
    error = error_band(t0, T, cfg.inner_steps, scatter, edge, c_level, float(rise))
    record = track_record(t0, T, cfg.inner_steps)
    if not error_claimed(error.mu, error.sigma, CLAIM_Z):
        lo, hi = error.band(CLAIM_Z)
        flags.append(f"unsure: the error model puts forecast / measured at {math.exp(error.mu):.3f}, its "
                     f"80 % band {lo:.3f} to {hi:.3f} (sigma {error.sigma:.3f} in log), not within "
                     f"{CLAIM_TOLERANCE:.0%}: from outer step {t0} of {T} at H {cfg.inner_steps}, the window's noise "
                     f"scatter {scatter:.3g}, decay factor {edge:.3f}, pooled c {c_level:.3g}, its rise {rise:.0%}"
                     f"{f' ({record.text()})' if record else ''}; wait for more steps")
    if len(window) < WINDOW:
        flags.append(f"too few steps: the window holds {len(window)} outer steps after the first, the validated recipe "
                     f"{WINDOW}; forecast from outer step {WINDOW + 1} or later")
    if not future.size:
        flags.append("the run is measured to its last outer step: nothing is left to forecast")
    later = None
    if measured_later:  # the inputs of every measured step, as the theory reads them
        _, every, _ = _measured(run_dir, T)
        later = replayed_tensors(outer, every, mats if own else None)
    per = []
    for name, t in tensors.items():
        c = np.full(future.size, float(np.median(t.c[window])))
        s2 = float(np.median(t.s2[window] / base[window])) * base[future]
        if measured_later == "c":
            c = later[name].c[future]
        elif measured_later == "s2":
            s2 = later[name].s2[future]
        per.append((t.numel, _step_forward(outer, t.S, c, s2, t.rho, mats[t0:] if own else None)))
    ws = _weight_std(per) if future.size else np.zeros(0)
    if future.size and not np.all(np.isfinite(ws)):
        flags.append("the forecast recursion diverges: the held inputs make this outer setting unstable")
    measured = _measured_rows(run)
    rows = [ForecastStep(outer_step=int(s + 1), forecast=float(v), low=lo, high=hi, measured=measured.get(int(s + 1)))
            for s, v, lo, hi in zip(future, ws, *interval_bounds(ws, error.band(INTERVAL_Z)))]
    return Forecast(run=str(run.folder), method=run.method, from_step=t0, outer_steps=T,
                    window=[int(window[0] + 1), t0], c_rise=float(rise), c_level=c_level, noise_scatter=scatter,
                    decay_factor=edge, flags=flags,
                    groups=StepGroups(along="own" if own else "average",
                                      seed=(groups_seed(cfg) if seed is None else seed) if own else None, why=why),
                    rows=rows, interval={"quantiles": list(error.band(INTERVAL_Z)), "from": "docs/data/forecasts_dev6.json"},
                    error=error, track_record=record,
                    recipe=ForecastRecipe(window=WINDOW, c_scaling="held",
                                          s2_scaling=f"L2 exp(h(t / T)), h's slope {noise_shape_text()}"))


#: the fields a transfer may change, with their types: the outer step's, then the schedule's
OUTER_CHANGES = {name: type(getattr(OuterConfig, name)) for name in OUTER_FIELDS}
SCHEDULE_FIELDS = {"lr": float, "inner_steps": int, "outer_steps": int}
TRANSFER_FIELDS = {**OUTER_CHANGES, **SCHEDULE_FIELDS}


@dataclass(frozen=True)
class TransferRow(JsonRecord):
    """The transfer's predicted weight_std after one outer step of the target, with its 80 % interval."""

    outer_step: int
    predicted: float
    low: float
    high: float


@dataclass(frozen=True)
class GroupsRange(JsonRecord):
    """The 10 % and 90 % quantiles of the target's measured second-half RMS with another groups seed over the
    prediction along the pilot's: ``draws`` group sequences of other seeds and the transfer's own error
    (:func:`with_transfer_error`; docs/advice.md, "The groups' luck")."""

    draws: int
    low: float
    high: float


@dataclass(frozen=True)
class Transfer(JsonRecord):
    """:func:`transfer`'s report (``noloco llm predict --as ... --json``)."""

    NESTED = {"groups": StepGroups, "rows": (list, TransferRow), "track_record": AxisRecord,
              "groups_luck": GroupsRange}
    OPTIONAL_KEYS = ("track_record", "groups_luck", "tokens_ratio")

    run: str
    changes: dict
    flags: list
    decay_factor: float
    pilot_decay_factor: float
    flattest_c: float
    tilt: float
    second_half_rms: float
    second_half_rms_average: float
    groups: StepGroups
    pilot_replayed_rms: float
    pilot_replay_ratio: Optional[float]
    interval: dict  # {"quantiles", "from"}: where the interval was measured
    rows: list
    track_record: Optional[AxisRecord] = field(default=None, kw_only=True)  # None off the axes (AS_TRACK)
    groups_luck: Optional[GroupsRange] = field(default=None, kw_only=True)  # asked for (groups_draws)
    tokens_ratio: Optional[float] = field(default=None, kw_only=True)  # the target's inner steps over the pilot's, > 1


def transfer(run_dir, seed: int | None = None, groups_draws: int = 0, **changes) -> Transfer:
    """The spread of the pilot run's setting with ``changes`` (outer fields: alpha, beta, gamma, group_size,
    replicas, momentum; schedule: lr, inner_steps, outer_steps) predicted from the pilot's measured inputs
    (module docstring), the pilot's own prediction beside it, and the flags of what it extrapolates. The pilot is
    replayed along its own groups and the target stepped along the groups its setting draws from the same groups
    seed (the folder's, or ``seed`` where it records none; :func:`target_groups`). ``groups_draws``: also the 80 %
    range of the target's spread over that many group sequences of other seeds (``groups_luck``)."""
    run, groups, t0 = _measured(run_dir, None)
    pilot_cfg = run.setting
    unknown = set(changes) - set(TRANSFER_FIELDS)
    if unknown:
        raise ConfigError(f"cannot transfer a change of {', '.join(sorted(unknown))}; allowed: "
                          f"{', '.join(sorted(TRANSFER_FIELDS))}")
    try:
        target_cfg = pilot_cfg.changed(**changes)
    except TypeError as err:
        raise ConfigError(f"the changed setting is not valid: {err}") from None
    except ConfigError as err:
        from noloco.theory.methods import METHOD_SUMMARY

        asked = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in changes.items())
        try:  # valid under the free method: the pilot's method is what refuses it
            dataclasses.replace(pilot_cfg, method="noloco").changed(**changes)
        except ConfigError:  # out of range whatever the method: its own reason
            raise ConfigError(f"--as {asked}: {err}") from None
        raise ConfigError(f"--as {asked}: method {run.method!r} fixes that ({METHOD_SUMMARY[run.method]}); --as "
                          f"changes a setting within the pilot's method") from None
    if groups_draws and target_cfg.outer.replicas > conditional.MAX_REPLICAS:  # asked for: refused, not left out
        raise ConfigError(f"--groups-luck: the target's N = {target_cfg.outer.replicas} > {conditional.MAX_REPLICAS}: "
                          "the groups luck steps the replicas' full covariance, too large here; drop --groups-luck")
    require_memory(target_cfg, len(groups), "the transfer")
    outer_b = target_cfg.outer
    Tb = target_cfg.outer_steps
    pilot_mats, target_mats, why = target_groups(run, target_cfg, t0, seed)
    tensors = replayed_tensors(run.outer, groups, pilot_mats)
    beta1 = inner_beta1(pilot_cfg)
    pilot_ph, target_ph = schedule_functionals(pilot_cfg, beta1), schedule_functionals(target_cfg, beta1)
    src = same_fraction(pilot_cfg.outer_steps, Tb, t0)
    pilot_at = pilot_ph.at(src)
    flags = []
    if t0 < pilot_cfg.outer_steps:
        flags.append(f"the pilot is measured to outer step {t0} of {pilot_cfg.outer_steps}: later steps reuse its "
                     "last inputs")
    if pilot_cfg.noniid:
        flags.append("the pilot trains on non-IID shards: its drift is carried over as it was measured")
    per_pilot, per_average, target_inputs = [], [], []
    for t in tensors.values():
        start = exchangeable.initial(float(t.s2[0]), 0.0, 0.0)
        scale, rho = noise_transfer(t.rho, pilot_at, target_ph)
        c, s2 = t.c[src], t.s2[src] * scale
        target_inputs.append((t.numel, start, c, s2, rho))
        per_average.append((t.numel, _step_forward(outer_b, start, c, s2, rho)))
        if target_mats is None:
            per_pilot.append((t.numel, _step_forward(run.outer, start, t.c, t.s2, t.rho)))
        else:
            per_pilot.append((t.numel, _step_forward(run.outer, conditional.lift(start, run.outer.replicas),
                                                     t.c, t.s2, t.rho, pilot_mats)))

    def target_along(mats) -> np.ndarray:
        """The target's weight_std stepped along one group sequence (before the tilt and the calibration)."""
        return _weight_std([(n, _step_forward(outer_b, conditional.lift(st, outer_b.replicas), c, s2, rho, mats))
                            for n, st, c, s2, rho in target_inputs])

    ws_pilot, ws_average = _weight_std(per_pilot), _weight_std(per_average)
    ws = ws_average if target_mats is None else target_along(target_mats)
    flattest = flattest_c(tensors, t0)
    radius = exchangeable.decay_factor(outer_b, max(flattest, 0.0))
    if not radius < 1:
        flags.append(f"unstable: the target's decay factor at the pilot's flattest c ({flattest:.3g}) is "
                     f"{radius:.4g} >= 1; its spread grows without bound and no level is predicted")
    tilt = amplification_tilt(run.outer, outer_b, max(flattest, TILT_FLAT_C), float(np.median(
        [t.rho for t in tensors.values()])))
    if not tilt <= TILT_LIMIT and not (radius >= 1 and not math.isfinite(tilt)):  # an unstable target: flagged above
        flags.append(f"extrapolates: the new outer step amplifies the flat directions {_tilt(tilt)} more, relative to "
                     f"the stiff ones, than the pilot's (limit {TILT_LIMIT:g}); a tensor's pooled c and s2 mix "
                     "directions of different curvature, so its inputs move with such a change (near the "
                     "stability edge, gamma 0): run a pilot nearer the target")
    radius_pilot = exchangeable.decay_factor(run.outer, max(flattest, 0.0))
    edge = max(radius, radius_pilot)
    if EDGE_LIMIT < edge < 1:
        flags.append(f"near the edge: the {'target' if radius >= radius_pilot else 'pilot'}'s decay factor at the "
                     f"pilot's flattest c ({flattest:.3g}) is {edge:.3f} per outer step (limit {EDGE_LIMIT:g}; the "
                     f"pilot's {radius_pilot:.3f}, the target's {radius:.3f}): near the stability edge a tensor's "
                     "pooled inputs move with the setting, either way; run a pilot at the target")
    short = short_phase(pilot_cfg, target_cfg)
    if short:
        flags.append(short)
    tokens = tokens_ratio(pilot_cfg, target_cfg)
    if tokens > TOKENS_LIMIT:
        flags.append(f"more tokens: the target trains {tokens:.3g} times the pilot's inner steps, beyond the "
                     f"{TOKENS_LIMIT:g} times its correction (the ratio to the power {TOKENS_EXPONENT:g}) was judged "
                     "at (groups-luck study, eighth rule); pilot nearer the target's length")
    few = short_run(target_cfg)
    if few:
        flags.append(few)
    # the pooled c moves toward the directions the target amplifies more (TILT_EXPONENT)
    tilted = tilt ** TILT_EXPONENT if math.isfinite(tilt) else None
    replay = _replay_ratio(run, ws_pilot, t0)
    moved = (run.outer.replicas, run.outer.group_size) != (outer_b.replicas, outer_b.group_size)
    if why is not None and moved:
        flags.append(f"group change: N and n go from {run.outer.replicas} and {run.outer.group_size} to "
                     f"{outer_b.replicas} and {outer_b.group_size}, and {why}; the calibration by the pilot's "
                     f"replayed / measured {_fmt(replay, '.3f')} then holds how the pilot's own groups moved its "
                     f"spread, which the target's groups do not share ({GROUP_LUCK[0]:g} to {GROUP_LUCK[1]:g} at N 4 "
                     "and 8)" + ("; give the seed (--groups-seed) or record it (noloco.Observer does)"
                                 if groups_seed_of(run, seed) is None else ""))
    calibrated = replay is not None and math.isfinite(replay) and replay > 0
    if calibrated:  # the theory's error on this model, which the transfer shares (REPLAY_LIMIT)
        if not 1 / REPLAY_LIMIT <= replay <= REPLAY_LIMIT:
            flags.append(f"not reproduced: the pilot's own inputs give {replay:.2f}x its measured spread over its "
                         f"second half (limit a factor {REPLAY_LIMIT:g}); the transfer, divided by it, carries an "
                         "error the theory does not describe (see noloco llm predict on the pilot)")
    if outer_b.group_size == outer_b.replicas:  # identical replicas: no flag of the spread's level applies to a 0
        flags = [f"no spread: n = N = {outer_b.replicas} leaves the replicas identical, so the target's spread is 0"]

    def corrected(x):  # the tilt's and the tokens' corrections, then the calibration, as every figure takes them
        x = x * tilted if tilted is not None else x
        x = x * max(tokens, 1.0) ** TOKENS_EXPONENT
        return x / replay if calibrated else x

    ws, ws_average = corrected(ws), corrected(ws_average)
    if outer_b.group_size == outer_b.replicas:  # exactly 0, not the round-off of averaging identical replicas
        ws, ws_average = np.zeros_like(ws), np.zeros_like(ws_average)
    late = slice(Tb // 2, None)
    level = float(math.sqrt(np.mean(ws[late] ** 2))) if np.all(np.isfinite(ws)) else math.inf
    average = float(math.sqrt(np.mean(ws_average[late] ** 2))) if np.all(np.isfinite(ws_average)) else math.inf
    luck = None
    quantiles, measured_in = transfer_interval(pilot_cfg, target_cfg, bool(flags))
    if groups_draws and 0 < level < math.inf and outer_b.replicas <= conditional.MAX_REPLICAS:  # a ratio to it
        draws = np.array([_second_half_rms(corrected(target_along(conditional.partitions(
            s, 0, Tb, outer_b.replicas, outer_b.group_size)))) for s in range(DRAW_SEED, DRAW_SEED + groups_draws)])
        luck = GroupsRange(groups_draws, *with_transfer_error(draws / level, quantiles))
    rows = [TransferRow(outer_step=s + 1, predicted=float(v), low=lo, high=hi)
            for s, v, lo, hi in zip(range(Tb), ws, *interval_bounds(ws, quantiles))]
    return Transfer(run=str(run.folder), changes=changes, flags=flags, decay_factor=radius,
                    pilot_decay_factor=radius_pilot, flattest_c=flattest, tilt=tilt, second_half_rms=level,
                    second_half_rms_average=average,
                    groups=StepGroups(along="average" if target_mats is None else "own",
                                          seed=None if target_mats is None else groups_seed_of(run, seed), why=why),
                    pilot_replayed_rms=float(math.sqrt(np.mean(ws_pilot[len(ws_pilot) // 2:] ** 2))),
                    pilot_replay_ratio=replay,
                    interval={"quantiles": list(quantiles), "from": measured_in},
                    rows=rows, track_record=axis_record(pilot_cfg, target_cfg, bool(flags)), groups_luck=luck,
                    tokens_ratio=tokens if tokens > 1 else None)


def with_transfer_error(ratios: np.ndarray, quantiles: tuple[float, float]) -> tuple[float, float]:
    """The 10 % and 90 % quantiles of measured / prediction with another groups seed: the groups' ``ratios`` (each
    draw over the prediction along the pilot's) over the transfer's own error, predicted / measured log-normal with
    its 80 % interval's (``quantiles``) centre and width, taken at 41 of its quantiles (no random draw)."""
    from scipy.special import ndtri

    lo, hi = math.log(quantiles[0]), math.log(quantiles[1])
    error = (lo + hi) / 2 + (hi - lo) / (2 * INTERVAL_Z) * ndtri((np.arange(41) + 0.5) / 41)
    logs = np.log(ratios)[:, None] - error[None, :]
    return float(np.exp(np.quantile(logs, 0.1))), float(np.exp(np.quantile(logs, 0.9)))


def transfer_interval(pilot_cfg, target_cfg, flagged: bool) -> tuple[tuple[float, float], str]:
    """The 80 % interval of predicted / measured of a transfer and where it was measured: its axis's
    (:data:`AS_INTERVAL`, claimed or flagged as this one is) where it changes one axis with a track record, else
    :data:`TRANSFER_ERROR`."""
    key = (transfer_axis(pilot_cfg, target_cfg), not flagged)
    if key in AS_INTERVAL:
        return AS_INTERVAL[key], f"docs/data/transfers_track.json: along {key[0]}, {'flagged' if flagged else 'claimed'}"
    return TRANSFER_ERROR, "docs/data/advice_development.json"


def axis_record(pilot_cfg, target_cfg, flagged: bool) -> AxisRecord | None:
    """The track record (:data:`AS_TRACK`) of the axis a transfer changes, None off the axes."""
    axis = transfer_axis(pilot_cfg, target_cfg)
    if axis not in AS_TRACK:
        return None
    claimed, held, n_flagged, flagged_held = AS_TRACK[axis]
    return AxisRecord(axis=axis, claimed=claimed, held=held, flagged=n_flagged, flagged_held=flagged_held,
                      flagged_now=flagged)


def target_groups(run, target_cfg, t0: int, seed: int | None = None):
    """``(the pilot's averaging matrices over its measured steps, the target's over its run, why not)``: both drawn
    from the pilot's groups seed (the folder's, else ``seed``), each with its own N and n, as a target trained with
    that seed draws them; ``(None, None, why)`` where either cannot be stepped (no seed, N above
    :data:`noloco.theory.conditional.MAX_REPLICAS`): then both recursions average over groups."""
    pilot_mats, why = own_groups(run, t0, seed)
    outer_b = target_cfg.outer
    if pilot_mats is None:
        return None, None, why
    if outer_b.replicas > conditional.MAX_REPLICAS:
        return None, None, (f"the target's N = {outer_b.replicas} > {conditional.MAX_REPLICAS}: averaged over random "
                            "groups")
    return pilot_mats, conditional.partitions(groups_seed_of(run, seed), 0, target_cfg.outer_steps, outer_b.replicas,
                                              outer_b.group_size), None


def inner_beta1(setting) -> float:
    """The inner optimiser's first-moment decay: Adam/AdamW's beta1 from the run's setting where it wrote one, else
    the harness's; 0 for SGD (no first moment)."""
    if setting.inner_optimizer != "adamw":
        return 0.0
    beta1 = setting.recorded().adam_beta1
    return float(ADAM_BETA1 if beta1 is None else beta1)


def first_moment_memory(setting) -> float | None:
    """Inner steps the inner optimiser's first moment remembers, 1 / (1 - beta1) (:func:`inner_beta1`); None for
    SGD (no first moment)."""
    if setting.inner_optimizer != "adamw":
        return None
    return round(1 / (1 - inner_beta1(setting)), 9)  # 1 / (1 - 0.9) is 9.999...


def short_phase(pilot, target) -> str | None:
    """The ``short phase`` flag of a transfer from ``pilot`` to ``target`` (run settings), or None: H changes and the
    pilot's phase is shorter than the inner optimiser's first-moment memory. In such a phase the update is mostly
    the momentum carried in from the last phase, the pooled c read through the theory turns negative (one-pilot
    study, development seed: -0.47 to -0.04 at H 5, 0.05 at H 10), and the pilot's inputs do not carry. A target's
    short phase, read from a pilot past the memory, is predicted like any H (until the short-phase study it was
    flagged too, and 84 of 86 judged transfers from H 10 to H 5 held within 15 %; :mod:`noloco.studies.short_phase`)."""
    memory = first_moment_memory(pilot)
    Hp, Hb = pilot.inner_steps, target.inner_steps
    if memory is None or Hp == Hb or Hp >= memory:
        return None
    return (f"short phase: the pilot's H {Hp} is below the inner optimiser's first-moment memory of {memory:.3g} "
            f"inner steps (1 / (1 - beta1)) and the transfer changes H from {Hp} to {Hb}: in such a phase the "
            "pooled inputs move with H; run a pilot with H at or past the memory, or at the target's H")


def tokens_ratio(pilot, target) -> float:
    """The inner steps the ``target`` setting trains over the ``pilot``'s (any settings with ``outer_steps`` and
    ``inner_steps``): above 1 a transfer is raised by it to the power :data:`TOKENS_EXPONENT`."""
    return target.outer_steps * target.inner_steps / (pilot.outer_steps * pilot.inner_steps)


def short_run(target) -> str | None:
    """The ``short run`` flag of a transfer to the ``target`` setting, or None: fewer outer steps than
    :data:`SHORT_RUN`."""
    T = target.outer_steps
    if T >= SHORT_RUN:
        return None
    return (f"short run: the target runs {T} outer steps (fewer than {SHORT_RUN}); over a second half that short its "
            "spread follows its own luck, which the pilot's inputs do not carry: predicted / measured scattered by sd "
            "0.19 to 0.23 in log over 16 outer steps (groups-luck study, sixth rule); --groups-luck gives the range "
            "its groups alone span")


def _replay_ratio(run, replayed: np.ndarray, t0: int) -> float | None:
    """RMS of the pilot's replayed weight_std over its measured second half (evaluations up to outer step ``t0``)
    divided by the RMS of what it measured there; None without such evaluations."""
    T = run.setting.outer_steps
    pairs = [(replayed[int(m.outer_step) - 1], m.weight_std) for m in run.metric_rows
             if T / 2 < int(m.outer_step) <= min(t0, len(replayed)) and m.weight_std]
    if not pairs or not all(math.isfinite(a) for a, _ in pairs):
        return None
    got, seen = np.array(pairs, dtype=float).T
    return float(math.sqrt(np.mean(got ** 2)) / math.sqrt(np.mean(seen ** 2)))


#: the groups luck: how many group sequences a run's inputs are replayed along, drawn from seeds from DRAW_SEED on
#: (none of the studies' runs used them); validated in noloco/studies/groups_luck.py (docs/advice.md, "The groups' luck")
GROUPS_DRAWS, DRAW_SEED = 32, 100_000
#: ``--as --groups-luck``'s range judged on fresh groups seeds (noloco/studies/groups_luck.py's third and tenth
#: rules): per set of eight groups seeds, of the pairs (a pilot's range, the target trained with another groups seed)
#: how many lay inside; and the share an 80 % range must hold (the pairs share pilots and targets, so no binomial
#: range). A set's share swings both ways: its eight seeds' targets share their spread about their mean
GROUPS_RANGE_HELD = {"seeds 90 to 97": (405, 448), "seeds 180 to 187": (291, 448),
                     "seeds 180 to 187, GPT-NeoX and GPT-2": (311, 448)}
GROUPS_RANGE_RULE = (0.70, 0.90)


@dataclass(frozen=True)
class GroupsLuck(JsonRecord):
    """:func:`groups_luck`'s report: the run's second-half RMS weight_std replayed along its own groups and along
    ``draws`` others, the 10 % and 90 % quantiles of the others over its own, and the sd of their log."""

    run: str
    draws: int
    own_rms: Optional[float]
    low: float
    high: float
    sd: float
    measured_rms: Optional[float]


def _second_half_rms(weight_std: np.ndarray) -> float:
    return float(math.sqrt(np.mean(weight_std[len(weight_std) // 2:] ** 2)))


def groups_luck(run_dir, draws: int = GROUPS_DRAWS, seeds=None) -> GroupsLuck:
    """How far the run's spread moves with the groups its seed draws: its measured inputs replayed
    (:func:`noloco.advice.predict.replay`) along ``draws`` group sequences of other seeds (``seeds``: which, by
    default :data:`DRAW_SEED` on), against the same replay along its own groups where its folder records the seed."""
    from noloco.advice.predict import replay

    run, groups, t0 = _measured(run_dir, None)
    outer, T = run.outer, run.setting.outer_steps
    if t0 != T:
        raise DataError(f"{run.folder}: measured {t0} of {T} outer steps; the groups luck needs the whole run")
    if outer.replicas > conditional.MAX_REPLICAS:
        raise ConfigError(f"N = {outer.replicas} > {conditional.MAX_REPLICAS}: the groups luck steps the replicas' "
                          "full covariance, too large here")

    def along(mats) -> float:
        per = []
        for g in groups.values():
            s2, rho, _ = g.long_run
            per.append((g.numel, replay(outer, g.c, s2, rho, groups=mats)[1][1:]))
        return _second_half_rms(_weight_std(per))

    others = np.array([along(conditional.partitions(s, 0, T, outer.replicas, outer.group_size))
                       for s in (range(DRAW_SEED, DRAW_SEED + draws) if seeds is None else seeds)])
    own_mats, _ = own_groups(run, T)
    own = along(own_mats) if own_mats is not None else None
    measured = [m.weight_std for m in run.metric_rows if m.outer_step > T / 2 and m.weight_std]
    lo, hi = np.quantile(others, [0.1, 0.9]) / (own or float(np.exp(np.mean(np.log(others)))))
    return GroupsLuck(run=str(run.folder), draws=len(others), own_rms=own, low=float(lo), high=float(hi),
                      sd=float(np.std(np.log(others), ddof=1)),
                      measured_rms=float(math.sqrt(np.mean(np.square(measured)))) if measured else None)


def format_groups_luck(report: GroupsLuck) -> str:
    against = "its own groups' replay" if report.own_rms is not None else "the draws' geometric mean (no groups seed recorded)"
    return "\n".join([
        f"{report.run}: its measured inputs replayed along {report.draws} group sequences of other seeds",
        f"second-half RMS weight_std, 10 % to 90 %: {report.low:.3f} to {report.high:.3f} times {against}; sd "
        f"{report.sd:.3f} in log",
        f"own groups' replay {_fmt(report.own_rms, '.4e')}, measured {_fmt(report.measured_rms, '.4e')}",
        "validated: the sd over eight groups seeds agreed with it on 12 of 14 settings, too wide at H 5 "
        "(docs/advice.md, 'The groups' luck')"])


def parse_changes(text: str) -> dict:
    """``alpha=0.3,gamma=0.5,inner-steps=25`` as ``{"alpha": 0.3, "gamma": 0.5, "inner_steps": 25}``."""
    changes = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in TRANSFER_FIELDS:
            near = did_you_mean(key, TRANSFER_FIELDS).replace("_", "-") if sep else ""
            raise ConfigError(f"--as {text!r}: {item!r} is not FIELD=VALUE with FIELD one of "
                              f"{', '.join(k.replace('_', '-') for k in TRANSFER_FIELDS)}{near}")
        if key in changes:  # the later value would silently win
            raise ConfigError(f"--as {text!r}: {key.replace('_', '-')} is given twice; give each field once")
        try:
            changes[key] = TRANSFER_FIELDS[key](value.strip())
        except ValueError:
            kind = {int: "an integer", float: "a number"}.get(TRANSFER_FIELDS[key], f"a {TRANSFER_FIELDS[key].__name__}")
            raise ConfigError(f"--as {text!r}: {key.replace('_', '-')}={value.strip()!r} is not {kind}") from None
    if not changes:
        raise ConfigError(f"--as {text!r} names no change; e.g. --as alpha=0.3,gamma=0.5")
    return changes


def _fmt(x, spec: str) -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, spec)


def _tilt(x) -> str:
    """The tilt in words: a factor, or unbounded where the target does not settle at the flattest c."""
    return f"{x:.3g}x" if x is not None and math.isfinite(x) else "unbounded (the target does not settle there)"


def format_forecast(report: Forecast) -> str:
    lines = [f"{report.run}: {report.method}; forecast from outer steps 1 to {report.from_step} "
             f"(window {report.window[0]} to {report.window[1]}) to step {report.outer_steps}; "
             "low to high: where the measured should fall, 80 % (the forecast over the error model's band: it "
             "corrects the forecast's expected bias" + (f", x{math.exp(report.error.mu):.3f}" if report.error else "")
             + ", so it need not hold the forecast)",
             f"{'outer':>6} {'forecast':>11} {'low':>11} {'high':>11} {'measured':>11}"]
    lines += [f"{r.outer_step:>6} {_fmt(r.forecast, '11.4e')} {_fmt(r.low, '11.4e')} "
              f"{_fmt(r.high, '11.4e')} {_fmt(r.measured, '11.4e')}" for r in report.rows]
    if report.groups.along == "own":
        lines.append(f"along the run's own groups (groups seed {report.groups.seed})")
    elif report.groups.why:
        lines.append(f"note: {report.groups.why if report.groups.why != 'asked' else 'averaged over random groups'}")
    quoted = ""
    if report.track_record is not None:
        lines.append(f"track record: {report.track_record.text()}")
        quoted = f" ({report.track_record.text()})"  # the unsure flag quotes it too (JSON): said once on screen
    lines += [f"flag: {f.replace(quoted, '') if quoted else f}" for f in report.flags]
    return "\n".join(lines)


def format_transfer(report: Transfer) -> str:
    changes = ", ".join(f"{k}={v}" for k, v in report.changes.items())
    lines = [f"{report.run} as {changes}: predicted weight_std from the pilot's measured inputs; 80 % interval "
             f"from the errors in {report.interval['from']}",  # edge: the interval is kept JSON-shaped in the report
             f"{'outer':>6} {'predicted':>11} {'low':>11} {'high':>11}"]
    lines += [f"{r.outer_step:>6} {_fmt(r.predicted, '11.4e')} {_fmt(r.low, '11.4e')} "
              f"{_fmt(r.high, '11.4e')}" for r in report.rows]
    lines.append(f"second-half RMS: predicted {_fmt(report.second_half_rms, '.4e')} (divided by the pilot's "
                 f"replayed / measured {_fmt(report.pilot_replay_ratio, '.3f')}), the pilot's own (replayed) "
                 f"{_fmt(report.pilot_replayed_rms, '.4e')}; decay factor at the flattest c "
                 f"{_fmt(report.decay_factor, '.4f')} (the pilot's {_fmt(report.pilot_decay_factor, '.4f')}, "
                 f"limit {EDGE_LIMIT:g}); tilt {_tilt(report.tilt)} (limit {TILT_LIMIT:g}; the prediction times "
                 f"its {TILT_EXPONENT:g} power)" + (f"; the target trains {report.tokens_ratio:.3g} times the pilot's "
                                                    f"inner steps (the prediction times that to the power "
                                                    f"{TOKENS_EXPONENT:g})" if report.tokens_ratio else ""))
    if report.groups.along == "own":
        lines.append(f"along the groups of groups seed {report.groups.seed} (the pilot's own, and the target's drawn "
                     f"from it); averaged over random groups: {_fmt(report.second_half_rms_average, '.4e')}")
    if report.track_record is not None:
        lines.append(f"track record: {report.track_record.text()}")
    if report.groups_luck is not None:
        g = report.groups_luck
        low, high = GROUPS_RANGE_RULE

        def judged(held: int, pairs: int) -> str:
            verdict = ", too narrow" if held < low * pairs else ", too wide" if held > high * pairs else ""
            return f"{held} of {pairs} ({100 * held / pairs:.1f} %{verdict})"

        lines.append(f"with another groups seed: {g.low:.3f} to {g.high:.3f} times the prediction (the target over "
                     f"{g.draws} group sequences of other seeds and the transfer's own error, 10 % to 90 %); not "
                     "claimed: of the targets trained with other groups seeds it held "
                     + "; ".join(f"{judged(*counts)} on {where}" for where, counts in GROUPS_RANGE_HELD.items())
                     + " (docs/advice.md, 'The groups' luck')")
    lines += [f"flag: {f}" for f in report.flags]
    return "\n".join(lines)
