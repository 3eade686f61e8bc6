"""Hyperparameter flags shared by every subcommand that takes a NoLoCo setting
(``check``, ``simulate``, ``tune``), so a user moves between them by changing one word.
What a preset or a method means lives in :mod:`noloco.theory.methods`; this module only parses."""

from __future__ import annotations

import argparse

from noloco.theory.config import MOMENTUM_CONVENTIONS
from noloco.theory.methods import METHOD_SUMMARY, METHODS, PRESETS
from noloco.theory.spectrum import DEFAULT_CURVATURE


def _table(rows: dict) -> str:
    return "; ".join(f"{name}: {text}" for name, text in rows.items())


#: the outer step's flags, declared once for every command that takes an outer setting (``check``,
#: ``simulate``, ``tune``, ``llm train``, ``llm ensemble``); the help names each command's defaults
OUTER_FLAGS = {
    "replicas": (("--replicas", "-N"), int, "number of replicas N (under torchrun: the number of processes)"),
    "group_size": (("--group-size", "-n"), int, "group size n, dividing N (n = N is DiLoCo; local sets 1)"),
    "alpha": (("--alpha",), float, "outer momentum, 0 <= alpha < 1 (local and ddp set 0)"),
    "beta": (("--beta",), float, "outer learning rate on the group-mean progress (local and ddp set 1)"),
    "gamma": (("--gamma",), float, "pull towards the group-mean weights (diloco, local and ddp set 0)"),
}
PAPER_DEFAULTS = {"replicas": "paper preset: 8", "group_size": "paper preset: 2", "alpha": "paper preset: 0.5",
                  "beta": "paper preset: 0.7", "gamma": "paper preset: 0.7"}


def add_outer_arguments(group, defaults: dict, momentum: str = "default: heavy-ball") -> None:
    """``--replicas --group-size --alpha --beta --gamma --gamma-tied --momentum`` (None when not given: the
    preset, then the flags, then the method decide, :func:`noloco.theory.methods.resolve`); ``defaults``
    says in each help where the value comes from when the flag is absent, ``momentum`` the same for --momentum."""
    for name, (flags, kind, text) in OUTER_FLAGS.items():
        group.add_argument(*flags, dest=name, type=kind, default=None, help=f"{text} ({defaults[name]})")
    group.add_argument("--gamma-tied", action="store_true",
                       help="set gamma = beta, as the NoLoCo reference code does (not with --gamma)")
    group.add_argument("--momentum", choices=MOMENTUM_CONVENTIONS, default=None,
                       help="outer momentum convention: heavy-ball (reference code) or nesterov (torch "
                            f"SGD(nesterov=True)) ({momentum})")


def add_hyper_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "NoLoCo setting", "A preset, then any flag given, then the method's constraints; a flag that the "
                          "method fixes to another value is an error (exit 2).")
    g.add_argument("--preset", choices=tuple(PRESETS),
                   help="start from a named setting (default: diloco for --method diloco, else paper): "
                        + _table({name: p.note for name, p in PRESETS.items()}))
    g.add_argument("--method", choices=METHODS,
                   help="the algorithm, the same in every command (default: the preset's, else noloco): "
                        + _table(METHOD_SUMMARY))
    add_outer_arguments(g, PAPER_DEFAULTS)
    g.add_argument("--inner-lr", type=float, help="inner SGD learning rate eta (presets: 0.01)")
    g.add_argument("--inner-steps", "-H", type=int, help="inner steps H per outer step (paper preset: 50)")
    g.add_argument("--noise", type=float, help="gradient noise std sigma per coordinate (presets: 1.0)")
    shape = g.add_mutually_exclusive_group()
    shape.add_argument("--curvature", type=float,
                       help=f"curvature lambda of a one-direction quadratic (default {DEFAULT_CURVATURE})")
    shape.add_argument("--spectrum", type=str,
                       help="curvatures: 'L1,L2,...', 'uniform:LOW:HIGH:COUNT' or 'powerlaw:HIGH:EXPONENT:COUNT'")


