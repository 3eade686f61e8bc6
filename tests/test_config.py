import math

import pytest

from noloco.infra.errors import ConfigError
from noloco.theory.config import InnerConfig, OuterConfig


@pytest.mark.parametrize("field,value,words", [
    ("alpha", 1.0, "0 <= alpha < 1"),
    ("alpha", -0.1, "0 <= alpha < 1"),
    ("alpha", math.nan, "0 <= alpha < 1"),
    ("beta", -1.0, "0 <= beta < inf"),
    ("beta", math.inf, "0 <= beta < inf"),
    ("gamma", -0.5, "stable"),
    ("group_size", 3, "dividing replicas=8"),
    ("group_size", 0, "dividing"),
    ("replicas", 0, ">= 1"),
    ("momentum", "adam", "heavy-ball, nesterov"),
    ("alpha", "0.5", "not a number"),
    ("replicas", 8.0, "not an integer"),
])
def test_outer_rejections_name_field_value_range(field, value, words):
    with pytest.raises(ConfigError) as err:
        OuterConfig(**{field: value})
    message = str(err.value)
    assert message.startswith(f"{field}={value!r}") and words in message


@pytest.mark.parametrize("field,value,name", [
    ("lr", 0.0, "inner_lr"), ("lr", math.inf, "inner_lr"), ("lr", math.nan, "inner_lr"),
    ("steps", 0, "inner_steps"), ("noise", -1.0, "noise"),
])
def test_inner_rejections(field, value, name):
    with pytest.raises(ConfigError, match=name):
        InnerConfig(**{field: value})


def test_kappa_special_cases():
    assert OuterConfig(replicas=8, group_size=8).kappa == 0
    assert OuterConfig(replicas=8, group_size=1).kappa == 1
    assert OuterConfig(replicas=8, group_size=2).kappa == pytest.approx(6 / 14)


def test_print_config_shows_the_resolved_runs_before_any_work(tmp_path, capsys):
    """`noloco llm train ... --print-config`: each method's resolved settings with its memory and time
    estimates, as JSON; no run folder is made and nothing is trained."""
    import json

    from noloco.cli import main
    from noloco.llm_check.config import build
    from noloco.llm_check.resources import memory_estimate

    out = tmp_path / "never"
    assert main(["llm", "train", "--size", "cpu-small", "--method", "diloco,noloco", "--alpha", "0.3", "--out",
                 str(out), "--print-config"]) == 0
    report = json.loads(capsys.readouterr().out)
    runs = report["runs"]
    assert report["schema_version"] == 2 and [r["config"]["method"] for r in runs] == ["diloco", "noloco"]
    noloco = runs[-1]
    assert noloco["config"]["outer"]["alpha"] == 0.3 and noloco["config"]["outer"]["group_size"] == 2
    assert noloco["memory_bytes"] == memory_estimate(build("cpu-small", "noloco", alpha=0.3)).to_json()
    assert noloco["time_seconds"] > 0 and not out.exists()
    assert main(["llm", "train", "--size", "cpu-tiny", "--alpha", "2", "--out", str(out), "--print-config"]) == 2
