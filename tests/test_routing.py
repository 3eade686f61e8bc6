"""Pipeline stages, random routing and stage skipping (noloco.llm_check.routing, model, pipeline, train):
routes are a function of (seed, step); S = 1 and p = 0 change nothing; gradients reach exactly the
stage replicas a microbatch visited; the batched gather equals a per-microbatch chain; torchrun
with S x N ranks equals the batched run; resume continues the same routes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")
pytestmark = needs_torch

from noloco.llm_check.config import build  # noqa: E402
from noloco.llm_check.routing import Route, middle_stages, param_stage, route, stage_units  # noqa: E402
from noloco.cli import main  # noqa: E402
from noloco.infra.errors import ConfigError  # noqa: E402
from noloco.infra.files import loads  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def rows(out):
    return [loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def train(out, stop_after=None, **kw):
    from noloco.llm_check.trainer import Trainer

    trainer = Trainer(build("cpu-tiny", kw.pop("method", "noloco"), **kw), out, progress=False)
    trainer.run(stop_after=stop_after)
    return trainer


# ----------------------------------------------------------------- routes

def test_stage_units_cover_the_model_in_order():
    from noloco.llm_check.model import GPTConfig

    for layers in (1, 2, 4, 6):
        for stages in range(1, layers + 3):
            units = stage_units(layers, stages)
            assert len(units) == stages and all(units)
            assert [u for part in units for u in part] == ["embed", *range(layers), "head"]
            sizes = [len(part) for part in units]
            assert max(sizes) - min(sizes) <= 1
    cfg = GPTConfig(layers=2, stages=3)
    from noloco.llm_check.model import param_shapes

    owner = {k: param_stage(k, 2, 3) for k in param_shapes(cfg)}
    assert owner["wte"] == owner["wpe"] == 0 and owner["head.w"] == owner["lnf.w"] == 2 and owner["h1.qkv.w"] == 1
    with pytest.raises(ConfigError, match="between 1 and layers"):
        stage_units(1, 4)


def test_routes_are_a_function_of_seed_and_step():
    a, b = route(3, 7, 4, 5, 6, "random", 0.3), route(3, 7, 4, 5, 6, "random", 0.3)
    assert np.array_equal(a.path, b.path) and np.array_equal(a.skip, b.skip)
    c = route(3, 8, 4, 5, 6, "random", 0.3)
    assert not np.array_equal(a.path, c.path)
    assert np.array_equal(a.path[0], np.broadcast_to(np.arange(5)[:, None], (5, 6)))  # stage 0 reads replica r's data
    for s in range(4):  # each column is a permutation: every stage replica computes B microbatches
        assert all(sorted(a.path[s, :, col]) == list(range(5)) for col in range(6))
    assert not a.skip[[0, 3]].any()  # the first and last stages are never skipped
    fixed = route(3, 7, 4, 5, 6, "fixed")
    assert np.array_equal(fixed.path, np.broadcast_to(np.arange(5)[None, :, None], (4, 5, 6)))


def test_routes_are_uniform_and_skips_have_probability_p():
    """Chi-square-free check with standard errors: P(path = k) = 1/N for every k, skip frequency p."""
    N, B, steps, p = 4, 8, 400, 0.3
    paths = np.stack([route(0, t, 3, N, B, "random", p).path[1] for t in range(steps)])
    freq = (paths[..., None] == np.arange(N)).mean(axis=(0, 2))  # (N data replicas, N stage replicas)
    se = np.sqrt((1 / N) * (1 - 1 / N) / (steps * B))
    assert np.all(np.abs(freq - 1 / N) < 4 * se)
    skips = np.stack([route(0, t, 3, N, B, "random", p).skip[1] for t in range(steps)])
    assert abs(skips.mean() - p) < 4 * np.sqrt(p * (1 - p) / skips.size)


# ----------------------------------------------------------------- batched forward

def _model(stages, layers=2, replicas=3):
    from noloco.llm_check.model import GPTConfig, init_params

    cfg = GPTConfig(ctx=8, layers=layers, heads=2, width=8, stages=stages)
    params = init_params(cfg, replicas, seed=1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(2)
    for p in params.values():  # replicas apart, so that a wrong replica shows
        p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.05)
    return cfg, params


def test_batched_gather_equals_each_microbatch_through_its_own_path():
    from noloco.llm_check.model import losses, run_stage

    N, B = 3, 4
    cfg, params = _model(stages=4, layers=2, replicas=N)
    windows = torch.randint(0, 256, (N, B, cfg.ctx + 1), generator=torch.Generator().manual_seed(0))
    rt = route(5, 11, cfg.stages, N, B, "random", 0.5)
    assert rt.skip.any() and (rt.path[1:] != rt.path[:1]).any()  # the case has teeth
    got = losses(params, windows, cfg, rt.torch())
    per_slot = np.zeros((N, B))
    for r in range(N):
        for b in range(B):
            x = windows[r:r + 1, b:b + 1, :-1]
            for s in range(cfg.stages):
                if not rt.skip[s, r, b]:
                    k = rt.path[s, r, b]
                    x = run_stage({n: v[k:k + 1] for n, v in params.items()}, s, x, cfg)
            loss = torch.nn.functional.cross_entropy(x.reshape(-1, cfg.vocab), windows[r, b, 1:])
            per_slot[rt.path[-1, r, b], b] = loss.item()
    np.testing.assert_allclose(got.numpy(), per_slot.mean(1), rtol=1e-12)


def test_gradients_reach_exactly_the_replicas_a_microbatch_visited():
    from noloco.llm_check.model import forward

    N, B = 3, 2
    cfg, params = _model(stages=4, layers=2, replicas=N)
    for p in params.values():
        p.requires_grad_(True)
    rt = route(1, 4, cfg.stages, N, B, "random", 0.5)
    tr = rt.torch()
    idx = torch.randint(0, 256, (N, B, cfg.ctx), generator=torch.Generator().manual_seed(3))
    logits = forward(params, idx, cfg, tr)
    checked_skip = False
    for r in range(N):
        for b in range(B):
            grads = torch.autograd.grad(logits[rt.path[-1, r, b], b].square().sum(), list(params.values()),
                                        retain_graph=True, allow_unused=True)
            for (name, p), g in zip(params.items(), grads):
                s = param_stage(name, cfg.layers, cfg.stages)
                touched = set() if g is None else {k for k in range(N) if g[k].abs().sum() > 0}
                expect = set() if rt.skip[s, r, b] else {int(rt.path[s, r, b])}
                assert touched <= expect, (name, r, b, touched, expect)
                if name.endswith("qkv.w"):
                    assert touched == expect  # a weight every visit uses does receive a gradient
                checked_skip |= bool(rt.skip[s, r, b])
    assert checked_skip


def test_removed_stage_is_a_skip_of_every_microbatch():
    from noloco.llm_check.model import forward

    cfg, params = _model(stages=4, layers=2)
    idx = torch.randint(0, 256, (3, 2, cfg.ctx), generator=torch.Generator().manual_seed(4))
    skip_all = np.zeros((4, 3, 2), dtype=bool)
    skip_all[2] = True
    fixed = route(0, 0, 4, 3, 2, "fixed").path
    via_skip = forward(params, idx, cfg, Route(fixed, skip_all).torch())
    torch.testing.assert_close(forward(params, idx, cfg, removed=(2,)), via_skip, rtol=0, atol=0)
    assert not torch.equal(forward(params, idx, cfg), via_skip)


def test_untrained_staged_model_is_the_one_stage_model():
    """The untied head starts equal to the embedding: before training, S stages compute the same function."""
    from noloco.llm_check.model import GPTConfig, forward, init_params

    one = GPTConfig(ctx=8, layers=2, heads=2, width=8)
    idx = torch.randint(0, 256, (2, 3, 8), generator=torch.Generator().manual_seed(5))
    ref = forward(init_params(one, 2, 0), idx, one)
    for stages in (2, 3, 4):
        cfg = GPTConfig(ctx=8, layers=2, heads=2, width=8, stages=stages)
        torch.testing.assert_close(forward(init_params(cfg, 2, 0), idx, cfg), ref, rtol=0, atol=0)


# ----------------------------------------------------------------- training runs

def test_one_stage_and_zero_skip_change_nothing(tmp_path):
    base = train(tmp_path / "base", outer_steps=2)
    routed = train(tmp_path / "routed", outer_steps=2, stages=1, routing="random")
    for k in base.phi:
        assert torch.equal(base.phi[k], routed.phi[k])
    three = train(tmp_path / "three", outer_steps=2, stages=3, routing="random")
    barely = train(tmp_path / "barely", outer_steps=2, stages=3, routing="random", skip_prob=1e-12)  # draws, never skips
    for k in three.phi:
        assert torch.equal(three.phi[k], barely.phi[k])
    skipping = train(tmp_path / "skip", outer_steps=2, stages=3, routing="random", skip_prob=0.5)
    assert not torch.equal(skipping.phi["h0.qkv.w"], three.phi["h0.qkv.w"])


def test_random_routing_changes_the_run_and_logs_per_stage_spread(tmp_path):
    fixed = train(tmp_path / "f", outer_steps=2, eval_every=2, stages=2, routing="fixed")
    rand = train(tmp_path / "r", outer_steps=2, eval_every=2, stages=2, routing="random")
    assert torch.equal(fixed.phi["wte"], rand.phi["wte"]) is False
    row = rows(tmp_path / "r")[-1]
    assert len(row["weight_std_per_stage"]) == 2 and all(v > 0 for v in row["weight_std_per_stage"])
    # weight_std is the per-stage spreads pooled by number of values
    counts = [sum(rand.phi[k][0].numel() for k in keys) for keys in rand.stage_keys]
    pooled = np.sqrt(np.dot(np.square(row["weight_std_per_stage"]), counts) / sum(counts))
    assert row["weight_std"] == pytest.approx(pooled, rel=1e-12)


def test_theta_std_is_the_spread_before_the_outer_step(tmp_path):
    """diloco averages everything: weight_std (after the outer step) is 0, theta_std (before it) is not,
    and equals weight_std of the inner weights the trainer held then."""
    run = train(tmp_path / "d", method="diloco", outer_steps=2, eval_every=2, stages=2, routing="random")
    row = rows(tmp_path / "d")[-1]
    assert row["weight_std"] == 0 and row["weight_std_per_stage"] == [0, 0]
    assert all(v > 0 for v in row["theta_std_per_stage"])
    from noloco.llm_check.trainer import weight_std

    local = train(tmp_path / "l", method="local", outer_steps=2, eval_every=2, stages=2, routing="random")
    last = rows(tmp_path / "l")[-1]  # local: beta 1, no pull, so phi = theta
    assert last["theta_std"] == pytest.approx(last["weight_std"], rel=1e-12)
    assert last["theta_std"] == pytest.approx(weight_std(local.phi), rel=1e-12)
    assert run.theta_spread["theta_std"] == row["theta_std"]


def test_resume_continues_the_same_routes(tmp_path):
    from noloco.llm_check.trainer import Trainer

    whole = train(tmp_path / "whole", outer_steps=4, stages=3, routing="random", skip_prob=0.3)
    train(tmp_path / "part", outer_steps=4, stages=3, routing="random", skip_prob=0.3, stop_after=2)
    part = Trainer(build("cpu-tiny", "noloco", outer_steps=4, stages=3, routing="random", skip_prob=0.3),
                   tmp_path / "part", progress=False)
    part.run(resume=True)
    for k in whole.phi:
        torch.testing.assert_close(part.phi[k], whole.phi[k], rtol=0, atol=0)


def test_cli_stages_run_and_evaluation_with_stages_removed(tmp_path, capsys):
    from noloco.llm_check.evaluation import evaluate_run

    out = tmp_path / "run"
    assert main(["llm", "train", "--size", "cpu-tiny", "--stages", "3", "--routing", "random", "--skip-prob",
                 "0.25", "--method", "noloco", "--out", str(out)]) == 0
    row = rows(out)[-1]
    assert len(row["weight_std_per_stage"]) == 3
    full = evaluate_run(out)
    assert full.val_loss_avg_model == pytest.approx(row["val_loss_avg_model"], rel=1e-6)
    cut = evaluate_run(out, removed=[1])
    assert cut.removed == [1] and cut.val_loss_avg_model != full.val_loss_avg_model
    capsys.readouterr()
    assert main(["llm", "evaluate", str(out), "--remove", "1", "--json"]) == 0
    assert loads(capsys.readouterr().out)["val_loss_avg_model"] == pytest.approx(cut.val_loss_avg_model)
    assert main(["llm", "evaluate", str(out), "--remove", "2"]) == 2  # the head's stage
    assert "cannot be removed" in capsys.readouterr().err
    assert middle_stages(3) == [1]


@pytest.mark.parametrize("kw, words", [
    (dict(stages=5), r"layers \+ 2"),
    (dict(stages=2, skip_prob=0.2), "middle stage"),
    (dict(stages=3, skip_prob=1.0), "skip_prob"),
    (dict(stages=2, replica_mode="loop"), "batched"),
    (dict(routing="sometimes"), "routing"),
])
def test_bad_stage_settings_are_refused(kw, words):
    with pytest.raises(ConfigError, match=words):
        build("cpu-tiny", "noloco", **kw)


def test_torchrun_stages_match_batched(tmp_path):
    """S x N = 3 x 4 gloo ranks (about 30 s here), random routing with skips, pairs per stage: activations,
    gradients and group exchanges point-to-point."""
    from noloco.training.exchange import free_port

    kw = dict(outer_steps=2, eval_every=2, val_windows=8, stages=3, replicas=4, group_size=2, skip_prob=0.5)
    args = ["--size", "cpu-tiny", "--method", "noloco", "--routing", "random", "--timeout", "60"]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "12", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "-m", "noloco", "llm", "train", *args, "--out", str(tmp_path / "dist")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = train(tmp_path / "one", routing="random", **kw)
    for rank in range(12):
        stage, replica = divmod(rank, 4)
        state = torch.load(tmp_path / "dist" / f"ckpt-rank{rank}.pt", weights_only=True)
        assert set(state["phi"]) == set(single.stage_keys[stage])
        for k, p in state["phi"].items():
            torch.testing.assert_close(p[0], single.phi[k][replica], rtol=0, atol=1e-5)
    d, s = rows(tmp_path / "dist")[-1], rows(tmp_path / "one")[-1]
    assert min(s["weight_std_per_stage"]) > 0  # the replicas differ: the comparison has teeth
    for key in ("weight_std", "val_loss_avg_model"):
        assert d[key] == pytest.approx(s[key], rel=1e-4)
    for key in ("weight_std_per_stage", "train_loss_per_replica", "val_loss_per_replica"):
        assert d[key] == pytest.approx(s[key], rel=1e-4)


def test_routing_study_quick_writes_every_table(tmp_path, capsys):
    """The study's pipeline end to end at a tiny size: runs reused on a second call, tables and the figure."""
    from noloco.studies.reports import RoutingReport
    from noloco.studies.routing import SKIP_PROBS, VARIANTS, format_report

    def study_main(argv):
        return main(["llm", "study", "routing", *argv])
    from noloco.paper_figs import fig_routing

    assert study_main(["--quick", "--seeds", "2", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    rep = RoutingReport.from_json(loads((tmp_path / "routing.json").read_text()))
    assert set(rep.ratios) == set(VARIANTS) and len(rep.skipping) == len(SKIP_PROBS)
    for row in rep.spread.values():
        assert len(row.theta_std_per_stage.mean) == 4 and all(v > 0 for v in row.theta_std_per_stage.se)
    assert format_report(rep) in table
    stamp = (tmp_path / "noloco-fixed" / "seed0" / "ckpt.pt").stat().st_mtime_ns
    assert study_main(["--quick", "--seeds", "2", "--out", str(tmp_path), "--json"]) == 0  # reuses the runs
    assert (tmp_path / "noloco-fixed" / "seed0" / "ckpt.pt").stat().st_mtime_ns == stamp
    fig = fig_routing.draw(fig_routing.compute(str(tmp_path / "routing.json")))
    from matplotlib.container import BarContainer

    bars = [c for c in fig.axes[0].containers if isinstance(c, BarContainer)]
    assert sum(len(c) for c in bars) == 4 * len(VARIANTS)  # a random / fixed ratio per stage and variant
    assert study_main(["--seeds", "1", "--out", str(tmp_path)]) == 2


def _silent_stage_run(rank, port, report):
    """Rank 0 (stage 0) computes and waits for stage 1's gradients; rank 1 (stage 1) is alive but silent."""
    from noloco.llm_check.model import init_params

    import datetime

    import torch.distributed as dist

    from noloco.llm_check import data
    from noloco.training.exchange import DistExchange
    from noloco.llm_check.pipeline import Pipeline
    from peers import report_peer_error, stay_silent

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    ex = DistExchange(rank=rank, world_size=2, local_rank=rank, timeout=2.0, device=torch.device("cpu"), stages=2)
    if rank == 0:
        cfg = build("cpu-tiny", "local", replicas=1, stages=2, routing="random")
        corpus = data.load_corpus()
        shards = data.shards(corpus, 1, cfg.seed, False)
        params = {k: v for k, v in init_params(cfg.model(), 1, 0).items() if param_stage(k, cfg.layers, 2) == 0}
        for p in params.values():
            p.requires_grad_(True)
        report_peer_error(lambda: Pipeline(cfg, ex, cfg.model(), shards).train_step(params, 0), report)
    else:
        stay_silent(report)
    os._exit(0)  # skip the teardown, which would wait for the silent peer


def test_dead_stage_rank_is_a_clear_error(tmp_path):
    from noloco.training.exchange import free_port

    import torch.multiprocessing as mp

    report = tmp_path / "report.txt"
    mp.start_processes(_silent_stage_run, args=(free_port(), str(report)), nprocs=2, join=True, start_method="spawn")
    elapsed, message = report.read_text().split("\n", 1)
    assert float(elapsed) < 6.0
    assert message.startswith("rank 0: gradients of inner step 0 with rank(s) [1] failed or timed out after 2 s"), message


def test_the_issue_command_logs_weight_std_per_stage(tmp_path):
    """`noloco llm train --size cpu-tiny --stages 2 --routing random --method noloco --out DIR` (about 5 s here)."""
    assert main(["llm", "train", "--size", "cpu-tiny", "--stages", "2", "--routing", "random", "--method", "noloco",
                 "--out", str(tmp_path)]) == 0
    for row in rows(tmp_path):
        assert len(row["weight_std_per_stage"]) == 2 and len(row["theta_std_per_stage"]) == 2
    assert loads((tmp_path / "result.json").read_text())["finished"]
