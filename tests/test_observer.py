"""noloco.Observer: the theory's inputs and the spread of a user's own run, written to a run folder that
`noloco llm predict` (--forecast, --as) and `noloco llm tune` read; the coordinate sample across ranks and its
stated error against the full measurement; the early warnings, each made to fire by its fault."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")
pytestmark = needs_torch

import noloco  # noqa: E402
from noloco.advice.forecast import forecast, transfer  # noqa: E402
from noloco.advice.predict import predict  # noqa: E402
from noloco.advice.tune import tune  # noqa: E402
from noloco.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H, T, N = 5, 24, 4


def _mlp(dtype=None):  # None: torch.float32 (torch is imported when a test runs)
    dtype = torch.float32 if dtype is None else dtype
    torch.manual_seed(0)  # every replica the same start
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dtype)


def _batch(replica: int, step: int, dtype=None):
    dtype = torch.float32 if dtype is None else dtype
    g = torch.Generator().manual_seed(1000 * replica + step)  # each replica its own data
    x = torch.randn(32, 6, generator=g, dtype=dtype)
    return x, torch.sin(x.sum(1, keepdim=True)) + 0.3 * torch.randn(32, 1, generator=g, dtype=dtype)


def _val_losses(models, dtype):
    x, y = _batch(999, 0, dtype)
    own = [float(((m(x) - y) ** 2).mean()) for m in models]
    params = [dict(m.named_parameters()) for m in models]
    avg = {k: torch.stack([p[k] for p in params]).mean(0) for k in params[0]}
    pred = torch.func.functional_call(models[0], avg, (x,))
    return float(((pred - y) ** 2).mean()), float(np.mean(own))


def train_batched(folder, replicas=N, outer_cls=None, equal=True, steps=T, dtype=None, lr=1e-2,
                  extra=None, **observer_kw):
    """The tiny regression, ``replicas`` modules in one process, AdamW, H = 5, with an Observer (and
    ``extra``: more observers on the same run, as ``{folder: kwargs}``)."""
    dtype = torch.float32 if dtype is None else dtype
    models = [_mlp(dtype) for _ in range(replicas)]
    if not equal:
        with torch.no_grad():
            models[1][0].weight[3, 2] += 1e-3  # one coordinate of one replica
    inner = torch.optim.AdamW([p for m in models for p in m.parameters()], lr=lr)
    outer = (outer_cls or noloco.OuterOptimizer)(models, inner, inner_steps=H, seed=3)
    observer = noloco.Observer(outer, folder, outer_steps=steps, lr=lr, model="mlp-6-16-1", **observer_kw)
    others = [noloco.Observer(outer, f, outer_steps=steps, lr=lr, **kw) for f, kw in (extra or {}).items()]
    for step in range(steps * H):
        inner.zero_grad()
        sum(((m(x) - y) ** 2).mean() for m, (x, y) in
            ((m, _batch(i, step, dtype)) for i, m in enumerate(models))).backward()
        inner.step()
        if (step + 1) % H == 0:
            with torch.no_grad():
                avg, mean = _val_losses(models, dtype)
            observer.log(outer.outer_done, val_loss_avg_model=avg, val_loss_replicas_mean=mean)
    for o in (observer, *others):
        o.close()
    return observer, others


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own") / "run"
    observer, _ = train_batched(folder)
    return folder, observer


def test_the_run_folder_format(run_folder):
    folder, observer = run_folder
    result = json.loads((folder / "result.json").read_text())
    assert (result["format"], result["format_version"], result["schema_version"]) == ("noloco-run", 1, 2)
    cfg = result["config"]
    assert cfg["outer"]["group_size"] == 2 and cfg["inner_steps"] == H and cfg["outer_steps"] == T
    assert cfg["model"] == "mlp-6-16-1" and cfg["schedule"] == "constant"
    assert result["finished"] and result["world_size"] == 1 and result["sampled"] is None
    assert result["flags"] == [] == observer.flags
    run = noloco.read_run(folder)
    assert [r["outer_step"] for r in run.metrics] == list(range(T + 1))
    assert run.metrics[0]["weight_std"] == 0.0 and run.metrics[-1]["weight_std"] > 0
    assert all("val_loss_avg_model" in r for r in run.metrics[1:])
    assert [r["outer_step"] for r in run.inputs] == list(range(1, T + 1))
    assert set(run.inputs[-1]["groups"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    # what fixes every outer step's groups, with N and n: the forecast steps along them
    assert dict(run.setting.other) == {"model": "mlp-6-16-1", "seed": 3}  # one stage: none written
    assert cfg["outer"]["replicas"] == N
    from noloco.advice.forecast import groups_seed
    assert groups_seed(run.setting) == 3


def test_the_advice_reads_it(run_folder, capsys):
    folder, _ = run_folder
    report = predict(folder)
    ratios = [r.ratio for r in report.rows[1:]]
    assert all(r is not None and 0.2 < r < 5 for r in ratios), ratios  # a prediction, not an agreement claim
    fc = forecast(folder)
    assert fc.from_step == 6 and len(fc.rows) == T - 6 and all(r.forecast > 0 for r in fc.rows)
    other = transfer(folder, beta=0.5)
    assert other.rows[-1].predicted > 0
    tuned = tune([folder])
    assert tuned.recommendation is not None and tuned.rows[0].stability_margin > 0
    for argv in (["llm", "predict", str(folder)], ["llm", "predict", str(folder), "--forecast"],
                 ["llm", "predict", str(folder), "--as", "beta=0.5"], ["llm", "tune", str(folder)]):
        assert main(argv) == 0, argv
    out = capsys.readouterr().out
    assert "decay factor" in out and "recommendation" in out


# ----------------------------------------------------------------- the coordinate sample and its error

def _weights(seed=0):
    """Stacked phi and progress of 4 replicas, heavy-tailed per-coordinate scales, progress = -c z + noise."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape, c in (("big", (200, 250), 0.3), ("wide", (40_000,), 0.05), ("small", (64,), 0.5)):
        scale = torch.exp(0.75 * torch.randn(shape, generator=g, dtype=torch.float64))  # lognormal scales
        phi = 1.0 + scale * torch.randn(N, *shape, generator=g, dtype=torch.float64)
        z = phi - phi.mean(0)
        out[name] = (phi, -c * z + scale * 0.5 * torch.randn(N, *shape, generator=g, dtype=torch.float64))
    return out


