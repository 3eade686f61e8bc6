"""The life of one training run: its folder, its files, its checkpoints, resuming, stopping.

* The folder is a :class:`noloco.infra.rundir.RunFolder`, checked and locked once (under torchrun by
  rank 0). ``--overwrite`` removes the run's own files (:data:`OWN_FILES`) and nothing else.
* ``metrics.jsonl`` (a row per evaluation), ``inputs.jsonl`` (the theory's inputs per outer step) and
  ``result.json`` (``finished: false`` from the start and at every checkpoint until the last step) are
  rewritten whole and atomically (:mod:`noloco.infra.files`).
* Checkpoints every ``ckpt_every`` outer steps, at the end and at ``stop_after``: the trainer's
  :meth:`~noloco.llm_check.trainer.Trainer.state_dict`, loaded with ``weights_only=True`` (no code runs
  from the file), validated, and refused when written with other settings.
* Ctrl-C and SIGTERM in one process are deferred to the end of the inner step they land in: the state
  at that inner step is checkpointed (resuming from it is exact), the lock released, and the
  ``--resume`` command printed; exit 130. Under torchrun a rank cannot save mid-phase (its group may be
  at another point), so the last periodic checkpoint is what a resumed run starts from.
* A divergence (:mod:`noloco.llm_check.divergence`) keeps the last finite checkpoint and ends the run.
* Progress: a bar on a terminal, a line per evaluation in a log (:mod:`noloco.infra.progress`); a live line
  every ``log_every`` inner steps and the TensorBoard sink: :mod:`noloco.llm_check.live`.
* What the run did: the result counts the part this invocation trained (``part``: from which inner step,
  how many, its wall time and tokens/s) and the whole run (``run``: its inner steps and tokens, and its wall
  time summed over the parts that made the checkpoints, null after a checkpoint written before that sum was
  kept), so a resumed run's totals are the whole run's and its rates the part's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shlex
import sys
import time
from pathlib import Path

import torch

from noloco.advice.run_rows import InputsRow, MetricsRow, RunResult
from noloco.infra.entry import Interrupted, deferred_stop
from noloco.infra.errors import ConfigError, DataError, warn
from noloco.infra.files import (SCHEMA_VERSION, atomic_write, atomic_write_text, dumps, open_run_file, read_json,
                                read_jsonl, write_json)
from noloco.infra.progress import Progress
from noloco.infra.rundir import RunFolder
from noloco.llm_check import divergence
from noloco.llm_check.config import TrainConfig, default_log_every
from noloco.llm_check.live import TENSORBOARD_DIR, LiveLog, TensorBoardSink
from noloco.training.exchange import PeerError

#: the files of a run besides its checkpoints
RUN_FILES = ("metrics.jsonl", "inputs.jsonl", "result.json")
#: a run's own files: ``--overwrite`` removes these and nothing else (``ckpt-backup.pt`` stays)
OWN_FILES = RUN_FILES + (r"re:ckpt(-rank\d+)?\.pt(\.prev)?",)
#: settings a resumed run may change: they do not change what is computed (outer_steps too, under a
#: constant schedule; under cosine it sets the schedule's length, so it must stay)
RESUMABLE_CHANGES = ("device", "replica_mode", "ckpt_every", "compile")
#: checkpoint schema versions this version reads (1: written before strict JSON; same content)
CKPT_VERSIONS = (1, SCHEMA_VERSION)


def describe_run(folder: Path) -> str:
    """How far the run in ``folder`` got, from its result.json ("" when unreadable)."""
    with contextlib.suppress(DataError):
        finished, done, total = _read_progress(Path(folder) / "result.json")
        return f"{'finished' if finished else 'unfinished'} at outer step {done} of {total}"
    return ""


def _read_progress(result: Path) -> tuple:
    """``(finished, outer steps done, outer steps planned)`` as a result.json holds them, "?" for one it lacks:
    any run's file, a damaged or foreign one too, so not through the typed record (which needs a config)."""
    done = read_json(result)
    config = done.get("config")
    total = config.get("outer_steps", "?") if isinstance(config, dict) else "?"
    return done.get("finished"), done.get("outer_steps_done", "?"), total


def run_folder(out, *, resume: bool = False, overwrite: bool = False, lock: bool = True,
               how: str | None = None) -> RunFolder:
    """The (unopened) RunFolder of a training run in ``out``."""
    return RunFolder(out, own=OWN_FILES, resume=resume, overwrite=overwrite, describe=describe_run, lock=lock,
                     how=how)


