"""The memory plan: the bytes a cell needs on one learner device, from the model's shape
alone (its config built on the meta device: no weights, no GPU), checked by preflight
before any work (docs/gpu.md, "Memory plan").

    plan = memory_plan(cfg)               # model.path's config.json, run.device's memory
    plan = memory_plan(cfg, model_config=transformers.Qwen3Config(...), world_size=2,
                       device_bytes=80e9)
    print(plan.table()); plan.refusal()   # None, or the one-line reason and what to change

Two phases share the device: the rollout (the learner's resident state beside the
sampler's memory) and the update (the resident state plus activations and logits; an
in-process vLLM sleeps through it when sampler.sleep_during_update). The peak of the two
is compared with the device's memory: run.device_memory_gb (a planning override, GB =
1e9 bytes), else the CUDA device's total memory, else (run.device=cpu) the host's RAM,
where the plan is only reported, never a refusal (a CPU cell swaps or is killed; it
does not corrupt anything, and the tiny CPU cells are far from any limit)."""
from __future__ import annotations

import copy
import functools
import math
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from ablate.core.dist import env_world_size
from ablate.models.budget import check_weights

GB = 1e9
# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
# Models" (arXiv:2205.05198) eq. 1: s·b·h·(34 + 5·a·s/h) bytes per layer at 16-bit without
# recomputation; the 5·a·s/h attention-score term is absent with fused (SDPA / flash)
# attention, leaving 34·h bytes per token per layer
ACT_BYTES_PER_TOKEN_LAYER = 34
# ibid. §4 (full recomputation): only each layer's 16-bit input, 2·h bytes per token
CKPT_BYTES_PER_TOKEN_LAYER = 2
WARN_FRACTION = 0.9   # a plan above 90% of the device leaves little for fragmentation


@dataclass(frozen=True)
class Shape:
    """What the plan needs of a model, read once from its meta-device construction."""
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

    def lora_params(self, rank: int, targets) -> int:
        """LoRA adapters: r·(in + out) per targeted Linear (Hu et al. 2021, §4.1)."""
        t = set(targets)
        return sum(rank * (i + o) for name, i, o in self.linears if name in t)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """2 (K and V) x layers x kv_heads x head_dim x bytes (the KV cache per token)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def shape_of(config) -> Shape:
    """Build the model on the meta device (no memory, no weights) and measure it."""
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    tc = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(tc.num_attention_heads)
    head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // heads
    layers = _decoder_layers(model)
    in_layers = {id(p) for layer in layers for p in layer.parameters()}
    others = [sum(p.numel() for p in m.parameters(recurse=False) if id(p) not in in_layers)
              for m in model.modules()]
    linears = tuple((n.rsplit(".", 1)[-1], m.in_features, m.out_features)
                    for n, m in model.named_modules() if isinstance(m, torch.nn.Linear))
    return Shape(arch=type(model).__name__, params=sum(p.numel() for p in model.parameters()),
                 hidden=int(tc.hidden_size), layers=int(tc.num_hidden_layers),
                 kv_heads=int(getattr(tc, "num_key_value_heads", None) or heads),
                 head_dim=int(head_dim), vocab=int(tc.vocab_size),
                 largest_layer=max((sum(p.numel() for p in m.parameters()) for m in layers),
                                   default=0),
                 largest_other=max(others, default=0), linears=linears)


def _decoder_layers(model) -> list:
    """The repeated blocks: the longest ModuleList in the model."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


@functools.lru_cache(maxsize=8)
def shape_of_dir(model_dir: str, trust_remote_code: bool = False) -> Shape:
    from transformers import AutoConfig
    return shape_of(AutoConfig.from_pretrained(model_dir, local_files_only=True,
                                               trust_remote_code=trust_remote_code))


@dataclass
class Term:
    name: str
    bytes: float
    phase: str          # resident | rollout | update
    note: str = ""


