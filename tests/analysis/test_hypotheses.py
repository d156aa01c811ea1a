"""Pre-registered composite hypotheses with a stated joining rule (analysis/hypotheses.py;
issue 27 item 1): intersection-union for `all`, Bonferroni union-intersection for `any`,
Holm across the listed hypotheses; checked by hand and by simulation."""
import json

import numpy as np
import pytest
from scipy import stats

from analysis.cli import main as analysis_main
from analysis.errors import AnalysisError
from analysis.hypotheses import evaluate, joint_p
from analysis.synthetic import write_sweep


def _cmp(a, delta, p, p_perm=None, b="shaped"):
    return {"a": {"reward.name": a}, "b": {"reward.name": b}, "label": f"reward={a}",
            "vs": f"reward={b}", "delta": delta, "ci": [delta - 0.1, delta + 0.1], "p": p,
            "p_perm": p_perm}


SUMMARY = {"alpha": 0.05, "baseline": {"reward.name": "shaped"},
           "comparisons": [_cmp("naive", -0.20, 0.010, 0.10),
                           _cmp("outcome", 0.05, 0.030, 0.20)]}


def _part(p, ok=True):
    return {"p": p, "direction_ok": ok}


def test_joining_rules_by_hand():
    assert joint_p([_part(0.01), _part(0.04)], "all") == 0.04          # the largest
    assert joint_p([_part(0.01), _part(0.04, ok=False)], "all") == 1.0  # a part against
    assert joint_p([_part(0.01), _part(0.04)], "any") == pytest.approx(0.02)   # 2 x min
    assert joint_p([_part(0.01, ok=False), _part(0.04)], "any") == pytest.approx(0.08)
    assert joint_p([_part(0.3), _part(0.4)], "any") == pytest.approx(0.6)
    assert joint_p([_part(None), _part(0.4)], "all") is None


def test_evaluate_matches_flips_and_holm_adjusts():
    spec = [{"name": "H1", "join": "all", "parts": [
                {"cell": {"reward.name": "naive"}, "expect": "less"},
                {"cell": {"reward.name": "outcome"}, "expect": "greater"}]},
            {"name": "H2", "parts": [   # stored as naive vs shaped: flipped
                {"cell": {"reward.name": "shaped"}, "vs": {"reward.name": "naive"},
                 "expect": "greater"}]}]
    h1, h2 = evaluate(spec, SUMMARY, "analysis.yaml")
    assert h1["p"] == 0.030 and h2["p"] == 0.010
    assert h2["parts"][0]["delta"] == pytest.approx(0.20)
    assert h2["parts"][0]["ci"] == pytest.approx([0.10, 0.30])
    assert h2["parts"][0]["label"] == "reward=shaped"
    # Holm over the family of two: 0.010 x 2 = 0.020, then max(0.020, 0.030 x 1) = 0.030
    assert h2["p_holm"] == pytest.approx(0.020) and h1["p_holm"] == pytest.approx(0.030)
    assert h1["verdict"] == h2["verdict"] == "supported"
    # the permutation p: H1 max(0.10, 0.20) = 0.20, H2 0.10; Holm 0.20, 0.20
    assert h1["p_perm_holm"] == pytest.approx(0.20) and h2["p_perm_holm"] == pytest.approx(0.20)


def test_a_part_against_its_prediction_is_not_supported():
    spec = [{"name": "H", "join": "all", "parts": [
        {"cell": {"reward.name": "naive"}, "expect": "greater"}]}]
    (h,) = evaluate(spec, SUMMARY, "analysis.yaml")
    assert h["p"] == 1.0 and h["verdict"] == "not supported"
    assert h["parts"][0]["direction_ok"] is False


@pytest.mark.parametrize("spec, words", [
    ([{"name": "H", "parts": [{"cell": {"reward.name": "dapo"}, "expect": "less"}]}],
     "hypotheses[0].parts[0]: no comparison of {'reward.name': 'dapo'}"),
    ([{"name": "H", "join": "both", "parts": [{"cell": {"a": 1}, "expect": "less"}]}],
     "hypotheses[0].join is 'both'; allowed: all, any"),
    ([{"name": "H", "parts": [{"cell": {"reward.name": "naive"}, "expect": "lower"}]}],
     "hypotheses[0].parts[0].expect is 'lower'; allowed: greater, less"),
    ({"name": "H"}, "hypotheses must be a list"),
])
def test_bad_specs_are_one_line_errors(spec, words):
    with pytest.raises(AnalysisError) as e:
        evaluate(spec, SUMMARY, "analysis.yaml")
    assert words in str(e.value) and "\n" not in str(e.value)


def _rates(n, effects, rng):
    """Two-sided z-test p-values and signs of parts with the given true effects (SE 1)."""
    z = rng.standard_normal((n, len(effects))) + np.asarray(effects)
    return 2 * stats.norm.sf(np.abs(z)), z > 0


@pytest.mark.parametrize("effects", [(0.0, 0.0), (0.0, 6.0), (6.0, 0.0)])
def test_intersection_union_holds_its_level_on_the_union_null(effects):
    """`all` is wrongly supported at most alpha of the time when any part is null, with
    no adjustment inside (Berger 1982); simulated, 20,000 draws."""
    p, pos = _rates(20_000, effects, np.random.default_rng(0))
    rejected = [joint_p([{"p": a, "direction_ok": bool(s)} for a, s in zip(row, sg)],
                        "all") < 0.05 for row, sg in zip(p, pos)]
    assert np.mean(rejected) <= 0.05 * 0.5 + 0.006   # a directional part: alpha/2


def test_union_intersection_holds_its_level_on_the_global_null():
    p, pos = _rates(20_000, (0.0, 0.0, 0.0), np.random.default_rng(1))
    rejected = [joint_p([{"p": a, "direction_ok": bool(s)} for a, s in zip(row, sg)],
                        "any") < 0.05 for row, sg in zip(p, pos)]
    assert 0.015 < np.mean(rejected) <= 0.05 / 2 + 0.006


def test_cli_reports_hypotheses(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive", "shaped", "outcome"),
                        algos=("grpo",), seeds=(0, 1, 2), n_questions=8, steps=(0, 2))
    spec = tmp_path / "analysis.yaml"
    spec.write_text("baseline: {reward.name: shaped}\nB: 200\nhypotheses:\n"
                    "  - name: H1\n    join: any\n    parts:\n"
                    "      - {cell: {reward.name: naive}, expect: less}\n"
                    "      - {cell: {reward.name: outcome}, expect: greater}\n")
    out = tmp_path / "out"
    assert analysis_main([str(sweep), "--spec", str(spec), "--out", str(out),
                          "--no-figures"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    (h,) = summary["hypotheses"]
    parts = {q["label"]: q for q in h["parts"]}
    comps = {c["label"]: c for c in summary["comparisons"]}
    ok = [q["p"] for q in parts.values() if q["direction_ok"]]
    assert h["p"] == (pytest.approx(min(1.0, 2 * min(ok))) if ok else 1.0)
    assert parts["reward=naive"]["delta"] == comps["reward=naive"]["delta"]
    assert "## Pre-registered hypotheses" in (out / "report.md").read_text()
    rows = (out / "hypotheses.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("hypothesis,join,part")
    assert "tab:hypotheses" in (out / "hypotheses.tex").read_text()
    mde = (out / "mde.csv").read_text().splitlines()[0].split(",")
    assert mde[:4] == ["seeds", mde[1], mde[1] + "_lo", mde[1] + "_hi"]