def _sampled_rows(data, K, seed):
    from noloco.training.measure import SpreadMeter
    from noloco.training.sample import CoordinateSample, standard_errors

    sample = CoordinateSample({k: p.shape[1:] for k, (p, _) in data.items()}, K, seed)
    phi = sample.take({k: p for k, (p, _) in data.items()}, stacked=True)
    prog = sample.take({k: q for k, (_, q) in data.items()}, stacked=True)
    meter = SpreadMeter(N)
    groups = meter.measure(phi, prog, columns=True)
    errors = standard_errors(meter.columns, sample.exact)
    return {k: {**g.to_json(), "se": errors[k].to_json()} for k, g in groups.items()}


def test_the_sample_agrees_with_the_full_measurement_within_its_stated_error():
    from noloco.training.measure import SpreadMeter

    data = _weights()
    full = SpreadMeter(N).update({k: p for k, (p, _) in data.items()}, {k: q for k, (_, q) in data.items()})["groups"]
    got = _sampled_rows(data, 512, seed=7)
    for name in ("big", "wide"):
        for key in ("spread", "c", "s2"):
            se = got[name]["se"][key]
            assert se > 0 and abs(got[name][key] - full[name][key]) < 3 * se, (name, key)
            # an informative sample, not a vacuous error: c (in [0, 1], small in a flat tensor) absolutely
            assert se < (0.1 if key == "c" else 0.25 * full[name][key]), (name, key, se)
    assert got["small"]["se"] == {"spread": 0.0, "c": 0.0, "s2": 0.0}  # 64 <= K: taken whole, exact
    for key in ("spread", "c", "s2"):
        assert got["small"][key] == pytest.approx(full["small"][key], rel=1e-12)
    # how well the stated error covers: over 150 seeds of the index, |sampled - full| / se. The per-coordinate
    # values are skewed (lognormal scales), so the t-like ratio is too: +-2 se covered 85 to 94 %, +-3 se 95 to
    # 100 % (docs/own_run.md states it); a smaller scale spread comes closer to the normal 95.4 / 99.7 %
    zs = {key: [] for key in ("spread", "c", "s2")}
    for seed in range(150):
        rows = _sampled_rows({"big": data["big"]}, 512, seed)
        for key in zs:
            zs[key].append(abs(rows["big"][key] - full["big"][key]) / rows["big"]["se"][key])
    for key, z in zs.items():
        z = np.array(z)
        assert (z < 2).mean() > 0.8 and (z < 3).mean() > 0.93, (key, (z < 2).mean(), (z < 3).mean())
    # and shrinks as 1 / sqrt(K)
    ratio = _sampled_rows(data, 2048, 7)["big"]["se"]["spread"] / got["big"]["se"]["spread"]
    assert ratio == pytest.approx(0.5, rel=0.2)


