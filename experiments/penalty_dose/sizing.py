"""Size penalty_dose from its pilot (README, "Pilot"): the warm start's P(right |
submitted) per question class, hence each class's threshold lambda* = p / (1 - p) and the
collapse theory predicts at each lambda; the held-out accuracy's variance components at
the pilot cells' last evaluation; and, from them, the minimum detectable difference
(80% power, two-sided 5%) of the grid's design, 6 seeds per arm on 200 held-out
questions, and the power of the exact Jonckheere-Terpstra trend test (trend.py) at the
predicted collapse and at half of it.

    PYTHONPATH=. python experiments/penalty_dose/sizing.py [--write]   # pilots/ -> pilots/sizing.json

The pilot questions are test questions 0-63 of gen_seed 3 (33 1-hop, 31 2-hop); the
grid's are 64-263 (101 1-hop, 99 2-hop: read from the task file, no outcome), whose mix
weighs the predicted collapse. Each arm's own seed variance is used (analysis.yaml has
no `seed_variance: pooled`: an arm that collapses on some seeds only varies more than
one that does not); the pilot's seed variance is pooled over its arms only to be
estimable at all (2 seeds an arm). A pilot has no question x arm variance of a
difference (tau2) of the grid's arms: the MDE is given at tau2 = 0 and at tau2 = the
pilots' question variance.
"""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np

from analysis.collect import find_run_dirs, flatten, read_config, read_jsonl
from analysis.stats import components, mde_range, planned_mde, pool, seeds_needed

HERE = Path(__file__).resolve().parent
SEEDS, QUESTIONS, LAMBDAS = 6, 200, (0.0, 1.0, 2.0, 4.0)
# the grid's held-out questions by class (test questions 64-263 of gen_seed 3)
GRID_CLASSES = {"hops1": 101, "hops2": 99}
CLASSES = {"hops1": 1, "hops2": 2}
R_SIM, SIM_SEED = 4000, 0


def _trend():
    spec = importlib.util.spec_from_file_location("penalty_dose_trend", HERE / "trend.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(run: Path, step: int | None = None) -> tuple[int, list[dict]]:
    rows, _ = read_jsonl(run / "eval.jsonl", required=("step", "task_id", "correct"))
    rows = [r for r in rows if r.get("decoding", "sampled") == "sampled"]
    step = max(r["step"] for r in rows) if step is None else step
    return step, [r for r in rows if r["step"] == step]


def warm_start(run: Path) -> dict:
    """P(right | submitted), its Wilson 95% interval, lambda* = p / (1 - p) (and the
    interval mapped through it), submission rate and accuracy, per class and overall."""
    _, rows = _rows(run, 0)
    out = {}
    for name, h in (("all", None), *CLASSES.items()):
        m = [r for r in rows if h is None or r.get("hops") == h]
        sub = [r for r in m if r.get("answered")]
        right = sum(bool(r["correct"]) for r in sub)
        p = right / len(sub)
        lo, hi = _wilson(right, len(sub))
        out[name] = {"questions": len({r["task_id"] for r in m}), "episodes": len(m),
                     "submitted": len(sub), "right": right,
                     "submission_rate": len(sub) / len(m),
                     "accuracy": sum(bool(r["correct"]) for r in m) / len(m),
                     "p": p, "p_ci": [lo, hi], "lambda_star": _odds(p),
                     "lambda_star_ci": [_odds(lo), _odds(hi)]}
    return out


def _odds(p: float) -> float:
    return p / (1 - p) if p < 1 else math.inf


def _wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson's score interval (episodes treated as independent: questions repeat, so
    it is narrower than the truth)."""
    ph = k / n
    c = (ph + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return c - h, c + h


def predicted_drop(warm: dict) -> dict[str, float]:
    """{lambda: the accuracy a full collapse removes}: the warm start's accuracy of each
    class whose threshold lies below lambda, weighted by the grid's class mix."""
    n = sum(GRID_CLASSES.values())
    return {f"{lam:g}": sum(warm[c]["accuracy"] * GRID_CLASSES[c] / n for c in CLASSES
                            if warm[c]["lambda_star"] < lam) for lam in LAMBDAS}


