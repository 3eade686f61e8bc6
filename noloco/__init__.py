"""NoLoCo toolkit: one import name, ``noloco``.

``noloco.infra`` (the ground floor), ``noloco.theory``, ``noloco.quadratic``, ``noloco.claims``,
``noloco.llm_check``, ``noloco.paper_figs`` and ``noloco.benchmarks`` live in the repository's
top-level folders of the same names; this folder holds the ``noloco`` command line, which nothing
in the toolkit imports. ARCHITECTURE.md draws the layers.
"""

from pathlib import Path as _Path

#: the version when the toolkit is run from a source tree that was never installed
#: (``noloco --version`` prefers the installed distribution's metadata)
__version__ = "0.1.0"

# In a source checkout run without installing (``python3 -m noloco`` from the repository root, as on a
# lent GPU machine) the subpackages are the folders beside this one; an install maps them itself.
_CHECKOUT = _Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "theory" / "outer.py").is_file():
    __path__.append(str(_CHECKOUT))
