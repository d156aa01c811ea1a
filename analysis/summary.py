"""Build summary.json for a sweep: cells, comparisons (on shared questions, with
verdicts against a smallest effect of interest), planning tables and warnings."""
from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass

import numpy as np

from analysis import estimates as est
from analysis import labels as lb
from analysis import lifelong as ll
from analysis import provenance
from analysis import stats as st
from analysis import world as wd
from analysis.collect import AnalysisError, Sweep, cell_label, match_cell, shown, sort_key
from analysis.compare import evaluate, rows_of, shared, simultaneous

SEED_GRID = (2, 3, 5, 10, 20)
QUESTION_GRID = (100, 250, 500, 1000)
DEFAULT_SESOI = 0.03          # 3 accuracy points


def _clean(x):
    """JSON-safe values (inf/nan -> None, numpy scalars -> Python)."""
    if isinstance(x, (np.floating,)):
        x = float(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _select_steps(sweep: Sweep, step, failed: list) -> dict:
    steps = {}
    for c in sweep.cells:
        keep = []
        for run in c.runs:
            s = est.select_step(run, step)
            if s is None:
                failed.append({"path": shown(run.path), "factors": c.factors, "seed": run.seed,
                               "reason": f"no evaluation at step {step}"})
                continue
            steps[str(run.path)] = s
            keep.append(run)
        c.runs = keep
    return steps


def _fields(metric: str, rewards: list[str], own=()) -> dict:
    """{name: (row field, transform)}: the metric first, BEHAVIOUR, the rewards, then the
    world's own behaviour columns (`own`: estimates.own_fields)."""
    f = {metric: (metric, float)}
    # a behaviour that reads the metric's own row field (answer_rate when the metric is
    # `answered`) is the metric under another name: not repeated beside it
    f.update({n: (key, tr) for n, (_, key, tr) in est.BEHAVIOUR.items()
              if n != metric and key != metric})
    f.update({r: (r, float) for r in rewards if r != metric})
    f.update({n: (n, float) for n in own})
    return f


@dataclass
class Ctx:
    """What every estimate of one analysis shares: alpha, the metric, the design's pooled
    seed variances (per field at the analysed step, per field of the change, per step of
    the curve) and whether the design is evaluation-only (the question is the unit)."""
    alpha: float
    metric: str
    pools: dict
    change_pools: dict
    curve_pools: dict
    curve_change_pools: dict
    eval_only: bool
    env: str | None = None
    own: tuple = ()               # the world's own behaviour columns (environment.json)


def pools_of(mats: list[dict], pooled: bool, only: str | None = None) -> dict:
    """{field: stats.pool over the cells that have it} for a pre-registered pooled seed
    variance (`only`: of that field, the pre-registered metric; the behaviour fields are
    descriptive and keep each cell's own: pooling an arm whose seeds split 87% / 1% into
    the others would give them intervals their own seeds never showed); {} (each cell's
    own seed variance, Welch-type contrasts) otherwise. No
    pretest chooses between them: Bartlett's test is not robust to non-normal seeds
    (Box 1953, Biometrika 40:318) and choosing a variance model by a pretest changes the
    test's error rate (Zimmerman 2004, Br. J. Math. Stat. Psychol. 57:173)."""
    if not pooled:
        return {}
    return {n: st.pool([m[n].y for m in mats if n in m and m[n].unit == "seed"])
            for n in {n for m in mats for n in m} if only is None or n == only}


def bounded(r: dict, kind: str | None, n_units: int, alpha: float) -> list | None:
    """A cell mean's interval: Wilson for a rate (inside [0, 1]), log scale for a count
    (never below 0), else the t interval (stats.wilson, stats.log_interval)."""
    if r.get("estimate") is None or not r.get("ci"):
        return r.get("ci")
    if kind == "rate":
        return st.wilson(r["estimate"], r["se"], r["df"], n_units, alpha)
    if kind == "count":
        return st.log_interval(r["estimate"], r["se"], r["df"], alpha)
    return r["ci"]


def _estimate(d, name: str, ctx: Ctx, questions=None, pool=None) -> dict:
    """evaluate() of one cell's field with its bounded interval."""
    pl = ctx.pools.get(name) if pool is None else pool
    r = evaluate([d], {0: 1.0}, ctx.alpha, questions=questions, pooled=pl)
    n = (len(questions) if questions is not None else len(d.questions)) * d.y.shape[1]
    return {**r, "ci": bounded(r, est.field_kind(name), n, ctx.alpha)}


def _breakdown_levels(out_cells: list) -> list[str]:
    """The task levels to break the metric down by: none when every task has one level
    (the breakdown would repeat the cell estimate, e.g. a reasoning-gym task set)."""
    levels = sorted({h for c in out_cells for h in c["by_hops"]}, key=str)
    return levels if len(levels) > 1 else []


def _cell_summary(c, mats, changes, curves, curve_chs, ctx: Ctx, names, with_curves,
                  steps) -> dict:
    d = mats[ctx.metric]
    r = _estimate(d, ctx.metric, ctx)
    by_hops = {}
    for h in sorted({h for h in d.hops.values() if h is not None}, key=str):
        qs = [q for q in d.questions if d.hops[q] == h]
        rh = _estimate(d, ctx.metric, ctx, questions=qs)
        by_hops[str(h)] = {"mean": rh["estimate"], "ci": rh["ci"], "n_questions": len(qs)}
    extra = {}
    skipped = lb.ENV_SKIPPED.get(ctx.env, ())
    for name, dd in mats.items():
        if name != ctx.metric and dd.y.size and name not in skipped:
            re = _estimate(dd, name, ctx)
            extra[name] = {"mean": re["estimate"], "ci": re["ci"],
                           "n_questions": re["n_questions"]}
    seed_means = [float(v) for v in d.y.mean(axis=0)]
    out = {
        "factors": c.factors, "label": c.label, "short_label": lb.cell_name(c.factors, names),
        "n_seeds": len(c.seeds), "n_questions": len(d.questions), "samples": d.samples,
        "mean": r["estimate"], "ci": r["ci"], "se": r["se"], "df": r["df"],
        "iqm": st.iqm(seed_means) if d.unit == "seed" else None,
        "seed_means": seed_means, "seeds": list(c.seeds),
        "step": d.steps[0] if len(d.steps) == 1 else list(d.steps),
        "question_noise_only": not r["inferential"],
        "interval": _interval_words(d, r),
        "variance_components": st.components(d.y),
        "by_hops": by_hops,
        "behaviour": {n: v for n, v in extra.items() if n in est.BEHAVIOUR or n in ctx.own},
        "reward": {n: v for n, v in extra.items()
                   if n not in est.BEHAVIOUR and n not in ctx.own},
        "runs": [shown(run.path) for run in c.runs],
        "change": {n: v for n, v in _changes(changes, ctx).items() if n not in skipped},
        "compute": _compute(c, steps),
    }
    if with_curves:
        out["curve"] = _curve(curves, curve_chs, ctx)
        out["train_curves"] = est.train_curves(c)
    return out


def _lifelong_estimate(d, kind: str, ctx: Ctx) -> dict:
    """A lifelong eval quantity's cell mean (analysis.lifelong) with its bounded interval
    over seeds and questions (the cell's own seed variance: no pooling)."""
    r = evaluate([d], {0: 1.0}, ctx.alpha)
    return {"mean": r["estimate"], "interval": _interval_words(d, r),
            "ci": bounded(r, kind, len(d.questions) * d.y.shape[1], ctx.alpha)}


def _interval_words(d, r) -> str:
    if d.unit == "question":
        return "questions (fixed weights: sampling streams are replicates within a question)"
    return "seeds and questions" if r["inferential"] else "questions only (one seed)"


def change_matrices(c, mats: dict, fields: dict, steps: dict, warnings: list) -> dict:
    """Per field: each seed's per-question change from its first evaluation to the
    analysed one (y_last - y_first, paired by seed and question) as CellData, with
    `from_step`; {} when a seed has one step."""
    first = {str(r.path): min(x["step"] for x in r.eval_rows()) for r in c.runs}
    single = [k for k in first if first[k] == steps[k]]
    if single and len(single) < len(first):
        warnings.append(f"{c.label}: no change from the first evaluation ({single[0]} has "
                        "only the analysed step)")
    if single:
        return {}
    before = est.cell_matrices(c, first, fields, [], required=(next(iter(fields)),))
    out = {}
    for name, d1 in mats.items():
        d0 = before.get(name)
        if d0 is None or d1.y.size == 0 or d0.y.size == 0:
            continue
        pos0 = {q: i for i, q in enumerate(d0.questions)}
        pos1 = {q: i for i, q in enumerate(d1.questions)}
        qs = [q for q in d1.questions if q in pos0]
        if qs:
            y0 = d0.y[[pos0[q] for q in qs]]
            out[name] = est.CellData(y=d1.y[[pos1[q] for q in qs]] - y0, questions=qs,
                                     seeds=d1.seeds, base=float(y0.mean()),
                                     steps=tuple(sorted(set(first.values()))))
    return out


def _changes(changes: dict, ctx: Ctx) -> dict:
    """The change of each field as a cell mean (sec. 9 of docs/statistics.md), the seed
    variance pooled over the cells' changes of that field."""
    out = {}
    for name, d in changes.items():
        r = evaluate([d], {0: 1.0}, ctx.alpha, pooled=ctx.change_pools.get(name))
        out[name] = {"from_step": list(d.steps), "mean": r["estimate"], "se": r["se"],
                     "df": r["df"], "ci": feasible(r["ci"], est.field_kind(name), d.base),
                     "p": r["p"],
                     "inferential": r["inferential"], "n_questions": r["n_questions"]}
    return out


def feasible(ci, kind: str | None, base: float | None):
    """A change's interval cut to the values the change can take: a rate that started at
    p0 moves within [-p0, 1 - p0], a count that started at c0 falls by at most c0 (the
    true change lies there, so coverage is kept; an interval of [-22, +22] points from a
    1% start claims impossible values)."""
    if not ci or base is None or None in ci or kind not in ("rate", "count"):
        return ci
    lo, hi = max(ci[0], -base), ci[1] if kind == "count" else min(ci[1], 1.0 - base)
    return [lo, max(hi, lo)]


def _compute(c, steps: dict) -> dict:
    """Training compute per seed (metrics.jsonl): sampled tokens, step seconds (wall) and,
    where every step logged it, step CPU seconds (`step_cpu_s`) summed over the optimizer
    steps up to the analysed one, mean over the seeds that logged them; {} without
    metrics."""
    per_seed = []
    for r in c.runs:
        rows = [m for m in r.metrics_rows() if m["step"] <= steps[str(r.path)]
                and est.is_number(m.get("generated_tokens")) and est.is_number(m.get("step_s"))]
        if rows:
            cpu = (sum(m["step_cpu_s"] for m in rows)
                   if all(est.is_number(m.get("step_cpu_s")) for m in rows) else None)
            per_seed.append((sum(m["generated_tokens"] for m in rows),
                             sum(m["step_s"] for m in rows), cpu))
    if not per_seed:
        return {}
    out = {"generated_tokens": float(np.mean([t for t, _, _ in per_seed])),
           "train_seconds": float(np.mean([s for _, s, _ in per_seed])),
           "n_seeds": len(per_seed)}
    if all(cpu is not None for _, _, cpu in per_seed):
        out["train_cpu_seconds"] = float(np.mean([cpu for _, _, cpu in per_seed]))
    return out


def _curve(curves: dict, changes: dict, ctx: Ctx) -> dict:
    """Per evaluation step: the cell mean with the same interval as the tables, and the
    paired change from the first step with the interval its test uses (`change_*`: a
    figure draws the change, never two cell bands, so it cannot contradict the test)."""
    steps, mean, lo, hi = [], [], [], []
    for s, d in curves.items():
        r = _estimate(d, ctx.metric, ctx, pool=ctx.curve_pools.get(s))
        steps.append(s)
        mean.append(r["estimate"])
        lo.append(r["ci"][0])
        hi.append(r["ci"][1])
    out = {"steps": steps, "mean": mean, "lo": lo, "hi": hi}
    ch = {s: evaluate([d], {0: 1.0}, ctx.alpha, pooled=ctx.curve_change_pools.get(s))
          for s, d in changes.items()}
    for s, r in ch.items():
        r["ci"] = feasible(r["ci"], est.field_kind(ctx.metric), changes[s].base)
    if ch:
        out.update({"change_mean": [ch[s]["estimate"] if s in ch else 0.0 for s in steps],
                    "change_lo": [ch[s]["ci"][0] if s in ch else 0.0 for s in steps],
                    "change_hi": [ch[s]["ci"][1] if s in ch else 0.0 for s in steps]})
    return out


def curve_changes(curves: dict) -> dict:
    """step -> CellData of each seed's per-question change from the curve's first step,
    paired by seed and question (the questions both steps have)."""
    if len(curves) < 2:
        return {}
    first, d0 = min(curves.items(), key=lambda kv: sort_key(kv[0]))
    pos0 = {q: i for i, q in enumerate(d0.questions)}
    out = {}
    for s, d in curves.items():
        qs = [q for q in d.questions if q in pos0]
        if s != first and qs and d.seeds == d0.seeds:
            y0 = d0.y[[pos0[q] for q in qs]]
            out[s] = est.CellData(y=d.y[[d.questions.index(q) for q in qs]] - y0,
                                  questions=qs, seeds=d.seeds, samples=d.samples,
                                  steps=(first, s), unit=d.unit, base=float(y0.mean()))
    return out


def _differences(data, i, j) -> list[str]:
    """Loud warnings when two cells were not evaluated alike."""
    a, b = data[i], data[j]
    w = []
    if set(a.questions) != set(b.questions):
        n = len(set(a.questions) & set(b.questions))
        w.append(f"different question sets ({len(a.questions)} vs {len(b.questions)}); "
                 f"compared on the {n} shared")
    if a.steps != b.steps:
        w.append(f"evaluated at different steps ({'/'.join(map(str, a.steps))} vs "
                 f"{'/'.join(map(str, b.steps))})")
    if a.samples != b.samples:
        w.append(f"different samples per question (eval.samples {a.samples} vs {b.samples})")
    return w


def _comparison(data, coefs, alpha, ia, ib, a, b, kind, names, family, pool=None) -> dict:
    r = evaluate(data, coefs, alpha, pooled=pool)
    keys = lb.differing(a, b) or list(a)
    same = [k for k in a if k not in keys]
    vs = lb.cell_name(b, names, keys)
    if family == "all_pairs" and same:        # several pairs differ in the same factors
        vs += f" (at {lb.cell_name(a, names, same)})"
    row = {"a": a, "b": b, "kind": kind, "family": family,
           "a_label": cell_label(a), "b_label": cell_label(b),
           "label": lb.cell_name(a, names, keys), "vs": vs,
           "tex_label": (lb.compact(a, names, keys) if family == "confirmatory"
                         else lb.pair_label(a, b, keys, same)),
           "n_questions": r["n_questions"], "warnings": [], "ia": ia, "ib": ib}
    if ia is not None:
        row["warnings"] = _differences(data, ia, ib)
    if r["estimate"] is None:
        row["warnings"].append("no shared questions: not compared")
        row.update(delta=None, ci=None, p=None, se=None, df=None, inferential=False,
                   error="no shared questions")
        return row
    row.update(delta=r["estimate"], ci=r["ci"], p=r["p"], se=r["se"], df=r["df"],
               inferential=r["inferential"])
    if not r["inferential"]:
        row["warnings"].append("a cell has one seed: no test (question-only interval)")
    elif r["p"] is None:
        row["warnings"].append("no variation within the cells (SE = 0): no test")
    return row


def _main_effects(sweep, cells, base, data, alpha, names, pool=None) -> list[dict]:
    """Each level of each factor against the baseline's level, averaged over the
    combinations of the other factors present at both levels. A level present in one
    pair only, whose partner is the baseline cell, is that cell's own comparison (an
    L-shaped design: each factor varied alone): not tested twice in the family."""
    out = []
    if len(sweep.factors) < 2:
        return out
    keyof = {tuple(str(c.factors[k]) for k in sweep.factors): j for j, c in enumerate(cells)}
    for f_i, f in enumerate(sweep.factors):
        b_level = cells[base].factors[f]
        for level in sweep.levels[f]:
            if str(level) == str(b_level):
                continue
            coefs, m = {}, 0
            for j, c in enumerate(cells):
                if str(c.factors[f]) != str(level):
                    continue
                partner = [str(c.factors[k]) for k in sweep.factors]
                partner[f_i] = str(b_level)
                k = keyof.get(tuple(partner))
                if k is not None:
                    coefs[j] = coefs.get(j, 0.0) + 1.0
                    coefs[k] = coefs.get(k, 0.0) - 1.0
                    m += 1
            if m == 0 or (m == 1 and coefs.get(base) == -1.0):
                continue
            coefs = {k: v / m for k, v in coefs.items()}
            row = _comparison(data, coefs, alpha, None, None, {f: level}, {f: b_level},
                              "main_effect", names, "confirmatory", pool)
            row["n_pairs"] = m
            row["label"] = f"{names[f]}={lb.value(level)} (main effect)"
            row["tex_label"] = f"{names[f]}={lb.value(level)} (main)"
            out.append(row)
    return out


def planning_components(data, pairs, pool: st.Pool | None) -> dict | None:
    """The design's pooled seed variance (stats.pool, nu_seed df), the residual variance
    (the df-weighted mean of the cells' MS_resid, nu_resid df) and the question x cell
    variance tau2 of a difference (median over the compared pairs, Q - 1 df)."""
    parts = [(d.n_seeds - 1) * (len(d.questions) - 1) for d in data]
    res = [(nu, st.components(d.y)) for nu, d in zip(parts, data) if nu > 0]
    if pool is None or not res:
        return None
    nu_e = sum(nu for nu, _ in res)
    s2e = sum(nu * c["sigma2_resid"] for nu, c in res) / nu_e
    taus, qn = [], []
    for i, j in pairs:
        qs = shared(data, [i, j])
        if len(qs) < 2:
            continue
        ya, yb = rows_of(data[i], qs), rows_of(data[j], qs)
        dq = ya.mean(axis=1) - yb.mean(axis=1)
        taus.append(max(0.0, float(np.var(dq, ddof=1))
                        - s2e * (1 / ya.shape[1] + 1 / yb.shape[1])))
        qn.append(len(qs) - 1)
    assumed = not taus
    tau2 = float(np.median(taus)) if taus else 2 * float(np.mean(
        [c["sigma2_question"] for _, c in res]))
    return {"sigma2_seed": float(pool.sigma2_seed), "sigma2_resid": float(s2e),
            "tau2": tau2, "tau2_assumed": assumed, "nu_seed": pool.nu, "nu_resid": nu_e,
            "nu_tau2": min(qn) if qn else min(len(d.questions) for d in data) - 1,
            "n_cells": len(res), "n_cells_total": len(data)}


def question_planning(data, pairs, sesoi, alpha, power) -> dict | None:
    """An evaluation-only design (the question is the unit): the MDE of a paired
    difference over Q questions, (t_{Q-1, 1-alpha/2} + t_{Q-1, power}) sqrt(var_q(d)/Q)
    (Cohen 1988), var_q(d) the median over the compared pairs."""
    v = [float(np.var(rows_of(data[i], qs).mean(axis=1) - rows_of(data[j], qs).mean(axis=1),
                      ddof=1)) for i, j in pairs if len(qs := shared(data, [i, j])) > 1]
    if not v:
        return None
    var = float(np.median(v))
    grid = sorted(set(st.QUESTION_GRID) | {max(len(d.questions) for d in data)})
    mdes = [float(st.mde(math.sqrt(var / q), q - 1, alpha, power)) for q in grid]
    need = next((q for q, m in zip(grid, mdes) if m <= sesoi), None)
    return {"unit": "question", "var_difference": var, "questions": grid, "mde": mdes,
            "questions_needed": need, "effect": sesoi}


def planning(comps, sesoi, Q_now, alpha, power) -> dict | None:
    """MDE table over SEED_GRID x QUESTION_GRID, each value with its 95% range from the
    components' df (stats.mde_range), and the seeds/questions needed for the SESOI."""
    if comps is None:
        return None
    qs = sorted(set(QUESTION_GRID) | {Q_now})
    m = st.mde_grid(SEED_GRID, qs, comps, alpha, power)
    rng = [[st.mde_range(S, q, comps, alpha, power) for q in qs] for S in SEED_GRID]
    return {"mde_table": {"questions": qs, "rows": [{"seeds": S, "mde": [float(v) for v in r],
                                                      "range": g}
                                                     for S, r, g in zip(SEED_GRID, m, rng)]},
            "equivalence_seeds": {"margin": sesoi, "questions": qs, "seeds": [
                st.equivalence_seeds(sesoi, q, comps, alpha, power) for q in qs]},
            "seeds_needed": {"effect": sesoi, "questions": qs,
                             "seeds": [st.seeds_needed(sesoi, q, comps, alpha, power)
                                       for q in qs]},
            "questions_needed": {"effect": sesoi, "seeds": list(SEED_GRID),
                                 "questions": [st.questions_needed(sesoi, s, comps, alpha, power)
                                               for s in SEED_GRID]}}


def _family(rows, adjust, correction, alpha, sesoi, lower_is_better=False):
    """Adjusted p (t and, where there is one, permutation) over the family, and each
    row's verdict; "equivalent" only where the design can reach it."""
    for key in ("p", "p_perm"):
        tested = [r for r in rows if r.get(key) is not None]
        for r, pa in zip(tested, adjust([r[key] for r in tested])):
            r[f"{key}_adj"] = float(pa)
    for r in rows:
        r.setdefault("p_adj", None)
        r.setdefault("p_perm_adj", None)
        r["correction"] = correction
        r["verdict"] = (st.verdict(r["delta"], r["se"], r["df"], r["p_adj"], sesoi, alpha,
                                   lower_is_better, r.get("equivalence_reachable", True))
                        if r["p_adj"] is not None else None)


def analyse(sweep: Sweep, metric: str = "correct", step: int | None = None,
            B: int = 10_000, rng_seed: int = 0, baseline: dict | None = None,
            alpha: float = 0.05, power: float = 0.8, sesoi: float = DEFAULT_SESOI,
            all_pairs: bool = False, with_curves: bool = True,
            baseline_source: str = "--baseline", lower_is_better: bool = False,
            evaluation_only: bool | None = None, seed_variance_model: str = "welch") -> dict:
    """summary.json of a sweep. evaluation_only None: detected (every run has
    trainer.max_steps 0: fixed weights, the question is the unit). seed_variance_model:
    "welch" (each cell's own seed variance) or "pooled" (one, pre-registered)."""
    if evaluation_only is None:
        evaluation_only = is_evaluation_only(sweep)
    failed, warnings = list(sweep.failed), list(sweep.warnings)
    steps = _select_steps(sweep, step, failed)
    cells = [c for c in sweep.cells if c.runs]
    if not cells:
        raise AnalysisError("no complete runs to analyse (use --include-incomplete to "
                            "analyse runs without a COMPLETE marker)")
    names = lb.short_names(sweep.factors)
    envs = {r.config.get("env.name") for c in cells for r in c.runs}
    env = envs.pop() if len(envs) == 1 else None
    world = wd.world_of(cells, warnings)
    own = est.own_fields(cells, steps, world.get("behaviour_labels", {}), metric)
    fields = _fields(metric, est.reward_fields(cells, steps), own)
    exclusions: list = []
    mats = [est.cell_matrices(c, steps, fields, warnings, (metric,), exclusions)
            for c in cells]
    for c, m in zip(cells, mats):
        if metric not in m or m[metric].y.size == 0:
            raise AnalysisError(f"{c.runs[0].eval_file}: no '{metric}' values at step "
                                f"{steps[str(c.runs[0].path)]} (cell {c.label})")
    data = [m[metric] for m in mats]
    eval_keys = [f for f in sweep.factors if f.startswith("eval.")]
    if eval_keys:
        warnings.append("cells differ in evaluation settings (" + ", ".join(eval_keys)
                        + "): their scores are not measured alike")

    if evaluation_only:
        mats = [{n: d.per_question() for n, d in m.items()} for m in mats]
        data = [m[metric] for m in mats]
    changes = [change_matrices(c, m, fields, steps, warnings) for c, m in zip(cells, mats)]
    curves = [est.curve_matrices(c, metric) if with_curves else {} for c in cells]
    if evaluation_only:
        curves = [{s: d.per_question() for s, d in cv.items()} for cv in curves]
    curve_chs = [curve_changes(cv) for cv in curves]
    pooled = seed_variance_model == "pooled"
    ctx = Ctx(alpha=alpha, metric=metric, pools=pools_of(mats, pooled, metric),
              change_pools=pools_of(changes, pooled, metric),
              curve_pools=pools_of(curves, pooled),
              curve_change_pools=pools_of(curve_chs, pooled),
              eval_only=evaluation_only, env=env, own=tuple(own))
    out_cells = [_cell_summary(c, m, ch, cv, cch, ctx, names, with_curves, steps)
                 for c, m, ch, cv, cch in zip(cells, mats, changes, curves, curve_chs)]
    if with_curves and ll.has_library(cells):        # a design with agent=voyager cells
        for c, oc in zip(cells, out_cells):
            oc["lifelong"] = ll.summarise(c, lambda d, kind: _lifelong_estimate(d, kind, ctx),
                                          alpha)

    if baseline is None and len(cells) > 1:
        raise AnalysisError("no baseline: name it with --baseline KEY=VAL,... or `baseline:` "
                            "in the experiment's analysis.yaml; cells are: "
                            + "; ".join(c.label for c in cells))
    base = match_cell(cells, baseline) if baseline else 0
    pool = ctx.pools.get(metric)
    confirm, pairs = _comparisons(sweep, cells, data, base, alpha, names, all_pairs, pool)
    cell_pairs = [(r["ia"], r["ib"]) for r in confirm if r["kind"] == "cell"]
    # where the tests use each cell's own seed variance (welch), plan on their pool all
    # the same: with equal seeds it is the mean of the cells' own, which is what the
    # variance of a two-cell difference adds up
    comps = planning_components(data, cell_pairs, pool or st.pool([d.y for d in data]))
    if comps is not None:
        comps["pool_cells"] = comps["n_cells"]
        comps["seed_pooled_for_tests"] = pool is not None
    _annotate(confirm + pairs, data, comps, base, B, rng_seed, sesoi, alpha, power, pool)
    _family(confirm, st.holm, "holm", alpha, sesoi, lower_is_better)
    _family(pairs, st.benjamini_hochberg, "bh", alpha, sesoi, lower_is_better)
    warnings += [f"{r['label']} vs {r['vs']}: {w}" for r in confirm + pairs for w in r["warnings"]]
    code, code_warnings = provenance.code_versions(cells)
    warnings += code_warnings
    comparisons = [{k: v for k, v in r.items() if k not in ("ia", "ib")} for r in confirm + pairs]

    Q_now = max(len(d.questions) for d in data)
    plan = (question_planning(data, cell_pairs, sesoi, alpha, power) if evaluation_only
            else planning(comps, sesoi, Q_now, alpha, power))
    summary = {
        "cells": out_cells, "comparisons": comparisons,
        "bootstrap": {"B": B, "rng_seed": rng_seed, "method":
                      "Monte Carlo (multivariate t) critical value of the simultaneous "
                      "max-|t| intervals; cell and comparison intervals are analytic "
                      "(docs/statistics.md)"},
        "method": "method-of-moments variance of the crossed seeds x questions design, t "
                  "interval with bounded-seed Satterthwaite df (docs/statistics.md)",
        "env": env, "metric": metric,
        "metric_words": lb.env_word(lb.metric_words(metric), env), "alpha": alpha,
        "power": power, "sesoi": sesoi, "all_pairs": all_pairs,
        "lower_is_better": lower_is_better,
        "factors": sweep.factors, "short_names": names, "levels": sweep.levels,
        "baseline": cells[base].factors, "baseline_label": cells[base].label,
        "baseline_short": lb.cell_name(cells[base].factors, names),
        "baseline_source": baseline_source if baseline else "only cell",
        "steps": sorted(set(steps.values()), key=str), "n_questions": Q_now,
        "hops": _breakdown_levels(out_cells),
        "factor_levels": _factor_levels(sweep, cells, data, alpha, pool, metric),
        "variance_components": comps,
        "evaluation_only": evaluation_only,
        "warm_start": None if evaluation_only else warm_start(cells),
        "unit": "question" if evaluation_only else "seed",
        "seed_variance": None if evaluation_only else seed_variance(cells, data, pool,
                                                                     seed_variance_model),
        "mde_table": plan.get("mde_table") if plan else None,
        "planning": plan, "warnings": warnings, "code": code,
        "incomplete": sweep.incomplete, "failed": failed, "missing": sweep.missing,
        "duplicates": sweep.duplicates, "exclusions": exclusions,
    }
    summary.update(_world(world, own, out_cells))
    return _clean(summary)


def _world(world: dict, own: list, out_cells: list) -> dict:
    """{"world": the breakdown label and the labels of the own behaviour columns some
    cell estimated} when the runs' environment.json give either; {} otherwise (a summary
    of runs without environment.json is unchanged)."""
    labels = {n: world["behaviour_labels"][n] for n in own
              if any(n in c["behaviour"] for c in out_cells)}
    out = {k: v for k, v in (("breakdown_label", world.get("breakdown_label")),
                             ("behaviour_labels", labels)) if v}
    return {"world": out} if out else {}


def warm_start(cells) -> dict | None:
    """The first evaluation of every run (the warm start when it is step 0): runs whose
    rows at that step are identical (same weights, evaluation set, sampling seed and
    samples: the arms of a grid before their first update; reward fields aside, which
    each arm computes with its own scheme) are one evaluation, counted once; None when no run was evaluated before its analysed step."""
    groups: dict = {}
    for c in cells:
        for r in c.runs:
            rows = r.eval_rows()
            first = min(x["step"] for x in rows)
            # the episodes, not the arm's reward of them (each arm scores them its way)
            key = json.dumps([{k: v for k, v in x.items() if k != "_line"
                               and not k.startswith("reward")} for x in rows
                              if x["step"] == first], sort_keys=True, default=str)
            groups.setdefault((first, hashlib.sha256(key.encode()).hexdigest()), []).append(
                {"cell": c.label, "seed": r.seed})
    if len(groups) == sum(len(v) for v in groups.values()):
        return {"evaluations": len(groups), "distinct": len(groups), "shared": []}
    shared = [{"step": k[0], "seed": v[0]["seed"], "cells": [x["cell"] for x in v]}
              | _seeds_if_several(v) for k, v in groups.items() if len(v) > 1]
    return {"evaluations": sum(len(v) for v in groups.values()), "distinct": len(groups),
            "shared": shared}


def _seeds_if_several(group: list) -> dict:
    """{"seeds": [...]} when one shared first evaluation spans runs of several seeds (an
    evaluation that does not depend on the seed, e.g. greedy decoding); else {}."""
    seeds = sorted({x["seed"] for x in group}, key=sort_key)
    return {"seeds": seeds} if len(seeds) > 1 else {}


def is_evaluation_only(sweep: Sweep) -> bool:
    """No run trained: every run's trainer.max_steps is 0 (fixed weights)."""
    runs = [r for c in sweep.cells for r in c.runs]
    return bool(runs) and all(r.config.get("trainer.max_steps") == 0 for r in runs)


def seed_variance(cells, data, pool, model: str) -> dict | None:
    """The variance model the intervals and tests use (`model`), the seed variance pooled
    over the cells (used by them when pooled, by the planning tables always) and each
    cell's own estimate, with the ratio of the largest to the smallest (a description,
    not a test that chooses)."""
    used = pool is not None
    pool = pool or st.pool([d.y for d in data])
    if pool is None:
        return None
    per_cell = [{"label": c.label, "n_seeds": d.n_seeds,
                 "sigma2_seed": (st.components(d.y) or {}).get("sigma2_seed")}
                for c, d in zip(cells, data)]
    own = [c["sigma2_seed"] for c in per_cell if c["sigma2_seed"] is not None]
    ratio = max(own) / min(own) if len(own) > 1 and min(own) > 0 else None
    return {"model": model,
            "pooled": {"sigma2_seed": float(pool.sigma2_seed), "df": pool.nu, "used": used},
            "per_cell": per_cell, "max_min_ratio": ratio}


def _comparisons(sweep, cells, data, base, alpha, names, all_pairs, pool):
    """The confirmatory family (cells and main effects vs the baseline) and, when asked
    for, all pairs; verdicts come later (_family)."""
    fac = [c.factors for c in cells]
    confirm = [_comparison(data, {i: 1.0, base: -1.0}, alpha, i, base, fac[i], fac[base],
                           "cell", names, "confirmatory", pool)
               for i in range(len(cells)) if i != base]
    confirm += _main_effects(sweep, cells, base, data, alpha, names, pool)
    pairs = []
    if all_pairs:
        pairs = [_comparison(data, {i: 1.0, j: -1.0}, alpha, i, j, fac[i], fac[j], "cell",
                             names, "all_pairs", pool)
                 for i, j in itertools.combinations(range(len(cells)), 2)]
    return confirm, pairs


def _annotate(rows, data, comps, base, B, rng_seed, sesoi, alpha, power, pool) -> None:
    """Planning MDE, seeds needed for the SESOI, whether equivalence is reachable, P(A > B)
    and the exact permutation p over seeds, and the simultaneous intervals of the tested
    cell-vs-baseline comparisons."""
    tested = [r for r in rows if r["family"] == "confirmatory" and r["kind"] == "cell"
              and r["delta"] is not None and r["inferential"]]
    sim = simultaneous(tested, data, base, alpha, B, rng_seed, pool) if tested else None
    for r, ci in zip(tested, sim or []):
        r["ci_simultaneous"] = ci
    for r in rows:
        r["mde"] = _mde(r, data, comps, alpha, power)
        # the MDE the test's own SE and df imply (issue 65): beside the planning one,
        # which uses pooled components even where the tests use each cell's own variance
        r["mde_observed"] = (float(st.mde(r["se"], r["df"], alpha, power))
                             if r.get("se") and r.get("df") and math.isfinite(r["df"])
                             else None)
        if r["kind"] == "cell" and r["delta"] is not None and data[r["ia"]].unit == "seed":
            qs = shared(data, [r["ia"], r["ib"]])
            a, b = (rows_of(data[k], qs).mean(axis=0) for k in (r["ia"], r["ib"]))
            r["p_improvement"] = st.prob_improvement(a, b)
            perm = st.permutation_test(a, b) if r["inferential"] else {}
            r["p_perm"], r["p_perm_min"] = perm.get("p"), perm.get("min_p")
        if comps is not None and r["kind"] == "cell" and r["delta"] is not None:
            r["seeds_needed"] = st.seeds_needed(sesoi, max(r["n_questions"], 2), comps,
                                                alpha, power)
        if comps is not None and r["delta"] is not None and r["n_questions"] >= 2:
            Sa, Sb = _sizes(r, data)
            v, df = st.planned(Sa, r["n_questions"], comps, S_b=Sb)
            r["equivalence_reachable"] = st.tost_reachable(v, df, sesoi, alpha, power)
            r["equivalence_seeds"] = st.equivalence_seeds(sesoi, r["n_questions"], comps,
                                                          alpha, power)


def _mde(r, data, comps, alpha, power):
    """Planning MDE (variance components, not the observed SE) at the comparison's seeds
    and shared questions; a main effect over m pairs counts m x the seeds."""
    if comps is None or r["n_questions"] < 2:
        return None
    Sa, Sb = _sizes(r, data)
    v, df = st.planned(Sa, r["n_questions"], comps, S_b=Sb)
    if not math.isfinite(df):
        return None
    return float(st.mde(math.sqrt(v), df, alpha, power))


def _sizes(r, data) -> tuple[int, int]:
    """Seeds of the two sides of a comparison; a main effect over m pairs: m x the fewest."""
    if r["kind"] == "cell":
        return data[r["ia"]].n_seeds, data[r["ib"]].n_seeds
    return (r["n_pairs"] * min(d.n_seeds for d in data),) * 2


def _factor_levels(sweep, cells, data, alpha, pool, metric) -> list[dict]:
    """Marginal mean of each factor level (the mean of its cells) with its interval."""
    out = []
    for f in sweep.factors:
        for level in sweep.levels[f]:
            members = [j for j, c in enumerate(cells) if str(c.factors[f]) == str(level)]
            if not members:
                continue
            r = evaluate(data, {j: 1.0 / len(members) for j in members}, alpha, pooled=pool)
            if r["estimate"] is None:
                continue
            n = sum(len(data[j].questions) * data[j].y.shape[1] for j in members)
            ci = bounded(r, est.field_kind(metric), n, alpha)
            out.append({"factor": f, "level": level, "mean": r["estimate"], "ci": ci,
                        "n_cells": len(members), "n_questions": r["n_questions"]})
    return out
