"""Size reward_resolution before it runs, from the testbed's committed cells at the same
setting (experiments/testbed/data/round4/seed0-2, round5/seed3-4: outcome/GRPO, 4 x 8,
lr 1e-4, two epochs; questions 64-199 of gen_seed 0 x 2 samples): the variance
components of per-question accuracy at step 16, and the minimum detectable difference
(80% power, two-sided) of this design for S seeds per arm on 200 held-out questions,
seed variance pooled over the two arms, at the Pocock level of each look.

    PYTHONPATH=. python experiments/reward_resolution/sizing.py

These cells are another task set (gen_seed 0) and one arm: the grid's own pooled
variance, at the interim look and at the end, is what the report uses.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from analysis import estimates as est
from analysis.collect import Run
from analysis.stats import components, planned_mde, pocock_nominal

HERE = Path(__file__).resolve().parent
TESTBED = HERE.parent / "testbed" / "data"
CELLS = ["round4/seed0", "round4/seed1", "round4/seed2", "round5/seed3", "round5/seed4"]
STEP, QUESTIONS, ARMS, LOOKS = 16, 200, 2, 2


def per_question(run_dir: Path, step: int) -> dict:
    """{task_id: mean `correct` over the sampled rows at `step`}
    (analysis.estimates.per_question, as the report averages them)."""
    run = Run(run_dir, {}, None, True, run_dir / "config.yaml")
    ids, means, *_ = est.per_question(run, step, {"correct": ("correct", float)},
                                      required=("correct",))
    return {q: float(m) for q, m in zip(ids, means["correct"])}


def sizing() -> dict:
    means = [per_question(TESTBED / c, STEP) for c in CELLS]
    qs = sorted(set.intersection(*(set(m) for m in means)))
    comps = components(np.array([[m[q] for m in means] for q in qs]))
    alpha = pocock_nominal(LOOKS, 0.05)
    out = {"step": STEP, "testbed_questions": len(qs), "pocock_nominal_alpha": alpha,
           "seed_means": [float(np.mean(list(m.values()))) for m in means], **comps}
    for tau_label, tau2 in (("tau0", 0.0), ("tau_question", comps["sigma2_question"])):
        c = {**comps, "tau2": tau2, "pool_cells": ARMS}
        out[f"mde_{tau_label}"] = {S: round(planned_mde(S, QUESTIONS, c, alpha), 4)
                                   for S in (5, 10)}
    return out


if __name__ == "__main__":
    print(json.dumps(sizing(), indent=2))