def read_metrics(path, fix: str = "") -> list[dict]:
    """The rows of a metrics.jsonl, each an object with ``outer_step`` and ``weight_std`` (Python's json:
    rows of runs made before strict JSON may hold NaN); a DataError naming the file, the line and ``fix``."""
    from noloco.advice.record import METRIC_TYPES

    return read_jsonl(path, required=("outer_step", "weight_std"), fix=fix, types=METRIC_TYPES)


def finished_run(out, cfg: TrainConfig) -> dict | None:
    """The result of the finished run of ``cfg`` that ``out`` holds, or None (no run, unfinished, diverged,
    other settings, or an unreadable result.json). Settings are compared through
    :meth:`TrainConfig.from_dict`, so a field added since the run was made takes its default."""
    try:
        result = read_json(Path(out) / "result.json", required=("config", "finished"))
        run = RunResult.from_json(result)
        same = TrainConfig.from_dict(run.config) == cfg
    except (DataError, ConfigError, TypeError, KeyError, ValueError, AttributeError):
        return None
    return result if same and run.finished and not run.diverged else None


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return out


def resume_command(world_size: int = 1) -> str:
    """The command line of this process with ``--resume`` instead of ``--overwrite``."""
    argv = [a for a in sys.argv[1:] if a not in ("--overwrite", "--resume")] + ["--resume"]
    program = Path(sys.argv[0]).name if sys.argv else "noloco"
    if world_size > 1:
        head = ["torchrun", "--nproc-per-node", str(world_size), "-m", "noloco"]
    else:
        head = ["noloco"] if program in ("noloco", "__main__.py") else ["python", "-m", "noloco"]
    return shlex.join(head + argv)


