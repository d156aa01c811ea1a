"""Per-question matrices from eval rows: per-question means over the K samples first
(never pooled answers), one (questions x seeds) matrix per cell on the questions every
seed of the cell evaluated. Values of the wrong type are errors naming file:line."""
from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from analysis.collect import AnalysisError, Cell, Run
from analysis.validate import is_missing, kind
from analysis.world import level_column

# behaviour table: name -> (words, eval field, transform); the fields are those of
# ablate/harness/episode.py Episode.behaviour() (generic) and of each environment's
# behaviour(): ablate/envs/email/env.py (searches, reads, ...) and
# ablate/envs/coderepair/env.py (edits, test runs, ...); a cell reports those it has
BEHAVIOUR = {
    "keywords_per_search": ("keywords per search", "keywords_per_search", float),
    "searches": ("searches", "searches", float),
    "reads": ("emails read", "reads", float),
    "answer_rate": ("answer rate", "answered", float),
    "idk_rate": ("\"I don't know\" rate", None, None),
    "fabricated_source_rate": ("fabricated-source rate", "fabricated_sources",
                               lambda x: (x > 0).astype(float)),
    "mean_turns": ("turns", "turns", float),
    "zero_hit_rate": ("zero-hit search rate", "zero_hit_rate", float),
    "malformed_calls": ("malformed calls", "malformed_calls", float),
    "edits": ("edits that changed the code", "edits", float),
    "test_runs": ("test runs", "test_runs", float),
    "idle_test_runs": ("test runs without a change", "idle_test_runs", float),
    "failing_submission_rate": ("failing-submission rate", "failing_submissions",
                                lambda x: (x > 0).astype(float)),
}
RATES = {"answer_rate", "idk_rate", "fabricated_source_rate", "zero_hit_rate",
         "failing_submission_rate"}


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
    unit: str = "seed"               # the replicate: "seed", or "question" (fixed weights)
    base: float | None = None        # a change's mean at its first evaluation

    @property
    def n_seeds(self) -> int:
        return self.y.shape[1]

    def per_question(self) -> "CellData":
        """An evaluation-only cell (fixed weights): the seeds are sampling streams of one
        policy, replicates within a question; y[q] is the mean over all of them and the
        question is the unit of replication."""
        return CellData(y=self.y.mean(axis=1, keepdims=True), questions=self.questions,
                        seeds=self.seeds, samples=self.samples * self.y.shape[1],
                        steps=self.steps, hops=self.hops, unit="question")


def field_kind(name: str) -> str | None:
    """"rate" (a mean of 0/1 outcomes or of fractions: bounded intervals), "count" (a
    mean of counts: non-negative intervals) or None, for a metric or BEHAVIOUR name."""
    if name in RATES:
        return "rate"
    key = BEHAVIOUR[name][1] if name in BEHAVIOUR else name
    k = kind(key) if key else None
    return "rate" if k in ("binary", "rate") else k


NUMBER_TYPES = {bool, int, float, type(None)}


def _column(rows: list[dict], key: str, run: Run, required: bool = False) -> np.ndarray:
    """Field `key` of every row as float (NaN where missing or non-finite); a value that
    is not a number or boolean is an error naming file:line, and so is a missing, null or
    NaN value when `required` (the analysed metric: leaving its row out would change
    what the mean estimates)."""
    vals = [r.get(key) for r in rows]
    if required:
        for r, v in zip(rows, vals):
            if is_missing(v):
                what = "missing" if key not in r else f"{v!r}"
                raise AnalysisError(f"{run.eval_file}:{r.get('_line', '?')}: '{key}' is "
                                    f"{what}; the analysed metric needs a value in every "
                                    "row (a row left out would change the estimate)")
    if not set(map(type, vals)) <= NUMBER_TYPES:
        for r, v in zip(rows, vals):
            if type(v) not in NUMBER_TYPES:
                raise AnalysisError(f"{run.eval_file}:{r.get('_line', '?')}: '{key}' is "
                                    f"{v!r} ({type(v).__name__}); expected true/false or "
                                    "a number")
    x = np.array(vals, dtype=float)           # None -> NaN
    x[~np.isfinite(x)] = np.nan
    return x


