"""The Hugging Face Trainer callback (noloco.training.hf) and docs/hf.md, on real
gloo ranks started as torchrun starts them, with a tiny randomly initialised GPT-2 config (nothing
downloaded): every rank stays a replica (its weights differ from the other's within an inner phase, the
outer step gives what the rule predicts, and no gradient all-reduce runs), while the Trainer's own DDP
without the callback's mechanism keeps the ranks identical; a resumed run is bit-identical; the page's
plain loop and Trainer example run. Skipped without the [hf] extra."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before huggingface_hub reads it: nothing is downloaded
from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")


@pytest.fixture(autouse=True, scope="module")
def _hf_extra():
    """Skipped without the [hf] extra; imported when a test runs, not when the tests are collected (seconds)."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # the Trainer needs it


from peers import as_torchrun, spawn_ranks  # noqa: E402 (tests/peers.py)

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [needs_torch, pytest.mark.torch]


def test_import_noloco_loads_neither_transformers_nor_torch_and_a_missing_extra_is_named():
    code = "import sys, noloco\nnoloco.__all__, dir(noloco)\nprint('transformers' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
    code = "import sys\nsys.modules['transformers'] = None  # as if not installed\nimport noloco\nnoloco.NoLoCoCallback"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode != 0 and "needs transformers, which is not installed: pip install -e '.[hf]'" in out.stderr
    import noloco
    from noloco.training.hf import NoLoCoCallback

    assert "NoLoCoCallback" in noloco.__all__ and noloco.NoLoCoCallback is NoLoCoCallback


# ----------------------------------------------------------------- ranks as torchrun starts them

def _counting():
    """A _Counting dataset; its class is made here, where torch is imported, not when the tests are collected."""

    class _Counting(torch.utils.data.Dataset):
        """Sequences counting up in steps of b from a, mod 256: learnable. The Trainer's distributed sampler
        gives each rank its own half."""

        def __init__(self, n: int = 64, length: int = 16):
            g = torch.Generator().manual_seed(0)
            a, b = torch.randint(0, 256, (n, 1), generator=g), torch.randint(1, 8, (n, 1), generator=g)
            self.x = (a + b * torch.arange(length)) % 256

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"input_ids": self.x[i], "labels": self.x[i]}

    return _Counting()


def _trainer(out, seed: int, **args):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_layer=2, n_embd=32, n_head=2, n_positions=16,
                                       bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                                       attn_pdrop=0.0))
    args = dict(dict(per_device_train_batch_size=4, learning_rate=1e-2, report_to=[], use_cpu=True,
                     logging_strategy="no", disable_tqdm=True), **args)
    args = TrainingArguments(output_dir=str(out), **args)
    return Trainer(model=model, args=args, train_dataset=_counting())


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()]).clone()


