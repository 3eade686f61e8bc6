"""`noloco figs --quick` regenerates every figure, and every PNG is a valid, non-blank
image of the house size; a second run redraws from the cache. Each figure, drawn at gallery
size (the benchmarks' performance figure and the LLM figure of cpu-tiny pilot runs trained here
included), keeps its text on the canvas and apart, keeps its data from under its legend and texts,
and labels both axes of every panel with data."""

import numpy as np
import pytest

from noloco.cli import main
from noloco.paper_figs import style
from noloco.paper_figs.run import FIGURES, make


#: the pilots' length: the fewest outer steps whose first quarter (3 steps) a forecast starts from
PILOT_STEPS = 12


@pytest.fixture(scope="module")
def pilots(tmp_path_factory):
    """A user's pilot runs, as `noloco llm train --size cpu-tiny` makes them (seconds): noloco over two seeds
    and diloco over one, :data:`PILOT_STEPS` outer steps each."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("pilots")
    for seed, methods in ((0, "noloco,diloco"), (1, "noloco")):
        assert main(["llm", "train", "--size", "cpu-tiny", "--method", methods, "--outer-steps", str(PILOT_STEPS),
                     "--val-windows", "4", "--threads", "1", "--seed", str(seed), "--out", str(root / f"seed{seed}")]) == 0
    return root


@pytest.fixture(scope="module")
def figs(tmp_path_factory, pilots):
    """(out, cache, LLM runs) of `noloco figs --quick`, the LLM figure drawn from the pilot runs."""
    out, cache = (tmp_path_factory.mktemp(name) for name in ("figs", "figs-cache"))
    assert main(["figs", "--quick", "--out", str(out), "--cache", str(cache), "--llm-runs", str(pilots)]) == 0
    return out, cache, pilots


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
    assert not first.cached and second.cached and (tmp_path / "transient.png").exists()


def test_llm_figure_says_when_there_is_no_run_and_how_to_make_one(tmp_path):
    from noloco.paper_figs import fig_llm

    data = fig_llm.compute(str(tmp_path / "nothing-here"))
    assert data["settings"] == []
    fig = fig_llm.draw(data)
    text = "".join(t.get_text() for t in fig.texts)
    assert "no LLM run" in text and "cached" not in text and f"--out {tmp_path / 'nothing-here'}/" in text
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
    legends over each other, tick labels run together, data under a legend or a text, a marker cut by
    its panel's edge, a line dropping off a log axis, a panel with data but without an x- or a y-label or
    without two labelled ticks on an axis."""
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
    problems += _crowded_ticks(fig, drawn) + _covered_data(fig, boxes)
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


def _crowded_ticks(fig, drawn) -> list:
    """Neighbouring tick labels of one axis closer than a third of their font's size: they read as one string
    (``10000200003000040000``)."""
    renderer = fig.canvas.get_renderer()
    problems = []
    for ax in fig.axes:
        for along, axis in ((0, ax.xaxis), (1, ax.yaxis)):
            labels = [t for t in axis.get_majorticklabels() + axis.get_minorticklabels()
                      if t in drawn and t.get_visible() and t.get_text().strip()]
            spans = sorted((b.x0, b.x1) if along == 0 else (b.y0, b.y1)
                           for b in (t.get_window_extent(renderer) for t in labels))
            gap = min((t.get_fontsize() for t in labels), default=0) / 3 * fig.dpi / 72
            problems += [f"panel {ax.get_title()!r}: {'xy'[along]} tick labels {gap:.0f} px apart or less"
                         for (_, end), (start, _) in zip(spans, spans[1:]) if start - end < gap][:1]
    return problems


def _entry(legend, text, renderer):
    """The box of a legend entry: its text and the handle left of it."""
    from matplotlib.transforms import Bbox

    b = text.get_window_extent(renderer)
    em = legend._fontsize * legend.figure.dpi / 72
    return Bbox([[b.x0 - (legend.handlelength + legend.handletextpad) * em, b.y0], [b.x1, b.y1]])


#: px of a text's box that data may touch: its padding and a descender's depth, where no ink is
EDGE = 3


