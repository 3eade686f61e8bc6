"""Objectives, vectorised over a batch of replicas: parameters have shape (trials, N, d).

Each objective gives every replica its own loss (its data shard, or its shifted
optimum), a global loss (the average over replicas' data, which training minimises),
the global optimum, and the Hessian and gradient-noise covariance at that optimum,
from which the quadratic theory is linearised.

Data sets ship inside installed packages (scikit-learn's diabetes and breast cancer,
statsmodels' longley); nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from noloco.quadratic.names import OBJECTIVES, SPLITS
from noloco.infra.errors import ConfigError, require_extra
from noloco.infra.checks import check_choice



#: the largest dimension of a packaged data set (breast cancer with its intercept: 31)
DATA_DIMENSION_BOUND = 64


class Quadratic:
    """f_i(x) = 1/2 (x - x*_i)^T A (x - x*_i), A = Q diag(lam) Q^T.

    Q is the identity or a random rotation; x* = 0 and replica i's optimum is shifted
    by zeta * xi_i, xi_i ~ N(0, I) drawn once per trial (data heterogeneity, :meth:`draw_shift`).
    Without rotation the coordinates are the eigen-directions, sorted by curvature, and no
    d x d matrix is ever formed.
    """

    name = "quadratic"

    def __init__(self, curvatures, *, rotate: bool, rng: np.random.Generator):
        lam = np.asarray(curvatures, dtype=float)
        self.dim = lam.size
        self.Q = None
        if rotate:
            self.lam = lam
            self.Q = np.linalg.qr(rng.standard_normal((self.dim, self.dim)))[0]
            self.A = self.Q * lam @ self.Q.T
        else:  # sorted: the coordinates are the eigenbasis of eigen()
            self.lam = np.sort(lam, kind="stable")
        self.optimum = np.zeros(self.dim)

    def eigen(self):
        """(eigenvalues ascending, eigenvectors); eigenvectors None: the coordinates themselves."""
        if self.Q is None:
            return self.lam, None
        return np.linalg.eigh(self.A)

    def start_in_eigenbasis(self, start: float) -> np.ndarray:
        """The start optimum + start (every coordinate) in the coordinates of :meth:`eigen`."""
        if self.Q is None:
            return np.full(self.dim, float(start))
        return start * self.eigen()[1].sum(0)

    def draw_shift(self, rng, trials: int, replicas: int, zeta: float):
        """Replica optima zeta * xi (zero mean over replicas, so the global optimum stays at 0), or None."""
        if not zeta:
            return None
        shift = zeta * rng.standard_normal((trials, replicas, self.dim))
        return shift - shift.mean(1, keepdims=True)

    def _apply_A(self, x, out):
        if self.Q is None:
            return np.multiply(x, self.lam, out=out)
        return np.matmul(x, self.A, out=out)  # A symmetric

    def grad(self, theta, rng, out, shift=None):
        """Gradient of each replica's own loss, written into ``out``."""
        return self._apply_A(theta if shift is None else theta - shift, out)

    def loss(self, x):
        """Global loss (the average of the replicas' losses minus its minimum), shape x.shape[:-1]."""
        return 0.5 * np.einsum("...i,...i->...", x, self._apply_A(x, np.empty_like(x)))

    def hessian(self):
        return np.diag(self.lam) if self.Q is None else self.A

    def noise_cov(self, batch_size):  # no data: only the additive noise of InnerConfig
        return None


def _standardise(X):
    X = np.asarray(X, dtype=float)
    return (X - X.mean(0)) / X.std(0)


def load_data(name: str):
    """(X standardised, y, labels for a by-label split) of a data set shipped in a package."""
    check_choice("objective", name, OBJECTIVES[1:])
    module, package = ("statsmodels", "statsmodels") if name == "longley" else ("sklearn", "scikit-learn")
    require_extra(module, package, "data", f"objective={name!r}")
    if name == "diabetes":
        from sklearn.datasets import load_diabetes
        X, y = load_diabetes(return_X_y=True)
        y = (y - y.mean()) / y.std()
        return _standardise(X), y, (y > np.median(y)).astype(int)
    if name == "longley":
        from statsmodels.datasets import longley
        data = longley.load_pandas()
        y = np.asarray(data.endog, dtype=float)
        y = (y - y.mean()) / y.std()
        return _standardise(data.exog), y, (y > np.median(y)).astype(int)
    if name == "breast-cancer":
        from sklearn.datasets import load_breast_cancer
        X, y = load_breast_cancer(return_X_y=True)
        X = np.hstack([_standardise(X), np.ones((len(X), 1))])  # intercept column
        return X, y.astype(float), y.astype(int)


def split_indices(split: str, X, labels, replicas: int, rng: np.random.Generator) -> np.ndarray:
    """Equal shards, shape (N, m // N): ``shared`` gives every replica all rows; ``iid`` a
    random partition; ``label`` and ``kmeans`` sort the rows by label / k-means cluster and
    cut them into consecutive blocks, so each replica sees mostly one kind of row."""
    check_choice("split", split, SPLITS)
    m = len(X)
    if split == "shared":
        return np.broadcast_to(np.arange(m), (replicas, m))
    if m // replicas < 1:
        raise ConfigError(f"replicas={replicas} exceeds the {m} rows of the data set for split={split!r}")
    if split == "iid":
        order = rng.permutation(m)
    elif split == "label":
        order = np.lexsort((rng.random(m), labels))
    else:  # kmeans
        from scipy.cluster.vq import kmeans2
        _, cluster = kmeans2(X, replicas, seed=rng, minit="++")
        order = np.lexsort((rng.random(m), cluster))
    size = m // replicas
    return order[: size * replicas].reshape(replicas, size)


