"""The root configuration: one typed dataclass per stage, assembled here and registered
with Hydra's ConfigStore so that unknown keys and wrong types fail at compose time.

Group yaml files in conf/<group>/ set values inside these schemas; `validate(cfg)` adds
the checks a schema cannot express (allowed option names, eps_high >= eps_low, ...)."""
from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from ablate.core.dist import env_world_size
from ablate.core.threads import parse_threads
from ablate.core.errors import ConfigError, need
from ablate.agents import AGENTS
from ablate.agents.config import AgentConfig, check as check_agent
from ablate.algos.config import AlgoConfig, check_algo
from ablate.algos.registry import (ADVANTAGE_ESTIMATORS, ALGORITHMS, LOSS_AGGREGATIONS,
                                   PAIR_RULES, POLICY_LOSSES, ROLLOUT_CORRECTIONS,
                                   import_plugins)
from ablate.protocol.config import EnvConfig
from ablate.envs import ENVIRONMENTS, EnvError, declared, env_class
from ablate.harness.config import HarnessConfig, ModeConfig, check_harness
from ablate.harness.parser import PARSERS
from ablate.learners import LEARNERS
from ablate.learners.config import LearnerConfig
from ablate.models.config import ASSETS_DIR, ModelConfig
from ablate.rewards.config import RewardConfig
from ablate.rewards.schemes import REWARDS
from ablate.rewards.world_model import AGGREGATES
from ablate.samplers import SAMPLERS
from ablate.samplers.config import SamplerConfig

__all__ = ["AblateConfig", "ConfigError", "register", "validate"]


@dataclass
class TrainerConfig:
    max_steps: int = 10                  # optimizer steps (0 = evaluate the initial policy only)
    tasks_per_step: int = 8              # GRPO groups per optimizer step
    group_size: int = 8                  # rollouts per task (G)
    lr: float = 1e-4                     # learning rate (after learner.warmup_steps)
    # asynchronous rollouts: the sampler process may be up to k policy versions behind
    # the learner (0 = the synchronous loop); docs/architecture.md "Asynchronous rollouts"
    max_async_level: int = 0


@dataclass
class EvalConfig:
    every: int = 5                       # optimizer steps between evaluations (0 = final only)
    num_tasks: int = 64                  # held-out tasks (fixed subset, shared by all cells)
    offset: int = 0                      # index of the first of them in the test split
    samples: int = 4                     # k samples per question: eval/accuracy is avg@k
    temperature: Optional[float] = None  # of those samples; null = sampler.temperature, 0 = greedy
    greedy: bool = True                  # also a greedy pass (eval/greedy_accuracy, beside it)
    at_start: bool = True                # evaluate the initial policy (step 0)


@dataclass
class RunConfig:
    quiet: bool = False                  # no progress display (sweeps)
    num_trajectories: int = 16           # readable trajectories written per evaluation
    wandb_mode: str = "${oc.env:WANDB_MODE,offline}"   # online | offline | disabled
    wandb_project: str = "ablate"        # Weights & Biases project of the run
    device: str = "cpu"                  # cpu | cuda | cuda:N
    # the device's memory in GB for preflight's memory plan (ablate/apps/memory_plan.py);
    # null: what the device reports. Set it to plan a GPU cell on a machine without one
    device_memory_gb: Optional[float] = None
    # torch CPU threads: auto = the cores this process does not share (ablate/core/threads.py:
    # the cores / local ranks, less the async producer's; 1 beside a vLLM engine); an int
    # fixes it (0 = torch's default). On a machine other processes keep busy set 1: two
    # threads on a shared core are several times slower than one (docs/cpu.md)
    num_threads: str = "auto"
    # keep freed memory for reuse instead of page-faulting it in again every turn (glibc's
    # mallopt; ablate/core/memory.py): ~10% of an evaluation of the default cell
    malloc_reuse: bool = True
    # resume an interrupted cell whose config differs in a result-changing key (the
    # change is recorded in config_changes.jsonl and the metrics); false refuses
    allow_config_change: bool = False
    # ranks of the cell (torchrun / deepspeed launcher): recorded by the cell from the
    # launcher's WORLD_SIZE (1 without one); a value given here must match it; a cell
    # resumes only with the world size it started with (docs/distributed.md)
    world_size: int = 1
    # seconds a collective may wait for the other ranks before the cell fails (a rank
    # that died ends the others, never a hang; torch.distributed init_process_group)
    dist_timeout_s: float = 600.0
    # parallel grid workers on a multi-GPU machine (hydra/launcher=joblib,
    # submitit_local): devices each cell gets via CUDA_VISIBLE_DEVICES (0 = no assignment)
    devices_per_cell: int = 0


