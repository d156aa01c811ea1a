"""The vocabulary of the memory plan (ablate/apps/memory_plan.py composes it): a model's
Shape, a Term of bytes in a phase, and the context a term is computed in. The terms
themselves are declared by their owners where they register (the learner backends in
ablate/learners/memory.py, the sampler backends in ablate/samplers/memory.py, the
algorithms that load a model in ablate/algos/memory.py).

Phases (Term.phase): `resident` (held throughout), `rollout`, `update` (forward and
backward), `step` (the optimizer step, after the backward's buffers are freed), `slack`
(blocks the caching allocator keeps reserved, never allocated beside the peak: counted in
the plan's reserved figure only), `host` (host RAM, per rank) and `checkpoint` (on disk)."""
from __future__ import annotations

from dataclasses import dataclass

from omegaconf import OmegaConf

GB = 1e9
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
# Models" (arXiv:2205.05198) eq. 1: s·b·h·(34 + 5·a·s/h) bytes per layer at 16-bit without
# recomputation; the 5·a·s/h attention-score term is absent with fused (SDPA / flash)
# attention, leaving 34·h bytes per token per layer
ACT_BYTES_PER_TOKEN_LAYER = 34
# ibid. §4 (full recomputation): only each layer's 16-bit input, 2·h bytes per token
CKPT_BYTES_PER_TOKEN_LAYER = 2


@dataclass(frozen=True)
class Shape:
    """What the plan needs of a model, read once from its meta-device construction
    (ablate/models/measure.py)."""
    arch: str
    params: int                      # unique parameters (tied embeddings counted once)
    hidden: int
    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    largest_layer: int               # parameters of the largest decoder layer
    largest_other: int               # parameters of the largest non-layer module
    linears: tuple                   # (leaf name, in_features, out_features) per Linear
    largest_param: int = 0           # elements of the largest parameter tensor
    context: int = 0                 # config.json max_position_embeddings (0: unknown)

    def lora_params(self, rank: int, targets) -> int:
        """LoRA adapters: r·(in + out) per targeted Linear (Hu et al. 2021, §4.1)."""
        t = set(targets)
        return sum(rank * (i + o) for name, i, o in self.linears if name in t)

    def largest_lora_param(self, rank: int, targets) -> int:
        """The largest adapter matrix: r x max(in, out) over the targeted Linears."""
        t = set(targets)
        return max((rank * max(i, o) for name, i, o in self.linears if name in t), default=0)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """2 (K and V) x layers x kv_heads x head_dim x bytes (the KV cache per token)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


@dataclass
class Term:
    name: str
    bytes: float
    phase: str          # resident | rollout | update | checkpoint (on disk, not device)
    note: str = ""


@dataclass(frozen=True)
class PlanContext:
    """What a term may depend on beside the config and the shape."""
    world: int                       # ranks of the cell
    device_bytes: float              # the learner device's memory
    local_ranks: int = 1             # ranks on this machine (they share its host RAM)
    prompt_tokens: int = 0           # the rendered prompt before the question (0: unknown)


def sel(cfg, key: str, default=None):
    """`cfg`'s value at a dotted key, `default` where it is absent or null."""
    value = OmegaConf.select(cfg, key, default=default)
    return default if value is None else value


def model_bytes(cfg) -> int:
    """Bytes per parameter of the model's dtype (model.dtype)."""
    return DTYPE_BYTES.get(str(cfg.model.dtype), 4)
