"""Nothing silently wrong, round 2 (issue 50): repeated evaluation rows refused (or the
first kept, on request), non-finite float settings refused in one line, a key that only
some runs set splits their cell, and a complete cell in a read-only directory skipped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from analysis import cli as analysis_cli
from analysis.collect import collect
from analysis.synthetic import write_sweep
from ablate.apps import cli, preflight

RUN = "reward=naive,algo=grpo,seed=1"


# ------------------------------------------------------------ 1: repeated eval rows
@pytest.fixture
def sweep(tmp_path):
    return write_sweep(tmp_path / "sweep", rewards=("naive", "shaped"), algos=("grpo",),
                       seeds=(0, 1), n_questions=8, steps=(0, 4))


def _repeat_last_step(sweep) -> tuple[Path, int]:
    """Append the final-step rows of one seed once more; the first repeat's line."""
    f = sweep / RUN / "eval.jsonl"
    lines = f.read_text().splitlines(keepends=True)
    last = [x for x in lines if json.loads(x)["step"] == 4]
    f.write_text("".join(lines + last))
    return f, len(lines) + 1


def _analyse(sweep, out, *extra):
    return analysis_cli.main([str(sweep), "--out", str(out), "--B", "100", "--no-figures",
                              "--baseline", "reward=naive", *extra])


def test_repeated_eval_rows_are_refused_naming_file_line_and_key(sweep, tmp_path, capsys):
    f, first_repeat = _repeat_last_step(sweep)
    assert _analyse(sweep, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    first = json.loads(f.read_text().splitlines()[first_repeat - 1])
    assert f"{f}:{first_repeat}: repeats the row of line " in err, err
    assert (f"step=4, task_id={first['task_id']!r}, sample={first['sample']}, "
            "decoding=None" in err), err
    assert "--allow-duplicates keeps the first" in err


def test_allow_duplicates_keeps_the_first_and_says_so(sweep, tmp_path):
    assert _analyse(sweep, tmp_path / "clean") == 0
    clean = json.loads((tmp_path / "clean" / "summary.json").read_text())
    _repeat_last_step(sweep)
    assert _analyse(sweep, tmp_path / "kept", "--allow-duplicates") == 0
    kept = json.loads((tmp_path / "kept" / "summary.json").read_text())
    assert kept["cells"] == clean["cells"] and kept["comparisons"] == clean["comparisons"]
    assert any("16 repeated row(s) left out" in w and RUN in w for w in kept["warnings"])
    assert "repeated row(s) left out" in (tmp_path / "kept" / "report.md").read_text()


def test_a_greedy_row_is_not_a_repeat_of_the_sampled_one(sweep):
    f = sweep / RUN / "eval.jsonl"
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    greedy = [dict(r, decoding="greedy") for r in rows if r["sample"] == 0]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows + greedy))
    run = next(r for c in collect([sweep]).cells for r in c.runs if r.path.name == RUN)
    assert len(run.greedy_rows()) == len(greedy) and run.repeats == 0