@dataclass
class AblateConfig:
    seed: int = 0                        # every random choice derives from it (and the step)
    # your modules, imported before validation so that their registrations (rewards,
    # environments, estimators, losses, agents, parsers, samplers, learners) count
    plugins: list[str] = field(default_factory=list)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    # harness.predict follows reward.world_model.enable unless set (predict, unpaid: an axis)
    harness: HarnessConfig = field(default_factory=lambda: HarnessConfig(
        predict="${reward.world_model.enable}"))
    mode: ModeConfig = field(default_factory=ModeConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    # reward.name follows the environment's default_reward unless set (reward=, reward.name=)
    reward: RewardConfig = field(default_factory=lambda: RewardConfig(
        name="${ablate_env_reward:${env.name},${env._target_}}"))
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    run: RunConfig = field(default_factory=RunConfig)
    experiment: Optional[str] = None     # the +experiment=NAME preset applied, if any


# The backend axes whose entries declare their own config schema (the `<group>=<name>`
# option selects it; ablate.core.registry.Declaration)
BACKENDS = {"sampler": SAMPLERS, "learner": LEARNERS}


# The names each key accepts: an axis's Registry (ablate.core.registry: live, so names a
# user's `plugins` module registers count) or, for a fixed choice, a tuple.
ALLOWED = {
    "reward.name": REWARDS,
    "algo.algorithm": ALGORITHMS,
    "algo.adv_estimator": ADVANTAGE_ESTIMATORS,
    "algo.policy_loss": POLICY_LOSSES,
    "algo.loss_agg": LOSS_AGGREGATIONS,
    "algo.rollout_correction": ROLLOUT_CORRECTIONS,
    "algo.dpo.pairs": PAIR_RULES,
    "algo.rft.keep": ("correct", "reward"),
    "algo.curriculum.mode": ("schedule", "promotion"),
    "agent.name": AGENTS,
    "mode.name": ("instruct", "thinking"),
    "env.name": ENVIRONMENTS,
    "sampler.name": SAMPLERS,
    "learner.name": LEARNERS,
    "learner.dtype": ("float32", "bfloat16"),
    "model.dtype": ("float32", "bfloat16", "float16"),
    "harness.on_malformed": ("continue", "end"),
    "harness.calls_per_turn": ("first", "all"),
    "harness.parser": PARSERS,
    "reward.world_model.aggregate": AGGREGATES,
}


WANDB_MODES = ("online", "offline", "disabled")


MAX_DIRNAME = 200   # file systems allow 255 bytes per path component


def cell_dirname(overrides: str) -> str:
    """A multirun cell's directory name: Hydra's override dirname, or (if too long for a
    file system) its head plus a hash of the whole, stable across re-runs of the grid.
    A swept value holding "/" (a path, a URL) has it written as "%2F": one directory."""
    overrides = safe_dirname(overrides)
    if len(overrides.encode()) <= MAX_DIRNAME:
        return overrides or "default"
    digest = hashlib.sha1(overrides.encode()).hexdigest()[:12]
    return overrides.encode()[: MAX_DIRNAME - 14].decode(errors="ignore") + "~" + digest


def safe_dirname(name: str) -> str:
    """One path component: "/" and NUL percent-encoded, and "%" itself (so no two names
    meet); names without any of them are unchanged."""
    if not any(c in name for c in "/%\0"):
        return name
    return name.replace("%", "%25").replace("/", "%2F").replace("\0", "%00")


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="ablate_schema", node=AblateConfig)
    for name, cls in ENVIRONMENTS.items():   # conf/env/<name>.yaml: defaults [<name>_schema]
        cs.store(group="env", name=f"{name}_schema", node=cls.config_schema(name=name))
    for group, registry in BACKENDS.items():
        for name in registry:
            # conf/<group>/<name>.yaml: defaults [<name>_schema]; a plugin's backend has no
            # yaml: `<group>=<name>` selects its schema from the ConfigStore directly
            node = registry.config(name)
            cs.store(group=group, name=f"{name}_schema", node=node)
            if name not in registry.builtin():
                cs.store(group=group, name=name, node=node)
    if not OmegaConf.has_resolver("ablate_env_reward"):
        OmegaConf.register_new_resolver("ablate_env_reward", env_default_reward)
    if not OmegaConf.has_resolver("ablate_dirname"):
        OmegaConf.register_new_resolver("ablate_dirname", cell_dirname)
    if not OmegaConf.has_resolver("ablate_asset"):
        OmegaConf.register_new_resolver("ablate_asset", asset_dir)


