"""The learner backends' terms of the memory plan (ablate/apps/memory_plan.py composes
them): resident parameters, gradients and optimizer state on one rank, one micro-batch's
activations and logits, the gradient reduction's buffers, the optimizer step's
temporaries, the blocks the allocator keeps reserved, and what offload puts in host RAM.
Checked against the H200 measurements in benchmarks/results/memory_measured.json
(tests/models/test_memory_measured.py)."""
from __future__ import annotations

from omegaconf import OmegaConf

from ablate.core.plan import (ACT_BYTES_PER_TOKEN_LAYER, CKPT_BYTES_PER_TOKEN_LAYER,
                              PlanContext, Shape, Term, sel)
from ablate.learners.batching import LOGPROB_CHUNK
from ablate.learners.config import offloaded as _offloaded

# deepspeed/runtime/zero/config.py (deepspeed 0.19.8) reduce_bucket_size default 5e8
REDUCE_BUCKET_SIZE = 500_000_000    # elements of ZeRO's gradient bucket
# deepspeed/runtime/zero/config.py (deepspeed 0.19.8) sub_group_size default 1e9
SUB_GROUP_SIZE = 1_000_000_000      # elements the ZeRO-3 optimizer steps at once


def trained_params(cfg, shape: Shape) -> int:
    """The parameters the learner trains: LoRA's adapters, else all."""
    lo = cfg.learner.lora
    return shape.lora_params(int(lo.rank), lo.target_modules) if lo.enable else shape.params


def largest_trained(cfg, shape: Shape) -> int:
    """Elements of the largest trained tensor (a gradient copied or converted whole)."""
    lo = cfg.learner.lora
    return (shape.largest_lora_param(int(lo.rank), lo.target_modules) if lo.enable
            else shape.largest_param)


def offloaded(cfg, what: str) -> bool:
    """learner.ds_overrides moves `what` (offload_param / offload_optimizer) to the host."""
    return _offloaded(cfg.learner, what)


def _zero(cfg, key: str, default):
    over = sel(cfg, "learner.ds_overrides", {}) or {}
    value = OmegaConf.select(OmegaConf.create(over), f"zero_optimization.{key}")
    return default if value is None else value


def deepspeed_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """Parameters, gradients, optimizer state (+ ZeRO-3's gathered layers and gradient
    bucket) on one rank; the step's temporaries; offload's host RAM."""
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
    par_off = stage == 3 and offloaded(cfg, "offload_param")
    terms = [
        Term("parameters", 0 if par_off else params / part(stage >= 3), "resident",
             f"{w_b} B/param" + (f", ZeRO-3 /{world}" if stage >= 3 else "")),
        Term("gradients", 0 if opt_off else trained * 4 / part(stage >= 2), "resident",
             "fp32, trained params"),
        Term("optimizer", 0 if opt_off else trained * opt_b / part(stage >= 1), "resident",
             f"AdamW {opt_b} B/trained param"),
    ]
    if stage == 3:
        terms += zero3_terms(cfg, shape, world, w_b, trained)
    terms += step_terms(cfg, shape, world, stage, trained, opt_off)
    terms += host_terms(shape, world, ctx, trained, params, w_b, opt_b, opt_off, par_off)
    # below ZeRO-3 a checkpoint holds the module's weights beside the optimizer's fp32
    # master (2 bytes in bf16, 4 in fp32, which stage 0 keeps as the optimizer's weights)
    if stage < 3 and (bf16 or stage > 0):
        terms.append(Term("module copy", trained * w_b, "checkpoint", "in each checkpoint"))
    return terms + work_terms(cfg, shape), []


