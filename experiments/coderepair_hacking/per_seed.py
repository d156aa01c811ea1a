"""Per-seed numbers of the README's results (coderepair_hacking), from the committed rows:
for each cell (the sweep directory's keys but the seed) and seed, at each evaluation
step, the mean per held-out episode of the behaviour columns of eval.jsonl, the counts
of correct (repaired) episodes and of each end reason; and from metrics.jsonl, the
training groups with mixed rewards and the update's gradient norm at every step.

Registered in analysis.yaml `scripts:` (publish runs it as `python per_seed.py REPORT_DIR`):
writes REPORT_DIR/per_seed.json, keyed cell -> seed -> step.

    PYTHONPATH=. python experiments/coderepair_hacking/per_seed.py REPORT_DIR [--runs RUNS]
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from analysis.collect import parse_assignments, read_jsonl

HERE = Path(__file__).resolve().parent
MEANS = ("test_runs", "idle_test_runs", "edits", "noop_edits", "answered", "malformed_calls",
         "parser_repairs", "retries_used", "turns")


def cell_name(keys: dict) -> str:
    """The run's keys but seed and algorithm, `+` dropped: reward=outcome,harness.parser=strict."""
    return ",".join(f"{k.lstrip('+')}={v}" for k, v in keys.items()
                    if k not in ("seed", "+algo", "algo"))


def evaluation(rows: list[dict]) -> dict:
    out = {"episodes": len(rows), "correct": sum(bool(r.get("correct")) for r in rows),
           "end": dict(Counter(str(r.get("end_reason")) for r in rows))}
    for k in MEANS:
        xs = [float(r[k]) for r in rows if r.get(k) is not None]
        if xs:
            out[k] = sum(xs) / len(xs)
    return out


def quantities(runs: Path) -> dict:
    cells: dict = {}
    for run in sorted(p for p in runs.iterdir() if (p / "eval.jsonl").is_file()):
        keys = parse_assignments(run.name)
        rows, _ = read_jsonl(run / "eval.jsonl")
        rows = [r for r in rows if r.get("decoding", "sampled") != "greedy"]
        steps = sorted({r["step"] for r in rows})
        rec = {"eval": {str(s): evaluation([r for r in rows if r["step"] == s]) for s in steps},
               "first_step": steps[0], "last_step": steps[-1]}
        if (run / "metrics.jsonl").is_file():
            m, _ = read_jsonl(run / "metrics.jsonl")
            rec["train"] = {"steps": len(m),
                            "mixed_groups": [float(r.get("mixed_groups", 0) or 0) for r in m],
                            "grad_norm": [float(r.get("update/grad_norm", 0) or 0) for r in m],
                            "accuracy": [float(r.get("accuracy", 0) or 0) for r in m]}
        cells.setdefault(cell_name(keys), {})[str(keys["seed"])] = rec
    return {"cells": cells, "summary": {c: summarise(seeds) for c, seeds in cells.items()}}


def _stats(xs: list) -> dict:
    return {"seeds": xs, "min": min(xs), "max": max(xs), "mean": sum(xs) / len(xs)}


def summarise(seeds: dict) -> dict:
    """Per cell, at its first and last evaluation: each field over seeds (in seed order)
    {seeds, min, max, mean}; end reasons as end_<reason>; training maxima over seeds."""
    order = sorted(seeds, key=int)
    out = {"seed_order": [int(s) for s in order]}
    for which in ("first", "last"):
        recs = [seeds[s]["eval"][str(seeds[s][which + "_step"])] for s in order]
        fields = {k for r in recs for k in r if k != "end"}
        ends = {k for r in recs for k in r["end"]}
        at = {k: _stats([r.get(k, 0) for r in recs]) for k in sorted(fields)}
        at.update({f"end_{k}": _stats([r["end"].get(k, 0) for r in recs]) for k in sorted(ends)})
        at["step"] = seeds[order[0]][which + "_step"]
        out[which] = at
    if all("train" in seeds[s] for s in order):
        out["train"] = {"steps": seeds[order[0]]["train"]["steps"],
                        "mixed_groups_max": max(max(seeds[s]["train"]["mixed_groups"] or [0])
                                                for s in order),
                        "grad_norm_max": max(max(seeds[s]["train"]["grad_norm"] or [0])
                                             for s in order)}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", help="write per_seed.json here")
    ap.add_argument("--runs", default=str(HERE / "results" / "runs"))
    a = ap.parse_args(argv)
    out = Path(a.report)
    out.mkdir(parents=True, exist_ok=True)
    q = quantities(Path(a.runs))
    (out / "per_seed.json").write_text(json.dumps(q, indent=1, sort_keys=True) + "\n")
    print(", ".join(q["cells"]))


if __name__ == "__main__":
    main()
