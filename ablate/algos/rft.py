"""Rejection-sampling fine-tuning and STaR: supervised learning on the policy's own
successful episodes.

RFT (Yuan et al., 2023, arXiv:2308.01825 §3.3): sample G episodes per task, keep those
judged correct (`algo.rft.keep=correct`) or with reward >= `algo.rft.threshold`
(`keep=reward`), at most `algo.rft.max_per_task` per task, and minimise the token-mean
negative log-likelihood of their generated tokens (the segments' own loss masks: tool
observations and prompts are never trained):

    L = - Σ_{e kept} Σ_{t: mask_t=1} w_e log π_θ(y_t | y_<t) / Σ_{e kept} |e|

with w_e = 1 (RFT), `algo.star.weight` for rationalised episodes (STaR's data mix). The
log-probabilities are the learner's, at the sampler's temperature and under its action
masks (the convention of every loss here); the sampler's log-probabilities are not used.

STaR (Zelikman et al., 2022, arXiv:2203.14465 §3.2, rationalisation): for each task
with no kept episode, `algo.star.samples` more episodes are sampled with the gold answer
as a hint appended to the question (`algo.star.hint`), judged against the same gold
answer, and the kept ones are trained on WITHOUT the hint in context. Removing the hint,
token-exactly (`strip_hint`): the hint lives only in the first user message, so every
segment of a hinted episode starts with the hinted first prompt P1 (the harness builds
each context as P1 + generated ids + observation ids); the unhinted first prompt P0 is
read off the same step's unhinted episodes of the task (the ids before their first
trained token), whatever template or environment rendered it. Each segment becomes
P0 + ids[len(P1):], its mask 0 on P0 and unchanged after it, its action masks shifted by
len(P0) - len(P1) and, under action masking, rebuilt for the unhinted question
(ablate.algos.hints.remask; an episode the unhinted masks do not admit is dropped). The
generated ids and observations are kept as the sampler produced them; their sampler
log-probabilities (conditioned on the hint) are replaced by NaN, so nothing can use them
silently; the learner recomputes log-probabilities in the unhinted context
(tests/algos/test_algos_rft.py checks the result against an unhinted rollout of the same
actions, id for id, masks included).

In the online loop each step is one STaR iteration (sample, filter, rationalise, one
optimizer step per `algo.ppo_epochs`); STaR's restart from the base model each outer
iteration is not reproduced (the policy keeps training).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ablate.algos.config import STaRConfig
from ablate.algos.hints import (hinted_task, masks_admit, remask, same_masks, strip_hint,
                                unhinted_prompt)
from ablate.algos.protocol import AlgorithmBase, TrainingBatch, flatten_segments
from ablate.algos.registry import ALGORITHMS

KEEP_RULES = ("correct", "reward")


def keep_mask(episodes, rewards, *, keep: str, threshold: float, max_per_task: int,
              group_ids) -> list[bool]:
    """Which episodes RFT trains on: judged correct, or reward >= threshold; at most
    `max_per_task` per group (the first ones in sample order; 0 = all)."""
    if keep not in KEEP_RULES:
        raise ValueError(f"algo.rft.keep={keep!r} is not one of {list(KEEP_RULES)}")
    r = torch.as_tensor(rewards, dtype=torch.float64).tolist()
    ok = [bool(e.correct) if keep == "correct" else r[i] >= threshold
          for i, e in enumerate(episodes)]
    if max_per_task > 0:
        seen: dict[Any, int] = {}
        for i, g in enumerate(group_ids):
            if ok[i]:
                seen[g] = seen.get(g, 0) + 1
                ok[i] = seen[g] <= max_per_task
    return ok


def sft_loss(logprobs: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor,
             num_tokens: float) -> torch.Tensor:
    """Σ -w_row log π(y_t) over masked tokens / num_tokens (the whole batch's count, so the
    micro-batch shares sum to the batch's token mean)."""
    w = weights.to(torch.float64 if logprobs.dtype == torch.float64 else torch.float32)
    per_token = torch.where(mask.bool(), -logprobs * w.unsqueeze(-1), 0.0)
    return per_token.sum() / max(float(num_tokens), 1.0)


@ALGORITHMS.register("rft", capabilities=("unequal_groups",))
class RFT(AlgorithmBase):
    """algo.rft.{keep, threshold, max_per_task}; the loss is the token-mean NLL."""

    def __init__(self, *, keep: str = "correct", threshold: float = 1.0,
                 max_per_task: int = 0):
        if keep not in KEEP_RULES:
            raise ValueError(f"algo.rft.keep={keep!r} is not one of {list(KEEP_RULES)}")
        if max_per_task < 0:
            raise ValueError(f"algo.rft.max_per_task={max_per_task} must be >= 0")
        self.keep, self.threshold, self.max_per_task = keep, float(threshold), int(max_per_task)
        self.weights: dict[int, float] = {}   # id(episode) -> loss weight, set by augment

    @classmethod
    def from_config(cls, algo_cfg: Any, *, max_len=None, cfg=None):
        r = algo_cfg.rft
        return cls(keep=str(r.keep), threshold=float(r.threshold),
                   max_per_task=int(r.max_per_task))

    def describe(self) -> dict[str, Any]:
        return {"algorithm": "rft", "keep": self.keep, "threshold": self.threshold,
                "max_per_task": self.max_per_task, "loss": "token-mean NLL of kept episodes",
                "temperature": "the sampler's (learner convention)"}

    def shape_rewards(self, rewards, episodes) -> torch.Tensor:
        return torch.as_tensor(rewards, dtype=torch.float32).flatten()

    def _kept(self, episodes, rewards, group_ids) -> list[int]:
        ok = keep_mask(episodes, rewards, keep=self.keep, threshold=self.threshold,
                       max_per_task=self.max_per_task, group_ids=group_ids)
        return [i for i, k in enumerate(ok) if k]

    def augment(self, episodes, rewards, group_ids, ctx):
        """Keep the accepted episodes only (called by the cell loop before `prepare`)."""
        kept = self._kept(episodes, rewards, group_ids)
        self.weights = {}
        metrics = {"rft/kept": float(len(kept)),
                   "rft/kept_fraction": len(kept) / max(len(episodes), 1)}
        return self._take(episodes, rewards, group_ids, kept) + (metrics,)

    @staticmethod
    def _take(episodes, rewards, group_ids, index):
        r = torch.as_tensor(rewards, dtype=torch.float32).flatten()
        return ([episodes[i] for i in index], r[torch.tensor(index, dtype=torch.long)],
                [group_ids[i] for i in index])

    def prepare(self, episodes, rewards, group_ids, learner) -> TrainingBatch:
        weights = [self.weights.get(id(e), 1.0) for e in episodes]
        segments, episode_of, tokens = flatten_segments(episodes)
        adv = torch.tensor([weights[k] for k in episode_of], dtype=torch.float32)
        batch = TrainingBatch(segments, adv, episode_of, tokens)
        batch.metrics["rft/train_tokens"] = float(sum(tokens))
        return batch

    def loss_fn(self, batch: TrainingBatch) -> Callable:
        def loss_fn(x):
            loss = sft_loss(x.logprobs, x.advantages, x.mask, x.num_tokens)
            return loss, {"loss": float(loss.detach()), "nll": float(loss.detach())}
        loss_fn.sum_metrics = ("nll",)
        return loss_fn

    def save(self, ckpt_dir, step: int) -> None:
        """Stateless between steps."""

    def load(self, ckpt_dir, step: int) -> None:
        """Nothing to restore."""


@ALGORITHMS.register("star")
class STaR(RFT):
    """RFT plus rationalisation: algo.star.{rationalize, hint, samples, weight}."""

    def __init__(self, *, rationalize: bool = True, hint: str = STaRConfig.hint,
                 samples: int = 0, weight: float = 1.0, **rft):
        super().__init__(**rft)
        if "{answer}" not in hint:
            raise ValueError(f"algo.star.hint={hint!r} must contain {{answer}}")
        if samples < 0 or weight < 0:
            raise ValueError(f"need algo.star.samples >= 0 and algo.star.weight >= 0, got "
                             f"{samples}, {weight}")
        self.rationalize, self.hint = bool(rationalize), str(hint)
        self.dropped = 0
        self.samples, self.weight = int(samples), float(weight)

    @classmethod
    def from_config(cls, algo_cfg: Any, *, max_len=None, cfg=None):
        r, s = algo_cfg.rft, algo_cfg.star
        return cls(rationalize=bool(s.rationalize), hint=str(s.hint), samples=int(s.samples),
                   weight=float(s.weight), keep=str(r.keep), threshold=float(r.threshold),
                   max_per_task=int(r.max_per_task))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "algorithm": "star", "rationalize": self.rationalize,
                "hint": self.hint, "samples": self.samples, "weight": self.weight,
                "hint_removal": "hinted first prompt replaced by the unhinted one; "
                                "sampler logprobs dropped (NaN)"}

    def augment(self, episodes, rewards, group_ids, ctx):
        eps, r, groups, metrics = super().augment(episodes, rewards, group_ids, ctx)
        metrics.update({"star/failed_tasks": 0.0, "star/rationalized": 0.0,
                        "star/dropped": 0.0, "generated_tokens": 0.0})
        failed = [g for g in dict.fromkeys(group_ids) if g not in set(groups)]
        if not (self.rationalize and failed):
            return eps, r, groups, metrics
        extra, extra_r, extra_g, generated = self.rationalise(episodes, group_ids, failed, ctx)
        metrics.update({"star/failed_tasks": float(len(failed)),
                        "star/rationalized": float(len(extra)), "generated_tokens": generated,
                        "star/dropped": float(self.dropped)})
        self.weights = {id(e): self.weight for e in extra}
        return (eps + extra, torch.cat([r, torch.as_tensor(extra_r, dtype=torch.float32)]),
                groups + extra_g, metrics)

    def rationalise(self, episodes, group_ids, failed, ctx):
        """Hinted episodes for the failed groups, judged, filtered, hint removed."""
        first = {g: next(i for i, h in enumerate(group_ids) if h == g) for g in failed}
        tasks = [episodes[first[g]].task for g in failed]
        n = self.samples or ctx.group_size
        hinted = ctx.act([hinted_task(t, self.hint) for t in tasks], n)
        scored = ctx.score(hinted)
        rewards = [x for x, _ in scored]
        hinted_groups = [failed[e.group] for e in hinted]
        ok = keep_mask(hinted, rewards, keep=self.keep, threshold=self.threshold,
                       max_per_task=self.max_per_task, group_ids=hinted_groups)
        out, out_r, out_g = [], [], []
        self.dropped = 0
        for e, keep, reward, g in zip(hinted, ok, rewards, hinted_groups):
            p0 = unhinted_prompt(episodes, group_ids, g)
            stripped = self.unhint(e, p0, tasks[e.group], ctx) if keep and p0 else None
            if stripped is not None:
                out.append(stripped)
                out_r.append(float(reward))
                out_g.append(g)
        return out, out_r, out_g, float(sum(e.response_tokens for e in hinted))

    def unhint(self, episode, p0, task, ctx):
        """The hinted episode without its hint, action masks rebuilt for the unhinted
        context (ablate.algos.hints); None (counted in star/dropped) when the rebuilt masks
        do not reproduce the recorded ones on the hinted episode, or do not admit its
        tokens without the hint."""
        stripped = strip_hint(episode, p0, task)
        if not any(s.allowed for s in episode.segments):
            return stripped
        h, m, model = ctx.cfg.harness, ctx.cfg.mode, ctx.cfg.model
        if not same_masks(episode, remask(episode, ctx.tokenizer, h, m, ctx.env, model)):
            self.dropped += 1
            return None
        allowed = remask(stripped, ctx.tokenizer, h, m, ctx.env, model)
        if not masks_admit(stripped, allowed):
            self.dropped += 1
            return None
        for seg, spec in zip(stripped.segments, allowed):
            seg.allowed = spec
        return stripped

