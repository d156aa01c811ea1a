"""Analytic variance, small-sample calibration, p-values, multiplicity, MDE, P(A>B)."""
from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats as sps


# ---------------------------------------------------------------- variance components
def satterthwaite(components: list[tuple[float, float]]) -> tuple[float, float]:
    """Sum of independent variance components (v_i, df_i) and its effective degrees of
    freedom (Satterthwaite 1946; Welch 1947). Returns (variance, df); df=inf if v=0."""
    comps = [(float(v), float(d)) for v, d in components if d > 0 and np.isfinite(v)]
    total = sum(v for v, _ in comps)
    denom = sum(v * v / d for v, d in comps)
    if total <= 0 or denom <= 0:
        return max(total, 0.0), math.inf
    return total, total * total / denom


def _seed_means(y: np.ndarray) -> np.ndarray:
    return nanmean(y, axis=0)


def nanmean(y: np.ndarray, axis: int) -> np.ndarray:
    """np.nanmean without the all-NaN warning (all-NaN slices give NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(y, axis=axis)


def _question_means(y: np.ndarray) -> np.ndarray:
    return nanmean(y, axis=1)


def cell_components(y: np.ndarray) -> list[tuple[float, float]]:
    """Seed + question components of Var(cell mean) for per-question means y (Q, S):
    s2_seed/S (df S-1) and s2_question/Q (df Q-1). With one seed only the question
    component exists (the interval then covers question noise only)."""
    S = y.shape[1]
    comps = []
    if S > 1:
        comps.append((np.var(_seed_means(y), ddof=1) / S, S - 1))
    qm = _question_means(y)
    qm = qm[~np.isnan(qm)]
    if qm.size > 1:
        comps.append((np.var(qm, ddof=1) / qm.size, qm.size - 1))
    return comps


def anova_components(y: np.ndarray) -> dict | None:
    """Two-way random-effects decomposition (seed x question, one observation per cell;
    Searle, Casella & McCulloch 1992, ch. 4) on the questions every seed answered:
    sigma2_seed, sigma2_question, sigma2_resid (method of moments, clamped at 0)."""
    y = y[~np.isnan(y).any(axis=1)]
    Q, S = y.shape
    if S < 2 or Q < 2:
        return None
    g = y.mean()
    ms_seed = Q * ((y.mean(axis=0) - g) ** 2).sum() / (S - 1)
    ms_q = S * ((y.mean(axis=1) - g) ** 2).sum() / (Q - 1)
    resid = y - y.mean(axis=0) - y.mean(axis=1)[:, None] + g
    ms_e = (resid ** 2).sum() / ((S - 1) * (Q - 1))
    return {"sigma2_seed": max(0.0, (ms_seed - ms_e) / Q),
            "sigma2_question": max(0.0, (ms_q - ms_e) / S),
            "sigma2_resid": float(ms_e)}


# ---------------------------------------------------------------- intervals and tests
def t_quantile(p: float, df: float) -> float:
    return float(sps.norm.ppf(p)) if not np.isfinite(df) else float(sps.t.ppf(p, df))


def t_scale(alpha: float, df: float) -> float:
    """Small-sample widening t_{df,1-alpha/2} / z_{1-alpha/2} of a percentile interval:
    the expansion idea of Hesterberg (2015, The American Statistician 69:371), applied as
    a scale about the estimate so that it uses well-estimated 2.5/97.5% quantiles."""
    return t_quantile(1 - alpha / 2, df) / t_quantile(1 - alpha / 2, math.inf)


def scaled_percentile(est: float, lo: float, hi: float, alpha: float, df: float) -> list[float]:
    """[est + k (lo - est), est + k (hi - est)] with k = t_scale(alpha, df); negating est,
    lo and hi (swapping A and B) negates and swaps the interval exactly."""
    k = t_scale(alpha, df)
    return [est + k * (lo - est), est + k * (hi - est)]


def t_interval(est: float, var: float, df: float, alpha: float = 0.05) -> list[float]:
    """Wald interval with a t_df reference (Satterthwaite df)."""
    h = t_quantile(1 - alpha / 2, df) * math.sqrt(max(var, 0.0))
    return [est - h, est + h]


def p_value(delta: float, se: float, df: float) -> float:
    """Two-sided p of H0: Delta = 0 from the centred bootstrap distribution's standard
    deviation, referred to t with the comparison's Satterthwaite df (bootstrap-SE
    Wald test; Efron & Tibshirani 1993 ch. 16)."""
    if se <= 0 or not np.isfinite(se):
        return 1.0 if delta == 0 else 0.0
    z = abs(delta) / se
    if not np.isfinite(df):
        return float(2 * sps.norm.sf(z))
    return float(2 * sps.t.sf(z, df))


def empirical_p(reps: np.ndarray, delta: float) -> float:
    """Raw two-sided bootstrap p: share of centred replicates at least as extreme as the
    estimate, (1 + #{|d*-d| >= |d|}) / (B + 1) (Davison & Hinkley 1997, eq. 4.11)."""
    B = reps.shape[0]
    return float((1 + np.count_nonzero(np.abs(reps - delta) >= abs(delta))) / (B + 1))


def holm(p) -> np.ndarray:
    """Holm (1979) step-down adjusted p-values; same operations as statsmodels'
    multipletests(method="holm")."""
    p = np.asarray(p, float)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p)
    ps = np.take(p, order)
    adj = np.maximum.accumulate(ps * np.arange(m, 0, -1))
    adj[adj > 1] = 1
    out = np.empty_like(adj)
    out[order] = adj
    return out


