"""Are two cell directories the same run? Compares eval.jsonl row for row and
metrics.jsonl field for field, timing fields aside (a restructuring, a refactor or an
engine change must leave a deterministic CPU cell unchanged).

    python benchmarks/compare_cells.py OLD_CELL NEW_CELL [--tol 0]

Prints one JSON object: rows compared per file, the fields that differ (with the first
differing row) and `"identical": true|false`; exit 1 when they differ.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

# wall-clock fields and the counters that only measure speed
TIMING = ("_s", "seconds", "tokens_per_s", "/time", "timestamp")


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def is_timing(key: str) -> bool:
    return any(key.endswith(t) or t in key for t in TIMING)


def same(a, b, tol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol
    return a == b


def compare(old: list[dict], new: list[dict], tol: float) -> dict:
    out = {"rows": [len(old), len(new)], "differing": {}}
    for i, (a, b) in enumerate(zip(old, new)):
        for key in sorted(set(a) | set(b)):
            if is_timing(key) or key in out["differing"]:
                continue
            if not same(a.get(key), b.get(key), tol):
                out["differing"][key] = {"row": i, "old": a.get(key), "new": b.get(key)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--tol", type=float, default=0.0, help="absolute tolerance for floats")
    a = ap.parse_args(argv)
    report = {name: compare(rows(a.old / name), rows(a.new / name), a.tol)
              for name in ("eval.jsonl", "metrics.jsonl")}
    report["identical"] = all(r["rows"][0] == r["rows"][1] and not r["differing"]
                              for r in report.values())
    print(json.dumps(report, indent=1, default=str))
    return 0 if report["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
