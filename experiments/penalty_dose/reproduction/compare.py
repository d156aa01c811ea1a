"""Row-by-row comparison of a rerun of penalty_dose's lambda = 0, seed 5 cell with its
committed rows (issue 65 item 2): every eval.jsonl and metrics.jsonl row at steps <= STEP,
field by field, timing fields aside (wall and CPU seconds and their rates measure the
machine, not the run). Writes compare.json beside this script.

    PYTHONPATH=. python experiments/penalty_dose/reproduction/compare.py RERUN_DIR [--step 16]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMITTED = HERE.parent / "results" / "runs" / \
    "+algo=grpo,+reward=naive,reward.weights.wrong=0.0,seed=5"
# measured durations: they depend on the machine and its load, never on the run's state
TIMING = {"rollout_s", "update_s", "step_s", "step_cpu_s", "update/seconds",
          "update/tokens_per_s"}


def rows(path: Path, step: int) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["step"] <= step]


def differences(a: list[dict], b: list[dict]) -> list[dict]:
    """Every (row, field) whose values differ, timing aside; a missing row is one."""
    out = [{"row": i, "field": "(row count)", "committed": len(a), "rerun": len(b)}
           for i in [min(len(a), len(b))] if len(a) != len(b)]
    for i, (x, y) in enumerate(zip(a, b)):
        for k in sorted((set(x) | set(y)) - TIMING):
            if x.get(k) != y.get(k):
                out.append({"row": i, "step": x.get("step"), "field": k,
                            "committed": x.get(k), "rerun": y.get(k)})
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rerun", type=Path)
    ap.add_argument("--step", type=int, default=16)
    a = ap.parse_args(argv)
    report = {"committed": str(COMMITTED.relative_to(HERE.parents[2])), "step": a.step,
              "timing_fields_ignored": sorted(TIMING),
              "committed_code": json.loads((COMMITTED / "code.json").read_text())["commit"],
              "rerun_code": json.loads((a.rerun / "code.json").read_text())["commit"],
              "rerun_code_dirty": json.loads((a.rerun / "code.json").read_text())["dirty"]}
    for name in ("eval.jsonl", "metrics.jsonl"):
        c, r = rows(COMMITTED / name, a.step), rows(a.rerun / name, a.step)
        d = differences(c, r)
        report[name] = {"rows_committed": len(c), "rows_rerun": len(r),
                        "differences": d, "identical": not d}
    (HERE / "compare.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: (v if not isinstance(v, dict) else
                          {kk: vv for kk, vv in v.items() if kk != "differences"})
                      for k, v in report.items()}, indent=1))


if __name__ == "__main__":
    main()
