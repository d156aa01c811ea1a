"""What each key of a Prime file means here: a rule per key, for the Lab format (the
article's `prime rl run` file) and for prime-rl's own schema in its three eras.

A rule maps a key to a *field* (convert.py turns fields into ablate keys), or says it is
ignored (and why) or refused (and why). A key no rule names is an error, with the nearest
known key suggested: prime-rl rejects unknown keys too, so a typo never passes silently.
docs/prime.md is the same table in prose; tests/apps/test_prime.py checks that it names every
key here.
"""
from __future__ import annotations

from dataclasses import dataclass

IGNORE, REFUSE = "ignore", "refuse"


@dataclass(frozen=True)
class Rule:
    field: str                 # a field of convert.py, or IGNORE / REFUSE
    types: tuple = ()          # accepted TOML value types; () = any
    why: str = ""              # ignored / refused: why
    whole: bool = False        # a table taken as one value (free-form args, ignored tables)
    low: float | None = None   # a number's range (prime-rl's own Field(ge=..., le=...))
    high: float | None = None


INT, NUM, STR, BOOL = (int,), (int, float), (str,), (bool,)
LIST, DICT = (list,), (dict,)

INFRA = ("ablate places a cell itself: run.devices_per_cell (GPUs per grid cell), "
         "sampler.tensor_parallel_size, torchrun or the deepspeed launcher for ranks")
THROUGHPUT = "throughput only: ablate generates exactly each step's batch"
HARNESS = "ablate's own harness runs the tool loop (harness.*, agent=...)"
NAME = "ablate names a run by its cell directory (hydra.run.dir)"


def _ignored(why: str, whole: bool = False) -> Rule:
    return Rule(IGNORE, why=why, whole=whole)


def _env(prefix: str, id_key: str = "id") -> dict[str, Rule]:
    return {f"{prefix}.{id_key}": Rule("env_id", STR),
            f"{prefix}.args": Rule("env_args", DICT, whole=True),
            f"{prefix}.name": _ignored("a label of the environment")}


def _eval_env(prefix: str) -> dict[str, Rule]:
    return {f"{prefix}.id": Rule("eval_env_id", STR),
            f"{prefix}.args": _ignored("ablate evaluates the training environment",
                                       whole=True),
            f"{prefix}.name": _ignored("a label of the environment"),
            f"{prefix}.num_examples": Rule("eval_num", INT),
            f"{prefix}.rollouts_per_example": Rule("eval_group", INT, low=1),
            f"{prefix}.group_size": Rule("eval_group", INT, low=1)}


def _eval(prefix: str) -> dict[str, Rule]:
    keys = {f"{prefix}.interval": Rule("eval_interval", INT, low=1),
            f"{prefix}.num_examples": Rule("eval_num", INT),
            f"{prefix}.rollouts_per_example": Rule("eval_group", INT, low=1),
            f"{prefix}.eval_base_model": Rule("eval_base", BOOL),
            f"{prefix}.sampling": _ignored("ablate evaluates at eval.temperature "
                                           "(default: the training temperature)", True)}
    return {**keys, **_eval_env(f"{prefix}.env[]")}


def _wandb(prefix: str) -> dict[str, Rule]:
    return {f"{prefix}.project": Rule("wandb_project", STR),
            f"{prefix}.name": _ignored(NAME),
            f"{prefix}.entity": _ignored("set the WANDB_ENTITY environment variable"),
            f"{prefix}.offline": Rule("wandb_offline", BOOL)}


LAB: dict[str, Rule] = {
    "model": Rule("model", STR),
    "max_steps": Rule("max_steps", INT, low=0),
    "batch_size": Rule("batch", INT, low=1),
    "rollouts_per_example": Rule("group", INT, low=1),
    "learning_rate": Rule("lr", NUM, low=0),
    "lora_alpha": Rule("lora_alpha", NUM, low=0),
    "oversampling_factor": Rule("oversampling", NUM, low=1),
    "max_async_level": Rule("async", INT, low=0),
    "seq_len": Rule("seq_len", INT, low=1),
    "trajectory_strategy": _ignored("ablate trains every turn of an episode as its own "
                                    "segment of one sequence (interleaved)"),
    "sampling.max_tokens": Rule("max_tokens", INT, low=1),
    "sampling.temperature": Rule("temperature", NUM, low=0),
    **_env("env[]"),
    **_wandb("wandb"),
    **_eval("eval"),
    "infrastructure": _ignored(INFRA, whole=True),
}

