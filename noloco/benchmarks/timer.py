"""The one timer and the one result format of every benchmark.

Each benchmark reports seconds as the best of ``repeat`` runs (the least disturbed by other
work on the machine) and writes one JSON document per run with the machine, the versions and
the load average before and after, so a number can be judged by the conditions it was
measured under.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from noloco.infra.record import JsonRecord


def best_of(fn, repeat: int = 3) -> float:
    """Seconds of the fastest of ``repeat`` calls of ``fn()``."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def fresh_process_seconds(statement: str) -> float:
    """Seconds ``statement`` takes in a new interpreter (nothing imported or cached yet)."""
    import subprocess

    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    return float(out.stdout.strip())


def command_seconds(argv: list, root=None, peak_memory: bool = False):
    """Wall seconds of ``python -m noloco ARGV`` in a fresh process with an empty cache, ``root``
    (default: this checkout) first on the path; with ``peak_memory`` also the process's peak
    resident memory in bytes (``(seconds, bytes)``)."""
    import subprocess
    import tempfile

    root = Path(root) if root else Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONPATH": str(root), "NOLOCO_CACHE": cache}
        start = time.perf_counter()
        # the peak is the child's own high-water mark (VmHWM; ru_maxrss would count the forked parent)
        code = ("import atexit, runpy, sys; atexit.register(lambda: print('peak', [l.split()[1] for l in "
                "open('/proc/self/status') if l.startswith('VmHWM')][0], file=sys.stderr)); "
                f"sys.argv = ['noloco'] + {list(map(str, argv))!r}; runpy.run_module('noloco', run_name='__main__')")
        proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            from noloco.infra.errors import DataError

            raise DataError(f"noloco {' '.join(map(str, argv))} exited {proc.returncode}: {proc.stderr[-500:]}")
    if not peak_memory:
        return seconds
    peak = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("peak ")]
    return seconds, int(peak[-1]) * 1024 if peak else None


@contextlib.contextmanager
def jit(setting: str):
    """``NOLOCO_JIT=setting`` (noloco.infra.jit) inside the block."""
    previous = os.environ.get("NOLOCO_JIT")
    os.environ["NOLOCO_JIT"] = setting
    try:
        yield
    finally:
        if previous is None:
            del os.environ["NOLOCO_JIT"]
        else:
            os.environ["NOLOCO_JIT"] = previous


def jit_paths() -> list:
    """The (path, ``NOLOCO_JIT``) pairs a benchmark times both ways: numpy, and compiled where
    numba is installed."""
    return [("numpy", "0")] + ([("compiled", "1")] if importlib.util.find_spec("numba") else [])


@dataclass(frozen=True)
class Machine(JsonRecord):
    """Where a benchmark ran: the processor, the CPUs, the platform, and the versions of Python, numpy and of
    scipy, torch and numba where the benchmark had imported them (None: not imported)."""

    OPTIONAL_KEYS = ("scipy", "torch", "numba")
    processor: str
    cpus: Optional[int]
    platform: str
    python: str
    numpy: str
    scipy: Optional[str] = None
    torch: Optional[str] = None
    numba: Optional[str] = None


def machine() -> Machine:
    imported = {name: module.__version__ for name in ("scipy", "torch", "numba")
                if (module := sys.modules.get(name)) is not None}
    return Machine(processor=platform.processor() or platform.machine(), cpus=os.cpu_count(),
                   platform=platform.platform(), python=platform.python_version(), numpy=np.__version__, **imported)


@dataclass(frozen=True)
class BenchResult(JsonRecord):
    """The one result document of every benchmark (:func:`run` writes it; the formatters and the plot read it
    back with ``from_json``): the options, when and where it ran, the load around it, and the benchmark's own
    ``results`` (the only key a result given to the plot must have)."""

    NESTED = {"machine": Machine}
    schema_version: Optional[int] = None
    benchmark: Optional[str] = None
    options: Optional[dict] = None
    started: Optional[str] = None
    wall_s: Optional[float] = None
    machine: Optional[Machine] = None
    load_average_before: Optional[list] = None
    load_average_after: Optional[list] = None
    results: Any = field(kw_only=True)


def run(name: str, measure, **options) -> dict:
    """``measure(**options)`` wrapped into the one result document (a :class:`BenchResult`'s JSON)."""
    from noloco.infra.files import SCHEMA_VERSION

    load_before = os.getloadavg()
    started = time.time()
    results = measure(**options)
    return BenchResult(schema_version=SCHEMA_VERSION, benchmark=name, options=options,
                       started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                       wall_s=time.time() - started, machine=machine(), load_average_before=list(load_before),
                       load_average_after=list(os.getloadavg()), results=results).to_json()


def integer(name: str, low: int, high: int):
    """An argparse ``type`` for a benchmark's size flag: an integer ``low <= value <= high`` (the upper bound keeps
    a benchmark within a machine's memory and a day's time), checked before any work."""
    from noloco.infra.checks import check_integer
    from noloco.infra.entry import argument_type

    return argument_type(int, lambda v: check_integer(name, v, f"an integer {low} <= {name} <= {high:,}".replace(",", "_"),
                                                      lambda v: low <= v <= high))


def checked_out(args) -> None:
    """``--out`` of a benchmark checked before the work (an empty name exit 2, an unwritable place exit 3)."""
    from noloco.infra.files import output_file

    if getattr(args, "out", None) is not None:
        output_file(args.out)


def add_output_arguments(parser) -> None:
    """The output flags of every benchmark command (``python -m benchmarks NAME``, ``noloco llm bench``)."""
    parser.add_argument("--json", action="store_true", help="print the JSON result instead of a table")
    parser.add_argument("--out", help="also write the JSON result to this file (atomically)")


def emit(result: dict, args, format_result) -> None:
    """Print a result as a table or JSON, and write it to ``args.out`` if given."""
    from noloco.infra.files import print_json, write_json

    if args.out:
        write_json(args.out, result)
    if args.json:
        print_json(result)
    else:
        print(format_result(result))
