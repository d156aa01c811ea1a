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
