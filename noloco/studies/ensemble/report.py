"""The study's report as text."""

from __future__ import annotations

import math


from noloco.studies.ensemble.plan import ENSEMBLES


LABELS = {"homogeneous": "homog.", "heterogeneous": "heterog.", "ddp": "ddp", "diloco": "diloco", "noloco": "noloco"}


def format_report(rep: dict) -> str:
    """The tables of docs/hdee.md from a report of :func:`run_study`."""
    s, b = rep["settings"], rep["budget"]
    lines = [f"budget {b['flops']:.4g} matmul FLOPs per configuration (K = {len(s['domains'])} experts x "
             f"{s['expert_steps']} steps x {b['step_flops_base']:.4g} FLOPs/step of the base model, width {s['width']}, "
             f"{s['layers']} layers, ctx {s['ctx']}, batch {s['batch']}); seeds {s['seeds']}",
             "  " + ", ".join(f"{c} {v['flops']:.6g} ({v['relative_to_budget']:+.2e})" for c, v in b["per_config"].items())]
    if "heterogeneous" in b["allocation"]:
        lines.append("heterogeneous experts: " + ", ".join(f"{a['domain']} ({a['group']}, width {a['width']}, "
                                                            f"{a['steps']} steps)" for a in b["allocation"]["heterogeneous"]))
    if b.get("baseline_steps"):
        lines.append(f"ddp / diloco / noloco: N = {s['replicas']}, {b['baseline_steps']} steps each, H = {s['inner_steps']}")
    if rep.get("unfinished"):
        return "\n".join(lines + [f"stopped: {len(rep['unfinished'])} runs unfinished (first: {rep['unfinished'][0]}); "
                                  f"continue with --resume"])
    if rep.get("diverged"):
        return "\n".join(lines + [f"diverged: {n}: {m}" for n, m in rep["diverged"].items()])
    configs = s["configs"]
    cols = [c for c in configs] + [f"{c}-uniform" for c in configs if c in ENSEMBLES]
    head = f"{'domain':<18}" + "".join(f"{(LABELS.get(c) or LABELS[c.split('-')[0]] + ' unif.'):>15}" for c in cols)
    lines += ["", "validation perplexity per byte (exp of the mean loss over seeds; ensembles: domain posterior)", head]
    for d in rep["evaluated"]:
        held = d in {r["name"] for r in rep["domains"] if r["held_out"]}
        win = rep["winners"][d]["best"]
        cells = "".join(f"{rep['per_domain'][c][d]['perplexity']:>14.3f}{'*' if c == win else ' '}" for c in cols)
        lines.append(f"{d + (' (held out)' if held else ''):<18}" + cells)
    for part in ("in_domain", "held_out"):
        lines.append(f"{part.replace('_', '-') + ' mean':<18}" + "".join(
            f"{math.exp(rep['averages'][c][part]['mean']):>14.3f} " for c in cols))
    lines += ["", "bytes sent per replica during training"]
    for c, v in rep["communication"].items():
        lines.append(f"  {c:<14} {v['bytes_per_replica']:>14.4g} B  ({v['events']} x {v['bytes_per_event']:.4g} B: "
                     f"{v['scheme']}; {v['seconds_internet']:.3g} s on the internet network of noloco comm)")
    wins = {}
    for d, w in rep["winners"].items():
        wins.setdefault(w["best"], []).append(d + ("" if w.get("clear") else "?"))
    lines += ["", "lowest perplexity (? : the margin to the runner-up is within 2 standard errors)"]
    lines += [f"  {c:<14} {', '.join(ds)}" for c, ds in wins.items()]
    return "\n".join(lines)
