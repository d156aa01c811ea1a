"""The pre-registered secondary of naive_trap (README, "Endpoint and hypotheses"): how the
held-out episodes ended, per arm and seed at one evaluation step, from eval.jsonl. An
agent can stop submitting by saying "I don't know" (an `answer` ending whose final answer
is "I don't know": `answered` false) or by never reaching an answer (out of turns, out of
tokens, malformed calls).

    PYTHONPATH=. python experiments/naive_trap/endings.py [RUNS_DIR] [--step N]
    # defaults: results/runs, the last evaluated step
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from analysis.collect import parse_assignments, read_jsonl

HERE = Path(__file__).resolve().parent
COLUMNS = ("submitted", "I don't know", "max_turns", "max_tokens", "malformed")


def endings(rows: list[dict]) -> dict:
    """Counts of each way an episode ended (COLUMNS; other end reasons under their name)."""
    c = Counter()
    for r in rows:
        if r.get("end_reason") == "answer":
            c["submitted" if r.get("answered") else "I don't know"] += 1
        else:
            c[str(r.get("end_reason"))] += 1
    return dict(c)


def table(runs: Path, step: int | None = None) -> list[dict]:
    """One row per (reward, seed): the step, its episodes and their endings (sampled rows)."""
    out = []
    for run in sorted(p for p in runs.iterdir() if (p / "eval.jsonl").is_file()):
        keys = parse_assignments(run.name)   # the sweep dir name: k=v,k=v
        rows, _ = read_jsonl(run / "eval.jsonl")
        rows = [r for r in rows if r.get("decoding", "sampled") != "greedy"]
        at = max(r["step"] for r in rows) if step is None else step
        mine = [r for r in rows if r["step"] == at]
        out.append({"reward": keys["+reward"], "seed": keys["seed"], "step": at,
                    "episodes": len(mine), **endings(mine)})
    return sorted(out, key=lambda r: (r["reward"], r["seed"]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="?", default=str(HERE / "results" / "runs"))
    ap.add_argument("--step", type=int, default=None)
    a = ap.parse_args(argv)
    rows = table(Path(a.runs), a.step)
    print("| reward | seed | step | episodes | " + " | ".join(COLUMNS) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(COLUMNS))
    for r in rows:
        print(f"| {r['reward']} | {r['seed']} | {r['step']} | {r['episodes']} | "
              + " | ".join(str(r.get(k, 0)) for k in COLUMNS) + " |")


if __name__ == "__main__":
    main()
