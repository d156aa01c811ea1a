"""Per-seed numbers of enronhop_rewards' README (its results prose): for each reward and
seed, at the first and the last evaluation, the held-out accuracy and the "I don't know"
rate (an `answer` ending whose final answer is "I don't know": `answered` false), per
sampled episode, from the committed eval rows.

Registered in analysis.yaml `scripts:` (publish runs it as `python seeds.py REPORT_DIR`):
writes REPORT_DIR/seeds.json, keyed reward -> {seeds: {seed: ...}, change: [min, max]}.

    PYTHONPATH=. python experiments/enronhop_rewards/seeds.py REPORT_DIR [--runs RUNS]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from analysis.collect import parse_assignments, read_jsonl

HERE = Path(__file__).resolve().parent


def rates(rows: list[dict]) -> dict:
    n = len(rows)
    return {"episodes": n, "correct": sum(bool(r.get("correct")) for r in rows) / n,
            "idk": sum(1 for r in rows if r.get("end_reason") == "answer"
                       and not r.get("answered")) / n}


def quantities(runs: Path) -> dict:
    out: dict = {}
    for run in sorted(p for p in runs.iterdir() if (p / "eval.jsonl").is_file()):
        keys = parse_assignments(run.name)
        rows, _ = read_jsonl(run / "eval.jsonl")
        rows = [r for r in rows if r.get("decoding", "sampled") != "greedy"]
        steps = sorted({r["step"] for r in rows})
        first = rates([r for r in rows if r["step"] == steps[0]])
        last = rates([r for r in rows if r["step"] == steps[-1]])
        arm = out.setdefault(str(keys["+reward"]), {"seeds": {}})
        arm["seeds"][str(keys["seed"])] = {"first_step": steps[0], "last_step": steps[-1],
                                           "first": first, "last": last,
                                           "change": last["correct"] - first["correct"]}
    for arm in out.values():
        ch = [v["change"] for v in arm["seeds"].values()]
        idk = [v["last"]["idk"] for v in arm["seeds"].values()]
        arm["change"] = [min(ch), max(ch)]
        arm["idk_last"] = [min(idk), max(idk)]
        # the share of the arm's last-step "I don't know" endings its top seed gives
        arm["idk_top_share"] = max(idk) / sum(idk) if sum(idk) else 0.0
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", help="write seeds.json here")
    ap.add_argument("--runs", default=str(HERE / "results" / "runs"))
    a = ap.parse_args(argv)
    out = Path(a.report)
    out.mkdir(parents=True, exist_ok=True)
    q = quantities(Path(a.runs))
    (out / "seeds.json").write_text(json.dumps(q, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: {"change": v["change"], "idk_last": v["idk_last"],
                          "idk_top_share": v["idk_top_share"]} for k, v in q.items()}))


if __name__ == "__main__":
    main()
