"""The ``noloco`` command: a thin layer over ``theory``, ``quadratic``, ``llm_check`` and ``paper_figs``.

Nothing in the toolkit imports this package; it only parses arguments and prints.
"""
