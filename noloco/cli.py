"""Entry point of the ``noloco`` command.

Each subcommand lives in its own module ``noloco.cmd_<name>`` exposing
``add_parser(subparsers)`` and ``run(args) -> int``. Modules import their heavy
dependencies inside ``run`` so that ``noloco --help`` stays fast.

Exit codes: 0 success, 1 a checked condition failed, 2 bad input (one line on
stderr, no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from theory.config import ConfigError

SUBCOMMANDS = ("check", "simulate", "comm", "tune", "figs", "llm")


class UsageError(ConfigError):
    """Bad input from the command line; reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="noloco",
        description="Theory and verification toolkit for NoLoCo (arXiv 2506.10911).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"noloco.cmd_{name}")
        except ModuleNotFoundError as err:
            if err.name == f"noloco.cmd_{name}":
                continue  # subcommand not part of this build
            raise
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (UsageError, ConfigError) as err:
        print(f"noloco {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"noloco {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
