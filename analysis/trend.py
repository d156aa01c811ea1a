"""The exact Jonckheere-Terpstra test of a monotone trend across the ordered levels of one
factor, over the cells' seed means, by permutation of the seeds' cell labels
(analysis.yaml `trend:`); it joins the pre-registered hypotheses' Holm family
(analysis.hypotheses).

    trend: {name: T, factor: reward.weights.wrong, expect: decreasing}

The exact null distribution of the statistic is computed, not sampled: every assignment
of the pooled seed values to the arms (sizes fixed) is equally likely under H0, and a
dynamic programme over the values in ascending order (tied values placed as one block,
each tied pair across arms counting 1/2) counts the assignments giving each value of the
statistic (Jonckheere 1954, Biometrika 41:133; Terpstra 1952, Indag. Math. 14:327; the
exact permutation form with ties as in Hollander, Wolfe & Chicken 2014, Nonparametric
Statistical Methods, 3rd ed., sec. 6.2). Moved here from experiments/penalty_dose/trend.py
(issue 65), which imports it.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction
from functools import lru_cache

import numpy as np

from analysis.errors import AnalysisError

ALPHA = 0.05
EXPECT = ("decreasing", "increasing")


def jt_statistic(groups: list) -> float:
    """J = sum over ordered arm pairs i < j of #(x in arm i < y in arm j) + 1/2 #(ties):
    large when values increase with the arm's order."""
    j = 0.0
    for a, b in itertools.combinations([np.asarray(g, float) for g in groups], 2):
        j += float((a[:, None] < b[None, :]).sum() + 0.5 * (a[:, None] == b[None, :]).sum())
    return j


def jt_null(groups: list) -> dict[Fraction, int]:
    """{value of J: number of assignments of the pooled values to the arms (sizes fixed)
    giving it}; the counts sum to N! / prod(n_i!). Exact, ties included."""
    values = sorted(float(x) for g in groups for x in g)
    blocks = tuple(len(list(run)) for _, run in itertools.groupby(values))
    return dict(_null(tuple(len(g) for g in groups), blocks))


@lru_cache(maxsize=256)
def _null(sizes: tuple, blocks: tuple) -> tuple:
    """The null of `jt_null` for arm sizes and tie blocks (the sizes of the runs of equal
    values, ascending): it depends on nothing else. The values in ascending order, each
    block placed at once: a block of m values split c_1..c_k over the arms adds, to 2J,
    2 c_j x (values already placed in arms before j) for each j, plus c_i c_j for each
    pair of arms i < j (tied pairs count 1/2), in m! / prod(c_j!) ways."""
    k = len(sizes)
    states: dict[tuple, Counter] = {tuple([0] * k): Counter({0: 1})}
    for m in blocks:
        nxt: dict[tuple, Counter] = {}
        for placed, dist in states.items():
            room = [n - p for n, p in zip(sizes, placed)]
            for comp in _compositions(m, room):
                below = 0
                add2 = 0
                for j in range(k):
                    add2 += 2 * comp[j] * below
                    below += placed[j]
                add2 += sum(comp[i] * comp[j] for i in range(k) for j in range(i + 1, k))
                ways = math.factorial(m)
                for c in comp:
                    ways //= math.factorial(c)
                key = tuple(p + c for p, c in zip(placed, comp))
                out = nxt.setdefault(key, Counter())
                for v2, n in dist.items():
                    out[v2 + add2] += n * ways
        states = nxt
    (final,) = states.values()
    return tuple((Fraction(v2, 2), n) for v2, n in sorted(final.items()))


def _compositions(m: int, room: list[int]):
    """Every (c_1..c_k) with sum m and 0 <= c_i <= room_i."""
    if len(room) == 1:
        if m <= room[0]:
            yield (m,)
        return
    for c in range(min(m, room[0]) + 1):
        for rest in _compositions(m - c, room[1:]):
            yield (c, *rest)


