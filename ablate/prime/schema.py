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
    rest: bool = False         # also the rule of every key below it that has none itself
    only: tuple = ()           # the values ablate does too; another: refused (`otherwise`)
    otherwise: str = ""


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

# ------------------------------------------------------------------ every prime-rl key
# The rest of prime-rl's RLConfig (rl.py: trainer, orchestrator, inference, deployment and
# the shared keys), read from its pydantic classes at the commits of each era
# (tests/data/prime/prime_rl_keys_*.txt lists them; tests/apps/test_prime_eras.py checks
# that every one has a rule). Whole subtrees are one rule where all of them are one case.
MONITOR = "monitoring only: ablate logs to the cell directory and W&B (run.wandb_*)"
RESUME = "ablate resumes a cell from its own checkpoint: re-run the same command"
CKPT = "ablate checkpoints every learner.checkpoint_every steps (ckpt.interval)"
SERVING = "how prime-rl's inference server runs the model: ablate's sampler serves the " \
          "model it trains (model=..., sampler.*)"
MEMORY = "memory or speed only (parallelism, offloading, compilation, kernels, precision " \
         "of reductions): ablate sizes a cell itself (docs/gpu.md)"
TOKENIZER = "ablate uses the model's own tokenizer and chat template (model.hf_id)"
ALGO = ("ablate's algorithms are its own (algo=grpo, ...; docs/algorithms.md): remove the "
        "key, or run the nearest algo=...")
LOSS = ("ablate's loss is its algorithm's (algo.*; off-policy rollouts: algo.rollout_correction"
        "=token-mask): remove the key")
FILTER = ("ablate trains on every rollout of the batch (its only filter is dynamic sampling, "
          "algo.dynamic_sampling.*): remove the table")
TEACHER = "ablate has no teacher model (distillation): remove the table"
SAMPLING = "ablate's sampler takes temperature and max tokens only: remove the key"
VLM = "ablate trains text chat models: remove the key"
EVAL_ONLY = "ablate evaluates the training environment's held-out split (eval.*)"
ENV_INFRA = "where and how prime-rl runs the environment's workers: ablate runs it in-process"


def _ign(why: str, rest: bool = False, whole: bool = False) -> Rule:
    return Rule(IGNORE, why=why, rest=rest, whole=whole)


def _refuse(why: str, rest: bool = False, whole: bool = False) -> Rule:
    return Rule(REFUSE, why=why, rest=rest, whole=whole)


def _only(values: tuple, why: str, otherwise: str, types: tuple = ()) -> Rule:
    return Rule(IGNORE, types, why=why, only=values, otherwise=otherwise)


def _sampling(prefix: str) -> dict[str, Rule]:
    """A training sampling table beyond temperature and max tokens (all eras)."""
    return {f"{prefix}.max_completion_tokens": Rule("max_tokens", INT, low=1),
            f"{prefix}.min_tokens": _only((0,), "0: ablate samples until the model stops",
                                          SAMPLING, INT),
            f"{prefix}.repetition_penalty": _only((1, 1.0), "1.0: no penalty, as ablate",
                                                  SAMPLING, NUM),
            f"{prefix}.seed": _ign("ablate's sampler draws from the cell's seed"),
            f"{prefix}.extra_body": _refuse(SAMPLING, whole=True),
            f"{prefix}.temp_scheduler": _refuse("a temperature schedule: ablate samples at "
                                                "one sampler.temperature: remove the table",
                                                whole=True)}


def _env_infra(prefix: str) -> dict[str, Rule]:
    """An environment's worker settings (orchestrator.env[], train.env[], eval.env[])."""
    return {f"{prefix}.{k}": _ign(ENV_INFRA) for k in
            ("address", "extra_env_kwargs", "max_retries", "num_workers", "serve")} | {
        f"{prefix}.max_total_completion_tokens": _only(
            (-1,), "-1: no budget", "give seq_len (harness.max_tokens_per_episode) instead",
            INT)}


