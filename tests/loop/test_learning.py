"""The embedded default cell really learns: a short GRPO run from the shipped warm start
raises held-out accuracy or the shaped reward by more than its standard error (paired
over the same held-out questions). Minutes of CPU: marked heavy."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.mark.heavy
def test_default_cell_improves_beyond_its_standard_error(tmp_path):
    from learning_gain import paired

    out = tmp_path / "cell"
    env = dict(os.environ, WANDB_MODE="disabled", ABLATE_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "ablate", f"hydra.run.dir={out}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    steps = sorted({r["step"] for r in rows})
    acc = paired(rows, steps[0], steps[-1], "correct")
    reward = paired(rows, steps[0], steps[-1], "reward")
    # the warm start is a real agent: the bar, under the default (masked) harness
    by_hop = {h: paired(rows, steps[0], steps[-1], "correct", h)["first"] for h in (1, 2)}
    assert by_hop[1] >= 0.25 and by_hop[2] > 0.0, by_hop
    assert acc["delta"] > acc["se"] or reward["delta"] > reward["se"], (acc, reward)
