"""The evaluation protocol (ablate/loop/eval_metrics.py) against a hand-computed example:
avg@k of the sampled policy, unbiased pass@k (Chen et al. 2021, eq. 1), answer /
"I don't know" / wrong rates from the same samples, greedy accuracy beside them."""
from __future__ import annotations

import json

import pytest

from ablate.loop.eval_metrics import pass_at_k, summarise
from analysis.collect import Run


def row(q, hops, correct, answered, end="answer", decoding="sampled", sample=0):
    return {"step": 5, "task_id": q, "sample": sample, "hops": hops, "correct": correct,
            "reward": float(correct), "answered": answered, "end_reason": end,
            "decoding": decoding, "turns": 3}


# q1: 2/4 correct, one wrong answer, one "I don't know"; q2: never answers (turn limit);
# q3: 1/4 correct, three wrong answers. Greedy: q1 right, q2 silent, q3 wrong.
ROWS = ([row("q1", 1, c, a, sample=i) for i, (c, a) in
         enumerate([(True, True), (True, True), (False, True), (False, False)])]
        + [row("q2", 2, False, False, end="max_turns", sample=i) for i in range(4)]
        + [row("q3", 2, c, True, sample=i) for i, c in enumerate([True, False, False, False])]
        + [row("q1", 1, True, True, decoding="greedy"),
           row("q2", 2, False, False, end="max_turns", decoding="greedy"),
           row("q3", 2, False, True, decoding="greedy")])


def test_pass_at_k_hand_computed():
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)       # 1 - C(2,2)/C(4,2)
    assert pass_at_k(5, 1, 2) == pytest.approx(1 - 6 / 10)      # 1 - C(4,2)/C(5,2)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)             # pass@1 = c/n
    with pytest.raises(ValueError, match="k=5, n=4"):
        pass_at_k(4, 1, 5)


def test_summary_hand_computed():
    s = summarise(5, ROWS, level="hops")
    assert s["eval/samples"] == 4
    assert s["eval/accuracy"] == pytest.approx((0.5 + 0 + 0.25) / 3)        # avg@4
    assert s["eval/pass@4"] == pytest.approx(2 / 3)
    assert s["eval/answer_rate"] == pytest.approx((0.75 + 0 + 1) / 3)
    assert s["eval/idk_rate"] == pytest.approx(0.25 / 3)
    assert s["eval/wrong_rate"] == pytest.approx((0.25 + 0 + 0.75) / 3)
    assert s["eval/accuracy_hops1"] == pytest.approx(0.5)
    assert s["eval/accuracy_hops2"] == pytest.approx(0.125)
    assert s["eval/greedy_accuracy"] == pytest.approx(1 / 3)
    assert s["eval/greedy_answer_rate"] == pytest.approx(2 / 3)


def test_accuracy_by_level_reads_the_column_the_world_names():
    """Another world's rows name their difficulty column in its own word: the summary's
    keys follow it, with the same values as under `hops`."""
    rows = [{("bugs" if k == "hops" else k): v for k, v in r.items()} for r in ROWS]
    by_hops, by_bugs = summarise(5, ROWS, level="hops"), summarise(5, rows, level="bugs")
    assert by_bugs["eval/accuracy_bugs1"] == by_hops["eval/accuracy_hops1"] == 0.5
    assert by_bugs["eval/accuracy_bugs2"] == pytest.approx(0.125)
    assert not any("hops" in k for k in by_bugs)


def test_questions_are_averaged_before_samples():
    rows = [row("a", 1, True, True)] + [row("b", 1, False, True, sample=i) for i in range(3)]
    assert summarise(0, rows, level="hops")["eval/accuracy"] == pytest.approx(0.5)     # not 1/4


def test_greedy_only_evaluation_is_primary():
    rows = [r for r in ROWS if r["decoding"] == "greedy"]
    s = summarise(0, rows, level="hops")
    assert s["eval/accuracy"] == pytest.approx(1 / 3) and "eval/greedy_accuracy" not in s


def test_analysis_reads_sampled_rows_as_primary(tmp_path):
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    run = Run(path=tmp_path, config={}, seed=0, complete=True,
              config_file=tmp_path / "config.yaml")
    assert len(run.eval_rows()) == 12 and len(run.greedy_rows()) == 3
    assert all(r["decoding"] == "sampled" for r in run.eval_rows())


def test_eval_temperature_is_validated():
    from ablate.apps.cli import compose_config
    from ablate.loop.config import ConfigError, validate
    cfg = compose_config(["eval.temperature=-0.5"])
    with pytest.raises(ConfigError, match="eval.temperature"):
        validate(cfg)
    validate(compose_config(["eval.temperature=0.7", "eval.samples=3", "eval.greedy=false"]))


def test_eval_offset_selects_a_disjoint_confirmation_set():
    from ablate.loop.scoring import eval_subset
    tasks = list(range(10))
    assert eval_subset(tasks, 4) == [0, 1, 2, 3]
    assert eval_subset(tasks, 4, offset=4) == [4, 5, 6, 7]
    assert eval_subset(tasks, 8, offset=6) == [6, 7, 8, 9]   # clipped at the split's end
    from ablate.loop.config import ConfigError
    with pytest.raises(ConfigError, match=r"eval.offset=10: the test split has only 10"):
        eval_subset(tasks, 4, offset=10)


def test_eval_offset_is_validated(tmp_path):
    from ablate.apps.cli import compose_config
    from ablate.loop.config import ConfigError, validate
    from ablate.apps.preflight import preflight
    with pytest.raises(ConfigError, match="eval.offset"):
        validate(compose_config(["eval.offset=-1"]))
    cfg = compose_config(["eval.offset=200", f"env.cache_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"eval.offset=200: the test split has only 200"):
        preflight(cfg)
