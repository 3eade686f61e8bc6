"""A training run's life: Ctrl-C and SIGTERM checkpoint the state where they land and resuming from it is
exact; the lock is released; --overwrite removes the run's own files and nothing else; a full disk is
exit 3 naming the file with the previous checkpoint intact; a log shows a line per evaluation."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")

from noloco.infra.entry import Interrupted  # noqa: E402
from noloco.infra.files import loads  # noqa: E402
from noloco.llm_check.config import build  # noqa: E402

SETTING = dict(outer_steps=4, eval_every=2, val_windows=8)


pytestmark = [needs_torch, pytest.mark.usefixtures("one_torch_thread")]


def _rows(out):
    strip = ("tokens_per_s",)  # wall-clock
    return [{k: v for k, v in loads(line).items() if k not in strip}
            for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def _signal_at(monkeypatch, inner_step: int, signum: int):
    """Send ``signum`` to this process during inner step ``inner_step`` (as a user or a scheduler would)."""
    from noloco.llm_check.trainer import Trainer

    original = Trainer.inner_step

    def inner(self, step):
        if step == inner_step:
            os.kill(os.getpid(), signum)
        return original(self, step)

    monkeypatch.setattr(Trainer, "inner_step", inner)


@pytest.mark.parametrize("signum, where", [(signal.SIGTERM, 7), (signal.SIGINT, 4), (signal.SIGTERM, 9)])
def test_a_signal_checkpoints_where_it_lands_and_resuming_is_exact(tmp_path, monkeypatch, signum, where):
    """cpu-tiny has H = 5: inner step 7 is mid-phase (2 of 5 done in outer step 2), 4 the last of a phase
    (the stop waits for the outer step), 9 also the last of a phase."""
    from noloco.llm_check.trainer import Trainer

    cfg = build("cpu-tiny", "noloco", **SETTING)
    full = Trainer(cfg, tmp_path / "full", progress=False)
    full.run()
    _signal_at(monkeypatch, where, signum)
    with pytest.raises(Interrupted) as stop:
        Trainer(cfg, tmp_path / "cut", progress=False).run()
    monkeypatch.undo()
    assert stop.value.signal_name == ("SIGTERM" if signum == signal.SIGTERM else "Ctrl-C")
    assert "--resume" in stop.value.hint and str(tmp_path / "cut" / "ckpt.pt") in stop.value.hint
    assert not (tmp_path / "cut" / "run.lock").exists()  # released
    state = torch.load(tmp_path / "cut" / "ckpt.pt", weights_only=True)
    done = where + 1
    assert (state["outer_step"], state["inner_step"]) == divmod(done, cfg.inner_steps)
    assert ("theta" in state) == (done % cfg.inner_steps != 0)
    assert loads((tmp_path / "cut" / "result.json").read_text())["finished"] is False
    resumed = Trainer(cfg, tmp_path / "cut", progress=False)
    resumed.run(resume=True)
    for k in full.phi:
        assert torch.equal(full.phi[k], resumed.phi[k]), k
        assert torch.equal(full.delta[k], resumed.delta[k]), k
    assert _rows(tmp_path / "full") == _rows(tmp_path / "cut")
    assert (tmp_path / "full" / "inputs.jsonl").read_text() == (tmp_path / "cut" / "inputs.jsonl").read_text()


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def test_sigterm_on_the_command_line_exits_130_with_the_resume_command(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "noloco", "llm", "train", "--size", "cpu-tiny", "--method", "noloco",
               "--outer-steps", "60", "--eval-every", "1", "--val-windows", "4", "--threads", "1", "--out", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        for line in proc.stderr:  # a log, not a terminal: a line per evaluation
            if "inner steps" in line:
                break
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    lines = err.strip().splitlines()
    assert proc.returncode == 130 and "Traceback" not in err
    assert lines[-1].startswith("noloco llm train: terminated (SIGTERM); the state at outer step")
    assert lines[-1].endswith(f"--out {out} --resume")
    assert not (out / "run.lock").exists()
    words = lines[-1].split("continue with: ")[1].split()
    assert words[0] == "noloco"  # the command as the user typed it; run here through this interpreter
    resumed = subprocess.run([sys.executable, "-m", "noloco", *words[1:]], capture_output=True, text=True,
                             env=_env(), timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert loads((out / "result.json").read_text())["finished"] is True


def test_overwrite_removes_only_the_runs_own_files(tmp_path):
    from noloco.llm_check.trainer import Trainer

    cfg = build("cpu-tiny", "noloco", **SETTING)
    Trainer(cfg, tmp_path, progress=False).run(stop_after=2)
    mine = {"ckpt-backup.pt": b"keep me", "notes.txt": b"mine", "ckpt.pt.orig": b"also mine"}
    for name, content in mine.items():
        (tmp_path / name).write_bytes(content)
    Trainer(cfg, tmp_path, progress=False).run(overwrite=True)
    for name, content in mine.items():
        assert (tmp_path / name).read_bytes() == content
    assert loads((tmp_path / "result.json").read_text())["finished"] is True


FULL_DISK = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # writes past the limit fail with EFBIG, as on a full disk
from noloco.llm_check.config import build
from noloco.llm_check.lifecycle import Lifecycle
original = Lifecycle.save
def save(self):
    if self.trainer.outer_done == 2:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
    original(self)
Lifecycle.save = save
from noloco.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_full_disk_at_a_checkpoint_is_exit_3_naming_the_file_and_keeps_the_previous_one(tmp_path):
    args = ["llm", "train", "--size", "cpu-tiny", "--method", "noloco", "--outer-steps", "4", "--eval-every", "1",
            "--ckpt-every", "1", "--val-windows", "4", "--threads", "1", "--out", str(tmp_path)]
    proc = subprocess.run([sys.executable, "-c", FULL_DISK, *args], capture_output=True, text=True, env=_env(),
                          timeout=300)
    assert proc.returncode == 3, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr and str(tmp_path / "ckpt.pt") in line and line.startswith("noloco llm train")
    kept = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert kept["outer_step"] == 1  # the checkpoint before the failed one, whole
    assert not list(tmp_path.glob(".ckpt.pt.*.tmp"))


# ------------------------------------------------------------------ the lock and the files of a run (issue 22)

import errno  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402

from noloco.infra import files, rundir  # noqa: E402
from noloco.infra.errors import DataError  # noqa: E402


def _within(seconds: int):
    """Fail instead of hanging: SIGALRM after ``seconds`` (cancel with signal.alarm(0))."""
    def hang(signum, frame):
        raise AssertionError(f"blocked for more than {seconds} s")
    signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)


@pytest.mark.parametrize("pid", [99999999999999999999999, -1, 0, "12", None, True])
def test_a_lock_of_a_pid_no_process_can_have_is_taken_over(tmp_path, capsys, pid):
    (tmp_path / "run.lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "start": "1"}))
    lock = rundir.RunLock(tmp_path).acquire()
    assert json.loads((tmp_path / "run.lock").read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / "run.lock").exists()
    assert "taking over the lock" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["dangling symbolic link", "symbolic link to a lock", "named pipe", "folder"])
def test_a_lock_that_is_not_a_plain_file_is_refused_at_once(tmp_path, kind):
    lock = tmp_path / "run.lock"
    if kind == "dangling symbolic link":
        lock.symlink_to(tmp_path / "nowhere")
    elif kind == "symbolic link to a lock":
        (tmp_path / "elsewhere").write_text(json.dumps({"pid": 1, "host": "x"}))
        lock.symlink_to(tmp_path / "elsewhere")
    elif kind == "named pipe":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    _within(30)
    try:
        with pytest.raises(DataError, match="run.lock is not a lock file this toolkit wrote"):
            rundir.RunLock(tmp_path).acquire()
    finally:
        signal.alarm(0)


def test_a_lock_that_cannot_be_written_is_a_fault_naming_it_and_leaves_no_empty_lock(tmp_path, monkeypatch):
    class Full:  # a full disk: the write fails
        def __init__(self, fd):
            self.fd = fd

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            os.close(self.fd)

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rundir.os, "fdopen", lambda fd, *a, **k: Full(fd))
    with pytest.raises(DataError) as err:
        rundir.RunLock(tmp_path).acquire()
    monkeypatch.undo()
    assert str(tmp_path / "run.lock") in str(err.value) and "No space left on device" in str(err.value)
    assert not (tmp_path / "run.lock").exists()  # an empty lock would be taken for a dead owner's next time
    rundir.RunLock(tmp_path).acquire().release()


def test_a_writer_that_fails_on_a_full_disk_without_saying_so_is_named_a_full_disk(tmp_path, monkeypatch):
    """torch.save on a full disk raises RuntimeError('... unexpected pos 164672 vs 164560'): the line says what
    it means, names the file, and the previous file stays."""
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"previous")

    def torch_like(tmp):
        Path(tmp).write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 164672 vs 164560")

    real = os.statvfs
    monkeypatch.setattr(files.os, "statvfs", lambda p: os.statvfs_result((4096, 4096, 10, 0, 0, 10, 0, 0, 0, 255)))
    with pytest.raises(DataError) as err:
        files.atomic_write(path, torch_like)
    monkeypatch.setattr(files.os, "statvfs", real)
    assert str(path) in str(err.value) and "No space left on device: [enforce fail" in str(err.value)
    assert path.read_bytes() == b"previous" and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    with pytest.raises(DataError) as err:  # with space left, the writer's own words only
        files.atomic_write(path, torch_like)
    assert "No space left" not in str(err.value)


@pytest.mark.parametrize("lr", [3e-3, 1e6])
def test_losses_read_together_give_the_run_read_step_by_step(tmp_path, monkeypatch, lr):
    """On a GPU the losses of a phase are read on the host together (no wait for the GPU at every step): the
    rows, the inputs and a divergence (lr 1e6) are those of the run that reads them at every step."""
    from noloco.llm_check.trainer import Trainer

    from noloco.llm_check.lifecycle import Lifecycle

    cfg = build("cpu-tiny", "noloco", **SETTING, lr=lr)
    results = {}
    for name, every in (("each", True), ("together", False)):
        monkeypatch.setattr(Lifecycle, "read_losses_every_step", every)
        results[name] = Trainer(cfg, tmp_path / name, progress=False).run(log_every=3)
    strip = ("wall_s", "tokens_per_s", "run_wall_s", "started", "finished_at", "created")
    each, together = ({k: v for k, v in r.items() if not any(s in k for s in strip)} for r in results.values())
    assert each.get("diverged") == together.get("diverged")
    assert (each.get("diverged") is not None) == (lr > 1)
    assert _rows(tmp_path / "each") == _rows(tmp_path / "together")
    if (tmp_path / "each" / "inputs.jsonl").exists():
        assert (tmp_path / "each" / "inputs.jsonl").read_text() == (tmp_path / "together" / "inputs.jsonl").read_text()
