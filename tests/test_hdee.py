"""Domain-expert ensembles (noloco llm ensemble, noloco.studies.ensemble): the domain split, the FLOP
count against a hand count and torch's counter, one budget for every configuration, the directions of HDEE's
size and step allocations, the chains of branch-train-merge, the domain posterior and the cached prior,
resume == uninterrupted, bad input exits 2, the figure without data."""

import json
import math

import numpy as np
import pytest

from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")
pytestmark = needs_torch

from noloco.cli import main  # noqa: E402
from noloco.infra.errors import ConfigError  # noqa: E402
from noloco.infra.files import loads  # noqa: E402
from noloco.llm_check import data, domains  # noqa: E402
from noloco.llm_check.architecture import GPTConfig  # noqa: E402
from noloco.llm_check.config import build  # noqa: E402
from noloco.studies.ensemble.communication import communication  # noqa: E402
from noloco.studies.ensemble.evaluation import cached_log_prior, log_posterior, mixture_logprob  # noqa: E402
from noloco.studies.ensemble.plan import (BASELINES, CONFIGS, ENSEMBLES, EXPERT_UNIT, QUICK, Study,  # noqa: E402
                                          allocation, budget_report, chains_of, plan, tiers)

QUICK_ARGS = ["--quick", "--threads", "1", "--domains", "docs,web", "--experts", "2", "--eval-windows", "4"]


# ----------------------------------------------------------------- domains

def test_domain_split_is_deterministic_and_covers_every_file_once():
    names = [name for name, _ in data._documents()]
    split = domains.split()
    domains.split.cache_clear()
    data._documents.cache_clear()
    assert domains.split() == split  # recomputed from the files: the same split
    seen = [doc for parts in split.values() for doc in parts.train + parts.val]
    assert sorted(seen) == sorted(names) and len(seen) == len(set(seen))  # every document exactly once
    for name, parts in split.items():  # the corpus's own train/validation split, both parts non-empty
        assert parts.train and parts.val, name
        assert all(not data._is_val(d, 5) for d in parts.train) and all(data._is_val(d, 5) for d in parts.val)
    corpus = data.load_corpus()
    stats = {r.name: r for r in domains.statistics()}
    assert sum(r.train_bytes for r in stats.values()) == corpus.train_bytes
    assert sum(r.val_bytes for r in stats.values()) == len(corpus.val)
    assert set(domains.TRAINING) | set(domains.HELD_OUT) == set(domains.NAMES) and len(domains.NAMES) >= 12
    assert domains.HELD_OUT and not set(domains.TRAINING) & set(domains.HELD_OUT)
    assert all(0 < r.unigram_entropy < math.log(256) and r.zlib_bits_per_byte > 0 for r in stats.values())
    assert domains.domain_of("stdlib/email/mime/text.py") == "email" and domains.domain_of("pydoc_data/if") == "docs"
    assert domains.domain_of("stdlib/brand_new_module.py") == domains.FALLBACK


def test_a_domain_restricts_the_training_shard_and_the_validation_text(tmp_path):
    from noloco.llm_check.trainer import Trainer

    web = {r.name: r for r in domains.statistics()}["web"]
    trainer = Trainer(build("cpu-tiny", "ddp", replicas=1, domain="web", outer_steps=2), tmp_path, progress=False)
    assert trainer.corpus.train_bytes == web.train_bytes and len(trainer.corpus.val) == web.val_bytes
    assert trainer.corpus.sha256 == data.load_corpus().sha256  # the record still names the whole corpus
    both = domains.corpus("web,docs")
    assert both.train_bytes == web.train_bytes + domains.corpus("docs").train_bytes
    assert domains.corpus("train").train_bytes == sum(r.train_bytes for r in domains.statistics() if not r.held_out)


# ----------------------------------------------------------------- FLOPs

def test_train_step_flops_equal_a_hand_count():
    # width 8, 2 layers, ctx 16, vocab 256, 3 windows. Forward per token: per layer qkv 2*8*24, proj 2*8*8,
    # fc 2*8*32, fc2 2*32*8 (= 1536) and attention 2 * (2*16*8) (= 512); head 2*8*256 = 4096.
    forward = 2 * (1536 + 512) + 4096
    assert GPTConfig(ctx=16, layers=2, heads=2, width=8).train_step_flops(3) == 3 * 3 * 16 * forward == 1179648
    # an MLP of 20 hidden units instead of 32: per layer qkv 384, proj 128, fc and fc2 2*8*20 = 320 each
    narrow = 2 * (384 + 128 + 2 * 320 + 512) + 4096
    assert GPTConfig(ctx=16, layers=2, heads=2, width=8, mlp_hidden=20).train_step_flops(3) == 3 * 3 * 16 * narrow


