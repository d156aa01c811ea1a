"""Simulation study of the intervals and tests in analysis.stats, with known truths.

Data model (docs/statistics.md, "Simulation study"): for cell c, seed s, question q,
    logit p = base + delta_c + a_cs + b_q + u_cq + w_csq,
    a ~ N(0, sd_seed), b ~ N(0, sd_question), u ~ N(0, sd_cellq), w ~ N(0, sd_resid),
and y[c, q, s] = Binomial(K, p) / K. The truth of cell c is E[expit(base + delta_c + X)]
with X ~ N(0, sd_total) (Gauss-Hermite quadrature), so the true difference of two cells
is known exactly. Everything is vectorised over R simulated sweeps.

    python -m analysis.calibration [--R 2000]     # prints the tables of docs/statistics.md
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps
from scipy.special import expit

from analysis import stats as st

REGIMES = {
    # seed variance negligible against the question x cell and residual terms
    "question": {"sd_seed": 0.05, "sd_question": 1.5, "sd_cellq": 0.8, "sd_resid": 0.6},
    # training seeds dominate the variance of a difference
    "seed": {"sd_seed": 0.5, "sd_question": 1.5, "sd_cellq": 0.3, "sd_resid": 0.3},
}


@dataclass
class Design:
    S: int = 5
    Q: int = 500
    K: int = 2
    n_cells: int = 2
    base: float = 0.0
    effect: float = 0.0          # true accuracy difference of cell 1 vs cell 0 (others 0)
    seeds: str = "gauss"         # seed effects: gauss, bimodal (two-point), t3 (SEED_DISTS)
    seed_scale: float = 1.0      # cell 1's seed SD over the others' (arms that differ)


def _total_sd(p: dict) -> float:
    return math.sqrt(sum(v * v for v in p.values()))


def true_mean(shift: float, sd: float) -> float:
    """E[expit(shift + sd X)], X ~ N(0, 1), by 80-point Gauss-Hermite quadrature."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    return float((w * expit(shift + sd * x)).sum() / w.sum())


def logit_shift(effect: float, base: float, sd: float) -> float:
    """Logit shift giving a true accuracy difference `effect` over the base cell."""
    if effect == 0:
        return 0.0
    target = true_mean(base, sd) + effect
    return optimize.brentq(lambda d: true_mean(base + d, sd) - target, -10, 10)


def seed_effects(rng, dist: str, sd: float, shape) -> np.ndarray:
    """Seed effects with variance sd^2: normal; bimodal, a two-point mixture +-sd with
    probability 1/2 each (a seed either takes off or does not); t3, sd t_3 / sqrt(3)
    (heavy tails: Var t_3 = 3)."""
    if dist == "gauss":
        return rng.normal(0, sd, shape)
    if dist == "bimodal":
        return sd * rng.choice([-1.0, 1.0], shape)
    if dist == "t3":
        return sd * rng.standard_t(3, shape) / math.sqrt(3)
    raise ValueError(f"seed distribution {dist!r}: one of {SEED_DISTS}")


SEED_DISTS = ("gauss", "bimodal", "t3")


def simulate(rng: np.random.Generator, R: int, d: Design, regime: dict) -> np.ndarray:
    """y of shape (R, n_cells, Q, S). A non-normal seed distribution needs effect 0 (the
    truth of a difference of exchangeable cells is then exactly 0)."""
    if d.seeds != "gauss" and d.effect != 0:
        raise ValueError("a non-normal seed distribution is simulated at effect 0 only")
    sd = _total_sd(regime)
    shift = np.zeros(d.n_cells)
    if d.n_cells > 1:
        shift[1] = logit_shift(d.effect, d.base, sd)
    b = rng.normal(0, regime["sd_question"], (R, 1, d.Q, 1))
    u = rng.normal(0, regime["sd_cellq"], (R, d.n_cells, d.Q, 1))
    a = seed_effects(rng, d.seeds, regime["sd_seed"], (R, d.n_cells, 1, d.S))
    if d.n_cells > 1:
        a[:, 1] *= d.seed_scale
    w = rng.normal(0, regime["sd_resid"], (R, d.n_cells, d.Q, d.S))
    logit = d.base + shift[None, :, None, None] + a + b + u + w
    return rng.binomial(d.K, expit(logit)) / d.K


def difference_study(rng, R: int, d: Design, regime: dict, alpha: float = 0.05,
                     pooled: bool = False) -> dict:
    """Coverage, SE calibration and power of the cell 1 - cell 0 difference, and of the
    oracle z-test that knows the true SD (the SD of the estimates over the R sweeps);
    `pooled`: the seed variance pooled over the design's n_cells cells (stats.pool)."""
    y = simulate(rng, R, d, regime)
    pl = st.pool([y[:, k] for k in range(d.n_cells)]) if pooled else None
    e = st.contrast([y[:, 1], y[:, 0]], [1.0, -1.0], pooled=pl)
    truth = d.effect
    lo, hi = st.interval(e.estimate, e.se, e.df, alpha)
    p = st.p_value(e.estimate, e.se, e.df)
    true_sd = float(np.std(e.estimate, ddof=1))
    z = sps.norm.ppf(1 - alpha / 2)
    oracle = float(np.mean(np.abs(e.estimate) / true_sd > z))
    return {"coverage": float(np.mean((lo <= truth) & (truth <= hi))),
            "se_ratio": float(np.sqrt(np.mean(e.var)) / true_sd),
            "mean_se_ratio": float(np.mean(e.se) / true_sd),
            "power": float(np.mean(p < alpha)), "oracle_power": oracle,
            "median_df": float(np.median(e.df)), "bias": float(np.mean(e.estimate) - truth)}


def holm_fwer(rng, R: int, d: Design, regime: dict, alpha: float = 0.05) -> float:
    """Family-wise error of Holm over n_cells - 1 comparisons against cell 0 when every
    cell has the same truth."""
    y = simulate(rng, R, Design(**{**d.__dict__, "effect": 0.0}), regime)
    ps = []
    for k in range(1, d.n_cells):
        e = st.contrast([y[:, k], y[:, 0]], [1.0, -1.0])
        ps.append(st.p_value(e.estimate, e.se, e.df))
    ps = np.column_stack(ps)
    return float(np.mean([(st.holm(row) < alpha).any() for row in ps]))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m analysis.calibration")
    ap.add_argument("--R", type=int, default=2000, help="simulated sweeps per setting")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print("| regime | S | Q | K | coverage | RMS SE / SD | mean SE / SD | power (+5) | "
          "oracle power | median df |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, regime in REGIMES.items():
        for S in (2, 3, 5):
            for Q, K in ((200, 1), (500, 2)):
                d = Design(S=S, Q=Q, K=K)
                cov = difference_study(rng, args.R, d, regime)
                pw = difference_study(rng, args.R, Design(S=S, Q=Q, K=K, effect=0.05),
                                      regime)
                print(f"| {name} | {S} | {Q} | {K} | {cov['coverage']:.3f} | "
                      f"{cov['se_ratio']:.2f} | {cov['mean_se_ratio']:.2f} | "
                      f"{pw['power']:.2f} | {pw['oracle_power']:.2f} | "
                      f"{cov['median_df']:.0f} |")
    print()
    print("| regime | S | Holm FWER (5 comparisons, global null) |")
    print("|---|---:|---:|")
    for name, regime in REGIMES.items():
        for S in (2, 3, 5):
            f = holm_fwer(rng, args.R, Design(S=S, Q=200, K=1, n_cells=6), regime)
            print(f"| {name} | {S} | {f:.3f} |")


if __name__ == "__main__":
    main()
