"""The memory plan against measured GPU peaks (issue 61 item 3): every row of
benchmarks/results/memory_measured.json names a measured file (torch's peak allocated and
reserved memory of a run), the shape and the learner settings it ran with; the plan of
the same shape must agree within 15% on both, and the table's own columns must be what
the plan gives today (regenerate: python tests/models/test_memory_measured.py).

The rows: ablate's learner benchmark (benchmarks/bench_learner_gpu.py) on one H200, ZeRO-3
at world size 1, no sampler on the device (sampler=vllm_server puts nothing there), and
the tiny smoke cell of the same run (benchmarks/gpu_smoke.sh: learner and HF sampler on
the GPU; torch's peak allocated only), whose peak is ZeRO-3's fp32 gradient bucket (5e8
x 4 B) more than anything the cell forwards. The Qwen smoke cells are not rows: the plan
sizes a micro-batch at learner.micro_batch_tokens, and those cells forward ~1.4k tokens a
step."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "benchmarks/results/memory_measured.json"
GIB = 2 ** 30
TOLERANCE = 0.15   # issue 61 item 3: plan and measurement within 15%
# benchmarks/results/gpu_h200_2026-12-04/gpu.txt: NVIDIA H200, 143771 MiB
H200_BYTES = 143771 * 2 ** 20
# benchmarks/bench_learner_gpu.py build_learner: the learner settings of every row
BENCH = ["sampler=vllm_server", "learner=deepspeed", "learner.dtype=bfloat16",
         "learner.shared_prefix=false", "learner.checkpoint_every=0", "run.device=cuda"]
# benchmarks/gpu_smoke.sh COMMON: the settings of every smoke stage (STEPS=2)
SMOKE = ["trainer.max_steps=2", "trainer.tasks_per_step=2", "trainer.group_size=2",
         "eval.every=2", "eval.at_start=false", "eval.num_tasks=4", "eval.samples=1",
         "eval.greedy=false", "run.num_trajectories=2", "env.num_inboxes=6",
         "env.emails_per_inbox=40", "env.train_tasks=40", "env.test_tasks=16",
         "env.max_turns=3", "harness.max_new_tokens_per_turn=64",
         "harness.max_tokens_per_episode=256", "learner.checkpoint_every=0",
         "learner.keep_checkpoints=1", "run.device=cuda"]
ROWS = [
    {"name": "Qwen3-4B full fine-tune, 4k, recompute",
     "measured": "benchmarks/results/gpu_h200_2026-12-04/run2/bench_full4k.json",
     "overrides": BENCH + ["learner.micro_batch_tokens=4096",
                           "learner.activation_checkpointing=true",
                           "learner.lora.enable=false"]},
    {"name": "Qwen3-4B LoRA r16, 16k, recompute",
     "measured": "benchmarks/results/gpu_h200_2026-12-04/run2/bench_lora16k.json",
     "overrides": BENCH + ["learner.micro_batch_tokens=16384",
                           "learner.activation_checkpointing=true",
                           "learner.lora.enable=true", "learner.lora.rank=16",
                           "learner.lora.alpha=32"]},
    {"name": "tiny cell, DeepSpeed fp32 + HF sampler (smoke stage tiny)",
     "measured": "benchmarks/results/gpu_h200_2026-12-04/run2/tiny.json",
     "model": "tiny", "overrides": SMOKE},
]


def planned(row: dict, model_dir: str) -> dict:
    from ablate.apps.cli import compose_config
    from ablate.apps.memory_plan import memory_plan
    model = (["model=qwen3_4b", f"model.path={model_dir}"] if row.get("model") != "tiny"
             else [])
    cfg = compose_config([*model, *row["overrides"]])
    plan = memory_plan(cfg, world_size=1, device_bytes=H200_BYTES, suggest=False)
    return {"plan_allocated_gib": round(plan.peak / GIB, 2),
            "plan_reserved_gib": round(plan.reserved / GIB, 2),
            "plan_peak_phase": plan.peak_phase,
            "plan_terms_gb": {k: round(v, 3) for k, v in plan.as_dict()["terms"].items()}}


def measured(row: dict) -> dict:
    data = json.loads((ROOT / row["measured"]).read_text())
    if "rows" not in data:          # a smoke stage (benchmarks/gpu_smoke.sh summary)
        return {"device": "NVIDIA H200", "shape": data["stage"], "seq": None,
                "mode": "cell", "micro_batches": None,
                "measured_allocated_gib": data["torch_peak_gib"],
                "measured_reserved_gib": None}
    (run,) = data["rows"]
    return {"device": data["device"], "shape": run["shape"], "seq": run["seq"],
            "mode": run["mode"], "micro_batches": run["micro_batches"],
            "measured_allocated_gib": run["peak_allocated_gib"],
            "measured_reserved_gib": run["peak_reserved_gib"]}


def build(model_dir: str) -> list[dict]:
    out = []
    for row in ROWS:
        r = {**row, **measured(row), **planned(row, model_dir)}
        for kind in ("allocated", "reserved"):
            m, p = r[f"measured_{kind}_gib"], r[f"plan_{kind}_gib"]
            r[f"{kind}_error"] = None if m is None else round((p - m) / m, 3)
        out.append(r)
    return out


def write_model(path: Path) -> str:
    from ablate.models import shapes
    shapes.paper_config("qwen3_4b").save_pretrained(str(path))   # vocabulary 151936
    return str(path)


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return build(write_model(tmp_path_factory.mktemp("q4b")))


def test_the_plan_is_within_15_percent_of_every_measured_row(rows):
    assert len(rows) == len(ROWS) == 3
    for r in rows:
        for kind in ("allocated", "reserved"):
            if r[f"measured_{kind}_gib"] is not None:
                assert abs(r[f"{kind}_error"]) <= TOLERANCE, (r["name"], kind, r)
    assert sum(r["measured_reserved_gib"] is not None for r in rows) == 2


def test_the_committed_table_is_todays_plan(rows):
    table = json.loads(TABLE.read_text())["rows"]
    assert [t["name"] for t in table] == [r["name"] for r in rows]
    for t, r in zip(table, rows):
        for key in ("measured_allocated_gib", "measured_reserved_gib", "plan_allocated_gib",
                    "plan_reserved_gib", "plan_peak_phase", "device"):
            assert t[key] == r[key], (t["name"], key, t[key], r[key])


def test_the_step_and_the_allocator_are_what_the_full_row_needed(rows):
    """Without the optimizer step's temporaries (8 GB at a 1e9-element sub-group) the
    full fine-tune's plan was 71.1 GiB against 75.95 measured, and without the slack its
    reserved figure was the allocated one, 20% under the 95.19 measured."""
    full, tiny = rows[0], rows[2]
    # the tiny cell's peak is the fp32 gradient bucket: 2.31 GiB measured for 4.4M params
    assert tiny["plan_terms_gb"]["gradient bucket"] == 2.0
    assert full["plan_peak_phase"] == "step"
    assert full["plan_terms_gb"]["optimizer step"] == 8.0
    assert full["plan_reserved_gib"] - full["plan_allocated_gib"] > 9


if __name__ == "__main__":      # regenerate the committed table
    import tempfile
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as d:
        TABLE.write_text(json.dumps({
            "about": "torch's peak allocated / reserved memory of GPU runs beside the memory "
                     "plan's prediction for the same shape (ablate/apps/memory_plan.py); "
                     "tests/models/test_memory_measured.py checks them within 15%",
            "rows": build(write_model(Path(d) / "q4b"))}, indent=1) + "\n")
    print(TABLE.read_text())
