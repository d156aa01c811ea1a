"""Learners: one optimizer step over a batch of segments with a caller-supplied loss.

    lcfg = cfg.learner
    model = build_model_for_learner(lambda: AutoModelForCausalLM.from_pretrained(p), lcfg)
    learner = make_learner(lcfg, model, lr=..., seed=..., temperature=..., ckpt_dir=...)
    metrics = learner.update(segments, advantages, loss_fn)  # loss_fn(LossInputs) -> (loss, {})
    sampler.load_weights(learner.export_state_dict())

`deepspeed` (ZeRO-3 by default, also on CPU) and `torch` (the plain reference) behave the
same to within float rounding; see tests/learners/test_learners.py for the parity checks.
Tokens that every segment of an update starts with and none trains on (the system prompt
and tool schemas) are forwarded once, their keys and values reused by every row with exact
gradients (`learner.shared_prefix`, ablate/learners/prefix.py, tests/learners/test_learner_prefix.py);
`update/forward_tokens` counts what the policy forwarded."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

import torch

from ablate.core.registry import Registry
from ablate.learners import packed
from ablate.learners.base import CheckpointError, Learner, LossFn, LossInputs  # noqa: F401
from ablate.learners.config import (DeepSpeedLearnerConfig, LearnerConfig, check_deepspeed,
                                    check_learner)
from ablate.learners.memory import deepspeed_terms, torch_terms
from ablate.learners.oplock import load_comm_op

__all__ = ["LEARNERS", "Learner", "LossFn", "LossInputs", "make_learner",
           "build_model_for_learner", "zero3_init"]


# What a learner may declare it can do (ablate.core.registry.Declaration.capabilities):
LEARNER_CAPABILITIES = (
    "multi_rank",        # one engine over the ranks of a torchrun/deepspeed launch
    "shared_base",       # under LoRA never writes the base in place (no partitioning):
                         # a pack's cells may share one (ablate.models.loading.shared_bases)
)
# name -> factory `fn(learner_cfg, model, *, lr, seed, temperature, ckpt_dir, ref_model,
# device) -> Learner`, with its Declaration: the single source of `learner.name`
LEARNERS = Registry("learner.name", "learner", schema=LearnerConfig,
                    capabilities=LEARNER_CAPABILITIES)


def make_learner(learner_cfg: Any, model: torch.nn.Module, *, lr: float, seed: int,
                 temperature: float, ckpt_dir, ref_model: Optional[torch.nn.Module] = None,
                 device: Optional[str] = None) -> Learner:
    """`model` is taken over (DeepSpeed partitions it in place): give the sampler its own
    copy. Weights are kept exactly as loaded. `device` (run.device: cpu, cuda, cuda:N):
    where the learner trains (the torch learner moves the model and the reference there;
    DeepSpeed's accelerator must be of that type); None leaves the model where it is."""
    factory = LEARNERS.get_checked(learner_cfg.name)
    learner = factory(learner_cfg, model, lr=lr, seed=seed, temperature=temperature,
                      ckpt_dir=ckpt_dir, ref_model=ref_model, device=device)
    joint = packed.engine()   # a batched pack: the cells' updates run together
    if joint is not None and LEARNERS.declared(learner_cfg.name).can("shared_base"):
        joint.attach(learner)
    return learner


OFFLOAD = {"zero_optimization": {"offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "cpu"}}}
OFFLOAD_LABEL = ("'+learner.ds_overrides={zero_optimization:{offload_optimizer:{device:cpu},"
                 "offload_param:{device:cpu}}}'")


def deepspeed_remedies(cfg, world: int) -> list[tuple[str, dict, int]]:
    """ZeRO-3 offload to host memory; more ranks to partition over (ZeRO stage >= 1)."""
    stage, out = int(cfg.learner.zero_stage), []
    if stage == 3:
        out.append((OFFLOAD_LABEL, {"learner.ds_overrides": OFFLOAD}, world))
    if stage >= 1:
        out += [(f"{n} ranks (torchrun --nproc-per-node {n})", {}, n)
                for n in (2, 4, 8) if n > world]
    return out


@LEARNERS.register("deepspeed", schema=DeepSpeedLearnerConfig, packages=("deepspeed",),
                   capabilities=("multi_rank",), check=check_deepspeed,
                   memory=deepspeed_terms, remedies=deepspeed_remedies)
def deepspeed_learner(learner_cfg: Any, model: torch.nn.Module, **kw) -> Learner:
    """DeepSpeed (ZeRO-3 by default, also on CPU)."""
    # deferred: deepspeed_learner imports peft through lora.py (14 s measured, 2-core host)
    from ablate.learners.deepspeed_learner import DeepSpeedLearner
    load_comm_op()   # before DeepSpeed's own load, whose lock a killed cell held forever
    return DeepSpeedLearner(learner_cfg, model, **kw)


@LEARNERS.register("torch", schema=LearnerConfig, check=check_learner, memory=torch_terms,
                   capabilities=("shared_base",))
def torch_learner(learner_cfg: Any, model: torch.nn.Module, **kw) -> Learner:
    """The plain torch reference: AdamW on one process."""
    # deferred: torch_learner imports peft through lora.py (14 s measured on the 2-core host)
    from ablate.learners.torch_learner import TorchLearner
    return TorchLearner(learner_cfg, model, **kw)


@contextlib.contextmanager
def zero3_init(learner_cfg: Any):
    """While inside, transformers' from_pretrained / from_config build the model under
    deepspeed.zero.Init (parameters partitioned as they are created, so a model larger
    than one process's memory can be loaded). A no-op unless the learner is ZeRO-3. The
    HfDeepSpeedConfig is dropped on exit, so models built later (the sampler's, the
    export copy) are plain again."""
    if learner_cfg.name != "deepspeed" or int(learner_cfg.zero_stage) != 3:
        yield
        return
    from transformers.integrations import HfDeepSpeedConfig
    from transformers.integrations import deepspeed as hfds

    # deferred: deepspeed_learner imports peft through lora.py, as in deepspeed_learner()
    from ablate.learners.deepspeed_learner import ds_config, ensure_dist_env
    ensure_dist_env()
    load_comm_op()   # issue 51: DeepSpeed's loader then finds the op loaded
    import deepspeed
    deepspeed.init_distributed()
    keep = HfDeepSpeedConfig(ds_config(learner_cfg))   # transformers holds a weak ref
    try:
        yield keep
    finally:
        hfds.unset_hf_deepspeed_config()
        del keep


def build_model_for_learner(factory: Callable[[], torch.nn.Module], learner_cfg: Any
                            ) -> torch.nn.Module:
    """`factory()` (e.g. AutoModelForCausalLM.from_pretrained(path)) run under
    `zero3_init(learner_cfg)`. A plain model also works with every learner (DeepSpeed
    partitions it at initialize); this only saves the full copy's memory."""
    with zero3_init(learner_cfg):
        return factory()
