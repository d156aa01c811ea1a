"""Scripts under experiments/ that turn committed runs into README numbers."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(root: Path, agent: str, seed: int, tokens: list[int]) -> None:
    d = root / f"+algo=grpo,agent={agent},seed={seed}"
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text("".join(
        json.dumps({"step": i + 1, "generated_tokens": t}) + "\n" for i, t in enumerate(tokens)))


def test_voyager_token_check(tmp_path, capsys):
    tokens = _load(REPO / "experiments" / "voyager_coderepair" / "tokens.py")
    _run(tmp_path, "react", 0, [100, 100])
    _run(tmp_path, "voyager", 0, [120, 120])
    _run(tmp_path, "react", 1, [100, 100])       # no voyager cell for seed 1: left out
    assert tokens.table(tmp_path) == [{"seed": 0, "react": 200, "voyager": 240, "ratio": 1.2}]
    tokens.main([str(tmp_path)])
    assert "| 0 | 200 | 240 | 1.200 |" in capsys.readouterr().out
    _run(tmp_path, "voyager", 1, [200, 200])     # 2x the tokens: not matched
    tokens.main([str(tmp_path)])
    assert "token-matched (every seed within x1.25): no" in capsys.readouterr().out


def test_naive_trap_sizing_from_the_committed_pilots():
    sizing = _load(REPO / "experiments" / "naive_trap" / "sizing.py")
    pilots = REPO / "experiments" / "naive_trap" / "pilots"
    out = sizing.sizing([pilots / "naive_s100", pilots / "naive_s101"])
    assert out["step"] == 24 and out["questions"] == 64
    assert out["seed_means"] == [0.0, 0.0625]        # 0 of 128 and 8 of 128 submitted
    assert abs(out["mde_tau0"] - 0.0820) < 5e-4
    committed = json.loads((pilots / "sizing.json").read_text())
    assert committed == json.loads(json.dumps(out))


def test_naive_trap_endings_count_each_way_an_episode_ended(tmp_path, capsys):
    """An `answer` ending is a submission or an "I don't know" (answered false); the
    other endings keep their name; greedy rows and other steps are left out."""
    endings = _load(REPO / "experiments" / "naive_trap" / "endings.py")
    d = tmp_path / "+algo=grpo,+reward=naive,seed=3"
    d.mkdir()
    rows = [{"step": 0, "end_reason": "answer", "answered": True, "correct": True},
            {"step": 8, "end_reason": "answer", "answered": True},
            {"step": 8, "end_reason": "answer", "answered": False, "turns": 1},
            {"step": 8, "end_reason": "answer", "answered": False, "turns": 3},
            {"step": 8, "end_reason": "max_turns", "answered": False},
            {"step": 8, "end_reason": "max_tokens", "answered": False},
            {"step": 8, "end_reason": "answer", "answered": True, "decoding": "greedy"}]
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = endings.table(tmp_path)
    assert [r["step"] for r in got] == [0, 8]                 # every evaluated step
    assert got[1] == {"reward": "naive", "seed": 3, "step": 8, "episodes": 5,
                      "submitted": 1, "idk": 2, "idk_first_turn": 1, "max_turns": 1,
                      "max_tokens": 1, "malformed": 0, "never_answered": 2, "correct": 0}
    assert endings.table(tmp_path, step=0) == [got[0]] and got[0]["correct"] == 1
    q = endings.quantities(got)
    assert (q["first_step"], q["last_step"]) == (0, 8)
    assert q["range_last"]["naive"]["idk"] == [2, 2]
    endings.main(["--runs", str(tmp_path)])
    assert "| naive | 3 | 8 | 5 | 1 | 2 | 1 | 1 | 0 | 1 |" in capsys.readouterr().out


def _eval_rows(d: Path, step: int, correct: dict) -> None:
    """eval.jsonl with rows {task_id: [correct per sample]} at `step` (plus a greedy row
    and an earlier step, both to be ignored)."""
    d.mkdir(parents=True)
    rows = [{"step": step, "task_id": q, "sample": k, "correct": c}
            for q, cs in correct.items() for k, c in enumerate(cs)]
    rows.append({"step": step, "task_id": "q0", "correct": True, "decoding": "greedy"})
    if step:
        rows.append({"step": step - 8, "task_id": "q0", "correct": True})
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_reward_resolution_gains_over_the_warm_start(tmp_path):
    gains = _load(REPO / "experiments" / "reward_resolution" / "gains.py")
    _eval_rows(tmp_path / "warm", 0, {"q0": [0, 0, 1, 1], "q1": [0, 0, 0, 0]})  # 0.5, 0
    runs = tmp_path / "runs"
    _eval_rows(runs / "+algo=grpo,+reward=outcome,seed=10", 16, {"q0": [1, 1], "q1": [0, 1]})
    _eval_rows(runs / "+algo=grpo,+reward=outcome,seed=11", 16, {"q0": [1, 0], "q1": [0, 0]})
    _eval_rows(runs / "+algo=grpo,+reward=shaped,seed=10", 16, {"q0": [0, 0], "q1": [0, 0]})
    _eval_rows(runs / "+algo=grpo,+reward=shaped,seed=11", 16, {"q0": [1, 1], "q1": [1, 1]})
    out = gains.gains(runs, tmp_path / "warm", 0.05)
    assert out["warm_start"]["accuracy"] == 0.25 and out["warm_start"]["questions"] == 2
    # outcome: seed 10 ((1 - .5) + (.5 - 0)) / 2 = .5; seed 11 ((.5 - .5) + 0) / 2 = 0
    assert out["arms"]["outcome"]["seed_gains"] == {10: 0.5, 11: 0.0}
    assert out["arms"]["shaped"]["seed_gains"] == {10: -0.25, 11: 0.75}
    assert out["arms"]["outcome"]["mean"] == 0.25
    lo, hi = out["arms"]["outcome"]["ci_over_seeds"]     # t(0.975, 1) = 12.706, SE 0.25
    assert abs(lo - (0.25 - 12.706 * 0.25)) < 1e-3 and abs(hi - (0.25 + 12.706 * 0.25)) < 1e-3


def test_reward_resolution_sizing_from_the_committed_testbed_cells():
    sizing = _load(REPO / "experiments" / "reward_resolution" / "sizing.py")
    out = sizing.sizing()
    assert out["step"] == 16 and out["testbed_questions"] == 136
    assert abs(out["pocock_nominal_alpha"] - 0.0294) < 1e-4
    committed = json.loads((REPO / "experiments" / "reward_resolution" / "sizing.json").read_text())
    assert committed == json.loads(json.dumps(out))


def test_smollm_sizing_from_the_committed_pilots():
    from scipy import stats
    sizing = _load(REPO / "experiments" / "smollm_reasoning_gym" / "sizing.py")
    out = sizing.sizing()
    committed = json.loads((REPO / "experiments" / "smollm_reasoning_gym" / "pilots"
                            / "sizing.json").read_text())
    assert committed == json.loads(json.dumps(out))
    assert out["warm_start"] == 0.18 and out["pilot_change"] == [0.045, 0.045]
    # the change's MDE by hand: 4 seeds (3 df), seed variance 0, 200 questions
    s2q = out["change_components"]["sigma2_question"]
    k = stats.t.ppf(0.975, 3) + stats.t.ppf(0.8, 3)
    assert abs(out["mde_change_estimate"][4] - round(k * (s2q / 200) ** 0.5, 4)) < 1e-4


def test_smollm_shortcut_split_of_the_committed_pilots():
    from omegaconf import OmegaConf
    shortcut = _load(REPO / "experiments" / "smollm_reasoning_gym" / "shortcut.py")
    pilots = REPO / "experiments" / "smollm_reasoning_gym" / "pilots"
    kind = shortcut.classes(OmegaConf.load(pilots / "seed100" / "config.yaml"))
    env_cfg = OmegaConf.load(pilots / "seed100" / "config.yaml").env
    tasks = shortcut.ReasoningGymEnv.from_config(env_cfg).tasks("test")
    for t in tasks:   # the generator's own sequence: the answer is its last element
        seq = t.payload["metadata"]["sequence"]
        assert (kind[t.id] == "repeat") == (seq[-1] == seq[-2]), t.payload["question"]
    out = shortcut.split(pilots)["grpo"]
    assert out[30] == {"other": [0.019, 158], "repeat": [1.0, 42]}
    assert out[0]["repeat"] == [0.7857, 42]


# ------------------------------------------------------------ penalty_dose: trend.py
def _trend():
    return _load(REPO / "experiments" / "penalty_dose" / "trend.py")


def test_penalty_dose_jt_tiny_cases_by_hand():
    """Two arms of two seeds, falling with lambda: J (increasing) = 0 of 4 pairs; of the
    C(4, 2) = 6 splits only the observed one is as low, so P(J <= 0) = 1/6, two-sided
    1/3. One seed per arm in falling order: 1 of 3! = 6 orders. A tie across arms counts
    1/2: [1, 2] vs [2] has J = 1 + 1/2; its null over the 3 splits is {0: 1, 3/2: 2}."""
    from fractions import Fraction
    jt = _trend()
    r = jt.jt_test([[0.5, 0.4], [0.1, 0.2]])
    assert (r["J"], r["J_decreasing"], r["pairs"], r["assignments"]) == (0, 4, 4, 6)
    assert abs(r["p_decreasing"] - 1 / 6) < 1e-12 and abs(r["p"] - 1 / 3) < 1e-12
    assert r["direction"] == "decreasing" and not r["supported"]   # 1/3 > 0.05
    r = jt.jt_test([[3.0], [2.0], [1.0]])
    assert r["J"] == 0 and abs(r["p_decreasing"] - 1 / 6) < 1e-12
    assert jt.jt_statistic([[1, 2], [2]]) == 1.5
    assert jt.jt_null([[1, 2], [2]]) == {Fraction(0): 1, Fraction(3, 2): 2}


def test_penalty_dose_jt_null_is_exact():
    """The null distribution: (1) with one seed an arm and no ties it is the number of
    inversions of a permutation (Mahonian numbers: n = 4 gives 1 3 5 6 5 3 1); (2) with
    ties it equals a brute-force enumeration of every assignment; (3) for the grid's 4
    arms x 6 seeds its mean and variance are the textbook no-ties moments,
    (N^2 - sum n^2) / 4 = 108 and (N^2 (2N + 3) - sum n^2 (2n + 3)) / 72 = 378, over
    24! / 6!^4 assignments."""
    import itertools
    import math
    from collections import Counter
    from fractions import Fraction
    jt = _trend()
    null = jt.jt_null([[0.1], [0.2], [0.3], [0.4]])
    assert [null[Fraction(k)] for k in range(7)] == [1, 3, 5, 6, 5, 3, 1]
    groups = [[1, 2, 2], [2, 3], [1, 3, 4]]
    values = [x for g in groups for x in g]
    brute = Counter()
    for labels in set(itertools.permutations([0, 0, 0, 1, 1, 2, 2, 2])):
        g = [[v for v, lab in zip(values, labels) if lab == k] for k in range(3)]
        brute[Fraction(jt.jt_statistic(g)).limit_denominator(2)] += 1
    assert jt.jt_null(groups) == dict(brute) and sum(brute.values()) == 560
    r = jt.jt_test([list(range(i * 6, (i + 1) * 6))[::-1] for i in range(4)][::-1])
    assert abs(r["null_mean"] - 108) < 1e-9 and abs(r["null_var"] - 378) < 1e-9
    assert r["assignments"] == math.factorial(24) // math.factorial(6) ** 4
    assert r["J"] == 0 and r["p"] == r["p_min"] == 2 / r["assignments"]


def test_penalty_dose_jt_simulation_known_answer():
    """Simulated grids of 4 arms x 6 seeds: with no trend the exact test rejects at most
    5% of the time (it is exact, so conservative with a discrete statistic: within
    Monte Carlo error of <= 0.05); with arm means 0, -1, -2, -3 seed SDs apart it
    finds the decreasing trend nearly always; and its p agrees with the normal
    approximation (J - mean) / sd where that is accurate (mid-range p)."""
    import numpy as np
    from scipy import stats
    jt = _trend()
    rng = np.random.default_rng(0)
    R = 300
    null_rej = sum(jt.jt_test([rng.standard_normal(6) for _ in range(4)])["p"] < 0.05
                   for _ in range(R))
    assert null_rej / R <= 0.05 + 3 * (0.05 * 0.95 / R) ** 0.5
    trend_hit = sum(jt.jt_test([m + rng.standard_normal(6) for m in (0, -1, -2, -3)])
                    ["supported"] for _ in range(50))
    assert trend_hit >= 48
    for _ in range(20):
        r = jt.jt_test([m + rng.standard_normal(6) for m in (0, -0.3, -0.6, -0.9)])
        z = (r["J"] - 108) / 378 ** 0.5
        assert abs(r["p_decreasing"] - stats.norm.cdf(z + 0.5 / 378 ** 0.5)) < 0.01


def _dose_run(root, lam, seed, correct, answered, hops):
    d = root / f"+algo=grpo,+reward=naive,reward.weights.wrong={lam},seed={seed}"
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(json.dumps(
        {"seed": seed, "reward": {"name": "naive", "weights": {"correct": 1.0, "wrong": lam}}}))
    rows = []
    for step in (0, 48):
        for q, (c, a, h) in enumerate(zip(correct, answered, hops)):
            for s in range(2):
                rows.append({"step": step, "task_id": f"q{q}", "sample": s, "hops": h,
                             "correct": bool(c[s]) if step else False,
                             "answered": bool(a[s]), "decoding": "sampled",
                             "end_reason": "answer" if a[s] else "max_turns"})
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_penalty_dose_trend_reads_runs_and_writes_its_report(tmp_path, capsys):
    """Per seed at the last step: accuracy and submission rate overall and per hop class
    (a question's samples averaged first); the primary family is the JT test on accuracy
    and the last arm vs the first by exact permutation, Holm over the two."""
    jt = _trend()
    runs = tmp_path / "runs"
    hops = [1, 1, 2, 2]
    for seed in (0, 1):
        # lambda 0: 3 of 4 questions right (both samples); lambda 4: 1 of 4, one sample
        _dose_run(runs, 0.0, seed, [[1, 1], [1, 1], [1, 1], [0, 0]], [[1, 1]] * 4, hops)
        _dose_run(runs, 4.0, seed, [[1, 0], [0, 0], [0, 0], [0, 0]],
                  [[1, 1], [1, 1], [0, 0], [0, 0]], hops)
    rows = jt.per_seed(runs)
    assert [(r["lambda"], r["seed"], r["step"]) for r in rows] == [
        (0.0, 0, 48), (0.0, 1, 48), (4.0, 0, 48), (4.0, 1, 48)]
    r0, r4 = rows[0], rows[2]
    assert r0["accuracy"] == 0.75 and r0["submitted"] == 1.0
    assert r0["hops1"]["accuracy"] == 1.0 and r0["hops2"]["accuracy"] == 0.5
    assert r4["accuracy"] == 0.125 and r4["submitted"] == 0.5
    assert r4["hops2"]["submitted"] == 0.0 and r4["right_when_submitted"] == 0.25
    assert r4["endings"] == {"submitted": 4, "idk": 0, "max_turns": 4, "max_tokens": 0,
                             "malformed": 0}
    q = jt.analyse(rows)
    t, p = q["primary"]["trend"], q["primary"]["pair"]
    # 2 vs 2 seeds, every lambda-4 seed below every lambda-0 seed: J = 0, p = 2/6
    assert t["J"] == 0 and abs(t["p"] - 1 / 3) < 1e-12 and t["direction"] == "decreasing"
    assert p["delta"] == -0.625 and p["p_perm"] == 1 / 3
    assert abs(t["p_holm"] - 2 / 3) < 1e-12 and abs(p["p_holm"] - 2 / 3) < 1e-12
    assert q["secondary"]["submitted_hops2"]["J"] == 0
    report = tmp_path / "report"
    jt.main([str(report), "--runs", str(runs)])
    out = json.loads((report / "trend.json").read_text())
    assert out["primary"]["trend"]["J"] == 0
    assert (report / "dose_response.png").is_file()
    assert "λ" in (report / "dose_response.caption.txt").read_text()
    assert "| 4 | 1 | 48 | 0.125 |" in capsys.readouterr().out


def test_penalty_dose_class_submission_and_every_step(tmp_path):
    """The class predicted to stop submitting (its lambda* below lambda): the fall of its
    submission rate from lambda 0 with a Welch interval over seeds (checked against
    scipy's), against the full fall (to none) and half of it; and the arm means at every
    evaluated step."""
    from scipy import stats
    jt = _trend()
    runs = tmp_path / "runs"
    hops = [1, 1, 2, 2]
    right = [[1, 1], [1, 1], [1, 1], [0, 0]]
    for seed in (0, 1):
        _dose_run(runs, 0.0, seed, right, [[1, 1]] * 4, hops)
    _dose_run(runs, 4.0, 0, right, [[1, 1], [1, 1], [0, 0], [0, 0]], hops)
    _dose_run(runs, 4.0, 1, right, [[1, 1], [1, 0], [1, 0], [0, 0]], hops)
    rows = jt.per_seed(runs)
    got = jt.class_submission(rows, {"hops1": 3.17, "hops2": 0.62, "none": None})
    assert [(g["lambda"], g["class"]) for g in got] == [(4.0, "hops1"), (4.0, "hops2")]
    h1, h2 = got
    assert h2["delta"] == -0.875 and h2["full_fall"] == 1.0 and h1["delta"] == -0.125
    ref = stats.ttest_ind([0.0, 0.25], [1.0, 1.0], equal_var=False)
    assert h2["ci"] == pytest.approx(list(ref.confidence_interval(0.95)), abs=1e-9)
    assert h2["df"] == pytest.approx(1.0)
    assert not h2["excludes_full"] and not h2["excludes_half"]
    # at lambda 2, above the 2-hop threshold only: no lambda-2 runs, so nothing
    assert jt.class_submission(rows, {"hops2": 5.0}) == []
    q = jt.analyse(rows, steps=jt.steps_of(runs))
    assert sorted(q["by_step"]) == ["0", "48"]
    assert q["by_step"]["0"]["0"]["accuracy"] == 0.0     # no answer right at step 0
    assert q["by_step"]["48"]["0"]["accuracy"] == 0.75
    assert q["by_step"]["48"]["4"]["submitted_hops2"] == 0.125
    assert "endings" not in q["by_step"]["48"]["4"] and "endings" in q["arms"]["4"]


def test_penalty_dose_sizing_from_the_committed_pilot():
    """The warm start's P(right | submitted) per class and lambda* = p / (1 - p), the
    predicted collapse, and the committed sizing.json recomputed from the committed
    pilot rows."""
    sizing = _load(REPO / "experiments" / "penalty_dose" / "sizing.py")
    pilots = REPO / "experiments" / "penalty_dose" / "pilots"
    w = sizing.warm_start(pilots / "warm_start")
    assert (w["hops1"]["submitted"], w["hops1"]["right"], w["hops1"]["episodes"]) == (196, 149, 264)
    assert (w["hops2"]["submitted"], w["hops2"]["right"], w["hops2"]["episodes"]) == (81, 31, 248)
    assert abs(w["hops1"]["lambda_star"] - 149 / 47) < 1e-12
    assert abs(w["hops2"]["lambda_star"] - 31 / 50) < 1e-12
    drop = sizing.predicted_drop(w)
    assert drop["0"] == 0 and drop["1"] == drop["2"] == 31 / 248 * 99 / 200
    assert abs(drop["4"] - (149 / 264 * 101 + 31 / 248 * 99) / 200) < 1e-12
    committed = json.loads((pilots / "sizing.json").read_text())
    assert committed == json.loads(json.dumps(sizing.sizing(pilots), sort_keys=True))


def test_penalty_dose_collapsed_seeds_and_their_last_signal(tmp_path):
    """A seed whose last evaluation ends mostly in "I don't know" is listed with its
    submission rate at each evaluation and the last training step with a group whose
    rewards differ (mixed_groups > 0); a seed that still answers is not."""
    jt = _trend()
    runs = tmp_path / "runs"
    hops = [1, 2]
    _dose_run(runs, 0.0, 0, [[1, 1], [0, 1]], [[1, 1], [1, 1]], hops)
    _dose_run(runs, 0.0, 1, [[0, 0], [0, 0]], [[1, 1], [1, 0]], hops)
    d = runs / "+algo=grpo,+reward=naive,reward.weights.wrong=0.0,seed=1"
    rows = [json.loads(x) for x in (d / "eval.jsonl").read_text().splitlines()]
    for r in rows:
        if r["step"] == 48:        # every episode: a final answer that is "I don't know"
            r.update(answered=False, correct=False, end_reason="answer")
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "mixed_groups": m}) + "\n"
                                             for s, m in ((1, 0.5), (2, 1.0), (3, 0.0))))
    got = jt.collapsed(runs, jt.steps_of(runs))
    assert got == [{"lambda": 0.0, "seed": 1, "idk": 4, "episodes": 4, "accuracy": 0.0,
                    "submitted_by_step": {"0": 0.75, "48": 0.0}, "last_mixed_step": 2}]
