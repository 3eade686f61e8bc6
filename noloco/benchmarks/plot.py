"""Log-log plot of a ``scaling`` result (or of the ``all`` result that holds one):

    python -m noloco.benchmarks.plot RESULT.json [docs/img/performance.png]
"""

from __future__ import annotations

from pathlib import Path

from noloco.infra.files import NUMBER, output_file, read_json, shape_error

ROOT = Path(__file__).resolve().parents[2]


#: the right panel's series and their labels (a colour and marker each, by position)
PANEL = (("comm_idle_vs_replicas", "comm idle simulation vs N"), ("comm_idle_compiled_vs_replicas", "the same, compiled"),
         ("check_vs_directions", "check vs directions"))


def figure(result: dict):
    """The figure of a ``scaling`` result, in the house style (:mod:`noloco.paper_figs.style`): two log-log
    panels, each with its legend below it (:func:`~noloco.paper_figs.style.keyed_figure`)."""
    from noloco.benchmarks.scaling import slope
    from noloco.paper_figs import style

    from noloco.benchmarks.scaling import scaling_of
    from noloco.benchmarks.timer import BenchResult

    r = scaling_of(result)
    load = (BenchResult.from_json(result).load_average_before or [float("nan")])[0]
    fig, (left, right), keys = style.keyed_figure(2)
    labels = {"dim": "directions D", "trials": "trials", "replicas": "replicas N", "steps": "outer steps"}
    for (name, points), colour, marker in zip(r.simulate.items(), style.PALETTE, style.MARKERS):
        mode, _, factor = name.partition("_vs_")
        x, y = zip(*points)
        left.loglog([v / x[0] for v in x], y, marker=marker, ls="-" if mode == "exact" else "--", color=colour,
                    label=f"{mode}, vs {labels[factor]} (slope {slope(points):.2f})")
    b = r.base  # BASE's sizes
    left.set(xlabel="size / smallest size (ratio)", ylabel="wall time, best of repeats (s)",
             title=f"simulate, from D {b.dim}, {b.trials} trials, N {b.replicas}, {b.steps} steps")
    for (label, points), colour, marker in zip(((label, getattr(r, name)) for name, label in PANEL),
                                               style.PALETTE, style.MARKERS):
        if points is not None:  # no numba: no compiled curve
            x, y = zip(*points)
            right.loglog(x, y, marker=marker, color=colour, label=f"{label} (slope {slope(points):.2f})")
    right.set(xlabel="replicas N or directions (count)", ylabel="wall time (s)",
              title="comm (50 steps, 2 trials) and check")
    for ax, place in zip((left, right), keys):  # a result without comm or check timings: an empty panel, no key
        style.key(place, *ax.get_legend_handles_labels())
    fig.suptitle(f"Cost against size, log-log (load average {load:.2f} at the start)")
    return fig


_POINTS = [[NUMBER]]
#: what :func:`figure` reads of a scaling result (noloco.infra.files.shape_error)
SHAPE = {"simulate": {...: _POINTS}, "base": {"dim": int, "trials": int, "replicas": int, "steps": int}}
OPTIONAL = ("comm_idle_vs_replicas", "comm_idle_compiled_vs_replicas", "check_vs_directions")


def read_result(path) -> dict:
    """A scaling result (or the ``all`` result holding one) whose shape :func:`figure` can draw; a DataError
    naming the file and what is wrong otherwise."""
    from noloco.infra.errors import DataError

    result = read_json(path, required=("results",), types={"results": dict})
    r = result["results"].get("scaling", result["results"])
    error = shape_error(r, SHAPE, "results") or next(
        (e for key in OPTIONAL if key in r for e in [shape_error(r[key], _POINTS, key)] if e), "")
    if not error:
        series = [*r["simulate"].values(), *(r[k] for k in OPTIONAL if k in r)]
        if any(len(points) < 2 or any(len(pt) != 2 or not pt[0] or not pt[1] or pt[0] <= 0 or pt[1] <= 0
                                      for pt in points) for points in series):
            error = "a series of fewer than 2 (size, seconds) pairs, or one that is not positive"
    if error:
        raise DataError(f"{path} is not a scaling result this plot can draw: {error}")
    return result


def draw(result: dict, out: Path) -> Path:
    """Write the figure of ``result`` to ``out`` (PNG)."""
    from noloco.paper_figs import style

    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(style.save(figure(result), out, formats=("png",))[0])


def main(argv=None) -> int:
    from noloco.infra.entry import OneLineParser, run

    prog = "python -m noloco.benchmarks.plot"
    parser = OneLineParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("result", help="a scaling result JSON (or the 'all' result holding one)")
    parser.add_argument("out", nargs="?", default=str(ROOT / "docs" / "img" / "performance.png"),
                        help="the PNG to write (default docs/img/performance.png)")
    return run(prog, parser, lambda args: print(draw(read_result(args.result), output_file(args.out))), argv)


if __name__ == "__main__":
    raise SystemExit(main())
