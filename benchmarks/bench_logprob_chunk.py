"""Peak memory of token logprobs + entropies (forward and backward) over a Qwen3-size
vocabulary, chunked (ablate.learners.batching.LOGPROB_CHUNK positions at a time) against
unchunked, in one run.

    python benchmarks/bench_logprob_chunk.py [--positions 4096] [--vocab 151936]
                                             [--dtype bfloat16] [--chunk 256] [--device cuda]

The input is the output head's logits [positions, vocab] (bf16 as on the GPU preset),
a leaf with grad; the loss reads logprobs and entropies (an entropy bonus, the costlier
case), at temperature 0.7 with an action mask on a few positions.

How peak memory is measured on the CPU: each variant runs in a fresh child process, so
no cached allocation carries over, after a small warm-up pass (lazy kernel and thread
pool set-up). The child runs with MALLOC_MMAP_THRESHOLD_=65536 (a glibc tunable, fixed
rather than glibc's dynamic threshold of up to 32 MiB): every block of 64 KiB or more is
mmapped and unmapped when freed, so the resident set size (RSS) tracks live tensor
bytes instead of freed heap kept by the allocator; the
kernel keeps the process's RSS high-water mark (VmHWM in /proc/self/status). Once the
inputs are allocated, that mark is reset (writing 5 to /proc/self/clear_refs, Linux >=
4.0, proc(5)); a variant's peak is the mark after forward+backward minus the RSS at the
reset (the logits' gradient, one logits-sized tensor in both variants, counts in both).
tracemalloc does not see torch's allocations and torch's CPU allocator keeps no peak
statistic, hence RSS. On CUDA (--device cuda) the peak is torch's own
(torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus the allocated
bytes at the reset). Prints one JSON line: both peaks in MiB, their ratio, seconds,
and whether the values and gradients matched."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2 ** 20


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def peak_mib() -> float:
    with open("/proc/self/status") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    return kib / 1024


def child(args) -> dict:
    import torch

    from ablate.learners.batching import shifted_stats
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    dev = torch.device(args.device)
    warm = torch.randn(1, 8, 64, device=dev).requires_grad_()
    shifted_stats(warm, torch.zeros(1, 8, dtype=torch.long, device=dev), 0.7, None, 1,
                  True, chunk=args.run_chunk)[0].sum().backward()
    logits = torch.randn(1, args.positions, args.vocab, dtype=dtype, device=dev).mul_(2)
    logits.requires_grad_()
    targets = torch.randint(0, args.vocab, (1, args.positions), device=dev)
    allowed = [{t: [int(targets[0, t - 1]), 3, 7] for t in range(5, args.positions, 97)}]
    w = torch.randn(1, args.positions, device=dev)
    base = reset_and_base(dev)
    t0 = time.perf_counter()
    lp, ent = shifted_stats(logits, targets, 0.7, allowed, 1, True, chunk=args.run_chunk)
    loss = (lp * w).sum() + 0.01 * ent.sum()
    loss.backward()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2 ** 20 if dev.type == "cuda" else peak_mib()
    g = logits.grad.float()
    return {"peak_mib": round(peak - base, 1), "seconds": round(dt, 2),
            "lp_sum": float(lp.double().sum()), "grad_sum": float(g.double().sum()),
            "grad_abs": float(g.double().abs().sum())}


def reset_and_base(dev) -> float:
    """Reset the peak; the memory in use then (MiB), the baseline of the peak."""
    import torch
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2 ** 20
    reset_peak()
    return rss_mib()


def run_variant(args, chunk: int) -> dict:
    cmd = [sys.executable, __file__, "--child", "--run-chunk", str(chunk),
           "--positions", str(args.positions), "--vocab", str(args.vocab),
           "--dtype", args.dtype, "--device", args.device]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--positions", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--chunk", type=int, default=None, help="default: LOGPROB_CHUNK")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--run-chunk", type=int, default=0)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    from ablate.learners.batching import LOGPROB_CHUNK
    chunk = LOGPROB_CHUNK if args.chunk is None else args.chunk
    chunked = run_variant(args, chunk)
    dense = run_variant(args, 0)
    same = all(chunked[k] == dense[k] for k in ("lp_sum", "grad_sum", "grad_abs"))
    print(json.dumps({"device": args.device, "positions": args.positions,
                      "vocab": args.vocab, "dtype": args.dtype, "chunk": chunk, "unchunked_peak_mib": dense["peak_mib"],
                      "chunked_peak_mib": chunked["peak_mib"],
                      "ratio": round(dense["peak_mib"] / max(chunked["peak_mib"], 1e-9), 2),
                      "unchunked_s": dense["seconds"], "chunked_s": chunked["seconds"],
                      "identical_values_and_grads": same}))


if __name__ == "__main__":
    main()
