"""llm_check: batched == looped, torchrun == batched, resume == uninterrupted, the
weight-spread metric, DiLoCo/DDP keep zero spread, methods mean what noloco.theory.methods says,
bad input exits 2, strict JSON, one device rule under torchrun."""

import argparse
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")

from noloco.llm_check.config import TrainConfig, build  # noqa: E402
from noloco.infra.errors import ConfigError  # noqa: E402
from noloco.infra.files import SCHEMA_VERSION, loads  # noqa: E402
from noloco.theory.methods import PRESETS as THEORY_PRESETS  # noqa: E402
from noloco.theory.partitions import group_mean, partition  # noqa: E402
from noloco.theory.schedules import learning_rate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(outer_steps=3, eval_every=1, val_windows=8)


pytestmark = [needs_torch, pytest.mark.usefixtures("one_torch_thread")]


def train(out, method="noloco", resume=False, stop_after=None, **kw):
    from noloco.llm_check.trainer import Trainer

    cfg = build("cpu-tiny", method, **{**TINY, **kw})
    trainer = Trainer(cfg, out, progress=False)
    trainer.run(resume=resume, stop_after=stop_after)
    return trainer


def rows(out):
    return [loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]  # strict JSON


def test_batched_equals_looped(tmp_path):
    a = train(tmp_path / "b", replica_mode="batched", dtype="float64", outer_steps=2)
    b = train(tmp_path / "l", replica_mode="loop", dtype="float64", outer_steps=2)
    for k in a.phi:
        torch.testing.assert_close(a.phi[k], b.phi[k], rtol=0, atol=1e-10)
    assert rows(tmp_path / "b")[-1]["weight_std"] > 0  # replicas did diverge: the check has teeth


def test_batched_equals_looped_float32_gradients(tmp_path):
    from noloco.llm_check.trainer import Trainer

    a = Trainer(build("cpu-tiny", "noloco", replica_mode="batched"), tmp_path / "a", progress=False)
    b = Trainer(build("cpu-tiny", "noloco", replica_mode="loop"), tmp_path / "b", progress=False)
    windows = a._windows(0)
    a._backward(windows, 0)
    b._backward(windows, 0)
    for k in a.params:
        torch.testing.assert_close(a.params[k].grad, b.params[k].grad, rtol=1e-4, atol=1e-6)


def test_group_mean_matches_numpy_reference():
    from noloco.training.exchange import LocalExchange

    x = torch.randn(8, 3, 2, dtype=torch.float64)
    (mine,), _ = LocalExchange(8).group_means([x], [x], seed=3, step=5, group_size=2)
    ref = group_mean(x.numpy(), partition(3, 5, 8, 2).ravel(), 2)
    np.testing.assert_allclose(mine.numpy(), ref, rtol=0, atol=1e-15)


def test_resume_reproduces_uninterrupted_run(tmp_path):
    full = train(tmp_path / "full", outer_steps=4, eval_every=2)
    train(tmp_path / "cut", outer_steps=4, eval_every=2, stop_after=2)
    assert [r["outer_step"] for r in rows(tmp_path / "cut")] == [2]
    resumed = train(tmp_path / "cut", outer_steps=4, eval_every=2, resume=True)
    for k in full.phi:
        assert torch.equal(full.phi[k], resumed.phi[k]), k
        assert torch.equal(full.delta[k], resumed.delta[k]), k
    strip = lambda rs: [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rs]
    assert strip(rows(tmp_path / "full")) == strip(rows(tmp_path / "cut"))
    ckpt = torch.load(tmp_path / "cut" / "ckpt.pt", weights_only=True)  # plain data: nothing to unpickle
    assert {"phi", "delta", "opt", "outer_step", "torch_rng"} <= set(ckpt)
    assert ckpt["config"]["outer"]["group_size"] == 2 and ckpt["schema_version"] == SCHEMA_VERSION


def test_resume_reads_a_flat_checkpoint_and_refuses_other_settings(tmp_path):
    """A checkpoint written before the outer step was nested (replicas, alpha, ... at the top; diloco
    and ddp stored an unused group_size) resumes; one with other settings is refused by name."""
    train(tmp_path, method="diloco", outer_steps=4, eval_every=2, stop_after=2)
    path = tmp_path / "ckpt.pt"
    state = torch.load(path, weights_only=True)
    config = {k: v for k, v in state["config"].items() if k != "outer"}
    state["config"] = {**config, **state["config"]["outer"], "group_size": 2}  # as the old code stored it
    torch.save(state, path)
    train(tmp_path, method="diloco", outer_steps=4, eval_every=2, resume=True)
    assert [r["outer_step"] for r in rows(tmp_path)] == [2, 4]
    state["config"]["alpha"] = 0.5
    torch.save(state, path)
    with pytest.raises(ConfigError, match=r"outer\.alpha=0\.5 \(now 0\.3\)"):
        train(tmp_path, method="diloco", outer_steps=4, eval_every=2, resume=True)


