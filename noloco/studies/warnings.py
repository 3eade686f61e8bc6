"""The early warnings' false-alarm study: clean runs of several model families, seeds and settings, each watched
by :class:`noloco.Observer` through its warning steps, and runs with a planted fault of each kind.

What was fixed here before the runs (the rule):

* a **clean run** (replicas equal at the start, the right sign, a setting the theory calls stable at every c the
  runs measure) raises no warning of any kind: every flag on one is a false alarm; the goal is none;
* a **planted fault** is caught when its own flag is raised at or before the outer step docs/own_run.md states
  (:func:`caught_by`): ``unequal_start`` at outer step 0, ``wrong_sign`` at 1, ``unstable`` at the observer's last
  default check (:func:`noloco.training.early_warning.check_steps`: its checks are at outer steps 4, 6, 8 and 10
  at H >= 10, two in a row, so 6 at the earliest; at H 5, from inner step 40: 8 to 14).

Second round (rule committed with the checks scheduled by inner steps, before its runs were trained): one clean run
at H 5 of 1,298 had cried wolf with the checks at outer steps 4 to 10 (inner steps 20 to 50 at H 5), so the
setting ``H5`` (the base at H 5 and 64 outer steps, 4 seeds), the fault ``unstable_H5`` and the family cpu-tiny join
the study; the same rule judges every run. Beside it, 40 whole runs (64 outer steps) of the setting that cried wolf,
cpu-tiny and Llama at alpha 0.5, beta = gamma 0.7, H 5, data order 1001, fresh groups seeds 60 to 79
(:data:`WHOLE`; trained by the study under ``DIR/whole`` and counted among its clean runs): none may raise a flag
either. Judged: 0 false alarms on 130 clean runs, 40 of 40 planted faults caught by their stated outer step.

The runs are cheap: the Hugging Face families of :mod:`noloco.studies.families` (GPT-2 at width 64, GPT-2 at
width 96, whose LayerNorm and bias tensors have the 96 coordinates of the public GPT on which the warning first
cried wolf, Llama, and GPT-NeoX), trained on the project's corpus for the first :data:`STOP` outer steps of the families'
32-step cosine schedule (every check of the observer runs by then; at H 5, 16 of 64), one torch thread.
``noloco llm study warnings --out DIR`` trains what is missing (finished runs are reused) and writes
``DIR/warnings.json``; docs/data/warnings.json is its result.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from noloco.advice.run_rows import RunResult
from noloco.infra.errors import DataError
from noloco.infra.files import read_json, write_json
from noloco.infra.record import JsonRecord
from noloco.studies import families as F

#: the families: the families study's GPT-2, Llama and GPT-NeoX, GPT-2 at width 96 and (second round) cpu-tiny, on
#: which the false alarm at H 5 was raised
FAMILIES = {"gpt2": F.GPT2, "gpt2-96": F.Family("gpt2", width=96, layers=2, heads=4), "llama": F.LLAMA, "neox": F.NEOX,
            "cpu-tiny": F.CPU_TINY}
#: outer steps a clean run of the base (H 10) trains of the 32-step schedule: the observer's last check is at
#: outer step 10 (:func:`stop` at other H)
STOP = 12
#: the base at H 5, the same inner steps (the second round's short phase)
SHORT = {"inner_steps": 5, "outer_steps": 64}
#: the clean settings (changes to the families' base run) and their seeds: the base at N 4 and 8, the families
#: study's target outer step, and a constant rate after warm-up (the reference code's Llama recipe's schedule)
CLEAN = {"base": ({}, range(6)),
         "target": (dict(F.TARGET), range(3)),
         "N8": ({"replicas": 8}, range(2)),
         "constant": ({"schedule": "constant", "min_lr_frac": 1.0}, range(3)),
         "H5": (SHORT, range(4))}
#: the planted faults: name -> (the fault, its setting changes, seeds); gamma 2.5 with pairs overshoots the pair mean:
#: the theory's decay factor is above 1 at every c from -1 to 1 (1.02 at c = 1, 1.56 at c = 0)
FAULTS = {"unequal_start": ("unequal_start", {}, (0, 1)), "wrong_sign": ("wrong_sign", {}, (0, 1)),
          "unstable": ("unstable", {"gamma": 2.5}, (0, 1)),
          "unstable_H5": ("unstable", {"gamma": 2.5, **SHORT}, (0, 1))}
VAL_WINDOWS = 8  # the loss is not what this study reads
#: the whole runs (64 outer steps) of the setting that cried wolf, beside the study (second round): the setting,
#: families, data order and fresh groups seeds; trained under ``DIR/whole``
WHOLE = ("a0.5_b0.7_H5", ("cpu-tiny", "llama"), 1001, range(60, 80))


def caught_by(fault: str, inner_steps: int) -> int:
    """The outer step by which a planted fault must be flagged (docs/own_run.md): ``unstable`` at the observer's
    last default check at this H."""
    from noloco.training.early_warning import check_steps

    return {"unequal_start": 0, "wrong_sign": 1}[fault] if fault != "unstable" else check_steps(inner_steps)[-1]


def stop(setting: F.FamilySetting, fault: str | None) -> int:
    """The outer steps a run trains: a clean one past the observer's last check, a fault one past its catch."""
    from noloco.training.early_warning import check_steps

    return check_steps(setting.inner_steps)[-1] + 2 if fault is None else max(caught_by(fault, setting.inner_steps) + 2, 3)


