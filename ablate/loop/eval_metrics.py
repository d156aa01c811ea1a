"""Held-out metrics of one evaluation (docs/statistics.md: per-question means first).

The primary metric is the *sampled* policy's accuracy: k samples per question at the
evaluation temperature, averaged per question, then over questions (avg@k). Beside it:
unbiased pass@k (Chen et al., 2021, arXiv:2107.03374, §2.1 eq. 1), the answer, "I don't
know" and wrong-answer rates of the same samples, and, when a greedy pass ran, its
accuracy and answer rate (rows with `decoding == "greedy"`).
"""
from __future__ import annotations

from collections import defaultdict
from math import comb

import numpy as np

from ablate.agents.metrics import agent_summary

SAMPLED, GREEDY = "sampled", "greedy"


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k draws without replacement from n samples, c correct, is correct).
    Chen et al. (2021) eq. 1: 1 - C(n-c, k) / C(n, k)."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n; got k={k}, n={n}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def is_idk(row: dict) -> bool:
    """Ended with a final answer that is an abstention (ablate/harness/episode.py)."""
    return row.get("end_reason") == "answer" and not row.get("answered", False)


def per_question_mean(rows: list[dict], value) -> float:
    """Mean over questions of the per-question mean of value(row)."""
    by_q = defaultdict(list)
    for r in rows:
        by_q[r["task_id"]].append(float(value(r)))
    return float(np.mean([np.mean(v) for v in by_q.values()])) if by_q else float("nan")


def mean_pass_at_k(rows: list[dict], k: int) -> float:
    by_q = defaultdict(list)
    for r in rows:
        by_q[r["task_id"]].append(bool(r["correct"]))
    vals = [pass_at_k(len(v), sum(v), k) for v in by_q.values() if len(v) >= k]
    return float(np.mean(vals)) if vals else float("nan")


def split_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(sampled, greedy) rows; rows without a `decoding` field are sampled."""
    greedy = [r for r in rows if r.get("decoding") == GREEDY]
    return [r for r in rows if r.get("decoding", SAMPLED) != GREEDY], greedy


def summarise(step: int, rows: list[dict], level: str = "difficulty") -> dict:
    """The evaluation summary: eval/accuracy is avg@k of the sampled rows, and by the
    tasks' difficulty: the rows' `level` column (the world's word, ablate/envs/registry.py
    Declared.breakdown_label), as `eval/accuracy_<level><value>`."""
    sampled, greedy = split_rows(rows)
    main = sampled or greedy           # a greedy-only evaluation still has an accuracy
    k = max(sum(1 for r in main if r["task_id"] == q) for q in {r["task_id"] for r in main})
    s = {"step": step, "eval/accuracy": per_question_mean(main, lambda r: r["correct"]),
         "eval/reward": per_question_mean(main, lambda r: r["reward"]),
         "eval/samples": k,
         f"eval/pass@{k}": mean_pass_at_k(main, k),
         "eval/answer_rate": per_question_mean(main, lambda r: r.get("answered", False)),
         "eval/idk_rate": per_question_mean(main, is_idk),
         "eval/wrong_rate": per_question_mean(
             main, lambda r: r.get("answered", False) and not r["correct"])}
    for h in sorted({r[level] for r in main}):
        s[f"eval/accuracy_{level}{h}"] = per_question_mean(
            [r for r in main if r[level] == h], lambda r: r["correct"])
    s.update(agent_summary(main, per_question_mean))   # agent=reflexion|lats (ablate/agents)
    if greedy and sampled:
        s["eval/greedy_accuracy"] = per_question_mean(greedy, lambda r: r["correct"])
        s["eval/greedy_answer_rate"] = per_question_mean(
            greedy, lambda r: r.get("answered", False))
    return s
