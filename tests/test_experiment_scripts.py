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
    rows = [{"step": 0, "end_reason": "answer", "answered": True},
            {"step": 8, "end_reason": "answer", "answered": True},
            {"step": 8, "end_reason": "answer", "answered": False},
            {"step": 8, "end_reason": "max_turns", "answered": False},
            {"step": 8, "end_reason": "max_turns", "answered": False},
            {"step": 8, "end_reason": "answer", "answered": True, "decoding": "greedy"}]
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert endings.table(tmp_path) == [{"reward": "naive", "seed": 3, "step": 8,
                                        "episodes": 4, "submitted": 1, "I don't know": 1,
                                        "max_turns": 2}]
    assert endings.table(tmp_path, step=0)[0]["submitted"] == 1
    endings.main([str(tmp_path)])
    assert "| naive | 3 | 8 | 4 | 1 | 1 | 2 | 0 | 0 |" in capsys.readouterr().out