def _one_tensor(steps, N):
    """The meter's inputs of one tensor alone, written out per tensor (the form the meter had before it measured
    every tensor side by side): the rows of ``steps`` [(phi, progress)] and each step's standard errors."""
    from noloco.training.measure import solve_drift

    rows, prev, total, sum_v, sum_a, last = [], None, 0.0, 0.0, 0.0, 0.0
    for t, (x, y) in enumerate(steps, 1):
        z, p = (u.double().reshape(N, -1) - u.double().reshape(N, -1).mean(0) for u in (x, y))
        numel = z.shape[1]
        norm = numel * (N - 1)
        zz, pz, pp = float((z * z).sum()), float((p * z).sum()), float((p * p).sum())
        c = -pz / zz if zz > 0 else 0.0
        r = p + c * z
        rr = float((r * r).sum())
        ra = float((r * prev).sum()) if prev is not None else None
        total, prev = total + r, r
        sum_v += rr / norm
        sum_a += ra / norm if ra is not None else 0.0
        row = {"spread": zz / (numel * N), "progress_var": pp / norm, "c": c, "s2": rr / norm,
               "lag1_cov": None if ra is None else ra / norm, "rho": None if ra is None else ra / math.sqrt(rr * last),
               "sum_var": float((total * total).sum()) / norm}
        last = rr
        row["drift_var"] = solve_drift(t, sum_v / t, sum_a / (t - 1), row["sum_var"])[0] if t > 1 else None
        b, e = (z * z).sum(0), (r * r).sum(0)
        row["se"] = None if numel < 2 else [float(b.std()) / (N * math.sqrt(numel)),
                                            float(((p * z).sum(0) + c * b).std()) / (float(b.mean()) * math.sqrt(numel)),
                                            float(e.std()) / ((N - 1) * math.sqrt(numel))]
        rows.append(row)
    return rows


@pytest.mark.parametrize("chunk", [None, 1200])  # all in one pass (at most 64k numbers); passes of 300 columns
def test_the_meter_measures_many_tensors_side_by_side_as_each_alone(monkeypatch, chunk):
    """30 tensors of 1 to 2,400 coordinates (float32 and float64, 4 replicas, 5 outer steps): every tensor's row
    and sampling errors, measured in one pass over all of them, equal the tensor measured alone; a state saved
    and loaded midway goes on the same; the drift is None at t <= 2 (where every D solves its equation)."""
    from noloco.training import measure
    from noloco.training.sample import standard_errors

    if chunk:
        monkeypatch.setattr(measure, "CHUNK", chunk)  # groups split over passes, the largest alone in one
    g = torch.Generator().manual_seed(11)
    shapes = [(1,), (3,), (7, 5), (64,), (300, 2), (2400,), (2, 3, 4), (1, 1), (129,), (40, 30)] * 3
    dtypes = [torch.float32, torch.float64]
    steps = []
    for _ in range(5):
        phi = {f"t{i}": (1 + 0.2 * torch.randn(N, *s, generator=g, dtype=torch.float64)).to(dtypes[i % 2])
               for i, s in enumerate(shapes)}
        steps.append((phi, {k: (-0.3 * (x - x.mean(0)) + 0.1 * torch.randn(x.shape, generator=g, dtype=torch.float64))
                            .to(x.dtype) for k, x in phi.items()}))
    meter, got = measure.SpreadMeter(N), []
    for t, (phi, prog) in enumerate(steps):
        if t == 3:
            meter, saved = measure.SpreadMeter(N), meter.state_dict()
            meter.load_state_dict(saved)
        groups = meter.measure(phi, prog, columns=True)
        got.append((groups, standard_errors(meter.columns)))
    for name in steps[0][0]:
        alone = _one_tensor([(phi[name], prog[name]) for phi, prog in steps], N)
        for t, ((groups, errors), want) in enumerate(zip(got, alone), 1):
            row = groups[name]
            for key in ("spread", "progress_var", "c", "s2", "lag1_cov", "rho", "sum_var"):
                assert getattr(row, key) == (None if want[key] is None else
                                             pytest.approx(want[key], rel=1e-12, abs=1e-15)), (name, t, key)
            if t <= 2:
                assert row.drift_var is None
            else:  # an ill-conditioned root: the inputs' rounding moves it a little
                assert (row.drift_var is None) == (want["drift_var"] is None), (name, t)
                assert row.drift_var == pytest.approx(want["drift_var"], rel=1e-6, abs=1e-12), (name, t)
            if want["se"] is not None:
                se = errors[name]
                assert [se.spread, se.c, se.s2] == pytest.approx(want["se"], rel=1e-10, abs=1e-15), (name, t)


