"""The I/O module: strict JSON, atomic writes, the cache's validation and read-only behaviour."""

import json
import math
import os
from dataclasses import dataclass

import numpy as np
import pytest

from noloco.infra import cache, errors, files


def _strict(text):
    def refuse(name):
        raise AssertionError(f"{name} in JSON")
    return json.loads(text, parse_constant=refuse)


def test_non_finite_values_become_null_with_the_reason_beside_them():
    data = {"a": math.inf, "b": -np.inf, "c": float("nan"), "d": np.float32(1.5), "e": [1.0, math.inf, math.nan],
            "f": np.array([[1, 2], [3, 4]]), "g": {"h": -math.inf}, "i": (np.int64(3), True, np.bool_(False))}
    out = _strict(files.dumps(data))
    assert out["a"] is None and out["a_nonfinite"] == "inf"
    assert out["b"] is None and out["b_nonfinite"] == "-inf"
    assert out["c"] is None and out["c_nonfinite"] == "nan"
    assert out["d"] == 1.5 and "d_nonfinite" not in out
    assert out["e"] == [1.0, None, None] and out["e_nonfinite"] == ["inf", "nan"]
    assert out["f"] == [[1, 2], [3, 4]]
    assert out["g"] == {"h": None, "h_nonfinite": "-inf"}  # the reason stands in the innermost object
    assert out["i"] == [3, True, False]


def test_dataclasses_and_strict_loads():
    @dataclass
    class P:
        x: float
        y: tuple

    assert _strict(files.dumps(P(math.inf, (1, 2)))) == {"x": None, "x_nonfinite": "inf", "y": [1, 2]}
    with pytest.raises(ValueError):
        files.loads('{"a": NaN}')
    with pytest.raises(ValueError):
        files.loads('[Infinity]')


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    path = tmp_path / "sub" / "x.json"
    files.write_json(path, {"a": 1})
    assert files.loads(path.read_text()) == {"a": 1}

    def boom(tmp):
        open(tmp, "w").write("half")
        raise RuntimeError("crash while writing")

    with pytest.raises(RuntimeError):
        files.atomic_write(path, boom)
    assert files.loads(path.read_text()) == {"a": 1}
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json"]


