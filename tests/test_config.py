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
