"""Size naive_trap from its two pilot cells (README, "Pilots"): the submission rate's
variance components at the pilots' last evaluation, and the minimum detectable
difference (80% power, two-sided 5%) of the grid's design, 5 seeds per arm on 136
held-out questions, with the seed variance pooled over its three arms.

    PYTHONPATH=. python experiments/naive_trap/sizing.py [PILOT_DIR ...]   # default: pilots/*

A pilot has one arm, so the question x arm variance of a difference (tau2) is not
estimable from it: the MDE is given at tau2 = 0 and at tau2 = the pilots' question
variance (a question that every arm answers alike contributes nothing; one that the
arms treat independently contributes its full variance).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from analysis.collect import read_jsonl
from analysis.stats import components, planned_mde

HERE = Path(__file__).resolve().parent
SEEDS, QUESTIONS, ARMS = 5, 136, 3


def per_question(run: Path, step: int | None = None) -> tuple[int, dict]:
    """(step, {task_id: mean of `answered` over the samples}) at `step` (default: last)."""
    rows, _ = read_jsonl(run / "eval.jsonl", required=("step", "task_id", "answered"))
    rows = [r for r in rows if r.get("decoding", "sampled") == "sampled"]
    step = max(r["step"] for r in rows) if step is None else step
    out: dict = {}
    for r in rows:
        if r["step"] == step:
            out.setdefault(r["task_id"], []).append(float(r["answered"]))
    return step, {q: float(np.mean(v)) for q, v in out.items()}


def sizing(runs: list[Path]) -> dict:
    steps, means = zip(*(per_question(r) for r in runs))
    qs = sorted(set.intersection(*(set(m) for m in means)))
    y = np.array([[m[q] for m in means] for q in qs])          # (Q, S)
    comps = components(y)
    out = {"step": max(steps), "questions": len(qs), "seed_means": y.mean(axis=0).tolist(),
           **comps}
    for label, tau2 in (("mde_tau0", 0.0), ("mde_tau_question", comps["sigma2_question"])):
        out[label] = planned_mde(SEEDS, QUESTIONS, {**comps, "tau2": tau2,
                                                    "pool_cells": ARMS})
    return out


def main(argv: list[str]) -> None:
    runs = [Path(a) for a in argv] or sorted(p for p in (HERE / "pilots").iterdir()
                                             if (p / "eval.jsonl").is_file())
    print(json.dumps(sizing(runs), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
