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

NAME = "all"
ORDER = ("theory-grid", "simulator", "comm", "check", "scaling", "llm-step")


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
                out[name] = {"skipped": "torch is not installed"}
                continue
            options = {"threads": 1}
        out[name] = {"load_average_before": list(os.getloadavg()), **module.measure(**options)}
    return out


def format_result(result: dict) -> str:
    from noloco.benchmarks.__main__ import SUITES

    lines = []
    for name, res in result["results"].items():
        lines.append(f"== {name} (load {res.get('load_average_before', [float('nan')])[0]:.2f})")
        if "skipped" in res:
            lines.append(f"skipped: {res['skipped']}")
            continue
        module = importlib.import_module(SUITES[name])
        options = {"replicas": 8, "size": "cpu-small", "device": "cpu"} if name == "llm-step" else {}
        lines.append(module.format_result({**result, "options": options, "results": res}))
    return "\n".join(lines)
