"""Checks that need the machine, run by `python -m ablate` on every job of the command
line before Hydra makes a cell directory: model weights present, optional packages
importable, device and dtype usable, output and cache paths writable, token budgets
within the model's context (the environment's own prompt text), and the environment
itself: built from its config (its data validated), built again (the same splits),
and one episode of its baseline played through the protocol (ablate.envs.conformance),
reward weights that sum to zero (a warning), and the memory plan
(ablate.apps.memory_plan: a cell whose bytes cannot fit on its device is refused).

Each failure is one ConfigError naming the key, the value and what is allowed.
`ablate.loop.config.validate` holds the checks that need only the config.
"""
from __future__ import annotations

import importlib.util
import inspect
import logging
import math
import numbers
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from ablate.apps.memory_plan import checkpoint_terms, memory_plan, shape_of_dir, without_gpu
from ablate.envs import (EnvError, check_reward_for, config_keys, declared, env_class,
                         make_env, split_tasks)
from ablate.envs.conformance import (check_class, check_rebuilt, check_seeded, check_splits,
                                     check_tools, mask_watch, play_one, protocol)
from ablate.harness.episode import scripted_episode
from ablate.agents.skills import SkillWorld
from ablate.algos.registry import ALGORITHMS
from ablate.learners import LEARNERS
from ablate.samplers import SAMPLERS
from ablate.samplers.config import devices_problem
from ablate.harness.masking import mask_context
from ablate.loop.scoring import eval_subset
from ablate.loop.config import ConfigError, validate
from ablate.loop.outputs import JSONL_FILES, OutputFileError, read_jsonl
from ablate.models.budget import TEMPLATE_SLACK_TOKENS, check_weights, question_budget
from ablate.protocol.rubric import weights_of
from ablate.rewards import REWARDS

log = logging.getLogger("ablate")

# (key, value that needs it) -> importable module; the backends' own come from their
# declarations (SAMPLERS / LEARNERS / ALGORITHMS `packages`, see backend_packages)
OPTIONAL_PACKAGES = (
    ("learner.lora.enable", True, "peft"),
    ("run.wandb_mode", "online", "wandb"),
)


def preflight(cfg: DictConfig, *, data: bool = True) -> None:
    """validate(cfg) plus every check against this machine; `data=False` skips the
    (cached, but file-reading) data validation."""
    validate(cfg)
    check_env_reward(cfg)
    warn_zero_weights(cfg)
    check_features(cfg)
    check_packages(cfg)
    check_device(cfg)
    check_writable(cfg)
    model_dir = check_weights(cfg)
    prompt = 0
    with env_errors(cfg):
        check_class(env_class(cfg.env), cfg.env.name)
        if model_dir is not None:
            text = protocol(cfg.env.name, "prompt_text",
                            lambda: env_class(cfg.env).prompt_text(cfg.env))
            budget = question_budget(cfg, model_dir, text)
            prompt = budget.count(text) + TEMPLATE_SLACK_TOKENS if budget else 0
        if data:
            check_env(cfg)
    if model_dir is not None:
        check_memory(cfg, prompt_tokens=prompt)


def check_memory(cfg: DictConfig, prompt_tokens: int = 0):
    """The memory plan of the cell, printed as a table (unless run.quiet); a plan that
    cannot fit on its GPU, or whose offload does not fit this machine's RAM, is one
    ConfigError line (on CPU it is only reported; host RAM planned for another machine
    is a warning). `prompt_tokens`: the system prompt and tools, for the KV cache."""
    plan = memory_plan(cfg, prompt_tokens=prompt_tokens)
    if plan is None:
        return None
    if not cfg.run.quiet:
        print(plan.table())
    why = plan.refusal()
    if why:
        raise ConfigError(why)
    host = plan.host_line()
    if host:
        log.warning("memory plan: %s (planned for %s, not refused here)", host,
                    plan.device_source)
    if plan.peak > plan.device_bytes:
        log.warning("memory plan: %.1f GB peak > %.1f GB of %s (%s): reported, not refused "
                    "on CPU", plan.peak / 1e9, plan.device_bytes / 1e9, plan.device,
                    plan.device_source)
    return plan


@contextmanager
def env_errors(cfg: DictConfig):
    """The environment's errors (EnvError, its config_errors: bad data files) as one
    ConfigError line."""
    try:
        yield
    except (EnvError, *declared(env_class(cfg.env)).config_errors) as exc:
        raise ConfigError(one_line(exc)) from None


