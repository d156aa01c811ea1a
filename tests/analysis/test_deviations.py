"""A report's deviations (analysis/deviations.py) split the commits between an
experiment's pre-registration and its results into those inside the code its runs ran
(code.json: they could change what was measured) and those in no run's code (only their
analysis/ changes can change the results). collapse_rate's history is the case: its runs
ran 7e3e9d0, and most commits before its results commit came after that."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from analysis.deviations import deviations
from analysis.report import _deviations

REPO = Path(__file__).resolve().parents[2]
SPEC = {"preregistration": "eb6533b", "results_commit": "0172e5e"}


@pytest.fixture(scope="module")
def history():
    known = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", "0172e5e^{commit}"],
                           capture_output=True).returncode == 0
    if not known:
        pytest.skip("no git history here")


def test_commits_are_split_by_the_code_the_runs_ran(history):
    d = deviations(SPEC, "collapse_rate", ran=["7e3e9d0"])
    by = {c["commit"][:7]: c["in_runs"] for c in d["commits"]}
    assert by["7e3e9d0"] is True and by["2a12028"] is True      # the runs' code and before
    assert by["e4b9f0f"] is False and by["35b4a31"] is False    # committed after the runs
    assert 0 < sum(by.values()) < len(by)
    assert not any(c["in_runs"] for c in deviations(SPEC, "x", ran=[])["commits"])
    assert not any(c["in_runs"] for c in deviations(SPEC, "x", ran=["f" * 40])["commits"])


def test_the_report_lists_each_group_under_its_words(history):
    d = deviations(SPEC, "collapse_rate", ran=["7e3e9d0"])
    text = "\n".join(_deviations({"deviations": d}))
    ran = sum(c["in_runs"] for c in d["commits"])
    assert f"{len(d['commits'])} commit(s) in between" in text
    assert f"{ran} of them are in the code the runs ran" in text
    assert f"{len(d['commits']) - ran} are in no run's code" in text
    first_later = next(c for c in d["commits"] if not c["in_runs"])
    assert text.index(first_later["commit"]) > text.index("are in no run's code")
