"""The update of N LoRA cells over one base: one after another (each cell's own forward
and backward per micro-batch, as in an exact pack) against joint (a batched pack's
UpdateEngine: the cells' micro-batches in shared forwards and backwards, each row
through its own cell's adapter, ablate/learners/packed.py), in one run, same process.

    python benchmarks/bench_joint_update.py [--model tiny|qwen3_4b] [--layers 2]
        [--n 1 2 4 8] [--prefix 628] [--rows 2] [--suffix 200] [--device cpu]
        [--repeats 3] [--budget 4096] [--out FILE]

Each cell gets its own batch shaped like a cell's update (a shared prompt prefix of
--prefix tokens, --rows segments of --suffix more tokens, half of them trained); the
tiny model's defaults are the tiny cell's measured shape (update/prefix_tokens 628,
2 rows of about 200). `qwen3_4b` is the Qwen3-4B shape (hidden 2560, MLP 9728, 32/8
heads, vocab 151936, LoRA r16/alpha32 on q, k, v, o) with random float32 weights and
--layers of its 36 layers. Per N: seconds of all N cells' updates (median of --repeats,
after one warm-up), the ratio sequential / joint (above 1: joint is faster), and the
peak memory each mode added over the built cells (each mode in a fresh process: CUDA
max_memory_allocated, CPU the largest resident set, getrusage(2)). Prints one JSON
object; --out writes it too."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omegaconf import OmegaConf  # noqa: E402

from ablate.algos import policy_loss  # noqa: E402
from ablate.apps.pack_turns import take_turns  # noqa: E402
from ablate.harness.episode import Segment  # noqa: E402
from ablate.learners import LEARNERS, make_learner  # noqa: E402
from ablate.learners.config import LoraConfig  # noqa: E402
from ablate.learners.packed import UpdateEngine  # noqa: E402
from ablate.models.loading import sharing_copy  # noqa: E402

QWEN3_4B = dict(hidden_size=2560, intermediate_size=9728, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, vocab_size=151936,
                tie_word_embeddings=True, max_position_embeddings=4096)


def base_model(name: str, layers: int, device: str):
    if name == "tiny":
        from ablate.models.tiny import load_tiny
        model = load_tiny()[0]
    else:
        import transformers
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.Qwen3Config(num_hidden_layers=layers, **QWEN3_4B))
    return model.to(device).eval()


def learners(base, n: int, model: str, budget: int, device: str) -> list:
    rank, alpha = (8, 16) if model == "tiny" else (16, 32)
    out = []
    for i in range(n):
        c = LEARNERS.config("torch", micro_batch_tokens=budget)
        c.lora = LoraConfig(enable=True, rank=rank, alpha=alpha,
                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
        out.append(make_learner(OmegaConf.structured(c), sharing_copy(base), lr=1e-3,
                                seed=i, temperature=1.0, ckpt_dir="/tmp/bench-joint",
                                device=device))
    return out


def batch(seed: int, vocab: int, prefix: int, rows: int, suffix: int):
    g = torch.Generator().manual_seed(seed)
    system = torch.randint(0, vocab, (prefix,), generator=g).tolist()
    segs = []
    for r in range(rows):
        n = suffix + r * 7
        ids = system + torch.randint(0, vocab, (n,), generator=g).tolist()
        mask = [0] * prefix + [0] * (n // 2) + [1] * (n - n // 2)
        segs.append(Segment(ids, mask, [-8.0 * m for m in mask]))
    return segs, torch.randn(rows, generator=g).tolist()


def loss_fn(li):
    return policy_loss(li.logprobs, li.old_logprobs, li.advantages, li.mask, eps_low=0.2,
                       eps_high=0.28, agg="token-mean", num_tokens=li.num_tokens,
                       num_seqs=li.num_seqs)


def peak_mb(device: str, start: int) -> float:
    """Peak memory since `start` (CUDA: the allocator's; CPU: the process's largest
    resident set, getrusage(2), which the fresh process of one mode makes its own)."""
    if device.startswith("cuda"):
        return (torch.cuda.max_memory_allocated() - start) / 2**20
    import resource
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - start) / 2**20


def resident(device: str) -> int:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()
    import psutil
    return psutil.Process().memory_info().rss


def run(cells, batches, joint: bool, device: str) -> float:
    """Seconds of all the cells' updates (joint: the cells taking turns, as in a pack)."""
    jobs = [lambda c=c, b=b: c.update(*b, loss_fn) for c, b in zip(cells, batches)]
    t0 = time.perf_counter()
    if joint:
        take_turns(jobs)
    else:
        for job in jobs:
            job()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def one_mode(a) -> dict:
    """In this (fresh) process: N cells, one mode, a warm-up then --repeats timings."""
    torch.set_num_threads(a.threads)
    base = base_model(a.model, a.layers, a.device)
    cells = learners(base, a.n[0], a.model, a.budget, a.device)
    batches = [batch(i, base.config.vocab_size, a.prefix, a.rows, a.suffix)
               for i in range(a.n[0])]
    start = resident(a.device)
    joint = a.mode == "joint"
    if joint:
        engine = UpdateEngine()
        for c in cells:
            engine.attach(c)
    times = [run(cells, batches, joint, a.device) for _ in range(a.repeats + 1)][1:]
    return {"seconds": statistics.median(times), "peak_mb": peak_mb(a.device, start)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", choices=["tiny", "qwen3_4b"])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--n", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--prefix", type=int, default=628)
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--suffix", type=int, default=200)
    ap.add_argument("--budget", type=int, default=4096)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mode", choices=["sequential", "joint"], help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.mode:
        print(json.dumps(one_mode(a)))
        return 0
    rows = []
    for n in a.n:
        row = {"n": n}
        for mode in ("sequential", "joint"):
            args = list(argv if argv is not None else sys.argv[1:])
            # one malloc arena, as the pack's process has (ablate/apps/pack.py worker_env):
            # the joint mode's cell threads would each grow an arena of their own
            got = json.loads(subprocess.run(
                [sys.executable, __file__, *strip_n_out(args), "--n", str(n), "--mode", mode],
                capture_output=True, text=True, check=True,
                env=dict(os.environ, MALLOC_ARENA_MAX="1")).stdout.splitlines()[-1])
            row[f"{mode}_s"], row[f"{mode}_peak_mb"] = got["seconds"], got["peak_mb"]
        row["speedup"] = row["sequential_s"] / row["joint_s"]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    out = {"model": a.model, "layers": a.layers if a.model != "tiny" else None,
           "device": a.device, "threads": a.threads, "prefix": a.prefix, "rows": a.rows,
           "suffix": a.suffix, "budget": a.budget, "repeats": a.repeats, "results": rows,
           "date": time.strftime("%Y-%m-%d")}
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0


def strip_n_out(args: list[str]) -> list[str]:
    """The command line without its --n and --out options (with their values)."""
    out, skip = [], False
    for x in args:
        if x in ("--n", "--out"):
            skip = True
            continue
        if skip and not x.startswith("--"):
            continue
        skip = False
        out.append(x)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
