"""Linear contrasts of cell means on the questions every cell in the contrast evaluated:
cell means, paired differences and factor main effects, with the t interval, p-value
and planning MDE of analysis.stats, and simultaneous intervals for a family."""
from __future__ import annotations

import math

import numpy as np

from analysis import stats as st
from analysis.estimates import CellData


def shared(data: list[CellData], idx) -> list:
    """Questions evaluated by every cell in idx (sorted as in the first)."""
    common = set(data[idx[0]].questions)
    for k in idx[1:]:
        common &= set(data[k].questions)
    return [q for q in data[idx[0]].questions if q in common]


def rows_of(d: CellData, questions: list) -> np.ndarray:
    pos = {q: i for i, q in enumerate(d.questions)}
    return d.y[[pos[q] for q in questions]]


def evaluate(data: list[CellData], coefs: dict, alpha: float = 0.05,
             questions: list | None = None, pooled: st.Pool | None = None) -> dict:
    """Estimate, SE, df, 1 - alpha t interval and p of sum_k c_k mean_k on the shared
    questions (or on `questions`), the seed term from the design's `pooled` seed
    variance when given; inferential=False when a cell has one seed (then p is None and
    the interval is question-only), unless every cell's replicate is the question (an
    evaluation-only design: CellData.unit)."""
    idx = list(coefs)
    qs = shared(data, idx) if questions is None else questions
    if not qs:
        return {"estimate": None, "n_questions": 0, "inferential": False}
    ys = [rows_of(data[k], qs) for k in idx]
    e = st.contrast(ys, [coefs[k] for k in idx], pooled=pooled)
    est, se, df = float(e.estimate), float(e.se), float(e.df)
    lo, hi = st.interval(est, se, df, alpha)
    inferential = e.inferential or all(data[k].unit == "question" for k in idx)
    p = float(st.p_value(est, se, df)) if inferential else None
    return {"estimate": est, "se": se, "df": df, "ci": [float(lo), float(hi)],
            "p": None if p is None or math.isnan(p) else p, "n_questions": len(qs),
            "inferential": inferential, "seed_df": e.seed_df}


def simultaneous(results: list[dict], data: list[CellData], base: int, alpha: float,
                 B: int, rng_seed: int, pooled: st.Pool | None = None
                 ) -> list[list[float]] | None:
    """Single-step max-|t| simultaneous intervals for comparisons cell_i - base on one
    shared question set (Hothorn, Bretz & Westfall 2008, Biom. J. 50:346, sec. 3): the
    critical value is the 1 - alpha quantile of max_i |T_i| with T ~ multivariate t
    (B Monte Carlo draws, smallest df of the family). Cov(D_i, D_j) = Var_seed(base) +
    Cov_q(dq_i, dq_j)/Q for i != j (seeds independent across cells, questions shared).
    None when the comparisons do not share one question set."""
    if len(results) < 2:
        return None
    qs = shared(data, [base] + [r["ia"] for r in results])
    if any(r["n_questions"] != len(qs) for r in results) or len(qs) < 2:
        return None
    yb = rows_of(data[base], qs)
    dq = np.column_stack([rows_of(data[r["ia"]], qs).mean(axis=1) - yb.mean(axis=1)
                          for r in results])
    cov = np.atleast_2d(np.cov(dq, rowvar=False)) / len(qs)
    if pooled is not None:
        cov += float(pooled.sigma2_seed) / yb.shape[1]
    elif yb.shape[1] > 1:
        ms_s, ms_e = st.mean_squares(yb)
        cov += max(float(ms_s - ms_e), 0.0) / (len(qs) * yb.shape[1])
    se = np.array([r["se"] for r in results])
    np.fill_diagonal(cov, se ** 2)
    d = np.sqrt(np.diag(cov))
    if (d <= 0).any():
        return None
    corr = cov / np.outer(d, d)
    w, v = np.linalg.eigh(corr)
    root = v * np.sqrt(np.clip(w, 0, None))
    rng = np.random.default_rng(rng_seed)
    df = min(r["df"] for r in results)
    z = rng.standard_normal((B, len(results))) @ root.T
    if math.isfinite(df):
        z /= np.sqrt(rng.chisquare(df, (B, 1)) / df)
    # rounded: eigh and the matrix product differ in the last bits across CPUs and BLAS
    # builds, and a 10,000-draw quantile is only good to ~1e-2 anyway (byte-for-byte reports)
    crit = round(float(np.quantile(np.abs(z).max(axis=1), 1 - alpha)), 6)
    return [[r["delta"] - crit * r["se"], r["delta"] + crit * r["se"]] for r in results]
