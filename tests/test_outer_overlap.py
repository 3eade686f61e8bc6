"""OuterOptimizer(..., overlap=True): the exchange in flight during the next inner phase. The one-process run is a
hand loop over theory.outer.late_outer_step (the simulator's rule) with theory.partitions' groups; 4 gloo ranks
equal the one-process run; a state saved mid-flight resumes bit for bit; close() applies the last exchange."""

from __future__ import annotations

import datetime
import os

import pytest

from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")
pytestmark = needs_torch

from noloco.infra.errors import ConfigError  # noqa: E402
from noloco.theory.outer import late_outer_step  # noqa: E402
from noloco.theory.partitions import partition  # noqa: E402

N, SHAPE, SYNCS, SEED = 4, (3, 2), 5, 4


def _moves(sync: int, replicas) -> torch.Tensor:
    """The inner phase before sync ``sync`` (0-based) of each replica: a fixed step of its own."""
    return torch.stack([torch.randn(SHAPE, generator=torch.Generator().manual_seed(100 * sync + r),
                                    dtype=torch.float64) for r in replicas])


def _start() -> torch.Tensor:
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def _run(w, held, syncs=SYNCS, outer=None, first=0, **settings):
    """``syncs`` syncs of overlapped training on ``w`` (the replicas ``held``); close() is the caller's."""
    from noloco import OuterOptimizer

    outer = outer or OuterOptimizer([w], inner_steps=1, seed=SEED, overlap=True, **settings)
    for s in range(first, syncs):
        with torch.no_grad():
            w.add_(_moves(s, held) if w.dim() == 3 else _moves(s, held)[0])
        outer.sync()
    return outer


def _by_hand(alpha, beta, gamma, momentum, n):
    """The same run with late_outer_step, float64, replica by replica."""
    x = _start().expand(N, *SHAPE).clone()
    phi, delta, anchor, means = x.clone(), torch.zeros_like(x), None, None
    rule = dict(alpha=alpha, beta=beta, gamma=gamma, momentum=momentum)

    def apply(x, phi, delta):
        new = [late_outer_step(phi[i], delta[i], x[i], anchor[i], means[i][0], means[i][1], **rule) for i in range(N)]
        return tuple(torch.stack(part) for part in zip(*new))

    done = 0
    for s in range(SYNCS):
        x = x + _moves(s, range(N))
        if means is not None:  # the exchange of the last sync applied
            phi, delta, x = apply(x, phi, delta)
            done += 1
        means = [None] * N
        for group in partition(SEED, done, N, n).tolist():
            mean_phi, mean_progress = phi[group].mean(0), (x[group] - phi[group]).mean(0)
            for i in group:
                means[i] = (mean_phi, mean_progress)
        anchor = x.clone()
    phi, delta, x = apply(x, phi, delta)  # close(): the last exchange applied
    return phi, delta, x, done + 1


@pytest.mark.parametrize("method, n, momentum, alpha, beta, gamma", [
    ("noloco", 2, "heavy-ball", 0.5, 0.7, 0.7), ("noloco", 2, "nesterov", 0.6, 0.8, 0.3),
    ("diloco", 4, "nesterov", 0.9, 0.7, 0.0), ("noloco", 4, "heavy-ball", 0.5, 0.7, 0.2)])