def add_inner_model_arguments(parser, correlation: bool = False) -> None:
    """The inner phase beyond i.i.d. SGD noise (``noloco.theory.exchangeable.InnerModel``), shared by
    ``check`` (a prediction) and ``simulate`` (a run and its prediction)."""
    parser.add_argument("--inner-optimizer", choices=("sgd", "momentum", "adam"), default="sgd",
                        help="inner optimizer whose state is carried across outer steps: sgd (default), "
                             "momentum (torch convention, --inner-momentum) or adam (betas 0.9, 0.999; the theory "
                             "linearises it near the optimum)")
    parser.add_argument("--inner-momentum", type=float,
                        help="momentum of --inner-optimizer momentum (default 0.9; refused with another optimizer)")
    parser.add_argument("--zeta", type=float, default=0.0,
                        help="std of the replicas' optima offsets (heterogeneous data; inner SGD; default 0)")
    if correlation:
        parser.add_argument("--noise-correlation", type=float, default=0.0,
                            help="AR(1) correlation rho of a replica's SGD progress noise from one outer step to the "
                                 "next, -1 < rho < 1 (default 0: independent)")


def inner_momentum_from_args(args) -> float:
    """``--inner-momentum`` (default 0.9); refused without ``--inner-optimizer momentum``."""
    from noloco.infra.errors import ConfigError

    if args.inner_momentum is not None and args.inner_optimizer != "momentum":
        raise ConfigError(f"--inner-momentum {args.inner_momentum:g} applies to --inner-optimizer momentum only "
                          f"(here {args.inner_optimizer}); drop it or add --inner-optimizer momentum")
    return 0.9 if args.inner_momentum is None else args.inner_momentum


def inner_model_from_args(args):
    """The validated :class:`noloco.theory.exchangeable.InnerModel` of the flags."""
    from noloco.theory.exchangeable import InnerModel

    return InnerModel(args.inner_optimizer, inner_momentum_from_args(args), getattr(args, "noise_correlation", 0.0),
                      args.zeta)


def add_memory_argument(parser) -> None:
    """``--max-memory`` of the commands that estimate their memory before any work (noloco.infra.budget)."""
    parser.add_argument("--max-memory", metavar="SIZE",
                        help="memory budget, e.g. 2G or 500M (default: half the available memory); work above "
                             "it is streamed where the result allows, else refused before it starts (exit 3)")


def add_time_argument(parser) -> None:
    """``--max-time`` of the commands that estimate their time before long work (noloco.infra.budget)."""
    parser.add_argument("--max-time", metavar="DURATION",
                        help="time budget, e.g. 90, 30m, 2h or none (default 1h): work estimated above it is refused "
                             "before it starts (exit 3); an estimate above a minute is printed first")


def hyper_from_args(args: argparse.Namespace, default_shape: bool = True):
    """``(method, outer, inner, spectrum)``, validated (ConfigError naming the bad field).
    ``spectrum`` is the quadratic's curvatures as given; when neither --curvature nor
    --spectrum is, it is one direction of curvature :data:`DEFAULT_CURVATURE`, or None
    without ``default_shape`` (``simulate``: its objective decides)."""
    from noloco.theory.methods import resolve
    from noloco.theory.spectrum import Spectrum

    method, outer, inner = resolve(
        args.preset, args.method, gamma_tied=args.gamma_tied, replicas=args.replicas,
        group_size=args.group_size, alpha=args.alpha, beta=args.beta, gamma=args.gamma,
        momentum=args.momentum, lr=args.inner_lr, steps=args.inner_steps, noise=args.noise)
    if args.spectrum is not None:
        spectrum = Spectrum.parse(args.spectrum)
    elif args.curvature is not None or default_shape:
        spectrum = Spectrum((DEFAULT_CURVATURE if args.curvature is None else args.curvature,))
    else:
        spectrum = None
    return method, outer, inner, spectrum
