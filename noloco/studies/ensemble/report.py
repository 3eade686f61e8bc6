"""The study's report as text."""

from __future__ import annotations

import math


from noloco.studies.ensemble.plan import ENSEMBLES
from noloco.studies.ensemble.records import EnsembleReport


LABELS = {"homogeneous": "homog.", "size-heterogeneous": "size-het.", "step-heterogeneous": "step-het.",
          "combined": "combined", "seed-model": "seed model", "ddp": "ddp", "diloco": "diloco", "noloco": "noloco"}
MIXING = {"": "cached prior", "-fixed-prior": "fixed prior", "-uniform": "uniform average"}


def _ppl(rep: EnsembleReport, entry: str, domain: str) -> str:
    row = rep.per_domain[entry][domain]
    return f"{row.perplexity:>10.3f}" if row.perplexity is not None else f"{'-':>10}"


def format_report(rep: EnsembleReport) -> str:
    """The tables of docs/hdee.md from a report of :func:`run_study`."""
    s, b = rep.settings, rep.budget
    lines = [f"budget {b.flops:.4g} matmul FLOPs per configuration ({s.experts} chains x ({s.seed_steps} seed "
             f"steps + {s.rounds} rounds x {s.expert_steps} steps) x {b.step_flops_base:.4g} FLOPs/step of the "
             f"base model, width {s.width}, {s.layers} layers, ctx {s.ctx}, batch {s.batch}); seeds "
             f"{s.seeds}",
             "  " + ", ".join(f"{c} {v.flops:.6g} ({v.relative_to_budget:+.2e})" for c, v in b.per_config.items()),
             "rounds (one domain per chain, easiest tier first): "
             + "; ".join(f"{r + 1}: {', '.join(row)}" for r, row in enumerate(b.rounds))]
    for kind, chains in b.allocation.items():
        lines.append(f"{kind}: " + "; ".join(f"MLP {c.mlp_hidden} ({c.n_params} parameters), "
                                            f"steps {'/'.join(str(r.steps) for r in c.rounds)}" for c in chains))
    if b.baseline_steps:
        lines.append(f"ddp / diloco / noloco: N = {s.replicas}, {b.baseline_steps} steps each, H = {s.inner_steps}")
    if rep.unfinished:
        return "\n".join(lines + [f"stopped: {len(rep.unfinished)} runs unfinished (first: {rep.unfinished[0]}); "
                                  f"continue with --resume"])
    if rep.diverged:
        return "\n".join(lines + [f"diverged: {n}: {m}" for n, m in rep.diverged.items()])
    configs = s.configs
    ensembles = [c for c in configs if c in ENSEMBLES]
    part_of = {d: part for part, members in rep.parts.items() for d in members}
    cols = ensembles + ["seed-model"] + [c for c in configs if c not in ENSEMBLES]
    lines += ["", "validation perplexity per byte (exp of the mean loss over seeds; ensembles: domain posterior, "
                  "cached prior; * lowest of the configurations)",
              f"{'domain':<26}" + "".join(f"{LABELS[c]:>11}" for c in cols)]
    for d in rep.evaluated:
        win = rep.winners[d].best
        lines.append(f"{d + ' (' + part_of[d].replace('_', ' ') + ')':<26}"
                     + "".join(_ppl(rep, c, d) + ("*" if c == win else " ") for c in cols))
    parts = [p for p, members in rep.parts.items() if members]
    for part in parts:
        lines.append(f"{'mean, ' + part.replace('_', ' '):<26}" + "".join(
            f"{rep.averages[c][part].perplexity or math.nan:>10.3f} " for c in cols))
    lines += ["", "ensembles by mixing rule: perplexity, mean over the parts"]
    for c in ensembles:
        for suffix, name in MIXING.items():
            lines.append(f"  {c + ', ' + name:<40}" + "".join(
                f"{part.replace('_', ' ')} {rep.averages[c + suffix][part].perplexity or math.nan:.3f}  "
                for part in parts))
    if rep.against_homogeneous:
        lines += ["", "HDEE's comparison: domains where the heterogeneous ensemble's mean loss is below the homogeneous "
                      "one's (same mixing rule)"]
        for name, row in rep.against_homogeneous.items():
            lines.append(f"  {name:<40} {len(row.lower_in)} of {len(rep.evaluated)}: {', '.join(row.lower_in)}")
    lines += ["", "bytes sent per replica during training"]
    for c, v in rep.communication.items():
        lines.append(f"  {c:<20} {v.bytes_per_replica:>14.4g} B  ({v.events} x {v.bytes_per_event:.4g} B: "
                     f"{v.scheme}; {v.seconds_internet:.3g} s on the internet network of noloco comm)")
    wins: dict = {}
    for d, w in rep.winners.items():
        wins.setdefault(w.best, []).append(d + ("" if w.clear else "?"))
    lines += ["", "lowest perplexity (? : the margin to the runner-up is within 2 standard errors)"]
    lines += [f"  {c:<20} {', '.join(ds)}" for c, ds in wins.items()]
    return "\n".join(lines)