def env_default_reward(name: str, target: Optional[str] = None) -> str:
    """`${ablate_env_reward:NAME,TARGET}`: the environment's default_reward (an unknown
    environment falls back to the generic default; validate names the mistake)."""
    try:
        return declared(env_class({"name": name, "_target_": target})).default_reward
    except EnvError:
        return RewardConfig.name


def asset_dir(name: str) -> str:
    """`${ablate_asset:NAME}`: a checkpoint shipped in ablate/models/assets/NAME."""
    return str(ASSETS_DIR / name)


# an environment checks its own keys (Environment.check_config); a scheme's component
# weights are checked against its Rubric in validate; learner.ds_overrides is DeepSpeed's
# own config (any of its keys), deep-merged into the engine's
FREE_KEYS = ("env", "reward.weights", "learner.ds_overrides")


# float keys whose schema allows infinity or NaN (none yet): every other float in the
# validated config must be finite (trainer.lr=inf trained one step at an infinite rate)
NONFINITE_OK: tuple[str, ...] = ()


def _nonfinite(node, prefix: str = ""):
    """(key, value) of every non-finite float in a config tree (dicts and lists)."""
    items = node.items() if isinstance(node, dict) else (
        enumerate(node) if isinstance(node, list) else ())
    for k, v in items:
        key = f"{prefix}{k}" if isinstance(node, dict) else f"{prefix[:-1]}[{k}]"
        if isinstance(v, float) and not math.isfinite(v):
            yield key, v
        else:
            yield from _nonfinite(v, key + ".")


def _check_finite(cfg) -> None:
    """Every float setting is a finite number, unless NONFINITE_OK names it."""
    tree = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) \
        else cfg
    for key, value in _nonfinite(tree):
        if key not in NONFINITE_OK:
            raise ConfigError(f"{key}={value}: must be a finite number")


def _unknown_keys(schema: DictConfig, cfg: DictConfig, prefix: str) -> list[str]:
    out = []
    for key in cfg.keys():
        if key not in schema:
            out.append(prefix + str(key))
        elif isinstance(schema[key], DictConfig) and isinstance(cfg[key], DictConfig) \
                and f"{prefix}{key}" not in FREE_KEYS:
            if prefix + str(key) in BACKENDS and cfg[key].get("name") not in \
                    BACKENDS[prefix + str(key)]:
                continue      # an unknown backend: ALLOWED names it
            sub = _backend_schema(prefix + str(key), cfg[key]) or schema[key]
            out += _unknown_keys(sub, cfg[key], f"{prefix}{key}.")
    return out


def _backend_schema(key: str, node: DictConfig) -> Optional[DictConfig]:
    """A backend axis's node is checked against its selected backend's own schema."""
    registry = BACKENDS.get(key)
    name = node.get("name") if registry is not None else None
    return _backend_node(key, name) if name in (registry or {}) else None


