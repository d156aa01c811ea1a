"""Size smollm_reasoning_gym before it runs, from its two GRPO pilots (pilots/: seeds 100
and 101, test questions 200-399 of the same task set, greedy, steps 0-30; exported with
analysis.export): the variance components of the per-question change in greedy accuracy
from step 0 to step 30 and of the step-30 accuracy, and the minimum detectable effects
(80% power, two-sided 5%) of this design for S seeds per arm on 200 held-out questions:

- the change of one arm (its gain over the warm start, paired by question);
- the difference between the two arms at step 30 (seed variance pooled over the arms).

The pilots give the seed variance 1 df, so each MDE is also given at the upper 80%
confidence bound of the seed variance (s^2 x 1 / chi^2_{0.2, 1}; a planning bound as in
Browne 1995, Stat. Med. 14:1933).

    PYTHONPATH=. python experiments/smollm_reasoning_gym/sizing.py
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from scipy import stats

from analysis import estimates as est
from analysis.collect import Run
from analysis.stats import components, mde, planned_mde

HERE = Path(__file__).resolve().parent
PILOTS = ["seed100", "seed101"]
STEP, QUESTIONS, ARMS, SEEDS = 30, 200, 2, (4, 6, 8)


def per_question(run_dir: Path, step: int) -> dict:
    """{task_id: mean `correct` at `step`} (analysis.estimates.per_question)."""
    run = Run(run_dir, {}, None, True, run_dir / "config.yaml")
    ids, means, *_ = est.per_question(run, step, {"correct": ("correct", float)},
                                      required=("correct",))
    return {q: float(m) for q, m in zip(ids, means["correct"])}


def matrix(step: int, base: int | None = None) -> np.ndarray:
    """(questions, pilots) of accuracy at `step`, minus that at `base` when given."""
    at = [per_question(HERE / "pilots" / p, step) for p in PILOTS]
    qs = sorted(set.intersection(*(set(m) for m in at)))
    y = np.array([[m[q] for m in at] for q in qs])
    return y if base is None else y - matrix(base)


def change_mde(S: int, comps: dict, s2_seed: float) -> float:
    # Var of a cell's mean change over S seeds x Q questions (two-way random effects):
    # s2_seed / S + s2_question / Q + s2_resid / (S Q); df S - 1 (the seed term's)
    var = s2_seed / S + comps["sigma2_question"] / QUESTIONS + \
        comps["sigma2_resid"] / (S * QUESTIONS)
    return float(mde(math.sqrt(var), S - 1))


def sizing() -> dict:
    y0, y30, dy = matrix(0), matrix(STEP), matrix(STEP, 0)
    c_change, c_end = components(dy), components(y30)
    up = 1.0 / stats.chi2.ppf(0.2, 1)      # upper 80% bound factor of a 1-df variance
    out = {"step": STEP, "pilot_questions": int(dy.shape[0]),
           "warm_start": float(y0.mean()), "pilot_step30": y30.mean(axis=0).tolist(),
           "pilot_change": dy.mean(axis=0).tolist(),
           "change_components": c_change, "step30_components": c_end,
           "seed_variance_upper80_factor": up}
    for label, f in (("estimate", 1.0), ("upper80", up)):
        out[f"mde_change_{label}"] = {S: round(change_mde(S, c_change, f * c_change[
            "sigma2_seed"]), 4) for S in SEEDS}
        for tau_label, tau2 in (("tau0", 0.0), ("tau_question", c_end["sigma2_question"])):
            c = {**c_end, "sigma2_seed": f * c_end["sigma2_seed"], "tau2": tau2,
                 "pool_cells": ARMS}
            out[f"mde_arms_{tau_label}_{label}"] = {
                S: round(planned_mde(S, QUESTIONS, c), 4) for S in SEEDS}
    return out


if __name__ == "__main__":
    print(json.dumps(sizing(), indent=2))
