"""The exit-code contract, written once: every entry point (``noloco``, the torchrun entry, the studies,
the benchmarks, the gloo timings, the generators) runs its work through :func:`run`.

====  =====================================================================
0     success (also ``--help``, ``--version``, and a reader that closed the pipe early)
1     a checked condition fails (unstable, diverged, a claim does not hold): the work returns 1
2     bad input or usage, detected before any work (:class:`~noloco.infra.errors.ConfigError`,
      an argparse error)
3     an environment or data fault (:class:`~noloco.infra.errors.DataError`, ``OSError``,
      ``MemoryError``, a refused memory budget), and an internal error (a bug), whose line says so
130   interrupted: Ctrl-C or SIGTERM (what schedulers send), wherever it lands
====  =====================================================================

Every error is one line on stderr, ``PROG: error: ...``; ``NOLOCO_DEBUG=1`` prints the traceback
before it and keeps the code. Exit 1 is never an accident: a Python traceback would exit 1, so no
exception leaves :func:`run`. numpy's arithmetic warnings are silenced while the work runs (a
non-finite result is reported in the output itself).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import traceback
from typing import Callable

from noloco.infra.errors import ConfigError, DataError

#: what an internal error's line starts with (tests look for it: a bug, not a handled case)
INTERNAL = "internal error"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, after the work saved what it could; ``hint`` says how to go on."""

    def __init__(self, hint: str = "", signal_name: str = "Ctrl-C"):
        super().__init__(hint)
        self.hint, self.signal_name = hint, signal_name


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where it lands, so that it unwinds exactly as Ctrl-C does."""

    hint, signal_name = "", "SIGTERM"


def interrupted(err: KeyboardInterrupt, hint: str) -> Interrupted:
    """``err`` (Ctrl-C, SIGTERM or an earlier :class:`Interrupted`) with ``hint`` added to what it says."""
    hints = [h for h in (getattr(err, "hint", ""), hint) if h]
    return Interrupted("; ".join(hints), getattr(err, "signal_name", "Ctrl-C"))


def exit_code(err: BaseException) -> int:
    """The contract's exit code of an error: 2 bad input (ConfigError), 3 an environment or data fault
    (DataError, OSError, MemoryError) or an internal error (anything else: a bug)."""
    return 2 if isinstance(err, ConfigError) else 3


def describe(err: BaseException) -> str:
    """The one line that says what failed and where."""
    if isinstance(err, OSError) and err.strerror:
        where = err.filename if err.filename is not None else ""
        return f"{where}: {err.strerror}" if where else err.strerror
    if isinstance(err, MemoryError) and not str(err):
        return "out of memory"
    text = " ".join((str(err) or type(err).__name__).split())
    if not isinstance(err, (ConfigError, DataError, OSError, MemoryError)):
        return (f"{INTERNAL} ({type(err).__name__}: {text}); this is a bug, please report it with the command "
                f"(NOLOCO_DEBUG=1 shows the traceback)")
    return text


def report(prog: str, err: BaseException) -> int:
    """Print ``PROG: error: ...`` on one line (after the traceback under ``NOLOCO_DEBUG=1``) and return
    the error's exit code."""
    if os.environ.get("NOLOCO_DEBUG") == "1":
        traceback.print_exception(err)
    print(f"{prog}: error: {describe(err)}", file=sys.stderr)
    _json_error(prog, exit_code(err), describe(err))
    return exit_code(err)


@dataclasses.dataclass
class _Run:
    """The run in progress: its name, whether ``--json`` was asked for, the exit-1 reasons it gave (:func:`failed`),
    and whether its ``--json`` report is printed."""

    prog: str = "noloco"
    json: bool = False
    failed: list = dataclasses.field(default_factory=list)
    printed: bool = False


_state = _Run()


def report_printed() -> None:
    """The command's ``--json`` report is on stdout (:func:`noloco.infra.files.print_json`)."""
    _state.printed = True


def _json_error(prog: str, code: int, message: str) -> None:
    """Under ``--json``, the error as a JSON object on stdout (docs/cli.md's contract: a pipeline reads why, not an
    empty input), unless the command already printed its report there."""
    from noloco.infra import files

    if _state.json and not _state.printed:
        with contextlib.suppress(OSError, ValueError):
            files.print_json({"schema_version": files.SCHEMA_VERSION,
                              "error": {"command": prog, "exit_code": code, "message": message}})
            sys.stdout.flush()