@functools.lru_cache(maxsize=32)
def _backend_node(key: str, name: str) -> DictConfig:
    return OmegaConf.structured(BACKENDS[key].config(name))


def _check_backend_keys(cfg) -> None:
    """`sampler.name=X` (or learner.name) without `sampler=X` keeps the other backend's
    keys: refused, naming the option that brings X's own keys."""
    for group, registry in BACKENDS.items():
        node, name = cfg[group], cfg[group].name
        if name not in registry:
            continue          # ALLOWED names the unknown backend
        have, own = set(node.keys()), registry.schema_keys(name)
        missing, foreign = sorted(own - have), sorted(have - own)
        if missing or foreign:
            what = (f"lacks its own key(s) {missing}" if missing else
                    f"does not take {', '.join(f'{group}.{k}' for k in foreign)}")
            raise ConfigError(f"{group}.name={name!r} {what}: select the backend with "
                              f"{group}={name} (its keys come with it)")


@functools.lru_cache(maxsize=1)
def _schema() -> DictConfig:
    """The schema as a read-only config, built once (a structured build takes ~0.2 s)."""
    schema = OmegaConf.structured(AblateConfig)
    OmegaConf.set_readonly(schema, True)
    return schema


def _validate_async(cfg) -> None:
    k = cfg.trainer.max_async_level
    need(k >= 0, "trainer.max_async_level", k, "must be >= 0 (0 = synchronous)")
    if k == 0 or cfg.model.name == "scripted":
        return
    able = SAMPLERS.declaring("async_producer")
    need(cfg.sampler.name in able, "trainer.max_async_level", k,
         f"needs {' or '.join(f'sampler={n}' for n in able)} (a sampler the producer "
         f"process can own), not {cfg.sampler.name}")
    need(not cfg.algo.dynamic_sampling.enable, "trainer.max_async_level", k,
         "does not refill batches: set algo.dynamic_sampling.enable=false")
    need(not cfg.algo.curriculum.enable, "trainer.max_async_level", k,
         "the producer draws each step's tasks ahead without the curriculum's state: "
         "set algo.curriculum.enable=false")
    need(cfg.algo.rollout_correction != "none", "trainer.max_async_level", k,
         "trains on stale batches: set algo.rollout_correction=decoupled-ppo (AReaL) or "
         "token-tis / seq-tis / token-mask / seq-mask")


def validate(cfg: DictConfig | Any) -> None:
    """Checks that a schema cannot express. Raises ConfigError naming the key."""
    def get(key):
        return OmegaConf.select(cfg, key)

    try:   # the user's modules register their names before the names are checked
        import_plugins(get("plugins"))
        import_plugins(get("algo.plugins"), key="algo.plugins")   # the older spelling
        if get("env._target_"):          # a user's environment class registers env.name
            env_class(cfg.env)
    except (ValueError, EnvError) as e:
        raise ConfigError(str(e)) from None
    missing = sorted(OmegaConf.missing_keys(cfg)) if isinstance(cfg, DictConfig) else []
    if missing:
        raise ConfigError(f"missing mandatory value(s): {', '.join(missing)}")

    if isinstance(cfg, DictConfig):  # `+group.key=v` can append keys the schema lacks
        _check_backend_keys(cfg)
        unknown = _unknown_keys(_schema(), cfg, "")
        if unknown:
            raise ConfigError(f"unknown config key(s): {', '.join(unknown)}")

    _check_finite(cfg)
    for key, allowed in ALLOWED.items():
        value = get(key)
        if value not in allowed:
            raise ConfigError(f"{key}={value!r} is not one of {list(allowed)}")
    REWARDS[cfg.reward.name].check_weights(cfg.reward.weights, cfg.reward.name)

    check_algo(cfg)
    _check_trainer(cfg)
    check_harness(cfg)
    _check_env(cfg)
    for registry in (LEARNERS, SAMPLERS, ALGORITHMS):   # each backend checks its own keys
        check = registry.declared(get(registry.key)).check
        if check is not None:
            check(cfg)
    _check_run(cfg)
    check_agent(cfg, need)




