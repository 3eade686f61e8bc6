"""One ``--json`` contract for every command: each command (found by walking the argparse tree, so a new
command joins this test by existing) has ``--json``, and with cheap arguments its stdout is one strict JSON
object carrying ``schema_version`` (whatever it says besides goes to stderr). Commands too slow for the fast
suite run under ``-m slow``; the few that cannot be run cheaply at all are in :data:`SKIP` with the reason.

Placeholders: ``{tmp}`` a fresh folder, ``{run}`` a copy of a finished cpu-tiny run (trained once)."""

from __future__ import annotations

import argparse
import json

import pytest

from noloco.cli import build_parser, main
from noloco.infra.files import SCHEMA_VERSION

TINY_TRAIN = ["--size", "cpu-tiny", "--method", "noloco", "--outer-steps", "2", "--eval-every", "1",
              "--val-windows", "4", "--warmup", "0", "--threads", "1"]

#: command -> cheap arguments (``--json`` is added); a ``pytest.param`` marks a slow one
CHEAP = {
    "check": ["--preset", "paper"],
    "simulate": ["--trials", "4", "--outer-steps", "5", "--no-cache"],
    "comm": ["--replicas", "64", "--steps", "20", "--trials", "2"],
    "tune": ["--preset", "paper", "--no-verify", "--grid", "6"],
    "figs": ["--quick", "--only", "paper_comm", "--out", "{tmp}/figs", "--cache", "{tmp}/cache"],
    "claims": ["--quick", "--only", "pure_pairing"],
    "paper": ["--quick"],
    "llm train": [*TINY_TRAIN, "--out", "{tmp}/run"],
    "llm predict": ["{run}"],
    "llm tune": ["{run}"],
    "llm evaluate": ["{run}"],
}
SLOW = {
    "llm bench": ["--size", "cpu-tiny", "--replicas", "2", "--steps", "1", "--threads", "1"],  # 8 s: 4 modes
    "llm validate": ["--size", "cpu-tiny", "--threads", "1", "--out", "{tmp}"],
    "llm ensemble": ["--quick", "--threads", "1", "--domains", "docs,web,build", "--eval-windows", "4", "--configs",
                     "homogeneous,noloco", "--out", "{tmp}"],
    "llm study routing": ["--quick", "--seeds", "2", "--out", "{tmp}"],
    "llm study paper": ["--quick", "--seeds", "2", "--out", "{tmp}"],
    "llm study comm": ["--ranks", "2", "--sizes", "1024", "--repeats", "3", "--out", "{tmp}/comm.json"],
}
#: command -> why it is not run here
SKIP = {
    "llm study advice": "evaluates the advice's held-out runs, which take tens of minutes to train; its --json is "
                        "the report print_json prints, as in every command",
    "llm study tune": "needs a development sweep of pilot runs (tens of minutes of training)",
    "llm study families": "trains Hugging Face models through transformers (minutes, an optional extra)",
    "llm study forecasts": "trains the families' runs through transformers (tens of minutes, an optional extra)",
    "llm study gap": "trains two Hugging Face models at N = 8 through transformers (about 10 minutes, an optional "
                     "extra)",
    "llm study warnings": "trains 60 short Hugging Face runs through transformers (about 25 minutes, an optional "
                          "extra); its slow test runs it",
    "llm study one-pilot": "trains two families' grids of 29 settings and their forks (an hour on two cores)",
    "llm study transfers": "trains two families' axis targets on two seeds, a grid of 29 and forks (over an hour on "
                           "two cores); its slow test runs it",
    "llm study transfer-groups": "trains 12 runs of two families through transformers (about 15 minutes on two "
                                 "cores)",
    "llm study luck": "trains 60 runs of two families through transformers (about 15 minutes on two cores)",
    "llm study setting-mean": "trains 504 runs and two pilots' forks of two families through transformers (about an "
                              "hour on two cores)",
    "llm study gap-range": "trains 128 runs of four families through transformers (about 15 minutes on two cores)",
    "llm study held-out-axes": "trains 132 runs of two families through transformers (about 15 minutes on two "
                               "cores)",
    "llm study short-phase": "trains 64 runs of four families through transformers (about 15 minutes on two cores)",
    "llm study groups-luck": "trains 656 runs of four families through transformers (over an hour on two cores)",
    "llm study as-misses": "trains 280 runs of three families through transformers (about 40 minutes on two cores)",
    "llm study tune-fresh": "trains two families' pilots with 28 forks and grids of 29 settings (over an hour on two "
                            "cores)",
}