def failed(reason: str) -> int:
    """A checked condition fails: ``PROG: exit 1: REASON`` on stderr (``--json``'s stdout stays the report), and 1.
    Every command's exit 1 goes through here, or :func:`run` says that the output holds the reason."""
    _state.failed.append(reason)
    print(f"{_state.prog}: exit 1: {reason}", file=sys.stderr)
    return 1


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (``PROG: error: ...``) and exit code 2."""

    def error(self, message: str):
        line = " ".join(message.split())
        _json_error(self.prog, 2, line)
        self.exit(2, f"{self.prog}: error: {line}\n")


class CommandParser(OneLineParser):
    """A parser of subcommands: an argument no subcommand knows is reported by that subcommand's parser
    (``noloco check: error: unrecognized arguments: ...``), not by the top one. Call :func:`mark_parsers`
    once every subparser is added."""

    def parse_args(self, args=None, namespace=None):
        args, extras = self.parse_known_args(args, namespace)
        if extras:
            getattr(args, "parser", self).error(f"unrecognized arguments: {' '.join(extras)}")
        return args


def mark_parsers(parser: argparse.ArgumentParser) -> None:
    """Every (sub)parser records itself as the default ``parser``, so the deepest one chosen wins."""
    parser.set_defaults(parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                mark_parsers(child)


def argument_type(convert: Callable, check: Callable):
    """An argparse ``type`` that converts the text (``int``, ``float``, ``str``) and checks the value with one of
    :mod:`noloco.infra.checks`' validators, so a value out of range is a usage error at parse time (exit 2,
    before any work), with the validator's message: ``argument --points: points=0 is out of range; ...``."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {getattr(convert, '__name__', 'value')} value: {text!r}") from None
        try:
            return check(value)
        except ConfigError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


#: the signals (``"SIGTERM"``, ``"Ctrl-C"``) received while :func:`run`'s work ran: an exception that a library
#: made of the KeyboardInterrupt (pybind11 turns one raised during an extension's import into ``ImportError:
#: initialization failed``) is still an interrupt
_received: list[str] = []


def _raise_terminated(signum, frame):
    _received.append("SIGTERM")
    raise Terminated()


def _raise_interrupt(signum, frame):
    _received.append("Ctrl-C")
    raise KeyboardInterrupt()


@contextlib.contextmanager
def termination_as_interrupt():
    """SIGTERM raises :class:`Terminated` (a KeyboardInterrupt) inside the block, so a scheduler's stop is
    handled like Ctrl-C: checkpoints written, locks released, exit 130; both are recorded (:func:`run` then
    knows an error that a library made of them for an interrupt). Only the main thread can set it."""
    _received.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    # Ctrl-C: Python's own handler, recorded (one that ignores it, nohup's, is left alone)
    interrupt = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    previous_int = signal.signal(signal.SIGINT, _raise_interrupt) if interrupt else None
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if interrupt:
            signal.signal(signal.SIGINT, previous_int)


def _interrupt_behind(err: BaseException) -> KeyboardInterrupt | None:
    """The interrupt an error stands for: a KeyboardInterrupt among its causes and contexts (a library that
    caught Ctrl-C or SIGTERM and raised its own error), or, for an error outside the contract (not a bad
    input or a fault, which keep their meaning), a signal received while the work ran."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    if _received and not isinstance(err, (ConfigError, DataError, OSError, MemoryError)):
        return Terminated() if _received[-1] == "SIGTERM" else KeyboardInterrupt()
    return None


@contextlib.contextmanager
def interrupts_held():
    """Ctrl-C and SIGTERM wait until the block is done, then arrive as they would have (their handlers run):
    for steps that must not be split by an interrupt (:func:`noloco.infra.files.atomic_write`'s make the
    temporary and learn its name, rename it and forget it), and for code where a KeyboardInterrupt would be
    swallowed (numba's compiler, :mod:`noloco.infra.jit`). Off the main thread, where no handler runs, a no-op."""
    held = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or any(signal.getsignal(s) is None for s in held):
        yield  # (None: a handler installed outside Python, which could not be put back)
        return
    caught: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: caught.append(signum)) for signum in held}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if caught:
            signal.raise_signal(caught[0])


class StopRequest:
    """Ctrl-C and SIGTERM deferred to the points where the work can stop cleanly (:func:`deferred_stop`):
    ``signal_name`` is None until one arrives; a second one raises at once."""

    def __init__(self):
        self.signal_name: str | None = None

    def __call__(self, signum, frame):
        name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
        _received.append(name)
        if self.signal_name is not None:  # asked twice: stop now
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        self.signal_name = name


