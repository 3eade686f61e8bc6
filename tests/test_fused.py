"""The compiled exact outer step (quadratic/fused.py) against the numpy path it replaces, and the
``NOLOCO_JIT`` switch that chooses between them."""

import importlib.util

import numpy as np
import pytest

from noloco.cli import main
from noloco.quadratic import fused
from noloco.quadratic.sim_config import SimConfig
from noloco.quadratic.simulator import _group_mean, _rows, simulate
from noloco.infra.errors import ConfigError
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.theory.outer import outer_step

needs_numba = pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                 reason="numba is not installed (the [fast] extra)")
PAIRS = OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=0.7)
SPECTRUM = tuple(np.linspace(0.1, 2.0, 300))   # 300 directions x 40 trials: two blocks of directions
SETTINGS = {
    "pairs": SimConfig(outer=PAIRS, inner=InnerConfig(lr=0.02, steps=20, noise=1.0), curvatures=SPECTRUM,
                       trials=40, outer_steps=25, seed=1),
    "groups of 4, nesterov, optima, start spread": SimConfig(
        outer=OuterConfig(replicas=8, group_size=4, alpha=0.6, beta=0.8, gamma=0.4, momentum="nesterov"),
        inner=InnerConfig(lr=0.05, steps=10, noise=0.5), curvatures=SPECTRUM, zeta=0.3, init_spread=0.5,
        trials=40, outer_steps=25, seed=2),
    "noise-free, groups of 3": SimConfig(outer=OuterConfig(replicas=6, group_size=3), init_spread=1.0,
                                         inner=InnerConfig(lr=0.05, steps=10, noise=0.0), curvatures=SPECTRUM,
                                         trials=20, outer_steps=25, seed=3),
    "inverse schedule, rotated": SimConfig(outer=PAIRS, inner=InnerConfig(lr=0.1, steps=10, noise=1.0),
                                           schedule="inverse", decay_time=20.0, curvatures=(0.3, 1.0, 4.0),
                                           rotate=True, trials=30, outer_steps=20, seed=4),
    "float32": SimConfig(outer=PAIRS, inner=InnerConfig(lr=0.02, steps=20, noise=1.0), curvatures=SPECTRUM,
                         trials=40, outer_steps=25, seed=5, dtype="float32"),
    "diverging": SimConfig(outer=OuterConfig(replicas=4, group_size=2, alpha=0.99, beta=3.0, gamma=0.5),
                           inner=InnerConfig(lr=0.5, steps=10, noise=1.0), curvatures=(1.0, 3.0, 3.9),
                           trials=10, outer_steps=400, seed=6),
}


def _run(cfg, monkeypatch, jit: str):
    """``simulate(cfg)`` with ``NOLOCO_JIT=jit`` and the number of compiled steps it took."""
    calls = []
    compiled = fused.exact_outer_step
    monkeypatch.setattr(fused, "exact_outer_step", lambda *args: calls.append(1) or compiled(*args))
    monkeypatch.setenv("NOLOCO_JIT", jit)
    run = simulate(cfg)
    monkeypatch.setattr(fused, "exact_outer_step", compiled)
    return run, len(calls)


@needs_numba
@pytest.mark.parametrize("name", list(SETTINGS))
def test_compiled_runs_record_what_numpy_runs_record(name, monkeypatch):
    """Same draws, same arithmetic: every recorded moment agrees to rounding (float64; the spread's
    sums are added in float64 by the compiled loop and in float32 by numpy's einsum for float32
    weights), and the weights themselves, seen through the mean trajectory, exactly."""
    cfg = SETTINGS[name]
    by_numpy, numpy_calls = _run(cfg, monkeypatch, "0")
    compiled, compiled_calls = _run(cfg, monkeypatch, "1")
    assert numpy_calls == 0 and compiled_calls > 0
    assert (compiled.diverged_at, compiled.steps_done, compiled.divergence_reason) == (
        by_numpy.diverged_at, by_numpy.steps_done, by_numpy.divergence_reason)
    rtol = 1e-12 if cfg.dtype == "float64" else 1e-6
    for moment in ("mean_distance", "spread", "loss_at_mean", "loss_replicas"):
        a, b = getattr(by_numpy, moment), getattr(compiled, moment)
        np.testing.assert_allclose(b.mean, a.mean, rtol=rtol, atol=1e-300, err_msg=moment)
        np.testing.assert_allclose(b.se, a.se, rtol=max(rtol, 1e-9), atol=1e-300, err_msg=moment)
    if by_numpy.window_spread is not None:
        np.testing.assert_allclose(compiled.window_spread, by_numpy.window_spread, rtol=rtol)
    if name == "diverging":
        assert by_numpy.diverged_at is not None


