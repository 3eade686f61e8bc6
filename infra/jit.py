"""Compiled loops (numba), where numba is installed: the one switch that chooses them and the one way
they are compiled.

Two hot loops have a compiled form: the exact inner phase's outer step (:mod:`noloco.quadratic.fused`) and
a step of the idle-time simulation (:func:`noloco.quadratic.idle.simulate_idle`). Each is used when numba is
installed (``pip install 'noloco-toolkit[fast]'``) and the work is large enough to pay for loading
numba (about 0.5 s a process; compiling, the first time on a machine for a version of the sources,
a few seconds). ``NOLOCO_JIT`` overrides the choice: unset or ``auto`` (by size), ``1`` (always;
without numba a ConfigError, exit 2), ``0`` (never).
"""

from __future__ import annotations

import importlib.util
import os

from noloco.infra.cache import cache_dir, source_hash
from noloco.infra.checks import check_choice
from noloco.infra.errors import ConfigError

#: what numba and its compiler add to a process's peak memory (measured: 120 MiB at D = 10000)
COMPILER_BYTES = 128 << 20
#: the values of ``NOLOCO_JIT``
JIT_SETTINGS = ("auto", "1", "0")


def enabled(work: float, threshold: float) -> bool:
    """Whether a run of ``work`` units uses its compiled loop, where ``threshold`` units are what
    it takes for compiling to pay (``NOLOCO_JIT=auto``)."""
    setting = os.environ.get("NOLOCO_JIT") or "auto"
    check_choice("NOLOCO_JIT", setting, JIT_SETTINGS)
    available = importlib.util.find_spec("numba") is not None
    if setting == "1" and not available:
        raise ConfigError("NOLOCO_JIT=1 needs numba: pip install 'noloco-toolkit[fast]' (or unset NOLOCO_JIT)")
    return available and (setting == "1" or (setting == "auto" and work >= threshold))


def compile_with_cache(build, **options):
    """``build(jit)``, where ``jit(f)`` compiles ``f`` with numba (``options``: numba's, such as
    ``nogil=True``), caching the machine code under ``$NOLOCO_CACHE/numba/<hash of the sources>``;
    without a writable folder there, numba compiles in every process instead."""
    import numba
    # one folder per version of the sources: numba checks only the compiled function's own file for
    # staleness, not those of the functions it calls (theory/outer.py for noloco.quadratic.fused)
    folder = cache_dir() / "numba" / source_hash()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK)
    except OSError:
        writable = False
    if not writable:  # not numba's own fallback, a __pycache__ beside the sources: stale after an edit
        return build(lambda f: numba.njit(f, **options))
    previous = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = str(folder)
    try:
        return build(lambda f: numba.njit(f, cache=True, **options))
    finally:
        numba.config.CACHE_DIR = previous
