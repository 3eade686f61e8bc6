"""A run's configuration: every flag of `noloco llm train` shows its default in --help (the preset-dependent
ones in a table computed from the presets), and `--config FILE` (TOML) supplies flags, the command line
winning, `--print-config` showing the merged result; bad files are refused with one line (exit 2; an
unreadable file exit 3)."""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path

import pytest

from noloco.cli import build_parser, main
from noloco.llm_check.config import PRESETS, build, default_log_every

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "llm_train.toml"


def _train_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    llm = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["llm"]
    return next(a for a in llm._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]


def _help(capsys) -> str:
    assert main(["llm", "train", "--help"]) == 0
    return capsys.readouterr().out


def test_every_flag_shows_its_default(capsys):
    """Each flag's help names its default, or sends the reader to the table of presets; only on/off flags
    (off unless given), --config and --out (required) have none."""
    text = _help(capsys)
    for action in _train_parser()._actions:
        if not action.option_strings or isinstance(action, (argparse._StoreTrueAction, argparse._HelpAction)):
            continue
        if action.dest in ("config", "out"):
            continue
        assert "default" in (action.help or ""), f"{action.option_strings[0]} shows no default"
    assert "Defaults by --size" in text


def test_the_table_of_presets_is_what_the_presets_resolve_to(capsys):
    """The table's cells are read back and compared with the config each preset builds: a preset changed
    without the table following it (or a row computed wrongly) fails here."""
    text = _help(capsys)
    lines = text[text.index("Defaults by --size"):].splitlines()
    header = next(line.split() for line in lines if line.strip().startswith("flag"))
    assert header[1:] == ["(no", "size)", *PRESETS]
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.strip().startswith("--")}
    assert {"--lr", "--inner-steps", "--outer-steps", "--eval-every", "--batch", "--replicas", "--device",
            "--log-every", "--alpha"} <= set(rows)
    for column, preset in enumerate((None, *PRESETS)):
        cfg = build(preset, "noloco")
        assert float(rows["--lr"][column]) == cfg.lr
        assert int(rows["--inner-steps"][column]) == cfg.inner_steps
        assert int(rows["--outer-steps"][column]) == cfg.outer_steps
        assert int(rows["--batch"][column]) == cfg.batch
        assert int(rows["--replicas"][column]) == cfg.replicas
        assert float(rows["--alpha"][column]) == cfg.outer.alpha
        assert rows["--device"][column] == cfg.device
        assert int(rows["--log-every"][column]) == default_log_every(cfg)
    # a flag whose default is the same for every preset is not a row: its help carries the value
    assert "--seed" not in rows and "(default 0)" in " ".join(text[:text.index("Defaults")].split())


