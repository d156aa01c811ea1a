"""Evaluation metrics of the agents (added to the cell's evaluation summary).

    eval/agent_tokens            tokens the agent generated per (question, sample),
                                 search or earlier attempts and reflections included
    eval/reflexion_success@k     share of samples judged correct within k attempts
    eval/lats_nodes              tree nodes per (question, sample)
    eval/voyager_skills_used     skills replayed (use_skill) per (question, sample)
    eval/voyager_forgetting      share of questions solved at an earlier evaluation of the
                                 cell that fail now (solved: at least half the samples)
    eval/voyager_library_size    skills in the library at this evaluation

All are per-question means first (docs/statistics.md), like eval/accuracy."""
from __future__ import annotations

from typing import Callable


def agent_summary(rows: list[dict], per_question_mean: Callable) -> dict:
    """`per_question_mean(rows, value)` is the evaluation's own (ablate.loop.eval_metrics)."""
    out = {}
    if not any("agent_tokens" in r for r in rows):
        return out
    out["eval/agent_tokens"] = per_question_mean(
        rows, lambda r: r.get("agent_tokens", r.get("response_tokens", 0)))
    n = max((int(r.get("reflexion_max_attempts", 0)) for r in rows), default=0)
    for k in range(1, n + 1):
        out[f"eval/reflexion_success@{k}"] = per_question_mean(
            rows, lambda r, k=k: 0 < int(r.get("reflexion_solved_at", 0)) <= k)
    if any("lats_nodes" in r for r in rows):
        out["eval/lats_nodes"] = per_question_mean(rows, lambda r: r.get("lats_nodes", 0))
    if any("voyager_forgotten" in r for r in rows):
        for key in ("skills_used", "forgotten", "library_size"):
            name = "forgetting" if key == "forgotten" else key
            out[f"eval/voyager_{name}"] = per_question_mean(
                rows, lambda r, k=key: r.get(f"voyager_{k}", 0))
    return out
