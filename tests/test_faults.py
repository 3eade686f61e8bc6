"""Faults (issue 10): a process killed with SIGKILL while it writes each kind of file (metrics,
checkpoint, result.json, a cache entry, a figure) leaves the previous file intact and the work
resumable; a second run into a folder in use is refused; a dead peer, a truncated checkpoint, a
cache entry of the wrong shape and work above the memory budget each get one line and their
exit code."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optional import LazyModule, needs_torch  # noqa: E402 (tests/optional.py)

torch = LazyModule("torch")

from noloco.llm_check.config import build  # noqa: E402
from noloco.cli import main  # noqa: E402
from noloco.infra import errors, files, rundir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [needs_torch, pytest.mark.usefixtures("one_torch_thread")]


def environment(**extra) -> dict:
    """The subprocesses' environment, read when they start (conftest has set NOLOCO_CACHE by then)."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}

RUN = ["llm", "train", "--size", "cpu-tiny", "--method", "noloco", "--val-windows", "4", "--warmup", "0",
       "--outer-steps", "3", "--eval-every", "1", "--threads", "1"]
TINY = dict(val_windows=4, warmup=0, outer_steps=3, eval_every=1)

# Runs `noloco ARGV` with noloco.infra.files.atomic_write hooked: from the (AFTER+1)-th write of a file named
# TARGET (a name, or FOLDER/*SUFFIX) on, the writer fills its temporary file halfway, says so on stdout
# and waits to be killed.
HOOK = r"""
import os, sys, time
from pathlib import Path
from noloco.infra import files
target, after = sys.argv[1], int(sys.argv[2])
original, seen = files.atomic_write, [0]

def matches(path):
    folder, _, name = target.rpartition("/")
    if folder and path.parent.name != folder:
        return False
    return path.name == name or (name.startswith("*") and path.name.endswith(name[1:]))

def hooked(path, write, **kw):
    if matches(Path(path)):
        seen[0] += 1
        if seen[0] > after:
            def half(tmp):
                write(tmp)
                with open(tmp, "r+b") as handle:
                    handle.truncate(os.path.getsize(tmp) // 2)
                print("WRITING", path, flush=True)
                time.sleep(600)
            return original(path, half, **kw)
    return original(path, write, **kw)

files.atomic_write = hooked
import noloco.llm_check.lifecycle  # binds the hooked atomic_write
from noloco.cli import main
sys.exit(main(sys.argv[3:]))
"""


