"""A cell's output directory: the files `analysis` reads and the resume bookkeeping.

    <cell>/config.yaml         resolved config (Hydra also writes .hydra/config.yaml)
    <cell>/metrics.jsonl       one row per optimizer step
    <cell>/eval.jsonl          one row per (evaluation step, question, sample)
    <cell>/trajectories.jsonl  readable sampled episodes, per evaluation
    <cell>/trajectories.txt    the same, rendered as text
    <cell>/ckpt/               learner checkpoints
    <cell>/COMPLETE            written last: the cell finished (analysis trusts only these)
    <cell>/.lock               flock held by the process running the cell (its pid inside):
                               a second process on the same cell stops (CellBusy); the
                               kernel drops the lock when its holder dies, even by SIGKILL

Rows are appended and flushed one line at a time, so a killed run leaves whole lines; on
resume every JSONL file is cut back to the rows of the restored step (rewritten
atomically), so a resumed cell reproduces an uninterrupted one row for row.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ablate.core.errors import write_error
from ablate.core.locks import lock_holder, process_alive  # noqa: F401  (re-exported)

COMPLETE = "COMPLETE"
FAILED = "FAILED"    # a grid cell that raised: its one-line error, then the traceback
JSONL_FILES = ("metrics.jsonl", "eval.jsonl", "trajectories.jsonl")
TRAJECTORIES_TXT = "trajectories.txt"
# the header ablate.loop.cell.write_trajectories writes before each evaluation's episodes
_EVAL_HEADER = re.compile(r"^=+ evaluation at step (\d+) =+$", re.M)


def cut_trajectory_text(text: str, step: int) -> str:
    """trajectories.txt without the evaluations of steps > `step` (redone on resume)."""
    for m in _EVAL_HEADER.finditer(text):
        if int(m.group(1)) > step:
            return text[:m.start()]
    return text


def atomic_write_text(path: Path, text: str) -> None:
    """Write-then-rename: the old file stays whole if the write fails (disk full,
    read-only: an OutputWriteError naming the path and the free space)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True) if _removable(tmp) else None
        raise write_error(path, exc) from None


