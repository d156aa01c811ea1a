"""The lifelong curves of a skill-library agent (agent=voyager, docs/agents.md; Wang et al.,
2023, "Voyager", arXiv:2305.16291, §3: skills over time, tasks solved, no forgetting): per
seed and per arm over training steps, and the last step's values with 95% intervals.

    library_size   metrics.jsonl `voyager/library_size`: skills in the library after the step
    skills_used    metrics.jsonl `voyager/skills_used`: use_skill calls per training episode
    solve_rate     eval.jsonl `correct`: the held-out solve rate (per-question mean over the
                   samples, then the mean over questions: docs/statistics.md sec. 1)
    forgetting     eval.jsonl `correct`: the share of held-out questions solved at an
                   earlier evaluation of the run and not at this one (solved: at least half
                   the samples correct, as ablate/agents/voyager.py's `voyager_forgotten`)

The two eval quantities come from the evaluation rows, so every arm of the design has them
(agent=react too) and the arms are measured alike. The library quantities exist only for
the cells that logged them. A design has lifelong curves when some run logged
`voyager/library_size`."""
from __future__ import annotations

from typing import Callable

import numpy as np

from analysis import stats as st
from analysis.collect import Cell, Run
from analysis.estimates import CellData, step_task_means, is_number

METRICS = {"library_size": "voyager/library_size", "skills_used": "voyager/skills_used"}
EVAL = ("solve_rate", "forgetting")
QUANTITIES = (*METRICS, *EVAL)
KIND = {"library_size": "count", "skills_used": "count", "solve_rate": "rate",
        "forgetting": "rate"}
# the neutral words of each quantity (analysis.labels.env_word gives the environment's)
WORDS = {"library_size": "skills in the library",
         "skills_used": "skills used per training episode",
         "solve_rate": "held-out solve rate", "forgetting": "held-out tasks forgotten"}


def has_library(cells: list[Cell]) -> bool:
    return any(METRICS["library_size"] in r for c in cells for run in c.runs
               for r in run.metrics_rows())


def _metric_curve(run: Run, key: str) -> tuple[list, list]:
    rows = sorted((r["step"], float(r[key])) for r in run.metrics_rows()
                  if is_number(r.get(key)))
    return [s for s, _ in rows], [v for _, v in rows]


def _eval_tables(run: Run) -> tuple[list, list, dict]:
    """(steps, task ids, {solve_rate, forgetting: array[step, task]}), NaN where a task
    was not evaluated at a step. forgotten[i] = solved at some step before i, not at i."""
    steps, tasks, m = step_task_means(run, "correct")
    evaluated = ~np.isnan(m)
    solved = evaluated & (np.nan_to_num(m) >= 0.5)
    before = np.vstack([np.zeros((1, len(tasks)), bool),
                        np.logical_or.accumulate(solved, axis=0)[:-1]])
    forgotten = np.where(evaluated, (before & ~solved).astype(float), np.nan)
    return [int(s) for s in steps], tasks, {"solve_rate": m, "forgetting": forgotten}


def _seed_curves(cell: Cell) -> tuple[dict, dict]:
    """{quantity: {seed: {steps, values}}} and the eval tables of each run."""
    curves: dict = {q: {} for q in QUANTITIES}
    tables = {}
    for run in cell.runs:
        seed = str(run.seed)
        for q, key in METRICS.items():
            steps, vals = _metric_curve(run, key)
            if steps:
                curves[q][seed] = {"steps": steps, "values": vals}
        tables[seed] = _eval_tables(run)
        steps, _, t = tables[seed]
        for q in EVAL:
            with np.errstate(invalid="ignore"):
                vals = np.nanmean(t[q], axis=1)
            curves[q][seed] = {"steps": steps, "values": [float(v) for v in vals]}
    return {q: v for q, v in curves.items() if v}, tables


def _mean_curve(per_seed: dict) -> dict:
    """The mean over seeds at the steps every seed has."""
    common = sorted(set.intersection(*(set(v["steps"]) for v in per_seed.values())))
    at = [dict(zip(v["steps"], v["values"])) for v in per_seed.values()]
    return {"steps": common, "mean": [float(np.mean([a[s] for a in at])) for s in common]}


def _eval_last(tables: dict, q: str, seeds: tuple) -> tuple[int, CellData] | None:
    """The quantity's questions x seeds matrix at the last step every seed evaluated, on
    the questions every seed evaluated there."""
    steps = set.intersection(*(set(tables[str(s)][0]) for s in seeds))
    if not steps:
        return None
    last = max(steps)
    cols = []
    for s in seeds:
        st_, tasks, t = tables[str(s)]
        cols.append(dict(zip(tasks, t[q][st_.index(last)])))
    qs = sorted(t for t in set.intersection(*(set(c) for c in cols))
                if all(not np.isnan(c[t]) for c in cols))
    if not qs:
        return None
    y = np.array([[c[t] for c in cols] for t in qs], float)
    return last, CellData(y=y, questions=qs, seeds=seeds)


def _seed_interval(values: list[float], kind: str, alpha: float) -> dict:
    """Mean over seeds with the t interval over seeds (a count: on the log scale, never
    below 0, stats.log_interval); no interval with one seed."""
    m, n = float(np.mean(values)), len(values)
    if n < 2:
        return {"mean": m, "ci": None, "n_seeds": n, "interval": "one seed: none"}
    se, df = float(np.std(values, ddof=1) / np.sqrt(n)), n - 1
    ci = (st.log_interval(m, se, df, alpha) if kind == "count"
          else [float(v) for v in st.interval(m, se, df, alpha)])
    return {"mean": m, "ci": ci, "n_seeds": n, "interval": "seeds"}


def summarise(cell: Cell, estimate: Callable, alpha: float) -> dict:
    """A cell's lifelong block of summary.json: `curves` {quantity: {seeds: {seed:
    {steps, values}}, steps, mean}} and `last` {quantity: {step, mean, ci, ...}}, the eval
    quantities' intervals from `estimate(CellData, kind)` (the analysis' cell-mean interval
    over seeds and questions), the library quantities' over seeds."""
    per_seed, tables = _seed_curves(cell)
    curves, last = {}, {}
    for q, seeds in per_seed.items():
        curves[q] = {"seeds": seeds, **_mean_curve(seeds)}
        if q in METRICS:
            ends = [v["values"][-1] for v in seeds.values()]
            steps = {v["steps"][-1] for v in seeds.values()}
            last[q] = {"step": max(steps), **_seed_interval(ends, KIND[q], alpha)}
            continue
        found = _eval_last(tables, q, cell.seeds)
        if found is not None:
            step, d = found
            r = estimate(d, KIND[q])
            last[q] = {"step": step, "mean": r["mean"], "ci": r["ci"], "n_seeds": d.n_seeds,
                       "n_questions": len(d.questions), "interval": r["interval"]}
    return {"curves": curves, "last": last}