def check_env(cfg: DictConfig) -> None:
    """Build the environment as the cell will (its data validated: a bad record names
    file:line), again (the same splits; another seed_key, other ones), and play one
    episode through the protocol, its masks read on every turn (ablate.envs.conformance)."""
    env, label, h = build(cfg), cfg.env.name, cfg.harness
    try:
        check_tools(env, label)
        check_splits(env, label)
        check_rebuilt(env, lambda: build(next_seed(cfg)), label)
        check_seed(cfg, env)
        watch = mask_watch(env, label, answer_masking=h.answer_masking,
                           keyword_masking=h.keyword_masking,
                           keyword_words=h.masked_keyword_words)
        traj, state = play_one(env, label, cfg.env.max_turns, watch)
        check_reward_scoring(cfg, env, traj)
        warn_unmasked(cfg, env, state)
        check_task_counts(cfg, env)
    finally:
        env.close()


def build(cfg: DictConfig, env_cfg=None):
    """make_env as at preflight (an answer judge sends no request); a crash of the
    environment's own code is one EnvError line."""
    env_cfg = cfg.env if env_cfg is None else env_cfg
    try:
        return make_env(env_cfg, cfg=cfg, preflight=True)
    except (EnvError, *declared(env_class(cfg.env)).config_errors):
        raise
    except Exception as exc:
        raise EnvError(f"env={cfg.env.name}: building it raised {type(exc).__name__}: "
                       f"{exc}") from None


def next_seed(cfg: DictConfig) -> DictConfig:
    """The run config of the grid's next seed (`seed` + 1)."""
    return OmegaConf.merge(cfg, {"seed": int(cfg.get("seed") or 0) + 1})


def check_seed(cfg: DictConfig, env) -> None:
    """A world that declares a seed_key (ablate/envs/registry.py) is built at the next
    seed too: the same tasks there mean the seed is ignored."""
    key = declared(env).seed_key
    if not key:
        return
    path = key if key in config_keys(type(env)) else f"options.{key}"
    value = OmegaConf.select(cfg.env, path)
    if value is None:                 # unset: the constructor's default
        param = inspect.signature(type(env).__init__).parameters.get(key)
        value = None if param is None else param.default
    if isinstance(value, bool) or not isinstance(value, int):
        return
    other_cfg = OmegaConf.create(OmegaConf.to_container(cfg.env, resolve=True))
    OmegaConf.update(other_cfg, path, value + 1, force_add=True)
    other = build(cfg, other_cfg)
    try:
        check_seeded(env, other, cfg.env.name, f"env.{path}", (value, value + 1))
    finally:
        other.close()


_WARNED: set = set()      # the weights warned of in this process (a grid: once)


def warn_zero_weights(cfg: DictConfig) -> None:
    """A Rubric's weights (reward.weights.<component>, 1.0 unless given) that sum to 0:
    one warning per command."""
    scheme = REWARDS.get(cfg.reward.name)
    parts = getattr(scheme, "components", None)
    weights = weights_of(cfg.reward)
    try:
        eff = {n: float(weights.get(n, 1.0)) for n in parts or ()}
    except (TypeError, ValueError):   # refused by the scoring check, in one line
        return
    if not eff or sum(eff.values()) != 0 or (cfg.reward.name, str(eff)) in _WARNED:
        return
    _WARNED.add((cfg.reward.name, str(eff)))
    shown = ", ".join(f"{n}={w:g}" for n, w in eff.items())
    why = ("every component is off: every reward is 0 and nothing is learnt"
           if not any(eff.values()) else "an episode scoring 1 on every component earns 0; "
           "check the signs")
    log.warning("reward.weights of reward.name=%s sum to 0 (%s): %s (reward.weights.<name>, "
                "docs/rewards.md)", cfg.reward.name, shown, why)


def check_reward_scoring(cfg: DictConfig, env, traj) -> None:
    """The conformance episode scored with the chosen reward (`reward.name`): each
    component of its Rubric (a plain scheme: its total and components) returns a finite
    number; a None, a str or a NaN would otherwise stop the first evaluation after the
    model loaded, with a cell directory already made."""
    name = cfg.reward.name
    label = f"reward.name={name!r} on env={cfg.env.name}'s conformance episode"
    episode = scripted_episode(traj, 0, 0, env.behaviour(traj.task, traj.results))
    episode.correct = traj.correct
    scheme = REWARDS.get_checked(name)
    parts = getattr(scheme, "components", None)
    if parts is None:                 # a plain scheme: fn(episode, cfg) -> (total, parts)
        out = _scored(label, "the scheme", lambda: scheme(episode, cfg.reward))
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
            raise ConfigError(f"{label}: the scheme returned {_shown(out)}; expected "
                              "(total, {component: float})")
        _finite(label, "its total", out[0])
        for part, value in out[1].items():
            _finite(label, f"component {part}", value)
        return
    for part, fn in parts.items():
        _finite(label, f"component {part}",
                _scored(label, f"component {part}", lambda: fn(episode, cfg.reward)))


