"""The tuner from one pilot: its final-loss interval in units of the pilot's last-quarter loss drop
(noloco.advice.fork) on constructed run folders, and the fresh judgement's rule (noloco.studies.tune_fresh) on a
fixture of a pilot, its 28 forks and a grid of 29 settings in the one-pilot layout."""

import dataclasses
import math

import pytest

from noloco.advice import fork as K
from noloco.advice.record import read_run
from noloco.infra.errors import DataError
from noloco.infra.files import dumps, read_json, write_json
from noloco.studies import one_pilot as O
from noloco.studies import tune_fresh as TF
from noloco.theory.config import OuterConfig
from test_forecast import config, write_run


def _pilot_loss(t: int) -> float:
    return 3.0 - 0.01 * t  # the fixture pilot: 0.08 nats over its last quarter (outer steps 24 to 32)


def _run(path, name: str, losses: dict, steps: int | None = None, **cfg_extra):
    """A run folder of ``name``'s setting (one-pilot study) with inputs, weight_std 1e-3 at every outer step and
    the averaged model's validation loss at the outer steps of ``losses``."""
    s = O.setting(name)
    outer = OuterConfig(replicas=s.replicas, group_size=s.group_size, alpha=s.alpha, beta=s.beta, gamma=s.gamma)
    cfg = config(outer=outer, inner_steps=s.inner_steps, outer_steps=s.outer_steps, schedule="constant",
                 warmup=20)
    steps = steps or cfg.outer_steps
    write_run(path, cfg, measured_to=steps)
    rows = [{"outer_step": t, "weight_std": 1e-3, **({"val_loss_avg_model": losses[t],
                                                     "val_loss_replicas_mean": losses[t] + 0.01} if t in losses else {})}
            for t in range(1, steps + 1)]
    (path / "metrics.jsonl").write_text("".join(dumps(r) + "\n" for r in rows))
    result = read_json(path / "result.json")
    write_json(path / "result.json", {**result, "config": {**result["config"], **cfg_extra}, "n_params": 10_000,
                                      "wall_s": 32.0, "outer_steps_done": steps, "finished": steps == cfg.outer_steps})
    return path


def _pilot(path, losses=None):
    return _run(path, O.PILOT, losses or {t: _pilot_loss(t) for t in range(4, 33, 4)})


