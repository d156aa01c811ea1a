#!/usr/bin/env bash
# GPU run 2: smoke stages (tiny, 4B LoRA cell, 30B-A3B-shaped MoE LoRA cell) and the
# learner benchmark at Qwen3-4B shape (LoRA r16 16k beside prime-rl's row; full FT 4k)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /tmp/install.log 2>&1 || { cat /tmp/install.log; exit 1; }
export PYTHONPATH=$PWD:/tmp/site SMOKE_OUT=/tmp/smoke
pack() { tar czf $OUT/smoke.tgz -C /tmp/smoke --exclude=models --exclude=ckpt . 2>/dev/null; }
T0=$(date +%s); el() { echo "[+$(( $(date +%s) - T0 ))s]"; }
SMOKE_STAGES=tiny benchmarks/gpu_smoke.sh > $OUT/smoke_tiny.txt 2>&1; pack; el; tail -5 $OUT/smoke_tiny.txt
el; timeout -s USR1 -k 10 130 python3 -X faulthandler benchmarks/bench_learner_gpu.py --seq 16384 --lora-rank 16 --steps 2 --json $OUT/bench_lora16k.json > $OUT/bench_lora16k.txt 2>&1; echo rc=$?; tail -6 $OUT/bench_lora16k.txt
el; SMOKE_STAGES=q4b_lora benchmarks/gpu_smoke.sh > $OUT/smoke_q4b.txt 2>&1; pack; tail -8 $OUT/smoke_q4b.txt
el; SMOKE_STAGES=moe_lora SMOKE_TIMEOUT_MOE_LORA=80 benchmarks/gpu_smoke.sh > $OUT/smoke_moe.txt 2>&1; pack; tail -8 $OUT/smoke_moe.txt
el; timeout -s USR1 -k 10 70 python3 -X faulthandler benchmarks/bench_learner_gpu.py --seq 4096 --lora-rank 0 --steps 2 --json $OUT/bench_full4k.json > $OUT/bench_full4k.txt 2>&1; echo rc=$?; tail -4 $OUT/bench_full4k.txt
el
