"""Equivalence tests of paired differences (analysis.stats.paired_tost, sign_flip_tost),
checked by simulation against known truths: at a true mean difference on the margin
each claims equivalence at most alpha of the time; at a true difference of 0 with a
standard error well inside the margin they claim it nearly always; the t version's
interval is the 90% t interval."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from analysis.stats import paired_tost, sign_flip_tost


@pytest.mark.parametrize("true", [5.0, -5.0])
def test_at_the_margin_equivalence_is_claimed_at_most_alpha_of_the_time(true):
    rng = np.random.default_rng(0)
    draws = rng.normal(true, 4.0, size=(2000, 8))
    t_rate = np.mean([paired_tost(d, 5.0)["equivalent"] for d in draws])
    perm_rate = np.mean([sign_flip_tost(d, 5.0)["equivalent"] for d in draws[:600]])
    assert 0.02 < t_rate < 0.075        # alpha 0.05 at the boundary (normal data)
    assert perm_rate <= 0.075


def test_with_no_difference_and_small_noise_equivalence_is_claimed():
    rng = np.random.default_rng(1)
    draws = rng.normal(0.0, 3.7, size=(1000, 8))
    # SE 1.3: the half-width t_{.95,7} SE = 2.5, inside 5 unless |mean| > 2.5 (~5%)
    assert np.mean([paired_tost(d, 5.0)["equivalent"] for d in draws]) > 0.9
    assert np.mean([sign_flip_tost(d, 5.0)["equivalent"] for d in draws[:300]]) > 0.8


def test_interval_and_p_values_are_the_textbook_ones():
    d = np.array([1.0, -2.0, 0.5, 3.0, -1.0, 0.0, 2.0, -0.5])
    r = paired_tost(d, 5.0)
    se = d.std(ddof=1) / np.sqrt(8)
    h = sps.t.ppf(0.95, 7) * se
    assert r["ci"] == pytest.approx([d.mean() - h, d.mean() + h])
    assert r["p"] == pytest.approx(max(sps.t.sf((d.mean() + 5) / se, 7),
                                       sps.t.cdf((d.mean() - 5) / se, 7)))
    assert r["equivalent"] and r["ci_level"] == pytest.approx(0.9)
    exact = sign_flip_tost(d, 5.0)
    assert exact["min_p"] == 1 / 256 and exact["p"] == pytest.approx(1 / 256)  # all below