def _fork(out, pilot, name: str, lead: float, seed: int = TF.PILOT_SEED):
    H = O.setting(name).inner_steps
    end = O.fork_len(name) // 10  # the pilot's outer step (H 10) where the fork ends
    return _run(O.fork_folder(out, "fx", name, seed), name, {O.fork_len(name) // H: _pilot_loss(end) + lead},
                steps=O.fork_len(name) // H, fork_of=str(pilot), fork_at=O.FORK_AT, fork_len=O.fork_len(name))


def test_the_interval_constants_are_the_development_quantiles_rounded_outward():
    q = TF.interval_per_drop(TF.read_development())
    assert q.predictions == 168 and set(q.by_family) == {"cpu-tiny", "llama"}
    assert K.LOSS_ERROR_PER_DROP == (math.floor(q.pooled[0] * 100) / 100, math.ceil(q.pooled[1] * 100) / 100)


def test_the_loss_interval_is_the_pilots_last_quarter_drop_times_its_quantiles(tmp_path):
    pilot = _pilot(tmp_path / "pilot")
    rep = K.fork_loss(_fork(tmp_path, pilot, "a0.3_b0.9_H10", -0.05))
    drop = _pilot_loss(24) - _pilot_loss(32)
    assert rep.pilot_drop == pytest.approx(drop, abs=1e-12)
    assert rep.predicted == pytest.approx(_pilot_loss(32) - K.LOSS_GAIN * 0.05, abs=1e-12)
    assert rep.low - rep.predicted == pytest.approx(K.LOSS_ERROR_PER_DROP[0] * drop, abs=1e-12)
    assert rep.high - rep.predicted == pytest.approx(K.LOSS_ERROR_PER_DROP[1] * drop, abs=1e-12)
    # a pilot twice as far from settled: the interval twice as wide, the prediction unchanged
    steep = _pilot(tmp_path / "steep", {**{t: _pilot_loss(t) for t in range(4, 25, 4)}, 28: 2.64, 32: 2.60})
    assert K.loss_interval(read_run(steep), 0.0) == pytest.approx(
        (K.LOSS_ERROR_PER_DROP[0] * 0.16, K.LOSS_ERROR_PER_DROP[1] * 0.16), abs=1e-12)


@pytest.mark.parametrize("losses, why", [({24: 2.7, 32: 2.75}, "did not fall"), ({32: 2.7}, "three quarters")])
def test_a_pilot_without_a_falling_last_quarter_gives_no_interval(tmp_path, losses, why):
    with pytest.raises(DataError, match=why):
        K.last_quarter_drop(read_run(_pilot(tmp_path / "pilot", losses)))


def test_the_fresh_judgement_holds_only_within_the_upper_half_width_and_below_the_median(tmp_path):
    """28 forks whose leads order the settings; the grid's losses then put the pick 0.095 nats (inside the upper
    half-width 2.33 x 0.08) above the best, below the median: holds; 0.25 above: not; a setting missing: no verdict."""
    pilot = _pilot(O.folder(tmp_path, "fx", O.PILOT, TF.PILOT_SEED))
    leads = {n: 0.01 * i for i, n in enumerate(O.FORKED)}
    leads["a0.3_b0.9_H10"] = -0.08  # the pick
    for name, lead in leads.items():
        _fork(tmp_path, pilot, name, lead)
    report = TF._report(tmp_path, "fx")  # the tuner's report from the 28 forks (read once: seconds)
    assert TF.grid_order(tmp_path, "fx", report)[0] == "a0.3_b0.9_H10"

    def grid(pick: float, best: float, step: float = 0.01):
        losses = {n: 2.70 + step * i for i, n in enumerate(O.JUDGED)}
        for n, v in {**losses, "a0.3_b0.9_H10": pick, "g1": best}.items():
            _run(O.folder(tmp_path, "fx", n, TF.JUDGED_SEED), n, {O.setting(n).outer_steps: v})
        return TF.judge(tmp_path, "fx", report)

    row = grid(2.695, 2.60)
    assert (row.pick, row.rank, row.best, row.complete) == ("a0.3_b0.9_H10", 2, "g1", True)
    assert row.high - row.predicted == pytest.approx(2.33 * 0.08) and row.holds is True
    assert row.inside_own_interval[1] == 29
    assert grid(2.695, 2.45).holds is False  # 0.25 nats above the best: beyond the upper half-width
    row = grid(2.75, 2.69, step=0.001)  # within the half-width of the best, but above the median
    assert row.within_interval_of_best and not row.better_than_median and row.holds is False
    (O.folder(tmp_path, "fx", "a0.7_b0.9_H20", TF.JUDGED_SEED) / "result.json").unlink()
    row = TF.judge(tmp_path, "fx", report)
    assert row.complete is False and row.missing == ["a0.7_b0.9_H20"] and row.holds is None
    assert "not judged, missing a0.7_b0.9_H20" in TF.format_report(dataclasses.replace(TF.evaluate(tmp_path, families=()),
                                                                                tuner=[row]))


def test_the_judgement_reads_the_seeds_it_is_given(tmp_path):
    """A pilot of seed 18 and a grid of seed 19: judged with ``seeds=(18, 19)``, not found under the defaults; the
    command line takes the pair and refuses a seed used twice."""
    import argparse

    from noloco.cli.study_table import _seed_pair
    from noloco.studies.families import seeded_name

    seeds = (18, 19)
    pilot = _pilot(O.folder(tmp_path, "fx", O.PILOT, 18))
    for i, name in enumerate(O.FORKED):
        _fork(tmp_path, pilot, name, 0.01 * i, seed=18)
    for i, n in enumerate(O.JUDGED):
        _run(O.folder(tmp_path, "fx", n, 19), n, {O.setting(n).outer_steps: 2.70 + 0.01 * i})
    assert TF.judge(tmp_path, "fx") is None  # no pilot of the default seed
    row = TF.judge(tmp_path, "fx", seeds=seeds)
    assert (row.pilot_seed, row.judged_seed, row.complete, row.settings) == (18, 19, True, 29)
    assert seeded_name("tune_fresh.json", seeds, TF.SEEDS) == "tune_fresh_s18_s19.json"
    assert seeded_name("tune_fresh.json", [5, 6], TF.SEEDS) == "tune_fresh.json"
    assert _seed_pair("18,19") == seeds
    for bad in ("18", "18,18", "a,b", "-1,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            _seed_pair(bad)


@pytest.mark.slow
@pytest.mark.torch
def test_the_fresh_study_reproduces_its_committed_report(tmp_path):
    """`noloco llm study tune-fresh` from nothing (about an hour on two busy cores): each family's pick and verdict
    in docs/data/tune_fresh.json come out again."""
    from pathlib import Path

    committed = read_json(Path(__file__).parents[1] / "docs" / "data" / "tune_fresh.json")
    report = TF.run_study(tmp_path).to_json()
    assert [(r["family"], r["pick"], r["holds"]) for r in report["tuner"]] == \
        [(r["family"], r["pick"], r["holds"]) for r in committed["tuner"]]