def cells(runs: list[Path]) -> dict[float, list[tuple[int, Path]]]:
    """{lambda: [(seed, run)]} of the pilot training cells (runs with steps > 0)."""
    out: dict = {}
    for run in runs:
        c = flatten(read_config(run / "config.yaml"))
        if int(c.get("trainer.max_steps") or 0) > 0:
            out.setdefault(float(c["reward.weights.wrong"]), []).append((int(c["seed"]), run))
    return {k: sorted(v) for k, v in sorted(out.items())}


def last_step(run: Path) -> int:
    return _rows(run)[0]


def per_question(run: Path, step: int | None = None,
                 metric: str = "correct") -> tuple[int, dict]:
    step, rows = _rows(run, step)
    by_q: dict = {}
    for r in rows:
        by_q.setdefault(r["task_id"], []).append(float(bool(r.get(metric))))
    return step, {q: float(np.mean(v)) for q, v in by_q.items()}


def seed_variance(arms: dict) -> dict:
    """Components per arm with 2+ seeds, and pooled over them (nu_seed df), at the last
    step that every cell of an arm evaluated (48 when the cells ran to the end)."""
    ys, per_arm, steps, qs = [], {}, [], None
    for lam, runs in arms.items():
        common = min(last_step(run) for _, run in runs)
        got = [per_question(run, common) for _, run in runs]
        means = [m for _, m in got]
        q = sorted(set.intersection(*(set(m) for m in means)))
        qs = q if qs is None else sorted(set(qs) & set(q))
        y = np.array([[m[k] for m in means] for k in q])
        per_arm[f"{lam:g}"] = {"seeds": [s for s, _ in runs], "step": common,
                               "seed_means": y.mean(axis=0).tolist(),
                               **(components(y) or {})}
        if y.shape[1] >= 2:
            ys.append(y)
            steps.append(common)
    p = pool(ys)
    tau2 = _tau2(arms, qs) if len(arms) >= 2 and p is not None else None
    q_var = float(np.mean([v["sigma2_question"] for v in per_arm.values()
                           if "sigma2_question" in v])) if ys else None
    pooled = None if p is None else {
        "sigma2_seed": float(p.sigma2_seed), "sigma2_resid": float(p.r * len(qs)),
        "sigma2_question": q_var, "tau2": tau2, "nu_seed": p.nu, "questions": len(qs),
        "seed_sd": float(math.sqrt(p.sigma2_seed))}
    return {"step": min(steps) if steps else None, "questions": len(qs or []),
            "per_arm": per_arm, "pooled": pooled}


def trajectory(run: Path) -> dict:
    """{step: accuracy, submission rate and right-when-submitted, overall and per class,
    and how the episodes ended} of one pilot cell (trend.py's per-seed numbers)."""
    trend = _trend()
    rows, _ = read_jsonl(run / "eval.jsonl", required=("step", "task_id", "correct"))
    rows = [r for r in rows if r.get("decoding", "sampled") == "sampled"]
    out = {}
    for step in sorted({r["step"] for r in rows}):
        mine = [r for r in rows if r["step"] == step]
        out[str(step)] = {**trend._rates(mine),
                          **{c: trend._rates([r for r in mine if r.get("hops") == h])
                             for c, h in CLASSES.items()},
                          "endings": trend._endings(mine)}
    return out


def _tau2(arms: dict, qs: list) -> float:
    """Question x arm variance of the last arm minus the first at their common step, as
    the analysis estimates it (docs/statistics.md sec. 5): var_q(Delta_q) - sigma2_resid
    (1/S_a + 1/S_b), the residual pooled over the arms with 2+ seeds; clamped at 0."""
    ends = [arms[min(arms)], arms[max(arms)]]
    step = min(last_step(run) for v in ends for _, run in v)
    y = [np.array([[per_question(run, step)[1][q] for _, run in v] for q in qs]) for v in ends]
    resid = [components(a)["sigma2_resid"] for a in y if a.shape[1] >= 2]
    s2e = float(np.mean(resid))
    d = y[1].mean(axis=1) - y[0].mean(axis=1)
    return max(0.0, float(np.var(d, ddof=1)) - s2e * sum(1 / a.shape[1] for a in y))


