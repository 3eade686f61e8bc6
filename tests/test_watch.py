"""noloco.Watch: the observer on an outer step the toolkit did not write. A DiLoCo loop written here (its own
outer Nesterov SGD on the pseudo-gradient) measures what the toolkit's own DiLoCo step measures on the same run,
with a complete run folder that `noloco llm predict` and `noloco llm tune` read; accelerate's LocalSGD under 2
gloo processes, watched through its inner optimizer."""

from __future__ import annotations

import doctest
import json
import os

import pytest

from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")
pytestmark = needs_torch

import noloco  # noqa: E402
from noloco.cli import main  # noqa: E402

H, T, N, LR = 4, 8, 4, 1e-2
#: the DiLoCo setting of the loops watched here: outer Nesterov SGD, lr beta, momentum alpha
DILOCO = dict(inner_steps=H, method="diloco", alpha=0.9, beta=0.7, momentum="nesterov")


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: a second torch thread per operation only waits for a core on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _models(replicas=N):
    torch.manual_seed(0)
    first = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
    models = [first] + [torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
                        for _ in range(replicas - 1)]
    for m in models[1:]:
        m.load_state_dict(first.state_dict())  # replicas start equal
    return models


def _loss(model, replica: int, step: int):
    g = torch.Generator().manual_seed(1000 * replica + step)  # each replica its own data
    x = torch.randn(32, 6, generator=g, dtype=torch.float64)
    y = torch.sin(x.sum(1, keepdim=True)) + 0.3 * torch.randn(32, 1, generator=g, dtype=torch.float64)
    return ((model(x) - y) ** 2).mean()


def _inner_step(models, inner, step):
    inner.zero_grad()
    sum(_loss(m, i, step) for i, m in enumerate(models)).backward()
    inner.step()


class HandDiLoCo:
    """A DiLoCo outer step as a framework writes it: phi, an outer SGD (Nesterov) on the pseudo-gradient
    phi - mean(theta), the replicas set to phi. Written here, not the toolkit's."""

    def __init__(self, models, lr=0.7, momentum=0.9):
        self.models = models
        self.phi = [p.detach().clone().requires_grad_(True) for p in models[0].parameters()]
        self.opt = torch.optim.SGD(self.phi, lr=lr, momentum=momentum, nesterov=True)

    def sync(self):
        with torch.no_grad():  # as @torch.no_grad() would, without importing torch at collection
            for k, phi in enumerate(self.phi):
                mean = torch.stack([list(m.parameters())[k] for m in self.models]).mean(0)
                phi.grad = phi - mean
            self.opt.step()
            for m in self.models:
                for p, phi in zip(m.parameters(), self.phi):
                    p.copy_(phi)


