"""Each cell records the code it ran (code.json: git commit, dirty flag, a hash of the
uncommitted changes, ablate's and the key packages' versions; null where there is no git,
never an error), export carries it, and an analysis lists the code per arm and warns,
naming them, when the arms it compares ran on different commits (issue 46, item 6)."""
import json
import shutil
import subprocess

import pytest

from analysis import cli
from analysis.collect import collect
from analysis.export import export
from analysis.summary import analyse
from analysis.synthetic import write_sweep
from ablate.loop.provenance import code_provenance, record_code
from ablate.loop.outputs import CellDir

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="no git")


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t",
                    *args], check=True, capture_output=True)


@needs_git
def test_code_provenance_holds_commit_and_dirty_flag(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-qm", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    clean = code_provenance(tmp_path)
    assert clean["commit"] == head and clean["dirty"] is False
    assert clean["diff_sha256"] is None and clean["ablate"] and "torch" in clean["packages"]
    (tmp_path / "a.py").write_text("x = 2\n")
    edited = code_provenance(tmp_path)
    assert edited["commit"] == head and edited["dirty"] is True
    assert len(edited["diff_sha256"]) == 64
    (tmp_path / "b.py").write_text("y = 1\n")           # an untracked file is a change
    assert code_provenance(tmp_path)["diff_sha256"] != edited["diff_sha256"]


def test_without_git_the_commit_is_null_not_an_error(tmp_path, monkeypatch):
    rec = code_provenance(tmp_path)                     # not a checkout (an installed wheel)
    assert rec["commit"] is None and rec["dirty"] is None and rec["diff_sha256"] is None
    monkeypatch.setenv("PATH", str(tmp_path))           # no git binary at all
    assert code_provenance()["commit"] is None


def test_a_cell_writes_code_json_and_a_resume_on_other_code_is_kept(tmp_path, monkeypatch):
    cell = CellDir(tmp_path, writer=True)
    now = code_provenance()          # fixed: the checkout may be edited while this runs
    monkeypatch.setattr("ablate.loop.provenance.code_provenance", lambda: now)
    first = record_code(cell)
    rec = json.loads((tmp_path / "code.json").read_text())
    assert {"commit", "dirty", "diff_sha256", "ablate", "packages"} <= set(rec)
    assert rec == first and "resumed_with" not in rec
    record_code(cell)                                   # a resume on the same code
    assert json.loads((tmp_path / "code.json").read_text()) == rec
    other = {**first, "commit": "f" * 40, "dirty": False}
    monkeypatch.setattr("ablate.loop.provenance.code_provenance", lambda: other)
    record_code(cell)
    assert json.loads((tmp_path / "code.json").read_text())["resumed_with"] == [other]


def _code(run_dir, commit, dirty=False):
    (run_dir / "code.json").write_text(json.dumps(
        {"commit": commit, "dirty": dirty, "diff_sha256": "ab" * 32 if dirty else None,
         "ablate": "0.1.0", "packages": {"torch": "2.13.0"}}))


def test_arms_at_different_commits_are_named_in_a_warning(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive", "shaped"), algos=("grpo",),
                        seeds=(0, 1), n_questions=10, steps=(0, 4))
    for d in sweep.iterdir():
        _code(d, ("1" if "naive" in d.name else "2") * 40)
    summary = analyse(collect([sweep]), baseline={"reward.name": "shaped"}, B=200)
    warn = [w for w in summary["warnings"] if "different code" in w]
    assert len(warn) == 1
    assert "reward=naive: 1111111111" in warn[0] and "reward=shaped: 2222222222" in warn[0]
    assert [len(r["versions"]) for r in summary["code"]] == [1, 1]
    # exported with the runs; the report lists the versions per arm
    export(sweep, tmp_path / "runs")
    assert all((d / "code.json").exists() for d in (tmp_path / "runs").iterdir())
    out = tmp_path / "report"
    assert cli.main([str(tmp_path / "runs"), "--out", str(out), "--baseline",
                     "reward=shaped", "--B", "200", "--no-figures"]) == 0
    report = (out / "report.md").read_text()
    assert "## Code versions" in report and "| reward=naive | 1111111111 |" in report
    assert "different code" in report


def test_same_commit_no_warning_and_a_mixed_arm_is_named(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive", "shaped"), algos=("grpo",),
                        seeds=(0, 1), n_questions=10, steps=(0, 4))
    for d in sweep.iterdir():
        _code(d, "1" * 40)
    summary = analyse(collect([sweep]), baseline={"reward.name": "shaped"}, B=200)
    assert not [w for w in summary["warnings"] if "code" in w]
    _code(next(d for d in sweep.iterdir() if "naive" in d.name and "seed=1" in d.name),
          "1" * 40, dirty=True)
    summary = analyse(collect([sweep]), baseline={"reward.name": "shaped"}, B=200)
    mixed = [w for w in summary["warnings"] if "2 code versions" in w]
    assert len(mixed) == 1 and mixed[0].startswith("reward=naive")
    assert "1111111111 + uncommitted changes abababab" in mixed[0]


def test_runs_without_code_json_say_so(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", rewards=("naive", "shaped"), algos=("grpo",),
                        seeds=(0, 1), n_questions=10, steps=(0, 4))
    out = tmp_path / "report"
    assert cli.main([str(sweep), "--out", str(out), "--baseline", "reward=shaped",
                     "--B", "200", "--no-figures"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert all(r["versions"] == [] and len(r["not_recorded"]) == 2 for r in summary["code"])
    assert "No run recorded the code it ran" in (out / "report.md").read_text()


def test_run_cell_writes_code_json(tmp_path):
    from ablate.apps.cli import compose_config
    from ablate.loop.cell import run_cell
    cfg = compose_config(["env=coderepair", "model=scripted", "eval.num_tasks=2",
                          "run.quiet=true", "eval.samples=1", "eval.greedy=false",
                          "run.num_threads=1"])
    run_cell(cfg, tmp_path)
    rec = json.loads((tmp_path / "code.json").read_text())
    assert "commit" in rec and "dirty" in rec and rec["ablate"]
    if shutil.which("git") and (code_provenance()["commit"] is not None):
        assert len(rec["commit"]) == 40 and isinstance(rec["dirty"], bool)