def _replica_rank(rank, world, port, out):
    """9 optimizer steps, H = 3, n = N = 2, beta 1, alpha = gamma = 0: each outer step ends both ranks on the mean of
    their inner weights. Then the same with DDP's gradient sync switched back on after the callback (the
    failure mode). The model is built from a different seed per rank: DDP starts both from rank 0's."""
    as_torchrun(rank, world, port)
    from torch.profiler import ProfilerActivity, profile
    from transformers import TrainerCallback

    from noloco.training.hf import NoLoCoCallback

    class Record(TrainerCallback):  # added after NoLoCoCallback, so its on_step_end sees the outer step done
        def __init__(self):
            self.start, self.theta, self.w = None, [], []

        def on_train_begin(self, args, state, control, model=None, **kw):
            self.start = _flat(model)

        def on_optimizer_step(self, args, state, control, model=None, **kw):
            self.theta.append(_flat(model))  # the inner weights, before any outer step

        def on_step_end(self, args, state, control, model=None, **kw):
            self.w.append(_flat(model))

    class SyncAgain(TrainerCallback):
        def on_train_begin(self, *a, **kw):
            trainer.model_wrapped.require_backward_grad_sync = True

    result = {}
    for mode in ("noloco", "without"):
        # two micro-batches per optimizer step: the Trainer's accumulation enters and leaves DDP's no_sync
        trainer = _trainer(Path(out) / mode, seed=rank, max_steps=9, save_strategy="no",
                           per_device_train_batch_size=2, gradient_accumulation_steps=2)
        built = _flat(trainer.model)
        callback = NoLoCoCallback(trainer, inner_steps=3, group_size=2, alpha=0.0, beta=1.0, gamma=0.0)
        trainer.add_callback(callback)
        if mode == "without":
            trainer.add_callback(SyncAgain())
        record = Record()
        trainer.add_callback(record)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.train()
        calls = [e.name for e in prof.events()]
        result[mode] = {"built": built, "start": record.start, "theta": torch.stack(record.theta),
                        "w": torch.stack(record.w), "all_reduce": calls.count("gloo:all_reduce"),
                        "send": calls.count("gloo:send"), "outer_done": callback.outer.outer_done,
                        "local": callback.local}
    torch.save(result, f"{out}/rank{rank}.pt")
    os._exit(0)  # skip interpreter teardown: gloo can abort in C++ static destructors (docs/reliability.md)


def test_each_rank_stays_a_replica_under_the_trainer(tmp_path):
    spawn_ranks(_replica_rank, str(tmp_path))
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2))
    for mode in ("noloco", "without"):
        assert (r0[mode]["built"] - r1[mode]["built"]).abs().max() > 0.01  # built apart,
        assert torch.equal(r0[mode]["start"], r1[mode]["start"])  # started equal (DDP's broadcast)
        assert r0[mode]["outer_done"] == 3 and r0[mode]["local"] is True
    a, b = r0["noloco"], r1["noloco"]
    theta_gap = (a["theta"] - b["theta"]).abs().amax(1)
    w_gap = (a["w"] - b["w"]).abs().amax(1)
    assert (theta_gap > 1e-3).all(), theta_gap  # every inner step on the rank's own gradient
    for step in range(9):
        if (step + 1) % 3:
            assert torch.equal(a["w"][step], a["theta"][step]) and w_gap[step] > 1e-3  # no outer step: apart
        else:  # beta 1, alpha = gamma = 0, pair = everyone: phi + mean(theta - phi) = mean(theta)
            assert w_gap[step] == 0, w_gap
            mean = (a["theta"][step] + b["theta"][step]) / 2
            torch.testing.assert_close(a["w"][step], mean, rtol=0, atol=1e-6)
    assert a["all_reduce"] == b["all_reduce"] == 0 and a["send"] == b["send"] == 3  # one pair message per outer step
    # the failure mode, measured: the Trainer's DDP averages the gradients and the ranks never differ
    a, b = r0["without"], r1["without"]
    assert torch.equal(a["theta"], b["theta"]) and torch.equal(a["w"], b["w"])
    assert a["all_reduce"] >= 9 and b["all_reduce"] >= 9  # at least one per step