@dataclass
class MemoryPlan:
    shape: Shape
    terms: list[Term]
    device: str
    device_bytes: float
    device_source: str
    world_size: int
    trainable: int
    problems: list[str] = field(default_factory=list)   # refusals beyond the total
    suggestions: list[str] = field(default_factory=list)

    def phase_total(self, phase: str) -> float:
        return sum(t.bytes for t in self.terms if t.phase in ("resident", phase))

    @property
    def peak_phase(self) -> str:
        return max(("rollout", "update"), key=self.phase_total)

    @property
    def peak(self) -> float:
        return self.phase_total(self.peak_phase)

    @property
    def fits(self) -> bool:
        return self.peak <= self.device_bytes and not self.problems

    @property
    def enforced(self) -> bool:
        return self.device != "cpu"

    def biggest(self, n: int = 3) -> list[Term]:
        on = [t for t in self.terms if t.phase in ("resident", self.peak_phase) and t.bytes]
        return sorted(on, key=lambda t: -t.bytes)[:n]

    def refusal(self) -> Optional[str]:
        """None when the cell fits (or on CPU); else one line: total, biggest terms, what
        to change."""
        if self.fits or not self.enforced:
            return None
        big = ", ".join(f"{t.name} {t.bytes / GB:.1f}" for t in self.biggest())
        why = "; ".join(self.problems) + "; " if self.problems else ""
        fix = ("fits with: " + "; ".join(self.suggestions) if self.suggestions else
               "no single change fits: combine learner.lora.enable=true, offload, more "
               "ranks, a lower learner.micro_batch_tokens, sampler=vllm_server")
        return (f"memory plan: {why}{self.peak / GB:.1f} GB per device at the "
                f"{self.peak_phase} > {self.device_bytes / GB:.1f} GB on {self.device} "
                f"({self.device_source}); biggest: {big} GB; {fix}")

    def table(self) -> str:
        s = self.shape
        head = (f"memory plan: {s.arch} {_count(s.params)} params ({_count(self.trainable)}"
                f" trained), {self.world_size} rank(s), {self.device} "
                f"{self.device_bytes / GB:.1f} GB ({self.device_source})")
        rows = [f"  {t.name:<22}{t.bytes / GB:>9.2f} GB  {t.phase:<8} {t.note}"
                for t in self.terms if t.bytes]
        tight = self.peak > WARN_FRACTION * self.device_bytes
        verdict = ("fits, tight" if tight else "fits") if self.fits else ("exceeds (CPU: reported only)"
                                            if not self.enforced else "DOES NOT FIT")
        tail = (f"  peak ({self.peak_phase}) {self.peak / GB:.1f} GB of "
                f"{self.device_bytes / GB:.1f} GB: {verdict}")
        return "\n".join([head, *rows, tail])

    def as_dict(self) -> dict:
        return {"peak_gb": self.peak / GB, "peak_phase": self.peak_phase,
                "device_gb": self.device_bytes / GB, "fits": self.fits,
                "params": self.shape.params, "trainable": self.trainable,
                "terms": {t.name: t.bytes / GB for t in self.terms}}


# --- the terms -------------------------------------------------------------------------

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _sel(cfg, key: str, default=None):
    value = OmegaConf.select(cfg, key, default=default)
    return default if value is None else value


def _offloaded(cfg, what: str) -> bool:
    over = _sel(cfg, "learner.ds_overrides", {}) or {}
    dev = OmegaConf.select(OmegaConf.create(over), f"zero_optimization.{what}.device")
    return str(dev).lower() in ("cpu", "nvme")


