"""The flags of ``noloco llm train`` (and of the torchrun entry, which is the same command): a run's
settings (:class:`noloco.llm_check.config.TrainConfig`), the outer step's flags shared with every command
(:func:`noloco.cli.options.add_outer_arguments`) and the run flags (folder, resume, threads, budget, what the
run shows). Every flag may also come from a TOML file (``--config``, :mod:`noloco.cli.config_file`); a flag
given on the command line wins. ``--size`` is the model and the run (:data:`noloco.llm_check.config.SIZES`),
``--preset`` the outer step's preset, the same as in ``noloco check`` (a size given as ``--preset``, the old
form, is taken as ``--size`` with one line on stderr: :func:`split_size`). Every flag's default is in its help
or, where the size decides it, in the table of sizes that ends ``--help`` (:func:`preset_table`, computed from
the sizes themselves)."""

from __future__ import annotations

import argparse
import dataclasses

from noloco.cli.options import add_outer_arguments
from noloco.infra.checks import check_choice, check_timeout
from noloco.infra.errors import ConfigError, warn
from noloco.llm_check.config import (DEFAULT_TIMEOUT, DTYPES, INNER_OPTIMIZERS, OUTER_PRESET, REPLICA_MODES, SIZES,
                                     SCHEDULES, TrainConfig, build, check_run_flags, default_log_every)
from noloco.llm_check.domains import ALL_TRAINING, NAMES as DOMAIN_NAMES
from noloco.llm_check.routing import ROUTINGS
from noloco.theory.config import OUTER_FIELDS
from noloco.theory.methods import METHOD_SUMMARY, METHODS, PRESETS as OUTER_PRESETS

#: where an outer value comes from when its flag is absent: N from the size, the rest from the outer preset
OUTER_DEFAULTS = {name: "default: the --size's, table below" if name == "replicas" else
                  "default: the --preset's, else the method's (--size paper: the paper preset's); table below"
                  for name in ("replicas", "group_size", "alpha", "beta", "gamma")}

_FLAG_HELP = {
    "inner_steps": "inner steps H per outer step (ddp: steps between evaluations)", "outer_steps": "outer steps",
    "lr": "inner AdamW peak learning rate", "min_lr_frac": "cosine floor as a fraction of lr",
    "warmup": "warm-up inner steps (fewer than outer_steps * inner_steps)", "weight_decay": "AdamW weight decay",
    "adam_beta2": "inner AdamW second-moment decay beta2 (beta1 is 0.9; paper preset 0.999)",
    "clip": "per-replica gradient norm clip (0: off)", "batch": "windows per replica per inner step",
    "ctx": "context length (bytes)", "layers": "transformer blocks", "heads": "attention heads",
    "width": "model width", "mlp_hidden": "hidden units of each block's MLP (default 4 x width)",
    "eval_every": "outer steps between evaluations (metrics.jsonl rows)",
    "ckpt_every": "outer steps between checkpoints (default: --eval-every); a checkpoint is also written "
                  "at the end and at --stop-after",
    "val_windows": "validation windows", "seed": "seed of initialisation, data and groups",
    "device": "cpu, cuda or cuda:K; under torchrun give cuda: each rank uses cuda:LOCAL_RANK",
    "stages": "pipeline stages S, each with N replicas: the embedding, blocks and head split into S consecutive "
              "parts (1 to layers + 2; S > 1 unties the head from the embedding); under torchrun S x N processes",
    "skip_prob": "probability that a microbatch skips each middle stage (stages >= 3; 0: never)",
}


#: the method whose outer step the table of presets shows
TABLE_METHOD = "noloco"
#: flags that act on one invocation rather than set the run: refused in a --config file
COMMAND_ONLY = ("config", "print_config", "json", "resume", "overwrite", "stop_after")


