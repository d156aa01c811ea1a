"""The paper's model shapes without their weights: transformers configs of Qwen3-4B and
Qwen3-30B-A3B (optionally fewer layers, another vocabulary, or a tiny CPU scale with the
same architecture), and random-weight model directories that `model.path=DIR` loads like
a real checkpoint (ablate/models/loading.py). GPU smoke tests and learner benchmarks
measure speed and memory with them on a machine that has neither weights nor network
(benchmarks/gpu_smoke.sh, benchmarks/bench_learner_gpu.py).

    cfg = paper_config("qwen3_4b")                                  # the full shape
    cfg = paper_config("qwen3_30b_a3b", num_layers=4, vocab_size=6577)
    write_random_model("/tmp/q4b", "qwen3_4b", device="cuda")       # + the tiny tokenizer

    python -m ablate.models.shapes /tmp/q4b --shape qwen3_4b [--scale tiny] [--layers N]

Sources of the numbers: the config.json of each Hugging Face repository,
https://huggingface.co/Qwen/Qwen3-4B/blob/main/config.json and
https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json. The Instruct-2507
releases the paper cells load (conf/model/qwen3_*.yaml) have the same layer shapes and
differ in the RoPE base and context length (262144 positions), which change no FLOP and
no parameter count."""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Optional

import torch

from ablate.models.config import ASSETS_DIR

# Qwen/Qwen3-4B config.json (dense, tied embeddings)
QWEN3_4B = dict(
    hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
    head_dim=128, intermediate_size=9728, rope_parameters={"rope_type": "default",
                                                           "rope_theta": 1_000_000.0},
    rms_norm_eps=1e-6, vocab_size=151936, tie_word_embeddings=True,
    max_position_embeddings=40960, hidden_act="silu", attention_bias=False)
# Qwen/Qwen3-30B-A3B config.json (MoE: 128 experts, 8 routed per token, untied)
QWEN3_30B_A3B = dict(
    hidden_size=2048, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4,
    head_dim=128, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
    num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
    router_aux_loss_coef=0.001, rope_parameters={"rope_type": "default",
                                                 "rope_theta": 1_000_000.0},
    rms_norm_eps=1e-6, vocab_size=151936, tie_word_embeddings=False,
    max_position_embeddings=40960, hidden_act="silu", attention_bias=False)
PAPER = {"qwen3_4b": QWEN3_4B, "qwen3_30b_a3b": QWEN3_30B_A3B}

# scale="tiny": the same architecture (GQA ratio, SwiGLU, tying, MoE routing) at CPU
# sizes; ratios kept where they matter (4B: 4 query heads per kv head, MLP ~3.8x hidden;
# 30B-A3B: top-k 2 of 8 experts, expert MLP 0.5x hidden)
TINY = {
    "qwen3_4b": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=1, head_dim=16, intermediate_size=240),
    "qwen3_30b_a3b": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=1, head_dim=16, intermediate_size=192,
                          moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2),
}
SCALES = ("paper", "tiny")
TOKENIZER_DIR = ASSETS_DIR / "tiny"      # the shipped tiny model's byte-level BPE
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "generation_config.json")


def shape_fields(name: str, scale: str = "paper") -> dict:
    """The config fields of `name` at `scale` (paper numbers, or TINY over them)."""
    if name not in PAPER:
        raise ValueError(f"shape {name!r}: choose one of {sorted(PAPER)}")
    if scale not in SCALES:
        raise ValueError(f"scale {scale!r}: choose one of {SCALES}")
    fields = json.loads(json.dumps(PAPER[name]))   # a deep copy
    if scale == "tiny":
        fields.update(TINY[name])
    return fields


def paper_config(name: str, *, vocab_size: Optional[int] = None,
                 num_layers: Optional[int] = None, scale: str = "paper",
                 dtype: torch.dtype = torch.bfloat16, **token_ids):
    """A Qwen3Config / Qwen3MoeConfig of the paper shape `name`; `num_layers` cuts the
    depth (the MoE's 48 layers to a few for one GPU), `vocab_size` swaps the vocabulary
    (a small tokenizer's), `token_ids` sets eos/pad/bos_token_id."""
    from transformers import Qwen3Config, Qwen3MoeConfig
    fields = shape_fields(name, scale)
    if num_layers is not None:
        fields["num_hidden_layers"] = int(num_layers)
    if vocab_size is not None:
        fields["vocab_size"] = int(vocab_size)
    cls = Qwen3MoeConfig if name == "qwen3_30b_a3b" else Qwen3Config
    cfg = cls(**fields, **token_ids)
    cfg.dtype = dtype
    cfg.architectures = ["Qwen3MoeForCausalLM" if cls is Qwen3MoeConfig
                         else "Qwen3ForCausalLM"]
    return cfg


