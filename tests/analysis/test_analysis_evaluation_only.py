"""An evaluation-only design (no training step: fixed weights) is analysed per question:
the sampling streams (seeds) are replicates within a question, the question is the unit
(issue 27, item 1)."""
import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from analysis.collect import collect
from analysis.report import render
from analysis.summary import analyse
from analysis.synthetic import base_config


def _write(root, parser, seed, outcomes):
    d = root / f"parser={parser},seed={seed}"
    d.mkdir(parents=True)
    cfg = base_config(seed)
    cfg["trainer"]["max_steps"] = 0
    cfg["harness"] = {"parser": parser}
    import yaml
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "eval.jsonl").write_text("".join(
        json.dumps({"step": 0, "task_id": f"q{q:02d}", "sample": 0, "hops": 1,
                    "correct": bool(v)}) + "\n" for q, v in enumerate(outcomes)))
    (d / "COMPLETE").write_text("")


@pytest.fixture
def design(tmp_path):
    rng = np.random.default_rng(4)
    p_q = rng.uniform(0.1, 0.9, 40)              # question difficulty
    out = {}
    for parser, shift in (("strict", 0.0), ("lenient", 0.15)):
        for seed in (0, 1):                      # two sampling streams of fixed weights
            x = (rng.random(40) < np.clip(p_q + shift, 0, 1)).astype(int)
            out[(parser, seed)] = x
            _write(tmp_path, parser, seed, x)
    return tmp_path, out


def _wilson(m, n_eff, z):
    centre = (m + z * z / (2 * n_eff)) / (1 + z * z / n_eff)
    half = z / (1 + z * z / n_eff) * math.sqrt(m * (1 - m) / n_eff + z * z / (4 * n_eff ** 2))
    return centre - half, centre + half


def test_cells_and_comparisons_are_binomial_on_questions(design):
    root, out = design
    s = analyse(collect([root]), B=200, baseline={"harness.parser": "strict"})
    assert s["evaluation_only"] and s["unit"] == "question" and s["seed_variance"] is None
    Q = 40
    z = sps.t.ppf(0.975, Q - 1)
    ys = {}
    for c in s["cells"]:
        parser = c["factors"]["harness.parser"]
        y = (out[(parser, 0)] + out[(parser, 1)]) / 2     # per question, both streams
        ys[parser] = y
        m, se = y.mean(), y.std(ddof=1) / math.sqrt(Q)
        assert c["mean"] == pytest.approx(m) and c["se"] == pytest.approx(se)
        assert c["df"] == pytest.approx(Q - 1) and not c["question_noise_only"]
        # the Wilson interval on the questions, effective n = m(1-m)/se^2
        assert c["ci"] == pytest.approx(list(_wilson(m, m * (1 - m) / se ** 2, z)))
        assert c["samples"] == 2 and c["n_seeds"] == 2
    (cmp,) = [r for r in s["comparisons"] if r["kind"] == "cell"]
    d = ys["lenient"] - ys["strict"]
    half = z * d.std(ddof=1) / math.sqrt(Q)
    assert cmp["delta"] == pytest.approx(d.mean())
    assert cmp["ci"] == pytest.approx([d.mean() - half, d.mean() + half])
    assert cmp["p"] == pytest.approx(sps.ttest_rel(ys["lenient"], ys["strict"]).pvalue)
    assert cmp.get("p_perm") is None                  # no seeds to permute: questions
    text = render(s)
    assert "sampling streams of one policy" in text and "The unit is the question" in text


def test_a_spec_flag_overrides_the_detection(design):
    root, _ = design
    s = analyse(collect([root]), B=200, baseline={"harness.parser": "strict"},
                evaluation_only=False)
    assert not s["evaluation_only"] and s["seed_variance"]["pooled"]["df"] == 2
