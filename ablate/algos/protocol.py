"""The algorithm protocol: what the cell loop calls between scoring and the optimizer step.

    algorithm = build_algorithm(cfg.algo, max_len=cfg.harness.max_tokens_per_episode)
    tasks = sample_step_tasks(..., algorithm.experience)        # None: uniform draws
    rewards = algorithm.shape_rewards(rewards, episodes)       # e.g. DAPO's overlong term
    episodes, rewards, group_ids = algorithm.experience.after_rollout(...)  # if not None
    episodes, rewards, group_ids, metrics = algorithm.augment(episodes, rewards,
                                                              group_ids, ctx)
    batch = algorithm.prepare(episodes, rewards, group_ids, learner)
    stats = learner.update(batch.segments, batch.advantages, algorithm.loss_fn(batch))

An algorithm owns how scored episodes become a `TrainingBatch` (advantages per episode,
per turn or per token; any extra learner pass it needs) and the loss on one micro-batch;
what it loads beyond the policy (DPO's reference, PPO's critic) it loads itself in
`from_config`. The two hooks every algorithm has, `experience` and `augment`, default
(AlgorithmBase) to none and to the episodes unchanged. Algorithms are registered
in ALGORITHMS (`algo.algorithm`); the policy-gradient family (GRPO, DAPO, Dr.GRPO,
GRPO-TCR, RLOO, REINFORCE++, GSPO, CISPO) is one of them, `pg`, configured by the
estimator / loss / aggregation / correction registries.

The learner's contract: `update(segments, advantages[n_segments], loss_fn)` calls
`loss_fn(LossInputs)` per micro-batch. When a batch needs per-row data beyond the scalar
advantage (episodes of several segments, per-token advantages, recomputed old logprobs,
correction weights), LossInputs.index must give the positions of the micro-batch's rows
in `segments`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence, runtime_checkable

import torch

from ablate.algos.correction import correction_weights
from ablate.algos.objective import Objective, build_objective
from ablate.algos.registry import ALGORITHMS
from ablate.algos.curriculum import Experience, WithExperience
from ablate.core.errors import ConfigError


@dataclass
class TrainingBatch:
    """Scored episodes as the learner trains on them. Per-segment lists are aligned to
    the segment's ids (position 0 unused); `advantages` is what learner.update receives."""
    segments: list
    advantages: torch.Tensor                     # [n_segments], the episode's scalar
    episode_of: list[int]                        # episode position of each segment
    episode_tokens: list[int]                    # policy tokens per episode
    token_advantages: Optional[list[torch.Tensor]] = None
    old_logprobs: Optional[list[torch.Tensor]] = None   # learner-recomputed
    is_weights: Optional[list[torch.Tensor]] = None     # rollout-correction weights
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def num_episodes(self) -> int:
        return sum(1 for n in self.episode_tokens if n > 0)

    @property
    def multi_segment(self) -> bool:
        """Some episode spans several rows (thinking mode: one segment per turn)."""
        return len(self.episode_of) != len(set(self.episode_of))

    @property
    def needs_index(self) -> bool:
        return (self.multi_segment or self.token_advantages is not None
                or self.old_logprobs is not None or self.is_weights is not None)

    def rows(self, per_segment: list, index: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        """[b, T] tensor (dtype/device of `like`) of per-segment values for the rows
        `index`, zero-padded on the right."""
        out = torch.zeros_like(like, dtype=torch.promote_types(like.dtype, torch.float32))
        for r, i in enumerate(index):
            v = torch.as_tensor(per_segment[i]).to(out)
            out[r, : v.numel()] = v[: out.shape[1]]
        return out

    def row_tokens(self, index: Sequence[int], device) -> torch.Tensor:
        return torch.tensor([float(self.episode_tokens[self.episode_of[i]]) for i in index],
                            device=device)


@dataclass
class StepContext:
    """What an algorithm's hook `augment(episodes, rewards, group_ids, ctx) ->
    (episodes, rewards, group_ids, metrics)` may use; the cell loop calls it before
    `prepare` (RFT filters there, STaR samples hinted episodes, DPO picks pairs). A
    metric `generated_tokens` is added to the step's sampled-token count."""
    step: int
    group_size: int
    act: Callable        # (tasks, n) -> n episodes per task (a seed of its own)
    score: Callable      # episodes -> [(reward, components)], judge verdicts set
    cfg: Any = None      # the cell's config
    tokenizer: Any = None   # the policy's tokenizer (None for a scripted policy)
    env: Any = None         # the cell's environment (its mask candidates, for STaR)


@runtime_checkable
class Algorithm(Protocol):
    # the curriculum / trajectory buffer that draws the step's tasks and sees its rollouts
    # (ablate.algos.curriculum.Experience), None without one
    experience: Optional[Experience]
    def describe(self) -> dict[str, Any]: ...
    def shape_rewards(self, rewards, episodes) -> torch.Tensor: ...
    # between scoring and `prepare`: (episodes, rewards, group_ids, metrics), see StepContext
    def augment(self, episodes, rewards, group_ids, ctx: StepContext) -> tuple: ...
    def prepare(self, episodes, rewards, group_ids, learner) -> TrainingBatch: ...
    def loss_fn(self, batch: TrainingBatch) -> Callable: ...
    # state of its own, written into the learner checkpoint's folder before it completes
    # (ablate.learners.base.Learner.save's `extra`); load reads it back from that folder
    def save(self, ckpt_dir, step: int) -> None: ...
    def load(self, ckpt_dir, step: int) -> None: ...


class AlgorithmBase:
    """The protocol's defaults, for an algorithm to subclass: no experience of its own (the
    cell's comes with WithExperience), and an `augment` that changes nothing."""
    experience: Optional[Experience] = None

    def augment(self, episodes, rewards, group_ids, ctx: StepContext) -> tuple:
        """The step's episodes as they are, no metrics."""
        return episodes, rewards, group_ids, {}


def check_algorithm(algorithm: Any, name: str) -> None:
    """A ConfigError naming the members of the Algorithm protocol `algorithm` lacks."""
    if isinstance(algorithm, Algorithm):
        return
    members = [*Algorithm.__annotations__, *(k for k in vars(Algorithm)
                                             if not k.startswith("_"))]
    missing = [m for m in members if not hasattr(algorithm, m)]
    raise ConfigError(f"algo.algorithm={name}: {type(algorithm).__name__} lacks {missing} "
                      "of ablate.algos.protocol.Algorithm; subclass "
                      "ablate.algos.protocol.AlgorithmBase for the defaults")


def flatten_segments(episodes) -> tuple[list, list[int], list[int]]:
    """(segments, episode position of each, policy tokens per episode). Token counts skip
    position 0 of each segment, as the learner's collate does."""
    segments, episode_of, tokens = [], [], []
    for k, e in enumerate(episodes):
        n = 0
        for seg in e.segments:
            segments.append(seg)
            episode_of.append(k)
            n += int(sum(1 for m in seg.mask[1:] if m))
        tokens.append(n)
    return segments, episode_of, tokens


def loss_index(inputs) -> list[int]:
    index = getattr(inputs, "index", None)
    if index is None:
        raise RuntimeError("this batch needs LossInputs.index (the rows' positions in the "
                           "batch) from the learner; see ablate.algos.protocol")
    return list(index)


@ALGORITHMS.register("pg")
class PolicyGradient(AlgorithmBase):
    """Group-relative policy gradient: one advantage per episode from a registered
    estimator, broadcast to all its tokens; a registered policy loss and aggregation;
    optional rollout correction. GRPO, DAPO, Dr.GRPO, GRPO-TCR, RLOO, REINFORCE++-baseline,
    GSPO and CISPO are configurations of it (conf/algo/)."""

    def __init__(self, objective: Objective):
        self.objective = objective

    def describe(self) -> dict[str, Any]:
        return {"algorithm": "pg", **self.objective.describe()}

    def shape_rewards(self, rewards, episodes) -> torch.Tensor:
        return self.objective.shape_rewards(rewards, [e.response_tokens for e in episodes])

    def prepare(self, episodes, rewards, group_ids, learner) -> TrainingBatch:
        adv = self.objective.advantages(rewards, group_ids)
        segments, episode_of, tokens = flatten_segments(episodes)
        batch = TrainingBatch(segments, adv[torch.tensor(episode_of, dtype=torch.long)],
                              episode_of, tokens)
        batch.metrics.update({"adv/abs_mean": float(adv.abs().mean()),
                              "adv/max": float(adv.max()), "adv/min": float(adv.min())})
        if self.objective.needs_learner_old_logprobs:
            self._correct(batch, learner)
        return batch

    def _correct(self, batch: TrainingBatch, learner) -> None:
        o = self.objective
        batch.old_logprobs = learner.logprobs(batch.segments)
        batch.is_weights, metrics = correction_weights(
            o.rollout_correction, batch.old_logprobs, [s.logprobs for s in batch.segments],
            [s.mask for s in batch.segments], batch.episode_of, cap=o.correction_cap)
        batch.metrics.update(metrics)

    def save(self, ckpt_dir, step: int) -> None:
        """Nothing to save: the policy gradient keeps no state of its own."""

    def load(self, ckpt_dir, step: int) -> None:
        """Nothing to restore."""

    def loss_fn(self, batch: TrainingBatch) -> Callable:
        objective = self.objective

        def loss_fn(x):
            old, adv, kw = x.old_logprobs, x.advantages, {"num_seqs": x.num_seqs}
            if batch.needs_index:
                index = loss_index(x)
                if batch.multi_segment:   # count episodes, not segments
                    kw = {"num_seqs": batch.num_episodes,
                          "row_tokens": batch.row_tokens(index, x.mask.device)}
                if batch.old_logprobs is not None:
                    old = batch.rows(batch.old_logprobs, index, x.logprobs)
                if batch.is_weights is not None:
                    kw["is_weights"] = batch.rows(batch.is_weights, index, x.logprobs)
                if batch.token_advantages is not None:
                    adv = batch.rows(batch.token_advantages, index, x.logprobs)
            return objective.loss(x.logprobs, old, adv, x.mask, entropy=x.entropy,
                                  ref_logprobs=x.ref_logprobs, num_tokens=x.num_tokens, **kw)
        return loss_fn


def build_algorithm(algo_cfg: Any, *, max_len: Optional[int] = None,
                    cfg: Any = None) -> Algorithm:
    """The registered algorithm `algo.algorithm` (default `pg`) built from the config
    (`cfg`, the whole config, for an algorithm that loads a model of its own)."""
    name = str(getattr(algo_cfg, "algorithm", "pg"))
    cls = ALGORITHMS.get_checked(name)
    if hasattr(cls, "from_config"):
        algorithm = cls.from_config(algo_cfg, max_len=max_len, cfg=cfg)
    else:
        algorithm = cls(build_objective(algo_cfg, max_len=max_len))
    check_algorithm(algorithm, name)
    experience = Experience.from_config(algo_cfg)   # algo.curriculum / algo.buffer
    return algorithm if experience is None else WithExperience(algorithm, experience)