def _resume_rank(rank, world, port, out):
    """A bad setting is refused when training begins. The paper preset, H = 3: 8 steps with checkpoints at 4
    (mid-phase) and 8; then a new Trainer resumed from checkpoint-4 into another folder, first without
    telling the callback where (refused), then with it."""
    as_torchrun(rank, world, port)
    from noloco.infra.errors import ConfigError, DataError
    from noloco.training.hf import NoLoCoCallback

    out = Path(out)
    result = {}
    trainer = _trainer(out / "bad", seed=0, max_steps=1, save_strategy="no")
    try:  # named at construction, before any step (a group size that does not divide N: when training begins)
        trainer.add_callback(NoLoCoCallback(trainer, inner_steps=3, alpha=1.0))
        trainer.train()
        result["bad"] = ""
    except ConfigError as err:
        result["bad"] = str(err)
    trainer = _trainer(out / "a", seed=0, max_steps=8, save_steps=4)
    callback = NoLoCoCallback(trainer, inner_steps=3)
    trainer.add_callback(callback)
    trainer.train()
    result["once"] = {"w": _flat(trainer.model), "phi": dict(callback.outer.phi), "delta": dict(callback.outer.delta)}
    checkpoint = out / "a" / "checkpoint-4"
    result["saved"] = torch.load(checkpoint / f"noloco-rank{rank}.pt", weights_only=True)["model"]
    trainer = _trainer(out / "c", seed=1, max_steps=8, save_steps=4)
    trainer.add_callback(NoLoCoCallback(trainer, inner_steps=3))
    try:
        trainer.train(resume_from_checkpoint=str(checkpoint))
        result["refused"] = ""
    except DataError as err:
        result["refused"] = str(err)
    trainer = _trainer(out / "b", seed=1, max_steps=8, save_steps=4)
    callback = NoLoCoCallback(trainer, inner_steps=3, resume_from=checkpoint)
    trainer.add_callback(callback)
    trainer.train(resume_from_checkpoint=str(checkpoint))
    result["resumed"] = {"w": _flat(trainer.model), "phi": dict(callback.outer.phi),
                         "delta": dict(callback.outer.delta), "outer_done": callback.outer.outer_done}
    torch.save(result, f"{out}/rank{rank}.pt")
    os._exit(0)


def test_a_resumed_trainer_run_is_bit_identical(tmp_path):
    spawn_ranks(_resume_rank, str(tmp_path))
    got = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    # mid-phase the replicas differ: rank 0's model (all the Trainer saves) would be wrong for rank 1
    gaps = [(got[0]["saved"][k] - got[1]["saved"][k]).abs().max().item() for k in got[0]["saved"]]
    assert max(gaps) > 1e-3
    for r in range(2):
        once, resumed = got[r]["once"], got[r]["resumed"]
        assert resumed["outer_done"] == 2
        assert torch.equal(once["w"], resumed["w"])
        for k in once["phi"]:
            assert torch.equal(once["phi"][k], resumed["phi"][k]) and torch.equal(once["delta"][k], resumed["delta"][k])
        assert re.search(r"c/checkpoint-4/noloco-rank\d\.pt is missing: the run resumes at step 4", got[r]["refused"])
        assert got[r]["bad"].startswith("alpha=1.0"), got[r]["bad"]
    assert (got[0]["once"]["w"] - got[1]["once"]["w"]).abs().max() > 1e-4  # pairs, not one average


def _observe_rank(rank, world, port, out):
    """9 optimizer steps, H = 3, the paper preset, observe=FOLDER: one callback, nothing set by hand."""
    as_torchrun(rank, world, port)
    from noloco.training.hf import NoLoCoCallback

    trainer = _trainer(Path(out) / "t", seed=0, max_steps=9, save_strategy="no", lr_scheduler_type="constant",
                       logging_strategy="steps", logging_steps=3)
    callback = NoLoCoCallback(trainer, inner_steps=3, observe=Path(out) / "run", observer_options={"sample": 64})
    trainer.add_callback(callback)
    trainer.train()
    torch.save({"outer_done": callback.outer.outer_done, "closed": callback.observer._handle is None},
               f"{out}/rank{rank}.pt")
    os._exit(0)


@pytest.mark.slow  # 2 ranks with transformers: 26 s on the 2 shared cores
def test_the_callback_observes_the_run(tmp_path):
    import noloco
    from noloco.cli import main

    spawn_ranks(_observe_rank, str(tmp_path))
    assert all(torch.load(tmp_path / f"rank{r}.pt", weights_only=True) == {"outer_done": 3, "closed": True}
               for r in range(2))
    run = noloco.read_run(tmp_path / "run")
    assert run.world_size == 2 and run.finished and run.result["outer_steps_done"] == 3
    assert [r["outer_step"] for r in run.inputs] == [1, 2, 3]
    assert all(g["progress_var"] > 0 for r in run.inputs for g in r["groups"].values())  # each rank its own data
    assert run.result["adam_second_moment"]["sum_sqrt_v"] > 0  # the inner optimizer, wired for --gap
    assert any("train_loss" in r for r in run.metrics)
    config = run.result["config"]
    assert (config["lr"], config["schedule"], config["inner_optimizer"], config["outer_steps"]) == \
        (1e-2, "constant", "adamw", 3)
    assert main(["llm", "predict", str(tmp_path / "run")]) == 0