def learner_terms(cfg, shape: Shape, world: int) -> tuple[list[Term], int]:
    """Parameters, gradients, optimizer state (+ ZeRO-3's gathered layers) on one rank."""
    lc = cfg.learner
    lora = bool(lc.lora.enable)
    trained = shape.lora_params(int(lc.lora.rank), lc.lora.target_modules) if lora \
        else shape.params
    ds = str(lc.name) == "deepspeed"
    stage = int(lc.zero_stage) if ds else 0
    bf16 = str(lc.dtype) == "bfloat16"
    # DeepSpeed bf16: 2-byte weights, fp32 gradient accumulators (ds_config's
    # grad_accum_dtype), fp32 master + 2 Adam moments = 12 bytes (ZeRO, Rajbhandari et al.
    # 2020 §3.1: "16Ψ" of mixed-precision Adam); fp32, and the torch learner (fp32
    # master weights under autocast, torch_learner.py): 4 + 4 + 8
    w_b = 2 if ds and bf16 else 4
    opt_b = 12 if ds and bf16 else 8
    part = lambda on: world if ds and on else 1   # noqa: E731 - ZeRO stage thresholds
    params = (shape.params + (trained if lora else 0)) * w_b   # LoRA: base + adapters
    terms = [
        Term("parameters", 0 if stage == 3 and _offloaded(cfg, "offload_param")
             else params / part(stage >= 3), "resident",
             f"{w_b} B/param" + (f", ZeRO-3 /{world}" if stage >= 3 else "")),
        Term("gradients", 0 if stage >= 1 and _offloaded(cfg, "offload_optimizer")
             else trained * 4 / part(stage >= 2), "resident", "fp32, trained params"),
        Term("optimizer", 0 if stage >= 1 and _offloaded(cfg, "offload_optimizer")
             else trained * opt_b / part(stage >= 1), "resident",
             f"AdamW {opt_b} B/trained param"),
    ]
    if stage == 3 and (world > 1 or _offloaded(cfg, "offload_param")):
        # ZeRO-3 gathers a layer's parameters for its forward/backward and prefetches
        # the next (DeepSpeed docs, stage3_max_live_parameters / prefetch_bucket_size)
        terms.append(Term("zero3 gathered", (shape.largest_layer + shape.largest_other)
                          * w_b, "update", "largest layer + largest other module"))
    return terms, trained


def default_logprob_chunk() -> int:
    """The learner's log-softmax chunk when learner.logprob_chunk is not set: its module
    default (ablate.learners.batching.LOGPROB_CHUNK) where it has one, else 0 (full)."""
    # deferred: ablate.learners loads transformers (+0.55 s, 316 modules measured after
    # `import ablate.apps.memory_plan`, 2-core host), which a plan from shapes never needs
    from ablate.learners import batching
    return int(getattr(batching, "LOGPROB_CHUNK", 0) or 0)


def work_terms(cfg, shape: Shape) -> list[Term]:
    """Activations and logits of one micro-batch of learner.micro_batch_tokens."""
    lc = cfg.learner
    n = int(lc.micro_batch_tokens)
    act_b = 2 if str(lc.dtype) == "bfloat16" else 4   # bf16: DeepSpeed or autocast
    ckpt = bool(_sel(cfg, "learner.activation_checkpointing", False))
    scale = act_b / 2   # the constants are 16-bit bytes
    if ckpt:   # checkpointed inputs of every layer + one layer recomputed at a time
        act = n * shape.hidden * scale * (CKPT_BYTES_PER_TOKEN_LAYER * shape.layers
                                          + ACT_BYTES_PER_TOKEN_LAYER)
    else:
        act = n * shape.hidden * scale * ACT_BYTES_PER_TOKEN_LAYER * shape.layers
    chunk = int(_sel(cfg, "learner.logprob_chunk", default_logprob_chunk()) or 0)
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