def _check_trainer(cfg) -> None:
    t = cfg.trainer
    need(t.max_steps >= 0, "trainer.max_steps", t.max_steps, "must be >= 0")
    need(t.tasks_per_step >= 1, "trainer.tasks_per_step", t.tasks_per_step, "must be >= 1")
    need(t.group_size >= 1, "trainer.group_size", t.group_size, "must be >= 1")
    # group-relative advantages (GRPO, Shao et al. 2024 eq. 3; Dr. GRPO, Liu et al. 2025
    # eq. 2) subtract the group mean: with one rollout per group every advantage is 0
    learning = cfg.model.name != "scripted" and t.max_steps > 0
    need(not learning or t.group_size >= 2, "trainer.group_size", t.group_size,
         f"algo.adv_estimator={cfg.algo.adv_estimator} is group-relative: a group of one "
         "has zero advantage; use >= 2")
    need(t.lr > 0, "trainer.lr", t.lr, "must be > 0")
    _validate_async(cfg)
    e = cfg.eval
    need(e.every >= 0, "eval.every", e.every, "must be >= 0 (0 = final evaluation only)")
    need(e.num_tasks >= 1, "eval.num_tasks", e.num_tasks, "must be >= 1")
    need(e.offset >= 0, "eval.offset", e.offset, "must be >= 0")
    need(e.samples >= 1, "eval.samples", e.samples, "must be >= 1")
    need(e.temperature is None or e.temperature >= 0, "eval.temperature", e.temperature,
         "must be >= 0 (0 = greedy) or null (= sampler.temperature)")


def _check_env(cfg) -> None:
    """The keys every environment has; then the environment checks its own."""
    env = cfg.env
    need(env.max_turns >= 1, "env.max_turns", env.max_turns, "must be >= 1")
    need(bool(env.cache_dir), "env.cache_dir", env.cache_dir, "give a directory")
    try:
        env_class(env).check_config(env)
    except EnvError as e:
        raise ConfigError(str(e)) from None


def _threads_ok(value) -> bool:
    try:
        parse_threads(value)
    except ValueError:
        return False
    return True


def _check_run(cfg) -> None:
    r = cfg.run
    need(r.wandb_mode in WANDB_MODES, "run.wandb_mode", r.wandb_mode,
         f"choose one of {list(WANDB_MODES)}")
    need(_threads_ok(r.num_threads), "run.num_threads", r.num_threads,
         "must be auto or an integer >= 0 (0 = torch's default)")
    need(r.num_trajectories >= 0, "run.num_trajectories", r.num_trajectories, "must be >= 0")
    need(r.device == "cpu" or r.device == "cuda" or r.device.startswith("cuda:"),
         "run.device", r.device, "choose cpu, cuda or cuda:N")
    need(r.device_memory_gb is None or r.device_memory_gb > 0, "run.device_memory_gb",
         r.device_memory_gb, "must be > 0 (the device's memory in GB, for the memory plan) "
         "or null (what the device reports)")
    _check_ranks(cfg)


def _check_ranks(cfg) -> None:
    """run.world_size is recorded from the launcher (docs/distributed.md)."""
    r, launched = cfg.run, env_world_size()
    need(r.world_size in (1, launched), "run.world_size", r.world_size,
         f"this launch has {launched} rank(s) (the launcher's WORLD_SIZE); leave it unset")
    need(r.dist_timeout_s > 0, "run.dist_timeout_s", r.dist_timeout_s, "must be > 0")
    need(r.devices_per_cell >= 0, "run.devices_per_cell", r.devices_per_cell, "must be >= 0")
    if launched > 1:
        able = LEARNERS.declaring("multi_rank")
        need(cfg.learner.name in able, "learner.name", cfg.learner.name,
             f"must be one of {able} with {launched} ranks (one engine over the ranks)")
        need(cfg.trainer.max_async_level == 0, "trainer.max_async_level",
             cfg.trainer.max_async_level, f"must be 0 with {launched} ranks (the "
             "asynchronous producer is single-process)")
