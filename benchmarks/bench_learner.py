"""Learner step time: DeepSpeed ZeRO-3 (1 process) vs plain torch, in one process.

    python benchmarks/bench_learner.py [--steps 6] [--warmup 2] [--seqs 8] [--len 512]

Tiny Qwen3 (~1.3M parameters), a batch of `seqs` segments × `len` tokens, one micro-batch
per update. Steps alternate between the two learners so that load from other processes on
a shared machine hits both alike; the medians are compared. Prints a JSON line."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.harness.episode import Segment  # noqa: E402
from ablate.learners import build_model_for_learner, make_learner  # noqa: E402
from ablate.learners.config import LearnerConfig  # noqa: E402


def tiny_qwen3(vocab: int) -> transformers.Qwen3Config:
    return transformers.Qwen3Config(
        hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, vocab_size=vocab, tie_word_embeddings=True,
        max_position_embeddings=1024)


def token_mean_loss(li):
    ratio = torch.exp(li.logprobs - li.old_logprobs)
    a = li.advantages[:, None]
    per_tok = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.28) * a)
    return (per_tok * li.mask).sum() / max(li.num_tokens, 1), {}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--len", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=2048)
    args = ap.parse_args()

    torch.manual_seed(0)
    wdir = tempfile.mkdtemp(prefix="bench_learner_")
    transformers.AutoModelForCausalLM.from_config(tiny_qwen3(args.vocab)).save_pretrained(wdir)
    g = torch.Generator().manual_seed(0)
    batch = []
    for _ in range(args.seqs):
        ids = torch.randint(0, args.vocab, (args.len,), generator=g).tolist()
        mask = [0] * 32 + [1] * (args.len - 32)
        batch.append(Segment(ids, mask, [-7.6 if m else 0.0 for m in mask]))
    adv = torch.randn(args.seqs, generator=g).tolist()

    learners = {}
    for name in ("deepspeed", "torch"):
        cfg = OmegaConf.structured(LearnerConfig(name=name,
                                                 micro_batch_tokens=args.seqs * args.len))
        model = build_model_for_learner(
            lambda: transformers.AutoModelForCausalLM.from_pretrained(wdir), cfg)
        learners[name] = make_learner(cfg, model, lr=1e-4, seed=0, temperature=1.0,
                                      ckpt_dir=tempfile.mkdtemp())
    n_params = sum(p.numel() for p in learners["torch"].model.parameters())

    times = {k: [] for k in learners}
    for step in range(args.warmup + args.steps):
        for name, lrn in learners.items():
            t = time.perf_counter()
            lrn.update(batch, adv, token_mean_loss)
            if step >= args.warmup:
                times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    tokens = args.seqs * args.len
    print(json.dumps({
        "params": n_params, "batch": f"{args.seqs}x{args.len}", "steps": args.steps,
        "threads": torch.get_num_threads(),
        "step_s": {k: round(v, 4) for k, v in med.items()},
        "tokens_per_s": {k: round(tokens / v, 1) for k, v in med.items()},
        "zero3_over_torch": round(med["deepspeed"] / med["torch"], 3),
        "all_step_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
    }))


if __name__ == "__main__":
    main()