def benjamini_hochberg(p) -> np.ndarray:
    """Benjamini & Hochberg (1995) adjusted p-values (step-up); same operations as
    scipy.stats.false_discovery_control(method="bh")."""
    p = np.asarray(p, float)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p)
    ps = np.take_along_axis(p, order, axis=-1)
    i = np.arange(1, m + 1, dtype=ps.dtype)
    ps = ps * (m / i)
    np.minimum.accumulate(ps[::-1], out=ps[::-1])
    out = np.empty_like(ps)
    out[order] = ps
    return np.clip(out, 0.0, 1.0)


def max_t_critical(reps: np.ndarray, deltas: np.ndarray, ses: np.ndarray,
                   alpha: float = 0.05) -> float:
    """Bootstrap quantile of max_j |d*_j - d_j| / se_j: simultaneous (single-step max-|t|)
    intervals for a family (Westfall & Young 1993; Hothorn, Bretz & Westfall 2008)."""
    ok = ses > 0
    if not ok.any():
        return 0.0
    t = np.abs(reps[:, ok] - deltas[ok]) / ses[ok]
    return float(np.quantile(t.max(axis=1), 1 - alpha))


def prob_improvement(a_seeds, b_seeds) -> float:
    """P(X_a > X_b) over seeds, ties counting one half: the Mann-Whitney probability of
    improvement of rliable (Agarwal et al. 2021, NeurIPS)."""
    a, b = np.asarray(a_seeds, float), np.asarray(b_seeds, float)
    if a.size == 0 or b.size == 0:
        return float("nan")
    gt = (a[:, None] > b[None, :]).sum()
    eq = (a[:, None] == b[None, :]).sum()
    return float((gt + 0.5 * eq) / (a.size * b.size))


def mde(se: float, df: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimum detectable effect: (t_{1-alpha/2} + t_{power}) x SE (two-sided test at
    level alpha with the given power; Cohen 1988; Bloom 1995)."""
    return (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * se


def planned_variance(S: int, Q: int, sigma2_seed: float, tau2: float, sigma2_resid: float
                     ) -> tuple[float, float]:
    """Var and df of a two-cell paired-question difference with S seeds per cell and Q
    questions, from variance components: 2 s2_seed/S + tau2/Q + 2 s2_resid/(S Q)."""
    seed = 2 * sigma2_seed / S
    question = tau2 / Q + 2 * sigma2_resid / (S * Q)
    comps = [(question, Q - 1)]
    if S > 1:
        comps.append((seed, 2 * (S - 1)))
        return satterthwaite(comps)
    v, df = satterthwaite(comps)
    return v + seed, df


def seeds_needed(delta: float, Q: int, comps: dict, alpha=0.05, power=0.8,
                 max_seeds: int = 100) -> int | None:
    """Smallest seeds-per-cell S whose planned MDE <= |delta| (None if > max_seeds)."""
    if not np.isfinite(delta) or delta == 0:
        return None
    for S in range(2, max_seeds + 1):
        v, df = planned_variance(S, Q, comps["sigma2_seed"], comps["tau2"],
                                 comps["sigma2_resid"])
        if mde(math.sqrt(v), df, alpha, power) <= abs(delta):
            return S
    return None
