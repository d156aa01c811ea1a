"""What each run's environment.json says of its world (the cell writes it from the
environment's describe(), docs/environments.md): what the tasks' difficulty level counts
(`breakdown_label`, also the rows' column of it; `hops` in older rows) and what its own
behaviour columns count (`behaviour_labels`). A run
without the file (older runs) has neither, and the analysis keeps the built-in words
(analysis/labels.py ENV_WORDS, analysis/estimates.py BEHAVIOUR)."""
from __future__ import annotations

import json

from analysis.collect import Cell, Run, shown
from analysis.errors import AnalysisError

FILE = "environment.json"


def describe(run: Run) -> dict:
    """The run's environment.json ({} when it has none); a file that is not a JSON
    object, or labels that are not text, are errors naming it."""
    path = run.path / FILE
    if not path.exists():
        return {}
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise AnalysisError(f"{shown(path)}: not a readable JSON file ({e})") from None
    labels = d.get("behaviour_labels", {}) if isinstance(d, dict) else None
    if not isinstance(labels, dict) or not all(
            isinstance(v, str) for v in labels.values()) or not isinstance(
            d.get("breakdown_label", ""), str):
        raise AnalysisError(f"{shown(path)}: expected an object whose behaviour_labels "
                            "map columns to text and whose breakdown_label is text")
    return d


def level_column(run: Run, rows: list[dict]) -> str:
    """The rows' column of the tasks' difficulty level: the world's `breakdown_label`
    (ablate/loop/scoring.py names the column by it), `hops` in rows that predate that
    (every world's rows called it `hops` before) or lack the label."""
    label = describe(run).get("breakdown_label")
    return label if label and rows and label in rows[0] else "hops"


def world_of(cells: list[Cell], warnings: list) -> dict:
    """{"breakdown_label": the one label the runs that have one give (absent when none
    does, or they differ: a warning), "behaviour_labels": {column: label} over the runs,
    first seen first (a column labelled differently keeps its first label: a warning)}."""
    breakdown, labels, other = {}, {}, {}
    for run in (r for c in cells for r in c.runs):
        d = describe(run)
        if d.get("breakdown_label"):
            breakdown.setdefault(d["breakdown_label"], shown(run.path / FILE))
        for k, v in d.get("behaviour_labels", {}).items():
            if labels.setdefault(k, v) != v:
                other.setdefault(k, (v, shown(run.path / FILE)))
    warnings += [f"{f}: behaviour column '{k}' counts '{v}' here and '{labels[k]}' in an "
                 "earlier run; the first label is used" for k, (v, f) in other.items()]
    if len(breakdown) > 1:
        warnings.append("the runs' environment.json name different breakdown labels ("
                        + "; ".join(f"{k}: {f}" for k, f in breakdown.items())
                        + "); the tasks' `hops` keep the environment's built-in word")
    out = {"breakdown_label": next(iter(breakdown))} if len(breakdown) == 1 else {}
    return out | ({"behaviour_labels": labels} if labels else {})
