"""Issue 65 (and issue 64 item 12): one p value per comparison wherever it is quoted, the
MDE the tests' own errors imply beside the planning one, methods text from the options the
analysis used, captions and pdflatex-safe snippets for every published figure, no empty
figure, the binary per-seed endpoint, and `--out` on a file system that refuses writes."""
from __future__ import annotations

import errno
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from analysis import cli
from analysis.collect import read_config
from analysis.synthetic import write_sweep

REPO = Path(__file__).resolve().parents[2]
REPORTS = sorted(p.parent for p in REPO.glob("experiments/*/results/report/summary.json"))


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep65")
    write_sweep(root, seeds=(0, 1, 2), n_questions=12, effects={("shaped", "dapo"): 1.0})
    return root


def test_out_on_a_read_only_file_system_is_one_line_exit_2(small_sweep, tmp_path,
                                                          monkeypatch, capsys):
    real = Path.mkdir

    def refuse(self, *a, **k):
        if str(self).startswith(str(tmp_path)):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *a, **k)
    monkeypatch.setattr(Path, "mkdir", refuse)
    rc = cli.main([str(small_sweep), "--out", str(tmp_path / "ro"), "--B", "100",
                   "--baseline", "reward=naive,algo=dapo", "--no-figures"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "Read-only file system" in err and "--out" in err and str(tmp_path / "ro") in err


def test_out_under_a_file_is_one_line_exit_2(small_sweep, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    rc = cli.main([str(small_sweep), "--out", str(blocker / "report"), "--B", "100",
                   "--baseline", "reward=naive,algo=dapo", "--no-figures"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "writable directory" in err


# ---------------------------------------------------------------- one p per comparison
def _summary(report: Path) -> dict:
    return json.loads((report / "summary.json").read_text())


@pytest.mark.parametrize("report", REPORTS, ids=[p.parents[1].name for p in REPORTS])
def test_one_p_per_comparison_across_table_report_and_figure(report):
    """Every comparison against the baseline is quoted with one p: the README's headline
    row, the report's cell table and the finding figure's annotation (summary `primary`)
    all hold `p_quoted`; a comparison that is a pre-registered hypothesis' only part is
    quoted with that hypothesis' decision p."""
    from analysis.tables import baseline_comparisons, fmt_p
    s = _summary(report)
    readme = (report.parents[1] / "README.md").read_text()
    rows = [ln for ln in readme.split("<!-- results:begin -->")[1].split(
        "<!-- results:end -->")[0].splitlines() if ln.startswith("| ")]
    md = (report / "report.md").read_text()
    hyps = {h["name"]: h for h in s.get("hypotheses") or []}
    for label, c in baseline_comparisons(s).items():
        if c.get("p_quoted") is None:
            continue
        want = fmt_p(c["p_quoted"])
        from analysis.labels import cell_words
        cell = next(x for x in s["cells"] if x["label"] == label)
        row = next(r for r in rows if r.startswith(f"| {cell_words(s, cell)} |"))
        assert f"| {want}" in row, (label, row)
        assert f"| {want} | {c['verdict']}" in md or f"| {want} |" in md
        if c.get("hypothesis"):
            assert c["p_quoted"] == hyps[c["hypothesis"]]["p_decision"]
    for part in s.get("primary") or []:
        if part.get("kind") == "change":
            continue
        match = [c for c in s["comparisons"] if {c["a_label"], c["b_label"]} ==
                 {part["label"] if "=" in part["label"] else c["a_label"], c["b_label"]}]
        quoted = {c["p_quoted"] for c in s["comparisons"]
                  if c["a"] == part["a"] and c["b"] == part["b"]}
        if quoted and part["source"] == "comparison":
            assert part["p_adj"] in quoted
        if part["source"] in hyps:
            assert part["p_adj"] == hyps[part["source"]]["p_decision"]
        assert match is not None


def test_penalty_dose_quotes_h1_once():
    """The issue's case: lambda 4 vs 0 was 0.706 (finding.png), 0.807 (README findings)
    and 1.000 (README table). Now the exact permutation p Holm-adjusted with the trend
    test, as pre-registered, everywhere; the trend test's Holm p likewise."""
    exp = REPO / "experiments" / "penalty_dose"
    s = _summary(exp / "results" / "report")
    c = next(c for c in s["comparisons"] if c["a_label"] == "reward.weights.wrong=4")
    h = s["hypotheses"][0]
    assert h["decided_by"] == "permutation" and h["family"] == ["T", "H1"]
    assert c["p_quoted"] == h["p_decision"] == pytest.approx(0.807359, abs=1e-6)
    assert s["trend"]["p_decision"] == pytest.approx(0.016819, abs=1e-6)
    readme = (exp / "README.md").read_text()
    assert "0.706" not in readme and "| 0.807 (H1) | inconclusive |" in readme
    assert "p = 0.807" in readme and "p = 0.017" in readme and "p = 0.008" not in readme
    trend_json = json.loads((exp / "results" / "report" / "trend.json").read_text())
    assert trend_json["primary"]["pair"]["p_holm"] == h["p_decision"]
    assert trend_json["primary"]["trend"]["p_holm"] == s["trend"]["p_decision"]


# the names templates may quote a raw .p of: not comparisons (probabilities of the
# sizing, secondary per-class trend tests, a change's paired test, hk2's own summary, the
# endpoint's rank test of the seeds without the outcome: a comparison of its own;
# collapse_rate's pre-registered secondary rank tests, named as such beside the t test)
NOT_COMPARISONS = {"hops1", "hops2", "accuracy_hops1", "accuracy_hops2", "submitted",
                   "submitted_hops1", "submitted_hops2", "dG", "Kv", "Km", "kS", "subset",
                   "ranks_all", "ranks_kept"}


def test_templates_quote_comparisons_only_through_p_quoted():
    """No findings template prints a comparison's unadjusted t p, its raw permutation p or
    another family's adjusted p beside the one its tables quote."""
    tpls = [*REPO.glob("experiments/*/findings*.md"), *REPO.glob("experiments/*.md"),
            *REPO.glob("docs/findings/*.j2")]
    quoted = re.compile(r"(\{\{[^}]*?|pe\()\b(\w+)\.(p|p_perm|p_holm|p_perm_holm|p_adj)"
                        r"\s*(\||\)|\}\})")     # printed (a filter, pe(), }}), not compared
    bad = [(t.name, m.group(2), m.group(3)) for t in tpls for m in quoted.finditer(t.read_text())
           if m.group(2) not in NOT_COMPARISONS]
    assert bad == []


# ---------------------------------------------------------------- MDE and methods text
def test_mde_at_the_tests_own_errors_beside_the_planning_one():
    """penalty_dose's tests used each arm's own seed variance: the MDE their SE and df
    imply (28-29 points) stands beside the planning MDE from pooled components (19.7)."""
    from analysis.stats import mde
    exp = REPO / "experiments" / "penalty_dose"
    s = _summary(exp / "results" / "report")
    for c in s["comparisons"]:
        assert c["mde_observed"] == pytest.approx(float(mde(c["se"], c["df"])), rel=1e-12)
        assert 0.28 < c["mde_observed"] < 0.30 and c["mde"] == pytest.approx(0.197, abs=1e-3)
    readme = (exp / "README.md").read_text()
    assert "19.7 points" in readme and "28.4, 29.2, 28.6 points" in readme


@pytest.mark.parametrize("report", REPORTS, ids=[p.parents[1].name for p in REPORTS])
def test_methods_text_names_the_variance_model_the_analysis_used(report):
    s = _summary(report)
    md = (report / "report.md").read_text()
    if s.get("evaluation_only") or not s.get("seed_variance"):
        return
    pooled = "one seed variance pooled over the cells of the design"
    own = "each cell's own seed variance (Welch-type contrasts"
    if s["seed_variance"]["model"] == "pooled":
        assert pooled in md and own not in md
    else:
        assert own in md and pooled not in md


def test_methods_text_follows_the_option(small_sweep, tmp_path):
    for model, words in (("welch", "each cell's own seed variance"),
                         ("pooled", "one seed variance pooled over the cells")):
        out = tmp_path / model
        assert cli.main([str(small_sweep), "--out", str(out), "--B", "100", "--baseline",
                         "reward=naive,algo=dapo", "--no-figures", "--seed-variance",
                         model]) == 0
        intro = (out / "report.md").read_text().split("## ")[0]
        assert words in intro


# ---------------------------------------------------------------- figures
PNGS = sorted(p for p in REPO.glob("experiments/**/*.png") if "results/runs" not in str(p))


@pytest.mark.parametrize("png", PNGS, ids=[str(p.relative_to(REPO / "experiments")) for p in PNGS])
def test_every_published_figure_has_a_caption_and_a_snippet(png):
    snippet = png.parent / f"figure_{png.stem}.tex"
    assert snippet.is_file(), f"{png}: no {snippet.name}"
    text = snippet.read_text()
    assert "\\caption{" in text and f"{png.stem}.pdf" in text
    caption = text.split("\\caption{", 1)[1]
    assert len(caption.split()) >= 12          # a caption, not a title


def _outside_math(tex: str) -> str:
    return re.sub(r"(?<!\\)\$[^$]*(?<!\\)\$", "", tex)


TEXS = sorted(p for p in REPO.glob("experiments/**/*.tex") if "results/runs" not in str(p))


def test_every_tex_snippet_is_plain_pdflatex_safe(tmp_path):
    """Compiled with pdflatex where it exists; else no character outside ASCII outside
    math (a raw λ or − stops plain pdflatex)."""
    bad = [(str(t.relative_to(REPO)), sorted({c for c in _outside_math(t.read_text())
                                              if ord(c) > 127}))
           for t in TEXS]
    assert [b for b in bad if b[1]] == []
    if shutil.which("pdflatex") is None:
        return
    for t in [t for t in TEXS if t.name.startswith("figure_")]:
        doc = tmp_path / "doc.tex"        # graphicx's demo option: boxes, no image files
        doc.write_text("\\documentclass{article}\\usepackage[demo]{graphicx}"
                       "\\begin{document}" + t.read_text() + "\\end{document}")
        done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "doc.tex"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (t, done.stdout[-800:])


def test_tex_escape_keeps_non_ascii_out_of_text():
    from analysis.tables import tex_escape
    got = tex_escape("λ = 4 vs λ = 0: −3.4 [σ² 5%] “x” ✓")
    assert got == "$\\lambda$ = 4 vs $\\lambda$ = 0: $-$3.4 [$\\sigma$$^{2}$ 5\\%] ``x'' ?"
    assert all(ord(c) < 128 for c in got)


def _drawn(png: Path) -> bool:
    """Something besides black axes and text: every figure draws its data in colour, an
    empty plot (enronhop_rewards' sizing forest had no comparison to draw) has none."""
    import matplotlib.image as mpimg
    img = mpimg.imread(png)[..., :3]
    ink = float((img.mean(axis=2) < 0.9).mean())
    coloured = float((img.std(axis=2) > 0.08).mean())
    return ink > 0.01 and coloured > 1e-4


def test_the_empty_check_catches_an_empty_plot(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.set_xlabel("difference in held-out accuracy (points)")
    ax.set_title("thick: 95% t intervals; thin: simultaneous")
    fig.savefig(tmp_path / "empty.png")
    ax.plot([0, 1], [0, 1], color="#0072B2")
    fig.savefig(tmp_path / "drawn.png")
    plt.close(fig)
    assert not _drawn(tmp_path / "empty.png") and _drawn(tmp_path / "drawn.png")


@pytest.mark.parametrize("png", PNGS, ids=[str(p.relative_to(REPO / "experiments")) for p in PNGS])
def test_no_published_figure_is_empty(png):
    assert _drawn(png), png


def test_forest_is_not_drawn_without_comparisons(tmp_path):
    from analysis.figures import forest
    s = {"comparisons": [{"family": "confirmatory", "delta": None, "ci": None}],
         "metric": "correct", "cells": []}
    (tmp_path / "forest.png").write_text("old")
    assert forest(s, tmp_path) == {} and not (tmp_path / "forest.png").exists()


@pytest.mark.parametrize("report", REPORTS, ids=[p.parents[1].name for p in REPORTS])
def test_every_factor_is_named_in_words(report):
    from analysis.labels import FACTOR_WORDS
    s = _summary(report)
    spec = report.parents[1] / "analysis.yaml"
    from analysis.collect import read_config
    names = (read_config(spec).get("names") or {}).get("factors") or {}
    assert [f for f in s["factors"] if f not in FACTOR_WORDS and f not in names] == []


# ---------------------------------------------------------------- the binary endpoint
def test_clopper_pearson_covers_by_simulation_and_matches_known_values():
    """Known values (0 of 30: [0, 0.116]; 1 of 6: [0.0042, 0.6412]) and coverage of at
    least 95% at several true rates, by simulation (exact intervals are conservative)."""
    from analysis.endpoint import clopper_pearson
    assert clopper_pearson(0, 30) == pytest.approx([0.0, 0.11570], abs=1e-5)
    assert clopper_pearson(1, 6) == pytest.approx([0.004211, 0.641235], abs=1e-6)
    rng = np.random.default_rng(1)
    cis = {k: clopper_pearson(k, 30) for k in range(31)}
    for p in (0.02, 0.2, 0.5):
        ks = rng.binomial(30, p, 4000)
        cover = np.mean([cis[k][0] <= p <= cis[k][1] for k in ks])
        assert cover >= 0.95 - 3 * (0.05 * 0.95 / 4000) ** 0.5, (p, cover)


def test_fisher_keeps_its_level_and_has_the_designs_power():
    """One-sided Fisher at 30 vs 30 seeds: under equal rates it rejects at most 5% (by
    simulation); 5 of 30 vs 0 of 30 is the smallest significant split (4 of 30 is not);
    at true rates 20% vs 0% its power is about 0.74 (experiments/collapse_rate)."""
    from analysis.endpoint import fisher
    assert fisher(0, 30, 5, 30, "less") < 0.05 < fisher(0, 30, 4, 30, "less")
    rng = np.random.default_rng(2)
    table = {(a, b): fisher(a, 30, b, 30, "less") for a in range(31) for b in range(31)}
    for p in (0.1, 0.3):
        a, b = rng.binomial(30, p, 3000), rng.binomial(30, p, 3000)
        level = np.mean([table[x, y] < 0.05 for x, y in zip(a, b)])
        assert level <= 0.05 + 3 * (0.05 * 0.95 / 3000) ** 0.5, (p, level)
    a = np.zeros(3000, int)
    b = rng.binomial(30, 0.2, 3000)
    power = np.mean([table[x, y] < 0.05 for x, y in zip(a, b)])
    assert abs(power - 0.74) < 0.03, power


def _run(seed, idk_share, quiet_last, steps=8):
    from types import SimpleNamespace
    n = 10
    rows = [{"step": 8, "task_id": f"q{i}", "end_reason": "answer",
             "answered": i >= round(idk_share * n), "correct": False} for i in range(n)]
    metrics = [{"step": s, "mixed_groups": 0.0 if s > steps - quiet_last else 0.5,
                "answered": 0.0 if s > steps - quiet_last else 0.5}
               for s in range(1, steps + 1)]
    return SimpleNamespace(seed=seed, eval_rows=lambda: rows, metrics_rows=lambda: metrics)


def test_endpoint_counts_seeds_by_either_rule():
    """A seed collapses by the held-out rule (more than half "I don't know"), by the
    training rule (no mixed group and no answer in each of the last 4 steps) or both; 3
    quiet steps or exactly half "I don't know" is not a collapse."""
    from types import SimpleNamespace
    from analysis.endpoint import seed_outcomes
    spec = {"any": [{"eval": "idk", "above": 0.5},
                    {"train": ["mixed_groups", "answered"], "at_most": 0.0, "last": 4}]}
    cell = SimpleNamespace(runs=[_run(0, 0.6, 0), _run(1, 0.5, 4), _run(2, 0.5, 3),
                                 _run(3, 0.9, 8), _run(4, 0.0, 0)])
    got = seed_outcomes(cell, spec, lambda run: 8)
    assert [(g["seed"], g["outcome"], g["rules"]) for g in got] == [
        (0, True, [0]), (1, True, [1]), (2, False, []), (3, True, [0, 1]), (4, False, [])]


def test_published_endpoint_tables_are_marked_added_after_the_results():
    for name, k0 in (("penalty_dose", 1), ("naive_trap", 1)):
        exp = REPO / "experiments" / name
        e = _summary(exp / "results" / "report")["endpoint"]
        assert e["added"].startswith("after the results")
        base = e["cells"][0]
        assert base["k"] == k0 and base["ci"] == pytest.approx(
            __import__("analysis.endpoint", fromlist=["x"]).clopper_pearson(k0, base["n"]))
        readme = (exp / "README.md").read_text()
        assert "Added after the results (issue 65" in readme


def test_collapse_rate_is_published_as_pre_registered():
    """Issue 65: 30 seeds per arm; per arm the collapse count, rate and exact interval;
    the pre-registered one-sided Fisher test is the p quoted; the pre-registration commit
    precedes the code the rows ran (and, where the history is there, the first row)."""
    from analysis.endpoint import clopper_pearson, fisher
    exp = REPO / "experiments" / "collapse_rate"
    s = _summary(exp / "results" / "report")
    e = s["endpoint"]
    assert e.get("added") is None and e["expect"] == "less" and e["name"] == "collapsed"
    cells = {c["label"]: c for c in e["cells"]}
    base, pen = cells["reward.weights.wrong=0"], cells["reward.weights.wrong=0.25"]
    for c in (base, pen):
        assert c["n"] == 30 and c["rate"] == c["k"] / 30
        assert c["ci"] == pytest.approx(clopper_pearson(c["k"], 30))
        assert len(c["seeds"]) == c["k"]
    (cmp,) = e["comparisons"]
    assert cmp["p_quoted"] == pytest.approx(fisher(pen["k"], 30, base["k"], 30, "less"))
    spec = read_config(exp / "analysis.yaml")
    codes = {json.loads(p.read_text())["commit"][:7]
             for p in (exp / "results" / "runs").rglob("code.json")}
    assert codes == {"7e3e9d0"}
    git = ["git", "-C", str(REPO)]
    if subprocess.run([*git, "cat-file", "-e", f"{spec['preregistration']}^{{commit}}"],
                      capture_output=True).returncode:
        pytest.skip("no git history here")
    ancestor = [*git, "merge-base", "--is-ancestor", str(spec["preregistration"])]
    assert subprocess.run([*ancestor, "7e3e9d0"]).returncode == 0
    first_rows = subprocess.run([*git, "log", "--format=%h", "--diff-filter=A", "--",
                                 "experiments/collapse_rate/grid_partial"],
                                capture_output=True, text=True).stdout.split()
    assert first_rows and subprocess.run([*ancestor, first_rows[-1]]).returncode == 0
