"""Typed configuration of the RL objective (the `algo=` group). Every knob is a field, so
any mix of GRPO / DAPO / Dr.GRPO / GRPO-TCR ingredients is expressible from the CLI."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ablate.algos.registry import (ADVANTAGE_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES,
                                   ROLLOUT_CORRECTIONS)
from ablate.core.errors import ConfigError


@dataclass
class OverlongConfig:
    # DAPO §3.4 soft overlong punishment (Yu et al., 2025, arXiv:2503.14476, eq. 13)
    enable: bool = False
    max_len: int = 1024      # L_max, generated tokens per episode
    cache_len: int = 256     # L_cache, the soft-penalty buffer
    factor: float = 1.0      # penalty at and beyond L_max


@dataclass
class DynamicSamplingConfig:
    # DAPO §3.2: keep only groups whose rewards are not all equal
    enable: bool = False
    max_batches: int = 3     # extra generation rounds to refill the batch


@dataclass
class GiGPOConfig:
    # GiGPO turn-level credit (Feng et al., 2025, arXiv:2505.10978 §4.2-4.3), algorithm=gigpo
    gamma: float = 0.95      # discount of the return from a turn (ROLL and the paper: 0.95)
    omega: float = 1.0       # weight of the step-level advantage (paper: 1)
    norm_std: bool = True    # divide step advantages by the anchor group's std


@dataclass
class PPOConfig:
    # PPO with a critic (Schulman et al., 2017; GAE: Schulman et al., 2015), algorithm=ppo
    gamma: float = 1.0       # discount (1.0 for LLM RL, as verl / OpenRLHF)
    lam: float = 0.95        # GAE λ (OpenRLHF default)
    value_clip: Optional[float] = 0.5   # clip of V - V_old in the value loss (verl default)
    critic_lr: float = 1e-5
    critic_epochs: int = 1   # critic optimiser steps per batch
    whiten: bool = True      # whiten GAE advantages over the batch's policy tokens


@dataclass
class RFTConfig:
    # rejection-sampling fine-tuning (Yuan et al., 2023, arXiv:2308.01825 §3.3), algorithm=rft
    keep: str = "correct"    # correct: judged correct | reward: reward >= threshold
    threshold: float = 1.0   # the reward bar of keep=reward
    max_per_task: int = 0    # kept episodes per task (0 = all; RFT dedups reasoning paths)


@dataclass
class STaRConfig:
    # STaR rationalisation (Zelikman et al., 2022, arXiv:2203.14465 §3.2), algorithm=star
    rationalize: bool = True
    hint: str = " (Hint: the correct answer is {answer}.)"   # appended to the question
    samples: int = 0         # hinted episodes per failed task (0 = trainer.group_size)
    weight: float = 1.0      # data mix: loss weight of a rationalised token vs a direct one


@dataclass
class DPOConfig:
    # trajectory DPO (Rafailov et al., 2023, arXiv:2305.18290 eq. 7; AgentQ, Putta et al.,
    # 2024, arXiv:2408.07199 §4), algorithm=dpo
    beta: float = 0.1
    pairs: str = "first"     # PAIR_RULES: first | all | extremes
    reference: str = "initial"   # frozen reference: initial (starting policy) | HF model dir


@dataclass
class CurriculumConfig:
    # easy tasks first (Bengio et al., 2009), over Task.difficulty (EnronHop: its hops)
    enable: bool = False
    mode: str = "schedule"   # schedule: the level grows with the step | promotion: on success
    start_level: int = 1     # the first level: tasks of at most this difficulty
    every: int = 2           # schedule: one level more every `every` steps
    promote_at: float = 0.5  # promotion: training accuracy at the current level to move up
    window: int = 2          # promotion: steps averaged


@dataclass
class BufferConfig:
    # experience replay of successful episodes (Lin, 1992; for GRPO e.g. RLEP, Zhang et
    # al., 2025, arXiv:2507.07451), off-policy: keep algo.rollout_correction on
    enable: bool = False
    capacity: int = 64       # stored episodes (oldest dropped)
    replay: int = 1          # stored successes added per all-failed group of the same task
    revisit: float = 0.5     # share of each step's tasks drawn from the buffer's tasks


@dataclass
class AlgoConfig:
    name: str = "grpo"                   # the preset's label (conf/algo/<name>.yaml)
    # every name below is looked up in a registry of ablate.algos (docs/algorithms.md)
    algorithm: str = "pg"                # ALGORITHMS: pg | gigpo | ppo | rft | star | dpo
    adv_estimator: str = "grpo"          # ADVANTAGE_ESTIMATORS: grpo | dr_grpo | rloo | ...
    policy_loss: str = "clip"            # POLICY_LOSSES: clip | gspo | cispo
    rollout_correction: str = "none"     # none | ROLLOUT_CORRECTIONS: token-tis | seq-tis | ...
    correction_cap: float = 2.0          # C: TIS truncation / mask bound [1/C, C]
    plugins: list[Any] = field(default_factory=list)   # the older spelling of top-level `plugins`
    norm_std: bool = True                # GRPO divides by the group std; Dr.GRPO does not
    std_eps: float = 1e-6                # TRL uses 1e-4, verl 1e-6: logged with the run
    eps_low: float = 0.2
    eps_high: float = 0.2
    clip_c: Optional[float] = None       # dual-clip constant (Ye et al., 2020), > 1
    loss_agg: str = "seq-mean-token-mean"  # LOSS_AGGREGATIONS: token-mean | seq-mean-token-mean
    #                                        | seq-mean-token-sum-norm (Dr.GRPO)
    entropy_coef: float = 0.0
    kl_coef: float = 0.0                 # k3 estimator to a frozen reference; 0 = no reference
    ppo_epochs: int = 1                  # optimisation passes over each batch
    overlong: OverlongConfig = field(default_factory=OverlongConfig)
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    gigpo: GiGPOConfig = field(default_factory=GiGPOConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    rft: RFTConfig = field(default_factory=RFTConfig)
    star: STaRConfig = field(default_factory=STaRConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)


def check_algo(cfg) -> None:
    """The algo.* keys' checks a schema cannot express (names are checked against the
    registries by ablate.loop.config.validate)."""
    a = cfg.algo
    if not 0 <= a.eps_low < 1:
        raise ConfigError(f"algo.eps_low={a.eps_low} must be in [0, 1)")
    if a.eps_high < a.eps_low:
        raise ConfigError(f"algo.eps_high={a.eps_high} must be >= algo.eps_low={a.eps_low}")
    if a.clip_c is not None and a.clip_c <= 1:
        raise ConfigError(f"algo.clip_c={a.clip_c} must be > 1 (dual-clip) or null")
    if a.std_eps <= 0:
        raise ConfigError(f"algo.std_eps={a.std_eps} must be > 0")
    if a.entropy_coef < 0 or a.kl_coef < 0:
        raise ConfigError("algo.entropy_coef and algo.kl_coef must be >= 0")
    if a.ppo_epochs < 1:
        raise ConfigError(f"algo.ppo_epochs={a.ppo_epochs} must be >= 1")
    o = a.overlong
    if o.max_len <= 0 or o.cache_len < 0:
        raise ConfigError(f"algo.overlong.max_len={o.max_len} must be > 0 and "
                          f"algo.overlong.cache_len={o.cache_len} >= 0")
    if o.cache_len >= o.max_len:
        raise ConfigError(f"algo.overlong.cache_len={o.cache_len} must be < "
                          f"algo.overlong.max_len={o.max_len}")
    if a.dynamic_sampling.max_batches < 0:
        raise ConfigError("algo.dynamic_sampling.max_batches must be >= 0")
    check_objective(a, cfg.harness.max_tokens_per_episode)


def check_objective(a, max_len) -> None:
    """The loss knobs' joint rules: validate (above) and Objective (a directly built one)
    both call this one check."""
    ADVANTAGE_ESTIMATORS.get_checked(a.adv_estimator)
    POLICY_LOSSES.get_checked(a.policy_loss)
    ROLLOUT_CORRECTIONS.get_checked(a.rollout_correction)
    LOSS_AGGREGATIONS.get_checked(a.loss_agg)
    if a.rollout_correction != "none" and a.correction_cap <= 1:
        raise ConfigError(f"algo.correction_cap={a.correction_cap} must be > 1")
    # Dr. GRPO (Liu et al. 2025, eq. 2) removes GRPO's division by the group's std
    if a.adv_estimator == "dr_grpo" and a.norm_std:
        raise ConfigError("algo.adv_estimator=dr_grpo needs algo.norm_std=false "
                          "(Dr.GRPO never divides by the group std)")
    if a.loss_agg == "seq-mean-token-sum-norm" and not (max_len and max_len > 0):
        raise ConfigError("algo.loss_agg=seq-mean-token-sum-norm needs a max_len > 0")
