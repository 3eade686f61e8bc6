"""`noloco figs --quick` regenerates every figure, and every PNG is a valid, non-blank
image of the house size; a second run redraws from the cache. Each figure, drawn at gallery
size, keeps its text on the canvas and apart, and labels both axes of every panel with data."""

import numpy as np
import pytest

from noloco.cli import main
from noloco.paper_figs import style
from noloco.paper_figs.run import FIGURES, make


@pytest.fixture(scope="module")
def figs(tmp_path_factory):
    """(out, cache, LLM runs) of `noloco figs --quick`, the LLM figure drawn from synthetic runs."""
    out, cache, runs = (tmp_path_factory.mktemp(name) for name in ("figs", "figs-cache", "llm-runs"))
    _llm_runs(runs)
    assert main(["figs", "--quick", "--out", str(out), "--cache", str(cache), "--llm-runs", str(runs)]) == 0
    return out, cache, runs


@pytest.mark.parametrize("name", FIGURES)
def test_png_valid_non_blank_expected_size(figs, name):
    from PIL import Image

    out = figs[0]
    path = out / f"{name}.png"
    with Image.open(path) as image:
        image.verify()                   # a valid PNG, not truncated
    with Image.open(path) as image:
        assert image.size == (round(style.SIZE[0] * style.DPI), round(style.SIZE[1] * style.DPI))
        grey = np.asarray(image.convert("L"), dtype=float)
    ink = grey < 200                     # pixels that are not (nearly) white
    assert grey.std() > 10 and 0.02 < ink.mean() < 0.9, (grey.std(), ink.mean())
    # drawn all over, not only a corner: ink in every quarter of the image
    h, w = ink.shape
    for quarter in (ink[: h // 2, : w // 2], ink[: h // 2, w // 2:], ink[h // 2:, : w // 2], ink[h // 2:, w // 2:]):
        assert quarter.mean() > 0.005
    assert (out / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"


def test_second_run_reads_the_cache(tmp_path):
    first = make("transient", quick=True, out=tmp_path, cache_dir=tmp_path / "cache")
    second = make("transient", quick=True, out=tmp_path, cache_dir=tmp_path / "cache")
    assert not first["cached"] and second["cached"] and (tmp_path / "transient.png").exists()


def test_llm_figure_says_when_no_run_is_cached(tmp_path):
    from noloco.paper_figs import fig_llm

    data = fig_llm.compute(str(tmp_path / "nothing-here"))
    assert data["settings"] == []
    fig = fig_llm.draw(data)
    assert any("no cached LLM run" in t.get_text() for t in fig.texts)
    assert not legibility_problems(fig) and not any(ax.axison for ax in fig.axes)  # no empty axes
    __import__("matplotlib.pyplot").pyplot.close(fig)


def test_unknown_figure_exits_2(capsys):
    assert main(["figs", "--only", "nope"]) == 2
    assert "only='nope' is not allowed; allowed: stability" in capsys.readouterr().err


def test_every_script_states_its_claim():
    from noloco.paper_figs.run import module

    for name in FIGURES:
        doc = module(name).__doc__
        assert doc and doc.startswith("Claim:"), name


# ----------------------------------------------------------------- legibility at gallery size

def _drawn_tick_labels(fig):
    """(every tick label, those matplotlib draws: of ticks inside the view)."""
    every, drawn = set(), set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            slack = 1e-9 * (hi - lo)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                every |= {tick.label1, tick.label2}
                if lo - slack <= tick.get_loc() <= hi + slack:
                    drawn |= {tick.label1, tick.label2}
    return every, drawn


def _boxes(fig):
    """(name, window extent, owner, artist) of every drawn text, text box and legend, after a
    draw; a legend owns its texts."""
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    every, drawn = _drawn_tick_labels(fig)
    legends = [leg for leg in fig.findobj(Legend) if leg.get_visible()]
    owner = {t: leg for leg in legends for t in [*leg.get_texts(), leg.get_title()]}
    boxes = [("legend", leg.get_window_extent(renderer), leg, leg) for leg in legends]
    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip() and (t not in every or t in drawn):
            boxes.append((repr(t.get_text()), t.get_window_extent(renderer), owner.get(t, t), t))
            if t.get_bbox_patch() is not None:
                boxes.append((f"box of {t.get_text()!r}", t.get_bbox_patch().get_window_extent(renderer), t, t))
    return boxes


def legibility_problems(fig) -> list:
    """What a reader of the PNG would miss: text past the canvas or too small to read, texts and
    legends over each other, a panel with data but without an x- or a y-label or without two
    labelled ticks on an axis."""
    from matplotlib.text import Text

    canvas = fig.bbox
    boxes = _boxes(fig)
    drawn = _drawn_tick_labels(fig)[1]
    problems = [f"{name} extends past the canvas (x {b.x0:.0f}..{b.x1:.0f}, y {b.y0:.0f}..{b.y1:.0f} on "
                f"{canvas.width:.0f} x {canvas.height:.0f} px)"
                for name, b, _, _ in boxes
                if b.x0 < canvas.x0 - 1 or b.y0 < canvas.y0 - 1 or b.x1 > canvas.x1 + 1 or b.y1 > canvas.y1 + 1]
    problems += [f"{name} is set in {t.get_fontsize():g} pt, below {style.MIN_FONT:g}"
                 for name, _, _, t in boxes if isinstance(t, Text) and t.get_fontsize() < style.MIN_FONT]
    for i, (name, b, own, _) in enumerate(boxes):
        for other, c, own2, _ in boxes[i + 1:]:
            if own is not own2 and min(b.x1, c.x1) - max(b.x0, c.x0) > 1 and min(b.y1, c.y1) - max(b.y0, c.y0) > 1:
                problems.append(f"{name} overlaps {other}")
    labelled = {axis: [t for t in axis.get_majorticklabels() + axis.get_minorticklabels()
                       if t.get_visible() and t.get_text().strip() and t in drawn]
                for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)}
    for ax in fig.axes:
        if ax.get_visible() and ax.axison and ax.has_data() and ax.get_label() != "<colorbar>":
            for axis, shared in (("x", ax.get_shared_x_axes()), ("y", ax.get_shared_y_axes())):
                siblings = shared.get_siblings(ax)
                if not any(getattr(a, f"get_{axis}label")().strip() for a in siblings):
                    problems.append(f"panel {ax.get_title()!r} has data but no {axis}-label")
                if max(len(labelled[getattr(a, f"{axis}axis")]) for a in siblings) < 2:
                    problems.append(f"panel {ax.get_title()!r}: fewer than two labelled {axis} ticks")
    return problems


def _data(name, cache, options=None):
    """The figure's data as `noloco figs --quick` cached it (or reads it, for an uncached figure)."""
    from noloco.infra.cache import cached
    from noloco.infra.files import jsonable
    from noloco.paper_figs.run import module

    m = module(name)
    params = m.params(True, **(options or {}))
    if getattr(m, "CACHED", True):
        return cached(f"figure-{name}", params, lambda: m.compute(**params), directory=cache)[0]
    return jsonable(m.compute(**params))


@pytest.mark.parametrize("name", FIGURES)
def test_figure_is_legible_at_gallery_size(figs, name):
    import matplotlib.pyplot as plt

    from noloco.paper_figs.run import module

    fig = module(name).draw(_data(name, figs[1], {"runs": str(figs[2])} if name == "llm" else None))
    assert tuple(fig.get_size_inches()) == style.SIZE
    problems = legibility_problems(fig)
    plt.close(fig)
    assert not problems, "\n".join(problems)


def _llm_runs(root):
    """Three seeds of noloco and of diloco as `noloco llm train` writes them: noloco's replicas
    from the theory's own model, with the inputs.jsonl that the prediction reads."""
    from test_predict import write_run

    from noloco.infra.files import dumps, write_json
    from noloco.theory.config import OuterConfig

    for seed in range(3):
        noloco = OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=0.7)
        rows = write_run(root / f"seed{seed}" / "noloco", noloco, {"w": (0.3, 1.0, 0.0, 0.0, 400)}, 21, 5, seed=seed)
        diloco = root / f"seed{seed}" / "diloco"
        diloco.mkdir(parents=True)
        write_json(diloco / "result.json", {"schema_version": 2, "config": {
            "method": "diloco", "outer": {"replicas": 8, "group_size": 8, "alpha": 0.3, "beta": 0.7, "gamma": 0.0,
                                          "momentum": "heavy-ball"},
            "inner_steps": 10, "outer_steps": 21, "warmup": 0, "eval_every": 5}})
        for method, spread in (("noloco", None), ("diloco", 0.0)):
            loss = lambda step: 3 - step / 100 + seed / 100
            with_loss = [{**r, "tokens": 1000 * r["outer_step"], "val_loss_avg_model": loss(r["outer_step"]),
                          **({} if spread is None else {"weight_std": spread})} for r in rows]
            (root / f"seed{seed}" / method / "metrics.jsonl").write_text("".join(dumps(r) + "\n" for r in with_loss))


def test_llm_figure_plots_seeds_as_bands_and_the_prediction(tmp_path):
    """Runs that differ only in the seed are one setting (mean and range); the legend names
    what differs between settings; the zero-constant prediction is drawn; a forecast (none from these 4-step
    runs: too few steps) is drawn dotted."""
    import matplotlib.pyplot as plt

    from noloco.paper_figs import fig_llm

    _llm_runs(tmp_path)
    data = fig_llm.compute(str(tmp_path))
    assert data["total"] == 2 and [s["seeds"] for s in data["settings"]] == [3, 3]
    noloco = next(s for s in data["settings"] if s["method"] == "noloco")
    assert noloco["label"] == "noloco, n = 2, α = 0.5, γ = 0.7" and noloco["forecast"] is None
    assert noloco["outer_step"] == [5, 10, 15, 20]
    assert np.all(noloco["val"]["low"] < noloco["val"]["high"])
    assert np.all(np.isfinite(noloco["predicted"]["mean"])) and np.all(noloco["predicted"]["mean"] > 0)
    noloco["forecast"] = {"tokens": [20000, 30000], "weight_std": [0.5, 0.5], "low": [0.4, 0.4], "high": [0.6, 0.6]}
    fig = fig_llm.draw(data)
    problems = legibility_problems(fig)
    labels = [t.get_text() for leg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
              for t in leg.get_texts()]
    plt.close(fig)
    assert not problems, "\n".join(problems)
    assert {"noloco, n = 2, α = 0.5, γ = 0.7 (3 seeds)", "predicted from the run's inputs",
            "forecast from the first quarter", "diloco: 0, identical replicas"} <= set(labels), labels


def test_tune_figure_keeps_the_paper_setting_off_a_landscape_of_another_n_and_h(figs):
    """With --tune n,H the landscape is the tuned (n, H)'s: the paper setting goes only with its
    own frontier (drawn here from the gallery's data, the paper moved to n = 4)."""
    import matplotlib.pyplot as plt

    from noloco.paper_figs import fig_tune

    data = _data("tune", figs[1])
    front = data["frontier"]
    data = {**data, "paper": {**data["paper"], "group_size": 4},
            "paper_frontier": {"rate": [q["rate"] for q in front], "spread": [1.5 * q["spread"] for q in front]}}
    fig = fig_tune.draw(data)
    landscape, tradeoff = fig.axes[0], fig.axes[1]
    labels = [t.get_text() for t in landscape.get_legend().get_texts()]
    problems = legibility_problems(fig)
    plt.close(fig)
    assert not problems, "\n".join(problems)
    assert not any("paper" in label for label in labels) and any(label.startswith("tuned") for label in labels)


def test_benchmark_plot_uses_the_house_style(tmp_path):
    from PIL import Image

    from noloco.benchmarks.plot import draw, figure

    points = lambda *xy: [list(p) for p in zip(xy[::2], xy[1::2])]
    result = {"load_average_before": [0.5], "results": {"scaling": {
        "base": {"dim": 1000, "trials": 50, "replicas": 8, "steps": 20},
        "simulate": {"exact_vs_dim": points(100, 0.01, 1000, 0.06, 10000, 0.5),
                     "explicit_vs_dim": points(100, 0.015, 1000, 0.1, 10000, 1.1),
                     "exact_vs_trials": points(50, 0.06, 200, 0.2, 800, 0.9)},
        "comm_idle_vs_replicas": points(1e3, 0.004, 1e6, 0.9),
        "check_vs_directions": points(1e5, 0.05, 1e7, 0.7)}}}
    problems = legibility_problems(figure(result))
    assert not problems, "\n".join(problems)
    with Image.open(draw(result, tmp_path / "performance.png")) as image:
        assert image.size == (round(style.SIZE[0] * style.DPI), round(style.SIZE[1] * style.DPI))
