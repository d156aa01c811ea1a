"""analysis.export copies a sweep's analysis inputs; the analysis of the copy gives the
same numbers as the analysis of the sweep (what experiments' committed results rely on)."""
from __future__ import annotations

import json

from analysis import cli
from analysis.export import export, main
from analysis.synthetic import write_sweep


def test_export_keeps_inputs_and_numbers(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive", "shaped"), algos=("grpo",),
                        seeds=(0, 1), n_questions=12)
    runs = sorted(p for p in sweep.iterdir() if p.is_dir())
    (runs[0] / "ckpt").mkdir()
    (runs[0] / "ckpt" / "model.pt").write_bytes(b"x" * 10)
    (runs[0] / "trajectories.txt").write_text("long\n")
    assert main([str(sweep), str(tmp_path / "copy")]) == 0
    copied = sorted((tmp_path / "copy").iterdir())
    assert [p.name for p in copied] == [p.name for p in runs]
    assert sorted(f.name for f in copied[0].iterdir()) == ["COMPLETE", "config.yaml",
                                                          "eval.jsonl", "metrics.jsonl"]
    for a, b in ((sweep, "orig"), (tmp_path / "copy", "copy")):
        assert cli.main([str(a), "--out", str(tmp_path / b), "--no-figures", "--B", "200",
                         "--baseline", "reward.name=shaped"]) == 0
    orig, copy = (json.loads((tmp_path / n / "summary.json").read_text())
                  for n in ("orig", "copy"))
    assert [c["mean"] for c in orig["cells"]] == [c["mean"] for c in copy["cells"]]
    assert orig["comparisons"] == copy["comparisons"]


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


def test_change_from_first_evaluation_is_paired_by_seed_and_question(tmp_path):
    """summary.json's per-cell change equals the hand-computed mean of each seed's
    per-question (last - first), and the report prints it."""
    import numpy as np
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive", "shaped"), algos=("grpo",),
                        seeds=(0, 1, 2), n_questions=20, steps=(0, 5, 10))
    assert cli.main([str(sweep), "--out", str(tmp_path / "o"), "--no-figures", "--B", "200",
                     "--baseline", "reward.name=shaped"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    for cell in summary["cells"]:
        per_seed = []
        for run in cell["runs"]:
            rows = [json.loads(x) for x in open(f"{run}/eval.jsonl")]
            by = {}
            for r in rows:
                by.setdefault((r["step"], r["task_id"]), []).append(float(r["correct"]))
            qs = sorted({t for _, t in by})
            per_seed.append([np.mean(by[(10, q)]) - np.mean(by[(0, q)]) for q in qs])
        ch = cell["change"]["correct"]
        assert ch["from_step"] == [0]
        assert abs(ch["mean"] - float(np.mean(per_seed))) < 1e-12
        assert ch["ci"][0] < ch["mean"] < ch["ci"][1]
        assert "answer_rate" in cell["change"]
    report = (tmp_path / "o" / "report.md").read_text()
    assert "## Change from the first evaluation" in report


def test_publish_regenerates_report_and_readme_headline(tmp_path, capsys):
    from analysis.publish import BEGIN, END
    from analysis.publish import main as publish_main
    from analysis.tables import fmt
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive", "shaped"), algos=("grpo",),
                        seeds=(0, 1), n_questions=10, steps=(0, 10))
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "analysis.yaml").write_text("baseline: {reward.name: shaped}\nB: 200\n")
    (exp / "README.md").write_text(f"# exp\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    argv = [str(exp), "--sweep", str(sweep), "--no-figures"]
    assert publish_main(argv) == 0
    summary = json.loads((exp / "results" / "report" / "summary.json").read_text())
    readme = (exp / "README.md").read_text()
    assert "old" not in readme and readme.endswith(f"{END}\n\nafter\n")
    for c in summary["cells"]:
        row = next(x for x in readme.splitlines() if x.startswith(f"| {c['short_label']} |"))
        assert f"| {fmt(c['mean'])} " in row
        assert fmt(c["change"]["correct"]["mean"], True, True) in row
    for c in summary["cells"]:                # 10 steps x 1,000 tokens x 6 s per seed
        assert c["compute"] == {"generated_tokens": 10000.0, "train_seconds": 60.0,
                                "n_seeds": 2}
        pts = 100 * c["change"]["correct"]["mean"]
        row = next(x for x in readme.splitlines()
                   if x.startswith(f"| {c['short_label']} | 10,000 | 1.0 | {pts:+.1f} |"))
        if pts > 0:
            assert row.endswith(f"| {10000 / pts:,.0f} | {1 / pts:.2f} |")
    assert publish_main([str(exp), "--no-figures"]) == 0      # from the committed copy
    assert (exp / "README.md").read_text() == readme
    (exp / "README.md").write_text("# no markers\n")
    assert publish_main([str(exp), "--no-figures"]) == 2
    assert "no <!-- results:begin --> ... <!-- results:end --> markers" in capsys.readouterr().err
