"""Advice from one pilot, checked by brute force (issue: transfers along every outer axis, a tuner that needs
one pilot): every family of :mod:`noloco.studies.families` used here trains one pilot, the settings one outer
axis away from it in each direction, and a grid of 27 outer settings, so that what ``noloco llm predict --as``
and ``noloco llm tune --grid`` say from the pilot alone can be compared with what those settings measure.

The runs (changes against the families study's :data:`noloco.studies.families.BASE`: N 4, pairs, alpha 0.5,
beta 0.7, gamma 0.7, H 10, 32 outer steps, cosine from lr 3e-3):

* the grid: alpha in {0.3, 0.5, 0.7} x beta in {0.5, 0.7, 0.9} x H in {5, 10, 20} at equal tokens (320 inner
  steps), gamma 0.7, n 2, N 4: 27 settings, the pilot among them;
* the axes not in the grid: gamma 0.35 and 1.0; N 8 with pairs (``N8``) and N 8 with groups of 4 (``N8_n4``).
  A transfer along N runs from the pilot to ``N8`` and from ``N8`` back to the pilot; along n from ``N8`` to
  ``N8_n4`` and back, so that every axis is crossed in both directions.

Seed 0 of cpu-tiny is the development seed (the methods' choices were made on it); seeds 1 and 2 of every family
are the validation, under the rules written in docs/advice.md before those runs were trained.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from noloco.infra.files import read_json

ALPHAS, BETAS, HS = (0.3, 0.5, 0.7), (0.5, 0.7, 0.9), (5, 10, 20)
TOKENS = 320  # inner steps of every run (H x outer steps), the pilot's


def grid() -> dict[str, dict]:
    """The grid's settings by name (changes against the families study's BASE)."""
    out = {}
    for a, b, h in itertools.product(ALPHAS, BETAS, HS):
        out[f"a{a:g}_b{b:g}_H{h}"] = dict(alpha=a, beta=b, inner_steps=h, outer_steps=TOKENS // h)
    return out


PILOT = "a0.5_b0.7_H10"
#: the settings one axis away from the pilot that the grid does not hold
AXES = {"g0.35": dict(gamma=0.35), "g1": dict(gamma=1.0), "N8": dict(replicas=8),
        "N8_n4": dict(replicas=8, group_size=4)}
#: transfers checked: (pilot setting, target setting, the axis and its direction)
TRANSFERS = [(PILOT, "a0.3_b0.7_H10", "alpha down"), (PILOT, "a0.7_b0.7_H10", "alpha up"),
             (PILOT, "a0.5_b0.5_H10", "beta down"), (PILOT, "a0.5_b0.9_H10", "beta up"),
             (PILOT, "g0.35", "gamma down"), (PILOT, "g1", "gamma up"),
             (PILOT, "a0.5_b0.7_H5", "H down"), (PILOT, "a0.5_b0.7_H20", "H up"),
             (PILOT, "N8", "N up"), ("N8", PILOT, "N down"),
             ("N8", "N8_n4", "n up"), ("N8_n4", "N8", "n down")]
FAMILIES = ("cpu-tiny", "llama")
DEVELOPMENT_SEEDS, SEEDS = (0,), (1, 2)


def settings() -> dict[str, dict]:
    return {**grid(), **AXES}


def setting(name: str) -> dict:
    from noloco.studies.families import BASE

    return {**BASE, **settings()[name]}


def folder(out: Path, family: str, name: str, seed: int) -> Path:
    return Path(out) / family / name / f"s{seed}"


def finished(path: Path) -> bool:
    return (path / "result.json").exists() and read_json(path / "result.json").get("finished") is True


#: the forks: from the pilot's state at inner step FORK_AT (a quarter of the run) for FORK_LEN inner steps (a quarter)
FORK_AT, FORK_LEN = TOKENS // 4, TOKENS // 4
#: the settings forked from the pilot: every other setting of the grid, and the gamma axis
FORKED = [n for n in list(grid()) + ["g0.35", "g1"] if n != PILOT]


def fork_folder(out: Path, family: str, name: str, seed: int) -> Path:
    return Path(out) / family / "forks" / name / f"s{seed}"


def _hf_family(family: str):
    from noloco.studies import families

    return families.FAMILIES[family]


def train_pilot(out, family: str, seed: int) -> None:
    """The pilot and its forks (one loop: the forks start from the pilot's state in memory)."""
    from noloco.studies.families import train_hf

    forks = [(setting(n), fork_folder(out, family, n, seed)) for n in FORKED]
    train_hf(_hf_family(family), setting(PILOT), seed, folder(out, family, PILOT, seed), forks=forks,
             fork_at=FORK_AT, fork_len=FORK_LEN)


def train_missing(out, families=FAMILIES, seeds=SEEDS, names=None, progress: bool | None = None) -> None:
    """Every run of the study not finished yet (finished runs are reused): per family and seed the pilot with its
    forks, then the other settings trained whole (the brute force)."""
    from noloco.infra.progress import Progress
    from noloco.studies.families import train_hf

    names = [n for n in (names or settings()) if n != PILOT]
    jobs = [(f, s, n) for f in families for s in seeds for n in [PILOT] + names]
    with Progress(len(jobs), "one-pilot study", unit="run", show=progress) as bar:
        for f, s, n in jobs:
            if n == PILOT:
                if not (finished(folder(out, f, PILOT, s))
                        and all((fork_folder(out, f, m, s) / "result.json").exists() for m in FORKED)):
                    train_pilot(out, f, s)
            elif not finished(folder(out, f, n, s)):
                train_hf(_hf_family(f), setting(n), s, folder(out, f, n, s))
            bar.update()
