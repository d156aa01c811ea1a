"""Did a cell learn? Paired change of held-out accuracy and shaped reward between the first
and the last evaluation of a cell, with its standard error, per hop count; optionally the
scripted baseline's accuracy on the same questions.

    python benchmarks/learning_gain.py CELL_DIR [--scripted SCRIPTED_CELL_DIR]

Per question the mean over its samples is taken first; the SE is that of the paired
per-question differences (questions are the unit; one seed, so seed noise is not in it).
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path


def per_question(rows: list[dict], step: int, key: str) -> dict[str, float]:
    acc = defaultdict(list)
    for r in rows:
        if r["step"] == step:
            acc[r["task_id"]].append(float(r[key]))
    return {q: sum(v) / len(v) for q, v in acc.items()}


def paired(rows: list[dict], first: int, last: int, key: str, hops=None) -> dict:
    keep = {r["task_id"] for r in rows if hops is None or r["hops"] == hops}
    a = per_question(rows, first, key)
    b = per_question(rows, last, key)
    qs = sorted(set(a) & set(b) & keep)
    d = [b[q] - a[q] for q in qs]
    n = len(d)
    mean = sum(d) / n if n else float("nan")
    var = sum((x - mean) ** 2 for x in d) / (n - 1) if n > 1 else float("nan")
    se = math.sqrt(var / n) if n > 1 else float("nan")
    return {"n": n, "first": sum(a[q] for q in qs) / max(n, 1),
            "last": sum(b[q] for q in qs) / max(n, 1), "delta": mean, "se": se,
            "delta_over_se": mean / se if se and se > 0 else float("nan")}


def load(cell: Path) -> list[dict]:
    return [json.loads(line) for line in (cell / "eval.jsonl").read_text().splitlines() if line]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cell", type=Path)
    ap.add_argument("--scripted", type=Path, default=None)
    args = ap.parse_args()
    rows = load(args.cell)
    steps = sorted({r["step"] for r in rows})
    first, last = steps[0], steps[-1]
    print(f"cell {args.cell}  evaluations at steps {steps}")
    curve = [(s, sum(r["correct"] for r in rows if r["step"] == s)
              / max(1, sum(1 for r in rows if r["step"] == s))) for s in steps]
    print("learning curve (held-out accuracy): "
          + ", ".join(f"step {s}: {a:.3f}" for s, a in curve))
    hops = sorted({r["hops"] for r in rows})
    for key in ("correct", "reward"):
        for h in [None, *hops]:
            p = paired(rows, first, last, key, h)
            label = "all" if h is None else f"{h}-hop"
            print(f"{key:8s} {label:6s} n={p['n']:4d}  step {first}: {p['first']:.3f}  "
                  f"step {last}: {p['last']:.3f}  delta {p['delta']:+.3f} +- {p['se']:.3f} "
                  f"(delta/SE {p['delta_over_se']:+.2f})")
    if args.scripted:
        srows = load(args.scripted)
        for h in [None, *hops]:
            sel = [r for r in srows if h is None or r["hops"] == h]
            label = "all" if h is None else f"{h}-hop"
            print(f"scripted {label:6s} accuracy {sum(r['correct'] for r in sel) / max(1, len(sel)):.3f}"
                  f" (n={len(sel)})")


if __name__ == "__main__":
    main()