def _covers(ax, boxes, renderer) -> list:
    """(name, box) of what may sit on a panel's data: its legend (a frameless one: each entry, its handle and
    its text, and its title) and its texts (annotations without their arrows; titles and tick labels, which a
    marker drawn unclipped can cover)."""
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    ticks = {t for axis in (ax.xaxis, ax.yaxis) for tick in axis.get_major_ticks() + axis.get_minor_ticks()
             for t in (tick.label1, tick.label2)}
    covers = [(name, Text.get_window_extent(artist, renderer) if isinstance(artist, Text) and name[:4] != "box "
               else b) for name, b, own, artist in boxes
              if (getattr(own, "axes", None) is ax or own in ticks) and not isinstance(own, Legend)]
    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return covers
    if legend.get_frame_on():
        return covers + [("legend", legend.get_window_extent(renderer))]
    covers += [(f"the legend's {t.get_text()!r}", _entry(legend, t, renderer)) for t in legend.get_texts()]
    title = legend.get_title()
    if title.get_visible() and title.get_text().strip():
        covers.append((f"the legend's title {title.get_text()!r}", title.get_window_extent(renderer)))
    return covers


def _ink(line):
    """(points, radius) in px where ``line`` draws: its markers (half the marker's size), and its segments
    sampled every 2 px (radius 0) where both ends are finite (a NaN breaks a line)."""
    xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
    finite = np.isfinite(xy).all(1)
    marked = line.get_marker() not in ("None", "", " ", None)
    half = line.get_markersize() * line.figure.dpi / 72 / 2 if marked else 0.0
    points, radius = [xy[finite]], [np.full(finite.sum(), half)]
    if line.get_linestyle() not in ("None", "", " "):
        for a, b in ((xy[k], xy[k + 1]) for k in range(len(xy) - 1) if finite[k] and finite[k + 1]):
            n = int(np.hypot(*(b - a)) // 2) + 2
            points.append(a + np.linspace(0, 1, n)[:, None] * (b - a))
            radius.append(np.zeros(n))
    return np.concatenate(points), np.concatenate(radius), xy[finite], half


def _covered_data(fig, boxes) -> list:
    """Lines and markers of a panel under a legend or a text (a reader loses the data there), markers half
    outside their panel (cut off, or over the spine and the tick labels), and lines through a value <= 0 on a log
    axis (drawn as a drop off the panel)."""
    renderer = fig.canvas.get_renderer()
    problems = []
    for ax in fig.axes:
        if not (ax.get_visible() and ax.axison):
            continue
        panel = ax.get_window_extent()
        within = lambda p: ((p[:, 0] >= panel.x0) & (p[:, 0] <= panel.x1) &  # noqa: E731
                            (p[:, 1] >= panel.y0) & (p[:, 1] <= panel.y1))
        covers = _covers(ax, boxes, renderer)
        for line in ax.get_lines():
            if not line.get_visible() or not len(line.get_xydata()):
                continue
            data = np.asarray(line.get_xydata(), dtype=float)
            for k, scale in enumerate((ax.get_xscale(), ax.get_yscale())):  # in data units (not axhline's x)
                if scale == "log" and line.get_transform() is ax.transData and (data[:, k] <= 0).any() and (
                        line.get_linestyle() not in ("None", "", " ")):
                    problems.append(f"panel {ax.get_title()!r}: the line {line.get_label()!r} has a value <= 0: on "
                                    f"its log {'xy'[k]} axis it drops off the panel")
            points, radius, centres, half = _ink(line)
            if line.get_clip_on():  # what is clipped is not drawn
                points, radius, centres = points[within(points)], radius[within(points)], centres[within(centres)]
            if half and ((centres - half < [panel.x0 - EDGE, panel.y0 - EDGE]) |
                         (centres + half > [panel.x1 + EDGE, panel.y1 + EDGE])).any():
                problems.append(f"panel {ax.get_title()!r}: a marker of {line.get_label()!r} is half outside it")
            for name, b in covers:
                if ((points[:, 0] + radius > b.x0 + EDGE) & (points[:, 0] - radius < b.x1 - EDGE) &
                        (points[:, 1] + radius > b.y0 + EDGE) & (points[:, 1] - radius < b.y1 - EDGE)).any():
                    problems.append(f"panel {ax.get_title()!r}: {name} covers the line {line.get_label()!r}")
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


def _scaling_result(keep=None) -> dict:
    """A result of every series `python -m noloco.benchmarks scaling` writes (those named in ``keep``, with the
    simulate sweeps, when given), each point's seconds a power of its size."""
    from noloco.benchmarks import scaling

    series = {"comm_idle_vs_replicas": (1e3, 1e4, 1e5, 1e6), "comm_idle_compiled_vs_replicas": (1e3, 1e4, 1e5, 1e6),
              "check_vs_directions": (1e5, 1e6, 1e7)}
    r = {"base": scaling.BASE.to_json(), "simulate": {
        f"{mode}_vs_{factor}": [[v, 0.01 * (v / values[0]) ** 0.9 * (2 if mode == "explicit" else 1)]
                                for v in values]
        for factor, values in scaling.SWEEPS.items() for mode in ("exact", "explicit")
        if mode == "exact" or factor == "dim"}}
    r |= {k: [[n, 1e-3 * (n / sizes[0]) ** 0.8] for n in sizes] for k, sizes in series.items()
          if keep is None or k in keep}
    return {"load_average_before": [0.5], "results": {"scaling": r}}


#: every figure the project draws: `noloco figs`' and the benchmarks' (docs/img/performance.png)
RENDERED = (*FIGURES, "performance")


@pytest.mark.parametrize("name", RENDERED)
def test_figure_is_legible_at_gallery_size(figs, name):
    import matplotlib.pyplot as plt

    from noloco.benchmarks import plot
    from noloco.paper_figs.run import module

    fig = plot.figure(_scaling_result()) if name == "performance" else module(name).draw(
        _data(name, figs[1], {"runs": str(figs[2])} if name == "llm" else None))
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
    what differs between settings; the zero-constant prediction is drawn; a forecast that is neither flagged nor
    outside its interval is drawn dotted."""
    import matplotlib.pyplot as plt

    from noloco.paper_figs import fig_llm

    _llm_runs(tmp_path)
    data = fig_llm.compute(str(tmp_path))
    assert data["total"] == 2 and [s["seeds"] for s in data["settings"]] == [3, 3]
    noloco = next(s for s in data["settings"] if s["method"] == "noloco")
    assert noloco["label"] == "noloco, n = 2, α = 0.5, γ = 0.7"
    assert noloco["outer_step"] == [5, 10, 15, 20]
    assert np.all(noloco["val"]["low"] < noloco["val"]["high"])
    assert np.all(np.isfinite(noloco["predicted"]["mean"])) and np.all(noloco["predicted"]["mean"] > 0)
    noloco["forecast"] = {"outer_step": [20, 30], "weight_std": [0.5, 0.5], "low": [0.4, 0.4], "high": [0.6, 0.6],
                          "flags": [], "outside": [], "flagged": False}
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
    landscape = fig.axes[0]
    labels = [t.get_text() for t in landscape.get_legend().get_texts()]
    problems = legibility_problems(fig)
    plt.close(fig)
    assert not problems, "\n".join(problems)
    assert not any("paper" in label for label in labels) and any(label.startswith("tuned") for label in labels)


def test_benchmark_plot_uses_the_house_style(tmp_path):
    """The performance figure as `python -m noloco.benchmarks.plot` writes it: the house size, and a result with
    no comm or check timings draws its empty panel without a legend (and without matplotlib's warning)."""
    import warnings

    from PIL import Image

    from noloco.benchmarks.plot import draw

    with Image.open(draw(_scaling_result(), tmp_path / "performance.png")) as image:
        assert image.size == (round(style.SIZE[0] * style.DPI), round(style.SIZE[1] * style.DPI))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draw(_scaling_result(keep=()), tmp_path / "simulate-only.png")


def _forecast_lines(fig):
    """(lines drawn as a trusted forecast, lines drawn as a flagged one) in the spread panel; legend texts."""
    from noloco.paper_figs.fig_llm import FLAGGED, FORECAST

    kind = lambda line, how: (line.get_linestyle(), line.get_marker()) == (how["ls"], how.get("marker", "None"))  # noqa: E731
    lines = fig.axes[1].get_lines()
    labels = [t.get_text() for leg in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
              for t in leg.get_texts()]
    return [ln for ln in lines if kind(ln, FORECAST)], [ln for ln in lines if kind(ln, FLAGGED)], labels


def test_llm_figure_of_pilot_runs_marks_a_forecast_it_cannot_stand_behind(pilots):
    """The figure of a user's cpu-tiny pilots: seeds as one setting, tokens as the x axis (legible at a longer
    run's counts too), and each forecast flagged exactly where the advice flags a seed's forecast or the
    measured spread leaves its interval, drawn dash-dotted and hollow with its own legend entry (and dotted,
    with its band, once trusted)."""
    import matplotlib.pyplot as plt

    from noloco.advice.forecast import forecast
    from noloco.paper_figs import fig_llm

    data = fig_llm.compute(str(pilots))
    by_method = {s["method"]: s for s in data["settings"]}
    assert sorted(by_method) == ["diloco", "noloco"] and by_method["noloco"]["seeds"] == 2
    noloco = by_method["noloco"]
    assert noloco["outer_step"][-1] == PILOT_STEPS and noloco["tokens"][-1] > noloco["tokens"][0] > 0
    reports = [forecast(pilots / run, from_step=PILOT_STEPS // 4) for run in noloco["dirs"]]
    outside = [r.outer_step for rep in reports for r in rep.rows
               if r.measured is not None and not r.low <= r.measured <= r.high]
    f = noloco["forecast"]
    assert f["flagged"] == bool(outside or any(rep.flags for rep in reports))
    assert sorted(set(outside)) == f["outside"]
    for flagged in (f["flagged"], not f["flagged"]):
        f["flagged"] = flagged
        fig = fig_llm.draw(data)
        problems = legibility_problems(fig)
        trusted, marked, labels = _forecast_lines(fig)
        assert fig.axes[1].get_xlabel() == "training tokens (count)"
        plt.close(fig)
        assert not problems, "\n".join(problems)
        assert (len(marked), len(trusted)) == ((1, 0) if flagged else (0, 1))
        assert ("forecast, flagged or outside its interval" in labels) == flagged
        assert ("forecast from the first quarter" in labels) == (not flagged)
    for k in (3, 1000):  # the same runs at a longer run's token counts: long counts side by side read as one
        longer = {**data, "settings": [{**s, "tokens": [t * k for t in s["tokens"]]} for s in data["settings"]]}
        fig = fig_llm.draw(longer)
        problems = legibility_problems(fig)
        plt.close(fig)
        assert not problems, "\n".join(problems)


def test_llm_figure_of_an_observer_run_counts_outer_steps(tmp_path):
    """A run of a user's own loop under noloco.Observer has no token count: the x axis is the outer step, the
    spread of 0 at the start (replicas equal) is left off the log axis, and the loss it logged is drawn."""
    torch = pytest.importorskip("torch")
    import matplotlib.pyplot as plt

    import noloco
    from noloco.paper_figs import fig_llm

    N, H, T = 4, 5, PILOT_STEPS
    torch.manual_seed(0)
    models = [torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)) for _ in range(N)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    inner = torch.optim.AdamW([p for m in models for p in m.parameters()], lr=1e-2)
    outer = noloco.OuterOptimizer(models, inner, inner_steps=H)
    observer = noloco.Observer(outer, tmp_path / "my-run", outer_steps=T, lr=1e-2, warn_steps=0)
    val = torch.randn(64, 8)
    for step in range(T * H):
        inner.zero_grad()
        sum(((m(x) - x.sum(1, keepdim=True).sin()) ** 2).mean() for m in models
            for x in [torch.randn(32, 8)]).backward()
        inner.step()
        if (step + 1) % H == 0:
            with torch.no_grad():
                loss = sum(((m(val) - val.sum(1, keepdim=True).sin()) ** 2).mean() for m in models) / N
            observer.log(outer.outer_done, val_loss_avg_model=loss)
    observer.close()
    data = fig_llm.compute(str(tmp_path))
    (s,) = data["settings"]
    assert s["tokens"] is None and s["outer_step"][0] == 0 and s["measured"]["mean"][0] == 0
    fig = fig_llm.draw(data)
    problems = legibility_problems(fig)
    loss, spread = fig.axes[0], fig.axes[1]
    drawn = spread.get_lines()[0].get_ydata()
    assert spread.get_xlabel() == loss.get_xlabel() == "outer step (count)"
    assert np.isnan(drawn[0]) and np.all(np.array(drawn[1:]) > 0) and spread.get_yscale() == "log"
    assert np.isfinite(loss.get_lines()[0].get_ydata()[1:]).all()
    plt.close(fig)
    assert not problems, "\n".join(problems)
