"""Vectorised Monte Carlo of NoLoCo, DiLoCo, local SGD and data parallel on quadratic and
convex objectives, compared with :mod:`theory` (see docs/quadratic.md)."""