PRIME_RL: dict[str, Rule] = {
    # top level (all eras)
    "max_steps": Rule("max_steps", INT, low=0),
    "seq_len": Rule("seq_len", INT, low=1),
    "max_model_len": Rule("seq_len", INT, low=1),
    "max_async_level": Rule("async", INT, low=0),
    "model.name": Rule("model", STR),
    "output_dir": _ignored("the cell directory is hydra.run.dir"),
    "inference_gpu_ids": _ignored(INFRA),
    "trainer_gpu_ids": _ignored(INFRA),
    "deployment": _ignored(INFRA, whole=True),
    "inference": _ignored(INFRA, whole=True),
    "slurm": _ignored(INFRA, whole=True),
    "log": _ignored("ablate logs to the cell directory", whole=True),
    "ckpt": _ignored("ablate checkpoints every learner.checkpoint_every steps"),
    "ckpt.interval": Rule("ckpt_interval", INT, low=1),
    "ckpt.keep_last": Rule("keep_last", INT, low=1),
    **_wandb("wandb"),
    **_wandb("monitors.wandb"),
    # orchestrator (all eras)
    "orchestrator.batch_size": Rule("batch", INT, low=1),
    "orchestrator.token_batch_size": Rule(REFUSE, why="ablate's batch is tasks x group "
                                          "rollouts, not a token budget: give "
                                          "orchestrator.batch_size"),
    "orchestrator.rollouts_per_example": Rule("group", INT, low=1),
    "orchestrator.group_size": Rule("group", INT, low=1),
    "orchestrator.max_async_level": Rule("async", INT, low=0),
    "orchestrator.max_off_policy_steps": Rule("async", INT, low=0),
    "orchestrator.oversampling_factor": Rule("oversampling", NUM, low=1),
    "orchestrator.seed": Rule("seed", INT),
    "orchestrator.seq_len": Rule("seq_len", INT, low=1),
    "orchestrator.max_inflight_groups": _ignored(THROUGHPUT),
    "orchestrator.max_concurrent": _ignored(THROUGHPUT),
    "orchestrator.renderer": _ignored("ablate renders with the model's chat template",
                                      whole=True),
    # era A: orchestrator.sampling, [[orchestrator.env]]
    "orchestrator.sampling.temperature": Rule("temperature", NUM, low=0),
    "orchestrator.sampling.max_tokens": Rule("max_tokens", INT, low=1),
    **_env("orchestrator.env[]"),
    # eras B and C: orchestrator.train
    "orchestrator.train.sampling.temperature": Rule("temperature", NUM, low=0),
    "orchestrator.train.sampling.max_tokens": Rule("max_tokens", INT, low=1),
    "orchestrator.train.sampling.max_completion_tokens": Rule("max_tokens", INT, low=1),
    **_env("orchestrator.train.env[]"),
    "orchestrator.train.env[].taskset.id": Rule("env_id", STR),
    "orchestrator.train.env[].env.taskset.id": Rule("env_id", STR),
    "orchestrator.train.env[].harness": _ignored(HARNESS, whole=True),
    "orchestrator.train.env[].env.agent": _ignored(HARNESS, whole=True),
    "orchestrator.train.source[].name": _ignored("a label of the source"),
    "orchestrator.train.source[].env.taskset.id": Rule("env_id", STR),
    "orchestrator.train.source[].env.taskset.args": Rule("env_args", DICT, whole=True),
    "orchestrator.train.source[].env.agent": _ignored(HARNESS, whole=True),
    **_eval("orchestrator.eval"),
    # trainer
    "trainer.optim.lr": Rule("lr", NUM, low=0),
    "trainer.optim.weight_decay": Rule("weight_decay", NUM, low=0),
    "trainer.model.ac": _ignored("activation checkpointing saves memory, it does not "
                                 "change results", whole=True),
    "trainer.model.lora": Rule("lora", DICT),
    "trainer.model.lora.rank": Rule("lora_rank", INT, low=1),
    "trainer.model.lora.alpha": Rule("lora_alpha", NUM, low=0),
    "trainer.model.lora.dropout": Rule("lora_dropout", NUM, low=0, high=1),
    "trainer.model.lora.target_modules": Rule("lora_targets", LIST),
}

FORMATS = {"lab": LAB, "prime-rl": PRIME_RL}


def detect(data: dict) -> tuple[str, str]:
    """(format, era) from the keys: the Lab's top-level `model` string, `[[env]]` or
    `[sampling]`; else prime-rl, era C (`orchestrator.train.source`), B
    (`orchestrator.train.env`) or A (the rest)."""
    orch = data.get("orchestrator") or {}
    train = orch.get("train") if isinstance(orch, dict) else None
    train = train if isinstance(train, dict) else {}
    if "source" in train:
        return "prime-rl", "C"
    if "env" in train:
        return "prime-rl", "B"
    if isinstance(data.get("model"), str) or "env" in data or "sampling" in data \
            or not orch:
        return "lab", "lab"
    return "prime-rl", "A"
