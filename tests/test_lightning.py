"""The Lightning callback (noloco.training.lightning) on 2 gloo ranks of Lightning's DDP strategy, started as
torchrun starts them: every rank stays a replica (its weights differ from the other's within an inner phase, and
each outer step ends both on the mean of their inner weights), gradient accumulation counts one step per optimizer
step, and the observer's run folder is complete and read by `noloco llm predict`. Importing pytorch_lightning
alone takes 9 s of CPU here (user time of `python3 -c 'import pytorch_lightning'`, load 4.7 on the 2 shared
cores), so the two tests that run it are marked slow (123 s together at load 9); skipped without the [lightning] extra."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")
if importlib.util.find_spec("pytorch_lightning") is None:  # not imported here: collecting this file stays cheap
    pytest.skip("pytorch_lightning is not installed (the [lightning] extra)", allow_module_level=True)

from peers import as_torchrun, spawn_ranks  # noqa: E402 (tests/peers.py)

pytestmark = [needs_torch, pytest.mark.torch]
ROOT = Path(__file__).resolve().parents[1]
H, STEPS, LR = 3, 9, 1e-2


def _flat(module):
    return torch.cat([p.detach().flatten() for p in module.parameters()]).clone()


def _module(seed: int):
    import pytorch_lightning as pl

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(seed)
            self.losses = []  # every batch's, as training_step computed it
            self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = ((self.net(x) - y) ** 2).mean()
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=LR)

    return Regression()


def _data():
    """2 ranks x STEPS optimizer steps x 2 accumulated batches of 4; Lightning's sampler gives each rank its half."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2 * STEPS * 2 * 4, 6, generator=g)
    y = torch.sin(x.sum(1, keepdim=True)) + 0.3 * torch.randn(len(x), 1, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)


def _rank(rank, world, port, out):
    """STEPS optimizer steps of two accumulated batches, H = 3, n = N = 2, beta 1, alpha = gamma = 0: each outer step
    ends both ranks on the mean of their inner weights. The modules are built from different seeds per rank."""
    as_torchrun(rank, world, port)
    import pytorch_lightning as pl
    from pytorch_lightning.strategies import DDPStrategy

    from noloco.training.lightning import NoLoCoLightningCallback

    class Record(pl.Callback):  # after NoLoCoLightningCallback: its hooks see the outer step done
        def __init__(self):
            self.start, self.theta, self.w = None, [], []

        def on_train_start(self, trainer, module):
            self.start = _flat(module)
            callback.outer.add_progress_hook(lambda phi, progress, step: self.theta.append(
                torch.cat([(phi[k] + progress[k]).flatten() for k in phi])))  # the inner weights at the outer step

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if batch_idx % 2 == 1:  # the second batch of each optimizer step
                self.w.append(_flat(module))

    callback = NoLoCoLightningCallback(inner_steps=H, group_size=2, alpha=0.0, beta=1.0, gamma=0.0,
                                       observe=f"{out}/run")
    record = Record()
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(process_group_backend="gloo"),
                         max_steps=STEPS, accumulate_grad_batches=2, callbacks=[callback, record], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=out)
    module = _module(seed=rank)
    built = _flat(module)
    trainer.fit(module, _data())
    torch.save({"built": built, "start": record.start, "theta": torch.stack(record.theta),
                "w": torch.stack(record.w), "losses": module.losses, "outer_done": callback.outer.outer_done,
                "closed": callback.observer._handle is None}, f"{out}/rank{rank}.pt")
    os._exit(0)  # skip interpreter teardown: gloo can abort in C++ static destructors (docs/reliability.md)


@pytest.mark.slow
def test_each_rank_stays_a_replica_and_the_run_is_observed(tmp_path):
    import noloco
    from noloco.cli import main

    spawn_ranks(_rank, str(tmp_path), deadline=240.0)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2))
    assert not torch.equal(r0["built"], r1["built"])  # built from different seeds
    assert torch.equal(r0["start"], r1["start"])  # DDP's broadcast: the replicas start equal
    assert r0["outer_done"] == r1["outer_done"] == STEPS // H and r0["closed"] and r1["closed"]
    assert len(r0["w"]) == len(r1["w"]) == STEPS  # one optimizer step per two accumulated batches
    for step in range(1, STEPS + 1):
        gap = (r0["w"][step - 1] - r1["w"][step - 1]).abs().max().item()
        if step % H:
            assert gap > 1e-4, step  # within a phase each rank trains on its own gradients
        else:  # the outer step: both on the mean of their inner weights (float32 rounding)
            mean = (r0["theta"][step // H - 1] + r1["theta"][step // H - 1]) / 2
            assert gap == 0.0, step
            torch.testing.assert_close(r0["w"][step - 1], mean, rtol=0, atol=1e-6)
    run = noloco.read_run(tmp_path / "run")
    assert run.world_size == 2 and run.finished and run.result["outer_steps_done"] == STEPS // H
    assert [r["outer_step"] for r in run.inputs] == [1, 2, 3]
    assert all(g["progress_var"] > 0 for r in run.inputs for g in r["groups"].values())
    assert run.result["adam_second_moment"]["sum_sqrt_v"] > 0  # the inner optimizer, wired for --gap
    phases = [r0["losses"][i:i + 2 * H] for i in range(0, 2 * STEPS, 2 * H)]  # rank 0's, which it writes
    assert [r["train_loss"] for r in run.metrics if "train_loss" in r] == pytest.approx(
        [sum(p) / len(p) for p in phases], rel=1e-6)  # each phase's mean, not scaled by the accumulation
    config = run.result["config"]
    assert (config["lr"], config["schedule"], config["inner_optimizer"], config["outer_steps"]) == \
        (LR, "constant", "adamw", STEPS // H)
    assert main(["llm", "predict", str(tmp_path / "run")]) == 0


@pytest.mark.slow
def test_the_callback_refuses_what_it_cannot_do(tmp_path):
    import pytorch_lightning as pl

    from noloco import ConfigError
    from noloco.training.lightning import NoLoCoLightningCallback

    with pytest.raises(ConfigError, match="replicas= is not a setting of NoLoCoLightningCallback"):
        NoLoCoLightningCallback(replicas=2)
    with pytest.raises(ConfigError, match="inner_step= is not a setting"):
        NoLoCoLightningCallback(inner_step=3)
    for bad, match in (({"inner_steps": 0}, "inner_steps=0"), ({"alpha": 1.5}, "alpha=1.5")):
        with pytest.raises(ConfigError, match=match):
            NoLoCoLightningCallback(**bad)
    with pytest.raises(ConfigError, match="observer_options= without observe=FOLDER"):
        NoLoCoLightningCallback(inner_steps=3, observer_options={"sample": 64})
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[NoLoCoLightningCallback(inner_steps=2)])
    with pytest.raises(ConfigError, match="runs in one process: give the Trainer strategy='ddp'"):
        trainer.fit(_module(0), _data())


def test_a_missing_extra_is_named():
    code = "import sys\nsys.modules['pytorch_lightning'] = None  # as if not installed\nimport noloco.training.lightning"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode != 0
    assert "needs pytorch-lightning, which is not installed: pip install -e '.[lightning]'" in out.stderr
