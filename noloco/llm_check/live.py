"""What a training run shows while it runs, beside its files (:mod:`noloco.llm_check.lifecycle` drives it):

* a live line every ``log_every`` inner steps, in the nanoGPT habit: the training loss averaged over the
  interval (this process's replicas; under torchrun rank 0's replica), the learning rate of the last step, the
  run's tokens a second and the milliseconds an inner step took (evaluations and checkpoints left out: they are
  not steps), and on a GPU of known peak the model FLOPs utilisation. On a terminal it is written above the
  progress bar, in a log (stderr to a file, torchrun's rank 0) it is a line of its own;
* with ``--tensorboard``, the same scalars and every evaluation's as TensorBoard events in
  ``OUT/tensorboard`` (:class:`TensorBoardSink`), the step axis being the inner step.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from noloco.advice.run_rows import MetricsRow
from noloco.infra.progress import Progress
from noloco.llm_check.config import TrainConfig
from noloco.llm_check.resources import peak_flops

#: the folder of the TensorBoard events inside a run folder
TENSORBOARD_DIR = "tensorboard"
#: the evaluation's values written as TensorBoard scalars: metrics.jsonl key -> tag
EVALUATION_TAGS = {"train_loss": "eval/train_loss", "val_loss_avg_model": "eval/val_loss_avg_model",
                   "val_loss_replicas_mean": "eval/val_loss_replicas_mean", "weight_std": "eval/weight_std",
                   "theta_std": "eval/theta_std"}


def write_line(progress: Progress, text: str) -> None:
    """``text`` as a line of ``progress``'s (its counts, elapsed time and time left first): above the bar on a
    terminal, a line of its own in a log; nothing when the progress is silent."""
    if progress.silent:
        return
    line = progress.line(text)
    if progress.bar is not None:
        progress.bar.write(line, file=progress.stream)
    else:
        print(line, file=progress.stream, flush=True)
        progress.last_line = time.monotonic()  # the heartbeat counts from this line


class TensorBoardSink:
    """Scalars as TensorBoard events in ``out/tensorboard`` (torch.utils.tensorboard, the tb extra). A resumed
    run purges the events after its checkpoint's step (those of the part that was lost) from what TensorBoard
    shows, so the curves have one value per step."""

    def __init__(self, out: Path, resumed_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        from noloco.infra.files import output_dir

        # checked here, before tensorboard's writer thread exists: that thread meets an unwritable folder with a
        # traceback of its own and the path as bytes; here it is one line naming the flag (exit 3)
        folder = output_dir(Path(out) / TENSORBOARD_DIR, "--tensorboard")
        self.writer = SummaryWriter(log_dir=str(folder),
                                    purge_step=None if resumed_step is None else resumed_step + 1)

    def scalars(self, step: int, values: dict) -> None:
        for tag, value in values.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.writer.add_scalar(tag, value, step)

    def evaluation(self, row: MetricsRow) -> None:
        """A metrics row's values, then everything written so far to disk (a crash loses nothing before it)."""
        assert row.step is not None  # a harness row always has its inner step
        self.scalars(row.step, {tag: getattr(row, key) for key, tag in EVALUATION_TAGS.items()})
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True)
class LiveValues:
    """One interval's live scalars: the mean train loss, the last step's learning rate, tokens/s, ms per inner step
    and the MFU (None where the device's peak is not known)."""

    loss: float
    lr: float
    tokens_per_s: float
    step_ms: float
    mfu: Optional[float] = None

    def tags(self) -> dict:
        """The values by TensorBoard tag (the MFU only where it is known)."""
        tags = {"train/loss": self.loss, "train/lr": self.lr, "perf/tokens_per_s": self.tokens_per_s,
                "perf/step_ms": self.step_ms}
        return tags if self.mfu is None else {**tags, "perf/mfu": self.mfu}


class LiveLog:
    """The live lines of one run (see the module docstring); ``show``: write them (rank 0 with progress on),
    ``sink``: a :class:`TensorBoardSink` or None."""

    def __init__(self, cfg: TrainConfig, every: int, progress: Progress, *, show: bool, sink=None,
                 local_replicas: int, world_size: int = 1, whole_model: bool = True):
        self.cfg, self.every, self.progress, self.show, self.sink = cfg, every, progress, show, sink
        self.local_tokens = local_replicas * cfg.batch * cfg.ctx  # this process's share: the MFU of its device
        # a torchrun rank holding one pipeline stage does an unknown share of a token's FLOPs: no MFU there
        self.peak = peak_flops(cfg.device) if whole_model else None
        self.flops_per_token = cfg.model().flops_per_token()
        self.loss_label = "train loss" if world_size == 1 else "train loss (rank 0's replica)"
        self._restart()

    def _restart(self) -> None:
        self.loss_sum, self.steps, self.left_out = 0.0, 0, 0.0
        self.since = time.perf_counter()

    @contextlib.contextmanager
    def paused(self):
        """Work that is not an inner step (an evaluation, a checkpoint): its time is left out of ms per step."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.left_out += time.perf_counter() - start

    def step(self, step: int, losses) -> None:
        """Inner step ``step`` of the run (counted from 1) is done with these replicas' ``losses``."""
        self.loss_sum += float(losses.mean())
        self.steps += 1
        if step % self.every == 0:
            self.emit(step)

    def values(self, step: int) -> LiveValues:
        """The interval's scalars: train loss, learning rate of step ``step``, tokens/s, ms per step, MFU."""
        seconds = max(time.perf_counter() - self.since - self.left_out, 1e-9)
        mfu = self.steps * self.local_tokens * self.flops_per_token / seconds / self.peak if self.peak else None
        return LiveValues(loss=self.loss_sum / self.steps, lr=self.cfg.inner_lr(step - 1),
                          tokens_per_s=self.steps * self.cfg.tokens_per_inner_step() / seconds,
                          step_ms=1000.0 * seconds / self.steps, mfu=mfu)

    def emit(self, step: int) -> None:
        if not self.steps:
            return
        v = self.values(step)
        if self.show:
            mfu = f", MFU {v.mfu:.1%}" if v.mfu is not None else ""
            write_line(self.progress, f"{self.loss_label} {v.loss:.4f}, lr {v.lr:.2e}, "
                                      f"{v.tokens_per_s:,.0f} tok/s, {v.step_ms:.1f} ms/step{mfu}")
        if self.sink is not None:
            self.sink.scalars(step, v.tags())
        self._restart()

    def evaluation(self, row: MetricsRow) -> None:
        if self.sink is not None:
            self.sink.evaluation(row)

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