def _run(folder, watched: bool, replicas: int = N):
    models = _models(replicas)
    inner = torch.optim.AdamW([p for m in models for p in m.parameters()], lr=LR)
    kw = DILOCO
    if watched:
        outer, framework = noloco.Watch(models, inner, **kw), HandDiLoCo(models)
    else:
        outer, framework = noloco.OuterOptimizer(models, inner, **kw), None
    observer = noloco.Observer(outer, folder, outer_steps=T, lr=LR, sample=None)
    for step in range(T * H):
        _inner_step(models, inner, step)
        if (step + 1) % H == 0:
            if framework is not None:
                framework.sync()
            with torch.no_grad():  # the losses noloco llm tune compares (DiLoCo: the replicas are their average)
                loss = float(sum(_loss(m, 999, 0) for m in models)) / replicas
            observer.log((step + 1) // H, val_loss_avg_model=loss, val_loss_replicas_mean=loss)
    observer.close()
    return models, observer


def measured_as_own(watched, own):
    """The watched run's folder against the toolkit's own step's on the same run: every tensor's progress variance
    at every outer step equal to 1e-9, and the folder complete (every outer step, finished, no flag) and read by
    `noloco llm predict` and `noloco llm tune`. The record and result.json."""
    run, ref = noloco.read_run(watched), noloco.read_run(own)
    assert [r["outer_step"] for r in run.inputs] == list(range(1, T + 1))
    for a, b in zip(run.inputs, ref.inputs, strict=True):
        for name, g in a["groups"].items():
            assert g["progress_var"] == pytest.approx(b["groups"][name]["progress_var"], rel=1e-9)
            assert g["progress_var"] > 0
    result = json.loads((watched / "result.json").read_text())
    assert result["outer_steps_done"] == T and result["finished"] and result["flags"] == []
    for argv in (["llm", "predict", str(watched)], ["llm", "tune", str(watched)]):
        assert main(argv) == 0, argv
    return run, result


def test_a_diloco_loop_of_ones_own_is_measured_as_the_toolkits(tmp_path):
    watched_models, _ = _run(tmp_path / "watched", watched=True)
    own_models, own = _run(tmp_path / "own", watched=False)
    for a, b in zip(watched_models[0].parameters(), own_models[0].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)  # the hand loop is DiLoCo: the same run
    run, result = measured_as_own(tmp_path / "watched", tmp_path / "own")
    assert [r["outer_step"] for r in run.metrics] == list(range(T + 1))
    assert result["adam_second_moment"]["sum_sqrt_v"] == pytest.approx(own.second_moment["sum_sqrt_v"], rel=1e-12)
    assert result["config"]["outer"]["momentum"] == "nesterov" and result["config"]["outer"]["alpha"] == 0.9


def test_the_two_calls_by_hand_and_their_misuse(tmp_path):
    """No inner optimizer: before_sync() and after_sync() around the framework's synchronisation."""
    w = torch.nn.Parameter(torch.zeros(2, 3, dtype=torch.float64))
    watch = noloco.Watch([w], replicas=2, inner_steps=1, method="local")
    observer = noloco.Observer(watch, tmp_path / "run", outer_steps=2, lr=1.0, inner_optimizer="sgd")
    with pytest.raises(noloco.ConfigError, match="after_sync"):
        watch.after_sync()
    for t in range(2):
        with torch.no_grad():
            w.add_(torch.tensor([[1.0], [3.0]], dtype=torch.float64))  # replica 1 moves 3x as far
        watch.before_sync()
        with pytest.raises(noloco.ConfigError, match="before_sync"):
            watch.before_sync()
        watch.after_sync()  # local: no synchronisation at all
    observer.close()
    run = noloco.read_run(tmp_path / "run")
    assert [r["weight_std"] for r in run.metrics] == pytest.approx([0.0, 1.0, 2.0])  # phi 0|0, 1|3, 2|6
    assert run.result["outer_steps_done"] == 2 and run.result["finished"]


def test_a_resolved_config_is_taken_whole():
    """As OuterOptimizer(config=...): it was a TypeError (the Watch had no config keyword)."""
    _, outer, _ = noloco.resolve("diloco", replicas=2)
    watch = noloco.Watch([torch.zeros(2, 3)], replicas=2, inner_steps=4, method="diloco", config=outer)
    assert watch.config == outer and watch.inner_steps == 4
    with pytest.raises(noloco.ConfigError, match="both given"):
        noloco.Watch([torch.zeros(2, 3)], replicas=2, inner_steps=4, method="diloco", config=outer, alpha=0.1)


def test_the_docstring_example_runs():
    import noloco.training.watch as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# ----------------------------------------------------------------- accelerate's LocalSGD

def _local_sgd_rank(rank, world, port, folder):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # what torchrun sets
    torch.set_num_threads(1)
    from accelerate import Accelerator
    from accelerate.local_sgd import LocalSGD

    accelerator = Accelerator(cpu=True)
    (model,) = _models(1)
    inner = torch.optim.AdamW(model.parameters(), lr=LR)
    model, inner = accelerator.prepare(model, inner)
    watch = noloco.Watch(model, inner, inner_steps=H, method="diloco", alpha=0.0, beta=1.0)
    observer = noloco.Observer(watch, folder, outer_steps=T, lr=LR, model="mlp")
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=H, enabled=True) as local_sgd:
        for step in range(T * H):
            inner.zero_grad()
            accelerator.backward(_loss(model, rank, step))
            inner.step()
            local_sgd.step()
    observer.close()
    torch.save({"phi": {k: v.clone() for k, v in watch.phi.items()}, "outer_done": watch.outer_done},
               f"{folder}-rank{rank}.pt")
    os._exit(0)


@pytest.mark.slow  # 2 processes with accelerate: 19 s on the 2 shared cores
def test_accelerate_local_sgd_is_watched(tmp_path):
    """2 gloo processes: LocalSGD averages the replicas every H steps (DiLoCo with alpha 0, beta 1); the Watch
    sees it through the inner optimizer alone, and the folder is complete."""
    pytest.importorskip("accelerate")
    import torch.multiprocessing as mp

    from noloco.training.exchange import free_port

    folder = tmp_path / "run"
    mp.start_processes(_local_sgd_rank, args=(2, free_port(), str(folder)), nprocs=2, join=True, start_method="spawn")
    run = noloco.read_run(folder)
    assert run.world_size == 2 and run.finished and run.result["outer_steps_done"] == T
    assert [r["outer_step"] for r in run.inputs] == list(range(1, T + 1))
    assert all(r["weight_std"] == 0.0 for r in run.metrics)  # averaged: the replicas equal after every sync
    assert all(g["progress_var"] > 0 for r in run.inputs for g in r["groups"].values())  # but their progress not
    assert run.result["flags"] == [] and run.result["adam_second_moment"]["sum_sqrt_v"] > 0
    states = [torch.load(f"{folder}-rank{r}.pt", weights_only=True) for r in range(2)]
    assert states[0]["outer_done"] == states[1]["outer_done"] == T
    for k in states[0]["phi"]:
        assert torch.equal(states[0]["phi"][k], states[1]["phi"][k])