def _scored(label: str, what: str, fn):
    try:
        return fn()
    except Exception as exc:          # a bug of the user's reward: one line, not a crash
        raise ConfigError(f"{label}: {what} raised {type(exc).__name__}: "
                          f"{one_line(exc)}") from None


def _finite(label: str, what: str, value) -> None:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and \
        math.isfinite(float(value))
    if not ok:
        raise ConfigError(f"{label}: {what} returned {_shown(value)}; expected a finite "
                          "float")


def _shown(value) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:60] + "..."
    return f"{text} ({type(value).__name__})" if value is not None else "None"


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def warn_unmasked(cfg: DictConfig, env, state) -> None:
    """The tiny model writes nearly every call malformed without masks: say so once."""
    if cfg.model.name != "tiny" or not cfg.harness.action_masking:
        return
    h = cfg.harness
    ctx = protocol(cfg.env.name, "mask_candidates", lambda: mask_context(
        env, state, answer_masking=h.answer_masking, keyword_masking=h.keyword_masking,
        keyword_words=h.masked_keyword_words))
    if not ctx:
        log.warning("env=%s returns no mask_candidates: model=tiny writes its tool calls "
                    "unconstrained and most will be malformed (docs/environments.md, "
                    "\"Action masking\")", cfg.env.name)


def check_env_reward(cfg: DictConfig) -> None:
    """`reward.name` is a generic scheme or one of the environment's own; its schemes are
    read without building it (what the class declared where it registered)."""
    try:
        check_reward_for(cfg.reward, env_class(cfg.env), label=cfg.env.name)
    except ValueError as e:
        raise ConfigError(str(e)) from None


# a feature chosen in the config -> (the Protocol the world must implement, its methods)
FEATURES = {"agent=voyager": (SkillWorld, "skill_of(task, results)")}


def check_features(cfg: DictConfig) -> None:
    """ConfigError (one line) when a chosen feature needs a method the world lacks."""
    chosen = [f"agent={cfg.agent.name}"] if cfg.get("agent") is not None else []
    cls = env_class(cfg.env)
    for feature in chosen:
        proto, methods = FEATURES.get(feature, (None, ""))
        if proto is not None and not issubclass(cls, proto):
            raise ConfigError(f"{feature} needs env={cfg.env.name} to implement {methods} "
                              f"({proto.__name__}, {proto.__module__}); "
                              f"{cls.__name__} does not")


def backend_packages(cfg: DictConfig) -> list[tuple[str, str, str]]:
    """(key, value, module) of each package the chosen backends declare they need."""
    out = []
    for registry in (SAMPLERS, LEARNERS, ALGORITHMS):
        name = OmegaConf.select(cfg, registry.key)
        out += [(registry.key, name, m) for m in registry.declared(name).packages]
    return out


def check_packages(cfg: DictConfig) -> None:
    for key, value, module in (*backend_packages(cfg), *OPTIONAL_PACKAGES):
        if OmegaConf.select(cfg, key) == value and importlib.util.find_spec(module) is None:
            raise ConfigError(f"{key}={value!r} needs the Python package {module!r}, which "
                              f"is not installed here (pip install {module})")


def check_device(cfg: DictConfig) -> None:
    device = cfg.run.device
    if not device.startswith("cuda"):
        return
    if not torch.cuda.is_available():
        raise ConfigError(without_gpu(cfg))   # with run.device_memory_gb: planned first
    problem = devices_problem(cfg.sampler, torch.cuda.device_count())
    if problem:
        raise ConfigError(problem)
    if "bfloat16" in (cfg.model.dtype, cfg.learner.dtype) and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"model.dtype={cfg.model.dtype!r} / learner.dtype="
                          f"{cfg.learner.dtype!r}: this GPU has no bfloat16; use float32")


def writable_dir(path: Path) -> str | None:
    """None if `path` is, or can be created as, a writable directory; else why not."""
    path = Path(os.path.expanduser(str(path))).absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a directory"
    try:   # a real write: permission bits say nothing to root or on read-only mounts
        os.rmdir(tempfile.mkdtemp(prefix=".ablate-probe-", dir=probe))
    except OSError as exc:
        return f"cannot create a directory in {probe} ({exc.strerror})"
    return None


