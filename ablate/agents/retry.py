"""The retry loop Reflexion (Shinn et al. 2023, arXiv:2303.11366, Alg. 1) and Voyager
(Wang et al. 2023, arXiv:2305.16291, §2.3: iterative prompting) share: every (task,
sample) slot is attempted once; a slot whose attempt the agent wants to retry is rolled
out again, alone, with a task the agent rewrote (a reflection, the execution feedback),
until it needs no retry or the attempts run out. Each attempt is judged and recorded as
the original task; the slot's episode is its last attempt."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from ablate.core.seeding import derived_seed


@dataclass
class Attempts:
    """Per slot (task index, sample): its last episode, the tokens of all its attempts
    (the agent adds its own generations), and how many attempts it took."""
    final: dict = field(default_factory=dict)
    tokens: dict = field(default_factory=dict)
    taken: dict = field(default_factory=dict)
    retried: int = 0                     # retry rollouts over all slots


def retry_loop(tasks: Sequence, group_size: int, *, attempts: int, seed: int,
               rollout: Callable, score: Callable, retry: Callable,
               retry_seed_offset: int = 0) -> Attempts:
    """`rollout(tasks, n, seed)` -> episodes; `score(episodes)` judges them in place;
    `retry(judged: [(slot, episode)], attempt)` -> {slot: rewritten task} of the slots to
    retry (called while attempts remain, attempt 0-based). Retry r's seed is
    derived_seed(seed, r + retry_seed_offset)."""
    slots = [(i, s) for i in range(len(tasks)) for s in range(group_size)]
    out, todo, rewritten = Attempts(tokens={k: 0 for k in slots}), slots, {}
    for attempt in range(attempts):
        if attempt == 0:
            eps = rollout(tasks, group_size, seed)
        else:
            eps = rollout([rewritten[k] for k in todo], 1,
                          derived_seed(seed, attempt + retry_seed_offset))
            out.retried += len(todo)
        for (i, s), e in zip(todo, eps):     # judged and recorded as the original task
            e.task, e.group, e.sample = tasks[i], i, s
        score(eps)
        for k, e in zip(todo, eps):
            out.final[k], out.taken[k] = e, attempt + 1
            out.tokens[k] += e.response_tokens
        last = attempt == attempts - 1
        rewritten = {} if last else retry(list(zip(todo, eps)), attempt)
        todo = [k for k in todo if k in rewritten]
        if not todo:
            break
    return out