def _removable(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


class OutputFileError(ValueError):
    """A cell's output file is corrupt beyond a torn last line; names file:line."""


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL file; a torn last line (killed mid-write) is dropped, any other
    bad line is an OutputFileError naming file:line."""
    if not path.exists():
        return []
    rows = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.endswith("\n"):
                break  # the writer died mid-line
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise OutputFileError(f"{path}:{lineno}: not a JSON row ({exc.msg}); the "
                                      "file was edited or corrupted") from None
            if not isinstance(row, dict):
                raise OutputFileError(f"{path}:{lineno}: expected a JSON object")
            rows.append(row)
    return rows


def remove_stale_temps(folder: Path) -> list[Path]:
    """Delete ".<name>.tmp<pid>" files (atomic_write_text cut short by a kill) whose
    writer is no longer running; one that cannot be deleted (a read-only, archived
    cell) is left where it is."""
    removed = []
    for path in folder.glob(".*.tmp*"):
        pid = path.name.rsplit(".tmp", 1)[-1]
        if path.is_file() and pid.isdigit() and not process_alive(int(pid)):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                continue
            removed.append(path)
    return removed


def holder_command(pid) -> str:
    """` (a worker of a grid: python -m ablate -m ...)` or ` (python -m ablate ...)`: the
    holder's command line from /proc/<pid>/cmdline (proc(5)), cut to 160 characters, so
    the message names what runs the cell (a grid's worker only when it is one, issue 64);
    "" where it cannot be read."""
    try:
        argv = Path(f"/proc/{int(pid)}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return ""
    words = [a.decode("utf-8", "replace") for a in argv if a]
    if not words:
        return ""
    words[0] = Path(words[0]).name
    text = " ".join(words)
    text = text if len(text) <= 160 else text[:159] + "…"
    # Hydra's `-m` follows the module's name (`python -m ablate -m ...`)
    args = words[3:] if words[0].startswith("python") and words[1:2] == ["-m"] else words[1:]
    grid = _grid_worker(pid) or any(w in ("-m", "--multirun") for w in args)
    return f" (a worker of a grid: {text})" if grid else f" ({text})"


def _grid_worker(pid) -> bool:
    """A launcher's worker: it inherited the grid command's ABLATE_GRID_PID
    (ablate/apps/cli.py)."""
    try:
        return b"ABLATE_GRID_PID=" in Path(f"/proc/{int(pid)}/environ").read_bytes()
    except (OSError, ValueError):
        return False


class CellBusy(RuntimeError):
    """Another live process is running this cell (e.g. a worker of a killed grid)."""


def busy_message(path: Path, holder) -> str:
    """CellBusy's line: the process holding the cell's lock and its command."""
    return (f"cell {path} is being run by process {holder}{holder_command(holder)}: wait "
            "for it, or kill it and re-run to resume")


def has_work(path: Path) -> bool:
    """Any work of an earlier run on disk (rows or a checkpoint), the test run_cell's
    _started makes (ablate/loop/cell.py) before it refuses a changed config; the CLI asks
    it before Hydra writes into the cell (issue 64 item 10)."""
    path = Path(path)
    rows = any((path / n).is_file() and (path / n).stat().st_size > 0
               for n in ("metrics.jsonl", "eval.jsonl"))
    ckpt = path / "ckpt"
    return rows or (ckpt.is_dir() and any(ckpt.glob("step_*")))


class CellDir:
    """`writer=False` (ranks > 0 of a multi-rank cell): every write is skipped, reads
    see rank 0's files (a shared filesystem across nodes; docs/distributed.md)."""

    def __init__(self, path: str | Path, writer: bool = True):
        self.path = Path(path)
        self.writer = writer
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:   # read-only, full, a file in the way
            raise write_error(self.path, exc) from None
        self.ckpt = self.path / "ckpt"
        self._lock = None
        if writer:   # another node's pids are not visible here: the writer's job alone
            remove_stale_temps(self.path)

    def lock(self) -> None:
        """Hold the cell's lock for as long as this process lives (two writers would
        interleave rows and checkpoints); CellBusy names the process holding it."""
        try:
            fh = (self.path / ".lock").open("a+", encoding="utf-8")
        except OSError as exc:
            raise write_error(self.path / ".lock", exc) from None
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(self.path)   # the kernel's word; the file's without /proc
            if holder is None:
                fh.seek(0)
                holder = fh.read().strip() or "?"
            fh.close()
            raise CellBusy(busy_message(self.path, holder)) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._lock = fh

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()      # closing the file releases the flock
            self._lock = None

    @property
    def complete(self) -> bool:
        return (self.path / COMPLETE).exists()

    def write_config(self, cfg: DictConfig) -> None:
        if not self.writer:
            return
        atomic_write_text(self.path / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))

    def append(self, name: str, rows: list[dict] | dict) -> None:
        """Whole rows or none: a failed write (disk full, read-only) cuts the file back
        to its rows before it and is an OutputWriteError naming the path."""
        if not self.writer:
            return
        rows = [rows] if isinstance(rows, dict) else rows
        text = "".join(json.dumps(row, ensure_ascii=False, default=_jsonable) + "\n"
                       for row in rows)
        path = self.path / name
        size = path.stat().st_size if path.exists() else 0
        try:
            with path.open("a", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            try:
                os.truncate(path, size)
            except OSError:
                pass
            raise write_error(path, exc) from None

    def rows(self, name: str) -> list[dict]:
        return read_jsonl(self.path / name)

    def truncate_after(self, step: int) -> None:
        """Drop rows of steps > `step` (work done after the restored checkpoint)."""
        if not self.writer:
            return
        for name in JSONL_FILES:
            path = self.path / name
            if path.exists():
                keep = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
                atomic_write_text(path, "".join(
                    json.dumps(r, ensure_ascii=False) + "\n" for r in keep))
        text = self.path / TRAJECTORIES_TXT
        if text.exists():
            atomic_write_text(text, cut_trajectory_text(text.read_text(encoding="utf-8"),
                                                        step))

    def write_text(self, name: str, text: str, append: bool = False) -> None:
        if not self.writer:
            return
        if append:
            try:
                with (self.path / name).open("a", encoding="utf-8") as fh:
                    fh.write(text)
            except OSError as exc:
                raise write_error(self.path / name, exc) from None
        else:
            atomic_write_text(self.path / name, text)

    def mark_failed(self, error: str, trace: str) -> None:
        """Record why a grid cell failed (the other cells go on); a re-run retries it."""
        if not self.writer:
            return
        atomic_write_text(self.path / FAILED, error + "\n\n" + trace)

    def mark_complete(self, summary: dict) -> None:
        if not self.writer:
            return
        (self.path / FAILED).unlink(missing_ok=True)
        atomic_write_text(self.path / "summary.json", json.dumps(summary, indent=2, default=_jsonable))
        atomic_write_text(self.path / COMPLETE, "")


def _jsonable(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
