"""Fuzz families of issue 22, beside tests/test_fuzz.py's random flag vectors:

* **values**: every flag of every command (introspected from its parser) given each value of the
  families: huge integers (1e20 as an integer and as a float), huge and tiny floats (1e308, 1e-320, -0.0),
  nan and infinities, the empty string, device strings (``cuda:99999999999999999999``, ``cuda:-1``, ...);
* **files**: every file the toolkit reads back, of the right JSON (or checkpoint) but the wrong shape: cache
  entries (a simulation, a figure), ``result.json``, ``metrics.jsonl``, ``inputs.jsonl``, the checkpoint,
  ``run.lock``, the routing study's JSON and a benchmark result, each read by the commands that read it;
* **signals**: SIGINT and SIGTERM delivered while :func:`noloco.infra.files.atomic_write` runs in a fresh
  process, at each of its steps.

Every case asserts the contract: an exit code of 0, 1, 2 or 3 (130 for the signals), exactly one line on
stderr for 2 and 3 and at most two otherwise (a warning may come first; progress lines ``DESC: n/N ...`` and
estimates ``noloco: estimate: ...`` are not counted), no traceback and no "internal error" (a bug, not a
handled case). CI draws :data:`CI_VALUES` (command, flag, value) cases and :data:`CI_FILES` damaged files at
random (seeded); ``-m slow`` runs them all. ``python tests/test_fuzz_families.py`` prints the counts.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from noloco.cli import build_parser, main  # noqa: E402
from places import RunPlaces, within  # noqa: E402 (tests/places.py)
from noloco.infra.entry import INTERNAL  # noqa: E402

SEED = 20261130
CI_VALUES, CI_FILES = 160, 24
HUGE_INT, HUGE_FLOAT = "99999999999999999999", "1e308"
FAMILIES = [HUGE_INT, "1e20", HUGE_FLOAT, "1e-320", "-0.0", "nan", "inf", "-inf", ""]
DEVICES = ["cuda:99999999999999999999", "cuda:-1", "cuda:x", "tpu", "cuda:128", ""]
TINY = ("llm train --size cpu-tiny --method noloco --val-windows 4 --outer-steps 2 --eval-every 1 --warmup 0 "
        "--threads 1").split()
#: the sizes that keep a command fast unless the case overrides them; RUN is a finished cpu-tiny run, OUT a
#: fresh folder
BASE = {
    "check": [], "simulate": ["--trials", "4", "--outer-steps", "3", "--no-cache"],
    "comm": ["--steps", "3", "--trials", "2", "--replicas", "64"], "tune": ["--no-verify", "--grid", "4"],
    "paper": ["--quick", "--spectrum", "1"], "claims": ["--quick", "--only", "decay_factor"],
    "figs": ["--quick", "--only", "transient", "--out", "OUT"],
    "llm train": TINY[2:] + ["--out", "OUT"], "llm validate": ["--size", "cpu-tiny", "--out", "OUT", "--threads", "1"],
    "llm predict": ["RUN"], "llm evaluate": ["RUN", "--threads", "1"],
    "llm bench": ["--size", "cpu-tiny", "--steps", "1", "--threads", "1", "--replicas", "2"],
    # python -m noloco.benchmarks NAME (scaling and all have fixed sizes: too long to fuzz)
    "benchmarks theory-grid": ["--points", "3", "--repeat", "1"],
    "benchmarks simulator": ["--trials", "2", "--replicas", "2", "--dim", "4", "--inner-steps", "2", "--outer-steps",
                             "1", "--repeat", "1"],
    "benchmarks comm": ["--replicas", "64", "--steps", "2", "--trials", "2"],
    "benchmarks check": ["--spectrum", "1"],
    "benchmarks llm-step": ["--size", "cpu-tiny", "--steps", "1", "--threads", "1", "--replicas", "2"],
}
#: progress lines (noloco.infra.progress) and time estimates (noloco.infra.budget) are not messages
NOT_MESSAGES = re.compile(r": \d+/\d+ [\w ]+s \(\d+%\), [\d:]+ elapsed|^noloco: estimate: ")


# ------------------------------------------------------------------ the contract, once

def run_main(argv: list[str], entry=main) -> tuple[object, str]:
    """``(exit code, stderr)`` of ``entry(argv)`` in this process; an exception escaping it is returned as its
    text (a bug: every entry point ends with a code)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = entry(argv)
    except BaseException as exc:  # noqa: BLE001 - the finding this fuzz is for
        code = f"raised {type(exc).__name__}: {exc}"
    return code, err.getvalue()


