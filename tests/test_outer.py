"""The outer step against its written definitions, on sympy, numpy and torch."""

import numpy as np
import pytest
import sympy as sp

from noloco.theory.outer import outer_step


def test_heavy_ball_exact_integers():
    # learning rates 1, integer weights: every number is exact
    phi, delta = np.array([3, 7]), np.array([1, -2])
    g_phi, g_prog = np.array([5, 5]), np.array([2, 2])
    new_phi, new_delta = outer_step(phi, delta, g_phi, g_prog, alpha=1, beta=1, gamma=1)
    # u = g_prog + (g_phi - phi) = [4, 0]; delta = delta + u = [5, -2]; phi += delta
    assert new_delta.tolist() == [5, -2]
    assert new_phi.tolist() == [8, 5]


def test_nesterov_exact_integers():
    phi, delta = np.array([3, 7]), np.array([1, -2])
    g_phi, g_prog = np.array([5, 5]), np.array([2, 2])
    new_phi, new_delta = outer_step(phi, delta, g_phi, g_prog, alpha=1, beta=1, gamma=1, momentum="nesterov")
    # u = [4, 0]; delta = [5, -2]; phi += u + alpha * delta = [9, -2]
    assert new_delta.tolist() == [5, -2]
    assert new_phi.tolist() == [12, 5]


def test_symbolic_definitions():
    a, b, g, phi, d, gp, gD = sp.symbols("a b g phi d gp gD")
    u = b * gD + g * (gp - phi)
    hb = outer_step(phi, d, gp, gD, alpha=a, beta=b, gamma=g)
    assert sp.expand(hb[1] - (a * d + u)) == 0 and sp.expand(hb[0] - (phi + a * d + u)) == 0
    ne = outer_step(phi, d, gp, gD, alpha=a, beta=b, gamma=g, momentum="nesterov")
    assert sp.expand(ne[1] - (a * d + u)) == 0 and sp.expand(ne[0] - (phi + u + a * (a * d + u))) == 0


def test_unknown_momentum_rejected():
    from noloco.infra.errors import ConfigError

    with pytest.raises(ConfigError, match="momentum"):
        outer_step(1.0, 0.0, 1.0, 0.0, alpha=0.5, beta=1, gamma=1, momentum="adam")


@pytest.mark.parametrize("nesterov", [False, True])
def test_matches_torch_sgd(nesterov):
    """Both conventions equal torch.optim.SGD(lr=beta, momentum=alpha, nesterov=...) on
    the pseudo-gradient -u / beta, with delta = -lr * momentum_buffer."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    alpha, beta, gamma = 0.6, 0.8, 0.5
    p = torch.nn.Parameter(torch.tensor(rng.normal(size=5)))
    opt = torch.optim.SGD([p], lr=beta, momentum=alpha, nesterov=nesterov)
    phi = p.detach().clone()
    delta = torch.zeros_like(phi)
    for _ in range(6):
        g_phi = torch.tensor(rng.normal(size=5))
        g_prog = torch.tensor(rng.normal(size=5))
        u = beta * g_prog + gamma * (g_phi - p.detach())
        p.grad = -u / beta
        opt.step()
        phi, delta = outer_step(phi, delta, g_phi, g_prog, alpha=alpha, beta=beta, gamma=gamma,
                                momentum="nesterov" if nesterov else "heavy-ball")
        torch.testing.assert_close(phi, p.detach(), rtol=1e-12, atol=1e-12)
