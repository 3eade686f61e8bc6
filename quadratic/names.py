"""The allowed names, in a module without numpy so that ``noloco --help`` stays fast."""

OBJECTIVES = ("quadratic", "diabetes", "longley", "breast-cancer")
SPLITS = ("shared", "iid", "label", "kmeans")
METHODS = ("noloco", "diloco", "local", "ddp")
OPTIMIZERS = ("sgd", "momentum", "adam")
SCHEDULES = ("constant", "cosine", "inverse")