def zero3_terms(cfg, shape: Shape, world: int, w_b: int, trained: int) -> list[Term]:
    """ZeRO-3 on any number of ranks: parameters live as partitions (param.data is empty
    outside a forward, world size 1 included: checked on CPU), so a forward gathers a
    layer's parameters and prefetches the next (DeepSpeed docs, stage3_max_live_parameters
    / prefetch_bucket_size); gradients pass through a bucket of reduce_bucket_size
    elements (deepspeed/runtime/zero/stage3.py: ipg_buckets' buffer with
    contiguous_gradients), flattened once more to be reduced
    (deepspeed/runtime/comm/coalesced_collectives.py reduce_scatter_coalesced: torch.cat)
    and converted to fp32 per tensor before their add into the partition (partition_grads:
    grad_partition.to(gradient_accumulation_dtype))."""
    bucket = int(_zero(cfg, "reduce_bucket_size", REDUCE_BUCKET_SIZE))
    contiguous = bool(_zero(cfg, "contiguous_gradients", True))
    reduced = min(bucket, trained)
    return [
        Term("zero3 gathered", (shape.largest_layer + shape.largest_other) * w_b, "update",
             "largest layer + largest other module"),
        Term("gradient bucket", bucket * w_b if contiguous and trained else 0, "resident",
             f"reduce_bucket_size {bucket:.3g} x {w_b} B"),
        Term("gradient reduce", reduced * w_b + (largest_trained(cfg, shape) * 4
                                                  if w_b < 4 else 0), "update",
             "bucket flattened" + (" + the largest gradient in fp32" if w_b < 4 else "")),
    ]


def step_terms(cfg, shape: Shape, world: int, stage: int, trained: int,
               opt_off: bool) -> list[Term]:
    """The optimizer step on the device (none under optimizer offload: the host steps).
    ZeRO-3 steps one sub-group of at most sub_group_size elements at a time: its fp32
    gradients flattened into one tensor (deepspeed/runtime/zero/stage3.py
    _prepare_fp32_grad_for_sub_group) and torch AdamW's foreach buffer sqrt(v) of the same
    size (torch/optim/adam.py _multi_tensor_adam: torch._foreach_sqrt), 4 + 4 bytes; below
    ZeRO-3 the buffer alone over the rank's partition. The gradient norm before it takes
    an fp64 copy of each gradient in turn (stage3.py get_grad_norm_direct,
    deepspeed/runtime/zero/utils.py get_norm_dtype): a block of its own, reserved, never
    beside the step's."""
    if opt_off or not trained:
        return []
    mine = trained / (world if stage >= 1 else 1)
    if stage == 3:
        sub = min(mine, int(_zero(cfg, "sub_group_size", SUB_GROUP_SIZE)) or mine)
        return [Term("optimizer step", sub * 8, "step",
                     f"fp32 grads + AdamW sqrt(v) of {sub:.3g} elements"),
                Term("gradient norm", largest_trained(cfg, shape) * 8, "slack",
                     "fp64 copy of the largest gradient")]
    return [Term("optimizer step", mine * 4, "step", "AdamW sqrt(v) buffer")]


def host_terms(shape: Shape, world: int, ctx: PlanContext, trained: int, params: float,
               w_b: int, opt_b: int, opt_off: bool, par_off: bool) -> list[Term]:
    """Host RAM of one rank under offload: ZeRO-Offload keeps the fp32 master, the Adam
    moments and the fp32 gradients on the host (Ren et al. 2021, arXiv:2101.06840 §3),
    ZeRO-Infinity's parameter offload the 16-bit partitions (Rajbhandari et al. 2021,
    arXiv:2104.07857 §5); both partitioned over the ranks."""
    out = []
    if opt_off:
        out.append(Term("host optimizer", trained * (opt_b + 4) / world, "host",
                        f"offload_optimizer: {opt_b}+4 B/trained param"))
    if par_off:
        out.append(Term("host parameters", params / world, "host",
                        f"offload_param: {w_b} B/param"))
    return out


def torch_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """One process: fp32 master weights under autocast (torch_learner.py), fp32 gradients
    and AdamW's two moments: 4 + 4 + 8 bytes per trained parameter; AdamW's foreach step
    holds sqrt(v) for every trained parameter at once (torch/optim/adam.py
    _multi_tensor_adam)."""
    trained = trained_params(cfg, shape)
    lora = bool(cfg.learner.lora.enable)
    terms = [Term("parameters", (shape.params + (trained if lora else 0)) * 4, "resident",
                  "4 B/param"),
             Term("gradients", trained * 4, "resident", "fp32, trained params"),
             Term("optimizer", trained * 8, "resident", "AdamW 8 B/trained param"),
             Term("optimizer step", trained * 4, "step", "AdamW sqrt(v) buffer")]
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
