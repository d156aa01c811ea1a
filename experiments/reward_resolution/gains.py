"""Secondary, descriptive (README, "Endpoint and hypotheses"): each arm's gain in held-out
accuracy over the warm start, evaluated once (warm_start/: questions 0-199 of gen_seed 2
x 8 samples). Per seed: the mean over questions of (the cell's step-16 accuracy on the
question - the warm start's), the same questions; per arm: the mean of those seed gains
with a t interval over seeds at the analysis's alpha. The warm start is a fixed reference
here: its own question-sampling error (its interval, printed) is common to both arms and
cancels in the primary comparison, not in a gain.

    PYTHONPATH=. python experiments/reward_resolution/gains.py [RUNS_DIR]   # default: results/runs
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import yaml
from scipy import stats as sps

from analysis import estimates as est
from analysis.collect import Run, parse_assignments

HERE = Path(__file__).resolve().parent


def per_question(run_dir: Path) -> dict:
    """{task_id: mean `correct` of the sampled rows at the run's last step}
    (analysis.estimates.per_question, as the report averages them)."""
    run = Run(run_dir, {}, None, True, run_dir / "config.yaml")
    ids, means, *_ = est.per_question(run, est.select_step(run, None),
                                      {"correct": ("correct", float)}, required=("correct",))
    return {q: float(m) for q, m in zip(ids, means["correct"])}


def t_interval(x: np.ndarray, alpha: float) -> list[float]:
    half = sps.t.ppf(1 - alpha / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return [float(x.mean() - half), float(x.mean() + half)]


def gains(runs: Path, warm_dir: Path, alpha: float) -> dict:
    warm = per_question(warm_dir)
    w = np.array(list(warm.values()))
    out = {"warm_start": {"accuracy": float(w.mean()), "questions": len(w),
                          "ci_over_questions": t_interval(w, alpha)}, "arms": {}}
    for run in sorted(p for p in runs.iterdir() if (p / "eval.jsonl").is_file()):
        arm = parse_assignments(run.name)
        cell = per_question(run)
        g = float(np.mean([cell[q] - warm[q] for q in cell]))
        out["arms"].setdefault(arm["+reward"], {})[arm["seed"]] = g
    for name, seeds in out["arms"].items():
        x = np.array(list(seeds.values()))
        out["arms"][name] = {"seed_gains": seeds, "mean": float(x.mean()),
                             "ci_over_seeds": t_interval(x, alpha)}
    return out


def main(argv: list[str]) -> None:
    runs = Path(argv[0]) if argv else HERE / "results" / "runs"
    alpha = yaml.safe_load((HERE / "analysis.yaml").read_text())["alpha"]
    print(json.dumps(gains(runs, HERE / "warm_start", alpha), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