def kill_while_writing(target: str, after: int, argv: list, cwd, env=None) -> str:
    """Start the hooked command, SIGKILL it while it writes ``target``; the path it was writing."""
    proc = subprocess.Popen([sys.executable, "-c", HOOK, target, str(after), *map(str, argv)], cwd=cwd, env=env or environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("WRITING"):
                break
        else:
            raise AssertionError(f"never wrote {target}: {proc.stderr.read()[-2000:]}")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()
    return line.split(" ", 1)[1].strip()


def rows(out):
    return [files.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- kill -9 while writing

@pytest.mark.parametrize("target,after,kept", [
    ("metrics.jsonl", 2, "rows [1]"),          # the 3rd write: the rows of outer step 2
    ("ckpt.pt", 1, "checkpoint at 1"),         # the 2nd checkpoint
    ("result.json", 1, "result at the start"),  # the 2nd result: after the first checkpoint
])
def test_kill_while_writing_a_run_file_keeps_the_previous_one_and_resumes(tmp_path, capsys, target, after, kept):
    from noloco.llm_check.trainer import Trainer

    out = tmp_path / "run"
    written = kill_while_writing(target, after, [*RUN, "--out", out], tmp_path)
    assert Path(written) == out / target
    assert (out / "run.lock").exists()  # its owner died holding it
    if target == "metrics.jsonl":
        assert [r["outer_step"] for r in rows(out)] == [1]
    elif target == "ckpt.pt":
        assert torch.load(out / "ckpt.pt", weights_only=True)["outer_step"] == 1
    else:
        result = files.loads((out / "result.json").read_text())
        assert result["finished"] is False and result["outer_steps_done"] == 0
    assert list(out.glob(f".{target}.*.tmp"))  # the half-written temporary file, never renamed
    capsys.readouterr()
    assert main([*RUN, "--out", str(out), "--resume"]) == 0
    assert "taking over the lock" in capsys.readouterr().err
    assert [r["outer_step"] for r in rows(out)] == [1, 2, 3]
    assert files.loads((out / "result.json").read_text())["finished"] is True
    assert not list(out.glob(".*.tmp")) and not (out / "run.lock").exists()
    full = Trainer(build("cpu-tiny", "noloco", **TINY), tmp_path / "full", progress=False)
    full.run()
    resumed = torch.load(out / "ckpt.pt", weights_only=True)
    for k, p in full.phi.items():  # the resumed run is the uninterrupted one
        assert torch.equal(resumed["phi"][k], p), k


@pytest.fixture(scope="module")
def figure_run(tmp_path_factory):
    from noloco.paper_figs.run import make

    root = tmp_path_factory.mktemp("figs")
    make("stability", quick=True, out=root / "out", cache_dir=root / "cache")
    return root


@pytest.mark.parametrize("target", ["figure-stability/*.json", "stability.png"])
def test_kill_while_writing_a_cache_entry_or_a_figure_keeps_the_previous_one(figure_run, tmp_path, target):
    root = tmp_path / "figs"
    import shutil

    shutil.copytree(figure_run, root)
    entries = sorted((root / "cache" / "figure-stability").glob("*.json"))
    before = {p: p.read_bytes() for p in (*entries, root / "out" / "stability.png", root / "out" / "stability.pdf")}
    argv = ["figs", "--only", "stability", "--quick", "--refresh", "--out", root / "out", "--cache", root / "cache"]
    written = Path(kill_while_writing(target, 0, argv, tmp_path))
    # the entry it rewrites is the one made before (its key holds a hash of every source: while sources
    # are being edited it can be a new one, then there was no previous version to keep)
    assert written in entries or written.parent.name == "figure-stability" if target.endswith(".json") else \
        written == root / "out" / "stability.png"
    assert {p: p.read_bytes() for p in before} == before  # nothing half-written where a reader looks
    assert main(["figs", "--only", "stability", "--quick", "--out", str(root / "out"), "--cache",
                 str(root / "cache")]) == 0


def test_kill_while_writing_a_new_cache_entry_leaves_none(tmp_path, capsys, monkeypatch):
    argv = ["simulate", "--trials", "4", "--outer-steps", "3", "--json"]
    cache = tmp_path / "cache"
    kill_while_writing("simulate/*.json", 0, argv, tmp_path, env=environment(NOLOCO_CACHE=str(cache)))
    assert not list(cache.rglob("*.json")) and list(cache.rglob("*.tmp"))  # only the temporary file
    monkeypatch.setenv("NOLOCO_CACHE", str(cache))
    capsys.readouterr()
    assert main(argv) == 0
    assert capsys.readouterr().err == ""  # nothing to warn about: no half entry is ever read
    assert len(list(cache.rglob("*.json"))) == 1


# ---------------------------------------------------------------- one run per folder

def test_a_second_run_into_a_folder_in_use_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "noloco", "llm", "train", "--size", "cpu-tiny", "--val-windows", "4",
                              "--warmup", "0", "--outer-steps", "2000", "--eval-every", "1000", "--ckpt-every", "1",
                              "--threads", "1", "--out", str(out)], cwd=tmp_path, env=environment(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "ckpt.pt").exists():  # it holds the lock and has checkpointed
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.1)
        assert files.loads((out / "run.lock").read_text())["pid"] == first.pid
        metrics = (out / "metrics.jsonl").read_bytes()
        for extra in ([], ["--resume"], ["--overwrite"]):
            capsys.readouterr()
            assert main([*RUN, "--out", str(out), *extra]) == 3
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"is in use by another run (pid {first.pid}" in err
        assert (out / "metrics.jsonl").read_bytes() == metrics  # the second run wrote nothing
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        first.stderr.close()
    done = torch.load(out / "ckpt.pt", weights_only=True)["outer_step"]
    assert main(["llm", "train", "--size", "cpu-tiny", "--method", "noloco", "--val-windows", "4", "--warmup", "0",
                 "--outer-steps", "2000", "--eval-every", "1000", "--threads", "1", "--out", str(out), "--resume",
                 "--stop-after", str(done + 1)]) == 0
    assert torch.load(out / "ckpt.pt", weights_only=True)["outer_step"] == done + 1


def test_the_lock_is_reentrant_and_only_its_owner_removes_it(tmp_path):
    lock = rundir.RunLock(tmp_path)
    with lock:
        with rundir.RunLock(tmp_path):  # the same process again (noloco llm train, then its trainer)
            pass
        assert (tmp_path / "run.lock").exists()
    assert not (tmp_path / "run.lock").exists()
    (tmp_path / "run.lock").write_text('{"pid": 1, "host": "elsewhere"}')
    with pytest.raises(errors.LockedError, match="another host"):
        rundir.RunLock(tmp_path).acquire()
    assert (tmp_path / "run.lock").exists()


