"""Learner throughput at the paper's Qwen3-4B shape without weights or network: random
bf16 weights built on the device (ablate/models/shapes.py), fake token data, ablate's
own learner (`make_learner`, DeepSpeed ZeRO-3 world size 1 or plain torch) and a real
loss (the GRPO clipped surrogate of ablate/algos/objective.py, as PolicyGradient.loss_fn
in ablate/algos/protocol.py calls it). One warmup step, then timed steps.

    python benchmarks/bench_learner_gpu.py                       # 4B, LoRA r16 + full, 4k + 16k
    python benchmarks/bench_learner_gpu.py --seq 16384 --lora-rank 16 --json out.json
    python benchmarks/bench_learner_gpu.py --device cpu --shape tiny --seq 64 --steps 1

A step is `--micro-batches` sequences of `--seq` tokens, one sequence per micro-batch
(learner.micro_batch_tokens = seq), every token but the first trained: prime-rl's
benchmark setting (micro_batches 2, in its benchmarks/baselines/*.json). Prints per
configuration tokens/s, MFU, torch's peak memory and, beside it, prime-rl's published
row of the same setting. MFU is reported two ways (ablate/models/shapes.py,
train_flops_per_token): `mfu` with 6N (full) or 4N + 6N_lora (LoRA) plus attention
12 L H Q T with Q the model's head_dim (PaLM, appendix B), and `mfu_primerl` with Q =
hidden/heads exactly as prime-rl's src/prime_rl/trainer/perf.py computes it; both over
989 TFLOP/s, H100/H200 SXM dense bf16. prime-rl's TPS counts trained tokens per second
per GPU, as `tokens_per_s` here. Activation recompute (`learner.activation_checkpointing`,
ablate/learners/recompute.py; prime-rl's "AC Recompute") is on unless --no-recompute."""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.algos.objective import Objective  # noqa: E402
from ablate.harness.episode import Segment  # noqa: E402
from ablate.learners import make_learner  # noqa: E402
from ablate.learners import LEARNERS  # noqa: E402
from ablate.learners.config import LoraConfig  # noqa: E402
from ablate.models import shapes  # noqa: E402

# PrimeIntellect-ai/prime-rl/benchmarks/results/BENCHMARKS.md (commit 30bf494f, updated
# 2026-02-07), section Qwen3-4B-Instruct-2507: rows on one GPU, and the 8-GPU rows of the
# full fine-tune (no 1-GPU full row is published). TPS is per GPU. Step Time there is
# per micro-batch.
PRIME_RL_ROWS = [
    {"type": "RL LoRA(r=16)", "seq": 16384, "ac": "Recompute", "attn": "FA3",
     "hardware": "1xH100 HBM3", "mfu": 0.217, "tokens_per_s": 6230, "step_s": 2.63,
     "peak_gib": 23.3},
    {"type": "RL LoRA(r=16)", "seq": 16384, "ac": "Offload", "attn": "FA3",
     "hardware": "1xH100 HBM3", "mfu": 0.207, "tokens_per_s": 5950, "step_s": 2.75,
     "peak_gib": 20.6},
    {"type": "RL LoRA(r=16)", "seq": 65536, "ac": "Recompute", "attn": "FA3",
     "hardware": "1xH100 HBM3", "mfu": 0.374, "tokens_per_s": 4160, "step_s": 15.74,
     "peak_gib": 42.0},
    {"type": "RL Full", "seq": 16384, "ac": "Recompute", "attn": "FA3",
     "hardware": "8xH200", "mfu": 0.147, "tokens_per_s": 27440 / 8, "step_s": 4.78,
     "peak_gib": 17.1},
]


def fake_batch(n: int, seq: int, vocab: int, seed: int = 0):
    """`n` segments of `seq` random tokens, all trained but position 0 (which has no
    predecessor), sampler logprobs -2.0; distinct first tokens, so no shared prefix."""
    g = torch.Generator().manual_seed(seed)
    batch = []
    for i in range(n):
        ids = torch.randint(0, vocab, (seq,), generator=g)
        ids[0] = i % vocab
        mask = [0] + [1] * (seq - 1)
        batch.append(Segment(ids.tolist(), mask, [0.0] + [-2.0] * (seq - 1)))
    adv = torch.linspace(-1.0, 1.0, n).tolist() if n > 1 else [1.0]
    return batch, adv


def grpo_loss_fn():
    """The GRPO objective's loss (clip 0.2, seq-mean-token-mean) called as the cell's
    policy-gradient algorithm calls it (ablate/algos/protocol.py, loss_fn)."""
    obj = Objective()

    def loss_fn(x):
        return obj.loss(x.logprobs, x.old_logprobs, x.advantages, x.mask,
                        entropy=x.entropy, ref_logprobs=x.ref_logprobs,
                        num_tokens=x.num_tokens, num_seqs=x.num_seqs)
    return loss_fn


def model_config(shape: str, vocab):
    if shape == "tiny":   # the 4B architecture at CPU size, the tiny tokenizer's vocab
        return shapes.paper_config("qwen3_4b", scale="tiny", vocab_size=vocab or 6577)
    return shapes.paper_config(shape, vocab_size=vocab)