def violation(code, err: str, codes=(0, 1, 2, 3)) -> str:
    """'' when ``(code, err)`` keeps the contract, else what breaks it."""
    lines = [line for line in err.splitlines() if line.strip() and not NOT_MESSAGES.search(line)]
    if code not in codes:
        return f"exit {code}"
    if "Traceback" in err or INTERNAL in err:
        return "a traceback or an internal error"
    if code in (2, 3) and not (len(lines) == 1 or (len(lines) == 2 and "warning" in lines[0])):
        return f"{len(lines)} lines for exit {code}"
    if len(lines) > 2 or (len(lines) == 2 and "warning" not in lines[0] and code != 1):
        return f"{len(lines)} lines"
    return ""


def _check(failures: list) -> None:
    assert not failures, "\n".join(failures[:20])


# ------------------------------------------------------------------ places

def _train_template(out: Path) -> str:
    code, err = run_main(TINY + ["--out", str(out)])
    return "" if code == 0 else f"exit {code}: {err}"


class Places(RunPlaces):
    """Fresh folders and one finished cpu-tiny run (trained once, copied per use)."""

    def __init__(self, root: Path):
        super().__init__(root, _train_template)

    def argv(self, words: list[str]) -> list[str]:
        return [str(self.fresh()) if w == "OUT" else str(self.run()) if w == "RUN" else w for w in words]


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield Places(tmp_path_factory.mktemp("fuzz-families"))
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing lands in the source tree


# ------------------------------------------------------------------ values: every flag, every family

def _subparsers(parser):
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def _commands():
    """``(command, parser)`` of every ``noloco`` command and ``python -m noloco.benchmarks`` suite."""
    from noloco.benchmarks.__main__ import build_parser as benchmarks_parser

    for name, parser in _subparsers(build_parser()).items():
        children = _subparsers(parser).items() if name == "llm" else [(None, parser)]
        for action, child in children:
            yield (name if action is None else f"llm {action}"), child
    for name, child in _subparsers(benchmarks_parser()).items():
        yield f"benchmarks {name}", child


def value_cases() -> list[tuple[str, str, str]]:
    """``(command, flag, value)`` for every flag that takes a value, of every command in :data:`BASE`."""
    cases = []
    for command, child in _commands():
        if command not in BASE:
            continue
        for a in child._actions:
            flags = [o for o in a.option_strings if o.startswith("--")]
            if not flags or a.nargs == 0 or flags[0] in ("--help",):
                continue
            values = FAMILIES + (DEVICES if flags[0] == "--device" else [])
            cases.extend((command, flags[0], v) for v in values)
    return cases


def run_value_case(places: Places, command: str, flag: str, value: str) -> str:
    base = list(BASE[command])
    if flag in base:
        i = base.index(flag)
        del base[i:i + 2]
    argv = command.split() + places.argv(base) + [f"{flag}={value}"]
    if command.startswith("benchmarks "):
        from noloco.benchmarks.__main__ import main as benchmarks

        code, err = run_main(argv[1:], benchmarks)
    else:
        code, err = run_main(argv)
    problem = violation(code, err)
    return f"{' '.join(argv)!r}: {problem}: {err.strip()[-300:]}" if problem else ""


def _value_sample(count: int | None) -> list:
    cases = value_cases()
    return cases if count is None else random.Random(SEED).sample(cases, count)


def test_the_families_reach_every_command():
    commands = collections.Counter(c for c, _, _ in value_cases())
    assert set(commands) == set(BASE) and min(commands.values()) >= len(FAMILIES)
    assert any(flag == "--device" and value == DEVICES[0] for _, flag, value in value_cases())


