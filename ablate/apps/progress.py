"""`python -m ablate.progress SWEEP_DIR`: where a grid stands, one line per cell.

    python -m ablate.progress outputs/multirun/enronhop_rewards

Each cell directory is complete (COMPLETE written), failed (FAILED: its one-line error),
running (a live process holds its lock: that process, last step in metrics.jsonl of
trainer.max_steps, minutes since its log last moved) or interrupted (nobody holds it:
re-running the grid resumes it from its last checkpoint). Cells Hydra has not started yet
have no directory: the total planned comes from the sweep's multirun.yaml (the product of
the swept values). Reads files only; safe on a grid that is running.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import yaml

from ablate.loop.outputs import COMPLETE, FAILED, lock_holder, read_jsonl


def planned_cells(sweep_dir: Path) -> int | None:
    """Number of cells of the grid: product of the comma-separated values swept on the
    command line and in the preset's hydra.sweeper.params (as Hydra's basic sweeper)."""
    path = sweep_dir / "multirun.yaml"
    if not path.exists():
        return None
    cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    hydra = cfg.get("hydra", {})
    swept = {k: str(v) for k, v in (hydra.get("sweeper", {}).get("params") or {}).items()}
    for o in hydra.get("overrides", {}).get("task", []) or []:
        key, _, value = str(o).partition("=")
        swept[key.lstrip("+~")] = value
        swept.pop("+" + key.lstrip("+~"), None)
    n = 1
    for value in swept.values():
        n *= len(value.split(",")) if "," in value and "(" not in value else 1
    return n


def cell_status(cell: Path, now: float) -> tuple[str, str]:
    """(state, detail) of one cell directory."""
    if (cell / COMPLETE).exists():
        evals = read_jsonl(cell / "eval.jsonl") if (cell / "eval.jsonl").exists() else []
        last = max((r["step"] for r in evals), default=None)
        acc = [r["correct"] for r in evals if r["step"] == last
               and r.get("decoding", "sampled") == "sampled"]
        return "complete", (f"accuracy {sum(acc) / len(acc):.3f} at step {last}"
                            if acc else "no held-out rows")
    if (cell / FAILED).exists():
        return "failed", (cell / FAILED).read_text(encoding="utf-8").splitlines()[0][:160]
    metrics = read_jsonl(cell / "metrics.jsonl") if (cell / "metrics.jsonl").exists() else []
    cfg = yaml.safe_load((cell / "config.yaml").read_text()) if (cell / "config.yaml").exists() else {}
    steps = (cfg or {}).get("trainer", {}).get("max_steps", "?")
    log = cell / "ablate.log"
    idle = (now - log.stat().st_mtime) / 60 if log.exists() else float("nan")
    step = metrics[-1]["step"] if metrics else 0
    pid = lock_holder(cell)
    where = f"step {step}/{steps}, log idle {idle:.1f} min"
    return ("running", f"process {pid}, {where}") if pid is not None else \
        ("interrupted", where)


def report(sweep_dir: Path, now: float | None = None) -> str:
    now = time.time() if now is None else now
    cells = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and any(
        (p / name).exists() for name in ("config.yaml", FAILED, COMPLETE)))
    lines, counts = [], {"complete": 0, "failed": 0, "running": 0, "interrupted": 0}
    for cell in cells:
        state, detail = cell_status(cell, now)
        counts[state] += 1
        lines.append(f"{state:<12} {cell.name}: {detail}")
    planned = planned_cells(sweep_dir)
    not_started = max(0, planned - len(cells)) if planned is not None else None
    head = (f"{sweep_dir}: {counts['complete']} complete, {counts['running']} running, "
            f"{counts['interrupted']} interrupted, {counts['failed']} failed"
            + (f", {not_started} not started (of {planned})" if planned is not None else ""))
    return "\n".join([head, *lines])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m ablate.progress SWEEP_DIR (a directory of -m cells)",
              file=sys.stderr)
        return 2
    print(report(Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
