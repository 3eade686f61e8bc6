"""The typed run record (noloco.advice.record): a run folder's settings read by name, the same setting the
harness trained with, and damaged settings refused with a DataError."""

import dataclasses
import json

import numpy as np
import pytest

from noloco.advice.record import NAMED, RECORD_DEFAULTS, RunSetting, read_run
from noloco.infra.errors import ConfigError, DataError
from noloco.llm_check.config import TrainConfig, build


def test_the_record_defaults_are_the_harness_defaults():
    """An older run folder lacks a field the harness added later: the record reads the default the harness
    had, so the two cannot drift apart."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert {k: defaults[k] for k in RECORD_DEFAULTS} == RECORD_DEFAULTS


@pytest.mark.parametrize("preset,method", [("cpu-tiny", "noloco"), ("cpu-small", "diloco"), ("paper", "noloco"),
                                           ("cpu-small", "ddp")])
def test_a_harness_config_reads_as_the_setting_it_trained(preset, method):
    cfg = build(preset, method, schedule="cosine")
    setting = RunSetting.from_config(cfg.as_dict())
    assert setting.outer == cfg.outer and setting.method == cfg.method
    steps = np.arange(cfg.total_inner_steps)
    assert np.array_equal(setting.inner_lr(steps), cfg.inner_lr(steps))
    # everything else kept as data: the settings the tuner compares are the harness's own fields
    plain = {k: v for k, v in cfg.as_dict().items() if k not in ("outer", "method")}
    assert setting.training() == {**plain, "replicas": cfg.replicas}
    assert RunSetting.from_config(setting.as_dict()) == setting


def test_the_flat_outer_form_of_older_runs():
    """Before the outer step was nested, diloco ignored group_size: the record applies the method as the run did."""
    old = {k: v for k, v in build("cpu-tiny", "diloco").as_dict().items() if k != "outer"}
    old.update(replicas=4, group_size=2, alpha=0.3, beta=0.7, gamma=0.0)
    setting = RunSetting.from_config(old)
    assert setting.outer == TrainConfig.from_dict(old).outer and setting.outer.group_size == 4


def test_a_changed_setting_is_validated():
    setting = RunSetting.from_config(build("cpu-tiny", "noloco").as_dict())
    assert setting.changed(alpha=0.3, inner_steps=10).outer.alpha == 0.3
    assert setting.changed(inner_steps=10).inner_steps == 10
    with pytest.raises(ConfigError, match="alpha"):
        setting.changed(alpha=1.5)
    diloco = RunSetting.from_config(build("cpu-tiny", "diloco").as_dict())
    with pytest.raises(ConfigError, match="group_size"):
        diloco.changed(group_size=2)


def _folder(tmp_path, config, metrics=({"outer_step": 1, "weight_std": 0.1},)):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "result.json").write_text(json.dumps({"config": config, "finished": True, "wall_s": 3.5}))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return tmp_path


def test_read_run_gives_named_fields(tmp_path):
    run = read_run(_folder(tmp_path, build("cpu-tiny").as_dict()))
    assert run.finished and not run.diverged and run.wall_s == 3.5 and run.world_size == 1
    assert run.metrics[0]["weight_std"] == 0.1 and run.inputs is None and run.outer.replicas == 4


def test_a_folder_of_run_folders_is_named_as_such_not_as_methods(tmp_path):
    """A folder above one run (runs/, not the method folders of llm train --method a,b) reads as what it holds."""
    _folder(tmp_path / "tiny", build("cpu-tiny").as_dict())
    with pytest.raises(DataError) as err:
        read_run(tmp_path)
    assert str(err.value) == f"{tmp_path} is not a run folder (no result.json); give one of the 1 in it: {tmp_path / 'tiny'}"


@pytest.mark.parametrize("change", [{"lr": -1.0}, {"inner_steps": 0}, {"schedule": "bogus"}, {"method": "x"},
                                    {"outer": {"alpha": 2.0}}, {"outer": "pairs"}, {"lr": None}])
def test_damaged_settings_are_a_data_error(tmp_path, change):
    config = {**build("cpu-tiny").as_dict(), **change}
    with pytest.raises(DataError, match="config not readable"):
        read_run(_folder(tmp_path, config))


def test_a_config_missing_a_field_reads_the_harness_default(tmp_path):
    config = {k: v for k, v in build("cpu-tiny", lr=1e-3).as_dict().items() if k not in ("lr", "min_lr_frac")}
    setting = read_run(_folder(tmp_path, config)).setting
    assert setting.lr == RECORD_DEFAULTS["lr"] == TrainConfig.lr and setting.min_lr_frac == TrainConfig.min_lr_frac
    assert set(RECORD_DEFAULTS) <= set(NAMED)
