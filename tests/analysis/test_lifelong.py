"""The lifelong block of the analysis (analysis/lifelong.py): forgetting and the solve rate
from the eval rows, the library curves from metrics.jsonl, the last step's intervals and
the lifelong table; on a hand-made run and on the real short voyager sweeps of
tests/fixtures/voyager_lifelong."""
import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis import report, tables
from analysis.collect import collect
from analysis.summary import analyse

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "voyager_lifelong"
SWEEPS = sorted(p for p in FIXTURES.iterdir() if p.is_dir())


def write(path: Path, agent: str, seed: int, correct: dict, library: list) -> None:
    """A run: `correct[step][task]` the samples' outcomes; `library[i]` the library size
    logged after step i + 1 (voyager only)."""
    path.mkdir(parents=True)
    cfg = {"seed": seed, "agent": {"name": agent}, "env": {"name": "coderepair"},
           "trainer": {"max_steps": len(correct) - 1}}
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    rows = [{"step": s, "task_id": t, "sample": k, "correct": bool(v)}
            for s, tasks in correct.items() for t, vs in tasks.items()
            for k, v in enumerate(vs)]
    (path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = [{"step": i + 1, "voyager/library_size": float(n),
                "voyager/skills_used": 0.5 * i} for i, n in enumerate(library)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    (path / "COMPLETE").write_text("")


def test_forgetting_is_solved_before_and_failing_now(tmp_path):
    """Task a: solved at 0, failed at 1 (forgotten), solved at 2; b: half its samples at
    1 (solved), failed at 2 (forgotten); c: never solved. Forgetting 0, 1/3, 1/3."""
    correct = {0: {"a": [1, 1], "b": [0, 0], "c": [0, 0]},
               1: {"a": [0, 0], "b": [1, 0], "c": [0, 0]},
               2: {"a": [1, 1], "b": [0, 0], "c": [0, 1]}}
    write(tmp_path / "v0", "voyager", 0, correct, [1, 2])
    write(tmp_path / "v1", "voyager", 1, correct, [0, 4])
    write(tmp_path / "r0", "react", 0, correct, [])
    s = analyse(collect([tmp_path]), baseline={"agent.name": "react"}, B=200)
    by = {c["factors"]["agent.name"]: c["lifelong"] for c in s["cells"]}
    v = by["voyager"]["curves"]
    assert v["forgetting"]["mean"] == pytest.approx([0, 1 / 3, 1 / 3])
    assert v["solve_rate"]["mean"] == pytest.approx([1 / 3, 1 / 6, 1 / 2])
    assert v["library_size"]["seeds"] == {"0": {"steps": [1, 2], "values": [1.0, 2.0]},
                                          "1": {"steps": [1, 2], "values": [0.0, 4.0]}}
    assert v["library_size"]["mean"] == [0.5, 3.0]
    last = by["voyager"]["last"]
    assert last["library_size"]["mean"] == 3.0 and last["library_size"]["step"] == 2
    lo, hi = last["library_size"]["ci"]       # log scale: never below 0, around the mean
    assert 0 < lo < 3.0 < hi
    assert last["forgetting"]["mean"] == pytest.approx(1 / 3)
    assert 0 <= last["forgetting"]["ci"][0] < 1 / 3 < last["forgetting"]["ci"][1] <= 1
    assert set(by["react"]["curves"]) == {"solve_rate", "forgetting"}   # no library
    assert by["react"]["last"]["forgetting"]["mean"] == pytest.approx(1 / 3)
    assert by["react"]["last"]["solve_rate"]["ci"] is not None     # one seed: questions only


@pytest.mark.parametrize("sweep", SWEEPS, ids=[p.name for p in SWEEPS])
def test_fixture_sweeps_agree_with_what_the_agent_logged(sweep, tmp_path):
    """On real runs: a voyager cell's forgetting per step is the mean of its rows'
    `voyager_forgotten` (the agent's own record), its library curve the metrics rows',
    and the table and report carry the last step's values."""
    summary = analyse(collect([sweep]), baseline={"agent.name": "react"}, B=200)
    for c in summary["cells"]:
        for path, seed in zip(c["runs"], map(str, c["seeds"])):
            rows = [json.loads(x) for x in (Path(path) / "eval.jsonl").read_text().split("\n")
                    if x.strip()]
            rows = [r for r in rows if r.get("decoding") != "greedy"]
            curve = c["lifelong"]["curves"]["forgetting"]["seeds"][seed]
            if c["factors"]["agent.name"] == "voyager":
                per = defaultdict(lambda: defaultdict(list))
                for r in rows:
                    per[r["step"]][r["task_id"]].append(r["voyager_forgotten"])
                logged = [np.mean([np.mean(v) for v in per[s].values()]) for s in sorted(per)]
                assert curve["values"] == pytest.approx(logged)
                metrics = [json.loads(x) for x in (Path(path) / "metrics.jsonl")
                           .read_text().split("\n") if x.strip()]
                lib = c["lifelong"]["curves"]["library_size"]["seeds"][seed]
                assert lib["values"] == [m["voyager/library_size"] for m in metrics]
    tables.write_all(summary, tmp_path)
    with open(tmp_path / "lifelong.csv") as fh:
        got = list(csv.DictReader(fh))
    assert [r["cell"] for r in got] == [c["label"] for c in summary["cells"]]
    for r, c in zip(got, summary["cells"]):
        assert float(r["mean_solve_rate"]) == pytest.approx(
            c["lifelong"]["last"]["solve_rate"]["mean"])
        assert (r["mean_library_size"] == "") == (c["factors"]["agent.name"] == "react")
    assert "## Lifelong (skill library)" in report.render(summary)
    assert "tab:lifelong" in (tmp_path / "lifelong.tex").read_text()
