"""The generic train_step with the four original presets reproduces, row for row, the
metrics of the cell loop as it was before the algorithm protocol existed (the fixture
tests/fixtures/algos_presets_baseline.json was written by this module's __main__ from
that code: `python tests/algos/test_algos_presets.py --write`)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from ablate.loop.cell import run_cell
from ablate.apps.cli import compose_config, normalise_overrides

FIXTURE = Path(__file__).parents[1] / "fixtures" / "algos_presets_baseline.json"
PRESETS = ("grpo", "dapo", "dr_grpo", "grpo_tcr")
# a small but real cell (the one of tests/loop/test_cell.py), two optimizer steps, one evaluation
SMALL = ["env.num_inboxes=6", "env.emails_per_inbox=40", "env.train_tasks=40",
         "env.test_tasks=16", "trainer.tasks_per_step=2", "trainer.group_size=2",
         "eval.num_tasks=4", "eval.every=0", "eval.at_start=false",
         "harness.max_tokens_per_episode=256", "env.max_turns=4", "run.num_trajectories=0",
         "run.quiet=true", "trainer.max_steps=2"]
TIMING = ("_s", "seconds", "tokens_per_s")
# how the learner packs the batch (the shared prefix, forwarded once, changed it; its
# equality with the per-segment computation is tests/learners/test_learner_prefix.py's subject)
PACKING = ("update/micro_batches",)


def metric_rows(preset: str, out: Path) -> list[dict]:
    cfg = compose_config(normalise_overrides([*SMALL, f"+algo={preset}"]))
    run_cell(cfg, out)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x]
    return [{k: v for k, v in r.items() if not k.endswith(TIMING) and k not in PACKING}
            for r in rows]


def close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)
    return a == b


@pytest.mark.parametrize("preset", PRESETS)
def test_generic_loop_reproduces_the_original_presets(preset, tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    expected = json.loads(FIXTURE.read_text())[preset]
    got = metric_rows(preset, tmp_path / "cell")
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        missing = set(e) - set(g) - set(PACKING)
        assert not missing, missing
        bad = {k: (g[k], e[k]) for k in e if k not in PACKING and not close(g[k], e[k])}
        assert not bad, bad


if __name__ == "__main__" and "--write" in sys.argv:
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        os.environ["ABLATE_CACHE"] = str(Path(d) / "cache")
        FIXTURE.write_text(json.dumps({p: metric_rows(p, Path(d) / p) for p in PRESETS},
                                      indent=1, sort_keys=True) + "\n")
