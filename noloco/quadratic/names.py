"""The allowed names of the simulator's options; the methods and schedules are the
toolkit's (:mod:`noloco.theory.methods`, :mod:`noloco.theory.schedules`)."""

from noloco.theory.methods import METHODS
from noloco.theory.schedules import SCHEDULES

OBJECTIVES = ("quadratic", "diabetes", "longley", "breast-cancer")
SPLITS = ("shared", "iid", "label", "kmeans")
OPTIMIZERS = ("sgd", "momentum", "adam")
INNER_MODES = ("auto", "exact", "explicit")
DTYPES = ("float64", "float32")

__all__ = ["DTYPES", "INNER_MODES", "METHODS", "OBJECTIVES", "OPTIMIZERS", "SCHEDULES", "SPLITS"]