def _source(prefix: str) -> dict[str, Rule]:
    """Eras B and C: a training environment's own group, ratio, sampling and algorithm."""
    return {f"{prefix}.group_size": Rule("group", INT, low=1),
            f"{prefix}.ratio": _ign("one environment per cell: its share is all"),
            f"{prefix}.sampling.temperature": Rule("temperature", NUM, low=0),
            f"{prefix}.sampling.max_completion_tokens": Rule("max_tokens", INT, low=1),
            f"{prefix}.sampling.extra_body": _refuse(SAMPLING, whole=True),
            f"{prefix}.algo": _refuse(ALGO, rest=True),
            f"{prefix}.algo.type": _only(("grpo",), "ablate's algo=grpo", ALGO, STR),
            f"{prefix}.curriculum": _refuse("ablate's curriculum is algo.curriculum.*: "
                                            "remove the table", whole=True),
            **_env_infra(prefix)}


def _eval_more(prefix: str) -> dict[str, Rule]:
    """An evaluation environment's own settings beyond its size (eras A-C)."""
    return {f"{prefix}.{k}": _ign(EVAL_ONLY) for k in
            ("interval", "ratio", "skip_first", "extra_env_kwargs")} | {
        f"{prefix}.env": _ign(EVAL_ONLY, rest=True),
        f"{prefix}.sampling": _ign(EVAL_ONLY, whole=True),
        f"{prefix}.max_total_completion_tokens": _ign(EVAL_ONLY),
        **{f"{prefix}.{k}": _ign(ENV_INFRA) for k in
           ("address", "max_retries", "num_workers", "serve")}}


