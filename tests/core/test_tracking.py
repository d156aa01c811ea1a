"""wandb tracking: offline runs are written locally (no login, no network), `disabled`
is a no-op; metrics reach the run's history."""
from __future__ import annotations

from pathlib import Path

from ablate.apps.cli import compose_config
from ablate.loop.tracking import Tracker


def test_disabled_tracker_is_a_noop(tmp_path):
    t = Tracker(compose_config(["run.wandb_mode=disabled"]), tmp_path / "cell")
    assert t.run is None
    t.log({"reward/mean": 1.0}, 1)
    t.finish({"final_accuracy": 0.5})
    assert not (tmp_path / "cell" / "wandb").exists()


def test_offline_tracker_records_history(tmp_path):
    cell = tmp_path / "sweep" / "reward=naive,seed=1"
    t = Tracker(compose_config(["run.wandb_mode=offline"]), cell)
    assert t.name == "reward=naive,seed=1"
    assert t.run.group == "sweep"
    t.log({"reward/mean": 0.25, "note": "strings are skipped"}, 1)
    t.log({"reward/mean": 0.75}, 2)
    run = t.run
    assert run.config["reward"]["name"] == "shaped"
    keys = set(run.summary.keys())
    assert "reward/mean" in keys and "note" not in keys  # numbers only
    t.finish({"final_accuracy": 0.5})
    assert t.run is None
    runs = list((cell / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert next(runs[0].glob("*.wandb")).stat().st_size > 0
