"""--baseline values are compared as the config types them (issue 48, item 7): a cell whose
config.yaml stores `reward.weights.state_change: 1.0` is the baseline of
`--baseline reward.weights.state_change=1`; numbers numerically, booleans as booleans,
strings as strings."""
import numpy as np
import pytest

from analysis import cli
from analysis.collect import AnalysisError, collect, match_cell, parse_assignments, same_value
from analysis.synthetic import base_config, write_run


@pytest.fixture
def weights(tmp_path):
    """Two cells over reward.weights.state_change (stored as the floats 1.0 and 0.5), with
    a boolean (algo.overlong.enable) and a small float (trainer.lr) constant over them."""
    rng = np.random.default_rng(0)
    for w in (1.0, 0.5):
        for seed in (0, 1):
            cfg = base_config(seed)
            cfg["reward"]["weights"] = {"state_change": w}
            write_run(tmp_path / f"w{w}-s{seed}", cfg, rng, np.zeros(6), np.ones(6, int),
                      steps=(0,))
    return tmp_path


@pytest.mark.parametrize("text,stored", [
    ("reward.weights.state_change=1", 1.0),
    ("reward.weights.state_change=1.0", 1.0),
    ("reward.weights.state_change=0.50", 0.5),
    ("reward.weights.state_change=5e-1", 0.5),             # PyYAML leaves 5e-1 a string
    ("reward.weights.state_change=1,algo.overlong.enable=false", 1.0),
    ("reward.weights.state_change=1,algo.overlong.enable=False", 1.0),
    ("reward.weights.state_change=1,trainer.lr=1e-4", 1.0),
    ("reward.weights.state_change=1,reward=shaped", 1.0),
])
def test_a_baseline_matches_the_cell_its_config_types(weights, text, stored):
    cells = collect([weights]).cells
    assert sorted(c.runs[0].config["reward.weights.state_change"] for c in cells) == [0.5, 1.0]
    hit = cells[match_cell(cells, parse_assignments(text))]
    assert hit.runs[0].config["reward.weights.state_change"] == stored


@pytest.mark.parametrize("text", [
    "reward.weights.state_change=2",
    "reward.weights.state_change=1,algo.overlong.enable=0",   # a boolean is no number
    "reward.weights.state_change=1,algo.overlong.enable=true",
    "reward.weights.state_change=1,reward='1.0'",
])
def test_a_baseline_of_another_value_or_type_matches_no_cell(weights, text):
    with pytest.raises(AnalysisError, match="matches no cell"):
        match_cell(collect([weights]).cells, parse_assignments(text))


def test_the_command_takes_the_integer_of_a_stored_float(weights, capsys):
    assert cli.main([str(weights), "--out", str(weights / "o"), "--no-figures", "--B", "100",
                     "--baseline", "reward.weights.state_change=1"]) == 0
    assert "matches no cell" not in capsys.readouterr().err


@pytest.mark.parametrize("have,want,same", [
    (1.0, 1, True), (1, 1.0, True), (0.001, "1e-3", True), (0.1, 0.1, True), (2, 1, False),
    (True, True, True), (True, "true", True), (False, "no", True), (True, 1, False),
    (1, True, False), (0, False, False),
    ("shaped", "shaped", True), ("shaped", "naive", False), ("1.0", "1", False),
    ("1.0", 1, True), ("abc", 1, False),
    (None, None, True), (None, "null", True), (None, 0, False),
    ([1.0, 2], [1, 2], True), ([1, 2], [1], False), (float("nan"), float("nan"), True),
])
def test_same_value(have, want, same):
    assert same_value(have, want) is same
