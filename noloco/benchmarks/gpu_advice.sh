#!/usr/bin/env bash
# The advice's GPU family and the observer on a device, in one command for a lent H100/H200: run from the
# repository root with OUT set to a folder for the results. Each part is time-boxed; one failure costs its part:
#   env      the device, torch, CUDA and Triton versions (gpu_session.sh's part)
#   outer    python -m noloco.benchmarks outer --ranks 1 --replicas 8 on the device: the outer step and the
#            observer (sampled) against the memory floor
#   nccl     two NCCL ranks on the one GPU (what a one-GPU machine allows of the multi-rank benchmark)
#   gloo     python -m noloco.benchmarks outer --ranks 4 (then 8) on the machine's CPU cores, alone: the outer step
#            against the wire's floor where each gloo rank has cores of its own (a 2-core machine cannot give them)
#   tests    the fast test suite on the CPU cores (pytest-xdist where installed), beside the grid
#   grid     python -m noloco.studies.wide_grid: the 29-setting grid of the wider Llama, seeds SEEDS (default 21
#            22), JOBS runs at a time on the GPU; the run folders come back as one archive, unread until the
#            forecast's rule is committed (noloco llm study forecasts --runs DIR --fresh-seed S judges them)
# DEVICE=cpu with SMALL=1 runs the same parts at a tiny size on a CPU (to check the script itself).
set -u
OUT=${OUT:?set OUT to the results folder}
PART=${PART:-env outer nccl gloo tests grid}
DEVICE=${DEVICE:-cuda}
SEEDS=${SEEDS:-21 22}
RUNS=${RUNS:-/tmp/noloco-wide-runs}
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1
here=$(dirname "$0")
if [ "${SMALL:-0}" = 1 ]; then
  OUTER="--replicas 4 --width 32 --layers 1 --seconds 3"
  GLOO="--width 32 --layers 1 --seconds 3 --spread-steps 0 --inner-steps 0"
  GRID="--width 32 --layers 1 --batch 2 --ctx 16 --settings a0.3_b0.5_H20 g1"
else
  OUTER="--replicas 8 --width 768 --layers 6 --seconds 10"
  GLOO="--seconds 30"
  GRID=""
fi
source "$here/gpu_common.sh"

if part env; then
  OUT="$OUT" PART=env bash "$here/gpu_session.sh"
fi

if part outer; then  # first, alone on the device: its timings are not shared with the grid's runs
  stamp outer
  timeout ${OUTER_S:-75} python3 -m noloco.benchmarks outer --ranks 1 --device "$DEVICE" $OUTER --out "$OUT/outer.json" \
    >> "$OUT/log.txt" 2>&1 || echo "outer exit $?" >> "$OUT/log.txt"
fi

if part nccl; then
  stamp nccl
  timeout ${NCCL_S:-45} python3 - "$DEVICE" >> "$OUT/log.txt" 2>&1 <<'PY' || echo "nccl exit $?" >> "$OUT/log.txt"
# two ranks, one GPU: does NCCL take them (an all-reduce of 1 M floats), or refuse, and with what message
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
def rank(r, device):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, rank=r, world_size=2)
    x = torch.full((1 << 20,), float(r + 1), device="cuda:0" if device == "cuda" else "cpu")
    try:
        dist.all_reduce(x)
        print(f"nccl rank {r}: all-reduce gave {float(x[0])} (expected 3.0)", flush=True)
    except Exception as e:
        print(f"nccl rank {r}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
    dist.destroy_process_group()
mp.start_processes(rank, args=(sys.argv[1],), nprocs=2, start_method="fork")  # the code comes from stdin: no spawn
PY
fi

if part gloo; then  # before the tests and the grid take the CPU cores
  for ranks in 4 8; do
    stamp "gloo $ranks"
    timeout ${GLOO_S:-80} python3 -m noloco.benchmarks outer --ranks $ranks $GLOO --out "$OUT/outer_gloo$ranks.json" \
      >> "$OUT/log.txt" 2>&1 || echo "gloo $ranks exit $?" >> "$OUT/log.txt"
  done
fi

if part tests; then
  start_tests 6 400
fi

if part grid; then
  stamp grid
  timeout ${GRID_S:-330} python3 -m noloco.studies.wide_grid "$RUNS" --seeds $SEEDS --device "$DEVICE" \
    --jobs ${JOBS:-6} $GRID >> "$OUT/grid.txt" 2>&1 || echo "grid exit $?" >> "$OUT/log.txt"
  grep -c '^done' "$OUT/grid.txt" >> "$OUT/log.txt"
fi

wait_tests
stamp pack
tar -czf "$OUT/runs_wide.tar.gz" -C "$RUNS" --exclude='*.pt' . 2>> "$OUT/log.txt"
stamp done
