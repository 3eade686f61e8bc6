"""The device session's summary (noloco.studies.gpu_report) read back from a folder laid out as
noloco/benchmarks/gpu_large.sh writes it, made here from a real cpu-tiny run and its live lines."""

import json
import subprocess
import sys
import tarfile

import pytest

from optional import needs_torch  # noqa: E402 (tests/optional.py)

pytestmark = needs_torch

from noloco.studies import gpu_report  # noqa: E402
from noloco.studies.paper import pearson  # noqa: E402


def test_the_summary_reads_the_runs_their_live_lines_and_the_predictions(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "noloco", "llm", "train", "--size", "cpu-tiny", "--method", "noloco",
           "--outer-steps", "4", "--log-every", "5", "--threads", "1", "--out", str(runs / "s0" / "noloco")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (out / "log.txt").write_text("== train seed 0 07:00:00\n" + done.stderr)
    (runs / "predict-s0.json").write_text(json.dumps({"rows": []}))
    with tarfile.open(out / "runs_large.tar.gz", "w:gz") as tar:
        tar.add(runs, arcname=".")
    summary = gpu_report.summarise(out)
    (run,) = summary.runs
    rows = [json.loads(line) for line in (runs / "s0" / "noloco" / "metrics.jsonl").read_text().splitlines()]
    assert run.folder == "s0/noloco" and run.method == "noloco" and run.seed == 0
    assert run.pearson_lr.weight_std == pytest.approx(pearson([r["weight_std"] for r in rows],
                                                              [r["lr"] for r in rows]))
    rates = gpu_report.live_rates(done.stderr)["start"]["noloco"]
    assert rates and run.loop_tokens_per_s_median is not None  # the lines after the first outer step
    assert summary.predictions == {"predict-s0": {"rows": []}}
    assert list(summary.to_json()) == ["env", "runs", "predictions"]  # the file's keys, in the order it had them
