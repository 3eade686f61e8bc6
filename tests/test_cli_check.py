import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from noloco.cli import SUBCOMMANDS, build_parser, main
from noloco.infra.files import SCHEMA_VERSION
from noloco.infra.errors import DataError


def run_json(capsys, *argv):
    code = main(["check", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("N", [4, 8, 32])
def test_pure_random_pairing_reports_kappa(capsys, N):
    code, out = run_json(capsys, "--alpha", "0", "--beta", "0", "--gamma", "1", "--group-size", "2",
                         "--replicas", str(N))
    # beta = 0: the mean never moves (radius 1), so the verdict is honestly "unstable"
    assert code == 1 and [c["holds"] for c in out["conditions"]] == [True, False, True]
    assert abs(out["variance_decay_factor"] - (N - 2) / (2 * (N - 1))) < 1e-12


def test_diloco_presets_have_zero_spread(capsys):
    # the reference code's DiLoCo: heavy-ball alpha 0.3, H 100; n follows N
    code, out = run_json(capsys, "--preset", "diloco", "--replicas", "16")
    assert code == 0 and out["stationary_variance"] == 0.0 and out["method"] == "diloco"
    assert out["outer"] == {"replicas": 16, "group_size": 16, "alpha": 0.3, "beta": 0.7, "gamma": 0.0,
                            "momentum": "heavy-ball"}
    assert out["inner"]["steps"] == 100
    # the torch-style one: outer Nesterov 0.9, H 500
    code, out = run_json(capsys, "--preset", "diloco-nesterov", "--replicas", "16")
    assert code == 0 and out["stationary_variance"] == 0.0
    assert (out["outer"]["group_size"], out["outer"]["alpha"], out["outer"]["momentum"]) == (16, 0.9, "nesterov")
    assert out["inner"]["steps"] == 500


@pytest.mark.parametrize("method,fixed", [
    ("diloco", {"group_size": 8, "gamma": 0.0, "alpha": 0.3}),
    ("local", {"group_size": 1, "alpha": 0.0, "beta": 1.0, "gamma": 0.0}),
    ("ddp", {"group_size": 8, "alpha": 0.0, "beta": 1.0, "gamma": 0.0}),
])
def test_method_flag_applies_the_method(capsys, method, fixed):
    code, out = run_json(capsys, "--method", method)
    assert out["method"] == method
    assert {k: out["outer"][k] for k in fixed} == fixed
    assert (out["inner"]["steps"] == 1) == (method == "ddp")


def test_method_noloco_keeps_a_preset_setting(capsys):
    _, out = run_json(capsys, "--preset", "paper", "--method", "noloco", "--alpha", "0.2")
    assert out["method"] == "noloco" and out["outer"]["alpha"] == 0.2 and out["outer"]["group_size"] == 2


def test_paper_preset_json_schema(capsys):
    code, out = run_json(capsys, "--preset", "paper")
    assert code == 0
    assert out["schema_version"] == SCHEMA_VERSION
    for key in ("stable", "mean_spectral_radius", "variance_decay_factor", "stationary_variance", "conditions"):
        assert key in out
    assert all({"name", "value", "holds"} <= set(c) for c in out["conditions"])
    assert out["outer"] == {"replicas": 8, "group_size": 2, "alpha": 0.5, "beta": 0.7, "gamma": 0.7,
                            "momentum": "heavy-ball"}


def test_spectrum_totals(capsys):
    _, one = run_json(capsys, "--curvature", "0.5")
    _, two = run_json(capsys, "--curvature", "2")
    _, both = run_json(capsys, "--spectrum", "0.5,2")
    assert both["stationary_variance"] == pytest.approx(one["stationary_variance"] + two["stationary_variance"])
    assert both["variance_decay_factor"] == max(one["variance_decay_factor"], two["variance_decay_factor"])
    assert both["mean_spectral_radius"] == max(one["mean_spectral_radius"], two["mean_spectral_radius"])
    _, uni = run_json(capsys, "--spectrum", "uniform:0.1:1:10")
    assert len(uni["directions"]) == 10


def test_gamma_tied(capsys):
    _, out = run_json(capsys, "--beta", "0.4", "--gamma-tied")
    assert out["outer"]["gamma"] == 0.4


@pytest.mark.parametrize("argv,words", [
    (["--gamma-tied", "--gamma", "0.3"], "gamma=0.3 conflicts with gamma_tied"),
    (["--method", "diloco", "--group-size", "2"], "group_size=2 conflicts with method='diloco'"),
    (["--preset", "diloco", "--group-size", "2"], "group_size=2 conflicts with method='diloco'"),
    (["--method", "ddp", "--inner-steps", "5"], "inner_steps=5 conflicts with method='ddp'"),
    (["--method", "local", "--alpha", "0.5"], "alpha=0.5 conflicts with method='local'"),
])
def test_conflicting_flags_exit_2(capsys, argv, words):
    assert main(["check", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"noloco check: error: {captured.err.split('error: ', 1)[1]}"
    assert words in captured.err and captured.err.count("\n") == 1


def test_unstable_exits_1_with_failing_condition(capsys):
    code, out = run_json(capsys, "--gamma", "3")
    assert code == 1 and out["stable"] is False and out["stationary_variance"] is None
    assert [c["holds"] for c in out["conditions"]] == [True, True, False]


@pytest.mark.parametrize("argv,words", [
    (["--group-size", "3"], "group_size=3"),
    (["--alpha", "1.5"], "alpha=1.5"),
    (["--inner-lr", "nan"], "inner_lr=nan"),
    (["--spectrum", "1,-2"], "curvature=-2.0"),
    (["--spectrum", "uniform:1"], "spectrum="),
    (["--alpha", "half"], "argument --alpha: invalid float value"),      # argparse's own errors
    (["--method", "gossip"], "argument --method: invalid choice"),
    (["--preset", "adam"], "argument --preset: invalid choice"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, words):
    assert main(["check", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv,words", [
    (["--l2", "0.1"], "--l2 0.1 applies to the data objectives only (here quadratic)"),
    (["--decay-time", "10"], "--decay-time 10 applies to --schedule inverse only (here constant)"),
    (["--schedule", "cosine", "--decay-time", "10"], "(here cosine)"),
])
def test_a_simulate_flag_that_would_change_nothing_is_refused_not_ignored(capsys, argv, words):
    assert main(["simulate", "--trials", "4", "--outer-steps", "4", "--no-cache", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_a_refused_long_simulation_says_only_why(capsys):
    """A setting the configuration refuses, large enough that its time estimate would be shown (74 s): exit 2 with
    the refusal alone, not the estimate's line before it; the time budget still refuses before the configuration
    is built (exit 3, one line)."""
    assert main(["simulate", "--objective", "breast-cancer", "--spectrum", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "takes its Hessian from the data" in err and err.count("\n") == 1 and "estimate" not in err
    assert main(["simulate", "--objective", "breast-cancer", "--spectrum", "1,2", "--max-time", "1"]) == 3
    err = capsys.readouterr().err
    assert "above --max-time 1 s" in err and err.count("\n") == 1


def test_console_entry_point_human_output():
    proc = subprocess.run([sys.executable, "-m", "noloco", "check", "--preset", "paper"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "verdict: STABLE" in proc.stdout and "spectral radius of T" in proc.stdout


# ---------------------------------------------------------------- the command line as a whole

def test_version(capsys):
    from importlib.metadata import version as installed

    from noloco.cli import commit

    for flag in ("--version", "--vers"):  # the fast path and argparse's (an abbreviation) print the same
        assert main([flag]) == 0
        first, second = capsys.readouterr().out.splitlines()
        assert first.split()[0] == "noloco" and first.split()[1][0].isdigit()
        assert second.startswith(f"python {sys.version.split()[0]}, numpy {installed('numpy')}, torch ")
    root = Path(__file__).resolve().parents[1]
    if (root / ".git").exists() and shutil.which("git"):
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
        assert f"(commit {commit()})" in first and head.startswith(commit())
    assert commit(root / "noloco") is None  # not a checkout: nothing


def test_version_imports_neither_numpy_nor_torch():
    code = "import sys\nfrom noloco.cli import main\nmain(['--version'])\nprint('numpy' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "False False", out


OWNED = ("check", "simulate", "comm", "tune", "figs")


@pytest.mark.parametrize("name", OWNED)
def test_every_flag_has_help(name):
    assert name in SUBCOMMANDS
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[name]
    flags = [a for a in sub._actions if a.option_strings and a.dest != "help"]
    assert flags and all(a.help and a.help.strip() for a in flags), [a.option_strings for a in flags if not a.help]


@pytest.mark.parametrize("error,code", [
    (DataError("runs/x/metrics.jsonl lacks loss"), 3),
    (PermissionError(13, "Permission denied", "/ro/fig.png"), 3),
    (MemoryError(), 3),
])
def test_environment_faults_exit_3_with_one_line(capsys, monkeypatch, error, code):
    def fail(args):
        raise error

    monkeypatch.setattr("noloco.cli.check.run", fail)
    assert main(["check"]) == code
    err = capsys.readouterr().err
    assert err.startswith("noloco check: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_a_bug_is_exit_3_in_one_line_never_1(monkeypatch, capsys):
    """Exit 1 means a finding (issue 22): a bug must not read as one. It is exit 3, one line that says it is
    an internal error."""
    def fail(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("noloco.cli.check.run", fail)
    assert main(["check"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error (ZeroDivisionError: a bug)" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, code", [(["check", "--alpha", "1.5"], 2), (["llm", "predict", "/nonexistent"], 3)])
def test_debug_shows_the_traceback_and_keeps_the_code(argv, code):
    env = dict(os.environ, NOLOCO_DEBUG="1")
    proc = subprocess.run([sys.executable, "-m", "noloco", *argv], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == code and "Traceback" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"noloco {' '.join(argv[:-2] if code == 2 else argv[:2])}")


def test_closed_output_pipe_ends_quietly():
    """`noloco check ... | head -c 20`: the reader leaves after 20 bytes of a long output."""
    proc = subprocess.Popen([sys.executable, "-m", "noloco", "check", "--spectrum", "uniform:0.1:1:20000", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert len(proc.stdout.read(20)) == 20
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == "", err
