"""The edges an attacker or a newcomer finds on the newer surfaces: files that are not what they claim, the
``--json`` error contract, public arguments checked at construction, the n = N classification. Each test makes
the fault and sees the one line (or the exception) that names it."""

from __future__ import annotations

import json
import os

import pytest

from noloco.cli import main
from noloco.infra.errors import DataError
from noloco.infra.files import SCHEMA_VERSION, read_json


def _sparse(path, size: int):
    with open(path, "wb") as handle:  # holes: no disk and no memory spent making it
        handle.truncate(size)
    return path


def _error_line(capsys, argv) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------ files: type and size before reading

def test_config_that_is_a_named_pipe_or_a_device_is_refused_at_once(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "named pipe"), ("/dev/zero", "character device")):
        code, _, err = _error_line(capsys, ["llm", "train", "--config", str(path), "--print-config"])
        assert code == 3 and err.count("\n") == 1 and kind in err, err


def test_config_too_large_for_a_settings_file_is_refused_unread(tmp_path, capsys):
    code, _, err = _error_line(capsys, ["llm", "train", "--config", str(_sparse(tmp_path / "c.toml", 5 << 20)),
                                        "--print-config"])
    assert code == 3 and "above the limit" in err and err.count("\n") == 1, err


def test_a_huge_result_json_is_refused_before_it_is_read(tmp_path):
    import tracemalloc

    path = _sparse(tmp_path / "result.json", 1 << 30)
    tracemalloc.start()
    with pytest.raises(DataError, match="above the limit"):
        read_json(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20, peak  # refused from its size, not after reading a gigabyte


# ------------------------------------------------------------------ one --json error contract

@pytest.mark.parametrize("argv, code", [
    (["check", "--replicas", "x"], 2),                                   # argparse
    (["check", "--replicas", "4", "--group-size", "8"], 2),              # ConfigError
    (["llm", "predict", "/nonexistent/run"], 3),                         # a missing run folder
    (["llm", "tune", "/nonexistent/a", "/nonexistent/b"], 3),           # missing pilots, as the run above
])
def test_json_errors_are_a_json_object_on_stdout_and_a_line_on_stderr(argv, code, capsys):
    got, out, err = _error_line(capsys, [*argv, "--json"])
    assert got == code and err.count("\n") == 1 and ": error: " in err, err
    report = json.loads(out)
    assert report["schema_version"] == SCHEMA_VERSION and report["error"]["exit_code"] == code
    assert report["error"]["message"] in err and report["error"]["command"].startswith("noloco")


def test_without_json_errors_leave_stdout_empty(capsys):
    code, out, err = _error_line(capsys, ["check", "--replicas", "x"])
    assert code == 2 and out == "" and err.count("\n") == 1


# ------------------------------------------------------------------ the one stability rule at its edges

def test_n_equals_n_spread_is_marginal_bounded_by_the_rule_and_still_holds(capsys):
    """At n = N the replica's own transition has a unit eigenvalue: by the 1e-9 rule its spread is marginal
    (bounded), which the table says, while the setting stays stable (no spread from identical starts)."""
    code = main(["check", "--method", "diloco", "--json"])
    report = json.loads(capsys.readouterr().out)
    spread = next(c for c in report["conditions"] if c["name"].startswith("replica spread"))
    assert code == 0 and abs(spread["value"] - 1) < 1e-9
    assert spread["state"] == "marginal (bounded)" and spread["holds"] is True


def test_paper_audit_classifies_the_n_equals_n_spread_by_the_rule():
    from noloco.claims.paper_directions import Direction, spread_state
    from noloco.theory.config import OuterConfig

    outer = OuterConfig(replicas=8, group_size=8, alpha=0.3, beta=0.7, gamma=0.0)
    radius, state, bounded = spread_state(outer, Direction(0.0, 0.0, 0.0))  # the flat limit
    assert abs(radius - 1) < 1e-9 and radius != 0.0  # the real radius, not a stand-in 0
    assert state.startswith("marginal (bounded)") and bounded


def test_exit_1_line_prints_a_radius_as_the_table_does(capsys):
    """A radius of 1 + 1e-6 is unstable; the stderr line must not round it to 1."""
    code, _, err = _error_line(capsys, ["check", "--method", "diloco", "--alpha", "0", "--beta", "4.000002",
                                        "--inner-lr", "0.5", "--inner-steps", "1", "--curvature", "1"])
    assert code == 1 and "spectral radius of M = 1 + 1e-06" in err and "unstable" in err, err


# ------------------------------------------------------------------ values that were internal errors

def test_a_huge_minibatch_is_refused_by_the_memory_budget(capsys):
    code, _, err = _error_line(capsys, ["simulate", "--objective", "breast-cancer", "--batch-size", str(10**20)])
    assert code == 3 and "--batch-size" in err and "internal error" not in err, err


@pytest.mark.parametrize("value", ["1e308", "inf", "nan", "0"])
def test_llm_train_timeout_out_of_range_is_bad_input(value, tmp_path, capsys):
    code, _, err = _error_line(capsys, ["llm", "train", "--size", "cpu-tiny", "--timeout", value,
                                        "--out", str(tmp_path)])
    assert code == 2 and "--timeout" in err and err.count("\n") == 1, err


def test_public_functions_name_a_wrong_argument():
    import noloco
    from noloco.infra.errors import ConfigError

    inner = noloco.InnerConfig()
    with pytest.raises(ConfigError, match="outer=None"):
        noloco.simulate("noloco", None, inner, None)
    with pytest.raises(ConfigError, match="method='nolco'"):
        noloco.simulate("nolco", noloco.OuterConfig(), inner, None)
    with pytest.raises(ConfigError, match="spectrum=\\[1.0\\]"):
        noloco.analyse(noloco.OuterConfig(), inner, [1.0])
    with pytest.raises(ConfigError, match="timeout"):
        import torch

        noloco.OuterOptimizer(torch.nn.Linear(2, 2), replicas=2, timeout=1e308)


TINY = ["--size", "cpu-tiny", "--method", "noloco", "--outer-steps", "2", "--eval-every", "1",
        "--val-windows", "4", "--warmup", "0", "--threads", "1"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("edges") / "run"
    assert main(["llm", "train", *TINY, "--out", str(out)]) == 0
    return out


def _copy(run, tmp_path):
    import shutil

    return shutil.copytree(run, tmp_path / "copy")


def _edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_resume_names_a_metric_of_the_wrong_type(tiny_run, tmp_path, capsys):
    run = _copy(tiny_run, tmp_path)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows[0]["weight_std"] = "0.1"
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    code, _, err = _error_line(capsys, ["llm", "train", *TINY, "--out", str(run), "--resume"])
    assert code == 3 and "weight_std='0.1'" in err and "line 1" in err and "internal" not in err, err


def test_tune_names_a_result_field_of_the_wrong_type(tiny_run, tmp_path, capsys):
    run = _copy(tiny_run, tmp_path)
    _edit_json(run / "result.json", lambda d: d.update(n_params="big"))
    capsys.readouterr()
    code, _, err = _error_line(capsys, ["llm", "tune", str(run)])
    assert code == 3 and "n_params='big'" in err and "internal" not in err, err


def test_gap_refuses_a_negative_second_moment(tiny_run, tmp_path, capsys):
    run = _copy(tiny_run, tmp_path)
    _edit_json(run / "result.json", lambda d: d.update(adam_second_moment={"sum_sqrt_v": -1, "outer_step": 2}))
    capsys.readouterr()
    code, out, err = _error_line(capsys, ["llm", "predict", str(run), "--gap"])
    assert code == 3 and "sum_sqrt_v=-1" in err and out == "", (out, err)


def test_gap_refuses_a_garbled_optimizer_state(tiny_run, tmp_path, capsys):
    import torch

    run = _copy(tiny_run, tmp_path)
    state = torch.load(run / "ckpt.pt", weights_only=True)
    first = next(iter(state["opt"]["state"]))
    state["opt"]["state"][first] = {"step": "x", "exp_avg_sq": "y"}
    torch.save(state, run / "ckpt.pt")
    capsys.readouterr()
    code, _, err = _error_line(capsys, ["llm", "predict", str(run), "--gap"])
    assert code == 3 and "ckpt.pt" in err and "internal" not in err, err


# ------------------------------------------------------------------ what a newcomer types

def test_config_key_from_another_trainer_suggests_the_flag(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text("learning_rate = 0.01\n")
    code, _, err = _error_line(capsys, ["llm", "train", "--config", str(path), "--print-config", "--out",
                                        str(tmp_path)])
    assert code == 2 and "did you mean 'lr'?" in err, err


def test_as_typo_suggests_the_field(tiny_run, capsys):
    code, _, err = _error_line(capsys, ["llm", "predict", str(tiny_run), "--as", "alpah=0.3"])
    assert code == 2 and "did you mean 'alpha'?" in err, err


def test_as_an_unstable_target_says_so_in_words(tiny_run, capsys):
    code, out, _ = _error_line(capsys, ["llm", "predict", str(tiny_run), "--as", "alpha=0.95"])
    assert code == 0 and "infx" not in out and "tilt -" not in out and "tilt unbounded" in out, out


def test_as_without_inputs_names_the_transfer_not_only_the_forecast(tiny_run, tmp_path, capsys):
    run = _copy(tiny_run, tmp_path)
    (run / "inputs.jsonl").unlink()
    code, _, err = _error_line(capsys, ["llm", "predict", str(run), "--as", "alpha=0.3"])
    assert code == 3 and "a transfer (--as) needs the measured inputs" in err, err


def test_tune_claims_no_stability_margin_where_no_inputs_were_measured(tiny_run, tmp_path):
    from noloco.advice.tune import tune

    run = _copy(tiny_run, tmp_path)
    (run / "inputs.jsonl").unlink()
    assert tune([run]).rows[0].stability_margin is None  # not the decay factor at c = 0


def test_gap_of_identical_replicas_says_so_instead_of_asking_for_more_windows(tiny_run, tmp_path, capsys):
    run = _copy(tiny_run, tmp_path)
    _edit_json(run / "result.json", lambda d: d["config"].update(
        method="diloco", outer={**d["config"]["outer"], "group_size": 4, "gamma": 0.0}))
    code, out, _ = _error_line(capsys, ["llm", "predict", str(run), "--gap"])
    assert code == 0 and "no spread: method diloco" in out and "unresolved" not in out, out


def test_resume_without_method_names_the_method_the_folder_holds(tiny_run, tmp_path, capsys):
    run = _copy(tiny_run, tmp_path)
    code, _, err = _error_line(capsys, ["llm", "train", "--size", "cpu-small", "--out", str(run), "--resume"])
    assert code == 2 and "give --method noloco" in err and "ckpt.pt" not in err, err


def test_tensorboard_folder_that_cannot_be_written_is_one_line(tmp_path, capsys):
    """A file where the events folder belongs (the portable stand-in for a read-only folder: the same check,
    made before tensorboard's writer thread exists, refuses both)."""
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    out.mkdir()
    (out / "tensorboard").write_text("")
    code, _, err = _error_line(capsys, ["llm", "train", *TINY, "--out", str(out), "--tensorboard"])
    assert code == 3 and err.strip().endswith("--tensorboard " + str(out / "tensorboard") + " is a file, not a folder")
    assert err.count("\n") == 1 and "b'" not in err, err


def test_paper_quick_at_a_million_replicas_is_refused_with_its_estimate(capsys):
    import time

    start = time.perf_counter()
    code, _, err = _error_line(capsys, ["paper", "-N", "1000000", "--quick"])
    assert code == 3 and "would take about" in err and "--max-time" in err, err
    assert time.perf_counter() - start < 10  # refused before any Monte Carlo


# ------------------------------------------------------------------ the public API at construction

def test_outer_optimizer_refuses_one_module_twice_and_mixed_dtypes():
    import copy

    import torch

    import noloco
    from noloco.infra.errors import ConfigError

    m = torch.nn.Linear(2, 2)
    with pytest.raises(ConfigError, match="share the parameter"):
        noloco.OuterOptimizer([m, m], inner_steps=2)
    with pytest.raises(ConfigError, match="float64"):
        noloco.OuterOptimizer([m, copy.deepcopy(m).double()], inner_steps=2)
    noloco.OuterOptimizer([m, copy.deepcopy(m)], inner_steps=2)  # copies are fine


def _observer(folder, **kwargs):
    import copy

    import torch

    import noloco

    models = [torch.nn.Linear(2, 1)]
    models.append(copy.deepcopy(models[0]))
    outer = noloco.OuterOptimizer(models, inner_steps=2)
    return noloco.Observer(outer, folder, outer_steps=2, lr=0.1, inner_optimizer="sgd", **kwargs)


def test_two_observers_on_one_folder_are_refused_in_one_process_and_across_processes(tmp_path):
    import subprocess
    import sys

    from noloco.infra.errors import ConfigError, LockedError

    first = _observer(tmp_path / "run")
    with pytest.raises(ConfigError, match="another open Observer"):
        _observer(tmp_path / "run")
    first.close()
    _observer(tmp_path / "run", overwrite=True).close()  # closed: the folder is free again
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom noloco.infra.rundir import RunLock\n"
                               "RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)",
                               str(tmp_path / "other")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockedError, match="in use by another run"):
            _observer(tmp_path / "other")
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------ torchrun

def _rank_env(rank: int, port: int) -> dict:
    return {**os.environ, "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PYTHONPATH": os.getcwd()}


def test_a_rank_left_alone_says_so_in_one_line(tmp_path):
    """Rank 1 whose rank 0 never comes: c10d's native log (tens of lines of C++ stack) stays quiet."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "noloco", "llm", "train", *TINY, "--out", str(tmp_path / "run"),
                           "--timeout", "1"], env=_rank_env(1, port), capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert "joining the torchrun process group failed" in done.stderr


def test_replicas_that_do_not_match_the_ranks_name_the_fix(monkeypatch):
    from noloco.infra.errors import ConfigError
    from noloco.training.exchange import DistExchange

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"processes \(2\); give replicas=2 \(--replicas 2\)"):
        DistExchange.join(replicas=4)


@pytest.mark.slow
def test_torchrun_takes_the_replicas_from_the_ranks(tmp_path):
    """`torchrun --nproc-per-node 2 ... --size cpu-tiny` (a preset of 4 replicas) trains 2, one per rank."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "noloco",
                           "llm", "train", *TINY, "--out", str(tmp_path / "run"), "--json"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["runs"]["noloco"]["config"]["outer"]["replicas"] == 2


# ------------------------------------------------------------------ what a run shows on a terminal

def test_every_evaluation_keeps_a_line_on_a_terminal_of_no_width():
    """On a pseudo-terminal that reports no width (0 columns, as `script` gives), the bar still shows and each
    note (an evaluation) stays as a line of its own; the rate reads `inner step/s` with a space."""
    import pty
    import select
    import time

    from noloco.infra.progress import Progress

    master, slave = pty.openpty()  # a new pseudo-terminal: 0 x 0 until someone sets a size
    stream = os.fdopen(slave, "w")
    try:
        progress = Progress(4, "run", unit="inner step", stream=stream)
        assert progress.bar is not None
        for k in range(4):
            time.sleep(0.02)
            progress.update(1)
            if k % 2:
                progress.note(f"val {k}")
        progress.close()
        stream.flush()
        out = b""
        while select.select([master], [], [], 0.2)[0]:
            out += os.read(master, 65536)
    finally:
        stream.close()
        os.close(master)
    lines = out.decode().replace("\r", "\n").splitlines()
    assert any(line.startswith("run: 2/4 inner steps") and line.endswith("; val 1") for line in lines), lines
    assert any(line.endswith("; val 3") for line in lines), lines
    assert "inner step/s" in out.decode() and "0inner step" not in out.decode()


def test_llm_tune_columns_stay_aligned_for_long_setting_names(tiny_run, capsys):
    capsys.readouterr()
    assert main(["llm", "tune", str(tiny_run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, row = lines[1], lines[2]
    assert len(row.split()[0]) > 14  # a name longer than the old fixed column
    end = header.index("seeds") + len("seeds")
    assert row[end - 1] != " " and row[end] == " ", (header, row)  # the seeds count ends under its header
    assert "val loss (last 3)" in header  # the mean of the last evaluations, not the last one


# ------------------------------------------------------------------ the figure of one's own runs

def _fake_runs(root, count: int):
    """``count`` runs that differ in many settings at once (the model's shape, lr, steps, schedule, the outer step),
    as a user's folder of pilots that came from different presets; one reached through a symbolic link."""
    from noloco.infra.files import dumps, write_json

    for k in range(count):
        folder = root / ("real" if k == 0 else "") / f"run{k}"
        folder.mkdir(parents=True)
        config = {"method": "noloco" if k % 3 else "diloco", "seed": 0, "inner_steps": 5 + k, "outer_steps": 6 + k,
                  "lr": 0.003 * (1 + k), "layers": 1 + k % 2, "width": 32 * (1 + k % 2), "heads": 2 + k % 2,
                  "ctx": 32 * (1 + k % 2), "batch": 4 + k, "schedule": ("cosine", "constant")[k % 2],
                  "outer": {"replicas": 4, "group_size": 2 if k % 3 else 4, "alpha": 0.5, "beta": 0.7,
                            "gamma": 0.7 if k % 3 else 0.0, "momentum": "heavy-ball"}}
        write_json(folder / "result.json", {"schema_version": 2, "config": config})
        rows = [{"outer_step": s, "tokens": 1000 * s, "val_loss_avg_model": 3 - s / 10 - k / 50,
                 "weight_std": 1e-3 * (1 + k) if k % 3 else 0.0} for s in range(1, 7)]
        (folder / "metrics.jsonl").write_text("".join(dumps(r) + "\n" for r in rows))
    (root / "linked").symlink_to(root / "real", target_is_directory=True)
    (root / "real" / "loop").symlink_to(root, target_is_directory=True)  # a link back up: found once, no loop


@pytest.mark.parametrize("count", [2, 9])
def test_the_figure_of_mixed_runs_names_them_by_what_differs_and_stays_legible(count, tmp_path):
    import matplotlib.pyplot as plt
    from test_figs import legibility_problems

    from noloco.paper_figs import fig_llm

    _fake_runs(tmp_path, count)
    data = fig_llm.compute(str(tmp_path))
    assert data["total"] == count  # the linked run once, through its real folder or the link
    labels = [s["label"] for s in data["settings"]]
    assert len(set(labels)) == len(labels) and all(len(label) <= 60 for label in labels), labels
    assert all("model L" in label for label in labels), labels
    fig = fig_llm.draw(data)
    problems = legibility_problems(fig)
    plt.close(fig)
    assert not problems, "\n".join(problems)


def test_a_checkpoint_larger_than_the_memory_is_refused_unread(tiny_run, tmp_path, capsys):
    from noloco.infra.budget import available_bytes

    free = available_bytes()
    if free is None:
        pytest.skip("the memory available cannot be read here")
    run = _copy(tiny_run, tmp_path)
    (run / "result.json").write_text(json.dumps({k: v for k, v in json.loads((run / "result.json").read_text()).items()
                                                 if k != "adam_second_moment"}))
    (run / "ckpt.pt").unlink()
    try:
        _sparse(run / "ckpt.pt", free + (1 << 30))
    except OSError:
        pytest.skip("this file system makes no sparse file that large")
    code, _, err = _error_line(capsys, ["llm", "predict", str(run), "--gap"])
    assert code == 3 and "of memory available" in err and "ckpt.pt" in err, err


def test_an_observer_folder_that_is_a_file_is_a_data_error(tmp_path):
    import torch

    import noloco
    from noloco.infra.errors import DataError

    (tmp_path / "f").write_text("")
    with pytest.raises(DataError, match="is a file, not a folder"):
        noloco.Observer(noloco.OuterOptimizer([torch.zeros(2, 3)], replicas=2, inner_steps=2), tmp_path / "f",
                        outer_steps=2, lr=0.1)


def test_gap_refuses_a_schedule_too_long_to_hold(tiny_run, tmp_path, capsys):
    run = _copy(tiny_run, tmp_path)
    _edit_json(run / "result.json", lambda d: d["config"].update(outer_steps=10**12))
    code, _, err = _error_line(capsys, ["llm", "predict", str(run), "--gap"])
    assert code == 3 and "needs about" in err and "Unable to allocate" not in err, err


@pytest.mark.parametrize("call, match", [
    ("noloco.OuterOptimizer(torch.nn.Linear(2, 2), 3, replicas=2, inner_steps=2)", "inner_optimizer=int"),
    ("noloco.OuterOptimizer(None, replicas=2, inner_steps=2)", "model=None"),
    ("noloco.Observer(None, 'never-made', outer_steps=2, lr=0.1)", "not a noloco.OuterOptimizer"),
    ("noloco.Spectrum('x')", "are not numbers"),
    ("noloco.SimConfig(outer=None)", "outer=None"),
    ("noloco.read_run(3)", "give a path"),
    ("noloco.partition(0, 'a', 8, 2)", "step='a' is not an integer"),
    ("noloco.partition(0, 0, 8.0, 2)", "replicas=8.0 is not an integer"),  # was numpy's TypeError
    ("noloco.Spectrum(None)", "curvatures=None are not numbers"),  # was 'curvature=nan is out of range'
    ("noloco.Spectrum.parse(None)", "spectrum=None is NoneType"),  # was an AttributeError
    ("noloco.outer_step(1.0, 0.0, 1.0, 0.0, 0.5, 1, 1, momentum='adam')", "momentum='adam'"),  # was a bare ValueError
    ("noloco.simulate('noloco', *noloco.resolve()[1:], None, trials='4')", "trials='4' is not an integer"),  # TypeError
    ("noloco.SimConfig(rotate='no')", "rotate='no' is not allowed"),  # was kept, and rotated: 'no' is truthy
    ("noloco.resolve('paper', gamma_tied='no')", "gamma_tied='no' is not allowed"),  # was read as yes
    ("noloco.simulate('noloco', *noloco.resolve()[1:], None, use_cache='no')", "use_cache='no' is not allowed"),
    ("noloco.OuterOptimizer([torch.zeros(2, 3)], replicas=2, inner_steps=2).load_state_dict({}, strict='no')",
     "strict='no' is not allowed"),
    ("noloco.OuterOptimizer(5, replicas=2, inner_steps=2)", "model=int"),
    ("noloco.OuterOptimizer(torch.zeros(2, 3), replicas=2, inner_steps=2)", r"as \[tensor\]"),
    ("noloco.Observer(noloco.OuterOptimizer([torch.zeros(2, 3)], replicas=2, inner_steps=2), None, outer_steps=2, "
     "lr=0.1, sample=1)", "sample=1"),
    ("noloco.Observer(noloco.OuterOptimizer([torch.zeros(2, 3)], replicas=2, inner_steps=2), None, outer_steps=2, "
     "lr=0.1, overwrite='yes')", "overwrite='yes'"),
    ("noloco.Observer(noloco.OuterOptimizer([torch.zeros(2, 3)], replicas=2, inner_steps=2), None, outer_steps=2, "
     "lr=0.1, seed=-1)", "seed=-1"),
    ("noloco.Observer(noloco.OuterOptimizer([torch.zeros(2, 3)], replicas=2, inner_steps=2), None, outer_steps=2, "
     "lr=0.1, model=object())", "model=<object .* cannot be kept"),  # refused now, not at close()
])
def test_more_public_arguments_are_named(call, match):
    import torch  # noqa: F401 - used by the calls

    import noloco  # noqa: F401
    from noloco.infra.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        eval(call)


@pytest.mark.slow
def test_a_rank_stopped_while_it_imports_torch_ends_in_one_line(tmp_path):
    """torchrun stops rank 0 (SIGTERM) when rank 1 fails at once: wherever the signal lands, the rank ends with
    its one line or none (before Python's handler exists), never a traceback of a second import of a
    half-imported torch (it was exit 1 with 31 lines, or a segfault, at 1.2 to 2 s on the 2-core machine)."""
    import signal
    import subprocess
    import sys
    import time

    from noloco.training.exchange import free_port

    for delay in (0.6, 0.9, 1.2, 1.5, 2.0, 3.0):
        p = subprocess.Popen([sys.executable, "-m", "noloco", "llm", "train", *TINY, "--out",
                              str(tmp_path / f"d{delay}")], env=_rank_env(0, free_port()), stderr=subprocess.PIPE,
                             text=True)
        time.sleep(delay)
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=120)[1]
        assert p.returncode in (130, -signal.SIGTERM) and err.count("\n") <= 1, (delay, p.returncode, err[-2000:])


def test_every_command_answers_a_usage_error_under_json_with_a_json_error(capsys):
    """The contract is enforced in one place (noloco.infra.entry); every command of the tree reaches it."""
    from test_json_contract import commands

    for name in commands():
        code, out, err = _error_line(capsys, [*name.split(), "--no-such-flag", "--json"])
        report = json.loads(out)
        assert code == 2 and report["error"]["exit_code"] == 2 and report["error"]["command"] == f"noloco {name}", \
            (name, out, err)
