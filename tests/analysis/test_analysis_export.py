"""analysis.export copies a sweep's analysis inputs; the analysis of the copy gives the
same numbers as the analysis of the sweep (what experiments' committed results rely on);
analysis.publish regenerates a report and a README headline from them; the per-cell
change from the first evaluation is paired by seed and question."""
from __future__ import annotations

import json

import numpy as np

from analysis import cli
from analysis.compare import evaluate
from analysis.estimates import CellData
from analysis.export import export, main
from analysis.labels import cell_words
from analysis.publish import BEGIN, END
from analysis.publish import main as publish_main
from analysis.synthetic import write_sweep
from analysis.tables import fmt, fmt_est


def _summary(sweep, out, *extra):
    assert cli.main([str(sweep), "--out", str(out), "--no-figures", "--B", "200",
                     "--baseline", "reward.name=shaped", *extra]) == 0
    return json.loads((out / "summary.json").read_text())


def test_export_keeps_inputs_and_numbers(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive", "shaped"), algos=("grpo",),
                        seeds=(0, 1), n_questions=12)
    runs = sorted(p for p in sweep.iterdir() if p.is_dir())
    (runs[0] / "ckpt").mkdir()
    (runs[0] / "ckpt" / "model.pt").write_bytes(b"x" * 10)
    (runs[0] / "trajectories.txt").write_text("long\n")
    (runs[1] / "eval.jsonl").unlink()            # a run that died before its first eval
    (runs[1] / "COMPLETE").unlink()
    (runs[1] / "FAILED").write_text("boom\n")
    assert main([str(sweep), str(tmp_path / "copy")]) == 0
    copied = sorted((tmp_path / "copy").iterdir())
    assert [p.name for p in copied] == [p.name for p in runs]
    assert sorted(f.name for f in copied[0].iterdir()) == [".hydra", "COMPLETE",
                                                          "eval.jsonl", "metrics.jsonl"]
    assert sorted(f.name for f in copied[1].iterdir()) == [".hydra", "FAILED",
                                                          "metrics.jsonl"]
    orig = _summary(sweep, tmp_path / "orig", "--include-incomplete")
    copy = _summary(tmp_path / "copy", tmp_path / "o_copy", "--include-incomplete")
    assert [c["mean"] for c in orig["cells"]] == [c["mean"] for c in copy["cells"]]
    assert orig["comparisons"] == copy["comparisons"]
    assert len(orig["failed"]) == len(copy["failed"]) == 1


def test_export_drops_a_marker_that_no_longer_holds(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive",), algos=("grpo",), seeds=(0,),
                        n_questions=4)
    run = next(p for p in sweep.iterdir() if p.is_dir())
    (run / "COMPLETE").unlink()
    (run / "FAILED").write_text("boom\n")
    dest = tmp_path / "copy"
    (dest / run.name).mkdir(parents=True)
    (dest / run.name / "COMPLETE").write_text("")
    export(sweep, dest)
    assert not (dest / run.name / "COMPLETE").exists()
    assert (dest / run.name / "FAILED").read_text() == "boom\n"


def _per_question(path, step):
    by = {}
    for line in open(f"{path}/eval.jsonl"):
        r = json.loads(line)
        if r["step"] == step:
            by.setdefault(r["task_id"], []).append(float(r["correct"]))
    return {q: float(np.mean(v)) for q, v in by.items()}


def test_change_from_first_evaluation_is_paired_by_seed_and_question(tmp_path):
    """summary.json's per-cell change equals the seeds x questions estimate of the
    hand-built matrix of each seed's per-question (last - first): mean AND SE (an
    unpaired or misaligned difference would give the same mean, not the same SE)."""
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive", "shaped"), algos=("grpo",),
                        seeds=(0, 1, 2), n_questions=20, steps=(0, 5, 10))
    summary = _summary(sweep, tmp_path / "o")
    hand_y, wrong_y = [], []
    for cell in summary["cells"]:
        first = [_per_question(run, 0) for run in cell["runs"]]
        last = [_per_question(run, 10) for run in cell["runs"]]
        qs = sorted(first[0])
        hand_y.append(np.array([[la[q] - fi[q] for fi, la in zip(first, last)] for q in qs]))
        wrong_y.append(np.array([[la[q] - fi[p] for fi, la in zip(first, last)]
                                 for q, p in zip(qs, np.roll(qs, 1))]))
    # the seed variance of the change is each cell's own (the default, docs/statistics.md
    # sec. 2)
    for cell, y, w in zip(summary["cells"], hand_y, wrong_y):
        qs = list(range(y.shape[0]))
        hand = evaluate([CellData(y=y, questions=qs, seeds=(0, 1, 2))], {0: 1.0})
        wrong = evaluate([CellData(y=w, questions=qs, seeds=(0, 1, 2))], {0: 1.0})
        ch = cell["change"]["correct"]
        assert ch["from_step"] == [0] and ch["inferential"]
        assert abs(ch["mean"] - hand["estimate"]) < 1e-12
        assert abs(ch["se"] - hand["se"]) < 1e-12
        assert abs(wrong["se"] - hand["se"]) > 1e-3        # the SE sees the pairing
        assert "answer_rate" in cell["change"]
    report = (tmp_path / "o" / "report.md").read_text()
    assert "## Change from the first evaluation" in report
    row = next(x for x in report.splitlines() if x.startswith("| reward=naive | 0 |"))
    assert row.count("|") == report.splitlines()[report.splitlines().index(row) - 2].count("|")