def test_read_json_names_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(errors.DataError, match="bad.json"):
        files.read_json(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(errors.DataError, match="bad.json"):
        files.read_json(bad)
    bad.write_text('{"a": 1}')
    with pytest.raises(errors.DataError, match="lacks b"):
        files.read_json(bad, required=("a", "b"))
    with pytest.raises(errors.DataError, match="missing.json"):
        files.read_json(tmp_path / "missing.json")


def test_cache_hit_miss_bad_entry_and_read_only(tmp_path, capsys):
    calls = []

    def compute():
        calls.append(1)
        return {"value": np.float64(2.5), "inf": math.inf}

    data, hit = cache.cached("unit", {"p": 1}, compute, directory=tmp_path)
    assert not hit and data["value"] == 2.5 and data["inf"] is None
    data, hit = cache.cached("unit", {"p": 1}, compute, directory=tmp_path)
    assert hit and len(calls) == 1
    _, hit = cache.cached("unit", {"p": 2}, compute, directory=tmp_path)
    assert not hit and len(calls) == 2

    # valid JSON of the wrong shape: rebuilt, with one warning line naming the file
    path = cache.cache_path("unit", {"p": 1}, tmp_path)
    path.write_text('{"schema_version": 2, "key": "x"}')
    capsys.readouterr()
    data, hit = cache.cached("unit", {"p": 1}, compute, directory=tmp_path)
    err = capsys.readouterr().err
    assert not hit and data["value"] == 2.5 and str(path) in err and len(err.strip().splitlines()) == 1
    # a content check that fails also rebuilds
    _, hit = cache.cached("unit", {"p": 1}, compute, directory=tmp_path, valid=lambda d: "missing" in d)
    assert not hit

    # an unwritable cache location (a file where the folder should be): computed, no error
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    before = len(calls)
    _, hit = cache.cached("unit", {"p": 1}, compute, directory=blocker)
    assert not hit and len(calls) == before + 1 and blocker.read_text() == "not a folder"

    # a read-only cache folder: computed every time, nothing written, no error
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write to read-only folders")
        before = len(calls)
        for _ in range(2):
            _, hit = cache.cached("unit", {"p": 1}, compute, directory=ro)
            assert not hit
        assert len(calls) == before + 2 and list(ro.iterdir()) == []
    finally:
        os.chmod(ro, 0o755)


def test_cache_key_depends_on_every_project_source(monkeypatch, tmp_path):
    """The key includes a hash over every .py file of every package: editing any one changes it."""
    packages = ("noloco",) + cache.PACKAGES
    for package in packages:
        (tmp_path / package / "sub").mkdir(parents=True)
        (tmp_path / package / "a.py").write_text("x = 1\n")
        (tmp_path / package / "sub" / "b.py").write_text("y = 2\n")
    monkeypatch.setattr(cache, "source_folders", lambda: {p: tmp_path / p for p in packages})
    keys = set()
    for package in packages:  # the command line's own folder holds the subpackages when installed: not recursive
        for name in ("a.py",) if package == "noloco" else ("a.py", "sub/b.py"):
            cache.source_hash.cache_clear()
            before = cache.cache_key("ns", {"p": 1})
            path = tmp_path / package / name
            path.write_text(path.read_text() + "# edit\n")
            cache.source_hash.cache_clear()
            after = cache.cache_key("ns", {"p": 1})
            assert before != after, f"editing {package}/{name} left the cache key unchanged"
            keys.add(after)
    cache.source_hash.cache_clear()
    assert len(keys) == 1 + 2 * len(cache.PACKAGES)


# ------------------------------------------------------------------ readers of run files (issue 22)

import os as _os  # noqa: E402
from pathlib import Path  # noqa: E402
import signal as _signal  # noqa: E402

from noloco.infra.errors import DataError as _DataError  # noqa: E402
from noloco.infra.files import NUMBER, read_json as _read_json, read_jsonl as _read_jsonl  # noqa: E402


def _no_hang(seconds=30):
    def hang(signum, frame):
        raise AssertionError("blocked")
    _signal.signal(_signal.SIGALRM, hang)
    _signal.alarm(seconds)


@pytest.mark.parametrize("reader", ["json", "jsonl"])
@pytest.mark.parametrize("kind", ["named pipe", "device", "folder", "deeply nested", "wrong type"])
def test_a_run_file_that_is_not_what_it_should_be_is_a_data_error_naming_it(tmp_path, reader, kind):
    path = tmp_path / ("result.json" if reader == "json" else "metrics.jsonl")
    if kind == "named pipe":
        _os.mkfifo(path)
    elif kind == "device":
        path = Path("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "deeply nested":
        path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    else:
        path.write_text('{"outer_step": "7", "weight_std": 0.5}\n')
    read = (lambda: _read_json(path, types={"outer_step": int, "weight_std": NUMBER})) if reader == "json" else \
        (lambda: _read_jsonl(path, types={"outer_step": int, "weight_std": NUMBER}, fix="delete that line"))
    _no_hang()
    try:
        with pytest.raises(_DataError) as err:
            read()
    finally:
        _signal.alarm(0)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    if kind == "wrong type":
        assert "outer_step='7'; expected an integer" in message


def test_numbers_may_be_whole_or_null_but_not_true():
    from noloco.infra.files import _has_type

    assert _has_type(2, NUMBER) and _has_type(None, NUMBER) and _has_type(0.5, NUMBER)
    assert not _has_type(True, NUMBER) and not _has_type("1", NUMBER) and not _has_type(True, int)
