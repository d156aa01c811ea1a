"""Type and range checks of the rows the analysis reads: one-line errors naming
FILE:LINE and the field. The field kinds follow what the cells write: the episode row of
ablate/harness/episode.py (correct, answered, turns, ...), and each environment's
behaviour() (ablate/envs/email/env.py, ablate/envs/coderepair/env.py).

A missing, null or NaN value of the *analysed* metric is an error (estimates.py: a row
left out of a mean is a silent change of the estimand); of any other field it is an
explicit exclusion, counted per cell and field in summary.json and the report."""
from __future__ import annotations

import math
from pathlib import Path

from analysis.errors import AnalysisError

# 0/1 outcomes of one episode: true/false, or the numbers 0 and 1
BINARY = {"correct", "answered", "read_after_hit", "idk"}
# fractions of one episode's actions: a number in [0, 1] (also any field ending in _rate)
RATE = {"zero_hit_rate"}
# counts and sizes of one episode: a number >= 0
COUNT = {"turns", "searches", "reads", "edits", "noop_edits", "test_runs", "idle_test_runs",
         "failing_submissions", "malformed_calls", "fabricated_sources", "evidence_read",
         "keywords_per_search", "retries_used", "parser_repairs", "think_tokens",
         "response_tokens", "sample"}


def kind(field: str) -> str | None:
    if field in BINARY:
        return "binary"
    if field in RATE or field.endswith("_rate"):
        return "rate"
    if field in COUNT:
        return "count"
    return None


def _where(path: Path, row: dict) -> str:
    return f"{path}:{row.get('_line', '?')}"


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_missing(v) -> bool:
    """null or a non-finite number (JSON NaN/Infinity parse to floats)."""
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def check_value(path: Path, row: dict, field: str, v) -> None:
    """An error naming FILE:LINE and the field when v is not of the field's kind;
    null/NaN pass (they are handled where the field is used)."""
    if is_missing(v):
        return
    k = kind(field)
    if not isinstance(v, (bool, int, float)):
        if isinstance(v, (str, list, dict)) and k is None and not field.startswith("reward"):
            return                      # a field the analysis does not read as a number
        raise AnalysisError(f"{_where(path, row)}: '{field}' is {v!r} "
                            f"({type(v).__name__}); expected true/false or a number")
    if k == "binary" and not (isinstance(v, bool) or v in (0, 1)):
        raise AnalysisError(f"{_where(path, row)}: '{field}' is {v!r}; expected true/false "
                            "or 0/1 (one episode's outcome)")
    if k == "rate" and isinstance(v, (int, float)) and not 0 <= v <= 1:
        raise AnalysisError(f"{_where(path, row)}: '{field}' is {v!r}; expected a rate in "
                            "[0, 1]")
    if k == "count" and not isinstance(v, bool) and v < 0:
        raise AnalysisError(f"{_where(path, row)}: '{field}' is {v!r}; expected a count "
                            ">= 0")


def check_eval_rows(path: Path, rows: list[dict]) -> None:
    """eval.jsonl: `step` an integer, `task_id` a string, and every known field of its
    kind (BINARY, RATE, COUNT; reward fields numbers)."""
    for r in rows:
        if not is_int(r["step"]):
            raise AnalysisError(f"{_where(path, r)}: 'step' is {r['step']!r} "
                                f"({type(r['step']).__name__}); expected an integer")
        if not isinstance(r["task_id"], str):
            raise AnalysisError(f"{_where(path, r)}: 'task_id' is {r['task_id']!r} "
                                f"({type(r['task_id']).__name__}); expected a string")
        for field, v in r.items():
            if field not in ("step", "task_id", "_line"):
                check_value(path, r, field, v)


ROW_KEY = ("step", "task_id", "sample", "decoding")


def repeated_rows(path: Path, rows: list[dict], allow: bool = False) -> list[dict]:
    """eval.jsonl's rows, each (step, task_id, sample, decoding) once: a repeat (rows
    appended twice) is an error naming FILE:LINE and the key, unless `allow`, which keeps
    the first and drops the repeats."""
    seen: dict = {}
    kept = []
    for r in rows:
        key = tuple(r.get(k) for k in ROW_KEY)
        if key not in seen:
            seen[key] = r
            kept.append(r)
        elif not allow:
            what = ", ".join(f"{k}={v!r}" for k, v in zip(ROW_KEY, key))
            raise AnalysisError(f"{_where(path, r)}: repeats the row of line "
                                f"{seen[key].get('_line', '?')} ({what}); a key may appear "
                                "once (--allow-duplicates keeps the first)")
    return kept


def check_metrics_rows(path: Path, rows: list[dict]) -> None:
    """metrics.jsonl: `step` an integer (its scalars are read where they are numbers)."""
    for r in rows:
        if not is_int(r["step"]):
            raise AnalysisError(f"{_where(path, r)}: 'step' is {r['step']!r} "
                                f"({type(r['step']).__name__}); expected an integer")
