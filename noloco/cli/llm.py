"""``noloco llm``: train a small GPT with ddp / diloco / noloco / local on the Python standard library's
sources, compare the measured replica spread with the theory, and benchmark batched replicas. Each
action is its own module ``noloco.cli.llm_<action>``: it parses, calls one function of
:mod:`noloco.llm_check` and prints. Every action but ``predict`` and ``tune`` (files only) needs torch."""

from __future__ import annotations

import importlib

ACTIONS = ("train", "validate", "predict", "tune", "evaluate", "bench", "ensemble", "study")
#: the actions that read files only
FILES_ONLY = ("predict", "tune")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "llm", help="train a small GPT with NoLoCo / DiLoCo / DDP and check the theory",
        description="Real training runs on CPython's standard-library text. Under torchrun use "
                    "`torchrun --nproc-per-node N -m noloco llm train ...` (one replica per rank; --replicas "
                    "defaults to the ranks). To see your runs: `noloco figs --only llm --llm-runs DIR` draws the "
                    "validation loss and the measured, predicted and forecast spread of every run under DIR.")
    sub = parser.add_subparsers(dest="llm_command", metavar="ACTION")
    sub.required = True
    for action in ACTIONS:
        module = importlib.import_module(f"noloco.cli.llm_{action}")
        module.add_parser(sub)
        sub.choices[action].set_defaults(run=module.run if action in FILES_ONLY else _needs_torch(module.run))


def _needs_torch(run):
    """``run``, after checking that torch is installed (exit 3 with the install command otherwise)."""
    def checked(args) -> int:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            from noloco.infra.errors import DataError

            raise DataError("torch is not installed; install the llm extra: pip install -e '.[llm]'")
        return run(args)

    return checked
