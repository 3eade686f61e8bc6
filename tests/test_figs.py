"""`noloco figs --quick` regenerates every figure, and every PNG is a valid, non-blank
image of the house size; a second run redraws from the cache."""

import numpy as np
import pytest

from noloco.cli import main
from noloco.paper_figs import style
from noloco.paper_figs.run import FIGURES, make


@pytest.fixture(scope="module")
def figs(tmp_path_factory):
    out, cache = tmp_path_factory.mktemp("figs"), tmp_path_factory.mktemp("figs-cache")
    assert main(["figs", "--quick", "--out", str(out), "--cache", str(cache)]) == 0
    return out, cache


@pytest.mark.parametrize("name", FIGURES)
def test_png_valid_non_blank_expected_size(figs, name):
    from PIL import Image

    out, _ = figs
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
    assert data["runs"] == []
    fig = fig_llm.draw(data)
    assert any("no cached LLM run" in t.get_text() for t in fig.texts)
    __import__("matplotlib.pyplot").pyplot.close(fig)


def test_unknown_figure_exits_2(capsys):
    assert main(["figs", "--only", "nope"]) == 2
    assert "only='nope' is not allowed; allowed: stability" in capsys.readouterr().err


def test_every_script_states_its_claim():
    from noloco.paper_figs.run import module

    for name in FIGURES:
        doc = module(name).__doc__
        assert doc and doc.startswith("Claim:"), name