def mdes(comps: dict) -> dict:
    """MDE at 6 seeds and 200 questions (each arm's own seed variance, 5 df a cell) at
    tau2 = 0, at the pilot's own tau2 (lambda 4 vs 0) and at tau2 = the question
    variance (the arms independent per question)."""
    out = {}
    for label, tau2 in (("tau0", 0.0), ("tau_pilot", comps.get("tau2")),
                        ("tau_question", comps["sigma2_question"])):
        if tau2 is None:
            continue
        c = {"sigma2_seed": comps["sigma2_seed"], "sigma2_resid": comps["sigma2_resid"],
             "tau2": tau2}
        out[f"mde_{label}"] = planned_mde(SEEDS, QUESTIONS, c)
        # its 95% range from the components' df (seed: nu_seed; tau2, resid: Q - 1 each)
        out[f"mde_{label}_range"] = mde_range(SEEDS, QUESTIONS, {
            **c, "nu_seed": comps["nu_seed"], "nu_tau2": comps["questions"] - 1,
            "nu_resid": comps["nu_seed"] * (comps["questions"] - 1)})
        out[f"mde_{label}_by_seeds"] = {str(s): planned_mde(s, QUESTIONS, c)
                                        for s in (3, 4, 5, 6, 8, 10, 12)}
    return out


def jt_power(means: list[float], comps: dict, seeds: int = SEEDS, R: int = R_SIM,
             rng_seed: int = SIM_SEED) -> dict:
    """Power of the exact two-sided JT test (decreasing) and of the exact permutation
    test of the last arm vs the first, at the arm means `means`, seed means drawn as
    mean + N(0, sigma2_seed + sigma2_resid / Q) per seed (questions shared: the question
    effect cancels; no question x arm term)."""
    trend = _trend()
    from analysis.stats import permutation_test
    k = len(means)
    null = trend.jt_null([list(range(i * seeds, (i + 1) * seeds)) for i in range(k)])
    total = sum(null.values())
    values = sorted(null)
    le = dict(zip(map(float, values), np.cumsum([null[v] for v in values]) / total))
    ge = dict(zip(map(float, values[::-1]),
                  np.cumsum([null[v] for v in values[::-1]]) / total))
    sd = math.sqrt(comps["sigma2_seed"] + comps["sigma2_resid"] / QUESTIONS)
    rng = np.random.default_rng(rng_seed)
    hit_jt = hit_pair = 0
    for _ in range(R):
        g = [m + sd * rng.standard_normal(seeds) for m in means]
        j = trend.jt_statistic(g)
        p_dec, p_inc = float(le[j]), float(ge[j])
        hit_jt += (min(1.0, 2 * min(p_dec, p_inc)) < 0.05) and p_dec < p_inc
        perm = permutation_test(g[-1], g[0])
        hit_pair += perm["p"] < 0.05 and g[-1].mean() < g[0].mean()
    return {"jt": float(hit_jt / R), "pair": float(hit_pair / R), "R": R,
            "seed_mean_sd": sd}


def sizing(pilots: Path) -> dict:
    runs = [r for r, _ in find_run_dirs(pilots)]
    warm_run = next(r for r in runs
                    if int(flatten(read_config(r / "config.yaml")).get("trainer.max_steps")
                           or 0) == 0)
    warm = warm_start(warm_run)
    drop = predicted_drop(warm)
    arms = cells(runs)
    var = seed_variance(arms)
    out = {"warm_start": warm,
           "cells": {f"{lam:g}_s{seed}": trajectory(run)
                     for lam, v in arms.items() for seed, run in v},
           "thresholds": {c: warm[c]["lambda_star"] for c in CLASSES},
           "threshold_all": warm["all"]["lambda_star"],
           "grid_classes": GRID_CLASSES, "predicted_drop": drop,
           "seed_variance": var}
    comps = var["pooled"]
    if comps:
        out.update(mdes(comps))
        full = [-drop[f"{lam:g}"] for lam in LAMBDAS]
        half = [x / 2 for x in full]
        c0 = {**comps, "tau2": comps.get("tau2") or 0.0}
        out["power"] = {"full": {"means": full, **jt_power(full, comps)},
                        "half": {"means": half, **jt_power(half, comps)}}
        out["seeds_needed"] = {
            label: {f"{lam:g}": seeds_needed(d, QUESTIONS, c0)
                    for lam, d in zip(LAMBDAS, m) if d}
            for label, m in (("full", full), ("half", half))}
    return out


def main(argv: list[str]) -> None:
    out = sizing(HERE / "pilots")
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    if "--write" in argv:
        (HERE / "pilots" / "sizing.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
