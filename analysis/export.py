"""Copy a sweep's analysis inputs into a directory that can be committed.

    python -m analysis.export SWEEP_DIR DEST

For every run below SWEEP_DIR (the runs `python -m analysis` finds): its config file,
eval.jsonl, metrics.jsonl, code.json (the code it ran), environment.json (its world's
words: analysis/world.py) and COMPLETE / FAILED markers go to DEST/<run's path relative to
SWEEP_DIR>. Checkpoints, trajectories and logs are left behind. `python -m analysis DEST`
then gives the same numbers as on SWEEP_DIR (tests/analysis/test_analysis_export.py).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from analysis.collect import AnalysisError, find_run_dirs

FILES = ("eval.jsonl", "metrics.jsonl", "code.json", "environment.json", "COMPLETE",
         "FAILED")


def export(sweep: Path, dest: Path) -> list[Path]:
    """The exported run directories, one per run found below `sweep`."""
    sweep, dest = Path(sweep), Path(dest)
    out = []
    for run, cfg_file in find_run_dirs(sweep):
        target = dest / run.relative_to(sweep)
        target.mkdir(parents=True, exist_ok=True)
        dst = target / cfg_file.relative_to(run)   # config.yaml or .hydra/config.yaml
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cfg_file, dst)
        for name in FILES:
            if (run / name).exists():
                shutil.copyfile(run / name, target / name)
            elif (target / name).exists():   # a marker that no longer holds
                (target / name).unlink()
        out.append(target)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.export",
                                description=__doc__.split("\n")[0])
    p.add_argument("sweep", type=Path, help="sweep (multirun) or run directory")
    p.add_argument("dest", type=Path, help="where the runs' analysis inputs go")
    args = p.parse_args(argv)
    try:
        runs = export(args.sweep, args.dest)
    except AnalysisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"exported {len(runs)} runs to {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
