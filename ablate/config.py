"""The root configuration: one typed dataclass per stage, assembled here and registered
with Hydra's ConfigStore so that unknown keys and wrong types fail at compose time.

Group yaml files in conf/<group>/ set values inside these schemas; `validate(cfg)` adds
the checks a schema cannot express (allowed option names, eps_high >= eps_low, ...)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from ablate.algos.config import AlgoConfig
from ablate.algos.registry import (ADVANTAGE_ESTIMATORS, ALGORITHMS, LOSS_AGGREGATIONS,
                                   POLICY_LOSSES, ROLLOUT_CORRECTIONS, import_plugins)
from ablate.env.config import EnvConfig, JudgeConfig
from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.learners.config import LearnerConfig
from ablate.models.config import ModelConfig
from ablate.rewards.config import RewardConfig
from ablate.rewards.schemes import REWARDS
from ablate.samplers.config import SamplerConfig


@dataclass
class TrainerConfig:
    max_steps: int = 10
    tasks_per_step: int = 8              # GRPO groups per optimizer step
    group_size: int = 8                  # rollouts per task (G)
    lr: float = 1e-4
    max_staleness: int = 0               # off-policy steps; only 0 (synchronous) is built yet


@dataclass
class EvalConfig:
    every: int = 5                       # optimizer steps between evaluations (0 = final only)
    num_tasks: int = 64                  # held-out tasks (fixed subset, shared by all cells)
    samples: int = 1                     # K samples per question
    at_start: bool = True                # evaluate the initial policy (step 0)


@dataclass
class RunConfig:
    quiet: bool = False                  # no progress display (sweeps)
    num_trajectories: int = 16           # readable trajectories written per evaluation
    wandb_mode: str = "${oc.env:WANDB_MODE,offline}"   # online | offline | disabled
    wandb_project: str = "ablate"
    device: str = "cpu"
    # torch CPU threads; 1 is fastest for tiny models on a busy 2-core machine (sampling
    # measured 15-25x faster than 2 threads there); 0 = torch's default
    num_threads: int = 1


@dataclass
class AblateConfig:
    seed: int = 0
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    mode: ModeConfig = field(default_factory=ModeConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    run: RunConfig = field(default_factory=RunConfig)
    experiment: Optional[str] = None


# Options each group accepts by name (the `name` field of the group's yaml); the yaml
# files in conf/<group>/ are the source, this table makes the error message. Registries
# (live dicts: names registered later by a user's module count) for rewards and algos.
ALLOWED = {
    "reward.name": REWARDS,
    "algo.algorithm": ALGORITHMS,
    "algo.adv_estimator": ADVANTAGE_ESTIMATORS,
    "algo.policy_loss": POLICY_LOSSES,
    "algo.loss_agg": LOSS_AGGREGATIONS,
    "algo.rollout_correction": ROLLOUT_CORRECTIONS,
    "mode.name": ("instruct", "thinking"),
    "env.name": ("synthetic", "enronhop"),
    "sampler.name": ("hf", "vllm"),
    "learner.name": ("deepspeed", "torch"),
    "learner.dtype": ("float32", "bfloat16"),
    "judge.name": ("exact", "llm"),
    "harness.on_malformed": ("continue", "end"),
    "harness.calls_per_turn": ("first", "all"),
}


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and what is allowed."""


MAX_DIRNAME = 200   # file systems allow 255 bytes per path component


def cell_dirname(overrides: str) -> str:
    """A multirun cell's directory name: Hydra's override dirname, or (if too long for a
    file system) its head plus a hash of the whole, stable across re-runs of the grid."""
    if len(overrides.encode()) <= MAX_DIRNAME:
        return overrides or "default"
    digest = hashlib.sha1(overrides.encode()).hexdigest()[:12]
    return overrides.encode()[: MAX_DIRNAME - 14].decode(errors="ignore") + "~" + digest


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="ablate_schema", node=AblateConfig)
    if not OmegaConf.has_resolver("ablate_dirname"):
        OmegaConf.register_new_resolver("ablate_dirname", cell_dirname)


