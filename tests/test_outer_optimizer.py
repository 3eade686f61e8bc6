"""The public outer optimizer (noloco.OuterOptimizer): exact arithmetic pins the update; the batched mode is a
hand loop over theory.outer.outer_step with theory.partitions' groups; a real gloo group (one replica per
process) equals the batched mode; diloco is n = N; a resumed run is bit-identical; a bad setting is named;
``import noloco`` loads no torch; docs/own_loop.md's code runs."""

import doctest
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------- the top-level package, without torch

def test_import_noloco_and_the_theory_side_load_no_torch():
    code = ("import sys, noloco\n"
            "method, outer, inner = noloco.resolve('paper', replicas=16)\n"
            "a = noloco.analyse(outer, inner, noloco.Spectrum((0.1, 1.0)))\n"
            "noloco.simulate, noloco.Simulation, noloco.SimConfig\n"
            "from noloco.cli import build_parser, version\n"
            "build_parser(); version()\n"
            "print(a.verdict, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["stable", "False"]


def test_exports_are_public_and_within_the_layers():
    import noloco
    from test_architecture import allowed, layer_of

    rows = allowed()
    assert set(noloco.__all__) == {"__version__", *noloco._EXPORTS} and set(noloco.__all__) <= set(dir(noloco))
    for name, module in noloco._EXPORTS.items():
        assert layer_of(module, rows) in rows["noloco"], (name, module)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        noloco.nothing


def test_the_theory_side_from_a_notebook():
    import noloco

    method, outer, inner = noloco.resolve("paper", "noloco", replicas=8, gamma=2.5)
    assert (method, outer.group_size, inner.steps) == ("noloco", 2, 50)
    assert noloco.analyse(outer, inner, noloco.Spectrum((1.0,))).verdict == "unstable"  # gamma too strong
    with pytest.raises(noloco.ConfigError, match="group_size=3"):
        noloco.resolve("paper", replicas=8, group_size=3)


# ----------------------------------------------------------------- the optimizer (torch)

torch_only = pytest.mark.torch


def _torch():
    return pytest.importorskip("torch")


@torch_only
@pytest.mark.parametrize("momentum,first,second", [
    # N = 2, n = 2 (one group); alpha 0.5, beta 0.5, gamma 0.25; phi = [0, 4], theta = phi + [2, 4], then + [2, 2]
    ("heavy-ball", [2.0, 5.0], [4.375, 6.125]),
    ("nesterov", [3.0, 5.5], [5.46875, 6.78125]),
])
def test_exact_arithmetic_pins_the_update(momentum, first, second):
    """By hand: step 1 mean progress 3, mean phi 2, u = 1.5 + 0.25 (2 - phi) = [2, 1] = delta; heavy-ball
    phi + delta, nesterov phi + u + alpha delta. Step 2 (heavy-ball; nesterov alike from its own phi): mean
    progress 2, u = 1 + 0.25 (3.5 - phi) = [1.375, 0.625], delta = 0.5 [2, 1] + u. The inner phase is
    SGD with lr 1 on loss = -(c * w).sum(), so theta = phi + c exactly; a progress of the wrong sign
    (phi - theta) or a pull of the wrong sign gives other numbers."""
    torch = _torch()
    from noloco import OuterOptimizer

    w = torch.nn.Parameter(torch.tensor([[0.0], [4.0]], dtype=torch.float64))
    inner = torch.optim.SGD([w], lr=1.0)
    outer = OuterOptimizer([w], inner, replicas=2, group_size=2, inner_steps=2, alpha=0.5, beta=0.5, gamma=0.25,
                           momentum=momentum)
    for c, expected in (([[1.0], [2.0]], first), ([[1.0], [1.0]], second)):
        for _ in range(2):
            inner.zero_grad()
            (-(torch.tensor(c, dtype=torch.float64) * w).sum()).backward()
            inner.step()
        assert w.detach().flatten().tolist() == expected
        assert torch.equal(outer.phi["0"], w.detach())  # the next phase starts from phi
    assert outer.outer_done == 2 and outer.inner_done == 0


def _hand_loop(phi0, thetas, seed, group_size, rule):
    """The outer step replica by replica: theory.partitions' groups, theory.outer.outer_step."""
    import torch

    from noloco.theory.outer import outer_step
    from noloco.theory.partitions import partition

    N = phi0.shape[0]
    phi, delta = [phi0[i].clone() for i in range(N)], [torch.zeros_like(phi0[i]) for i in range(N)]
    for t, moves in enumerate(thetas):
        theta = [phi[i] + moves[i] for i in range(N)]
        progress = [theta[i] - phi[i] for i in range(N)]
        new = {}
        for group in partition(seed, t, N, group_size).tolist():
            mean_phi = sum(phi[j] for j in group) / len(group)
            mean_progress = sum(progress[j] for j in group) / len(group)
            for i in group:
                new[i] = outer_step(phi[i], delta[i], mean_phi, mean_progress, **rule)
        phi, delta = [new[i][0] for i in range(N)], [new[i][1] for i in range(N)]
    return torch.stack(phi), torch.stack(delta)


@torch_only
@pytest.mark.parametrize("replicas,group_size,momentum", [(4, 2, "heavy-ball"), (8, 4, "nesterov"), (6, 3, "heavy-ball")])
def test_batched_mode_is_a_hand_loop_over_outer_step(replicas, group_size, momentum):
    torch = _torch()
    from noloco import OuterOptimizer

    gen = torch.Generator().manual_seed(replicas)
    phi0 = torch.randn(replicas, 3, 2, generator=gen, dtype=torch.float64)
    moves = [torch.randn(replicas, 3, 2, generator=gen, dtype=torch.float64) for _ in range(5)]
    w = torch.nn.Parameter(phi0.clone())
    outer = OuterOptimizer({"w": w}, replicas=replicas, group_size=group_size, inner_steps=1, alpha=0.6, beta=0.8,
                           gamma=0.4, momentum=momentum, seed=11)
    for move in moves:
        with torch.no_grad():
            w.add_(move)  # the inner phase
        assert outer.step()
    phi, delta = _hand_loop(phi0, moves, 11, group_size, outer.config.rule())
    torch.testing.assert_close(outer.phi["w"], phi, rtol=0, atol=1e-13)
    torch.testing.assert_close(outer.delta["w"], delta, rtol=0, atol=1e-13)
    assert phi.std(0).max() > 0.1  # the replicas differ: random groups, not one average


@torch_only
def test_a_list_of_modules_is_the_batched_mode():
    torch = _torch()
    from noloco import OuterOptimizer

    torch.manual_seed(0)
    modules = [torch.nn.Linear(3, 2).double() for _ in range(4)]
    stacked = {k: torch.nn.Parameter(torch.stack([dict(m.named_parameters())[k].detach() for m in modules]))
               for k in ("weight", "bias")}
    a = OuterOptimizer(modules, inner_steps=1, seed=3)
    b = OuterOptimizer(stacked, replicas=4, inner_steps=1, seed=3)
    for t in range(3):
        with torch.no_grad():
            for i, m in enumerate(modules):
                for k, p in m.named_parameters():
                    move = torch.full_like(p, float(i + t)) * (1 if k == "weight" else -1)
                    p.add_(move)
                    stacked[k][i].add_(move)
        a.step(), b.step()
    for k in stacked:
        assert torch.equal(a.phi[k], b.phi[k])
        assert torch.equal(torch.stack([dict(m.named_parameters())[k].detach() for m in modules]), stacked[k].detach())


@torch_only
def test_diloco_averages_all_replicas_and_local_none():
    torch = _torch()
    from noloco import OuterOptimizer

    w = torch.nn.Parameter(torch.randn(6, 4, dtype=torch.float64))
    start = w.detach().clone()
    diloco = OuterOptimizer([w], method="diloco", replicas=6, inner_steps=1)
    assert diloco.config.group_size == 6 and diloco.config.gamma == 0
    assert OuterOptimizer([w], method="diloco", replicas=6).inner_steps == 100  # the diloco preset's H
    with torch.no_grad():
        w.add_(torch.arange(6.0, dtype=torch.float64).view(6, 1))
    diloco.sync()
    mean_progress = torch.arange(6.0).mean().item()
    torch.testing.assert_close(w.detach(), start + 0.7 * mean_progress, rtol=0, atol=1e-14)  # every replica alike
    v = torch.nn.Parameter(torch.zeros(4, 2))
    local = OuterOptimizer([v], method="local", replicas=4, inner_steps=1)
    with torch.no_grad():
        v.add_(torch.arange(8.0).view(4, 2))
    local.sync()
    assert torch.equal(v.detach(), torch.arange(8.0).view(4, 2)) and local.config.group_size == 1


@torch_only
def test_outer_state_in_its_own_dtype():
    """A bfloat16 model with float32 outer state (outer_dtype): phi keeps what bfloat16 would round away."""
    torch = _torch()
    from noloco import OuterOptimizer

    w = torch.nn.Parameter(torch.ones(2, 3, dtype=torch.bfloat16))
    outer = OuterOptimizer([w], replicas=2, inner_steps=1, alpha=0.0, beta=1e-3, gamma=0.0,
                           outer_dtype=torch.float32)
    with torch.no_grad():
        w.add_(1.0)
    outer.sync()
    assert outer.phi["0"].dtype == outer.delta["0"].dtype == torch.float32 and w.dtype == torch.bfloat16
    assert torch.equal(outer.phi["0"], torch.full((2, 3), 1.001))  # 1 + 1e-3 in float32
    assert torch.equal(w.detach(), outer.phi["0"].bfloat16()) and w[0, 0].item() == 1.0  # rounded in the model


@torch_only
def test_the_progress_hook_sees_theta_minus_phi():
    torch = _torch()
    from noloco import OuterOptimizer

    w = torch.nn.Parameter(torch.ones(2, 3))
    outer = OuterOptimizer([w], replicas=2, inner_steps=1)
    seen = []
    handle = outer.add_progress_hook(lambda phi, progress, t: seen.append((t, progress["0"].clone())))
    with torch.no_grad():
        w.add_(2.0)
    outer.step()
    handle.remove()
    outer.step()
    assert len(seen) == 1 and seen[0][0] == 0 and torch.equal(seen[0][1], torch.full((2, 3), 2.0))


@torch_only
@pytest.mark.parametrize("kw,words", [
    (dict(method="nolocoo"), "method='nolocoo'"),
    (dict(preset="papers"), "preset='papers'"),
    (dict(group_size=3), "group_size=3"),
    (dict(alpha=1.0), "alpha=1.0"),
    (dict(beta=-0.1), "beta=-0.1"),
    (dict(momentum="adam"), "momentum='adam'"),
    (dict(inner_steps=0), "inner_steps=0"),
    (dict(seed=-1), "seed=-1"),
    (dict(method="diloco", group_size=2), "group_size=2 conflicts with method='diloco'"),
    (dict(method="ddp"), "method='ddp'"),
    (dict(replicas=3), "replicas=3 but parameter '0' has shape (4, 2)"),
    (dict(replicas=None), "replicas=None"),
    (dict(replicas=0), "replicas=0 is out of range"),
    (dict(outer_dtype="float32"), "outer_dtype='float32'"),
])
def test_a_bad_setting_is_named(kw, words):
    torch = _torch()
    from noloco import ConfigError, OuterOptimizer

    kw = {"replicas": 4, **kw}
    with pytest.raises(ConfigError, match=re.escape(words)) as err:
        OuterOptimizer([torch.zeros(4, 2)], **kw)
    assert isinstance(err.value, ValueError)


@torch_only
def test_the_setting_passed_whole_is_the_setting_given_loose():
    """config=OuterConfig runs the very step the loose keywords run (the harness passes its own whole)."""
    torch = _torch()
    from noloco import OuterOptimizer, resolve

    method, config, _ = resolve("diloco-nesterov", replicas=4)

    def run(**kw):
        torch.manual_seed(3)
        w = torch.nn.Parameter(torch.randn(1, 5).expand(4, 5).clone())
        inner = torch.optim.SGD([w], lr=0.1)
        outer = OuterOptimizer([w], inner, replicas=4, inner_steps=3, method=method, seed=2, **kw)
        _loop(outer, inner, w, 9)
        return outer, w

    whole, w1 = run(config=config)
    loose, w2 = run(preset="diloco-nesterov")
    assert whole.config == loose.config == config and whole.outer_done == 3
    assert torch.equal(w1, w2) and torch.equal(whole.delta["0"], loose.delta["0"]) and w1.std(0).max() == 0


@pytest.mark.parametrize("kw,words", [
    (dict(alpha=0.3), "config= and alpha= both given"),
    (dict(preset="paper", gamma=0.1), "config= and preset=, gamma= both given"),
    (dict(replicas=2), "replicas=2 but config.replicas=4"),
    (dict(method="diloco"), "config conflicts with method='diloco'"),
    (dict(config={"replicas": 4}), "is not an OuterConfig"),
])
def test_the_setting_passed_whole_is_refused_beside_a_loose_one(kw, words):
    torch = _torch()
    from noloco import ConfigError, OuterConfig, OuterOptimizer

    kw = {"config": OuterConfig(replicas=4), "replicas": 4, **kw}
    with pytest.raises(ConfigError, match=re.escape(words)):
        OuterOptimizer([torch.zeros(4, 2)], **kw)


@torch_only
def test_the_exchange_is_not_a_public_argument_and_counters_resume_by_start_at():
    torch = _torch()
    from noloco import ConfigError, OuterOptimizer
    from noloco.training.exchange import LocalExchange

    with pytest.raises(TypeError, match="exchange"):
        OuterOptimizer([torch.zeros(4, 2)], replicas=4, exchange=LocalExchange(4))
    outer = OuterOptimizer._placed(LocalExchange(4), {"w": torch.zeros(4, 2)}, inner_steps=3)
    assert outer.replicas == 4 and not hasattr(outer, "_given_exchange")
    outer.start_at(5, 2)
    assert (outer.outer_done, outer.inner_done) == (5, 2)
    assert outer.step() and (outer.outer_done, outer.inner_done) == (6, 0)  # the third inner step of the phase
    with pytest.raises(ConfigError, match="inner_step=3 is out of range"):
        outer.start_at(1, 3)
    with pytest.raises(ConfigError, match="outer_step=-1"):
        outer.start_at(-1)


def _loop(outer, inner, w, steps: int, start: int = 0):
    """A deterministic inner loop: replica r's target at inner step k from its own generator."""
    import torch

    for k in range(start, steps):
        targets = torch.stack([torch.randn(w.shape[1:], generator=torch.Generator().manual_seed(97 * r + k))
                               for r in range(w.shape[0])])
        inner.zero_grad()
        ((w - targets) ** 2).sum().backward()
        inner.step()


@torch_only
@pytest.mark.parametrize("cut", [6, 8])  # mid-phase (inner step 2 of outer step 2), at an outer-step boundary
def test_resume_is_bit_identical(tmp_path, cut):
    torch = _torch()
    from noloco import OuterOptimizer

    def make():
        torch.manual_seed(1)
        w = torch.nn.Parameter(torch.randn(4, 5).expand(4, 5).clone())  # replicas start equal
        inner = torch.optim.AdamW([w], lr=0.05)
        return w, inner, OuterOptimizer([w], inner, replicas=4, inner_steps=4, seed=9)

    w, inner, outer = make()
    _loop(outer, inner, w, 16)
    w2, inner2, outer2 = make()
    _loop(outer2, inner2, w2, cut)
    path = tmp_path / "ckpt.pt"
    state = {"outer": outer2.state_dict(), "inner": inner2.state_dict()}
    if cut % 4:  # mid-phase the inner weights are the model's, saved with it
        state["w"] = w2.detach()
    torch.save(state, path)
    w3, inner3, outer3 = make()
    with torch.no_grad():
        w3.add_(1.0)  # whatever the new run holds is overwritten
    saved = torch.load(path, weights_only=True)
    inner3.load_state_dict(saved["inner"])
    if "w" in saved:
        with torch.no_grad():
            w3.copy_(saved["w"])
    outer3.load_state_dict(saved["outer"])
    assert (outer3.outer_done, outer3.inner_done) == (cut // 4, cut % 4)
    _loop(outer3, inner3, w3, 16, start=cut)
    assert outer3.outer_done == outer.outer_done == 4
    assert torch.equal(w3, w) and torch.equal(outer3.phi["0"], outer.phi["0"])
    assert torch.equal(outer3.delta["0"], outer.delta["0"]) and outer.delta["0"].abs().max() > 0
    assert w.detach().std(0).max() > 0  # the replicas differ: the check has teeth


@torch_only
def test_state_dict_round_trip_and_refusals():
    torch = _torch()
    from noloco import ConfigError, OuterOptimizer
    from noloco.infra.errors import DataError

    w = torch.nn.Parameter(torch.randn(4, 3))
    outer = OuterOptimizer([w], replicas=4, inner_steps=2, seed=5)
    for _ in range(3):
        with torch.no_grad():
            w.add_(torch.randn(4, 3))
        outer.step()
    state = outer.state_dict()
    assert {"phi", "delta", "outer_step", "inner_step", "seed", "method", "outer", "inner_steps"} <= set(state)
    other = OuterOptimizer([torch.nn.Parameter(torch.zeros(4, 3))], replicas=4, inner_steps=2)
    other.load_state_dict(state)
    assert (other.seed, other.outer_done, other.inner_done) == (5, 1, 1)
    assert torch.equal(other.phi["0"], outer.phi["0"]) and torch.equal(other.delta["0"], outer.delta["0"])
    with pytest.raises(ConfigError, match=r"alpha=0\.5 in the state loaded \(now 0\.3\)"):
        OuterOptimizer([torch.zeros(4, 3)], replicas=4, inner_steps=2, alpha=0.3).load_state_dict(state)
    with pytest.raises(DataError, match=r"phi\['0'\] of shape \(4, 3\), expected \(4, 2\)"):
        OuterOptimizer([torch.zeros(4, 2)], replicas=4, inner_steps=2).load_state_dict(state)
    # a malformed state is a DataError before anything is copied (a missing counter was a KeyError after phi
    # was loaded; a list for phi an AttributeError, a string for outer a TypeError)
    fresh = OuterOptimizer([torch.nn.Parameter(torch.zeros(4, 3))], replicas=4, inner_steps=2)
    for bad, match in [({k: v for k, v in state.items() if k != "seed"}, "seed is None"),
                       ({k: v for k, v in state.items() if k != "outer_step"}, "outer_step is None"),
                       ({**state, "phi": [1, 2]}, "phi is a list"), ({**state, "outer": "paper"}, "outer is a str")]:
        with pytest.raises(DataError, match=match):
            fresh.load_state_dict(bad)
    assert not fresh.phi["0"].any() and fresh.outer_done == 0


@torch_only
def test_careless_arguments_are_named_at_once():
    torch = _torch()
    from noloco import ConfigError, OuterOptimizer

    # an integer tensor was taken, and the first outer step failed in torch with a RuntimeError
    with pytest.raises(ConfigError, match="torch.int64 tensor; the outer step needs floating-point"):
        OuterOptimizer([torch.zeros(4, 3, dtype=torch.long)], replicas=4, inner_steps=1)
    with pytest.raises(ConfigError, match="stages=3 is not a list"):  # was a TypeError
        OuterOptimizer([torch.zeros(4, 3)], replicas=4, inner_steps=1, stages=3)
    outer = OuterOptimizer([torch.zeros(4, 3)], replicas=4, inner_steps=1)
    with pytest.raises(ConfigError, match="hook=3 is not callable"):  # was a TypeError at the next outer step
        outer.add_progress_hook(3)
    outer.step()


@torch_only
def test_docstring_examples_run():
    _torch()
    import noloco.training.outer_optimizer as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# ----------------------------------------------------------------- a real process group

def _targets(replica: int, step: int, shape):
    import torch

    return torch.randn(shape, generator=torch.Generator().manual_seed(1000 * replica + step), dtype=torch.float64)


def _train_run(w, replicas_here, method, replicas=None):
    """3 outer steps of H = 3 on a quadratic per replica, SGD with momentum (state carried over)."""
    import torch

    from noloco import OuterOptimizer

    inner = torch.optim.SGD([w], lr=0.1, momentum=0.5)
    outer = OuterOptimizer([w], inner, method=method, replicas=replicas, inner_steps=3, seed=4)
    for k in range(9):
        target = torch.stack([_targets(r, k, w.shape[-2:]) for r in replicas_here])
        inner.zero_grad()
        ((w - (target if replicas is not None else target[0])) ** 2).sum().backward()
        inner.step()
    return outer


def _rank(rank, world, port, out):
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    start = torch.randn(3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # equal everywhere
    result = {}
    for method in ("noloco", "diloco"):
        w = torch.nn.Parameter(start.clone())
        outer = _train_run(w, [rank], method)
        result[method] = {"phi": outer.phi["0"], "delta": outer.delta["0"], "group_size": outer.config.group_size}
    # only the group talks: the ranks of one pair run an outer step while the other pair never calls the
    # exchange; a collective over every rank would wait for them and time out (PeerError after 3 s)
    from noloco import OuterOptimizer, partition
    from noloco.training.exchange import PeerError

    first = partition(4, 0, world, 2)[0].tolist()
    outer = OuterOptimizer([torch.nn.Parameter(start.clone())], seed=4, inner_steps=1, timeout=3.0)
    result["alone"] = "not in the group"
    if rank in first:
        try:
            outer.sync()
            result["alone"] = "synced"
        except PeerError as err:
            result["alone"] = str(err)
        Path(f"{out}/done{rank}").touch()
    else:  # alive, silent, until the pair is done (or 10 s): its end is not what the pair waited for
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(Path(f"{out}/done{r}").exists() for r in first):
            time.sleep(0.05)
    torch.save(result, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()
    os._exit(0)  # skip interpreter teardown: gloo can abort in C++ static destructors (docs/reliability.md)


@pytest.mark.slow  # 4 processes: 61 s in a loaded full run; fast: test_llm_train's torchrun run against the batched one
@torch_only
def test_process_group_mode_equals_the_batched_mode(tmp_path):
    """4 processes, gloo on localhost: noloco exchanges within its pairs point-to-point, diloco all-reduces;
    each rank's phi is replica `rank` of the batched run with the same seed (bit for bit in pairs; the
    all-reduce sums in the backend's order)."""
    torch = _torch()
    import torch.multiprocessing as mp

    from noloco.training.exchange import free_port

    world = 4
    mp.start_processes(_rank, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True,
                       start_method="spawn")
    start = torch.randn(3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for method, n in (("noloco", 2), ("diloco", 4)):
        w = torch.nn.Parameter(start.expand(world, 3, 2).clone())
        batched = _train_run(w, list(range(world)), method, replicas=world)
        assert batched.config.group_size == n
        for rank in range(world):
            got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)[method]
            assert got["group_size"] == n
            torch.testing.assert_close(got["phi"], batched.phi["0"][rank], rtol=0, atol=1e-12)
            torch.testing.assert_close(got["delta"], batched.delta["0"][rank], rtol=0, atol=1e-12)
            if method == "noloco":  # pairs sum in the group's order on both sides: the same bits
                assert torch.equal(got["phi"], batched.phi["0"][rank])
                assert torch.equal(got["delta"], batched.delta["0"][rank])
        spread = batched.phi["0"].std(0).max().item()
        assert spread > 0.01 if method == "noloco" else spread < 1e-12
    alone = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)["alone"] for rank in range(world)]
    assert sorted(alone) == ["not in the group"] * 2 + ["synced"] * 2, alone


# ----------------------------------------------------------------- docs/own_loop.md

def _doc_blocks():
    text = (ROOT / "docs" / "own_loop.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _doc_rank(rank, world, port, code, out):
    import torch

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # what torchrun sets
    torch.set_num_threads(1)
    os.chdir(out)
    namespace = {"__name__": "__main__"}
    exec(compile(code, "docs/own_loop.md", "exec"), namespace)
    outer = namespace["outer"]
    torch.save({"outer_done": outer.outer_done, "first": namespace["first_loss"], "last": namespace["loss"].item()},
               f"{out}/doc{rank}.pt")
    os._exit(0)


@torch_only
def test_the_docs_page_runs(tmp_path):
    """The page's torch loop, under 2 processes as torchrun starts them, then its one-process form."""
    torch = _torch()
    import torch.multiprocessing as mp

    from noloco.training.exchange import free_port

    loop, *others = _doc_blocks()
    mp.start_processes(_doc_rank, args=(2, free_port(), loop, str(tmp_path)), nprocs=2, join=True,
                       start_method="spawn")
    for rank in range(2):
        got = torch.load(tmp_path / f"doc{rank}.pt", weights_only=True)
        assert got["outer_done"] == 20 and got["last"] < 0.5 * got["first"]
        assert (tmp_path / f"ckpt-rank{rank}.pt").exists()
    for code in others:
        exec(compile(code, "docs/own_loop.md", "exec"), {"__name__": "__main__"})


# ----------------------------------------------------------------- the one-vector step in place

@torch_only
@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
@pytest.mark.parametrize("method,group_size", [("noloco", 2), ("noloco", 3), ("diloco", 6)])
def test_the_one_vector_step_is_theory_outer_step_to_float32_rounding(method, group_size, momentum):
    """float32 state, 6 replicas, 8 outer steps: the in-place step that sends beta progress + gamma phi stays
    within float32 rounding of theory.outer.outer_step run in float64 on the same moves (the hand loop)."""
    torch = _torch()
    from noloco import OuterOptimizer

    gen = torch.Generator().manual_seed(7)
    phi0 = torch.randn(6, 40, 3, generator=gen, dtype=torch.float64)
    moves = [0.01 * torch.randn(6, 40, 3, generator=gen, dtype=torch.float64) for _ in range(8)]
    w = torch.nn.Parameter(phi0.float())
    kw = dict(alpha=0.5, beta=0.7, gamma=0.4) if method == "noloco" else dict(alpha=0.3, beta=0.7)
    outer = OuterOptimizer({"w": w}, method=method, replicas=6, group_size=group_size, inner_steps=1, seed=5,
                           momentum=momentum, **kw)
    for move in moves:
        with torch.no_grad():
            w.copy_((outer.phi["w"].double() + move).float())  # theta = phi + move, rounded once
        outer.step()
    # the reference, from the same float32 starting point (the moves were rounded into theta alike)
    phi, delta = _hand_loop(phi0.float().double(), moves, 5, group_size, outer.config.rule())
    scale = phi.abs().max().item()
    assert (outer.phi["w"].double() - phi).abs().max().item() < 20 * 2 ** -24 * scale
    assert (outer.delta["w"].double() - delta).abs().max().item() < 20 * 2 ** -24 * scale
    assert delta.abs().max().item() > 1e-3  # the momentum is not negligible: the check has teeth


@torch_only
def test_the_step_writes_in_place_into_buffers_allocated_once():
    """phi and delta are views of one flat buffer each; after steps they are the same tensors at the same
    addresses (nothing reallocated), and a caller's replaced entry is taken in at the next step."""
    torch = _torch()
    from noloco import OuterOptimizer

    params = {"a": torch.nn.Parameter(torch.randn(4, 3, 2)), "b": torch.nn.Parameter(torch.randn(4, 5))}
    outer = OuterOptimizer(params, replicas=4, inner_steps=1)
    before = {k: (v, v.data_ptr()) for k, v in outer.phi.items()}
    (bucket,) = outer.buckets
    flat = (bucket.phi.data_ptr(), bucket.delta.data_ptr(), bucket.work.data_ptr())
    for _ in range(3):
        with torch.no_grad():
            params["a"].add_(0.1)
        outer.sync()
    assert all(outer.phi[k] is v and v.data_ptr() == ptr for k, (v, ptr) in before.items())
    assert (bucket.phi.data_ptr(), bucket.delta.data_ptr(), bucket.work.data_ptr()) == flat
    assert bucket.phi.data_ptr() <= outer.phi["b"].data_ptr() < bucket.phi.data_ptr() + bucket.phi.nbytes
    # replaced entries (a checkpoint loaded by hand): adopted, not ignored; all zero, so they stay zero
    outer.phi["b"], outer.delta["b"] = torch.zeros(4, 5), torch.zeros(4, 5)
    with torch.no_grad():
        params["b"].zero_()
    outer.sync()
    assert outer.phi["b"].data_ptr() >= bucket.phi.data_ptr() and params["b"].abs().max() < 1e-6


@torch_only
def test_a_bfloat16_wire_rounds_only_what_is_sent():
    """wire_dtype=torch.bfloat16: the step is the float32 one to bfloat16's rounding of v (8 bits), and no
    closer (the vector really went through bfloat16); a non-float dtype is refused by name."""
    torch = _torch()
    from noloco import OuterOptimizer
    from noloco.infra.errors import ConfigError

    gen = torch.Generator().manual_seed(3)
    start = torch.randn(4, 64, generator=gen)
    move = 0.01 * torch.randn(4, 64, generator=gen)
    runs = {}
    for wire in (None, torch.bfloat16):
        w = torch.nn.Parameter(start.clone())
        outer = OuterOptimizer([w], replicas=4, inner_steps=1, wire_dtype=wire, seed=1)
        with torch.no_grad():
            w.add_(move)
        outer.sync()
        runs[wire] = outer.phi["0"].clone()
    gap = (runs[None] - runs[torch.bfloat16]).abs().max().item()
    assert 2 ** -14 * start.abs().max().item() < gap < 2 ** -8 * start.abs().max().item()
    with pytest.raises(ConfigError, match="wire_dtype"):
        OuterOptimizer([torch.nn.Parameter(start.clone())], replicas=4, wire_dtype=torch.int8)


# ----------------------------------------------------------------- python -m noloco.benchmarks outer

def _outer_bench(tmp_path, *argv):
    import json

    from noloco.benchmarks.__main__ import main

    out = tmp_path / "outer.json"
    assert main(["outer", "--width", "16", "--layers", "1", "--seconds", "0.1", "--steps", "3", "--out", str(out),
                 *argv]) == 0
    return json.loads(out.read_text())["results"]


@torch_only
def test_the_outer_benchmark_in_one_process(tmp_path):
    """The single-device form (what runs on one GPU without torchrun), rehearsed on the CPU."""
    import math

    from noloco.benchmarks.outer import shapes

    res = _outer_bench(tmp_path, "--ranks", "1", "--replicas", "4", "--device", "cpu", "--spread-steps", "2")
    assert res["P"] == sum(math.prod(s) for s in shapes(16, 1).values()) and res["tensors"] == 10
    modes = res["modes"]
    assert set(modes) == {"pairs: toolkit", "pairs: toolkit + observer (sampled 1024)", "DiLoCo: toolkit",
                          "DiLoCo: toolkit + observer (sampled 1024)", "memory floor (3 copies of N P)",
                          "inner step floor (AdamW update of N P)"}
    assert all(m["steps"] == 3 and m["median_s"] > 0 for m in modes.values())
    observed = modes["pairs: toolkit + observer (sampled 1024)"]
    assert 0 < observed["observer_share_with_inner"] < observed["observer_share"] < 1
    wire = res["wire_spread"]  # the bfloat16 wire's run is another run: not the float32 one's bits
    assert wire["float32"]["weight_std"] > 0 and wire["bfloat16"]["weight_std"] != wire["float32"]["weight_std"]


@torch_only
@pytest.mark.slow
def test_the_outer_benchmark_across_ranks(tmp_path):
    res = _outer_bench(tmp_path, "--ranks", "2")
    P = res["P"]
    modes = res["modes"]
    assert modes["pairs: toolkit"]["bytes_sent_per_rank"] == 4 * P == modes["pairs: floor P"]["bytes_sent_per_rank"]
    assert modes["pairs: reference pattern"]["bytes_sent_per_rank"] == 8 * P
    assert modes["pairs: toolkit, bf16 wire"]["bytes_sent_per_rank"] == 2 * P
    assert modes["pairs: floor P"]["x_floor_P"] == 1 and "observer_share" in modes["DiLoCo: toolkit + observer"]
    # the step's own passes and the memory floor, timed in the same run, send nothing
    assert modes["pairs: toolkit without the exchange"]["bytes_sent_per_rank"] == 0
    assert modes["pairs: memory floor (3 copies of P)"]["median_s"] > 0