class Lifecycle:
    """One run of ``trainer`` in an opened ``folder`` (see the module docstring)."""

    #: read the inner steps' losses on the host at every step (None: on a CPU only). On a GPU each read makes the
    #: host wait for the step, so there they are read together at each live line and at the phase's end
    read_losses_every_step: bool | None = None

    def __init__(self, trainer, folder: RunFolder, log_every: int | None = None, tensorboard: bool = False):
        self.trainer, self.folder = trainer, folder
        self.log_every = default_log_every(trainer.cfg) if log_every is None else log_every
        self.tensorboard = tensorboard
        self.first_step = 0       # inner steps of the run done before this part (the checkpoint's)
        self.prior_wall = 0.0     # wall seconds of the parts before this one (None: not recorded)
        self.resumed, self.started = False, time.perf_counter()  # (both set again when the run starts)
        self.out = Path(trainer.out)
        self.ex = trainer.ex
        self.divergence = divergence.Divergence(self.ex.replicas)
        self.saved_at = None  # outer step of the checkpoint on disk (None: none yet)
        self.rows: list[MetricsRow] = []
        self.open_folder = False

    # ------------------------------------------------------------- checkpoints

    @property
    def checkpoint(self) -> Path:
        return self.out / self.ex.ckpt_name()

    @property
    def previous(self) -> Path:
        """Under torchrun each rank keeps its checkpoint before the last: a rank killed while the ranks were
        saving leaves the others one save ahead, and the run resumes from the step every rank saved."""
        return self.checkpoint.with_name(self.checkpoint.name + ".prev")

    def _recover(self) -> str:
        return (f"start the run again with --overwrite (it deletes the run in {self.out}), or put back a good "
                f"copy of {self.checkpoint.name}")

    def save(self) -> None:
        state = {"schema_version": SCHEMA_VERSION, "config": self.trainer.cfg.as_dict(),
                 "replicas": list(self.ex.replicas), **self.trainer.state_dict(), "run_wall_s": self._run_wall(),
                 "data_rng": "numpy default_rng([seed, replica, inner_step]); groups from (seed, outer_step)"}
        atomic_write(self.checkpoint, lambda tmp: torch.save(state, tmp),
                     previous=self.previous if self.ex.world_size > 1 else None)
        self.saved_at = self.trainer.outer_done

    def read_checkpoint(self, path: Path | None = None) -> dict:
        path = self.checkpoint if path is None else path
        try:  # tensors and plain data only: unpickling arbitrary objects would run code from the file
            with open_run_file(path, self._recover()) as handle:  # a named pipe would block torch.load
                state = torch.load(handle, map_location=self.trainer.device, weights_only=True)
        except DataError:
            raise  # not a regular file: its own line
        except Exception as err:  # damaged bytes make torch's unpickler raise almost anything (IndexError too)
            first = (str(err).splitlines() or [type(err).__name__])[0]
            raise DataError(f"checkpoint {path} is unreadable (truncated or corrupted: {first}); "
                            f"{self._recover()}") from None
        if not isinstance(state, dict):
            raise DataError(f"checkpoint {path} holds a {type(state).__name__}, not a checkpoint; {self._recover()}")
        missing = [k for k in ("config", "outer_step", "phi", "delta", "opt", "torch_rng") if k not in state]
        if missing or state.get("schema_version", 1) not in CKPT_VERSIONS:
            what = (f"lacks {', '.join(missing)}" if missing else
                    f"has schema_version {state.get('schema_version')!r} (this version reads "
                    f"{', '.join(map(str, CKPT_VERSIONS))})")
            raise DataError(f"checkpoint {path} {what}; {self._recover()}")
        return state

    def check_resume_settings(self, state: dict) -> None:
        path, cfg = self.checkpoint, self.trainer.cfg
        try:  # a nested config, or the flat one of checkpoints written before the outer step was nested
            saved_cfg = TrainConfig.from_dict(state["config"])  # edge: the checkpoint as torch.load reads it
        except (ConfigError, TypeError, KeyError, AttributeError) as err:
            raise ConfigError(f"checkpoint {path} holds settings this version cannot read ({err}); "
                              f"resume with the version that wrote it, or start a new --out") from None
        saved, now = _flat(saved_cfg.as_dict()), _flat(cfg.as_dict())
        free = RESUMABLE_CHANGES + (("outer_steps",) if cfg.schedule == saved_cfg.schedule == "constant" else ())
        differ = [k for k in now if k.split(".")[0] not in free and saved.get(k) != now[k]]
        if differ:
            why = ("; outer_steps sets the length of the cosine learning-rate schedule (outer_steps * inner_steps "
                   "inner steps), so another value reshapes it" if "outer_steps" in differ else "")
            raise ConfigError(f"--resume: the checkpoint in {self.out} was written with other settings: "
                              + ", ".join(f"{k}={saved.get(k)!r} (now {now[k]!r})" for k in differ)
                              + f"{why}; resume with the checkpoint's values or start a new --out")
        for key, top in (("outer_step", cfg.outer_steps), ("inner_step", cfg.inner_steps - 1)):
            done = state.get(key, 0)
            if isinstance(done, bool) or not isinstance(done, int) or done < 0:
                raise DataError(f"checkpoint {path} has {key}={done!r}; {self._recover()}")
            if done > top:
                raise ConfigError(f"--resume: the checkpoint in {self.out} is at {key.replace('_', ' ')} {done}, "
                                  f"beyond {'outer_steps' if key == 'outer_step' else 'inner_steps - 1'}={top}")

    def load(self, path: Path | None = None) -> None:
        """The checkpoint (or ``path``) into the trainer (validated first)."""
        path = self.checkpoint if path is None else path
        state = self.read_checkpoint(path)
        self.check_resume_settings(state)
        self.trainer.load_state_dict(state, path, self._recover())
        self.saved_at = self.trainer.outer_done
        wall = state.get("run_wall_s")  # absent from checkpoints written before it was kept
        self.prior_wall = (float(wall) if isinstance(wall, (int, float)) and not isinstance(wall, bool)
                           and math.isfinite(wall) and wall >= 0 else None)

    def _load_saved(self) -> None:
        """The rank's last checkpoint; under torchrun the one before it where a kill between its two renames
        left no other (:func:`noloco.infra.files.atomic_write`)."""
        if self.checkpoint.exists():
            self.load()
        elif self.ex.world_size > 1 and self.previous.exists():
            self.load(self.previous)
        else:
            raise ConfigError(f"--resume: no checkpoint {self.checkpoint}")

    def _common_step(self, failure):
        """Under torchrun, after every rank loaded its last checkpoint: the ranks that saved one outer step
        more than the others go back to the checkpoint before it, so that the run resumes from the last outer
        step every rank saved. Returns the failure to raise (the same on every rank), or None."""
        every = self.ex.agree([0.0 if failure is None else 1.0, float(self.trainer.outer_done)])
        ranks = range(self.ex.world_size)
        if any(every[2 * r] > 0 for r in ranks):
            return failure or PeerError(f"rank(s) {[r for r in ranks if every[2 * r] > 0]} could not read their "
                                        f"checkpoint (see their error); nothing was trained")
        steps = [int(every[2 * r + 1]) for r in ranks]
        target = min(steps)
        if max(steps) == target:
            return None
        failure = None
        if self.trainer.outer_done > target:
            try:
                if not self.previous.exists():
                    raise DataError(f"{self.previous} is missing")
                self.load(self.previous)
            except (ConfigError, DataError, OSError, MemoryError) as err:
                failure = err
        back = self.ex.agree([0.0 if failure is None else 1.0, float(self.trainer.outer_done)])
        if any(back[2 * r] > 0 for r in ranks) or {int(back[2 * r + 1]) for r in ranks} != {target}:
            found = ", ".join(f"rank {r}: {s}" for r, s in enumerate(steps))
            return DataError(f"the checkpoints in {self.out} are at different outer steps ({found}) and no outer "
                             f"step is saved by every rank (each keeps its last two checkpoints; "
                             f"{failure or 'the ones before were at other steps'}); start the run again with "
                             f"--overwrite")
        if self.ex.is_main:
            warn(f"the ranks' last checkpoints are at outer steps {', '.join(map(str, sorted(set(steps))))} (a "
                 f"rank was stopped while they were saved): resuming from outer step {target}, the last one "
                 f"every rank saved")
        return None

    # ------------------------------------------------------------- files

    def _write_rows(self) -> None:
        if self.ex.is_main:  # the whole file, atomically: a crash never leaves half a line
            atomic_write_text(self.out / "metrics.jsonl", "".join(dumps(r.to_json()) + "\n" for r in self.rows))
        self._write_inputs()

    def _write_inputs(self) -> None:
        t = self.trainer
        t.collect_inputs()  # every rank: the observer's gathers in flight under torchrun
        if self.ex.is_main and (t.meter is not None or t.inputs):
            atomic_write_text(self.out / "inputs.jsonl", "".join(dumps(r) + "\n" for r in t.inputs))

    def _divergence_report(self) -> divergence.Diverged:
        return dataclasses.replace(self.divergence.first, checkpoint_outer_step=self.saved_at,
                                   checkpoint=str(self.checkpoint))

    def _steps_done(self) -> int:
        t = self.trainer
        return t.outer_done * t.cfg.inner_steps + t.inner_done

    def _run_wall(self) -> float | None:
        """Wall seconds of the whole run so far: the earlier parts' (from the checkpoint) and this one's."""
        return None if self.prior_wall is None else self.prior_wall + time.perf_counter() - self.started

    def _counts(self) -> dict:
        """``part``: what this invocation trained; ``run``: the whole run (see the module docstring)."""
        per_step = self.trainer.cfg.tokens_per_inner_step()
        done, wall, run_wall = self._steps_done(), time.perf_counter() - self.started, self._run_wall()
        part_tokens = (done - self.first_step) * per_step
        return {"part": {"resumed": self.resumed, "from_step": self.first_step, "inner_steps": done - self.first_step,
                         "tokens": part_tokens, "wall_s": wall, "tokens_per_s": part_tokens / wall if wall > 0 else None},
                "run": {"inner_steps": done, "tokens": done * per_step, "wall_s": run_wall,
                        "tokens_per_s": done * per_step / run_wall if run_wall else None}}

    def _result(self, started: float) -> dict:
        t = self.trainer
        result = {"schema_version": SCHEMA_VERSION, "config": t.cfg.as_dict(), **t.corpus.info(),
                  "unigram_entropy": self._entropy, "torch": torch.__version__,
                  "n_params": t.model.n_params(), "outer_steps_done": t.outer_done,
                  "finished": t.outer_done == t.cfg.outer_steps and self.divergence.first is None,
                  "checkpoint_outer_step": self.saved_at, "wall_s": time.perf_counter() - started,
                  "world_size": self.ex.world_size, "rank": getattr(self.ex, "rank", 0), **self._counts(),
                  "final": self.rows[-1].to_json() if self.rows else None,
                  **({} if self.divergence.first is None else {"diverged": dataclasses.replace(
                      self.divergence.first, message=divergence.message(self._divergence_report())).to_json()})}
        return result

    def _write_result(self, started: float) -> dict:
        result = self._result(started)
        if self.ex.is_main:
            write_json(self.out / "result.json", result, indent=2)
        return result

    def _resume_inputs(self) -> None:
        """The inputs.jsonl rows up to the checkpoint. The meter continues only from a checkpoint that
        holds its state and a file that holds every outer step up to it; otherwise the rows kept end
        there (``noloco llm predict`` then predicts the evaluations up to that step)."""
        t, path = self.trainer, self.out / "inputs.jsonl"
        fix = "delete inputs.jsonl (the run then goes on without it) or start again with --overwrite"
        rows = ([InputsRow.from_json(r) for r in read_jsonl(path, required=("outer_step", "groups"), fix=fix)]
                if path.exists() else [])
        kept = [r for r in rows if r.outer_step <= t.outer_done]
        if [r.outer_step for r in kept] != list(range(1, t.outer_done + 1)):
            t.meter = None
        t.inputs = [r.to_json() for r in kept]  # the trainer (and the observer) keep the rows as the file's JSON

    def start(self, resume: bool, overwrite: bool) -> None:
        """Before the first step: the checkpoint (every rank), the folder's own files (rank 0: stale
        temporaries, or everything with ``overwrite``), the metrics rows kept. Under torchrun every rank
        learns whether all of them could start."""
        failure = None
        try:
            if self.open_folder:
                if self.ex.is_main:
                    self.folder.open()
                    self.out = Path(self.folder.path)
            if resume:
                self._load_saved()
        except (ConfigError, DataError, OSError, MemoryError) as err:
            failure = err
        if resume and self.ex.world_size > 1:
            failure = self._common_step(failure)
        try:  # the folder's own files only once every rank's checkpoint is at one outer step
            if failure is None and self.ex.is_main:
                self.folder.clear(everything=overwrite)
                if overwrite:  # the replaced run's TensorBoard events: its curves would mix with the new run's
                    for events in (self.out / TENSORBOARD_DIR).glob("events.out.tfevents.*"):
                        events.unlink(missing_ok=True)
                metrics = self.out / "metrics.jsonl"
                if resume and metrics.exists():
                    fix = (f"delete that line (rows after the checkpoint's outer step {self.trainer.outer_done} are "
                           f"recomputed), or start again with --overwrite")
                    rows = map(MetricsRow.from_json, read_metrics(metrics, fix))
                    self.rows = [r for r in rows if r.outer_step <= self.trainer.outer_done]
                if resume:
                    self._resume_inputs()
        except (ConfigError, DataError, OSError, MemoryError) as err:
            failure = err
        if self.ex.world_size > 1:  # every rank prepared? (their steps already agree: _common_step)
            every = self.ex.agree([0.0 if failure is None else 1.0])
            ranks_failed = [r for r in range(self.ex.world_size) if every[r] > 0]
            if failure is None and ranks_failed:
                failure = PeerError(f"rank(s) {ranks_failed} could not start the run (see their error); "
                                    f"nothing was trained")
        if failure is not None:
            raise failure

    # ------------------------------------------------------------- the run

    def _take_losses(self, pending: list, step0: int, bar, live, single: bool) -> bool:
        """The ``pending`` inner steps' losses read on the host in one copy, then checked and recorded step by
        step as if each had been read at its own step; True when a replica diverged (in one process the
        phase then stops at that step)."""
        t = self.trainer
        for (h, _), loss in zip(pending, torch.stack([loss for _, loss in pending]).double().cpu()):
            self.divergence.check_losses(loss, t.outer_done + 1, step0 + h + 1)
            if single and self.divergence.first:
                t.inner_done = h + 1
                return True
            t.record_loss(loss)
            bar.update(1)
            live.step(step0 + h + 1, loss)
        return False

    def _stop(self, signal_name: str, inner_step: int | None) -> None:
        """Checkpoint the state the stop request found and raise :class:`Interrupted` (under torchrun every rank
        does so at the same outer step)."""
        t = self.trainer
        where = f"outer step {t.outer_done}" + (f", inner step {inner_step}" if inner_step else "")
        self.save()
        self._write_inputs()
        self._write_result(self.started)
        raise Interrupted(f"the state at {where} is saved in {self.checkpoint}; continue with: "
                          f"{resume_command(self.ex.world_size)}", signal_name)

    def _stop_requested(self, request) -> str | None:
        """The signal that asks this run to stop at this outer step: this process's, or under torchrun any rank's
        (one all-gather per outer step, so that every rank checkpoints the same step)."""
        if self.ex.world_size == 1:
            return request.signal_name
        anyone = any(self.ex.agree([1.0 if request.signal_name else 0.0]))
        return request.signal_name or ("SIGTERM" if anyone else None)

    def execute(self, resume: bool, stop_after: int | None, overwrite: bool, progress: bool | None,
                open_folder: bool = False) -> dict:
        """The run (see the module docstring); ``open_folder``: the folder is opened here, inside
        :meth:`start`, and closed at the end."""
        self.open_folder = open_folder
        try:
            return self._execute(resume, stop_after, overwrite, progress)
        finally:
            if open_folder:
                self.folder.close()

    def _execute(self, resume: bool, stop_after: int | None, overwrite: bool, progress: bool | None) -> dict:
        t, cfg = self.trainer, self.trainer.cfg
        self.started = started = time.perf_counter()
        self.resumed = resume
        self._entropy = t.corpus.unigram_entropy()
        self.start(resume, overwrite)
        self.first_step = self._steps_done()
        self._write_rows()
        self._write_result(started)
        last = min(cfg.outer_steps if stop_after is None else stop_after, cfg.outer_steps)
        single = self.ex.world_size == 1
        names = t.tensor_names()
        bar = Progress(cfg.total_inner_steps, f"{cfg.method} N={cfg.replicas}", unit="inner step",
                       initial=t.outer_done * cfg.inner_steps + t.inner_done,
                       show=progress if self.ex.is_main else False)
        sink = (TensorBoardSink(self.out, self.first_step if resume else None)
                if self.tensorboard and self.ex.is_main else None)
        live = LiveLog(cfg, self.log_every, bar, show=self.ex.is_main and progress is not False, sink=sink,
                       local_replicas=len(self.ex.replicas), world_size=self.ex.world_size,
                       whole_model=self.ex.stage is None or cfg.stages == 1)
        clock = time.perf_counter()
        try:
            with bar, contextlib.closing(live), deferred_stop() as request:
                while t.outer_done < last:
                    step0 = t.outer_done * cfg.inner_steps
                    every = (t.device.type == "cpu" if self.read_losses_every_step is None
                             else self.read_losses_every_step)
                    pending = []  # (h, the step's losses on the device) not read yet
                    for h in range(t.inner_done, cfg.inner_steps):
                        pending.append((h, t.inner_step(step0 + h)))
                        t.inner_done = h + 1
                        stopping = single and request.signal_name and h + 1 < cfg.inner_steps  # ranks stop together
                        if every or stopping or h + 1 == cfg.inner_steps or (step0 + h + 1) % live.every == 0:
                            if self._take_losses(pending, step0, bar, live, single):
                                break
                            pending = []
                        if stopping:
                            self._stop(request.signal_name, h + 1)
                    if single and self.divergence.first:
                        break
                    evaluate = (t.outer_done + 1) % cfg.eval_every == 0 or t.outer_done + 1 == cfg.outer_steps
                    t.outer_update(t.outer_done, measure=evaluate)
                    t.outer_done, t.inner_done = t.outer_done + 1, 0
                    save = t.outer_done % cfg.ckpt_every == 0 or t.outer_done == last
                    self.divergence.check_tensors(t.outer_done, t.state_tensors(optimizer=save))
                    if (single or evaluate or save) and self.divergence.synchronise(self.ex, names):
                        break
                    if evaluate:
                        with live.paused():
                            row = t.metrics_row(clock)
                        self.divergence.check_evaluation(t.outer_done, row)
                        if self.divergence.first:
                            break
                        with live.paused():
                            self.rows.append(row)
                            self._write_rows()
                            live.evaluation(row)
                        bar.note(f"val {row.val_loss_avg_model:.3f}, weight_std {row.weight_std:.2e}")
                        clock = time.perf_counter()
                    if save:
                        with live.paused():
                            self.save()
                            self._write_inputs()
                            self._write_result(started)
                    stop = self._stop_requested(request)
                    if stop and t.outer_done < last:
                        self._stop(stop, None)
        except KeyboardInterrupt as err:
            if isinstance(err, Interrupted):
                raise
            kept = (f"the last checkpoint (outer step {self.saved_at}) is kept in {self.checkpoint}"
                    if self.saved_at is not None else "no checkpoint had been written")
            raise Interrupted(f"{kept}; continue with: {resume_command(self.ex.world_size)}",
                              getattr(err, "signal_name", "Ctrl-C")) from None
        self._write_inputs()
        return self._write_result(started)

