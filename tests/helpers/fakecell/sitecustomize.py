"""On PYTHONPATH (with ABLATE_FAKE_CELL=1), every Python process (a joblib worker
included) runs this fake run_cell instead of training: the launcher tests need the
grid's bookkeeping, not cells. Seed 1 raises; seed 2 SIGKILLs its own process (as the
OOM killer would) when FAKE_KILL=1; the others finish."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path


def fake_run_cell(cfg, out_dir, on_eval=None):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.seed == 1:
        raise RuntimeError("worker died: out of memory")
    if cfg.seed == 2 and os.environ.get("FAKE_KILL") == "1":
        time.sleep(1.0)   # seed 1, on the other worker, has raised and reported by then
        os.kill(os.getpid(), signal.SIGKILL)
    (out / "config.yaml").write_text("trainer:\n  max_steps: 2\n")
    (out / "eval.jsonl").write_text(json.dumps({"step": 2, "task_id": "t", "correct": True})
                                    + "\n")
    (out / "COMPLETE").write_text("")
    return {"final_accuracy": 1.0}


if os.environ.get("ABLATE_FAKE_CELL") == "1":
    import ablate.loop.cell
    ablate.loop.cell.run_cell = fake_run_cell
