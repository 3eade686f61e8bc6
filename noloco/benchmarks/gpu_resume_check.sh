#!/usr/bin/env bash
# Resume on a GPU: a cpu-tiny noloco run stopped at outer step 3 and resumed, against the same run
# uninterrupted, on --device cuda (DEVICE=cpu to try it here). Prints the exit codes and, per evaluation,
# the validation loss and weight_std of both (on CUDA equal to about 1e-7: its kernels are not deterministic).
set -u
D=${RUNS:-/tmp/noloco-resume-check}; rm -rf "$D"; mkdir -p "$D"
A="--preset cpu-tiny --device ${DEVICE:-cuda} --method noloco --outer-steps 6"
python3 -m noloco llm train $A --out "$D/whole" > "$D/whole.txt" 2>&1; echo "whole exit $?"
python3 -m noloco llm train $A --out "$D/split" --stop-after 3 > "$D/split1.txt" 2>&1; echo "stop exit $?"
python3 -m noloco llm train $A --out "$D/split" --resume > "$D/split2.txt" 2>&1; echo "resume exit $?"
tail -2 "$D/split2.txt"
python3 - "$D" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f"{sys.argv[1]}/{run}/metrics.jsonl")] for run in ("whole", "split"))
keys = ("val_loss_avg_model", "weight_std", "train_loss")
print("rows", len(a), len(b), "identical:", len(a) == len(b) and all(x.get(k) == y.get(k) for x, y in zip(a, b) for k in keys))
for x, y in zip(a, b):
    print([(x.get(k), y.get(k)) for k in keys[:2]])
PY
