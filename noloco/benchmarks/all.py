"""Every benchmark in one run and one JSON result (machine, versions, load average):
the theory grid, the simulator (explicit, exact, per-replica loop, floors, optionally the
same command at an older commit), the comm simulation, check over a big spectrum, how cost
grows (scaling), and the LLM training step (when torch is installed).

    python -m benchmarks all [--baseline /tmp/base] [--skip llm-step,...] --out result.json
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, replace
from typing import Optional

from noloco.infra.record import JsonRecord

NAME = "all"
ORDER = ("theory-grid", "simulator", "comm", "check", "scaling", "llm-step")


@dataclass(frozen=True)
class Suite(JsonRecord):
    """One suite's entry in the result: the load average before it, then the suite's own results (``extra``); or
    why it was skipped, alone."""

    OPTIONAL_KEYS = ("load_average_before", "skipped")
    load_average_before: Optional[list] = None
    skipped: Optional[str] = None


def _skipped(text: str) -> str:
    from noloco.infra.checks import check_choice

    for name in text.split(","):
        if name.strip():
            check_choice("skip", name.strip(), ORDER)
    return text


def add_arguments(parser) -> None:
    from noloco.benchmarks.simulator import baseline_checkout
    from noloco.infra.entry import argument_type

    parser.add_argument("--baseline", type=argument_type(str, baseline_checkout),
                        help="a checkout of an older commit for the simulator's command comparison")
    parser.add_argument("--skip", type=argument_type(str, _skipped), default="",
                        help=f"comma-separated suites to leave out: {', '.join(ORDER)}")


def measure(baseline=None, skip: str = "") -> dict:
    from noloco.benchmarks.__main__ import SUITES

    skipped = {s.strip() for s in skip.split(",") if s.strip()}
    out = {}
    for name in ORDER:
        if name in skipped:
            continue
        module = importlib.import_module(SUITES[name])
        options = {"baseline": baseline} if name == "simulator" else {}
        if name == "llm-step":
            if importlib.util.find_spec("torch") is None:
                out[name] = Suite(skipped="torch is not installed").to_json()
                continue
            options = {"threads": 1}
        out[name] = Suite(load_average_before=list(os.getloadavg()), extra=module.measure(**options)).to_json()
    return out


def format_result(result: dict) -> str:
    from noloco.benchmarks.__main__ import SUITES
    from noloco.benchmarks.llm_step import StepOptions
    from noloco.benchmarks.timer import BenchResult

    doc = BenchResult.from_json(result)
    lines = []
    for name, res in doc.results.items():
        suite = Suite.from_json(res)
        lines.append(f"== {name} (load {(suite.load_average_before or [float('nan')])[0]:.2f})")
        if suite.skipped is not None:
            lines.append(f"skipped: {suite.skipped}")
            continue
        module = importlib.import_module(SUITES[name])
        options = StepOptions(replicas=8, size="cpu-small", device="cpu").to_json() if name == "llm-step" else {}
        lines.append(module.format_result(replace(doc, options=options, results=res).to_json()))
    return "\n".join(lines)