def build_learner(cfg, args, seq: int, rank: int):
    lcfg = OmegaConf.structured(LEARNERS.config(args.learner, dtype="bfloat16", micro_batch_tokens=seq, shared_prefix=False,
        checkpoint_every=0, activation_checkpointing=args.recompute,
        lora=LoraConfig(enable=rank > 0, rank=max(rank, 1), alpha=2 * max(rank, 1))))
    model = shapes.random_model(cfg, device=args.device)
    return make_learner(lcfg, model, lr=1e-6, seed=0, temperature=1.0, device=args.device,
                        ckpt_dir=tempfile.mkdtemp(prefix="bench_learner_gpu_"))


def trainable_params(model) -> int:
    """ZeRO-3 leaves a partitioned parameter empty here; its full size is ds_numel."""
    return sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters()
               if p.requires_grad)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_steps(learner, batch, adv, loss_fn, args) -> tuple[list[float], dict]:
    times, stats = [], {}
    for k in range(args.warmup + args.steps):
        _sync(args.device)
        t = time.perf_counter()
        stats = learner.update(batch, adv, loss_fn)
        _sync(args.device)
        if k >= args.warmup:
            times.append(time.perf_counter() - t)
    return times, stats


def memory(device: str) -> dict:
    if not device.startswith("cuda"):
        return {"peak_allocated_gib": None, "peak_reserved_gib": None}
    return {"peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}


def run_one(args, seq: int, rank: int) -> dict:
    cfg = model_config(args.shape, args.vocab)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    learner = build_learner(cfg, args, seq, rank)
    lora = trainable_params(learner.model) if rank > 0 else 0
    batch, adv = fake_batch(args.micro_batches, seq, cfg.vocab_size)
    times, stats = time_steps(learner, batch, adv, grpo_loss_fn(), args)
    step_s = statistics.median(times)
    tps = stats["train_tokens"] / step_s
    fpt = shapes.train_flops_per_token(cfg, seq, lora)
    fpt_prl = shapes.train_flops_per_token(
        cfg, seq, lora, attn_head_dim=cfg.hidden_size // cfg.num_attention_heads)
    row = {"shape": args.shape, "learner": args.learner, "seq": seq,
           "mode": f"lora_r{rank}" if rank else "full", "recompute": args.recompute,
           "micro_batches": stats["micro_batches"], "train_tokens": stats["train_tokens"],
           "steps": len(times), "step_s": round(step_s, 4),
           "step_s_all": [round(t, 4) for t in times], "tokens_per_s": round(tps, 1),
           "flops_per_token": fpt, "mfu": shapes.mfu(tps, fpt),
           "mfu_primerl": shapes.mfu(tps, fpt_prl),
           "matmul_params": shapes.matmul_params(cfg), "lora_params": lora,
           "loss": stats["loss"], "grad_norm": stats["grad_norm"], **memory(args.device)}
    del learner
    gc.collect()
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def reference_rows(seq: int, rank: int) -> list[dict]:
    kind = "RL LoRA(r=16)" if rank == 16 else "RL Full" if rank == 0 else None
    return [r for r in PRIME_RL_ROWS if r["type"] == kind and r["seq"] == seq]


def print_table(rows: list[dict]) -> None:
    print(f"{'config':34} {'tok/s':>9} {'MFU':>6} {'MFU(prl)':>8} {'step s':>7} "
          f"{'peak GiB':>8}")
    for r in rows:
        peak = r["peak_allocated_gib"]
        print(f"{r['shape']} {r['mode']} seq {r['seq']} {r['learner']:>9}".ljust(34)
              + f" {r['tokens_per_s']:>9.0f} {100 * r['mfu']:>5.1f}% "
              f"{100 * r['mfu_primerl']:>7.1f}% {r['step_s']:>7.2f} "
              f"{'-' if peak is None else f'{peak:.1f}':>8}")
        for p in r["prime_rl"]:
            print(f"  prime-rl {p['type']} {p['ac']} {p['attn']} {p['hardware']}".ljust(34)
                  + f" {p['tokens_per_s']:>9.0f} {100 * p['mfu']:>5.1f}% {'':>8} "
                  f"{p['step_s'] * 2:>7.2f} {p['peak_gib']:>8.1f}")


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shape", choices=["qwen3_4b", "tiny"], default="qwen3_4b")
    ap.add_argument("--seq", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--lora-rank", type=int, nargs="+", default=[16, 0],
                    help="0 = full fine-tune")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--micro-batches", type=int, default=2)
    ap.add_argument("--learner", choices=["deepspeed", "torch"], default="deepspeed")
    ap.add_argument("--vocab", type=int, default=None, help="override the vocabulary")
    ap.add_argument("--no-recompute", dest="recompute", action="store_false")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    return ap.parse_args(argv)


def main(argv=None) -> list[dict]:
    args = parse(argv)
    rows = []
    for rank in args.lora_rank:
        for seq in args.seq:
            row = run_one(args, seq, rank)
            row["prime_rl"] = reference_rows(seq, rank) if args.shape == "qwen3_4b" else []
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "prime_rl"}), flush=True)
    out = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda")
           else "cpu", "peak_flops": shapes.PEAK_BF16_FLOPS, "rows": rows}
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return rows


if __name__ == "__main__":
    main()
