"""What fed voyager's skill library, and the pre-registered token check, as quantities
for the README (voyager_coderepair): per seed, from metrics.jsonl, the candidate skills
the training episodes proposed, those that failed verification by replay, those added
(and at which step), skills used; react's training repairs (episodes judged correct, and
at which step); and tokens.py's per-seed token ratio voyager / react.

Registered in analysis.yaml `scripts:` (publish runs it as `python library.py REPORT_DIR`):
writes REPORT_DIR/library.json.

    PYTHONPATH=. python experiments/voyager_coderepair/library.py REPORT_DIR [--runs RUNS]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis.collect import parse_assignments, read_jsonl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import tokens  # noqa: E402  (the token check, one definition)


def per_run(run: Path) -> dict:
    rows, _ = read_jsonl(run / "metrics.jsonl")
    rows = sorted(rows, key=lambda r: r["step"])
    tot = lambda k: int(round(sum(float(r.get(k, 0) or 0) for r in rows)))  # noqa: E731
    repairs = {int(r["step"]): int(round(float(r.get("accuracy", 0)) * int(r.get("episodes", 0))))
               for r in rows}
    return {"steps": len(rows),
            "candidates": tot("voyager/candidates"),
            "verify_failed": tot("voyager/verify_failed"),
            "skills_added": tot("voyager/skills_added"),
            "added_at": [int(r["step"]) for r in rows if float(r.get("voyager/skills_added", 0) or 0) > 0],
            "skills_used": tot("voyager/skills_used"),
            "library_size_last": int(round(float(rows[-1].get("voyager/library_size", 0) or 0))),
            "training_repairs": sum(repairs.values()),
            "repairs_at": [s for s, n in repairs.items() if n > 0]}


def quantities(runs: Path) -> dict:
    arms: dict = {}
    for run in sorted(p for p in runs.iterdir() if (p / "metrics.jsonl").is_file()):
        keys = parse_assignments(run.name)
        arms.setdefault(str(keys["agent"]), {})[str(keys["seed"])] = per_run(run)
    out = {"arms": {}}
    for arm, seeds in arms.items():
        tot = {k: sum(v[k] for v in seeds.values())
               for k in ("steps", "candidates", "verify_failed", "skills_added", "skills_used",
                         "training_repairs")}
        tot["seeds_with_skill"] = sum(1 for v in seeds.values() if v["library_size_last"] > 0)
        out["arms"][arm] = {"seeds": seeds, "total": tot}
    rows = tokens.table(runs)
    out["tokens"] = {"factor": tokens.FACTOR,
                     "seeds": {str(r["seed"]): r for r in rows},
                     "ratios": [r["ratio"] for r in rows],
                     "matched": bool(rows) and all(1 / tokens.FACTOR <= r["ratio"] <= tokens.FACTOR
                                                   for r in rows)}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", help="write library.json here")
    ap.add_argument("--runs", default=str(HERE / "results" / "runs"))
    a = ap.parse_args(argv)
    out = Path(a.report)
    out.mkdir(parents=True, exist_ok=True)
    q = quantities(Path(a.runs))
    (out / "library.json").write_text(json.dumps(q, indent=1, sort_keys=True) + "\n")
    print(json.dumps({arm: v["total"] for arm, v in q["arms"].items()}))


if __name__ == "__main__":
    main()
