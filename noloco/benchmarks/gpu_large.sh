#!/usr/bin/env bash
# The 43 M-parameter preset (gpu-large) on a lent H100/H200, in one or two commands: run from the repository
# root with OUT set to a folder for the results. Each part is time-boxed and runs whatever the others did.
# PART picks the parts (default: all of them, about 9 minutes on an H200):
#   env      the device, torch, CUDA and Triton versions
#   tests    the fast test suite on the CPU cores (pytest-xdist where installed), beside the GPU parts
#   bench    noloco llm bench --size gpu-large --compile at N = 8: batched (fused and foreach AdamW), loop, vmap,
#            one model with an N-times batch, the batched and the one-model step compiled
#   outer    the public outer optimizer and the observer in one process on the device (python -m
#            noloco.benchmarks outer), time per outer step against its floor
#   train    noloco llm train --preset gpu-large --method noloco,diloco,ddp for each seed of SEEDS (default 0 1),
#            then noloco with alpha 0.3 (seed 0: the target of --as), and noloco llm predict (own inputs,
#            --forecast, --as, --gap) on the noloco runs; the run folders come back without checkpoints
# DEVICE=cpu with SMALL=1 runs the same parts at a tiny size on a CPU (to check the script itself).
set -u
OUT=${OUT:?set OUT to the results folder}
PART=${PART:-env tests bench outer train}
DEVICE=${DEVICE:-cuda}
SEEDS=${SEEDS:-0 1}
RUNS=${RUNS:-/tmp/noloco-large-runs}
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1
if [ "${SMALL:-0}" = 1 ]; then
  SIZE="--device $DEVICE --layers 1 --width 32 --heads 2 --ctx 32 --batch 2 --outer-steps 4 --inner-steps 3 --warmup 2 --eval-every 2 --ckpt-every 4 --val-windows 8 --dtype float32 --no-compile"
  BENCH="--size cpu-tiny --steps 2"
  OUTER="--replicas 4 --width 32 --layers 1 --device $DEVICE --seconds 3"
else
  SIZE=""
  BENCH="--size gpu-large --steps 10 --compile"
  OUTER="--replicas 8 --width 768 --layers 6 --device $DEVICE --seconds 10"
fi
source "$(dirname "$0")/gpu_common.sh"

if part env; then  # the standing checks' env part: the device, torch, CUDA and Triton
  OUT="$OUT" PART=env bash "$(dirname "$0")/gpu_session.sh"
fi

if part tests; then
  start_tests 10 420
fi

if part bench; then
  stamp bench
  timeout ${BENCH_S:-200} python3 -m noloco llm bench --device "$DEVICE" $BENCH --out "$OUT/bench_large.json" \
    >> "$OUT/log.txt" 2>&1 || echo "bench exit $?" >> "$OUT/log.txt"
fi

if part outer; then
  stamp outer
  timeout ${OUTER_S:-60} python3 -m noloco.benchmarks outer --ranks 1 $OUTER --out "$OUT/outer_large.json" \
    >> "$OUT/log.txt" 2>&1 || echo "outer exit $?" >> "$OUT/log.txt"
fi

if part train; then
  for seed in $SEEDS; do
    stamp "train seed $seed"
    # noloco first: a run cut short by the time box loses the baselines, not the method
    timeout ${TRAIN_S:-200} python3 -m noloco llm train --preset gpu-large $SIZE --method noloco,diloco,ddp \
      --seed "$seed" --out "$RUNS/s$seed" --overwrite --json > "$OUT/train_s$seed.json" 2>> "$OUT/log.txt" \
      || echo "train seed $seed exit $?" >> "$OUT/log.txt"
  done
  if [ -n "${AS_RUN:-1}" ]; then
    stamp "train alpha 0.3"
    timeout ${AS_S:-90} python3 -m noloco llm train --preset gpu-large $SIZE --method noloco --alpha 0.3 --seed 0 \
      --out "$RUNS/s0-alpha0.3" --overwrite --json > "$OUT/train_alpha.json" 2>> "$OUT/log.txt" \
      || echo "train alpha exit $?" >> "$OUT/log.txt"
  fi
  stamp predict
  # --gap reads the checkpoint (3.5 GB, left on the device); the others are re-run where the folders come back
  for seed in $SEEDS; do
    for how in "" "--forecast --from-step 3" "--forecast --from-step 5" "--gap"; do
      name=predict-s$seed$(echo "$how" | tr -d ' -')
      timeout 60 python3 -m noloco llm predict "$RUNS/s$seed/noloco" $how --json > "$RUNS/$name.json" \
        2>> "$OUT/log.txt" || echo "$name exit $?" >> "$OUT/log.txt"
    done
  done
  timeout 60 python3 -m noloco llm predict "$RUNS/s0/noloco" --as alpha=0.3 --json > "$RUNS/predict-s0-as-alpha0.3.json" \
    2>> "$OUT/log.txt" || echo "predict --as exit $?" >> "$OUT/log.txt"
  timeout 60 python3 -m noloco llm predict "$RUNS/s0-alpha0.3" --gap --json > "$RUNS/predict-alpha0.3gap.json" \
    2>> "$OUT/log.txt" || echo "predict alpha gap exit $?" >> "$OUT/log.txt"
fi

wait_tests

stamp pack
# the run folders without their checkpoints (one file: the device returns at most 8)
tar -czf "$OUT/runs_large.tar.gz" -C "$RUNS" --exclude='*.pt' --exclude='*.pt.prev' . 2>> "$OUT/log.txt"
stamp done
