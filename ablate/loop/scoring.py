"""Tasks and scoring of a cell: which tasks a step trains on and which the evaluation
uses, then judge -> reward -> rows (the rows analysis reads, docs/statistics.md)."""
from __future__ import annotations

import numpy as np

from ablate.core.errors import ConfigError
from ablate.core.seeding import derived_seed
from ablate.loop.eval_metrics import SAMPLED, summarise
from ablate.protocol.environment import judge_all
from ablate.rewards import compute_reward


def sample_step_tasks(tasks: list, n: int, seed: int, step: int, round_: int,
                      experience=None) -> list:
    rng = np.random.default_rng(derived_seed(seed, step, round_, 17))
    if experience is not None:   # curriculum pool, buffer revisits (ablate.algos.curriculum)
        return experience.sample(tasks, n, step, rng)
    idx = rng.choice(len(tasks), size=min(n, len(tasks)), replace=False)
    return [tasks[i] for i in idx]


def eval_subset(tasks: list, n: int, offset: int = 0) -> list:
    """n test tasks from index `offset`: a fixed subset shared by every cell (keeps
    comparisons paired); a later offset gives a confirmation set disjoint from the one
    settings were chosen on. An offset past the split is a ConfigError."""
    if offset >= len(tasks):
        raise ConfigError(f"eval.offset={offset}: the test split has only {len(tasks)} "
                          f"tasks (allowed: 0..{len(tasks) - 1})")
    return list(tasks[offset:offset + n])


# ---------------------------------------------------------------------------------------
# scoring: judge -> reward -> rows
# ---------------------------------------------------------------------------------------
def score(episodes, env, reward_cfg) -> list[tuple[float, dict]]:
    """Correctness from the environment (its judge), then the configured reward scheme
    (ablate.rewards.REWARDS) with its weights."""
    pending = [e for e in episodes if e.final_answer is not None and e.answered]
    verdicts = judge_all(env, [(e.task, e.final_answer, e.state)
                               for e in pending]) if pending else []
    for e in episodes:
        e.correct = False
    for e, v in zip(pending, verdicts):
        e.correct = bool(v)
    return [compute_reward(e, reward_cfg) for e in episodes]


def eval_summary(step: int, rows: list[dict], level: str = "difficulty") -> dict:
    """Sampled accuracy (avg@k, the primary metric), pass@k, answer / "I don't know" /
    wrong rates, accuracy by the rows' `level` column, and greedy accuracy beside them
    (ablate/loop/eval_metrics.py)."""
    return summarise(step, rows, level)


def eval_history(rows: list[dict], level: str = "difficulty") -> list[tuple[int, dict]]:
    steps = sorted({r["step"] for r in rows})
    return [(s, eval_summary(s, [r for r in rows if r["step"] == s], level)) for s in steps]


def eval_rows(step: int, episodes, rewards, decoding: str = SAMPLED,
              level: str = "difficulty") -> list[dict]:
    """One row per episode; the task's difficulty in the column `level` names (the
    world's word for it: Declared.breakdown_label, ablate/envs/registry.py)."""
    rows = []
    for e, (total, comps) in zip(episodes, rewards):
        row = {"step": step, "task_id": e.task.id, "sample": e.sample,
               level: e.task.difficulty,
               "correct": bool(e.correct), "reward": float(total), "decoding": decoding}
        row.update(e.behaviour())
        row.update({f"reward/{k}": float(v) for k, v in comps.items()})
        rows.append(row)
    return rows