def test_a_sampled_observer_beside_the_exact_one(tmp_path):
    """Two observers on one run: every coordinate, and 64 per tensor (the 16 x 6 and 1 x 16 weights sampled)."""
    exact, (sampled,) = train_batched(tmp_path / "exact", steps=12, extra={tmp_path / "sampled": {"sample": 64}})
    full, part = noloco.read_run(tmp_path / "exact"), noloco.read_run(tmp_path / "sampled")
    assert part.result["sampled"]["per_tensor"] == 64 and part.result["sampled"]["coordinates"] == 64 + 16 + 16 + 1
    for a, b in zip(full.metrics[1:], part.metrics[1:]):
        assert abs(a["weight_std"] - b["weight_std"]) < 3 * b["weight_std_se"] + 1e-12
    assert part.inputs[-1]["groups"]["0.weight"]["numel"] == 96 and part.inputs[-1]["groups"]["0.weight"]["sampled"] == 64


def _ops(fn):
    """``fn()`` and the aten operations it ran (each a kernel on a GPU)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ran.append(str(func))
            return func(*args, **(kwargs or {}))

    ran = []
    with Log():
        out = fn()
    return out, ran


def test_the_samples_of_every_tensor_are_taken_by_a_few_operations_into_one_host_copy(tmp_path):
    """The sample of every tensor of phi and progress, checksums appended: the same numbers as each tensor indexed
    on its own (the layout the meter reads), taken by one index_select per flat buffer (a handful of kernels on a
    GPU, however many tensors), the index made once per device; what the observer measures is views of one
    host tensor (one copy from a device)."""
    from noloco.training.sample import CoordinateSample

    models = [torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(10)]) for _ in range(N)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    with torch.no_grad():
        models[1][3].weight[5, 6] += 1e-6  # one coordinate, likely unsampled: the checksums see it
    inner = torch.optim.SGD([p for m in models for p in m.parameters()], lr=0.1)
    outer = noloco.OuterOptimizer(models, inner, inner_steps=H)
    progress = {k: torch.randn_like(v) for k, v in outer.phi.items()}  # 20 separate tensors: one index_select each
    sample = CoordinateSample({k: v.shape[1:] for k, v in outer.phi.items()}, 16, seed=5)
    extra = torch.randn(N, 3, dtype=torch.float64)
    whole, ran = _ops(lambda: sample.gather([outer.phi, progress], True, extra))
    assert ran.count("aten.index_select.default") == 1 + 20 and len(sample._on_device) == 1 + 20
    (phi_s, prog_s), tail = sample.unpack(whole, 2)
    for name, idx in sample.index.items():
        for got, t in ((phi_s[name], outer.phi[name]), (prog_s[name], progress[name])):
            flat = t.reshape(N, -1)
            assert torch.equal(got, (flat if idx is None else flat[:, idx]).double())
    assert torch.equal(tail, extra)
    _, again = _ops(lambda: sample.gather([outer.phi, outer.phi], True))  # one buffer, its index kept: 5 operations
    assert again.count("aten.index_select.default") == 2 and len(sample._on_device) == 1 + 20
    one = sample.take({k: v[2] for k, v in outer.phi.items()}, stacked=False)  # one replica's (a rank's)
    assert all(torch.equal(one[k], phi_s[k][2]) for k in one)
    observer = noloco.Observer(outer, None, outer_steps=2, lr=0.1, sample=16, warn_steps=0)
    whole = observer._collect(observer._start(outer.phi, progress, extra=observer._checksums(outer.phi)))
    (phi_s, prog_s), sums = sample.unpack(whole, 2)
    assert len({t.untyped_storage().data_ptr() for t in (*phi_s.values(), *prog_s.values(), sums)}) == 1
    assert sums.shape == (N, 40) and observer._checksums_differ(list(outer.phi), sums) == ["3.weight"]
    observer.detach()


# ----------------------------------------------------------------- many ranks (gloo on localhost)

def _rank(rank, world, port, out, method="noloco", steps=T):
    import datetime

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    model = _mlp(torch.float64)
    inner = torch.optim.AdamW(model.parameters(), lr=1e-2)
    outer = noloco.OuterOptimizer(model, inner, inner_steps=H, seed=3, method=method)
    observer = noloco.Observer(outer, out, outer_steps=steps, lr=1e-2, sample=64, model="mlp-6-16-1")
    for step in range(steps * H):
        x, y = _batch(rank, step, torch.float64)
        inner.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        inner.step()
    observer.close()
    dist.destroy_process_group()
    os._exit(0)  # skip interpreter teardown: gloo can abort in C++ static destructors (docs/reliability.md)


def test_two_ranks_gather_the_sample(tmp_path):
    """The fast form (2 gloo processes, no synchronisation: method local, so that there is a spread): the folder
    rank 0 writes holds what one process holding both replicas measures from the same sample."""
    import torch.multiprocessing as mp

    from noloco.training.exchange import free_port

    mp.start_processes(_rank, args=(2, free_port(), str(tmp_path / "dist"), "local", 6), nprocs=2, join=True,
                       start_method="spawn")
    models = [_mlp(torch.float64) for _ in range(2)]
    inner = torch.optim.AdamW([p for m in models for p in m.parameters()], lr=1e-2)
    outer = noloco.OuterOptimizer(models, inner, inner_steps=H, seed=3, method="local")
    observer = noloco.Observer(outer, tmp_path / "one", outer_steps=6, lr=1e-2, sample=64, model="mlp-6-16-1")
    for step in range(6 * H):
        inner.zero_grad()
        sum(((m(x) - y) ** 2).mean() for m, (x, y) in
            ((m, _batch(i, step, torch.float64)) for i, m in enumerate(models))).backward()
        inner.step()
    observer.close()
    dist_run, one = noloco.read_run(tmp_path / "dist"), noloco.read_run(tmp_path / "one")
    assert dist_run.world_size == 2 and dist_run.finished and dist_run.result["flags"] == []
    for a, b in zip(dist_run.inputs, one.inputs, strict=True):
        for name, g in a["groups"].items():
            assert g["c"] == pytest.approx(b["groups"][name]["c"], rel=1e-9, abs=1e-15)
            assert g["spread"] == pytest.approx(b["groups"][name]["spread"], rel=1e-9, abs=1e-15)
    assert [r["weight_std"] for r in dist_run.metrics] == pytest.approx([r["weight_std"] for r in one.metrics],
                                                                        rel=1e-9)
    assert predict(tmp_path / "dist").rows[-1].predicted > 0


@pytest.mark.slow  # 4 processes: about 25 s on 2 cores
def test_one_replica_per_rank_writes_what_one_process_samples(tmp_path):
    """4 gloo processes, one replica each, the sample gathered: the folder rank 0 writes holds the inputs the
    batched run of the same replicas measures from the same sample (the same indices on every rank), and the
    advice reads it."""
    import torch.multiprocessing as mp

    from noloco.training.exchange import free_port

    mp.start_processes(_rank, args=(N, free_port(), str(tmp_path / "dist")), nprocs=N, join=True,
                       start_method="spawn")
    train_batched(tmp_path / "one", dtype=torch.float64, sample=64)
    dist_run, one = noloco.read_run(tmp_path / "dist"), noloco.read_run(tmp_path / "one")
    assert dist_run.world_size == N and dist_run.result["sampled"]["per_tensor"] == 64
    for a, b in zip(dist_run.inputs, one.inputs):
        for name, g in a["groups"].items():
            for key in ("spread", "c", "s2", "sum_var"):
                assert g[key] == pytest.approx(b["groups"][name][key], rel=1e-9, abs=1e-15), (name, key)
    assert [r["weight_std"] for r in dist_run.metrics] == pytest.approx([r["weight_std"] for r in one.metrics],
                                                                        rel=1e-9)
    assert predict(tmp_path / "dist").rows[-1].predicted > 0
    assert forecast(tmp_path / "dist").rows
    assert main(["llm", "predict", str(tmp_path / "dist"), "--forecast"]) == 0
    row = tune([tmp_path / "dist"], compute_seconds=0.01).rows[0]  # read; no loss was logged to rank on
    assert row.stability_margin > 0 and "no evaluation" in row.excluded


# ----------------------------------------------------------------- early warnings, each made by its fault

def test_replicas_that_did_not_start_equal(tmp_path):
    observer, _ = train_batched(tmp_path / "r", equal=False, steps=3)
    assert [f["flag"] for f in observer.flags] == ["unequal_start"]
    assert json.loads((tmp_path / "r" / "result.json").read_text())["flags"][0]["flag"] == "unequal_start"
    # sampled: 2 of the 96 coordinates of the first weight, so the sample may miss the one that differs; the
    # checksums of the whole tensors see it
    sampled, _ = train_batched(tmp_path / "s", equal=False, steps=3, sample=2)
    assert [f["flag"] for f in sampled.flags] == ["unequal_start"] and "0.weight" in sampled.flags[0]["message"]
    assert noloco.read_run(tmp_path / "s").metrics[0]["weight_std"] == 0.0  # the sample (15, 44) missed 20


def WrongSign(*args, **kwargs):
    """The bug DiLoCo implementations shipped: the pseudo-gradient phi - theta added where theta - phi is meant
    (the paper writes phi - theta with a minus in front; the minus got lost); the warnings study's planted fault."""
    from noloco.studies.warnings import wrong_sign_optimizer

    return wrong_sign_optimizer()(*args, **kwargs)