@pytest.mark.parametrize("shape", [dict(ctx=16, layers=2, heads=2, width=8), dict(ctx=8, layers=1, heads=3, width=12),
                                   dict(ctx=12, layers=3, heads=2, width=16, stages=2),
                                   dict(ctx=8, layers=2, heads=2, width=8, mlp_hidden=20)])
def test_train_step_flops_equal_torchs_counter(shape):
    """torch.utils.flop_counter counts every matmul of a forward and backward pass (attention too under the
    math backend): the same number as the count from the shapes."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from noloco.llm_check.model import init_params, losses

    cfg = GPTConfig(**shape)
    params = init_params(cfg, 1, 0)
    for p in params.values():
        p.requires_grad_(True)
    windows = torch.randint(0, 256, (1, 3, cfg.ctx + 1))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        losses(params, windows, cfg).sum().backward()
    assert counter.get_total_flops() == cfg.train_step_flops(3)


SMALL = dict(domains=("docs", "web", "os", "text", "core", "encodings"), rounds=2, experts=2, seed_steps=45,
             expert_steps=45, replicas=6, inner_steps=7)


@pytest.mark.parametrize("study", [Study(), Study(**QUICK), Study(**SMALL), Study(**{**SMALL, "experts": 3})])
def test_every_configuration_spends_the_same_budget(study):
    """Each configuration's FLOPs, counted from the TrainConfigs of the runs it trains (each chain's seed model
    and experts), are the budget B = experts x (seed_steps + rounds x expert_steps) x F(base) exactly for the
    homogeneous ensemble, HDEE's two forms and (here) the baselines; the extension at most B and less than one
    step unit of its cheapest expert below it."""
    report = budget_report(study)
    base = study.step_flops()
    assert study.budget == study.experts * (study.seed_steps + study.rounds * study.expert_steps) * base
    for config in ENSEMBLES:
        finals = chains_of(study, config, study.seeds[0])
        spent = sum(r.flops for f in finals for r in f.lineage)
        assert spent == report.per_config[config].flops
        if config == "combined":
            unit = min(EXPERT_UNIT * f.train.model().train_step_flops(f.train.batch) for f in finals)
            assert 0 <= study.budget - spent < unit
        else:
            assert spent == study.budget, config
    for config in BASELINES:
        (run,) = [r for r in plan(study) if r.key == config and r.seed == study.seeds[0]]
        assert run.flops == report.per_config[config].flops <= study.budget
        assert study.budget - run.flops < run.train.inner_steps * run.train.replicas * base
        assert run.train.domain == study.mixture


@pytest.mark.parametrize("study", [Study(), Study(**QUICK), Study(**{**SMALL, "experts": 3})])
def test_allocation_directions_as_published(study):
    """Chains are ordered easiest tier first (the tiers cut the difficulty ranking). Size-heterogeneous: the MLP
    grows with the difficulty, every expert the same steps; step-heterogeneous: the same size, the harder tiers
    more steps; the combined extension: the MLP grows and the steps fall (its stated direction)."""
    from noloco.llm_check import domains as dom

    groups = tiers(study)
    assert sorted(d for g in groups for d in g) == sorted(study.domains)
    assert all(max(map(dom.difficulty, a)) <= min(map(dom.difficulty, b)) for a, b in zip(groups, groups[1:]))
    homog = allocation(study, "homogeneous")
    assert {c.mlp_hidden for c in homog} == {4 * study.width}
    assert {r.steps for c in homog for r in c.rounds} == {study.expert_steps}
    size, steps, combined = (allocation(study, k) for k in ("size-heterogeneous", "step-heterogeneous", "combined"))
    mlp = [c.mlp_hidden for c in size]
    assert mlp == sorted(mlp) and mlp[0] < 4 * study.width < mlp[-1]
    assert {r.steps for c in size for r in c.rounds} == {study.expert_steps}
    assert {c.mlp_hidden for c in steps} == {4 * study.width}
    per_chain = [c.rounds[0].steps for c in steps]
    assert per_chain == sorted(per_chain) and per_chain[0] < study.expert_steps < per_chain[-1]
    assert all(len({r.steps for r in c.rounds}) == 1 for c in steps)
    assert [c.mlp_hidden for c in combined] == mlp
    first = [c.rounds[0].steps for c in combined]
    assert first == sorted(first, reverse=True)
    bought = [study.expert_steps * study.step_flops() / study.step_flops(m) for m in (mlp[0], mlp[-1])]
    if bought[0] - bought[-1] >= 2 * EXPERT_UNIT:  # the sizes differ by at least two units of steps
        assert first[0] > first[-1]
    for kind in ENSEMBLES:  # every chain: its tier's domains, one per round, the seed phase the same length
        for k, c in enumerate(allocation(study, kind)):
            assert [r.domain for r in c.rounds] == groups[k][:study.rounds]
            assert c.seed_steps == study.seed_steps


def test_chains_branch_from_their_parents_and_share_the_medium_chain():
    """A chain's runs: its seed model on the mixture, then one expert per round, each the child of the one before;
    the medium chain is the same runs (one folder) in the homogeneous ensemble and in both heterogeneous ones."""
    study = Study()
    for kind in ENSEMBLES:
        for final in chains_of(study, kind, 0):
            seed, *experts = final.lineage
            assert seed.role == "seed" and seed.parent is None and seed.train.domain == study.mixture
            assert [e.role for e in experts] == ["expert"] * study.rounds
            assert all(e.parent is p for p, e in zip(final.lineage, experts))
            assert all(e.train.lr == study.expert_lr and e.train.domain == e.domain for e in experts)
    medium = {kind: chains_of(study, kind, 0)[1].key for kind in ENSEMBLES}
    assert len(set(medium.values())) == 1
    keys = [(r.seed, r.key) for r in plan(study)]
    assert len(keys) == len(set(keys))
    runs = plan(study)
    assert all(runs.index(r.parent) < runs.index(r) for r in runs if r.parent is not None)  # parents train first


def test_default_study_budget_is_exact_for_the_baselines():
    study = Study()
    report = budget_report(study)
    assert report.baseline_steps * study.replicas == study.experts * study.chain_steps
    assert all(report.per_config[c].relative_to_budget == 0 for c in CONFIGS if c != "combined")
    assert -1e-3 < report.per_config["combined"].relative_to_budget <= 0


# ----------------------------------------------------------------- posterior

def test_posterior_weights_sum_to_one_and_follow_bayes_rule():
    rng = np.random.default_rng(0)
    logp = np.log(rng.dirichlet(np.ones(5), size=(3, 4, 6))[..., 0])  # 3 experts, 4 segments, 6 bytes
    log_prior = np.log([0.5, 0.3, 0.2])
    log_w = log_posterior(logp, log_prior)
    assert np.allclose(np.exp(log_w).sum(0), 1.0, rtol=0, atol=1e-12)
    assert np.allclose(np.exp(log_w[:, :, 0]), np.exp(log_prior)[:, None])  # before any byte: the prior
    t = 4  # by hand: prior times the likelihood of the bytes before t, normalised
    joint = np.exp(log_prior)[:, None] * np.exp(logp[:, :, :t].sum(-1))
    assert np.allclose(np.exp(log_w[:, :, t]), joint / joint.sum(0))
    mix = mixture_logprob(logp, log_w)
    assert np.allclose(np.exp(mix), (np.exp(log_w) * np.exp(logp)).sum(0))
    uniform = mixture_logprob(logp, np.full((3, 1, 1), -math.log(3)))
    assert np.allclose(np.exp(uniform), np.exp(logp).mean(0))


def test_posterior_picks_the_expert_of_the_domain_the_text_comes_from():
    """Experts that are the byte frequencies of five training domains; text drawn from one of them (2 segments
    of 2 KiB each): the posterior ends on that expert, and the mixture's loss is within 0.05 nats per
    byte of that expert's own (the price of the first bytes, before the posterior has settled), while
    uniform mixing pays far more. (On real validation text the posterior of trained experts is measured
    by the study: hdee.json's posterior.)"""
    names = ("docs", "encodings", "web", "formats", "os")
    experts = []
    for name in names:
        counts = sum(np.bincount(doc, minlength=256) for doc in domains.corpus(name).train_docs) + 1
        experts.append(np.log(counts / counts.sum()))
    sizes = {r.name: r.train_bytes for r in domains.statistics()}
    log_prior = np.log([sizes[n] for n in names]) - math.log(sum(sizes[n] for n in names))
    rng = np.random.default_rng(0)
    for j, name in enumerate(names):
        text = rng.choice(256, size=(2, 2048), p=np.exp(experts[j]))
        logp = np.stack([e[text] for e in experts])
        log_w = log_posterior(logp, log_prior)
        assert np.allclose(np.exp(log_w).sum(0), 1.0, rtol=0, atol=1e-12)
        assert (np.exp(log_w[j, :, -1]) > 0.99).all(), (name, np.exp(log_w[:, :, -1]).round(3))
        own, mix = logp[j].mean(), mixture_logprob(logp, log_w).mean()
        uniform = mixture_logprob(logp, np.full((len(names), 1, 1), -math.log(len(names)))).mean()
        assert own - 0.05 < mix and uniform < mix, (name, own, mix, uniform)


def test_cached_prior_against_a_hand_computation():
    """Two experts, two segments of one byte each. Expert 0 gives the bytes probabilities 1/2 and 1/5, expert
    1 gives 1/4 and 2/5. From weights (1, 1): segment 0's posterior is (1/2, 1/4) normalised = (2/3, 1/3), the
    weights become 0.3 (1, 1) + (2/3, 1/3) = (29/30, 19/30); segment 1's posterior is (29/30 x 1/5, 19/30 x 2/5)
    normalised = (29/67, 38/67), the weights 0.09 (29/30, 19/30) + (29/67, 38/67); the prior is those weights
    normalised."""
    logp = np.log([[[1 / 2], [1 / 5]], [[1 / 4], [2 / 5]]])
    weights = 0.09 * np.array([29 / 30, 19 / 30]) + np.array([29 / 67, 38 / 67])
    expected = weights / weights.sum()
    got = np.exp(cached_log_prior(logp, 0.3))
    assert np.allclose(got, expected, rtol=1e-12, atol=0) and abs(got.sum() - 1) < 1e-12
    assert np.allclose(np.exp(cached_log_prior(logp[:, :1], 0.3)), np.array([0.3 + 2 / 3, 0.3 + 1 / 3]) / 1.6)
    # with segments that all favour expert 1, the prior moves to it, whatever it started from
    strong = np.log([[[0.01]] * 6, [[0.5]] * 6])
    assert np.exp(cached_log_prior(strong, 0.3))[1] > 0.99


# ----------------------------------------------------------------- communication

def test_bytes_sent_per_replica():
    m = 1000 * 4
    assert communication("noloco", 1000, 8, 100, 25).bytes_per_replica == 4 * 2 * m  # 4 outer steps, 2 m each
    assert communication("diloco", 1000, 4, 100, 25).bytes_per_replica == 4 * 2 * 3 / 4 * m  # ring: 2 (N-1)/N m
    assert communication("ddp", 1000, 4, 100, 25).bytes_per_replica == 100 * 2 * 3 / 4 * m
    assert communication("homogeneous", 1000, 4, 100, 25).bytes_per_replica == 0


# ----------------------------------------------------------------- the command

def test_resume_equals_an_uninterrupted_study(tmp_path, capsys):
    """--stop-after leaves every run at a checkpoint; --resume continues them to the same expert weights
    (bit-identical) and the same per-domain losses as a study that was never stopped."""
    args = QUICK_ARGS + ["--configs", "homogeneous,noloco", "--json"]
    assert main(["llm", "ensemble", *args, "--out", str(tmp_path / "cut"), "--stop-after", "1"]) == 0
    assert loads(capsys.readouterr().out)["unfinished"]
    assert main(["llm", "ensemble", *args, "--out", str(tmp_path / "cut"), "--resume"]) == 0
    cut = loads(capsys.readouterr().out)
    assert main(["llm", "ensemble", *args, "--out", str(tmp_path / "whole")]) == 0
    whole = loads(capsys.readouterr().out)
    subs = [r.folder("") for r in plan(Study(**whole["settings"]))]
    assert len(subs) == 4  # the seed model, two experts continued from it, noloco
    for sub in subs:
        a, b = (torch.load(tmp_path / run / sub / "ckpt.pt", weights_only=True) for run in ("cut", "whole"))
        assert a["outer_step"] == b["outer_step"] >= 2
        assert all(torch.equal(a["phi"][k], b["phi"][k]) for k in b["phi"]), sub
    assert cut["per_seed"] == whole["per_seed"] and cut["per_domain"] == whole["per_domain"]
    assert set(whole["per_domain"]["homogeneous"]) == {"docs", "web", *domains.HELD_OUT}
    assert whole["communication"]["homogeneous"]["bytes_per_replica"] == 0
    assert (tmp_path / "whole" / "hdee.json").exists()


@pytest.mark.parametrize("flags", [["--configs", "nope"], ["--domains", "gui"], ["--domains", "docs"],
                                   ["--domains", "web,web"], ["--expert-steps", "7"], ["--seeds", "a"],
                                   ["--seeds", "0,0"], ["--replicas", "3"], ["--width", "15"], ["--lr", "inf"],
                                   ["--resume", "--overwrite"], ["--threads", "0"], ["--segment", "3000"],
                                   ["--rounds", "2"], ["--experts", "0"], ["--prior-decay", "1"],
                                   ["--prior-segments", "3"], ["--seed-steps", "0"], ["--expert-lr", "0"]])
def test_bad_input_exits_2_before_any_work(tmp_path, capsys, flags):
    out = tmp_path / "out"
    assert main(["llm", "ensemble", *QUICK_ARGS, "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("noloco llm ensemble: error:") and len(err.strip().splitlines()) == 1, err
    assert not (out / "seed0").exists()


def test_a_folder_holding_a_study_needs_resume_or_overwrite(tmp_path, capsys):
    args = ["llm", "ensemble", *QUICK_ARGS, "--configs", "homogeneous", "--out", str(tmp_path)]
    assert main([*args, "--stop-after", "1"]) == 0
    assert main(args) == 2 and "--resume" in capsys.readouterr().err
    assert main([*args, "--resume", "--expert-steps", "30"]) == 2
    assert "other settings: expert_steps=20 (now 30)" in capsys.readouterr().err


def test_train_refuses_an_unknown_domain(capsys):
    assert main(["llm", "train", "--size", "cpu-tiny", "--domain", "nope", "--out", "x"]) == 2
    assert "domain='nope' is not allowed" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="named twice"):
        build("cpu-tiny", "noloco", domain="web,web")


def test_figure_without_data_names_the_command(tmp_path):
    import matplotlib.pyplot as plt

    from noloco.paper_figs import fig_hdee

    fig = fig_hdee.draw(fig_hdee.compute(str(tmp_path / "none.json")))
    assert any("noloco llm ensemble" in t.get_text() for t in fig.texts)
    assert not any(ax.axison for ax in fig.axes)
    plt.close(fig)


def test_figure_of_a_study_with_settings_out_of_range_is_the_placeholder(tmp_path):
    """The figure reads hdee.json with the study's own record, whose settings refuse a configuration it does not
    know (a ConfigError): the figure draws "no study" naming the reason rather than failing."""
    import matplotlib.pyplot as plt

    from noloco.paper_figs import fig_hdee

    doc = json.loads(fig_hdee.DEFAULT_DATA.read_text())
    doc["settings"]["configs"] = ["nonsense"]
    (tmp_path / "hdee.json").write_text(json.dumps(doc))
    data = fig_hdee.compute(str(tmp_path / "hdee.json"))
    assert "nonsense" in data["missing"]
    fig = fig_hdee.draw(data)
    assert not any(ax.axison for ax in fig.axes)
    plt.close(fig)


def test_the_shipped_study_is_consistent_with_the_code():
    """docs/data/hdee.json (the study docs/hdee.md reports): its budget and allocation are what the code
    computes for its settings, every configuration but the extension spent exactly the budget, its bytes are
    communication()'s, each domain's winner is the configuration with the lowest mean loss, and the domains
    where a heterogeneous ensemble beats the homogeneous one are those where its mean loss is lower."""
    from pathlib import Path

    from noloco.infra.files import dumps, read_json
    from noloco.studies.ensemble.plan import baseline_steps

    path = Path(__file__).resolve().parents[1] / "docs" / "data" / "hdee.json"
    if not path.exists():
        pytest.skip("no shipped study")
    rep = read_json(path)
    study = Study(**rep["settings"])
    if rep["corpus_sha256"] != data.load_corpus().sha256:  # the domains' texts set the plan (their difficulty)
        pytest.skip(f"the shipped study was made on Python {rep['python']}'s corpus; this Python's differs")
    assert loads(dumps(budget_report(study))) == rep["budget"]
    assert all(v["flops"] == study.budget for c, v in rep["budget"]["per_config"].items() if c != "combined")
    for c in study.configs:
        steps = baseline_steps(study) if c in BASELINES else 0
        assert loads(dumps(communication(c, study.model().n_params(), study.replicas, steps, study.inner_steps))) \
            == rep["communication"][c]
    for d, w in rep["winners"].items():
        means = {c: rep["per_domain"][c][d]["mean"] for c in study.configs}
        assert w["best"] == min(means, key=means.get)
        assert all(abs(sum(s[c][d] for s in rep["per_seed"]) / len(rep["per_seed"]) - means[c]) < 1e-12 for c in means)
    for name, row in rep["against_homogeneous"].items():
        assert row["lower_in"] == [d for d in rep["evaluated"] if rep["per_domain"][name][d]["mean"]
                                   < rep["per_domain"][row["against"]][d]["mean"]], name


def test_the_shipped_study_reads_as_records_and_formats_its_tables():
    """docs/data/hdee.json read once into its record: every evaluated domain has a row, its winner starred, and
    each domain is listed once under the lowest perplexity."""
    from pathlib import Path

    from noloco.infra.files import read_json
    from noloco.studies.ensemble.records import EnsembleReport, Summary
    from noloco.studies.ensemble.report import format_report

    rep = EnsembleReport.from_json(read_json(Path(__file__).resolve().parents[1] / "docs" / "data" / "hdee.json"))
    assert isinstance(rep.per_domain["homogeneous"]["docs"], Summary) and rep.settings.seeds == (0, 1, 2)
    text = format_report(rep)
    rows = {line.split(" (")[0]: line for line in text.splitlines() if line.split(" (")[0] in rep.evaluated}
    assert set(rows) == set(rep.evaluated) and all(line.count("*") == 1 for line in rows.values())
    listed = text.split("lowest perplexity")[1].replace("?", "")
    assert sorted(d for line in listed.splitlines()[1:] for d in line.split(None, 1)[1].split(", ")) \
        == sorted(rep.evaluated)


def test_an_evaluation_above_the_memory_budget_is_refused_before_training(tmp_path, capsys):
    """10^8 evaluation windows per domain: exit 3 with one line, before any run is trained."""
    assert main(["llm", "ensemble", *QUICK_ARGS[:3], "--eval-windows", "100000000", "--out", str(tmp_path / "big")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "memory" in err[0] and not (tmp_path / "big").exists()


def test_every_domain_keeps_validation_text_on_another_python(monkeypatch):
    """Python 3.12's standard library gives the language domain no document in the hash rule's validation
    buckets; the split then moves that domain's highest-bucket document to validation, in the corpus and in the
    domains alike (on 3.11 a stdlib without the domain's validation files stands for 3.12; on 3.12 it is the
    stdlib itself, and nothing is dropped)."""
    real = data._documents()
    language = [name for name, _ in real if domains.domain_of(name) == "language"]
    dropped = {name for name in language if data._bucket(name) >= 95}
    assert len(language) > len(dropped) + 1
    fewer = tuple((name, text) for name, text in real if name not in dropped)
    for cached in (data.validation_names, domains.split, data.load_corpus):
        cached.cache_clear()
    monkeypatch.setattr(data, "_documents", lambda: fewer)
    try:
        val = domains.split()["language"].val
        assert len(val) == 1 and data._bucket(val[0]) == max(data._bucket(n) for n in language if n not in dropped)
        assert all(parts.val and parts.train for parts in domains.split().values())
        assert val[0] in data.validation_names(5)
    finally:
        for cached in (data.validation_names, domains.split, data.load_corpus):
            cached.cache_clear()