def test_one_process_is_the_late_rule_by_hand(method, n, momentum, alpha, beta, gamma):
    w = torch.nn.Parameter(_start().expand(N, *SHAPE).clone())
    settings = dict(method=method, replicas=N, momentum=momentum, alpha=alpha, beta=beta, gamma=gamma)
    if method == "noloco":
        settings["group_size"] = n
    outer = _run(w, range(N), **settings)
    assert outer._pending is not None  # the last exchange is in flight until close()
    outer.close()
    phi, delta, x, done = _by_hand(alpha, beta, gamma, momentum, n)
    assert outer.outer_done == done == SYNCS
    for got, want in ((outer.phi["0"], phi), (outer.delta["0"], delta), (w.detach(), x)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert phi.std(0).max() > 0.01 if n < N else phi.std(0).max() < 1e-12


def test_the_first_sync_only_sends_and_a_phase_goes_on_from_where_it_stands():
    w = torch.nn.Parameter(_start().expand(N, *SHAPE).clone())
    outer = _run(w, range(N), syncs=1, replicas=N)
    before = w.detach().clone()
    assert outer.outer_done == 0 and torch.equal(outer.phi["0"], _start().expand(N, *SHAPE))
    assert not torch.equal(before, outer.phi["0"])  # the weights were not reset to phi


def test_a_state_saved_in_flight_resumes_bit_for_bit(tmp_path):
    from noloco import OuterOptimizer

    w = torch.nn.Parameter(_start().expand(N, *SHAPE).clone())
    through = _run(w, range(N), replicas=N)
    through.close()
    w2 = torch.nn.Parameter(_start().expand(N, *SHAPE).clone())
    first = _run(w2, range(N), syncs=3, replicas=N)
    torch.save({"outer": first.state_dict(), "w": w2.detach().clone()}, tmp_path / "ckpt.pt")
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert "pending" in saved["outer"]
    w3 = torch.nn.Parameter(saved["w"].clone())
    again = OuterOptimizer([w3], inner_steps=1, seed=SEED, overlap=True, replicas=N)
    again.load_state_dict(saved["outer"])
    _run(w3, range(N), outer=again, first=3).close()
    assert torch.equal(w3.detach(), w.detach()) and torch.equal(again.phi["0"], through.phi["0"])
    assert torch.equal(again.delta["0"], through.delta["0"]) and again.outer_done == through.outer_done
    prompt = OuterOptimizer([torch.nn.Parameter(saved["w"].clone())], inner_steps=1, seed=SEED, replicas=N)
    with pytest.raises(ConfigError, match="overlap=True"):
        prompt.load_state_dict(saved["outer"])
    # a version-1 state saved the group sum of v in flight (now its mean): read as that, the same run (n = 2:
    # exact)
    old = {**saved["outer"], "version": 1}
    old["pending"] = {**old["pending"], "work": {k: 2 * v for k, v in old["pending"]["work"].items()}}
    w4 = torch.nn.Parameter(saved["w"].clone())
    resumed = OuterOptimizer([w4], inner_steps=1, seed=SEED, overlap=True, replicas=N)
    resumed.load_state_dict(old)
    _run(w4, range(N), outer=resumed, first=3).close()
    assert torch.equal(w4.detach(), w.detach()) and torch.equal(resumed.phi["0"], through.phi["0"])


def test_a_bad_overlap_is_named():
    from noloco import OuterOptimizer

    w = torch.nn.Parameter(torch.zeros(N, 2))
    with pytest.raises(ConfigError, match="overlap="):
        OuterOptimizer([w], replicas=N, overlap="yes")


def _rank(rank, world, port, out):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    result = {}
    for method in ("noloco", "diloco"):
        w = torch.nn.Parameter(_start())
        outer = _run(w, [rank], method=method)
        outer.close()
        result[method] = {"phi": outer.phi["0"], "delta": outer.delta["0"], "w": w.detach().clone()}
    torch.save(result, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()
    os._exit(0)  # skip interpreter teardown: gloo can abort in C++ static destructors


@pytest.mark.slow  # 4 spawned processes: about 30 s on a loaded 2-core machine
def test_four_ranks_equal_the_one_process_run(tmp_path):
    import torch.multiprocessing as mp

    from noloco.training.exchange import free_port

    mp.start_processes(_rank, args=(N, free_port(), str(tmp_path)), nprocs=N, join=True, start_method="spawn")
    for method in ("noloco", "diloco"):
        w = torch.nn.Parameter(_start().expand(N, *SHAPE).clone())
        batched = _run(w, range(N), method=method, replicas=N)
        batched.close()
        for rank in range(N):
            got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)[method]
            for part, want in (("phi", batched.phi["0"]), ("delta", batched.delta["0"]), ("w", w.detach())):
                torch.testing.assert_close(got[part], want[rank], rtol=0, atol=1e-12)


@pytest.mark.slow  # 2 spawned processes
def test_the_benchmark_times_the_overlapped_step(tmp_path):
    import json

    from noloco.benchmarks.__main__ import main

    out = tmp_path / "outer.json"
    assert main(["outer", "--ranks", "2", "--width", "16", "--layers", "1", "--seconds", "0.1", "--steps", "3",
                 "--inner-matmuls", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())["results"]
    row = res["modes"]["pairs: toolkit, overlapped"]
    assert row["bytes_sent_per_rank"] == 4 * res["P"] and row["median_s"] > 0 and res["inner_stand_in_median_s"] > 0