def test_metrics_keys_and_result(tmp_path):
    train(tmp_path, outer_steps=2)
    keys = {"step", "tokens", "train_loss", "train_loss_per_replica", "val_loss_avg_model",
            "val_loss_per_replica", "weight_std", "theta_std", "tokens_per_s", "lr"}
    for r in rows(tmp_path):
        assert keys <= set(r)
        assert len(r["train_loss_per_replica"]) == len(r["val_loss_per_replica"]) == 4
    result = loads((tmp_path / "result.json").read_text())
    assert len(result["corpus_sha256"]) == 64 and result["python"] == sys.version.split()[0]
    assert result["finished"] and result["schema_version"] == SCHEMA_VERSION
    cfg = build("cpu-tiny", "noloco", **{**TINY, "outer_steps": 2})
    assert TrainConfig.from_dict(result["config"]) == cfg and result["config"]["outer"]["replicas"] == 4
    for r in rows(tmp_path):  # the logged lr is noloco.theory.schedules'

        assert r["lr"] == learning_rate(r["step"] - 1, "cosine", cfg.lr, cfg.total_inner_steps, warmup=cfg.warmup,
                                        floor=cfg.min_lr_frac)


@pytest.mark.parametrize("method", ["noloco", "diloco", "local", "ddp"])
def test_methods_mean_what_theory_methods_says(method):
    """The outer step of every method is the one check and simulate use (noloco.theory.methods.resolve)."""
    from noloco.theory.methods import resolve

    assert build("cpu-small", method).outer == resolve(None, method, replicas=8)[1]
    expected = {"noloco": dict(group_size=2, alpha=0.5, beta=0.7, gamma=0.7),
                "diloco": dict(group_size=8, alpha=0.3, beta=0.7, gamma=0.0),  # the diloco preset
                "local": dict(group_size=1, alpha=0.0, beta=1.0, gamma=0.0),
                "ddp": dict(group_size=8, alpha=0.0, beta=1.0, gamma=0.0)}[method]
    outer = build("cpu-small", method).outer
    assert {k: getattr(outer, k) for k in expected} == expected and outer.momentum == "heavy-ball"


def test_paper_preset_outer_is_the_theory_paper_preset():
    cfg = build("paper")
    assert cfg.outer == THEORY_PRESETS["paper"].outer and cfg.inner_steps == 50
    assert build("paper", replicas=4).outer.replicas == 4


@pytest.mark.parametrize("kw", [dict(method="diloco", group_size=2), dict(method="local", alpha=0.5),
                                dict(method="ddp", gamma=0.7), dict(lr=math.inf), dict(weight_decay=math.nan),
                                dict(clip=math.inf), dict(warmup=30), dict(device="gpu")])
def test_conflicting_or_bad_settings_are_refused(kw):
    with pytest.raises(ConfigError):
        build("cpu-tiny", **kw)


