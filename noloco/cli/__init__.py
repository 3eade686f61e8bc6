"""Entry point of the ``noloco`` command.

Each subcommand lives in its own module ``noloco.cli.<name>`` exposing
``add_parser(subparsers)`` and ``run(args) -> int``; it parses, calls one library
function and prints what that function formats. Modules import their heavy dependencies
inside ``run`` so that ``noloco --help`` stays fast. The exit codes and the one-line errors
are :func:`noloco.infra.entry.run`'s, the same for every entry point of the toolkit.
"""

from __future__ import annotations

import argparse
import importlib
import os

from noloco.infra.entry import CommandParser, OneLineParser, mark_parsers, run

SUBCOMMANDS = ("check", "simulate", "comm", "tune", "figs", "llm", "claims", "paper")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("noloco-toolkit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from noloco import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="noloco",
        description="Theory and verification toolkit for NoLoCo (arXiv 2506.10911). Exit codes: 0 success, "
                    "1 a checked condition fails, 2 bad input, 3 environment or data fault.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}",
                        help="print the toolkit's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"noloco.cli.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"noloco.cli.{name}":
                continue  # subcommand not part of this build
            raise
        module.add_parser(sub)
    mark_parsers(parser)
    return parser


def _command_name(args) -> str:
    return " ".join(filter(None, ("noloco", args.command, getattr(args, "llm_command", None))))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    return run("noloco", parser, lambda args: args.run(args), argv, name=_command_name)


def console() -> None:
    """The ``noloco`` program (and ``python -m noloco``): :func:`main`, then the process ends with its code; a
    torchrun rank ends without the interpreter's finalisation (:func:`noloco.llm_check.train.end_rank`)."""
    code = main()
    if os.environ.get("WORLD_SIZE") not in (None, "", "1"):
        from noloco.llm_check.train import end_rank

        end_rank(code)
    raise SystemExit(code)


if __name__ == "__main__":
    console()