def jt_test(groups: list, expect: str = "decreasing") -> dict:
    """The exact Jonckheere-Terpstra test over the arms in their order. p_decreasing:
    P(J <= J_obs) (values fall along the order); p_increasing: P(J >= J_obs); p: the
    two-sided p, 2 x the smaller tail (at most 1). `supported`: p < ALPHA with the trend
    in the `expect`ed direction. Also the null mean and variance of J (checked against
    the no-ties formulas in the tests) and the smallest p the design can give."""
    groups = [np.asarray(g, float) for g in groups]
    if min(len(g) for g in groups) == 0:
        raise ValueError("every arm needs at least one seed")
    obs = Fraction(jt_statistic(groups)).limit_denominator(2)
    null = jt_null(groups)
    total = sum(null.values())
    le = sum(n for v, n in null.items() if v <= obs)
    ge = sum(n for v, n in null.items() if v >= obs)
    v_, w_ = np.array([float(v) for v in null]), np.array([n / total for n in null.values()])
    mean = float((v_ * w_).sum())
    var = float(((v_ - mean) ** 2 * w_).sum())
    tail = min(n for v, n in null.items() if v == max(null)) / total
    p_dec, p_inc = le / total, ge / total
    p = min(1.0, 2 * min(p_dec, p_inc))
    direction = "decreasing" if obs < mean else "increasing" if obs > mean else "none"
    pairs = sum(len(a) * len(b) for a, b in itertools.combinations(groups, 2))
    return {"J": float(obs), "J_decreasing": float(pairs - obs), "pairs": pairs,
            "null_mean": float(mean), "null_var": float(var), "assignments": total,
            "p_decreasing": float(p_dec), "p_increasing": float(p_inc), "p": float(p),
            "p_min": float(min(1.0, 2 * tail)), "direction": direction,
            "expect": expect, "supported": bool(p < ALPHA and direction == expect)}


def from_summary(spec, summary: dict, where: str) -> dict | None:
    """The `trend:` test over the summary's cells: their seed means, the cells ordered by
    the factor's level (numerically where every level is a number); None without a
    spec."""
    if not spec:
        return None
    if not isinstance(spec, dict) or not spec.get("factor") or \
            spec.get("expect", "decreasing") not in EXPECT:
        raise AnalysisError(f"{where}: trend must be {{name: T, factor: KEY, expect: "
                            f"decreasing|increasing}}, got {spec!r}")
    factor = spec["factor"]
    cells = [c for c in summary["cells"] if factor in c["factors"]]
    if len(cells) < 2:
        raise AnalysisError(f"{where}: trend.factor {factor} is not a factor of these runs "
                            f"(factors: {', '.join(summary['factors']) or 'none'})")

    def order(c):
        v = c["factors"][factor]
        return (0, float(v), "") if isinstance(v, (int, float)) else (1, 0.0, str(v))
    cells = sorted(cells, key=order)
    expect = spec.get("expect", "decreasing")
    r = jt_test([c["seed_means"] for c in cells], expect)
    means = [float(np.mean(c["seed_means"])) for c in cells]
    step = np.diff(means) * (1 if expect == "increasing" else -1)
    r["means"] = means                  # the test orders seeds, not the levels' means:
    r["means_monotone"] = bool(np.all(step >= 0))   # said beside it where they are not
    r["highest_level"] = cells[int(np.argmax(means))]["factors"][factor]
    return {"name": str(spec.get("name", "T")), "factor": factor,
            "levels": [c["factors"][factor] for c in cells],
            "cells": [c["label"] for c in cells],
            "seed_means": [c["seed_means"] for c in cells], **r,
            "p_perm": r["p"]}       # exact already: the same p in either decision


def trend_lines(summary: dict) -> list[str]:
    """report.md's section on the `trend:` test: its statistic, exact null and the one p
    quoted (Holm over the pre-registered family)."""
    t = summary.get("trend")
    if not t:
        return []
    from analysis.hypotheses import decision_words
    from analysis.tables import fmt_p
    lv = ", ".join(f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in t["levels"])
    return ["## Pre-registered trend test (analysis.yaml `trend`)", "",
            f"- **{t['name']}**: {t['factor']} over {lv}, expected {t['expect']}: the exact "
            f"Jonckheere-Terpstra test over the {sum(map(len, t['seed_means']))} seed means "
            f"({t['assignments']:.1e} equally likely assignments): "
            f"{t['J_decreasing']:g} of {t['pairs']} cross-cell seed pairs ordered "
            f"decreasing (null mean {t['null_mean']:g}); p = {fmt_p(t['p_decision'])} "
            f"({decision_words(t)}) — **{t['verdict']}** "
            f"(observed trend: {t['direction']}).", ""]
