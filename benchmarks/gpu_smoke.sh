#!/usr/bin/env bash
# GPU smoke test in stages, on ONE GPU, with no weights and no network: each stage is a
# short cell (ablate.loop.cell.run_cell, in-process) on the synthetic mailbox.
#
#   tiny      the shipped tiny model (ablate/models/assets/tiny)
#   q4b_lora  random-weight Qwen3-4B shape, LoRA r16           (ablate/models/shapes.py)
#   moe_lora  random-weight Qwen3-30B-A3B shape cut to SMOKE_MOE_LAYERS layers, LoRA r16
#   q4b_full  random-weight Qwen3-4B shape, full fine-tune, SMOKE_FULL_LAYERS layers
#
# The Qwen shapes carry the tiny model's tokenizer (vocabulary 6577 instead of 151936),
# so the cell runs them on the synthetic mailbox; their transformer layers are the
# paper's. Per stage it prints step/rollout/update seconds, generated and learner
# tokens/s, MFU (learner; 989 TFLOP/s bf16 dense, H100/H200 SXM), torch's and
# nvidia-smi's peak memory, checkpoint bytes and seconds; a summary table at the end.
# A stage that fails or hangs does not stop the next: each runs under
# `timeout --signal=USR1` (Python dumps every thread's stack on USR1, faulthandler) and
# its own faulthandler.dump_traceback_later a little earlier; its log is written as it
# goes ($OUT/<stage>.log).
#
#   benchmarks/gpu_smoke.sh                                 # all stages, cuda
#   SMOKE_STAGES="tiny q4b_lora" benchmarks/gpu_smoke.sh    # some stages
#   SMOKE_DEVICE=cpu SMOKE_SHAPE=tiny benchmarks/gpu_smoke.sh run.num_threads=1
#   benchmarks/gpu_smoke.sh sampler.temperature=0.7         # extra overrides: every stage
#
# Environment: SMOKE_OUT (output folder; default outputs/gpu_smoke/<time>), SMOKE_STAGES,
# SMOKE_DEVICE (cuda | cpu), SMOKE_SHAPE (paper | tiny: the Qwen stages at CPU sizes, same
# architecture), SMOKE_SAMPLER (hf | vllm), SMOKE_STEPS (2), SMOKE_MOE_LAYERS (4),
# SMOKE_FULL_LAYERS (18: a 4B full fine-tune's ZeRO-3 checkpoint is ~14 bytes per
# parameter, 56 GB at 36 layers; 18 layers keep it near 30 GB), SMOKE_TIMEOUT_<STAGE>
# (seconds), SMOKE_PYTHON (python3), SMOKE_KEEP=1 (keep checkpoints and the random model
# folders). See docs/gpu.md.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" WANDB_MODE="${WANDB_MODE:-disabled}"
export PYTHONUNBUFFERED=1
PY="${SMOKE_PYTHON:-python3}"
DEVICE="${SMOKE_DEVICE:-cuda}"
SHAPE="${SMOKE_SHAPE:-paper}"
SAMPLER="${SMOKE_SAMPLER:-hf}"
STEPS="${SMOKE_STEPS:-2}"
STAGES="${SMOKE_STAGES:-tiny q4b_lora moe_lora q4b_full}"
OUT="${SMOKE_OUT:-outputs/gpu_smoke/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
T_START=$(date +%s)

if [ "$DEVICE" = cuda ]; then
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "gpu_smoke: torch sees no CUDA device (torch.cuda.is_available() is False);" \
         "install a CUDA build of torch, or run with SMOKE_DEVICE=cpu" >&2; exit 1; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    | tee "$OUT/gpu.txt"
fi

# default per-stage limits (seconds) on an H200; typical runs take well under them
declare -A LIMIT=([tiny]=60 [q4b_lora]=120 [moe_lora]=90 [q4b_full]=120)
COMMON=(trainer.max_steps="$STEPS" trainer.tasks_per_step=2 trainer.group_size=2
        eval.every="$STEPS" eval.at_start=false eval.num_tasks=4 eval.samples=1
        eval.greedy=false run.num_trajectories=2 env.num_inboxes=6 env.emails_per_inbox=40
        env.train_tasks=40 env.test_tasks=16 env.max_turns=3
        harness.max_new_tokens_per_turn=64 harness.max_tokens_per_episode=256
        learner.checkpoint_every=0 learner.keep_checkpoints=1)
QWEN=(learner.dtype=bfloat16 "sampler=$SAMPLER")
LORA=(learner.lora.enable=true learner.lora.rank=16 learner.lora.alpha=32)