def unequal_start(models) -> None:
    """The fault ``unequal_start``: one coordinate of replica 1 moved by 1e-3 before the outer optimizer copies
    the weights (tests/test_observer.py makes the same fault)."""
    import torch

    with torch.no_grad():
        next(models[1].parameters()).view(-1)[7] += 1e-3


def wrong_sign_optimizer():
    """The fault ``wrong_sign``: an OuterOptimizer whose vector on the wire carries minus the progress
    (phi - theta where theta - phi is meant: the bug DiLoCo implementations shipped), so the group mean it steps
    with is the wrong way; the observer's hook still sees theta - phi."""
    from noloco.training.outer_optimizer import OuterOptimizer

    class WrongSign(OuterOptimizer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            beta_theta = self.replicas_here.scaled_into  # the wire's beta * theta (then + (gamma - beta) phi)

            def flipped(factor, out):  # -beta theta + 2 beta phi: beta (phi - theta) + gamma phi on the wire
                beta_theta(-factor, out)
                for k, o in out.items():
                    o.add_(self.phi[k], alpha=2 * factor)

            self.replicas_here.scaled_into = flipped

    return WrongSign


def jobs() -> list[tuple[str, str, int, F.FamilySetting, str | None]]:
    """``(family, setting name, seed, setting, fault)`` of every run: the clean ones, then the planted faults."""
    out = [(f, name, seed, dataclasses.replace(F.BASE, **changes), None)
           for f in FAMILIES for name, (changes, seeds) in CLEAN.items() for seed in seeds]
    out += [(f, name, seed, dataclasses.replace(F.BASE, **changes), fault)
            for f in FAMILIES for name, (fault, changes, seeds) in FAULTS.items() for seed in seeds]
    return out


def _folder(out: Path, family: str, name: str, seed: int) -> Path:
    return out / family / name / f"s{seed}"


def train(family: str, setting: F.FamilySetting, seed: int, folder: Path, fault: str | None) -> None:
    import torch

    torch.set_num_threads(1)
    F.train_hf(FAMILIES[family], setting, seed, folder, val_windows=VAL_WINDOWS, stop=stop(setting, fault),
               prepare=unequal_start if fault == "unequal_start" else None,
               outer_class=wrong_sign_optimizer() if fault == "wrong_sign" else None)


@dataclass(frozen=True)
class Flag(JsonRecord):
    """One early warning a run raised."""

    flag: str
    outer_step: int
    message: str


@dataclass(frozen=True)
class FlaggedRun(JsonRecord):
    """One run of the study and the warnings it raised."""

    NESTED = {"flags": (list, Flag)}

    family: str
    setting: str
    seed: int
    replicas: int
    outer_steps_done: int
    flags: list


@dataclass(frozen=True)
class CleanRun(FlaggedRun):
    """A run with no fault: any flag is a false alarm."""

    false_alarm: bool


@dataclass(frozen=True)
class FaultRun(FlaggedRun):
    """A run with a planted fault: caught when its own flag came by the stated outer step."""

    fault: str
    caught_at: Optional[int]
    caught: bool


@dataclass(frozen=True)
class WarningsSummary(JsonRecord):
    clean_runs: int
    false_alarms: int
    upper_95: Optional[float]  # the largest per-run false-alarm rate that 0 alarms in this many runs leaves at 95 %
    faults: int
    caught: int


@dataclass(frozen=True)
class WarningsReport(JsonRecord):
    """``warnings.json``: every run's flags, and the false alarms and caught faults."""

    NESTED = {"clean": (list, CleanRun), "faults": (list, FaultRun), "summary": WarningsSummary}

    schema: str
    stop: int
    caught_by: dict
    families: list
    clean: list
    faults: list
    summary: WarningsSummary


def evaluate(out: Path) -> WarningsReport:
    """Every run's flags under the rule of the module docstring."""
    from noloco.advice.record import read_run
    from noloco.training import early_warning

    def flagged(folder: Path) -> tuple[list, dict]:
        """A run's flags as result.json holds them (their own numbers left out), and its other fields of
        :class:`FlaggedRun` read from the run."""
        run = read_run(folder)
        result = RunResult.from_json(run.result)
        flags = [Flag(f.flag, f.outer_step, f.message) for f in map(early_warning.Flag.from_json, result.flags or [])]
        return flags, dict(replicas=run.outer.replicas, outer_steps_done=result.outer_steps_done)

    clean, faults = [], []
    for family, name, seed, setting, fault in jobs():
        flags, read = flagged(_folder(out, family, name, seed))
        row = dict(family=family, setting=name, seed=seed, **read, flags=flags)
        if fault is None:
            clean.append(CleanRun(**row, false_alarm=bool(flags)))
        else:
            own = next((f for f in flags if f.flag == fault), None)
            faults.append(FaultRun(**row, fault=fault, caught_at=own and own.outer_step,
                                   caught=own is not None and own.outer_step <= caught_by(fault, setting.inner_steps)))
    for family, groups_seed, folder in _whole(out):
        flags, read = flagged(folder)
        clean.append(CleanRun(family=family, setting=f"{WHOLE[0]} whole", seed=groups_seed, **read, flags=flags,
                              false_alarm=bool(flags)))
    alarms = sum(r.false_alarm for r in clean)
    summary = WarningsSummary(clean_runs=len(clean), false_alarms=alarms,
                              upper_95=1 - 0.05 ** (1 / len(clean)) if clean and not alarms else None,
                              faults=len(faults), caught=sum(r.caught for r in faults))
    by = {name: caught_by(fault, dataclasses.replace(F.BASE, **changes).inner_steps)
          for name, (fault, changes, _) in FAULTS.items()}
    return WarningsReport(schema="warnings", stop=STOP, caught_by=by, families=list(FAMILIES), clean=clean,
                          faults=faults, summary=summary)


def _whole(out: Path) -> list[tuple[str, int, Path]]:
    """``(family, groups seed, folder)`` of each of :data:`WHOLE`'s runs."""
    from noloco.studies import luck, one_pilot

    name, families, data, seeds = WHOLE
    return [(f, g, one_pilot.folder(luck.groups_folder(out / "whole", g), f, name, data)) for f in families for g in seeds]


def run_study(out, train_runs: bool = True, progress: bool | None = None) -> WarningsReport:
    from noloco.infra.progress import Progress

    out = Path(out)
    if train_runs:
        import torch

        from noloco.studies import luck

        torch.set_num_threads(1)
        name, families, data, seeds = WHOLE
        for g in seeds:
            luck.train_data_orders(luck.groups_folder(out / "whole", g), families, [name], (data,), g, progress=False)
        todo = jobs()
        with Progress(len(todo), "warnings study", unit="run", show=progress) as bar:
            for family, name, seed, setting, fault in todo:
                folder = _folder(out, family, name, seed)
                if not (folder / "result.json").exists() or _stale(folder, setting, fault):
                    train(family, setting, seed, folder, fault)
                bar.update()
    report = evaluate(out)
    write_json(out / "warnings.json", report, indent=2)
    return report


def _stale(folder: Path, setting: F.FamilySetting, fault: str | None) -> bool:
    """A run that did not get as far as this study trains it (interrupted)."""
    done = RunResult.from_json(read_json(folder / "result.json")).outer_steps_done or 0
    return done < stop(setting, fault)


@dataclass(frozen=True)
class ReplayedRun(JsonRecord):
    """One recorded run re-checked at today's checks: its folder (under the replayed root), H, and the outer step of
    the ``unstable`` flag the observer would raise now (None: none)."""

    run: str
    inner_steps: int
    unstable_at: Optional[int]


@dataclass(frozen=True)
class ReplayReport(JsonRecord):
    NESTED = {"runs": (list, ReplayedRun)}

    schema: str
    root: str
    check_steps: dict  # H -> the outer steps checked
    alarms: int
    runs: list


def replay_study(root) -> ReplayReport:
    """Every finished run under ``root`` (a folder holding result.json and inputs.jsonl, at any depth) re-checked by
    :func:`noloco.training.early_warning.replay`: what today's ``unstable`` checks raise on runs recorded before;
    written to ``root/warnings_replayed.json``."""
    from noloco.advice.record import read_run
    from noloco.training.early_warning import check_steps, replay

    root = Path(root)
    if not root.is_dir():
        raise DataError(f"--replay {root}: no such folder")
    rows = []
    found = sorted(Path(d) / "result.json" for d, _, files in os.walk(root, followlinks=True) if "result.json" in files)
    for result in found:  # a study's folder may link runs of another in
        folder = result.parent
        if not (folder / "inputs.jsonl").exists() or not RunResult.from_json(read_json(result)).finished:
            continue
        run = read_run(folder)
        flag = replay(run)
        rows.append(ReplayedRun(str(folder.relative_to(root)), run.setting.inner_steps, flag and flag.outer_step))
    steps = {str(h): check_steps(h) for h in sorted({r.inner_steps for r in rows})}
    report = ReplayReport(schema="warnings-replayed", root=str(root), check_steps=steps,
                          alarms=sum(r.unstable_at is not None for r in rows), runs=rows)
    write_json(root / "warnings_replayed.json", report, indent=2)
    return report


def format_replay(rep: ReplayReport) -> str:
    lines = [f"{r.run}  H {r.inner_steps}  unstable at outer step {r.unstable_at}" for r in rep.runs if r.unstable_at]
    checks = "; ".join(f"H {h}: {', '.join(map(str, s))}" for h, s in rep.check_steps.items())
    return "\n".join(lines + [f"{rep.alarms} of {len(rep.runs)} finished runs under {rep.root} raise `unstable` at "
                               f"today's checks (outer steps {checks})"])


def format_report(rep: WarningsReport) -> str:
    s = rep.summary
    lines = [f"{'family':<8} {'setting':<14} {'seed':>4} {'N':>2}  flags (outer step)"]
    for r in rep.clean + rep.faults:
        flags = ", ".join(f"{f.flag} ({f.outer_step})" for f in r.flags) or "-"
        lines.append(f"{r.family:<8} {r.setting:<14} {r.seed:>4} {r.replicas:>2}  {flags}"
                     + (f"  caught: {'yes' if r.caught else 'NO'}" if isinstance(r, FaultRun) else ""))
    bound = "" if s.upper_95 is None else f" (at most {s.upper_95:.1%} per run at 95 % confidence)"
    lines.append(f"false alarms: {s.false_alarms} of {s.clean_runs} clean runs{bound}; planted faults caught "
                 f"by the stated outer step: {s.caught} of {s.faults}")
    return "\n".join(lines)


def ok(rep: WarningsReport) -> bool:
    """No false alarm and every planted fault caught by its stated outer step."""
    return rep.summary.false_alarms == 0 and rep.summary.caught == rep.summary.faults