def test_values_ci(places):
    _check([f for case in _value_sample(CI_VALUES) for f in [run_value_case(places, *case)] if f])


@pytest.mark.slow
def test_values_all(places):
    _check([f for case in _value_sample(None) for f in [run_value_case(places, *case)] if f])


# the cases of the issue, each with its code and a piece of its one line (not an internal error)
ISSUE = [
    ("check --zeta 1e308", 2, "zeta=1e+308 is out of range"),
    ("check --inner-optimizer adam --inner-lr 1e308", 1, ""),   # unstable, like SGD at 1e300: a finding
    ("check --inner-optimizer adam --noise 0", 2, "noise=0.0 is out of range for inner_optimizer='adam'"),
    ("comm --jitter gamma --jitter-cv 1e-320 --steps 3 --trials 2", 2, "jitter_cv=1e-320 is out of range"),
    ("check --spectrum powerlaw:1:1:99999999999999999999", 2, "count <= 1e+10"),
    ("tune --tune ''", 2, "names nothing to tune"),
    ("tune --no-verify --grid 4 --curvature 1e-320", 2, "c = 0"),
    # the budget given: under the default (half the memory available) a 128 GiB machine runs it for minutes
    ("tune --no-verify --spectrum uniform:0.1:1:1000 --max-memory 8G", 3, "of memory"),
    ("simulate --trials 100000000 --max-memory 100G", 3, "--max-time"),
    ("comm --steps 99999999999999999999 --trials 2 --replicas 64", 3, "of memory"),
    ("llm predict ''", 2, "names no folder"),
    (f"{' '.join(TINY)} --out OUT --seed 99999999999999999999999", 2, "seed=99999999999999999999999"),
    (f"{' '.join(TINY)} --out OUT --device cuda:99999999999999999999", 2, "0 <= K <= 127"),
    (f"{' '.join(TINY)} --out OUT --device cuda:-1", 2, "device='cuda:-1'"),
    (f"{' '.join(TINY)} --out OUT --device cuda:x", 2, "device='cuda:x'"),
    (f"{' '.join(TINY)} --out OUT --device tpu", 2, "device='tpu'"),
    # issue 34
    ("comm --hardware 1:1e308 --steps 3 --trials 2", 2, "hardware slowdown=1e+308 is out of range"),
    ("comm --hardware 0.5:1,0.5:1e308 --steps 3 --trials 2", 2, "hardware slowdown=1e+308 is out of range"),
    ("comm --compute-seconds 1e-320 --steps 3 --trials 2", 2, "times --compute-seconds"),
    ("comm --latency 1e300 --compute-seconds 1e-9 --steps 3 --trials 2", 2, "times --compute-seconds"),
    ("llm evaluate ''", 2, "OUT '' names no folder"),
]


@pytest.mark.parametrize("command,code,words", ISSUE, ids=[c for c, _, _ in ISSUE])
def test_the_issues_cases(places, command, code, words):
    import shlex

    got, err = run_main(places.argv(shlex.split(command)))
    assert got == code and not violation(got, err), (got, err)
    assert words in err, err


def test_predict_names_the_method_folders_and_a_run_with_no_evaluation(places):
    parent = places.fresh()
    for method in ("noloco", "diloco"):
        shutil.copytree(places.run(), parent / method)
    code, err = run_main(["llm", "predict", str(parent)])
    assert code == 3 and not violation(code, err) and f"{parent / 'diloco'}, {parent / 'noloco'}" in err
    diverged = places.run()
    (diverged / "metrics.jsonl").write_text("")
    result = json.loads((diverged / "result.json").read_text())
    result["diverged"] = {"message": "diverged at outer step 1 (inner step 2)"}
    (diverged / "result.json").write_text(json.dumps(result))
    code, err = run_main(["llm", "predict", str(diverged)])
    assert code == 3 and not violation(code, err) and "holds no evaluation" in err and "outer step 1" in err


def test_predict_says_a_torchrun_run_measures_no_inputs(places):
    run = places.run()
    (run / "inputs.jsonl").unlink()
    result = json.loads((run / "result.json").read_text())
    result["world_size"] = 4
    (run / "result.json").write_text(json.dumps(result))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["llm", "predict", str(run)]) == 0
    assert "torchrun run (4 ranks, one replica per rank) measures no inputs" in out.getvalue()
    assert "before the meter" not in out.getvalue()


