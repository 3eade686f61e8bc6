"""Methods and presets, defined once for ``check``, ``simulate``, ``tune`` and ``llm``.

A *method* is a constraint on the outer step, the same algorithm in every command:

========  =====================================================================
noloco    the setting as given: random groups of n, pull gamma, outer momentum
diloco    n = N: every replica averages with all (an all-reduce of the progress);
          the pull cancels, so gamma is irrelevant and set to 0
local     no synchronisation: n = 1, alpha = 0, beta = 1, gamma = 0, i.e.
          phi <- theta, every replica trains alone
ddp       data parallel: n = N, alpha = 0, beta = 1, gamma = 0 and one inner step
          per outer step (gradients averaged every step; for inner SGD exactly
          the same as averaging one step's progress)
========  =====================================================================

A *preset* is a method with its outer and inner settings. ``paper`` is the NoLoCo
reference configuration, ``diloco`` the DiLoCo baseline as the NoLoCo reference code
runs it (heavy-ball, alpha 0.3, beta 0.7, H 100), ``diloco-nesterov`` DiLoCo as torch
implementations run it (torch SGD with Nesterov momentum 0.9, lr 0.7, H 500). The
inner settings (SGD lr 0.01, noise 1 on a unit-curvature quadratic) are the toolkit's
model problem, not the paper's Adam.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from noloco.infra.errors import ConfigError
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.infra.checks import check_choice

METHODS = ("noloco", "diloco", "local", "ddp")
METHOD_SUMMARY = {
    "noloco": "random groups of n, pull gamma, outer momentum alpha (the setting as given)",
    "diloco": "n = N (all-reduce of the progress), gamma 0",
    "local": "no synchronisation: n = 1, alpha 0, beta 1, gamma 0 (phi <- theta)",
    "ddp": "data parallel: n = N, alpha 0, beta 1, gamma 0, gradients averaged every inner step (H = 1)",
}


@dataclass(frozen=True)
class Preset:
    method: str
    outer: OuterConfig
    inner: InnerConfig
    note: str = ""

    def as_dict(self) -> dict:
        return {"method": self.method, "outer": dataclasses.asdict(self.outer),
                "inner": dataclasses.asdict(self.inner), "note": self.note}


PRESETS: dict[str, Preset] = {
    "paper": Preset(
        "noloco",
        OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=0.7, momentum="heavy-ball"),
        InnerConfig(lr=0.01, steps=50, noise=1.0),
        "NoLoCo reference configuration: pairs, alpha 0.5, beta = gamma = 0.7, H 50, heavy-ball",
    ),
    "diloco": Preset(
        "diloco",
        OuterConfig(replicas=8, group_size=8, alpha=0.3, beta=0.7, gamma=0.0, momentum="heavy-ball"),
        InnerConfig(lr=0.01, steps=100, noise=1.0),
        "DiLoCo as the NoLoCo reference code runs it: n = N, heavy-ball alpha 0.3, beta 0.7, H 100",
    ),
    "diloco-nesterov": Preset(
        "diloco",
        OuterConfig(replicas=8, group_size=8, alpha=0.9, beta=0.7, gamma=0.0, momentum="nesterov"),
        InnerConfig(lr=0.01, steps=500, noise=1.0),
        "DiLoCo as torch implementations run it: n = N, SGD(lr 0.7, momentum 0.9, nesterov), H 500",
    ),
}
#: the preset whose outer settings a method starts from when none is named
METHOD_PRESET = {"noloco": "paper", "diloco": "diloco", "local": "paper", "ddp": "paper"}


def constrain(method: str, outer: OuterConfig, inner: InnerConfig | None = None):
    """The method's constraints applied to a setting: ``(outer, inner)`` (``inner`` may be None)."""
    check_choice("method", method, METHODS)
    N = outer.replicas
    forced = {"noloco": {}, "diloco": {"group_size": N, "gamma": 0.0},
              "local": {"group_size": 1, "alpha": 0.0, "beta": 1.0, "gamma": 0.0},
              "ddp": {"group_size": N, "alpha": 0.0, "beta": 1.0, "gamma": 0.0}}[method]
    outer = dataclasses.replace(outer, **forced)
    if method == "ddp" and inner is not None:
        inner = dataclasses.replace(inner, steps=1)
    return outer, inner


def forced_fields(method: str) -> tuple[str, ...]:
    """The outer/inner fields a method fixes (a user value for one of them is a conflict)."""
    return {"noloco": (), "diloco": ("group_size", "gamma"),
            "local": ("group_size", "alpha", "beta", "gamma"),
            "ddp": ("group_size", "alpha", "beta", "gamma", "steps")}[check_choice("method", method, METHODS)]


def resolve(preset: str | None = None, method: str | None = None, *, gamma_tied: bool = False,
            **overrides) -> tuple[str, OuterConfig, InnerConfig]:
    """``(method, outer, inner)`` from a preset, then explicit values, then the method's constraints.

    ``overrides`` are OuterConfig and InnerConfig fields (``None`` means not given). A value
    that the method fixes differently (``diloco`` with a group size other than N, ``local``
    with a momentum, ...) is refused rather than silently replaced; so is ``gamma_tied`` next
    to an explicit gamma.
    """
    if preset is not None:
        check_choice("preset", preset, tuple(PRESETS))
    if method is not None:
        check_choice("method", method, METHODS)
    base = PRESETS[preset or METHOD_PRESET[method or "noloco"]]
    method = method or base.method
    given = {k: v for k, v in overrides.items() if v is not None}
    outer_names = {f.name for f in dataclasses.fields(OuterConfig)}
    inner_names = {f.name for f in dataclasses.fields(InnerConfig)}
    unknown = set(given) - outer_names - inner_names
    if unknown:
        raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    if gamma_tied:
        if "gamma" in given:
            raise ConfigError(f"gamma={given['gamma']!r} conflicts with gamma_tied (gamma = beta); give one")
        given["gamma"] = given.get("beta", base.outer.beta)
    outer_values = {k: v for k, v in given.items() if k in outer_names}
    if "group_size" not in outer_values:  # the group size the method implies follows a new N
        N = outer_values.get("replicas", base.outer.replicas)
        implied = {"diloco": N, "ddp": N, "local": 1}.get(method)
        if implied is not None or (base.method == "diloco" and "replicas" in outer_values):
            outer_values["group_size"] = implied if implied is not None else N
    outer = dataclasses.replace(base.outer, **outer_values)
    inner = dataclasses.replace(base.inner, **{k: v for k, v in given.items() if k in inner_names})
    constrained_outer, constrained_inner = constrain(method, outer, inner)
    for name in forced_fields(method):
        if name in given:
            value = getattr(constrained_inner if name == "steps" else constrained_outer, name)
            if given[name] != value:
                shown = {"steps": "inner_steps"}.get(name, name)
                raise ConfigError(f"{shown}={given[name]!r} conflicts with method={method!r}, which sets "
                                  f"{shown}={value!r} ({METHOD_SUMMARY[method]})")
    return method, constrained_outer, constrained_inner
