"""publish refuses a confirmatory comparison on tuning seeds or on questions another
experiment confirms on (experiments/ledger.yaml, analysis/hygiene.py); the warm start
evaluated identically in every arm is recognised and counted once (issue 27, item 3)."""
from pathlib import Path

import pytest

from analysis.collect import collect
from analysis.publish import BEGIN, END
from analysis.publish import main as publish_main
from analysis.summary import analyse
from analysis.synthetic import write_sweep

LEDGER = """testbed:
  env: synthetic
  gen_seed: 0
  tuning: {seeds: [0, 1], questions: [[0, 9]]}
"""


def _experiment(root, name, seeds, offset, extra=""):
    exp = root / name
    sweep = write_sweep(root / f"sweep_{name}", rewards=("naive", "shaped"), algos=("grpo",),
                        seeds=seeds, n_questions=6, steps=(0, 2))
    for cfg in sweep.glob("*/.hydra/config.yaml"):
        cfg.write_text(cfg.read_text().replace("num_tasks: 64", "num_tasks: 6").replace(
            "samples: 2", f"samples: 2\n  offset: {offset}\n  at_start: true"))
    exp.mkdir()
    (exp / "analysis.yaml").write_text(f"baseline: {{reward.name: shaped}}\nB: 200\n{extra}")
    (exp / "README.md").write_text(f"{BEGIN}\n{END}\n")
    return exp, sweep


@pytest.fixture
def root(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "ledger.yaml").write_text(LEDGER)
    return tmp_path / "experiments"


def test_tuning_seeds_on_tuning_questions_are_refused(root, capsys):
    exp, sweep = _experiment(root, "a", (1, 2), 0)
    assert publish_main([str(exp), "--sweep", str(sweep), "--no-figures"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "reuses seed(s) 1 that tuned testbed" in err and "exploratory" in err


def test_fresh_seeds_on_fresh_questions_publish(root):
    exp, sweep = _experiment(root, "a", (2, 3), 10)
    assert publish_main([str(exp), "--sweep", str(sweep), "--no-figures"]) == 0


def test_overlapping_another_confirmation_set_is_refused(root, capsys):
    first, s1 = _experiment(root, "a", (2, 3), 10)
    assert publish_main([str(first), "--sweep", str(s1), "--no-figures"]) == 0
    second, s2 = _experiment(root, "b", (4, 5), 13)
    assert publish_main([str(second), "--sweep", str(s2), "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert "questions 13-18, which overlap a's confirmation set 10-15" in err


def test_a_declared_exploratory_experiment_publishes_and_says_so(root):
    exp, sweep = _experiment(root, "a", (1, 2), 0, 'exploratory: "reuses the pilots"\n')
    assert publish_main([str(exp), "--sweep", str(sweep), "--no-figures"]) == 0
    readme = (exp / "README.md").read_text()
    assert "**Exploratory, not confirmatory** (analysis.yaml): reuses the pilots" in readme
    report = (exp / "results" / "report" / "report.md").read_text()
    assert "**Exploratory, not confirmatory**" in report


def test_an_identical_warm_start_is_counted_once(tmp_path):
    """Two arms, seeds 0-2, the same step-0 episodes per seed (identical=True gives every
    cell the same data): 6 first evaluations, 3 distinct."""
    write_sweep(tmp_path, rewards=("naive", "shaped"), algos=("grpo",), seeds=(0, 1, 2),
                n_questions=5, steps=(0, 2), identical=True)
    s = analyse(collect([tmp_path]), B=100, baseline={"reward": "naive"}, with_curves=False)
    w = s["warm_start"]
    assert w["evaluations"] == 6 and w["distinct"] == 3
    assert [g["seed"] for g in w["shared"]] == [0, 1, 2]
    assert all(len(g["cells"]) == 2 for g in w["shared"])
    different = tmp_path / "other"
    write_sweep(different, rewards=("naive", "shaped"), algos=("grpo",), seeds=(0, 1),
                n_questions=5, steps=(0, 2))
    s = analyse(collect([different]), B=100, baseline={"reward": "naive"}, with_curves=False)
    assert s["warm_start"] == {"evaluations": 4, "distinct": 4, "shared": []}


def test_a_greedy_warm_start_is_one_evaluation_across_seeds():
    """experiments/smollm_reasoning_gym evaluates greedily: the step-0 rows of all 8 runs
    (2 arms x seeds 1-4) are one evaluation, and the report names every seed."""
    from analysis.report import render
    runs = Path(__file__).resolve().parents[2] / "experiments" / "smollm_reasoning_gym" \
        / "results" / "runs"
    s = analyse(collect([runs]), B=100, baseline={"algo": "dr_grpo"}, with_curves=False)
    w = s["warm_start"]
    assert (w["evaluations"], w["distinct"]) == (8, 1)
    assert w["shared"][0]["seeds"] == [1, 2, 3, 4] and len(w["shared"][0]["cells"]) == 8
    assert "every arm of seeds 1, 2, 3, 4 are identical" in render(s)
