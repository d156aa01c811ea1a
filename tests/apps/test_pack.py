"""hydra/launcher=pack (ablate/apps/pack.py, docs/packs.md): a -m grid's LoRA cells are
grouped by base model, LoRA shape, backends and device, one line per pack; a grid it
cannot pack is one line, exit 2, no directory; each packed cell writes the rows its solo
run writes (today trivially: each runs whole and alone; the test guards the shared-base
version); a failing cell ends FAILED alone, a killed pack's other cells go on and a
re-run finishes it; complete cells are skipped."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ablate.apps import cli
from ablate.apps.argv import compose_config
from ablate.apps.pack import PackedCell, make_packs
from ablate.loop.outputs import COMPLETE, FAILED

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent
# the small cell of tests/loop/test_reliability_resume.py
FAST = ["env.num_inboxes=4", "env.emails_per_inbox=30", "env.train_tasks=20",
        "env.test_tasks=8", "trainer.tasks_per_step=1", "trainer.group_size=2",
        "eval.num_tasks=2", "eval.samples=1", "eval.greedy=false", "eval.every=1",
        "harness.max_tokens_per_episode=96", "env.max_turns=2", "run.num_trajectories=1",
        "run.quiet=true", "run.num_threads=1"]
LORA = ["learner.lora.enable=true", "learner=torch"]
LINE = ("pack 1 of {n}: {k} cells, model=tiny lora r8 alpha 16 "
        "[q_proj,k_proj,v_proj,o_proj] sampler=hf learner=torch device=cpu")


def run_cli(args, cwd, **env):
    path = f"{HERE / 'helpers' / 'fakecell'}:{ROOT}" if env.get("ABLATE_FAKE_CELL") else str(ROOT)
    return subprocess.run([sys.executable, "-m", "ablate", *args], cwd=cwd,
                          env=dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=path, **env),
                          capture_output=True, text=True, timeout=600)


def pack_lines(proc) -> set[str]:
    return {line.split("] ", 1)[-1] for line in (proc.stdout + proc.stderr).splitlines()
            if "] pack " in line}


def test_cells_of_two_lora_ranks_make_two_packs_and_the_size_caps_a_pack():
    cfgs = [compose_config([*LORA, f"learner.lora.rank={r}", f"seed={s}"])
            for r in (8, 16) for s in (0, 1, 2)]
    cells = [PackedCell(i, [], c, Path(f"cell{i}"), f"cell{i}") for i, c in enumerate(cfgs)]
    packs = make_packs(cells, 8, False)
    assert [[c.index for c in p.cells] for p in packs] == [[0, 1, 2], [3, 4, 5]]
    assert [p.line() for p in packs] == [
        LINE.format(n=2, k=3),
        LINE.format(n=2, k=3).replace("pack 1", "pack 2").replace("r8", "r16")
        + "; apart from pack 1: learner.lora.rank 16 (pack 1: 8)"]
    capped = make_packs(cells[:3], 2, True)
    assert [len(p.cells) for p in capped] == [2, 1]
    assert capped[1].line().endswith(" exact; the cells of pack 1 past hydra.launcher.size=2")
    assert capped[0].record()["cells"] == ["cell0", "cell1"]


def test_joint_updates_default_to_cuda_only_and_follow_the_launcher_key():
    from ablate.apps.pack import joint_on
    assert (joint_on(None, "cpu"), joint_on(None, "cuda"), joint_on(None, "cuda:1")) \
        == (False, True, True)
    assert (joint_on(True, "cpu"), joint_on(False, "cuda")) == (True, False)
    cells = [PackedCell(i, [], compose_config([*LORA, f"seed={i}"]), Path(f"c{i}"), f"c{i}")
             for i in range(2)]
    on = make_packs(cells, 8, False, True)[0]
    assert on.line().endswith(" joint updates") and on.record()["joint_updates"] is False
    on.shared_base = True           # run_pack sets it where the backends share the base
    assert on.record()["joint_updates"] is True
    assert make_packs(cells, 8, True, True)[0].record()["joint_updates"] is False   # exact


@pytest.mark.parametrize("extra, named", [
    ([], "learner.lora.enable=false is not allowed with hydra/launcher=pack"),
    (["learner.lora.enable=true", "hydra.launcher.size=0"],
     "hydra.launcher.size=0 is not allowed"),
    (["learner.lora.enable=true", "hydra.launcher.kept_tokens=0"],
     "hydra.launcher.kept_tokens=0 is not allowed"),
    (["learner.lora.enable=true", "run.devices_per_cell=1"],
     "run.devices_per_cell=1 is not allowed with hydra/launcher=pack"),
    (["learner.lora.enable=true"],           # the default learner: ZeRO-3
     "cannot hold this cell's adapters over one shared base: learner=deepspeed does not "
     "declare shared_base"),
    (["learner.lora.enable=true", "learner=torch", "sampler=vllm_server"],
     "sampler=vllm_server does not declare pack_rows: one engine holding every cell's "
     "adapter (a batched pack); sampler=hf or sampler=vllm can"),
    (["learner.lora.enable=true", "learner=torch", "sampler=vllm", "hydra.launcher.exact=true"],
     "sampler=vllm does not declare shared_base: one per cell over the shared base")])
def test_a_grid_the_launcher_cannot_pack_is_one_line_and_no_directory(
        tmp_path, monkeypatch, capsys, extra, named):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["-m", "seed=0,1", "hydra/launcher=pack", *FAST, *extra,
                  f"env.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ablate: error: ") and named in err[0], err
    if not extra:
        assert "add learner.lora.enable=true" in err[0]
    assert not sweep.exists()


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    """The brief's grid, `-m seed=0,1,2 learner.lora.enable=true learner=torch
    hydra/launcher=pack trainer.max_steps=1` (exact), and the same cells solo (the basic
    launcher), each run once for the module; seed 2's solo cell is copied into the pack's
    sweep first, so the pack finds it complete."""
    root = tmp_path_factory.mktemp("pack")
    args = ["-m", "seed=0,1,2", *LORA, "trainer.max_steps=1", *FAST,
            f"env.cache_dir={root / 'cache'}"]
    solo = run_cli([*args, f"hydra.sweep.dir={root / 'solo'}"], root)
    assert solo.returncode == 0, solo.stderr[-3000:]
    done = next(p for p in (root / "solo").iterdir() if seed_of(p) == 2)
    shutil.copytree(done, root / "packed" / done.name)
    packed = run_cli([*args, "hydra/launcher=pack", "hydra.launcher.exact=true",
                      f"hydra.sweep.dir={root / 'packed'}"], root)
    return root, packed


def seed_of(cell: Path) -> int | None:
    if not (cell / ".hydra" / "overrides.yaml").exists():
        return None
    given = dict(o.split("=", 1) for o in
                 yaml.safe_load((cell / ".hydra" / "overrides.yaml").read_text()))
    return int(given["seed"])


def rows(path: Path) -> list[dict]:
    timing = ("_s", "seconds", "tokens_per_s")
    return [{k: v for k, v in json.loads(line).items()
             if not k.endswith(timing) and "/time" not in k and "timestamp" not in k}
            for line in path.read_text().splitlines() if line.strip()]


def test_packed_cells_write_the_files_and_rows_of_their_solo_runs(grids):
    root, packed = grids
    assert packed.returncode == 0, packed.stderr[-3000:]
    assert pack_lines(packed) == {LINE.format(n=1, k=3) + " exact"}
    cells = sorted(p.name for p in (root / "solo").iterdir() if p.is_dir())
    assert len(cells) == 3
    assert sorted(p.name for p in (root / "packed").iterdir() if p.is_dir()) == cells
    ran = [n for n in cells if seed_of(root / "solo" / n) != 2]
    for name in ran:
        alone, inpack = root / "solo" / name, root / "packed" / name
        assert sorted(p.name for p in inpack.iterdir()) == sorted(p.name for p in alone.iterdir())
        assert (inpack / COMPLETE).exists() and (inpack / "code.json").exists()
        assert (inpack / "config.yaml").read_text() == (alone / "config.yaml").read_text()
        for file in ("eval.jsonl", "metrics.jsonl"):
            assert rows(inpack / file) == rows(alone / file) != [], file
        pack = json.loads((inpack / "environment.json").read_text())["pack"]
        assert pack["id"] == 1 and sorted(pack["cells"]) == cells and pack["exact"] is True
        assert pack["size"] == 8 and pack["shared"]["learner.lora.rank"] == 8
        assert pack["shared_base"] is True          # learner=torch, sampler=hf, float32
        assert "pack" not in json.loads((alone / "environment.json").read_text())
    assert not list((root / "packed").glob(".pack-*"))


def test_a_complete_cell_of_a_pack_is_skipped(grids):
    root, packed = grids
    assert packed.returncode == 0, packed.stderr[-3000:]
    (done,) = [p for p in (root / "packed").iterdir() if seed_of(p) == 2]
    assert (packed.stdout + packed.stderr).count("is complete; skipping") == 1
    assert f"cell {done} is complete; skipping" in packed.stdout + packed.stderr
    alone = root / "solo" / done.name
    assert (done / "eval.jsonl").stat().st_mtime_ns == (alone / "eval.jsonl").stat().st_mtime_ns
    assert "pack" not in json.loads((done / "environment.json").read_text())


def test_a_failing_cell_ends_failed_alone_and_the_grid_says_its_packs(tmp_path):
    """tests/helpers/fakecell: seed 1 raises. Each rank's pack runs it first; the other
    cell of each pack finishes."""
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", "learner.lora.rank=8,16", "seed=1,0", *LORA, "hydra/launcher=pack",
                    *FAST, f"env.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}"],
                   tmp_path, ABLATE_FAKE_CELL="1")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert pack_lines(proc) == {
        LINE.format(n=2, k=2),
        LINE.format(n=2, k=2).replace("pack 1", "pack 2").replace("r8", "r16")
        + "; apart from pack 1: learner.lora.rank 16 (pack 1: 8)"}
    assert "ablate: 2 of 4 cells failed, 0 busy" in proc.stderr
    cell = cells_by_rank_and_seed(sweep)
    for rank in (8, 16):
        assert (cell[rank, 0] / COMPLETE).exists()
        assert (cell[rank, 1] / FAILED).read_text().startswith("worker died: out of memory")
        assert not (cell[rank, 1] / COMPLETE).exists()


@pytest.mark.slow
def test_a_killed_pack_fails_its_running_cell_the_rest_go_on_and_a_rerun_resumes(tmp_path):
    """tests/helpers/fakecell with FAKE_KILL=1: seed 2 SIGKILLs its process (the pack's),
    as the OOM killer would. The grid fails that cell, launches again, and the pack's
    other cell runs; a re-run finishes the killed one."""
    sweep = tmp_path / "sweep"
    args = ["-m", "learner.lora.rank=8", "seed=2,0", *LORA, "hydra/launcher=pack", *FAST,
            f"env.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}"]
    first = run_cli(args, tmp_path, ABLATE_FAKE_CELL="1", FAKE_KILL="1")
    assert first.returncode == 1, first.stderr[-3000:]
    assert ("the process of pack 1 (killed by SIGKILL) ended before its cells did"
            in first.stdout + first.stderr)
    assert "ablate: 1 of 2 cells failed, 0 busy" in first.stderr
    cell = cells_by_rank_and_seed(sweep)
    assert (cell[8, 0] / COMPLETE).exists()
    assert "its worker process died" in (cell[8, 2] / FAILED).read_text()
    again = run_cli(args, tmp_path, ABLATE_FAKE_CELL="1")
    assert again.returncode == 0, again.stderr[-3000:]
    assert (cell[8, 2] / COMPLETE).exists()


def cells_by_rank_and_seed(sweep: Path) -> dict[tuple[int, int], Path]:
    """(learner.lora.rank, seed) -> the cell's directory, read from the overrides Hydra
    wrote into it (a long name is cut to a hash: ablate.loop.config.cell_dirname)."""
    out = {}
    for path in sweep.iterdir():
        if path.is_dir():
            given = dict(o.split("=", 1) for o in
                         yaml.safe_load((path / ".hydra" / "overrides.yaml").read_text()))
            out[int(given["learner.lora.rank"]), int(given["seed"])] = path
    return out
