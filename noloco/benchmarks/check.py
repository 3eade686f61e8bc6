"""`noloco check` over a big spectrum: wall time and peak memory of the command in a fresh
process (the spectrum is summed chunk by chunk).

    python -m benchmarks check [--spectrum powerlaw:1:1:100000000]
"""

from __future__ import annotations

from dataclasses import dataclass

from noloco.benchmarks.timer import BenchResult, command_seconds
from noloco.infra.record import JsonRecord

NAME = "check"


def _spectrum(text: str) -> str:
    from noloco.theory.spectrum import Spectrum

    Spectrum.parse(text)  # a ConfigError (exit 2) now, not a failed command after the fresh process started
    return text


def add_arguments(parser) -> None:
    from noloco.infra.entry import argument_type

    parser.add_argument("--spectrum", type=argument_type(str, _spectrum), default="powerlaw:1:1:100000000",
                        help="the spectrum checked")


def measure(spectrum="powerlaw:1:1:100000000") -> dict:
    argv = ["check", "--spectrum", spectrum, "--json"]
    seconds, peak = command_seconds(argv, peak_memory=True)
    return CommandTiming(command="noloco " + " ".join(argv), seconds=seconds, peak_rss_bytes=peak).to_json()


@dataclass(frozen=True)
class CommandTiming(JsonRecord):
    """One command timed in a fresh process, with its peak resident memory."""

    command: str
    seconds: float
    peak_rss_bytes: int


def format_result(result: dict) -> str:
    r = CommandTiming.from_json(BenchResult.from_json(result).results)
    return f"`{r.command}`: {r.seconds:.1f} s, peak memory {r.peak_rss_bytes / 2 ** 20:.0f} MiB"
