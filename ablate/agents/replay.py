"""Branching by deterministic replay (LATS's tree nodes are episode prefixes).

A node of the tree is the list of turns that lead to it. To continue from a node, the
harness's own rollout is run from the task's first prompt through `ReplaySampler`, which
answers every prompt it has a recorded completion for with that completion (its ids and
the log-probabilities they were sampled with) and sends the others to the real sampler.
The environment replays the recorded calls on a fresh `reset` state, so an episode
continued from a node is token for token the episode that would have taken those actions;
its recorded log-probabilities stay the behaviour policy's. This needs `reset` + `step`
to be deterministic (every built-in environment is; the read-only email world trivially);
a divergence is detected and raised (ablate.agents.lats), never silent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ablate.samplers.base import Completion, per_prompt


@dataclass(frozen=True)
class Action:
    """One generated turn: the prompt it was generated from, its ids and logprobs."""
    context: tuple
    ids: tuple
    logprobs: tuple


def turn_actions(episode) -> list[Action]:
    """The episode's generated turns in order, read off its segments: each run of loss
    mask 1 is one turn's completion, the ids before it its prompt (instruct mode: one
    segment, one run per turn; thinking mode: one segment per turn)."""
    out = []
    for seg in episode.segments:
        p, n = 0, len(seg.mask)
        while p < n:
            if not seg.mask[p]:
                p += 1
                continue
            q = p
            while q < n and seg.mask[q]:
                q += 1
            out.append(Action(tuple(seg.ids[:p]), tuple(seg.ids[p:q]),
                              tuple(seg.logprobs[p:q])))
            p = q
    return out


class ReplaySampler:
    """A sampler that replays recorded completions (keyed by their exact prompt) and
    samples the rest with `sampler`; every other attribute is the real sampler's."""

    def __init__(self, sampler, actions: Sequence[Action]):
        self.sampler = sampler
        self.forced = {a.context: a for a in actions}

    def __getattr__(self, name):
        return getattr(self.sampler, name)

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0,
                 stop_token_ids=(), logits_processors=None, seed=None) -> list[Completion]:
        n = len(prompts)
        limits = per_prompt(max_new_tokens, n, "max_new_tokens")
        procs = per_prompt(logits_processors, n, "logits_processors") \
            if logits_processors is not None else None
        found = [self.forced.get(tuple(p)) for p in prompts]
        real = [i for i, a in enumerate(found) if a is None]
        outs: list = [None] * n
        if real:
            got = self.sampler.generate(
                [prompts[i] for i in real], max_new_tokens=[limits[i] for i in real],
                temperature=temperature, top_p=top_p, stop_token_ids=stop_token_ids,
                logits_processors=None if procs is None else [procs[i] for i in real],
                seed=seed)
            for i, c in zip(real, got):
                outs[i] = c
        for i, a in enumerate(found):
            if a is not None:   # a replayed turn had the same budget when it was sampled
                outs[i] = Completion(list(a.ids), list(a.logprobs), "stop")
        return outs
