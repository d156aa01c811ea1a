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

import os
import sys
import time
from pathlib import Path

import yaml

from ablate.loop.outputs import COMPLETE, FAILED, OutputFileError, lock_holder, read_jsonl

MARKERS = ("config.yaml", FAILED, COMPLETE)


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


def find_cells(sweep_dir: Path) -> list[Path]:
    """Every cell directory under the sweep, at any depth (a grid of an older version
    nested a swept value holding "/"); hidden folders (.hydra) and a cell's own
    sub-folders (ckpt, wandb) are not cells."""
    cells = []
    for root, dirs, _files in os.walk(sweep_dir):
        here = Path(root)
        if here != sweep_dir and any((here / m).exists() for m in MARKERS):
            cells.append(here)
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return sorted(cells)


def safe_status(cell: Path, now: float) -> tuple[str, str]:
    """cell_status, or ("unreadable", what is wrong): one bad cell spoils no report."""
    try:
        return cell_status(cell, now)
    except OutputFileError as exc:
        return "unreadable", str(exc)
    except KeyError as exc:
        return "unreadable", f"a row without the field {exc} (eval.jsonl / metrics.jsonl)"
    except yaml.YAMLError as exc:
        return "unreadable", f"{cell / 'config.yaml'}: not YAML ({type(exc).__name__})"
    except (OSError, ValueError, TypeError, AttributeError, ZeroDivisionError) as exc:
        return "unreadable", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def report(sweep_dir: Path, now: float | None = None) -> str:
    now = time.time() if now is None else now
    cells = find_cells(sweep_dir)
    lines, counts = [], {"complete": 0, "failed": 0, "running": 0, "interrupted": 0,
                         "unreadable": 0}
    for cell in cells:
        state, detail = safe_status(cell, now)
        counts[state] += 1
        lines.append(f"{state:<12} {cell.relative_to(sweep_dir)}: {detail}")
    try:
        planned = planned_cells(sweep_dir)
    except (yaml.YAMLError, OSError, AttributeError, TypeError, ValueError):
        planned = None   # an unreadable multirun.yaml: the cells found are still listed
    not_started = max(0, planned - len(cells)) if planned is not None else None
    head = (f"{sweep_dir}: {counts['complete']} complete, {counts['running']} running, "
            f"{counts['interrupted']} interrupted, {counts['failed']} failed"
            + (f", {counts['unreadable']} unreadable" if counts["unreadable"] else "")
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