def test_a_pseudo_gradient_with_the_wrong_sign(tmp_path):
    observer, _ = train_batched(tmp_path / "r", outer_cls=WrongSign, steps=4)
    assert [f["flag"] for f in observer.flags] == ["wrong_sign"] and observer.flags[0]["outer_step"] == 1
    assert all(a < 0 for a in observer.alignments)
    right, _ = train_batched(tmp_path / "ok", steps=8)
    assert right.flags == [] and all(a > 0 for a in right.alignments)


def _noisy_quadratic(folder, beta):
    """Each replica's inner SGD reaches its own fresh noisy optimum in one step (c = 1 exactly)."""
    w = torch.nn.Parameter(torch.zeros(N, 500, dtype=torch.float64))
    inner = torch.optim.SGD([w], lr=0.5)
    outer = noloco.OuterOptimizer([w], inner, replicas=N, inner_steps=2, alpha=0.5, beta=beta, gamma=0.7)
    observer = noloco.Observer(outer, folder, outer_steps=24, lr=0.5, inner_optimizer="sgd")  # checks at 20 to 26
    g = torch.Generator().manual_seed(0)
    for step in range(48):
        target = torch.randn(N, 500, generator=g, dtype=torch.float64)
        inner.zero_grad()
        ((w - target) ** 2).sum().backward()
        inner.step()
    observer.close()
    return observer


