"""The exit-code contract, case by case (issue 10): every command, every bad value we could think
of, and every case of the issue's "Seen" list. Each case asserts the exit code (0 success, 1 a
checked condition fails, 2 bad input, 3 an environment or data fault), at most one line on stderr
(exactly one for 2 and 3), and no traceback.

Cases run in-process through ``noloco.cli.main`` (fast); those that need a real process (a pipe,
the torchrun entry, a memory limit as a safety net) run as subprocesses. ``python
tests/test_cli_table.py`` prints the table of cases (docs/reliability.md describes it) with what each case got.

Placeholders in a case's command: ``{tmp}`` a fresh folder, ``{file}`` a file, ``{run}`` a folder
holding a finished cpu-tiny run, ``{trunc}`` the same with a truncated checkpoint, ``{garbled}``
with a garbled last line of metrics.jsonl, ``{notckpt}`` with a ckpt.pt that is a torch file but
not a checkpoint, ``{shape}`` with a checkpoint whose weights have the wrong shape, ``{pipeckpt}``
with a ckpt.pt that is a named pipe, ``{linkckpt}`` one that is a symbolic link to the checkpoint,
``{locked}`` a folder whose lock belongs to a live process, ``{stale}`` one whose lock belongs to a
dead process, ``{sweep}`` a validate folder that holds a sweep, ``{badruns}`` a runs folder with a
malformed metrics.jsonl, ``{port}`` a free TCP port. A case's ``env`` is set while it runs.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from noloco.cli import main  # noqa: E402
from places import RunPlaces  # noqa: E402 (tests/places.py)

TINY = "llm train --size cpu-tiny --method noloco --val-windows 4 --outer-steps 2 --eval-every 1 --warmup 0"


@dataclass(frozen=True)
class Case:
    command: str               # after `noloco` (or `python -m noloco llm train` with entry="train")
    codes: tuple               # the exit codes the contract allows here
    words: str = ""            # a piece of the one stderr line (what and where)
    how: str = "in-process"    # in-process | process | pipe | limited (a subprocess under a 3 GiB address limit)
    entry: str = "noloco"      # noloco | train (the torchrun entry) | none (bare `noloco`)
    marks: tuple = field(default=())
    seen: bool = False         # a case of issue 10's "Seen" list
    env: tuple = ()            # (NAME, value) pairs set for the case (NOLOCO_CACHE)

    @property
    def id(self) -> str:
        return ("train: " if self.entry == "train" else "") + self.command



C = Case
CASES = [
    # ------------------------------------------------------------ check
    C("check --alpha 1.5", (2,), "alpha=1.5"),
    C("check --alpha nan", (2,), "alpha=nan"),
    C("check --alpha inf", (2,), "alpha=inf"),
    C("check --alpha -0.1", (2,), "alpha=-0.1"),
    C("check --alpha half", (2,), "invalid float value"),
    C("check --beta -1", (2,), "beta=-1.0"),
    C("check --beta inf", (2,), "beta=inf"),
    C("check --gamma -1", (2,), "gamma=-1.0"),
    C("check --gamma inf", (2,), "gamma=inf"),
    C("check --gamma-tied --gamma 0.3", (2,), "conflicts with gamma_tied", seen=True),
    C("check --replicas 0", (2,), "replicas=0"),
    C("check --replicas 1e3", (2,), "invalid int value"),
    C("check --group-size 3", (2,), "group_size=3"),
    C("check --group-size 0", (2,), "group_size=0"),
    C("check --inner-lr 0", (2,), "inner_lr=0.0"),
    C("check --inner-lr inf", (2,), "inner_lr=inf"),
    C("check --inner-lr nan", (2,), "inner_lr=nan"),
    C("check --inner-steps 0", (2,), "inner_steps=0"),
    C("check --noise -1", (2,), "noise=-1.0"),
    C("check --noise inf", (2,), "noise=inf"),
    C("check --curvature 0", (2,), "curvature=0.0"),
    C("check --curvature -1", (2,), "curvature=-1.0"),
    C("check --curvature inf", (2,), "curvature=inf"),
    C("check --spectrum ''", (2,), "spectrum=''"),
    C("check --spectrum 1,-2", (2,), "curvature=-2.0"),
    C("check --spectrum 1,nan", (2,), "curvature=nan"),
    C("check --spectrum uniform:1", (2,), "spectrum="),
    C("check --spectrum uniform:1:0.1:10", (2,), "low=1.0, high=0.1"),
    C("check --spectrum powerlaw:1:1:0", (2,), "count=0"),
    C("check --spectrum uniform:0.1:1:1e3", (2,), "not understood"),
    C("check --curvature 1 --spectrum 1", (2,), "not allowed with argument --curvature"),
    C("check --method gossip", (2,), "invalid choice"),
    C("check --preset adam", (2,), "invalid choice"),
    C("check --momentum foo", (2,), "invalid choice"),
    C("check --method diloco --group-size 2", (2,), "conflicts with method='diloco'"),
    C("check --method ddp --inner-steps 5", (2,), "conflicts with method='ddp'"),
    C("check --method local --alpha 0.5", (2,), "conflicts with method='local'"),
    C("check --start nan", (2,), "unrecognized arguments"),
    C("check --gamma 3", (1,)),
    C("check --inner-lr 1e300", (1,)),
    C("check --noise 1e300", (1, 2), seen=True),
    C("check --preset paper", (0,)),
    C("check --spectrum uniform:0.1:1:20000 --json | head -c 20", (0,), how="pipe", seen=True),
    C("check --spectrum powerlaw:1:1:10000000 --max-memory 100M", (0, 3), how="limited"),
    C("check --spectrum powerlaw:1:1:100000000", (0, 3), how="limited", seen=True, marks=(pytest.mark.slow,)),
    # ------------------------------------------------------------ simulate
    C("simulate --trials 0", (2,), "trials=0"),
    C("simulate --trials 1", (2,), "trials=1"),
    C("simulate --outer-steps 0", (2,), "outer_steps=0"),
    C("simulate --start nan", (2,), "start=nan", seen=True),
    C("simulate --start inf", (2,), "start=inf"),
    C("simulate --zeta -1", (2,), "zeta=-1.0"),
    C("simulate --zeta nan", (2,), "zeta=nan"),
    C("simulate --batch-size -1", (2,), "batch_size=-1"),
    C("simulate --objective longley --l2 nan", (2,), "l2=nan"),
    C("simulate --warmup -1", (2,), "warmup=-1"),
    C("simulate --schedule inverse --decay-time 0", (2,), "decay_time=0.0"),
    C("simulate --burn-in 1000 --outer-steps 10", (2,), "burn_in=1000"),
    C("simulate --objective diabetes --curvature 1", (2,), "objective='diabetes'"),
    C("simulate --split iid", (2,), "split='iid'"),
    C("simulate --seed -1", (2,), "seed=-1"),
    C("simulate --objective nosuch", (2,), "invalid choice"),
    C("simulate --inner-momentum 2", (2,), "momentum"),
    C("simulate --schedule cosine --warmup 100000 --trials 20 --outer-steps 5", (2,), "warmup=100000"),
    C("simulate --objective diabetes --replicas 1024 --split iid --trials 20 --outer-steps 5", (2,), "replicas=1024"),
    C("simulate --inner-lr 10 --trials 20 --outer-steps 5 --no-cache", (1,)),
    C("simulate --inner-momentum 0.5 --trials 20 --outer-steps 5 --no-cache", (2,), "inner", seen=True),
    C("simulate --noise 1e300 --trials 20 --outer-steps 5 --no-cache", (1, 2), seen=True),
    C("simulate --trials 100000000 --no-cache --max-memory 100M", (3,), "memory", how="limited", seen=True),
    C("simulate --spectrum uniform:0.1:1:100000 --trials 100000 --no-cache --max-memory 100M", (3,), "memory",
      how="limited", seen=True),
    # ------------------------------------------------------------ comm
    C("comm --replicas 0", (2,), "replicas=0"),
    C("comm --replicas 3 --group-size 2", (2,), "group_size=2"),
    C("comm --params nan", (2,), "params=nan"),
    C("comm --params inf", (2,), "params=inf"),
    C("comm --bytes-per-value 0", (2,), "bytes_per_value=0.0"),
    C("comm --latency -1", (2,), "latency=-1.0"),
    C("comm --bandwidth 0", (2,), "bandwidth=0.0"),
    C("comm --jitter-cv 11", (2,), "jitter_cv=11.0"),
    C("comm --hardware ''", (2,), "hardware=''"),
    C("comm --hardware 0.5:1", (2,), "sum to 0.5"),
    C("comm --hardware a:b", (2,), "malformed"),
    C("comm --compute-seconds nan", (2,), "compute_seconds=nan"),
    C("comm --steps 0", (2,), "steps=0"),
    C("comm --trials 0", (2,), "trials=0"),
    C("comm --algorithm x", (2,), "invalid choice"),
    C("comm --seed -1", (2,), "seed=-1"),
    C("comm --latency 1e300", (0, 2)),
    C("comm --bandwidth 1e-300", (0, 2)),
    C("comm --latency 1e100 --bandwidth 1e-100", (0, 2)),
    C("comm --hardware 1:1e308", (2,), "hardware slowdown=1e+308", seen=True),  # issue 34: an internal error
    C("comm --hardware 0.5:1,0.5:1e100", (2,), "hardware slowdown=1e+100"),  # NaN idle fractions, exit 0
    C("comm --compute-seconds 1e-320", (2,), "times --compute-seconds"),  # NaN idle fractions, exit 0
    C("comm --replicas 1000000000", (0, 3), how="limited", seen=True),
    C("comm --replicas 1000000000 --max-memory 100M", (0, 3), how="limited", seen=True),
    # ------------------------------------------------------------ tune
    C("tune --grid 1", (2,), "grid=1"),
    C("tune --trials 5", (2,), "trials=5"),
    C("tune --objective steps --target 2", (2,), "target=2.0"),
    C("tune --target 0.01", (2,), "--objective rate does not use it"),
    C("tune --tune x", (2,), "tune='x'"),
    C("tune --tune H --h-values 0", (2,), "integers >= 1"),
    C("tune --h-values 20", (2,), "add --tune H"),
    C("tune --spread-budget nan", (2,), "spread_budget=nan"),
    C("tune --method local", (2,), "method='local'"),
    C("tune --out ''", (2,), "names no file", seen=True),
    C("tune --out {tmp}/d/", (2,), "names no file"),
    C("tune --out {file}/t.png", (3,), "is a file, not a folder", seen=True),
    C("tune --out {tmp}", (3,), "is a folder"),
    C("tune --out /proc/noloco/t.png", (3,), "cannot write there", seen=True),
    # ------------------------------------------------------------ claims
    C("claims --only nosuch", (2,), "claim='nosuch'"),
    C("claims --only ''", (2,), "names no claim"),
    C("claims --seed -1", (2,), "seed=-1"),
    C("claims --seed nan", (2,), "invalid int value"),
    # ------------------------------------------------------------ figs
    C("figs --only nosuch", (2,), "only='nosuch'"),
    C("figs --only ''", (2,), "names no figure"),
    C("figs --out ''", (2,), "names no folder", seen=True),
    C("figs --out {file}", (3,), "is a file, not a folder", seen=True),
    C("figs --out /proc/noloco", (3,), "cannot write there", seen=True),
    C("figs --cache {file}", (3,), "--cache", seen=True),
    C("figs --cache ''", (2,), "--cache"),
    C("figs --only llm --llm-runs {file} --out {tmp}", (3,), "--llm-runs"),
    C("figs --only llm --llm-runs '' --out {tmp}", (2,), "--llm-runs"),
    C("figs --only llm --llm-runs {badruns} --out {tmp}", (0, 3)),
    # issue 34: a cache root that is a system folder (as root NOLOCO_CACHE=/ made /simulate and /numba)
    C("figs --quick --only transient --out {tmp}", (3,), "NOLOCO_CACHE='/proc' cannot be a cache",
      env=(("NOLOCO_CACHE", "/proc"),), seen=True),
    C("figs --quick --only transient --cache /sys/kernel --out {tmp}", (3,), "--cache='/sys/kernel' cannot be a cache"),
    C("simulate --trials 4 --outer-steps 3", (3,), "NOLOCO_CACHE='/proc' cannot be a cache",
      env=(("NOLOCO_CACHE", "/proc"),), seen=True),
    # ------------------------------------------------------------ llm train
    C(f"{TINY} --out ''", (2,), "names no folder", seen=True),
    C(f"{TINY} --out {{file}}", (3,), "is a file, not a folder", seen=True),
    C(f"{TINY} --out {{file}}/sub", (3,), "cannot write there", seen=True),
    C(f"{TINY} --out /proc/noloco", (3,), "cannot write there", seen=True),
    C(f"{TINY} --out {{run}}", (2,), "holds a run", seen=True),
    C(f"{TINY} --out {{run}} --resume --overwrite", (2,), "give one of them"),
    C(f"{TINY} --out {{tmp}} --resume", (2,), "no checkpoint"),
    C(f"{TINY} --out {{run}} --resume --outer-steps 4", (2,), "outer_steps=2 (now 4)", seen=True),
    C(f"{TINY} --out {{run}} --resume --alpha 0.3", (2,), "outer.alpha=0.5 (now 0.3)"),
    C(f"{TINY} --out {{run}} --overwrite", (0,)),
    C(f"{TINY} --out {{run}} --resume --stop-after 2", (0,)),
    C(f"{TINY} --out {{tmp}} --lr 1e6", (1,), "diverged at outer step", seen=True),
    C(f"{TINY} --out {{tmp}} --lr inf", (2,), "lr=inf", seen=True),
    C(f"{TINY} --out {{tmp}} --lr nan", (2,), "lr=nan"),
    C(f"{TINY} --out {{tmp}} --lr 0", (2,), "lr=0.0"),
    C(f"{TINY} --out {{tmp}} --weight-decay nan", (2,), "weight_decay=nan"),
    C(f"{TINY} --out {{tmp}} --weight-decay inf", (2,), "weight_decay=inf"),
    C(f"{TINY} --out {{tmp}} --clip inf", (2,), "clip=inf"),
    C(f"{TINY} --out {{tmp}} --clip -1", (2,), "clip=-1.0"),
    C(f"{TINY} --out {{tmp}} --min-lr-frac 2", (2,), "min_lr_frac=2.0"),
    C(f"{TINY} --out {{tmp}} --warmup 30", (2,), "warmup=30"),
    # an explicit budget: under the default (half the memory available) --ctx 100000 (17.6 GiB) ran, for hours,
    # on a 128 GiB GPU machine
    C(f"{TINY} --out {{tmp}} --ctx 100000 --max-memory 4G", (3,), "above the budget", seen=True),
    C(f"{TINY} --out {{tmp}} --batch 100000 --max-memory 4G", (3,), "above the budget", seen=True),
    C(f"{TINY} --out {{tmp}} --replicas 100000 --group-size 1 --max-memory 4G", (3,), "above the budget"),
    C(f"{TINY} --out {{tmp}} --val-windows 1000000000 --max-memory 4G", (3,), "above the budget"),
    C(f"{TINY} --out {{tmp}} --max-memory 1M", (3,), "--max-memory"),
    C(f"{TINY} --out {{tmp}} --max-memory 0", (2,), "max_memory='0'"),
    C(f"{TINY} --out {{tmp}} --max-memory lots", (2,), "max_memory='lots'"),
    C(f"{TINY} --out {{tmp}} --ctx 700000 --batch 1 --val-windows 1 --replicas 1 --group-size 1 --max-memory 100G",
      (2,), "validation text"),
    C(f"{TINY} --out {{tmp}} --noniid --replicas 1000 --group-size 1 --max-memory 100G", (2,), "non-IID"),
    C(f"{TINY} --out {{tmp}} --timeout -1", (2,), "timeout=-1.0"),
    C(f"{TINY} --out {{tmp}} --timeout nan", (2,), "timeout=nan"),
    C(f"{TINY} --out {{tmp}} --method ''", (2,), "method=''"),
    C(f"{TINY} --out {{tmp}} --method noloco,noloco", (2,), "more than once", seen=True),
    C(f"{TINY} --out {{tmp}} --method noloco,", (2,), "method=''"),
    C(f"{TINY} --out {{tmp}} --method diloco --group-size 2", (2,), "conflicts with method='diloco'"),
    C(f"{TINY} --out {{tmp}} --ckpt-every 0", (2,), "ckpt_every=0"),
    C(f"{TINY} --out {{tmp}} --stop-after 0", (2,), "stop_after=0"),
    C(f"{TINY} --out {{tmp}} --threads 0", (2,), "threads=0"),
    C(f"{TINY} --out {{tmp}} --threads 100000", (2,), "threads=100000"),
    C(f"{TINY} --out {{tmp}} --device tpu", (2,), "device='tpu'"),
    C(f"{TINY} --out {{tmp}} --dtype float16", (2,), "invalid choice"),
    C(f"{TINY} --out {{tmp}} --replica-mode x", (2,), "invalid choice"),
    C(f"{TINY} --out {{trunc}} --resume", (3,), "ckpt.pt is unreadable", seen=True),
    C(f"{TINY} --out {{notckpt}} --resume", (3,), "not a checkpoint"),
    C(f"{TINY} --out {{shape}} --resume", (3,), "of shape"),
    C(f"{TINY} --out {{garbled}} --resume", (3,), "metrics.jsonl line 2 is not valid JSON", seen=True),
    # issue 34: a checkpoint that is a named pipe hung every reader; a link is not what a run folder holds
    C(f"{TINY} --out {{pipeckpt}} --resume", (3,), "ckpt.pt is a named pipe, not a regular file", seen=True),
    C(f"{TINY} --out {{linkckpt}} --resume", (3,), "ckpt.pt is a symbolic link, not a regular file"),
    C("llm evaluate {pipeckpt} --threads 1", (3,), "ckpt.pt is a named pipe, not a regular file", seen=True),
    C("llm evaluate {linkckpt} --threads 1", (3,), "ckpt.pt is a symbolic link, not a regular file"),
    C("llm predict {pipeckpt} --gap", (3,), "ckpt.pt is a named pipe, not a regular file", seen=True),
    C("llm evaluate ''", (2,), "OUT '' names no folder", seen=True),  # it evaluated the current folder, exit 3
    C(f"{TINY} --out {{locked}}", (3,), "is in use by another run", seen=True),
    C(f"{TINY} --out {{stale}}", (0,), "taking over the lock"),
    # ------------------------------------------------------------ llm validate, llm bench
    C("llm validate --preset x", (2,), "invalid choice"),
    C("llm validate --size cpu-tiny --out ''", (2,), "names no folder"),
    C("llm validate --size cpu-tiny --out {file}", (3,), "is a file, not a folder"),
    C("llm validate --size cpu-tiny --threads 0 --out {tmp}", (2,), "threads=0"),
    C("llm validate --size cpu-tiny --device tpu --out {tmp}", (2,), "device='tpu'"),
    C("llm validate --size cpu-tiny --max-memory 1M --out {tmp}", (3,), "above the budget"),
    C("llm validate --size cpu-tiny --out {sweep}", (2,), "--overwrite"),
    C("llm bench --replicas 0", (2,), "replicas=0"),
    C("llm bench --steps 0", (2,), "steps=0"),
    C("llm bench --size x", (2,), "invalid choice"),
    C("llm bench --size cpu-tiny --device tpu", (2,), "device='tpu'"),
    C("llm bench --size cpu-tiny --threads 0", (2,), "threads=0"),
    C("llm bench --size cpu-tiny --steps 1 --out ''", (2,), "names no file"),
    C("llm bench --size cpu-tiny --steps 1 --out {file}/x.json", (3,), "is a file, not a folder"),
    C("llm bench --size cpu-tiny --steps 1 --out {tmp}", (3,), "is a folder"),
    C("llm bench --size cpu-tiny --steps 1 --replicas 100000", (3,), "above the budget"),
    # ------------------------------------------------------------ the command itself
    C("", (2,), "required", entry="none"),
    C("nosuch", (2,), "invalid choice"),
    C("--version", (0,)),
    C("llm", (2,), "required"),
    # ------------------------------------------------------------ the torchrun entry: python -m noloco llm train
    C("--size cpu-tiny --out ''", (2,), "names no folder", how="process", entry="train"),
    C("--size cpu-tiny --alpha 2 --out {tmp}", (2,), "alpha=2.0", how="process", entry="train"),
    C("--size cpu-tiny --bogus --out {tmp}", (2,), "unrecognized arguments", how="process", entry="train"),
    C("--size cpu-tiny --val-windows 4 --outer-steps 2 --warmup 0 --out {run}", (2,), "holds a run",
      how="process", entry="train", seen=True),
    C("--size cpu-tiny --val-windows 4 --outer-steps 2 --warmup 0 --lr 1e6 --out {tmp}", (1,), "diverged",
      how="process", entry="train", seen=True),
    C("--size cpu-tiny --val-windows 4 --outer-steps 2 --warmup 0 --out {trunc} --resume", (3,), "unreadable",
      how="process", entry="train"),
    C("--size cpu-tiny --replicas 2 --timeout 3 --out {tmp}", (3,), "process group", how="process",
      entry="train"),  # WORLD_SIZE=2 and no peer: the rendezvous times out (a dead peer)
]


# ------------------------------------------------------------------ places the cases refer to

class Places(RunPlaces):
    """Builds the folders a case names, lazily; the finished run is trained once and copied."""

    def __init__(self, root: Path):
        super().__init__(root, lambda out: "" if main(TINY.split() + ["--out", str(out)]) == 0 else "exit not 0")

    def resolve(self, name: str) -> str:
        if name == "tmp":
            return str(self.fresh())
        if name == "file":
            path = self.fresh() / "a-file"
            path.write_text("not a folder\n")
            return str(path)
        if name == "port":
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                return str(sock.getsockname()[1])
        if name == "sweep":
            path = self.fresh()
            (path / "cpu-tiny" / "run00").mkdir(parents=True)
            (path / "cpu-tiny" / "run00" / "result.json").write_text("{}")
            return str(path)
        if name == "badruns":
            path = self.fresh()
            (path / "x").mkdir()
            (path / "x" / "metrics.jsonl").write_text('{"tokens": 1, "val_loss_avg_model": 3, "weight_std": 0}\n5\n')
            return str(path)
        if name in ("locked", "stale"):
            path = self.fresh()
            from noloco.infra.rundir import _process_start

            pid = os.getppid() if name == "locked" else _dead_pid()
            (path / "run.lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname(),
                                                       "start": _process_start(pid), "since": "earlier"}))
            return str(path)
        path = self.run()
        ckpt = path / "ckpt.pt"
        if name == "trunc":
            ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
        elif name == "garbled":
            lines = (path / "metrics.jsonl").read_text().splitlines()
            (path / "metrics.jsonl").write_text("\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]) + "\n")
        elif name in ("pipeckpt", "linkckpt"):
            ckpt.replace(path.parent / "elsewhere.pt")
            os.mkfifo(ckpt) if name == "pipeckpt" else ckpt.symlink_to(path.parent / "elsewhere.pt")
        elif name in ("notckpt", "shape"):
            import torch

            if name == "notckpt":
                torch.save([1, 2, 3], ckpt)
            else:
                state = torch.load(ckpt, weights_only=True)
                state["phi"]["wte"] = state["phi"]["wte"][:, :10]
                torch.save(state, ckpt)
        elif name != "run":
            raise KeyError(name)
        return str(path)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _argv(case: Case, places: Places) -> list[str]:
    words = shlex.split(case.command.split(" | ")[0])
    out = []
    for word in words:
        while "{" in word:
            start = word.index("{")
            end = word.index("}", start)
            word = word[:start] + places.resolve(word[start + 1:end]) + word[end + 1:]
        out.append(word)
    return out


def _limit_memory():  # a safety net: a case that would eat the machine fails inside 3 GiB instead
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def run_case(case: Case, places: Places, capsys=None) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of one case."""
    argv = _argv(case, places)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **dict(case.env)}
    env.pop("NOLOCO_DEBUG", None)
    if case.how == "in-process":
        if capsys is not None:
            capsys.readouterr()
        saved = {name: os.environ.get(name) for name, _ in case.env}
        os.environ.update(dict(case.env))
        try:
            code = main(argv if case.entry != "none" else [])
        finally:
            for name, value in saved.items():
                os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)
        if capsys is not None:
            captured = capsys.readouterr()
            return code, captured.out, captured.err
        return code, "", ""
    if case.how == "pipe":
        head = int(case.command.split("head -c ")[1])
        proc = subprocess.Popen([sys.executable, "-m", "noloco", *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=ROOT, env=env)
        proc.stdout.read(head)
        proc.stdout.close()
        err = proc.stderr.read().decode()
        return proc.wait(timeout=120), "", err
    if case.entry == "train":
        command = [sys.executable, "-m", "noloco", "llm", "train", *argv]
        if "--timeout 3" in case.command:  # one rank of two, alone: its peer never comes
            env.update(WORLD_SIZE="2", RANK="0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=places.resolve("port"))
    else:
        command = [sys.executable, "-m", "noloco", *argv]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=places.fresh(), env=env, timeout=300,
                          preexec_fn=_limit_memory if case.how == "limited" else None)
    return proc.returncode, proc.stdout, proc.stderr


# ------------------------------------------------------------------ the test

#: a progress line of noloco.infra.progress: "DESC: DONE/TOTAL UNITs (P%), M:SS elapsed..."
PROGRESS = re.compile(r": \d+/\d+ [\w ]+s \(\d+%\), [\d:]+ elapsed")

@pytest.fixture(scope="module")
def places(tmp_path_factory):
    try:
        import torch
    except ModuleNotFoundError:  # the llm cases then fail with "torch is not installed" (exit 3)
        yield Places(tmp_path_factory.mktemp("cli-table"))
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine
    yield Places(tmp_path_factory.mktemp("cli-table"))
    torch.set_num_threads(threads)


def _params():
    return [pytest.param(case, id=case.id, marks=case.marks) for case in CASES]


@pytest.mark.parametrize("case", _params())
def test_exit_code_one_line_no_traceback(case, places, capsys, monkeypatch):
    if "--device cuda" in case.command:
        pytest.importorskip("torch").cuda.is_available() and pytest.skip("a GPU is present")
    monkeypatch.chdir(places.fresh())  # nothing a case writes lands in the source tree
    code, out, err = run_case(case, places, capsys)
    # progress lines of long work in a log (noloco.infra.progress) are not messages: the contract is about the rest
    lines = [line for line in err.splitlines() if line.strip() and not PROGRESS.search(line)]
    assert "Traceback" not in err, err
    assert code in case.codes, (code, err[-2000:])
    if code in (2, 3) or case.words:
        assert len(lines) == 1 or (len(lines) == 2 and "warning" in lines[0]), lines
    assert len(lines) <= 2, lines
    if case.words and code in case.codes:
        assert case.words in err, (case.words, err)


def test_the_table_is_big_enough():
    commands = {c.command.split()[0] if c.command and c.entry == "noloco" else c.entry for c in CASES}
    assert len(CASES) >= 80
    assert {"check", "simulate", "comm", "tune", "figs", "claims", "llm", "train"} <= commands
    assert {c.command.split()[1] for c in CASES if c.command.startswith("llm ")} >= {"train", "validate", "bench"}


# ------------------------------------------------------------------ docs/reliability.md

def markdown(places: Places) -> str:
    """The case table with what each case got (exit code and the stderr line); TINY stands for
    :data:`TINY` after ``llm train``, DIR for the case's folder."""
    import contextlib
    import io

    rows = ["| # | command | contract | got | stderr (one line) |", "|---|---|---|---|---|"]
    for number, case in enumerate(CASES, 1):
        if any(getattr(m, "name", "") == "slow" for m in case.marks):
            got, line = "(slow)", ""
        else:
            out, err = io.StringIO(), io.StringIO()
            cwd = os.getcwd()
            os.chdir(places.fresh())
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code, _, text = run_case(case, places)
                text = text or err.getvalue()
                line = next((ln for ln in text.splitlines() if "error" in ln or "diverged" in ln or "warning" in ln
                             or "Traceback" in ln), "")
                got = str(code)
            except Exception as exc:  # noqa: BLE001 - a bug: the table shows it
                got, line = "traceback", f"{type(exc).__name__}: {exc}"
            finally:
                os.chdir(cwd)
            line = re.sub(re.escape(str(places.root)) + r"/p\d+", "DIR", line)
            line = re.sub(r"pid \d+", "pid P", line)
        contract = "/".join(map(str, case.codes))
        xfail = any(getattr(m, "name", "") == "xfail" for m in case.marks)
        command = ("python -m noloco llm train " if case.entry == "train" else "noloco ") + case.command
        command = "".join(f"{k}={v} " for k, v in case.env) + command.replace(TINY, "llm train TINY")
        rows.append(f"| {number}{' (seen)' if case.seen else ''} | `{command.replace('|', '&#124;')}` | {contract}"
                    f"{' (xfail)' if xfail else ''} | {got} | {line.replace('|', '&#124;')[:160]} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import tempfile

    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("NOLOCO_CACHE", tempfile.mkdtemp(prefix="noloco-cache-"))
    with tempfile.TemporaryDirectory() as root:
        print(markdown(Places(Path(root))))
