"""The pre-registered HK2 test of coderepair_harness (README, "Results"): the same
analysis as the report, on malformed calls per episode (fewer is better) instead of the
submission rate: `python -m analysis RUNS --spec analysis.yaml --metric malformed_calls
--lower-is-better`, written to REPORT_DIR/hk2/ (its summary.json is a quantity of the
README's findings template).

Registered in analysis.yaml `scripts:` (publish runs it as `python hk2.py REPORT_DIR`).

    PYTHONPATH=. python experiments/coderepair_harness/hk2.py REPORT_DIR [--runs RUNS]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", help="write hk2/ (summary.json, report.md, tables) here")
    ap.add_argument("--runs", default=str(HERE / "results" / "runs"))
    a = ap.parse_args(argv)
    out = Path(a.report) / "hk2"
    subprocess.run([sys.executable, "-m", "analysis", a.runs, "--spec", str(HERE / "analysis.yaml"),
                    "--metric", "malformed_calls", "--lower-is-better", "--no-figures",
                    "--out", str(out)], check=True)


if __name__ == "__main__":
    main()