def test_an_outer_step_that_cannot_converge(tmp_path):
    """beta 3 with alpha 0.5, gamma 0.7: the exact decay factor at c = 1 is 1.36; at the paper's beta 0.7, 0.5."""
    bad = _noisy_quadratic(tmp_path / "bad", 3.0)
    assert [f["flag"] for f in bad.flags] == ["unstable"] and bad.flags[0]["decay_factor"] > 1.2
    assert bad.flags[0]["flattest_c"] == pytest.approx(1.0, abs=0.15)
    spread = [r["weight_std"] for r in noloco.read_run(tmp_path / "bad").metrics]
    assert spread[-1] > 2 * spread[3]  # and it does not settle
    assert _noisy_quadratic(tmp_path / "good", 0.7).flags == []
    settled = [r["weight_std"] for r in noloco.read_run(tmp_path / "good").metrics]
    assert settled[-1] < 1.5 * settled[3]


def test_a_forecast_that_crosses_the_spread_budget(tmp_path, run_folder):
    folder, _ = run_folder
    at3 = forecast(folder, from_step=3)
    measured = noloco.read_run(folder).metrics[2]["weight_std"]
    peak = max(r.forecast for r in at3.rows)
    assert peak > 1.05 * measured  # this run's spread still grows after outer step 3
    budget = (peak + measured) / 2  # above the spread at step 2, below the forecast
    observer, _ = train_batched(tmp_path / "tight", spread_budget=budget)
    assert [f["flag"] for f in observer.flags] == ["spread_budget"]
    flag = observer.flags[0]
    assert flag["outer_step"] == 2 and flag["forecast"] > budget
    assert train_batched(tmp_path / "loose", spread_budget=10 * peak, steps=8)[0].flags == []


