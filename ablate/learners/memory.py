"""The learner backends' terms of the memory plan (ablate/apps/memory_plan.py composes
them): resident parameters, gradients and optimizer state on one rank, and one
micro-batch's activations and logits."""
from __future__ import annotations

from omegaconf import OmegaConf

from ablate.core.plan import (ACT_BYTES_PER_TOKEN_LAYER, CKPT_BYTES_PER_TOKEN_LAYER,
                              PlanContext, Shape, Term, sel)
from ablate.learners.batching import LOGPROB_CHUNK


def trained_params(cfg, shape: Shape) -> int:
    """The parameters the learner trains: LoRA's adapters, else all."""
    lo = cfg.learner.lora
    return shape.lora_params(int(lo.rank), lo.target_modules) if lo.enable else shape.params


def offloaded(cfg, what: str) -> bool:
    """learner.ds_overrides moves `what` (offload_param / offload_optimizer) to the host."""
    over = sel(cfg, "learner.ds_overrides", {}) or {}
    dev = OmegaConf.select(OmegaConf.create(over), f"zero_optimization.{what}.device")
    return str(dev).lower() in ("cpu", "nvme")


def deepspeed_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """Parameters, gradients, optimizer state (+ ZeRO-3's gathered layers) on one rank."""
    lc, world = cfg.learner, ctx.world
    lora, trained = bool(lc.lora.enable), trained_params(cfg, shape)
    stage, bf16 = int(lc.zero_stage), str(lc.dtype) == "bfloat16"
    # DeepSpeed bf16: 2-byte weights, fp32 gradient accumulators (ds_config's
    # grad_accum_dtype), fp32 master + 2 Adam moments = 12 bytes (ZeRO, Rajbhandari et al.
    # 2020 §3.1: "16Ψ" of mixed-precision Adam); fp32: 4 + 4 + 8
    w_b, opt_b = (2, 12) if bf16 else (4, 8)
    part = lambda on: world if on else 1   # noqa: E731 - ZeRO stage thresholds
    params = (shape.params + (trained if lora else 0)) * w_b   # LoRA: base + adapters
    opt_off = stage >= 1 and offloaded(cfg, "offload_optimizer")
    terms = [
        Term("parameters", 0 if stage == 3 and offloaded(cfg, "offload_param")
             else params / part(stage >= 3), "resident",
             f"{w_b} B/param" + (f", ZeRO-3 /{world}" if stage >= 3 else "")),
        Term("gradients", 0 if opt_off else trained * 4 / part(stage >= 2), "resident",
             "fp32, trained params"),
        Term("optimizer", 0 if opt_off else trained * opt_b / part(stage >= 1), "resident",
             f"AdamW {opt_b} B/trained param"),
    ]
    if stage == 3 and (world > 1 or offloaded(cfg, "offload_param")):
        # ZeRO-3 gathers a layer's parameters for its forward/backward and prefetches
        # the next (DeepSpeed docs, stage3_max_live_parameters / prefetch_bucket_size)
        terms.append(Term("zero3 gathered", (shape.largest_layer + shape.largest_other)
                          * w_b, "update", "largest layer + largest other module"))
    # below ZeRO-3 a checkpoint holds the module's weights beside the optimizer's fp32
    # master (2 bytes in bf16, 4 in fp32, which stage 0 keeps as the optimizer's weights)
    if stage < 3 and (bf16 or stage > 0):
        terms.append(Term("module copy", trained * w_b, "checkpoint", "in each checkpoint"))
    return terms + work_terms(cfg, shape), []


def torch_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """One process: fp32 master weights under autocast (torch_learner.py), fp32 gradients
    and AdamW's two moments: 4 + 4 + 8 bytes per trained parameter."""
    trained = trained_params(cfg, shape)
    lora = bool(cfg.learner.lora.enable)
    terms = [Term("parameters", (shape.params + (trained if lora else 0)) * 4, "resident",
                  "4 B/param"),
             Term("gradients", trained * 4, "resident", "fp32, trained params"),
             Term("optimizer", trained * 8, "resident", "AdamW 8 B/trained param")]
    return terms + work_terms(cfg, shape), []


def work_terms(cfg, shape: Shape) -> list[Term]:
    """Activations and logits of one micro-batch of learner.micro_batch_tokens."""
    lc = cfg.learner
    n = int(lc.micro_batch_tokens)
    act_b = 2 if str(lc.dtype) == "bfloat16" else 4   # bf16: DeepSpeed or autocast
    ckpt = bool(sel(cfg, "learner.activation_checkpointing", False))
    scale = act_b / 2   # the constants are 16-bit bytes
    if ckpt:   # checkpointed inputs of every layer + one layer recomputed at a time
        act = n * shape.hidden * scale * (CKPT_BYTES_PER_TOKEN_LAYER * shape.layers
                                          + ACT_BYTES_PER_TOKEN_LAYER)
    else:
        act = n * shape.hidden * scale * ACT_BYTES_PER_TOKEN_LAYER * shape.layers
    chunk = int(sel(cfg, "learner.logprob_chunk", LOGPROB_CHUNK) or 0)
    rows = min(chunk, n) if chunk > 0 else n
    # the model's [n, V] logits and their gradient at its dtype, plus the fp32 log-softmax
    # and its gradient over `rows` positions at once (ablate/learners/batching.py)
    logits = n * shape.vocab * act_b * 2 + rows * shape.vocab * 4 * 2
    return [Term("activations", act, "update",
                 f"{n} tok x {shape.layers} layers x "
                 + (f"({CKPT_BYTES_PER_TOKEN_LAYER}L+{ACT_BYTES_PER_TOKEN_LAYER})h"
                    if ckpt else f"{ACT_BYTES_PER_TOKEN_LAYER}h") + f" x {scale:g}"),
            Term("logits", logits, "update",
                 f"{n} x {shape.vocab} + grad, fp32 over {rows} rows")]