@dataclass
class _Fit:
    optimum: np.ndarray
    hessian: np.ndarray


class DataObjective:
    """Ridge regression (``diabetes``, ``longley``) or L2-regularised logistic regression
    (``breast-cancer``), mean loss over a replica's shard plus l2/2 |w|^2.

    ``batch_size`` 0 uses the full shard's gradient; otherwise each step samples that
    many rows of the shard with replacement (minibatch noise)."""

    def __init__(self, name: str, *, split: str, l2: float, batch_size: int, replicas: int,
                 rng: np.random.Generator):
        X, y, labels = load_data(name)
        self.name, self.l2, self.batch_size = name, l2, batch_size
        self.logistic = name == "breast-cancer"
        self.X, self.y = X, y
        self.dim = X.shape[1]
        index = split_indices(split, X, labels, replicas, rng)
        self.Xs, self.ys = X[index], y[index]  # (N, m, d), (N, m)
        self.XsT = np.ascontiguousarray(self.Xs.transpose(0, 2, 1))
        self.shared = split == "shared"
        self.gram = np.matmul(self.XsT, self.Xs) / self.Xs.shape[1]                 # (N, d, d)
        self.moment = np.einsum("nmd,nm->nd", self.Xs, self.ys) / self.Xs.shape[1]  # (N, d)
        self._fit = self._solve()
        self.optimum = self._fit.optimum

    def _residual(self, scores, y):
        """d loss / d score per row."""
        if self.logistic:
            return 1.0 / (1.0 + np.exp(-scores)) - y
        return scores - y

    def _row_loss(self, scores, y):
        if self.logistic:  # log(1 + e^s) - y s, stably
            return np.logaddexp(0.0, scores) - y * scores
        return 0.5 * (scores - y) ** 2

    def _solve(self) -> _Fit:
        """Global optimum and Hessian (all rows), by Newton's method."""
        X, y, d = self.X, self.y, self.dim
        w = np.zeros(d)
        for _ in range(100):
            s = X @ w
            g = X.T @ self._residual(s, y) / len(X) + self.l2 * w
            H = self._hessian_at(w)
            step = np.linalg.solve(H, g)
            w -= step
            if np.max(np.abs(step)) < 1e-13:
                break
        return _Fit(w, self._hessian_at(w))

    def _hessian_at(self, w):
        X = self.X
        weight = np.ones(len(X))
        if self.logistic:
            p = 1.0 / (1.0 + np.exp(-(X @ w)))
            weight = p * (1 - p)
        return (X * weight[:, None]).T @ X / len(X) + self.l2 * np.eye(self.dim)

    def hessian(self):
        return self._fit.hessian

    def eigen(self):
        return np.linalg.eigh(self.hessian())

    @staticmethod
    def draw_shift(rng, trials: int, replicas: int, zeta: float):
        return None  # heterogeneity of data objectives is their split

    def noise_cov(self, batch_size):
        """Covariance of a minibatch gradient (rows drawn with replacement from all data) at the optimum."""
        if not batch_size:
            return np.zeros((self.dim, self.dim))
        w = self.optimum
        per_row = self.X * self._residual(self.X @ w, self.y)[:, None]
        return np.cov(per_row, rowvar=False, bias=True) / batch_size

    def grad(self, theta, rng, out, shift=None):
        trials, N, d = theta.shape
        if self.batch_size:
            rows = rng.integers(0, self.Xs.shape[1], size=(trials, N, self.batch_size))
            Xb = self.Xs[np.arange(N)[None, :, None], rows]         # (trials, N, B, d)
            yb = self.ys[np.arange(N)[None, :, None], rows]
            r = self._residual(np.matmul(Xb, theta[..., None])[..., 0], yb)
            np.matmul(r[..., None, :], Xb, out=out[..., None, :])
            out /= self.batch_size
        elif not self.logistic:  # least squares: X^T (X w - y) / m from the normal equations
            np.matmul(theta.transpose(1, 0, 2), self.gram, out=out.transpose(1, 0, 2))
            out -= self.moment
            out += self.l2 * theta
            return out
        elif self.shared:  # one (trials N, d) x (d, m) product
            flat = theta.reshape(trials * N, d)
            r = self._residual(flat @ self.X.T, self.y)
            out.reshape(trials * N, d)[...] = r @ self.X
            out /= len(self.X)
        else:  # batched over replicas, so BLAS does the work: (N, trials, d) x (N, d, m)
            by_replica = np.ascontiguousarray(theta.transpose(1, 0, 2))
            r = self._residual(np.matmul(by_replica, self.XsT), self.ys[:, None, :])
            out.transpose(1, 0, 2)[...] = np.matmul(r, self.Xs)
            out /= self.Xs.shape[1]
        out += self.l2 * theta
        return out

    def loss(self, x):
        """Global training loss (all rows), shape x.shape[:-1]."""
        scores = x @ self.X.T
        return self._row_loss(scores, self.y).mean(-1) + 0.5 * self.l2 * np.einsum("...i,...i->...", x, x)


def build(cfg, rng: np.random.Generator):
    """The objective of a :class:`noloco.quadratic.sim_config.SimConfig` (which has checked that its
    fields fit the objective)."""
    N = cfg.outer.replicas
    if cfg.objective == "quadratic":
        return Quadratic(cfg.curvatures, rotate=cfg.rotate, rng=rng)
    return DataObjective(cfg.objective, split=cfg.split, l2=cfg.l2, batch_size=cfg.batch_size,
                         replicas=N, rng=rng)
