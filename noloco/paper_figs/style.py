"""One matplotlib style for every figure the project draws (the gallery, ``noloco tune --out``,
``benchmarks.plot``): Okabe-Ito colour-blind-safe palette, readable sizes, a fixed figure size
and dpi (the tests check the pixel size of each PNG and that no text leaves the canvas).

The README shows a PNG about 830 px wide, 0.74 of its 1125: no text below ``MIN_FONT`` points
(10 px there). Labels say what is plotted in words, with the unit in parentheses."""

from __future__ import annotations

# Okabe & Ito (2008), safe for the common colour-vision deficiencies
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
BLUE, VERMILION, GREEN, PURPLE, ORANGE, SKY, YELLOW, BLACK = PALETTE
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
SIZE = (7.5, 4.2)   # inches, every figure
DPI = 150           # PNG pixels: 1125 x 630
MIN_FONT = 7.5      # points


def apply() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from cycler import cycler
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "figure.figsize": SIZE, "figure.dpi": DPI, "savefig.dpi": DPI,
        "figure.constrained_layout.use": True,
        "axes.prop_cycle": cycler(color=PALETTE),
        "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6,
        "axes.spines.top": False, "axes.spines.right": False,
        "axes.titlesize": 10, "axes.labelsize": 9.5, "xtick.labelsize": 8.5, "ytick.labelsize": 8.5,
        "legend.fontsize": 8, "legend.frameon": False, "figure.titlesize": 11,
        "lines.linewidth": 1.6, "lines.markersize": 4.5, "errorbar.capsize": 2,
        "image.cmap": "viridis", "pdf.fonttype": 42,
    })


def figure(ncols: int = 1, nrows: int = 1, **kw):
    """A figure of the house size with a grid of axes."""
    apply()
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=SIZE, dpi=DPI, squeeze=False, **kw)


def keyed_figure(ncols: int, ratio: float = 2.6):
    """A figure of the house size with a row of ``ncols`` panels and, below each, the place of its legend (its
    key, drawn by :func:`key`): inside a panel, a legend covers the data wherever its lines happen to run.
    Returns ``(fig, panels, keys)``; ``ratio``: a panel's height over its key's."""
    fig, axs = figure(ncols, 2, gridspec_kw={"height_ratios": (ratio, 1)})
    for place in axs[1]:
        place.set_axis_off()
    return fig, axs[0], axs[1]


def key(place, handles, labels=None, **kw) -> None:
    """The legend of ``handles`` in a key's place of :func:`keyed_figure` (none without a handle)."""
    if handles:
        place.legend(handles, labels if labels is not None else [h.get_label() for h in handles],
                     loc="upper center", borderaxespad=0, **kw)


#: the formats a figure file may have (its suffix chooses)
FORMATS = ("png", "pdf", "svg")


def figure_file(path, flag: str = "--out"):
    """``path`` as one figure file, checked before any work: a writable place (noloco.infra.files.output_file)
    whose suffix is one of :data:`FORMATS` (ConfigError otherwise: a name like ``x.txt`` would otherwise
    write ``x.png`` beside it)."""
    from pathlib import Path

    from noloco.infra.errors import ConfigError
    from noloco.infra.files import output_file

    path = output_file(path, flag)
    if path.suffix.lower().lstrip(".") not in FORMATS:
        raise ConfigError(f"{flag} {str(path)!r} must name a figure file ending in "
                          f"{', '.join('.' + f for f in FORMATS)} (its suffix chooses the format)")
    return Path(path)


def save(fig, path, formats=("png", "pdf")) -> list:
    """Write ``path`` in each format (atomically: temporary file, then rename); returns the paths."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    from noloco.infra.files import atomic_write

    path = Path(path).with_suffix("")
    written = [str(atomic_write(path.with_suffix("." + ext), lambda tmp, ext=ext: fig.savefig(tmp, format=ext)))
               for ext in formats]
    plt.close(fig)
    return written
