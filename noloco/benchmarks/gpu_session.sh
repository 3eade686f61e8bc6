#!/usr/bin/env bash
# The standing GPU checks (../shared/GPU.md) in one command, for a lent H100/H200: run from the repository
# root with OUT set to a folder for the results. Each part is time-boxed and runs whatever the others did,
# so one failure costs only its part. PART picks the parts (default: all of them, about 20 minutes):
#   env      the device, torch, CUDA and Triton versions
#   equal    batched replicas against the per-replica loop in float32 on the device (max |difference|)
#   bench    noloco llm bench --size gpu at N = 8: batched, loop, vmap, one model with an N-times batch
#   train    noloco llm train --preset gpu --method ddp,diloco,noloco with warm-up and cosine decay, then
#            noloco llm predict (the theory, the forecast and the gap) and the Pearson r of weight_std with lr
#   tests    the fast test suite (python3 -m pytest -q -m "not slow")
#   validate noloco llm validate --preset gpu --device cuda
# DEVICE=cpu with SMALL=1 runs the same parts at a tiny size on a CPU (to check the script itself).
set -u
OUT=${OUT:?set OUT to the results folder}
PART=${PART:-env equal bench train tests validate}
DEVICE=${DEVICE:-cuda}
RUNS=${RUNS:-/tmp/noloco-gpu-runs}
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1
if [ "${SMALL:-0}" = 1 ]; then
  SIZE="--layers 1 --width 32 --heads 2 --ctx 32 --batch 2 --inner-steps 3 --outer-steps 4 --warmup 2 --eval-every 2 --val-windows 8 --dtype float32"
  BENCH_STEPS=2
else
  SIZE=""
  BENCH_STEPS=20
fi
source "$(dirname "$0")/gpu_common.sh"

if part env; then
  stamp env
  { nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 || true
    python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0]); print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
    python3 -c "import triton; print('triton', triton.__version__)" 2>&1
  } > "$OUT/env.txt" 2>&1
  cat "$OUT/env.txt" >> "$OUT/log.txt"
fi

if part equal; then
  stamp equal
  timeout 90 python3 - "$DEVICE" > "$OUT/equal.json" 2>> "$OUT/log.txt" <<'PY'
# batched replicas and the per-replica loop from one seed, 3 inner steps and an outer step, in float32
import json, sys, torch
from noloco.llm_check.config import build
from noloco.llm_check.train import Trainer
device = sys.argv[1]
params = {}
for mode in ("batched", "loop"):
    cfg = build("cpu-small", "noloco", device=device, dtype="float32", replica_mode=mode)
    tr = Trainer(cfg, f"/tmp/noloco-equal-{mode}", progress=False)
    for step in range(3):
        tr.inner_step(step)
    tr.outer_update(0)
    params[mode] = {k: v.detach().double().cpu() for k, v in tr.params.items()}
diff = max(float((params["batched"][k] - params["loop"][k]).abs().max()) for k in params["batched"])
scale = max(float(v.abs().max()) for v in params["loop"].values())
print(json.dumps({"device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
                  "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "max_abs_difference": diff,
                  "max_abs_weight": scale, "relative": diff / scale}))
PY
  cat "$OUT/equal.json" >> "$OUT/log.txt"
fi

if part bench; then
  stamp bench
  size=gpu; [ "${SMALL:-0}" = 1 ] && size=cpu-tiny
  timeout ${BENCH_S:-150} python3 -m noloco llm bench --device "$DEVICE" --size $size --steps $BENCH_STEPS \
    --out "$OUT/bench.json" >> "$OUT/log.txt" 2>&1 || echo "bench exit $?" >> "$OUT/log.txt"
fi

if part train; then
  stamp train
  preset="--preset gpu"; [ "${SMALL:-0}" = 1 ] && preset="--preset gpu --device $DEVICE"
  # noloco first: a run cut short by the time box loses the baselines, not the method
  timeout ${TRAIN_S:-330} python3 -m noloco llm train $preset $SIZE --method noloco,diloco,ddp --schedule cosine \
    --out "$RUNS/gpu" --overwrite >> "$OUT/log.txt" 2>&1 || echo "train exit $?" >> "$OUT/log.txt"
  for how in "" "--forecast" "--gap"; do
    name=predict-noloco${how:+-${how#--}}
    timeout 60 python3 -m noloco llm predict "$RUNS/gpu/noloco" $how --json > "$RUNS/$name.json" 2>> "$OUT/log.txt" \
      || echo "$name exit $?" >> "$OUT/log.txt"
  done
  timeout 60 python3 - "$RUNS/gpu" > "$OUT/pearson.json" 2>> "$OUT/log.txt" <<'PY'
# Pearson r of weight_std (and theta_std) with the learning rate over each run's evaluations
import json, sys
from pathlib import Path
from noloco.studies.paper import pearson
out = {}
for run in sorted(Path(sys.argv[1]).iterdir()):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").exists() else []
    rows = [r for r in rows if r.get("weight_std") is not None]
    if rows:
        r_of = {k: pearson([r[k] for r in rows], [r["lr"] for r in rows]) for k in ("weight_std", "theta_std") if k in rows[0]}
        out[run.name] = {k: (v if v == v else None) for k, v in r_of.items()}  # NaN (a constant curve): null
print(json.dumps(out))
PY
  cat "$OUT/pearson.json" >> "$OUT/log.txt"
fi

if part tests; then
  stamp tests
  # on the CPU cores, beside the validate sweep on the GPU (its spread, not its speed, is what is measured)
  ( timeout ${TESTS_S:-420} python3 -m pytest -q -m "not slow" -x -p no:cacheprovider > "$OUT/tests.txt" 2>&1 \
      || echo "tests exit $?" >> "$OUT/log.txt" ) &
  tests=$!
fi

if part validate; then
  stamp validate
  preset=gpu; [ "${SMALL:-0}" = 1 ] && preset=cpu-tiny
  timeout ${VALIDATE_S:-500} python3 -m noloco llm validate --preset $preset --device "$DEVICE" --out "$RUNS/validate" \
    --max-time none --reuse --json > "$OUT/validate.json" 2>> "$OUT/log.txt" || echo "validate exit $?" >> "$OUT/log.txt"
fi
if [ -n "${tests:-}" ]; then
  wait "$tests"
  tail -5 "$OUT/tests.txt" >> "$OUT/log.txt"
fi

if part train || part validate; then
  stamp pack
  # the run folders without their checkpoints (one file: the device returns at most 8)
  tar -czf "$OUT/runs.tar.gz" -C "$RUNS" --exclude='*.pt' . 2>> "$OUT/log.txt"
fi
stamp done
