"""Log-log plot of a ``scaling`` result (or of the ``all`` result that holds one):

    python -m noloco.benchmarks.plot RESULT.json [docs/img/performance.png]
"""

from __future__ import annotations

import sys
from pathlib import Path

from noloco.infra.files import read_json

ROOT = Path(__file__).resolve().parent.parent


def draw(result: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from noloco.benchmarks.scaling import slope

    r = result["results"]
    r = r.get("scaling", r)
    load = result.get("load_average_before", [float("nan")])[0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    labels = {"dim": "directions D", "trials": "trials", "replicas": "replicas N", "steps": "outer steps"}
    for name, points in r["simulate"].items():
        mode, _, factor = name.partition("_vs_")
        x, y = zip(*points)
        left.loglog([v / x[0] for v in x], y, "o-" if mode == "exact" else "s--",
                    label=f"simulate {mode} vs {labels[factor]} (slope {slope(points):.2f})")
    left.set_xlabel("size / smallest size")
    left.set_ylabel("seconds")
    left.set_title(f"simulate (base: D {r['base']['dim']}, {r['base']['trials']} trials, N {r['base']['replicas']}, "
                   f"{r['base']['steps']} steps)", fontsize=9)
    left.legend(fontsize=7)
    for name, label in (("comm_idle_vs_replicas", "comm idle simulation vs N"),
                        ("comm_idle_compiled_vs_replicas", "comm idle simulation, compiled, vs N"),
                        ("check_vs_directions", "check vs directions")):
        if name not in r:  # no numba: no compiled curve
            continue
        x, y = zip(*r[name])
        right.loglog(x, y, "o-", label=f"{label} (slope {slope(r[name]):.2f})")
    right.set_xlabel("replicas / directions")
    right.set_ylabel("seconds")
    right.set_title("comm (50 steps, 2 trials) and check", fontsize=9)
    right.legend(fontsize=7)
    fig.suptitle(f"Cost against size, log-log (load average {load:.2f} at the start)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    from noloco.infra.files import atomic_write

    atomic_write(out, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out = Path(argv[1]) if len(argv) > 1 else ROOT / "docs" / "img" / "performance.png"
    print(draw(read_json(argv[0]), out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
