"""Per-question matrices from eval rows: per-question means over the K samples first
(never pooled answers), one (questions x seeds) matrix per cell on the questions every
seed of the cell evaluated. Values of the wrong type are errors naming file:line."""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from analysis.collect import AnalysisError, Cell, Run

# behaviour table of the EnronHop case study: name -> (words, eval field, transform);
# the fields are those of ablate/harness/episode.py Episode.behaviour()
BEHAVIOUR = {
    "keywords_per_search": ("keywords per search", "keywords_per_search", float),
    "searches": ("searches", "searches", float),
    "reads": ("emails read", "reads", float),
    "answer_rate": ("answer rate", "answered", float),
    "idk_rate": ("\"I don't know\" rate", None, None),
    "fabricated_source_rate": ("fabricated-source rate", "fabricated_sources",
                               lambda v: float(v > 0)),
    "mean_turns": ("turns", "turns", float),
    "zero_hit_rate": ("zero-hit search rate", "zero_hit_rate", float),
    "malformed_calls": ("malformed calls", "malformed_calls", float),
}
RATES = {"answer_rate", "idk_rate", "fabricated_source_rate", "zero_hit_rate"}


def idk(row: dict):
    """An abstention: the episode ended with a final answer that was not an answer
    (ablate/harness/episode.py is_abstention), or an explicit `idk` field."""
    if "idk" in row:
        return row["idk"]
    if "end_reason" not in row or "answered" not in row:
        return None
    return float(row["end_reason"] == "answer" and not row["answered"])


@dataclass
class CellData:
    """y[q, s]: mean over samples of question q (row order = `questions`) for seed s,
    on the questions every seed of the cell evaluated."""
    y: np.ndarray
    questions: list
    seeds: tuple
    samples: int = 1                 # K: samples per question (max over seeds)
    steps: tuple = ()
    hops: dict = field(default_factory=dict)

    @property
    def n_seeds(self) -> int:
        return self.y.shape[1]


def _number(row: dict, key: str, run: Run, transform=float):
    v = row.get(key)
    if v is None:
        return None
    if isinstance(v, str) or not isinstance(v, (bool, int, float)):
        raise AnalysisError(f"{run.eval_file}:{row.get('_line', '?')}: '{key}' is {v!r} "
                            f"({type(v).__name__}); expected true/false or a number")
    x = transform(v)
    return x if math.isfinite(x) else None


def select_step(run: Run, step: int | None):
    steps = sorted({r["step"] for r in run.eval_rows()})
    if step is None:
        return steps[-1]
    return step if step in steps else None


def per_question(run: Run, step, fields: dict) -> tuple[dict, dict, int]:
    """{name: {task_id: mean over samples}} for fields {name: (key, transform)} at `step`,
    task_id -> hops, and the largest number of samples of a question."""
    acc = {name: defaultdict(list) for name in fields}
    hops, count = {}, defaultdict(int)
    for r in run.eval_rows():
        if r["step"] != step:
            continue
        t = r["task_id"]
        hops.setdefault(t, r.get("hops"))
        count[t] += 1
        for name, (key, tr) in fields.items():
            x = _number(r, key, run, tr) if key is not None else _idk(r, run)
            if x is not None:
                acc[name][t].append(x)
    means = {n: {t: sum(v) / len(v) for t, v in a.items()} for n, a in acc.items()}
    return means, hops, max(count.values(), default=0)


def _idk(row: dict, run: Run):
    v = idk(row)
    if v is None:
        return None
    return _number({"idk": v, "_line": row.get("_line")}, "idk", run)


def cell_matrices(cell: Cell, steps: dict, fields: dict, warnings: list) -> dict:
    """{name: CellData} for one cell: per-question means of every field, on the
    questions all of the cell's seeds evaluated (others dropped, with a warning)."""
    per_run = []
    K, hops = 0, {}
    for run in cell.runs:
        m, h, k = per_question(run, steps[str(run.path)], fields)
        per_run.append(m)
        hops.update(h)
        K = max(K, k)
    out = {}
    for name in fields:
        sets = [set(m[name]) for m in per_run]
        if not sets or not all(sets):
            continue
        common = set.intersection(*sets)
        union = set.union(*sets)
        if len(common) < len(union) and name == next(iter(fields)):
            warnings.append(f"{cell.label}: its seeds evaluated different questions; "
                            f"{len(common)} of {len(union)} questions evaluated by every "
                            f"seed are used")
        qs = sorted(common, key=lambda t: (str(type(t)), t))
        y = np.array([[m[name][t] for m in per_run] for t in qs], float).reshape(
            len(qs), len(per_run))
        out[name] = CellData(y=y, questions=qs, seeds=cell.seeds, samples=K,
                             steps=tuple(sorted({steps[str(r.path)] for r in cell.runs})),
                             hops={t: hops.get(t) for t in qs})
    return out


def reward_fields(cells: list[Cell], steps: dict) -> list[str]:
    names = set()
    for c in cells:
        for run in c.runs:
            for r in [r for r in run.eval_rows() if r["step"] == steps[str(run.path)]][:50]:
                names.update(k for k in r if k == "reward" or k.startswith("reward/"))
    return sorted(names, key=lambda k: (k != "reward", k))


def curve_matrices(cell: Cell, metric: str) -> dict:
    """step -> CellData of the metric at that step (questions all seeds evaluated)."""
    by_step: dict = defaultdict(list)
    for run in cell.runs:
        acc = defaultdict(lambda: defaultdict(list))
        for r in run.eval_rows():
            x = _number(r, metric, run)
            if x is not None:
                acc[r["step"]][r["task_id"]].append(x)
        for s, d in acc.items():
            by_step[s].append({t: sum(v) / len(v) for t, v in d.items()})
    out = {}
    for s, per_run in sorted(by_step.items()):
        if len(per_run) != len(cell.runs):
            continue                       # a seed without this step: no joint estimate
        qs = sorted(set.intersection(*(set(m) for m in per_run)), key=lambda t: (str(type(t)), t))
        if not qs:
            continue
        y = np.array([[m[t] for m in per_run] for t in qs], float)
        out[s] = CellData(y=y, questions=qs, seeds=cell.seeds)
    return out


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
