"""Figures and tables name factors and levels in words (`reward: outcome`, not
`reward=outcome`), an analysis.yaml may give a paper's own names, and every figure comes
with a caption (design, interval level and method, test) and a LaTeX snippet a paper can
\\input (issue 46, items 1 and 4)."""
import json
import re

import pytest

from analysis import cli, figures
from analysis.collect import AnalysisError
from analysis.labels import cell_words, comparison_words, in_words
from analysis.synthetic import write_sweep


def _sweep(tmp_path):
    return write_sweep(tmp_path / "sweep", rewards=("naive", "shaped"), algos=("grpo",),
                       seeds=(0, 1), n_questions=12, steps=(0, 4, 8))


def test_default_words_and_an_analysis_yaml_override(tmp_path):
    sweep = _sweep(tmp_path)
    spec = tmp_path / "analysis.yaml"
    spec.write_text("baseline: {reward.name: shaped}\nB: 200\nnames:\n  factors: "
                    "{reward.name: reward scheme}\n  levels: {reward.name: {naive: "
                    "'-1/0/+1'}}\n")
    out = tmp_path / "report"
    assert cli.main([str(sweep), "--out", str(out), "--spec", str(spec)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["words"]["factors"] == {"reward.name": "reward scheme"}
    cells = [cell_words(summary, c) for c in summary["cells"]]
    assert cells == ["reward scheme: -1/0/+1", "reward scheme: shaped"]
    conf = [c for c in summary["comparisons"] if c["family"] == "confirmatory"]
    assert comparison_words(summary, conf[0]) == "reward scheme: -1/0/+1 vs shaped"
    assert in_words(summary, summary["baseline"]) == "reward scheme: shaped"
    for tex in ("results.tex", "comparisons.tex"):
        text = (out / tex).read_text()
        assert "reward=naive" not in text and "reward scheme" in text
    # every figure: a caption and a snippet with \includegraphics, \caption and \label
    pngs = {p.stem for p in out.glob("*.png")}
    assert pngs and {p.stem.removeprefix("figure_") for p in out.glob("figure_*.tex")} == pngs
    for name in pngs:
        tex = (out / f"figure_{name}.tex").read_text()
        assert f"{name}.pdf}}" in tex and "\\caption{" in tex and f"\\label{{fig:" in tex
        assert "seeds per cell, 12 held-out questions" in tex
    captions = (out / "captions.md").read_text()
    assert "95% t intervals over seeds and questions" in captions
    assert "p < 0.05 (t p, Holm over the" in captions   # the p its tables quote (issue 65)


def test_a_name_for_an_unknown_factor_or_level_is_an_error(tmp_path):
    sweep = _sweep(tmp_path)
    spec = tmp_path / "analysis.yaml"
    spec.write_text("baseline: {reward.name: shaped}\nB: 200\nnames:\n  levels: "
                    "{reward.name: {tool_bonus: bonus}}\n")
    with pytest.raises(AnalysisError, match=r"names.levels.reward.name \['tool_bonus'\]"):
        cli.run([str(sweep), "--out", str(tmp_path / "r"), "--spec", str(spec),
                 "--no-figures"])
    spec.write_text("baseline: {reward.name: shaped}\nnames: {factors: {algo.name: x}}\n")
    with pytest.raises(AnalysisError, match=r"names.factors \['algo.name'\] are not factors"):
        cli.run([str(sweep), "--out", str(tmp_path / "r"), "--spec", str(spec),
                 "--no-figures"])


def test_learning_curve_ticks_are_the_evaluation_steps(tmp_path):
    sweep = _sweep(tmp_path)
    out = tmp_path / "report"
    assert cli.main([str(sweep), "--out", str(out), "--baseline", "reward=shaped",
                     "--B", "200", "--no-figures"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    drawn = figures.learning_curves(summary, tmp_path)
    ticks = [t for ax in drawn["_axes"] for t in ax["texts"] if re.fullmatch(r"\d+", t)]
    assert {"0", "4", "8"} <= set(ticks)                  # x: the evaluation steps
    assert not {"1", "2", "3", "5", "6", "7"} & set(ticks)  # and no others
