"""run.num_threads: auto gives a cell the cores it does not share (ablate/core/threads.py)."""
import pytest
import torch
from omegaconf import OmegaConf

from ablate.apps.cli import _share_cores
from ablate.core.threads import available_cpus, cell_threads, grid_threads, parse_threads


@pytest.mark.parametrize("kw,want", [
    (dict(cpus=2), 2),                                     # the synchronous default cell
    (dict(cpus=2, async_level=1), 1),                      # the producer takes a core
    (dict(cpus=2, local_ranks=2), 1),                      # two ranks on two cores
    (dict(cpus=16, local_ranks=4), 4),
    (dict(cpus=16, local_ranks=4, async_level=2), 3),
    (dict(cpus=2, in_process_sampler=False), 1),           # beside a vLLM engine
    (dict(cpus=1, async_level=1), 1),                      # never below one
])
def test_auto(kw, want):
    assert cell_threads("auto", **kw) == want


@pytest.mark.parametrize("given,want", [("1", 1), (3, 3), ("0", 0), (" AUTO ", "auto")])
def test_given_values_stay(given, want):
    assert parse_threads(given) == want
    if want != "auto":
        assert cell_threads(given, cpus=64, local_ranks=8, async_level=1) == want


@pytest.mark.parametrize("bad", ["-1", "two", "1.5", ""])
def test_bad_values(bad):
    with pytest.raises(ValueError):
        parse_threads(bad)


def test_grid_shares_the_cores():
    assert grid_threads("auto", cpus=8, parallel_cells=2) == 4
    assert grid_threads("auto", cpus=2, parallel_cells=4) == 1
    assert grid_threads("auto", cpus=8, parallel_cells=1) == "auto"
    assert grid_threads("2", cpus=8, parallel_cells=4) == 2


@pytest.mark.parametrize("n_jobs,want", [(2, str(max(1, available_cpus() // 2))),
                                         (-1, "1"), (None, "auto")])
def test_joblib_grid_cell_gets_its_share(n_jobs, want):
    launcher = {"n_jobs": n_jobs} if n_jobs is not None else {}
    hc = OmegaConf.create({"launcher": launcher})
    cfg = OmegaConf.create({"run": {"num_threads": "auto"}})
    OmegaConf.set_struct(cfg, True)
    _share_cores(cfg, hc)
    assert cfg.run.num_threads == want


def test_cell_sets_torch_threads(tmp_path, caplog):
    from ablate.apps.cli import compose_config
    from ablate.loop.cell import run_cell
    before = torch.get_num_threads()
    try:
        cfg = compose_config(["model=scripted", "trainer.max_steps=0", "eval.num_tasks=2",
                              "run.quiet=true", "run.wandb_mode=disabled",
                              "run.num_threads=auto"])
        with caplog.at_level("INFO", logger="ablate"):
            run_cell(cfg, tmp_path / "cell")
        assert torch.get_num_threads() == available_cpus()
        assert f"torch threads: {available_cpus()}, update the same (run.num_threads=auto)" in caplog.text
    finally:
        torch.set_num_threads(before)


FAULTS = """
import resource, sys, torch
import ablate.loop.cell                                 # the cell's libraries mapped
from ablate.core.memory import reuse_freed_memory

def faults_of_one_allocation(n=16 << 20):               # 64 MiB of float32
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(n)
    t.fill_(1.0)                                        # touch every page
    del t
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

if sys.argv[1] == "keep":
    assert reuse_freed_memory()
print([faults_of_one_allocation() for _ in range(8)])
"""


def reallocations_faulted(mode: str) -> int:
    """How many of 7 reallocations of a freed 64 MiB block faulted its pages in again,
    in a child interpreter like a cell's process (pytest's own heap is laid out
    differently)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()[-1]
    return sum(f > 8_000 for f in eval(out)[1:])


def test_freed_memory_is_reused_without_page_faults():
    """glibc's defaults return a freed 64 MiB block (mmap) and fault it in again on every
    reuse; after reuse_freed_memory() most reuses find it mapped. Not every one: where
    the heap cannot grow in place glibc still maps the block (measured 0-3 of 7)."""
    assert reallocations_faulted("default") == 7
    assert reallocations_faulted("keep") <= 3