def sampler_terms(cfg, shape: Shape, world: int, device_bytes: float
                  ) -> tuple[list[Term], list[str]]:
    """The sampler's share of the learner's device, and why it cannot start there."""
    sc, model_b = cfg.sampler, DTYPE_BYTES.get(str(cfg.model.dtype), 4)
    episodes = math.ceil(cfg.trainer.tasks_per_step * cfg.trainer.group_size / world)
    tokens = episodes * int(cfg.harness.max_tokens_per_episode)
    kv = tokens * shape.kv_bytes_per_token(model_b)
    name = str(sc.name)
    if name == "vllm_server":
        return [], []     # its own processes and devices (sampler.devices / urls)
    if name == "hf":
        return [Term("sampler weights", shape.params * model_b, "resident", "HF copy"),
                Term("kv cache", kv, "rollout",
                     f"{episodes} episodes x {cfg.harness.max_tokens_per_episode} tok")], []
    share = float(sc.gpu_memory_utilization) * device_bytes
    weights = shape.params * model_b / max(int(sc.tensor_parallel_size), 1)
    note = (f"{sc.gpu_memory_utilization} x device; KV room {max(share - weights, 0) / kv:.0%}"
            f" of the step's {tokens} tokens" if kv else "")
    sleeping = bool(_sel(cfg, "sampler.sleep_during_update", True))
    terms = [Term("vllm share", share, "rollout" if sleeping else "resident", note)]
    problems = [] if share > weights else [
        f"sampler.gpu_memory_utilization={sc.gpu_memory_utilization} gives vLLM "
        f"{share / GB:.1f} GB < its {weights / GB:.1f} GB of weights per GPU"]
    return terms, problems


def algorithm_terms(cfg, shape: Shape) -> list[Term]:
    """Models the algorithm or the learner loads beside the policy (not partitioned);
    PPO's critic trains in `prepare`, while the sampler still holds its memory."""
    model_b = DTYPE_BYTES.get(str(cfg.model.dtype), 4)
    algo = str(_sel(cfg, "algo.algorithm", "pg"))
    terms = []
    if float(_sel(cfg, "algo.kl_coef", 0.0)) > 0:
        terms.append(Term("kl reference", shape.params * model_b, "resident", "frozen"))
    if algo == "dpo":
        terms.append(Term("dpo reference", shape.params * model_b, "resident", "frozen"))
    if algo == "ppo":   # fp32 copy + grads + AdamW moments (algos/ppo.py), unpartitioned
        terms.append(Term("ppo critic", shape.params * 16, "resident",
                          "fp32 weights, grads, 2 moments"))
        n = int(cfg.learner.micro_batch_tokens)   # fp32: twice the 16-bit constant
        terms.append(Term("critic activations", n * shape.hidden * shape.layers
                          * ACT_BYTES_PER_TOKEN_LAYER * 2 + n * shape.vocab * 4, "rollout",
                          "fp32 pass + its LM logits"))
    return terms


# --- the plan ----------------------------------------------------------------------------

def device_memory(cfg) -> tuple[str, float, str]:
    """(device, bytes, where the number comes from)."""
    device = str(cfg.run.device)
    override = _sel(cfg, "run.device_memory_gb")
    kind = "cpu" if device == "cpu" else "cuda"
    if override is not None:
        return kind, float(override) * GB, "run.device_memory_gb"
    if kind == "cuda" and torch.cuda.is_available():
        index = torch.device(device).index
        if index is None:
            index = int(os.environ.get("LOCAL_RANK", "0"))
        return kind, float(torch.cuda.get_device_properties(index).total_memory), \
            f"cuda:{index} total memory"
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return kind, float(pages), "host RAM"


def plan_for(cfg, shape: Shape, world: int, device: str, device_bytes: float,
             source: str) -> MemoryPlan:
    learner, trained = learner_terms(cfg, shape, world)
    sampler, problems = sampler_terms(cfg, shape, world, device_bytes)
    terms = learner + algorithm_terms(cfg, shape) + work_terms(cfg, shape) + sampler
    return MemoryPlan(shape, terms, device, device_bytes, source, world, trained, problems)