def test_bad_settings_are_named(tmp_path):
    models = [_mlp() for _ in range(2)]
    outer = noloco.OuterOptimizer(models, inner_steps=2)
    for kw, word in (({"lr": 0}, "lr"), ({"lr": 1e-3, "schedule": "linear"}, "schedule"),
                     ({"lr": 1e-3, "spread_budget": -1}, "spread_budget"), ({"lr": 1e-3, "sample": 1}, "sample")):
        with pytest.raises(ValueError, match=word):
            noloco.Observer(outer, tmp_path / "x", outer_steps=4, **kw)
    noloco.Observer(outer, tmp_path / "y", outer_steps=4, lr=1e-3).close()
    with pytest.raises(ValueError, match="already holds a run"):
        noloco.Observer(outer, tmp_path / "y", outer_steps=4, lr=1e-3)


def test_careless_use_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outer = noloco.OuterOptimizer([torch.zeros(2, 3)], replicas=2, inner_steps=2)
    # '' wrote the run into the working folder, 5 was a TypeError
    for folder in ("", 5):
        with pytest.raises(noloco.ConfigError, match="names no folder"):
            noloco.Observer(outer, folder, outer_steps=4, lr=1e-3)
    assert not (tmp_path / "result.json").exists()
    # a keyword named as the run's own setting replaced it in the folder (the advice read H 7 for H 2)
    with pytest.raises(noloco.ConfigError, match="inner_steps= is the run's own setting"):
        noloco.Observer(outer, tmp_path / "a", outer_steps=4, lr=1e-3, inner_steps=7)
    observer = noloco.Observer(outer, tmp_path / "b", outer_steps=4, lr=1e-3)
    observer.log(0, a=np.float32(1.5))  # a numpy float32 was 'not a number'
    with pytest.raises(noloco.ConfigError, match="is not a number"):  # was torch's RuntimeError
        observer.log(0, b=torch.ones(3))
    observer.close()  # before any outer step: read_run refused its empty inputs.jsonl ('train the run again')
    assert noloco.read_run(tmp_path / "b").metrics[0]["a"] == 1.5
    with pytest.raises(noloco.ConfigError, match=r"log\(\) after close\(\)"):  # was kept in memory, never written
        observer.log(1, a=2.0)


# ----------------------------------------------------------------- docs/own_run.md

