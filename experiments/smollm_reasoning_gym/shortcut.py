"""Where the accuracy is: held-out accuracy split by whether the answer equals the last
term shown ("repeat" questions: a sequence that has reached a fixed point, e.g. halving
down to 0, where copying the last term is right) or not ("other": the rule must be
applied). Copying the last term is a shortcut that scores on repeat questions only, so
a gain confined to them is the shortcut, not the rule.

The questions are regenerated from each run's own config (reasoning-gym is
deterministic in its seed) and joined to eval.jsonl by task id; per (arm, step): mean
accuracy over the seeds of each class, with the number of questions in it.

    PYTHONPATH=. python experiments/smollm_reasoning_gym/shortcut.py [RUNS_DIR ...]

(default: results/runs, then pilots/).
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from omegaconf import OmegaConf

from ablate.envs.reasoning_gym.env import ReasoningGymEnv
from analysis.collect import find_run_dirs

HERE = Path(__file__).resolve().parent


def classes(cfg) -> dict:
    """{test task id: "repeat" | "other"} of the run's test split."""
    env = ReasoningGymEnv.from_config(cfg.env)
    out = {}
    for t in env.tasks("test"):
        shown = t.payload["question"].split("?")[0].rstrip(", ").split(",")
        out[t.id] = "repeat" if shown[-1].strip() == str(t.answer).strip() else "other"
    return out


def split(runs_dir: Path) -> dict:
    """{arm: {step: {class: [accuracy, questions]}}}, accuracy averaged over seeds."""
    acc = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    cache = {}
    for run, cfg_file in find_run_dirs(runs_dir):
        cfg = OmegaConf.load(cfg_file)
        key = json.dumps(OmegaConf.to_container(cfg.env), sort_keys=True)
        if key not in cache:
            cache[key] = classes(cfg)
        kind = cache[key]
        per = defaultdict(lambda: defaultdict(list))
        for line in (run / "eval.jsonl").open():
            r = json.loads(line)
            per[r["step"]][kind[r["task_id"]]].append(float(r["correct"]))
        for step, by in per.items():
            for c, xs in by.items():
                acc[cfg.algo.name][step][c].append((sum(xs) / len(xs), len(xs)))
    return {arm: {step: {c: [round(sum(a for a, _ in v) / len(v), 4), v[0][1]]
                         for c, v in sorted(by.items())}
                  for step, by in sorted(steps.items())}
            for arm, steps in sorted(acc.items())}


if __name__ == "__main__":
    dirs = [Path(a) for a in sys.argv[1:]] or [
        d for d in (HERE / "results" / "runs", HERE / "pilots") if d.exists()]
    print(json.dumps({str(d.relative_to(HERE) if d.is_relative_to(HERE) else d): split(d)
                      for d in dirs}, indent=2))
