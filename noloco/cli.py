"""Entry point of the ``noloco`` command.

Each subcommand lives in its own module ``noloco.cmd_<name>`` exposing
``add_parser(subparsers)`` and ``run(args) -> int``; it parses, calls one library
function and prints. Modules import their heavy dependencies inside ``run`` so that
``noloco --help`` stays fast.

Exit codes, enforced here and nowhere else:

====  =====================================================================
0     success (also: ``--help``, ``--version``, and a reader that closed the
      output pipe early, as ``noloco check | head -1`` does)
1     a checked condition fails (unstable setting, diverged run, claim fails):
      the command's ``run`` returns 1
2     bad input, before any work: an argparse error, ``ConfigError`` or
      ``UsageError`` (a value outside its range, conflicting flags, an empty
      output name)
3     environment or data fault: ``noloco.infra.errors.DataError`` (a missing or malformed
      input file, a run folder in use, a dead peer), ``OSError`` (an unwritable
      output, a full disk), ``MemoryError`` (also: work refused by its memory
      budget)
130   interrupted (Ctrl-C)
====  =====================================================================

Every error is one line on stderr, ``noloco COMMAND: error: ...``, without a
traceback; ``NOLOCO_DEBUG=1`` re-raises it with its traceback. Any other exception
is a bug and keeps its traceback. The mapping itself is :func:`noloco.infra.entry.exit_code`
(shared with the torchrun entry ``python -m noloco.llm_check.train``); numpy's arithmetic
warnings are silenced here, since a non-finite result is reported in the output.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from noloco.infra.errors import ConfigError
from noloco.infra.entry import OneLineParser, report

SUBCOMMANDS = ("check", "simulate", "comm", "tune", "figs", "llm", "claims", "paper")


class UsageError(ConfigError):
    """Bad input from the command line; reported as one line, exit code 2."""


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("noloco-toolkit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from noloco import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
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
            module = importlib.import_module(f"noloco.cmd_{name}")
        except ModuleNotFoundError as err:
            if err.name == f"noloco.cmd_{name}":
                continue  # subcommand not part of this build
            raise
        module.add_parser(sub)
    return parser


def _reader_gone() -> bool:
    """True when stdout is a pipe whose reader has closed it (poll reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real file descriptor (an in-process capture)
        return False


def _silence_stdout() -> None:
    """Send what is still buffered for a closed stdout to /dev/null, so that the interpreter's
    final flush raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    command = ""
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as stop:  # argparse: --help/--version (0) or a usage error (2, printed)
            sys.stdout.flush()
            return 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 2
        command = " ".join(filter(None, (args.command, getattr(args, "llm_command", None))))
        with _quiet_arithmetic():
            code = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError as err:
        if not _reader_gone():  # a broken pipe that is not stdout: an environment fault like any other
            return report(_prog(command), err)
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        print(f"{_prog(command)}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - noloco.infra.entry.report re-raises what is not in the contract (a bug)
        return report(_prog(command), err)


def _quiet_arithmetic():
    """numpy's overflow / invalid-value warnings off: a non-finite result is reported as such in the
    command's output (null with its reason, or a failed condition), not as lines of warnings on stderr.
    ``NOLOCO_DEBUG=1`` keeps them."""
    import contextlib
    import warnings

    import numpy as np

    if os.environ.get("NOLOCO_DEBUG") == "1":
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(np.errstate(all="ignore"))
    stack.enter_context(warnings.catch_warnings())
    warnings.filterwarnings("ignore", category=RuntimeWarning,
                            message=r".*(overflow|invalid value|divide by zero|underflow)")
    return stack


def _prog(command: str) -> str:
    return f"noloco {command}" if command else "noloco"


if __name__ == "__main__":
    raise SystemExit(main())