def test_the_docs_page_runs(tmp_path):
    text = (ROOT / "docs" / "own_run.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        namespace = {"__name__": "__main__"}
        exec(compile(code, "docs/own_run.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    run = noloco.read_run(tmp_path / "my-run")
    assert run.finished and run.inputs and namespace["observer"].flags == []
    assert main(["llm", "predict", str(tmp_path / "my-run"), "--forecast"]) == 0


def test_diloco_and_local_runs_are_observed_without_a_warning(tmp_path):
    """n = N leaves the replicas equal after every outer step (nothing to forecast: the budget check skips it);
    n = 1 never averages. Neither is a fault."""
    for method in ("diloco", "local"):
        w = torch.nn.Parameter(torch.zeros(N, 100, dtype=torch.float64))
        inner = torch.optim.SGD([w], lr=0.1)
        outer = noloco.OuterOptimizer([w], inner, replicas=N, inner_steps=2, method=method)
        observer = noloco.Observer(outer, tmp_path / method, outer_steps=8, lr=0.1, inner_optimizer="sgd",
                                   spread_budget=1e-9 if method == "diloco" else 100.0)
        g = torch.Generator().manual_seed(0)
        for _ in range(16):
            inner.zero_grad()
            ((w - torch.randn(N, 100, generator=g, dtype=torch.float64)) ** 2).sum().backward()
            inner.step()
        observer.close()
        assert observer.flags == [], (method, observer.flags)
        spread = [r["weight_std"] for r in noloco.read_run(tmp_path / method).metrics]
        assert (max(spread) == 0.0) if method == "diloco" else spread[-1] > 0


def test_a_later_format_version_is_refused(run_folder, tmp_path):
    import shutil

    from noloco.infra.errors import DataError

    folder, _ = run_folder
    copy = tmp_path / "v2"
    shutil.copytree(folder, copy)
    result = json.loads((copy / "result.json").read_text())
    (copy / "result.json").write_text(json.dumps({**result, "format_version": 2}))
    with pytest.raises(DataError, match="format version 2"):
        noloco.read_run(copy)


def test_the_gap_reads_the_second_moment_the_observer_wrote(tmp_path, capsys):
    """A user's run has no harness checkpoint: the observer writes the inner AdamW's sum of sqrt(vhat) into
    result.json at close, and `noloco llm predict --gap` predicts from it (the sum checked by hand here)."""
    import json

    import noloco
    from noloco.cli import main

    torch.manual_seed(0)
    models = [torch.nn.Linear(8, 1) for _ in range(4)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    inner = torch.optim.AdamW([p for m in models for p in m.parameters()], lr=0.01, betas=(0.9, 0.95))
    outer = noloco.OuterOptimizer(models, inner, inner_steps=5)
    observer = noloco.Observer(outer, tmp_path / "run", outer_steps=6, lr=0.01, adam_beta2=0.95, warn_steps=0)
    x_val = torch.randn(64, 8)
    for step in range(30):
        inner.zero_grad()
        x = torch.randn(4, 16, 8)
        sum(((m(x[i]) - x[i].sum(1, keepdim=True)) ** 2).mean() for i, m in enumerate(models)).backward()
        inner.step()
        if (step + 1) % 10 == 0:
            with torch.no_grad():
                avg = [torch.stack(ps).mean(0) for ps in zip(*(m.parameters() for m in models))]
                target = x_val.sum(1, keepdim=True)
                mean_loss = sum(float(((m(x_val) - target) ** 2).mean()) for m in models) / 4
                avg_loss = float(((x_val @ avg[0].T + avg[1] - target) ** 2).mean())
            observer.log(outer.outer_done, val_loss_avg_model=avg_loss, val_loss_replicas_mean=mean_loss)
    observer.close()
    saved = json.loads((tmp_path / "run" / "result.json").read_text())["adam_second_moment"]
    by_hand = sum(float((st["exp_avg_sq"].double() / (1 - 0.95 ** float(st["step"]))).sqrt().sum())
                  for st in inner.state.values()) / 4
    assert saved["outer_step"] == 6 and saved["sum_sqrt_v"] == pytest.approx(by_hand, rel=1e-12)
    assert main(["llm", "predict", str(tmp_path / "run"), "--gap", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sum_sqrt_v"] == pytest.approx(by_hand, rel=1e-12) and report["predicted"] > 0
    # this run's config names no validation windows: the report says so instead of printing a default
    assert report["val_windows"] is None
    assert main(["llm", "predict", str(tmp_path / "run"), "--gap"]) == 0
    assert "validation windows not recorded in the run" in capsys.readouterr().out


def test_the_folder_written_at_every_step_holds_the_rows_in_memory(tmp_path):
    """Each inputs row is made into text once, in the writing thread: the files still equal the rows in memory
    (the losses logged after a row's step included), and a row the caller replaced is made into text again."""
    observer, _ = train_batched(tmp_path / "run", steps=6, write_every=1, warn_steps=0)

    def lines(name):
        return [json.loads(line) for line in (tmp_path / "run" / name).read_text().splitlines()]

    assert lines("inputs.jsonl") == json.loads(json.dumps(observer.inputs))
    assert lines("metrics.jsonl") == json.loads(json.dumps(observer._metric_rows()))
    assert all("val_loss_avg_model" in r for r in lines("metrics.jsonl")[1:])
    observer.inputs[2] = {**observer.inputs[2], "replaced": 1.0}
    observer._write(finished=True, wait=True)
    assert [r.get("replaced") for r in lines("inputs.jsonl")] == [None, None, 1.0, None, None, None]


def test_the_observer_benchmark_in_one_process():
    """`python -m noloco.benchmarks observer` at its smallest: every mode's cost as a record, formatted."""
    from noloco.benchmarks import observer as B

    result = B.bench(replicas=2, width=8, depth=1, inner_steps=1, outer_steps=12, sample=4)
    cost = B.ObserverCost.from_json(result["results"])
    assert list(cost.modes) == ["one process, exact", "one process, sampled 4"] and cost.n_params == 81
    assert all(m.outer_step_s > 0 and m.observer_s_early > 0 and m.ranks is None for m in cost.modes.values())
    assert cost.to_json() == result["results"] and "one process, sampled 4" in B.format_result(result)