def commands(parser: argparse.ArgumentParser | None = None, path: tuple = ()) -> dict[str, argparse.ArgumentParser]:
    """Every command of the tree, ``"llm study comm"`` -> its parser."""
    parser = parser or build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {" ".join(path): parser}
    found = {}
    for name, child in subs[0].choices.items():
        found.update(commands(child, (*path, name)))
    return found


def test_every_command_has_json_and_is_run_here_or_skipped_with_a_reason():
    found = commands()
    assert len(found) >= 20 and "llm train" in found and "llm study comm" in found
    for name, parser in found.items():
        assert any("--json" in a.option_strings for a in parser._actions), f"`noloco {name}` has no --json"
    listed = set(CHEAP) | set(SLOW) | set(SKIP)
    assert set(found) <= listed, f"commands with no cheap arguments here: {sorted(set(found) - listed)}"
    assert listed <= set(found), f"listed but not commands: {sorted(listed - set(found))}"
    assert not (set(CHEAP) & set(SLOW)) and not (set(SKIP) & (set(CHEAP) | set(SLOW)))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("json-contract") / "run"
    assert main(["llm", "train", *TINY_TRAIN, "--out", str(out)]) == 0
    return out


def _run_json(name: str, arguments: list, tmp_path, capsys, request) -> dict:
    places = {"{tmp}": str(tmp_path)}
    if any("{run}" in a for a in arguments):
        places["{run}"] = str(request.getfixturevalue("finished_run"))
    argv = [*name.split(), *arguments, "--json"]
    for key, value in places.items():
        argv = [a.replace(key, value) for a in argv]
    capsys.readouterr()  # what the fixture's training printed
    code = main(argv)
    captured = capsys.readouterr()
    assert code in (0, 1), f"noloco {' '.join(argv)}: exit {code}: {captured.err[-2000:]}"
    if code == 1:  # a checked condition failed: a line on stderr says which
        assert any(line.startswith(f"noloco {name}: ") for line in captured.err.splitlines()), captured.err[-2000:]

    def refuse(constant):
        raise AssertionError(f"noloco {name} --json printed {constant}, not strict JSON")

    report = json.loads(captured.out, parse_constant=refuse)
    assert isinstance(report, dict) and report.get("schema_version") == SCHEMA_VERSION, captured.out[:300]
    return report


@pytest.mark.parametrize("name", sorted(CHEAP))
def test_json_output_parses_and_carries_schema_version(name, tmp_path, capsys, request, monkeypatch):
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path / "noloco-cache"))
    _run_json(name, CHEAP[name], tmp_path, capsys, request)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_json_output_of_slow_commands(name, tmp_path, capsys, request, monkeypatch):
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path / "noloco-cache"))
    _run_json(name, SLOW[name], tmp_path, capsys, request)


def test_llm_train_json_is_the_run_report(tmp_path, capsys, request):
    """`llm train --json`: the results as one report on stdout (the live lines and the table stay off it)."""
    report = _run_json("llm train", [*TINY_TRAIN, "--log-every", "2", "--out", "{tmp}/run"], tmp_path, capsys,
                       request)
    result = report["runs"]["noloco"]
    assert result["finished"] and result["run"]["inner_steps"] == 2 * 5 and result["part"]["resumed"] is False
    assert result["final"]["step"] == 10 and result["config"]["outer_steps"] == 2


def test_exit_1_says_why_on_stderr_and_stdout_stays_json(capsys):
    """docs/cli.md's example of a setting that is not stable: exit 1, the JSON on stdout, one line on stderr
    naming the verdict and the failing condition."""
    code = main(["check", "--alpha", "0", "--beta", "0", "--gamma", "1", "--group-size", "2", "--replicas", "64",
                 "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 1 and report["stable"] is False
    assert captured.err.count("\n") == 1 and captured.err.startswith("noloco check: exit 1: the setting is marginal")
    failing = [c["name"] for c in report["conditions"] if not c["holds"]]
    assert failing and all(name in captured.err for name in failing)
    assert main(["check", "--preset", "paper", "--json"]) == 0 and capsys.readouterr().err == ""
