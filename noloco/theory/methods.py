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
from noloco.theory.config import OUTER_FIELDS, InnerConfig, OuterConfig
from noloco.infra.checks import check_choice, check_flag

@dataclass(frozen=True)
class Method:
    """One method as data: what it does to the outer step, from which everything else is derived.

    ``groups``: ``"given"`` (n as set), ``"all"`` (n = N) or ``"one"`` (n = 1); ``fixed``: the outer
    fields it sets; ``synchronous``: gradients averaged at every inner step, so there is no outer step
    and H = 1 (data parallel); ``preset``: the preset whose setting it starts from when none is named."""

    name: str
    summary: str
    groups: str = "given"
    fixed: tuple = ()
    synchronous: bool = False
    preset: str = "paper"

    def group_size(self, replicas: int) -> int | None:
        """The group size the method implies for N replicas (None: the setting's)."""
        return {"given": None, "all": replicas, "one": 1}[self.groups]

    @property
    def forced_fields(self) -> tuple[str, ...]:
        """The outer/inner fields the method fixes (a user value for one of them is a conflict)."""
        return (("group_size",) if self.groups != "given" else ()) + tuple(k for k, _ in self.fixed) \
            + (("steps",) if self.synchronous else ())


_NO_OUTER_STEP = (("alpha", 0.0), ("beta", 1.0), ("gamma", 0.0))  # phi <- theta (or the mean of theta)
#: every method, one row each
METHOD_TABLE = {m.name: m for m in (
    Method("noloco", "random groups of n, pull gamma, outer momentum alpha (the setting as given)"),
    Method("diloco", "n = N (all-reduce of the progress), gamma 0", "all", (("gamma", 0.0),), preset="diloco"),
    Method("local", "no synchronisation: n = 1, alpha 0, beta 1, gamma 0 (phi <- theta)", "one", _NO_OUTER_STEP),
    Method("ddp", "data parallel: n = N, alpha 0, beta 1, gamma 0, gradients averaged every inner step (H = 1)",
           "all", _NO_OUTER_STEP, synchronous=True),
)}
#: the method names, as every command and :func:`resolve` take them: noloco, diloco, local, ddp (what each
#: does to the outer step: :data:`METHOD_SUMMARY`)
METHODS = tuple(METHOD_TABLE)
METHOD_SUMMARY = {name: m.summary for name, m in METHOD_TABLE.items()}


def method_of(name: str) -> Method:
    """The method called ``name`` (ConfigError naming the allowed ones otherwise)."""
    return METHOD_TABLE[check_choice("method", name, METHODS)]


@dataclass(frozen=True)
class Preset:
    method: str
    outer: OuterConfig
    inner: InnerConfig
    note: str = ""

    def as_dict(self) -> dict:
        return {"method": self.method, "outer": dataclasses.asdict(self.outer),
                "inner": dataclasses.asdict(self.inner), "note": self.note}


