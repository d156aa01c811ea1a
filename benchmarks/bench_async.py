"""Asynchronous rollouts: default-cell step time with trainer.max_async_level=1 vs 0.

    python benchmarks/bench_async.py [--levels 0,1] [-- hydra overrides...]

Runs `run_cell` on the composed default config (what `python -m ablate` runs, plus any
overrides after `--`) once per level, in the order given, in one process (the producer of
k > 0 is its own process, one torch thread: on 2 cores learner and sampler get a core
each). Both cells use algo.rollout_correction=decoupled-ppo (required for k > 0; the
synchronous cell gets it too so the objective is the same). Prints, as JSON, per level:
the wall time, the mean step time over steps >= 2 (step 1 of k > 0 includes starting the
producer) and over all steps, the final held-out accuracy with its binomial SE; then the
step-time ratio k/0 (issue 11 target <= 0.65 on 2 cores) and the accuracy difference
with the SE of the difference. On a shared machine the ratio is noisy: run it once on a
quiet machine and quote it with that caveat.
"""
from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def run_level(k: int, overrides: list[str], root: Path) -> dict:
    from ablate.loop.cell import run_cell
    from ablate.apps.cli import compose_config, normalise_overrides

    cfg = compose_config(normalise_overrides(
        ["algo.rollout_correction=decoupled-ppo", "run.quiet=true", *overrides,
         f"trainer.max_async_level={k}"]))
    out = root / f"k{k}"
    t0 = time.time()
    summary = run_cell(cfg, out)
    wall = time.time() - t0
    steps = [r["step_s"] for r in _rows(out / "metrics.jsonl")]
    final = [r for r in _rows(out / "eval.jsonl") if r["step"] == summary["final_step"]]
    acc = sum(r["correct"] for r in final) / max(len(final), 1)
    return {"k": k, "wall_s": wall, "steps": len(steps),
            "step_s_mean_from2": sum(steps[1:]) / max(len(steps) - 1, 1),
            "step_s_mean": sum(steps) / max(len(steps), 1),
            "staleness": [r.get("async/staleness") for r in _rows(out / "metrics.jsonl")],
            "accuracy": acc, "accuracy_se": math.sqrt(acc * (1 - acc) / max(len(final), 1)),
            "eval_rows": len(final)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="0,1")
    ap.add_argument("--keep", type=Path, help="keep the cells in this folder (default: a "
                    "temporary one) to read their per-step timings afterwards")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        results = {k: run_level(k, args.overrides, root) for k in levels}
    report = {"levels": list(results.values()), "overrides": args.overrides}
    if 0 in results:
        base = results[0]
        for k, r in results.items():
            if k == 0:
                continue
            report[f"step_ratio_k{k}_vs_k0"] = r["step_s_mean_from2"] / base["step_s_mean_from2"]
            report[f"wall_ratio_k{k}_vs_k0"] = r["wall_s"] / base["wall_s"]
            report[f"accuracy_diff_k{k}_minus_k0"] = r["accuracy"] - base["accuracy"]
            report[f"accuracy_diff_se_k{k}"] = math.hypot(r["accuracy_se"], base["accuracy_se"])
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