# ------------------------------------------------------------------ files of the right JSON, the wrong shape

#: what a damaged value becomes
WRONG = ["x", [], {}, None, 1e308, -1, True, [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]


def _mutations(doc, rng: random.Random, count: int) -> list:
    """``count`` copies of the JSON document ``doc``, each with one value (at any depth) replaced by a wrong
    one, a key removed, or the whole document replaced."""
    paths = []

    def walk(x, path):
        if isinstance(x, dict):
            for k, v in x.items():
                paths.append(path + (k,))
                walk(v, path + (k,))
        elif isinstance(x, list) and x:
            paths.append(path + (0,))
            walk(x[0], path + (0,))
    walk(doc, ())
    out = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.08 or not paths:
            out.append(rng.choice([[], 5, "x", None]))
            continue
        copy = json.loads(json.dumps(doc))
        path = rng.choice(paths)
        parent = copy
        for key in path[:-1]:
            parent = parent[key]
        if kind < 0.25 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = rng.choice(WRONG)
        out.append(copy)
    return out


def _write_json(path: Path, doc, lines: bool = False) -> None:
    # a JSON-lines file replaced whole by one wrong value (5, "x", null) is that value on one line
    text = "\n".join(json.dumps(row) for row in doc) + "\n" if lines and isinstance(doc, list) else json.dumps(doc)
    path.write_text(text)


def file_cases(places: Places) -> list:
    """``(name, damage(folder) -> argv)``: each damages one file in a fresh copy of what it belongs to and
    returns the command that reads it back."""
    rng = random.Random(SEED)
    cases = []
    run = places.template()
    result = json.loads((run / "result.json").read_text())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    inputs = [json.loads(line) for line in (run / "inputs.jsonl").read_text().splitlines() if line.strip()]
    readers = {
        "result.json": [["llm", "predict", "RUN"], ["llm", "evaluate", "RUN", "--threads", "1"],
                        ["figs", "--only", "llm", "--llm-runs", "RUNS", "--out", "OUT"],
                        TINY + ["--out", "RUN"]],
        "metrics.jsonl": [["llm", "predict", "RUN"], ["figs", "--only", "llm", "--llm-runs", "RUNS", "--out", "OUT"],
                          TINY + ["--out", "RUN", "--resume"]],
        "inputs.jsonl": [["llm", "predict", "RUN"], TINY + ["--out", "RUN", "--resume", "--outer-steps", "2"]],
    }
    for name, doc, lines in (("result.json", result, False), ("metrics.jsonl", metrics, True),
                             ("inputs.jsonl", inputs, True)):
        for i, damaged in enumerate(_mutations(doc, rng, 12)):
            argv = readers[name][i % len(readers[name])]
            cases.append((f"{name} #{i} ({' '.join(argv[:2])})", name, damaged, lines, argv))
    lock = {"pid": 1, "host": "elsewhere", "start": "1", "since": "earlier", "command": "noloco"}
    for i, damaged in enumerate(_mutations(lock, rng, 6)):
        cases.append((f"run.lock #{i}", "run.lock", damaged, False, TINY + ["--out", "RUN", "--overwrite"]))
    return cases


def run_file_case(places: Places, case) -> str:
    label, name, damaged, lines, argv = case
    run = places.run()
    _write_json(run / name, damaged, lines)
    words = [str(run) if w == "RUN" else str(run.parent) if w == "RUNS" else str(places.fresh()) if w == "OUT" else w
             for w in argv]
    code, err = run_main(words)
    problem = violation(code, err)
    return f"{label} {' '.join(words)!r}: {problem}: {err.strip()[-300:]}" if problem else ""


def _file_sample(places, count):
    cases = file_cases(places)
    return cases if count is None else random.Random(SEED).sample(cases, count)


def test_damaged_run_files_ci(places):
    _check([f for case in _file_sample(places, CI_FILES) for f in [run_file_case(places, case)] if f])


@pytest.mark.slow
def test_damaged_run_files_all(places):
    _check([f for case in _file_sample(places, None) for f in [run_file_case(places, case)] if f])


@pytest.mark.parametrize("kind", ["list", "outer_step", "phi", "schema_version", "delta"])
def test_a_checkpoint_of_the_wrong_shape(places, kind):
    import torch

    run = places.run()
    state = torch.load(run / "ckpt.pt", weights_only=True)
    if kind == "list":
        state = [state]
    elif kind == "outer_step":
        state["outer_step"] = "two"
    elif kind == "phi":
        state["phi"] = [1, 2]
    elif kind == "schema_version":
        state["schema_version"] = "x"
    else:
        state["delta"] = None
    torch.save(state, run / "ckpt.pt")
    for argv in (TINY + ["--out", str(run), "--resume", "--outer-steps", "2"], ["llm", "evaluate", str(run)]):
        code, err = run_main(argv)
        assert code == 3 and not violation(code, err) and "ckpt.pt" in err, (argv, code, err)


def _with_checksum(doc):
    """``doc`` with its ``sha256`` recomputed over its (edited) data, as anyone who can write the cache can do."""
    import hashlib

    from noloco.infra.files import dumps

    if isinstance(doc, dict) and "data" in doc:
        try:
            doc = {**doc, "sha256": hashlib.sha256(dumps(doc["data"]).encode()).hexdigest()}
        except ValueError:
            pass  # data strict JSON cannot write (1e308 is fine, but not a NaN): left as it is
    return doc


@pytest.mark.parametrize("checksum", ["stale", "recomputed"])
@pytest.mark.parametrize("what", ["simulate", "figure"])
def test_damaged_cache_entries_are_rebuilt(tmp_path, monkeypatch, what, checksum):
    """Every mutation of an entry's data is rebuilt with one warning: with its checksum no longer matching, and
    (issue 34) with its checksum recomputed, which only the keyed digest finds (a figure whose region list had
    been edited was drawn as data)."""
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path / "cache"))
    argv = (["simulate", "--trials", "4", "--outer-steps", "3"] if what == "simulate" else
            ["figs", "--quick", "--only", "transient", "--out", str(tmp_path / "figs")])
    code, err = run_main(argv)
    assert code == 0, err
    entry_path = next((tmp_path / "cache").glob("*/*.json"))
    entry = json.loads(entry_path.read_text())
    for damaged in _mutations(entry, random.Random(SEED), 6):
        entry_path.write_text(json.dumps(_with_checksum(damaged) if checksum == "recomputed" else damaged))
        code, err = run_main(argv)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 0 and not violation(code, err), err
        assert len(lines) == 1 and "warning" in lines[0] and str(entry_path) in lines[0], lines


