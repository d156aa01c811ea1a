"""Scripts under experiments/ that turn committed runs into README numbers."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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
