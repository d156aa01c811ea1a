#!/usr/bin/env bash
# GPU smoke test: a 2-step tiny-model cell, then (given a local Qwen3 directory) a 2-step
# Qwen3 cell on ONE GPU; prints step time, tokens/s and peak GPU memory per cell.
#
#   benchmarks/gpu_smoke.sh                      # tiny cell only
#   benchmarks/gpu_smoke.sh /models/Qwen3-4B-Instruct-2507 [extra overrides...]
#   SMOKE_DEVICE=cpu benchmarks/gpu_smoke.sh     # the same script on CPU (no GPU needed)
#   SMOKE_SAMPLER=vllm benchmarks/gpu_smoke.sh /models/Qwen3-4B-Instruct-2507
#
# Each cell runs in-process (ablate.loop.cell.run_cell) so that torch's peak allocation of the
# learner and the HF sampler can be read afterwards; with sampler=vllm the engine lives in
# its own process, so the whole-GPU peak is also sampled from nvidia-smi. See docs/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" WANDB_MODE="${WANDB_MODE:-disabled}"
DEVICE="${SMOKE_DEVICE:-cuda}"
SAMPLER="${SMOKE_SAMPLER:-hf}"
OUT="${SMOKE_OUT:-outputs/gpu_smoke/$(date +%Y%m%d-%H%M%S)}"
QWEN="${1:-}"
[ $# -gt 0 ] && shift
mkdir -p "$OUT"

if [ "$DEVICE" = cuda ]; then
  python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "gpu_smoke: torch sees no CUDA device (torch.cuda.is_available() is False);" \
         "install a CUDA build of torch==2.13.0, or run with SMOKE_DEVICE=cpu" >&2; exit 1; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi

cell() {   # cell NAME OVERRIDES...
  local name="$1"; shift
  local smi_pid=""
  if [ "$DEVICE" = cuda ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 \
      > "$OUT/$name.smi" 2>/dev/null & smi_pid=$!
  fi
  python - "$OUT/$name" "$DEVICE" "$@" <<'PY'
import json, sys, time
import torch
from ablate.apps.cli import compose_config
from ablate.loop.cell import run_cell
from ablate.loop.config import validate
out, device, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]
cfg = compose_config([f"run.device={device}", "run.quiet=true", *overrides])
validate(cfg)
t0 = time.time()
run_cell(cfg, out)
rows = [json.loads(l) for l in open(f"{out}/metrics.jsonl") if l.strip()]
for r in rows:
    gen_tps = r["generated_tokens"] / max(r["rollout_s"], 1e-9)
    print(f"  step {r['step']}: step_s={r['step_s']:.1f} rollout_s={r['rollout_s']:.1f} "
          f"update_s={r['update_s']:.1f} generated_tokens/s={gen_tps:.1f} "
          f"learner_tokens/s={r.get('update/tokens_per_s', float('nan')):.1f}")
peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
print(f"  cell wall {time.time() - t0:.1f}s; torch peak allocated {peak:.2f} GiB")
PY
  if [ -n "$smi_pid" ]; then
    kill "$smi_pid" 2>/dev/null || true
    echo "  nvidia-smi peak used $(sort -n "$OUT/$name.smi" | tail -1) MiB (all processes)"
  fi
}

STEPS=(trainer.max_steps=2 trainer.tasks_per_step=2 trainer.group_size=2 eval.every=2
       eval.num_tasks=4 run.num_trajectories=2)
echo "== tiny model, sampler=hf, learner=deepspeed (ZeRO-3), device=$DEVICE"
cell tiny "${STEPS[@]}" env.num_inboxes=6 env.emails_per_inbox=40 env.train_tasks=40 \
  env.test_tasks=16 harness.max_tokens_per_episode=256 env.max_turns=4

if [ -n "$QWEN" ]; then
  echo "== Qwen3 from $QWEN, sampler=$SAMPLER, learner=deepspeed (ZeRO-3, bf16, LoRA)"
  cell qwen3 "${STEPS[@]}" model=qwen3_4b "model.path=$QWEN" "sampler=$SAMPLER" \
    learner.dtype=bfloat16 learner.lora.enable=true harness.max_new_tokens_per_turn=256 \
    harness.max_tokens_per_episode=1024 env.max_turns=6 "$@"
fi
echo "gpu_smoke: outputs in $OUT"
