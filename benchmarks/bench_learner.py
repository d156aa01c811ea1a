"""Learner step: shared prefix forwarded once vs per segment, DeepSpeed ZeRO-3 (1 process)
and plain torch, all in one process.

    python benchmarks/bench_learner.py [--steps 4] [--warmup 1] [--seqs 16] [--prefix 577]
                                       [--len 1250] [--micro-batch-tokens 4096]

The embedded tiny model (ablate/models/assets/tiny) on a batch shaped like the default
cell's update (see README "what the default cell does"): `seqs` segments of `len` tokens
on average (±30%), all starting with the same `prefix` untrained tokens (the system
prompt and tool schemas), then per segment a question, trained spans and tool
observations. Steps alternate between the four learners so that load from other processes
on a shared machine hits them alike; medians are compared. Prints a JSON line with tokens
forwarded per step (`update/forward_tokens`) and step times as ratios, shared over plain."""
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
from ablate.learners import LEARNERS  # noqa: E402
from ablate.models.tiny import tiny_path  # noqa: E402


def cell_like_batch(seqs: int, prefix: int, mean_len: int, vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    system = torch.randint(0, vocab, (prefix,), generator=g).tolist()
    batch = []
    for _ in range(seqs):
        L = max(prefix + 40, int(mean_len * (0.7 + 0.6 * float(torch.rand(1, generator=g)))))
        ids = system + torch.randint(0, vocab, (L - prefix,), generator=g).tolist()
        mask = [0] * (prefix + 30) + [1] * (L - prefix - 30)   # question, then the agent
        for o in range(prefix + 90, L, 120):                    # tool observations
            mask[o:o + 60] = [0] * len(mask[o:o + 60])
        batch.append(Segment(ids, mask, [-2.0 if m else 0.0 for m in mask]))
    return batch, torch.randn(seqs, generator=g).tolist()


def token_mean_loss(li):
    ratio = torch.exp(li.logprobs - li.old_logprobs)
    a = li.advantages[:, None]
    per_tok = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.28) * a)
    return (per_tok * li.mask).sum() / max(li.num_tokens, 1), {}


def build(name: str, shared: bool, mbt: int, wdir: str):
    cfg = OmegaConf.structured(LEARNERS.config(name, micro_batch_tokens=mbt,
                                             shared_prefix=shared))
    model = build_model_for_learner(
        lambda: transformers.AutoModelForCausalLM.from_pretrained(wdir), cfg)
    return make_learner(cfg, model, lr=1e-5, seed=0, temperature=1.0,
                        ckpt_dir=tempfile.mkdtemp())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--prefix", type=int, default=577)
    ap.add_argument("--len", type=int, default=1250)
    ap.add_argument("--micro-batch-tokens", type=int, default=4096)
    ap.add_argument("--model", default=str(tiny_path()))
    args = ap.parse_args()

    vocab = transformers.AutoConfig.from_pretrained(args.model).vocab_size
    batch, adv = cell_like_batch(args.seqs, args.prefix, args.len, vocab)
    learners = {(n, s): build(n, s, args.micro_batch_tokens, args.model)
                for n in ("deepspeed", "torch") for s in (False, True)}
    times = {k: [] for k in learners}
    stats = {}
    for step in range(args.warmup + args.steps):
        for key, lrn in learners.items():
            t = time.perf_counter()
            stats[key] = lrn.update(batch, adv, token_mean_loss)
            if step >= args.warmup:
                times[key].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    fwd = {k: s["forward_tokens"] for k, s in stats.items()}
    label = {k: f"{k[0]}{'+prefix' if k[1] else ''}" for k in learners}
    print(json.dumps({
        "model": args.model, "params": sum(p.numel() for p in
                                           learners["torch", False].model.parameters()),
        "batch": f"{args.seqs} segments, {stats['torch', False]['tokens']} tokens, "
                 f"shared prefix {stats['torch', True]['prefix_tokens']}",
        "steps": args.steps, "threads": torch.get_num_threads(),
        "forward_tokens": {label[k]: v for k, v in fwd.items()},
        "forward_tokens_ratio": round(fwd["deepspeed", True] / fwd["deepspeed", False], 3),
        "micro_batches": {label[k]: s["micro_batches"] for k, s in stats.items()},
        "step_s": {label[k]: round(v, 3) for k, v in med.items()},
        "step_time_ratio": {n: round(med[n, True] / med[n, False], 3)
                            for n in ("deepspeed", "torch")},
        "zero3_over_torch": round(med["deepspeed", False] / med["torch", False], 3),
        "last_loss": {label[k]: s["loss"] for k, s in stats.items()},
    }))


if __name__ == "__main__":
    main()
