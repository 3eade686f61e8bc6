"""Tokens per second of one training step (forward, backward, clipping, AdamW) for
N replicas, four ways:

- batched: the replica-dimension model, all N replicas in one set of kernels;
- loop: the same model sliced to one replica at a time (what N separate models cost);
- vmap: ``torch.func.vmap`` of the one-replica gradient over the replicas;
- one model, N-times batch: the same FLOPs with no replica dimension (the limit).

``python -m llm_check.bench --replicas 8 --size cpu-small`` or ``noloco llm bench``.
On a GPU it also reports the model FLOPs utilisation against the bf16 dense peak.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from llm_check.config import PRESETS, build
from llm_check.model import losses

PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # bf16 dense


def _trainer(size: str, replicas: int, batch_scale: int, mode: str, device: str):
    from llm_check.train import Trainer

    cfg = build(size, "noloco", replicas=replicas, group_size=1, device=device, replica_mode=mode,
                batch=PRESETS[size]["batch"] * batch_scale)
    return Trainer(cfg, "/tmp/llm-bench-unused", progress=False)


def _vmap_step(tr) -> None:
    from torch.func import grad_and_value, vmap

    def one(p, w):
        loss = losses({k: v.unsqueeze(0) for k, v in p.items()}, w.unsqueeze(0), tr.model)
        return loss.sum()

    detached = {k: v.detach() for k, v in tr.params.items()}
    grads, _ = vmap(grad_and_value(one))(detached, tr._windows(0))
    for k, p in tr.params.items():
        p.grad = grads[k]
    tr._clip()
    tr.opt.step()


def _time(fn, device: str, steps: int) -> float:
    fn(0)
    fn(1)  # warm-up: allocator, kernels
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for s in range(steps):
        fn(s)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def bench(replicas: int = 8, size: str = "cpu-small", device: str = "cpu", steps: int = 10) -> dict:
    results = {}
    for name, scale, mode, n in (("batched", 1, "batched", replicas), ("loop", 1, "loop", replicas),
                                 ("vmap", 1, "batched", replicas), ("one model, N x batch", replicas, "batched", 1)):
        tr = _trainer(size, n, scale, mode, device)
        fn = (lambda s: _vmap_step(tr)) if name == "vmap" else tr.inner_step
        try:
            seconds = _time(fn, device, steps)
        except RuntimeError as err:  # vmap lacks batching rules on some devices
            results[name] = {"error": str(err).splitlines()[0]}
            continue
        tokens = tr.cfg.tokens_per_inner_step()
        results[name] = {"tokens_per_s": tokens / seconds, "step_s": seconds}
        if device.startswith("cuda"):
            peak = next((v for k, v in PEAK_FLOPS.items() if k in torch.cuda.get_device_name()), None)
            if peak:
                results[name]["mfu"] = tr.model.flops_per_token() * tokens / seconds / peak
    loop = results["loop"]["tokens_per_s"]
    limit = results["one model, N x batch"]["tokens_per_s"]
    for r in results.values():
        if "tokens_per_s" in r:
            r["vs_loop"] = r["tokens_per_s"] / loop
            r["vs_one_model"] = r["tokens_per_s"] / limit
    tr = _trainer(size, replicas, 1, "batched", device)
    return {"replicas": replicas, "size": size, "device": device, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "n_params": tr.model.n_params(), "steps": steps, "results": results}


def format_bench(result: dict) -> str:
    lines = [f"N={result['replicas']} replicas, {result['size']} model ({result['n_params']} parameters), "
             f"{result['device']}, {result['threads']} thread(s), torch {result['torch']}",
             f"{'mode':<22} {'tokens/s':>10} {'vs loop':>8} {'vs one model':>12}"]
    for name, r in result["results"].items():
        if "error" in r:
            lines.append(f"{name:<22} failed: {r['error']}")
            continue
        mfu = f"  MFU {r['mfu']:.1%}" if "mfu" in r else ""
        lines.append(f"{name:<22} {r['tokens_per_s']:>10.0f} {r['vs_loop']:>8.2f} {r['vs_one_model']:>12.2f}{mfu}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_check.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--size", choices=("cpu-tiny", "cpu-small", "gpu"), default="cpu-small")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = bench(args.replicas, args.size, args.device, args.steps)
    print(json.dumps(result, indent=2) if args.json else format_bench(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
