"""The analysis validates its inputs (issue 26): one-line errors naming FILE:LINE and the
field for values of the wrong kind; the analysed metric's missing/null/NaN values are an
error, other fields' a counted exclusion; every key that distinguishes runs defines a
cell; the same cell and seed twice is reported."""
import json
import shutil

import numpy as np
import pytest

from analysis import cli
from analysis.collect import AnalysisError, collect
from analysis.report import render
from analysis.summary import analyse
from analysis.synthetic import base_config, write_run, write_sweep


def _rows(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def sweep(tmp_path):
    write_sweep(tmp_path, rewards=("naive",), algos=("grpo", "dapo"), seeds=(0, 1),
                n_questions=6, steps=(0,))
    return tmp_path


def _edit(sweep, line, **values):
    """Set fields of line `line` (1-based) of dapo seed 1's eval.jsonl; its path."""
    f = sweep / "reward=naive,algo=dapo,seed=1" / "eval.jsonl"
    rows = _rows(f)
    rows[line - 1].update(values)
    _write_rows(f, rows)
    return f


@pytest.mark.parametrize("field,value,words", [
    ("correct", 5, "'correct' is 5; expected true/false or 0/1"),
    ("correct", 0.5, "'correct' is 0.5; expected true/false or 0/1"),
    ("answered", -1, "'answered' is -1; expected true/false or 0/1"),
    ("zero_hit_rate", 1.5, "'zero_hit_rate' is 1.5; expected a rate in [0, 1]"),
    ("searches", -2, "'searches' is -2; expected a count >= 0"),
    ("step", "10", "'step' is '10' (str); expected an integer"),
    ("step", 1.5, "'step' is 1.5 (float); expected an integer"),
    ("task_id", ["q1", "q2"], "'task_id' is ['q1', 'q2'] (list); expected a string"),
    ("task_id", 7, "'task_id' is 7 (int); expected a string"),
    ("reward", "high", "'reward' is 'high' (str); expected true/false or a number"),
])
def test_a_value_of_the_wrong_kind_is_one_line_naming_file_line_and_field(
        sweep, capsys, field, value, words):
    bad = _edit(sweep, 3, **{field: value})
    with pytest.raises(AnalysisError) as e:
        analyse(collect([sweep]), B=100, baseline={"algo": "grpo"})
    assert str(e.value) == f"{bad}:3: {words}" or str(e.value).startswith(f"{bad}:3: {words}")
    assert cli.main([str(sweep), "--out", str(sweep / "o"), "--baseline", "algo=grpo",
                     "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_zero_and_one_are_outcomes(sweep):
    _edit(sweep, 2, correct=1)
    _edit(sweep, 3, correct=0)
    s = analyse(collect([sweep]), B=100, baseline={"algo": "grpo"}, with_curves=False)
    assert s["cells"][0]["n_questions"] == 6


def test_a_string_step_in_metrics_is_an_error(sweep):
    f = sweep / "reward=naive,algo=dapo,seed=0" / "metrics.jsonl"
    _write_rows(f, [{"step": 1, "accuracy": 0.5}, {"step": "2", "accuracy": 0.5}])
    with pytest.raises(AnalysisError, match=rf"{f}:2: 'step' is '2' \(str\)"):
        analyse(collect([sweep]), B=100, baseline={"algo": "grpo"})


@pytest.mark.parametrize("how", ["nan", "null", "missing"])
def test_a_missing_metric_value_is_an_error(sweep, how):
    f = sweep / "reward=naive,algo=dapo,seed=1" / "eval.jsonl"
    rows = _rows(f)
    if how == "missing":
        del rows[4]["correct"]
    lines = [json.dumps(r) for r in rows]
    if how != "missing":
        lines[4] = lines[4].replace('"correct": true', '"correct": X').replace(
            '"correct": false', '"correct": X').replace("X", "NaN" if how == "nan" else "null")
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(AnalysisError, match=rf"{f}:5: 'correct' is "
                       rf"({'missing' if how == 'missing' else 'nan|None'}); the analysed "):
        analyse(collect([sweep]), B=100, baseline={"algo": "grpo"})


def test_a_missing_behaviour_value_is_a_counted_exclusion(sweep):
    """Two of dapo's 24 rows lose `searches` (null, NaN): the mean of `searches` is over
    the other rows, the exclusion is counted in summary.json and named in the report."""
    f = sweep / "reward=naive,algo=dapo,seed=1" / "eval.jsonl"
    rows = _rows(f)
    rows[0]["searches"] = None
    lines = [json.dumps(r) for r in rows]
    lines[1] = lines[1].replace(f'"searches": {rows[1]["searches"]}', '"searches": NaN')
    f.write_text("\n".join(lines) + "\n")
    s = analyse(collect([sweep]), B=100, baseline={"algo": "grpo"}, with_curves=False)
    assert s["exclusions"] == [{"cell": "algo=dapo", "field": "searches", "excluded": 2,
                                "rows": 24}]
    assert any("'searches' has no value" in w and "2 of 24 rows" in w for w in s["warnings"])
    assert "- algo=dapo: 'searches' 2 of 24 rows" in render(s)
    # the cell's `searches` is the mean over the questions every seed has a value for:
    # samples 0 and 1 of q0000 of seed 1 are gone, so q0000 leaves the field
    dapo = s["cells"][0]
    assert dapo["behaviour"]["searches"]["n_questions"] == 5


def test_a_model_path_only_difference_is_two_cells(tmp_path):
    rng = np.random.default_rng(0)
    for model in ("/models/a", "/models/b"):
        for seed in (0, 1):
            cfg = base_config(seed)
            cfg["model"]["path"] = model
            write_run(tmp_path / f"{model[-1]}{seed}", cfg, rng, np.zeros(8),
                      np.ones(8, int), steps=(0,))
    sw = collect([tmp_path])
    assert sw.factors == ["model.path"] and sw.duplicates == []
    assert [len(c.runs) for c in sw.cells] == [2, 2]
    s = analyse(sw, B=100, baseline={"model.path": "/models/a"}, with_curves=False)
    assert [c["short_label"] for c in s["cells"]] == ["path=/models/a", "path=/models/b"]


def test_an_emails_path_only_difference_is_two_cells(tmp_path):
    rng = np.random.default_rng(0)
    for i, emails in enumerate(("a.jsonl", "b.jsonl")):
        cfg = base_config(0)
        cfg["env"]["emails_path"] = emails
        cfg["env"]["cache_dir"] = f"/cache/{i}"            # a cache location: not a factor
        write_run(tmp_path / emails, cfg, rng, np.zeros(8), np.ones(8, int), steps=(0,))
    assert collect([tmp_path]).factors == ["env.emails_path"]


def test_the_same_cell_and_seed_twice_is_reported(tmp_path):
    write_sweep(tmp_path / "a", rewards=("naive",), algos=("grpo",), seeds=(0, 1),
                n_questions=5, steps=(0,))
    shutil.copytree(tmp_path / "a" / "reward=naive,algo=grpo,seed=1", tmp_path / "b")
    sw = collect([tmp_path])
    (dup,) = sw.duplicates
    assert dup["path"] == str(tmp_path / "b") and dup["identical_rows"] is True
    assert dup["first"] == str(tmp_path / "a" / "reward=naive,algo=grpo,seed=1")
    assert any("the same cell and seed 1" in w for w in sw.warnings)
    text = render(analyse(sw, B=100, with_curves=False))
    assert "Duplicate runs: the same cell and seed twice" in text
    assert "identical rows" in text
