"""analysis/collect.py across ablate's own changes (issue 64 items 1 and 2): a run written
after the judge moved (`env.judge.*`) pools with the committed runs written before it
(top-level `judge.*`), as ablate/loop/resume.py resumes them; eval rows past a run's own
`eval.samples` (a renumbered copy of its evaluation) are refused, not pooled."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from analysis import cli
from analysis.collect import RENAMED, collect
from analysis.errors import AnalysisError

REPO = Path(__file__).resolve().parents[2]
EXP = REPO / "experiments" / "enronhop_rewards"
NEW = "+algo=grpo,+reward=naive,seed=2"          # the run rewritten in today's layout


def _copy(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(EXP / "results" / "runs", runs)
    return runs


def _today(run: Path) -> None:
    """The run's config.yaml in today's names: the judge inside env, the curriculum's
    start renamed (ablate/loop/resume.py RENAMED)."""
    path = run / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["env"]["judge"] = cfg.pop("judge")
    cur = cfg["algo"]["curriculum"]
    cur["start_level"] = cur.pop("start_hops")
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def _newer(run: Path) -> None:
    """The run as today's ablate writes it: today's names, keys added since (with their
    defaults) and the record of its code (code.json, which older ablate did not write)."""
    _today(run)
    path = run / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["learner"]["update_threads"] = 1
    cfg["sampler"]["num_servers"] = 1
    cfg["plugins"] = []
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    (run / "code.json").write_text('{"commit": "0123abc", "dirty": false}\n')


def _summary(runs: Path, out: Path, *extra: str) -> dict:
    assert cli.main([str(runs), "--out", str(out), "--spec", str(EXP / "analysis.yaml"),
                     "--no-figures", *extra]) == 0
    return json.loads((out / "summary.json").read_text())


def test_the_map_is_resumes_own():
    from ablate.loop.resume import RENAMED as RESUMED
    assert RENAMED == RESUMED


def test_a_run_in_the_new_judge_layout_pools_with_the_old(tmp_path):
    runs = _copy(tmp_path)
    _today(runs / NEW)
    sweep = collect([runs])
    assert sweep.factors == ["reward.name"]
    assert [(c.factors["reward.name"], c.seeds) for c in sweep.cells] == [
        ("naive", (0, 1, 2)), ("outcome", (0, 1, 2)), ("shaped", (0, 1, 2))]
    renames = [w for w in sweep.warnings if "read under the new name" in w]
    assert len(renames) == 2 and renames[0].startswith(
        "8 run(s) written before judge.* became env.judge.* (first: ")
    assert "not treated as a factor" in renames[0]
    assert not any("env.judge.name is set in" in w for w in sweep.warnings)


def test_the_primary_comparison_is_the_published_one(tmp_path):
    runs = _copy(tmp_path)
    _today(runs / NEW)
    got = _summary(runs, tmp_path / "report")
    published = json.loads((EXP / "results" / "report" / "summary.json").read_text())
    assert got["comparisons"] == published["comparisons"]
    assert [{k: v for k, v in c.items() if k != "runs"} for c in got["cells"]] == \
        [{k: v for k, v in c.items() if k != "runs"} for c in published["cells"]]
    assert got["comparisons"][0]["a"] == {"reward.name": "naive"}
    assert [c["n_seeds"] for c in got["cells"]] == [3, 3, 3]


def test_a_seed_written_by_todays_ablate_pools_with_the_committed_runs(tmp_path):
    runs = _copy(tmp_path)
    _newer(runs / NEW)
    sweep = collect([runs])
    assert sweep.factors == ["reward.name"]
    assert [c.seeds for c in sweep.cells] == [(0, 1, 2)] * 3
    newer = [w for w in sweep.warnings if "without code.json" in w]
    assert len(newer) == 1 and newer[0].startswith("8 run(s) without code.json")
    assert newer[0].endswith("not treated as factors: learner.update_threads, plugins, "
                             "sampler.num_servers")
    got = _summary(runs, tmp_path / "report")
    published = json.loads((EXP / "results" / "report" / "summary.json").read_text())
    assert got["comparisons"] == published["comparisons"]


def test_a_key_set_in_some_runs_of_one_ablate_is_still_a_factor(tmp_path):
    """Without the code record telling the runs' ablate apart, a key one run sets is
    that run's setting (`+learner.update_threads=1`): a factor, as before."""
    runs = _copy(tmp_path)
    _newer(runs / NEW)
    (runs / NEW / "code.json").unlink()
    assert "learner.update_threads" in collect([runs]).factors


def test_an_all_old_sweep_says_nothing_of_the_rename(tmp_path):
    sweep = collect([EXP / "results" / "runs"])
    assert not any("read under the new name" in w for w in sweep.warnings)
    assert "env.judge.name" in sweep.cells[0].runs[0].config
    assert "judge.name" not in sweep.cells[0].runs[0].config


def _renumbered(run: Path) -> int:
    """The run's sampled evaluation appended again with `sample` shifted past its
    eval.samples: the rows' key (step, task, sample, decoding) stays unique. Returns the
    first appended line."""
    k = yaml.safe_load((run / "config.yaml").read_text())["eval"]["samples"]
    path = run / "eval.jsonl"
    lines = path.read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    extra = [{**r, "sample": r["sample"] + k} for r in rows if r["decoding"] == "sampled"]
    path.write_text("\n".join(lines + [json.dumps(r) for r in extra]) + "\n")
    return len(lines) + 1


def test_rows_past_the_runs_own_eval_samples_are_refused(tmp_path):
    runs = _copy(tmp_path)
    line = _renumbered(runs / NEW)
    with pytest.raises(AnalysisError) as exc:
        for cell in collect([runs]).cells:
            for run in cell.runs:
                run.eval_rows()
    msg = str(exc.value)
    assert msg.startswith(f"{runs / NEW / 'eval.jsonl'}:{line}: sample 2 of task ")
    assert "past this run's eval.samples = 2 (samples 0-1;" in msg and "\n" not in msg


def test_allow_duplicates_leaves_them_out(tmp_path):
    runs = _copy(tmp_path)
    _renumbered(runs / NEW)
    got = _summary(runs, tmp_path / "report", "--allow-duplicates")
    published = json.loads((EXP / "results" / "report" / "summary.json").read_text())
    assert got["comparisons"] == published["comparisons"]
    assert any("repeated row(s) left out" in w for w in got["warnings"])