def test_a_damaged_routing_study_is_drawn_as_missing(tmp_path):
    from noloco.paper_figs import fig_routing
    from noloco.paper_figs.run import make

    doc = json.loads(fig_routing.DEFAULT_DATA.read_text())
    for i, damaged in enumerate(_mutations(doc, random.Random(SEED), 10)):
        path = tmp_path / f"routing{i}.json"
        path.write_text(json.dumps(damaged))
        data = fig_routing.compute(str(path))
        if "missing" not in data:  # a mutation the figure does not read (the curves' contents): it draws
            make("routing", out=tmp_path / "out", options={"data": str(path)})
        else:
            assert str(path) in data["missing"] and "\n" not in data["missing"]


def test_a_damaged_benchmark_result_is_one_line(tmp_path):
    from noloco.benchmarks.plot import main as plot

    result = {"results": {"base": {"dim": 10, "trials": 2, "replicas": 8, "steps": 2},
                          "simulate": {"exact_vs_dim": [[10, 0.1], [100, 0.5]]},
                          "check_vs_directions": [[1000, 0.01], [10000, 0.1]]}, "load_average_before": [0.5]}
    good = tmp_path / "good.json"
    good.write_text(json.dumps(result))
    code, err = run_main([str(good), str(tmp_path / "good.png")], plot)
    assert code == 0, err
    for i, damaged in enumerate(_mutations(result, random.Random(SEED), 12)):
        path = tmp_path / f"r{i}.json"
        path.write_text(json.dumps(damaged))
        code, err = run_main([str(path), str(tmp_path / f"r{i}.png")], plot)
        assert not violation(code, err, (0, 3)), (damaged, code, err)