# one stage: python $OUT/stage.py NAME LIMIT MODEL_SPEC OVERRIDES... (a file, so that
# `timeout` signals python itself)
cat > "$OUT/stage.py" <<'PY'
import faulthandler, json, os, shutil, signal, sys, time
from pathlib import Path
faulthandler.enable()
faulthandler.register(signal.SIGUSR1, all_threads=True)   # `timeout --signal=USR1`
name, limit, spec, overrides = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
faulthandler.dump_traceback_later(max(limit - 15, 5), exit=True)
import torch
from ablate.apps.cli import compose_config
from ablate.learners.base import Learner
from ablate.loop.cell import run_cell
from ablate.loop.config import validate
from ablate.models import shapes
out, device = Path(os.environ["SMOKE_OUT_DIR"]), os.environ["SMOKE_DEVICE_"]
cell, res = out / name, {"stage": name}

def build_model(spec):
    """spec 'SHAPE:SCALE:LAYERS' -> a random-weight model folder (reused if present)."""
    shape, scale, layers = spec.split(":")
    path = out / "models" / f"{shape}-{scale}-L{layers or 'all'}"
    if not (path / "shape_info.json").is_file():
        t = time.time()
        shapes.write_random_model(path, shape, scale=scale,
                                  num_layers=int(layers) if layers else None,
                                  device=device if device.startswith("cuda") else "cpu")
        res["build_s"] = round(time.time() - t, 1)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()   # the build's copy, before the cell's peak is read
    return path

saves = []
_save = Learner.save
def timed_save(self, *a, **kw):   # checkpoint seconds; the learner's trainable size
    t = time.time()
    _save(self, *a, **kw)
    saves.append(time.time() - t)
    res["trainable_params"] = sum(getattr(p, "ds_numel", p.numel())
                                  for p in self.model.parameters() if p.requires_grad)
Learner.save = timed_save

if spec != "tiny":
    overrides = [f"model.path={build_model(spec)}", *overrides]
cfg = compose_config([f"run.device={device}", "run.quiet=true", *overrides])
validate(cfg)
if device.startswith("cuda"):
    torch.cuda.reset_peak_memory_stats()
t0 = time.time()
run_cell(cfg, str(cell))
res["cell_s"] = round(time.time() - t0, 1)
rows = [json.loads(l) for l in open(cell / "metrics.jsonl") if l.strip()]
from transformers import AutoConfig
from ablate.models.tiny import tiny_path
mcfg = AutoConfig.from_pretrained(str(cfg.model.path or tiny_path()))
lora = res.get("trainable_params", 0) if cfg.learner.lora.enable else 0
for r in rows:
    seq = r["update/tokens"] / max(r["episodes"], 1)   # mean segment length (approx.)
    r["gen_tps"] = r["generated_tokens"] / max(r["rollout_s"], 1e-9)
    r["mfu"] = shapes.mfu(r["update/tokens_per_s"],
                          shapes.train_flops_per_token(mcfg, int(seq), lora))
    print(f"  step {r['step']}: step_s={r['step_s']:.1f} rollout_s={r['rollout_s']:.1f} "
          f"update_s={r['update_s']:.1f} generated_tokens/s={r['gen_tps']:.1f} "
          f"learner_tokens/s={r['update/tokens_per_s']:.1f} learner_tokens={r['update/tokens']} "
          f"mfu={100 * r['mfu']:.2f}%")
last = rows[-1]
ckpts = sorted((cell / "ckpt").glob("step_*"))
res.update(steps=len(rows), step_s=last["step_s"], rollout_s=last["rollout_s"],
           update_s=last["update_s"], gen_tps=round(last["gen_tps"], 1),
           learner_tps=round(last["update/tokens_per_s"], 1),
           mfu=last["mfu"] if device.startswith("cuda") else None,
           params=shapes.parameter_count(mcfg)["total"],
           ckpt_bytes=sum(f.stat().st_size for f in ckpts[-1].rglob("*") if f.is_file())
           if ckpts else 0, ckpt_s=round(saves[-1], 1) if saves else None,
           torch_peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2)
           if device.startswith("cuda") else None)
print(f"  cell {res['cell_s']}s; torch peak allocated {res['torch_peak_gib']} GiB; "
      f"checkpoint {res['ckpt_bytes'] / 2**30:.2f} GiB in {res['ckpt_s']}s")
(out / f"{name}.json").write_text(json.dumps(res))
if os.environ.get("SMOKE_KEEP") != "1":
    shutil.rmtree(cell / "ckpt", ignore_errors=True)
