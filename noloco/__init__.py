"""NoLoCo toolkit: one import name, ``noloco``.

The public names below are loaded on first use (``import noloco`` imports neither torch nor the
simulator), so a notebook can do::

    import noloco
    method, outer, inner = noloco.resolve("paper", replicas=16)          # a validated setting
    analysis = noloco.analyse(outer, inner, noloco.Spectrum((0.1, 1.0)))  # its stability and spread
    outer_opt = noloco.OuterOptimizer(model, inner_opt, inner_steps=50)  # in a torch loop (docs/own_loop.md)

Its subpackages are the layers ARCHITECTURE.md draws, each the folder its name spells:
``noloco.infra`` (the ground floor), ``noloco.theory``, ``noloco.quadratic``, ``noloco.claims``,
``noloco.training`` (the outer optimizer for a user's loop), ``noloco.advice`` (advice from run folders, no
torch), ``noloco.llm_check`` (the torch harness), ``noloco.studies``, ``noloco.paper_figs``,
``noloco.benchmarks`` and ``noloco.cli`` (the command line, which nothing in the toolkit imports).
"""

import importlib as _importlib

#: the version when the toolkit is run from a source tree that was never installed
#: (``noloco --version`` prefers the installed distribution's metadata)
__version__ = "0.1.0"

#: every public name and the module that defines it (one home each; loaded by ``__getattr__``)
_EXPORTS = {
    # in a torch loop
    "OuterOptimizer": "noloco.training.outer_optimizer",
    "PeerError": "noloco.training.exchange",  # a rank of the group died or hangs (after the timeout)
    "Observer": "noloco.training.observer",  # the theory's inputs and the spread of any run, to a run folder
    "Watch": "noloco.training.watch",  # another framework's outer step, for the Observer
    "NoLoCoCallback": "noloco.training.hf",  # in Hugging Face's Trainer (the [hf] extra)
    # a setting, validated as the command line validates it
    "resolve": "noloco.theory.methods",
    "PRESETS": "noloco.theory.methods",
    "METHODS": "noloco.theory.methods",
    "OuterConfig": "noloco.theory.config",
    "InnerConfig": "noloco.theory.config",
    # what a user can meet: bad input (exit 2), an environment or data fault (exit 3), a refused budget (exit 3)
    "ConfigError": "noloco.infra.errors",
    "DataError": "noloco.infra.errors",
    "LockedError": "noloco.infra.errors",
    "BudgetError": "noloco.infra.budget",
    "TimeBudgetError": "noloco.infra.budget",
    # the rule and its groups
    "outer_step": "noloco.theory.outer",
    "partition": "noloco.theory.partitions",
    # a setting's analysis on a quadratic (noloco check) and its simulation (noloco simulate)
    "Spectrum": "noloco.theory.spectrum",
    "analyse": "noloco.theory.conditions",
    "simulate": "noloco.quadratic.compare",
    "Simulation": "noloco.quadratic.compare",
    "SimConfig": "noloco.quadratic.sim_config",
    # a run folder read for advice (no torch): its setting, evaluations and measured inputs
    "read_run": "noloco.advice.record",
    "RunRecord": "noloco.advice.record",
    "RunSetting": "noloco.advice.record",
}

#: names kept for old code, not in ``__all__`` (each warns when called)
_DEPRECATED = {"simulate_setting": "noloco.quadratic.compare"}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    module = _EXPORTS.get(name) or _DEPRECATED.get(name)
    if module is None:
        raise AttributeError(f"module 'noloco' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted({k for k in globals() if not k.startswith("_")} | set(__all__))
