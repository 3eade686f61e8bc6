"""A run's own luck: how far the spread of one setting moves when only the data order changes, the floor under
any prediction of a run nobody has trained (``noloco llm study luck``).

Along H and alpha up, ``--as``'s log error has sd 0.07 to 0.08 over the fresh seeds, twice that along beta, gamma
and alpha down (0.035 to 0.046; docs/data/transfers_track.json), and about 1 claimed H transfer in 14 misses 15 %.
The question: is that the prediction's error, or the target run's own luck, which no prediction from another run
can know? The rule, written and committed before any of these runs was read:

* the runs: cpu-tiny and the Llama-style config (the one-pilot study's folder layout), the pilot (N 4, pairs,
  alpha 0.5, beta 0.7, gamma 0.7, H 10) and four targets: H 20 and H 5 at equal tokens (``H up``, ``H down``),
  alpha 0.7 (``alpha up``) and beta 0.9 (``beta up``, an axis whose transfers are tight), each trained whole with
  the data orders :data:`DATA_SEEDS` (the seed the training loop takes: initial weights, shards, batches,
  validation windows) and one groups seed, :data:`GROUPS_SEED` (the outer optimizer's, which the folder records);
* a run's measure: its RMS weight_std over the second half, as the transfers are judged;
* a setting's luck: over its data orders, the deviation of a run's log measure from the mean of the other five
  (the best any prediction that does not know the data order can do: the *oracle*); its RMS over both families
  (12 runs) is the floor;
* an axis's transfer error: ``--as`` from the pilot of data order d to the target of the same d (as the fresh
  seeds judge: pilot and target share their seed), the log of predicted / measured, its RMS over the 12;
* the verdict per axis: the transfer's error is *beyond luck* if its mean square exceeds the oracle's by more than
  the 95 % point of F(12, 10) (:data:`F_LIMIT`), else *within luck*; reported beside it, the share of the oracle's
  12 outside 15 % and the share a normal error of the floor's RMS puts outside 15 %.

Expected if the luck is the cause: along H and alpha up *within luck*, the floor's RMS near 0.07.
"""

from __future__ import annotations

from noloco.studies import one_pilot

FAMILIES = one_pilot.FAMILIES
PILOT = one_pilot.PILOT
#: the four targets and their axis labels (noloco.studies.one_pilot.TRANSFERS' names)
TARGETS = (("a0.5_b0.7_H20", "H up"), ("a0.5_b0.7_H5", "H down"), ("a0.7_b0.7_H10", "alpha up"),
           ("a0.5_b0.9_H10", "beta up"))
NAMES = (PILOT, *(t for t, _ in TARGETS))
DATA_SEEDS = (1001, 1002, 1003, 1004, 1005, 1006)
GROUPS_SEED = 18
#: the 95 % point of F(12, 10): mean squares of 12 transfers against 12 leave-one-out deviations of 6 runs in each
#: of 2 families (10 degrees of freedom)
F_LIMIT = 2.91


def train_missing(out, families=FAMILIES, progress: bool | None = None) -> None:
    """Train every run of the study not finished in ``out`` (one process, the replicas as a list)."""
    from noloco.studies.families import train_hf
    from noloco.training.outer_optimizer import OuterOptimizer

    class OneGroupsSeed(OuterOptimizer):
        """The outer optimizer with the study's groups seed, whatever the data order."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "seed": GROUPS_SEED})

    todo = [(f, n, d) for f in families for d in DATA_SEEDS for n in NAMES
            if not one_pilot.finished(one_pilot.folder(out, f, n, d))]
    from tqdm import tqdm

    for family, name, seed in tqdm(todo, desc="luck runs", disable=progress is False):
        train_hf(one_pilot._hf_family(family), one_pilot.setting(name), seed, one_pilot.folder(out, family, name, seed),
                 outer_class=OneGroupsSeed)