def _field(rows: list[dict], key, transform, run: Run, required: bool = False) -> np.ndarray:
    if key is None:      # "I don't know": ended with a final answer that is an abstention
                         # (ablate/harness/episode.py is_abstention), or an `idk` field
        ended = np.array([r.get("end_reason") == "answer" for r in rows])
        answered = _column(rows, "answered", run)
        if any("idk" in r for r in rows):
            return _column(rows, "idk", run)
        x = np.where(ended, (answered == 0).astype(float), 0.0)
        x[np.isnan(answered) | np.array(["end_reason" not in r for r in rows])] = np.nan
        return x
    x = _column(rows, key, run, required)
    if transform is not float:
        ok = ~np.isnan(x)
        x[ok] = transform(x[ok])
    return x


def _means(idx: np.ndarray, n: int, x: np.ndarray) -> np.ndarray:
    """Mean of x per group idx (NaN values skipped; NaN for an empty group)."""
    ok = ~np.isnan(x)
    cnt = np.bincount(idx[ok], minlength=n)
    tot = np.bincount(idx[ok], weights=x[ok], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def select_step(run: Run, step: int | None):
    steps = sorted({r["step"] for r in run.eval_rows()})
    if step is None:
        return steps[-1]
    return step if step in steps else None


def per_question(run: Run, step, fields: dict, required=()) -> tuple:
    """Task ids at `step`, {name: per-task mean over samples (NaN: no value)} for fields
    {name: (key, transform)}, task_id -> its difficulty level (the rows' column the world
    names: analysis/world.py), the most samples of a task, and
    {name: (rows without a value, rows with one)}; fields in `required` must have a
    value in every row."""
    rows = [r for r in run.eval_rows() if r["step"] == step]
    tasks, idx, counts = np.unique(np.array([str(r["task_id"]) for r in rows]),
                                   return_inverse=True, return_counts=True)
    idx = idx.ravel()
    first, level = {}, level_column(run, rows)
    for r in rows:
        first.setdefault(str(r["task_id"]), (r["task_id"], r.get(level)))
    ids = [first[t][0] for t in tasks]
    hops = {first[t][0]: first[t][1] for t in tasks}
    means, missing = {}, {}
    for name, (key, tr) in fields.items():
        x = _field(rows, key, tr, run, name in required)
        means[name] = _means(idx, len(tasks), x)
        missing[name] = (int(np.isnan(x).sum()), int((~np.isnan(x)).sum()))
    return ids, means, hops, int(counts.max()) if counts.size else 0, missing


def cell_matrices(cell: Cell, steps: dict, fields: dict, warnings: list,
                  required=(), exclusions: list | None = None) -> dict:
    """{name: CellData} for one cell: per-question means of every field, on the
    questions all of the cell's seeds evaluated (others dropped, with a warning). Rows
    without a value of a field that other rows of the cell have are left out of that
    field only, counted in `exclusions` and named in a warning."""
    per_run, K, hops, missing = [], 0, {}, defaultdict(lambda: [0, 0])
    for run in cell.runs:
        ids, m, h, k, miss = per_question(run, steps[str(run.path)], fields, required)
        per_run.append((ids, m))
        hops.update(h)
        K = max(K, k)
        for name, (n_miss, n_have) in miss.items():
            missing[name][0] += n_miss
            missing[name][1] += n_have
    _count_exclusions(cell, missing, warnings, exclusions)
    out = {}
    run_steps = tuple(sorted({steps[str(r.path)] for r in cell.runs}))
    if len(run_steps) > 1:
        warnings.append(f"{cell.label}: its seeds are analysed at different steps "
                        f"({'/'.join(map(str, run_steps))}); pass --step to align them")
    same = all(ids == per_run[0][0] for ids, _ in per_run)
    for n_i, name in enumerate(fields):
        if same:                              # every seed saw the same tasks: stack
            full = np.column_stack([m[name] for _, m in per_run])
            keep = ~np.isnan(full).any(axis=1)
            union = int((~np.isnan(full)).any(axis=1).sum())
            qs = [t for t, k in zip(per_run[0][0], keep) if k]
            y = full[keep]
        else:
            have = [{t: v for t, v in zip(ids, m[name]) if not np.isnan(v)}
                    for ids, m in per_run]
            common = set.intersection(*(set(h) for h in have))
            union = len(set.union(*(set(h) for h in have)))
            qs = sorted(common, key=lambda t: (str(type(t)), t))
            y = np.array([[h[t] for h in have] for t in qs], float).reshape(len(qs), len(have))
        if not qs:
            continue
        if n_i == 0 and len(qs) < union:
            warnings.append(f"{cell.label}: its seeds evaluated different questions; "
                            f"{len(qs)} of {union} questions evaluated by every seed are used")
        out[name] = CellData(y=y, questions=qs, seeds=cell.seeds, samples=K, steps=run_steps,
                             hops={t: hops.get(t) for t in qs})
    return out


def _count_exclusions(cell: Cell, missing: dict, warnings: list, exclusions) -> None:
    for name, (n_miss, n_have) in missing.items():
        if n_miss and n_have:          # absent from every row: a field the env lacks
            if exclusions is not None:
                exclusions.append({"cell": cell.label, "field": name, "excluded": n_miss,
                                   "rows": n_miss + n_have})
            warnings.append(f"{cell.label}: '{name}' has no value (missing, null or NaN) in "
                            f"{n_miss} of {n_miss + n_have} rows; those rows are left out "
                            f"of '{name}' only")


def own_fields(cells: list[Cell], steps: dict, labels: dict, metric: str) -> list[str]:
    """A world's own behaviour columns (environment.json `behaviour_labels`, analysis/
    world.py) to estimate as BEHAVIOUR fields are: those BEHAVIOUR does not read (by
    name or row field), nor the metric or a reward, whose analysed rows hold a number
    or true/false in some row and nothing else but null."""
    taken = set(BEHAVIOUR) | {key for _, key, _ in BEHAVIOUR.values()} | {metric}
    names = [k for k in labels if k not in taken and k.split("/")[0] != "reward"]
    rows = [r for c in cells for run in c.runs for r in run.eval_rows()
            if r["step"] == steps[str(run.path)]]
    return [k for k in names if _numbers(r.get(k) for r in rows)]


def _numbers(values) -> bool:
    have = [type(v) for v in values if v is not None]
    return bool(have) and set(have) <= NUMBER_TYPES


def reward_fields(cells: list[Cell], steps: dict) -> list[str]:
    names = set()
    for c in cells:
        for run in c.runs:
            at = steps[str(run.path)]
            for r in itertools.islice((r for r in run.eval_rows() if r["step"] == at), 50):
                names.update(k for k in r if k == "reward" or k.startswith("reward/"))
    return sorted(names, key=lambda k: (k != "reward", k))


def step_task_means(run: Run, metric: str):
    """(steps, task ids, means[step, task]) of the metric over samples, NaN if absent."""
    rows = run.eval_rows()
    x = _column(rows, metric, run, required=True)
    steps, si = np.unique(np.array([r["step"] for r in rows]), return_inverse=True)
    tasks, ti = np.unique(np.array([str(r["task_id"]) for r in rows]), return_inverse=True)
    m = _means(si.ravel() * len(tasks) + ti.ravel(), len(steps) * len(tasks), x)
    return list(steps), list(tasks), m.reshape(len(steps), len(tasks))


def curve_matrices(cell: Cell, metric: str) -> dict:
    """step -> CellData of the metric at that step, on the questions every seed of the
    cell evaluated at that step (steps some seed lacks are left out)."""
    per_run = [step_task_means(run, metric) for run in cell.runs]
    steps = sorted(set.intersection(*(set(p[0]) for p in per_run)))
    tasks = sorted(set.intersection(*(set(p[1]) for p in per_run)))
    out = {}
    for s in steps:
        cols = []
        for st_, ts, m in per_run:
            pos = {t: i for i, t in enumerate(ts)}
            cols.append(m[st_.index(s), [pos[t] for t in tasks]])
        y = np.column_stack(cols)
        keep = ~np.isnan(y).any(axis=1)
        if keep.any():
            out[s.item() if hasattr(s, "item") else s] = CellData(
                y=y[keep], questions=[t for t, k in zip(tasks, keep) if k], seeds=cell.seeds)
    return out


def is_number(v) -> bool:
    """A finite int or float (not a bool): a metrics.jsonl value that can be summed."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def train_curves(cell: Cell, keys=("reward/mean", "accuracy", "answered")) -> dict:
    """metrics.jsonl scalars per optimizer step: mean over the seeds that logged them and
    its standard error over seeds (0 with one seed)."""
    out = {}
    for key in keys:
        by_step = defaultdict(list)
        for run in cell.runs:
            for r in run.metrics_rows():
                v = r.get(key)
                if is_number(v):
                    by_step[r["step"]].append(float(v))
        if by_step:
            steps = sorted(by_step)
            out[key] = {"steps": steps, "mean": [float(np.mean(by_step[s])) for s in steps],
                        "se": [float(np.std(by_step[s], ddof=1) / math.sqrt(len(by_step[s])))
                               if len(by_step[s]) > 1 else 0.0 for s in steps]}
    return out
