"""STaR's hint, added to a task and removed from its episodes token-exactly (the method is
described in ablate/algos/rft.py and docs/algorithms.md).

The action masks (harness.action_masking) of a hinted episode were built from the hinted
question (keyword masking allows the question's words as search keywords), so they are
rebuilt for the unhinted context with the harness's own mask builder, turn by turn, from
the unhinted question and the episode's calls so far (`remask`); an episode whose
generated tokens fall outside the rebuilt masks could not have been produced without the
hint and is dropped. The rebuilt masks are checked first on the hinted episode itself
(with the hinted question they must reproduce what the sampler recorded)."""
from __future__ import annotations

import dataclasses
import functools
import math
from types import SimpleNamespace
from typing import Any, Optional

from ablate.harness.chat import ChatConventions
from ablate.harness.masking import token_bytes
from ablate.harness.rollout import _mask_for


def hinted_task(task, template: str):
    """The task (ablate.protocol.task.Task) with the hint appended to its prompt."""
    return dataclasses.replace(task, prompt=task.prompt + template.format(answer=task.answer))


def prompt_len(segment) -> int:
    """Ids before the first trained token: the episode's first prompt (for segment 0)."""
    for p, m in enumerate(segment.mask):
        if m:
            return p
    return -1


def unhinted_prompt(episodes, group_ids, group) -> Optional[list[int]]:
    """The first prompt of the group's (unhinted) episodes: the ids before the first
    trained token of any of them that generated something."""
    for e, g in zip(episodes, group_ids):
        if g == group and e.segments and prompt_len(e.segments[0]) > 0:
            return list(e.segments[0].ids[:prompt_len(e.segments[0])])
    return None


def strip_hint(episode, unhinted: list[int], task) -> Any:
    """A copy of the hinted `episode` whose segments start with the `unhinted` first prompt
    instead of the hinted one; its task is the unhinted `task`; sampler logprobs NaN."""
    hinted = episode.segments[0].ids[:prompt_len(episode.segments[0])]
    cut, n0 = len(hinted), len(unhinted)
    segments = []
    for seg in episode.segments:
        if list(seg.ids[:cut]) != hinted:
            raise ValueError(f"task {task.id}: a segment of a hinted episode does not start "
                             "with its hinted prompt; cannot remove the hint token-exactly")
        allowed = None if seg.allowed is None else {
            p - cut + n0: a for p, a in seg.allowed.items() if p >= cut}
        tail = seg.mask[cut:]
        segments.append(type(seg)(
            ids=list(unhinted) + list(seg.ids[cut:]), mask=[0] * n0 + list(tail),
            logprobs=[0.0] * n0 + [math.nan if m else 0.0 for m in tail], allowed=allowed))
    return dataclasses.replace(episode, task=task, segments=segments)


def turn_spans(episode) -> list[tuple[int, int, int]]:
    """(segment, start, end) of each turn's generated ids (turns own consecutive trained
    positions, `completion_tokens` each, in order across the segments)."""
    trained = [(j, p) for j, s in enumerate(episode.segments) for p, m in enumerate(s.mask) if m]
    spans, k = [], 0
    for turn in episode.turns:
        n = turn.completion_tokens
        if n:
            j, p = trained[k]
            spans.append((j, p, p + n))
        else:
            spans.append((-1, 0, 0))
        k += n
    return spans


@functools.lru_cache(maxsize=4)
def _vocab(tokenizer):
    return token_bytes(tokenizer)


def remask(episode, tokenizer, harness_cfg, mode_cfg, env,
           model_cfg=None) -> Optional[list[dict]]:
    """Per segment, the action masks the harness would have built for this episode's
    generated ids in its own context: the environment's state for the episode's task,
    replayed through its calls so far (the mask candidates come from that state); None
    when the harness builds none. `model_cfg` (model.tool_format, model.chat_template)
    selects the chat conventions as the rollout did (None: auto-detected)."""
    conv = ChatConventions.from_config(tokenizer, model_cfg, mode_cfg)
    out: list[dict] = [{} for _ in episode.segments]
    vocab, any_mask = None, False
    state = env.reset(episode.task)
    for k, (turn, (j, start, end)) in enumerate(zip(episode.turns, turn_spans(episode))):
        if j >= 0:
            ids = episode.segments[j].ids
            if vocab is None and (harness_cfg.action_masking or mode_cfg.enable_thinking):
                vocab = _vocab(tokenizer)
            live = SimpleNamespace(context=list(ids[:start]), state=state)
            mask = _mask_for(live, env, harness_cfg, mode_cfg, vocab, conv, turn=k)
            if mask is not None:
                any_mask = True
                out[j].update({start + p: a for p, a in mask.replay(ids[start:end]).items()})
        for call in turn.calls:          # a read-only replay of what the episode did
            env.call(state, call.name, call.arguments)
    return out if any_mask else None


def masks_admit(episode, allowed: Optional[list[dict]]) -> bool:
    """Every generated token lies in its position's allowed set."""
    if allowed is None:
        return True
    return all(seg.ids[p] in set(a) for seg, spec in zip(episode.segments, allowed)
               for p, a in spec.items())


def same_masks(episode, allowed: Optional[list[dict]]) -> bool:
    recorded = [{int(p): list(a) for p, a in (s.allowed or {}).items()} for s in episode.segments]
    rebuilt = [{int(p): list(a) for p, a in spec.items()} for spec in (allowed or
                                                                        [{} for _ in recorded])]
    return recorded == rebuilt
