"""Rewards of `env=reasoning_gym` over an environment-neutral episode record (`.results`,
`.correct`): Rubrics (ablate/protocol/rubric.py) its world declares where it registers (env.py).

- outcome (the default): 1 if score_answer reached env.correct_threshold, else 0.
- rg_score: the dataset's own score_answer of the final answer, in [0, 1] (partial credit
  where the dataset gives it, e.g. the default scorer's len(gold)/len(answer) when the
  answer contains the gold: reasoning_gym/dataset.py, ProceduralDataset.score_answer).
"""
from __future__ import annotations

from typing import Any, Optional

from ablate.protocol.rubric import Rubric


def score(episode: Any, cfg: Optional[Any] = None) -> float:
    """score_answer of the episode's final answer (0 without one)."""
    final = [r for r in episode.results if r.done and r.error is None]
    return float(final[-1].extra.get("score", 0.0)) if final else 0.0


rg_score = Rubric(score, doc="reasoning-gym: the dataset's score_answer of the answer")
