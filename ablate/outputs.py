"""A cell's output directory: the files `analysis` reads and the resume bookkeeping.

    <cell>/config.yaml         resolved config (Hydra also writes .hydra/config.yaml)
    <cell>/metrics.jsonl       one row per optimizer step
    <cell>/eval.jsonl          one row per (evaluation step, question, sample)
    <cell>/trajectories.jsonl  readable sampled episodes, per evaluation
    <cell>/trajectories.txt    the same, rendered as text
    <cell>/ckpt/               learner checkpoints
    <cell>/COMPLETE            written last: the cell finished (analysis trusts only these)

Rows are appended and flushed one line at a time, so a killed run leaves whole lines; on
resume every JSONL file is cut back to the rows of the restored step (rewritten
atomically), so a resumed cell reproduces an uninterrupted one row for row.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

COMPLETE = "COMPLETE"
JSONL_FILES = ("metrics.jsonl", "eval.jsonl", "trajectories.jsonl")


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL file; a torn last line (killed mid-write) is dropped."""
    if not path.exists():
        return []
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # the writer died mid-line
            rows.append(json.loads(line))
    return rows


class CellDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.ckpt = self.path / "ckpt"

    @property
    def complete(self) -> bool:
        return (self.path / COMPLETE).exists()

    def write_config(self, cfg: DictConfig) -> None:
        atomic_write_text(self.path / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))

    def append(self, name: str, rows: list[dict] | dict) -> None:
        rows = [rows] if isinstance(rows, dict) else rows
        with (self.path / name).open("a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False, default=_jsonable) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def rows(self, name: str) -> list[dict]:
        return read_jsonl(self.path / name)

    def truncate_after(self, step: int) -> None:
        """Drop rows of steps > `step` (work done after the restored checkpoint)."""
        for name in JSONL_FILES:
            path = self.path / name
            if path.exists():
                keep = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
                atomic_write_text(path, "".join(
                    json.dumps(r, ensure_ascii=False) + "\n" for r in keep))

    def write_text(self, name: str, text: str, append: bool = False) -> None:
        if append:
            with (self.path / name).open("a", encoding="utf-8") as fh:
                fh.write(text)
        else:
            atomic_write_text(self.path / name, text)

    def mark_complete(self, summary: dict) -> None:
        atomic_write_text(self.path / "summary.json", json.dumps(summary, indent=2, default=_jsonable))
        atomic_write_text(self.path / COMPLETE, "")


def _jsonable(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
