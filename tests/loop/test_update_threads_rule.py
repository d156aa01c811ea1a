"""The learner's update is exempt from the one-thread rule (issue 61 fault 10): beside a
vLLM engine `run.num_threads=auto` sets the process to 1 thread, and under optimizer
offload DeepSpeedCPUAdam steps on torch's OpenMP threads; the cell resolves
`learner.update_threads` so that update(), its optimizer step included, runs on the cell's
cores there (ablate/core/threads.py update_threads, ablate/loop/cell.py _set_threads),
while the default cell (HF sampler, its process already on every core) is unchanged."""
from __future__ import annotations

import pytest
import torch
from omegaconf import open_dict

from test_learners import learner, make_batch, weights_dir  # noqa: F401  (fixture)
from test_learner_prefix import make_loss

from ablate.apps.cli import compose_config
from ablate.core.threads import update_threads
from ablate.loop import cell as cell_mod

OFFLOAD = {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}


def test_update_threads_resolution():
    # the engine's rule forced the process to 1: update() gets the cell's share
    assert update_threads(0, process=1, cpus=8, engine_rule=True) == 8
    assert update_threads(0, process=1, cpus=8, local_ranks=2, engine_rule=True) == 4
    # optimizer offload: the host step gets the cores whatever run.num_threads says
    assert update_threads(0, process=1, cpus=6, host_optimizer=True) == 6
    # neither, or the process already has them: 0 (as the process)
    assert update_threads(0, process=1, cpus=8) == 0
    assert update_threads(0, process=8, cpus=8, engine_rule=True) == 0
    assert update_threads(3, process=1, cpus=8, engine_rule=True) == 3   # given: kept


@pytest.fixture
def threads_kept():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _resolved(monkeypatch, *overrides, cpus=3):
    monkeypatch.setattr(cell_mod, "available_cpus", lambda: cpus)
    cfg = compose_config(list(overrides))
    cell_mod._set_threads(cfg)
    return cfg


def test_vllm_cell_updates_on_the_cells_cores(monkeypatch, threads_kept):
    cfg = _resolved(monkeypatch, "sampler=vllm")
    assert torch.get_num_threads() == 1           # the engine's rule, as before
    assert cfg.learner.update_threads == 3        # main: 0, update() on that one thread


def test_offload_steps_on_the_cores_under_a_fixed_thread_count(monkeypatch, threads_kept):
    cfg = _resolved(monkeypatch, "sampler=vllm", "run.num_threads=1",
                    "+learner.ds_overrides.zero_optimization.offload_optimizer.device=cpu")
    assert torch.get_num_threads() == 1 and cfg.learner.update_threads == 3
    cfg = _resolved(monkeypatch, "sampler=vllm", "run.num_threads=1")
    assert cfg.learner.update_threads == 0        # a fixed count without offload: kept


def test_default_cell_threads_unchanged(monkeypatch, threads_kept):
    cfg = _resolved(monkeypatch, cpus=2)
    assert torch.get_num_threads() == 2 and cfg.learner.update_threads == 0


def test_the_optimizer_step_runs_on_the_resolved_threads(monkeypatch, threads_kept,
                                                       weights_dir, tmp_path):  # noqa: F811
    """Beside vLLM the whole update, the optimizer step included, runs on the cell's
    cores, and the process is back on its one thread afterwards."""
    cfg = _resolved(monkeypatch, "sampler=vllm", "learner=torch")
    with open_dict(cfg):
        n = int(cfg.learner.update_threads)
    lrn = learner(weights_dir, tmp_path, "torch", update_threads=n)
    seen, step = [], lrn._step
    lrn._step = lambda: (seen.append(torch.get_num_threads()), step())[1]
    segs, adv = make_batch()
    lrn.update(segs, adv, make_loss("token-mean"))
    assert seen == [3] and torch.get_num_threads() == 1
