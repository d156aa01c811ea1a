"""Point estimates from eval rows: per-question means over the K samples first (never
pooled answers), then per-seed means over questions, then the mean over seeds."""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from analysis.bootstrap import CellData
from analysis.collect import AnalysisError, Cell, Run
from analysis.stats import nanmean

# behaviour metrics of the EnronHop analysis: name -> (eval field, transform)
BEHAVIOUR = {
    "keywords_per_search": ("keywords_per_search", float),
    "zero_hit_rate": ("zero_hit_rate", float),
    "read_after_hit_rate": ("read_after_hit", float),
    "answer_rate": ("answered", float),
    "fabricated_source_rate": ("fabricated_sources", lambda v: float(v > 0)),
    "mean_turns": ("turns", float),
    "malformed_calls": ("malformed_calls", float),
    "evidence_read": ("evidence_read", float),
}


def _value(row: dict, field: str, transform=float):
    v = row.get(field)
    if v is None:
        return None
    try:
        x = transform(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def run_steps(run: Run) -> list:
    return sorted({r["step"] for r in run.eval_rows()})


def select_step(run: Run, step: int | None):
    steps = run_steps(run)
    if step is None:
        return steps[-1]
    return step if step in steps else None


def per_question(rows: list[dict], field: str, transform=float) -> dict:
    """task_id -> mean over that task's samples (rows without the field are skipped)."""
    acc = defaultdict(list)
    for r in rows:
        x = _value(r, field, transform)
        if x is not None:
            acc[r["task_id"]].append(x)
    return {t: float(np.mean(v)) for t, v in acc.items()}


def rows_at(run: Run, step) -> list[dict]:
    return [r for r in run.eval_rows() if r["step"] == step]


def metric_matrix(cells: list[Cell], steps: dict, metric: str, questions: list,
                  transform=float) -> list[CellData]:
    """CellData (Q x S per-question means of `metric`) for every cell at its run's step."""
    qidx = {q: i for i, q in enumerate(questions)}
    out = []
    for c in cells:
        y = np.full((len(questions), len(c.runs)), np.nan)
        for j, run in enumerate(c.runs):
            rows = rows_at(run, steps[str(run.path)])
            if metric == "correct" and rows and "correct" not in rows[0]:
                raise AnalysisError(f"{run.eval_file}: rows have no 'correct' field")
            for t, m in per_question(rows, metric, transform).items():
                y[qidx[t], j] = m
        out.append(CellData(y=y, seeds=c.seeds))
    return out


def question_index(cells: list[Cell], steps: dict) -> tuple[list, dict]:
    """Sorted union of task ids at the analysed steps, and task_id -> hops."""
    hops = {}
    for c in cells:
        for run in c.runs:
            for r in rows_at(run, steps[str(run.path)]):
                hops.setdefault(r["task_id"], r.get("hops"))
    questions = sorted(hops, key=lambda t: (str(type(t)), t))
    return questions, hops


def seed_summary(y: np.ndarray) -> dict:
    """Mean over seeds of per-seed means, and the seed standard deviation."""
    sm = nanmean(y, axis=0) if y.size else np.array([])
    sm = sm[~np.isnan(sm)]
    if sm.size == 0:
        return {"mean": None, "seed_sd": None}
    return {"mean": float(sm.mean()),
            "seed_sd": float(sm.std(ddof=1)) if sm.size > 1 else None}


def reward_fields(cells: list[Cell], steps: dict) -> list[str]:
    names = set()
    for c in cells:
        for run in c.runs:
            for r in rows_at(run, steps[str(run.path)])[:50]:
                names.update(k for k in r if k == "reward" or k.startswith("reward/"))
    return sorted(names, key=lambda k: (k != "reward", k))


def cell_extras(cells: list[Cell], steps: dict, questions: list) -> list[dict]:
    """Reward components and behaviour metrics per cell (mean over seeds, seed sd)."""
    rfields = reward_fields(cells, steps)
    out = []
    for c in cells:
        rew, beh = {}, {}
        for f in rfields:
            y = metric_matrix([c], steps, f, questions)[0].y
            rew[f] = seed_summary(y)
        for name, (f, tr) in BEHAVIOUR.items():
            y = metric_matrix([c], steps, f, questions, tr)[0].y
            if not np.isnan(y).all():
                beh[name] = seed_summary(y)
        out.append({"reward": rew, "behaviour": beh})
    return out


def curves(cell: Cell, field: str = "correct", transform=float) -> dict:
    """Per-step mean over seeds with a t band across seeds and the per-seed values."""
    from scipy import stats as sps
    per_seed = []
    steps_all = set()
    for run in cell.runs:
        by_step = defaultdict(list)
        for r in run.eval_rows():
            by_step[r["step"]].append(r)
        vals = {}
        for s, rows in by_step.items():
            pq = per_question(rows, field, transform)
            if pq:
                vals[s] = float(np.mean(list(pq.values())))
        per_seed.append(vals)
        steps_all.update(vals)
    steps = sorted(steps_all)
    mean, lo, hi, seeds = [], [], [], []
    for s in steps:
        v = np.array([ps[s] for ps in per_seed if s in ps])
        m = float(v.mean())
        if v.size > 1:
            h = float(sps.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
        else:
            h = 0.0
        mean.append(m)
        lo.append(m - h)
        hi.append(m + h)
    for ps in per_seed:
        seeds.append([ps.get(s) for s in steps])
    return {"steps": steps, "mean": mean, "lo": lo, "hi": hi, "per_seed": seeds}


def train_curves(cell: Cell, keys=("reward/mean", "accuracy")) -> dict:
    """metrics.jsonl scalars per optimizer step: mean over the seeds that logged them."""
    out = {}
    for key in keys:
        by_step = defaultdict(list)
        for run in cell.runs:
            for r in run.metrics_rows():
                v = r.get(key)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    by_step[r["step"]].append(float(v))
        if by_step:
            steps = sorted(by_step)
            out[key] = {"steps": steps, "mean": [float(np.mean(by_step[s])) for s in steps]}
    return out
