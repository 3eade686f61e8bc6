"""The one-pilot grid of a wider Llama, trained on a GPU: a model size, a batch and a device that none of the advice's
constants were set on, for the forecast's fresh judgement (``noloco llm study forecasts --runs OUT --fresh-seed S``).

The 29 settings of :data:`noloco.studies.one_pilot.JUDGED` (alpha x beta x H at equal tokens, gamma 0.35 and 1),
each as the families' plain loop trains them (:func:`noloco.studies.families.train_hf`: N 4, pairs, cosine from lr
3e-3), on :data:`LLAMA_WIDE` (width 256, 4 layers: 3.0 M parameters a replica, 24 times the Llama family's) with 16
windows of 128 bytes a step (16 times the tokens). Runs go to ``OUT/llama-wide/SETTING/sSEED``, several at a time
on one device (each a process: the model is too small to fill a GPU)::

    python -m noloco.studies.wide_grid OUT --seeds 21 22 --device cuda --jobs 6
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from noloco.studies import one_pilot
from noloco.studies.families import Family, FamilySetting, finished

LLAMA_WIDE = Family("llama-wide", width=256, layers=4, heads=8)
BATCH, CTX = 16, 128


def setting(name: str, batch: int = BATCH, ctx: int = CTX) -> FamilySetting:
    """The grid's setting ``name`` with this family's batch and context."""
    return dataclasses.replace(one_pilot.setting(name), batch=batch, ctx=ctx)


def _train(job) -> str:
    import torch

    from noloco.studies.families import train_hf

    family, name, seed, out, device, batch, ctx = job
    torch.set_num_threads(1)
    path = one_pilot.folder(out, family.name, name, seed)
    if not finished(path):
        train_hf(family, setting(name, batch, ctx), seed, path, device=device)
    return f"{family.name}/{name}/s{seed}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m noloco.studies.wide_grid", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the runs folder (OUT/llama-wide/SETTING/sSEED); finished runs are kept")
    p.add_argument("--seeds", type=int, nargs="+", default=[21])
    p.add_argument("--device", default="cuda")
    p.add_argument("--jobs", type=int, default=6, help="runs at a time, each its own process")
    # a smaller model and batch: the same script checked on a CPU
    p.add_argument("--width", type=int, default=LLAMA_WIDE.width)
    p.add_argument("--layers", type=int, default=LLAMA_WIDE.layers)
    p.add_argument("--batch", type=int, default=BATCH)
    p.add_argument("--ctx", type=int, default=CTX)
    p.add_argument("--settings", nargs="+", default=list(one_pilot.JUDGED), choices=list(one_pilot.JUDGED),
                   metavar="SETTING", help="of the 29 (default: all)")
    a = p.parse_args(argv)
    if a.jobs < 1:
        p.error(f"--jobs {a.jobs}: at least 1")
    family = dataclasses.replace(LLAMA_WIDE, width=a.width, layers=a.layers)
    # a fixed random order of the settings, seeds interleaved: a grid cut short by a time box is not biased towards
    # small alpha, and has whole settings of every seed
    names = list(a.settings)
    random.Random(0).shuffle(names)
    jobs = [(family, name, seed, a.out, a.device, a.batch, a.ctx) for name, seed in itertools.product(names, a.seeds)]
    failed = 0
    with ProcessPoolExecutor(a.jobs, mp_context=get_context("spawn")) as pool:
        for job, fut in [(j, pool.submit(_train, j)) for j in jobs]:
            try:
                print("done", fut.result(), flush=True)
            except Exception as e:  # one run's failure is reported and the others go on
                failed += 1
                print(f"failed {job[1]} s{job[2]}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
