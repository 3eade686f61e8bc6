"""What a run shows while it runs and when it ends: the live lines (`--log-every`), the closing table after a
resume, the TensorBoard sink (`--tensorboard`). Under torchrun the closing table is checked in
tests/test_llm_train.py's torchrun test (rank 0 prints it once)."""

from __future__ import annotations

import json
import re
import sys

import pytest

from optional import LazyModule

from noloco.cli import main
from noloco.llm_check.config import build

torch = LazyModule("torch")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = ["llm", "train", "--size", "cpu-tiny", "--method", "noloco", "--val-windows", "4", "--warmup", "0",
        "--threads", "1"]
LIVE = re.compile(r"; train loss (\S+), lr (\S+), (\S+) tok/s, (\S+) ms/step$")


def _rows(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_live_lines_carry_loss_lr_speed_at_the_interval(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TINY, "--outer-steps", "4", "--eval-every", "1", "--log-every", "5", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    lines = [m for m in map(LIVE.search, err.splitlines()) if m]
    cfg = build("cpu-tiny", "noloco", outer_steps=4, eval_every=1, val_windows=4, warmup=0)
    assert len(lines) == cfg.total_inner_steps // 5 == 4
    steps = [int(re.search(r"(\d+)/20 inner steps", line).group(1))
             for line in err.splitlines() if LIVE.search(line)]
    assert steps == [5, 10, 15, 20]
    rows = _rows(out)
    for step, match, row in zip(steps, lines, rows):
        loss, lr, tokens_per_s, ms = match.groups()
        # one line per outer step and one evaluation per outer step: the same interval's mean training loss
        assert float(loss) == pytest.approx(row["train_loss"], abs=1e-4)
        assert float(lr) == pytest.approx(cfg.inner_lr(step - 1), rel=1e-2)
        assert float(tokens_per_s.replace(",", "")) > 0 and float(ms) > 0
    # the default: one line per outer step (H inner steps)
    assert main([*TINY, "--outer-steps", "2", "--out", str(tmp_path / "default")]) == 0
    assert sum(bool(LIVE.search(line)) for line in capsys.readouterr().err.splitlines()) == 2


def test_a_bad_log_every_is_exit_2(tmp_path, capsys):
    assert main([*TINY, "--log-every", "0", "--out", str(tmp_path)]) == 2
    assert "log_every=0 is out of range" in capsys.readouterr().err


def test_the_closing_table_after_a_resume_counts_the_whole_run(tmp_path, capsys):
    out = tmp_path / "run"
    common = [*TINY, "--outer-steps", "3", "--eval-every", "1", "--out", str(out)]
    assert main([*common, "--stop-after", "1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["runs"]["noloco"]
    assert main([*common, "--resume", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)["runs"]["noloco"]
    tokens = build("cpu-tiny").tokens_per_inner_step()
    assert first["part"] == {**first["part"], "resumed": False, "from_step": 0, "inner_steps": 5}
    assert second["part"] == {**second["part"], "resumed": True, "from_step": 5, "inner_steps": 10,
                              "tokens": 10 * tokens}
    assert second["run"]["inner_steps"] == 15 and second["run"]["tokens"] == 15 * tokens
    # the whole run's time: the first part's up to its checkpoint, then this part's
    assert second["run"]["wall_s"] > second["part"]["wall_s"] > 0
    assert second["run"]["wall_s"] < second["part"]["wall_s"] + first["run"]["wall_s"] + 1e-6
    assert second["run"]["tokens_per_s"] == pytest.approx(15 * tokens / second["run"]["wall_s"])

    # the table: whole-run columns and one line for the resumed part
    from noloco.llm_check.train import format_results

    table = format_results({"noloco": second}).splitlines()
    row = next(line for line in table if line.startswith("noloco "))
    assert row.split()[1] == "15" and float(row.split()[-1]) == pytest.approx(second["run"]["wall_s"], abs=0.06)
    assert any(line.startswith("noloco: resumed at inner step 5: this part trained 10 inner steps") for line in table)


def test_a_checkpoint_without_the_run_time_says_so(tmp_path, capsys):
    out = tmp_path / "run"
    common = [*TINY, "--outer-steps", "2", "--eval-every", "1", "--out", str(out)]
    assert main([*common, "--stop-after", "1"]) == 0
    state = torch.load(out / "ckpt.pt", weights_only=True)
    del state["run_wall_s"]  # as written before the run's time was kept
    torch.save(state, out / "ckpt.pt")
    capsys.readouterr()
    assert main([*common, "--resume"]) == 0
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("noloco "))
    assert row.split()[1] == "10" and row.split()[-2:] == ["-", "-"]
    assert "the whole run's time is not known" in table


def test_tensorboard_events_hold_the_scalars(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    common = [*TINY, "--outer-steps", "3", "--eval-every", "1", "--log-every", "5", "--tensorboard", "--out", str(out)]
    assert main([*common, "--stop-after", "1"]) == 0
    assert main([*common, "--resume"]) == 0
    capsys.readouterr()
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "perf/tokens_per_s", "perf/step_ms", "eval/val_loss_avg_model",
            "eval/weight_std"} <= tags
    assert "perf/mfu" not in tags  # a CPU has no known peak
    assert [e.step for e in events.Scalars("train/loss")] == [5, 10, 15]
    rows = _rows(out)
    evaluated = events.Scalars("eval/val_loss_avg_model")
    assert [e.step for e in evaluated] == [r["step"] for r in rows]
    assert [e.value for e in evaluated] == pytest.approx([r["val_loss_avg_model"] for r in rows], rel=1e-6)
    cfg = build("cpu-tiny", "noloco", outer_steps=3, eval_every=1, val_windows=4, warmup=0)
    assert [e.value for e in events.Scalars("train/lr")] == pytest.approx([cfg.inner_lr(s - 1) for s in (5, 10, 15)])
    # --overwrite removes the replaced run's events
    assert main([*common, "--overwrite", "--outer-steps", "1"]) == 0
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [5]


def test_tensorboard_missing_is_exit_3_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails, as without the package
    assert main([*TINY, "--tensorboard", "--out", str(tmp_path / "run")]) == 3
    err = capsys.readouterr().err
    assert "--tensorboard needs tensorboard" in err and "[tb]" in err and not (tmp_path / "run").exists()


def test_mfu_on_a_known_gpu(monkeypatch):
    """No GPU here: the device's name is given, and the MFU is this device's FLOPs a second over its peak
    (the benchmark's peak table); on a GPU not listed, and on a CPU, there is none."""
    import time

    from noloco.infra.progress import Progress
    from noloco.llm_check.live import LiveLog
    from noloco.llm_check.resources import PEAK_FLOPS, peak_flops

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    cfg = build("gpu", "noloco")
    assert peak_flops("cuda:0") == PEAK_FLOPS["H100"] and peak_flops("cpu") is None
    log = LiveLog(cfg, 10, Progress(1, "x", show=False), show=False, local_replicas=1, world_size=cfg.replicas)
    for _ in range(3):
        log.step(1, torch.ones(1))
    time.sleep(0.01)
    v = log.values(3)
    per_device = v.tokens_per_s / cfg.replicas  # one replica of the run's on this rank's GPU
    assert v.mfu == pytest.approx(per_device * cfg.model().flops_per_token() / PEAK_FLOPS["H100"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Other GPU")
    assert peak_flops("cuda") is None
