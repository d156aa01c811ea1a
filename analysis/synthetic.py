"""Simulated sweeps in the runner's on-disk shape (for tests, benchmarks and demos).

Accuracy model: logit p = base + effect(cell) + a_seed + b_question (+ a small learning
trend over steps); each of K samples is Bernoulli(p)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml


def base_config(seed: int, reward: str = "shaped", algo: str = "grpo") -> dict:
    algo_cfg = {"name": algo, "adv_estimator": "grpo", "norm_std": True, "eps_low": 0.2,
                "eps_high": 0.28 if algo == "dapo" else 0.2,
                "loss_agg": "token-mean" if algo == "dapo" else "seq-mean-token-mean",
                "overlong": {"enable": algo == "dapo", "max_len": 1024},
                "dynamic_sampling": {"enable": algo == "dapo", "max_batches": 3}}
    return {"seed": seed,
            "trainer": {"max_steps": 10, "tasks_per_step": 8, "group_size": 8, "lr": 1e-4},
            "eval": {"every": 5, "num_tasks": 64, "samples": 2},
            "env": {"name": "synthetic", "max_turns": 10, "emails_path": None},
            "reward": {"name": reward}, "algo": algo_cfg,
            "mode": {"name": "instruct"}, "model": {"name": "tiny", "path": None},
            "run": {"quiet": True, "device": "cpu"}, "experiment": None}


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def write_run(path: Path, config: dict, rng: np.random.Generator, logit: np.ndarray,
              hops: np.ndarray, steps=(0, 5, 10), K: int = 2, complete: bool = True,
              hydra: bool = True, trend: float = 0.8) -> None:
    path.mkdir(parents=True, exist_ok=True)
    cfg_path = path / ".hydra" / "config.yaml" if hydra else path / "config.yaml"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
    last = max(steps)
    with open(path / "eval.jsonl", "w") as ev:
        for step in steps:
            p = _sigmoid(logit - trend * (1 - step / last if last else 0))
            for q in range(logit.size):
                for k in range(K):
                    correct = bool(rng.random() < p[q])
                    answered = correct or bool(rng.random() < 0.6)
                    ended = "answer" if answered or rng.random() < 0.5 else "max_turns"
                    shaped = {"process": 0.15, "witness": float(0.1 * rng.integers(0, 2)),
                              "correctness": 1.05 if correct else 0.0}
                    row = {"step": step, "task_id": f"q{q:04d}", "sample": k,
                           "hops": int(hops[q]), "correct": correct,
                           "reward": float(sum(shaped.values())), "answered": answered,
                           "turns": int(rng.integers(2, 9)), "end_reason": ended,
                           "searches": int(rng.integers(1, 5)),
                           "reads": int(rng.integers(0, 4)),
                           "keywords_per_search": float(rng.uniform(1, 4)),
                           "zero_hit_rate": float(rng.uniform(0, 0.5)),
                           "read_after_hit": bool(rng.random() < 0.7),
                           "fabricated_sources": int(rng.random() < 0.1),
                           "malformed_calls": int(rng.random() < 0.05),
                           "evidence_read": float(rng.uniform(0, 1))}
                    row.update({f"reward/{k2}": v for k2, v in shaped.items()})
                    ev.write(json.dumps(row) + "\n")
    with open(path / "metrics.jsonl", "w") as mf:
        for step in range(1, last + 1):
            mf.write(json.dumps({"step": step, "reward/mean": float(rng.uniform(0, 1)),
                                 "accuracy": float(rng.uniform(0, 1)),
                                 "generated_tokens": 1000, "step_s": 6.0}) + "\n")
    if complete:
        (path / "COMPLETE").write_text("")


def write_sweep(root: Path, rewards=("naive", "shaped"), algos=("grpo", "dapo"),
                seeds=(0, 1, 2), n_questions: int = 40, K: int = 2, steps=(0, 5, 10),
                effects: dict | None = None, seed_sd: float = 0.3,
                question_sd: float = 1.2, base: float = -0.3, rng_seed: int = 0,
                identical: bool = False) -> Path:
    """A Hydra-multirun-shaped sweep: root/<reward>_<algo>_seed<s>/.hydra/config.yaml...
    `effects[(reward, algo)]` adds to the logit. identical=True gives every cell the same
    per-seed data (same rng stream per seed)."""
    root = Path(root)
    rng = np.random.default_rng(rng_seed)
    b_q = rng.normal(0, question_sd, n_questions)
    hops = rng.integers(1, 4, n_questions)
    effects = effects or {}
    for r in rewards:
        for a in algos:
            for s in seeds:
                a_s = rng.normal(0, seed_sd)
                run_rng = np.random.default_rng([rng_seed, s] if identical
                                                else rng.integers(1 << 31))
                if identical:
                    a_s = np.random.default_rng([rng_seed, s, 7]).normal(0, seed_sd)
                logit = base + effects.get((r, a), 0.0) + a_s + b_q
                write_run(root / f"reward={r},algo={a},seed={s}", base_config(s, r, a),
                          run_rng, logit, hops, steps=steps, K=K)
    return root
