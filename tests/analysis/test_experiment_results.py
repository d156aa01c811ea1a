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


def test_unpooled_seed_variances_still_plan_and_tost_names_its_level():
    """reward_resolution's arms fail Bartlett's test (tests use each arm's own seed
    variance); the planning table is still given, from their pool, and its equivalence
    verdict names the 1 - 2 alpha interval of two one-sided tests at alpha = 0.0294."""
    exp = EXPERIMENTS / "reward_resolution"
    summary = json.loads((exp / "results" / "report" / "summary.json").read_text())
    assert summary["seed_variance"]["pooled"]["used"] is False
    vc = summary["variance_components"]
    assert vc["seed_pooled_for_tests"] is False and vc["nu_seed"] == 18
    assert summary["planning"]["mde_table"]["rows"]
    report = (exp / "results" / "report" / "report.md").read_text()
    assert "for planning only: the tests use each cell's own" in report
    assert "equivalent: the 94.12% interval lies within ±5.0 points" in report
    assert "No cell has two or more seeds" not in report
