"""Leftovers of killed processes are removed; corrupt output files are named, not
crashed on."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ablate.envs.email import EmailDB, write_jsonl
from ablate.envs.email.data import Email
from ablate.envs.email.db import _OWNER, remove_stale_builds
from ablate.loop.outputs import CellDir, OutputFileError, cut_trajectory_text, read_jsonl


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_build_files_of_dead_builders_are_removed_live_ones_kept(tmp_path):
    dst = tmp_path / "e.sqlite"
    host = _OWNER.rsplit("-", 1)[0]
    dead = [tmp_path / f".e.sqlite.{host}-{dead_pid()}.abc.building",
            tmp_path / f".e.sqlite.{host}-{dead_pid()}.abc.stage"]
    live = tmp_path / f".e.sqlite.{host}-{os.getpid()}.xyz.building"
    other = tmp_path / ".other.sqlite.x-1.q.building"
    for p in (*dead, live, other):
        p.write_bytes(b"x" * 100)
    removed = remove_stale_builds(dst)
    assert sorted(removed) == sorted(dead)
    assert live.exists() and other.exists()
    old = 3 * 24 * 3600                  # another host's file: removed once a day old
    far = tmp_path / ".e.sqlite.otherhost-1.q.building"
    far.write_bytes(b"x")
    st = far.stat()
    os.utime(far, (st.st_atime - old, st.st_mtime - old))
    assert remove_stale_builds(dst) == [far]


def test_build_after_a_killed_build_leaves_only_the_database(tmp_path):
    src = tmp_path / "e.jsonl"
    write_jsonl(src, [Email("<1>", "s", "a@x", ["b@x"], [], [], "2001-01-01 00:00:00", "hi")])
    host = _OWNER.rsplit("-", 1)[0]
    (tmp_path / f".e.sqlite.{host}-{dead_pid()}.k.building").write_bytes(b"half")
    (tmp_path / f".e.sqlite.{host}-{dead_pid()}.k.stage").write_bytes(b"half")
    EmailDB.build(src, tmp_path / "e.sqlite").close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.jsonl", "e.sqlite"]


def test_cell_dir_removes_dead_writers_temp_files(tmp_path):
    (tmp_path / f".metrics.jsonl.tmp{dead_pid()}").write_text("{}")
    live = tmp_path / f".eval.jsonl.tmp{os.getpid()}"
    live.write_text("{}")
    CellDir(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [live.name]


def test_corrupt_output_rows_name_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(OutputFileError, match=r"metrics.jsonl:2: not a JSON row"):
        read_jsonl(path)
    path.write_text('{"step": 1}\n{"step": 2, "x"')          # torn last line: dropped
    assert read_jsonl(path) == [{"step": 1}]


def one_line_error(cell, tmp_path, capsys) -> str:
    """`python -m ablate` (in-process) on a small cell in `cell`: exit 2 and one line."""
    from ablate.apps.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["env.num_inboxes=3", "env.emails_per_inbox=20", "env.train_tasks=6",
              "env.test_tasks=4", f"env.cache_dir={tmp_path / 'cache'}",
              f"hydra.run.dir={cell}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_resume_of_a_corrupt_cell_fails_in_preflight(tmp_path, capsys):
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "eval.jsonl").write_text('{"step": 0}\n[oops\n')
    assert "eval.jsonl:2: not a JSON row" in one_line_error(cell, tmp_path, capsys)


def test_trajectory_text_is_cut_back_to_the_restored_step():
    block = "==================== evaluation at step {} ====================\nepisode\n"
    text = "".join(block.format(s) for s in (0, 1, 2))
    assert cut_trajectory_text(text, 1) == block.format(0) + block.format(1)
    assert cut_trajectory_text(text, -1) == ""
    assert cut_trajectory_text(text, 5) == text


def test_a_cell_run_by_a_live_process_is_refused_and_freed_when_it_dies(tmp_path, capsys,
                                                                        hold_cell):
    """Two writers in one cell (a killed grid's worker still running it, a second
    terminal) would interleave rows; the second stops with one line naming the first."""
    cell = tmp_path / "cell"
    holder = hold_cell(cell)
    err = one_line_error(cell, tmp_path, capsys)
    assert f"being run by process {holder.pid}" in err, err
    assert not (cell / "FAILED").exists() and not (cell / "metrics.jsonl").exists()
    holder.kill()                      # SIGKILL: the kernel releases its flock
    holder.wait()
    c = CellDir(cell)
    c.lock()                           # free again
    assert (cell / ".lock").read_text() == str(os.getpid())
    c.unlock()


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's reaper may be slow in a container)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


WORKER = ("import os, sys, time; from ablate.apps.cli import exit_with_parent; "
          "exit_with_parent(int(sys.argv[1]), 0.1); print('watching', flush=True); "
          "time.sleep(600)")
GRID = ("import os, subprocess, sys, time; w = subprocess.Popen([sys.executable, '-c', "
        "sys.argv[1], str(os.getpid())]); print(w.pid, flush=True); time.sleep(600)")


def test_a_grid_worker_exits_when_the_grid_process_is_killed():
    grid = subprocess.Popen([sys.executable, "-c", GRID, WORKER], stdout=subprocess.PIPE,
                            text=True)
    worker = int(grid.stdout.readline())
    assert grid.stdout.readline().strip() == "watching" and running(worker)
    grid.kill()
    grid.wait()
    deadline = time.time() + 30
    while running(worker) and time.time() < deadline:
        time.sleep(0.1)
    assert not running(worker)