def memory_plan(cfg: DictConfig, *, model_config=None, world_size: Optional[int] = None,
                device_bytes: Optional[float] = None, suggest: bool = True
                ) -> Optional[MemoryPlan]:
    """The plan of `cfg` (None for a model-less policy: model=scripted); with `suggest`,
    a refused plan lists the single changes that would fit."""
    shape = _shape(cfg, model_config)
    if shape is None:
        return None
    world = int(world_size or env_world_size())
    device, have, source = device_memory(cfg)
    if device_bytes is not None:
        have, source = float(device_bytes), "given"
    plan = plan_for(cfg, shape, world, device, have, source)
    if suggest and not plan.fits and plan.enforced:
        plan.suggestions = suggestions(cfg, shape, world, device, have, source)
    return plan


def _shape(cfg, model_config) -> Optional[Shape]:
    if model_config is not None:
        return shape_of(model_config)
    if str(cfg.model.name) == "scripted":
        return None
    model_dir = check_weights(cfg)
    return None if model_dir is None else shape_of_dir(
        str(model_dir), bool(cfg.model.trust_remote_code))


def _variant(cfg, **updates) -> DictConfig:
    out = copy.deepcopy(cfg)
    with open_dict(out):
        for key, value in updates.items():
            OmegaConf.update(out, key.replace("__", "."), value, merge=True)
    return out


OFFLOAD = {"zero_optimization": {"offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "cpu"}}}


def suggestions(cfg, shape, world, device, have, source) -> list[str]:
    """Single changes that make the plan fit, each with its peak; if none does, the
    first cumulative combination of them that fits."""
    steps = _changes(cfg, world)
    fitting = []
    for label, c, w in steps:
        p = plan_for(c, shape, w, device, have, source)
        if p.fits:
            fitting.append(f"{label} ({p.peak / GB:.1f} GB)")
    if fitting:
        return fitting
    c, w, labels = cfg, world, []
    for label, _, _ in steps:   # the same changes applied one on top of the other
        c, w = _apply(c, w, label)
        labels.append(label)
        p = plan_for(c, shape, w, device, have, source)
        if p.fits:
            return [" + ".join(labels) + f" ({p.peak / GB:.1f} GB)"]
    return []


def _changes(cfg, world: int) -> list[tuple[str, Any, int]]:
    """(label, config, world size) of each single change worth planning."""
    lc, out = cfg.learner, []
    if not lc.lora.enable:
        out.append("learner.lora.enable=true")
    for mbt in (int(lc.micro_batch_tokens) // 2 ** k for k in (1, 2, 3)):
        if mbt >= 1024:
            out.append(f"learner.micro_batch_tokens={mbt}")
    if str(lc.name) == "deepspeed" and int(lc.zero_stage) == 3:
        out.append(OFFLOAD_LABEL)
    if str(cfg.sampler.name) != "vllm_server":
        out.append("sampler=vllm_server")
    if str(lc.name) == "deepspeed" and int(lc.zero_stage) >= 1:
        out += [f"{n} ranks (torchrun --nproc-per-node {n})" for n in (2, 4, 8) if n > world]
    return [(label, *_apply(cfg, world, label)) for label in out]


OFFLOAD_LABEL = ("'+learner.ds_overrides={zero_optimization:{offload_optimizer:{device:cpu},"
                 "offload_param:{device:cpu}}}'")


def _apply(cfg, world: int, label: str) -> tuple[Any, int]:
    """The config and world size after the change `label` (see _changes)."""
    if " ranks (torchrun" in label:
        return cfg, int(label.split()[0])
    if label == OFFLOAD_LABEL:
        return _variant(cfg, learner__ds_overrides=OFFLOAD), world
    key, value = label.split("=", 1)
    key = "sampler.name" if key == "sampler" else key   # the group's option selects it
    return _variant(cfg, **{key.replace(".", "__"): _value(value)}), world


def _value(text: str):
    return True if text == "true" else int(text) if text.isdigit() else text


def _count(n: float) -> str:
    """A parameter count in the unit that reads: 4.02B, 4.44M, 13.3K."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{int(n)}"
