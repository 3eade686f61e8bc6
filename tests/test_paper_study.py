"""The GPT part of the paper audit (noloco/studies/paper.py, paper_figs/fig_paper_gpt.py): the quick study end to
end (runs reused, the JSON's shape, the tables, the figure), Pearson's r and the trend rules on examples worked
by hand, the tables' arithmetic on made-up runs, and the exit codes."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from noloco.advice.run_rows import MetricsRow, RunResult
from noloco.infra.files import loads
from noloco.studies import paper as paper_study
from noloco.cli import main as cli_main
from noloco.studies.paper import QUICK, at_or_below, grows, pearson
from noloco.studies.seeds import SeedRun
from noloco.studies.reports import PaperGptReport


def main(argv):
    """The study through its command, ``noloco llm study paper``."""
    return cli_main(["llm", "study", "paper", *argv])


# ----------------------------------------------------------------- statistics by hand

def test_pearson_on_hand_worked_examples():
    # x = 1, 2, 3; y = 2, 4, 7: deviations (-1, 0, 1) and (-7/3, -1/3, 8/3); sum of products 5, sums of squares
    # 2 and 114/9, so r = 5 / sqrt(2 * 114 / 9) = 15 / sqrt(228)
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(15 / math.sqrt(228), rel=1e-12)
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(0.993399267798783, rel=1e-12)
    assert pearson([1, 2, 3, 4], [8, 6, 4, 2]) == pytest.approx(-1.0)
    # scale and shift do not change r (Fig 3B normalises the spread by its maximum)
    assert pearson([0.1, 0.4, 0.2], [3, 9, 4]) == pytest.approx(pearson([1, 4, 2], [3 + 5, 9 + 5, 4 + 5]))
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3])) and math.isnan(pearson([1], [2]))
    with pytest.raises(ValueError, match="one length"):
        pearson([1, 2, 3], [1, 2])


def test_trend_rules_on_hand_worked_examples():
    # (1, 2, 3): mean 2, sd 1, SE 1/sqrt 3 = 0.577: 2 > 1.155, growth
    g = grows([1, 2, 3])
    assert g.mean == pytest.approx(2) and g.se == pytest.approx(1 / math.sqrt(3)) and g.holds
    # (1, -1, 3): mean 1, sd 2, SE 1.155: 1 < 2.31, no growth shown
    assert not grows([1, -1, 3]).holds
    assert grows([0.5, 0.5, 0.5]).holds and not grows([0, 0, 0]).holds and not grows([-3, -2, -1]).holds
    # at or below: noloco - diloco <= 2 SE; below: < -2 SE
    assert at_or_below([0, 0, 0]).holds and not at_or_below([0, 0, 0]).below         # identical runs: at
    assert not at_or_below([1, 2, 3]).holds                                           # 2 > 2 x 0.577: above
    same = at_or_below([1, -1, 3])
    assert same.holds and not same.below                                              # 1 <= 2.31: at
    assert at_or_below([-1, -2, -3]).below and at_or_below([-1, -2, -3]).holds
    # the boundary: mean exactly 2 SE is "at", exactly -2 SE is not "below"
    x = np.array([1.0, 1.0, 1.0, 5.0])  # mean 2, sd sqrt(12 / 3) = 2, SE 2 / sqrt 4 = 1: mean = 2 SE, exactly
    assert at_or_below(x).holds and not grows(x).holds
    assert not at_or_below(-x).below


def _run(ppl: float, loss_avg: float = 2.0) -> SeedRun:
    cfg = paper_study._config(QUICK, "noloco", 2, 1, 0)
    row = MetricsRow(outer_step=1, perplexity=ppl, val_loss_avg_model=loss_avg, val_loss_replicas_mean=math.log(ppl))
    return SeedRun(cfg, Path("unused"), RunResult(config=cfg.as_dict()), [row])


def test_table_gaps_and_verdicts_on_made_up_runs():
    """ddp 10 everywhere; diloco 11 then 12 (gaps 10 % and 20 %); noloco 0.1 below diloco with a spread."""
    plan = dataclasses.replace(QUICK, dp=(2, 4), pp=(1,), paper_cell=(4, 1))
    seeds = (0, 1, 2)
    runs = {"ddp-dp2-pp1": [_run(10) for _ in seeds], "ddp-dp4-pp1": [_run(10) for _ in seeds],
            "diloco-dp2-pp1": [_run(11 + 0.01 * s) for s in seeds], "diloco-dp4-pp1": [_run(12 + 0.02 * s) for s in seeds],
            "noloco-dp2-pp1": [_run(10.9 + 0.01 * s) for s in seeds],
            "noloco-dp4-pp1": [_run(12 + 0.02 * s + (0.3 if s == 0 else -0.3)) for s in seeds],
            "diloco-paper-dp4-pp1": [_run(12.5) for _ in seeds]}
    t = paper_study.table2(runs, plan)
    gap = t.gap_to_ddp["diloco-pp1"]
    assert [g.mean for g in gap.gap_percent] == pytest.approx([10.1, 20.2])
    assert gap.largest_minus_smallest.mean == pytest.approx(10.1) and gap.largest_minus_smallest.holds
    cells = {c.dp: c for c in t.cells}
    assert cells[2].noloco_minus_diloco.mean == pytest.approx(-0.1)
    assert cells[2].noloco_minus_diloco.below                             # -0.1 with SE 0: below
    d4 = cells[4].noloco_minus_diloco                                     # +0.3, -0.3, -0.3: mean -0.1, SE 0.2
    assert d4.mean == pytest.approx(-0.1) and d4.se == pytest.approx(0.2) and d4.holds and not d4.below
    assert cells[4].paper is None  # the paper has no (4, 1) cell of the Small model
    pc = t.paper_configs
    assert pc.noloco_minus_diloco.mean == pytest.approx(11.92 - 12.5) and pc.noloco_minus_diloco.below


# ----------------------------------------------------------------- the quick study end to end

def test_quick_study_end_to_end(tmp_path, capsys):
    import matplotlib.pyplot as plt
    from test_figs import legibility_problems

    from noloco.paper_figs import fig_paper_gpt
    from noloco.paper_figs.run import FIGURES

    assert main(["--quick", "--seeds", "2", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    rep = PaperGptReport.from_json(loads((tmp_path / "paper_gpt.json").read_text()))
    assert paper_study.format_report(rep) in table
    assert rep.schema == paper_study.SCHEMA and rep.settings.seeds == [0, 1]
    assert rep.settings.runs == 2 * len(paper_study.jobs(QUICK))
    steps = QUICK.run["outer_steps"]
    f3 = rep.fig3b
    assert len(f3.step) == len(f3.lr) == len(f3.weight_std_normalised.mean) == steps
    assert max(f3.weight_std_normalised.mean) <= 1 and set(f3.pearson_by_setting) == {
        f"dp{d}-pp{p}" for d in QUICK.dp for p in QUICK.pp}
    assert -1 <= f3.pearson.theta_std.mean <= 1
    f4 = rep.fig4
    assert len(f4.weight_std_ratio.mean) == len(f4.perplexity_ratio.mean) == steps
    assert np.shape(f4.weight_std_ratio_per_stage.mean) == (steps, QUICK.fig4[1])
    cells = rep.table2.cells
    assert len(cells) == len(QUICK.dp) * len(QUICK.pp)
    for c in cells:
        assert {m: c.method(m).routing for m in ("ddp", "diloco", "noloco")} == {
            "ddp": "fixed", "diloco": "fixed", "noloco": "random" if c.pp > 1 else "fixed"}
        assert all(len(c.method(m).perplexity.values) == 2 for m in ("ddp", "diloco", "noloco"))
    assert rep.table2.paper_configs.diloco.inner_steps == QUICK.paper_diloco.inner_steps
    assert rep.table2.paper_configs.diloco.alpha == 0.3
    # a second call trains nothing: every run is reused
    stamp = (tmp_path / "noloco-dp4-pp2" / "seed0" / "ckpt.pt").stat().st_mtime_ns
    assert main(["--quick", "--seeds", "2", "--out", str(tmp_path), "--json"]) == 0
    again = loads(capsys.readouterr().out)
    assert (tmp_path / "noloco-dp4-pp2" / "seed0" / "ckpt.pt").stat().st_mtime_ns == stamp
    assert PaperGptReport.from_json(again).table2.cells == rep.table2.cells
    # the figure draws from the study's JSON, legibly
    assert "paper_gpt" in FIGURES
    fig = fig_paper_gpt.draw(fig_paper_gpt.compute(str(tmp_path / "paper_gpt.json")))
    problems = legibility_problems(fig)
    assert len([ax for ax in fig.axes if ax.has_data()]) == 3
    plt.close(fig)
    assert not problems, "\n".join(problems)


def test_figure_without_data_says_which_command_makes_it(tmp_path):
    import matplotlib.pyplot as plt
    from test_figs import legibility_problems

    from noloco.paper_figs import fig_paper_gpt

    # a long folder (a test worker's under pytest-xdist is longer) stays on the canvas too
    deep = tmp_path / ("a-long-folder-name-" * 6) / "none.json"
    fig = fig_paper_gpt.draw(fig_paper_gpt.compute(str(deep)))
    assert any("noloco llm study paper" in t.get_text() for t in fig.texts)
    assert not legibility_problems(fig) and not any(ax.axison for ax in fig.axes)
    plt.close(fig)


# ----------------------------------------------------------------- exit codes

@pytest.mark.parametrize("argv, message", [(["--seeds", "1"], "at least 2 seeds"),
                                           (["--threads", "0"], "threads=0"),
                                           (["--out", ""], "names no folder"),
                                           (["--seeds", "two"], "invalid int value")])
def test_bad_input_exits_2_before_any_work(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.setattr(paper_study, "train_all", lambda *a, **k: pytest.fail("trained on bad input"))
    argv = argv if "--out" in argv else argv + ["--out", str(tmp_path / "x")]
    assert main(argv + ["--quick"]) == 2
    assert message in capsys.readouterr().err


def test_interrupt_exits_130_and_says_finished_runs_are_reused(tmp_path, capsys, monkeypatch):
    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(paper_study, "train_all", stop)
    assert main(["--quick", "--out", str(tmp_path)]) == 130
    assert "finished runs are kept and reused by the same command" in capsys.readouterr().err