PY

run_stage() {   # run_stage NAME MODEL_SPEC OVERRIDES...
  local name="$1" spec="$2"; shift 2
  local var="SMOKE_TIMEOUT_${name^^}" smi_pid="" rc
  local limit="${!var:-${LIMIT[$name]}}"
  echo "== stage $name (limit ${limit}s, device=$DEVICE, model $spec)"
  if [ "$DEVICE" = cuda ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 \
      > "$OUT/$name.smi" 2>/dev/null & smi_pid=$!
  fi
  SMOKE_OUT_DIR="$OUT" SMOKE_DEVICE_="$DEVICE" timeout --signal=USR1 --kill-after=20 \
    "$limit" "$PY" "$OUT/stage.py" "$name" "$limit" "$spec" "$@" 2>&1 \
    | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  if [ -n "$smi_pid" ]; then
    kill "$smi_pid" 2>/dev/null; wait "$smi_pid" 2>/dev/null
    echo "  nvidia-smi peak used $(sort -n "$OUT/$name.smi" | tail -1) MiB (all processes)"
  fi
  echo "$rc" > "$OUT/$name.rc"
  [ "$rc" = 0 ] || echo "== stage $name FAILED (exit $rc; 124/137, or 1 after a stack" \
    "dump: timed out); log $OUT/$name.log"
}

MOE_L="${SMOKE_MOE_LAYERS:-4}"; FULL_L="${SMOKE_FULL_LAYERS:-18}"
[ "$SHAPE" = tiny ] && { MOE_L=""; FULL_L=""; }
for s in $STAGES; do
  case "$s" in
    tiny)     run_stage tiny tiny "${COMMON[@]}" "$@" ;;
    q4b_lora) run_stage q4b_lora "qwen3_4b:$SHAPE:" model=qwen3_4b "${QWEN[@]}" \
                "${LORA[@]}" "${COMMON[@]}" "$@" ;;
    moe_lora) run_stage moe_lora "qwen3_30b_a3b:$SHAPE:$MOE_L" model=qwen3_30b_a3b \
                "${QWEN[@]}" "${LORA[@]}" "${COMMON[@]}" "$@" ;;
    q4b_full) run_stage q4b_full "qwen3_4b:$SHAPE:$FULL_L" model=qwen3_4b "${QWEN[@]}" \
                learner.lora.enable=false "${COMMON[@]}" "$@" ;;
    *) echo "gpu_smoke: unknown stage $s (tiny q4b_lora moe_lora q4b_full)" >&2 ;;
  esac
done
[ "${SMOKE_KEEP:-0}" = 1 ] || rm -rf "$OUT/models"

"$PY" - "$OUT" "$STAGES" "$(( $(date +%s) - T_START ))" <<'PY'
import json, sys
from pathlib import Path
out, stages, wall = Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3]
cols = ["stage", "status", "step_s", "rollout_s", "update_s", "gen_tok/s", "lrn_tok/s",
        "MFU", "torch_GiB", "smi_MiB", "ckpt_GiB", "ckpt_s"]
print(f"== summary ({wall}s in all; {out})")
print(" ".join(f"{c:>10}" for c in cols))
for s in stages:
    rc = (out / f"{s}.rc").read_text().strip() if (out / f"{s}.rc").exists() else "-"
    r = json.loads((out / f"{s}.json").read_text()) if (out / f"{s}.json").exists() else {}
    smi = [int(x) for x in (out / f"{s}.smi").read_text().split()] \
        if (out / f"{s}.smi").exists() else []
    f = lambda k, fmt="{:.1f}": "-" if r.get(k) is None else fmt.format(r[k])
    vals = [s, "ok" if rc == "0" else f"rc={rc}", f("step_s"), f("rollout_s"),
            f("update_s"), f("gen_tps", "{:.0f}"), f("learner_tps", "{:.0f}"),
            "-" if r.get("mfu") is None else f"{100 * r['mfu']:.2f}%",
            f("torch_peak_gib", "{:.2f}"), str(max(smi)) if smi else "-",
            "-" if "ckpt_bytes" not in r else f"{r['ckpt_bytes'] / 2**30:.2f}", f("ckpt_s")]
    print(" ".join(f"{v:>10}" for v in vals))
(out / "summary.json").write_text(json.dumps(
    {s: json.loads((out / f"{s}.json").read_text()) for s in stages
     if (out / f"{s}.json").exists()}, indent=1))
PY
echo "gpu_smoke: outputs in $OUT"
