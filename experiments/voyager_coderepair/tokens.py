"""The pre-registered token check of voyager_coderepair (README, "Design"): per seed, the
two arms' summed training `generated_tokens` (metrics.jsonl) and their ratio; the
comparison counts as token-matched only if every seed's ratio is within a factor 1.25.

    PYTHONPATH=. python experiments/voyager_coderepair/tokens.py [RUNS_DIR]   # default: results/runs
"""
from __future__ import annotations

import sys
from pathlib import Path

from analysis.collect import parse_assignments, read_jsonl

HERE = Path(__file__).resolve().parent
FACTOR = 1.25


def generated(run: Path) -> int:
    rows, _ = read_jsonl(run / "metrics.jsonl")
    return sum(int(r.get("generated_tokens", 0)) for r in rows)


def table(runs: Path) -> list[dict]:
    """One row per seed with both arms: tokens per arm and voyager / react."""
    by = {}
    for run in sorted(p for p in runs.iterdir() if (p / "metrics.jsonl").is_file()):
        keys = parse_assignments(run.name)   # the sweep dir name: k=v,k=v
        by.setdefault(keys["seed"], {})[keys["agent"]] = generated(run)
    return [{"seed": s, "react": a["react"], "voyager": a["voyager"],
             "ratio": a["voyager"] / a["react"]}
            for s, a in sorted(by.items()) if {"react", "voyager"} <= a.keys()]


def main(argv: list[str]) -> None:
    rows = table(Path(argv[0]) if argv else HERE / "results" / "runs")
    print("| seed | react tokens | voyager tokens | voyager / react |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['react']} | {r['voyager']} | {r['ratio']:.3f} |")
    matched = bool(rows) and all(1 / FACTOR <= r["ratio"] <= FACTOR for r in rows)
    print(f"\ntoken-matched (every seed within x{FACTOR}): {'yes' if matched else 'no'}")


if __name__ == "__main__":
    main(sys.argv[1:])
