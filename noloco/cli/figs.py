"""``noloco figs``: regenerate every figure of the analysis (PNG and PDF) from cached results."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    from noloco.paper_figs.run import DEFAULT_OUT, FIGURES

    p = subparsers.add_parser(
        "figs", help="regenerate the analysis figures (PNG and PDF)",
        description="Compute (or load from cache) and draw every figure of the analysis into OUT as PNG "
                    f"and PDF. Figures: {', '.join(FIGURES)}. --quick uses smaller Monte Carlo and grids "
                    "(about 13 s of CPU time on the 2-core machine; docs/figures.md says how it was measured).")
    p.add_argument("--quick", action="store_true", help="small grids and Monte Carlo (CI)")
    p.add_argument("--only", action="append", metavar="NAME",
                   help=f"only these figures (repeat or comma-separate): {', '.join(FIGURES)}")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default paper_figs/out)")
    p.add_argument("--cache", default=None,
                   help="cache directory (default: the toolkit's cache, $NOLOCO_CACHE or ~/.cache/noloco)")
    p.add_argument("--refresh", action="store_true", help="recompute even when a cached result exists")
    p.add_argument("--llm-runs", default="runs", help="directory searched for LLM metrics.jsonl (default runs)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON report of the figures made (name, seconds, from the cache, files) on stdout; "
                        "the line per figure goes to stderr")
    p.add_argument("--max-time", metavar="DURATION",
                   help="time budget, e.g. 10m or none (default 1h): figures estimated above it are refused (exit 3)")
    p.set_defaults(run=run)


def run(args) -> int:
    import sys

    from tqdm import tqdm

    from noloco.infra.errors import ConfigError
    from noloco.paper_figs.run import FIGURES, make, require_time
    from noloco.infra.checks import check_choice
    from noloco.infra.cache import cache_root
    from noloco.infra.files import input_dir, output_dir

    names = [n.strip() for item in (args.only or []) for n in item.split(",") if n.strip()]
    if args.only is not None and not names:
        raise ConfigError(f"--only {','.join(args.only)!r} names no figure; allowed: {', '.join(FIGURES)}")
    for name in names:
        check_choice("only", name, FIGURES)
    names = names or list(FIGURES)
    if args.cache is not None:
        input_dir(args.cache, "--cache")  # read-only is fine (only costs the computation), a file is not
    cache_root(args.cache)  # a system folder (NOLOCO_CACHE=/, --cache /etc) is refused before anything is made
    if "llm" in names:
        input_dir(args.llm_runs, "--llm-runs")
    output_dir(args.out)  # fail now, not after minutes of computation
    options = {"llm": {"runs": args.llm_runs}}
    require_time(names, quick=args.quick, cache_dir=args.cache, refresh=args.refresh, options=options,
                 max_time=args.max_time)
    bar = tqdm(names, desc="figs", unit="fig", disable=not sys.stderr.isatty())
    made = []
    for name in bar:
        bar.set_postfix_str(name)
        r = _make(make, name, args, options.get(name))
        made.append(r.to_json())
        tqdm.write(f"{name:<10} {r.seconds:6.1f} s {'(cache)' if r.cached else '':<8} {r.files[0]}",
                   file=sys.stderr if args.json else sys.stdout)
    if args.json:
        from noloco.infra.files import print_json

        print_json({"figures": made})
    return 0


def _make(make, name: str, args, options):
    """``make`` one figure; cached data that passed its checksum but does not draw (edited with its checksum
    recomputed, or written by another version's bug: a KeyError, a TypeError) is recomputed with one warning."""
    from noloco.infra.errors import ConfigError, DataError, warn

    def draw(refresh: bool):
        return make(name, quick=args.quick, out=args.out, cache_dir=args.cache, refresh=refresh, options=options)

    from noloco.paper_figs.run import module

    try:
        return draw(args.refresh)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as err:
        if isinstance(err, (ConfigError, DataError)):
            raise
        what = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
        if not getattr(module(name), "CACHED", True):  # it reads files of the user's (the llm runs), not the cache
            raise DataError(f"figure {name}: a file under --llm-runs {args.llm_runs} holds a value of a shape it "
                            f"cannot draw ({what}); move that run away, or give another --llm-runs") from err
        if args.refresh:
            raise
        warn(f"figure {name}: its cached data does not draw ({what}); recomputing it")
        return draw(True)
