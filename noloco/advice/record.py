"""A run folder read into a typed record: what the advice needs of a run, with names.

A run folder holds ``result.json`` (its settings under ``"config"``, and how it ended), ``metrics.jsonl``
(one row per evaluation: ``outer_step``, ``weight_std``, losses) and, where the theory's inputs were
measured, ``inputs.jsonl`` (one row per outer step). :func:`read_run` reads it into a :class:`RunRecord`;
its setting is a :class:`RunSetting`: the outer step, the inner schedule the forecast needs, and the rest of
the settings kept as data (compared between runs, never interpreted). Nothing here imports torch.

The folders :class:`noloco.training.observer.Observer` writes on a user's own run (``"format": "noloco-run"``,
``"format_version"`` 1, docs/run_folder.md) are read the same way; a later format version is refused by name.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noloco.advice.run_rows import InputsRow, MetricsRow, RunResult
from noloco.infra.checks import check_choice, check_fields, check_integer, check_real
from noloco.infra.errors import ConfigError, DataError
from noloco.infra.files import NUMBER, input_dir, read_json, read_jsonl
from noloco.infra.record import JsonRecord
from noloco.theory.config import OuterConfig
from noloco.theory.methods import METHODS, check_outer, outer_from_json
from noloco.theory.schedules import SCHEDULES, learning_rate

#: what a run record's setting defaults to where an older run folder lacks the field (the harness's
#: defaults when the field was added: noloco.llm_check.config.TrainConfig; a test keeps them equal)
RECORD_DEFAULTS = {"method": "noloco", "inner_steps": 25, "outer_steps": 40, "lr": 2e-3, "schedule": "cosine",
                   "warmup": 100, "min_lr_frac": 0.1, "inner_optimizer": "adamw", "adam_beta2": 0.95, "noniid": False,
                   "val_windows": 64}
INNER_OPTIMIZERS = ("adamw", "sgd")
#: the versions of the ``noloco-run`` format (docs/run_folder.md) this reader knows
RUN_FORMAT_VERSIONS = (1,)
#: what a metrics.jsonl row's keys hold, where present (the run folder is user input: a string where a number
#: belongs is named at the read, not met as a TypeError in a format or a sum far from it)
METRIC_TYPES = {"outer_step": int, "step": int, "tokens": int, "weight_std": NUMBER, "theta_std": NUMBER,
                "train_loss": NUMBER, "val_loss_avg_model": NUMBER, "val_loss_replicas_mean": NUMBER,
                "perplexity": NUMBER, "tokens_per_s": NUMBER, "lr": NUMBER, "train_loss_per_replica": [NUMBER],
                "val_loss_per_replica": [NUMBER]}
#: the same for result.json's keys that the advice reads
RESULT_TYPES = {"config": dict, "n_params": int, "wall_s": NUMBER, "world_size": int, "outer_steps_done": int,
                "finished": bool, "part": dict, "run": dict, "final": dict}
#: the settings the advice reads by name; every other setting of a run is kept in ``RunSetting.other``
NAMED = ("method", "outer", "inner_steps", "outer_steps", "lr", "schedule", "warmup", "min_lr_frac",
         "inner_optimizer", "adam_beta2", "noniid", "val_windows")


@dataclass(frozen=True)
class OtherSettings(JsonRecord):
    """The settings among :attr:`RunSetting.other` that the advice reads by name, None where the run records none:
    the seed its groups were drawn from, its pipeline stages, the inner AdamW's beta1. As recorded (a run folder is
    user input): their readers check them."""

    seed: Any = None
    stages: Any = None
    adam_beta1: Any = None


@dataclass(frozen=True)
class RunSetting:
    """A run's setting as the advice reads it, validated at construction.

    The outer step, the inner phase's length and learning-rate schedule
    (:func:`noloco.theory.schedules.learning_rate`), the inner optimiser, and ``other``: every other setting
    of the run as sorted ``(name, value)`` pairs (the model, the data, the batch, the seed...).

    Args:
        method: a name in :data:`noloco.METHODS`. outer: an :class:`noloco.OuterConfig` the method leaves
            unchanged.
        inner_steps: H. outer_steps: outer steps planned. lr: the inner peak learning rate.
        schedule: ``"cosine"``, ``"constant"`` (or another of the theory's schedules). warmup: inner steps,
            fewer than outer_steps * inner_steps. min_lr_frac: the cosine floor as a fraction of lr.
        inner_optimizer: ``"adamw"`` or ``"sgd"``. adam_beta2: AdamW's second-moment decay.
        noniid: non-IID shards. val_windows: validation windows.
        other: the run's other settings, sorted ``(name, value)`` pairs.

    Returns:
        The frozen setting; ``inner_lr(step)`` is its learning rate at inner step(s) ``step``, ``changed``
        the same setting with other values.

    Raises:
        ConfigError: a value out of range or an outer step the method does not allow.

    Examples:
        >>> import noloco
        >>> setting = noloco.RunSetting("diloco", noloco.OuterConfig(replicas=4, group_size=4, gamma=0.0),
        ...                             inner_steps=10, outer_steps=5, lr=1e-3)
        >>> setting.schedule, setting.inner_lr(0), setting.changed(alpha=0.3).outer.alpha
        ('cosine', 0.001, 0.3)
    """

    method: str
    outer: OuterConfig
    inner_steps: int
    outer_steps: int
    lr: float
    schedule: str = "cosine"
    warmup: int = 0
    min_lr_frac: float = 0.0
    inner_optimizer: str = "adamw"
    adam_beta2: float = 0.95
    noniid: bool = False
    val_windows: int = 64
    other: tuple = ()

    def __post_init__(self):
        method = check_choice("method", self.method, METHODS)
        count = (check_integer, "an integer >= 1", lambda v: v >= 1)
        check_fields(self, {
            "outer": (check_outer, method), "inner_steps": count, "outer_steps": count, "val_windows": count,
            "lr": (check_real, "0 < lr < inf", lambda v: 0 < v < math.inf),
            "schedule": (check_choice, SCHEDULES), "inner_optimizer": (check_choice, INNER_OPTIMIZERS),
            "min_lr_frac": (check_real, "0 <= min_lr_frac <= 1", lambda v: 0 <= v <= 1),
            "adam_beta2": (check_real, "0 <= adam_beta2 < 1", lambda v: 0 <= v < 1),
            "noniid": (check_choice, (False, True)),
        })
        total = self.outer_steps * self.inner_steps
        check_integer("warmup", self.warmup, f"an integer 0 <= warmup < outer_steps * inner_steps = {total}",
                      lambda v: v == 0 or 0 < v < total)

    def inner_lr(self, step):
        """The inner learning rate at inner step(s) ``step`` (0-based)."""
        return learning_rate(step, self.schedule, self.lr, self.outer_steps * self.inner_steps,
                             warmup=self.warmup, floor=self.min_lr_frac)

    def changed(self, **changes) -> "RunSetting":
        """This setting with ``changes``: outer fields (alpha, beta, gamma, group_size, replicas, momentum) and
        schedule fields (lr, inner_steps, outer_steps); validated (ConfigError naming the field)."""
        outer_names = {f.name for f in dataclasses.fields(OuterConfig)}
        outer = dataclasses.replace(self.outer, **{k: v for k, v in changes.items() if k in outer_names})
        return dataclasses.replace(self, outer=outer, **{k: v for k, v in changes.items() if k not in outer_names})

    def recorded(self) -> OtherSettings:
        """The other settings the advice reads by name (:class:`OtherSettings`)."""
        return OtherSettings.from_json(dict(self.other))

    def training(self) -> dict:
        """Every setting but the method and the outer step, flat (``replicas`` among them)."""
        named = {k: getattr(self, k) for k in NAMED if k not in ("method", "outer")}
        return {**dict(self.other), **named, "replicas": self.outer.replicas}

    def as_dict(self) -> dict:
        """Plain JSON data in the run folder's form (``"outer"`` nested, ``other`` flattened beside it)."""
        named = {k: getattr(self, k) for k in NAMED}
        return {**dict(self.other), **named, "outer": dataclasses.asdict(self.outer)}

    @classmethod
    def from_config(cls, data: dict) -> "RunSetting":
        """The setting of a run folder's ``result.json`` ``"config"`` (the harness's, or any writer's with the
        same names; the flat outer form of older runs too). ConfigError for a value out of range."""
        if not isinstance(data, dict):
            raise ConfigError(f"config={data!r} is not a mapping of settings")
        values = {**RECORD_DEFAULTS, **data}
        method = values["method"]  # edge: result.json's "config" object (JSON form), read into the record here
        outer = outer_from_json(method, values)
        outer_names = {f.name for f in dataclasses.fields(OuterConfig)}
        other = tuple(sorted((k, _hashable(v)) for k, v in data.items() if k not in NAMED and k not in outer_names))
        return cls(outer=outer, other=other, **{k: values[k] for k in NAMED if k != "outer"})


def _hashable(value):
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


@dataclass
class RunRecord:
    """One run folder read for advice: its setting, evaluations and measured inputs.

    Made by :func:`read_run` from a folder of ``noloco llm train`` or of an :class:`noloco.Observer`
    (the format ``noloco-run``); no torch is needed.

    Attributes:
        folder: the run folder.
        setting: its :class:`RunSetting` (``method`` and ``outer`` are its shortcuts).
        metrics: the rows of metrics.jsonl as read (each evaluation: ``outer_step``, ``weight_std``, losses...);
            ``metric_rows`` holds them as :class:`noloco.advice.run_rows.MetricsRow` records.
        inputs: the rows of inputs.jsonl as read (the theory's inputs measured every outer step), None where
            absent; ``input_rows`` holds them as :class:`noloco.advice.run_rows.InputsRow` records.
        world_size: the number of processes it ran on.
        result: the result.json it ended with (or is writing while it runs), as read; ``result_record`` holds it
            as a :class:`noloco.advice.run_rows.RunResult`, which ``finished``, ``diverged`` and ``wall_s`` read.

    Returns:
        Made by :func:`read_run` (frozen).

    Raises:
        Nothing: :func:`read_run` validates what it holds.

    Examples:
        >>> import json, pathlib, tempfile, noloco
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> config = {"method": "noloco", "outer": {"replicas": 4, "group_size": 2}, "inner_steps": 5,
        ...           "outer_steps": 6, "lr": 3e-3, "warmup": 5, "seed": 1}
        >>> _ = (folder / "result.json").write_text(json.dumps({"config": config, "finished": True}))
        >>> _ = (folder / "metrics.jsonl").write_text("".join(
        ...     json.dumps({"outer_step": t, "weight_std": 1e-3 * t}) + "\\n" for t in (2, 4, 6)))
        >>> run = noloco.read_run(folder)
        >>> run.method, run.outer.group_size, len(run.metrics), run.inputs, run.finished, run.setting.other
        ('noloco', 2, 3, None, True, (('seed', 1),))
    """

    folder: Path
    setting: RunSetting
    metrics: list
    inputs: list | None
    world_size: int
    result: dict

    @property
    def method(self) -> str:
        return self.setting.method

    @property
    def outer(self) -> OuterConfig:
        return self.setting.outer

    # the files' JSON converted once, where the advice first reads it as records
    @functools.cached_property
    def metric_rows(self) -> list[MetricsRow]:
        return [MetricsRow.from_json(r) for r in self.metrics]

    @functools.cached_property
    def input_rows(self) -> list[InputsRow] | None:
        return None if self.inputs is None else [InputsRow.from_json(r) for r in self.inputs]

    @functools.cached_property
    def result_record(self) -> RunResult:
        return RunResult.from_json(self.result)

    @property
    def finished(self) -> bool:
        return self.result_record.finished is True

    @property
    def diverged(self) -> bool:
        return bool(self.result_record.diverged)

    @property
    def wall_s(self) -> float | None:
        return self.result_record.wall_s


def read_run(run_dir) -> RunRecord:
    """The :class:`RunRecord` of a run folder: its setting, evaluations and measured inputs, without torch.

    Reads ``result.json`` (the setting), ``metrics.jsonl`` (at least one evaluation) and, where present,
    ``inputs.jsonl``, each checked for the keys and types the advice reads.

    Args:
        run_dir: the run folder (a path), or a RunRecord, returned as it is (an observer's run held in
            memory: the advice reads it without a round trip through the files).

    Returns:
        The :class:`RunRecord`.

    Raises:
        ConfigError: an empty name (exit 2).
        DataError: a missing or unreadable file, a folder that holds the method folders of ``llm train
            --method a,b`` instead of a run, unreadable settings, a run with no evaluation yet, or a newer
            run-folder format; each says what to give instead (exit 3).

    Examples:
        >>> import json, pathlib, tempfile, noloco
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> config = {"method": "diloco", "outer": {"replicas": 4, "group_size": 4, "alpha": 0.3, "gamma": 0.0},
        ...           "inner_steps": 5, "outer_steps": 6, "lr": 3e-3, "warmup": 5}
        >>> _ = (folder / "result.json").write_text(json.dumps({"config": config}))
        >>> _ = (folder / "metrics.jsonl").write_text(json.dumps({"outer_step": 2, "weight_std": 0.0}) + "\\n")
        >>> run = noloco.read_run(folder)
        >>> run.setting.outer.alpha, run.metrics[0]["outer_step"], run.finished
        (0.3, 2, False)
        >>> noloco.read_run(folder / "missing")
        Traceback (most recent call last):
        ...
        noloco.infra.errors.DataError: ...
    """
    if isinstance(run_dir, RunRecord):
        return run_dir
    run = input_dir(run_dir, "OUT")
    if not (run / "result.json").exists():
        methods = sorted(str(p.parent) for p in run.glob("*/result.json"))
        if methods:
            # the method folders of llm train --method a,b, or any folder of runs
            raise DataError(f"{run} is not a run folder (no result.json); give one of the {len(methods)} in it: "
                            f"{', '.join(methods)}")
    result = read_json(run / "result.json", required=("config",), types=RESULT_TYPES)
    if result.get("format") == "noloco-run" and result.get("format_version") not in RUN_FORMAT_VERSIONS:
        raise DataError(f"{run / 'result.json'}: run-folder format version {result.get('format_version')!r}; this "
                        f"toolkit reads {', '.join(map(str, RUN_FORMAT_VERSIONS))} (upgrade noloco)")
    try:
        setting = RunSetting.from_config(result["config"])
    except (ConfigError, TypeError, KeyError, AttributeError, ValueError) as err:
        raise DataError(f"{run / 'result.json'}: config not readable ({err})") from None
    metrics = read_jsonl(run / "metrics.jsonl", required=("outer_step", "weight_std"), types=METRIC_TYPES)
    if not metrics:
        diverged = result.get("diverged") if isinstance(result.get("diverged"), dict) else None
        why = (f"the run diverged before its first evaluation ({diverged.get('message')})" if diverged else
               "the run has not reached its first evaluation")
        raise DataError(f"{run / 'metrics.jsonl'} holds no evaluation, so there is nothing to predict: {why}")
    inputs_path = run / "inputs.jsonl"
    inputs = (read_jsonl(inputs_path, required=("outer_step", "groups"), types={"outer_step": int, "groups": dict})
              if inputs_path.exists() else None)
    if inputs == []:
        raise DataError(f"{inputs_path} is empty although {run / 'metrics.jsonl'} has evaluations; delete it to "
                        "get the measured growth only, or train the run again")
    world = result.get("world_size", 1)
    world = world if isinstance(world, int) and not isinstance(world, bool) and world >= 1 else 1
    return RunRecord(folder=run, setting=setting, metrics=metrics, inputs=inputs, world_size=world, result=result)
