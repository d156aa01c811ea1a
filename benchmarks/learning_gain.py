"""Did cells learn, and how much per CPU-minute? The testbed's figure of merit (issue 17).

    python benchmarks/learning_gain.py CELL_DIR [CELL_DIR ...] [--figure gain.png]
        [--scripted SCRIPTED_CELL_DIR] [--key correct]

Each CELL_DIR is one seed of the same configuration. Only the sampled evaluation rows are
used (the primary metric, ablate/loop/eval_metrics.py; greedy rows are reported beside). Per
question the mean over its samples is taken first, then the paired change between the
first and the last evaluation. Two standard errors of the gain: over questions (of the
per-question change averaged over seeds) and over seeds (of the per-seed mean change; 
undefined for one seed). Gain per CPU-minute divides by the training compute: the cells'
summed `step_cpu_s` (measured process CPU time) where every step logged it, else their
summed step time x run.num_threads (wall time, inflated on a shared machine); evaluation
excluded.
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml


def load(cell: Path, decoding: str = "sampled") -> list[dict]:
    rows = [json.loads(x) for x in (cell / "eval.jsonl").read_text().splitlines() if x]
    return [r for r in rows if r.get("decoding", "sampled") == decoding]


def per_question(rows: list[dict], step: int, key: str, hops=None) -> dict[str, float]:
    acc = defaultdict(list)
    for r in rows:
        if r["step"] == step and (hops is None or r["hops"] == hops):
            acc[r["task_id"]].append(float(r[key]))
    return {q: float(np.mean(v)) for q, v in acc.items()}


def seed_changes(rows: list[dict], key: str, hops=None) -> tuple[dict, float, float]:
    """{question: last - first}, first and last mean over the shared questions."""
    steps = sorted({r["step"] for r in rows})
    a, b = per_question(rows, steps[0], key, hops), per_question(rows, steps[-1], key, hops)
    qs = sorted(set(a) & set(b))
    return ({q: b[q] - a[q] for q in qs}, float(np.mean([a[q] for q in qs])),
            float(np.mean([b[q] for q in qs])))


def se(x) -> float:
    x = np.asarray(x, float)
    return float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")


def gain(cells: list[list[dict]], key: str, hops=None) -> dict:
    per_seed = [seed_changes(rows, key, hops) for rows in cells]
    qs = sorted(set.intersection(*(set(d) for d, _, _ in per_seed)))
    by_q = [np.mean([d[q] for d, _, _ in per_seed]) for q in qs]
    seed_means = [np.mean([d[q] for q in qs]) for d, _, _ in per_seed]
    delta = float(np.mean(by_q))
    return {"n_questions": len(qs), "n_seeds": len(cells),
            "first": float(np.mean([f for _, f, _ in per_seed])),
            "last": float(np.mean([la for _, _, la in per_seed])), "delta": delta,
            "se_questions": se(by_q), "se_seeds": se(seed_means)}


def train_cpu_minutes(cell: Path) -> float:
    steps = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines() if x]
    if steps and all("step_cpu_s" in m for m in steps):
        return sum(m["step_cpu_s"] for m in steps) / 60.0
    threads = yaml.safe_load((cell / "config.yaml").read_text())["run"]["num_threads"] or 1
    return sum(m["step_s"] for m in steps) * threads / 60.0


def pooled_start(cells: list[list[dict]], key: str) -> dict:
    """For cells that all start from one checkpoint: each seed's last evaluation against the
    first evaluation pooled over the seeds (their spread at the first step is evaluation
    noise only). The SE adds the SE over seeds of the last means and of the pooled first
    mean (independent draws), on the questions every seed shares."""
    per_seed = [seed_changes(rows, key) for rows in cells]
    firsts = [f for _, f, _ in per_seed]
    lasts = [la for _, _, la in per_seed]
    pooled = float(np.mean(firsts))
    return {"pooled_first": pooled, "lasts": lasts,
            "delta": float(np.mean(lasts)) - pooled,
            "se": math.hypot(se(lasts), se(firsts)), "n_seeds": len(cells)}


def curve(rows: list[dict], key: str) -> list[tuple[int, float]]:
    steps = sorted({r["step"] for r in rows})
    return [(s, float(np.mean(list(per_question(rows, s, key).values())))) for s in steps]


def plot(cells: list[list[dict]], greedy: list[list[dict]], key: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for rows_list, label in ((cells, "sampled (avg@k)"), (greedy, "greedy")):
        curves = [curve(r, key) for r in rows_list if r]
        if not curves:
            continue
        steps = [s for s, _ in curves[0]]
        y = np.array([[v for _, v in c] for c in curves if len(c) == len(steps)])
        m = y.mean(0)
        ax.plot(steps, m, marker="o", label=f"{label}, {len(y)} seeds")
        if len(y) > 1:
            band = y.std(0, ddof=1) / math.sqrt(len(y))
            ax.fill_between(steps, m - band, m + band, alpha=0.25)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(f"held-out {key}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cells", type=Path, nargs="+")
    ap.add_argument("--scripted", type=Path, default=None)
    ap.add_argument("--key", default="correct")
    ap.add_argument("--figure", type=Path, default=None)
    ap.add_argument("--pooled-start", action="store_true",
                    help="also report the gain against the first evaluation pooled over "
                         "seeds (cells that start from the same checkpoint)")
    args = ap.parse_args()
    cells = [load(c) for c in args.cells]
    minutes = [train_cpu_minutes(c) for c in args.cells]
    for c, rows in zip(args.cells, cells):
        print(f"{c}: " + ", ".join(f"step {s}: {v:.3f}" for s, v in curve(rows, args.key)))
    hops = sorted({r["hops"] for r in cells[0]})
    for key in (args.key, "answered", "reward"):
        for h in [None, *hops]:
            g = gain(cells, key, h)
            label = "all" if h is None else f"{h}-hop"
            print(f"{key:8s} {label:6s} q={g['n_questions']:3d} seeds={g['n_seeds']}  "
                  f"{g['first']:.3f} -> {g['last']:.3f}  delta {g['delta']:+.3f} "
                  f"SE(questions) {g['se_questions']:.3f} SE(seeds) {g['se_seeds']:.3f}")
    g = gain(cells, args.key)
    per_min = g["delta"] / np.mean(minutes)
    print(f"gain per training CPU-minute: {per_min:+.4f} (+- {g['se_questions'] / np.mean(minutes):.4f}"
          f" over questions; {np.mean(minutes):.2f} CPU-min per cell)")
    if args.pooled_start:
        p = pooled_start(cells, args.key)
        print(f"pooled start: {p['pooled_first']:.3f} (mean of {p['n_seeds']} first "
              f"evaluations) -> last " + ", ".join(f"{x:.3f}" for x in p["lasts"])
              + f"  delta {p['delta']:+.3f} SE {p['se']:.3f} ({p['delta'] / p['se']:.2f} SEs)")
    greedy = [load(c, "greedy") for c in args.cells]
    if any(greedy):
        gg = gain([r for r in greedy if r], args.key)
        print(f"greedy   all    {gg['first']:.3f} -> {gg['last']:.3f}  delta {gg['delta']:+.3f}"
              f" SE(questions) {gg['se_questions']:.3f}")
    if args.scripted:
        srows = load(args.scripted)
        print(f"scripted accuracy {np.mean([r['correct'] for r in srows]):.3f} (n={len(srows)})")
    if args.figure:
        plot(cells, greedy, args.key, args.figure)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
