#!/usr/bin/env bash
# GPU run 1: install, sampler probe, the tiny cell (deepspeed and torch learners)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $OUT/install.log 2>&1 || { cat $OUT/install.log; exit 1; }
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import torch, transformers, deepspeed; print(torch.__version__, transformers.__version__, deepspeed.__version__)" 2>&1 | tail -1 | tee -a $OUT/gpu.txt
stage() { local name=$1 t=$2; shift 2; echo "== $name"; local t0=$(date +%s)
  timeout -s USR1 -k 10 $t "$@" > $OUT/$name.log 2>&1; local rc=$?
  echo "   rc=$rc $(( $(date +%s) - t0 ))s"; tail -n 25 $OUT/$name.log | cut -c1-300; }
[ -n "$SKIP_PROBE" ] || stage probe 200 python3 -X faulthandler .gpu/probe.py $OUT
S="trainer.max_steps=2 trainer.tasks_per_step=2 trainer.group_size=4 eval.every=2 eval.num_tasks=8 env.num_inboxes=6 env.emails_per_inbox=40 env.train_tasks=40 env.test_tasks=16 env.max_turns=4"
stage tiny_ds 200 python3 -X faulthandler .gpu/cell.py /tmp/c_ds $S learner=deepspeed
stage tiny_torch 120 python3 -X faulthandler .gpu/cell.py /tmp/c_t $S learner=torch
