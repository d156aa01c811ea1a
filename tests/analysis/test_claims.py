"""README claims are rendered from summary.json (analysis/claims.py): a template names
quantities, never types a number; the committed READMEs equal their rendering."""
from __future__ import annotations

import json

import pytest

from analysis import claims
from analysis.collect import AnalysisError


def _experiment(tmp_path, template: str, readme_extra: str = "") -> tuple:
    exp = tmp_path / "experiments" / "demo"
    (exp / "results" / "report").mkdir(parents=True)
    summary = {"metric": "answered",
               "cells": [{"label": "reward=naive", "mean": 0.2647, "ci": [0.164, 0.398]},
                         {"label": "reward=shaped", "mean": 0.695, "ci": [0.564, 0.801]}],
               "comparisons": [{"a_label": "reward=shaped", "family": "confirmatory",
                                "kind": "cell", "delta": 0.4301, "ci": [0.268, 0.592],
                                "p_perm": 0.0079}],
               "hypotheses": [{"name": "H1", "verdict": "supported"}]}
    (exp / "results" / "report" / "summary.json").write_text(json.dumps(summary))
    (exp / "analysis.yaml").write_text("metric: answered\nquantities: {endings: endings.json}\n")
    (exp / "endings.json").write_text(json.dumps({"seed0": {"first_turn_idk": 191, "n": 272}}))
    (exp / "findings.md").write_text(template)
    md = exp / "README.md"
    md.write_text(f"# demo\n\n## Results\n\n<!-- findings:begin findings.md -->\nold\n"
                  f"<!-- findings:end -->\n{readme_extra}")
    return md, {"demo": claims.experiment_names(exp)}


def test_a_template_renders_named_quantities_with_their_filters(tmp_path):
    md, exps = _experiment(tmp_path, (
        "Naive submits {{ cell['reward=naive'].mean | pct }}% "
        "{{ cell['reward=naive'].ci | pci }}; shaped {{ vs['reward=shaped'].delta | spct }} "
        "{{ vs['reward=shaped'].ci | spci }} points (exact p = {{ vs['reward=shaped'].p_perm "
        "| p }}), H1 {{ H.H1.verdict }}; seed 0 says so at once in "
        "{{ (q.endings.seed0.first_turn_idk / q.endings.seed0.n) | pct }}% "
        "({{ q.endings.seed0.first_turn_idk }}/{{ q.endings.seed0.n }}).\n"))
    out = claims.render_file(md, exps)
    assert ("Naive submits 26.5% [16.4, 39.8]; shaped +43.0 [+26.8, +59.2] points "
            "(exact p = 0.008), H1 supported; seed 0 says so at once in 70.2% (191/272).") in out
    assert "old" not in out
    assert out.count("<!-- findings:begin findings.md -->") == 1
    md.write_text(out)
    assert claims.render_file(md, exps) == out          # rendering is idempotent


def test_an_unknown_quantity_is_one_line_naming_the_template(tmp_path):
    md, exps = _experiment(tmp_path, "{{ cell['reward=naive'].median | pct }}\n")
    with pytest.raises(AnalysisError, match=r"findings\.md: .*median"):
        claims.render_file(md, exps)


@pytest.mark.parametrize("template, match", [
    ("{% if x %}\nno end\n", r"findings\.md:2: Unexpected end of template"),   # syntax
    ("{{ 1 / 0 }}\n", r"findings\.md: ZeroDivisionError"),
    ("{{ 'x' | num }}\n", r"findings\.md: ValueError")])
def test_a_broken_template_is_one_line_naming_it(tmp_path, template, match):
    md, exps = _experiment(tmp_path, template)
    with pytest.raises(AnalysisError, match=match) as err:
        claims.render_file(md, exps)
    assert "\n" not in str(err.value)


def test_whole_and_sci_leave_jinjas_int_alone(tmp_path):
    md, exps = _experiment(tmp_path, "{{ 1234.6 | whole }} {{ 0.000123 | sci }} "
                                     "{{ (2.7 | int) + 1 }}\n")
    assert "1,235 1.2e-04 3" in claims.render_file(md, exps)


def test_a_missing_template_is_named(tmp_path):
    md, exps = _experiment(tmp_path, "x\n")
    md.write_text(md.read_text().replace("findings.md -->", "nope.md -->"))
    with pytest.raises(AnalysisError, match="nope.md does not exist"):
        claims.render_file(md, exps)


@pytest.mark.parametrize("md", claims.default_files(), ids=lambda p: str(p.relative_to(claims.ROOT)))
def test_every_committed_readme_equals_its_rendering(md):
    """A README number differs from summary.json only if someone edited the block by
    hand or republished without rendering: both fail here."""
    assert claims.render_file(md) == md.read_text(), \
        f"{md}: run `python -m analysis.claims` (or publish the experiment)"