@contextlib.contextmanager
def deferred_stop():
    """Inside the block Ctrl-C and SIGTERM only set the yielded :class:`StopRequest`, so the work can finish
    its step, save its state and raise :class:`Interrupted`; a second signal stops at once. Off the main
    thread signals keep their meaning and the request never fires."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = signal.signal(signal.SIGINT, request), signal.signal(signal.SIGTERM, request)
    try:
        yield request
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


@contextlib.contextmanager
def quiet_arithmetic():
    """numpy's overflow / invalid-value warnings off (``NOLOCO_DEBUG=1`` keeps them)."""
    import warnings

    import numpy as np

    if os.environ.get("NOLOCO_DEBUG") == "1":
        yield
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning,
                                message=r".*(overflow|invalid value|divide by zero|underflow)")
        yield


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
    """Send what is still buffered for a closed stdout to /dev/null, so the final flush raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def run(prog: str, parser: argparse.ArgumentParser, work: Callable[[argparse.Namespace], int | None],
        argv: list[str] | None = None, *, name: Callable[[argparse.Namespace], str] | None = None) -> int:
    """Parse ``argv`` with ``parser`` and call ``work(args)`` under the contract; the exit code.
    ``name(args)`` names the command in messages once the arguments are known (``noloco llm train``)."""
    tokens = sys.argv[1:] if argv is None else argv
    _state.prog, _state.json, _state.failed, _state.printed = prog, "--json" in tokens, [], False
    with termination_as_interrupt():
        try:
            try:
                args = parser.parse_args(argv)
            except SystemExit as stop:  # argparse: --help/--version (0) or a usage error (2, printed)
                sys.stdout.flush()
                return 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 2
            prog = name(args) if name else prog
            _state.prog, _state.json = prog, bool(getattr(args, "json", False))
            with quiet_arithmetic():
                code = int(work(args) or 0)
            sys.stdout.flush()  # a closed pipe shows here, not at exit
            if code == 1 and not _state.failed:  # docs/cli.md: exit 1 always says why on stderr
                print(f"{prog}: exit 1: a checked condition fails (the output above says which)", file=sys.stderr)
            return code
        except BrokenPipeError as err:
            if not _reader_gone():  # a broken pipe that is not stdout: an environment fault like any other
                return report(prog, err)
            _silence_stdout()
            return 0
        except KeyboardInterrupt as err:
            return _report_interrupt(prog, err)
        except Exception as err:  # noqa: BLE001 - the contract: every error is one line and a code
            behind = _interrupt_behind(err)
            if behind is not None:
                if os.environ.get("NOLOCO_DEBUG") == "1":
                    traceback.print_exception(err)
                return _report_interrupt(prog, behind)
            return report(prog, err)


def _report_interrupt(prog: str, err: KeyboardInterrupt) -> int:
    """``PROG: interrupted`` (or ``terminated (SIGTERM)``) with the work's hint; exit 130."""
    hint = getattr(err, "hint", "")
    how = "terminated (SIGTERM)" if getattr(err, "signal_name", "") == "SIGTERM" else "interrupted"
    print(f"{prog}: {how}{'; ' + hint if hint else ''}", file=sys.stderr)
    _json_error(prog, 130, f"{how}{'; ' + hint if hint else ''}")
    return 130


def end_rank(code: int) -> None:
    """End a torchrun rank without the interpreter's finalisation. After the work (the process group destroyed,
    every file written and synced), torch's C++ static destructors sometimes abort a gloo rank at exit
    ("terminate called without an active exception", signal 6: 6 of 16 runs of 4 ranks on this machine), and
    torchrun then reports the whole run as failed. One process keeps the usual exit. Here, torch-free: a rank
    stopped by SIGTERM while importing torch must not import it again (a second import of a half-imported torch
    ends in a traceback, "duplicate registrations for aten...")."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def print_main(prog: str, doc: str, produce: Callable[[], str], argv: list[str] | None = None) -> int:
    """The entry of a module that prints one table (``python -m noloco.quadratic.agreement``): ``--help``
    shows ``doc``'s first paragraph, and ``produce()`` runs under the contract."""
    parser = OneLineParser(prog=prog, description=doc.split("\n\n")[0])
    return run(prog, parser, lambda args: print(produce()), argv)
