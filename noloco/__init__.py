"""The ``noloco`` command: a thin layer over ``theory``, ``quadratic``, ``llm_check`` and ``paper_figs``.

Nothing in the toolkit imports this package; it only parses arguments and prints.
"""

#: the version when the toolkit is run from a source tree that was never installed
#: (``noloco --version`` prefers the installed distribution's metadata)
__version__ = "0.1.0"