def _two_reward_sweep(root):
    return write_sweep(root, rewards=("naive", "shaped"), algos=("grpo",), seeds=(0, 1),
                       n_questions=40, steps=(0, 10),
                       effects={("naive", "grpo"): 1.0, ("shaped", "grpo"): 1.0})


def _publish(exp, sweep, after=""):
    """An experiment folder (baseline shaped, B 200, a README with the markers) published
    from `sweep`; (the folder, its summary.json)."""
    exp.mkdir()
    (exp / "analysis.yaml").write_text("baseline: {reward.name: shaped}\nB: 200\n")
    (exp / "README.md").write_text(f"# exp\n\n{BEGIN}\nold\n{END}\n{after}")
    assert publish_main([str(exp), "--sweep", str(sweep), "--no-figures"]) == 0
    return exp, json.loads((exp / "results" / "report" / "summary.json").read_text())


def test_publish_regenerates_report_and_readme_headline(tmp_path, capsys):
    sweep = _two_reward_sweep(tmp_path / "sweep")
    exp, summary = _publish(tmp_path / "exp", sweep, after="\nafter\n")
    readme = (exp / "README.md").read_text()
    assert "\nold\n" not in readme and readme.endswith(f"{END}\n\nafter\n")
    positive = 0
    for c in summary["cells"]:
        row = next(x for x in readme.splitlines()
                   if x.startswith(f"| {cell_words(summary, c)} |"))
        assert f"| {fmt_est(c)} | {fmt_est(c['change']['correct'], True, True)} |" in row
        # 10 steps x 1,000 tokens x 6 s per seed (analysis/synthetic.py)
        assert c["compute"] == {"generated_tokens": 10000.0, "train_seconds": 60.0,
                                "n_seeds": 2}
        change = c["change"]["correct"]["mean"]
        row = next(x for x in readme.splitlines()
                   if x.startswith(f"| {cell_words(summary, c)} | 10,000 | 1.0 | "))
        if c["change"]["correct"]["ci"][0] > 0:     # a gain whose interval excludes 0
            positive += 1
            assert row.endswith(f"| {fmt(change, True, True)} | {1e4 / (100 * change):,.0f} | "
                                f"{1 / (100 * change):.2f} |")
        else:                                         # no ratio to a gain that may be 0
            assert row.endswith(f"| {fmt(change, True, True)} | – | – |")
    assert positive >= 1
    assert publish_main([str(exp), "--no-figures"]) == 0      # from the committed copy
    assert (exp / "README.md").read_text() == readme
    (exp / "README.md").write_text("# no markers\n")
    assert publish_main([str(exp), "--no-figures"]) == 2
    assert "no <!-- results:begin --> ... <!-- results:end --> markers" in capsys.readouterr().err


def test_publish_includes_reused_runs(tmp_path):
    """`include:` in analysis.yaml adds another experiment's runs (the reused arm)."""
    other = write_sweep(tmp_path / "other", rewards=("shaped",), algos=("grpo",),
                        seeds=(0, 1), n_questions=10, steps=(0, 10))
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive",), algos=("grpo",),
                        seeds=(0, 1), n_questions=10, steps=(0, 10))
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "analysis.yaml").write_text(
        "baseline: {reward.name: shaped}\nB: 200\ninclude: [../other]\n")
    (exp / "README.md").write_text(f"{BEGIN}\n{END}\n")
    assert publish_main([str(exp), "--sweep", str(sweep), "--no-figures"]) == 0
    readme = (exp / "README.md").read_text()
    assert "| reward: shaped |" in readme and "| reward: naive |" in readme
    assert not (exp / "results" / "runs" / "other").exists()


def test_compute_table_uses_cpu_minutes_when_every_step_logged_them(tmp_path):
    sweep = _two_reward_sweep(tmp_path / "sweep")
    for m in sweep.rglob("metrics.jsonl"):      # 6 s wall, 3 s CPU per step
        rows = [json.loads(x) for x in m.read_text().splitlines()]
        m.write_text("".join(json.dumps({**r, "step_cpu_s": 3.0}) + "\n" for r in rows))
    exp, summary = _publish(tmp_path / "exp", sweep)
    assert all(c["compute"]["train_cpu_seconds"] == 30.0 and
               c["compute"]["train_seconds"] == 60.0 for c in summary["cells"])
    readme = (exp / "README.md").read_text()
    assert "| training CPU minutes |" in readme
    assert any(x.startswith("| ") and " | 10,000 | 0.5 | " in x for x in readme.splitlines())