# ------------------------------------------------------------------ signals at every step of an atomic write

SIGNALLED = r"""
import os, sys, tempfile, time
from noloco.infra import entry, files
target, point = sys.argv[1], sys.argv[2]

def pause(name):
    if name == point:  # wait here for the parent's signal (held where atomic_write holds it, then "go")
        print("AT", name, flush=True)
        go = target + ".go"
        for _ in range(3000):
            if os.path.exists(go):
                break
            time.sleep(0.01)

real_mkstemp, real_chmod, real_fsync, real_replace = tempfile.mkstemp, os.chmod, os.fsync, os.replace
def mkstemp(*a, **k):
    made = real_mkstemp(*a, **k)
    pause("after-mkstemp")
    return made
def chmod(*a, **k):
    pause("before-chmod")
    return real_chmod(*a, **k)
def fsync(*a, **k):
    pause("before-fsync")
    return real_fsync(*a, **k)
def replace(*a, **k):
    pause("before-rename")
    real_replace(*a, **k)
    pause("after-rename")
tempfile.mkstemp, os.chmod, os.fsync, os.replace = mkstemp, chmod, fsync, replace

def write(tmp):
    with open(tmp, "w") as handle:
        handle.write("new\n" * 50000)
        handle.flush()
        pause("mid-write")
        handle.write("new\n" * 50000)

parser = entry.OneLineParser(prog="atomic")
sys.exit(entry.run("atomic", parser, lambda args: files.atomic_write(target, write) and None, []))
"""
POINTS = ("after-mkstemp", "mid-write", "before-chmod", "before-fsync", "before-rename", "after-rename")
OLD, NEW = "old\n" * 1000, "new\n" * 100000