def parameter_count(cfg) -> dict:
    """Total and per-token-active parameters of a config, counted from its fields (no
    model built). Active: attention, the dense MLP or the routed experts' share plus the
    router, norms, and the output head; the input embedding is a lookup (no FLOPs)."""
    h, L, hd = cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim
    attn = h * hd * (2 * cfg.num_attention_heads + 2 * cfg.num_key_value_heads) + 2 * hd
    norms = 2 * h
    if getattr(cfg, "num_experts", None):
        expert = 3 * h * cfg.moe_intermediate_size
        mlp_total = cfg.num_experts * expert + cfg.num_experts * h
        mlp_active = cfg.num_experts_per_tok * expert + cfg.num_experts * h
    else:
        mlp_total = mlp_active = 3 * h * cfg.intermediate_size
    emb = cfg.vocab_size * h
    head = 0 if cfg.tie_word_embeddings else emb
    total = L * (attn + norms + mlp_total) + h + emb + head
    active = L * (attn + norms + mlp_active) + h + emb
    return {"total": total, "active": active, "embedding": emb}


# Peak dense bf16 tensor-core FLOP/s of an H100 / H200 SXM (NVIDIA H100 datasheet; the
# H200 has the same compute dies), the number prime-rl's MFU divides by
# (PrimeIntellect-ai/prime-rl src/prime_rl/trainer/perf.py, PerfCounter._get_peak_flops)
PEAK_BF16_FLOPS = 989e12


def matmul_params(cfg) -> int:
    """Parameters a token meets in matrix multiplies (prime-rl's get_active_mm_params,
    src/prime_rl/trainer/perf.py): q, k, v, o, the dense MLP or the routed experts'
    share and the router, and the output head; no norms, no embedding lookup."""
    h, L, hd = cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim
    attn = L * h * hd * (2 * cfg.num_attention_heads + 2 * cfg.num_key_value_heads)
    if getattr(cfg, "num_experts", None):
        mlp = L * (cfg.num_experts_per_tok * 3 * cfg.moe_intermediate_size * h
                   + cfg.num_experts * h)
    else:
        mlp = L * 3 * cfg.intermediate_size * h
    return attn + mlp + cfg.vocab_size * h


def train_flops_per_token(cfg, seq_len: int, lora_params: int = 0,
                          attn_head_dim: Optional[int] = None) -> float:
    """FLOPs of one trained token (forward + backward) at sequence length `seq_len`.
    Full fine-tune: 6 N + 12 L H Q T (PaLM, Chowdhery et al. 2022, appendix B: 6N for
    the weights' matmuls, 12 L H Q T for attention scores and values, causal sparsity
    not credited). LoRA (`lora_params` > 0, prime-rl's accounting in
    src/prime_rl/trainer/perf.py): the frozen base costs 4 N (forward, and the input
    gradient in backward; no weight gradient), the adapters 6 N_lora. `attn_head_dim`:
    Q; the model's head_dim by default (prime-rl uses hidden_size / heads)."""
    q = cfg.head_dim if attn_head_dim is None else attn_head_dim
    attention = 12 * cfg.num_hidden_layers * cfg.num_attention_heads * q * seq_len
    n = matmul_params(cfg)
    weights = 4 * n + 6 * lora_params if lora_params else 6 * n
    return float(weights + attention)


def mfu(tokens_per_s: float, flops_per_token: float,
        peak: float = PEAK_BF16_FLOPS) -> float:
    """Model FLOPs utilisation, a fraction of `peak`."""
    return tokens_per_s * flops_per_token / peak


def tokenizer_vocab(tokenizer_dir: Path = TOKENIZER_DIR) -> tuple[int, dict]:
    """(len(tokenizer), its eos/pad/bos ids) of a tokenizer directory."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    ids = {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id,
           "bos_token_id": tok.bos_token_id}
    return len(tok), ids


def random_model(cfg, *, seed: int = 0, device: str = "cpu",
                 dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    """Random weights of `cfg` built directly on `device` (transformers' own init,
    normal(0, initializer_range)); nothing read from disk."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.eval()


def write_random_model(out, name: str, *, scale: str = "paper",
                       num_layers: Optional[int] = None, seed: int = 0,
                       device: str = "cpu", tokenizer_dir: Path = TOKENIZER_DIR) -> Path:
    """A model directory of the paper shape `name` with random bf16 weights
    (save_pretrained: config.json + *.safetensors) and the tokenizer of `tokenizer_dir`
    (by default the shipped tiny model's), the vocabulary sized to that tokenizer so that
    a cell runs it on the synthetic mailbox: `model=qwen3_4b model.path=OUT`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vocab, ids = tokenizer_vocab(tokenizer_dir)
    cfg = paper_config(name, vocab_size=vocab, num_layers=num_layers, scale=scale, **ids)
    model = random_model(cfg, seed=seed, device=device)
    model.save_pretrained(str(out), safe_serialization=True)
    for f in TOKENIZER_FILES:
        if (Path(tokenizer_dir) / f).is_file():
            shutil.copy2(Path(tokenizer_dir) / f, out / f)
    info = {"shape": name, "scale": scale, "num_layers": cfg.num_hidden_layers,
            "vocab_size": vocab, "seed": seed, "random_weights": True,
            "params": parameter_count(cfg), "tokenizer_from": str(tokenizer_dir)}
    (out / "shape_info.json").write_text(json.dumps(info, indent=1))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(PAPER), default="qwen3_4b")
    ap.add_argument("--scale", choices=SCALES, default="paper")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    path = write_random_model(a.out, a.shape, scale=a.scale, num_layers=a.layers,
                              seed=a.seed, device=a.device)
    print(json.dumps(json.loads((path / "shape_info.json").read_text())))


if __name__ == "__main__":
    main()
