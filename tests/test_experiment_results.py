"""The committed experiment reports are what the analysis makes of the committed inputs:
re-analysing a subset of an experiment's committed runs reproduces those cells' numbers
in its committed summary.json (a cell's estimate, interval and change depend on its own
runs only), and the README's headline table is the one analysis.publish writes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import cli
from analysis.collect import read_config
from analysis.publish import BEGIN, END, headline, headline_behaviour

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"
PUBLISHED = [p.parents[2] for p in sorted(EXPERIMENTS.glob("*/results/report/summary.json"))]
KEYS = ("mean", "ci", "se", "n_seeds", "n_questions", "change", "behaviour", "compute")


@pytest.mark.parametrize("exp", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_committed_report_regenerates_on_a_subset(exp, tmp_path):
    committed = json.loads((exp / "results" / "report" / "summary.json").read_text())
    cell = committed["cells"][0]
    subset = [str(REPO / r) for r in cell["runs"]]      # written from the repository root
    metric = read_config(exp / "analysis.yaml").get("metric", "correct")
    (tmp_path / "spec.yaml").write_text(f"metric: {metric}\n")   # one cell: no baseline
    assert cli.main([*subset, "--out", str(tmp_path / "o"), "--no-figures", "--B", "200",
                     "--spec", str(tmp_path / "spec.yaml")]) == 0
    again = json.loads((tmp_path / "o" / "summary.json").read_text())["cells"][0]
    for key in KEYS:
        assert again.get(key) == cell.get(key), key


@pytest.mark.parametrize("exp", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_readme_headline_is_the_published_one(exp):
    summary = json.loads((exp / "results" / "report" / "summary.json").read_text())
    readme = (exp / "README.md").read_text()
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    columns = headline_behaviour(read_config(exp / "analysis.yaml"), exp)
    assert block.strip() == headline(summary, "results/report", columns).strip()


def test_the_reward_experiment_is_published():
    assert EXPERIMENTS / "enronhop_rewards" in PUBLISHED
