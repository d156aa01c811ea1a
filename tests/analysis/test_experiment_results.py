"""The committed experiment reports are what the analysis makes of the committed inputs:
re-analysing an experiment's committed runs (and the runs its analysis.yaml includes)
with its analysis.yaml reproduces its summary.json and report.md byte for byte (the seed
variance is pooled over the design's cells, so only the whole design reproduces a
cell), from any directory and through absolute paths (a report names paths inside the
repository relative to it: analysis.collect.shown), and the README's headline table is
the one analysis.publish writes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import cli
from analysis.collect import read_config
from analysis.publish import BEGIN, END, headline, headline_behaviour

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = REPO / "experiments"
PUBLISHED = [p.parents[2] for p in sorted(EXPERIMENTS.glob("*/results/report/summary.json"))]


@pytest.mark.parametrize("exp", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_committed_report_regenerates_byte_for_byte(exp, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)          # not the repository, and absolute paths
    spec = exp / "analysis.yaml"
    reused = [str(exp / d) for d in (read_config(spec).get("include") or [])]
    out = tmp_path / "report"
    assert cli.main([str(exp / "results" / "runs"), *reused, "--out", str(out),
                     "--spec", str(spec), "--no-figures"]) == 0
    for name in ("summary.json", "report.md"):
        assert (out / name).read_bytes() == (exp / "results" / "report" / name).read_bytes(), \
            name


@pytest.mark.parametrize("exp", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_readme_headline_is_the_published_one(exp):
    summary = json.loads((exp / "results" / "report" / "summary.json").read_text())
    readme = (exp / "README.md").read_text()
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    columns = headline_behaviour(read_config(exp / "analysis.yaml"), exp)
    assert block.strip() == headline(summary, "results/report", columns).strip()


def test_the_reward_experiment_is_published():
    assert EXPERIMENTS / "enronhop_rewards" in PUBLISHED


def test_each_arms_own_seed_variance_is_the_default_and_still_plans():
    """coderepair_hacking pre-registered no variance model: the tests use each arm's own
    seed variance (no pretest chooses), the planning table their pool; reward_resolution
    pre-registered the pool and uses it, and its equivalence verdict names the 1 - 2 alpha
    interval of two one-sided tests at alpha = 0.0294."""
    hacking = json.loads((EXPERIMENTS / "coderepair_hacking" / "results" / "report" /
                          "summary.json").read_text())
    assert hacking["seed_variance"]["model"] == "welch"
    assert hacking["seed_variance"]["pooled"]["used"] is False
    assert hacking["variance_components"]["seed_pooled_for_tests"] is False
    assert hacking["planning"]["mde_table"]["rows"]
    report = (EXPERIMENTS / "coderepair_hacking" / "results" / "report" / "report.md").read_text()
    assert "each cell's own seed variance" in report and "Bartlett" not in report
    assert "for planning only: the tests use each cell's own" in report
    exp = EXPERIMENTS / "reward_resolution"
    summary = json.loads((exp / "results" / "report" / "summary.json").read_text())
    assert summary["seed_variance"]["model"] == "pooled"
    assert summary["seed_variance"]["pooled"]["used"] is True
    assert summary["variance_components"]["nu_seed"] == 18
    report = (exp / "results" / "report" / "report.md").read_text()
    assert "equivalent: the 94.12% interval lies within ±5.0 points" in report