@needs_numba
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
def test_one_compiled_step_is_the_numpy_step_bit_for_bit(dtype, momentum):
    """New groups, group means, the progress -c gap + sd z and ``noloco.theory.outer.outer_step``: the
    numpy path's operations one by one, on the same numbers, give the same bits."""
    rng = np.random.default_rng(7)
    count, N, n, width = 3, 6, 3, 5
    G = N // n
    phi, delta, shift = (rng.standard_normal((count, N, width)).astype(dtype) for _ in range(3))
    rows = np.stack([rng.permutation(N) for _ in range(count)])
    z = rng.standard_normal((count, G, 1, width)).astype(dtype)
    c, sd = rng.random(width).astype(dtype), rng.random(width).astype(dtype)
    rule = dict(alpha=0.6, beta=0.8, gamma=0.3, momentum=momentum)
    for with_shift in (False, True):
        flat = (np.arange(count)[:, None] * N + rows).ravel()
        moved, moved_delta, moved_shift = _rows(phi, flat), _rows(delta, flat), _rows(shift, flat)
        blocks = moved.reshape(count, G, n, width)
        mean_phi = _group_mean(blocks)
        gap = mean_phi - _group_mean(moved_shift.reshape(blocks.shape)) if with_shift else mean_phi
        progress = np.multiply(gap, -c)
        progress += z * sd
        want_phi, want_delta = outer_step(blocks, moved_delta.reshape(blocks.shape), mean_phi, progress, **rule)

        got = [np.empty_like(phi), np.empty_like(phi), np.empty_like(phi) if with_shift else np.empty((0, 0, 0), dtype)]
        sums = np.empty((2, count, width))
        typed = np.dtype(dtype).type
        fused.exact_outer_step(phi, delta, shift if with_shift else np.empty((0, 0, 0), dtype), rows,
                               z.reshape(count, G, width), c, sd, typed(n), typed(0.6), typed(0.8), typed(0.3),
                               momentum == "nesterov", *got, sums)
        np.testing.assert_array_equal(got[0], want_phi.reshape(phi.shape))
        np.testing.assert_array_equal(got[1], want_delta.reshape(phi.shape))
        if with_shift:
            np.testing.assert_array_equal(got[2], moved_shift)
        dev = (got[0] - got[0][:, :1]).astype(float)
        np.testing.assert_allclose(sums, np.stack([dev.sum(1), (dev * dev).sum(1)]), rtol=1e-12, atol=1e-12)


def test_the_switch(monkeypatch):
    """Unset or auto: compiled from MIN_UPDATES on, when numba is there; 0: never; 1: always, and
    without numba a one-line refusal; anything else: a one-line refusal."""
    has_numba = importlib.util.find_spec("numba") is not None
    for setting, updates, want in [("", 1e12, has_numba), ("auto", fused.MIN_UPDATES - 1, False),
                                   ("auto", fused.MIN_UPDATES, has_numba), ("0", 1e12, False)]:
        monkeypatch.setenv("NOLOCO_JIT", setting)
        assert fused.enabled(updates) == want, setting
    monkeypatch.setenv("NOLOCO_JIT", "yes")
    with pytest.raises(ConfigError, match="NOLOCO_JIT='yes' is not allowed; allowed: auto, 1, 0"):
        fused.enabled(1)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("NOLOCO_JIT", "1")
    with pytest.raises(ConfigError, match=r"NOLOCO_JIT=1 needs numba: pip install 'noloco-toolkit\[fast\]'"):
        fused.enabled(1)
    monkeypatch.setenv("NOLOCO_JIT", "auto")
    assert not fused.enabled(1e12)


def test_a_bad_switch_is_exit_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv("NOLOCO_JIT", "fast")
    assert main(["simulate", "--spectrum", "uniform:0.1:1:10", "--trials", "2", "--outer-steps", "2",
                 "--no-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["noloco simulate: error: NOLOCO_JIT='fast' is not allowed; allowed: auto, 1, 0"]
