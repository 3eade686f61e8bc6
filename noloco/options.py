"""Hyperparameter flags shared by every subcommand that takes a NoLoCo setting
(``check``, ``simulate``, ``tune``), so a user moves between them by changing one word."""

from __future__ import annotations

import argparse

from theory.config import MOMENTUM_CONVENTIONS, PRESETS, InnerConfig, OuterConfig
from theory.spectrum import Spectrum

DEFAULT_CURVATURE = 1.0


def add_hyper_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("NoLoCo setting (a preset, then any flag overrides it)")
    g.add_argument("--preset", choices=sorted(PRESETS),
                   help="paper: pairs, alpha 0.5, beta = gamma = 0.7, H 50, heavy-ball; "
                        "diloco: n = N, alpha 0.9 Nesterov, beta 0.7, H 500")
    g.add_argument("--replicas", "-N", type=int, help="number of replicas N (default 8)")
    g.add_argument("--group-size", "-n", type=int, help="group size n, dividing N (default 2; n = N is DiLoCo)")
    g.add_argument("--alpha", type=float, help="outer momentum, 0 <= alpha < 1 (default 0.5)")
    g.add_argument("--beta", type=float, help="outer learning rate on the group-mean progress (default 0.7)")
    g.add_argument("--gamma", type=float, help="pull towards the group-mean weights (default 0.7)")
    g.add_argument("--gamma-tied", action="store_true",
                   help="set gamma = beta, as the NoLoCo reference code does")
    g.add_argument("--momentum", choices=MOMENTUM_CONVENTIONS,
                   help="heavy-ball (reference code) or nesterov (torch SGD(nesterov=True)); default heavy-ball")
    g.add_argument("--inner-lr", type=float, help="inner SGD learning rate eta (default 0.01)")
    g.add_argument("--inner-steps", "-H", type=int, help="inner steps H per outer step (default 50)")
    g.add_argument("--noise", type=float, help="gradient noise std sigma per coordinate (default 1.0)")
    shape = g.add_mutually_exclusive_group()
    shape.add_argument("--curvature", type=float,
                       help=f"curvature lambda of a one-direction quadratic (default {DEFAULT_CURVATURE})")
    shape.add_argument("--spectrum", type=str,
                       help="curvatures: 'L1,L2,...', 'uniform:LOW:HIGH:COUNT' or 'powerlaw:HIGH:EXPONENT:COUNT'")


def hyper_from_args(args: argparse.Namespace) -> tuple[OuterConfig, InnerConfig, Spectrum]:
    """Build the validated configs; raises ConfigError naming the bad field."""
    preset = PRESETS[args.preset] if args.preset else PRESETS["paper"]
    o, i = preset.outer, preset.inner
    pick = lambda value, default: default if value is None else value
    replicas = pick(args.replicas, o.replicas)
    if args.group_size is not None:
        group_size = args.group_size
    elif args.preset == "diloco":
        group_size = replicas  # DiLoCo is n = N whatever N is
    else:
        group_size = o.group_size
    beta = pick(args.beta, o.beta)
    gamma = beta if args.gamma_tied else pick(args.gamma, o.gamma)
    outer = OuterConfig(replicas=replicas, group_size=group_size, alpha=pick(args.alpha, o.alpha),
                        beta=beta, gamma=gamma, momentum=pick(args.momentum, o.momentum))
    inner = InnerConfig(lr=pick(args.inner_lr, i.lr), steps=pick(args.inner_steps, i.steps),
                        noise=pick(args.noise, i.noise))
    if args.spectrum is not None:
        spectrum = Spectrum.parse(args.spectrum)
    else:
        spectrum = Spectrum((pick(args.curvature, DEFAULT_CURVATURE),))
    return outer, inner, spectrum
