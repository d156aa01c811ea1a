"""Issue 65 (and issue 64 item 12): one p value per comparison wherever it is quoted, the
MDE the tests' own errors imply beside the planning one, methods text from the options the
analysis used, captions and pdflatex-safe snippets for every published figure, no empty
figure, the binary per-seed endpoint, and `--out` on a file system that refuses writes."""
from __future__ import annotations

import errno
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from analysis import cli
from analysis.synthetic import write_sweep

REPO = Path(__file__).resolve().parents[2]
REPORTS = sorted(p.parent for p in REPO.glob("experiments/*/results/report/summary.json"))


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep65")
    write_sweep(root, seeds=(0, 1, 2), n_questions=12, effects={("shaped", "dapo"): 1.0})
    return root


def test_out_on_a_read_only_file_system_is_one_line_exit_2(small_sweep, tmp_path,
                                                          monkeypatch, capsys):
    real = Path.mkdir

    def refuse(self, *a, **k):
        if str(self).startswith(str(tmp_path)):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *a, **k)
    monkeypatch.setattr(Path, "mkdir", refuse)
    rc = cli.main([str(small_sweep), "--out", str(tmp_path / "ro"), "--B", "100",
                   "--baseline", "reward=naive,algo=dapo", "--no-figures"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "Read-only file system" in err and "--out" in err and str(tmp_path / "ro") in err


def test_out_under_a_file_is_one_line_exit_2(small_sweep, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    rc = cli.main([str(small_sweep), "--out", str(blocker / "report"), "--B", "100",
                   "--baseline", "reward=naive,algo=dapo", "--no-figures"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "writable directory" in err