def test_signals_at_every_step_of_an_atomic_write(tmp_path):
    """Exit 130 with one line, and the old file intact (the new one whole once renamed), no temporary left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for point in POINTS:
        for signum in (signal.SIGINT, signal.SIGTERM):
            folder = tmp_path / f"{point}-{signum.name}"
            folder.mkdir()
            (folder / "result.json").write_text(OLD)
            proc = subprocess.Popen([sys.executable, "-c", SIGNALLED, str(folder / "result.json"), point],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append((point, signum, folder, proc))
    failures = []
    for point, signum, folder, proc in procs:
        line = proc.stdout.readline()
        if line.strip() != f"AT {point}":
            failures.append(f"{point}: never got there ({line!r}, {proc.stderr.read()[-300:]})")
            proc.kill()
            continue
        proc.send_signal(signum)
        time.sleep(0.05)
        (folder / "result.json.go").write_text("")  # where the signal is held, the writer goes on
        code = proc.wait(timeout=60)
        err = proc.stderr.read()
        content = (folder / "result.json").read_text()
        expected = NEW if point.endswith("rename") else OLD  # the rename is held: once begun, it completes
        left = sorted(p.name for p in folder.iterdir() if p.name not in ("result.json", "result.json.go"))
        problem = violation(code, err, (130,)) or ("" if content == expected else
                                                   f"the file holds {len(content)} bytes, not the "
                                                   f"{'new' if expected == NEW else 'old'} whole file") or \
            (f"left {left}" if left else "")
        if problem:
            failures.append(f"{point} {signum.name}: {problem} (stderr {err.strip()[-200:]!r})")
    _check(failures)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        p = Places(Path(root))
        started = time.perf_counter()
        values = [f for case in value_cases() for f in [run_value_case(p, *case)] if f]
        print(json.dumps({"value_cases": len(value_cases()), "value_failures": values[:20],
                          "seconds": round(time.perf_counter() - started, 1)}, indent=1))


# ------------------------------------------------------------------ holes in the contract (issue 22)

def test_an_unknown_flag_of_a_benchmark_is_named_by_its_suite():
    from noloco.benchmarks.__main__ import main as benchmarks

    for argv, words in ((["theory-grid", "--bogus"], "unrecognized arguments: --bogus"),
                        (["theory-grid", "--points", "3", "--out", ""], "--out '' names no file")):
        code, err = run_main(argv, benchmarks)
        assert code == 2 and not violation(code, err), err
        assert err.startswith(f"python -m noloco.benchmarks theory-grid: error: {words}"), err


@pytest.mark.parametrize("env,words", [
    ({"WORLD_SIZE": "2", "RANK": "x"}, "RANK='x' is out of range"),
    ({"WORLD_SIZE": "2"}, "RANK is not set"),
    ({"WORLD_SIZE": "2", "RANK": "5"}, "RANK='5' is out of range"),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_WORLD_SIZE": "abc"}, "LOCAL_WORLD_SIZE='abc' is out of range"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1"}, "MASTER_PORT is not set"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": "29500"}, "MASTER_ADDR is not set"),
    ({"WORLD_SIZE": "99999999999999999999999"}, "WORLD_SIZE='99999999999999999999999' is not a positive integer"),
], ids=lambda x: x if isinstance(x, str) else ",".join(f"{k}={v}" for k, v in x.items()))
def test_the_torchrun_entry_checks_what_torchrun_sets(tmp_path, monkeypatch, env, words):
    pytest.importorskip("torch")

    def train(argv):
        return main(["llm", "train", *argv])

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, err = run_main(["--size", "cpu-tiny", "--replicas", "2", "--out", str(tmp_path / "run")], train)
    assert code == 2 and not violation(code, err) and words in err, err
    assert not (tmp_path / "run").exists()  # before any work


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("chained", [True, False])
def test_an_interrupt_that_a_library_turned_into_its_own_error_is_still_130(signum, chained):
    """pybind11 turns a KeyboardInterrupt raised while an extension is imported into ``ImportError:
    initialization failed`` (a SIGTERM during ``noloco comm``'s import of scipy gave exit 3, 'internal error')."""
    from noloco.infra.entry import OneLineParser, run

    def work(args):
        try:
            os.kill(os.getpid(), signum)
            time.sleep(5)
        except KeyboardInterrupt as err:
            if chained:
                raise ImportError("initialization failed") from err
        raise ImportError("initialization failed")  # the interrupt lost: only the record of the signal is left

    code, err = run_main([], lambda argv: run("lib", OneLineParser(prog="lib"), work, argv))
    assert code == 130, err
    assert err.strip() == ("lib: terminated (SIGTERM)" if signum == signal.SIGTERM else "lib: interrupted")
    code, err = run_main([], lambda argv: run("lib", OneLineParser(prog="lib"),
                                              lambda args: (_ for _ in ()).throw(ImportError("x")), argv))
    assert code == 3 and "internal error (ImportError: x)" in err  # no signal: a bug stays a bug


IDLE_STOP = r"""
import sys
from noloco.quadratic import idle
idle.idle_workers = lambda replicas, trials: 2   # trials on threads even where one core is available
real = idle._numpy_step
said = []
def step(*a, **k):
    if not said:
        said.append(1)
        print("STEPPING", flush=True)
    return real(*a, **k)
idle._numpy_step = step
from noloco.cli import main
sys.exit(main(["comm", "--replicas", "70000", "--steps", "100000", "--trials", "4", "--max-time", "none"]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_idle_simulations_threads_ends_it_at_once(signum):
    """`noloco comm` at many replicas runs its trials on threads; Ctrl-C or SIGTERM used to wait for all of them
    (minutes: here about 5 min of work). Now the trials stop at their next step and the command exits 130."""
    env = {**os.environ, "NOLOCO_JIT": "0", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", IDLE_STOP], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "STEPPING":
                break
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130 and not violation(130, err, (130,)), err
    assert took < 10, f"{took:.1f} s after the signal"


def test_a_damaged_metrics_file_under_llm_runs_is_a_fault_naming_the_folder(places):
    run = places.run()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows[0]["weight_std"] = [[1, 2], [3]]
    _write_json(run / "metrics.jsonl", rows, lines=True)
    code, err = run_main(["figs", "--only", "llm", "--llm-runs", str(run.parent), "--out", str(places.fresh())])
    assert code == 3 and not violation(code, err) and f"--llm-runs {run.parent}" in err, err


# ------------------------------------------------------------------ issue 34: files that are not files, overflows,
# and cache roots that are system folders



def _make_special(path: Path, kind: str) -> None:
    import socket

    path.unlink()
    if kind == "named pipe":
        os.mkfifo(path)
    elif kind == "symbolic link":  # to a good checkpoint: a link is not what a run folder holds
        path.symlink_to(path.parent.parent / "elsewhere.pt")
        shutil.copy(path.parent.parent / "good.pt", path.parent.parent / "elsewhere.pt")
    elif kind == "link to a device":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()


CKPT_READERS = {"llm predict --gap": ["llm", "predict", "RUN", "--gap"],
                "llm evaluate": ["llm", "evaluate", "RUN", "--threads", "1"],
                "llm train --resume": TINY + ["--out", "RUN", "--resume"]}


@pytest.mark.parametrize("reader", list(CKPT_READERS))
@pytest.mark.parametrize("kind", ["named pipe", "symbolic link", "link to a device", "folder", "socket"])
def test_a_checkpoint_that_is_not_a_regular_file_is_refused_at_once(places, kind, reader):
    """Issue 34: a ``ckpt.pt`` that is a named pipe hung `llm predict --gap`, `llm train --resume` and `llm
    evaluate` (torch.load opened it for reading and waited for a writer). Every special file is one line, exit 3,
    naming the file (noloco.infra.files.open_run_file), within seconds."""
    run = places.run()
    shutil.copy(run / "ckpt.pt", run.parent / "good.pt")
    _make_special(run / "ckpt.pt", kind)
    argv = [str(run) if w == "RUN" else w for w in CKPT_READERS[reader]]
    with within(60):
        code, err = run_main(argv)
    assert code == 3 and not violation(code, err), (code, err)
    assert f"{run / 'ckpt.pt'} is a" in err and "not a regular file" in err, err


#: a hardware slowdown of every family, alone and beside a class of slowdown 1: each outside 1e-6 .. 1e6
SLOWDOWNS = [HUGE_INT, "1e20", HUGE_FLOAT, "1e-320", "-0.0", "nan", "inf", "-inf", "1e7", "1e-7"]


@pytest.mark.parametrize("hardware", [f"1:{v}" for v in SLOWDOWNS] + [f"0.5:1,0.5:{v}" for v in SLOWDOWNS])
def test_every_overflowing_hardware_slowdown_is_bad_input(hardware):
    """Issue 34: ``--hardware 1:1e308`` was an internal error (scipy: "Infinity inputs cannot be used with break
    points"), 1e100 gave NaN idle fractions with exit 0."""
    code, err = run_main(["comm", "--hardware", hardware, "--steps", "3", "--trials", "2", "--replicas", "64"])
    assert code == 2 and not violation(code, err) and "hardware slowdown=" in err, (code, err)


@pytest.mark.parametrize("argv", [["simulate", "--trials", "4", "--outer-steps", "3"],
                                  ["figs", "--quick", "--only", "transient", "--out", "OUT"],
                                  ["figs", "--quick", "--only", "transient", "--out", "OUT", "--cache", "/proc"]],
                         ids=["simulate", "figs", "figs --cache"])
@pytest.mark.parametrize("root", ["/proc", "/sys/kernel", "/proc/self/fd/../../x"])
def test_a_cache_in_a_system_folder_is_refused_before_any_work(tmp_path, monkeypatch, argv, root):
    """Issue 34: ``NOLOCO_CACHE=/`` as root made ``/simulate`` and ``/numba``. Here only folders no one can write
    (the test run before the fix then wrote nothing either: the cache only cost the computation)."""
    monkeypatch.setenv("NOLOCO_CACHE", root)
    out = tmp_path / "out"
    code, err = run_main([str(out) if w == "OUT" else w for w in argv])
    assert code == 3 and not violation(code, err) and "cannot be a cache" in err, (code, err)
    assert not out.exists()