def _shown(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def preset_defaults() -> dict[str | None, dict]:
    """``{size (None: no size): {flag dest: its default}}`` for --method noloco, computed by
    :func:`noloco.llm_check.config.build` from the sizes, as a run resolves them."""
    columns = {}
    for size in (None, *SIZES):
        cfg = build(size, TABLE_METHOD)
        outer = {k: getattr(cfg.outer, k) for k in OUTER_FIELDS}
        rest = {k: v for k, v in cfg.as_dict().items() if k not in ("method", "outer")}
        columns[size] = {**outer, **rest, "log_every": default_log_every(cfg)}
    return columns


def preset_table(columns: dict[str | None, dict]) -> str:
    """The outer step's flags and those whose default depends on --size, one row each, a column per size."""
    first = columns[None]
    varying = [k for k in first if k in OUTER_FIELDS or len({_shown(c[k]) for c in columns.values()}) > 1]
    head = ["flag", *("(no size)" if p is None else p for p in columns)]
    rows = [head] + [["--" + k.replace("_", "-"), *(_shown(c[k]) for c in columns.values())] for k in varying]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    return (f"Defaults by --size (the outer step for --method {TABLE_METHOD}; --method diloco starts from\n"
            f"alpha 0.3, beta 0.7 outside --size paper, or --preset's values); --config FILE, then the command line,\n"
            f"override them:\n"
            + "\n".join("  " + line for line in lines))


class TableHelpFormatter(argparse.HelpFormatter):
    """argparse's formatter that keeps a text written over several lines (the table of sizes) as written,
    and wraps the others."""

    def _fill_text(self, text, width, indent):
        return "\n".join(indent + line for line in text.splitlines()) if "\n" in text else \
            super()._fill_text(text, width, indent)


def _default_help(name: str, columns: dict) -> str:
    """Where the flag's value comes from when it is not given."""
    values = {_shown(c[name]) for c in columns.values()}
    if len(values) > 1 or name in OUTER_FIELDS:
        return " (default: the size's, table below)"
    value = values.pop()
    return "" if value == "-" else f" (default {value})"


def add_train_arguments(parser: argparse.ArgumentParser, methods_list: bool = False) -> None:
    columns = preset_defaults()
    parser.epilog = preset_table(columns)
    parser.formatter_class = TableHelpFormatter
    parser.add_argument("--config", metavar="FILE",
                        help="read flags from a TOML file: a key per flag, its name with _ for - (outer_steps = 10, "
                             "method = \"noloco\"); flags on the command line win; docs/llm_check.md has an example")
    parser.add_argument("--size", choices=tuple(SIZES),
                        help="the model and the run, every setting but the outer step (default: none, the values of "
                             "the table's first column): cpu-tiny: smoke run < 1 min; cpu-small: N = 8 comparison on "
                             "a 2-core CPU; paper: the NoLoCo reference run's inner settings on the cpu-small model "
                             "(its outer step: --preset paper unless another is given); gpu: one H100/H200 (10.8 M "
                             "parameters); gpu-large: 43 M parameters, compiled, one H100/H200")
    parser.add_argument("--preset", choices=(*OUTER_PRESETS, *(s for s in SIZES if s not in OUTER_PRESETS)),
                        metavar="{" + ",".join(OUTER_PRESETS) + "}",
                        help="the outer step's preset, as in noloco check: "
                             + "; ".join(f"{name}: {p.note}" for name, p in OUTER_PRESETS.items())
                             + " (default: the method's). A size given here (--preset cpu-tiny) is the old form of "
                               "--size, still taken, with one line on stderr")
    parser.add_argument("--method", default=None,
                        help=("the algorithm" + (" (a comma-separated list runs each): " if methods_list else ": "))
                        + "; ".join(f"{m}: {METHOD_SUMMARY[m]}" for m in METHODS)
                        + ". diloco starts from alpha 0.3, beta 0.7, heavy-ball (--preset diloco)"
                        + (" (default: ddp,diloco,noloco with --size cpu-small, else --preset's method, else noloco)"
                           if methods_list else ""))
    add_outer_arguments(parser, OUTER_DEFAULTS, momentum=_default_help("momentum", columns).strip(" ()"))
    for f in dataclasses.fields(TrainConfig):
        if f.name not in ("method", "outer", "noniid", "compile", "schedule", "dtype", "replica_mode", "routing", "outer_dtype",
                          "inner_optimizer", "domain"):
            parser.add_argument("--" + f.name.replace("_", "-"), type=int if f.default is None else type(f.default),
                                default=None, help=_FLAG_HELP[f.name] + _default_help(f.name, columns))
    parser.add_argument("--schedule", choices=SCHEDULES, default=None,
                        help="inner learning rate after the warm-up: cosine to min_lr_frac * lr, or constant"
                             + _default_help("schedule", columns))
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="parameter and compute dtype" + _default_help("dtype", columns))
    parser.add_argument("--inner-optimizer", choices=INNER_OPTIMIZERS, default=None,
                        help="inner optimiser: adamw (default; its state carries over outer steps) or plain sgd "
                             "(no momentum; --weight-decay is then an L2 term; needs a much larger --lr)")
    parser.add_argument("--outer-dtype", choices=("same",) + DTYPES, default=None,
                        help="dtype of the outer state (phi and the outer momentum), rounded to it after every "
                             "outer step; the reference keeps it in bfloat16 (default: same as --dtype)")
    parser.add_argument("--replica-mode", choices=REPLICA_MODES, default=None,
                        help="batched replica-dimension model, a loop over replicas, or auto (batched; the default)")
    parser.add_argument("--routing", choices=ROUTINGS, default=None,
                        help="with --stages > 1: fixed (replica r of every stage forms one model; the default) or "
                             "random (every microbatch visits a random replica of each stage after the first, a "
                             "fresh permutation per stage, step and batch position)")
    parser.add_argument("--domain", default=None,
                        help=f"train and validate on these domains of the corpus only: one of {', '.join(DOMAIN_NAMES)}, "
                             f"a comma-separated list, or {ALL_TRAINING} (every domain not held out); "
                             f"noloco.llm_check.domains, docs/hdee.md (default: all the text)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the training step (forward and backward; its first step takes the "
                             "compilation, about a minute): faster on a GPU, rarely on a CPU"
                             + _default_help("compile", columns))
    parser.add_argument("--noniid", action="store_true", default=None,
                        help="non-IID shards: each replica reads different source files (default off: IID)")
    parser.add_argument("--print-config", action="store_true",
                        help="print each run's resolved settings (size and preset, --config, flags, then the method) with its "
                             "memory and time estimates as JSON, and exit without training or touching --out")
    parser.add_argument("--out", default=None,
                        help="output directory (metrics.jsonl, checkpoints, result.json; required, here or in "
                             "--config); one that holds a run needs --resume or --overwrite, and a folder in use by "
                             "a live run is refused")
    parser.add_argument("--resume", action="store_true", help="continue from OUT's last checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run in OUT (its metrics, checkpoints and result.json are deleted)")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop after this many outer steps, as if interrupted, with a checkpoint "
                             "(resume with --resume; default: none, run to the end)")
    parser.add_argument("--log-every", type=int, default=None, metavar="N",
                        help="a live line every N inner steps: train loss, learning rate, tokens/s, ms per step "
                             "(and MFU on a GPU), on stderr (default: the run's inner steps H, one line per outer "
                             "step; table below)")
    parser.add_argument("--tensorboard", action="store_true",
                        help="also write the live lines' and the evaluations' scalars as TensorBoard events under "
                             "OUT/tensorboard (needs the tb extra: pip install -e '.[tb]')")
    parser.add_argument("--json", action="store_true",
                        help="print the runs' results as one JSON report on stdout instead of the table (live "
                             "lines stay on stderr)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default torch's; 1 is much faster on a shared, busy CPU)")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"seconds to wait for a peer in distributed mode before failing "
                             f"(default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--max-memory", default=None, metavar="SIZE",
                        help="memory budget of a run, e.g. 8G, 500M or bytes (default: half the memory "
                             "available, or 90%% of the GPU's free memory); a run whose estimate is above it "
                             "is refused before it starts")