#: the paper's setting (the NoLoCo reference), the preset ``paper``
PAPER_PRESET = Preset(
    "noloco",
    OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=0.7, momentum="heavy-ball"),
    InnerConfig(lr=0.01, steps=50, noise=1.0),
    "NoLoCo reference configuration: pairs, alpha 0.5, beta = gamma = 0.7, H 50, heavy-ball",
)
#: the presets by name (``--preset``, :func:`resolve`'s first argument): a method with its outer and inner
#: settings: paper (the NoLoCo reference), diloco (as the NoLoCo reference code runs it), diloco-nesterov
#: (as torch implementations run it)
PRESETS: dict[str, Preset] = {
    "paper": PAPER_PRESET,
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
def constrain(name: str, outer: OuterConfig, inner: InnerConfig | None = None):
    """The method's constraints applied to a setting: ``(outer, inner)`` (``inner`` may be None)."""
    m = method_of(name)
    implied = {} if m.groups == "given" else {"group_size": m.group_size(outer.replicas)}
    outer = dataclasses.replace(outer, **{**dict(m.fixed), **implied})
    if m.synchronous and inner is not None:
        inner = dataclasses.replace(inner, steps=1)
    return outer, inner


def check_outer(name: str, value, method: str) -> OuterConfig:
    """``value``, an OuterConfig that ``method``'s constraints leave unchanged (ConfigError otherwise)."""
    if not isinstance(value, OuterConfig):
        raise ConfigError(f"{name}={value!r} is not an OuterConfig")
    fixed = constrain(method, value)[0]
    wrong = [f"{k}={getattr(value, k)!r} (it sets {getattr(fixed, k)!r})" for k in OUTER_FIELDS
             if getattr(value, k) != getattr(fixed, k)]
    if wrong:
        raise ConfigError(f"{name} conflicts with method={method!r} ({METHOD_SUMMARY[method]}): " + ", ".join(wrong))
    return value


def outer_from_json(method: str, data: dict) -> OuterConfig:
    """The outer step of a run record's settings ``data`` (as result.json holds them): nested under ``"outer"``, or the flat form written
    before it was nested (replicas, group_size, alpha, ... at the top). There the method's constraints were
    applied when the run used them (diloco and ddp ignored group_size, ddp every outer field), so they are
    applied here too: the result is the setting that old run really trained with."""
    if "outer" in data:
        if not isinstance(data["outer"], dict):
            raise ConfigError(f"outer={data['outer']!r} is not a mapping of the outer step's fields")
        return OuterConfig(**data["outer"])
    old = {k: data[k] for k in OUTER_FIELDS if k in data}
    N = old.get("replicas", OuterConfig.replicas)
    old["group_size"] = method_of(method).group_size(N) or old.get("group_size")
    return constrain(method, OuterConfig(**old))[0]


def resolve(preset: str | None = None, method: str | None = None, *, gamma_tied: bool = False,
            **overrides) -> tuple[str, OuterConfig, InnerConfig]:
    """A validated setting ``(method, outer, inner)``, as every command resolves its flags.

    A preset first (none: the method's own), then the values given, then the method's constraints
    (diloco: n = N, gamma 0; local: n = 1, alpha 0, beta 1, gamma 0; ddp: that and H = 1). A value that
    the method fixes differently (``diloco`` with a group size other than N, ...) is refused rather than
    silently replaced; so is ``gamma_tied`` next to an explicit gamma.

    Args:
        preset: a name in :data:`PRESETS` (``"paper"``, ``"diloco"``, ``"diloco-nesterov"``), or None.
        method: a name in :data:`METHODS`, or None (the preset's, else ``"noloco"``).
        gamma_tied: gamma = beta, as the NoLoCo reference code has it.
        **overrides: :class:`noloco.OuterConfig` fields (``replicas``, ``group_size``, ``alpha``, ``beta``,
            ``gamma``, ``momentum``) and :class:`noloco.InnerConfig` fields (``lr``, ``steps``, ``noise``);
            None means not given.

    Returns:
        ``(method, outer, inner)``: the method's name, an OuterConfig and an InnerConfig.

    Raises:
        ConfigError: an unknown preset or method, a value out of range, or a value the method fixes
            otherwise.
        TypeError: an override that is no field of either config.

    Examples:
        >>> import noloco
        >>> sorted(noloco.PRESETS), noloco.METHODS
        (['diloco', 'diloco-nesterov', 'paper'], ('noloco', 'diloco', 'local', 'ddp'))
        >>> method, outer, inner = noloco.resolve("paper", replicas=16)
        >>> method, outer.group_size, outer.alpha, inner.steps
        ('noloco', 2, 0.5, 50)
        >>> noloco.resolve(method="diloco", replicas=4)[1].group_size    # n = N
        4
        >>> noloco.resolve(method="diloco", group_size=2)
        Traceback (most recent call last):
        ...
        noloco.infra.errors.ConfigError: group_size=2 conflicts with method='diloco', which sets group_size=8 (n = N (all-reduce of the progress), gamma 0)
    """
    if preset is not None:
        check_choice("preset", preset, tuple(PRESETS))
    chosen = method_of(method or "noloco")  # validated before anything else
    base = PRESETS[preset or chosen.preset]
    method = method or base.method
    given = {k: v for k, v in overrides.items() if v is not None}
    outer_names = {f.name for f in dataclasses.fields(OuterConfig)}
    inner_names = {f.name for f in dataclasses.fields(InnerConfig)}
    unknown = set(given) - outer_names - inner_names
    if unknown:
        raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}; allowed: "
                        f"{', '.join(f.name for f in dataclasses.fields(OuterConfig) + dataclasses.fields(InnerConfig))}")
    if check_flag("gamma_tied", gamma_tied):  # "no" is truthy: it would tie gamma
        if "gamma" in given:
            raise ConfigError(f"gamma={given['gamma']!r} conflicts with gamma_tied (gamma = beta); give one")  # edge: kwargs
        given["gamma"] = given.get("beta", base.outer.beta)  # edge: the caller's **overrides, completed before validation
    outer_values = {k: v for k, v in given.items() if k in outer_names}
    if "group_size" not in outer_values:  # the group size the method implies follows a new N
        N = outer_values.get("replicas", base.outer.replicas)  # edge: the caller's **overrides
        implied = METHOD_TABLE[method].group_size(N)
        if implied is not None or (base.method == "diloco" and "replicas" in outer_values):
            outer_values["group_size"] = implied if implied is not None else N  # edge: **overrides, completed
    outer = dataclasses.replace(base.outer, **outer_values)
    inner = dataclasses.replace(base.inner, **{k: v for k, v in given.items() if k in inner_names})
    constrained_outer, constrained_inner = constrain(method, outer, inner)
    for name in METHOD_TABLE[method].forced_fields:
        if name in given:
            value = getattr(constrained_inner if name == "steps" else constrained_outer, name)
            if given[name] != value:
                shown = {"steps": "inner_steps"}.get(name, name)
                raise ConfigError(f"{shown}={given[name]!r} conflicts with method={method!r}, which sets "
                                  f"{shown}={value!r} ({METHOD_SUMMARY[method]})")
    return method, constrained_outer, constrained_inner
