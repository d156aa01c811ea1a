"""`python -m ablate.apps.check` (issue 63 item 2): every preflight check of `python -m
ablate`, then exit 0 or 2 with one line; no cell runs and no directory is made."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "tests" / "envs_external" / "conf"


def check(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="disabled", ABLATE_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}")
    return subprocess.run([sys.executable, "-m", "ablate.apps.check",
                           f"hydra.searchpath=[file://{CONF}]", "run.num_threads=1",
                           f"hydra.run.dir={tmp_path / 'cell'}", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)


def test_a_good_cell_passes_and_nothing_runs(tmp_path):
    proc = check(["env=kvlookup", "model=scripted"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == (
        "ablate: preflight passed: 1 job(s) composed and checked; nothing was run "
        "(python -m ablate with the same arguments runs them)")
    assert not (tmp_path / "cell").exists()


def test_a_mistake_is_one_line_and_exit_2(tmp_path):
    proc = check(["env=broken", "env._target_=envs_external.broken.DuplicateIds",
                  "env.name=dupids", "model=scripted"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "ablate: error: env=dupids: tasks('train') holds the id 'train-0' twice (tasks 0 and "
        "1); expected each task id once in a split"]
    assert "Traceback" not in proc.stdout and not (tmp_path / "cell").exists()