def check_writable(cfg: DictConfig) -> None:
    llm = OmegaConf.select(cfg, "env.judge.name") == "llm"    # the email world's judge
    keys = ["env.cache_dir"] + (["env.judge.cache_dir"] if llm else [])
    for key in keys:
        why = writable_dir(Path(OmegaConf.select(cfg, key)))
        if why:
            raise ConfigError(f"{key}={OmegaConf.select(cfg, key)!r} is not usable: {why}; "
                              "give a writable directory")


def check_output_dir(key: str, path: str) -> None:
    """Hydra's hydra.run.dir / hydra.sweep.dir (checked by the CLI, which knows which);
    an existing cell there must have readable output files (it will be resumed)."""
    why = writable_dir(Path(path))
    if why:
        raise ConfigError(f"{key}={path!r} is not usable: {why}; give a writable directory")
    for name in JSONL_FILES:
        try:
            read_jsonl(Path(os.path.expanduser(path)) / name)
        except OutputFileError as exc:
            raise ConfigError(f"{key}={path!r} holds a cell that cannot be resumed: {exc}") \
                from None


def check_task_counts(cfg: DictConfig, env) -> None:
    tests = split_tasks(env, "test")
    left = len(eval_subset(tests, len(tests), cfg.eval.offset))
    for key, have, what in (("eval.num_tasks", left, "test (from eval.offset)"),
                            ("trainer.tasks_per_step", len(split_tasks(env, "train")), "train")):
        if OmegaConf.select(cfg, key) > have:
            log.warning("%s=%s but the %s split has only %d tasks: all %d are used", key,
                        OmegaConf.select(cfg, key), what, have, have)


ROWS_BYTES = 16 * 2**20   # metrics, eval rows, trajectories, logs of a cell: a generous bound
# a checkpoint's fixed part: RNG states, key names, DeepSpeed's metadata and its
# zero_to_fp32.py scripts (50-100 KB on the tiny model)
CKPT_OVERHEAD = 128 * 2**10


def expected_output_bytes(cfg: DictConfig) -> int:
    """What a cell writes, about: its rows, plus (if it learns) keep_checkpoints + 1
    checkpoints (one being written)."""
    if cfg.model.name == "scripted" or cfg.trainer.max_steps == 0:
        return ROWS_BYTES
    model_dir = check_weights(cfg)
    if model_dir is None:
        return ROWS_BYTES
    return ROWS_BYTES + (cfg.learner.keep_checkpoints + 1) * checkpoint_bytes(cfg, model_dir)


def checkpoint_bytes(cfg: DictConfig, model_dir) -> int:
    """One checkpoint: its trained parameters (LoRA: the adapters alone; the frozen base
    is reloaded from model.path) at 12 bytes each (fp32 weights and two Adam moments),
    plus DeepSpeed's module copy below ZeRO-3 (2 bytes in bf16, 4 in fp32, which stage 0
    keeps as the optimizer's weights), plus a fixed part: at or above the written size,
    by at most a quarter on the tiny model (tests/loop/test_reliability_round2b.py)."""
    lc = cfg.learner
    shape = shape_of_dir(str(model_dir), bool(cfg.model.trust_remote_code))
    trained = shape.lora_params(int(lc.lora.rank), lc.lora.target_modules) \
        if lc.lora.enable else shape.params
    extra = sum(t.bytes for t in checkpoint_terms(cfg, shape))   # the learner's own
    return int(trained * 12 + extra) + CKPT_OVERHEAD


def check_free_space(key: str, path: str, cfg: DictConfig, cell: str | None = None) -> None:
    """The output directory's file system has room for what the cell has still to write:
    its expected output less what its directory already holds (a resumed cell's rows and
    checkpoints are part of that output; counting them again refused a cell on the disk
    that accepted it). `cell`: the job's own directory, `path` itself for hydra.run.dir;
    a sweep directory holds other cells too, so it is credited only through `cell`."""
    probe = Path(os.path.expanduser(path)).absolute()
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    expected = expected_output_bytes(cfg)
    cell = cell or (path if key == "hydra.run.dir" else None)
    held = min(bytes_under(Path(os.path.expanduser(cell))), expected) if cell else 0
    need = expected - held
    if free < need:
        raise ConfigError(f"{key}={path!r}: {free / 2**20:.1f} MiB free on its file system "
                          f"({probe}), the cell writes about {need / 2**20:.1f} MiB more "
                          f"({expected / 2**20:.1f} MiB of rows and learner.keep_checkpoints+1 "
                          f"checkpoints, {held / 2**20:.1f} MiB of them already there): free "
                          "space or give another output directory")


def bytes_under(path: Path) -> int:
    """The bytes of the files under `path` (0 if it does not exist); links not followed."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:          # removed meanwhile
                continue
    return total
