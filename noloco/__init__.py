"""NoLoCo toolkit: one import name, ``noloco``.

Its subpackages are the layers ARCHITECTURE.md draws, each the folder its name spells:
``noloco.infra`` (the ground floor), ``noloco.theory``, ``noloco.quadratic``, ``noloco.claims``,
``noloco.llm_check``, ``noloco.paper_figs``, ``noloco.benchmarks`` and ``noloco.cli`` (the command line,
which nothing in the toolkit imports).
"""

#: the version when the toolkit is run from a source tree that was never installed
#: (``noloco --version`` prefers the installed distribution's metadata)
__version__ = "0.1.0"
