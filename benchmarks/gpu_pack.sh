#!/usr/bin/env bash
# Issue 62 on ONE GPU, no weights, no network: the joint update of N LoRA cells over one
# Qwen3-4B-shape base (random float32 weights, --layers of its 36) against their updates
# one after another (benchmarks/bench_joint_update.py), at a cell's update shape (a
# 628-token prompt prefix, 2 rows of 200 more). Each N runs under its own timeout and
# writes its row as it goes; the JSON lands in $OUT (default outputs/gpu_pack/<time>).
#
#   benchmarks/gpu_pack.sh                 # N = 1 2 4 8, 4 layers
#   GPU_PACK_LAYERS=8 GPU_PACK_N="8" benchmarks/gpu_pack.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-outputs/gpu_pack/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
PY="${GPU_PACK_PYTHON:-python3}"
LAYERS="${GPU_PACK_LAYERS:-4}"
for n in ${GPU_PACK_N:-1 2 4 8}; do
  echo "== joint update, N=$n, $LAYERS layers" | tee -a "$OUT/gpu_pack.log"
  timeout --signal=USR1 "${GPU_PACK_TIMEOUT:-150}" "$PY" benchmarks/bench_joint_update.py \
    --model qwen3_4b --layers "$LAYERS" --device cuda --n "$n" --repeats 3 \
    --out "$OUT/joint_update_n$n.json" >> "$OUT/gpu_pack.log" 2>&1 \
    || echo "== N=$n FAILED (exit $?)" | tee -a "$OUT/gpu_pack.log"
done
tail -n 20 "$OUT/gpu_pack.log"