def test_rank_device_is_one_rule():
    """Under torchrun each rank uses cuda:LOCAL_RANK, the GPU NCCL binds; an explicit cuda:K is refused."""
    from noloco.training.exchange import rank_device

    assert rank_device("cpu", 3) == "cpu"
    assert [rank_device("cuda", r) for r in range(4)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    with pytest.raises(ConfigError, match="LOCAL_RANK"):
        rank_device("cuda:1", 0)


def _subparser(name):
    from noloco.cli import build_parser

    def choices(parser):
        return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices

    return choices(choices(build_parser())["llm"])[name]


@pytest.mark.parametrize("name", ["train", "validate", "bench", "predict"])
def test_every_llm_flag_has_help(name):
    actions = [a for a in _subparser(name)._actions if a.option_strings]
    assert actions and all(a.help for a in actions), [a.option_strings for a in actions if not a.help]


def test_noloco_llm_bench_takes_the_flags_of_the_benchmark_suite():
    from noloco.benchmarks.__main__ import build_parser

    suite = build_parser()._subparsers._group_actions[0].choices["llm-step"]
    flags = lambda p: sorted(s for a in p._actions for s in a.option_strings)
    assert flags(_subparser("bench")) == flags(suite)


def test_weight_std_is_its_definition():
    # replicas (1, 3) and (3, 5): deviations +-1 in 4 entries; the second tensor agrees (0)
    from noloco.llm_check.trainer import weight_std

    phi = {"a": torch.tensor([[1.0, 3.0], [3.0, 5.0]]), "b": torch.tensor([[7.0], [7.0]])}
    assert weight_std(phi) == pytest.approx(math.sqrt(4 / 6), rel=1e-15)


def test_logged_weight_std_matches_definition(tmp_path):
    tr = train(tmp_path, outer_steps=2)
    phi = {k: v.numpy().astype(np.float64) for k, v in tr.phi.items()}
    dev = sum(((p - p.mean(0)) ** 2).sum() for p in phi.values())
    count = sum(p.size for p in phi.values())
    assert rows(tmp_path)[-1]["weight_std"] == pytest.approx(math.sqrt(dev / count), rel=1e-9)


@pytest.mark.parametrize("method", ["diloco", "ddp"])
def test_synchronous_methods_keep_zero_spread(tmp_path, method):
    tr = train(tmp_path, method=method)
    assert all(r["weight_std"] == 0.0 for r in rows(tmp_path))
    for p in tr.phi.values():
        assert torch.equal(p, p[:1].expand_as(p))


def test_local_replicas_drift_apart(tmp_path):
    train(tmp_path, method="local")
    assert rows(tmp_path)[-1]["weight_std"] > 0


@pytest.mark.parametrize("argv", [
    ["--group-size", "3"], ["--method", "gossip"], ["--alpha", "1.5"], ["--width", "30", "--heads", "4"],
    ["--lr", "-1"], ["--lr", "inf"], ["--replicas", "0"], ["--method", "noloco,noloco"],
    ["--method", "diloco", "--group-size", "2"], ["--method", "local", "--alpha", "0.5"], ["--method", "noloco,"],
    ["--stop-after", "0"], ["--threads", "0"],
])
def test_bad_input_exits_2(tmp_path, capsys, argv):
    from noloco.cli import main

    assert main(["llm", "train", "--size", "cpu-tiny", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err


def test_resume_without_checkpoint_exits_2(tmp_path, capsys):
    from noloco.cli import main

    assert main(["llm", "train", "--size", "cpu-tiny", "--out", str(tmp_path), "--resume"]) == 2


def _silent_peer_run(rank, port, report):
    """Rank 0 starts a group exchange; rank 1 is alive but never sends (a hung peer)."""
    from noloco.training.exchange import DistExchange

    import datetime

    import torch.distributed as dist
    from peers import report_peer_error, stay_silent

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    if rank == 0:
        ex = DistExchange(rank=0, world_size=2, local_rank=0, timeout=2.0, device=torch.device("cpu"))
        report_peer_error(lambda: ex.group_means([torch.zeros(1, 3)], [torch.zeros(1, 3)], seed=0, step=2,
                                                 group_size=2), report)
    else:
        stay_silent(report)
    os._exit(0)  # skip the process-group teardown, which would wait for the silent peer


def test_dead_peer_is_a_clear_error(tmp_path):
    """A real 2-process gloo group on localhost: the exchange times out with a one-line PeerError."""
    from noloco.training.exchange import free_port

    import torch.multiprocessing as mp

    port = free_port()
    report = tmp_path / "report.txt"
    mp.start_processes(_silent_peer_run, args=(port, str(report)), nprocs=2, join=True, start_method="spawn")
    elapsed, message = report.read_text().split("\n", 1)
    assert float(elapsed) < 6.0
    assert message.startswith("rank 0: group exchange at outer step 2 with rank(s) [1] failed or timed out after 2 s")


def test_torchrun_gloo_matches_batched(tmp_path):
    from noloco.training.exchange import free_port

    args = ["--size", "cpu-tiny", "--method", "noloco", "--outer-steps", "4", "--eval-every", "2",
            "--val-windows", "8", "--timeout", "60"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    port = free_port()  # for the rendezvous
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
           "--master-port", str(port), "-m", "noloco", "llm", "train", *args, "--out", str(tmp_path / "dist")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = train(tmp_path / "one", outer_steps=4, eval_every=2)
    for rank in range(4):
        state = torch.load(tmp_path / "dist" / f"ckpt-rank{rank}.pt", weights_only=True)
        assert state["outer_step"] == 4
        for k, p in single.phi.items():
            torch.testing.assert_close(state["phi"][k][0], p[rank], rtol=0, atol=1e-5)
    assert not (tmp_path / "dist" / "run.lock").exists()  # rank 0 held it and let it go
    # rank 0 prints the closing table, once, counting the whole run
    assert proc.stdout.count("method    steps") == 1 and "4 torchrun ranks" in proc.stdout, proc.stdout
    assert next(line for line in proc.stdout.splitlines() if line.startswith("noloco ")).split()[1] == "20"
    d, s = rows(tmp_path / "dist")[-1], rows(tmp_path / "one")[-1]
    assert d["weight_std"] == pytest.approx(s["weight_std"], rel=1e-3)
    assert d["train_loss_per_replica"] == pytest.approx(s["train_loss_per_replica"], rel=1e-4)
    # the theory's inputs under torchrun: the public observer's sample, gathered without a wait; a tensor the
    # sample takes whole is measured as the one-process run measures every coordinate
    dist_inputs = [loads(line) for line in (tmp_path / "dist" / "inputs.jsonl").read_text().splitlines()]
    one_inputs = [loads(line) for line in (tmp_path / "one" / "inputs.jsonl").read_text().splitlines()]
    assert [r["outer_step"] for r in dist_inputs] == [r["outer_step"] for r in one_inputs] == [1, 2, 3, 4]
    whole = [k for k, g in dist_inputs[-1]["groups"].items() if g["sampled"] == g["numel"]]
    assert whole and len(whole) < len(dist_inputs[-1]["groups"])  # some taken whole, some sampled
    for k in whole:
        assert dist_inputs[-1]["groups"][k]["spread"] == pytest.approx(one_inputs[-1]["groups"][k]["spread"], rel=1e-3)
    from noloco.cli import main

    assert main(["llm", "predict", str(tmp_path / "dist")]) == 0


@pytest.mark.slow
def test_validate_cpu_tiny(tmp_path):
    """The rows that are predictions (not the reference run k is fitted on, whose ratio is 1 by
    construction) agree within 3 standard errors of the difference: the measured spread's and the
    prediction's, which inherits the reference measurement's relative error through k."""
    from noloco.studies.validate import format_table, run_sweep
    from noloco.theory.stats import holds, z_score

    report = run_sweep("cpu-tiny", tmp_path, progress=False)
    ref, *predicted = report.rows
    assert ref.fitted and not any(r.fitted for r in predicted) and len(predicted) == 2
    for r in predicted:
        se = math.hypot(r.stderr, r.predicted * ref.stderr / ref.measured)
        assert holds(z_score(r.measured, se, r.predicted), 3.0), r
    assert predicted[1].predicted == predicted[1].measured == 0.0  # n = N: identical replicas
    assert predicted[0].predicted > 0 and predicted[0].changes == {"gamma": 0.35}
    assert loads((tmp_path / "validate.json").read_text())["schema_version"] == SCHEMA_VERSION
    assert "predicted" in format_table(report) and "zero-const" in format_table(report)
    assert all(r.predicted_zero_constant is not None for r in report.rows)  # every run logs its inputs
    assert predicted[1].predicted_zero_constant == 0.0 and predicted[1].ratio_zero_constant == 1.0
    assert all(r.seeds == 2 for r in report.rows) and (tmp_path / "run00-seed1" / "metrics.jsonl").exists()
    assert all(r.ratio_zero_constant_se > 0 for r in report.rows[:2])  # across seeds, not zero
    agreement = report.agreement
    assert agreement.rows == 3 and agreement.agree == sum(r.agrees for r in report.rows)


@pytest.mark.slow
def test_bench_runs(tmp_path):
    from noloco.benchmarks.llm_step import bench

    result = bench(replicas=4, size="cpu-tiny", steps=1)
    assert result["results"]["modes"]["batched"]["tokens_per_s"] > 0


def test_gpu_preset_at_tiny_size_on_cpu(tmp_path):
    # no GPU in CI: the gpu preset's code path (bf16, its schedule and outer settings) at a tiny size
    from noloco.llm_check.trainer import Trainer

    cfg = build("gpu", "noloco", device="cpu", replicas=4, layers=1, width=32, heads=2, ctx=16, batch=2,
                inner_steps=3, outer_steps=2, eval_every=1, val_windows=4, warmup=2)
    assert cfg.dtype == "bfloat16"
    Trainer(cfg, tmp_path, progress=False).run()
    last = rows(tmp_path)[-1]
    assert math.isfinite(last["val_loss_avg_model"]) and last["weight_std"] > 0


@pytest.mark.skipif("torch.cuda.is_available()", reason="checks the error when no GPU is present")
def test_gpu_preset_without_gpu_exits_2(tmp_path, capsys):
    from noloco.cli import main

    assert main(["llm", "train", "--size", "gpu", "--out", str(tmp_path)]) == 2
    assert "no GPU" in capsys.readouterr().err


# ---------------------------------------------------------------- runs are never lost (issue 10)

def _cli(*argv):
    from noloco.cli import main

    return main(["llm", "train", "--size", "cpu-tiny", "--method", "noloco", "--val-windows", "8", *map(str, argv)])


def test_stop_after_below_eval_every_leaves_a_checkpoint_and_resumes_identically(tmp_path):
    full = train(tmp_path / "full", outer_steps=4, eval_every=3)
    train(tmp_path / "cut", outer_steps=4, eval_every=3, stop_after=1)
    state = torch.load(tmp_path / "cut" / "ckpt.pt", weights_only=True)
    assert state["outer_step"] == 1 and rows(tmp_path / "cut") == []
    result = loads((tmp_path / "cut" / "result.json").read_text())
    assert result["finished"] is False and result["outer_steps_done"] == 1 and result["checkpoint_outer_step"] == 1
    resumed = train(tmp_path / "cut", outer_steps=4, eval_every=3, resume=True)
    for k in full.phi:
        assert torch.equal(full.phi[k], resumed.phi[k]), k
    strip = lambda rs: [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rs]
    assert strip(rows(tmp_path / "full")) == strip(rows(tmp_path / "cut"))  # the training loss average too
    assert loads((tmp_path / "cut" / "result.json").read_text())["finished"] is True


def test_checkpoints_every_ckpt_every_outer_steps(tmp_path, monkeypatch):
    from noloco.llm_check.lifecycle import Lifecycle

    saved = []
    original = Lifecycle.save

    def spy(self):
        saved.append(self.trainer.outer_done)
        original(self)

    monkeypatch.setattr(Lifecycle, "save", spy)
    train(tmp_path, outer_steps=5, eval_every=4, ckpt_every=2)
    assert saved == [2, 4, 5] and [r["outer_step"] for r in rows(tmp_path)] == [4, 5]
    assert build("cpu-tiny", eval_every=3).ckpt_every == 3  # the default follows --eval-every


def test_result_says_unfinished_from_the_start(tmp_path, monkeypatch):
    from noloco.llm_check.trainer import Trainer

    def interrupt(self, step):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "inner_step", interrupt)
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path)
    result = loads((tmp_path / "result.json").read_text())
    assert result["finished"] is False and result["outer_steps_done"] == 0 and result["final"] is None
    assert not (tmp_path / "run.lock").exists()  # released on the way out


def test_a_folder_holding_a_run_needs_resume_or_overwrite(tmp_path, capsys):
    assert _cli("--out", tmp_path, "--outer-steps", 2, "--warmup", 0) == 0
    before = (tmp_path / "ckpt.pt").read_bytes(), (tmp_path / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert _cli("--out", tmp_path, "--outer-steps", 2, "--warmup", 0) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds a run" in err and "--resume" in err and "--overwrite" in err
    assert "finished at outer step 2 of 2" in err
    assert ((tmp_path / "ckpt.pt").read_bytes(), (tmp_path / "metrics.jsonl").read_text()) == before
    assert _cli("--out", tmp_path, "--outer-steps", 2, "--warmup", 0, "--resume", "--overwrite") == 2
    assert _cli("--out", tmp_path, "--outer-steps", 2, "--warmup", 0, "--overwrite", "--seed", 1) == 0
    assert loads((tmp_path / "result.json").read_text())["config"]["seed"] == 1
    assert [r["outer_step"] for r in rows(tmp_path)] == [2]


def test_several_methods_are_checked_before_the_first_runs(tmp_path, capsys):
    (tmp_path / "noloco").mkdir()
    (tmp_path / "noloco" / "result.json").write_text("{}")
    from noloco.cli import main

    assert main(["llm", "train", "--size", "cpu-tiny", "--method", "ddp,noloco", "--out", str(tmp_path)]) == 2
    assert "noloco holds a run" in capsys.readouterr().err
    assert not (tmp_path / "ddp" / "metrics.jsonl").exists()  # ddp did not run first


@pytest.mark.parametrize("schedule,code", [("cosine", 2), ("constant", 0)])
def test_resume_refuses_a_change_of_the_schedule(tmp_path, capsys, schedule, code):
    common = ("--out", tmp_path, "--warmup", 0, "--schedule", schedule)
    assert _cli(*common, "--outer-steps", 3, "--stop-after", 1) == 0
    capsys.readouterr()
    assert _cli(*common, "--outer-steps", 5, "--resume") == code
    err = capsys.readouterr().err
    if code:
        assert "outer_steps=3 (now 5)" in err and "cosine learning-rate schedule" in err and err.count("\n") == 1
    else:
        assert loads((tmp_path / "result.json").read_text())["outer_steps_done"] == 5


# ---------------------------------------------------------------- divergence

def test_divergence_stops_and_keeps_the_last_finite_checkpoint(tmp_path, monkeypatch):
    from noloco.llm_check.trainer import Trainer

    original = Trainer.outer_update

    def poison(self, t, **kw):
        original(self, t, **kw)
        if t == 2:  # the third outer step: replica 1's qkv weights become NaN
            self.phi["h0.qkv.w"][1, 0, 0] = float("nan")

    monkeypatch.setattr(Trainer, "outer_update", poison)
    tr = Trainer(build("cpu-tiny", "noloco", **{**TINY, "outer_steps": 5, "eval_every": 2}), tmp_path, progress=False)
    result = tr.run()
    d = result["diverged"]
    assert (d["outer_step"], d["replica"], d["quantity"], d["tensor"]) == (3, 1, "weights", "h0.qkv.w")
    assert "outer step 3" in d["message"] and "outer step 2" in d["message"] and "ckpt.pt" in d["message"]
    on_disk = loads((tmp_path / "result.json").read_text())
    assert on_disk["finished"] is False and on_disk["diverged"]["replica"] == 1
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert state["outer_step"] == 2 and all(torch.isfinite(p).all() for p in state["phi"].values())
    assert [r["outer_step"] for r in rows(tmp_path)] == [2]


def test_a_huge_learning_rate_exits_1_with_strict_files(tmp_path, capsys):
    assert _cli("--out", tmp_path, "--lr", "1e6", "--outer-steps", 3, "--eval-every", 1, "--warmup", 0) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "diverged at outer step" in captured.err and "replica" in captured.err
    assert "DIVERGED" in captured.out
    for name in ("metrics.jsonl", "result.json"):
        text = (tmp_path / name).read_text()
        assert "NaN" not in text and "Infinity" not in text
    assert all(math.isfinite(r["train_loss"]) for r in rows(tmp_path))
    assert loads((tmp_path / "result.json").read_text())["finished"] is False


@pytest.mark.slow
def test_torchrun_ranks_stop_together_on_divergence(tmp_path):
    from noloco.training.exchange import free_port

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "-m", "noloco", "llm", "train", "--size", "cpu-tiny", "--replicas", "2",
           "--outer-steps", "4", "--eval-every", "2", "--val-windows", "4", "--lr", "1e6", "--timeout", "30",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0 and "exitcode  : 1" in proc.stderr and "timed out" not in proc.stderr
    assert loads((tmp_path / "result.json").read_text())["diverged"]["quantity"] == "training loss"


# ---------------------------------------------------------------- resources and data bounds

def test_memory_estimate_budget_and_sizes():
    from noloco.llm_check.resources import check_memory, memory_budget, memory_estimate

    small = memory_estimate(build("cpu-tiny")).total
    assert 1e6 < small < 2e8
    assert memory_estimate(build("cpu-tiny", batch=100000)).total > 1e11      # the 24 GB run of issue 10
    assert memory_estimate(build("cpu-tiny", ctx=100000)).total > 1.5e10
    budget, how = memory_budget()
    assert budget is None or "available" in how
    with pytest.raises(MemoryError, match=r"above the budget of 1 MiB \(--max-memory\).*--max-memory"):
        check_memory(build("cpu-tiny"), "1M")
    with pytest.raises(ConfigError):
        check_memory(build("cpu-tiny"), "lots")


def test_sizing_a_run_needs_no_torch_and_counts_the_model_s_parameters():
    """The config sizes runs before torch loads, from the shapes the model builds its tensors from."""
    code = ("import sys; from noloco.llm_check.config import build; from noloco.llm_check.resources import memory_estimate; cfg = build('cpu-tiny', stages=2); "
            "memory_estimate(cfg); print('torch' in sys.modules, cfg.model().n_params())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    from noloco.llm_check.model import init_params

    params = init_params(build("cpu-tiny", stages=2).model(), replicas=1, seed=0)
    assert out.stdout.split() == ["False", str(sum(p[0].numel() for p in params.values()))]


@pytest.mark.parametrize("kw,words", [
    (dict(replicas=6000, group_size=1), "IID shards"),
    (dict(replicas=1000, group_size=1, noniid=True), "non-IID"),
    (dict(ctx=700000, batch=1, val_windows=1, replicas=1, group_size=1), "validation text"),
])
def test_data_bounds_are_bad_input(tmp_path, kw, words):
    from noloco.llm_check.trainer import Trainer

    with pytest.raises(ConfigError, match=words):
        Trainer(build("cpu-tiny", "noloco", **kw), tmp_path, progress=False, max_memory="1T")


# ---------------------------------------------------------------- the measured theory inputs (inputs.jsonl)

def inputs(out):
    return [loads(line) for line in (Path(out) / "inputs.jsonl").read_text().splitlines()]  # strict JSON


def test_inputs_logged_at_every_outer_step(tmp_path):
    """One row per outer step, every tensor a group; the spread the meter sees before step t + 1 is
    the weight_std logged after step t (the same phi), to rounding."""
    tr = train(tmp_path, outer_steps=4, eval_every=1)
    got = inputs(tmp_path)
    assert [r["outer_step"] for r in got] == [1, 2, 3, 4]
    assert set(got[0]["groups"]) == set(tr.phi)
    assert sum(g["numel"] for g in got[0]["groups"].values()) == tr.model.n_params()
    assert got[0]["groups"]["wte"]["rho"] is None and got[1]["groups"]["wte"]["rho"] is not None
    for row in rows(tmp_path)[:-1]:
        groups = inputs(tmp_path)[row["outer_step"]]["groups"]  # the row of outer step + 1
        sq = sum(g["numel"] * g["spread"] for g in groups.values()) / sum(g["numel"] for g in groups.values())
        assert math.sqrt(sq) == pytest.approx(row["weight_std"], rel=1e-9)


def test_inputs_resume_like_the_metrics(tmp_path):
    """Resumed from a checkpoint between evaluations, inputs.jsonl equals the uninterrupted run's; from a
    checkpoint written before the meter (no state) the run goes on and its rows end at the checkpoint."""
    train(tmp_path / "full", outer_steps=4, eval_every=2)
    train(tmp_path / "cut", outer_steps=4, eval_every=2, stop_after=1)
    assert [r["outer_step"] for r in inputs(tmp_path / "cut")] == [1]
    train(tmp_path / "cut", outer_steps=4, eval_every=2, resume=True)
    assert inputs(tmp_path / "full") == inputs(tmp_path / "cut")
    old = tmp_path / "old"
    train(old, outer_steps=4, eval_every=2, stop_after=2)
    state = torch.load(old / "ckpt.pt", weights_only=True)  # the meter's state is plain data
    del state["meter"]
    torch.save(state, old / "ckpt.pt")
    train(old, outer_steps=4, eval_every=2, resume=True)
    assert [r["outer_step"] for r in inputs(old)] == [1, 2] and [r["outer_step"] for r in rows(old)] == [2, 4]


@pytest.mark.parametrize("method", ["diloco", "ddp"])
def test_inputs_of_synchronous_methods(tmp_path, method):
    train(tmp_path, method=method)
    if method == "ddp":  # no outer step: nothing to measure
        assert not (tmp_path / "inputs.jsonl").exists()
    else:
        assert all(g["spread"] == 0 and g["c"] == 0 for r in inputs(tmp_path) for g in r["groups"].values())


def test_noloco_llm_predict_on_a_run(tmp_path, capsys):
    from noloco.cli import main

    train(tmp_path, outer_steps=4, eval_every=2)
    assert main(["llm", "predict", str(tmp_path), "--json"]) == 0
    report = loads(capsys.readouterr().out)
    assert report["fitted_constants"] == 0 and report["inputs_logged"] and report["schema_version"] == SCHEMA_VERSION
    assert [r["outer_step"] for r in report["rows"]] == [2, 4] and all(r["predicted"] > 0 for r in report["rows"])
    assert main(["llm", "predict", str(tmp_path), "--noise-model", "lag1"]) == 0
    assert "fitted constants 0" in capsys.readouterr().out
    assert main(["llm", "predict", str(tmp_path / "nothing")]) == 3
    assert "result.json" in capsys.readouterr().err


def test_paper_preset_is_the_reference_inner_optimizer(tmp_path):
    from noloco.llm_check.trainer import Trainer

    cfg = build("paper", "noloco")
    assert (cfg.weight_decay, cfg.adam_beta2, cfg.clip, cfg.min_lr_frac, cfg.schedule) == (0.0, 0.999, 1.0, 0.1, "cosine")
    trainer = Trainer(cfg, tmp_path, progress=False)
    group = trainer.opt.param_groups[0]
    assert group["betas"] == (0.9, 0.999) and group["weight_decay"] == 0.0


def test_outer_state_in_bfloat16_and_the_reference_metric(tmp_path):
    from noloco.llm_check.trainer import Trainer

    run = train(tmp_path, outer_steps=2, eval_every=2, outer_dtype="bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in list(run.phi.values()) + list(run.delta.values()))
    assert all(p.dtype == torch.float32 for p in run.params.values())
    for k in run.phi:  # the inner weights restart from the rounded outer state
        assert torch.equal(run.params[k].detach(), run.phi[k].float())
    row = rows(tmp_path)[-1]
    assert row["val_loss_replicas_mean"] == pytest.approx(np.mean(row["val_loss_per_replica"]), rel=1e-12)
    assert row["perplexity"] == pytest.approx(math.exp(row["val_loss_replicas_mean"]), rel=1e-12)
    fp32 = train(tmp_path / "f", outer_steps=2, eval_every=2)
    assert not torch.equal(fp32.phi["wte"].bfloat16(), run.phi["wte"])  # the rounding changes the run
    resumed = Trainer(build("cpu-tiny", "noloco", **{**TINY, "outer_steps": 3, "outer_dtype": "bfloat16"}),
                      tmp_path / "r", progress=False)
    resumed.run(stop_after=2)
    again = Trainer(build("cpu-tiny", "noloco", **{**TINY, "outer_steps": 3, "outer_dtype": "bfloat16"}),
                    tmp_path / "r", progress=False)
    again.run(resume=True)
    assert again.phi["wte"].dtype == torch.bfloat16


@pytest.mark.slow
def test_torchrun_sigterm_checkpoints_every_rank_at_one_outer_step(tmp_path):
    """SIGTERM to torchrun (what a scheduler sends): every rank finishes its outer step, all agree to stop at
    the same one, save the state there (not only the last periodic checkpoint) and print the resume command."""
    from noloco.training.exchange import free_port

    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "-m", "noloco", "llm", "train", "--size", "cpu-tiny", "--replicas", "2",
           "--outer-steps", "5000", "--eval-every", "20", "--ckpt-every", "5000", "--val-windows", "4", "--warmup", "0",
           "--timeout", "60", "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(rows(tmp_path) if (tmp_path / "metrics.jsonl").exists() else []) < 2:
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert all((tmp_path / f"ckpt-rank{r}.pt").exists() for r in (0, 1)), err[-3000:]
    steps = [torch.load(tmp_path / f"ckpt-rank{r}.pt", weights_only=True)["outer_step"] for r in (0, 1)]
    assert steps[0] == steps[1] >= 40, err[-2000:]
    assert err.count(f"terminated (SIGTERM); the state at outer step {steps[0]} is saved") == 2, err[-2000:]
    assert "--resume" in err and not (tmp_path / "run.lock").exists()


def _torchrun_two(out, *args):
    from noloco.training.exchange import free_port

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "-m", "noloco", "llm", "train", "--size", "cpu-tiny", "--replicas",
           "2", "--outer-steps", "6", "--eval-every", "2", "--ckpt-every", "2", "--val-windows", "4", "--warmup", "0",
           "--timeout", "60", "--out", str(out), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


def test_torchrun_resumes_from_the_last_outer_step_every_rank_saved(tmp_path):
    """A rank killed while the ranks were saving leaves the others one checkpoint ahead (issue 34): each rank
    keeps its checkpoint before the last, and --resume goes back to the last outer step every rank saved and
    trains on as the uninterrupted run would; where no such step is kept, exit 3 with the folder untouched."""
    out = tmp_path / "dist"
    proc = _torchrun_two(out, "--stop-after", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    step = lambda path: torch.load(path, weights_only=True)["outer_step"]  # noqa: E731
    ckpt = {r: out / f"ckpt-rank{r}.pt" for r in (0, 1)}
    prev = {r: out / f"ckpt-rank{r}.pt.prev" for r in (0, 1)}
    assert [step(ckpt[r]) for r in (0, 1)] == [4, 4] and [step(prev[r]) for r in (0, 1)] == [2, 2]
    os.replace(prev[1], ckpt[1])  # rank 1 killed before its save at outer step 4
    os.replace(prev[0], tmp_path / "aside.pt")  # ... and rank 0's step 2 gone: no common step
    metrics = (out / "metrics.jsonl").read_bytes()
    proc = _torchrun_two(out, "--resume")
    assert proc.returncode != 0 and "no outer step is saved by every rank" in proc.stderr, proc.stderr[-3000:]
    err = proc.stderr  # each rank's one line, then torchrun's own report of the failed ranks (exit code 3)
    assert err.index("noloco llm train: error:") < err.index("failed (exitcode: 3)") < err.index("Traceback")
    assert (out / "metrics.jsonl").read_bytes() == metrics and [step(ckpt[r]) for r in (0, 1)] == [4, 2]
    os.replace(tmp_path / "aside.pt", prev[0])
    proc = _torchrun_two(out, "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("resuming from outer step 2, the last one every rank saved") == 1, proc.stderr[-3000:]
    single = train(tmp_path / "one", replicas=2, outer_steps=6, eval_every=2, val_windows=4, warmup=0)
    for rank in (0, 1):
        state = torch.load(ckpt[rank], weights_only=True)
        assert state["outer_step"] == 6
        for k, p in single.phi.items():
            torch.testing.assert_close(state["phi"][k][0], p[rank], rtol=0, atol=1e-5)
    assert [r["outer_step"] for r in rows(out)] == [2, 4, 6]


def test_compile_is_a_flag_both_ways_and_a_preset_value():
    """gpu-large compiles by default, --no-compile turns it off, --compile turns it on for any preset; a run
    resumed with the other choice computes the same thing, so it is not refused."""
    from noloco.cli.llm_flags import config_from_args
    from noloco.llm_check.lifecycle import RESUMABLE_CHANGES

    parser = _subparser("train")
    assert config_from_args(parser.parse_args(["--size", "gpu-large", "--out", "x"])).compile is True
    assert config_from_args(parser.parse_args(["--size", "gpu-large", "--no-compile", "--out", "x"])).compile is False
    assert config_from_args(parser.parse_args(["--size", "cpu-tiny", "--compile", "--out", "x"])).compile is True
    assert config_from_args(parser.parse_args(["--size", "cpu-tiny", "--out", "x"])).compile is False
    assert "compile" in RESUMABLE_CHANGES
    large = build("gpu-large", "noloco").model()
    assert 25e6 <= large.n_params() <= 50e6


@pytest.mark.slow
def test_a_compiled_step_computes_the_eager_step(tmp_path):
    """torch.compile fuses the forward and backward: the losses and weights of two outer steps agree with the
    eager run's to float32 rounding (a wrong graph would differ at the first step)."""
    eager = train(tmp_path / "eager", outer_steps=2, compile=False)
    compiled = train(tmp_path / "compiled", outer_steps=2, compile=True)
    for k in eager.phi:
        torch.testing.assert_close(compiled.phi[k], eager.phi[k], rtol=1e-4, atol=1e-5)
    a, b = rows(tmp_path / "eager"), rows(tmp_path / "compiled")
    assert [r["train_loss"] for r in a] == pytest.approx([r["train_loss"] for r in b], rel=1e-4)
    assert a[-1]["weight_std"] > 0


def test_the_benchmarks_foreach_mode_runs_the_multi_tensor_adamw(tmp_path):
    """The bench's "foreach AdamW" mode builds its optimizer from fresh groups: groups passed whole keep the
    trainer's own fused/foreach choice (on a GPU, fused=True), and the mode would time the fused kernel again."""
    from noloco.benchmarks.llm_step import _trainer

    tr = _trainer("cpu-tiny", 4, 1, "batched", "cpu", foreach=True)
    assert all(g["foreach"] is True and not g["fused"] for g in tr.opt.param_groups)
    assert sorted(g["weight_decay"] for g in tr.opt.param_groups) == [0.0, build("cpu-tiny", "noloco").weight_decay]