# ---------------------------------------------------------------- a dead peer

def test_a_dead_peer_is_exit_3_with_one_line(tmp_path):
    """Two ranks of `python -m noloco llm train` (no torchrun agent, which would stop the other rank
    itself); rank 1 is killed mid-run, rank 0 reports it within its --timeout."""
    from noloco.training.exchange import free_port

    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = {**environment(), "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        procs.append(subprocess.Popen([sys.executable, "-m", "noloco", "llm", "train", "--size", "cpu-tiny", "--replicas",
                                       "2", "--val-windows", "4", "--warmup", "0", "--outer-steps", "2000",
                                       "--eval-every", "1000", "--ckpt-every", "1", "--timeout", "4",
                                       "--log-every", "100000",  # no live lines: stderr is the error's alone
                                       "--out", str(tmp_path)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "ckpt-rank1.pt").exists():
            assert all(p.poll() is None for p in procs) and time.monotonic() < deadline
            time.sleep(0.1)
        # rank 0 is paused while rank 1 dies, so it also starts operations on a socket already closed
        # (gloo raises at the start then, not in the wait)
        procs[0].send_signal(signal.SIGSTOP)
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(timeout=30)
        time.sleep(0.5)
        procs[0].send_signal(signal.SIGCONT)
        assert procs[0].wait(timeout=60) == 3
        err = procs[0].stderr.read().strip().splitlines()
        assert len(err) == 1 and err[0].startswith("noloco llm train: error: rank 0:"), err
        assert "Traceback" not in "".join(err)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
            p.stderr.close()


# ---------------------------------------------------------------- corrupted files, budgets

@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main([*RUN, "--out", str(out)]) == 0
    return out


def _copy(finished, tmp_path):
    import shutil

    return Path(shutil.copytree(finished, tmp_path / "run"))


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_a_damaged_checkpoint_is_exit_3_and_overwrite_recovers(finished, tmp_path, capsys, damage):
    out = _copy(finished, tmp_path)
    ckpt = out / "ckpt.pt"
    data = ckpt.read_bytes()
    ckpt.write_bytes({"truncated": data[: len(data) // 3], "empty": b"", "garbage": random.Random(7).randbytes(4096)}[damage])
    capsys.readouterr()
    assert main([*RUN, "--out", str(out), "--resume"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(ckpt) in err and "--overwrite" in err and "Traceback" not in err
    assert main([*RUN, "--out", str(out), "--overwrite"]) == 0
    assert files.loads((out / "result.json").read_text())["finished"] is True


@pytest.mark.parametrize("line", ['{"outer_step": 2, "weight_std"', "[1, 2]", '{"weight_std": 0}',
                                  '{"outer_step": "two", "weight_std": 0}'])
def test_a_bad_metrics_line_on_resume_is_exit_3_naming_the_line(finished, tmp_path, capsys, line):
    out = _copy(finished, tmp_path)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join(lines[:1] + [line] + lines[2:]) + "\n")
    capsys.readouterr()
    assert main([*RUN, "--out", str(out), "--resume"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metrics.jsonl" in err and ("line 2" in err or "row 2" in err)
    assert "--overwrite" in err


def test_a_cache_entry_of_the_wrong_shape_is_rebuilt_with_one_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path / "cache"))
    argv = ["simulate", "--trials", "4", "--outer-steps", "3", "--json"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    (entry,) = (tmp_path / "cache").rglob("*.json")
    stored = files.loads(entry.read_text())
    entry.write_text(files.dumps({**stored, "data": {"summary": 1.0}}))  # valid JSON, wrong shape
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == first
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and str(entry) in lines[0]
    assert files.loads(entry.read_text()) == stored  # rebuilt


def test_work_above_the_memory_budget_is_refused_before_it_starts(tmp_path, capsys):
    assert main([*RUN, "--out", str(tmp_path / "run"), "--max-memory", "10M"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a training step needs about" in err and "--max-memory" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before anything was written
    assert main([*RUN, "--out", str(tmp_path / "big"), "--batch", "100000"]) == 3  # issue 10: 24 GB


def test_simulate_above_the_memory_budget_is_refused(capsys):
    assert main(["simulate", "--trials", "1000000", "--no-cache", "--max-memory", "10M"]) == 3
    assert capsys.readouterr().err.count("\n") == 1