FULL: dict[str, Rule] = {
    # shared keys and launcher options (rl.py)
    **{k: _ign("a launcher option of prime-rl's rl entrypoint: ablate's cell directory "
               "(hydra.run.dir) and --cfg job do its work") for k in
       ("bench", "clean", "clean_output_dir", "dry_run", "dump_config")},
    "env_vars": _ign(INFRA, whole=True),
    "ckpt.keep_interval": _ign(CKPT),
    "ckpt.output_dir": _ign(CKPT),
    "ckpt.resume_step": _ign(RESUME),
    "model.vlm": _refuse(VLM, whole=True),
    "resume": _ign(RESUME, whole=True),
    "run": _ign(NAME, whole=True),
    "rollout_transport": _ign(INFRA, whole=True),
    "weight_broadcast": _ign(INFRA, whole=True),
    "teacher_inference": _ign(INFRA, whole=True),
    "tokenizer": _ign(TOKENIZER, whole=True),
    "wandb": _ign(MONITOR, rest=True),
    "monitors": _ign(MONITOR, rest=True),
    # orchestrator: scheduling, infrastructure, monitoring
    "orchestrator.max_steps": Rule("max_steps", INT, low=0),
    **{f"orchestrator.{k}": _ign(THROUGHPUT) for k in
       ("max_inflight_rollouts", "max_inflight_episodes", "tasks_per_minute", "bench",
        "pad_to_multiple_of")},
    **{f"orchestrator.{k}": _ign(INFRA) for k in
       ("num_train_workers", "pool_size", "env_server_base_port", "output_dir",
        "use_token_client")},
    "orchestrator.env_vars": _ign(INFRA, whole=True),
    "orchestrator.concurrency": _ign(THROUGHPUT, whole=True),
    "orchestrator.train.filter_zero_advantages": _ign(
        "ablate keeps zero-advantage tokens: they add no gradient, only the token mean's "
        "denominator differs (algo.loss_agg)"),
    **{f"orchestrator.{k}": _ign(MONITOR) for k in
       ("collect_inference_metrics", "inference_metrics_roles")},
    "orchestrator.strict_async_level": _only(
        (False,), "ablate's rollouts are at most max_async_level steps behind",
        "ablate's rollouts are at most max_async_level steps behind, never exactly: "
        "remove the key", BOOL),
    **{f"orchestrator.{k}": _ign(INFRA, whole=True) for k in
       ("client", "weight_broadcast", "rollout_transport", "heartbeat", "log")},
    **{f"orchestrator.{k}": _ign(MONITOR, whole=True) for k in
       ("prime_monitor", "monitors", "val")},
    "orchestrator.wandb": _ign(MONITOR, rest=True),
    "orchestrator.wandb.project": Rule("wandb_project", STR),
    "orchestrator.ckpt": _ign(CKPT, whole=True),
    "orchestrator.resume": _ign(RESUME, whole=True),
    "orchestrator.tokenizer": _ign(TOKENIZER, whole=True),
    **{f"orchestrator.model.{k}": _ign(SERVING) for k in
       ("trust_remote_code", "dtype", "max_model_len", "enforce_eager",
        "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "rope_scaling")},
    **{f"orchestrator.model.{k}": _ign(SERVING, whole=True) for k in ("client", "lora")},
    "orchestrator.model.name": Rule("model", STR),
    "orchestrator.model.vlm": _refuse(VLM, whole=True),
    "orchestrator.optim.lr": Rule("lr", NUM, low=0),
    "orchestrator.verification.enabled": _only(
        (True,), "ablate scores every rollout", "ablate trains on scored rollouts: "
        "remove the key", BOOL),
    # orchestrator: what changes the data or the update (refused where ablate differs)
    "orchestrator.advantage": _refuse(ALGO, rest=True),
    "orchestrator.advantage.type": _only(("default",), "prime-rl's group baseline; "
                                         "ablate's algorithm sets the advantage", ALGO, STR),
    "orchestrator.algo": _refuse(ALGO, rest=True),
    "orchestrator.algo.type": _only(("grpo",), "ablate's algo=grpo", ALGO, STR),
    "orchestrator.buffer": _refuse("difficulty filtering of the task buffer: ablate's "
                                   "nearest is algo.dynamic_sampling (DAPO): remove the key",
                                   rest=True),
    "orchestrator.buffer.seed": _ign("ablate draws tasks from the cell's seed"),
    "orchestrator.buffer.hash_keys": _ign("how prime-rl tells tasks apart"),
    **{f"orchestrator.{k}": _refuse(FILTER, whole=True) for k in
       ("filters[]", "pre_batch_filters[]", "post_batch_filters[]")},
    "orchestrator.teacher_model": _refuse(TEACHER, whole=True),
    "orchestrator.teacher_rollout_model": _refuse(TEACHER, whole=True),
    **_sampling("orchestrator.sampling"),
    **_sampling("orchestrator.train.sampling"),
    **_env_infra("orchestrator.env[]"),
    **_source("orchestrator.train.env[]"),
    **_source("orchestrator.train.source[]"),
    "orchestrator.train.source[].env": _refuse(
        "a verifiers setting ablate does not read (it reads env.taskset.id and the "
        "taskset's arguments; agents: ablate's harness): remove the key", rest=True),
    "orchestrator.train.source[].env.taskset": Rule("env_arg", rest=True),
    "orchestrator.train.env[].env.taskset": Rule("env_arg", rest=True),
    # evaluation (eras A-C)
    "orchestrator.eval.group_size": Rule("eval_group", INT, low=1),
    "orchestrator.eval.skip_first_step": Rule("eval_skip_first", BOOL),
    **{f"orchestrator.eval.{k}": _ign(RESUME) for k in
       ("skip_eval_on_resume", "retrigger_on_resume")},
    "orchestrator.eval.cancel_inflight_rollouts_on_eval": _ign(THROUGHPUT),
    **_eval_more("orchestrator.eval.env[]"),
    **_eval_more("orchestrator.eval.source[]"),
    "orchestrator.eval.source[].name": _ign("a label of the environment"),
    "orchestrator.eval.source[].num_examples": Rule("eval_num", INT),
    "orchestrator.eval.source[].group_size": Rule("eval_group", INT, low=1),
    "orchestrator.eval.source[].env.taskset.id": Rule("eval_env_id", STR),
    # trainer
    **{f"trainer.{k}": _ign(INFRA) for k in
       ("dist_timeout_seconds", "max_concurrent_runs", "output_dir", "enable_token_export")},
    "trainer.env_vars": _ign(INFRA, whole=True),
    **{f"trainer.{k}": _ign(MONITOR) for k in ("memory_profiler_path", "trace_path")},
    "trainer.matmul_precision": _ign(MEMORY),
    "trainer.enable_router_replay": _refuse("replaying the sampler's MoE routing: ablate "
                                            "has none: remove the key"),
    "trainer.max_steps": Rule("max_steps", INT, low=0),
    "trainer.max_async_level": Rule("async", INT, low=0),
    **{f"trainer.{k}": _ign(INFRA, whole=True) for k in
       ("weight_broadcast", "rollout_transport", "heartbeat", "log", "metrics_server")},
    **{f"trainer.{k}": _ign(MONITOR, whole=True) for k in ("bench", "monitors")},
    "trainer.wandb": _ign(MONITOR, rest=True),
    "trainer.gc": _ign(MEMORY, whole=True),
    "trainer.resume": _ign(RESUME, whole=True),
    "trainer.tokenizer": _ign(TOKENIZER, whole=True),
    "trainer.ckpt": _ign(CKPT, rest=True),
    "trainer.ckpt.interval": Rule("ckpt_interval", INT, low=1),
    "trainer.ckpt.keep_last": Rule("keep_last", INT, low=1),
    "trainer.data.fake": _refuse("fake data (a benchmark): ablate trains on rollouts: "
                                 "remove the table", whole=True),
    "trainer.loss": _refuse(LOSS, rest=True),
    "trainer.loss.type": _only(("default",), "ablate's algorithm sets the loss", LOSS, STR),
    **{f"trainer.model.{k}": _ign(MEMORY) for k in
       ("attn", "fsdp_cpu_offload", "optim_cpu_offload", "reshard_after_forward",
        "dp_replicate", "ep", "tp", "cp", "cp_style", "impl", "optimization_dtype",
        "reduce_dtype", "moe_use_grouped_mm", "moe_router_dtype", "fused_lm_head_chunk_size",
        "fused_lm_head_token_chunk_size", "deepep_num_sms", "deepep_token_chunk_size",
        "ep_comm_backend", "conversion_dir", "moe_fused_kernel")},
    **{f"trainer.model.{k}": _ign(MEMORY, whole=True) for k in
       ("compile", "ac_offloading", "index_cache", "full_offload")},
    "trainer.model.name": Rule("model", STR),
    "trainer.model.seq_len": Rule("seq_len", INT, low=1),
    "trainer.model.trust_remote_code": _ign(SERVING),
    "trainer.model.vlm": _refuse(VLM, whole=True),
    "trainer.model.debug": _refuse("a debug model (random weights or fewer layers): "
                                   "remove the table", whole=True),
    "trainer.model.quantization": _refuse("quantized training: ablate trains in "
                                          "model.dtype: remove the table", whole=True),
    "trainer.model.freeze_moe_router": _refuse("ablate trains every parameter it trains "
                                               "(or LoRA): remove the key"),
    "trainer.model.lora.modules_to_save": _refuse("ablate trains the LoRA adapters only: "
                                                  "remove the key"),
    "trainer.optim": _refuse("an optimizer setting ablate does not have (AdamW: "
                             "learner.betas, learner.grad_clip): remove the key", rest=True),
    "trainer.optim.type": _only(("adamw",), "ablate trains with AdamW",
                                "ablate trains with AdamW: remove the key", STR),
    "trainer.optim.max_norm": Rule("grad_clip", NUM, low=0),
    "trainer.optim.betas1": Rule("beta1", NUM, low=0, high=1),
    "trainer.optim.betas2": Rule("beta2", NUM, low=0, high=1),
    "trainer.scheduler": _refuse("an lr schedule: ablate's lr is constant after "
                                 "learner.warmup_steps: remove the key", rest=True),
    "trainer.scheduler.type": _only(("constant",), "ablate's lr is constant",
                                    "ablate's lr is constant after learner.warmup_steps: "
                                    "remove the key", STR),
}
PRIME_RL.update(FULL)

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