def _unknown_keys(schema: DictConfig, cfg: DictConfig, prefix: str) -> list[str]:
    out = []
    for key in cfg.keys():
        if key not in schema:
            out.append(prefix + str(key))
        elif isinstance(schema[key], DictConfig) and isinstance(cfg[key], DictConfig):
            out += _unknown_keys(schema[key], cfg[key], f"{prefix}{key}.")
    return out


def validate(cfg: DictConfig | Any) -> None:
    """Checks that a schema cannot express. Raises ConfigError naming the key."""
    missing = sorted(OmegaConf.missing_keys(cfg)) if isinstance(cfg, DictConfig) else []
    if missing:
        raise ConfigError(f"missing mandatory value(s): {', '.join(missing)}")

    if isinstance(cfg, DictConfig):  # `+group.key=v` can append keys the schema lacks
        unknown = _unknown_keys(OmegaConf.structured(AblateConfig), cfg, "")
        if unknown:
            raise ConfigError(f"unknown config key(s): {', '.join(unknown)}")

    def get(key):
        return OmegaConf.select(cfg, key)

    try:   # the user's modules register their names before the names are checked
        import_plugins(get("algo.plugins"))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    for key, allowed in ALLOWED.items():
        value = get(key)
        if value not in allowed:
            raise ConfigError(f"{key}={value!r} is not allowed; choose one of {list(allowed)}")

    a = cfg.algo
    if not 0 <= a.eps_low < 1:
        raise ConfigError(f"algo.eps_low={a.eps_low} must be in [0, 1)")
    if a.eps_high < a.eps_low:
        raise ConfigError(f"algo.eps_high={a.eps_high} must be >= algo.eps_low={a.eps_low}")
    if a.clip_c is not None and a.clip_c <= 1:
        raise ConfigError(f"algo.clip_c={a.clip_c} must be > 1 (dual-clip) or null")
    if a.adv_estimator == "dr_grpo" and a.norm_std:
        raise ConfigError("algo.adv_estimator=dr_grpo divides by no std: set algo.norm_std=false")
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

    t = cfg.trainer
    for key in ("max_steps", "tasks_per_step", "group_size"):
        if t[key] < (0 if key == "max_steps" else 1):
            raise ConfigError(f"trainer.{key}={t[key]} must be positive")
    if t.lr <= 0:
        raise ConfigError(f"trainer.lr={t.lr} must be > 0")
    if t.max_staleness != 0:
        raise ConfigError(
            f"trainer.max_staleness={t.max_staleness}: off-policy (stale) rollouts are not "
            "built yet; only 0 (synchronous RL) is supported")
    if cfg.eval.every < 0 or cfg.eval.num_tasks < 1 or cfg.eval.samples < 1:
        raise ConfigError("eval.every must be >= 0, eval.num_tasks and eval.samples >= 1")
    if cfg.env.max_turns < 1:
        raise ConfigError(f"env.max_turns={cfg.env.max_turns} must be >= 1")
    if not 1 <= cfg.env.max_results <= 10:
        raise ConfigError(f"env.max_results={cfg.env.max_results} must be in 1..10")
    if cfg.env.name == "enronhop":
        for key in ("emails_path", "train_tasks_path", "test_tasks_path"):
            if not cfg.env[key]:
                raise ConfigError(f"env=enronhop needs env.{key}=<path to your JSONL file>")
    if cfg.judge.name == "llm" and not (cfg.judge.base_url and cfg.judge.model):
        raise ConfigError("judge=llm needs judge.base_url and judge.model")
    if cfg.sampler.temperature < 0 or not 0 < cfg.sampler.top_p <= 1:
        raise ConfigError("sampler.temperature must be >= 0 and sampler.top_p in (0, 1]")
    if cfg.harness.answer_masking and not cfg.harness.action_masking:
        raise ConfigError("harness.answer_masking=true needs harness.action_masking=true")
    if cfg.harness.keyword_masking and not cfg.harness.action_masking:
        raise ConfigError("harness.keyword_masking=true needs harness.action_masking=true")
    if cfg.learner.name == "deepspeed" and cfg.learner.zero_stage not in (0, 1, 2, 3):
        raise ConfigError(f"learner.zero_stage={cfg.learner.zero_stage} must be 0..3")
