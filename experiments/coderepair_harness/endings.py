"""How held-out episodes ended in each run of coderepair_harness (a cell's sampling
stream: `seed`), from the committed eval rows: counts of each end reason, repaired
episodes, and the mean per episode of malformed calls and of parser repairs.

Registered in analysis.yaml `scripts:` (publish runs it as `python endings.py REPORT_DIR`):
writes REPORT_DIR/endings.json, keyed by run (max_malformed=<n>,parser=<p>,seed=<s>), with
ranges over the runs of each retry budget and of each parser.

    PYTHONPATH=. python experiments/coderepair_harness/endings.py REPORT_DIR [--runs RUNS]
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from analysis.collect import parse_assignments, read_jsonl

HERE = Path(__file__).resolve().parent


def quantities(runs: Path) -> dict:
    rows_by: dict = {}   # run name -> its rows (the name says cell and stream)
    for run in sorted(p for p in runs.iterdir() if (p / "eval.jsonl").is_file()):
        k = parse_assignments(run.name)
        name = f"max_malformed={k['harness.max_malformed']},parser={k['harness.parser']},seed={k['seed']}"
        rows, _ = read_jsonl(run / "eval.jsonl")
        rows_by.setdefault(name, []).extend(r for r in rows if r.get("decoding", "sampled") != "greedy")
    cells = {}
    for name, rows in sorted(rows_by.items()):
        end = Counter(str(r.get("end_reason")) for r in rows)
        cells[name] = {"episodes": len(rows), "correct": sum(bool(r.get("correct")) for r in rows),
                       "end": {k: end.get(k, 0) for k in ("answer", "malformed", "max_tokens",
                                                           "max_turns", "max_context")},
                       "malformed_calls": sum(float(r.get("malformed_calls", 0)) for r in rows) / len(rows),
                       "parser_repairs": sum(float(r.get("parser_repairs", 0)) for r in rows) / len(rows)}

    def rng(names: list[str], f) -> list:
        xs = [f(cells[n]) for n in names]
        return [min(xs), max(xs)]
    by_retries = {}
    for budget in sorted({n.split(",")[0] for n in cells}):
        names = [n for n in cells if n.split(",")[0] == budget]
        by_retries[budget.split("=")[1]] = {
            "runs": len(names),
            **{f"end_{k}": rng(names, lambda c, k=k: c["end"][k]) for k in ("malformed", "max_tokens")},
            "correct": rng(names, lambda c: c["correct"]), "episodes": rng(names, lambda c: c["episodes"])}
    by_parser = {}
    for parser in sorted({n.split(",")[1] for n in cells}):
        names = [n for n in cells if n.split(",")[1] == parser]
        by_parser[parser.split("=")[1]] = {
            "malformed_calls": rng(names, lambda c: c["malformed_calls"]),
            "parser_repairs": rng(names, lambda c: c["parser_repairs"])}
    # per cell (its streams together): malformed calls per episode, by parser
    cell_rows: dict = {}
    for name, rows in rows_by.items():
        cell_rows.setdefault(name.rsplit(",", 1)[0], []).extend(rows)
    for parser, v in by_parser.items():
        xs = [sum(float(r.get("malformed_calls", 0)) for r in rows) / len(rows)
              for n, rows in cell_rows.items() if n.split(",")[1] == f"parser={parser}"]
        v["cell_malformed_calls"] = [min(xs), max(xs)]
    repaired = [n for n in cells if cells[n]["correct"] > 0]
    return {"runs": cells, "by_retries": by_retries, "by_parser": by_parser,
            "runs_with_repair": len(repaired), "repairs_max": max(c["correct"] for c in cells.values())}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", help="write endings.json here")
    ap.add_argument("--runs", default=str(HERE / "results" / "runs"))
    a = ap.parse_args(argv)
    out = Path(a.report)
    out.mkdir(parents=True, exist_ok=True)
    q = quantities(Path(a.runs))
    (out / "endings.json").write_text(json.dumps(q, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"by_retries": q["by_retries"], "by_parser": q["by_parser"]}))


if __name__ == "__main__":
    main()