# ------------------------------------------------- 2: non-finite float settings
def _one_line_exit_2(capsys, args):
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("override,shown", [
    ("trainer.lr=-inf", "trainer.lr=-inf"),
    ("trainer.lr=nan", "trainer.lr=nan"),
    ("sampler.top_p=nan", "sampler.top_p=nan"),
    ("run.dist_timeout_s=inf", "run.dist_timeout_s=inf"),
    ("learner.betas=[0.9,inf]", "learner.betas[1]=inf"),
])
def test_a_non_finite_float_setting_is_one_line(override, shown, capsys, tmp_path,
                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _one_line_exit_2(capsys, [override])
    assert err == f"ablate: error: {shown}: must be a finite number", err
    assert not (tmp_path / "outputs").exists()


def test_lr_inf_through_the_real_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ablate", "trainer.lr=inf"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env=dict(os.environ, WANDB_MODE="disabled"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "ablate: error: trainer.lr=inf: must be a finite number\n"
    assert not (tmp_path / "outputs").exists()


# --------------------------------------- 6: a key set only in some runs is a factor
def _set(sweep, run, **keys):
    f = sweep / run / ".hydra" / "config.yaml"
    cfg = yaml.safe_load(f.read_text())
    for dotted, value in keys.items():
        group, key = dotted.split("__")
        if value is None:
            cfg[group].pop(key)
        else:
            cfg[group][key] = value
    f.write_text(yaml.safe_dump(cfg, sort_keys=False))


@pytest.fixture
def one_cell(tmp_path):
    return write_sweep(tmp_path / "one", rewards=("naive",), algos=("grpo",),
                       seeds=(0, 1, 2, 3, 4, 5), n_questions=6, steps=(0, 4))


def test_a_key_one_run_adds_splits_its_cell_and_names_that_run(one_cell):
    _set(one_cell, "reward=naive,algo=grpo,seed=5", trainer__warmup_steps=5)
    sw = collect([one_cell])
    assert sw.factors == ["trainer.warmup_steps"]
    assert [(c.label, c.seeds) for c in sw.cells] == [
        ("trainer.warmup_steps=None", (0, 1, 2, 3, 4)), ("trainer.warmup_steps=5", (5,))]
    text = " ".join(sw.warnings)
    assert "lack keys" not in text
    assert ("trainer.warmup_steps is set in 1 run(s) (first: "
            f"{one_cell / 'reward=naive,algo=grpo,seed=5' / '.hydra' / 'config.yaml'}) "
            "and absent from 5: a factor, as a differing value is (absent = None)") in text


def test_a_key_an_older_ablate_did_not_write_still_pools(one_cell):
    _set(one_cell, "reward=naive,algo=grpo,seed=0", trainer__group_size=None)
    sw = collect([one_cell])
    assert sw.factors == [] and [c.seeds for c in sw.cells] == [(0, 1, 2, 3, 4, 5)]
    older = "1 run(s) lack keys the others set to one value (an older ablate wrote them?)"
    assert any(w.startswith(older) and "trainer.group_size" in w for w in sw.warnings)


# ------------------------- 7: a complete cell in a read-only directory is skipped
CELL = ["model=scripted", "trainer.max_steps=0", "eval.num_tasks=2", "eval.samples=1",
        "run.num_threads=1", "run.quiet=true", "run.wandb_mode=disabled"]


def _tree(root: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


def _read_only(root: Path, mode: int) -> None:
    for p in [root, *root.rglob("*")]:
        p.chmod(mode if p.is_dir() else mode & 0o444)


@pytest.fixture
def archived(tmp_path, monkeypatch):
    """A complete cell, chmod'ed read-only; as root (chmod binds no one) the writability
    probe is patched to answer for it as a read-only mount would."""
    cell = tmp_path / "cell"
    proc = subprocess.run([sys.executable, "-m", "ablate", *CELL, f"hydra.run.dir={cell}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env=dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1"))
    assert proc.returncode == 0 and (cell / "COMPLETE").exists(), proc.stderr[-2000:]
    _read_only(cell, 0o555)
    if os.access(cell, os.W_OK):      # root: patch the probe
        real = preflight.writable_dir

        def probe(path):
            inside = Path(path).absolute() == cell or cell in Path(path).absolute().parents
            return (f"cannot create a directory in {cell} (Read-only file system)"
                    if inside else real(path))
        monkeypatch.setattr(preflight, "writable_dir", probe)
        monkeypatch.setattr(cli, "writable_dir", probe, raising=False)
    yield cell
    _read_only(cell, 0o755)


def test_a_complete_read_only_cell_is_skipped_not_refused(archived, capsys, caplog):
    before = _tree(archived)
    caplog.set_level("INFO", logger="ablate")
    cli.main([*CELL, f"hydra.run.dir={archived}"])          # no SystemExit
    assert "not usable" not in capsys.readouterr().err
    assert f"cell {archived} is complete; skipping" in caplog.text
    assert _tree(archived) == before                     # nothing written


def test_a_read_only_cell_still_to_run_is_refused(archived, capsys):
    (archived / "COMPLETE").chmod(0o644)
    os.chmod(archived, 0o755)
    (archived / "COMPLETE").unlink()
    os.chmod(archived, 0o555)
    err = _one_line_exit_2(capsys, [*CELL, f"hydra.run.dir={archived}"])
    assert f"hydra.run.dir='{archived}' is not usable" in err, err