def _print_config(capsys, *argv) -> dict:
    assert main(["llm", "train", *map(str, argv), "--print-config"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_the_example_file_loads_and_the_command_line_wins(capsys):
    values = tomllib.loads(EXAMPLE.read_text())
    report = _print_config(capsys, "--config", EXAMPLE, "--lr", "1e-3", "--outer-steps", "4")
    (run,) = report["runs"]
    config = run["config"]
    assert config["lr"] == 1e-3 != values["lr"] and config["outer_steps"] == 4  # the command line wins
    assert config["inner_steps"] == values["inner_steps"] and config["warmup"] == values["warmup"]
    assert config["outer"]["group_size"] == values["group_size"] and config["method"] == values["method"]
    assert run["log_every"] == values["log_every"] and report["run_flags"]["out"] == values["out"]
    assert "lr" not in report["from_config_file"] and "inner_steps" in report["from_config_file"]


def test_the_file_beats_the_preset_and_turns_flags_on(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text('size = "cpu-small"\nmethod = "noloco"\nlr = 1\nnoniid = true\nbatch = 3\n'
                    'out = "somewhere"\n')
    config = _print_config(capsys, "--config", path)["runs"][0]["config"]
    assert config["lr"] == 1.0 and isinstance(config["lr"], float)  # an integer for a number is fine
    assert config["noniid"] is True and config["batch"] == 3 and config["width"] == PRESETS["cpu-small"]["width"]
    assert _print_config(capsys, "--config", path, "--batch", "5")["runs"][0]["config"]["batch"] == 5


@pytest.mark.parametrize("text,words", [
    ('lr = 1e-3\nlearning_rate = 1e-3\n', "unknown key 'learning_rate'"),
    ('outer_step = 4\n', "did you mean 'outer_steps'"),
    ('lr = "fast"\n', "lr = 'fast' is a string; expected a number"),
    ('batch = true\n', "batch = True is a boolean; expected an integer"),
    ('batch = 2.5\n', "batch = 2.5 is a number; expected an integer"),
    ('noniid = 1\n', "noniid = 1 is an integer; expected true or false"),
    ('schedule = "linear"\n', "schedule = 'linear' is not allowed; allowed: cosine, constant"),
    ('resume = true\n', "'resume' acts on one command"),
    ('[outer]\nalpha = 0.3\n', "unknown key 'outer'"),
    ('lr = \n', "not a TOML file"),
])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path, capsys, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["llm", "train", "--config", str(path), "--out", str(tmp_path / "out"), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("noloco llm train: error: --config ") and words in err, err
    assert str(path) in err


def test_a_missing_file_is_exit_3_and_no_out_is_exit_2(tmp_path, capsys):
    assert main(["llm", "train", "--config", str(tmp_path / "none.toml"), "--out", str(tmp_path)]) == 3
    assert "cannot be read" in capsys.readouterr().err
    assert main(["llm", "train", "--size", "cpu-tiny", "--print-config"]) == 2
    assert "--out is required" in capsys.readouterr().err


# ----------------------------------------------------------------- --size and --preset: two names, one meaning each

def _configs(capsys, *argv) -> tuple[list, str]:
    assert main(["llm", "train", *argv, "--out", "x", "--print-config"]) == 0
    captured = capsys.readouterr()
    return [r["config"] for r in json.loads(captured.out)["runs"]], captured.err


@pytest.mark.parametrize("size", ["cpu-tiny", "cpu-small", "gpu-large"])
def test_a_size_given_as_preset_is_the_size_with_one_line_on_stderr(size, capsys):
    new, quiet = _configs(capsys, "--size", size)
    old, err = _configs(capsys, "--preset", size)
    assert old == new and quiet == ""
    assert err.count("\n") == 1 and f"use --size {size}" in err, err


def test_preset_paper_alone_keeps_its_old_run_and_says_so(capsys):
    """--preset paper without --size is the run it was (the paper size and outer preset), with one line."""
    new, _ = _configs(capsys, "--size", "paper", "--preset", "paper", "--method", "diloco")
    old, err = _configs(capsys, "--preset", "paper", "--method", "diloco")
    assert old == new and err.count("\n") == 1 and "--size paper" in err, err
    assert new[0]["outer"]["alpha"] == 0.5  # the paper preset's, not diloco's default 0.3


def test_preset_is_the_outer_preset_of_noloco_check(capsys):
    from noloco.theory.methods import PRESETS as OUTER

    config, err = _configs(capsys, "--size", "cpu-tiny", "--preset", "diloco-nesterov")
    want = OUTER["diloco-nesterov"].outer
    assert err == "" and config[0]["method"] == "diloco" and config[0]["inner_steps"] == PRESETS["cpu-tiny"]["inner_steps"]
    assert config[0]["outer"] == {**want.__dict__, "replicas": 4, "group_size": 4}


def test_a_size_in_the_config_file_under_its_old_key(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text('preset = "cpu-tiny"\n')
    old, err = _configs(capsys, "--config", str(path))
    assert old == _configs(capsys, "--size", "cpu-tiny")[0] and "use --size cpu-tiny" in err


def test_a_size_twice_is_refused(capsys):
    assert main(["llm", "train", "--size", "cpu-tiny", "--preset", "cpu-small", "--out", "x", "--print-config"]) == 2
    assert "give --size only" in capsys.readouterr().err


def test_llm_validate_takes_its_size_as_size_and_the_old_preset(tmp_path, capsys):
    assert main(["llm", "validate", "--preset", "cpu-tiny", "--size", "gpu", "--out", str(tmp_path)]) == 2
    assert "give --size only" in capsys.readouterr().err
    # refused by its memory budget before any run: the size reached the sweep under both names
    for argv in (["--size", "cpu-tiny"], ["--preset", "cpu-tiny"]):
        assert main(["llm", "validate", *argv, "--max-memory", "1M", "--out", str(tmp_path)]) == 3
        err = capsys.readouterr().err
        assert "above the budget" in err and ("use --size cpu-tiny" in err) == (argv[0] == "--preset"), err