def test_the_callback_refuses_what_it_cannot_do(tmp_path):
    from noloco import ConfigError
    from noloco.training.hf import NoLoCoCallback

    trainer = _trainer(tmp_path, seed=0, max_steps=1, save_strategy="no")  # one process, no torchrun
    with pytest.raises(ConfigError, match="replicas= is not a setting"):
        NoLoCoCallback(trainer, replicas=2)
    with pytest.raises(ConfigError, match="inner_step= is not a setting of NoLoCoCallback; allowed: inner_steps,"):
        NoLoCoCallback(trainer, inner_step=3)
    with pytest.raises(ConfigError, match="not a transformers.Trainer"):
        NoLoCoCallback(object(), inner_steps=3)
    for bad, match in (({"inner_steps": 0}, "inner_steps=0"), ({"alpha": 1.5}, "alpha=1.5"),
                       ({"timeout": 1e308}, "timeout"), ({"group_size": 0}, "group_size=0")):
        with pytest.raises(ConfigError, match=match):  # at construction, not when training begins
            NoLoCoCallback(trainer, **bad)
    with pytest.raises(ConfigError, match="lr_scheduler_type='linear' is not a schedule the advice models"):
        NoLoCoCallback(trainer, inner_steps=3, observe=tmp_path / "run")  # the Trainer's default schedule
    with pytest.raises(ConfigError, match="observer_options= without observe=FOLDER"):
        NoLoCoCallback(trainer, inner_steps=3, observer_options={"sample": 64})
    trainer.add_callback(NoLoCoCallback(trainer, inner_steps=3))
    with pytest.raises(ConfigError, match="start the script with torchrun"):
        trainer.train()


# ----------------------------------------------------------------- docs/hf.md

def _hf_blocks():
    text = (ROOT / "docs" / "hf.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _doc_rank(rank, world, port, blocks, ports, out):
    import torch.distributed as dist

    os.chdir(out)
    got = {}
    for i, code in enumerate(blocks):
        if dist.is_initialized():  # each block is its own torchrun script: its own group, on its own port
            dist.destroy_process_group()
        as_torchrun(rank, world, ports[i])
        namespace = {"__name__": "__main__"}
        exec(compile(code, f"docs/hf.md (block {i + 1})", "exec"), namespace)
        outer = namespace["outer"] if "outer" in namespace else namespace["callback"].outer
        got[i] = {"losses": namespace.get("losses"), "outer_done": outer.outer_done}
    torch.save(got, f"{out}/doc{rank}.pt")
    os._exit(0)


def test_the_hugging_face_section_runs(tmp_path):
    """The page's Trainer example and its plain loop over a GPT-2 config, as torchrun starts them (2 ranks)."""
    blocks = _hf_blocks()
    assert len(blocks) == 2
    from noloco.training.exchange import free_port

    spawn_ranks(_doc_rank, blocks, [free_port(), free_port()], str(tmp_path))
    for rank in range(2):
        got = torch.load(tmp_path / f"doc{rank}.pt", weights_only=True)
        assert got[0]["outer_done"] == 4
        losses = got[1]["losses"]
        assert got[1]["outer_done"] == 6 and sum(losses[-10:]) < 0.8 * sum(losses[:10])
        assert (tmp_path / f"gpt2-rank{rank}.pt").exists()
        assert (tmp_path / "hf-run" / "checkpoint-20" / f"noloco-rank{rank}.pt").exists()
