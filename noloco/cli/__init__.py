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
import subprocess
import sys
from pathlib import Path

from noloco.infra.entry import CommandParser, OneLineParser, end_rank, mark_parsers, run

SUBCOMMANDS = ("check", "simulate", "comm", "tune", "figs", "llm", "claims", "paper")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("noloco-toolkit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from noloco import __version__

        return __version__


def commit(root=None) -> str | None:
    """The git commit of the checkout the toolkit runs from (``root``: the folder above the ``noloco`` package),
    None where that is not a checkout (an installed copy) or git cannot tell within 2 s. Only where ``root/.git``
    exists: an installed copy inside someone else's repository must not report that repository's commit."""
    root = Path(root or Path(__file__).resolve().parents[2])
    if not (root / ".git").exists():
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # a GIT_DIR set for other work
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=2, env=env)
    except (OSError, subprocess.SubprocessError):  # no git, or it hangs
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def version_text() -> str:
    """``noloco --version``: the toolkit's version and commit, Python's, and numpy's and torch's read from their
    installed metadata (importing them would take most of the time: torch alone 1.5 s on the project's machine)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    def of(name: str) -> str:
        try:
            return installed(name)
        except PackageNotFoundError:
            return "not installed"

    head = commit()
    return (f"noloco {version()}{f' (commit {head})' if head else ''}\n"
            f"python {sys.version.split()[0]}, numpy {of('numpy')}, torch {of('torch')}")


class _Version(argparse.Action):
    """``--version`` (``--vers`` too): :func:`version_text`, then exit 0."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def _top_parser() -> CommandParser:
    """The parser of ``noloco`` itself, before any subcommand is added."""
    parser = CommandParser(
        prog="noloco",
        description="Theory and verification toolkit for NoLoCo (arXiv 2506.10911). Exit codes: 0 success, "
                    "1 a checked condition fails, 2 bad input, 3 environment or data fault.",
    )
    parser.add_argument("--version", action=_Version,
                        help="print the versions of the toolkit (and its git commit), Python, numpy and torch, and exit")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _top_parser()
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
    if os.environ.get("WORLD_SIZE") not in (None, "", "1") and os.environ.get("NOLOCO_DEBUG") != "1":
        # a torchrun rank: c10d's C++ log prints tens of lines of native stack for a peer that never came, before
        # the one line that says so; read by torch at its import, so set before it (a user's own value is kept)
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    if (sys.argv[1:] if argv is None else list(argv))[:1] == ["--version"]:  # without importing every command's module
        return run("noloco", _top_parser(), lambda args: 0, argv)
    parser = build_parser()
    return run("noloco", parser, lambda args: args.run(args), argv, name=_command_name)


def console() -> None:
    """The ``noloco`` program (and ``python -m noloco``): :func:`main`, then the process ends with its code; a
    torchrun rank ends without the interpreter's finalisation (:func:`noloco.infra.entry.end_rank`)."""
    code = main()
    if os.environ.get("WORLD_SIZE") not in (None, "", "1"):
        end_rank(code)
    if code == 130:  # stopping already: a second Ctrl-C while the interpreter finalises would end it by the signal
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise SystemExit(code)


if __name__ == "__main__":
    console()