def apply_config_file(args) -> dict:
    """``--config``'s values merged into ``args`` (the command line wins, :mod:`noloco.cli.config_file`), then
    the run flags' own defaults; ``{dest: value}`` taken from the file."""
    from noloco.cli.config_file import merge

    taken = {}
    if args.config is not None:
        taken = merge(args, args.config, args.parser._actions, COMMAND_ONLY)
    if args.out is None:
        raise ConfigError("--out is required (on the command line, or out = \"DIR\" in --config)")
    if args.timeout is None:
        args.timeout = DEFAULT_TIMEOUT
    check_timeout("--timeout", args.timeout)
    return taken


def split_size(args) -> None:
    """The old form of ``--size``: a size given as ``--preset`` (or ``preset = "cpu-tiny"`` in --config) is taken
    as ``--size``, with one line on stderr; ``--preset paper`` without ``--size`` also sets ``--size paper``, as
    it did when ``--preset`` was the llm preset (the same run as before)."""
    preset, size = getattr(args, "preset", None), getattr(args, "size", None)
    if preset in SIZES and preset not in OUTER_PRESETS:
        if size is not None:
            raise ConfigError(f"--preset {preset} is a size (the old form of --size) and --size {size} is given; "
                              f"give --size only")
        warn(f"--preset {preset} is deprecated for the model and the run; use --size {preset}")
        args.size, args.preset = preset, None
    elif preset in SIZES and size is None and OUTER_PRESET.get(preset) == preset:
        warn(f"--preset {preset} without --size also sets --size {preset}, as before; give --size {preset} "
             f"(--preset alone will set the outer step only)")
        args.size = preset


def config_from_args(args, method: str | None = None) -> TrainConfig:
    split_size(args)
    names = (*OUTER_FIELDS, *(f.name for f in dataclasses.fields(TrainConfig) if f.name not in ("method", "outer")))
    if method is None and args.method is not None:
        method = check_choice("method", args.method.strip(), METHODS)
    check_run_flags(args)
    return build(args.size, method, preset=args.preset, gamma_tied=getattr(args, "gamma_tied", False),
                 **{k: getattr(args, k, None) for k in names})


def configs_from_args(args) -> list[TrainConfig]:
    """One validated config per method of ``--method a,b,...`` (default: ddp,diloco,noloco for
    the cpu-small comparison, else the outer preset's method, else noloco), all built before any run starts."""
    split_size(args)
    default = "ddp,diloco,noloco" if args.size == "cpu-small" else \
        OUTER_PRESETS[args.preset].method if args.preset else "noloco"
    text = default if args.method is None else args.method
    return [config_from_args(args, check_choice("method", m.strip(), METHODS)) for m in text.split(",")]
