"""kill -9 at four points (EmailDB build, a step, an evaluation, a checkpoint write):
the next run completes with metrics, eval rows and trajectories identical to an
uninterrupted run, and leaves no temporary file behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
TINY = ["env.num_inboxes=4", "env.emails_per_inbox=30", "env.train_tasks=20",
        "env.test_tasks=8", "trainer.tasks_per_step=1", "trainer.group_size=2",
        "eval.num_tasks=2", "eval.every=1", "harness.max_tokens_per_episode=96",
        "env.max_turns=2", "run.num_trajectories=2", "trainer.max_steps=2",
        "learner=torch", "learner.checkpoint_every=1", "run.quiet=true"]
TIMING = ("rollout_s", "update_s", "step_s", "cpu_s", "seconds", "tokens_per_s")


def run(args: list[str], cwd: Path, cache: Path, kill: tuple[str, int] | None = None):
    env = dict(os.environ, WANDB_MODE="disabled", ABLATE_CACHE=str(cache))
    head = ([str(HERE / "helpers" / "kill_at.py"), kill[0], str(kill[1])] if kill
            else ["-m", "ablate"])
    return subprocess.run([sys.executable, *head, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def outputs(cell: Path) -> dict:
    def rows(name):
        return [{k: v for k, v in json.loads(x).items() if not k.endswith(TIMING)}
                for x in (cell / name).read_text().splitlines()]
    return {"metrics": rows("metrics.jsonl"), "eval": rows("eval.jsonl"),
            "trajectories": rows("trajectories.jsonl"),
            "text": (cell / "trajectories.txt").read_text()}


def temporaries(*folders: Path) -> list[str]:
    found = []
    for folder in folders:
        for p in folder.rglob("*"):
            if (p.name.startswith(".") and ("tmp" in p.name or p.name.endswith(
                    (".building", ".stage")))) or "-journal" in p.name:
                found.append(str(p))
    return found


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    proc = run([*TINY, f"hydra.run.dir={root / 'cell'}"], root, root / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return outputs(root / "cell"), root / "cache"


@pytest.mark.parametrize("point,step", [("build", 0), ("step", 2), ("eval", 2),
                                        ("eval", 0), ("checkpoint", 1)])
def test_killed_run_resumes_identically(point, step, reference, tmp_path):
    expected, shared_cache = reference
    cache = tmp_path / "cache" if point == "build" else shared_cache
    cell = tmp_path / "cell"
    killed = run([*TINY, f"hydra.run.dir={cell}"], tmp_path, cache, kill=(point, step))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (cell / "COMPLETE").exists()
    if point == "build":
        assert not cell.exists()                                # killed in preflight
        assert any(p.endswith(".building") for p in temporaries(cache / "db"))
    if point == "checkpoint":
        assert list((cell / "ckpt").glob(".tmp-step_*"))        # a half-made checkpoint
    if point == "eval":
        assert '"task_id": "torn' in (cell / "eval.jsonl").read_text()

    resumed = run([*TINY, f"hydra.run.dir={cell}"], tmp_path, cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (cell / "COMPLETE").exists()
    assert outputs(cell) == expected
    assert temporaries(cell, cache / "db") == []
