"""Vectorised Monte Carlo of NoLoCo, DiLoCo, local SGD and data parallel on quadratic and
convex objectives (:mod:`noloco.quadratic.simulator`) and of the theory's scalar model
(:mod:`noloco.quadratic.scalar`), compared with :mod:`theory` (see docs/quadratic.md)."""
